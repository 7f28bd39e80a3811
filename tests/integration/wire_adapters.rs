//! The Lua adapter host through a real broker: a transform stuck in a C function
//! (`string.find` with a pathological pattern, which the instruction budget cannot
//! interrupt) fails only its own chat, within `[llm] adapter_timeout_ms`, while a chat of
//! another conversation on the same adapter answers meanwhile.

use std::time::{Duration, Instant};

use hearth_broker::cli::AdminConn;
use hearth_proto::v1::chat_event::Event;
use hearth_proto::v1::ChatRequest;
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::json;

use crate::harness::{final_of, repo, Broker};

/// Starts `Agent.Chat` for `message` as `user`; the task returns the events and how long
/// the chat took from its start.
async fn start_chat(
    admin: &AdminConn,
    user: &str,
    message: &str,
) -> tokio::task::JoinHandle<(Vec<Event>, Duration)> {
    let mut admin = admin.clone();
    let req = admin.with_token(ChatRequest {
        message: message.into(),
        user_id: user.into(),
        channel: "test".into(),
        ..Default::default()
    });
    let started = Instant::now();
    let mut stream = admin.agent().chat(req).await.unwrap().into_inner();
    tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(ev) = stream.message().await.unwrap() {
            events.extend(ev.event);
        }
        (events, started.elapsed())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_transform_fails_its_own_chat_and_another_answers_meanwhile() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({"default": {"content": "fine, {user}"}})).unwrap(),
    );
    // The built-in openai adapter, whose request transform first runs a pattern that takes
    // 10 s or more (at 500 characters) when the request mentions PATHOLOGICAL.
    let builtin = std::fs::read_to_string(repo().join("adapters/openai.lua")).unwrap();
    let at = builtin
        .rfind("return adapter")
        .expect("adapters/openai.lua ends with `return adapter`");
    let custom = format!(
        "{}local inner = adapter.transform_request\n\
         adapter.transform_request = function(raw)\n\
         \x20 if raw:find('PATHOLOGICAL', 1, true) then string.find(string.rep('a', 500), '.-.-.-b') end\n\
         \x20 return inner(raw)\n\
         end\n{}",
        &builtin[..at],
        &builtin[at..]
    );
    let cfg = "[llm]\nadapter_timeout_ms = 1500\n";
    let mut b = Broker::with_llm(
        vec![],
        &llm,
        &[("adapters/openai.lua", &custom), ("hearth.toml", cfg)],
    )
    .await;

    let stuck = start_chat(&b.admin, "ann", "PATHOLOGICAL input").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let other = start_chat(&b.admin, "bob", "hello").await;
    let (other, other_took) = other.await.unwrap();
    let (stuck, stuck_took) = stuck.await.unwrap();

    // Bob's chat was not queued behind Ann's stuck transform.
    let f = final_of(&other);
    assert!(f.error.is_empty(), "{f:?}");
    assert_eq!(f.text, "fine, hello");
    assert!(
        other_took < Duration::from_millis(1200),
        "the other chat took {other_took:?}"
    );
    // Ann's chat failed at the bound with an error naming adapter, function and limit.
    let f = final_of(&stuck);
    assert!(
        f.error
            .contains("adapter openai: transform_request did not finish within 1500 ms")
            && f.error.contains("adapter_timeout_ms"),
        "{f:?}"
    );
    assert!(
        stuck_took >= Duration::from_millis(1500) && stuck_took < Duration::from_secs(6),
        "the stuck chat took {stuck_took:?}"
    );
    // Only Bob's request reached the API; Ann's conversation goes on.
    assert_eq!(llm.requests().len(), 1);
    let f = final_of(&b.chat("and now?", "ann").await);
    assert!(f.error.is_empty(), "{f:?}");
    assert_eq!(f.text, "fine, and now?");
}
