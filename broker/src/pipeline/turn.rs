//! One turn of the agent: stages in order around the LLM tool-calling loop, events
//! to the client as they happen, history and TextMemory afterwards.
//!
//! `on_input` → history + user message → `pre_action` → [LLM (streamed) →
//! `post_action` → tool calls concurrently, each `before_toolcall` → execute →
//! `after_toolcall`]* → `before_output` → `after_output`. A `response` set by a hook
//! jumps to `after_output`; a deny affects only its call and the LLM is told who
//! denied it. The loop ends on a reply without tool calls, after a tool with
//! `chainable: false`, or after `max_iterations`. `ai.tool` policies (max_calls,
//! cooldown, confirm) are applied per call ([`super::policy`]).
//!
//! LinkZone triggers ([`crate::triggers`]): after `on_input`, a message that matches a
//! plugin's trigger (types 0–3) is delivered to it as `HandleEvent` and answered by its
//! `sender.reply` texts (`PluginReply` events) instead of the LLM. Inject specs are
//! described in the system prompt; a line of the LLM's final reply written in an
//! inject format is delivered the same way, and the replies are added to the reply.
//! Event triggers (type 4) get every `message` (alongside the turn) and every `reply`.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use std::collections::HashMap;

use hearth_proto::v1::{
    chat_event::Event, ChatEvent, ConfirmRequest, Final, HandleEvent, Interrupted, PluginReply,
    Sender, ShortCircuit as ShortCircuitEvent, Stage, StageContext, TextDelta, ToolCallFinished,
    ToolCallInfo, ToolCallStarted, ToolResultInfo,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::memory::{memory_message, MemorySources};
use super::policy::{Admission, Policies};
use super::{Hooks, ShortCircuit};
use crate::adapters::TokenUsage;
use crate::llm::{AgentSettings, Delta, LlmClient, LlmError, SourcePool};
use crate::storage::{ConversationKey, Conversations, TextEvent, TextMemory};
use crate::supervisor::Supervisor;
use crate::triggers::{inject_prompt, Match};

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
}

/// Interrupts waiting to cut into the running turn.
#[derive(Debug, Default)]
pub struct Interrupts {
    inner: Mutex<InterruptState>,
}

#[derive(Debug, Default)]
struct InterruptState {
    /// A turn is running.
    active: bool,
    pending: Vec<(String, String)>,
    /// The LLM request in flight, if any.
    in_flight: Option<CancellationToken>,
}

impl Interrupts {
    /// Hands `(source, text)` to the running turn, cancelling its LLM request in
    /// flight (the turn asks again with the text as a system message). False when no
    /// turn is running: the caller queues it as the next input instead.
    pub fn interrupt(&self, source: &str, text: &str) -> bool {
        let mut s = self.inner.lock().unwrap();
        if !s.active {
            return false;
        }
        s.pending.push((source.into(), text.into()));
        if let Some(token) = &s.in_flight {
            token.cancel();
        }
        true
    }

    /// Marks a turn as running (or not).
    pub fn set_active(&self, active: bool) {
        let mut s = self.inner.lock().unwrap();
        s.active = active;
        if !active {
            s.in_flight = None;
        }
    }

    fn begin(&self) -> CancellationToken {
        let token = CancellationToken::new();
        self.inner.lock().unwrap().in_flight = Some(token.clone());
        token
    }

    fn end(&self) {
        self.inner.lock().unwrap().in_flight = None;
    }

    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut self.inner.lock().unwrap().pending)
    }
}

/// What a turn needs.
#[derive(Debug, Clone)]
pub struct TurnDeps {
    /// Plugins and their tools.
    pub supervisor: Arc<Supervisor>,
    /// Stage hooks.
    pub hooks: Hooks,
    /// LLM HTTP client.
    pub llm: LlmClient,
    /// LLM sources with their health (failover order).
    pub sources: Arc<SourcePool>,
    /// Agent settings.
    pub settings: Arc<AgentSettings>,
    /// Histories.
    pub conversations: Option<Conversations>,
    /// TextMemory log.
    pub text_memory: Option<TextMemory>,
    /// Interrupt channel of the agent.
    pub interrupts: Arc<Interrupts>,
    /// `ai.tool` cooldowns and pending confirmations.
    pub policies: Arc<Policies>,
    /// Stores recalled into the context before `pre_action` (None = no memory).
    pub memory: Option<MemorySources>,
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

/// What one tool call gave the loop.
struct CallOutcome {
    /// The text the LLM gets.
    text: String,
    /// An `after_toolcall` hook set `response`.
    short: Option<(ShortCircuit, String)>,
    /// The plugin was called (not refused by a policy, a hook or the user).
    ran: bool,
}

fn event(e: Event) -> ChatEvent {
    ChatEvent { event: Some(e) }
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

/// The text the LLM gets for a tool result `{success, content, data, error}`.
fn result_text(result: &Value) -> String {
    let ok = result
        .get("success")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let content = result.get("content").and_then(Value::as_str).unwrap_or("");
    if ok {
        if content.is_empty() {
            result
                .get("data")
                .map(|d| d.to_string())
                .unwrap_or_default()
        } else {
            content.to_string()
        }
    } else {
        let error = result
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("failed");
        format!("Error: {error}")
    }
}

impl TurnDeps {
    /// Runs one turn for `input`, sending events to `events` (a closed receiver does
    /// not stop the turn). Returns the final event.
    pub async fn run(&self, input: TurnInput, events: &mpsc::UnboundedSender<ChatEvent>) -> Final {
        let emit = |e: Event| {
            let _ = events.send(event(e));
        };
        let mut ctx = StageContext {
            raw_message: input.text.clone(),
            user_id: input.user_id.clone(),
            group_id: input.group_id.clone(),
            context_msgs_json: "[]".into(),
            no_memory: input.no_memory,
            extra_json: "{}".into(),
            ..Default::default()
        };
        let key = ConversationKey {
            user_id: input.user_id.clone(),
            group_id: Some(input.group_id.clone()).filter(|g| !g.is_empty()),
            channel: input.channel.clone(),
        };
        let sender = Sender {
            user_id: input.user_id.clone(),
            group_id: input.group_id.clone(),
            channel: input.channel.clone(),
            session_id: key.to_string(),
        };
        let mut record: Vec<Value> = Vec::new();
        let mut iterations = 0u32;
        // Event triggers see every message while the turn goes on.
        let message_events = self.deliver_events("message", &input.text, &sender, &emit);

        let turn = async {
            if let Some(sc) = self.hooks.run(Stage::OnInput, &mut ctx, None).await {
                return Ending::Short(sc);
            }
            // A message a plugin's trigger matches is answered by that plugin.
            let matched = self.match_message(&ctx.raw_message);
            if !matched.is_empty() {
                record.push(json!({"role": "user", "content": ctx.raw_message}));
                let replies = self
                    .deliver_all(matched, &ctx.raw_message, &sender, &emit)
                    .await;
                return Ending::Reply(replies.join("\n"));
            }
            let history = match &self.conversations {
                Some(c) => c.history(&key).await.unwrap_or_else(|e| {
                    tracing::error!("history of {key}: {e}");
                    Vec::new()
                }),
                None => Vec::new(),
            };
            let user_msg = json!({"role": "user", "content": ctx.raw_message});
            record.push(user_msg.clone());
            let mut msgs = vec![json!({"role": "system", "content": self.system_prompt()})];
            if let (false, Some(memory)) = (ctx.no_memory, &self.memory) {
                ctx.memory = memory.recall(&ctx.raw_message).await;
                if let Some(text) = memory_message(&ctx.memory) {
                    msgs.push(json!({"role": "system", "content": text}));
                }
            }
            msgs.extend(history);
            msgs.push(user_msg);
            ctx.context_msgs_json = Value::Array(msgs.clone()).to_string();
            if let Some(sc) = self.hooks.run(Stage::PreAction, &mut ctx, None).await {
                return Ending::Short(sc);
            }
            let mut messages: Vec<Value> = serde_json::from_str::<Value>(&ctx.context_msgs_json)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or(msgs);
            // `max_calls` counts per conversation (this exchange).
            let mut counts: HashMap<String, u32> = HashMap::new();

            // "none" for the one answer `continue` asks for after a chainable:false tool.
            let mut tool_choice = "auto";
            let final_text = loop {
                if iterations == self.settings.max_iterations {
                    break format!(
                        "Stopped after {} tool-calling rounds without a final answer (max_iterations = {}).",
                        iterations, self.settings.max_iterations
                    );
                }
                iterations += 1;
                let resp = match self.complete(&mut messages, tool_choice, &emit).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!("turn of {key}: {e}");
                        return Ending::Failed(e.to_string());
                    }
                };
                add_usage(&mut ctx, &resp.token_usage);
                ctx.llm_text = resp.content.clone();
                ctx.reasoning_content = resp.reasoning_content.clone();
                let registry = self.supervisor.registry();
                // Tool calls a `tool_choice: none` answer still makes are ignored.
                let asked = if tool_choice == "none" {
                    &[][..]
                } else {
                    &resp.tool_calls[..]
                };
                ctx.tool_calls = asked
                    .iter()
                    .map(|c| ToolCallInfo {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        plugin: registry
                            .get(&c.name)
                            .map(|t| t.plugin.clone())
                            .unwrap_or_default(),
                        arguments_json: match &c.arguments {
                            Value::String(raw) => raw.clone(),
                            v => v.to_string(),
                        },
                        ..Default::default()
                    })
                    .collect();
                ctx.tool_results.clear();
                if let Some(sc) = self.hooks.run(Stage::PostAction, &mut ctx, None).await {
                    return Ending::Short(sc);
                }
                if ctx.tool_calls.is_empty() {
                    let text = ctx.llm_text.clone();
                    break self.run_llm_commands(&text, &sender, &emit).await;
                }
                // Gemini's thought signatures go back with their calls (by id).
                let signature = |id: &str| {
                    resp.tool_calls
                        .iter()
                        .find(|t| t.id == id)
                        .and_then(|t| t.thought_signature.clone())
                };
                let mut assistant = json!({
                    "role": "assistant",
                    "content": ctx.llm_text,
                    "tool_calls": ctx.tool_calls.iter().map(|c| {
                        let mut call = json!({
                            "id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments_json},
                        });
                        if let Some(sig) = signature(&c.id) {
                            call["thought_signature"] = json!(sig);
                        }
                        call
                    }).collect::<Vec<_>>(),
                });
                // Reasoning models (DeepSeek thinking mode) want it back with the calls.
                if !ctx.reasoning_content.is_empty() {
                    assistant["reasoning_content"] = json!(ctx.reasoning_content);
                }
                messages.push(assistant.clone());
                record.push(assistant);
                let calls = ctx.tool_calls.clone();
                // Policies are checked in call order, before any call of the batch runs.
                let admissions: Vec<_> = calls
                    .iter()
                    .map(|c| self.admit(c, &input, &mut counts))
                    .collect();
                let base = ctx.clone();
                let runs = calls
                    .iter()
                    .zip(admissions)
                    .map(|(c, a)| self.run_call(c, a, &base, &input, &sender, &emit));
                let results = futures_util::future::join_all(runs).await;
                let mut short = None;
                // Results of calls to `chainable: false` tools that ran, and whether
                // any of those tools asks to `continue`.
                let mut unchained: Vec<String> = Vec::new();
                let mut carry_on = false;
                for (call, outcome) in calls.iter().zip(results) {
                    let msg =
                        json!({"role": "tool", "tool_call_id": call.id, "content": outcome.text});
                    messages.push(msg.clone());
                    record.push(msg);
                    short = short.or(outcome.short);
                    if let Some(ai) = outcome
                        .ran
                        .then(|| registry.get(&call.name))
                        .flatten()
                        .and_then(|t| t.ai_tool.clone())
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
        };
        let (outcome, mut side_replies) = tokio::join!(turn, message_events);

        let mut error = String::new();
        let final_text = match outcome {
            Ending::Reply(text) => {
                ctx.final_text = text;
                match self.hooks.run(Stage::BeforeOutput, &mut ctx, None).await {
                    Some(sc) => self.short_circuit(&mut ctx, sc, &emit),
                    None => ctx.final_text.clone(),
                }
            }
            Ending::Short(sc) => {
                if record.is_empty() {
                    record.push(json!({"role": "user", "content": ctx.raw_message}));
                }
                self.short_circuit(&mut ctx, sc, &emit)
            }
            Ending::Failed(e) => {
                error = e;
                format!("Error: {error}")
            }
        };
        ctx.final_text = final_text.clone();
        ctx.response = None;
        self.hooks.run(Stage::AfterOutput, &mut ctx, None).await;
        if error.is_empty() {
            side_replies.extend(
                self.deliver_events("reply", &final_text, &sender, &emit)
                    .await,
            );
            let mut remembered = final_text.clone();
            for r in &side_replies {
                remembered = format!("{remembered}\n{r}").trim().to_string();
            }
            record.push(json!({"role": "assistant", "content": remembered}));
            self.remember(&key, &input, &record).await;
        }
        let done = Final {
            text: final_text,
            token_usage: ctx.token_usage.clone(),
            iterations,
            error,
        };
        emit(Event::Final(done.clone()));
        done
    }

    /// The configured system prompt plus the inject specs of every plugin.
    fn system_prompt(&self) -> String {
        let registry = self.supervisor.registry();
        let specs: Vec<_> = self
            .supervisor
            .plugins()
            .iter()
            .filter_map(|p| {
                let set = registry.triggers(p.name())?;
                Some((p.name().to_string(), set.inject.clone()?))
            })
            .collect();
        let section = inject_prompt(&specs);
        if section.is_empty() {
            self.settings.system_prompt.clone()
        } else {
            format!("{}\n\n{section}", self.settings.system_prompt)
        }
    }

    /// Every plugin (in load order) whose message trigger (types 0–3) `text` matches.
    fn match_message(&self, text: &str) -> Vec<(String, Match)> {
        let registry = self.supervisor.registry();
        self.supervisor
            .plugins()
            .iter()
            .filter_map(|p| {
                let m = registry.triggers(p.name())?.match_message(text)?;
                Some((p.name().to_string(), m))
            })
            .collect()
    }

    /// Delivers broker event `name` (`message`, `reply`) with `text` to every plugin
    /// with a matching event trigger; returns their replies.
    async fn deliver_events(
        &self,
        name: &str,
        text: &str,
        sender: &Sender,
        emit: &impl Fn(Event),
    ) -> Vec<String> {
        let registry = self.supervisor.registry();
        let matched: Vec<_> = self
            .supervisor
            .plugins()
            .iter()
            .filter_map(|p| {
                let m = registry.triggers(p.name())?.match_event(name, text)?;
                Some((p.name().to_string(), m))
            })
            .collect();
        if matched.is_empty() {
            return Vec::new();
        }
        self.deliver_all(matched, text, sender, emit).await
    }

    /// Lines of the LLM's reply written in a plugin's inject format are delivered to
    /// that plugin; returns the reply without them, followed by the plugins' replies.
    async fn run_llm_commands(&self, text: &str, sender: &Sender, emit: &impl Fn(Event)) -> String {
        let registry = self.supervisor.registry();
        let sets: Vec<_> = self
            .supervisor
            .plugins()
            .iter()
            .filter_map(|p| Some((p.name().to_string(), registry.triggers(p.name())?)))
            .filter(|(_, set)| set.inject.is_some())
            .collect();
        if sets.is_empty() {
            return text.to_string();
        }
        let mut kept = Vec::new();
        let mut commands = Vec::new();
        for line in text.lines() {
            match sets
                .iter()
                .find_map(|(p, set)| Some((p.clone(), set.match_llm_line(line)?)))
            {
                Some((plugin, m)) => {
                    commands.push((plugin, m, line.trim().trim_matches('`').trim().to_string()))
                }
                None => kept.push(line),
            }
        }
        if commands.is_empty() {
            return text.to_string();
        }
        let mut out: Vec<String> = vec![kept.join("\n").trim().to_string()];
        for (plugin, m, line) in commands {
            tracing::info!(plugin = %plugin, command = %line, "LLM wrote an inject command");
            out.extend(
                self.deliver_all(vec![(plugin, m)], &line, sender, emit)
                    .await,
            );
        }
        out.retain(|s| !s.is_empty());
        out.join("\n")
    }

    /// Delivers `message` to each matched plugin concurrently as `HandleEvent`,
    /// streaming every `sender.reply` as a `PluginReply` event. Returns the replies,
    /// by plugin in the given order; a failed handler adds a line naming the plugin.
    async fn deliver_all(
        &self,
        matched: Vec<(String, Match)>,
        message: &str,
        sender: &Sender,
        emit: &impl Fn(Event),
    ) -> Vec<String> {
        let runs = matched.into_iter().map(|(plugin, m)| async move {
            let (tx, mut rx) = mpsc::unbounded_channel::<String>();
            let ev = HandleEvent {
                call_id: 0,
                message: message.to_string(),
                params: m.params,
                sender: Some(sender.clone()),
                trigger: Some(m.trigger),
                timeout_ms: 0,
            };
            let call = self.supervisor.handle_event(&plugin, ev, tx);
            let mut texts = Vec::new();
            let forward = async {
                while let Some(text) = rx.recv().await {
                    emit(Event::PluginReply(PluginReply {
                        plugin: plugin.clone(),
                        text: text.clone(),
                    }));
                    texts.push(text);
                }
            };
            let (done, ()) = tokio::join!(call, forward);
            let failure = match done {
                Ok(d) if d.error.is_empty() => None,
                Ok(d) => Some(d.error),
                Err(e) => Some(e.to_string()),
            };
            if let Some(e) = failure {
                tracing::warn!(plugin = %plugin, "event handler failed: {e}");
                texts.push(format!("[{plugin}] error: {e}"));
            }
            texts
        });
        futures_util::future::join_all(runs)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Applies `call`'s `ai.tool` policies (max_calls, cooldown); Err is the text the
    /// LLM gets instead of a result.
    fn admit(
        &self,
        call: &ToolCallInfo,
        input: &TurnInput,
        counts: &mut HashMap<String, u32>,
    ) -> Result<Option<Admission>, String> {
        let Some(ai) = self
            .supervisor
            .registry()
            .get(&call.name)
            .and_then(|t| t.ai_tool.clone())
        else {
            return Ok(None);
        };
        self.policies
            .admit(&call.name, &ai, &input.user_id, counts)
            .map(Some)
    }

    /// Asks the client to confirm `call` (policy `confirm`); Err says why it is not
    /// run: declined, no answer in time, or no client to ask.
    async fn confirm(
        &self,
        call: &ToolCallInfo,
        args_json: &str,
        input: &TurnInput,
        emit: &impl Fn(Event),
    ) -> Result<(), String> {
        if !input.can_confirm {
            return Err(format!(
                "tool {} was not run: it needs the user's confirmation and this input (channel {}) has no client to ask",
                call.name, input.channel
            ));
        }
        let wait = self.settings.confirm_timeout;
        let (id, answer) = self.policies.ask();
        emit(Event::ConfirmRequest(ConfirmRequest {
            confirm_id: id.clone(),
            tool: call.name.clone(),
            args_json: args_json.to_string(),
            timeout_ms: wait.as_millis().min(u32::MAX as u128) as u32,
        }));
        let outcome = tokio::time::timeout(wait, answer).await;
        self.policies.forget(&id);
        match outcome {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(format!(
                "tool {} was not run: the user declined it",
                call.name
            )),
            Ok(Err(_)) | Err(_) => Err(format!(
                "tool {} was not run: the user did not confirm it within {} s",
                call.name,
                wait.as_secs_f64()
            )),
        }
    }

    fn short_circuit(
        &self,
        ctx: &mut StageContext,
        sc: ShortCircuit,
        emit: &impl Fn(Event),
    ) -> String {
        let text = ctx.response.clone().unwrap_or_default();
        emit(Event::ShortCircuit(ShortCircuitEvent {
            stage: hearth_proto::stage_name(sc.stage).into(),
            plugin: sc.plugin,
            text: text.clone(),
        }));
        text
    }

    /// One LLM completion over `messages`, trying the sources in the pool's order: a
    /// source that fails before any output is marked (taken out on 401/403, else
    /// cooled down) and the next is tried. An interrupt cancels the request in
    /// flight, adds its text as a system message and asks again. `tool_choice` is
    /// `auto`, or `none` when the LLM must answer without calling tools.
    async fn complete(
        &self,
        messages: &mut Vec<Value>,
        tool_choice: &str,
        emit: &impl Fn(Event),
    ) -> Result<crate::adapters::CompletionResponse, LlmError> {
        let tools: Vec<Value> = self
            .supervisor
            .registry()
            .list()
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.schema.schema(),
                }})
            })
            .collect();
        'interrupted: loop {
            for (from, text) in self.interrupts.take() {
                tracing::info!(source = %from, "interrupt: added to the turn");
                messages.push(
                    json!({"role": "system", "content": format!("Interrupt from {from}: {text}")}),
                );
                emit(Event::Interrupted(Interrupted { source: from, text }));
            }
            let mut request = json!({
                "messages": messages,
                "stream": self.settings.stream,
            });
            if !tools.is_empty() {
                request["tools"] = Value::Array(tools.clone());
                request["tool_choice"] = json!(tool_choice);
            }
            let order = self.sources.order();
            let mut last = LlmError::NoSource;
            for source in &order {
                let cancel = self.interrupts.begin();
                let emitted = std::sync::atomic::AtomicBool::new(false);
                let on_delta = |d: Delta| {
                    emitted.store(true, std::sync::atomic::Ordering::Relaxed);
                    let (text, reasoning) = match d {
                        Delta::Text(t) => (t, false),
                        Delta::Reasoning(t) => (t, true),
                    };
                    emit(Event::TextDelta(TextDelta { text, reasoning }));
                };
                let result = self
                    .llm
                    .complete(source, request.clone(), on_delta, &cancel)
                    .await;
                self.interrupts.end();
                match result {
                    Ok(r) => {
                        self.sources.succeeded(&source.name);
                        return Ok(r);
                    }
                    // The interrupt's text is added at the top of the loop.
                    Err(LlmError::Cancelled) => {
                        tracing::info!("LLM request cancelled by an interrupt");
                        continue 'interrupted;
                    }
                    Err(e) => {
                        tracing::warn!("{}", self.sources.failed(&source.name, &e));
                        if emitted.load(std::sync::atomic::Ordering::Relaxed) {
                            return Err(e);
                        }
                        last = e;
                    }
                }
            }
            return Err(last);
        }
    }

    /// Runs one tool call: a policy refusal (`admission`) is its result; otherwise
    /// `before_toolcall`, the `confirm` question when the tool has one, the plugin,
    /// and `after_toolcall`. Returns the text the LLM gets, the short-circuit (with
    /// its response) when an `after_toolcall` hook set `response`, and whether the
    /// plugin was called.
    async fn run_call(
        &self,
        call: &ToolCallInfo,
        admission: Result<Option<Admission>, String>,
        base: &StageContext,
        input: &TurnInput,
        sender: &Sender,
        emit: &impl Fn(Event),
    ) -> CallOutcome {
        let started = Instant::now();
        let tool = self.supervisor.registry().get(&call.name);
        let owner = tool.as_ref().map(|t| t.plugin.clone());
        emit(Event::ToolCallStarted(ToolCallStarted {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            plugin: owner.clone().unwrap_or_default(),
            args_json: call.arguments_json.clone(),
        }));
        let mut cctx = base.clone();
        cctx.tool_calls = vec![call.clone()];
        cctx.tool_results.clear();
        let mut denied_by = String::new();
        let mut ran = false;
        let result: Value = match admission {
            Err(refusal) => json!({"success": false, "error": refusal}),
            Ok(admission) => {
                let outcome = match self
                    .hooks
                    .run(Stage::BeforeToolcall, &mut cctx, owner.as_deref())
                    .await
                {
                    Some(sc) => {
                        let reason = cctx
                            .response
                            .clone()
                            .or_else(|| cctx.tool_calls.first().map(|c| c.deny_reason.clone()))
                            .filter(|r| !r.is_empty())
                            .unwrap_or_else(|| "no reason given".into());
                        denied_by = sc.plugin.clone();
                        Err(format!("denied by {}: {reason}", sc.plugin))
                    }
                    None => {
                        let args = cctx
                            .tool_calls
                            .iter()
                            .find(|c| c.id == call.id)
                            .map(|c| c.arguments_json.clone())
                            .unwrap_or_else(|| call.arguments_json.clone());
                        let needs_confirm = tool
                            .as_ref()
                            .and_then(|t| t.ai_tool.as_ref())
                            .is_some_and(|a| a.confirm);
                        match serde_json::from_str::<Value>(&args) {
                            Ok(Value::Object(_)) => {
                                let confirmed = if needs_confirm {
                                    self.confirm(call, &args, input, emit).await
                                } else {
                                    Ok(())
                                };
                                match confirmed {
                                    Ok(()) => Ok(args),
                                    Err(e) => Err(e),
                                }
                            }
                            _ => Err(format!(
                                "tool {}: arguments are not a JSON object: {args}",
                                call.name
                            )),
                        }
                    }
                };
                match outcome {
                    Ok(args) => {
                        ran = true;
                        match self
                            .supervisor
                            .call_tool(&call.name, &args, None, Some(sender.clone()))
                            .await
                        {
                            Ok((_, r)) => {
                                let data = serde_json::from_str::<Value>(&r.data_json).ok();
                                json!({"success": r.success, "content": r.content, "data": data, "error": r.error})
                            }
                            Err(e) => json!({"success": false, "error": e.to_string()}),
                        }
                    }
                    Err(e) => {
                        if let Some(a) = admission {
                            self.policies.release(a);
                        }
                        json!({"success": false, "error": e})
                    }
                }
            }
        };
        cctx.response = None;
        cctx.tool_results = vec![ToolResultInfo {
            call_id: call.id.clone(),
            name: call.name.clone(),
            plugin: owner.clone().unwrap_or_default(),
            success: result["success"].as_bool().unwrap_or(false),
            result_json: result.to_string(),
        }];
        let mut short = None;
        if denied_by.is_empty() {
            let ran = self
                .hooks
                .run(Stage::AfterToolcall, &mut cctx, owner.as_deref());
            if let Some(sc) = ran.await {
                short = cctx.response.clone().map(|r| (sc, r));
            }
        }
        let final_result = cctx
            .tool_results
            .first()
            .and_then(|r| serde_json::from_str::<Value>(&r.result_json).ok())
            .unwrap_or(result);
        let text = result_text(&final_result);
        let success = final_result["success"].as_bool().unwrap_or(false);
        emit(Event::ToolCallFinished(ToolCallFinished {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            success,
            content: if success { text.clone() } else { String::new() },
            error: if success {
                String::new()
            } else {
                text.trim_start_matches("Error: ").to_string()
            },
            elapsed_us: started.elapsed().as_micros() as u64,
            plugin: owner.unwrap_or_default(),
            denied_by,
        }));
        CallOutcome { text, short, ran }
    }

    /// Appends the turn to the conversation's history and (unless `no_memory`) to
    /// TextMemory. Failures are logged, never fatal.
    async fn remember(&self, key: &ConversationKey, input: &TurnInput, record: &[Value]) {
        if let Some(c) = &self.conversations {
            if let Err(e) = c.append(key, record).await {
                tracing::error!("history of {key}: {e}");
            }
        }
        if input.no_memory {
            return;
        }
        let Some(tm) = &self.text_memory else { return };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        for m in record {
            let role = m["role"].as_str().unwrap_or("assistant").to_string();
            let content = match (m["content"].as_str(), m.get("tool_calls")) {
                (_, Some(calls)) if calls.as_array().is_some_and(|a| !a.is_empty()) => {
                    format!(
                        "{} [tool calls: {calls}]",
                        m["content"].as_str().unwrap_or("")
                    )
                }
                (Some(c), _) => c.to_string(),
                _ => m["content"].to_string(),
            };
            let ev = TextEvent {
                role,
                content,
                timestamp: now,
                channel: input.channel.clone(),
            };
            if let Err(e) = tm.append(&ev).await {
                tracing::error!("TextMemory: {e}");
                return;
            }
        }
    }
}
