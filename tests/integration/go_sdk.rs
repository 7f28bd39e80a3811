//! The Go SDK against a real broker, beyond what the language tables already run
//! (`LANGS` in supervision.rs drives the Go stress plugin through every fault, crash and
//! restart; agent.rs runs Go stage hooks beside the other languages; host.rs runs the
//! shared host cases from Go): cancellation reaching a Go handler's context, and the
//! Go examples as a user runs them — copied out of the checkout, built by their
//! manifest's `build` step at load, serving a seed-style tool, hooks and settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hearth_proto::v1::chat_event::Event;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::json;

use crate::harness::{final_of, not_shared, repo, stress, Broker};

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_call_past_its_timeout_cancels_the_handlers_context() {
    let mut b = Broker::start(vec![stress("go", "gox", "", json!({}))]).await;
    let err = b
        .call_timeout("gox_sleep", json!({"ms": 30000}), 300)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    assert!(
        err.message()
            .contains("plugin gox: tool gox_sleep timed out after 300 ms"),
        "{}",
        err.message()
    );
    // The broker sent Cancel; the SDK cancelled the handler's ctx, which printed it.
    b.wait_log("gox_sleep: cancelled", LONG).await;
    // Several calls in flight, one cancelled: the others finish.
    let slow = {
        let mut admin = Broker::admin_clone(&b);
        tokio::spawn(async move {
            let req = admin.with_token(hearth_proto::v1::CallToolRequest {
                name: "gox_sleep".into(),
                args_json: r#"{"ms": 600}"#.into(),
                ..Default::default()
            });
            admin.client().call_tool(req).await
        })
    };
    let err = b
        .call_timeout("gox_sleep", json!({"ms": 30000}), 200)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    let r = slow.await.unwrap().expect("the other call");
    assert!(r.get_ref().success, "{r:?}");
    assert_eq!(b.log().matches("gox_sleep: cancelled").count(), 2);
    assert!(
        b.call("gox_echo", json!({"after": "cancel"}))
            .await
            .unwrap()
            .success
    );
}

/// Copies `examples/plugins/<name>` (sources only, no `bin/`) to `<broker root>/extra/`,
/// pointing its go.mod's `replace` at this checkout's sdk-go by absolute path (as a
/// plugin kept outside the checkout does), and returns the copy.
fn copy_go_example(b: &Broker, name: &str) -> PathBuf {
    let src = repo().join("examples/plugins").join(name);
    let dst = b.root.path().join("extra").join(name);
    std::fs::create_dir_all(&dst).unwrap();
    not_shared(&dst);
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            let file = entry.file_name();
            let mut text = std::fs::read_to_string(entry.path()).unwrap();
            if file == "go.mod" {
                let sdk = repo().join("sdk-go");
                text = text.replace("=> ../../../sdk-go", &format!("=> {}", sdk.display()));
                assert!(text.contains(&sdk.display().to_string()), "{text}");
            }
            std::fs::write(dst.join(&file), text).unwrap();
        }
    }
    dst
}

fn load(b: &Broker, dir: &Path) {
    let (code, out, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}\nbroker log:\n{}", b.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_examples_build_at_load_and_serve_seed_style_tools_hooks_and_settings() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"default": {"content": "hi there"}})).unwrap(),
    );
    let mut b = Broker::with_llm(vec![], &llm, &[]).await;
    for name in ["hello_go", "guard"] {
        let dir = copy_go_example(&b, name);
        assert!(!dir.join("bin").exists());
        load(&b, &dir);
        b.wait_ready(name).await;
        assert!(dir.join("bin").join(name).is_file(), "{name}: not built");
    }
    // The build's output and the plugin's own lines are in its log.
    let (code, logs, _) = b.cli(&["plugins", "logs", "guard", "-n", "200"]);
    assert_eq!(code, 0);
    assert!(logs.contains("go build"), "{logs}");

    // Cyrene style: the seed's hello, unchanged but for its import path and name.
    let r = b.call("hello_go", json!({"name": "Hearth"})).await.unwrap();
    assert!(r.success, "{r:?}");
    assert_eq!(r.content, "Hearth，昔涟向你问好♪");
    let r = b.call("hello_go", json!({})).await.unwrap();
    assert_eq!(r.content, "开拓者，昔涟向你问好♪");

    // HomeAgent style: the ConfigDefs are registered, the tools write the settings …
    let (code, defs, err) = b.cli(&["settings", "defs", "--plugin", "guard", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        defs.contains("blocked_users") && defs.contains("Block message"),
        "{defs}"
    );
    let r = b
        .call("guard_block", json!({"user": "mallory"}))
        .await
        .unwrap();
    assert!(r.success && r.content.contains("blocked mallory"), "{r:?}");
    let r = b.call("guard_block", json!({"user": ""})).await.unwrap();
    assert!(!r.success && r.error.contains("non-empty"), "{r:?}");
    let r = b.call("guard_list", json!({})).await.unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&r.content).unwrap(),
        json!({"blocked": ["mallory"]})
    );

    // … the on_input hook answers a blocked user before the LLM …
    let events = b.chat("let me in", "mallory").await;
    assert_eq!(final_of(&events).text, "已被限制使用");
    assert!(events.iter().any(
        |e| matches!(e, Event::ShortCircuit(s) if s.stage == "on_input" && s.plugin == "guard")
    ));
    assert!(llm.requests().is_empty(), "a blocked user reached the LLM");

    // … and the pre_action hook gives the LLM the time.
    let f = final_of(&b.chat("hello", "alice").await);
    assert_eq!(f.text, "hi there");
    let req = &llm.requests()[0];
    let has_time = req["messages"].as_array().unwrap().iter().any(|m| {
        m["role"] == "system"
            && m["content"]
                .as_str()
                .unwrap_or("")
                .starts_with("当前时间: ")
    });
    assert!(has_time, "{req}");
}
