//! Conversation history in `hearth.db`: messages in the unified OpenAI-like shape
//! (`{role, content, tool_calls?, tool_call_id?, reasoning_content?}`), oldest first,
//! trimmed on append to a [`HistoryBudget`].
//!
//! # Trimming
//! History is cut from the front in *units*: a message that is not a tool result, with
//! the tool results that follow it. So an assistant message with `tool_calls` and its
//! tool results are kept or dropped together, and kept history never starts with a
//! `tool` message (leading tool results whose call is gone are dropped whatever the
//! budget). The newest unit is always kept, even alone over the budget: the turn just
//! appended is never lost.
//!
//! # Injected input
//! A message a plugin injected (`Input` host service) is stored with that plugin's
//! name ([`Conversations::append_injected`], column `injected_by`), outside the
//! message JSON: the LLM sees the message as it was, and
//! [`Conversations::history_with_injectors`] tells who put it there.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Db, StorageError};

/// Who a conversation belongs to.
///
/// A group conversation is shared by all its members: when `group_id` is set (and not
/// empty) the key is the group on its channel, and `user_id` only says who spoke.
/// Otherwise it is the user's private conversation on that channel; the same user on
/// another channel has another history. Group ids are taken as scoped to their
/// channel, so group "123" on two channels is two conversations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConversationKey {
    /// The user who speaks (the subject of a private conversation).
    pub user_id: String,
    /// The group, if the message came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// Source channel, e.g. "cli", "qq", "telegram".
    pub channel: String,
}

impl ConversationKey {
    /// `(scope, subject)` as stored: ("group", group_id) or ("user", user_id).
    pub(crate) fn scope(&self) -> (&'static str, &str) {
        match self.group_id.as_deref() {
            Some(group) if !group.is_empty() => ("group", group),
            _ => ("user", &self.user_id),
        }
    }
}

/// `group:<channel>/<group_id>` or `user:<channel>/<user_id>`: which conversation, as
/// errors and logs name it.
impl fmt::Display for ConversationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (scope, subject) = self.scope();
        write!(f, "{scope}:{}/{subject}", self.channel)
    }
}

/// How much history one conversation keeps; applied on every append. `None` = no
/// limit on that measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryBudget {
    /// Most messages kept.
    pub max_messages: Option<usize>,
    /// Most characters kept, counted over each message's stored JSON text (content,
    /// tool calls and reasoning alike).
    pub max_chars: Option<usize>,
}

impl Default for HistoryBudget {
    /// 100 messages and 60,000 characters (about 15–40k tokens).
    fn default() -> Self {
        HistoryBudget {
            max_messages: Some(100),
            max_chars: Some(60_000),
        }
    }
}

impl HistoryBudget {
    fn exceeded(&self, messages: usize, chars: usize) -> bool {
        self.max_messages.is_some_and(|max| messages > max)
            || self.max_chars.is_some_and(|max| chars > max)
    }
}

/// Conversation histories in a [`Db`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Conversations {
    db: Db,
    budget: HistoryBudget,
}

impl Conversations {
    /// Histories in `db`, each trimmed to `budget` on append.
    pub fn new(db: Db, budget: HistoryBudget) -> Conversations {
        Conversations { db, budget }
    }

    /// The budget applied on append.
    pub fn budget(&self) -> HistoryBudget {
        self.budget
    }

    /// The conversation's messages, oldest first, as `M` (e.g. [`Value`] or
    /// [`crate::llm::Message`]); empty if it has none.
    pub async fn history<M: DeserializeOwned + Send + 'static>(
        &self,
        key: &ConversationKey,
    ) -> Result<Vec<M>, StorageError> {
        Ok(self
            .history_with_injectors(key)
            .await?
            .into_iter()
            .map(|(message, _)| message)
            .collect())
    }

    /// Like [`Conversations::history`], each message with the plugin that injected it
    /// (`None`: a client's message, or one the agent wrote).
    pub async fn history_with_injectors<M: DeserializeOwned + Send + 'static>(
        &self,
        key: &ConversationKey,
    ) -> Result<Vec<(M, Option<String>)>, StorageError> {
        let (scope, subject) = self.scope_of(key);
        let channel = key.channel.clone();
        if let Some(pg) = self.db.pg() {
            return super::pg::conversations::history(pg, key, scope, &channel, &subject).await;
        }
        self.db
            .call(format!("read conversation {key}"), move |conn| {
                read_history(conn, scope, &channel, &subject)
            })
            .await
    }

    /// Appends `messages` (in order) in one transaction, then trims the conversation
    /// to the budget. Each message must serialize to a JSON object with a string
    /// `role`; otherwise nothing is stored. Appends of concurrent turns share one
    /// commit ([`Db::write`]); this returns once its messages are durable.
    pub async fn append<M: Serialize>(
        &self,
        key: &ConversationKey,
        messages: &[M],
    ) -> Result<(), StorageError> {
        self.append_injected(key, messages, None).await
    }

    /// [`Conversations::append`], with the first message (a turn's input) recorded as
    /// injected by the plugin `injected_by` when given.
    pub async fn append_injected<M: Serialize>(
        &self,
        key: &ConversationKey,
        messages: &[M],
        injected_by: Option<&str>,
    ) -> Result<(), StorageError> {
        let mut rows = messages
            .iter()
            .enumerate()
            .map(|(index, message)| {
                encode(message).map_err(|reason| StorageError::InvalidMessage {
                    conversation: key.to_string(),
                    index,
                    reason,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(first) = rows.first_mut() {
            first.injected_by = injected_by.map(str::to_string);
        }
        if rows.is_empty() {
            return Ok(());
        }
        let (scope, subject) = self.scope_of(key);
        let channel = key.channel.clone();
        let budget = self.budget;
        let dropped = if let Some(pg) = self.db.pg() {
            super::pg::conversations::append(pg, key, (scope, &channel, &subject), &rows, budget)
                .await?
        } else {
            self.db
                .write(format!("append to conversation {key}"), move |conn| {
                    let id = conversation_id(conn, scope, &channel, &subject)?;
                    insert(conn, id, &rows)?;
                    trim(conn, id, budget)
                })
                .await?
        };
        if dropped > 0 {
            tracing::debug!(conversation = %key, dropped, "conversation trimmed to budget");
        }
        Ok(())
    }

    /// Deletes the conversation's history.
    pub async fn clear(&self, key: &ConversationKey) -> Result<(), StorageError> {
        let (scope, subject) = self.scope_of(key);
        let channel = key.channel.clone();
        if let Some(pg) = self.db.pg() {
            let op = format!("clear conversation {key}");
            let client = pg.client(&op).await?;
            client
                .execute(
                    "DELETE FROM conversations WHERE scope = $1 AND channel = $2 AND subject = $3",
                    &[&scope, &channel, &subject],
                )
                .await
                .map_err(pg.error(op))?;
            return Ok(());
        }
        self.db
            .call(format!("clear conversation {key}"), move |conn| {
                conn.execute(
                    "DELETE FROM conversations WHERE scope = ?1 AND channel = ?2 AND subject = ?3",
                    params![scope, channel, subject],
                )
                .map(drop)
            })
            .await
    }

    fn scope_of(&self, key: &ConversationKey) -> (&'static str, String) {
        let (scope, subject) = key.scope();
        (scope, subject.to_string())
    }
}

/// A message ready to store.
pub(super) struct Row {
    pub(super) role: String,
    pub(super) json: String,
    pub(super) chars: usize,
    pub(super) injected_by: Option<String>,
}

fn encode<M: Serialize>(message: &M) -> Result<Row, String> {
    let message = serde_json::to_value(message).map_err(|e| e.to_string())?;
    let object = message
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, got {}", kind(&message)))?;
    let role = match object.get("role") {
        Some(Value::String(role)) if !role.is_empty() => role.clone(),
        Some(Value::String(_)) => return Err("`role` is empty".into()),
        Some(other) => return Err(format!("`role`: expected string, got {}", kind(other))),
        None => return Err("missing `role`".into()),
    };
    let json = serde_json::to_string(&message).map_err(|e| e.to_string())?;
    let chars = json.chars().count();
    Ok(Row {
        role,
        json,
        chars,
        injected_by: None,
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn read_history<M: DeserializeOwned>(
    conn: &Connection,
    scope: &str,
    channel: &str,
    subject: &str,
) -> rusqlite::Result<Vec<(M, Option<String>)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT m.message, m.injected_by FROM conversation_messages m
         JOIN conversations c ON c.id = m.conversation
         WHERE c.scope = ?1 AND c.channel = ?2 AND c.subject = ?3
         ORDER BY m.id",
    )?;
    let rows = stmt.query_map(params![scope, channel, subject], |row| {
        let text: String = row.get(0)?;
        let message = serde_json::from_str(&text)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, Type::Text, Box::new(e)))?;
        Ok((message, row.get(1)?))
    })?;
    rows.collect()
}

fn conversation_id(
    tx: &Connection,
    scope: &str,
    channel: &str,
    subject: &str,
) -> rusqlite::Result<i64> {
    let existing = tx
        .prepare_cached(
            "SELECT id FROM conversations WHERE scope = ?1 AND channel = ?2 AND subject = ?3",
        )?
        .query_row(params![scope, channel, subject], |row| row.get(0))
        .optional()?;
    if let Some(id) = existing {
        return Ok(id);
    }
    tx.prepare_cached("INSERT INTO conversations (scope, channel, subject) VALUES (?1, ?2, ?3)")?
        .execute(params![scope, channel, subject])?;
    Ok(tx.last_insert_rowid())
}

fn insert(tx: &Connection, conversation: i64, rows: &[Row]) -> rusqlite::Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut stmt = tx.prepare_cached(
        "INSERT INTO conversation_messages
             (conversation, role, message, chars, created_at, injected_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for row in rows {
        stmt.execute(params![
            conversation,
            row.role,
            row.json,
            row.chars as i64,
            now,
            row.injected_by
        ])?;
    }
    Ok(())
}

/// A message that is not a tool result and the tool results after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unit {
    pub(super) last_id: i64,
    messages: usize,
    chars: usize,
    /// Tool results with no message before them (only ever the first unit).
    orphan: bool,
}

/// Groups `(id, is_tool, chars)` rows, oldest first, into [`Unit`]s.
pub(super) fn units(rows: impl IntoIterator<Item = (i64, bool, usize)>) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    for (id, is_tool, chars) in rows {
        match units.last_mut() {
            Some(unit) if is_tool => {
                unit.last_id = id;
                unit.messages += 1;
                unit.chars += chars;
            }
            _ => units.push(Unit {
                last_id: id,
                messages: 1,
                chars,
                orphan: is_tool,
            }),
        }
    }
    units
}

/// How many units to drop from the front: orphan tool results always, then the
/// oldest units while over budget, never the newest one.
pub(super) fn units_to_drop(units: &[Unit], budget: HistoryBudget) -> usize {
    let mut messages: usize = units.iter().map(|u| u.messages).sum();
    let mut chars: usize = units.iter().map(|u| u.chars).sum();
    let mut drop = 0;
    for (i, unit) in units.iter().enumerate() {
        let newest = i + 1 == units.len();
        if unit.orphan || (!newest && budget.exceeded(messages, chars)) {
            messages -= unit.messages;
            chars -= unit.chars;
            drop += 1;
        } else {
            break;
        }
    }
    drop
}

/// Trims the conversation to `budget`; returns how many messages were deleted.
fn trim(tx: &Connection, conversation: i64, budget: HistoryBudget) -> rusqlite::Result<usize> {
    let units = {
        let mut stmt = tx.prepare_cached(
            "SELECT id, role = 'tool', chars FROM conversation_messages
             WHERE conversation = ?1 ORDER BY id",
        )?;
        let rows = stmt
            .query_map([conversation], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, bool>(1)?,
                    row.get::<_, i64>(2)? as usize,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        units(rows)
    };
    let drop = units_to_drop(&units, budget);
    if drop == 0 {
        return Ok(0);
    }
    tx.prepare_cached("DELETE FROM conversation_messages WHERE conversation = ?1 AND id <= ?2")?
        .execute(params![conversation, units[drop - 1].last_id])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::storage::test_db::{on_both_backends, TestDb};

    on_both_backends!(
        injected_input_is_recorded_outside_the_message,
        append_then_history_round_trips_unicode_and_tool_messages,
        keys_are_isolated_and_groups_shared,
        a_reopened_db_sees_earlier_history,
        trimming_by_count_keeps_tool_exchanges_whole,
        trimming_by_chars_and_never_starting_with_a_tool_message,
        invalid_messages_store_nothing,
    );

    fn key(user: &str, group: Option<&str>, channel: &str) -> ConversationKey {
        ConversationKey {
            user_id: user.into(),
            group_id: group.map(Into::into),
            channel: channel.into(),
        }
    }

    fn unlimited() -> HistoryBudget {
        HistoryBudget {
            max_messages: None,
            max_chars: None,
        }
    }

    async fn open(t: &TestDb, budget: HistoryBudget) -> Conversations {
        Conversations::new(t.open().await, budget)
    }

    fn tool_exchange() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "北京天气怎么样？🌧"}),
            json!({
                "role": "assistant",
                "content": null,
                "reasoning_content": "需要查天气",
                "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\":\"北京\"}"}
                }]
            }),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "{\"sky\":\"小雨\",\"c\":12}"}),
            json!({"role": "assistant", "content": "北京今天小雨，12°C。"}),
        ]
    }

    async fn injected_input_is_recorded_outside_the_message(t: TestDb) {
        let c = open(&t, unlimited()).await;
        let k = key("alice", None, "telegram");
        c.append(&k, &[json!({"role": "user", "content": "typed"})])
            .await
            .unwrap();
        c.append_injected(
            &k,
            &[
                json!({"role": "user", "content": "injected"}),
                json!({"role": "assistant", "content": "reply"}),
            ],
            Some("cron"),
        )
        .await
        .unwrap();
        let entries: Vec<(Value, Option<String>)> = c.history_with_injectors(&k).await.unwrap();
        let injectors: Vec<Option<&str>> = entries.iter().map(|(_, p)| p.as_deref()).collect();
        assert_eq!(injectors, [None, Some("cron"), None]);
        // The message itself is unchanged (the LLM gets it as it was).
        assert_eq!(entries[1].0, json!({"role": "user", "content": "injected"}));
        let plain: Vec<Value> = c.history(&k).await.unwrap();
        assert_eq!(plain.len(), 3);
    }

    async fn append_then_history_round_trips_unicode_and_tool_messages(t: TestDb) {
        let conversations = open(&t, unlimited()).await;
        let k = key("alice", None, "cli");
        assert!(conversations.history::<Value>(&k).await.unwrap().is_empty());
        let messages = tool_exchange();
        conversations.append(&k, &messages[..2]).await.unwrap();
        conversations.append(&k, &messages[2..]).await.unwrap();
        assert_eq!(conversations.history::<Value>(&k).await.unwrap(), messages);
    }

    async fn keys_are_isolated_and_groups_shared(t: TestDb) {
        let conversations = open(&t, unlimited()).await;
        let alice = key("alice", None, "cli");
        let bob = key("bob", None, "cli");
        let alice_qq = key("alice", None, "qq");
        let group_by_alice = key("alice", Some("g1"), "qq");
        let group_by_bob = key("bob", Some("g1"), "qq");
        let same_group_other_channel = key("bob", Some("g1"), "telegram");
        for (k, text) in [
            (&alice, "a"),
            (&bob, "b"),
            (&alice_qq, "aq"),
            (&group_by_alice, "g-alice"),
            (&group_by_bob, "g-bob"),
            (&same_group_other_channel, "tg"),
        ] {
            conversations
                .append(k, &[json!({"role": "user", "content": text})])
                .await
                .unwrap();
        }
        let contents = |history: Vec<Value>| -> Vec<String> {
            history
                .iter()
                .map(|m| m["content"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            contents(conversations.history::<Value>(&alice).await.unwrap()),
            ["a"]
        );
        assert_eq!(
            contents(conversations.history::<Value>(&bob).await.unwrap()),
            ["b"]
        );
        assert_eq!(
            contents(conversations.history::<Value>(&alice_qq).await.unwrap()),
            ["aq"]
        );
        assert_eq!(
            contents(conversations.history::<Value>(&group_by_bob).await.unwrap()),
            ["g-alice", "g-bob"]
        );
        assert_eq!(
            contents(
                conversations
                    .history::<Value>(&same_group_other_channel)
                    .await
                    .unwrap()
            ),
            ["tg"]
        );
        assert_eq!(group_by_bob.to_string(), "group:qq/g1");
        assert_eq!(alice.to_string(), "user:cli/alice");
        // An empty group id is no group.
        assert_eq!(key("alice", Some(""), "cli").to_string(), "user:cli/alice");

        conversations.clear(&group_by_alice).await.unwrap();
        assert!(conversations
            .history::<Value>(&group_by_bob)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            contents(conversations.history::<Value>(&alice).await.unwrap()),
            ["a"]
        );
        // A cleared conversation starts again.
        conversations
            .append(
                &group_by_bob,
                &[json!({"role": "user", "content": "again"})],
            )
            .await
            .unwrap();
        assert_eq!(
            contents(
                conversations
                    .history::<Value>(&group_by_alice)
                    .await
                    .unwrap()
            ),
            ["again"]
        );
    }

    async fn a_reopened_db_sees_earlier_history(t: TestDb) {
        let k = key("alice", Some("家"), "qq");
        {
            let conversations = open(&t, unlimited()).await;
            conversations.append(&k, &tool_exchange()).await.unwrap();
        }
        let conversations = open(&t, unlimited()).await;
        assert_eq!(
            conversations.history::<Value>(&k).await.unwrap(),
            tool_exchange()
        );
    }

    async fn trimming_by_count_keeps_tool_exchanges_whole(t: TestDb) {
        let budget = HistoryBudget {
            max_messages: Some(5),
            max_chars: None,
        };
        let conversations = open(&t, budget).await;
        let k = key("alice", None, "cli");
        // 4 messages: user, assistant+tool_calls, tool, assistant.
        conversations.append(&k, &tool_exchange()).await.unwrap();
        assert_eq!(conversations.history::<Value>(&k).await.unwrap().len(), 4);
        // 8 messages → over 5: drop "user" (7), then the 2-message tool exchange (5).
        conversations.append(&k, &tool_exchange()).await.unwrap();
        let history = conversations.history::<Value>(&k).await.unwrap();
        let mut expected = vec![tool_exchange()[3].clone()];
        expected.extend(tool_exchange());
        assert_eq!(history, expected);

        // A budget that falls inside an exchange drops the exchange whole.
        let budget = HistoryBudget {
            max_messages: Some(2),
            max_chars: None,
        };
        let conversations = Conversations::new(conversations.db.clone(), budget);
        let k = key("bob", None, "cli");
        let exchange = tool_exchange();
        conversations.append(&k, &exchange[..3]).await.unwrap();
        // user + (assistant, tool): 3 > 2 → drop user; the exchange is the newest unit.
        assert_eq!(
            conversations.history::<Value>(&k).await.unwrap(),
            exchange[1..3]
        );
        conversations.append(&k, &exchange[3..]).await.unwrap();
        // (assistant, tool) + assistant: 3 > 2 → the exchange goes whole, not just its half.
        assert_eq!(
            conversations.history::<Value>(&k).await.unwrap(),
            exchange[3..]
        );
    }

    async fn trimming_by_chars_and_never_starting_with_a_tool_message(t: TestDb) {
        let big = "字".repeat(100);
        let budget = HistoryBudget {
            max_messages: None,
            max_chars: Some(300),
        };
        let conversations = open(&t, budget).await;
        let k = key("alice", None, "cli");
        let user = json!({"role": "user", "content": big});
        conversations
            .append(&k, std::slice::from_ref(&user))
            .await
            .unwrap();
        conversations
            .append(&k, std::slice::from_ref(&user))
            .await
            .unwrap();
        assert_eq!(conversations.history::<Value>(&k).await.unwrap().len(), 2);
        conversations
            .append(&k, std::slice::from_ref(&user))
            .await
            .unwrap();
        // Each is 128 chars of JSON; 3 × 128 > 300: the oldest goes.
        assert_eq!(conversations.history::<Value>(&k).await.unwrap().len(), 2);

        // The newest unit stays even alone over the budget.
        let huge = json!({"role": "user", "content": "x".repeat(1000)});
        conversations
            .append(&k, std::slice::from_ref(&huge))
            .await
            .unwrap();
        assert_eq!(conversations.history::<Value>(&k).await.unwrap(), [huge]);

        // Tool results with no call before them are never the start of history.
        let k = key("carol", None, "cli");
        let orphan = json!({"role": "tool", "tool_call_id": "gone", "content": "late"});
        conversations
            .append(&k, std::slice::from_ref(&orphan))
            .await
            .unwrap();
        assert!(conversations.history::<Value>(&k).await.unwrap().is_empty());
        conversations
            .append(&k, &[orphan, user.clone()])
            .await
            .unwrap();
        assert_eq!(conversations.history::<Value>(&k).await.unwrap(), [user]);
    }

    #[test]
    fn units_group_tool_results_with_their_call() {
        // user, assistant(tool_calls), tool, tool, assistant
        let rows = [
            (1, false, 10),
            (2, false, 10),
            (3, true, 5),
            (4, true, 5),
            (5, false, 10),
        ];
        let u = units(rows);
        assert_eq!(
            u.iter()
                .map(|u| (u.last_id, u.messages))
                .collect::<Vec<_>>(),
            [(1, 1), (4, 3), (5, 1)]
        );
        let budget = |m| HistoryBudget {
            max_messages: Some(m),
            max_chars: None,
        };
        assert_eq!(units_to_drop(&u, budget(5)), 0);
        assert_eq!(units_to_drop(&u, budget(4)), 1);
        assert_eq!(units_to_drop(&u, budget(3)), 2);
        assert_eq!(units_to_drop(&u, budget(0)), 2, "the newest unit stays");
        let orphan_first = units([(1, true, 1), (2, false, 1)]);
        assert_eq!(units_to_drop(&orphan_first, budget(10)), 1);
    }

    async fn invalid_messages_store_nothing(t: TestDb) {
        let conversations = open(&t, unlimited()).await;
        let k = key("alice", None, "cli");
        let err = conversations
            .append(
                &k,
                &[
                    json!({"role": "user", "content": "ok"}),
                    json!({"content": "no role"}),
                ],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "conversation user:cli/alice: message 1: missing `role`"
        );
        let err = conversations
            .append(&k, &[json!("text")])
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .ends_with("expected a JSON object, got string"),
            "{err}"
        );
        assert!(conversations.history::<Value>(&k).await.unwrap().is_empty());
        conversations.append::<Value>(&k, &[]).await.unwrap();
    }
}
