//! What operators see (issue 15): Prometheus metrics after tool calls, a crash and a
//! turn; health over HTTP and gRPC through a plugin crash and an LLM outage; JSON logs;
//! OpenTelemetry spans with the GenAI attributes in a fake OTLP collector, with the
//! plugins' own spans as children; progress in `Agent.Chat`.

use std::collections::BTreeMap;
use std::time::Duration;

use hearth_proto::v1::chat_event::Event;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::harness::{final_of, repo, socket_channel, stress, Broker, PluginDir};
use crate::otlp::Collector;

const LONG: Duration = Duration::from_secs(30);

fn llm(script: Value) -> ScriptedLlm {
    ScriptedLlm::start(Script::from_value(script).unwrap())
}

/// The address the broker logged after `prefix` (`HTTP listening on http://` …).
async fn logged_addr(b: &Broker, prefix: &str) -> String {
    let log = b.wait_log(prefix, LONG).await;
    let rest = &log[log.find(prefix).unwrap() + prefix.len()..];
    rest.split(|c: char| c.is_whitespace() || c == '/')
        .next()
        .unwrap()
        .trim_end_matches(':')
        .to_string()
}

async fn get(addr: &str, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let client = reqwest::Client::new();
    let mut req = client.get(format!("http://{addr}{path}"));
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ct, resp.text().await.unwrap())
}

/// One sample of the 0.0.4 exposition: name, labels, value.
fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (head, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match head.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (head, ""),
        };
        let mut map = BTreeMap::new();
        for pair in labels.split(",").filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap();
            map.insert(k.to_string(), v.trim_matches('"').to_string());
        }
        out.push((name.to_string(), map, value.parse().unwrap()));
    }
    out
}

/// The value of `name` whose labels include `labels`; `None` when no sample matches.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text)
        .into_iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
}

fn hooks_plugin(name: &str, directives: &str) -> PluginDir {
    PluginDir {
        dir: name.into(),
        manifest: json!({"name": name, "runtime": "python",
            "entry": repo().join("tests/plugins/hooks.py"), "env": {"HOOKS": directives}}),
    }
}

async fn start(plugins: Vec<PluginDir>, args: &[&str], env: &[(&str, &str)]) -> Broker {
    let names: Vec<String> = plugins
        .iter()
        .map(|p| p.manifest["name"].as_str().unwrap().to_string())
        .collect();
    let mut b = Broker::spawn_with_env(plugins, args, &[], env).await;
    for n in names {
        b.wait_ready(&n).await;
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_calls_a_crash_a_hook_and_a_turn() {
    let llm = llm(json!({"steps": [
        {"match": "use the tool", "after_tool": false,
         "tool_calls": [{"name": "mp_echo", "arguments": {"x": 1}}],
         "usage": {"prompt_tokens": 50, "completion_tokens": 7}},
        {"after_tool": true, "content": "done",
         "usage": {"prompt_tokens": 60, "completion_tokens": 3}}
    ]}));
    let url = llm.base_url();
    let mut b = start(
        vec![
            stress("py", "mp", "", json!({})),
            stress("py", "mc", "crash_mid_call", json!({})),
            hooks_plugin("hk", "fail=pre_action"),
        ],
        &["--llm-url", &url, "--http-listen", "127.0.0.1:0"],
        &[],
    )
    .await;
    let addr = logged_addr(&b, "HTTP listening on http://").await;

    for i in 0..3 {
        assert!(b.call("mp_echo", json!({ "i": i })).await.unwrap().success);
    }
    assert!(!b.call("mp_fail", json!({})).await.unwrap().success);
    // Not JSON: refused before the plugin is asked.
    let bad = b.admin.with_token(hearth_proto::v1::CallToolRequest {
        name: "mp_echo".into(),
        args_json: "{nope".into(),
        ..Default::default()
    });
    let _ = b.admin.client().call_tool(bad).await;
    // A name nobody registered makes no series of its own.
    assert!(b.call("made_up_tool", json!({})).await.is_err());
    // The process exits mid-call: the call fails, the plugin restarts.
    let crashed = b.call("mc_sleep", json!({"ms": 2000})).await;
    assert!(crashed.is_err(), "{crashed:?}");
    b.wait_for("mc", LONG, "restarted and ready", |p| {
        p.restarts >= 1 && p.state == hearth_proto::v1::PluginState::Ready as i32
    })
    .await;
    let events = b.chat("please use the tool", "ops").await;
    assert_eq!(final_of(&events).text, "done");

    let (status, ct, text) = get(&addr, "/metrics", None).await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let v = |name: &str, labels: &[(&str, &str)]| value(&text, name, labels);
    assert_eq!(
        v(
            "hearth_tool_calls_total",
            &[("tool", "mp_echo"), ("outcome", "ok")]
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        v(
            "hearth_tool_calls_total",
            &[("tool", "mp_fail"), ("outcome", "error")]
        ),
        Some(1.0)
    );
    assert_eq!(
        v(
            "hearth_tool_calls_total",
            &[("tool", "mp_echo"), ("outcome", "invalid_args")]
        ),
        Some(1.0)
    );
    assert_eq!(
        v(
            "hearth_tool_calls_total",
            &[("tool", "mc_sleep"), ("outcome", "plugin_gone")]
        ),
        Some(1.0)
    );
    assert_eq!(
        v(
            "hearth_tool_calls_total",
            &[("tool", "_unknown"), ("outcome", "invalid_args")]
        ),
        Some(1.0)
    );
    assert!(!text.contains("made_up_tool"));
    assert_eq!(
        v(
            "hearth_tool_call_duration_seconds_count",
            &[("tool", "mp_echo")]
        ),
        Some(4.0)
    );
    assert_eq!(
        v(
            "hearth_tool_call_duration_seconds_bucket",
            &[("tool", "mp_echo"), ("le", "+Inf")]
        ),
        Some(4.0)
    );
    assert_eq!(
        v(
            "gen_ai_execute_tool_duration_seconds_count",
            &[("gen_ai_tool_name", "mp_echo")]
        ),
        Some(4.0)
    );
    assert_eq!(
        v(
            "gen_ai_execute_tool_duration_seconds_count",
            &[
                ("gen_ai_tool_name", "mp_fail"),
                ("error_type", "tool_error")
            ]
        ),
        Some(1.0)
    );
    assert!(v("hearth_plugin_restarts_total", &[("plugin", "mc")]).unwrap() >= 1.0);
    assert_eq!(
        v("hearth_plugin_restarts_total", &[("plugin", "mp")]),
        Some(0.0)
    );
    assert_eq!(v("hearth_plugin_up", &[("plugin", "mc")]), Some(1.0));
    assert_eq!(v("hearth_plugin_up", &[("plugin", "mp")]), Some(1.0));
    assert_eq!(
        v(
            "hearth_hook_duration_seconds_count",
            &[("stage", "pre_action"), ("plugin", "hk")]
        ),
        Some(1.0)
    );
    assert_eq!(v("hearth_turns_total", &[("outcome", "ok")]), Some(1.0));
    assert_eq!(v("hearth_turn_duration_seconds_count", &[]), Some(1.0));
    assert_eq!(v("hearth_turns_waiting", &[]), Some(0.0));
    assert_eq!(
        v("hearth_llm_requests_total", &[("outcome", "ok")]),
        Some(2.0)
    );
    let model = [
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_provider_name", "openai"),
    ];
    assert_eq!(
        v("gen_ai_client_inference_duration_seconds_count", &model),
        Some(2.0)
    );
    assert_eq!(
        v("gen_ai_client_inference_usage_input_tokens_total", &model),
        Some(110.0)
    );
    assert_eq!(
        v(
            "gen_ai_client_inference_usage_output_tokens_total",
            &[("gen_ai_token_modality", "unknown")]
        ),
        Some(10.0)
    );
    assert!(v("process_resident_memory_bytes", &[]).unwrap() > 1e6);
    assert!(v("process_cpu_seconds_total", &[]).unwrap() > 0.0);
    assert!(v("process_open_fds", &[]).unwrap() >= 3.0);
    assert!(v("process_start_time_seconds", &[]).unwrap() > 1.7e9);
    assert_eq!(v("hearth_build_info", &[]), Some(1.0));
    // Every family has HELP and TYPE; no sample repeats a series.
    let mut seen = std::collections::HashSet::new();
    for (n, l, _) in samples(&text) {
        assert!(seen.insert(format!("{n}{l:?}")), "series twice: {n}{l:?}");
    }

    // A scraper asking for OpenMetrics gets it.
    let (status, ct, om) = get(
        &addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(om.ends_with("# EOF\n"), "{om}");
}

async fn grpc_health(channel: tonic::transport::Channel) -> i32 {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_without_a_token_through_a_crash_and_an_llm_outage() {
    // An LLM source nobody serves: the first chat fails and cools it down.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let b = start(
        vec![stress("py", "hc", "crash_mid_call", json!({}))],
        &[
            "--llm-url",
            &dead_url,
            "--http-listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    )
    .await;
    let mut b = b;
    let addr = logged_addr(&b, "HTTP listening on http://").await;
    let tcp = logged_addr(&b, "server: listening on http://").await;
    assert_eq!(get(&addr, "/healthz", None).await.0, 200);
    let (status, _, body) = get(&addr, "/readyz", None).await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    let serving = ServingStatus::Serving as i32;
    assert_eq!(
        grpc_health(socket_channel(&b.data_dir()).await).await,
        serving
    );
    let tcp_channel = tonic::transport::Endpoint::try_from(format!("http://{tcp}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_eq!(grpc_health(tcp_channel.clone()).await, serving);
    // Health is only health: the other services still want the token.
    let refused = hearth_proto::v1::admin_client::AdminClient::new(tcp_channel.clone())
        .list_plugins(hearth_proto::v1::ListPluginsRequest {})
        .await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::Unauthenticated);

    // A plugin crash does not make the broker unready.
    assert!(b.call("hc_sleep", json!({"ms": 2000})).await.is_err());
    assert_eq!(get(&addr, "/readyz", None).await.0, 200);
    assert_eq!(grpc_health(tcp_channel.clone()).await, serving);

    // Every LLM source failing: not ready, on HTTP and gRPC, within about a second.
    let events = b.chat("hello", "ops").await;
    assert!(!final_of(&events).error.is_empty());
    let mut watch = HealthClient::new(tcp_channel.clone())
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let msg = tokio::time::timeout_at(deadline, watch.message())
            .await
            .expect("gRPC health went NOT_SERVING")
            .unwrap()
            .unwrap();
        if msg.status == ServingStatus::NotServing as i32 {
            break;
        }
    }
    let (status, _, body) = get(&addr, "/readyz", None).await;
    assert_eq!((status, body.as_str()), (503, "not ready\n"));
    assert_eq!(get(&addr, "/healthz", None).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_parse_and_carry_plugin_turn_and_process_fields() {
    let llm = llm(json!({"default": {"content": "fine"}}));
    let url = llm.base_url();
    let mut b = start(
        vec![hooks_plugin("jl", "fail=pre_action")],
        &["--llm-url", &url, "--log-format", "json"],
        &[],
    )
    .await;
    let events = b.chat("hi", "ops").await;
    assert_eq!(final_of(&events).text, "fine");
    assert!(b.call("jl_ping", json!({})).await.unwrap().success);
    b.wait_log("tool call answered", LONG).await;
    let log = b.wait_log("hook failed", LONG).await;
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines
        .iter()
        .all(|l| l["timestamp"].is_string() && l["level"].is_string()));
    let hook = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("hook failed"))
        })
        .unwrap();
    assert_eq!(hook["plugin"], "jl", "{hook}");
    assert_eq!(hook["span"]["name"], "turn", "{hook}");
    assert_eq!(hook["span"]["conversation"], "user:test/ops", "{hook}");
    // A line written inside a tool call names the call.
    let answered = lines
        .iter()
        .find(|l| l["message"] == "tool call answered")
        .unwrap();
    assert_eq!(answered["outcome"], "ok", "{answered}");
    assert_eq!(answered["span"]["name"], "tool_call", "{answered}");
    assert_eq!(answered["span"]["plugin"], "jl", "{answered}");
    assert_eq!(answered["span"]["tool"], "jl_ping", "{answered}");
    assert!(answered["span"]["call_id"].as_u64().is_some(), "{answered}");
    let spawned = lines
        .iter()
        .find(|l| l["message"] == "spawned" && l["plugin"] == "jl")
        .unwrap();
    assert!(spawned["pid"].as_u64().unwrap() > 0);
    assert_eq!(spawned["generation"], 1);
    // The plugin's own output: one event per line with its process and generation.
    let out = lines
        .iter()
        .find(|l| l["target"] == "hearth_broker::plugin" && l["plugin"] == "jl")
        .unwrap_or_else(|| panic!("no plugin output line in {log}"));
    assert_eq!(out["generation"], 1, "{out}");
    assert_eq!(out["pid"], spawned["pid"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_chat_stream_coalesced_and_in_order() {
    let llm = llm(json!({"steps": [
        {"match": "slow", "after_tool": false,
         "tool_calls": [{"name": "pg_sleep", "arguments": {"ms": 600, "progress_ms": 5}}]},
        {"after_tool": true, "content": "slept"}
    ]}));
    let url = llm.base_url();
    let mut b = start(
        vec![stress("py", "pg", "", json!({}))],
        &["--llm-url", &url],
        &[],
    )
    .await;
    let events = b.chat("be slow", "ops").await;
    let started = events
        .iter()
        .find_map(|e| match e {
            Event::ToolCallStarted(t) => Some(t.call_id.clone()),
            _ => None,
        })
        .unwrap();
    let progress: Vec<(usize, &hearth_proto::v1::ToolCallProgress)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::ToolCallProgress(p) => Some((i, p)),
            _ => None,
        })
        .collect();
    let finished = events
        .iter()
        .position(|e| matches!(e, Event::ToolCallFinished(_)))
        .unwrap();
    // ~120 reports in 600 ms, at most one per 100 ms reaches the stream (+ the last).
    assert!(
        (2..=9).contains(&progress.len()),
        "{} progress events",
        progress.len()
    );
    for (i, p) in &progress {
        assert!(*i < finished);
        assert_eq!(p.call_id, started);
        assert_eq!((p.tool.as_str(), p.plugin.as_str()), ("pg_sleep", "pg"));
    }
    assert_eq!(final_of(&events).text, "slept");

    // The CLI with --json prints them as lines before the tool's result.
    let (code, out, err) = b.cli(&["chat", "--json", "be slow"]);
    assert_eq!(code, 0, "{err}");
    let kinds: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let first = kinds
        .iter()
        .position(|k| k == "tool_call_progress")
        .expect("progress lines");
    let done = kinds
        .iter()
        .position(|k| k == "tool_call_finished")
        .unwrap();
    assert!(first < done, "{kinds:?}");
}

/// Spans a chat turn leaves in the collector: the turn, each LLM request, the tool
/// call and the hook, with GenAI attributes and parents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_follow_the_genai_conventions_over_otlp_http() {
    let collector = Collector::start().await;
    let endpoint = format!("http://{}", collector.http);
    let llm = llm(json!({"steps": [
        {"match": "trace", "after_tool": false,
         "tool_calls": [{"name": "tr_echo", "arguments": {"x": 1}}],
         "usage": {"prompt_tokens": 50, "completion_tokens": 7}},
        {"after_tool": true, "content": "traced", "usage": {"prompt_tokens": 60, "completion_tokens": 3}}
    ]}));
    let url = llm.base_url();
    let mut b = start(
        vec![
            stress("py", "tr", "", json!({})),
            hooks_plugin("th", "noop"),
        ],
        &["--llm-url", &url],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    )
    .await;
    assert!(
        b.log().contains("tracing: OTLP http/protobuf"),
        "{}",
        b.log()
    );
    let events = b.chat("trace this", "ops").await;
    assert_eq!(final_of(&events).text, "traced");
    let spans = collector
        .wait(LONG, "invoke_agent", |s| {
            s.iter().any(|s| s.name() == "invoke_agent")
        })
        .await;
    let one = |name: &str| {
        spans
            .iter()
            .find(|s| s.name() == name)
            .unwrap_or_else(|| panic!("no span {name}"))
    };
    let turn = one("invoke_agent");
    assert_eq!(turn.service, "hearth");
    assert_eq!(
        turn.attr("gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        turn.attr("gen_ai.conversation.id").as_deref(),
        Some("user:test/ops")
    );
    assert_eq!(turn.attr("gen_ai.provider.name").as_deref(), Some("openai"));
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name().starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), 2, "{chats:#?}");
    for c in &chats {
        assert_eq!(c.parent_id(), turn.span_id());
        assert_eq!(c.trace_id(), turn.trace_id());
        assert_eq!(c.span.kind, 3, "CLIENT");
        assert_eq!(c.attr("gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(c.attr("gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(
            c.attr("gen_ai.conversation.id").as_deref(),
            Some("user:test/ops")
        );
        assert!(c.attr("gen_ai.request.model").is_some());
        assert!(c.attr("gen_ai.response.model").is_some());
    }
    let first = chats
        .iter()
        .find(|c| c.attr("gen_ai.usage.input_tokens").as_deref() == Some("50"))
        .unwrap();
    assert_eq!(
        first.attr("gen_ai.usage.output_tokens").as_deref(),
        Some("7")
    );
    assert_eq!(
        first.attr("gen_ai.response.finish_reasons").as_deref(),
        Some("[tool_calls]")
    );
    let tool = one("execute_tool tr_echo");
    assert_eq!(tool.parent_id(), turn.span_id());
    assert_eq!(tool.attr("gen_ai.tool.name").as_deref(), Some("tr_echo"));
    let call_id = events
        .iter()
        .find_map(|e| match e {
            Event::ToolCallStarted(t) => Some(t.call_id.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(tool.attr("gen_ai.tool.call.id"), Some(call_id));
    let hooks: Vec<_> = spans
        .iter()
        .filter(|s| s.name().starts_with("hook "))
        .collect();
    assert!(hooks
        .iter()
        .any(|h| h.name() == "hook on_input" && h.parent_id() == turn.span_id()));
    // Tool-call stage hooks run inside the tool call's span.
    assert!(
        hooks
            .iter()
            .any(|h| h.name() == "hook before_toolcall" && h.parent_id() == tool.span_id()),
        "{hooks:#?}"
    );

    // Admin.CallTool with the caller's traceparent: the tool span is its child, with an
    // error status and error.type when the tool fails.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut req = b.admin.with_token(hearth_proto::v1::CallToolRequest {
        name: "tr_fail".into(),
        args_json: "{}".into(),
        ..Default::default()
    });
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-00f067aa0ba902b7-01").parse().unwrap(),
    );
    let r = b.admin.client().call_tool(req).await.unwrap().into_inner();
    assert!(!r.success);
    let spans = collector
        .wait(LONG, "execute_tool tr_fail", |s| {
            s.iter().any(|s| s.name() == "execute_tool tr_fail")
        })
        .await;
    let failed = spans
        .iter()
        .find(|s| s.name() == "execute_tool tr_fail")
        .unwrap();
    assert_eq!(failed.trace_id(), trace);
    assert_eq!(failed.parent_id(), "00f067aa0ba902b7");
    assert_eq!(failed.attr("error.type").as_deref(), Some("tool_error"));
    assert_eq!(
        failed.span.status.as_ref().unwrap().code,
        2,
        "STATUS_CODE_ERROR"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_export_over_otlp_grpc_and_tracing_stays_off_without_an_endpoint() {
    let collector = Collector::start().await;
    let endpoint = format!("http://{}", collector.grpc);
    let mut b = start(
        vec![stress("rs", "tg", "", json!({}))],
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "hearth-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    )
    .await;
    assert!(b.call("tg_echo", json!({})).await.unwrap().success);
    let spans = collector
        .wait(LONG, "execute_tool tg_echo", |s| {
            s.iter().any(|s| s.name() == "execute_tool tg_echo")
        })
        .await;
    let s = spans
        .iter()
        .find(|s| s.name() == "execute_tool tg_echo")
        .unwrap();
    assert_eq!(s.service, "hearth-test");
    assert_eq!(s.attr("hearth.plugin").as_deref(), Some("tg"));

    // OTEL_SDK_DISABLED wins over an endpoint: nothing is exported.
    let quiet = Collector::start().await;
    let endpoint = format!("http://{}", quiet.http);
    let mut q = start(
        vec![stress("rs", "tq", "", json!({}))],
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    )
    .await;
    assert!(q.call("tq_echo", json!({})).await.unwrap().success);
    q.stop_with(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(quiet.spans().is_empty());
    assert!(!q.log().contains("tracing: OTLP"));
}

/// A plugin's own span (made with the language's OpenTelemetry SDK inside the tool
/// handler) is a child of the broker's `execute_tool` span, in Python and Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_spans_are_children_of_the_brokers_in_python_and_node() {
    for (name, file) in [("otel_py", "otel_py.json"), ("otel_node", "otel_node.json")] {
        let collector = Collector::start().await;
        let endpoint = format!("http://{}", collector.http);
        let dir = repo().join("tests/plugins/otel");
        let mut manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
        let entry = dir.join(manifest["entry"].as_str().unwrap());
        manifest["entry"] = json!(entry);
        let mut b = start(
            vec![PluginDir {
                dir: name.into(),
                manifest,
            }],
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ],
        )
        .await;
        let trace = "0af7651916cd43dd8448eb211c80319c";
        let mut req = b.admin.with_token(hearth_proto::v1::CallToolRequest {
            name: "traced".into(),
            args_json: json!({"text": "hi"}).to_string(),
            ..Default::default()
        });
        req.metadata_mut().insert(
            "traceparent",
            format!("00-{trace}-b7ad6b7169203331-01").parse().unwrap(),
        );
        let r = b.admin.client().call_tool(req).await.unwrap().into_inner();
        assert!(r.success, "{name}: {}", r.error);
        let seen: Value = serde_json::from_str(&r.data_json).unwrap();
        let spans = collector
            .wait(LONG, "plugin_work and execute_tool", |s| {
                s.iter().any(|s| s.name() == "plugin_work")
                    && s.iter().any(|s| s.name() == "execute_tool traced")
            })
            .await;
        let tool = spans
            .iter()
            .find(|s| s.name() == "execute_tool traced")
            .unwrap();
        let work = spans.iter().find(|s| s.name() == "plugin_work").unwrap();
        assert_eq!(tool.trace_id(), trace, "{name}");
        assert_eq!(tool.parent_id(), "b7ad6b7169203331", "{name}");
        assert_eq!(work.trace_id(), trace, "{name}");
        assert_eq!(
            work.parent_id(),
            tool.span_id(),
            "{name}: the plugin's span is the tool span's child"
        );
        assert_eq!(
            work.service, name,
            "{name}: OTEL_SERVICE_NAME is the plugin's name"
        );
        assert_eq!(
            seen["traceparent"].as_str().unwrap(),
            format!("00-{trace}-{}-01", tool.span_id()),
            "{name}: the handler saw the tool span's context"
        );
    }
}

/// A stop with a turn, a long tool call and a health `Watch` in flight takes one drain
/// (turns and calls together), the grace and at most 3 s for the servers — not a drain
/// each and 3 s per server — and `Watch` sees NOT_SERVING first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_drains_turns_and_calls_in_one_window() {
    let llm =
        llm(json!({"default": {"tool_calls": [{"name": "sd_sleep", "arguments": {"ms": 30000}}]}}));
    let url = llm.base_url();
    let mut b = start(
        vec![stress("py", "sd", "", json!({}))],
        &[
            "--llm-url",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--drain-timeout-ms",
            "1500",
            "--shutdown-grace-ms",
            "500",
        ],
        &[],
    )
    .await;
    let tcp = logged_addr(&b, "server: listening on http://").await;
    let channel = tonic::transport::Endpoint::try_from(format!("http://{tcp}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut watch = HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    let mut chat_admin = Broker::admin_clone(&b);
    let chat = tokio::spawn(async move {
        let req = chat_admin.with_token(hearth_proto::v1::ChatRequest {
            message: "sleep".into(),
            ..Default::default()
        });
        let mut s = chat_admin.agent().chat(req).await.unwrap().into_inner();
        while let Ok(Some(_)) = s.message().await {}
    });
    let mut call_admin = Broker::admin_clone(&b);
    let call = tokio::spawn(async move {
        let req = call_admin.with_token(hearth_proto::v1::CallToolRequest {
            name: "sd_sleep".into(),
            args_json: json!({"ms": 30000}).to_string(),
            ..Default::default()
        });
        let _ = call_admin.client().call_tool(req).await;
    });
    // Both in flight in the plugin (the chat's through the scripted LLM first).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let started = std::time::Instant::now();
    b.stop_with(libc::SIGTERM);
    let took = started.elapsed();
    // 1.5 s drain + 0.5 s grace + SIGTERM + at most 3 s of servers, with slack.
    assert!(
        took < Duration::from_secs(8),
        "stop took {took:?}\n{}",
        b.log()
    );
    let mut saw_not_serving = false;
    while let Ok(Some(m)) = watch.message().await {
        saw_not_serving |= m.status == ServingStatus::NotServing as i32;
    }
    assert!(saw_not_serving);
    let _ = tokio::join!(chat, call);
}
