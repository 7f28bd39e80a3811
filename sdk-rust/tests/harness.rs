//! `hearth_plugin::testing::Harness`: plugins of both styles run in process and driven
//! as the broker drives them (tool calls with schema checks, stage hooks through the
//! permission matrix, trigger events, host services).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hearth_plugin::proto::v1::{ToolCallInfo, ToolResultInfo};
use hearth_plugin::testing::{Harness, HarnessError, InjectKind, SECRET_MASK};
use hearth_plugin::{
    async_trait, AiInject, AiTool, Args, BoxError, CallContext, Caller, ConfigDef, Doc, Event,
    Host, Plugin, PluginConfig, PluginMetadata, Registrar, Stage, StageContext, StageOptions, Tool,
    ToolDef, ToolDefinition, ToolResult, Trigger, Triple,
};
use serde_json::{json, Value};

// ---------------------------------------------------------------- a Cyrene plugin

struct Greet;

#[async_trait]
impl Tool for Greet {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "greet".into(),
            description: "Greets someone.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "times": {"type": "integer", "minimum": 1}
                },
                "required": ["name"],
            }),
        }
    }

    fn validate(&self, args: &Args) -> Result<(), BoxError> {
        if args["name"] == "" {
            return Err("`name` must not be empty".into());
        }
        Ok(())
    }

    async fn execute(&self, ctx: &CallContext, args: Args) -> Result<ToolResult, BoxError> {
        let name = args["name"].as_str().unwrap_or_default();
        match name {
            "error" => Err("cannot greet error".into()),
            "panic" => panic!("greet panicked on purpose"),
            _ => {
                ctx.progress("warming up", Some(0.5));
                let user = &ctx.caller().user_id;
                Ok(ToolResult::ok(format!("Hello, {name}!"))
                    .with_data(json!({"name": name, "user": user})))
            }
        }
    }
}

/// Waits until cancelled; reports the cancellation.
struct Hang(Arc<AtomicBool>);

#[async_trait]
impl Tool for Hang {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "hang".into(),
            description: "Never answers.".into(),
            parameters: json!({"type": "object"}),
        }
    }

    fn ai_tool(&self) -> Option<AiTool> {
        Some(AiTool {
            confirm: true,
            max_calls: 2,
            chainable: Some(false),
            ..Default::default()
        })
    }

    async fn execute(&self, ctx: &CallContext, _args: Args) -> Result<ToolResult, BoxError> {
        let token = ctx.cancellation_token().clone();
        let flag = self.0.clone();
        tokio::spawn(async move {
            token.cancelled().await;
            flag.store(true, Ordering::SeqCst);
        });
        std::future::pending::<()>().await;
        unreachable!()
    }
}

#[derive(Default)]
struct Cyrene {
    cancelled: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
}

#[async_trait]
impl Plugin for Cyrene {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "cyrene".into(),
            version: "1.2.3".into(),
            author: "tester".into(),
            description: "a Cyrene plugin".into(),
        }
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(Greet), Arc::new(Hang(self.cancelled.clone()))]
    }

    async fn stop(&mut self) -> Result<(), BoxError> {
        self.stopped.store(true, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn cyrene_tools_are_called_with_the_brokers_argument_check() {
    let stopped = Arc::new(AtomicBool::new(false));
    let t = Harness::builder(Cyrene {
        stopped: stopped.clone(),
        ..Default::default()
    })
    .caller(Caller {
        user_id: "u42".into(),
        ..Default::default()
    })
    .start()
    .await
    .unwrap();
    assert_eq!(t.plugin(), "cyrene");
    assert_eq!(t.metadata().version, "1.2.3");
    assert_eq!(t.features(), ["cancel", "progress", "trace"]);

    let r = t.call("greet", json!({"name": "Ann"})).await.unwrap();
    assert!(r.success, "{r:?}");
    assert_eq!(r.content, "Hello, Ann!");
    assert_eq!(r.data, Some(json!({"name": "Ann", "user": "u42"})));
    assert_eq!(r.progress, ["warming up"]);

    // The schema check names the argument, as the broker's does; the plugin never
    // sees the call.
    let err = t.call("greet", json!({"name": 5})).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"tool greet: argument `name`: 5 is not of type "string""#
    );
    let err = t
        .call("greet", json!({"name": "x", "times": 0}))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("tool greet: argument `times`: 0 is less than the minimum of 1"),
        "{err}"
    );
    let err = t.call("greet", json!({})).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"tool greet: arguments: "name" is a required property"#
    );
    assert!(matches!(
        t.call("greet", json!([1])).await.unwrap_err(),
        HarnessError::InvalidArguments { .. }
    ));
    let err = t.call("nope", json!({})).await.unwrap_err();
    assert_eq!(err.to_string(), "unknown tool `nope`");

    // Failures of the plugin's own are results, not harness errors.
    let r = t.call("greet", json!({"name": ""})).await.unwrap();
    assert_eq!(
        (r.success, r.error.as_str()),
        (
            false,
            "invalid arguments for tool greet: `name` must not be empty"
        )
    );
    let r = t.call("greet", json!({"name": "error"})).await.unwrap();
    assert_eq!((r.success, r.error.as_str()), (false, "cannot greet error"));
    let r = t.call("greet", json!({"name": "panic"})).await.unwrap();
    assert_eq!(
        (r.success, r.error.as_str()),
        (false, "tool greet panicked: greet panicked on purpose")
    );

    // Calls run concurrently on one session.
    let (a, b) = tokio::join!(
        t.call("greet", json!({"name": "A"})),
        t.call("greet", json!({"name": "B"}))
    );
    assert_eq!(
        (a.unwrap().content, b.unwrap().content),
        ("Hello, A!".into(), "Hello, B!".into())
    );

    t.shutdown().await.unwrap();
    assert!(stopped.load(Ordering::SeqCst), "stop() ran");
}

#[tokio::test]
async fn a_call_past_the_timeout_is_cancelled_in_the_plugin() {
    let cancelled = Arc::new(AtomicBool::new(false));
    let t = Harness::builder(Cyrene {
        cancelled: cancelled.clone(),
        ..Default::default()
    })
    .timeout(Duration::from_secs(2))
    .start()
    .await
    .unwrap();
    let err = t.call("hang", json!({})).await.unwrap_err();
    assert!(
        matches!(&err, HarnessError::Timeout { what, .. } if what == "tool hang"),
        "{err:?}"
    );
    // The harness sent Cancel; the plugin answers nothing more for the call and keeps
    // serving, and its cancellation token fired before this next call was answered.
    let r = t.call("greet", json!({"name": "after"})).await.unwrap();
    assert_eq!(r.content, "Hello, after!");
    for _ in 0..100 {
        if cancelled.load(Ordering::SeqCst) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(
        cancelled.load(Ordering::SeqCst),
        "the call's token was cancelled"
    );
    t.shutdown().await.unwrap();
}

#[tokio::test]
async fn registered_metadata_is_listed_as_the_broker_keeps_it() {
    let t = Harness::start(Cyrene::default()).await.unwrap();
    let names: Vec<_> = t.tools().iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["greet", "hang"]);
    let greet = t.tool("greet").unwrap();
    assert_eq!(greet.description, "Greets someone.");
    assert_eq!(greet.parameters["required"], json!(["name"]));
    assert_eq!(greet.ai_tool, None);
    let ai = t.tool("hang").unwrap().ai_tool.clone().unwrap();
    assert_eq!(
        (ai.confirm, ai.max_calls, ai.chainable),
        (true, 2, Some(false))
    );
    assert!(t.hooks().is_empty() && t.triggers().is_empty() && t.inject().is_none());
}

// ---------------------------------------------------------------- registration

struct BadTools;

#[async_trait]
impl Plugin for BadTools {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "bad".into(),
            ..Default::default()
        }
    }

    async fn start(&mut self, sdk: &mut Registrar) -> Result<(), BoxError> {
        let def = |parameters: Value| ToolDef {
            description: "d".into(),
            parameters,
            ..Default::default()
        };
        let ok = |_args: Value| async { Ok::<_, String>(json!("ok")) };
        sdk.register_tool("good", def(json!({"type": "object"})), ok)?;
        sdk.register_tool("bad.name", def(json!({"type": "object"})), ok)?;
        sdk.register_tool("not_object", def(json!({"type": "string"})), ok)?;
        sdk.register_trigger(Trigger::Regex("(unclosed".into()), |_ev: Event| async {
            Ok::<_, String>(())
        })?;
        sdk.set_inject(AiInject {
            usage: "no format".into(),
            ..Default::default()
        });
        Ok(())
    }
}

#[tokio::test]
async fn items_the_broker_would_reject_fail_start_by_name() {
    let err = Harness::start(BadTools).await.unwrap_err();
    let HarnessError::Rejected { plugin, items, .. } = &err else {
        panic!("expected Rejected, got {err:?}");
    };
    assert_eq!(plugin, "bad");
    let named: Vec<_> = items
        .iter()
        .map(|i| format!("{} {}", i.kind, i.name))
        .collect();
    assert_eq!(
        named,
        [
            "tool bad.name",
            "tool not_object",
            "trigger (unclosed",
            "inject no format"
        ]
    );
    assert!(
        err.to_string()
            .contains("tool bad.name: tool name contains '.'; use letters, digits, `_` and `-`"),
        "{err}"
    );

    let t = Harness::builder(BadTools)
        .allow_rejected()
        .start()
        .await
        .unwrap();
    assert_eq!(t.rejected().len(), 4);
    assert_eq!(t.tools().len(), 1);
    assert_eq!(t.call("good", json!({})).await.unwrap().content, "ok");
    assert!(matches!(
        t.call("bad.name", json!({})).await.unwrap_err(),
        HarnessError::UnknownTool { .. }
    ));
}

struct FailsToStart;

#[async_trait]
impl Plugin for FailsToStart {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata::default()
    }

    async fn init(&mut self, config: &PluginConfig) -> Result<(), BoxError> {
        Err(format!("{} needs an API key", config.plugin).into())
    }
}

#[tokio::test]
async fn a_plugin_that_fails_to_start_is_a_serve_error() {
    let err = Harness::builder(FailsToStart)
        .name("keyless")
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::Serve(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "plugin keyless: init failed: keyless needs an API key"
    );
}

// ---------------------------------------------------------------- stage hooks

struct Hooks;

#[async_trait]
impl Plugin for Hooks {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "hooks".into(),
            ..Default::default()
        }
    }

    async fn start(&mut self, sdk: &mut Registrar) -> Result<(), BoxError> {
        sdk.register_tool("own_tool", ToolDef::default(), |_args: Value| async {
            Ok::<_, String>(Value::Null)
        })?;
        // on_input#0: writes what it may (raw_message, extra) and what it may not.
        sdk.register_stage(Stage::OnInput, |mut ctx: StageContext| async move {
            ctx.raw_message = format!("[{}]", ctx.raw_message);
            ctx.extra_json = r#"{"seen":1}"#.into();
            ctx.user_id = "mallory".into();
            ctx.no_memory = true;
            Ok::<_, String>(ctx)
        });
        // on_input#1: sees #0's writes; blocks a user.
        sdk.register_stage(Stage::OnInput, |mut ctx: StageContext| async move {
            if ctx.user_id == "blocked" {
                ctx.response = Some("no".into());
            }
            ctx.raw_message.push('!');
            Ok::<_, String>(ctx)
        });
        // on_input#2: never reached for a blocked user.
        sdk.register_stage(Stage::OnInput, |_ctx: StageContext| async move {
            Err::<StageContext, _>("third hook failed")
        });
        // pre_action#3: declared it does not read context_msgs.
        let quiet = StageOptions {
            context_msgs: false,
            ..Default::default()
        };
        sdk.register_stage_with(
            Stage::PreAction,
            quiet,
            |mut ctx: StageContext| async move {
                ctx.extra_json =
                    json!({"msgs_sent": !ctx.context_msgs_json.is_empty()}).to_string();
                Ok::<_, String>(ctx)
            },
        );
        // before_toolcall#4: own tools only; denies them.
        sdk.register_stage_own_tools(Stage::BeforeToolcall, |mut ctx: StageContext| async move {
            for c in &mut ctx.tool_calls {
                c.deny = true;
                c.deny_reason = "not today".into();
            }
            Ok::<_, String>(ctx)
        });
        // post_action#5: may edit tool calls but not deny them.
        sdk.register_stage(Stage::PostAction, |mut ctx: StageContext| async move {
            ctx.llm_text = ctx.llm_text.to_uppercase();
            if let Some(c) = ctx.tool_calls.first_mut() {
                c.deny = true;
            }
            Ok::<_, String>(ctx)
        });
        // after_toolcall#6: rewrites the result.
        sdk.register_stage(Stage::AfterToolcall, |mut ctx: StageContext| async move {
            if let Some(r) = ctx.tool_results.first_mut() {
                r.result_json = r#"{"redacted":true}"#.into();
            }
            Ok::<_, String>(ctx)
        });
        // after_output#7 and #8: observers; #7 writes anyway, #8 panics.
        sdk.register_stage(Stage::AfterOutput, |mut ctx: StageContext| async move {
            ctx.final_text = "changed too late".into();
            Ok::<_, String>(ctx)
        });
        sdk.register_stage(Stage::AfterOutput, |_ctx: StageContext| async move {
            if true {
                panic!("observer broke");
            }
            Ok::<_, String>(StageContext::default())
        });
        Ok(())
    }
}

#[tokio::test]
async fn stage_hooks_run_through_the_permission_matrix() {
    let t = Harness::start(Hooks).await.unwrap();
    let hooks: Vec<_> = t
        .hooks()
        .iter()
        .map(|h| (h.hook_id.as_str(), h.own_tools_only, h.context_msgs))
        .collect();
    assert_eq!(
        hooks,
        [
            ("on_input#0", false, true),
            ("on_input#1", false, true),
            ("on_input#2", false, true),
            ("pre_action#3", false, false),
            ("before_toolcall#4", true, true),
            ("post_action#5", false, true),
            ("after_toolcall#6", false, true),
            ("after_output#7", false, true),
            ("after_output#8", false, true),
        ]
    );

    let input = StageContext {
        raw_message: "hi".into(),
        user_id: "u1".into(),
        ..Default::default()
    };
    let out = t.run_stage(Stage::OnInput, input.clone()).await.unwrap();
    assert_eq!(out.ran, ["on_input#0", "on_input#1", "on_input#2"]);
    assert_eq!(
        out.context.raw_message, "[hi]!",
        "each hook sees the last one's writes"
    );
    assert_eq!(out.context.extra_json, r#"{"seen":1}"#);
    assert_eq!(
        (out.context.user_id.as_str(), out.context.no_memory),
        ("u1", false)
    );
    assert_eq!(out.dropped_fields(), ["user_id", "no_memory"]);
    assert!(out.dropped.iter().all(|d| d.hook_id == "on_input#0"));
    assert_eq!(out.failures.len(), 1);
    assert_eq!(
        out.failures[0].error,
        "stage hook on_input#2: third hook failed"
    );
    assert_eq!(out.short_circuit, None);

    let blocked = StageContext {
        user_id: "blocked".into(),
        ..input
    };
    let out = t.run_stage(Stage::OnInput, blocked).await.unwrap();
    assert_eq!(out.ran, ["on_input#0", "on_input#1"]);
    assert_eq!(out.short_circuit.as_deref(), Some("on_input#1"));
    assert_eq!(out.context.response.as_deref(), Some("no"));

    // A hook that declared it does not read context_msgs is not sent them, and the
    // messages stay as they were.
    let ctx = StageContext {
        context_msgs_json: r#"[{"role":"user","content":"hi"}]"#.into(),
        ..Default::default()
    };
    let out = t.run_stage(Stage::PreAction, ctx).await.unwrap();
    assert_eq!(out.context.extra_json, r#"{"msgs_sent":false}"#);
    assert!(out.context.context_msgs_json.contains("hi"));

    // Own-tools scope: the hook sees only calls of this plugin's tools.
    let call = |name: &str| ToolCallInfo {
        id: "c1".into(),
        name: name.into(),
        arguments_json: "{}".into(),
        ..Default::default()
    };
    let ctx = |name: &str| StageContext {
        tool_calls: vec![call(name)],
        ..Default::default()
    };
    let out = t
        .run_stage(Stage::BeforeToolcall, ctx("own_tool"))
        .await
        .unwrap();
    assert_eq!(out.ran, ["before_toolcall#4"]);
    assert!(out.context.tool_calls[0].deny);
    assert_eq!(out.short_circuit.as_deref(), Some("before_toolcall#4"));
    let out = t
        .run_stage(Stage::BeforeToolcall, ctx("other_tool"))
        .await
        .unwrap();
    assert!(out.ran.is_empty());
    assert!(!out.context.tool_calls[0].deny);

    // post_action may change llm_text, not deny.
    let out = t
        .run_stage(
            Stage::PostAction,
            StageContext {
                llm_text: "calling".into(),
                ..ctx("own_tool")
            },
        )
        .await
        .unwrap();
    assert_eq!(out.context.llm_text, "CALLING");
    assert!(!out.context.tool_calls[0].deny);
    assert_eq!(out.dropped_fields(), ["tool_call.deny"]);

    let result = ToolResultInfo {
        call_id: "c1".into(),
        name: "other_tool".into(),
        success: true,
        result_json: r#"{"secret":42}"#.into(),
        ..Default::default()
    };
    let out = t
        .run_stage(
            Stage::AfterToolcall,
            StageContext {
                tool_results: vec![result],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        out.context.tool_results[0].result_json,
        r#"{"redacted":true}"#
    );

    // after_output observers run, change nothing, and their writes are reported.
    let out = t
        .run_stage(
            Stage::AfterOutput,
            StageContext {
                final_text: "bye".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.ran, ["after_output#7", "after_output#8"]);
    assert_eq!(out.context.final_text, "bye");
    assert_eq!(out.dropped_fields(), ["final_text"]);
    assert_eq!(
        out.failures[0].error,
        "stage hook after_output#8 panicked: observer broke"
    );

    // No hooks at a stage: nothing runs.
    let out = t
        .run_stage(Stage::BeforeOutput, StageContext::default())
        .await
        .unwrap();
    assert!(out.ran.is_empty());
}

// ---------------------------------------------------------------- events

struct Events;

#[async_trait]
impl Plugin for Events {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "events".into(),
            ..Default::default()
        }
    }

    async fn start(&mut self, sdk: &mut Registrar) -> Result<(), BoxError> {
        async fn echo(ev: Event) -> Result<(), String> {
            ev.reply(format!("{} {:?}", ev.trigger(), ev.params()));
            ev.reply(format!("from {}", ev.caller().user_id));
            Ok(())
        }
        sdk.register_trigger(Trigger::Command("/translate".into()), echo)?;
        sdk.register_trigger(Trigger::Keyword("天气".into()), echo)?;
        sdk.register_trigger(Trigger::Regex(r"^roll (\d+)d(\d+)$".into()), echo)?;
        sdk.register_trigger(Trigger::Segment("weather".into()), echo)?;
        sdk.register_trigger(Trigger::Event("reply".into()), echo)?;
        sdk.register_trigger(Trigger::Command("/fail".into()), |ev: Event| async move {
            ev.reply("partial");
            Err::<(), _>("backend down")
        })?;
        sdk.set_inject(AiInject {
            usage: "translate text".into(),
            format: "/translate {text} {lang}".into(),
            args: [("text".to_string(), "what to translate".to_string())].into(),
        });
        assert!(sdk
            .register_trigger(Trigger::Segment("weather".into()), echo)
            .is_err());
        Ok(())
    }
}

#[tokio::test]
async fn messages_reach_triggers_as_the_broker_matches_them() {
    let t = Harness::builder(Events)
        .caller(Caller {
            user_id: "ann".into(),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    assert_eq!(t.triggers().len(), 6);
    assert_eq!(t.inject().unwrap().format, "/translate {text} {lang}");

    let ev = t
        .message(r#"/translate "good morning" ja"#)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.trigger, Trigger::Command("/translate".into()));
    assert_eq!(ev.params, ["good morning", "ja"]);
    assert_eq!(
        ev.replies,
        [r#"command /translate ["good morning", "ja"]"#, "from ann"]
    );
    assert_eq!(ev.error, None);

    let ev = t.message("北京天气怎么样").await.unwrap().unwrap();
    assert_eq!(ev.params, ["北京", "怎么样"]);
    let ev = t.message("roll 2d6").await.unwrap().unwrap();
    assert_eq!(ev.params, ["2", "6"]);
    let ev = t
        .message("what's the weather, Paris?")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ev.params, ["what's", "the", "Paris"]);
    assert!(t.message("weathering heights").await.unwrap().is_none());
    assert!(t.message("/translated x").await.unwrap().is_none());

    let ev = t.emit("reply", "see you").await.unwrap().unwrap();
    assert_eq!(ev.params, ["see you"]);
    assert!(t.emit("message", "hi").await.unwrap().is_none());

    let ev = t.llm_line("`/translate hello fr`").await.unwrap().unwrap();
    assert_eq!(ev.params, ["hello", "fr"]);
    assert!(t
        .llm_line("Sure, I can translate that.")
        .await
        .unwrap()
        .is_none());

    let ev = t.message("/fail now").await.unwrap().unwrap();
    assert_eq!(ev.replies, ["partial"]);
    assert_eq!(
        ev.error.as_deref(),
        Some("event handler of trigger command /fail: backend down")
    );

    let ev = t
        .deliver(&Trigger::Keyword("unknown".into()), "x", vec![])
        .await
        .unwrap();
    assert_eq!(
        ev.error.as_deref(),
        Some(r#"plugin events has no event handler for trigger type 1 "unknown""#)
    );
}

// ---------------------------------------------------------------- host services

/// One tool, `op`, that runs a host-service operation named in its arguments and
/// answers its outcome as JSON (errors as their text).
struct HostUser;

async fn run_op(host: &Host, op: &str, a: &Value) -> Result<Value, BoxError> {
    let s = |k: &str| a[k].as_str().unwrap_or_default().to_string();
    Ok(match op {
        "get" => host.settings().get(&s("key")).await?,
        "set" => {
            host.settings().set(&s("key"), a["value"].clone()).await?;
            Value::Null
        }
        "list" => json!(host.settings().list("").await?),
        "defs" => json!(host
            .settings()
            .defs("")
            .await?
            .into_iter()
            .map(|d| d.key)
            .collect::<Vec<_>>()),
        "dump" => host.settings().dump().await?,
        "get_core" => host.settings().get_core(&s("key")).await?,
        "set_core" => {
            host.settings()
                .set_core(&s("key"), a["value"].clone())
                .await?;
            Value::Null
        }
        "get_plugin" => host.settings().get_plugin(&s("plugin"), &s("key")).await?,
        "commit" => json!(
            host.memory()
                .commit([("Alice", "likes", "tea"), ("Bob", "likes", "tea")])
                .await?
        ),
        "recall" => {
            let (entities, relations) = host.memory().recall([s("key")], 1).await?;
            json!({"entities": entities, "relations": relations})
        }
        "introspect" => host.memory().introspect().await?,
        "append" => {
            host.text_memory()
                .append(hearth_plugin::TextEvent {
                    role: s("role"),
                    content: "noted".into(),
                    ..Default::default()
                })
                .await?;
            Value::Null
        }
        "docs" => {
            host.doc_memory()
                .insert(Doc {
                    id: "d1".into(),
                    title: "天气".into(),
                    content: "明天会下雨".into(),
                    ..Default::default()
                })
                .await?;
            json!(host.doc_memory().query("下雨", 3).await?)
        }
        "knowledge" => {
            host.knowledge()
                .add("rust/notes", "ownership and borrowing")
                .await?;
            json!({
                "list": host.knowledge().list().await?,
                "found": host.knowledge().search("borrowing", 3).await?,
            })
        }
        "llm" => {
            let before = host.llm().current_source().await?;
            host.llm().set_source("ollama").await?;
            json!({"sources": host.llm().list_sources().await?, "before": before,
                   "after": host.llm().current_source().await?})
        }
        "llm_unknown" => {
            host.llm().set_source("gpt-9").await?;
            Value::Null
        }
        "mcp_read" => {
            let contents = host.mcp().read_resource(&s("server"), &s("uri")).await?;
            contents[0]["text"].clone()
        }
        "mcp" => {
            let mcp = host.mcp();
            json!({
                "resources": mcp.resources("files").await?,
                "templates": mcp.resource_templates("files").await?,
                "prompts": mcp.prompts("files").await?,
                "greet": mcp.get_prompt("files", "greet", json!({"name": "Ann"})).await?,
            })
        }
        "mcp_request" => {
            host.mcp()
                .request(&s("server"), &s("method"), a["params"].clone())
                .await?
        }
        "inject" => {
            host.inject_text("qq", "hello from the plugin").await?;
            Value::Null
        }
        "inject_as" => {
            host.inject(hearth_plugin::Inject {
                channel: "qq",
                text: "pretending",
                user_id: "alice",
                ..Default::default()
            })
            .await?;
            Value::Null
        }
        other => return Err(format!("no op {other}").into()),
    })
}

#[async_trait]
impl Plugin for HostUser {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: "hostuser".into(),
            ..Default::default()
        }
    }

    async fn start(&mut self, sdk: &mut Registrar) -> Result<(), BoxError> {
        let host = sdk.host().expect("served").clone();
        for (key, ty, default, secret) in [
            ("units", "string", json!("metric"), false),
            ("days", "number", json!(3), false),
            ("api_key", "string", json!("k-123"), true),
        ] {
            host.settings()
                .register_def(ConfigDef {
                    key: key.into(),
                    r#type: ty.into(),
                    default: Some(default),
                    secret,
                    ..Default::default()
                })
                .await?;
        }
        let def = ToolDef {
            description: "runs a host-service operation".into(),
            parameters: json!({"type": "object", "properties": {"op": {"type": "string"}}, "required": ["op"]}),
            ..Default::default()
        };
        sdk.register_tool_with_context("op", def, |ctx: CallContext, args: Value| async move {
            let host = ctx.host().ok_or("no host")?;
            let op = args["op"].as_str().unwrap_or_default();
            run_op(host, op, &args).await.map_err(|e| e.to_string())
        })?;
        Ok(())
    }
}

async fn op(t: &Harness, args: Value) -> Result<Value, String> {
    let r = t.call("op", args).await.unwrap();
    if r.success {
        // A string value is the result text; anything else is also the data.
        Ok(r.data.unwrap_or(Value::String(r.content)))
    } else {
        Err(r.error)
    }
}

#[tokio::test]
async fn settings_behave_as_the_brokers() {
    let t = Harness::builder(HostUser)
        .setting("units", "imperial")
        .core_setting("llm.openai.api_key", "sk-core")
        .core_setting("core.daemon.data_dir", "/data")
        .plugin_setting("other", "token", "other-secret")
        .start()
        .await
        .unwrap();
    // A def's default does not overwrite a value already set; it fills unset keys.
    assert_eq!(
        op(&t, json!({"op": "get", "key": "units"})).await,
        Ok(json!("imperial"))
    );
    assert_eq!(
        op(&t, json!({"op": "get", "key": "days"})).await,
        Ok(json!(3))
    );
    assert_eq!(
        op(&t, json!({"op": "get", "key": "api_key"})).await,
        Ok(json!("k-123"))
    );
    assert_eq!(
        op(&t, json!({"op": "get", "key": "nope"})).await,
        Err("plugin hostuser: settings.get: NOT_FOUND: no `nope` in config_hostuser".into())
    );
    assert_eq!(
        op(&t, json!({"op": "set", "key": "days", "value": 5})).await,
        Ok(Value::Null)
    );
    assert_eq!(t.host().setting("days"), Some(json!(5)));
    assert_eq!(
        op(&t, json!({"op": "set", "key": "days", "value": "five"})).await,
        Err("plugin hostuser: settings.set: INVALID_ARGUMENT: setting `days` of plugin hostuser: expected a number (its def's type is `number`), got \"five\" (a string)".into())
    );
    assert_eq!(
        op(
            &t,
            json!({"op": "set", "key": "free", "value": {"any": ["json", 1]}})
        )
        .await,
        Ok(Value::Null)
    );
    assert_eq!(
        op(&t, json!({"op": "list"})).await,
        Ok(json!(["api_key", "days", "free", "units"]))
    );
    assert_eq!(
        op(&t, json!({"op": "defs"})).await,
        Ok(json!(["api_key", "days", "units"]))
    );

    // Default capabilities: no core settings, no other plugins' settings, no dump.
    for (args, method, cap) in [
        (
            json!({"op": "get_core", "key": "core.daemon.data_dir"}),
            "Settings.GetCore",
            "settings_core",
        ),
        (
            json!({"op": "get_plugin", "plugin": "other", "key": "token"}),
            "Settings.GetPlugin",
            "settings_cross",
        ),
        (json!({"op": "dump"}), "Settings.Dump", "settings_cross"),
    ] {
        let err = op(&t, args).await.unwrap_err();
        assert!(
            err.ends_with(&format!(
                "PERMISSION_DENIED: plugin hostuser: {method} needs capability `{cap}`; add it to `capabilities` in its plugin.json"
            )),
            "{err}"
        );
    }
    assert!(t.host().calls().contains(&"Settings.Dump".to_string()));
    assert_eq!(
        t.host().dump()["plugins"]["hostuser"]["api_key"],
        json!(SECRET_MASK)
    );
}

#[tokio::test]
async fn secrets_are_masked_for_other_readers_unless_the_capability_says_otherwise() {
    let start = |caps: &'static [&'static str]| {
        Harness::builder(HostUser)
            .capabilities(caps.iter().copied())
            .core_setting("llm.openai.api_key", "sk-core")
            .core_setting("core.name", "hearth")
            .start()
    };
    let t = start(&["settings_core", "settings_cross"]).await.unwrap();
    assert_eq!(
        op(&t, json!({"op": "get_core", "key": "core.name"})).await,
        Ok(json!("hearth"))
    );
    assert_eq!(
        op(&t, json!({"op": "get_core", "key": "llm.openai.api_key"})).await,
        Ok(json!(SECRET_MASK))
    );
    let err = op(
        &t,
        json!({"op": "set_core", "key": "llm.openai.api_key", "value": "x"}),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("PERMISSION_DENIED") && err.contains("`settings_secrets`"),
        "{err}"
    );
    let dump = op(&t, json!({"op": "dump"})).await.unwrap();
    assert_eq!(dump["core"]["llm.openai.api_key"], json!(SECRET_MASK));
    assert_eq!(dump["core"]["core.name"], json!("hearth"));
    assert_eq!(dump["plugins"]["hostuser"]["api_key"], json!(SECRET_MASK));
    assert_eq!(dump["plugins"]["hostuser"]["days"], json!(3));
    // Without `memory` (not listed), memory is refused too.
    let err = op(&t, json!({"op": "commit"})).await.unwrap_err();
    assert!(
        err.contains("Memory.Commit needs capability `memory`"),
        "{err}"
    );

    let t = start(&["settings_core", "settings_secrets"]).await.unwrap();
    assert_eq!(
        op(&t, json!({"op": "get_core", "key": "llm.openai.api_key"})).await,
        Ok(json!("sk-core"))
    );
}

#[tokio::test]
async fn memory_documents_knowledge_llm_and_input_are_served() {
    let t = Harness::builder(HostUser)
        .llm_sources(["openai", "ollama"])
        .start()
        .await
        .unwrap();
    assert_eq!(op(&t, json!({"op": "commit"})).await, Ok(json!(2)));
    let recalled = op(&t, json!({"op": "recall", "key": "ali"})).await.unwrap();
    assert_eq!(recalled["entities"][0]["name"], "Alice");
    assert_eq!(
        recalled["relations"],
        json!([{"source_name": "Alice", "target_name": "tea", "relation_type": "likes"}])
    );
    let stats = op(&t, json!({"op": "introspect"})).await.unwrap();
    assert_eq!(
        (stats["entities"].clone(), stats["relations"].clone()),
        (json!(3), json!(2))
    );
    assert_eq!(t.host().relations().len(), 2);
    t.host()
        .commit([Triple::new("Carol", "likes", "tea")])
        .unwrap();
    let recalled = op(&t, json!({"op": "recall", "key": "tea"})).await.unwrap();
    assert_eq!(recalled["relations"].as_array().unwrap().len(), 3);

    assert_eq!(
        op(&t, json!({"op": "append", "role": "user"})).await,
        Ok(Value::Null)
    );
    assert!(op(&t, json!({"op": "append", "role": ""}))
        .await
        .unwrap_err()
        .ends_with(
            "INVALID_ARGUMENT: TextMemory.Append: `role` is empty (system, user or assistant)"
        ));
    let events = t.host().text_events();
    assert_eq!((events.len(), events[0].content.as_str()), (1, "noted"));
    assert!(events[0].timestamp > 0);

    let found = op(&t, json!({"op": "docs"})).await.unwrap();
    assert_eq!(found[0]["id"], "d1");
    assert!(found[0]["score"].as_f64().unwrap() > 0.0);
    let k = op(&t, json!({"op": "knowledge"})).await.unwrap();
    assert_eq!(k["list"], json!(["rust_notes"]));
    assert_eq!(k["found"][0]["name"], "rust_notes");

    assert_eq!(
        op(&t, json!({"op": "llm"})).await,
        Ok(json!({"sources": ["openai", "ollama"], "before": "openai", "after": "ollama"}))
    );
    assert_eq!(t.host().current_llm_source(), "ollama");
    assert!(op(&t, json!({"op": "llm_unknown"}))
        .await
        .unwrap_err()
        .ends_with("NOT_FOUND: plugin hostuser: set_source: unknown LLM source `gpt-9` (known: openai, ollama)"));

    assert_eq!(op(&t, json!({"op": "inject"})).await, Ok(Value::Null));
    let injected = t.host().injected();
    assert_eq!(injected.len(), 1);
    assert_eq!(injected[0].kind, InjectKind::Text);
    assert_eq!(
        (
            injected[0].source.as_str(),
            injected[0].user_id.as_str(),
            injected[0].channel.as_str()
        ),
        ("plugin:hostuser", "plugin:hostuser", "qq")
    );
    let err = op(&t, json!({"op": "inject_as"})).await.unwrap_err();
    assert!(err.contains("needs capability `input_as_user`"), "{err}");
}

#[tokio::test]
async fn a_manifest_names_the_plugin_and_its_capabilities() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("plugin.json");
    std::fs::write(
        &manifest,
        r#"{"name": "weather-v2", "runtime": "exec", "capabilities": ["settings_core"]}"#,
    )
    .unwrap();
    let t = Harness::builder(HostUser)
        .manifest(&manifest)
        .core_setting("core.name", "hearth")
        .start()
        .await
        .unwrap();
    assert_eq!(t.plugin(), "weather-v2");
    assert_eq!(t.host().capabilities(), ["settings_core"]);
    assert_eq!(
        op(&t, json!({"op": "get_core", "key": "core.name"})).await,
        Ok(json!("hearth"))
    );
    assert!(op(&t, json!({"op": "commit"})).await.is_err());
    // The plugin's own settings live under the name the broker knows it by.
    assert_eq!(t.host().setting("days"), Some(json!(3)));

    std::fs::write(&manifest, r#"{"capabilities": "all"}"#).unwrap();
    let err = Harness::builder(HostUser)
        .manifest(&manifest)
        .start()
        .await
        .unwrap_err();
    assert!(matches!(err, HarnessError::Manifest { .. }), "{err:?}");
}

#[tokio::test]
async fn a_seeded_setting_of_the_wrong_type_is_refused_once_the_def_exists() {
    let t = Harness::start(HostUser).await.unwrap();
    let err = t.host().set_setting("units", 3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "fake host: setting `units` of plugin hostuser: expected a string (its def's type is `string`), got 3 (a number)"
    );
    assert!(t.host().is_secret("api_key"));
    assert_eq!(t.host().masked_setting("api_key"), Some(json!(SECRET_MASK)));
}

#[tokio::test]
async fn the_fake_mcp_servers_answer_canned_resources_and_prompts() {
    let t = Harness::builder(HostUser)
        .capabilities(["mcp"])
        .start()
        .await
        .unwrap();
    let host = t.host();
    host.add_mcp_resource("files", "test://doc/1", "hello resource");
    host.add_mcp_prompt("files", "greet", "Greet someone.", json!("Hello, Ann!"));
    host.set_mcp_result(
        "files",
        "resources/templates/list",
        Some(json!({"resourceTemplates": [{"uriTemplate": "test://doc/{id}", "name": "doc"}]})),
    )
    .unwrap();
    assert!(host.set_mcp_result("files", "tools/call", None).is_err());
    host.set_mcp_connected("down", false);

    assert_eq!(
        op(
            &t,
            json!({"op": "mcp_read", "server": "files", "uri": "test://doc/1"})
        )
        .await,
        Ok(json!("hello resource"))
    );
    assert_eq!(
        op(&t, json!({"op": "mcp"})).await,
        Ok(json!({
            "resources": [{"uri": "test://doc/1", "name": "test://doc/1", "mimeType": "text/plain"}],
            "templates": [{"uriTemplate": "test://doc/{id}", "name": "doc"}],
            "prompts": [{"name": "greet", "description": "Greet someone."}],
            "greet": {"description": "Greet someone.",
                      "messages": [{"role": "user", "content": {"type": "text", "text": "Hello, Ann!"}}]},
        }))
    );
    let err = |server: &str, method: &str, params: Value| {
        op(
            &t,
            json!({"op": "mcp_request", "server": server, "method": method, "params": params}),
        )
    };
    assert!(err("nope", "resources/list", Value::Null)
        .await
        .unwrap_err()
        .ends_with("NOT_FOUND: no MCP plugin named nope"));
    let e = err("files", "tools/call", Value::Null).await.unwrap_err();
    assert!(
        e.contains("INVALID_ARGUMENT: `tools/call` is not one of resources/list"),
        "{e}"
    );
    assert!(err("files", "resources/read", json!(["x"]))
        .await
        .unwrap_err()
        .ends_with(
            r#"INVALID_ARGUMENT: params of resources/read must be a JSON object, got ["x"]"#
        ));
    assert!(err("down", "resources/list", Value::Null)
        .await
        .unwrap_err()
        .ends_with("UNAVAILABLE: MCP server down is not connected"));
    assert!(err("files", "resources/read", json!({"uri": "test://nope"}))
        .await
        .unwrap_err()
        .ends_with("FAILED_PRECONDITION: MCP server files: resources/read: Unknown resource: test://nope"));
    let sent = host.mcp_requests();
    assert_eq!(
        (
            sent[0].server.as_str(),
            sent[0].method.as_str(),
            &sent[0].params
        ),
        ("files", "resources/read", &json!({"uri": "test://doc/1"}))
    );

    // Without capability `mcp` (the broker's defaults do not grant it either).
    host.set_capabilities(hearth_plugin::testing::DEFAULT_CAPABILITIES.iter().copied());
    let e = op(
        &t,
        json!({"op": "mcp_read", "server": "files", "uri": "test://doc/1"}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("Mcp.Request needs capability `mcp`"), "{e}");
}
