//! The tool calls of one LLM round, each with its LinkZone `ai.tool` policies
//! ([`crate::pipeline::policy`]): `max_calls` and `cooldown` are checked in call
//! order before any call of the round runs; then every call runs concurrently:
//! `before_toolcall` hooks, the `confirm` question, the router (argument check against
//! the schema, timeout, the plugin), `after_toolcall` hooks.
//!
//! A call's arguments travel as the LLM sent them: parsed once (to check them) and
//! sent as the same JSON text; they are parsed again only when a hook rewrote them.
//! A call's result is encoded for `after_toolcall` hooks only when one exists.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use hearth_proto::v1::{
    chat_event::Event, ConfirmRequest, Stage, StageContext, ToolCallFinished, ToolCallInfo,
    ToolCallProgress, ToolCallStarted, ToolResultInfo,
};
use serde_json::{json, Value};

use super::turn::Turn;
use crate::adapters::ToolCall;
use crate::observe::metrics::{CallRecord, Outcome};
use crate::pipeline::policy::Admission;
use crate::pipeline::ShortCircuit;
use crate::registry::{Registry, Tool};

/// At most one `ToolCallProgress` per call per this interval reaches the chat stream (a
/// chatty plugin cannot flood it); the last report before the result is always sent.
pub(super) const PROGRESS_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Counts a call that never reached the plugin (`hearth_tool_calls_total`): refused by a
/// policy, a hook or the user (`denied`), or an unknown tool or bad arguments
/// (`invalid_args`).
fn record_refused(registry: &Registry, tool: &str, outcome: Outcome) -> Outcome {
    let label = crate::observe::metrics::tool_label(registry, tool);
    if let Some(mut r) = CallRecord::start(label) {
        r.finish(outcome);
    }
    outcome
}

/// A tool call the LLM asked for, ready to run.
#[derive(Debug, Clone)]
pub(super) struct PlannedCall {
    /// As hooks see it; `arguments_json` is the text sent to the plugin.
    pub(super) info: ToolCallInfo,
    /// The arguments parsed (a JSON string holding the text when it is not JSON).
    pub(super) args: Value,
    /// The registered tool, when one has that name.
    pub(super) tool: Option<Arc<Tool>>,
}

/// The `ToolCallInfo` of an LLM tool call as hooks see it.
fn call_info(id: &str, name: &str, plugin: &str, arguments_json: String) -> ToolCallInfo {
    ToolCallInfo {
        id: id.to_string(),
        name: name.to_string(),
        plugin: plugin.to_string(),
        arguments_json,
        ..Default::default()
    }
}

/// Arguments text → value: empty = `{}`; text that is not JSON stays a string, so the
/// call is answered with an error naming it.
fn parse_args(text: &str) -> Value {
    if text.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

impl PlannedCall {
    /// The call `c` of an LLM response.
    pub(super) fn from_llm(c: &ToolCall, registry: &Registry) -> PlannedCall {
        let tool = registry.get(&c.name);
        let arguments_json = match &c.arguments {
            Value::String(raw) => raw.clone(),
            v => v.to_string(),
        };
        PlannedCall {
            info: call_info(
                &c.id,
                &c.name,
                tool.as_ref().map_or("", |t| t.plugin.as_str()),
                arguments_json,
            ),
            args: c.arguments.clone(),
            tool,
        }
    }

    /// The calls as `post_action` hooks left them (`infos`): a call they did not
    /// change keeps what was known of it; a new or rewritten one is looked up and
    /// parsed.
    pub(super) fn after_hook(
        old: Vec<PlannedCall>,
        infos: &[ToolCallInfo],
        registry: &Registry,
    ) -> Vec<PlannedCall> {
        infos
            .iter()
            .map(|i| {
                let same = old.iter().find(|o| {
                    o.info.id == i.id
                        && o.info.name == i.name
                        && o.info.arguments_json == i.arguments_json
                });
                match same {
                    Some(o) => PlannedCall {
                        info: i.clone(),
                        ..o.clone()
                    },
                    None => {
                        let tool = registry.get(&i.name);
                        let mut info = i.clone();
                        info.plugin = tool.as_ref().map(|t| t.plugin.clone()).unwrap_or_default();
                        PlannedCall {
                            args: parse_args(&i.arguments_json),
                            info,
                            tool,
                        }
                    }
                }
            })
            .collect()
    }
}

/// A call's result as the tool loop knows it (LinkZone's `{success, content, data,
/// error}`).
#[derive(Debug, Clone, Default)]
struct Answer {
    success: bool,
    content: String,
    /// JSON text; empty = none.
    data_json: String,
    error: String,
}

impl Answer {
    fn failed(error: String) -> Answer {
        Answer {
            error,
            ..Answer::default()
        }
    }

    /// `{success, content, data, error}` for `after_toolcall` hooks.
    fn to_json(&self) -> String {
        let data = if self.data_json.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&self.data_json)
                .unwrap_or_else(|_| Value::String(self.data_json.clone()))
        };
        json!({"success": self.success, "content": self.content, "data": data, "error": self.error})
            .to_string()
    }

    /// From what an `after_toolcall` hook wrote.
    fn from_json(v: &Value) -> Answer {
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Answer {
            success: v.get("success").and_then(Value::as_bool).unwrap_or(false),
            content: text("content"),
            data_json: match v.get("data") {
                None | Some(Value::Null) => String::new(),
                Some(d) => d.to_string(),
            },
            error: text("error"),
        }
    }

    /// The text the LLM gets: the content (else the data), or `Error: …`.
    fn llm_text(&self) -> String {
        if self.success {
            if self.content.is_empty() {
                self.data_json.clone()
            } else {
                self.content.clone()
            }
        } else if self.error.is_empty() {
            "Error: failed".into()
        } else {
            format!("Error: {}", self.error)
        }
    }
}

/// What one tool call gave the loop.
pub(super) struct CallOutcome {
    /// The text the LLM gets.
    pub(super) text: String,
    /// An `after_toolcall` hook set `response` (with it).
    pub(super) short: Option<(ShortCircuit, String)>,
    /// The plugin was called (not refused by a policy, a hook, the user or the
    /// argument check).
    pub(super) ran: bool,
    /// How the call itself ended (the metrics' outcome; `error.type` of its span).
    pub(super) kind: Outcome,
}

impl Turn<'_> {
    /// Applies `call`'s `ai.tool` policies (max_calls, cooldown); Err is the text the
    /// LLM gets instead of a result.
    pub(super) async fn admit(
        &self,
        call: &PlannedCall,
        counts: &mut HashMap<String, u32>,
    ) -> Result<Option<Admission>, String> {
        let Some(ai) = call.tool.as_ref().and_then(|t| t.ai_tool.as_ref()) else {
            return Ok(None);
        };
        self.deps
            .policies
            .admit(&call.info.name, ai, &self.input.user_id, counts)
            .await
            .map(Some)
    }

    /// Asks the client to confirm `call` (policy `confirm`); Err says why it is not
    /// run: declined, no answer in time, or no client to ask.
    async fn confirm(&self, name: &str, args_json: &str) -> Result<(), String> {
        if !self.input.can_confirm {
            return Err(format!(
                "tool {name} was not run: it needs the user's confirmation and this input (channel {}) has no client to ask",
                self.input.channel
            ));
        }
        let wait = self.deps.settings.confirm_timeout;
        let (id, answer) = self.deps.policies.ask();
        self.emit(Event::ConfirmRequest(ConfirmRequest {
            confirm_id: id.clone(),
            tool: name.to_string(),
            args_json: args_json.to_string(),
            timeout_ms: wait.as_millis().min(u32::MAX as u128) as u32,
        }));
        let outcome = tokio::time::timeout(wait, answer).await;
        self.deps.policies.forget(&id);
        match outcome {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(format!("tool {name} was not run: the user declined it")),
            Ok(Err(_)) | Err(_) => Err(format!(
                "tool {name} was not run: the user did not confirm it within {} s",
                wait.as_secs_f64()
            )),
        }
    }

    /// Runs one tool call: a policy refusal (`admission`) is its result; otherwise
    /// `before_toolcall`, the `confirm` question when the tool has one, the plugin,
    /// and `after_toolcall` — inside an `execute_tool` span when tracing is on.
    pub(super) async fn run_call(
        &self,
        call: &PlannedCall,
        admission: Result<Option<Admission>, String>,
        base: &StageContext,
    ) -> CallOutcome {
        use opentelemetry::context::FutureExt as _;
        let owner = call.tool.as_ref().map_or("", |t| t.plugin.as_str());
        let Some(span) =
            crate::observe::trace::tool_span(&call.info.name, &call.info.id, owner, None)
        else {
            return self.run_call_inner(call, admission, base).await;
        };
        let cx = span.context().clone();
        let outcome = self
            .run_call_inner(call, admission, base)
            .with_context(cx)
            .await;
        if let (Some(error_type), Some(error)) = (
            outcome.kind.error_type(),
            outcome.text.strip_prefix("Error: "),
        ) {
            span.fail(error_type, error.to_string());
        }
        outcome
    }

    /// The plugin's answer to `tool` (arguments `args_json`, checked), its progress
    /// reports sent on as `ToolCallProgress` events: at most one per
    /// [`PROGRESS_INTERVAL`], the last one always.
    async fn call_with_progress(
        &self,
        call_id: &str,
        tool: &Tool,
        args_json: String,
    ) -> Result<hearth_proto::v1::ToolResult, crate::error::CallError> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let routed = self.deps.router.call_with_progress(
            tool,
            args_json,
            None,
            Some(self.sender.clone()),
            Some(tx),
        );
        tokio::pin!(routed);
        let emit = |p: hearth_proto::v1::ToolProgress| {
            self.emit(Event::ToolCallProgress(ToolCallProgress {
                call_id: call_id.to_string(),
                tool: tool.name.clone(),
                plugin: tool.plugin.clone(),
                message: p.message,
                progress: p.progress,
                total: p.total,
            }))
        };
        let mut last: Option<tokio::time::Instant> = None;
        let mut pending = None;
        let result = loop {
            let due = last.map_or_else(tokio::time::Instant::now, |t| t + PROGRESS_INTERVAL);
            tokio::select! {
                r = &mut routed => break r,
                Some(p) = rx.recv() => {
                    if last.is_none_or(|t| t.elapsed() >= PROGRESS_INTERVAL) {
                        emit(p);
                        last = Some(tokio::time::Instant::now());
                    } else {
                        pending = Some(p);
                    }
                }
                _ = tokio::time::sleep_until(due), if pending.is_some() => {
                    if let Some(p) = pending.take() {
                        emit(p);
                        last = Some(tokio::time::Instant::now());
                    }
                }
            }
        };
        while let Ok(p) = rx.try_recv() {
            pending = Some(p);
        }
        if let Some(p) = pending {
            emit(p);
        }
        result
    }

    async fn run_call_inner(
        &self,
        call: &PlannedCall,
        admission: Result<Option<Admission>, String>,
        base: &StageContext,
    ) -> CallOutcome {
        let kind = std::cell::Cell::new(Outcome::Ok);
        let deps = self.deps;
        let hooks = &deps.hooks;
        let started = Instant::now();
        let name = call.info.name.as_str();
        let owner = call.tool.as_ref().map(|t| t.plugin.as_str());
        self.emit(Event::ToolCallStarted(ToolCallStarted {
            call_id: call.info.id.clone(),
            tool: name.to_string(),
            plugin: owner.unwrap_or_default().to_string(),
            args_json: call.info.arguments_json.clone(),
        }));
        let hook_context = || {
            let mut c = base.clone();
            c.tool_calls = vec![call.info.clone()];
            c.tool_results.clear();
            c.response = None;
            c
        };
        let mut denied_by = String::new();
        let mut ran = false;
        let mut cctx: Option<StageContext> = None;
        let mut answer = match admission {
            Err(refusal) => {
                kind.set(record_refused(
                    deps.router.registry(),
                    name,
                    Outcome::Denied,
                ));
                Answer::failed(refusal)
            }
            Ok(admission) => {
                let mut args_json = call.info.arguments_json.clone();
                let mut reparsed = None;
                let mut refused = None;
                if hooks.any(Stage::BeforeToolcall, owner) {
                    let mut c = hook_context();
                    match hooks.run(Stage::BeforeToolcall, &mut c, owner).await {
                        Some(sc) => {
                            let reason = c
                                .response
                                .clone()
                                .or_else(|| c.tool_calls.first().map(|x| x.deny_reason.clone()))
                                .filter(|r| !r.is_empty())
                                .unwrap_or_else(|| "no reason given".into());
                            refused = Some(format!("denied by {}: {reason}", sc.plugin));
                            denied_by = sc.plugin;
                        }
                        None => {
                            if let Some(x) = c.tool_calls.iter().find(|x| x.id == call.info.id) {
                                if x.arguments_json != args_json {
                                    args_json = x.arguments_json.clone();
                                    reparsed = Some(parse_args(&args_json));
                                }
                            }
                        }
                    }
                    cctx = Some(c);
                }
                let args = reparsed.as_ref().unwrap_or(&call.args);
                let needs_confirm = call
                    .tool
                    .as_ref()
                    .and_then(|t| t.ai_tool.as_ref())
                    .is_some_and(|a| a.confirm);
                let outcome = match refused {
                    Some(r) => {
                        kind.set(record_refused(
                            deps.router.registry(),
                            name,
                            Outcome::Denied,
                        ));
                        Err(r)
                    }
                    None => match deps.router.prepare(name, args) {
                        Err(e) => {
                            kind.set(record_refused(
                                deps.router.registry(),
                                name,
                                Outcome::InvalidArgs,
                            ));
                            Err(e.to_string())
                        }
                        Ok(tool) => {
                            let confirmed = if needs_confirm {
                                self.confirm(name, &args_json).await
                            } else {
                                Ok(())
                            };
                            match confirmed {
                                Err(e) => {
                                    kind.set(record_refused(
                                        deps.router.registry(),
                                        name,
                                        Outcome::Denied,
                                    ));
                                    Err(e)
                                }
                                Ok(()) => {
                                    ran = true;
                                    let result = self
                                        .call_with_progress(&call.info.id, &tool, args_json)
                                        .await;
                                    kind.set(Outcome::of(&result));
                                    result.map_err(|e| e.to_string())
                                }
                            }
                        }
                    },
                };
                match outcome {
                    Ok(r) => Answer {
                        success: r.success,
                        content: r.content,
                        data_json: r.data_json,
                        error: r.error,
                    },
                    Err(e) => {
                        if let Some(a) = admission.filter(|_| !ran) {
                            deps.policies.release(a);
                        }
                        Answer::failed(e)
                    }
                }
            }
        };
        let mut short = None;
        if denied_by.is_empty() && hooks.any(Stage::AfterToolcall, owner) {
            let mut c = cctx.unwrap_or_else(hook_context);
            c.response = None;
            let sent = answer.to_json();
            c.tool_results = vec![ToolResultInfo {
                call_id: call.info.id.clone(),
                name: name.to_string(),
                plugin: owner.unwrap_or_default().to_string(),
                success: answer.success,
                result_json: sent.clone(),
            }];
            if let Some(sc) = hooks.run(Stage::AfterToolcall, &mut c, owner).await {
                short = c.response.clone().map(|r| (sc, r));
            }
            if let Some(r) = c.tool_results.first().filter(|r| r.result_json != sent) {
                match serde_json::from_str::<Value>(&r.result_json) {
                    Ok(v) => answer = Answer::from_json(&v),
                    Err(e) => tracing::warn!(tool = name, "an after_toolcall hook wrote a result that is not JSON ({e}); kept the plugin's"),
                }
            }
        }
        let text = answer.llm_text();
        self.emit(Event::ToolCallFinished(ToolCallFinished {
            call_id: call.info.id.clone(),
            tool: name.to_string(),
            success: answer.success,
            content: if answer.success {
                text.clone()
            } else {
                String::new()
            },
            error: if answer.success {
                String::new()
            } else {
                text.trim_start_matches("Error: ").to_string()
            },
            elapsed_us: started.elapsed().as_micros() as u64,
            plugin: owner.unwrap_or_default().to_string(),
            denied_by,
        }));
        CallOutcome {
            text,
            short,
            ran,
            kind: kind.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_as_the_llm_gets_them() {
        let ok = Answer {
            success: true,
            content: String::new(),
            data_json: r#"{"a":1}"#.into(),
            error: String::new(),
        };
        assert_eq!(ok.llm_text(), r#"{"a":1}"#);
        let back = Answer::from_json(&serde_json::from_str(&ok.to_json()).unwrap());
        assert_eq!(back.data_json, r#"{"a":1}"#);
        assert_eq!(Answer::failed("boom".into()).llm_text(), "Error: boom");
        assert_eq!(parse_args(""), json!({}));
        assert_eq!(parse_args("{bad"), json!("{bad"));
    }
}
