//! Host services through each SDK's typed API: the shared cases of
//! `tests/host_cases.json`, run by a plugin in Python (`tests/plugins/host_cases.py`),
//! Node (`tests/plugins/host_cases.js`), Rust (`sdk-rust/examples/host_cases.rs`) and Go
//! (`tests/plugins/go/cmd/host_cases`, built by the harness with `go build`).
//!
//! One broker per language (the cases expect absolute counts of graph memory, documents
//! and knowledge), each with three plugins of that language: the runner (every
//! capability), a peer that declares the setting `greeting` in `start()` (the target
//! of the cross-plugin settings calls; default capabilities) and a runner with
//! `"capabilities": []` that checks the refusals. The brokers have two LLM sources,
//! `alpha` and `beta`, that are never called.

use serde_json::{json, Value};

use crate::harness::{go_binary, repo, rust_binary, Broker, PluginDir};

/// LLM sources of the case brokers (nothing listens there; no chat is run).
pub(crate) const SOURCES: &str = r#"
[[sources]]
name = "alpha"
base_url = "http://127.0.0.1:9/v1"
model = "m"
priority = 1

[[sources]]
name = "beta"
base_url = "http://127.0.0.1:9/v1"
model = "m"
priority = 2
"#;

/// The case runner's capabilities: all but `settings_secrets` and `input_as_user`
/// (the cases check what is refused without them).
pub(crate) const ALL_CAPABILITIES: [&str; 7] = [
    "settings_cross",
    "settings_core",
    "memory",
    "knowledge",
    "mcp",
    "llm",
    "input",
];

pub(crate) fn cases_file() -> Value {
    let text = std::fs::read_to_string(repo().join("tests/host_cases.json")).unwrap();
    serde_json::from_str(&text).expect("tests/host_cases.json is JSON")
}

/// The case plugin of `lang` named `name` in `role` (runner, nocap, other).
pub(crate) fn case_plugin(
    lang: &str,
    name: &str,
    role: &str,
    peer: &str,
    caps: Option<&[&str]>,
) -> PluginDir {
    let mut manifest = match lang {
        "py" => json!({"runtime": "python", "entry": repo().join("tests/plugins/host_cases.py")}),
        "node" => json!({"runtime": "node", "entry": repo().join("tests/plugins/host_cases.js")}),
        "rust" => json!({"runtime": "exec", "entry": rust_binary("examples/host_cases")}),
        "go" => json!({"runtime": "exec", "entry": go_binary("host_cases")}),
        other => panic!("unknown language {other}"),
    };
    manifest["name"] = json!(name);
    manifest["env"] = json!({
        "HOST_CASES_ROLE": role,
        "HOST_CASES_OTHER": peer,
        "HOST_CASES_FILE": repo().join("tests/host_cases.json"),
    });
    // The case file sits outside the entry's folder: the sandbox grants it by name.
    manifest["sandbox"] = json!({"read": [repo().join("tests/host_cases.json")]});
    if let Some(caps) = caps {
        manifest["capabilities"] = json!(caps);
    }
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

/// Calls `<plugin>_run` and returns its report.
pub(crate) async fn report(b: &mut Broker, plugin: &str) -> Value {
    let tool = format!("{plugin}_run");
    let r = b
        .call_timeout(&tool, json!({}), 60_000)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e:?}\nbroker log:\n{}", b.log()));
    assert!(
        r.success,
        "{tool} failed: {}\nbroker log:\n{}",
        r.error,
        b.log()
    );
    let text = if r.data_json.is_empty() {
        &r.content
    } else {
        &r.data_json
    };
    serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{tool}: report is not JSON ({e}): {text}"))
}

/// Asserts each report ran all the steps of its section of the case file and none
/// failed; the message shows every report.
pub(crate) fn assert_clean(reports: &[(&Value, &str, &str, usize)]) {
    let mut problems = Vec::new();
    for (report, lang, section, want_total) in reports {
        let failed = report["failed"].as_array().map(Vec::len);
        if report["section"] != json!(section)
            || report["total"] != json!(want_total)
            || report["passed"] != json!(want_total)
            || failed != Some(0)
        {
            problems.push(format!(
                "{lang} {section}: {} of {want_total} steps in tests/host_cases.json passed \
                 (the report must run them all):\n{}",
                report["passed"],
                serde_json::to_string_pretty(report).unwrap()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Runs the cases and the refusals of `lang` in a broker of its own.
async fn run_cases(lang: &str) {
    let file = cases_file();
    let (cases, refusals) = (
        file["cases"].as_array().unwrap().len(),
        file["refusals"].as_array().unwrap().len(),
    );
    let (me, peer, nocap) = (
        format!("hc_{lang}"),
        format!("hc_{lang}_peer"),
        format!("hc_{lang}_nocap"),
    );
    let plugins = vec![
        case_plugin(lang, &peer, "other", "", None),
        case_plugin(lang, &me, "runner", &peer, Some(&ALL_CAPABILITIES)),
        case_plugin(lang, &nocap, "nocap", &peer, Some(&[])),
    ];
    let mut b = Broker::spawn_with_files(plugins, &[], &[("hearth.toml", SOURCES)]).await;
    for name in [&peer, &me, &nocap] {
        b.wait_ready(name).await;
    }
    let ran = report(&mut b, &me).await;
    let refused = report(&mut b, &nocap).await;
    assert_clean(&[
        (&ran, lang, "cases", cases),
        (&refused, lang, "refusals", refusals),
    ]);

    // The TextMemory appends of the runner are in the log, with the runner's marker.
    let text = b.text_memory();
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| l.contains(&format!("({me})")))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        (
            &lines[0]["role"],
            &lines[0]["timestamp"],
            &lines[0]["channel"]
        ),
        (&json!("user"), &json!(1_700_000_000), &json!("test")),
        "{text}"
    );
    assert!(
        lines[1]["timestamp"].as_i64().unwrap() > 1_700_000_000,
        "{text}"
    );
    // Refused calls were logged with the plugin and the capability.
    assert!(
        b.log().contains("capability `settings_core` not granted"),
        "{}",
        b.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_cases_through_the_python_sdk() {
    run_cases("py").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_cases_through_the_node_sdk() {
    run_cases("node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_cases_through_the_rust_sdk() {
    run_cases("rust").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_cases_through_the_go_sdk() {
    run_cases("go").await;
}
