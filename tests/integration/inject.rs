//! LinkZone semantics end to end: `ai.tool` policies enforced by the broker (max_calls,
//! cooldown, confirm, timeout, chainable, continue), triggers of every type, and the
//! `ai.inject` round trip (user-typed commands and commands the LLM writes) with the
//! seed's translate and hybrid weather plugins in Python, Node and Go. The policy and
//! trigger tests run once with the Python and Node policy plugins and once with the Go
//! one (`tests/plugins/go/cmd/lz_policy`).

use std::time::Duration;

use hearth_proto::v1::chat_event::Event;
use hearth_proto::v1::{ChatRequest, ConfirmResponse};
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::{example, final_of, go_binary, repo, Broker, PluginDir};

fn replies(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::PluginReply(r) => Some((r.plugin.clone(), r.text.clone())),
            _ => None,
        })
        .collect()
}

/// (tool, success, content or error) of every finished tool call.
pub(crate) fn finished(events: &[Event]) -> Vec<(String, bool, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallFinished(t) => Some((
                t.tool.clone(),
                t.success,
                if t.success {
                    t.content.clone()
                } else {
                    t.error.clone()
                },
            )),
            _ => None,
        })
        .collect()
}

/// The LinkZone policy plugin in `lang` (`py`: `tests/plugins/lz_policy.py`, `nd`:
/// `lz_policy.js`, `go`: the binary of `tests/plugins/go/cmd/lz_policy`) named `name`
/// with `ai.tool` policy `policy` and LinkZone `triggers`.
pub(crate) fn lz(lang: &str, name: &str, policy: Value, triggers: Value) -> PluginDir {
    let (runtime, entry) = match lang {
        "py" => ("python", repo().join("tests/plugins/lz_policy.py")),
        "nd" => ("node", repo().join("tests/plugins/lz_policy.js")),
        "go" => ("exec", go_binary("lz_policy")),
        other => panic!("unknown language {other}"),
    };
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": runtime, "entry": entry,
            "env": {"LZ_NAME": name, "LZ_POLICY": policy.to_string(),
                    "LZ_TRIGGERS": triggers.to_string()}}),
    }
}

/// A test plugin `entry` (relative to the repo, or absolute) with `WEATHER_TODAY` set.
fn test_plugin(name: &str, runtime: &str, entry: impl AsRef<std::path::Path>) -> PluginDir {
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": runtime, "entry": repo().join(entry),
            "env": {"WEATHER_TODAY": "2026-07-01"}}),
    }
}

/// One chat turn answering every ConfirmRequest with `approve` (None: never answer).
async fn chat_confirming(
    b: &mut Broker,
    message: &str,
    user: &str,
    approve: Option<bool>,
) -> Vec<Event> {
    let req = b.admin.with_token(ChatRequest {
        message: message.into(),
        user_id: user.into(),
        channel: "test".into(),
        ..Default::default()
    });
    let mut stream = b.admin.agent().chat(req).await.unwrap().into_inner();
    let mut events = Vec::new();
    while let Some(ev) = stream.message().await.unwrap() {
        if let (Some(Event::ConfirmRequest(c)), Some(approved)) = (&ev.event, approve) {
            assert_eq!(c.tool, "ask");
            assert!(c.timeout_ms > 0);
            let answer = b.admin.with_token(ConfirmResponse {
                confirm_id: c.confirm_id.clone(),
                approved,
            });
            b.admin.agent().confirm(answer).await.unwrap();
            // A second answer to the same question is refused.
            let again = b.admin.with_token(ConfirmResponse {
                confirm_id: c.confirm_id.clone(),
                approved,
            });
            let err = b.admin.agent().confirm(again).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        }
        events.extend(ev.event);
    }
    events
}

fn call_step(matches: &str, calls: Value) -> Value {
    json!({"match": matches, "after_tool": false, "tool_calls": calls})
}

fn answer_step(matches: &str, content: &str) -> Value {
    json!({"match": matches, "after_tool": true, "content": content})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_tool_policies_are_enforced_by_the_broker() {
    ai_tool_policies(["py", "nd", "py", "nd", "py", "py"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_tool_policies_are_enforced_by_the_broker_for_go_plugins() {
    ai_tool_policies(["go"; 6]).await;
}

/// The `ai.tool` policy checks, with the policy plugins `limited`, `cool`, `ask`,
/// `final`, `cont` and `slow` in the languages `langs` (in that order).
async fn ai_tool_policies(langs: [&str; 6]) {
    let steps = vec![
        call_step(
            "limit",
            json!([{"name": "limited", "arguments": {"what": "a"}},
                   {"name": "limited", "arguments": {"what": "b"}}]),
        ),
        answer_step("limit", "{tool_results}"),
        call_step("cool", json!([{"name": "cool"}])),
        answer_step("cool", "{tool_results}"),
        call_step(
            "ask",
            json!([{"name": "ask", "arguments": {"what": "rm -rf"}}]),
        ),
        answer_step("ask", "{tool_results}"),
        call_step("final", json!([{"name": "final"}])),
        answer_step(
            "final",
            "the LLM was asked again after a chainable:false tool",
        ),
        call_step("cont", json!([{"name": "cont"}])),
        answer_step("cont", "Summary: {tool_results}"),
        call_step(
            "slow",
            json!([{"name": "slow", "arguments": {"what": "sleep:5000"}}]),
        ),
        answer_step("slow", "{tool_results}"),
    ];
    let llm = ScriptedLlm::start(Script::from_value(json!({ "steps": steps })).unwrap());
    let plugins = vec![
        lz(langs[0], "limited", json!({"max_calls": 1}), json!([])),
        lz(langs[1], "cool", json!({"cooldown": 3600}), json!([])),
        lz(langs[2], "ask", json!({"confirm": true}), json!([])),
        lz(langs[3], "final", json!({"chainable": false}), json!([])),
        lz(
            langs[4],
            "cont",
            json!({"chainable": false, "continue": true}),
            json!([]),
        ),
        lz(langs[5], "slow", json!({"timeout": 0.5}), json!([])),
    ];
    let toml = "[agent]\nconfirm_timeout_s = 1.5\n";
    let mut b = Broker::with_llm(plugins, &llm, &[("hearth.toml", toml)]).await;

    // max_calls: 1 per conversation — the second call of the exchange is not run
    // (calls finish in any order), and a new exchange starts counting again.
    for n in 1..=2 {
        let ev = b.chat("limit twice", "ann").await;
        let f = finished(&ev);
        assert_eq!(f.len(), 2, "{ev:?}");
        let ran: Vec<_> = f.iter().filter(|c| c.1).collect();
        assert!(
            ran.len() == 1
                && ran[0]
                    .2
                    .starts_with(&format!("limited ran #{n} for ann: {{\"what\": \"a\"}}")),
            "{f:?}"
        );
        let refused = f.iter().find(|c| !c.1).unwrap();
        assert!(
            refused
                .2
                .contains("may be called at most once per conversation"),
            "{f:?}"
        );
        assert!(
            final_of(&ev).text.contains("max_calls"),
            "the LLM was not told: {ev:?}"
        );
    }

    // cooldown: per user.
    let f = finished(&b.chat("cool", "ann").await);
    assert!(f[0].1 && f[0].2.contains("cool ran #1 for ann"), "{f:?}");
    let f = finished(&b.chat("cool", "ann").await);
    assert!(
        !f[0].1
            && f[0]
                .2
                .contains("cooldown: tool cool may be called again by user `ann` in"),
        "{f:?}"
    );
    let f = finished(&b.chat("cool", "bob").await);
    assert!(f[0].1 && f[0].2.contains("cool ran #2 for bob"), "{f:?}");

    // confirm: yes runs it, no does not, no answer in time does not, and input that
    // has no client to ask does not.
    let ev = chat_confirming(&mut b, "ask", "ann", Some(true)).await;
    assert!(ev.iter().any(|e| matches!(e, Event::ConfirmRequest(_))));
    let f = finished(&ev);
    assert!(f[0].1 && f[0].2.contains("ask ran #1"), "{f:?}");
    let f = finished(&chat_confirming(&mut b, "ask", "ann", Some(false)).await);
    assert!(!f[0].1 && f[0].2.contains("the user declined it"), "{f:?}");
    let f = finished(&chat_confirming(&mut b, "ask", "ann", None).await);
    assert!(
        !f[0].1 && f[0].2.contains("did not confirm it within 1.5 s"),
        "{f:?}"
    );
    let (code, out, err) = b.cli(&["inject", "--source", "cron", "ask from cron"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("queued"), "{out}");
    let line = b
        .wait_log("has no client to ask", Duration::from_secs(30))
        .await;
    assert!(line.contains("tool ask was not run"), "{line}");
    // `hearth chat --yes` approves; without a terminal to ask, it is a no.
    let (code, out, err) = b.cli(&["chat", "--yes", "ask"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ask ran #2"), "{out}\n{err}");
    let (code, out, err) = b.cli(&["chat", "ask"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("was not run"), "{out}\n{err}");
    assert_eq!(
        b.call("ask", json!({})).await.unwrap().content,
        "ask ran #3 for : {}",
        "direct admin calls are not subject to confirm"
    );

    // chainable: false — the loop ends with the tool's result; the LLM is not asked
    // again.
    let before = llm.requests().len();
    let ev = b.chat("final", "ann").await;
    let f = final_of(&ev);
    assert_eq!(f.text, "final ran #1 for ann: {}");
    assert_eq!(llm.requests().len(), before + 1);
    // chainable: false + continue — the LLM answers once more, without tools.
    let before = llm.requests().len();
    let f = final_of(&b.chat("cont", "ann").await);
    assert_eq!(f.text, "Summary: cont ran #1 for ann: {}");
    assert_eq!(f.iterations, 2);
    let reqs = llm.requests();
    assert_eq!(reqs.len(), before + 2);
    assert_eq!(reqs.last().unwrap()["tool_choice"], "none");

    // timeout (s) of ai.tool.
    let f = finished(&b.chat("slow", "ann").await);
    assert!(
        !f[0].1 && f[0].2.contains("tool slow timed out after 500 ms"),
        "{f:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_trigger_type_reaches_its_plugin() {
    every_trigger_type("py", "nd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_trigger_type_reaches_its_go_plugin() {
    every_trigger_type("go", "go").await;
}

/// Triggers of every type, with the policy plugin `trig` (types 0-3) in `trig_lang` and
/// `ev` (type 4) in `ev_lang`.
async fn every_trigger_type(trig_lang: &str, ev_lang: &str) {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"steps": [], "default": {"content": "the LLM answered"}}))
            .unwrap(),
    );
    let plugins = vec![
        lz(
            trig_lang,
            "trig",
            json!({}),
            json!([{"type": 0, "pattern": "/cmd"}, {"type": 1, "pattern": "Weather"},
                   {"type": 2, "pattern": "^roll (\\d+)d(\\d+)$"}, {"type": 3, "pattern": "ping"},
                   {"type": 2, "pattern": "(unclosed"}]),
        ),
        lz(
            ev_lang,
            "ev",
            json!({}),
            json!([{"type": 4, "pattern": "message"}, {"type": 4, "pattern": "reply"}]),
        ),
    ];
    let mut b = Broker::with_llm(plugins, &llm, &[]).await;
    assert!(
        b.log().contains("invalid regex"),
        "bad trigger not reported:\n{}",
        b.log()
    );
    let cases = [
        (
            r#"/cmd a "b c" twice"#,
            r#"trig got ["a", "b c", "twice"] from ann"#,
        ),
        (
            "what's the WEATHER today",
            r#"trig got ["what's", "the", "today"] from ann"#,
        ),
        ("roll 2d6", r#"trig got ["2", "6"] from ann"#),
        ("ping, please", r#"trig got ["please"] from ann"#),
    ];
    for (message, expected) in cases {
        let ev = b.chat(message, "ann").await;
        let r = replies(&ev);
        assert!(
            r.contains(&("trig".into(), expected.into())),
            "{message}: {r:?}"
        );
        // Event triggers saw the message; the reply event carried the final text.
        let seen = format!("ev got {} from ann", json!([message]));
        assert!(r.contains(&("ev".into(), seen)), "{message}: {r:?}");
        let f = final_of(&ev);
        assert!(f.text.contains(expected) && f.iterations == 0, "{f:?}");
        assert!(!f.text.contains("the LLM answered"), "{f:?}");
    }
    // Several replies arrive in order.
    let ev = b.chat("/cmd twice", "ann").await;
    let trig: Vec<_> = replies(&ev)
        .into_iter()
        .filter(|(p, _)| p == "trig")
        .map(|(_, t)| t)
        .collect();
    assert_eq!(trig, [r#"trig got ["twice"] from ann"#, "trig again"]);
    assert!(
        llm.requests().is_empty(),
        "a triggered message reached the LLM"
    );
    // A message no trigger matches goes to the LLM; event triggers still see it.
    let ev = b.chat("hello there", "ann").await;
    assert_eq!(final_of(&ev).text, "the LLM answered");
    let r = replies(&ev);
    assert!(
        r.contains(&("ev".into(), r#"ev got ["hello there"] from ann"#.into())),
        "{r:?}"
    );
    assert!(
        r.contains(&(
            "ev".into(),
            r#"ev got ["the LLM answered"] from ann"#.into()
        )),
        "{r:?}"
    );
    assert_eq!(llm.requests().len(), 1);
    // `hearth chat` prints plugin replies.
    let (code, out, err) = b.cli(&["chat", "roll 1d20"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(r#"[trig] trig got ["1", "20"] from user"#),
        "{out}"
    );
}

/// The scripted LLM of [`inject_round_trip`].
pub(crate) fn lz_llm() -> ScriptedLlm {
    let script = json!({"steps": [
        {"match": "in Japanese", "content": "Here you go:\n/translate 你好 ja"},
        {"match": "weather in 北京", "after_tool": false,
         "tool_calls": [{"name": "weather", "arguments": {"city": "北京"}}]},
        {"match": "weather in 北京", "after_tool": true, "content": "Forecast: {tool_results}"},
    ]});
    ScriptedLlm::start(Script::from_value(script).unwrap())
}

/// The seed's translate (inject only) and hybrid weather plugins in `lang` (`py`:
/// tests/plugins/lz_*.py, `nd`: lz_translate.js and examples/plugins/weather, `go`: the
/// binaries of tests/plugins/go/cmd/lz_*).
pub(crate) fn lz_plugins(lang: &str) -> Vec<PluginDir> {
    match lang {
        "py" => vec![
            test_plugin("translate", "python", "tests/plugins/lz_translate.py"),
            test_plugin("weather", "python", "tests/plugins/lz_weather.py"),
        ],
        "nd" => {
            let mut weather = example("weather");
            weather.manifest["env"] = json!({"WEATHER_TODAY": "2026-07-01"});
            vec![
                test_plugin("translate", "node", "tests/plugins/lz_translate.js"),
                weather,
            ]
        }
        "go" => vec![
            test_plugin("translate", "exec", go_binary("lz_translate")),
            test_plugin("weather", "exec", go_binary("lz_weather")),
        ],
        other => panic!("unknown language {other}"),
    }
}

/// The [`lz_plugins`] of `lang` in a broker of their own: commands typed by the user, a
/// command the LLM writes, and the weather tool the LLM calls.
async fn inject_round_trip(lang: &str) -> (String, String) {
    let llm = lz_llm();
    let mut b = Broker::with_llm(lz_plugins(lang), &llm, &[]).await;
    lz_round_trip(&mut b, &llm, lang).await
}

/// Drives [`lz_plugins`] through broker `b` (whose LLM is [`lz_llm`]) and returns the
/// weather command's reply and the weather tool's result.
pub(crate) async fn lz_round_trip(
    b: &mut Broker,
    llm: &ScriptedLlm,
    lang: &str,
) -> (String, String) {
    // Typed by the user: the plugin answers, the LLM is not asked.
    let ev = b.chat("/translate 你好 en", "ann").await;
    assert_eq!(
        replies(&ev),
        [("translate".into(), "翻译结果: hello".into())]
    );
    let ev = b.chat("/weather 北京", "ann").await;
    let weather_reply = match replies(&ev).as_slice() {
        [(p, text)] if p == "weather" => text.clone(),
        other => panic!("{lang}: {other:?}"),
    };
    assert!(
        weather_reply.starts_with("北京（Beijing）天气："),
        "{weather_reply}"
    );
    let ev = b.chat("/weather Paris", "ann").await;
    match replies(&ev).as_slice() {
        [(p, text)] if p == "weather" => assert!(text.contains("Paris"), "{lang}: {text}"),
        other => panic!("{lang}: {other:?}"),
    }
    assert!(llm.requests().is_empty());

    // The LLM writes the command: the broker runs it and adds the reply.
    let ev = b.chat("say hello in Japanese", "ann").await;
    assert_eq!(
        replies(&ev),
        [("translate".into(), "翻译结果: こんにちは".into())]
    );
    let f = final_of(&ev);
    assert_eq!(f.text, "Here you go:\n翻译结果: こんにちは", "{lang}");
    let system = llm.requests()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    for needle in [
        "`/translate {text} {lang}` — 翻译文本到指定语言 (plugin translate)",
        "  - text: 要翻译的文本",
        "`/weather {city}` — 查询天气信息 (plugin weather)",
    ] {
        assert!(
            system.contains(needle),
            "{lang}: {needle} not in:\n{system}"
        );
    }

    // The hybrid plugin's tool, called by the LLM.
    let ev = b.chat("what's the weather in 北京?", "ann").await;
    let f = finished(&ev);
    assert!(
        f.len() == 1 && f[0].0 == "weather" && f[0].1,
        "{lang}: {f:?}"
    );
    let forecast: Value = serde_json::from_str(&f[0].2).unwrap();
    assert_eq!(forecast["city"], "北京");
    assert!(final_of(&ev).text.starts_with("Forecast: {"));
    (weather_reply, f[0].2.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linkzone_translate_and_hybrid_weather_round_trip_in_python_node_and_go() {
    let py = inject_round_trip("py").await;
    let nd = inject_round_trip("nd").await;
    assert_eq!(py, nd, "the Python and Node plugins answer differently");
    let go = inject_round_trip("go").await;
    assert_eq!(py, go, "the Python and Go plugins answer differently");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_to_llm_written_commands_take_their_lines_place_in_the_stream_and_the_answer() {
    let script = json!({"steps": [
        {"match": "two", "content": "Sure.\n/translate 你好 ja\nAnything else?\n/translate 你好 en", "chunk_chars": 3},
        {"match": "lookalike", "content": "/translated text stays\n/translate-ish too", "chunk_chars": 2}
    ]});
    let llm = ScriptedLlm::start(Script::from_value(script).unwrap());
    let mut b = Broker::with_llm(
        vec![test_plugin(
            "translate",
            "python",
            "tests/plugins/lz_translate.py",
        )],
        &llm,
        &[],
    )
    .await;
    let ev = b.chat("two translations please", "ann").await;
    let answer = "Sure.\n翻译结果: こんにちは\nAnything else?\n翻译结果: hello";
    assert_eq!(final_of(&ev).text, answer);
    // What streamed is the answer as it is kept: no command line was shown.
    let streamed: String = ev
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta(d) if !d.reasoning => Some(d.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, answer);
    let inline: Vec<bool> = ev
        .iter()
        .filter_map(|e| match e {
            Event::PluginReply(r) => Some(r.inline),
            _ => None,
        })
        .collect();
    assert_eq!(inline, [true, true]);
    // Lines that only look like a command stream as they are.
    let ev = b.chat("a lookalike", "ann").await;
    let streamed: String = ev
        .iter()
        .filter_map(|e| match e {
            Event::TextDelta(d) => Some(d.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "/translated text stays\n/translate-ish too");
    assert_eq!(final_of(&ev).text, streamed);
    // `hearth chat` shows the answer as kept, once.
    let (code, out, err) = b.cli(&["chat", "--user", "bob", "--channel", "test", "two more"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(answer), "{out}");
    assert!(!out.contains("/translate"), "{out}");
    assert_eq!(out.matches("翻译结果: hello").count(), 1, "{out}");
}
