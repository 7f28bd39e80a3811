//! Issue 18: several brokers sharing one PostgreSQL database — a real PostgreSQL
//! cluster (`hearth_broker::testing::postgres`, initdb into /tmp, a loopback port), two
//! real brokers on it with the scripted LLM, conversations moving between them,
//! brokers killed and frozen mid-turn.

use std::time::{Duration, Instant};

use hearth_broker::cli::AdminConn;
use hearth_broker::testing::postgres::PgCluster;
use hearth_proto::v1::chat_event::Event;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};

use crate::harness::{repo, Broker, PluginDir};

/// An LLM that echoes the last user message, and answers messages containing "slow"
/// after `slow_ms`.
fn echo_llm(slow_ms: u64) -> ScriptedLlm {
    ScriptedLlm::start(
        Script::from_value(json!({
            "steps": [{"match": "slow", "delay_ms": slow_ms, "content": "slow answer"}],
            "default": {"content": "echo: {user}"}
        }))
        .unwrap(),
    )
}

/// A broker on `db_url` (in its hearth.toml, so `hearth settings` on its data dir uses
/// it too) with `plugins`, the lease time to live `ttl_s`, and the scripted `llm`.
async fn broker(db_url: &str, ttl_s: f64, llm: &ScriptedLlm, plugins: Vec<PluginDir>) -> Broker {
    broker_with(db_url, ttl_s, llm, plugins, &[]).await
}

/// [`broker`] with more `hearth run` arguments.
async fn broker_with(
    db_url: &str,
    ttl_s: f64,
    llm: &ScriptedLlm,
    plugins: Vec<PluginDir>,
    args: &[&str],
) -> Broker {
    let toml = format!("[storage]\nurl = \"{db_url}\"\nlease_ttl_s = {ttl_s}\n");
    let names: Vec<String> = plugins
        .iter()
        .map(|p| p.manifest["name"].as_str().unwrap().to_string())
        .collect();
    let url = llm.base_url();
    let mut all = vec!["--llm-url", url.as_str()];
    all.extend_from_slice(args);
    let mut b = Broker::spawn_with_files(plugins, &all, &[("hearth.toml", &toml)]).await;
    for name in names {
        b.wait_ready(&name).await;
    }
    b
}

/// One chat exchange: its final event, or the stream's error.
async fn chat(
    admin: &mut AdminConn,
    message: &str,
    user: &str,
) -> Result<(String, String), String> {
    chat_noting_waits(admin, message, user).await.0
}

/// [`chat`], and the `held_by` of every `Queued` event on the way (the brokers this
/// turn waited for).
async fn chat_noting_waits(
    admin: &mut AdminConn,
    message: &str,
    user: &str,
) -> (Result<(String, String), String>, Vec<String>) {
    let mut held_by = Vec::new();
    let req = admin.with_token(hearth_proto::v1::ChatRequest {
        message: message.into(),
        user_id: user.into(),
        channel: "test".into(),
        ..Default::default()
    });
    let mut stream = match admin.agent().chat(req).await {
        Ok(s) => s.into_inner(),
        Err(e) => return (Err(e.message().to_string()), held_by),
    };
    loop {
        match stream.message().await {
            Ok(Some(ev)) => match ev.event {
                Some(Event::Final(f)) => return (Ok((f.text, f.error)), held_by),
                Some(Event::Queued(q)) if !q.held_by.is_empty() => held_by.push(q.held_by),
                _ => {}
            },
            Ok(None) => {
                return (
                    Err("the stream ended without a final event".into()),
                    held_by,
                )
            }
            Err(e) => return (Err(format!("{}: {}", e.code(), e.message())), held_by),
        }
    }
}

/// The user messages of the LLM request that answered `message` (the history the
/// broker sent with it, oldest first, the message itself last).
fn history_sent_with(llm: &ScriptedLlm, message: &str) -> Vec<String> {
    let request = llm
        .requests()
        .into_iter()
        .rev()
        .find(|r| {
            r["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m["content"] == message)
        })
        .unwrap_or_else(|| panic!("no LLM request for {message:?}"));
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn cluster() -> Option<&'static PgCluster> {
    PgCluster::shared_durable()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_share_conversations_and_a_killed_brokers_conversation_goes_on_at_the_other() {
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let llm = echo_llm(60_000);
    let mut a = broker(&url, 15.0, &llm, vec![]).await;
    let mut b = broker(&url, 15.0, &llm, vec![]).await;

    // Conversations on both brokers at once, and one conversation going from a to b.
    let (mut aa, mut ba) = (Broker::admin_clone(&a), Broker::admin_clone(&b));
    let (x, y) = tokio::join!(
        chat(&mut aa, "hello from alice", "alice"),
        chat(&mut ba, "hello from bob", "bob")
    );
    assert_eq!(x.unwrap().0, "echo: hello from alice");
    assert_eq!(y.unwrap().0, "echo: hello from bob");
    let got = chat(&mut b.admin, "second from alice", "alice")
        .await
        .unwrap();
    assert_eq!(got.0, "echo: second from alice");
    assert_eq!(
        history_sent_with(&llm, "second from alice"),
        [
            "hello from alice",
            "echo: hello from alice",
            "second from alice"
        ],
        "broker b sees the history broker a wrote"
    );

    // Broker a is killed in the middle of a turn of alice's conversation.
    let running = tokio::spawn(async move { chat(&mut aa, "a slow one", "alice").await });
    let t0 = Instant::now();
    while !llm
        .requests()
        .iter()
        .any(|r| r.to_string().contains("a slow one"))
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", a.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.stop_with(libc::SIGKILL);
    let err = running
        .await
        .unwrap()
        .expect_err("its broker died mid-turn");
    assert!(!err.is_empty());

    // The next message of that conversation is served by b at once (a's lease goes
    // with its session), with the history a had stored; the unfinished turn left nothing.
    let t0 = Instant::now();
    let got = chat(&mut b.admin, "after the crash", "alice")
        .await
        .unwrap();
    assert_eq!(got, ("echo: after the crash".to_string(), String::new()));
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "waited {:?} for a dead broker's lease (time to live 15 s)\n{}",
        t0.elapsed(),
        b.log()
    );
    assert_eq!(
        history_sent_with(&llm, "after the crash"),
        [
            "hello from alice",
            "echo: hello from alice",
            "second from alice",
            "echo: second from alice",
            "after the crash"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_loses_its_conversation_after_the_lease_and_cannot_write_into_it() {
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let llm = echo_llm(2_500);
    let mut a = broker(&url, 2.0, &llm, vec![]).await;
    let mut b = broker(&url, 2.0, &llm, vec![]).await;
    assert_eq!(
        chat(&mut a.admin, "first", "carol").await.unwrap().0,
        "echo: first"
    );
    // a runs a slow turn and freezes (SIGSTOP) before it ends.
    let mut aa = Broker::admin_clone(&a);
    let running = tokio::spawn(async move { chat(&mut aa, "slow on a", "carol").await });
    let t0 = Instant::now();
    while !llm
        .requests()
        .iter()
        .any(|r| r.to_string().contains("slow on a"))
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", a.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = a.child.as_ref().unwrap().id() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // b waits for the lease (a's session is alive, only frozen), gets it once it
    // expires, and serves.
    let t0 = Instant::now();
    let (got, waited_for) = chat_noting_waits(&mut b.admin, "on b meanwhile", "carol").await;
    let got = got.unwrap();
    let waited = t0.elapsed();
    // b's client was told whom it waits for.
    assert_eq!(waited_for.len(), 1, "{waited_for:?}");
    assert!(
        waited_for[0].contains(&format!("-{pid}-")),
        "{waited_for:?} is not broker a (pid {pid})"
    );
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(got.0, "echo: on b meanwhile");
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(8),
        "b waited {waited:?} for a lease of 2 s"
    );
    // a wakes up and finishes its turn, but may not store it: its lease is gone, and
    // its client is told that the reply was not kept.
    let (_, error) = running.await.unwrap().expect("the late turn's final event");
    assert!(
        error.contains("not stored") && error.contains("no longer holds its lease"),
        "{error}"
    );
    a.wait_log("no longer holds its lease", Duration::from_secs(20))
        .await;
    assert_eq!(
        chat(&mut b.admin, "and then", "carol").await.unwrap().0,
        "echo: and then"
    );
    assert_eq!(
        history_sent_with(&llm, "and then"),
        [
            "first",
            "echo: first",
            "on b meanwhile",
            "echo: on b meanwhile",
            "and then"
        ],
        "the frozen broker's late turn was not written into the conversation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_changed_through_one_broker_is_seen_by_a_plugin_of_the_other() {
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let llm = echo_llm(0);
    let probe = PluginDir {
        dir: "probe".into(),
        manifest: json!({"name": "probe", "runtime": "python",
            "entry": repo().join("tests/plugins/host_probe.py")}),
    };
    // Both brokers take their admin token from one file, as behind a load balancer.
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, "0123456789abcdef0123456789abcdef-shared").unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let token_arg = token_file.to_str().unwrap();
    let a = broker_with(&url, 15.0, &llm, vec![], &["--admin-token-file", token_arg]).await;
    let mut b = broker_with(
        &url,
        15.0,
        &llm,
        vec![probe],
        &["--admin-token-file", token_arg],
    )
    .await;
    for broker in [&a, &b] {
        assert_eq!(
            std::fs::read_to_string(broker.data_dir().join("admin.token")).unwrap(),
            "0123456789abcdef0123456789abcdef-shared"
        );
    }
    // `hearth settings` on a's data dir writes to the shared database.
    let (code, out, err) = a.cli(&["settings", "set", "--plugin", "probe", "colour", "\"blue\""]);
    assert_eq!(code, 0, "{out}{err}");
    let got = b
        .call(
            "probe_host",
            json!({"call": "settings.get", "args": ["colour"], "kwargs": {}}),
        )
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&got.content).unwrap();
    assert_eq!(answer, json!({"ok": "blue"}), "{}", b.log());
    // And back: a set by b's plugin is read on a's side.
    b.call(
        "probe_host",
        json!({"call": "settings.set", "args": ["size", 3], "kwargs": {}}),
    )
    .await
    .unwrap();
    let (code, out, err) = a.cli(&["settings", "get", "--plugin", "probe", "size"]);
    assert_eq!((code, out.trim()), (0, "3"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_commands_use_the_brokers_database_or_name_it_and_check_changes_nothing() {
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let llm = echo_llm(0);
    let llm_url = llm.base_url();
    // The database given on the broker's command line only, not in its hearth.toml.
    let b = Broker::spawn_with_files(vec![], &["--llm-url", &llm_url, "--storage-url", &url], &[])
        .await;
    // (The admin socket may answer before the agent's storage is open.)
    b.wait_log("storage: PostgreSQL", Duration::from_secs(20))
        .await;
    // Without it, `hearth settings` refuses and names the database, creating nothing.
    let (code, _, err) = b.cli(&["settings", "set", "colour", "\"red\""]);
    assert_eq!(code, 1, "{err}\n{}", b.log());
    assert!(
        err.contains("keeps its state in PostgreSQL")
            && err.contains(&url)
            && err.contains("--storage-url"),
        "{err}"
    );
    assert!(!b.data_dir().join("hearth.db").exists());
    // With it (before or after the operation), the broker's database.
    let (code, _, err) = b.cli(&[
        "settings",
        "--storage-url",
        &url,
        "set",
        "colour",
        "\"red\"",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = b.cli(&["settings", "get", "colour", "--storage-url", &url]);
    assert_eq!((code, out.trim()), (0, "\"red\""), "{err}");
    let db = url.rsplit('/').next().unwrap();
    assert_eq!(
        pg.psql(db, "SELECT value FROM config WHERE key = 'colour'"),
        "\"red\""
    );
    // `storage check` reads only: an empty database stays empty.
    let empty = pg.database();
    let (code, out, err) = b.cli(&["storage", "check", "--storage-url", &empty]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("no Hearth schema"), "{out}");
    let empty_db = empty.rsplit('/').next().unwrap();
    assert_eq!(
        pg.psql(
            empty_db,
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ),
        "0"
    );
    // A malformed URL names its bad part.
    for (bad, says) in [
        ("postgres://hearth@127.0.0.1:notaport/x", "port `notaport`"),
        ("mysql://hearth@127.0.0.1/x", "scheme `mysql://`"),
        (
            "postgres://hearth@127.0.0.1/x?sslmode=bogus",
            "sslmode `bogus`",
        ),
    ] {
        let (code, _, err) = b.cli(&["storage", "check", "--storage-url", bad]);
        assert!(code != 0 && err.contains(says), "{bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooldowns_hold_across_brokers_and_a_confirmation_may_reach_either_broker() {
    use crate::inject::{finished, lz};
    use hearth_proto::v1::{ChatRequest, ConfirmResponse};
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let step =
        |m: &str, calls: Value| json!({"match": m, "after_tool": false, "tool_calls": calls});
    let answer = |m: &str| json!({"match": m, "after_tool": true, "content": "{tool_results}"});
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"steps": [
            step("cool", json!([{"name": "cool"}])), answer("cool"),
            step("ask", json!([{"name": "ask", "arguments": {"what": "x"}}])), answer("ask"),
        ]}))
        .unwrap(),
    );
    let plugins = || {
        vec![
            lz("py", "cool", json!({"cooldown": 3600}), json!([])),
            lz("py", "ask", json!({"confirm": true}), json!([])),
        ]
    };
    let mut a = broker(&url, 15.0, &llm, plugins()).await;
    let mut b = broker(&url, 15.0, &llm, plugins()).await;

    // A cooldown started on a holds on b.
    let f = finished(&a.chat("cool", "ann").await);
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
    assert!(f[0].1, "{f:?}");

    // A confirmation asked by a turn on a is answered through b.
    let req = a.admin.with_token(ChatRequest {
        message: "ask".into(),
        user_id: "ann".into(),
        channel: "test".into(),
        ..Default::default()
    });
    let mut stream = a.admin.agent().chat(req).await.unwrap().into_inner();
    let mut events = Vec::new();
    while let Some(ev) = stream.message().await.unwrap() {
        if let Some(Event::ConfirmRequest(c)) = &ev.event {
            let yes = b.admin.with_token(ConfirmResponse {
                confirm_id: c.confirm_id.clone(),
                approved: true,
            });
            if let Err(e) = b.admin.agent().confirm(yes).await {
                panic!("{e}\n--- a:\n{}\n--- b:\n{}", a.log(), b.log());
            }
            // Answered already: refused on either broker.
            let again = b.admin.with_token(ConfirmResponse {
                confirm_id: c.confirm_id.clone(),
                approved: true,
            });
            let err = b.admin.agent().confirm(again).await.unwrap_err();
            assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        }
        events.extend(ev.event);
    }
    let f = finished(&events);
    assert!(f[0].1 && f[0].2.contains("ask ran #1"), "{f:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_data_dir_migrates_into_postgres_and_a_broker_goes_on_from_there() {
    use hearth_broker::storage::{
        ConversationKey, Db, Doc, DocMemory, GraphMemory, Knowledge, Scope, Settings, TextMemory,
        TextMemoryOptions, Triple,
    };
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let llm = echo_llm(0);
    // A broker on SQLite leaves history, TextMemory and settings behind …
    let mut old = Broker::spawn(vec![], &["--llm-url", &llm.base_url()]).await;
    assert_eq!(
        chat(&mut old.admin, "remember the 北京 trip", "dave")
            .await
            .unwrap()
            .0,
        "echo: remember the 北京 trip"
    );
    let data = old.data_dir();
    let (code, _, err) = old.cli(&["settings", "set", "--plugin", "qq", "token", "\"t0k3n\""]);
    assert_eq!(code, 0, "{err}");
    // `migrate` refuses while the broker runs.
    let (code, _, err) = old.cli(&["storage", "migrate", "--to", &url]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("stop it first"), "{err}");
    old.stop_with(libc::SIGTERM);
    // … and graph memory, a document and a Knowledge file.
    {
        let db = Db::open(&data).await.unwrap();
        GraphMemory::new(db.clone())
            .commit(vec![Triple::new("dave", "visited", "北京")])
            .await
            .unwrap();
        DocMemory::new(db.clone())
            .insert(Doc {
                id: "trip".into(),
                title: "北京之行".into(),
                content: "我们去了故宫和长城".into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    std::fs::create_dir_all(data.join("knowledge")).unwrap();
    std::fs::write(
        data.join("knowledge/wifi.md"),
        "The guest wifi password is 4321.",
    )
    .unwrap();

    let (code, out, err) = old.cli(&["storage", "migrate", "--to", &url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("conversation_messages"), "{out}");
    // A second run refuses a database that holds data, unless told to replace it.
    let (code, _, err) = old.cli(&["storage", "migrate", "--to", &url]);
    assert_eq!(code, 1);
    assert!(err.contains("already holds Hearth data"), "{err}");
    let (code, out, err) = old.cli(&["storage", "migrate", "--to", &url, "--replace"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = old.cli(&["storage", "check", "--storage-url", &url]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("postgresql") && out.contains("schema version"),
        "{out}"
    );

    // Everything is there on PostgreSQL.
    let db = Db::postgres(&url).await.unwrap();
    let settings = Settings::new(db.clone());
    assert_eq!(
        settings
            .get(&Scope::Plugin("qq".into()), "token")
            .await
            .unwrap(),
        json!("t0k3n")
    );
    let graph = GraphMemory::new(db.clone())
        .recall(["dave"], 1)
        .await
        .unwrap();
    assert!(
        graph.relations.iter().any(|r| r.target_name == "北京"),
        "{graph:?}"
    );
    let docs = DocMemory::new(db.clone()).query("长城", 5).await.unwrap();
    assert_eq!(
        docs.first().map(|d| d.id.as_str()),
        Some("trip"),
        "{docs:?}"
    );
    let knowledge = Knowledge::open(db.clone(), &data).await.unwrap();
    let found = knowledge.search("wifi password", 5).await.unwrap();
    assert_eq!(
        found.first().map(|k| k.name.as_str()),
        Some("wifi"),
        "{found:?}"
    );
    let log = TextMemory::postgres(db.clone(), TextMemoryOptions::default())
        .await
        .unwrap();
    let today = log.events_of_day(log.today()).await.unwrap();
    assert!(
        today.iter().any(|e| e.content == "remember the 北京 trip"),
        "{today:?}"
    );
    let key = ConversationKey {
        user_id: "dave".into(),
        group_id: None,
        channel: "test".into(),
    };
    let history: Vec<Value> = hearth_broker::storage::Conversations::new(db, Default::default())
        .history(&key)
        .await
        .unwrap();
    assert_eq!(history.len(), 2, "{history:?}");

    // A broker on the database goes on with the conversation, and a folder of
    // Knowledge files is imported into the database its data dir names.
    let mut new = broker(&url, 15.0, &llm, vec![]).await;
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("parking.md"), "停车场在B2层").unwrap();
    let dir = folder.path().to_str().unwrap();
    let (code, out, err) = new.cli(&["storage", "import-knowledge", dir]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("added    parking") && out.contains("1 added"),
        "{out}"
    );
    let found = knowledge.search("停车场", 5).await.unwrap();
    assert_eq!(
        found.first().map(|k| k.name.as_str()),
        Some("parking"),
        "{found:?}"
    );
    let (code, out, _) = new.cli(&["storage", "import-knowledge", dir, "--prune"]);
    assert_eq!(code, 0);
    assert!(out.contains("removed  wifi"), "{out}");
    assert_eq!(
        chat(&mut new.admin, "and now?", "dave").await.unwrap().0,
        "echo: and now?"
    );
    assert_eq!(
        history_sent_with(&llm, "and now?"),
        [
            "remember the 北京 trip",
            "echo: remember the 北京 trip",
            "and now?"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_services_pass_the_shared_cases_on_postgres() {
    use crate::host::{assert_clean, case_plugin, cases_file, report, ALL_CAPABILITIES, SOURCES};
    use hearth_broker::storage::{Db, TextMemory, TextMemoryOptions};
    // The cases of tests/host_cases.json (settings, memory, TextMemory, DocMemory,
    // knowledge, LLM sources, input, MCP, and every capability refusal) with the
    // broker's state in PostgreSQL.
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let file = cases_file();
    let (cases, refusals) = (
        file["cases"].as_array().unwrap().len(),
        file["refusals"].as_array().unwrap().len(),
    );
    let plugins = vec![
        case_plugin("py", "hc_peer", "other", "", None),
        case_plugin("py", "hc", "runner", "hc_peer", Some(&ALL_CAPABILITIES)),
        case_plugin("py", "hc_nocap", "nocap", "hc_peer", Some(&[])),
    ];
    let toml = format!("{SOURCES}\n[storage]\nurl = \"{url}\"\n");
    let mut b = Broker::spawn_with_files(plugins, &[], &[("hearth.toml", &toml)]).await;
    for name in ["hc_peer", "hc", "hc_nocap"] {
        b.wait_ready(name).await;
    }
    let ran = report(&mut b, "hc").await;
    let refused = report(&mut b, "hc_nocap").await;
    assert_clean(&[
        (&ran, "py on PostgreSQL", "cases", cases),
        (&refused, "py on PostgreSQL", "refusals", refusals),
    ]);
    // The runner's TextMemory appends are rows of the database, not files.
    let log = TextMemory::postgres(
        Db::postgres(&url).await.unwrap(),
        TextMemoryOptions::default(),
    )
    .await
    .unwrap();
    let today = log.events_of_day(log.today()).await.unwrap();
    assert!(
        today.iter().filter(|e| e.content.contains("(hc)")).count() == 2,
        "{today:?}"
    );
    let files = std::fs::read_dir(b.data_dir().join("memory/text")).map_or(0, |d| d.count());
    assert_eq!(files, 0, "TextMemory files written beside the database");
}

/// As `memory::a_sigkilled_broker_loses_no_acknowledged_write`, on PostgreSQL: a
/// broker SIGKILLed in the middle of a plugin's stream of `Settings.Set` and
/// `Memory.Commit` calls lost none it acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_broker_on_postgres_loses_no_acknowledged_write() {
    let Some(pg) = cluster() else { return };
    crate::memory::no_acknowledged_write_lost(Some(&pg.database())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_is_checked_against_a_private_ca() {
    use crate::nats::TestCa;
    use hearth_broker::storage::{Db, Scope, Settings};
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(dir.path(), "pg-test-ca");
    let (cert, key) = ca.issue("pg-server", &["IP:127.0.0.1", "DNS:localhost"]);
    let Some(pg) = PgCluster::start_tls(&cert, &key) else {
        return;
    };
    let url = format!("{}?sslmode=require", pg.database());
    // A server certificate from a CA nobody said to trust: refused, saying why.
    let err = Db::postgres(&url).await.unwrap_err().to_string();
    assert!(err.contains("certificate"), "{err}");
    // With `[storage] ca`: TLS, and the database works.
    let db = Db::postgres_with(&url, Some(&ca.cert())).await.unwrap();
    Settings::new(db)
        .set(&Scope::Core, "over", json!("tls"))
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(
        data.path().join("hearth.toml"),
        format!(
            "[storage]\nurl = \"{url}\"\nca = {:?}\n",
            ca.cert().display().to_string()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hearth"))
        .arg("--data-dir")
        .arg(data.path())
        .args(["settings", "get", "over"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "\"tls\"");
    // A `ca` that holds no certificate is named.
    std::fs::write(dir.path().join("empty.pem"), "nothing here\n").unwrap();
    let err = Db::postgres_with(&url, Some(&dir.path().join("empty.pem")))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[storage] ca") && err.contains("no PEM certificate"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_on_one_postgres_and_one_nats_serve_a_nodes_plugin_alike() {
    use crate::nats::NatsServer;
    use crate::remote::{wait_nodes, Node};
    // A plugin on a plugin host: its calls come from either broker, and its host calls
    // (relayed over NATS to whichever broker takes them) land in the one database.
    let Some(pg) = cluster() else { return };
    let url = pg.database();
    let nats = NatsServer::plain();
    let probe = PluginDir {
        dir: "probe".into(),
        manifest: json!({"name": "probe", "runtime": "python",
            "entry": repo().join("tests/plugins/host_probe.py")}),
    };
    let _node = Node::spawn(nats.url(), "a", "127.0.0.2", &[probe]);
    let llm = echo_llm(0);
    let toml = |id: &str| {
        format!(
            "[storage]\nurl = \"{url}\"\n[nats]\nname = \"{id}\"\nlocal_address = \"127.0.0.1\"\n"
        )
    };
    let spawn = |id: &'static str| {
        let toml = toml(id);
        let llm_url = llm.base_url();
        let nats_url = nats.url().to_string();
        async move {
            Broker::spawn_with_files(
                vec![],
                &["--llm-url", &llm_url, "--nats", &nats_url],
                &[("hearth.toml", &toml)],
            )
            .await
        }
    };
    let mut b1 = spawn("b1").await;
    let mut b2 = spawn("b2").await;
    wait_nodes(&mut b1, "probe", &["a"]).await;
    wait_nodes(&mut b2, "probe", &["a"]).await;
    for (i, b) in [&mut b1, &mut b2].into_iter().enumerate() {
        let set = json!({"call": "settings.set", "args": [format!("k{i}"), i], "kwargs": {}});
        let got = b.call("probe_host", set).await.unwrap();
        assert!(got.success, "{got:?}");
    }
    // Both writes are in the one database, whichever broker relayed them.
    for b in [&mut b1, &mut b2] {
        for i in 0..2 {
            let get = json!({"call": "settings.get", "args": [format!("k{i}")], "kwargs": {}});
            let got = b.call("probe_host", get).await.unwrap();
            let answer: Value = serde_json::from_str(&got.content).unwrap();
            assert_eq!(answer, json!({"ok": i}), "{}", b.log());
        }
    }
    // And the conversations of both brokers are one service.
    assert_eq!(
        chat(&mut b1.admin, "hi from erin", "erin").await.unwrap().0,
        "echo: hi from erin"
    );
    assert_eq!(
        chat(&mut b2.admin, "again from erin", "erin")
            .await
            .unwrap()
            .0,
        "echo: again from erin"
    );
    assert_eq!(
        history_sent_with(&llm, "again from erin"),
        ["hi from erin", "echo: hi from erin", "again from erin"]
    );
}
