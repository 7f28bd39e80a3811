//! The session protocol, with an in-test plugin served by `serve_with`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hearth_plugin::proto::v1::{self as pb, host_message::Msg as In, plugin_message::Msg as Out};
use hearth_plugin::{
    async_trait, serve_with, Args, BoxError, CallContext, Error, Plugin, PluginConfig,
    PluginMetadata, Registrar, ServeConfig, Tool, ToolDef, ToolDefinition, ToolResult,
};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use hearth_plugin::testing::InjectKind;

use crate::broker::{Broker, Session, STEP};

/// What the test plugin reports back to the test.
#[derive(Default)]
struct Probe {
    init_name: std::sync::Mutex<String>,
    greet_executions: AtomicUsize,
    stopped: AtomicBool,
    /// Released by the test to finish `t_block` calls.
    release: Notify,
    /// `t_wait_cancel` events: ("started" | "cancelled" | "dropped", call id).
    events: std::sync::Mutex<Option<mpsc::UnboundedSender<(&'static str, u64)>>>,
}

impl Probe {
    fn event(&self, what: &'static str, call_id: u64) {
        if let Some(tx) = &*self.events.lock().unwrap() {
            let _ = tx.send((what, call_id));
        }
    }
}

/// Cyrene-style tool with a validate step.
struct Greet(Arc<Probe>);

#[async_trait]
impl Tool for Greet {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "t_greet".into(),
            description: "greets".into(),
            parameters: json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        }
    }

    fn validate(&self, args: &Args) -> Result<(), BoxError> {
        match args.get("name") {
            Some(Value::String(s)) if !s.is_empty() => Ok(()),
            _ => Err("`name` must be a non-empty string".into()),
        }
    }

    async fn execute(&self, ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        self.0.greet_executions.fetch_add(1, Ordering::SeqCst);
        let name = args["name"].as_str().unwrap();
        if name == "error" {
            return Err(format!("{} cannot greet {name}", ctx.tool()).into());
        }
        Ok(ToolResult::ok(format!("hello {name}")).with_data(json!({"greeted": name})))
    }
}

struct Panicker;

#[async_trait]
impl Tool for Panicker {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "t_panic".into(),
            description: "panics".into(),
            parameters: json!({"type": "object"}),
        }
    }

    async fn execute(&self, _ctx: &CallContext, _args: Args) -> Result<ToolResult, BoxError> {
        panic!("boom at {}", 42)
    }
}

/// Signals "dropped" when the handler's future is dropped (task aborted).
struct DropSignal(Arc<Probe>, u64);

impl Drop for DropSignal {
    fn drop(&mut self) {
        self.0.event("dropped", self.1);
    }
}

struct TestPlugin(Arc<Probe>);

#[async_trait]
impl Plugin for TestPlugin {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "testplug".into(),
            version: "9.9.9".into(),
            author: "tester".into(),
            description: "plugin under test".into(),
        }
    }

    async fn init(&mut self, config: &PluginConfig) -> Result<(), BoxError> {
        *self.0.init_name.lock().unwrap() = config.plugin.clone();
        Ok(())
    }

    async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
        let def = |d: &str| ToolDef {
            description: d.into(),
            parameters: json!({"type": "object"}),
            ..Default::default()
        };
        host.register_tool("t_echo", def("echo"), |args: Value| async move {
            Ok::<_, String>(args)
        })?;
        host.register_tool("t_text", def("text"), |args: Value| async move {
            Ok::<_, String>(Value::String(format!("text:{}", args["x"])))
        })?;
        host.register_tool("t_weather", def("weather"), |args: Value| async move {
            if args["city"] == "atlantis" {
                return Ok::<_, String>(
                    json!({"isError": true, "content": "no such city: atlantis"}),
                );
            }
            Ok(json!({"city": args["city"], "temp": 25}))
        })?;
        host.register_tool("t_fail", def("fails"), |_args: Value| async move {
            Err::<Value, _>("backend unreachable")
        })?;
        host.register_tool(
            "t_sleep",
            def("sleeps ms then echoes i"),
            |args: Value| async move {
                tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
                Ok::<_, String>(json!({"i": args["i"]}))
            },
        )?;
        let probe = self.0.clone();
        host.register_tool("t_block", def("waits for the test"), move |_args: Value| {
            let probe = probe.clone();
            async move {
                probe.release.notified().await;
                Ok::<_, String>(Value::String("released".into()))
            }
        })?;
        let probe = self.0.clone();
        host.register_tool_with_context(
            "t_wait_cancel",
            def("waits for cancel"),
            move |ctx: CallContext, _args| {
                let probe = probe.clone();
                async move {
                    let id = ctx.call_id();
                    let _guard = DropSignal(probe.clone(), id);
                    let token = ctx.cancellation_token().clone();
                    let watcher = probe.clone();
                    tokio::spawn(async move {
                        token.cancelled().await;
                        watcher.event("cancelled", id);
                    });
                    probe.event("started", id);
                    std::future::pending::<()>().await;
                    Ok::<Value, String>(Value::Null)
                }
            },
        )?;
        Ok(())
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(Greet(self.0.clone())), Arc::new(Panicker)]
    }

    async fn stop(&mut self) -> Result<(), BoxError> {
        self.0.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }
}

struct Running {
    broker: Broker,
    session: Session,
    probe: Arc<Probe>,
    events: mpsc::UnboundedReceiver<(&'static str, u64)>,
    serve: JoinHandle<Result<(), Error>>,
}

/// Starts a Unix-socket broker and the test plugin; returns after the handshake.
async fn start() -> (Running, pb::Hello, pb::Register) {
    start_on(Broker::unix()).await
}

async fn start_on(mut broker: Broker) -> (Running, pb::Hello, pb::Register) {
    let probe = Arc::new(Probe::default());
    let (tx, events) = mpsc::unbounded_channel();
    *probe.events.lock().unwrap() = Some(tx);
    let config = ServeConfig::new(broker.addr.clone(), broker.token.clone(), "testplug");
    let serve = tokio::spawn(serve_with(TestPlugin(probe.clone()), config));
    let mut session = broker.session().await;
    let (hello, register) = session.handshake().await;
    (
        Running {
            broker,
            session,
            probe,
            events,
            serve,
        },
        hello,
        register,
    )
}

impl Running {
    async fn event(&mut self) -> (&'static str, u64) {
        tokio::time::timeout(STEP, self.events.recv())
            .await
            .expect("no event in time")
            .unwrap()
    }

    /// Sends Shutdown and checks serve returns Ok after stop().
    async fn shutdown(self) {
        self.session.send(In::Shutdown(pb::Shutdown {
            grace_ms: 2000,
            reason: "test over".into(),
        }));
        let res = tokio::time::timeout(Duration::from_secs(2), self.serve)
            .await
            .expect("serve did not return within grace");
        res.unwrap().expect("serve failed after Shutdown");
        assert!(
            self.probe.stopped.load(Ordering::SeqCst),
            "stop() was not called"
        );
        drop(self.broker);
    }
}

#[tokio::test]
async fn hello_and_register_carry_sdk_plugin_and_tools() {
    let (run, hello, register) = start().await;
    assert_eq!(
        hello.protocol_version,
        hearth_plugin::proto::PROTOCOL_VERSION
    );
    assert_eq!(hello.sdk, "hearth-plugin-rust");
    assert_eq!(hello.sdk_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(hello.features, vec!["cancel", "progress", "trace"]);
    assert_eq!(hello.pid, std::process::id());

    let info = register.plugin.clone().unwrap();
    assert_eq!(
        (
            info.name.as_str(),
            info.version.as_str(),
            info.author.as_str()
        ),
        ("testplug", "9.9.9", "tester")
    );
    assert_eq!(info.description, "plugin under test");
    let names: Vec<_> = register.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "t_greet",
            "t_panic",
            "t_echo",
            "t_text",
            "t_weather",
            "t_fail",
            "t_sleep",
            "t_block",
            "t_wait_cancel"
        ]
    );
    let greet = &register.tools[0];
    assert_eq!(greet.description, "greets");
    let schema: Value = serde_json::from_str(&greet.parameters_json).unwrap();
    assert_eq!(schema["required"], json!(["name"]));
    assert_eq!(
        serde_json::from_str::<Value>(&register.tools[2].parameters_json).unwrap(),
        json!({"type": "object"})
    );
    assert_eq!(*run.probe.init_name.lock().unwrap(), "testplug");
    run.shutdown().await;
}

#[tokio::test]
async fn cyrene_tools_validate_before_execute() {
    let (mut run, _, _) = start().await;
    let r = run.session.call(1, "t_greet", json!({"name": "Ada"})).await;
    assert!(r.success, "{r:?}");
    assert_eq!(r.content, "hello Ada");
    assert_eq!(
        serde_json::from_str::<Value>(&r.data_json).unwrap(),
        json!({"greeted": "Ada"})
    );
    assert_eq!(run.probe.greet_executions.load(Ordering::SeqCst), 1);

    let r = run.session.call(2, "t_greet", json!({"name": 5})).await;
    assert!(!r.success);
    assert_eq!(
        r.error,
        "invalid arguments for tool t_greet: `name` must be a non-empty string"
    );
    assert_eq!(
        run.probe.greet_executions.load(Ordering::SeqCst),
        1,
        "execute ran despite validate failing"
    );

    let r = run
        .session
        .call(3, "t_greet", json!({"name": "error"}))
        .await;
    assert!(!r.success);
    assert_eq!(r.error, "t_greet cannot greet error");

    let r = run.session.call(4, "nope", json!({})).await;
    assert!(!r.success);
    assert_eq!(r.error, r#"plugin testplug has no tool named "nope""#);

    run.session.send(In::InvokeTool(pb::InvokeTool {
        call_id: 5,
        tool: "t_greet".into(),
        args_json: "[1]".into(),
        ..Default::default()
    }));
    let r = run.session.result().await;
    assert_eq!(r.call_id, 5);
    assert!(
        r.error
            .starts_with("tool t_greet: arguments are not a JSON object"),
        "{}",
        r.error
    );
    run.shutdown().await;
}

#[tokio::test]
async fn homeagent_handler_values_map_onto_results() {
    let (mut run, _, _) = start().await;
    let r = run
        .session
        .call(1, "t_echo", json!({"a": 1, "b": [true, null], "c": "x"}))
        .await;
    assert!(r.success);
    assert_eq!(
        serde_json::from_str::<Value>(&r.content).unwrap(),
        json!({"a": 1, "b": [true, null], "c": "x"})
    );
    assert_eq!(r.data_json, r.content);

    let r = run.session.call(2, "t_text", json!({"x": 7})).await;
    assert_eq!(
        (r.success, r.content.as_str(), r.data_json.as_str()),
        (true, "text:7", "")
    );

    let r = run
        .session
        .call(3, "t_weather", json!({"city": "Paris"}))
        .await;
    assert!(r.success);
    assert_eq!(
        serde_json::from_str::<Value>(&r.data_json).unwrap(),
        json!({"city": "Paris", "temp": 25})
    );

    let r = run
        .session
        .call(4, "t_weather", json!({"city": "atlantis"}))
        .await;
    assert!(!r.success);
    assert_eq!(r.error, "no such city: atlantis");

    let r = run.session.call(5, "t_fail", json!({})).await;
    assert_eq!(
        (r.success, r.error.as_str()),
        (false, "backend unreachable")
    );
    run.shutdown().await;
}

#[tokio::test]
async fn fifty_concurrent_calls_are_matched_by_call_id() {
    let (mut run, _, _) = start().await;
    let started = Instant::now();
    for i in 0..50u64 {
        // Later calls sleep less, so results come back out of order.
        run.session
            .invoke(1000 + i, "t_sleep", json!({"i": i, "ms": 300 - i * 5}));
    }
    let mut seen = HashMap::new();
    for _ in 0..50 {
        let r = run.session.result().await;
        assert!(r.success, "{r:?}");
        let v: Value = serde_json::from_str(&r.data_json).unwrap();
        assert!(
            seen.insert(r.call_id, v["i"].as_u64().unwrap()).is_none(),
            "two results for {}",
            r.call_id
        );
    }
    let elapsed = started.elapsed();
    for (call_id, i) in &seen {
        assert_eq!(*call_id, 1000 + i, "result of call {call_id} carries i={i}");
    }
    assert_eq!(seen.len(), 50);
    // Serially this would take ~8.9 s; a generous bound for loaded CI machines.
    assert!(
        elapsed < Duration::from_secs(6),
        "calls did not run concurrently: {elapsed:?}"
    );
    run.shutdown().await;
}

#[tokio::test]
async fn ping_is_answered_while_a_handler_is_busy() {
    let (mut run, _, _) = start().await;
    run.session.invoke(1, "t_block", json!({}));
    tokio::time::sleep(Duration::from_millis(50)).await;
    run.session.send(In::Ping(pb::Ping { nonce: 77 }));
    match run.session.recv().await {
        Out::Pong(p) => assert_eq!(p.nonce, 77),
        other => panic!("expected Pong while t_block is busy, got {other:?}"),
    }
    run.probe.release.notify_one();
    let r = run.session.result().await;
    assert_eq!(
        (r.call_id, r.success, r.content.as_str()),
        (1, true, "released")
    );
    run.shutdown().await;
}

#[tokio::test]
async fn panic_becomes_error_result_and_plugin_keeps_serving() {
    let (mut run, _, _) = start().await;
    let r = run.session.call(1, "t_panic", json!({})).await;
    assert!(!r.success);
    assert_eq!(r.error, "tool t_panic panicked: boom at 42");
    let r = run
        .session
        .call(2, "t_echo", json!({"still": "here"}))
        .await;
    assert!(r.success, "{r:?}");
    run.session.send(In::Ping(pb::Ping { nonce: 1 }));
    assert!(matches!(run.session.recv().await, Out::Pong(_)));
    run.shutdown().await;
}

#[tokio::test]
async fn cancel_cancels_the_token_aborts_the_task_and_sends_no_result() {
    let (mut run, _, _) = start().await;
    run.session.invoke(7, "t_wait_cancel", json!({}));
    run.session.invoke(8, "t_wait_cancel", json!({}));
    assert_eq!(run.event().await.0, "started");
    assert_eq!(run.event().await.0, "started");
    run.session.send(In::Cancel(pb::Cancel {
        call_id: 7,
        reason: "timeout".into(),
    }));
    let mut got = vec![run.event().await, run.event().await];
    got.sort();
    assert_eq!(got, vec![("cancelled", 7), ("dropped", 7)]);
    // No result for 7; call 8 still runs and other calls are served.
    let r = run.session.call(9, "t_echo", json!({})).await;
    assert!(r.success);
    assert!(
        run.session
            .recv_within(Duration::from_millis(300))
            .await
            .is_none(),
        "a result was sent after Cancel"
    );
    // Shutdown cancels what is still in flight.
    run.session.send(In::Shutdown(pb::Shutdown {
        grace_ms: 1000,
        reason: String::new(),
    }));
    let mut got = vec![run.event().await, run.event().await];
    got.sort();
    assert_eq!(got, vec![("cancelled", 8), ("dropped", 8)]);
    tokio::time::timeout(Duration::from_secs(1), run.serve)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(run.probe.stopped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn progress_reaches_the_broker() {
    let mut broker = Broker::unix();
    struct P;
    #[async_trait]
    impl Plugin for P {
        fn metadata(&self) -> PluginMetadata {
            PluginMetadata {
                name: "prog".into(),
                version: "1".into(),
                ..Default::default()
            }
        }
        async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
            host.register_tool_with_context(
                "p",
                ToolDef::default(),
                |ctx: CallContext, _| async move {
                    assert!(ctx.progress("half way", Some(0.5)));
                    Ok::<_, String>(Value::Null)
                },
            )?;
            Ok(())
        }
    }
    let serve = tokio::spawn(serve_with(
        P,
        ServeConfig::new(broker.addr.clone(), broker.token.clone(), "prog"),
    ));
    let mut s = broker.session().await;
    s.handshake().await;
    s.invoke(3, "p", json!({}));
    match s.recv().await {
        Out::Progress(p) => assert_eq!(
            (p.call_id, p.message.as_str(), p.fraction),
            (3, "half way", 0.5)
        ),
        other => panic!("expected Progress, got {other:?}"),
    }
    let r = s.result().await;
    assert_eq!(
        (r.call_id, r.success, r.content.as_str()),
        (3, true, "null")
    );
    s.close();
    tokio::time::timeout(STEP, serve)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn broker_closing_the_stream_ends_serve_ok_after_stop() {
    let (mut run, _, _) = start().await;
    run.session.close();
    tokio::time::timeout(STEP, run.serve)
        .await
        .unwrap()
        .unwrap()
        .expect("clean end is Ok");
    assert!(run.probe.stopped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn short_unix_address_form_works() {
    let mut broker = Broker::unix();
    broker.addr = broker.addr.replacen("unix://", "unix:", 1);
    let (mut run, _, _) = start_on(broker).await;
    assert!(run.session.call(1, "t_echo", json!({})).await.success);
    run.shutdown().await;
}

#[tokio::test]
async fn works_over_tcp_loopback() {
    let (mut run, _, _) = start_on(Broker::tcp().await).await;
    let r = run.session.call(1, "t_greet", json!({"name": "tcp"})).await;
    assert_eq!(r.content, "hello tcp");
    run.shutdown().await;
}

#[tokio::test]
async fn rejected_registration_is_an_error_naming_the_items() {
    let mut broker = Broker::unix();
    let probe = Arc::new(Probe::default());
    let config = ServeConfig::new(broker.addr.clone(), broker.token.clone(), "testplug");
    let serve = tokio::spawn(serve_with(TestPlugin(probe), config));
    let mut s = broker.session().await;
    assert!(matches!(s.recv().await, Out::Hello(_)));
    assert!(matches!(s.recv().await, Out::Register(_)));
    s.send(In::Rejected(pb::Rejected {
        reason: "protocol major version 1 not supported".into(),
        items: vec![pb::RejectedItem {
            kind: "plugin".into(),
            name: "testplug".into(),
            reason: "too old".into(),
        }],
    }));
    s.close();
    let err = tokio::time::timeout(STEP, serve)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::Rejected { .. }));
    assert_eq!(err.exit_code(), 3);
    assert_eq!(
        err.to_string(),
        "plugin testplug: registration rejected: protocol major version 1 not supported; plugin testplug: too old"
    );
}

#[tokio::test]
async fn partly_rejected_registration_keeps_serving() {
    let mut broker = Broker::unix();
    let probe = Arc::new(Probe::default());
    let serve = tokio::spawn(serve_with(
        TestPlugin(probe.clone()),
        ServeConfig::new(broker.addr.clone(), broker.token.clone(), "testplug"),
    ));
    let mut s = broker.session().await;
    s.recv().await;
    s.recv().await;
    s.send(In::Registered(pb::Registered {
        plugin: "testplug".into(),
        tools: vec!["t_echo".into()],
        rejected: vec![pb::RejectedItem {
            kind: "tool".into(),
            name: "t_greet".into(),
            reason: "duplicate".into(),
        }],
        ..Default::default()
    }));
    assert!(s.call(1, "t_echo", json!({})).await.success);
    s.send(In::Shutdown(pb::Shutdown {
        grace_ms: 500,
        reason: String::new(),
    }));
    tokio::time::timeout(STEP, serve)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(probe.stopped.load(Ordering::SeqCst));
}

#[tokio::test]
async fn wrong_token_is_an_attach_error() {
    let broker = Broker::unix();
    let config = ServeConfig::new(broker.addr.clone(), "wrong", "testplug");
    let err = serve_with(TestPlugin(Arc::default()), config)
        .await
        .unwrap_err();
    match &err {
        Error::Attach { status, .. } => assert_eq!(status.code(), tonic::Code::Unauthenticated),
        other => panic!("expected Attach error, got {other:?}"),
    }
    assert!(
        err.to_string().starts_with(&format!(
            "plugin testplug: attach to {} failed: missing or wrong x-hearth-token",
            broker.addr
        )),
        "{err}"
    );
}

#[tokio::test]
async fn bad_addresses_and_dead_brokers_are_named() {
    let err = serve_with(
        TestPlugin(Arc::default()),
        ServeConfig::new("tcp://1.2.3.4", "t", "p"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"broker address "tcp://1.2.3.4" is neither unix:///abs/path nor http://host:port"#
    );
    assert_eq!(err.exit_code(), 2);

    let dir = tempfile::tempdir().unwrap();
    let addr = format!("unix://{}/nobody.sock", dir.path().display());
    let err = serve_with(
        TestPlugin(Arc::default()),
        ServeConfig::new(addr.clone(), "t", "p"),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("connect to {addr} failed: ")),
        "{err}"
    );
    assert!(err.to_string().contains("No such file"), "{err}");
}

#[tokio::test]
async fn duplicate_tool_names_across_styles_fail_before_connecting() {
    struct Dup;
    #[async_trait]
    impl Plugin for Dup {
        fn metadata(&self) -> PluginMetadata {
            PluginMetadata::default()
        }
        async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
            host.register_tool("t_panic", ToolDef::default(), |_| async {
                Ok::<_, String>(Value::Null)
            })?;
            Ok(())
        }
        fn tools(&self) -> Vec<Arc<dyn Tool>> {
            vec![Arc::new(Panicker)]
        }
    }
    let broker = Broker::unix();
    let err = serve_with(
        Dup,
        ServeConfig::new(broker.addr.clone(), broker.token.clone(), "dup"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"plugin dup: tool name "t_panic" is registered twice"#
    );
}

#[tokio::test]
async fn stage_hooks_register_run_and_fail_by_hook_id() {
    use hearth_plugin::{Stage, StageContext};
    struct Stages;
    #[async_trait]
    impl Plugin for Stages {
        fn metadata(&self) -> PluginMetadata {
            PluginMetadata {
                name: "stg".into(),
                version: "1".into(),
                ..Default::default()
            }
        }
        async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
            host.register_stage(Stage::OnInput, |mut ctx: StageContext| async move {
                if ctx.user_id == "blocked" {
                    ctx.response = Some("已被限制使用".into());
                }
                ctx.raw_message = ctx.raw_message.to_uppercase();
                Ok::<_, String>(ctx)
            });
            host.register_stage_own_tools(Stage::BeforeToolcall, |_ctx: StageContext| async move {
                Err::<StageContext, _>("audit backend down")
            });
            host.register_stage(Stage::AfterOutput, |_ctx: StageContext| async move {
                if true {
                    panic!("observer broke");
                }
                Ok::<_, String>(StageContext::default())
            });
            let quiet = hearth_plugin::StageOptions {
                context_msgs: false,
                ..Default::default()
            };
            host.register_stage_with(Stage::PreAction, quiet, |ctx: StageContext| async move {
                Ok::<_, String>(ctx)
            });
            Ok(())
        }
    }
    let mut broker = Broker::unix();
    let serve = tokio::spawn(serve_with(
        Stages,
        ServeConfig::new(broker.addr.clone(), broker.token.clone(), "stg"),
    ));
    let mut s = broker.session().await;
    let (_, register) = s.handshake().await;
    let hooks: Vec<_> = register
        .stages
        .iter()
        .map(|h| {
            (
                h.stage,
                h.own_tools_only,
                h.hook_id.as_str(),
                h.no_context_msgs,
            )
        })
        .collect();
    assert_eq!(
        hooks,
        [
            (Stage::OnInput as i32, false, "on_input#0", false),
            (
                Stage::BeforeToolcall as i32,
                true,
                "before_toolcall#1",
                false
            ),
            (Stage::AfterOutput as i32, false, "after_output#2", false),
            (Stage::PreAction as i32, false, "pre_action#3", true),
        ]
    );
    let run = |call_id, hook: &str, context: StageContext| {
        In::RunStage(pb::RunStage {
            call_id,
            stage: 0,
            hook_id: hook.into(),
            context: Some(context),
            timeout_ms: 1000,
            ..Default::default()
        })
    };
    let stage_result = |m: Out| match m {
        Out::StageResult(r) => r,
        other => panic!("expected StageResult, got {other:?}"),
    };
    s.send(run(
        1,
        "on_input#0",
        StageContext {
            raw_message: "hi".into(),
            user_id: "blocked".into(),
            ..Default::default()
        },
    ));
    let r = stage_result(s.recv().await);
    let ctx = r.context.unwrap();
    assert_eq!((r.call_id, r.error.as_str()), (1, ""));
    assert_eq!(
        (ctx.raw_message.as_str(), ctx.response.as_deref()),
        ("HI", Some("已被限制使用"))
    );

    s.send(run(2, "before_toolcall#1", StageContext::default()));
    let r = stage_result(s.recv().await);
    assert_eq!(
        (r.call_id, r.error.as_str()),
        (2, "stage hook before_toolcall#1: audit backend down")
    );

    s.send(run(3, "after_output#2", StageContext::default()));
    let r = stage_result(s.recv().await);
    assert_eq!(
        (r.call_id, r.error.as_str()),
        (3, "stage hook after_output#2 panicked: observer broke")
    );

    s.send(run(
        4,
        "nope#9",
        StageContext {
            raw_message: "kept".into(),
            ..Default::default()
        },
    ));
    let r = stage_result(s.recv().await);
    assert_eq!(r.error, r#"plugin stg has no stage hook "nope#9""#);
    assert_eq!(r.context.unwrap().raw_message, "kept");

    s.send(In::HandleEvent(pb::HandleEvent {
        call_id: 5,
        trigger: Some(pb::Trigger {
            r#type: 0,
            pattern: "/none".into(),
        }),
        ..Default::default()
    }));
    match s.recv().await {
        Out::EventDone(d) => assert_eq!(
            (d.call_id, d.error.as_str()),
            (
                5,
                r#"plugin stg has no event handler for trigger type 0 "/none""#
            )
        ),
        other => panic!("expected EventDone, got {other:?}"),
    }
    s.send(In::Shutdown(pb::Shutdown {
        grace_ms: 500,
        reason: String::new(),
    }));
    tokio::time::timeout(STEP, serve)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn host_services_carry_the_plugin_token_from_start_and_from_calls() {
    struct Injector;
    #[async_trait]
    impl Plugin for Injector {
        fn metadata(&self) -> PluginMetadata {
            PluginMetadata {
                name: "inj".into(),
                version: "1".into(),
                ..Default::default()
            }
        }
        async fn start(&mut self, host: &mut Registrar) -> Result<(), BoxError> {
            let h = host
                .host()
                .expect("serve gives start a host handle")
                .clone();
            h.inject_text("cli", "started").await?;
            host.register_tool_with_context(
                "inj_say",
                ToolDef::default(),
                |ctx: CallContext, args: Value| async move {
                    let host = ctx.host().ok_or("no host")?;
                    host.inject_interrupt_text("qq", args["text"].as_str().unwrap_or_default())
                        .await
                        .map_err(|s| s.message().to_string())?;
                    host.inject(hearth_plugin::Inject {
                        channel: "qq",
                        text: "to the group",
                        group_id: "g1",
                        priority: hearth_plugin::Priority::Message,
                        no_memory: true,
                        ..Default::default()
                    })
                    .await
                    .map_err(|s| s.message().to_string())?;
                    Ok::<_, String>(Value::String("said".into()))
                },
            )?;
            Ok(())
        }
    }
    let mut broker = Broker::unix_for("inj");
    let serve = tokio::spawn(serve_with(
        Injector,
        ServeConfig::new(broker.addr.clone(), broker.token.clone(), "inj"),
    ));
    let mut s = broker.session().await;
    s.handshake().await;
    // `start` injected before Register: the fake host admitted the plugin's token.
    let injected = broker.host().injected();
    assert_eq!(injected.len(), 1);
    assert_eq!(injected[0].kind, InjectKind::Text);
    assert_eq!(
        (
            injected[0].source.as_str(),
            injected[0].channel.as_str(),
            injected[0].text.as_str()
        ),
        ("plugin:inj", "cli", "started")
    );

    let r = s.call(1, "inj_say", json!({"text": "urgent"})).await;
    assert_eq!((r.success, r.content.as_str()), (true, "said"), "{r:?}");
    let injected = broker.host().injected();
    assert_eq!(
        (injected[1].kind, injected[1].text.as_str()),
        (InjectKind::Interrupt, "urgent")
    );
    // The conversation and priority travel with the input.
    assert_eq!(
        (
            injected[2].kind,
            injected[2].text.as_str(),
            injected[2].group_id.as_str(),
            injected[2].priority
        ),
        (
            InjectKind::NoMemory,
            "to the group",
            "g1",
            hearth_plugin::Priority::Message
        )
    );
    assert_eq!(
        broker.host().calls(),
        [
            "Input.InjectText",
            "Input.InjectInterruptText",
            "Input.InjectTextNoMemory"
        ]
    );
    s.send(In::Shutdown(pb::Shutdown {
        grace_ms: 500,
        reason: String::new(),
    }));
    tokio::time::timeout(STEP, serve)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
