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
}

/// A cooldown started by [`Policies::admit`]; [`Policies::release`] takes it back
/// when the call does not run after all.
#[derive(Debug)]
pub struct Admission {
    key: Option<(String, String)>,
    previous: Option<Instant>,
}

impl Policies {
    /// Admits one call of `tool` (policy `ai`) by `user`, given how many calls of each
    /// tool this conversation has admitted so far (`counts`, updated). Starts the
    /// tool's cooldown for `user`. Errors: the text the LLM gets, naming the tool and
    /// the limit (or the seconds left).
    pub fn admit(
        &self,
        tool: &str,
        ai: &AiTool,
        user: &str,
        counts: &mut HashMap<String, u32>,
    ) -> Result<Admission, String> {
        let count = counts.entry(tool.to_string()).or_insert(0);
        if ai.max_calls > 0 && *count >= ai.max_calls {
            return Err(format!(
                "tool {tool} was not run: it may be called at most {} time(s) per conversation (max_calls)",
                ai.max_calls
            ));
        }
        let mut admission = Admission {
            key: None,
            previous: None,
        };
        if ai.cooldown_s > 0.0 && ai.cooldown_s.is_finite() {
            let key = (user.to_string(), tool.to_string());
            let now = Instant::now();
            let mut cooldowns = self.cooldowns.lock().unwrap();
            let previous = cooldowns.get(&key).copied();
            if let Some(until) = previous.filter(|until| *until > now) {
                return Err(format!(
                    "tool {tool} was not run: it is cooling down for user {user} ({:.1} s left of its {} s cooldown)",
                    (until - now).as_secs_f64(),
                    ai.cooldown_s
                ));
            }
            cooldowns.insert(key.clone(), now + Duration::from_secs_f64(ai.cooldown_s));
            admission = Admission {
                key: Some(key),
                previous,
            };
        }
        *count += 1;
        Ok(admission)
    }

    /// Takes back the cooldown `admission` started (the call did not run).
    pub fn release(&self, admission: Admission) {
        let Some(key) = admission.key else { return };
        let mut cooldowns = self.cooldowns.lock().unwrap();
        match admission.previous {
            Some(p) => cooldowns.insert(key, p),
            None => cooldowns.remove(&key),
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_calls_counts_per_conversation() {
        let p = Policies::default();
        let ai = AiTool {
            max_calls: 2,
            ..Default::default()
        };
        let mut counts = HashMap::new();
        assert!(p.admit("t", &ai, "u", &mut counts).is_ok());
        assert!(p.admit("t", &ai, "u", &mut counts).is_ok());
        let e = p.admit("t", &ai, "u", &mut counts).unwrap_err();
        assert!(e.contains("at most 2 time(s)"), "{e}");
        // Another conversation starts from zero.
        assert!(p.admit("t", &ai, "u", &mut HashMap::new()).is_ok());
    }

    #[test]
    fn cooldown_is_per_user_and_released_when_not_run() {
        let p = Policies::default();
        let ai = AiTool {
            cooldown_s: 3600.0,
            ..Default::default()
        };
        let a = p.admit("t", &ai, "alice", &mut HashMap::new()).unwrap();
        let e = p.admit("t", &ai, "alice", &mut HashMap::new()).unwrap_err();
        assert!(e.contains("cooling down for user alice"), "{e}");
        assert!(p.admit("t", &ai, "bob", &mut HashMap::new()).is_ok());
        p.release(a);
        assert!(p.admit("t", &ai, "alice", &mut HashMap::new()).is_ok());
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
}
