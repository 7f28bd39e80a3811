//! Many conversations at once, through a real broker: turns of different
//! conversations overlap, one conversation's turns run in order, interrupts reach only
//! their own conversation, LLM sources and plugins are held to their limits, a flood
//! does not starve others, full queues refuse clearly, policies stay per user, and a
//! broker stopping with turns in flight answers every client.
//!
//! Assertions are about order and counts (the scripted server's peak of requests in
//! flight, which reply came first), never about how long something took.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hearth_broker::cli::AdminConn;
use hearth_proto::v1::chat_event::Event;
use hearth_proto::v1::{ChatRequest, ConfirmResponse};
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::{final_of, repo, wait_gone, Broker, PluginDir};

const LONG: Duration = Duration::from_secs(60);

fn llm(script: Value) -> ScriptedLlm {
    ScriptedLlm::start(Script::from_value(script).unwrap())
}

/// `tests/plugins/concurrency.py` named `name`; `extra` merged into its manifest.
fn probe(name: &str, extra: Value) -> PluginDir {
    let mut manifest = json!({"name": name, "runtime": "python",
        "entry": repo().join("tests/plugins/concurrency.py")});
    for (k, v) in extra.as_object().unwrap() {
        manifest[k] = v.clone();
    }
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

/// Calls `tool` with `args` through the Admin service in a task of its own.
fn call_in_background(
    admin: &AdminConn,
    tool: &str,
    args: &str,
) -> tokio::task::JoinHandle<Result<hearth_proto::v1::CallToolResponse, tonic::Status>> {
    let mut admin = admin.clone();
    let req = admin.with_token(hearth_proto::v1::CallToolRequest {
        name: tool.into(),
        args_json: args.into(),
        ..Default::default()
    });
    tokio::spawn(async move { admin.client().call_tool(req).await.map(|r| r.into_inner()) })
}

/// The order replies arrive in, over all chats of a test.
type Finishes = Arc<Mutex<Vec<String>>>;

/// Starts `Agent.Chat` for `message` as `user` on channel `test` and returns once the
/// broker accepted it (so chats started one after another are queued in that order);
/// the task collects the events and records `label` in `finishes` on the final one.
async fn start_chat(
    admin: &AdminConn,
    user: &str,
    message: &str,
    label: &str,
    finishes: &Finishes,
) -> tokio::task::JoinHandle<Vec<Event>> {
    let mut admin = admin.clone();
    let req = admin.with_token(ChatRequest {
        message: message.into(),
        user_id: user.into(),
        channel: "test".into(),
        ..Default::default()
    });
    let mut stream = admin
        .agent()
        .chat(req)
        .await
        .unwrap_or_else(|s| panic!("chat {label}: {s:?}"))
        .into_inner();
    let (label, finishes) = (label.to_string(), finishes.clone());
    tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(ev) = stream.message().await.unwrap() {
            if matches!(ev.event, Some(Event::Final(_))) {
                finishes.lock().unwrap().push(label.clone());
            }
            events.extend(ev.event);
        }
        events
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_conversations_run_at_once_and_one_conversation_in_order() {
    let llm = llm(json!({"steps": [
        {"match": "slow", "content": "slow answer to {user}", "delay_ms": 1500},
        {"match": "fast", "content": "fast answer to {user}"},
        {"match": "wait", "content": "answer to {user}", "delay_ms": 800}
    ]}));
    let b = Broker::with_llm(vec![], &llm, &[]).await;
    let finishes = Finishes::default();
    // A slow model for ann does not hold up bob.
    let ann = start_chat(&b.admin, "ann", "slow one", "ann", &finishes).await;
    let bob = start_chat(&b.admin, "bob", "fast one", "bob", &finishes).await;
    let (ann, bob) = (ann.await.unwrap(), bob.await.unwrap());
    assert_eq!(*finishes.lock().unwrap(), ["bob", "ann"]);
    assert_eq!(final_of(&bob).text, "fast answer to fast one");
    assert_eq!(final_of(&ann).text, "slow answer to slow one");

    // Ten users at once: all ten requests are at the model together.
    let finishes = Finishes::default();
    let mut chats = Vec::new();
    for i in 0..10 {
        let user = format!("u{i}");
        chats.push(start_chat(&b.admin, &user, &format!("wait {i}"), &user, &finishes).await);
    }
    for (i, c) in chats.into_iter().enumerate() {
        assert_eq!(
            final_of(&c.await.unwrap()).text,
            format!("answer to wait {i}")
        );
    }
    assert_eq!(
        llm.peak_in_flight(),
        10,
        "the ten turns did not run at once"
    );

    // One user's three messages: answered in order, each seeing the ones before.
    let finishes = Finishes::default();
    let mut chats = Vec::new();
    for i in 1..=3 {
        chats.push(
            start_chat(
                &b.admin,
                "cat",
                &format!("wait m{i}"),
                &format!("m{i}"),
                &finishes,
            )
            .await,
        );
    }
    let mut queued = Vec::new();
    for c in chats {
        let events = c.await.unwrap();
        queued.push(events.iter().find_map(|e| match e {
            Event::Queued(q) => Some(q.ahead),
            _ => None,
        }));
    }
    assert_eq!(*finishes.lock().unwrap(), ["m1", "m2", "m3"]);
    // The first started at once; the others were told how many turns were ahead.
    assert_eq!(queued, [None, Some(1), Some(2)]);
    let reqs = llm.requests();
    let third = reqs
        .iter()
        .find(|r| r["messages"].as_array().unwrap().last().unwrap()["content"] == "wait m3")
        .unwrap();
    let seen: Vec<&str> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(seen, ["answer to wait m1", "answer to wait m2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_reaches_only_the_turn_of_its_conversation() {
    let llm = llm(json!({"steps": [
        {"match_system": "Interrupt from ops: STOP", "content": "stopping as asked"},
        {"match": "STOP", "content": "stopped before anything started"},
        {"match": "story", "content": "once upon a time there was a long story that went on and on and on", "chunk_chars": 2, "chunk_delay_ms": 60}
    ]}));
    let b = Broker::with_llm(vec![], &llm, &[]).await;
    let finishes = Finishes::default();
    let ann = start_chat(&b.admin, "ann", "a story please", "ann", &finishes).await;
    let bob = start_chat(&b.admin, "bob", "a story for me", "bob", &finishes).await;
    // Both stream; interrupt ann's conversation only.
    let started = std::time::Instant::now();
    while llm.in_flight() < 2 {
        assert!(started.elapsed() < LONG, "both stories did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let interrupt = |user: &str| {
        let (code, out, err) = b.cli(&[
            "inject",
            "--interrupt",
            "--source",
            "ops",
            "--channel",
            "test",
            "--user",
            user,
            "STOP",
        ]);
        assert_eq!(code, 0, "{err}");
        out
    };
    let out = interrupt("ann");
    assert!(
        out.contains("interrupt delivered to the running turn of user:test/ann"),
        "{out}"
    );
    let (ann, bob) = (ann.await.unwrap(), bob.await.unwrap());
    assert!(ann
        .iter()
        .any(|e| matches!(e, Event::Interrupted(i) if i.text == "STOP" && i.source == "ops")));
    assert_eq!(final_of(&ann).text, "stopping as asked");
    assert!(!bob.iter().any(|e| matches!(e, Event::Interrupted(_))));
    assert!(final_of(&bob).text.starts_with("once upon a time"));

    // No turn of carl's runs: the interrupt goes first into his conversation and runs.
    let out = interrupt("carl");
    assert!(
        out.contains("no turn of user:test/carl was running"),
        "{out}"
    );
    b.wait_log(
        "reply to injected input: stopped before anything started",
        LONG,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_keep_to_max_concurrent_and_spill_to_the_next_after_the_queue_timeout() {
    let first = llm(json!({"default": {"content": "from first", "delay_ms": 600}}));
    let second = llm(json!({"default": {"content": "from second", "delay_ms": 600}}));
    let cfg = format!(
        "[agent]\nsource_queue_timeout_ms = 60000\n\
         [[sources]]\nname = \"first\"\nbase_url = \"{}\"\nmax_concurrent = 2\npriority = 1\n",
        first.base_url()
    );
    let mut b = Broker::spawn_with_files(vec![], &[], &[("hearth.toml", &cfg)]).await;
    let finishes = Finishes::default();
    let mut chats = Vec::new();
    for i in 0..6 {
        chats.push(start_chat(&b.admin, &format!("u{i}"), "hi", "x", &finishes).await);
    }
    // While they run: two in flight, four waiting for a slot.
    let started = std::time::Instant::now();
    loop {
        let (code, out, err) = b.cli(&["llm", "list", "--json"]);
        assert_eq!(code, 0, "{err}");
        let list: Value = serde_json::from_str(&out).unwrap();
        let s = &list[0];
        assert!(s["in_flight"].as_u64().unwrap() <= 2, "{s}");
        if s["in_flight"] == 2 && s["waiting"] == 4 {
            assert_eq!(s["max_concurrent"], 2);
            break;
        }
        assert!(
            started.elapsed() < LONG,
            "never saw 2 in flight and 4 waiting: {s}"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for c in chats {
        assert_eq!(final_of(&c.await.unwrap()).text, "from first");
    }
    assert_eq!(first.peak_in_flight(), 2);
    assert_eq!(first.requests().len(), 6);
    drop(b);

    // With a short queue timeout, a request that finds the first source full goes to
    // the next one instead of waiting.
    let cfg = format!(
        "[agent]\nsource_queue_timeout_ms = 100\n\
         [[sources]]\nname = \"first\"\nbase_url = \"{}\"\nmax_concurrent = 1\npriority = 1\n\
         [[sources]]\nname = \"second\"\nbase_url = \"{}\"\npriority = 2\n",
        first.base_url(),
        second.base_url()
    );
    b = Broker::spawn_with_files(vec![], &[], &[("hearth.toml", &cfg)]).await;
    let a = start_chat(&b.admin, "a", "hi", "a", &finishes).await;
    let c = start_chat(&b.admin, "c", "hi", "c", &finishes).await;
    let mut texts = vec![
        final_of(&a.await.unwrap()).text,
        final_of(&c.await.unwrap()).text,
    ];
    texts.sort();
    assert_eq!(texts, ["from first", "from second"]);
    // A source that is busy is not a failing source: it was not cooled down.
    assert!(!b.log().contains("LLM source first failed"), "{}", b.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_with_max_concurrency_1_never_sees_two_calls_at_once() {
    let llm = llm(json!({"steps": [
        {"match": "work", "after_tool": false, "tool_calls": [
            {"name": "one_work", "arguments": {"ms": 150}}, {"name": "one_work", "arguments": {"ms": 150}}]},
        {"match": "work", "after_tool": true, "content": "done: {tool_results}"}
    ]}));
    let mut b = Broker::with_llm(
        vec![
            probe(
                "one",
                json!({"max_concurrency": 1, "env": {"CONC_HOOK": "20"}}),
            ),
            probe("many", json!({})),
        ],
        &llm,
        &[],
    )
    .await;
    // Three users at once, each turn calling the tool twice and hooking post_action.
    let finishes = Finishes::default();
    let mut chats = Vec::new();
    for i in 0..3 {
        chats.push(start_chat(&b.admin, &format!("u{i}"), "work please", "x", &finishes).await);
    }
    // Admin calls at the same time.
    let calls: Vec<_> = (0..3)
        .map(|_| call_in_background(&b.admin, "one_work", r#"{"ms": 100}"#))
        .collect();
    for c in chats {
        let f = final_of(&c.await.unwrap());
        assert_eq!(f.text.matches("one worked 150 ms").count(), 2, "{f:?}");
    }
    for c in calls {
        assert!(c.await.unwrap().unwrap().success);
    }
    let peak = b.call("one_peak", json!({})).await.unwrap();
    let peak: Value = serde_json::from_str(&peak.data_json).unwrap();
    assert_eq!(peak["peak"], 1, "{peak}");
    // 3 turns × (2 calls + 2 post_action hooks) + 3 admin calls.
    assert_eq!(peak["calls"], 15, "{peak}");

    // Without the cap the same plugin runs calls side by side.
    let calls: Vec<_> = (0..4)
        .map(|_| call_in_background(&b.admin, "many_work", r#"{"ms": 400}"#))
        .collect();
    for c in calls {
        assert!(c.await.unwrap().unwrap().success);
    }
    let peak = b.call("many_peak", json!({})).await.unwrap();
    let peak: Value = serde_json::from_str(&peak.data_json).unwrap();
    assert_eq!(peak["peak"], 4, "{peak}");

    // A call that cannot get a slot within its timeout is not sent, and says why.
    let long = call_in_background(&b.admin, "one_work", r#"{"ms": 1500}"#);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = b
        .call_timeout("one_work", json!({"ms": 1}), 200)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
    assert!(
        err.message()
            .contains("plugin one: tool one_work was not sent")
            && err.message().contains("max_concurrency"),
        "{}",
        err.message()
    );
    assert!(long.await.unwrap().unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_does_not_starve_others_and_full_queues_refuse_without_losing_anything() {
    let llm = llm(json!({"default": {"content": "re: {user}", "delay_ms": 150}}));
    let cfg = "[agent]\nmax_concurrent_turns = 1\nqueue_per_conversation = 40\n";
    let b = Broker::with_llm(vec![], &llm, &[("hearth.toml", cfg)]).await;
    let finishes = Finishes::default();
    let mut flood = Vec::new();
    for i in 0..20 {
        flood.push(
            start_chat(
                &b.admin,
                "flood",
                &format!("f{i}"),
                &format!("f{i}"),
                &finishes,
            )
            .await,
        );
    }
    let quiet = start_chat(&b.admin, "quiet", "q", "quiet", &finishes).await;
    assert_eq!(final_of(&quiet.await.unwrap()).text, "re: q");
    for f in flood {
        final_of(&f.await.unwrap());
    }
    let order = finishes.lock().unwrap().clone();
    let at = order.iter().position(|l| l == "quiet").unwrap();
    // One slot: the flood's running turn finishes, then the quiet user goes next.
    assert!(at <= 1, "quiet answered after {at} flood turns: {order:?}");
    let flood_order: Vec<_> = order.iter().filter(|l| *l != "quiet").cloned().collect();
    let expect: Vec<_> = (0..20).map(|i| format!("f{i}")).collect();
    assert_eq!(
        flood_order, expect,
        "the flood's own messages ran out of order"
    );
    drop(b);

    // A full queue refuses at once with a clear error; every accepted message is
    // answered and kept.
    let cfg = "[agent]\nqueue_per_conversation = 2\n";
    let mut b = Broker::with_llm(vec![], &llm, &[("hearth.toml", cfg)]).await;
    let finishes = Finishes::default();
    let mut accepted = Vec::new();
    for i in 0..3 {
        accepted.push(
            start_chat(
                &b.admin,
                "dora",
                &format!("d{i}"),
                &format!("d{i}"),
                &finishes,
            )
            .await,
        );
    }
    let mut admin = b.admin.clone();
    let req = admin.with_token(ChatRequest {
        message: "one too many".into(),
        user_id: "dora".into(),
        channel: "test".into(),
        ..Default::default()
    });
    let err = admin.agent().chat(req).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(
        err.message()
            .contains("conversation user:test/dora is busy")
            && err.message().contains("queue_per_conversation = 2"),
        "{}",
        err.message()
    );
    let (code, _, stderr) = b.cli(&["inject", "--channel", "test", "--user", "dora", "and more"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("is busy"), "{stderr}");
    // Another conversation is not affected.
    assert_eq!(final_of(&b.chat("hello", "eve").await).text, "re: hello");
    for a in accepted {
        assert!(final_of(&a.await.unwrap()).error.is_empty());
    }
    assert_eq!(*finishes.lock().unwrap(), ["d0", "d1", "d2"]);
    let reqs = llm.requests();
    let d2 = reqs
        .iter()
        .find(|r| r["messages"].as_array().unwrap().last().unwrap()["content"] == "d2")
        .unwrap();
    let users: Vec<_> = d2["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(users, [json!("d0"), json!("d1"), json!("d2")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_and_confirmations_stay_per_user_and_per_turn_under_concurrency() {
    let steps = json!({"steps": [
        {"match": "cool", "after_tool": false, "tool_calls": [{"name": "cool", "arguments": {"what": "sleep:300"}}]},
        {"match": "cool", "after_tool": true, "content": "{tool_results}"},
        {"match": "ask", "after_tool": false, "tool_calls": [{"name": "ask", "arguments": {"what": "{user}"}}]},
        {"match": "ask", "after_tool": true, "content": "{tool_results}"}
    ]});
    let llm = llm(steps);
    let lz = |name: &str, policy: Value| PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": "python",
            "entry": repo().join("tests/plugins/lz_policy.py"),
            "env": {"LZ_NAME": name, "LZ_POLICY": policy.to_string()}}),
    };
    let b = Broker::with_llm(
        vec![
            lz("cool", json!({"cooldown": 3600})),
            lz("ask", json!({"confirm": true})),
        ],
        &llm,
        &[],
    )
    .await;
    // Two users at once: each has a cooldown of their own.
    let finishes = Finishes::default();
    let ann = start_chat(&b.admin, "ann", "cool it", "ann", &finishes).await;
    let bob = start_chat(&b.admin, "bob", "cool it", "bob", &finishes).await;
    for (who, c) in [("ann", ann), ("bob", bob)] {
        let f = final_of(&c.await.unwrap());
        assert!(f.text.contains(&format!("for {who}")), "{who}: {f:?}");
    }
    // The same user in two conversations at once: one call runs, the other is refused.
    let mut one = b.admin.clone();
    let mut two = b.admin.clone();
    let chat = |admin: &mut AdminConn, channel: &str| {
        admin.with_token(ChatRequest {
            message: "cool again".into(),
            user_id: "cat".into(),
            channel: channel.into(),
            ..Default::default()
        })
    };
    let (r1, r2) = (chat(&mut one, "a"), chat(&mut two, "b"));
    let (s1, s2) = tokio::join!(one.agent().chat(r1), two.agent().chat(r2));
    let mut texts = Vec::new();
    for s in [s1, s2] {
        let mut s = s.unwrap().into_inner();
        let mut last = None;
        while let Some(ev) = s.message().await.unwrap() {
            last = ev.event;
        }
        match last {
            Some(Event::Final(f)) => texts.push(f.text),
            other => panic!("{other:?}"),
        }
    }
    texts.sort();
    assert!(
        texts[0].starts_with("Error: cooldown: tool cool may be called again by user `cat` in"),
        "{texts:?}"
    );
    assert!(texts[1].contains("for cat"), "{texts:?}");

    // Two users asked to confirm at once: each stream carries only its own question;
    // ann approves, bob declines.
    let run = |user: &'static str, approve: bool| {
        let mut admin = b.admin.clone();
        tokio::spawn(async move {
            let req = admin.with_token(ChatRequest {
                message: "ask me".into(),
                user_id: user.into(),
                channel: "test".into(),
                ..Default::default()
            });
            let mut s = admin.agent().chat(req).await.unwrap().into_inner();
            let mut questions = Vec::new();
            let mut events = Vec::new();
            while let Some(ev) = s.message().await.unwrap() {
                if let Some(Event::ConfirmRequest(c)) = &ev.event {
                    questions.push(c.args_json.clone());
                    let answer = admin.with_token(ConfirmResponse {
                        confirm_id: c.confirm_id.clone(),
                        approved: approve,
                    });
                    admin.agent().confirm(answer).await.unwrap();
                }
                events.extend(ev.event);
            }
            (questions, final_of(&events))
        })
    };
    let (ann, bob) = (run("ann", true), run("bob", false));
    let (ann, bob) = (ann.await.unwrap(), bob.await.unwrap());
    assert_eq!((ann.0.len(), bob.0.len()), (1, 1));
    assert!(
        ann.1.text.contains("ask ran") && ann.1.text.contains("for ann"),
        "{:?}",
        ann.1
    );
    assert!(bob.1.text.contains("the user declined it"), "{:?}", bob.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_with_turns_in_flight_answers_every_client_and_leaves_no_process() {
    let llm = llm(json!({"default": {"content": "too late", "delay_ms": 20000}}));
    let cfg = "[agent]\nmax_concurrent_turns = 2\n";
    let mut b = Broker::spawn_with_files(
        vec![probe("p", json!({}))],
        &["--llm-url", &llm.base_url(), "--drain-timeout-ms", "500"],
        &[("hearth.toml", cfg)],
    )
    .await;
    let plugin_pid = b.wait_ready("p").await.pid;
    let finishes = Finishes::default();
    let mut chats = Vec::new();
    // Two run, two wait for a slot, one waits behind its own conversation.
    for i in 0..4 {
        chats.push(start_chat(&b.admin, &format!("u{i}"), "hi", "x", &finishes).await);
    }
    chats.push(start_chat(&b.admin, "u0", "again", "x", &finishes).await);
    let started = std::time::Instant::now();
    while llm.in_flight() < 2 {
        assert!(started.elapsed() < LONG);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let broker_pid = b.pid();
    b.stop_with(libc::SIGTERM);
    let mut errors = Vec::new();
    for c in chats {
        let f = final_of(&c.await.unwrap());
        assert!(f.text.is_empty() || f.text.starts_with("Error"), "{f:?}");
        errors.push(f.error);
    }
    errors.sort();
    let cancelled = errors
        .iter()
        .filter(|e| e.contains("this turn was cancelled"))
        .count();
    let unprocessed = errors
        .iter()
        .filter(|e| e.contains("this message was not processed"))
        .count();
    assert_eq!((cancelled, unprocessed), (2, 3), "{errors:?}");
    assert!(wait_gone(&[broker_pid, plugin_pid], Duration::from_secs(10)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_past_its_timeout_is_cancelled_and_its_conversation_goes_on() {
    let llm = llm(json!({"steps": [
        {"match": "slow", "content": "never", "delay_ms": 30000},
        {"match": "quick", "content": "quick answer"}
    ]}));
    let cfg = "[agent]\nturn_timeout_s = 0.5\n";
    let b = Broker::with_llm(vec![], &llm, &[("hearth.toml", cfg)]).await;
    let finishes = Finishes::default();
    let slow = start_chat(&b.admin, "ann", "slow please", "slow", &finishes).await;
    let quick = start_chat(&b.admin, "ann", "quick please", "quick", &finishes).await;
    let f = final_of(&slow.await.unwrap());
    assert!(
        f.error.contains("longer than [agent] turn_timeout_s = 0.5"),
        "{f:?}"
    );
    assert_eq!(final_of(&quick.await.unwrap()).text, "quick answer");
    // A group's conversation is shared by its members, and `hearth inject --group`
    // reaches it.
    let (code, out, err) = b.cli(&[
        "inject",
        "--channel",
        "test",
        "--group",
        "g1",
        "--source",
        "bot",
        "quick note",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queued in group:test/g1"), "{out}");
    b.wait_log("reply to injected input: quick answer", LONG)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_inject_into_a_conversation_and_hooks_can_skip_the_history() {
    let llm = llm(json!({"default": {"content": "seen {user}"}}));
    let hooks = PluginDir {
        dir: "hk".into(),
        manifest: json!({"name": "hk", "runtime": "python",
            "entry": repo().join("tests/plugins/hooks.py"), "env": {"HOOKS": "blind"}}),
    };
    let mut b = Broker::with_llm(vec![hooks], &llm, &[]).await;
    // A pre_action hook that declared it does not read the history gets none, and what
    // it writes there is ignored.
    let f = final_of(&b.chat("hello", "ann").await);
    assert_eq!(f.text, "seen hello");
    b.wait_log("BLIND hk saw=0", LONG).await;
    let sent = llm.requests()[0].to_string();
    assert!(!sent.contains("blind write"), "{sent}");
    assert!(
        !b.log().contains("writes outside the permission matrix"),
        "{}",
        b.log()
    );

    // The Input host service carries the conversation: the group's next turn sees
    // the injected message in its history.
    let r = b
        .call(
            "hk_inject",
            json!({"text": "note for the group", "group": "g7", "priority": "message"}),
        )
        .await
        .unwrap();
    assert!(r.success, "{r:?}");
    b.wait_log("reply to injected input: seen note for the group", LONG)
        .await;
    let mut admin = b.admin.clone();
    let req = admin.with_token(ChatRequest {
        message: "and now?".into(),
        user_id: "bob".into(),
        group_id: "g7".into(),
        channel: "test".into(),
        ..Default::default()
    });
    let mut s = admin.agent().chat(req).await.unwrap().into_inner();
    while s.message().await.unwrap().is_some() {}
    let last = llm.requests().last().cloned().unwrap();
    let users: Vec<_> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(users, [json!("note for the group"), json!("and now?")]);
    // A bad priority is refused by the SDK, naming it.
    let r = b
        .call("hk_inject", json!({"text": "x", "priority": "urgent"}))
        .await
        .unwrap();
    assert!(
        !r.success && r.error.contains("unknown priority 'urgent'"),
        "{r:?}"
    );
}
