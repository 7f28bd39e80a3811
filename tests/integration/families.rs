//! One chat with two tool calls through each LLM API family's wire format — OpenAI,
//! DeepSeek, Anthropic, Gemini, Ollama — streamed and not: a broker whose sources use
//! the built-in adapters, all pointing at one scripted server that speaks the family of
//! each request's path; the Python calculator and the Node weather plugins run the calls.

use hearth_proto::v1::chat_event::Event;
use hearth_proto::v1::UseSourceRequest;
use hearth_scripted::{Exchange, Family, Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::{example, Broker};

/// (adapter = source name, family, path of a plain request, of a streamed one)
const SOURCES: [(&str, Family, &str, &str); 5] = [
    (
        "openai",
        Family::OpenAi,
        "/v1/chat/completions",
        "/v1/chat/completions",
    ),
    (
        "deepseek",
        Family::OpenAi,
        "/chat/completions",
        "/chat/completions",
    ),
    (
        "anthropic",
        Family::Anthropic,
        "/v1/messages",
        "/v1/messages",
    ),
    (
        "gemini",
        Family::Gemini,
        "/v1beta/models/scripted-model:generateContent",
        "/v1beta/models/scripted-model:streamGenerateContent?alt=sse",
    ),
    ("ollama", Family::Ollama, "/api/chat", "/api/chat"),
];

const REASONING: &str = "Both tools, in one turn.";

/// The first reply calls both tools (with reasoning, except for plain OpenAI, whose
/// API has none); the second quotes their results.
fn script() -> Script {
    let calls = json!([
        { "name": "calculator", "arguments": { "expression": "(2+3)*4" } },
        { "name": "weather", "arguments": { "city": "Paris" } },
    ]);
    Script::from_value(json!({ "steps": [
        { "match": "[openai]", "after_tool": false, "content": "Let me check.", "tool_calls": calls },
        { "after_tool": false, "reasoning_content": REASONING, "content": "Let me check.",
          "tool_calls": calls },
        { "after_tool": true, "content": "Here is what I found:\n{tool_results}", "chunk_chars": 6 },
    ]}))
    .unwrap()
}

/// A broker with a source per adapter on `llm` and the two example plugins.
async fn broker(llm: &ScriptedLlm, stream: bool) -> Broker {
    let mut cfg = String::new();
    for (i, (name, _, _, _)) in SOURCES.iter().enumerate() {
        let base = match *name {
            "openai" => llm.base_url(),
            _ => llm.root_url(),
        };
        cfg += &format!(
            "[[sources]]\nname = \"{name}\"\nadapter = \"{name}\"\nbase_url = \"{base}\"\n\
             model = \"scripted-model\"\napi_key = \"key-{name}\"\npriority = {i}\n"
        );
    }
    cfg += &format!("[agent]\nstream = {stream}\n");
    let mut b = Broker::spawn_with_files(
        vec![example("calculator"), example("weather")],
        &[],
        &[("hearth.toml", &cfg)],
    )
    .await;
    b.wait_ready("calculator").await;
    b.wait_ready("weather").await;
    b
}

/// What a family's request says, in one shape: (tools offered, the assistant's tool
/// calls as (id, name, arguments), the tool results as (id or name, text), the
/// assistant's reasoning).
#[derive(Debug, Default)]
struct Sent {
    tools: Vec<String>,
    calls: Vec<(String, String, Value)>,
    results: Vec<(String, String)>,
    reasoning: Option<String>,
}

fn sent(family: Family, body: &Value) -> Sent {
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let string = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut out = Sent::default();
    match family {
        Family::OpenAi | Family::Ollama => {
            out.tools = list(&body["tools"])
                .iter()
                .map(|t| string(&t["function"]["name"]))
                .collect();
            for m in list(&body["messages"]) {
                for c in list(&m["tool_calls"]) {
                    let args = match &c["function"]["arguments"] {
                        Value::String(text) => serde_json::from_str(text).unwrap(),
                        object => object.clone(),
                    };
                    out.calls
                        .push((string(&c["id"]), string(&c["function"]["name"]), args));
                    out.reasoning = m["reasoning_content"].as_str().map(str::to_owned);
                }
                if m["role"] == "tool" {
                    // OpenAI pairs results by id, Ollama by tool name.
                    let key = m["tool_call_id"].as_str().or(m["tool_name"].as_str());
                    out.results
                        .push((key.unwrap_or_default().to_owned(), string(&m["content"])));
                }
            }
        }
        Family::Anthropic => {
            out.tools = list(&body["tools"])
                .iter()
                .map(|t| string(&t["name"]))
                .collect();
            for m in list(&body["messages"]) {
                for b in list(&m["content"]) {
                    match b["type"].as_str() {
                        Some("tool_use") => out.calls.push((
                            string(&b["id"]),
                            string(&b["name"]),
                            b["input"].clone(),
                        )),
                        Some("tool_result") => out
                            .results
                            .push((string(&b["tool_use_id"]), string(&b["content"]))),
                        _ => {}
                    }
                }
            }
        }
        Family::Gemini => {
            out.tools = list(&body["tools"][0]["functionDeclarations"])
                .iter()
                .map(|t| string(&t["name"]))
                .collect();
            for c in list(&body["contents"]) {
                for p in list(&c["parts"]) {
                    let call = &p["functionCall"];
                    if call.is_object() && out.calls.is_empty() {
                        // The signature of the first call came back (not the
                        // adapter's placeholder): the broker carried it through.
                        assert_eq!(
                            p["thoughtSignature"],
                            hearth_scripted::GEMINI_THOUGHT_SIGNATURE,
                            "{p}"
                        );
                    }
                    if call.is_object() {
                        out.calls.push((
                            string(&call["id"]),
                            string(&call["name"]),
                            call["args"].clone(),
                        ));
                    }
                    let result = &p["functionResponse"];
                    if result.is_object() {
                        let text = match result["response"]["result"].as_str() {
                            Some(text) => text.to_owned(),
                            None => result["response"].to_string(),
                        };
                        out.results.push((string(&result["name"]), text));
                    }
                }
            }
        }
        other => panic!("no test for family {other:?}"),
    }
    out
}

/// One chat through `source`: both calls run, the answer quotes them, and the second
/// request carries the assistant's calls and both results in the family's wire format.
async fn chat_through(b: &mut Broker, llm: &ScriptedLlm, source: usize, stream: bool) {
    let (name, family, plain_path, stream_path) = SOURCES[source];
    let case = format!("{name} stream={stream}");
    let req = b.admin.with_token(UseSourceRequest { name: name.into() });
    b.admin.client().use_source(req).await.unwrap();
    let seen = llm.exchanges().len();
    let question = format!("[{name}] what is (2+3)*4, and the weather in Paris?");
    let events = b.chat(&question, &format!("{name}-{stream}")).await;

    let Some(Event::Final(f)) = events.last() else {
        panic!("{case}: no Final: {events:?}");
    };
    assert!(f.error.is_empty(), "{case}: {f:?}\n{}", b.log());
    assert_eq!(f.iterations, 2, "{case}");
    let finished: Vec<(String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallFinished(t) => Some((t.tool.clone(), t.success)),
            _ => None,
        })
        .collect();
    assert_eq!(finished.len(), 2, "{case}: {finished:?}");
    assert!(finished.iter().all(|(_, ok)| *ok), "{case}: {events:?}");
    assert!(
        f.text.starts_with("Here is what I found:\n(2+3)*4 = 20\n") && f.text.contains("Paris"),
        "{case}: {}",
        f.text
    );
    let deltas = events
        .iter()
        .filter(|e| matches!(e, Event::TextDelta(_)))
        .count();
    if stream {
        assert!(
            deltas > 10,
            "{case}: the answer was not streamed ({deltas} deltas)"
        );
    } else {
        assert!(deltas <= 2, "{case}: {deltas} deltas without streaming");
    }

    let exchanges: Vec<Exchange> = llm.exchanges()[seen..].to_vec();
    assert_eq!(exchanges.len(), 2, "{case}: {exchanges:?}");
    let path = if stream { stream_path } else { plain_path };
    for x in &exchanges {
        assert_eq!((x.family, x.path.as_str()), (family, path), "{case}");
    }
    let key = match family {
        Family::Anthropic => &exchanges[0].headers["x-api-key"],
        Family::Gemini => &exchanges[0].headers["x-goog-api-key"],
        _ => &exchanges[0].headers["authorization"],
    };
    assert!(key.ends_with(&format!("key-{name}")), "{case}: {key}");
    let first = sent(family, &exchanges[0].body);
    assert!(
        first.tools.contains(&"calculator".to_string())
            && first.tools.contains(&"weather".to_string()),
        "{case}: {:?}",
        first.tools
    );

    let second = sent(family, &exchanges[1].body);
    let names: Vec<&str> = second.calls.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(names, ["calculator", "weather"], "{case}");
    assert_eq!(
        second.calls[0].2,
        json!({ "expression": "(2+3)*4" }),
        "{case}"
    );
    assert_eq!(second.calls[1].2, json!({ "city": "Paris" }), "{case}");
    // The ids the server gave its calls came back on the calls and their results
    // (Gemini and Ollama have no ids on the wire: results name the tool).
    let answered = &exchanges[0].tool_calls;
    let keys: Vec<String> = match family {
        Family::OpenAi | Family::Anthropic => {
            let ids: Vec<String> = answered.iter().map(|c| c.id.clone().unwrap()).collect();
            let sent_ids: Vec<&String> = second.calls.iter().map(|c| &c.0).collect();
            assert_eq!(sent_ids, ids.iter().collect::<Vec<_>>(), "{case}");
            ids
        }
        _ => names.iter().map(|n| n.to_string()).collect(),
    };
    let result_keys: Vec<&String> = second.results.iter().map(|r| &r.0).collect();
    assert_eq!(result_keys, keys.iter().collect::<Vec<_>>(), "{case}");
    assert_eq!(second.results[0].1, "(2+3)*4 = 20", "{case}");
    let weather: Value = serde_json::from_str(&second.results[1].1).unwrap();
    assert_eq!(weather["city_en"], "Paris", "{case}");
    if name == "deepseek" {
        assert_eq!(second.reasoning.as_deref(), Some(REASONING), "{case}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tool_calls_through_every_api_family_streamed_and_not() {
    let run = |stream: bool| async move {
        let llm = ScriptedLlm::start(script());
        let mut b = broker(&llm, stream).await;
        for source in 0..SOURCES.len() {
            chat_through(&mut b, &llm, source, stream).await;
        }
    };
    tokio::join!(run(true), run(false));
}
