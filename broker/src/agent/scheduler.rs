//! Which turn runs next: a pure data structure (no tasks, no clock), owned by the
//! agent under one lock.
//!
//! # Rules
//! - **Ownership.** A conversation ([`ConversationKey`]) has at most one running
//!   turn; its inputs wait in its own FIFO queue and run strictly in order. The
//!   running marker is the conversation's *ownership*: only the holder runs turns of
//!   it, and it is released when the turn ends ([`Scheduler::finish`]). With several
//!   brokers the same rule becomes a lease in the shared database, taken where
//!   [`Scheduler::next_turn`] marks a conversation running and given back in `finish`.
//! - **Slots.** At most `max_running` turns run at once (`[agent]
//!   max_concurrent_turns`).
//! - **Priority, then round-robin.** A conversation with waiting input and no running
//!   turn is *ready*, at the level of the most urgent input in its queue (so an urgent
//!   message behind a background one is not stuck at background level). A free slot
//!   goes to the highest level that has a ready conversation; within a level,
//!   conversations take turns in the order they became ready, and a conversation whose
//!   turn ended goes to the back of its level. One flooding conversation therefore
//!   gets one turn per round, never all slots.
//! - **Bounded queues.** A conversation holds at most `per_conversation` waiting
//!   inputs; one more is refused ([`Busy`]), so memory never grows without bound.
//!   Conversations with nothing running and nothing waiting are forgotten.

use std::collections::{HashMap, VecDeque};

use hearth_proto::v1::Priority;

use crate::storage::ConversationKey;

/// Priority levels from least to most urgent (`Priority` 1..=4).
const LEVELS: usize = 4;

fn level(p: Priority) -> usize {
    (p as usize).clamp(1, LEVELS) - 1
}

/// The conversation's queue is full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    /// Inputs already waiting in it.
    pub waiting: usize,
}

/// Where a queued input stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Turns of its conversation ahead of it, the running one included.
    pub ahead: usize,
    /// It runs as soon as [`Scheduler::next_turn`] is asked (no turn ahead and a free
    /// slot).
    pub starts_now: bool,
}

#[derive(Debug)]
struct Waiting<J> {
    priority: Priority,
    job: J,
}

#[derive(Debug)]
struct Conversation<J> {
    queue: VecDeque<Waiting<J>>,
    running: bool,
    /// The level whose ready list holds this conversation, if any.
    ready_at: Option<usize>,
}

impl<J> Conversation<J> {
    fn level(&self) -> Option<usize> {
        self.queue.iter().map(|w| level(w.priority)).max()
    }
}

/// Counts, as `hearth` shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Turns running.
    pub running: usize,
    /// Inputs waiting, over all conversations.
    pub waiting: usize,
    /// Conversations with a running turn or waiting input.
    pub conversations: usize,
}

/// The scheduler (see the module docs). `J` is whatever the agent queues per input.
#[derive(Debug)]
pub struct Scheduler<J> {
    max_running: usize,
    per_conversation: usize,
    running: usize,
    waiting: usize,
    conversations: HashMap<ConversationKey, Conversation<J>>,
    /// Ready conversations by level (index 0 = background).
    ready: [VecDeque<ConversationKey>; LEVELS],
}

impl<J> Scheduler<J> {
    /// A scheduler running at most `max_running` turns (at least 1) with at most
    /// `per_conversation` inputs waiting per conversation.
    pub fn new(max_running: usize, per_conversation: usize) -> Scheduler<J> {
        Scheduler {
            max_running: max_running.max(1),
            per_conversation,
            running: 0,
            waiting: 0,
            conversations: HashMap::new(),
            ready: Default::default(),
        }
    }

    /// Queues `job` for conversation `key` at `priority`, at the back of its queue,
    /// or at the front with `front` (an interrupt for a conversation with no running
    /// turn). Errors: [`Busy`] when the conversation already holds
    /// `per_conversation` waiting inputs; nothing is queued then.
    pub fn push(
        &mut self,
        key: &ConversationKey,
        priority: Priority,
        job: J,
        front: bool,
    ) -> Result<Position, Busy> {
        let free_slot = self.running < self.max_running;
        let conv = self
            .conversations
            .entry(key.clone())
            .or_insert_with(|| Conversation {
                queue: VecDeque::new(),
                running: false,
                ready_at: None,
            });
        // Only inputs that wait count toward the limit (one that starts at once does not).
        let would_wait = !(conv.queue.is_empty() && !conv.running && free_slot);
        if would_wait && conv.queue.len() >= self.per_conversation {
            return Err(Busy {
                waiting: conv.queue.len(),
            });
        }
        let ahead = if front {
            usize::from(conv.running)
        } else {
            conv.queue.len() + usize::from(conv.running)
        };
        let waiting = Waiting { priority, job };
        if front {
            conv.queue.push_front(waiting);
        } else {
            conv.queue.push_back(waiting);
        }
        self.waiting += 1;
        if !conv.running {
            let new_level = conv.level().expect("just queued");
            match conv.ready_at {
                Some(l) if l >= new_level => {}
                Some(old) => {
                    self.ready[old].retain(|k| k != key);
                    self.ready[new_level].push_back(key.clone());
                    conv.ready_at = Some(new_level);
                }
                None => {
                    self.ready[new_level].push_back(key.clone());
                    conv.ready_at = Some(new_level);
                }
            }
        }
        Ok(Position {
            ahead,
            starts_now: ahead == 0 && free_slot,
        })
    }

    /// The next input to run, when a slot is free and some conversation is ready:
    /// its conversation is marked running (owned) until [`Scheduler::finish`].
    pub fn next_turn(&mut self) -> Option<(ConversationKey, J)> {
        if self.running >= self.max_running {
            return None;
        }
        let key = self.ready.iter_mut().rev().find_map(|l| l.pop_front())?;
        let conv = self
            .conversations
            .get_mut(&key)
            .expect("a ready conversation is known");
        let waiting = conv
            .queue
            .pop_front()
            .expect("a ready conversation has input");
        conv.running = true;
        conv.ready_at = None;
        self.running += 1;
        self.waiting -= 1;
        Some((key, waiting.job))
    }

    /// The running turn of `key` ended: the conversation is released and, when more
    /// input waits in it, goes to the back of its level.
    pub fn finish(&mut self, key: &ConversationKey) {
        let Some(conv) = self.conversations.get_mut(key) else {
            return;
        };
        if !conv.running {
            return;
        }
        conv.running = false;
        self.running -= 1;
        match conv.level() {
            Some(l) => {
                self.ready[l].push_back(key.clone());
                conv.ready_at = Some(l);
            }
            None => {
                self.conversations.remove(key);
            }
        }
    }

    /// Removes and returns every waiting input (the broker is stopping); running
    /// turns are left to finish.
    pub fn drain(&mut self) -> Vec<J> {
        for l in &mut self.ready {
            l.clear();
        }
        let mut out = Vec::with_capacity(self.waiting);
        self.conversations.retain(|_, c| {
            out.extend(c.queue.drain(..).map(|w| w.job));
            c.ready_at = None;
            c.running
        });
        self.waiting = 0;
        out
    }

    /// Running turns, waiting inputs and active conversations.
    pub fn load(&self) -> Load {
        Load {
            running: self.running,
            waiting: self.waiting,
            conversations: self.conversations.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(user: &str) -> ConversationKey {
        ConversationKey {
            user_id: user.into(),
            group_id: None,
            channel: "t".into(),
        }
    }

    const MSG: Priority = Priority::Message;

    /// Runs turns one slot at a time, finishing each at once; returns the order.
    fn run_all(s: &mut Scheduler<String>) -> Vec<String> {
        let mut order = Vec::new();
        while let Some((k, job)) = s.next_turn() {
            order.push(job);
            s.finish(&k);
        }
        order
    }

    #[test]
    fn one_conversation_runs_in_order_and_others_run_at_once() {
        let mut s = Scheduler::new(10, 32);
        let p = s.push(&key("a"), MSG, "a1".to_string(), false).unwrap();
        assert_eq!(
            p,
            Position {
                ahead: 0,
                starts_now: true
            }
        );
        s.push(&key("a"), MSG, "a2".into(), false).unwrap();
        s.push(&key("b"), MSG, "b1".into(), false).unwrap();
        let (k1, j1) = s.next_turn().unwrap();
        let (k2, j2) = s.next_turn().unwrap();
        assert_eq!((j1.as_str(), j2.as_str()), ("a1", "b1"));
        // a2 waits for a1 although slots are free.
        assert!(s.next_turn().is_none());
        let p = s.push(&key("a"), MSG, "a3".into(), false).unwrap();
        assert_eq!(
            p,
            Position {
                ahead: 2,
                starts_now: false
            }
        );
        s.finish(&k1);
        assert_eq!(s.next_turn().unwrap().1, "a2");
        s.finish(&k2);
        assert_eq!(
            s.load(),
            Load {
                running: 1,
                waiting: 1,
                conversations: 1
            }
        );
    }

    #[test]
    fn round_robin_keeps_a_flood_from_starving_others() {
        let mut s = Scheduler::new(1, 1000);
        for i in 0..500 {
            s.push(&key("flood"), MSG, format!("f{i}"), false).unwrap();
        }
        s.push(&key("quiet"), MSG, "q".into(), false).unwrap();
        let order = run_all(&mut s);
        // The quiet user's message is the second to run: one flood turn before it.
        assert_eq!(order[..3], ["f0", "q", "f1"]);
        assert_eq!(order.len(), 501);
        assert_eq!(s.load(), Load::default());
    }

    #[test]
    fn higher_priority_first_and_an_urgent_message_lifts_its_conversation() {
        let mut s = Scheduler::new(1, 32);
        s.push(&key("bg"), Priority::Background, "bg".to_string(), false)
            .unwrap();
        s.push(&key("m"), MSG, "m".into(), false).unwrap();
        s.push(&key("i"), Priority::Interactive, "i".into(), false)
            .unwrap();
        s.push(&key("low"), Priority::Background, "low1".into(), false)
            .unwrap();
        // An interactive message queued behind a background one lifts "low".
        s.push(&key("low"), Priority::Interactive, "low2".into(), false)
            .unwrap();
        assert_eq!(run_all(&mut s), ["i", "low1", "low2", "m", "bg"]);
    }

    #[test]
    fn interrupts_go_to_the_front_and_full_queues_refuse() {
        let mut s = Scheduler::new(4, 2);
        s.push(&key("a"), MSG, "a1".to_string(), false).unwrap();
        let (k, _) = s.next_turn().unwrap();
        s.push(&key("a"), MSG, "a2".into(), false).unwrap();
        let p = s
            .push(&key("a"), Priority::Critical, "stop".into(), true)
            .unwrap();
        assert_eq!(p.ahead, 1);
        assert_eq!(
            s.push(&key("a"), MSG, "a3".into(), false),
            Err(Busy { waiting: 2 })
        );
        s.finish(&k);
        assert_eq!(run_all(&mut s), ["stop", "a2"]);
        // Nothing was lost: the refused one was never queued.
        assert_eq!(s.load(), Load::default());
    }

    #[test]
    fn drain_returns_every_waiting_input_and_keeps_running_turns() {
        let mut s = Scheduler::new(1, 8);
        s.push(&key("a"), MSG, "a1".to_string(), false).unwrap();
        s.push(&key("a"), MSG, "a2".into(), false).unwrap();
        s.push(&key("b"), MSG, "b1".into(), false).unwrap();
        let (k, _) = s.next_turn().unwrap();
        let mut drained = s.drain();
        drained.sort();
        assert_eq!(drained, ["a2", "b1"]);
        assert_eq!(s.load().running, 1);
        assert!(s.next_turn().is_none());
        s.finish(&k);
        assert_eq!(s.load(), Load::default());
    }
}
