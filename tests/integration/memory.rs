//! Memory in the pipeline and `hearth settings`: graph memory, documents and knowledge
//! recalled into the LLM's context before `pre_action` (not with `no_memory`), English
//! and Chinese; secrets masked by the CLI. The stores are written through the storage
//! API on the running broker's data dir (SQLite WAL allows a second connection), and
//! a knowledge file is dropped into `<data_dir>/knowledge/` by hand.

use hearth_broker::storage::{ConfigDef, Db, Doc, DocMemory, GraphMemory, Scope, Settings, Triple};
use hearth_proto::v1::ChatRequest;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::Broker;

/// The system messages of the last request the LLM got.
fn system_of_last(llm: &ScriptedLlm) -> Vec<String> {
    let last = llm.requests().last().cloned().unwrap();
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_documents_and_knowledge_reach_the_llm_context() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"steps": [], "default": {"content": "noted"}})).unwrap(),
    );
    let url = llm.base_url();
    let mut b = Broker::spawn_with_files(vec![], &["--llm-url", &url], &[]).await;
    b.wait_log("broker ready", std::time::Duration::from_secs(20))
        .await;
    let data = b.data_dir();
    let db = Db::open(&data).await.unwrap();
    GraphMemory::new(db.clone())
        .commit(vec![
            Triple::new("Alice", "likes", "coffee"),
            Triple::new("coffee", "grown_in", "Ethiopia"),
            Triple::new("Bob", "likes", "tea"),
            Triple::new("小明", "住在", "北京"),
        ])
        .await
        .unwrap();
    DocMemory::new(db.clone())
        .insert(Doc {
            id: "d1".into(),
            title: "Alice's order".into(),
            content: "Alice orders a flat white every morning.".into(),
            score: 0.0,
        })
        .await
        .unwrap();
    std::fs::create_dir_all(data.join("knowledge")).unwrap();
    std::fs::write(
        data.join("knowledge/天气.md"),
        "北京今天天气晴，明天下雨。Weather in Beijing: sunny today, rain tomorrow.",
    )
    .unwrap();

    b.chat("What does Alice like?", "ann").await;
    let system = system_of_last(&llm).join("\n");
    assert!(
        system.contains("- [memory 1.00] Alice likes coffee"),
        "{system}"
    );
    assert!(
        system.contains("- [memory 0.50] coffee grown_in Ethiopia"),
        "{system}"
    );
    assert!(!system.contains("Bob likes tea"), "{system}");
    assert!(system.contains("[document "), "{system}");
    assert!(
        system.contains("Alice's order: Alice orders a flat white"),
        "{system}"
    );

    // Chinese: a two-character word finds the entity and the hand-written entry.
    b.chat("小明住在哪里？北京天气怎么样", "ann").await;
    let system = system_of_last(&llm).join("\n");
    assert!(system.contains("[memory 1.00] 小明 住在 北京"), "{system}");
    let line = system
        .lines()
        .find(|l| l.starts_with("- [knowledge "))
        .unwrap_or_else(|| panic!("no knowledge item:\n{system}"));
    assert!(line.contains("天气: 北京今天天气晴"), "{line}");
    let score: f64 = line["- [knowledge ".len()..]
        .split(']')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(score > 0.0, "{line}");

    // no_memory: nothing recalled.
    let req = b.admin.with_token(ChatRequest {
        message: "What does Alice like?".into(),
        user_id: "ann".into(),
        no_memory: true,
        ..Default::default()
    });
    let mut stream = b.admin.agent().chat(req).await.unwrap().into_inner();
    while stream.message().await.unwrap().is_some() {}
    let system = system_of_last(&llm).join("\n");
    assert!(!system.contains("[memory"), "{system}");

    // `hearth settings` masks secrets, everywhere it prints values.
    let settings = Settings::new(db);
    let qq = Scope::Plugin("qq".into());
    settings
        .register_def(
            &qq,
            ConfigDef {
                key: "token".into(),
                r#type: "string".into(),
                display_name: "QQ token".into(),
                secret: true,
                default: Some(json!("s3cret-default")),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    settings.set(&qq, "port", json!(3001)).await.unwrap();
    let (code, out, err) = b.cli(&["settings", "list", "--plugin", "qq", "--json"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed, json!({"port": 3001, "token": "••••••"}));
    let (code, out, _) = b.cli(&["settings", "get", "token", "--plugin", "qq"]);
    assert_eq!((code, out.trim()), (0, "\"••••••\""));
    let (code, out, _) = b.cli(&["settings", "defs", "--plugin", "qq"]);
    assert_eq!(code, 0);
    assert!(out.contains("[secret]") && !out.contains("s3cret"), "{out}");
    let (code, out, err) = b.cli(&["settings", "set", "port", "3002", "--plugin", "qq"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "set port in config_qq");
    assert_eq!(settings.get(&qq, "port").await.unwrap(), json!(3002));
    let (code, _, err) = b.cli(&["settings", "get", "nope"]);
    assert_eq!(code, 3, "not found");
    assert!(err.contains("no `nope` in config"), "{err}");
    assert!(!b.log().contains("s3cret"), "a secret reached the log");
}

/// A broker SIGKILLed in the middle of a stream of `Settings.Set` and `Memory.Commit`
/// calls from a plugin loses no write it acknowledged: every pair the plugin saw
/// answered is in `hearth.db` when it is opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_broker_loses_no_acknowledged_write() {
    no_acknowledged_write_lost(None).await;
}

/// The durability check: a broker (its state in PostgreSQL at `db_url`, else in
/// `hearth.db`) is SIGKILLed while a plugin writes, then every acknowledged write is
/// looked for.
pub(crate) async fn no_acknowledged_write_lost(db_url: Option<&str>) {
    let acks = tempfile::NamedTempFile::new().unwrap();
    let plugin = crate::harness::PluginDir {
        dir: "durable".into(),
        manifest: json!({"name": "durable", "runtime": "python",
            "entry": crate::harness::repo().join("tests/plugins/durable_writer.py"),
            "env": {"ACK_FILE": acks.path()}, "sandbox": {"write": [acks.path()]}}),
    };
    let toml = db_url.map_or(String::new(), |url| format!("[storage]\nurl = \"{url}\"\n"));
    let mut b = Broker::spawn_with_files(vec![plugin], &[], &[("hearth.toml", &toml)]).await;
    b.wait_ready("durable").await;
    let read = || -> Vec<u64> {
        std::fs::read_to_string(acks.path())
            .unwrap()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    };
    let started = std::time::Instant::now();
    while read().len() < 150 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the plugin acknowledged only {} writes:\n{}",
            read().len(),
            b.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let data = b.data_dir();
    b.stop_with(libc::SIGKILL); // mid-stream
                                // The reaper stops the plugin; its ack file is final once it is gone.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let acked = read();
    assert!(acked.len() >= 150);
    let db = match db_url {
        Some(url) => Db::postgres(url).await.unwrap(),
        None => Db::open(&data).await.unwrap(),
    };
    let settings = Settings::new(db.clone());
    let graph = GraphMemory::new(db);
    let scope = Scope::Plugin("durable".into());
    for &i in &acked {
        assert_eq!(
            settings.get(&scope, &format!("k{i}")).await.unwrap(),
            json!(i),
            "set {i} was acknowledged but is lost"
        );
        let g = graph.recall([format!("s{i}")], 1).await.unwrap();
        assert!(
            g.relations.iter().any(|r| r.target_name == format!("o{i}")),
            "commit {i} was acknowledged but is lost"
        );
    }
}
