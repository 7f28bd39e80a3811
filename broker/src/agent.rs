//! The agent: one input queue, one turn at a time.
//!
//! Chat requests (`Agent.Chat`), `hearth inject` (`Agent.Inject`) and plugins'
//! `Input` host-service calls all become [`TurnInput`]s. Normal input waits its turn
//! in order; an interrupt goes to the running turn (cancelling its LLM request in
//! flight, which is asked again with the interrupt as a system message) or, when no
//! turn runs, ahead of the queue (seed: InjectInterruptText "优先 / 取消当前请求").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use hearth_proto::v1::ChatEvent;
use tokio::sync::{mpsc, Notify};

use crate::pipeline::policy::Policies;
use crate::pipeline::turn::{Interrupts, TurnDeps, TurnInput};

struct Job {
    input: TurnInput,
    events: mpsc::UnboundedSender<ChatEvent>,
}

/// Handle to the agent's queue; cheap to clone.
#[derive(Clone)]
pub struct Agent {
    queue: Arc<Mutex<VecDeque<Job>>>,
    wake: Arc<Notify>,
    interrupts: Arc<Interrupts>,
    policies: Arc<Policies>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").finish_non_exhaustive()
    }
}

impl Agent {
    /// Starts the worker that runs turns with `deps` (whose `interrupts` the agent
    /// shares).
    pub fn start(deps: TurnDeps) -> Agent {
        let agent = Agent {
            queue: Arc::new(Mutex::new(VecDeque::new())),
            wake: Arc::new(Notify::new()),
            interrupts: deps.interrupts.clone(),
            policies: deps.policies.clone(),
        };
        let worker = agent.clone();
        tokio::spawn(async move {
            loop {
                let job = worker.queue.lock().unwrap().pop_front();
                let Some(job) = job else {
                    worker.wake.notified().await;
                    continue;
                };
                worker.interrupts.set_active(true);
                deps.run(job.input, &job.events).await;
                worker.interrupts.set_active(false);
            }
        });
        agent
    }

    /// Queues `input`; its events go to the returned receiver, which ends after the
    /// final event. Returns how many inputs wait ahead of it.
    pub fn submit(&self, input: TurnInput) -> (usize, mpsc::UnboundedReceiver<ChatEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let ahead = {
            let mut q = self.queue.lock().unwrap();
            q.push_back(Job { input, events: tx });
            q.len() - 1
        };
        self.wake.notify_one();
        (ahead, rx)
    }

    /// Answers the `ConfirmRequest` `confirm_id` of a running turn (`ai.tool`
    /// `confirm`). False when no confirmation of that id is waiting (already
    /// answered, timed out, or unknown).
    pub fn confirm(&self, confirm_id: &str, approved: bool) -> bool {
        self.policies.answer(confirm_id, approved)
    }

    /// Queues input whose reply nobody waits for (injected by a plugin or the CLI);
    /// the reply is logged. With `interrupt`, the text goes to the running turn, or
    /// ahead of the queue when none runs. Returns how many inputs wait ahead of it.
    pub fn inject(&self, source: &str, input: TurnInput, interrupt: bool) -> usize {
        if interrupt && self.interrupts.interrupt(source, &input.text) {
            return 0;
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<ChatEvent>();
        let source = source.to_string();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                if let Some(hearth_proto::v1::chat_event::Event::Final(f)) = ev.event {
                    tracing::info!(source = %source, "reply to injected input: {}", if f.error.is_empty() { &f.text } else { &f.error });
                }
            }
        });
        let ahead = {
            let mut q = self.queue.lock().unwrap();
            let job = Job { input, events: tx };
            if interrupt {
                q.push_front(job);
                0
            } else {
                q.push_back(job);
                q.len() - 1
            }
        };
        self.wake.notify_one();
        ahead
    }
}
