//! One turn of the agent: stages in order around the LLM tool-calling loop, events
//! to the client as they happen, history and TextMemory afterwards.
//!
//! `on_input` → history + user message → memory recall → `pre_action` → [LLM
//! (streamed) → `post_action` → tool calls concurrently ([`super::tools`])]* →
//! `before_output` → `after_output`. A `response` set by a hook jumps to
//! `after_output`; a deny affects only its call and the LLM is told who denied it.
//! The loop ends on a reply without tool calls, after a tool with `chainable: false`,
//! or after `max_iterations`.
//!
//! The turn keeps its messages typed ([`Message`]) and serializes them once per LLM
//! round, for the adapter; they are encoded into `StageContext.context_msgs` only
//! when a `pre_action` hook exists, and read back only when a hook changed them.
//! Stages no plugin hooks cost nothing.
//!
//! LinkZone triggers ([`crate::triggers`]): after `on_input`, a message that matches a
//! plugin's trigger (types 0–3) is delivered to it as `HandleEvent` and answered by its
//! `sender.reply` texts instead of the LLM. Inject specs are described in the system
//! prompt; a line of the LLM's final reply written in an inject format is delivered
//! the same way and its replies take the line's place. Event triggers (type 4) get
//! every `message` (alongside the turn) and every `reply`.

use std::collections::HashMap;
use std::sync::Arc;

use hearth_proto::v1::{
    chat_event::Event, Final, Interrupted, Sender, ShortCircuit as ShortCircuitEvent, Stage,
    StageContext, TextDelta,
};
use serde_json::Value;

use super::history::remember;
use super::interrupts::TurnInterrupts;
use super::tools::PlannedCall;
use super::{EventSink, TurnInput};
use crate::adapters::{CompletionResponse, TokenUsage};
use crate::llm::{
    failover, AgentSettings, CompletionRequest, Delta, FunctionCall, LlmClient, LlmError, Message,
    MessageToolCall, SourcePool,
};
use crate::pipeline::memory::{memory_message, MemorySources};
use crate::pipeline::policy::Policies;
use crate::pipeline::{Hooks, ShortCircuit};
use crate::registry::TriggerSets;
use crate::router::ToolRouter;
use crate::storage::{ConversationKey, Conversations, TextMemory};
use crate::triggers::delivery::{self, CommandFilter};
use crate::triggers::inject_prompt;

/// What a turn needs; shared by every turn.
#[derive(Debug, Clone)]
pub struct TurnDeps {
    /// Calls to plugins (tools, hooks, events) and the registry.
    pub router: Arc<ToolRouter>,
    /// Stage hooks.
    pub hooks: Hooks,
    /// LLM HTTP client.
    pub llm: LlmClient,
    /// LLM sources with their health and load (failover order).
    pub sources: Arc<SourcePool>,
    /// Agent settings.
    pub settings: Arc<AgentSettings>,
    /// Histories.
    pub conversations: Option<Conversations>,
    /// TextMemory log.
    pub text_memory: Option<TextMemory>,
    /// `ai.tool` cooldowns and pending confirmations.
    pub policies: Arc<Policies>,
    /// Stores recalled into the context before `pre_action` (None = no memory).
    pub memory: Option<MemorySources>,
    /// Conversation leases, when several brokers share a PostgreSQL database: a turn
    /// runs only while its broker holds its conversation's lease (`None` = this broker
    /// alone owns its conversations).
    pub leases: Option<crate::storage::pg::leases::Leases>,
}

/// How the part of a turn before `before_output` ended.
enum Ending {
    /// The final reply text.
    Reply(String),
    /// A hook set `response`.
    Short(ShortCircuit),
    /// The LLM could not be asked (message names source and cause).
    Failed(String),
}

/// One running turn: what it was given and what it knows of its conversation.
pub(super) struct Turn<'a> {
    pub(super) deps: &'a TurnDeps,
    pub(super) input: &'a TurnInput,
    pub(super) events: &'a EventSink,
    interrupts: &'a TurnInterrupts,
    pub(super) key: ConversationKey,
    pub(super) sender: Sender,
    /// Trigger sets at the start of the turn, in plugin load order.
    sets: TriggerSets,
}

fn add_usage(ctx: &mut StageContext, u: &TokenUsage) {
    for (k, v) in [
        ("prompt", u.prompt),
        ("completion", u.completion),
        ("total", u.total),
    ] {
        *ctx.token_usage.entry(k.into()).or_insert(0) += v as i64;
    }
}

impl TurnDeps {
    /// Runs one turn for `input`, sending events to `events`; `interrupts` is the
    /// turn's interrupt handle (registered under its conversation by the agent).
    /// Returns the final event, which was also sent.
    pub async fn run(
        &self,
        input: TurnInput,
        events: &EventSink,
        interrupts: &TurnInterrupts,
    ) -> Final {
        let key = input.key();
        let sender = Sender {
            user_id: input.user_id.clone(),
            group_id: input.group_id.clone(),
            channel: input.channel.clone(),
            session_id: key.to_string(),
        };
        let span = crate::observe::trace::turn_span(&key.to_string(), input.trace_parent.as_ref());
        let started = std::time::Instant::now();
        let turn = Turn {
            deps: self,
            input: &input,
            events,
            interrupts,
            sets: self.router.registry().trigger_sets(),
            key,
            sender,
        };
        use tracing::Instrument as _;
        let log_span = tracing::info_span!(
            "turn",
            conversation = %turn.key,
            trace_id = span.as_ref().map(|s| s.trace_id()).unwrap_or_default(),
        );
        let (done, outcome) = match &span {
            Some(span) => {
                use opentelemetry::context::FutureExt as _;
                turn.run()
                    .with_context(span.context().clone())
                    .instrument(log_span)
                    .await
            }
            None => turn.run().instrument(log_span).await,
        };
        crate::observe::metrics::record_turn(outcome, started.elapsed());
        if let Some(span) = &span {
            span.set_turn_provider();
            if !done.error.is_empty() {
                span.fail("turn_error", done.error.clone());
            }
        }
        done
    }
}

impl Turn<'_> {
    pub(super) fn emit(&self, e: Event) {
        self.events.emit(e);
    }

    /// The turn; returns its final event and its outcome (`ok`, `error`,
    /// `short_circuit`) for the metrics.
    async fn run(&self) -> (Final, &'static str) {
        let mut ctx = StageContext {
            raw_message: self.input.text.clone(),
            user_id: self.input.user_id.clone(),
            group_id: self.input.group_id.clone(),
            no_memory: self.input.no_memory,
            extra_json: "{}".into(),
            ..Default::default()
        };
        let mut record: Vec<Message> = Vec::new();
        let mut iterations = 0u32;
        let emit = |e: Event| self.emit(e);
        // Event triggers see every message while the turn goes on.
        let message_events = delivery::deliver_events(
            &self.deps.router,
            &self.sets,
            "message",
            &self.input.text,
            &self.sender,
            &emit,
        );
        let body = self.body(&mut ctx, &mut record, &mut iterations);
        let (outcome, mut side_replies) = tokio::join!(body, message_events);

        let hooks = &self.deps.hooks;
        let mut error = String::new();
        let mut result = "ok";
        let final_text = match outcome {
            Ending::Reply(text) => {
                ctx.final_text = text;
                match hooks.run(Stage::BeforeOutput, &mut ctx, None).await {
                    Some(sc) => {
                        result = "short_circuit";
                        self.short_circuit(&ctx, sc)
                    }
                    None => ctx.final_text.clone(),
                }
            }
            Ending::Short(sc) => {
                result = "short_circuit";
                if record.is_empty() {
                    record.push(Message::text("user", ctx.raw_message.clone()));
                }
                self.short_circuit(&ctx, sc)
            }
            Ending::Failed(e) => {
                result = "error";
                error = e;
                format!("Error: {error}")
            }
        };
        ctx.final_text = final_text.clone();
        ctx.response = None;
        hooks.run(Stage::AfterOutput, &mut ctx, None).await;
        if error.is_empty() {
            side_replies.extend(
                delivery::deliver_events(
                    &self.deps.router,
                    &self.sets,
                    "reply",
                    &final_text,
                    &self.sender,
                    &emit,
                )
                .await,
            );
            let mut remembered = final_text.clone();
            for r in &side_replies {
                remembered = format!("{remembered}\n{r}").trim().to_string();
            }
            record.push(Message::text("assistant", remembered));
            let kept = remember(
                self.deps.conversations.as_ref(),
                self.deps.text_memory.as_ref(),
                &self.key,
                &record,
                self.input.no_memory,
                self.input.injected_by.as_deref(),
            )
            .await;
            if let Err(e) = kept {
                // The reply was given, but the conversation will not remember it: the
                // client must not take the exchange as kept.
                result = "error";
                error = format!("the reply was given but not stored: {e}");
            }
        }
        let done = Final {
            text: final_text,
            token_usage: ctx.token_usage.clone(),
            iterations,
            error,
        };
        self.emit(Event::Final(done.clone()));
        (done, result)
    }

    /// Everything before `before_output`.
    async fn body(
        &self,
        ctx: &mut StageContext,
        record: &mut Vec<Message>,
        iterations: &mut u32,
    ) -> Ending {
        let deps = self.deps;
        let hooks = &deps.hooks;
        let emit = |e: Event| self.emit(e);
        if let Some(sc) = hooks.run(Stage::OnInput, ctx, None).await {
            return Ending::Short(sc);
        }
        // A message a plugin's trigger matches is answered by that plugin.
        let matched = delivery::match_message(&self.sets, &ctx.raw_message);
        if !matched.is_empty() {
            record.push(Message::text("user", ctx.raw_message.clone()));
            let replies = delivery::deliver_all(
                &deps.router,
                matched,
                &ctx.raw_message,
                &self.sender,
                false,
                &emit,
            )
            .await;
            return Ending::Reply(replies.join("\n"));
        }
        let history: Vec<Message> = match &deps.conversations {
            Some(c) => c.history(&self.key).await.unwrap_or_else(|e| {
                tracing::error!("history of {}: {e}", self.key);
                Vec::new()
            }),
            None => Vec::new(),
        };
        let user = Message::text("user", ctx.raw_message.clone());
        record.push(user.clone());
        let mut messages = Vec::with_capacity(history.len() + 3);
        messages.push(Message::text("system", self.system_prompt()));
        if let (false, Some(memory)) = (ctx.no_memory, &deps.memory) {
            ctx.memory = memory.recall(&ctx.raw_message).await;
            if let Some(text) = memory_message(&ctx.memory) {
                messages.push(Message::text("system", text));
            }
        }
        messages.extend(history);
        messages.push(user);
        if hooks.any(Stage::PreAction, None) {
            let sent = serde_json::to_string(&messages).expect("messages serialize");
            ctx.context_msgs_json = sent.clone();
            if let Some(sc) = hooks.run(Stage::PreAction, ctx, None).await {
                return Ending::Short(sc);
            }
            let written = std::mem::take(&mut ctx.context_msgs_json);
            if written != sent {
                match serde_json::from_str::<Vec<Message>>(&written) {
                    Ok(m) => messages = m,
                    Err(e) => tracing::warn!(
                        "context_msgs written by a pre_action hook are not a list of messages ({e}); the turn goes on with the messages as they were"
                    ),
                }
            }
        }
        // `max_calls` counts per conversation (this exchange).
        let mut counts: HashMap<String, u32> = HashMap::new();
        // "none" for the one answer `continue` asks for after a chainable:false tool.
        let mut tool_choice = "auto";
        let final_text = loop {
            if *iterations == deps.settings.max_iterations {
                break format!(
                    "Stopped after {} tool-calling rounds without a final answer (max_iterations = {}).",
                    iterations, deps.settings.max_iterations
                );
            }
            *iterations += 1;
            let (resp, mut filter) = match self.complete(&mut messages, tool_choice).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("turn of {}: {e}", self.key);
                    return Ending::Failed(e.to_string());
                }
            };
            add_usage(ctx, &resp.token_usage);
            tracing::debug!(
                conversation = %self.key,
                finish_reason = %resp.finish_reason,
                tool_calls = ?resp.tool_calls.iter().map(|c| (&c.id, &c.name)).collect::<Vec<_>>(),
                "LLM answered"
            );
            ctx.llm_text = resp.content.clone();
            ctx.reasoning_content = resp.reasoning_content.clone();
            // Tool calls a `tool_choice: none` answer still makes are ignored.
            let asked = if tool_choice == "none" {
                &[][..]
            } else {
                &resp.tool_calls[..]
            };
            let mut calls: Vec<PlannedCall> = asked
                .iter()
                .map(|c| PlannedCall::from_llm(c, deps.router.registry()))
                .collect();
            if hooks.any(Stage::PostAction, None) {
                ctx.tool_calls = calls.iter().map(|c| c.info.clone()).collect();
                ctx.tool_results.clear();
                let short = hooks.run(Stage::PostAction, ctx, None).await;
                if let Some(sc) = short {
                    return Ending::Short(sc);
                }
                calls = PlannedCall::after_hook(calls, &ctx.tool_calls, deps.router.registry());
            }
            if calls.is_empty() {
                let text = ctx.llm_text.clone();
                let answer = delivery::run_llm_commands(
                    &deps.router,
                    &self.sets,
                    &text,
                    &self.sender,
                    &emit,
                )
                .await;
                // The part of the answer the stream held back, with replies in place.
                let rest = if filter.active() {
                    filter.remainder(&answer)
                } else {
                    String::new()
                };
                if !rest.is_empty() {
                    self.emit(Event::TextDelta(TextDelta {
                        text: rest,
                        reasoning: false,
                    }));
                }
                break answer;
            }
            let held = filter.flush();
            if !held.is_empty() {
                self.emit(Event::TextDelta(TextDelta {
                    text: held,
                    reasoning: false,
                }));
            }
            // Gemini's thought signatures go back with their calls (by id).
            let signature = |id: &str| {
                resp.tool_calls
                    .iter()
                    .find(|t| t.id == id)
                    .and_then(|t| t.thought_signature.clone())
            };
            let assistant = Message {
                role: "assistant".into(),
                content: Value::String(ctx.llm_text.clone()),
                // Reasoning models (DeepSeek thinking mode) want it back with the calls.
                reasoning_content: Some(ctx.reasoning_content.clone()).filter(|r| !r.is_empty()),
                tool_calls: calls
                    .iter()
                    .map(|c| MessageToolCall {
                        id: c.info.id.clone(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: c.info.name.clone(),
                            arguments: c.info.arguments_json.clone(),
                        },
                        thought_signature: signature(&c.info.id),
                        extra: Default::default(),
                    })
                    .collect(),
                ..Default::default()
            };
            messages.push(assistant.clone());
            record.push(assistant);
            // Policies are checked in call order, before any call of the batch runs.
            let mut admissions = Vec::with_capacity(calls.len());
            for c in &calls {
                admissions.push(self.admit(c, &mut counts).await);
            }
            let base = ctx.clone();
            let runs = calls
                .iter()
                .zip(admissions)
                .map(|(c, a)| self.run_call(c, a, &base));
            let results = futures_util::future::join_all(runs).await;
            let mut short = None;
            // Results of calls to `chainable: false` tools that ran, and whether any
            // of those tools asks to `continue`.
            let mut unchained: Vec<String> = Vec::new();
            let mut carry_on = false;
            for (call, outcome) in calls.iter().zip(results) {
                let msg = Message::tool_result(&call.info.id, outcome.text.clone());
                messages.push(msg.clone());
                record.push(msg);
                short = short.or(outcome.short);
                if let Some(ai) = outcome
                    .ran
                    .then_some(call.tool.as_ref())
                    .flatten()
                    .and_then(|t| t.ai_tool.as_ref())
                {
                    if ai.chainable == Some(false) {
                        unchained.push(outcome.text.clone());
                        carry_on |= ai.continue_conversation;
                    }
                }
            }
            // A `response` set in after_toolcall ends the turn with it.
            if let Some((sc, response)) = short {
                ctx.response = Some(response);
                return Ending::Short(sc);
            }
            if !unchained.is_empty() {
                if !carry_on {
                    break unchained.join("\n");
                }
                // `continue`: the LLM answers from the results once more; tools stay
                // declared (APIs want them next to tool messages) but may not be called.
                tool_choice = "none";
            }
        };
        Ending::Reply(final_text)
    }

    /// The configured system prompt plus the inject specs of every plugin.
    fn system_prompt(&self) -> String {
        let specs: Vec<_> = self
            .sets
            .iter()
            .filter_map(|(p, set)| Some((p.clone(), set.inject.clone()?)))
            .collect();
        let section = inject_prompt(&specs);
        if section.is_empty() {
            self.deps.settings.system_prompt.clone()
        } else {
            format!("{}\n\n{section}", self.deps.settings.system_prompt)
        }
    }

    fn short_circuit(&self, ctx: &StageContext, sc: ShortCircuit) -> String {
        let text = ctx.response.clone().unwrap_or_default();
        self.emit(Event::ShortCircuit(ShortCircuitEvent {
            stage: hearth_proto::stage_name(sc.stage).into(),
            plugin: sc.plugin,
            text: text.clone(),
        }));
        text
    }

    /// One LLM completion over `messages` across the sources ([`failover`]). An
    /// interrupt cancels the request in flight, adds its text as a system message
    /// and asks again. `tool_choice` is `auto`, or `none` when the LLM must answer
    /// without calling tools. Returns the response and the stream's command filter
    /// (what it held back of an inject command).
    async fn complete(
        &self,
        messages: &mut Vec<Message>,
        tool_choice: &str,
    ) -> Result<(CompletionResponse, CommandFilter), LlmError> {
        let deps = self.deps;
        loop {
            for (from, text) in self.interrupts.take() {
                tracing::info!(conversation = %self.key, source = %from, "interrupt: added to the turn");
                messages.push(Message::text(
                    "system",
                    format!("Interrupt from {from}: {text}"),
                ));
                self.emit(Event::Interrupted(Interrupted { source: from, text }));
            }
            let tools = deps.router.registry().llm_tools();
            let has_tools = tools.as_array().is_some_and(|t| !t.is_empty());
            let request = CompletionRequest {
                model: "",
                messages,
                stream: deps.settings.stream,
                tools: has_tools.then_some(&*tools),
                tool_choice: has_tools.then_some(tool_choice),
            };
            let mut filter = CommandFilter::new(&self.sets);
            let cancel = self.interrupts.begin();
            let mut on_delta = |d: Delta| match d {
                Delta::Text(t) => filter.emit(&t, &|e| self.emit(e)),
                Delta::Reasoning(text) => self.emit(Event::TextDelta(TextDelta {
                    text,
                    reasoning: true,
                })),
            };
            let result = failover::complete(
                &deps.sources,
                &deps.llm,
                &request,
                &mut on_delta,
                &cancel,
                deps.settings.source_queue_timeout,
            )
            .await;
            self.interrupts.end();
            match result {
                Ok(r) => return Ok((r, filter)),
                // The interrupt's text is added at the top of the loop.
                Err(LlmError::Cancelled) => {
                    tracing::info!(conversation = %self.key, "LLM request cancelled by an interrupt");
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
