//! The agent end to end: `Agent.Chat` through the pipeline, stage hooks in plugins of
//! all four SDK languages, the LLM tool-calling loop against a scripted OpenAI-compatible
//! server on loopback (real HTTP, SSE and the Lua `openai` adapter), interrupts,
//! adapter overrides.

use std::time::Duration;

use hearth_proto::v1::chat_event::Event;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::{example, final_of, go_binary, repo, rust_binary, stress, Broker, PluginDir};

const LONG: Duration = Duration::from_secs(30);

fn llm(script: Value) -> ScriptedLlm {
    ScriptedLlm::start(Script::from_value(script).unwrap())
}

/// The hooks test plugin (tests/plugins/hooks.*) in `lang`, named `name`.
fn hooks(lang: &str, name: &str, directives: &str) -> PluginDir {
    let mut manifest = match lang {
        "py" => json!({"runtime": "python", "entry": repo().join("tests/plugins/hooks.py")}),
        "nd" => json!({"runtime": "node", "entry": repo().join("tests/plugins/hooks.js")}),
        "go" => json!({"runtime": "exec", "entry": go_binary("hooks")}),
        _ => json!({"runtime": "exec", "entry": rust_binary("examples/hooks")}),
    };
    manifest["name"] = json!(name);
    manifest["env"] = json!({"HOOKS": directives});
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_calls_python_and_node_tools_and_streams_the_answer() {
    let script = Script::load(&repo().join("examples/llm-script.json")).unwrap();
    let llm = ScriptedLlm::start(script);
    let mut b = Broker::with_llm(vec![example("calculator"), example("weather")], &llm, &[]).await;
    let events = b
        .chat("what is (2+3)*4 and what's the weather in Paris?", "ann")
        .await;
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStarted(t) => Some(t.tool.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["calculator", "weather"]);
    let first_finish = events
        .iter()
        .position(|e| matches!(e, Event::ToolCallFinished(_)))
        .unwrap();
    let last_start = events
        .iter()
        .rposition(|e| matches!(e, Event::ToolCallStarted(_)))
        .unwrap();
    assert!(
        last_start < first_finish,
        "the two calls of one turn did not run concurrently"
    );
    for e in &events {
        if let Event::ToolCallFinished(t) = e {
            assert!(t.success, "{t:?}");
        }
    }
    let deltas = events
        .iter()
        .filter(|e| matches!(e, Event::TextDelta(_)))
        .count();
    assert!(deltas > 5, "the answer was not streamed ({deltas} deltas)");
    let f = final_of(&events);
    assert!(f.error.is_empty(), "{f:?}");
    assert!(
        f.text.contains("(2+3)*4 = 20") && f.text.contains("Paris"),
        "{}",
        f.text
    );
    assert_eq!(f.iterations, 2);
    assert!(
        f.token_usage.get("total").copied().unwrap_or(0) > 0,
        "{f:?}"
    );
    // The LLM saw both tool results in its second request, and the tools offered.
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let tools: Vec<_> = reqs[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].clone())
        .collect();
    assert!(
        tools.contains(&json!("calculator")) && tools.contains(&json!("weather")),
        "{tools:?}"
    );
    let tool_msgs = reqs[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    assert_eq!(tool_msgs, 2);
    // The CLI prints the exchange; history is kept for the next turn.
    let (code, out, err) = b.cli(&[
        "chat",
        "--user",
        "ann",
        "--channel",
        "test",
        "what is (2+3)*4 and the weather in Paris?",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("⚙ calculator") && out.contains("20"), "{out}");
    let last = llm.requests().last().cloned().unwrap();
    let users = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 2, "history of the first turn missing");
    // TextMemory got the turns.
    let lines = b.text_memory().lines().count();
    assert!(lines >= 4, "{lines} TextMemory lines");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_one_and_many_rounds_schema_violations_crashes_and_max_iterations() {
    let llm = llm(json!({"steps": [
        {"match": "plain", "content": "just text"},
        {"match": "one", "after_tool": false, "tool_calls": [{"name": "rsx_echo", "arguments": {"a": 1}}]},
        {"match": "bad", "after_tool": false, "tool_calls": [{"name": "rsx_sleep", "arguments": {"ms": "soon"}}]},
        {"match": "crash", "after_tool": false, "tool_calls": [{"name": "pyc_sleep", "arguments": {"ms": 400}}, {"name": "rsx_echo", "arguments": {}}]},
        {"match": "forever", "tool_calls": [{"name": "rsx_echo", "arguments": {}}]},
        {"after_tool": true, "content": "results: {tool_results}"}
    ]}));
    let cfg = "[agent]\nmax_iterations = 3\n";
    let mut b = Broker::with_llm(
        vec![
            stress("rs", "rsx", "", json!({})),
            stress("py", "pyc", "crash_mid_call", json!({})),
        ],
        &llm,
        &[("hearth.toml", cfg)],
    )
    .await;
    let f = final_of(&b.chat("plain please", "u").await);
    assert_eq!((f.text.as_str(), f.iterations), ("just text", 1));
    let f = final_of(&b.chat("one call", "u").await);
    assert_eq!(f.iterations, 2);
    assert!(
        f.text.contains(r#"{"a":1}"#) || f.text.contains(r#""a": 1"#),
        "{}",
        f.text
    );
    // A schema violation goes back to the LLM as that call's error, naming the argument.
    let f = final_of(&b.chat("bad args", "u").await);
    assert!(f.text.contains("argument `ms`"), "{}", f.text);
    // A plugin crashing mid-loop: that call's error, the other call fine, the loop goes on.
    let events = b.chat("crash now", "u").await;
    let f = final_of(&events);
    assert!(
        f.text.contains("exit status 1") && f.text.contains("pyc"),
        "{}",
        f.text
    );
    let ok_calls = events
        .iter()
        .filter(|e| matches!(e, Event::ToolCallFinished(t) if t.success))
        .count();
    assert_eq!(ok_calls, 1);
    // max_iterations ends the loop with a clear message.
    let f = final_of(&b.chat("forever and ever", "u").await);
    assert_eq!(f.iterations, 3);
    assert!(f.text.contains("max_iterations = 3"), "{}", f.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_hooks_from_four_languages_run_in_order_in_one_message() {
    let llm = llm(json!({"steps": [
        {"after_tool": false, "tool_calls": [{"name": "a_py_ping", "arguments": {}}, {"name": "b_nd_ping", "arguments": {}}, {"name": "c_rs_ping", "arguments": {}}, {"name": "cg_go_ping", "arguments": {}}]},
        {"after_tool": true, "content": "done: {tool_results}"}
    ]}));
    let mut b = Broker::with_llm(
        vec![
            hooks("py", "a_py", "trace,own"),
            hooks("nd", "b_nd", "trace,deny=c_rs_ping"),
            hooks("rs", "c_rs", "trace"),
            hooks("go", "cg_go", "trace,own"),
            hooks("py", "d_py", "trace"),
        ],
        &llm,
        &[],
    )
    .await;
    let events = b.chat("hello", "u").await;
    let f = final_of(&events);
    // Deny of one call among three: the LLM is told who denied it; the others ran.
    assert!(
        f.text.contains("pong from a_py")
            && f.text.contains("pong from b_nd")
            && f.text.contains("pong from cg_go"),
        "{}",
        f.text
    );
    assert!(
        f.text.contains("denied by b_nd: not allowed by b_nd"),
        "{}",
        f.text
    );
    let denied: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallFinished(t) if !t.denied_by.is_empty() => {
                Some((t.tool.clone(), t.denied_by.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(denied, [("c_rs_ping".to_string(), "b_nd".to_string())]);
    // Stage order, and within a stage plugin load order, each seeing the previous writes.
    let log = b.wait_log("TRACE d_py after_output", LONG).await;
    let line = log
        .lines()
        .rfind(|l| l.contains("TRACE d_py after_output"))
        .unwrap();
    let trace: Vec<String> = serde_json::from_str(
        line.split("trace=")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap(),
    )
    .unwrap();
    let mut expect = Vec::new();
    for stage in [
        "on_input",
        "pre_action",
        "post_action",
        "post_action",
        "before_output",
    ] {
        for p in ["a_py", "b_nd", "c_rs", "cg_go", "d_py"] {
            expect.push(format!("{p}:{stage}"));
        }
    }
    // post_action runs once per LLM round (two rounds).
    assert_eq!(trace, expect);
    // Own-tools scope: a_py's own hook saw only its own tool.
    assert!(log.contains("OWN a_py a_py_ping"), "{log}");
    assert!(!log.contains("OWN a_py b_nd_ping") && !log.contains("OWN a_py c_rs_ping"));
    assert!(log.contains("OWN cg_go cg_go_ping"), "{log}");
    assert!(!log.contains("OWN cg_go a_py_ping") && !log.contains("OWN cg_go c_rs_ping"));
    for p in ["a_py", "b_nd", "c_rs", "cg_go", "d_py"] {
        assert!(
            log.contains(&format!("TRACE {p} after_output final=done")),
            "{p}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_a_user_in_on_input_and_add_the_time_in_pre_action() {
    let llm = llm(json!({"default": {"content": "hi there"}}));
    let mut b = Broker::with_llm(
        vec![hooks("py", "guard", "block=mallory,time,rewrite_output")],
        &llm,
        &[],
    )
    .await;
    let events = b.chat("let me in", "mallory").await;
    let f = final_of(&events);
    assert_eq!(f.text, "blocked by guard");
    assert!(events.iter().any(
        |e| matches!(e, Event::ShortCircuit(s) if s.stage == "on_input" && s.plugin == "guard")
    ));
    assert!(llm.requests().is_empty(), "a blocked user reached the LLM");
    let f = final_of(&b.chat("hello", "alice").await);
    assert_eq!(f.text, "hi there (checked by guard)");
    let req = &llm.requests()[0];
    let has_time = req["messages"].as_array().unwrap().iter().any(|m| {
        m["role"] == "system"
            && m["content"]
                .as_str()
                .unwrap_or("")
                .starts_with("Current time: ")
    });
    assert!(has_time, "{req}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_short_circuits_from_every_stage_and_hook_faults_are_skipped() {
    let llm = llm(json!({"steps": [
        {"after_tool": false, "tool_calls": [{"name": "h_ping", "arguments": {}}]},
        {"after_tool": true, "content": "after tools"}
    ]}));
    for stage in [
        "on_input",
        "pre_action",
        "post_action",
        "after_toolcall",
        "before_output",
    ] {
        let mut b = Broker::with_llm(
            vec![hooks("py", "h", &format!("respond={stage}"))],
            &llm,
            &[],
        )
        .await;
        let events = b.chat("go", "u").await;
        let f = final_of(&events);
        assert_eq!(f.text, format!("short from {stage}"), "{stage}");
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::ShortCircuit(s) if s.stage == stage)),
            "{stage}"
        );
    }
    // before_toolcall: a response denies only that call; the loop goes on.
    let mut b =
        Broker::with_llm(vec![hooks("py", "h", "respond=before_toolcall")], &llm, &[]).await;
    let f = final_of(&b.chat("go", "u").await);
    assert_eq!(f.text, "after tools");
    // A hook that fails or times out is logged and skipped; the turn completes.
    let cfg = "[agent]\nhook_timeout_ms = 300\n";
    let mut b = Broker::with_llm(
        vec![hooks(
            "py",
            "h",
            "fail=pre_action,slow=post_action,write_all=on_input",
        )],
        &llm,
        &[("hearth.toml", cfg)],
    )
    .await;
    let f = final_of(&b.chat("go", "u").await);
    assert_eq!(f.text, "after tools");
    let log = b.log();
    assert!(log.contains("h fails at pre_action on purpose"), "{log}");
    assert!(
        log.contains("plugin h: stage post_action hook post_action#1 timed out after 300 ms"),
        "{log}"
    );
    assert!(!log.contains("tool stage"), "a hook is not a tool: {log}");
    // write_all at on_input: only raw_message, response (none set) and extra survive.
    assert!(
        log.contains("writes outside the permission matrix dropped"),
        "{log}"
    );
    let req = llm.requests().last().cloned().unwrap();
    let user = req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()
        .clone();
    assert_eq!(
        user["content"], "changed",
        "raw_message rewrite at on_input was not kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_cancels_a_streaming_reply_and_joins_the_turn() {
    let llm = llm(json!({"steps": [
        {"match_system": "Interrupt from cli: STOP", "content": "stopping as asked"},
        {"match": "story", "content": "once upon a time there was a very long story that goes on and on", "chunk_chars": 2, "chunk_delay_ms": 100}
    ]}));
    let b = Broker::with_llm(vec![], &llm, &[]).await;
    let mut admin = Broker::admin_clone(&b);
    let chat = tokio::spawn(async move {
        let req = admin.with_token(hearth_proto::v1::ChatRequest {
            message: "tell me a story".into(),
            user_id: "u".into(),
            ..Default::default()
        });
        let mut stream = admin.agent().chat(req).await.unwrap().into_inner();
        let mut events = Vec::new();
        while let Some(ev) = stream.message().await.unwrap() {
            events.extend(ev.event);
        }
        events
    });
    // Wait until the reply streams, then interrupt.
    let started = std::time::Instant::now();
    while llm.requests().is_empty() {
        assert!(started.elapsed() < LONG);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, out, err) = b.cli(&["inject", "--interrupt", "--user", "u", "STOP"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("interrupt delivered"), "{out}");
    let events = chat.await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Interrupted(i) if i.text == "STOP")),
        "{events:?}"
    );
    assert_eq!(final_of(&events).text, "stopping as asked");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    // Injected plain input queues as its own turn.
    let (code, out, _) = b.cli(&[
        "inject",
        "--source",
        "cron",
        "--channel",
        "timer",
        "story time",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("queued"), "{out}");
    b.wait_log("reply to injected input", LONG).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_adapter_overrides_the_builtin_and_a_broken_one_is_a_clear_error() {
    let llm = llm(json!({"default": {"content": "from the API"}}));
    let builtin = std::fs::read_to_string(repo().join("adapters/openai.lua")).unwrap();
    // The override wraps the built-in's response transform.
    let custom = builtin.replacen("return adapter", "local inner = adapter.transform_response\nadapter.transform_response = function(raw)\n  local out = json.decode(inner(raw))\n  out.content = 'override: ' .. out.content\n  return json.encode(out)\nend\nreturn adapter", 1);
    assert_ne!(
        custom, builtin,
        "adapters/openai.lua has no `return adapter`"
    );
    let cfg = "[agent]\nstream = false\n";
    let mut b = Broker::with_llm(
        vec![],
        &llm,
        &[("adapters/openai.lua", &custom), ("hearth.toml", cfg)],
    )
    .await;
    let f = final_of(&b.chat("hi", "u").await);
    assert_eq!(f.text, "override: from the API");
    drop(b);
    let mut b = Broker::with_llm(
        vec![stress("rs", "rsx", "", json!({}))],
        &llm,
        &[("adapters/openai.lua", "local adapter = {\nreturn adapter\n")],
    )
    .await;
    let f = final_of(&b.chat("hi", "u").await);
    assert!(
        f.error.contains("openai.lua") && f.error.contains(":2:"),
        "{f:?}"
    );
    // The broker and other plugins keep serving.
    assert!(b.call("rsx_echo", json!({})).await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_across_three_sources_auth_failure_500_and_success() {
    let auth = llm(
        json!({"default": {"status": 401, "error_body": {"error": {"message": "bad key", "type": "invalid_request_error"}}}}),
    );
    let broken = llm(
        json!({"default": {"status": 500, "error_body": {"error": {"message": "upstream down"}}}}),
    );
    let good = llm(json!({"default": {"content": "from the third source"}}));
    let cfg = format!(
        "[[sources]]\nname = \"auth\"\nbase_url = \"{}\"\npriority = 1\n\
         [[sources]]\nname = \"broken\"\nbase_url = \"{}\"\npriority = 2\n\
         [[sources]]\nname = \"good\"\nbase_url = \"{}\"\npriority = 3\n",
        auth.base_url(),
        broken.base_url(),
        good.base_url()
    );
    let mut b = Broker::spawn_with_files(vec![], &[], &[("hearth.toml", &cfg)]).await;
    let f = final_of(&b.chat("hi", "u").await);
    assert_eq!(f.text, "from the third source", "{f:?}");
    assert_eq!(
        (
            auth.requests().len(),
            broken.requests().len(),
            good.requests().len()
        ),
        (1, 1, 1)
    );
    let log = b.log();
    assert!(
        log.contains("LLM source auth taken out (authentication failed)")
            && log.contains("bad key"),
        "{log}"
    );
    assert!(
        log.contains("LLM source broken failed") && log.contains("cooling down"),
        "{log}"
    );
    // The next turn skips the source taken out and the one cooling down.
    let f = final_of(&b.chat("again", "u").await);
    assert_eq!(f.text, "from the third source");
    assert_eq!((auth.requests().len(), broken.requests().len()), (1, 1));
    let (code, out, err) = b.cli(&["llm", "list"]);
    assert_eq!(code, 0, "{err}");
    let state = |name: &str| {
        out.lines()
            .find(|l| l.contains(name))
            .map(|l| l.to_string())
            .unwrap_or_default()
    };
    assert!(
        state("auth").contains("out")
            && state("broken").contains("cooldown")
            && state("good").contains("ok"),
        "{out}"
    );
    // `hearth llm use` puts a source first and brings it back.
    let (code, out, _) = b.cli(&["llm", "use", "auth"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with('*') && l.contains("auth")),
        "{out}"
    );
    let (code, _, err) = b.cli(&["llm", "use", "nope"]);
    assert_eq!(code, 3, "not found");
    assert!(err.contains("unknown LLM source `nope`"), "{err}");
}
