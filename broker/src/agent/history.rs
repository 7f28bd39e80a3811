//! What a turn leaves behind: its messages appended to the conversation's history
//! (`hearth.db`) and, unless the input is `no_memory`, one TextMemory line per
//! message. Both writes run at once, each as one durable write per turn (one
//! transaction; one write + fdatasync for all lines), and both stores commit the
//! writes of concurrent turns together (group commit). The turn's final event is sent
//! only after they returned, so an acknowledged reply is in history.
//!
//! The first message of a turn's record is its input; when a plugin injected it, the
//! plugin's name is stored with that message (history column `injected_by`, and
//! `injected_by` in its TextMemory line), so injected text is never mistaken for what
//! its user typed.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::llm::Message;
use crate::storage::{ConversationKey, Conversations, TextEvent, TextMemory};

/// The TextMemory line of `m`: its text, and its tool calls when it has any.
fn text_event(m: &Message, channel: &str, now: i64, injected_by: Option<&str>) -> TextEvent {
    let text = m.content_text();
    let content = if m.tool_calls.is_empty() {
        text
    } else {
        let calls: Vec<String> = m
            .tool_calls
            .iter()
            .map(|c| format!("{}({})", c.function.name, c.function.arguments))
            .collect();
        format!("{text} [tool calls: {}]", calls.join(", "))
            .trim_start()
            .to_string()
    };
    TextEvent {
        role: m.role.clone(),
        content,
        timestamp: now,
        channel: channel.to_string(),
        injected_by: injected_by.unwrap_or_default().to_string(),
    }
}

/// Appends `record` to `key`'s history and (unless `no_memory`) to TextMemory, its
/// first message (the turn's input) marked as injected by the plugin `injected_by`.
/// Failures are logged; the reply is still given.
///
/// # Errors
/// The history write's error (e.g. [`crate::storage::StorageError::LeaseLost`] when
/// another broker took the conversation over), as text: the turn reports it, so its
/// client knows the exchange was not kept. A TextMemory failure is only logged.
pub async fn remember(
    conversations: Option<&Conversations>,
    text_memory: Option<&TextMemory>,
    key: &ConversationKey,
    record: &[Message],
    no_memory: bool,
    injected_by: Option<&str>,
) -> Result<(), String> {
    let history = async {
        let Some(c) = conversations else {
            return Ok(());
        };
        c.append_injected(key, record, injected_by)
            .await
            .map_err(|e| {
                tracing::error!("history of {key}: {e}");
                e.to_string()
            })
    };
    let text = async {
        let Some(tm) = text_memory.filter(|_| !no_memory) else {
            return;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let events: Vec<TextEvent> = record
            .iter()
            .enumerate()
            .map(|(i, m)| text_event(m, &key.channel, now, injected_by.filter(|_| i == 0)))
            .collect();
        if let Err(e) = tm.append_all(&events).await {
            tracing::error!("TextMemory of {key}: {e}");
        }
    };
    tokio::join!(history, text).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{FunctionCall, MessageToolCall};

    #[test]
    fn tool_calls_are_written_with_their_arguments() {
        let m = Message {
            role: "assistant".into(),
            tool_calls: vec![MessageToolCall {
                id: "a".into(),
                kind: "function".into(),
                function: FunctionCall {
                    name: "weather".into(),
                    arguments: r#"{"city":"Paris"}"#.into(),
                },
                ..Default::default()
            }],
            ..Default::default()
        };
        let e = text_event(&m, "cli", 5, None);
        assert_eq!(e.content, r#"[tool calls: weather({"city":"Paris"})]"#);
        assert_eq!(
            text_event(&Message::text("user", "hi"), "cli", 5, None).content,
            "hi"
        );
        // An injected input names its plugin in the line.
        let e = text_event(&Message::text("user", "hi"), "cli", 5, Some("cron"));
        assert_eq!(e.injected_by, "cron");
        let line = serde_json::to_value(&e).unwrap();
        assert_eq!(line["injected_by"], "cron");
    }
}
