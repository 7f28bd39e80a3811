//! The agent: many conversations at once, each strictly in order.
//!
//! Chat requests (`Agent.Chat`), `hearth inject` (`Agent.Inject`) and plugins'
//! `Input` host-service calls all become [`TurnInput`]s of a conversation (a group on
//! a channel, or a user's private chat on a channel: [`ConversationKey`]). The
//! [`scheduler`] decides which input runs next: one turn at a time per conversation,
//! up to `[agent] max_concurrent_turns` turns of different conversations at once, the
//! more urgent first and round-robin across conversations within a priority level,
//! at most `[agent] queue_per_conversation` inputs waiting per conversation.
//!
//! Each turn runs in a task of its own ([`turn`]: the stages around the LLM
//! tool-calling loop; [`tools`]: tool calls with their `ai.tool` policies; [`history`]:
//! what the turn leaves in history and TextMemory). An interrupt reaches the running
//! turn of its own conversation ([`interrupts`]), or the front of that conversation's
//! queue when none runs.
//!
//! # Lifecycle
//! Every turn task takes a child of the agent's cancellation token and is tracked.
//! [`Agent::shutdown`] stops accepting input, answers every waiting input with a
//! final event saying it was not processed, lets running turns finish within a grace
//! period, then cancels them (each client gets a final event with the reason). A turn
//! longer than `[agent] turn_timeout_s` is cancelled the same way, and a turn that
//! panics ends with a final error; either way its conversation is released.

pub mod history;
pub mod interrupts;
pub mod scheduler;
pub mod tools;
pub mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use hearth_proto::v1::{chat_event::Event, ChatEvent, Final, Priority, Queued};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::storage::ConversationKey;
use interrupts::TurnInterrupts;
pub use scheduler::Load;
use scheduler::Scheduler;
pub use turn::TurnDeps;

/// One input to the agent.
#[derive(Debug, Clone, Default)]
pub struct TurnInput {
    /// The message text.
    pub text: String,
    /// Who speaks.
    pub user_id: String,
    /// Group, if any (a group's conversation is shared).
    pub group_id: String,
    /// Channel (`cli`, a plugin's channel, …).
    pub channel: String,
    /// Skip TextMemory for this turn.
    pub no_memory: bool,
    /// A client reads the turn's events and can answer `ConfirmRequest`s
    /// (`Agent.Chat`); injected input has none, so `confirm` tools are not run.
    pub can_confirm: bool,
    /// How urgent it is (scheduling only).
    pub priority: Priority,
    /// The plugin that injected this input (`Input` host service): recorded with its
    /// message in history (`conversation_messages.injected_by`) and TextMemory.
    /// `None` for a client's input (`Agent.Chat`, `Agent.Inject`).
    pub injected_by: Option<String>,
    /// The caller's trace context (`traceparent` metadata of the request), parent of
    /// the turn's `invoke_agent` span; `None` when absent or tracing is off.
    pub trace_parent: Option<opentelemetry::Context>,
}

impl TurnInput {
    /// The conversation this input belongs to.
    pub fn key(&self) -> ConversationKey {
        ConversationKey {
            user_id: self.user_id.clone(),
            group_id: Some(self.group_id.clone()).filter(|g| !g.is_empty()),
            channel: self.channel.clone(),
        }
    }
}

/// Where a turn's events go: a client's stream (`Agent.Chat`), or the log (injected
/// input nobody waits for: only the final reply is logged).
#[derive(Debug, Clone)]
pub enum EventSink {
    /// A client reads every event.
    Client(mpsc::UnboundedSender<ChatEvent>),
    /// Nobody reads: the final reply is logged under who injected it.
    Log {
        /// Who injected the input.
        source: String,
    },
}

impl EventSink {
    /// Sends `e` (a closed client stream does not stop the turn).
    pub fn emit(&self, e: Event) {
        match self {
            EventSink::Client(tx) => {
                let _ = tx.send(ChatEvent { event: Some(e) });
            }
            EventSink::Log { source } => {
                if let Event::Final(f) = e {
                    if f.error.is_empty() {
                        tracing::info!(source = %source, "reply to injected input: {}", f.text);
                    } else {
                        tracing::warn!(source = %source, "injected input failed: {}", f.error);
                    }
                }
            }
        }
    }

    /// Ends the turn with an error and nothing else.
    fn fail(&self, error: String) {
        self.emit(Event::Final(Final {
            error,
            ..Default::default()
        }));
    }
}

/// Why input was not accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The conversation already holds `queue_per_conversation` waiting inputs.
    #[error("conversation {conversation} is busy: {} already wait for their turn ([agent] queue_per_conversation = {limit}); try again when it has answered", crate::term::count(*.waiting, "message", "messages"))]
    Busy {
        /// Which conversation.
        conversation: String,
        /// Inputs waiting in it.
        waiting: usize,
        /// The limit.
        limit: usize,
    },
    /// The broker is shutting down.
    #[error("the broker is stopping and takes no new input")]
    Stopping,
}

impl From<AgentError> for tonic::Status {
    fn from(e: AgentError) -> tonic::Status {
        match e {
            AgentError::Busy { .. } => tonic::Status::resource_exhausted(e.to_string()),
            AgentError::Stopping => tonic::Status::unavailable(e.to_string()),
        }
    }
}

/// Where accepted input went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Turns of its conversation ahead of it, the running one included.
    pub ahead: usize,
    /// Its conversation, as logs name it (`user:cli/alice`).
    pub conversation: String,
    /// An interrupt that cut into the running turn (not queued).
    pub interrupted: bool,
}

struct Job {
    input: TurnInput,
    events: EventSink,
    queued_at: Instant,
}

struct State {
    scheduler: Scheduler<Job>,
    /// Interrupt handles of the running turns.
    running: HashMap<ConversationKey, Arc<TurnInterrupts>>,
    stopping: bool,
}

struct Shared {
    state: Mutex<State>,
    deps: TurnDeps,
    /// Cancelled when running turns must stop (shutdown past its grace).
    cancel: CancellationToken,
    tasks: TaskTracker,
    queue_limit: usize,
}

/// Handle to the agent; cheap to clone.
#[derive(Clone)]
pub struct Agent {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").finish_non_exhaustive()
    }
}

/// Releases a turn's conversation when the turn task ends, however it ends.
struct Release {
    agent: Agent,
    key: ConversationKey,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.agent.finished(&self.key);
    }
}

impl Agent {
    /// An agent running turns with `deps`, scheduled by `deps.settings`
    /// (`max_concurrent_turns`, `queue_per_conversation`).
    pub fn start(deps: TurnDeps) -> Agent {
        let s = &deps.settings;
        let scheduler = Scheduler::new(s.max_concurrent_turns, s.queue_per_conversation);
        let agent = Agent {
            shared: Arc::new(Shared {
                queue_limit: s.queue_per_conversation,
                state: Mutex::new(State {
                    scheduler,
                    running: HashMap::new(),
                    stopping: false,
                }),
                deps,
                cancel: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        };
        if let Some(leases) = &agent.shared.deps.leases {
            tokio::spawn(answer_forwarded_confirms(
                Arc::downgrade(&agent.shared),
                leases.clone(),
            ));
        }
        agent
    }

    /// Queues a chat turn; its events go to the returned receiver, which ends after
    /// the final event. A `Queued` event comes first when the turn cannot start at
    /// once. Errors: [`AgentError::Busy`], [`AgentError::Stopping`].
    pub fn submit(
        &self,
        input: TurnInput,
    ) -> Result<(Accepted, mpsc::UnboundedReceiver<ChatEvent>), AgentError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let accepted = self.enqueue(input, EventSink::Client(tx), false)?;
        Ok((accepted, rx))
    }

    /// Queues input whose reply nobody waits for (injected by a plugin or the CLI);
    /// the reply is logged under `source`. With `interrupt`, the text cuts into the
    /// running turn of its conversation, or goes to the front of that conversation's
    /// queue when none runs. Errors as [`Agent::submit`].
    pub fn inject(
        &self,
        source: &str,
        mut input: TurnInput,
        interrupt: bool,
    ) -> Result<Accepted, AgentError> {
        let events = EventSink::Log {
            source: source.to_string(),
        };
        if !interrupt {
            return self.enqueue(input, events, false);
        }
        input.priority = Priority::Critical;
        let key = input.key();
        {
            let state = self.shared.state.lock().unwrap();
            if state.stopping {
                return Err(AgentError::Stopping);
            }
            if let Some(running) = state.running.get(&key) {
                running.interrupt(source, &input.text);
                tracing::info!(conversation = %key, source = %source, "interrupt delivered to the running turn");
                return Ok(Accepted {
                    ahead: 0,
                    conversation: key.to_string(),
                    interrupted: true,
                });
            }
        }
        self.enqueue(input, events, true)
    }

    /// Answers the `ConfirmRequest` `confirm_id` of a running turn (`ai.tool`
    /// `confirm`). False when no confirmation of that id is waiting (already
    /// answered, timed out, or unknown). With brokers sharing a database, an id no
    /// turn of this broker waits for is passed to the others (the client's answer may
    /// reach another broker than its chat), and true once the one that had it says
    /// so (within 2 s).
    pub async fn confirm(&self, confirm_id: &str, approved: bool) -> bool {
        if self.shared.deps.policies.answer(confirm_id, approved) {
            return true;
        }
        let Some(leases) = &self.shared.deps.leases else {
            return false;
        };
        if confirm_id.is_empty() || confirm_id.contains(char::is_whitespace) {
            return false;
        }
        let mut notices = leases.listener().subscribe();
        let payload = format!("answer {confirm_id} {}", u8::from(approved));
        tracing::debug!(confirm = %confirm_id, "not waited for here; passing it to the other brokers");
        if let Err(e) = leases
            .pg()
            .notify(crate::storage::pg::listener::CONFIRMS_CHANNEL, &payload)
            .await
        {
            tracing::warn!("passing a confirmation to the other brokers: {e}");
            return false;
        }
        let done = async {
            loop {
                match notices.recv().await {
                    Ok(crate::storage::pg::listener::Notice::ConfirmDone(id))
                        if id == confirm_id =>
                    {
                        return true
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(2), done)
            .await
            .unwrap_or(false)
    }

    /// The `ai.tool` policy state of every turn (cooldowns, confirmations): calls made
    /// outside a turn with policies (`Admin.CallTool`) share it.
    pub fn policies(&self) -> Arc<crate::pipeline::policy::Policies> {
        self.shared.deps.policies.clone()
    }

    /// Turns running, inputs waiting and active conversations.
    pub fn load(&self) -> Load {
        self.shared.state.lock().unwrap().scheduler.load()
    }

    /// Stops taking input, answers every waiting input with a final event saying it
    /// was not processed, and lets running turns finish for up to `grace`; then
    /// cancels them (their clients get a final event naming the shutdown) and waits
    /// for their tasks to end.
    pub async fn shutdown(&self, grace: Duration) {
        let drained = {
            let mut state = self.shared.state.lock().unwrap();
            state.stopping = true;
            state.scheduler.drain()
        };
        if !drained.is_empty() {
            tracing::info!(
                "{} not processed: the broker is stopping",
                crate::term::count(drained.len(), "waiting message", "waiting messages")
            );
        }
        for job in drained {
            job.events
                .fail("the broker is stopping: this message was not processed".into());
        }
        self.shared.tasks.close();
        let running = self.load().running;
        if running > 0 {
            tracing::info!(
                "letting {} finish (up to {} ms)",
                crate::term::count(running, "running turn", "running turns"),
                grace.as_millis()
            );
        }
        if tokio::time::timeout(grace, self.shared.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "{} still running after {} ms; cancelling",
                crate::term::count(self.load().running, "turn", "turns"),
                grace.as_millis()
            );
            self.shared.cancel.cancel();
            self.shared.tasks.wait().await;
        }
    }

    fn enqueue(
        &self,
        input: TurnInput,
        events: EventSink,
        front: bool,
    ) -> Result<Accepted, AgentError> {
        let key = input.key();
        let priority = input.priority;
        let mut state = self.shared.state.lock().unwrap();
        if state.stopping {
            return Err(AgentError::Stopping);
        }
        let job = Job {
            input,
            events: events.clone(),
            queued_at: Instant::now(),
        };
        let position = state
            .scheduler
            .push(&key, priority, job, front)
            .map_err(|busy| AgentError::Busy {
                conversation: key.to_string(),
                waiting: busy.waiting,
                limit: self.shared.queue_limit,
            })?;
        if !position.starts_now {
            events.emit(Event::Queued(Queued {
                ahead: position.ahead as u32,
                conversation: key.to_string(),
                held_by: String::new(),
            }));
        }
        let ready = Self::take_ready(&mut state);
        drop(state);
        self.start_turns(ready);
        Ok(Accepted {
            ahead: position.ahead,
            conversation: key.to_string(),
            interrupted: false,
        })
    }

    /// Takes every input that can run now and registers its turn's interrupts (with the
    /// state locked); [`Agent::start_turns`] then starts them, with the lock released.
    fn take_ready(state: &mut State) -> Vec<(ConversationKey, Job, Arc<TurnInterrupts>)> {
        let mut ready = Vec::new();
        while let Some((key, job)) = state.scheduler.next_turn() {
            let interrupts = Arc::new(TurnInterrupts::default());
            state.running.insert(key.clone(), interrupts.clone());
            ready.push((key, job, interrupts));
        }
        ready
    }

    /// Spawns a task per turn. Not under the state lock: a runtime that is shutting
    /// down drops a spawned task at once, and its [`Release`] takes the lock.
    fn start_turns(&self, ready: Vec<(ConversationKey, Job, Arc<TurnInterrupts>)>) {
        for (key, job, interrupts) in ready {
            let waited = job.queued_at.elapsed();
            if waited > Duration::from_millis(100) {
                tracing::debug!(conversation = %key, "turn starts after waiting {} ms", waited.as_millis());
            }
            let release = Release {
                agent: self.clone(),
                key,
            };
            let shared = self.shared.clone();
            self.shared.tasks.spawn(async move {
                let _release = release;
                shared.run(job, &interrupts).await;
            });
        }
    }

    /// The turn of `key` ended: release its conversation and start what can run.
    fn finished(&self, key: &ConversationKey) {
        let ready = {
            let mut state = self.shared.state.lock().unwrap();
            state.running.remove(key);
            state.scheduler.finish(key);
            if state.stopping {
                return;
            }
            Self::take_ready(&mut state)
        };
        self.start_turns(ready);
    }
}

impl Shared {
    /// Runs one turn to its final event, bounded by the turn timeout and the
    /// agent's cancellation; a panic becomes a final error.
    async fn run(&self, job: Job, interrupts: &TurnInterrupts) {
        let Job { input, events, .. } = job;
        let key = input.key();
        // With brokers sharing a database, the turn first takes its conversation's
        // lease (waiting while another broker runs a turn of it); its history writes
        // are fenced by it, and it is given back when the turn ends, however it ends.
        let turn = async {
            let Some(leases) = &self.deps.leases else {
                return Ok(self.deps.run(input, &events, interrupts).await);
            };
            let lease = leases
                .acquire_noting(&key, |holder| {
                    events.emit(Event::Queued(Queued {
                        ahead: 0,
                        conversation: key.to_string(),
                        held_by: holder.to_string(),
                    }))
                })
                .await?;
            let done = lease
                .turn_lease()
                .scope(self.deps.run(input, &events, interrupts))
                .await;
            lease.release().await;
            Ok::<_, crate::storage::StorageError>(done)
        };
        let turn = std::panic::AssertUnwindSafe(turn).catch_unwind();
        let limit = self.deps.settings.turn_timeout;
        // A finished turn records its own outcome (`TurnDeps::run`); these are the ends
        // it cannot see.
        let started = std::time::Instant::now();
        let unfinished = |outcome| crate::observe::metrics::record_turn(outcome, started.elapsed());
        let error = tokio::select! {
            outcome = async {
                match limit {
                    Some(limit) => tokio::time::timeout(limit, turn).await.ok(),
                    None => Some(turn.await),
                }
            } => match outcome {
                Some(Ok(Ok(_final_event))) => return,
                Some(Ok(Err(e))) => {
                    unfinished("error");
                    tracing::error!(conversation = %key, "turn not run: {e}");
                    format!("this message was not processed: the conversation could not be taken ({e})")
                }
                Some(Err(_panic)) => {
                    unfinished("error");
                    tracing::error!(conversation = %key, "turn panicked; the conversation goes on with its next message");
                    "internal error: the turn failed unexpectedly (see the broker log)".to_string()
                }
                None => {
                    unfinished("error");
                    let limit = limit.unwrap_or_default();
                    tracing::warn!(conversation = %key, "turn cancelled after {} s ([agent] turn_timeout_s)", limit.as_secs_f64());
                    format!("the turn took longer than [agent] turn_timeout_s = {} and was cancelled", limit.as_secs_f64())
                }
            },
            _ = self.cancel.cancelled() => {
                unfinished("cancelled");
                tracing::warn!(conversation = %key, "turn cancelled: the broker is stopping");
                "the broker is stopping: this turn was cancelled before it finished".to_string()
            }
        };
        events.fail(error);
    }
}

/// Answers confirmations that clients sent to other brokers of the shared database,
/// for turns running here, and says so (`done <id>`).
async fn answer_forwarded_confirms(
    shared: std::sync::Weak<Shared>,
    leases: crate::storage::pg::leases::Leases,
) {
    use crate::storage::pg::listener::{Notice, CONFIRMS_CHANNEL};
    let mut notices = leases.listener().subscribe();
    loop {
        let notice = match notices.recv().await {
            Ok(n) => n,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let Notice::ConfirmAnswer { id, approved } = notice else {
            continue;
        };
        tracing::debug!(confirm = %id, "a confirmation answered at another broker");
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.deps.policies.answer(&id, approved) {
            if let Err(e) = leases
                .pg()
                .notify(CONFIRMS_CHANNEL, &format!("done {id}"))
                .await
            {
                tracing::warn!("confirming a forwarded answer: {e}");
            }
        }
    }
}
