//! LinkZone `ai.tool` call policies the broker enforces for every SDK (seed:
//! linkzone-ai-tool-plugins.md, "tool 字段说明"):
//!
//! - `max_calls`: calls of the tool per conversation, where a conversation is one
//!   exchange — a message and the tool loop that answers it (LinkZone 单次对话); 0 =
//!   unlimited. Calls over it are not run; the LLM is told the limit.
//! - `cooldown` (s): per user — after a call by user U, further calls by U within the
//!   cooldown are not run; the LLM is told how long is left. A call that ends up not
//!   running (denied by a hook, declined, not confirmed) does not start a cooldown.
//! - `confirm`: the client is asked (`ConfirmRequest` on the Chat stream, answered by
//!   `Agent.Confirm`); a no, no answer within `confirm_timeout_s`, or an input that has
//!   no client to ask (injected input) means the call is not run, and the LLM is told.
//! - `timeout` (s): the call's timeout (enforced by the supervisor).
//! - `chainable: false` and `continue`: applied by the tool loop (`turn`): after a
//!   non-chainable call the loop ends — its result is the reply, or with `continue`
//!   the LLM writes one more reply from it, without tools.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hearth_proto::v1::AiTool;
use tokio::sync::oneshot;

/// Policy state shared by every turn: cooldowns and confirmations waiting for an
/// answer.
#[derive(Debug, Default)]
pub struct Policies {
    /// `(user, tool)` → when its cooldown ends.
    cooldowns: Mutex<HashMap<(String, String), Instant>>,
    /// Confirmation id → the turn waiting for the answer.
    confirms: Mutex<HashMap<String, oneshot::Sender<bool>>>,
    next_confirm: AtomicU64,
    /// Calls per tool of conversations outside the agent (an MCP session, a bearer),
    /// for `max_calls`; at most [`MAX_OUTSIDE_CONVERSATIONS`], the oldest forgotten.
    outside: Mutex<Outside>,
    /// The database whose `tool_cooldowns` every broker shares ([`Policies::share_cooldowns`]).
    shared: std::sync::OnceLock<crate::storage::pg::PgDb>,
}

/// Per-tool call counts of conversations outside the agent, oldest first in `order`.
#[derive(Debug, Default)]
struct Outside {
    counts: HashMap<String, HashMap<String, u32>>,
    order: std::collections::VecDeque<String>,
}

/// How many outside conversations [`Policies::admit_alone`] remembers counts for.
const MAX_OUTSIDE_CONVERSATIONS: usize = 10_000;

/// Why [`Policies::admit_alone`] did not admit a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The tool's `confirm` policy: the user has to approve the call first.
    NeedsConfirmation(String),
    /// `max_calls` or `cooldown` (the text names which, and what is left).
    Policy(String),
}

impl Refusal {
    /// The text saying why.
    pub fn message(&self) -> &str {
        match self {
            Refusal::NeedsConfirmation(m) | Refusal::Policy(m) => m,
        }
    }
}

/// A cooldown started by [`Policies::admit`]; [`Policies::release`] takes it back
/// when the call does not run after all.
#[derive(Debug)]
pub struct Admission {
    key: Option<(String, String)>,
    previous: Option<Instant>,
    /// The shared cooldown's end (Unix µs), when the brokers share a database.
    shared_until: Option<i64>,
}

impl Admission {
    fn none() -> Admission {
        Admission {
            key: None,
            previous: None,
            shared_until: None,
        }
    }
}

/// The `max_calls` refusal of `tool` after `count` admitted calls, if any.
fn max_calls_refusal(tool: &str, ai: &AiTool, count: u32) -> Result<(), String> {
    if ai.max_calls > 0 && count >= ai.max_calls {
        let times = match ai.max_calls {
            1 => "once".to_string(),
            2 => "twice".to_string(),
            n => format!("{n} times"),
        };
        return Err(format!(
            "max_calls: tool {tool} may be called at most {times} per conversation; this call was not run"
        ));
    }
    Ok(())
}

fn cooldown_refusal(tool: &str, ai: &AiTool, user: &str, left: Duration) -> String {
    let who = if user.is_empty() {
        "the same (anonymous) user".to_string()
    } else {
        format!("user `{user}`")
    };
    format!(
        "cooldown: tool {tool} may be called again by {who} in {} (its cooldown is {} s); this call was not run",
        seconds_left(left),
        ai.cooldown_s
    )
}

impl Policies {
    /// Cooldowns shared with the other brokers of `pg` from now on: a cooldown started
    /// on any of them holds on all (`tool_cooldowns`, the server's clock). Without it
    /// cooldowns are this broker's.
    pub fn share_cooldowns(&self, pg: crate::storage::pg::PgDb) {
        let _ = self.shared.set(pg);
    }

    /// Admits one call of `tool` (policy `ai`) by `user`, given how many calls of each
    /// tool this conversation has admitted so far (`counts`, updated). Starts the
    /// tool's cooldown for `user`. Errors: the text the LLM gets, naming the tool and
    /// the limit (or the seconds left).
    pub async fn admit(
        &self,
        tool: &str,
        ai: &AiTool,
        user: &str,
        counts: &mut HashMap<String, u32>,
    ) -> Result<Admission, String> {
        max_calls_refusal(tool, ai, counts.get(tool).copied().unwrap_or(0))?;
        let admission = self.cooldown(tool, ai, user).await?;
        *counts.entry(tool.to_string()).or_insert(0) += 1;
        Ok(admission)
    }

    /// Starts `user`'s cooldown of `tool`, unless one runs (here, or on another broker
    /// of the shared database).
    async fn cooldown(&self, tool: &str, ai: &AiTool, user: &str) -> Result<Admission, String> {
        if !(ai.cooldown_s > 0.0 && ai.cooldown_s.is_finite()) {
            return Ok(Admission::none());
        }
        let key = (user.to_string(), tool.to_string());
        let previous = {
            let now = Instant::now();
            let mut cooldowns = self.cooldowns.lock().unwrap();
            let previous = cooldowns.get(&key).copied();
            if let Some(until) = previous.filter(|until| *until > now) {
                return Err(cooldown_refusal(tool, ai, user, until - now));
            }
            cooldowns.insert(key.clone(), now + Duration::from_secs_f64(ai.cooldown_s));
            previous
        };
        let mut admission = Admission {
            key: Some(key),
            previous,
            shared_until: None,
        };
        if let Some(pg) = self.shared.get() {
            match crate::storage::pg::policies::take_cooldown(pg, user, tool, ai.cooldown_s).await {
                Ok(Ok(until)) => admission.shared_until = Some(until),
                Ok(Err(left)) => {
                    // Running on another broker: this broker's mark goes back.
                    self.restore(&admission);
                    return Err(cooldown_refusal(
                        tool,
                        ai,
                        user,
                        Duration::from_secs_f64(left),
                    ));
                }
                Err(e) => tracing::warn!(tool, "{e}; this cooldown holds on this broker only"),
            }
        }
        Ok(admission)
    }

    fn restore(&self, admission: &Admission) {
        let Some(key) = &admission.key else { return };
        let mut cooldowns = self.cooldowns.lock().unwrap();
        match admission.previous {
            Some(p) => cooldowns.insert(key.clone(), p),
            None => cooldowns.remove(key),
        };
    }

    /// Admits one call of `tool` (policy `ai`) by `user` made outside any turn
    /// (`Admin.CallTool` with `policies`, `hearth tools call --policies`): the call is
    /// a conversation of its own, so `max_calls` sees it alone, and its `cooldown` is
    /// the same per-user state chats use. A `confirm` tool runs only `confirmed` (the
    /// client asked the user beforehand); that is checked first, so such a refusal
    /// starts no cooldown.
    pub async fn admit_alone(
        &self,
        tool: &str,
        ai: &AiTool,
        user: &str,
        confirmed: bool,
    ) -> Result<Admission, Refusal> {
        self.admit_outside(tool, ai, user, "", confirmed).await
    }

    /// [`Policies::admit_alone`] for a call that belongs to `conversation` (an MCP
    /// session or bearer, e.g. `mcp:<session id>`): `max_calls` counts the calls of
    /// that conversation (on this broker: such a session stays on the broker it
    /// opened on). An empty `conversation` is a conversation of its own.
    pub async fn admit_outside(
        &self,
        tool: &str,
        ai: &AiTool,
        user: &str,
        conversation: &str,
        confirmed: bool,
    ) -> Result<Admission, Refusal> {
        if ai.confirm && !confirmed {
            return Err(Refusal::NeedsConfirmation(format!(
                "confirm: tool {tool} runs only once the user approved it; this call was not run (ask, then call again confirmed)"
            )));
        }
        if conversation.is_empty() {
            return self
                .admit(tool, ai, user, &mut HashMap::new())
                .await
                .map_err(Refusal::Policy);
        }
        // Counted at once (two calls of one session at the same moment both see the
        // count), and taken back if the cooldown refuses.
        {
            let mut guard = self.outside.lock().unwrap();
            let Outside { counts, order } = &mut *guard;
            if !counts.contains_key(conversation) {
                if order.len() >= MAX_OUTSIDE_CONVERSATIONS {
                    if let Some(oldest) = order.pop_front() {
                        counts.remove(&oldest);
                    }
                }
                order.push_back(conversation.to_string());
            }
            let count = counts
                .entry(conversation.to_string())
                .or_default()
                .entry(tool.to_string())
                .or_insert(0);
            max_calls_refusal(tool, ai, *count).map_err(Refusal::Policy)?;
            *count += 1;
        }
        match self.cooldown(tool, ai, user).await {
            Ok(admission) => Ok(admission),
            Err(e) => {
                let mut guard = self.outside.lock().unwrap();
                if let Some(count) = guard
                    .counts
                    .get_mut(conversation)
                    .and_then(|c| c.get_mut(tool))
                {
                    *count = count.saturating_sub(1);
                }
                Err(Refusal::Policy(e))
            }
        }
    }

    /// Takes back the cooldown `admission` started (the call did not run), here and,
    /// in the background, in the shared database.
    pub fn release(&self, admission: Admission) {
        self.restore(&admission);
        if let (Some((user, tool)), Some(until), Some(pg)) = (
            admission.key,
            admission.shared_until,
            self.shared.get().cloned(),
        ) {
            tokio::spawn(async move {
                if let Err(e) =
                    crate::storage::pg::policies::give_back(&pg, &user, &tool, until).await
                {
                    tracing::warn!(tool, "{e}; the cooldown runs out by itself");
                }
            });
        }
    }

    /// A new confirmation: its id and the receiver of the client's answer.
    pub fn ask(&self) -> (String, oneshot::Receiver<bool>) {
        let n = self.next_confirm.fetch_add(1, Ordering::Relaxed);
        let mut nonce = [0u8; 6];
        let _ = getrandom::fill(&mut nonce);
        let id = format!(
            "c{n}-{}",
            nonce.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        let (tx, rx) = oneshot::channel();
        self.confirms.lock().unwrap().insert(id.clone(), tx);
        (id, rx)
    }

    /// Delivers the client's answer to confirmation `id`. False when none is
    /// pending under that id (answered already, timed out, or unknown).
    pub fn answer(&self, id: &str, approved: bool) -> bool {
        match self.confirms.lock().unwrap().remove(id) {
            Some(tx) => tx.send(approved).is_ok(),
            None => false,
        }
    }

    /// Drops confirmation `id` (its wait is over).
    pub fn forget(&self, id: &str) {
        self.confirms.lock().unwrap().remove(id);
    }
}

/// `12 s` (whole seconds, rounded up), or `2.5 s` under ten seconds.
fn seconds_left(left: Duration) -> String {
    let s = left.as_secs_f64();
    if s >= 10.0 {
        format!("{} s", s.ceil())
    } else {
        format!("{:.1} s", (s * 10.0).ceil() / 10.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn max_calls_counts_per_conversation() {
        let p = Policies::default();
        let ai = AiTool {
            max_calls: 2,
            ..Default::default()
        };
        let mut counts = HashMap::new();
        assert!(p.admit("t", &ai, "u", &mut counts).await.is_ok());
        assert!(p.admit("t", &ai, "u", &mut counts).await.is_ok());
        let e = p.admit("t", &ai, "u", &mut counts).await.unwrap_err();
        assert_eq!(
            e,
            "max_calls: tool t may be called at most twice per conversation; this call was not run"
        );
        let once = AiTool {
            max_calls: 1,
            ..Default::default()
        };
        let mut counts = HashMap::new();
        p.admit("o", &once, "u", &mut counts).await.unwrap();
        let e = p.admit("o", &once, "u", &mut counts).await.unwrap_err();
        assert!(e.contains("at most once per conversation"), "{e}");
        // Another conversation starts from zero.
        assert!(p.admit("t", &ai, "u", &mut HashMap::new()).await.is_ok());
    }

    #[tokio::test]
    async fn cooldown_is_per_user_and_released_when_not_run() {
        let p = Policies::default();
        let ai = AiTool {
            cooldown_s: 3600.0,
            ..Default::default()
        };
        let a = p
            .admit("t", &ai, "alice", &mut HashMap::new())
            .await
            .unwrap();
        let e = p
            .admit("t", &ai, "alice", &mut HashMap::new())
            .await
            .unwrap_err();
        assert!(
            e.starts_with("cooldown: tool t may be called again by user `alice` in 3600 s (its cooldown is 3600 s)"),
            "{e}"
        );
        // The chat's default user is named `user`: no "for user user".
        p.admit("t", &ai, "user", &mut HashMap::new())
            .await
            .unwrap();
        let e = p
            .admit("t", &ai, "user", &mut HashMap::new())
            .await
            .unwrap_err();
        assert!(e.contains("by user `user` in"), "{e}");
        assert!(!e.contains("user user"), "{e}");
        assert_eq!(seconds_left(Duration::from_millis(2_410)), "2.5 s");
        assert_eq!(seconds_left(Duration::from_millis(11_200)), "12 s");
        assert!(p.admit("t", &ai, "bob", &mut HashMap::new()).await.is_ok());
        p.release(a);
        assert!(p
            .admit("t", &ai, "alice", &mut HashMap::new())
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn a_call_alone_asks_first_and_shares_cooldowns() {
        let p = Policies::default();
        let ai = AiTool {
            confirm: true,
            cooldown_s: 60.0,
            max_calls: 1,
            ..Default::default()
        };
        let e = p.admit_alone("t", &ai, "cli", false).await.unwrap_err();
        assert!(matches!(e, Refusal::NeedsConfirmation(_)), "{e:?}");
        // Not confirmed: no cooldown started.
        p.admit_alone("t", &ai, "cli", true).await.unwrap();
        // max_calls 1 counts each call alone; the cooldown is what refuses the next.
        let e = p.admit_alone("t", &ai, "cli", true).await.unwrap_err();
        assert!(e.message().starts_with("cooldown: tool t"), "{e:?}");
        // ... and a chat of the same user sees it too.
        assert!(p.admit("t", &ai, "cli", &mut HashMap::new()).await.is_err());
    }

    #[test]
    fn confirmations_are_answered_once() {
        let p = Policies::default();
        let (id, mut rx) = p.ask();
        assert!(p.answer(&id, true));
        assert_eq!(rx.try_recv(), Ok(true));
        assert!(!p.answer(&id, true));
        let (other, _rx) = p.ask();
        assert_ne!(id, other);
        p.forget(&other);
        assert!(!p.answer(&other, false));
    }

    /// Brokers sharing a database share cooldowns: a call started on one holds on the
    /// other, and a call that did not run gives its cooldown back on both.
    #[tokio::test]
    async fn cooldowns_hold_across_brokers_sharing_a_database() {
        let Some(cluster) = crate::testing::postgres::PgCluster::shared() else {
            return;
        };
        let url = cluster.database();
        let (a, b) = (Policies::default(), Policies::default());
        for p in [&a, &b] {
            let db = crate::storage::Db::postgres(&url).await.unwrap();
            p.share_cooldowns(db.pg().unwrap().clone());
        }
        let ai = AiTool {
            cooldown_s: 30.0,
            ..Default::default()
        };
        let admitted = a
            .admit("t", &ai, "alice", &mut HashMap::new())
            .await
            .unwrap();
        let e = b
            .admit("t", &ai, "alice", &mut HashMap::new())
            .await
            .unwrap_err();
        assert!(
            e.starts_with("cooldown: tool t may be called again by user `alice` in"),
            "{e}"
        );
        assert!(b.admit("t", &ai, "bob", &mut HashMap::new()).await.is_ok());
        // Not run after all: the cooldown is given back everywhere.
        a.release(admitted);
        let started = std::time::Instant::now();
        while b
            .admit("t", &ai, "alice", &mut HashMap::new())
            .await
            .is_err()
        {
            assert!(started.elapsed() < Duration::from_secs(5), "not given back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
