//! The stage permission matrix (seed `homeagent-plugin-sdk-api.md`, "阶段权限矩阵"),
//! part of the wire contract: the broker enforces it (`hearth-broker`'s pipeline) and
//! the SDK test harnesses run hooks through the same code, so a plugin's tests see
//! exactly what the broker keeps. It is enforced by the broker: after a hook returns, only the fields its stage may write
//! are taken from its context; every other change is dropped and reported.
//!
//! | field | on_input | pre_action | post_action | before_toolcall | after_toolcall | before_output | after_output |
//! |---|---|---|---|---|---|---|---|
//! | raw_message | rw | | | | | | |
//! | context_msgs | | rw | | | | | |
//! | llm_text | | | rw | | | | |
//! | tool_calls | | | rw | rw | | | |
//! | tool_call.deny | | | | rw | | | |
//! | tool_results | | | | | rw | | |
//! | final_text | | | | | | rw | r |
//! | response | rw | rw | rw | rw | rw | rw | |
//!
//! Hearth adds one rule the seed leaves open: `extra` (the extension map) is writable
//! in every stage but `after_output`, so hooks can pass data along a turn. Every
//! other field (user_id, group_id, reasoning_content, token_usage, phase, memory,
//! no_memory) is read-only for hooks.
//!
//! # What a hook receives ([`Visible`], [`view`])
//! A field a stage may neither read nor write ("-" in the seed's matrix) is not sent:
//! a hook gets its stage's fields of the matrix — on_input `raw_message`, pre_action
//! `context_msgs` (unless the hook declared `no_context_msgs`) and the recalled
//! `memory`, post_action `llm_text`, `reasoning_content` and `tool_calls`,
//! before_toolcall `tool_calls` (the one call), after_toolcall `tool_results` (its one
//! result), before_output and after_output `final_text` — plus what every stage
//! sees: `user_id`, `group_id`, `token_usage`, `phase`, `no_memory`, `extra` and
//! `response`. Fields not sent arrive empty, and whatever a hook answers for them is
//! ignored (neither applied nor reported).

use crate::v1::{Stage, StageContext, ToolCallInfo};
use serde_json::Value;

/// The stage-specific fields a hook receives (see the module docs); the fields every
/// stage sees are always sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Visible {
    /// `raw_message`.
    pub raw_message: bool,
    /// `context_msgs`.
    pub context_msgs: bool,
    /// `memory`.
    pub memory: bool,
    /// `llm_text` and `reasoning_content`.
    pub llm_text: bool,
    /// `tool_calls`.
    pub tool_calls: bool,
    /// `tool_results`.
    pub tool_results: bool,
    /// `final_text`.
    pub final_text: bool,
}

impl Visible {
    /// What a hook of `stage` receives; `context_msgs` = false for a hook that
    /// declared it does not read them.
    pub fn of(stage: Stage, context_msgs: bool) -> Visible {
        use Stage::*;
        Visible {
            raw_message: stage == OnInput,
            context_msgs: stage == PreAction && context_msgs,
            memory: stage == PreAction,
            llm_text: stage == PostAction,
            tool_calls: matches!(stage, PostAction | BeforeToolcall),
            tool_results: stage == AfterToolcall,
            final_text: matches!(stage, BeforeOutput | AfterOutput),
        }
    }
}

/// The context a hook of `stage` receives: `ctx` with only the `visible` fields and
/// those every stage sees.
pub fn view(stage: Stage, ctx: &StageContext, visible: Visible) -> StageContext {
    let pick = |on: bool, s: &String| if on { s.clone() } else { String::new() };
    StageContext {
        raw_message: pick(visible.raw_message, &ctx.raw_message),
        user_id: ctx.user_id.clone(),
        group_id: ctx.group_id.clone(),
        context_msgs_json: pick(visible.context_msgs, &ctx.context_msgs_json),
        llm_text: pick(visible.llm_text, &ctx.llm_text),
        reasoning_content: pick(visible.llm_text, &ctx.reasoning_content),
        token_usage: ctx.token_usage.clone(),
        tool_calls: if visible.tool_calls {
            ctx.tool_calls.clone()
        } else {
            Vec::new()
        },
        tool_results: if visible.tool_results {
            ctx.tool_results.clone()
        } else {
            Vec::new()
        },
        final_text: pick(visible.final_text, &ctx.final_text),
        response: ctx.response.clone(),
        phase: stage as i32,
        memory: if visible.memory {
            ctx.memory.clone()
        } else {
            Vec::new()
        },
        no_memory: ctx.no_memory,
        extra_json: ctx.extra_json.clone(),
    }
}

/// True when JSON texts `a` and `b` hold the same value (SDKs re-serialize JSON, so
/// the texts may differ in spacing or key order).
fn same_json(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let parse = |s: &str| -> Value {
        if s.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
        }
    };
    parse(a) == parse(b)
}

fn same_calls_ignoring_deny(a: &[ToolCallInfo], b: &[ToolCallInfo]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.id == y.id
                && x.name == y.name
                && x.plugin == y.plugin
                && same_json(&x.arguments_json, &y.arguments_json)
        })
}

/// True when a call of `proposed` has a deny flag or reason other than the same call
/// (by id) in `current` (a new call counts as not denied).
fn deny_changed(current: &[ToolCallInfo], proposed: &[ToolCallInfo]) -> bool {
    proposed.iter().any(|p| {
        let (deny, reason) = current
            .iter()
            .find(|c| c.id == p.id)
            .map(|c| (c.deny, c.deny_reason.as_str()))
            .unwrap_or((false, ""));
        (p.deny, p.deny_reason.as_str()) != (deny, reason)
    })
}

/// Applies the writes of `proposed` (a hook's returned context) to `current` as
/// `stage` allows, and returns the names of the fields whose changes were dropped.
/// Only the fields the hook received (`visible`, and those every stage sees) are
/// looked at.
pub fn apply(
    stage: Stage,
    visible: Visible,
    current: &mut StageContext,
    proposed: StageContext,
) -> Vec<&'static str> {
    use Stage::*;
    let mut dropped = Vec::new();
    let mut take = |allowed: bool, changed: bool, name: &'static str| -> bool {
        if changed && !allowed {
            dropped.push(name);
        }
        changed && allowed
    };

    if visible.raw_message
        && take(
            stage == OnInput,
            proposed.raw_message != current.raw_message,
            "raw_message",
        )
    {
        current.raw_message = proposed.raw_message;
    }
    if visible.context_msgs {
        let msgs_changed = !same_json(&proposed.context_msgs_json, &current.context_msgs_json);
        if take(stage == PreAction, msgs_changed, "context_msgs") {
            current.context_msgs_json = proposed.context_msgs_json;
        }
    }
    if visible.llm_text
        && take(
            stage == PostAction,
            proposed.llm_text != current.llm_text,
            "llm_text",
        )
    {
        current.llm_text = proposed.llm_text;
    }
    if visible.tool_calls {
        let calls_changed = !same_calls_ignoring_deny(&proposed.tool_calls, &current.tool_calls);
        let deny_changed = deny_changed(&current.tool_calls, &proposed.tool_calls);
        match stage {
            BeforeToolcall => {
                if calls_changed || deny_changed {
                    current.tool_calls = proposed.tool_calls;
                }
            }
            PostAction => {
                take(false, deny_changed, "tool_call.deny");
                if calls_changed {
                    current.tool_calls = proposed.tool_calls;
                    for c in &mut current.tool_calls {
                        c.deny = false;
                        c.deny_reason.clear();
                    }
                }
            }
            _ => {
                take(false, calls_changed, "tool_calls");
                take(false, deny_changed, "tool_call.deny");
            }
        }
    }
    if visible.tool_results {
        let results_changed = proposed.tool_results.len() != current.tool_results.len()
            || proposed
                .tool_results
                .iter()
                .zip(&current.tool_results)
                .any(|(a, b)| {
                    a.call_id != b.call_id
                        || a.name != b.name
                        || a.plugin != b.plugin
                        || a.success != b.success
                        || !same_json(&a.result_json, &b.result_json)
                });
        if take(stage == AfterToolcall, results_changed, "tool_results") {
            current.tool_results = proposed.tool_results;
        }
    }
    if visible.final_text
        && take(
            stage == BeforeOutput,
            proposed.final_text != current.final_text,
            "final_text",
        )
    {
        current.final_text = proposed.final_text;
    }
    if take(
        stage != AfterOutput,
        proposed.response != current.response,
        "response",
    ) {
        current.response = proposed.response;
    }
    if take(
        stage != AfterOutput,
        !same_json(&proposed.extra_json, &current.extra_json),
        "extra",
    ) {
        current.extra_json = proposed.extra_json;
    }
    // Read-only everywhere.
    let read_only = [
        (proposed.user_id != current.user_id, "user_id"),
        (proposed.group_id != current.group_id, "group_id"),
        (
            visible.llm_text && proposed.reasoning_content != current.reasoning_content,
            "reasoning_content",
        ),
        (proposed.token_usage != current.token_usage, "token_usage"),
        (proposed.phase != current.phase, "phase"),
        (
            visible.memory && proposed.memory != current.memory,
            "memory",
        ),
        (proposed.no_memory != current.no_memory, "no_memory"),
    ];
    for (changed, name) in read_only {
        take(false, changed, name);
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAGES: [Stage; 7] = [
        Stage::OnInput,
        Stage::PreAction,
        Stage::PostAction,
        Stage::BeforeToolcall,
        Stage::AfterToolcall,
        Stage::BeforeOutput,
        Stage::AfterOutput,
    ];

    fn base() -> StageContext {
        StageContext {
            raw_message: "hi".into(),
            user_id: "u".into(),
            context_msgs_json: "[]".into(),
            tool_calls: vec![ToolCallInfo {
                id: "c1".into(),
                name: "t".into(),
                arguments_json: "{}".into(),
                ..Default::default()
            }],
            extra_json: "{}".into(),
            ..Default::default()
        }
    }

    /// A hook that writes every field (lists it was not sent get an entry).
    fn write_all(mut c: StageContext) -> StageContext {
        if c.tool_calls.is_empty() {
            c.tool_calls.push(ToolCallInfo::default());
        }
        c.raw_message = "changed".into();
        c.user_id = "mallory".into();
        c.group_id = "g".into();
        c.context_msgs_json = r#"[{"role":"system","content":"x"}]"#.into();
        c.llm_text = "changed".into();
        c.reasoning_content = "changed".into();
        c.token_usage.insert("total".into(), 9);
        c.tool_calls[0].arguments_json = r#"{"a":1}"#.into();
        c.tool_calls[0].deny = true;
        c.tool_results.push(Default::default());
        c.final_text = "changed".into();
        c.response = Some("stop".into());
        c.phase += 1;
        c.memory.push(Default::default());
        c.no_memory = true;
        c.extra_json = r#"{"k":1}"#.into();
        c
    }

    #[test]
    fn every_cell_of_the_matrix() {
        let expect: [(Stage, &[&str]); 7] = [
            (Stage::OnInput, &["raw_message", "response", "extra"]),
            (Stage::PreAction, &["context_msgs", "response", "extra"]),
            (
                Stage::PostAction,
                &["llm_text", "tool_calls", "response", "extra"],
            ),
            (
                Stage::BeforeToolcall,
                &["tool_calls", "tool_call.deny", "response", "extra"],
            ),
            (Stage::AfterToolcall, &["tool_results", "response", "extra"]),
            (Stage::BeforeOutput, &["final_text", "response", "extra"]),
            (Stage::AfterOutput, &[]),
        ];
        for (stage, allowed) in expect {
            let mut ctx = base();
            ctx.phase = stage as i32;
            let visible = Visible::of(stage, true);
            let answer = write_all(view(stage, &ctx, visible));
            let dropped = apply(stage, visible, &mut ctx, answer);
            let seen = |f: &str| -> bool {
                match f {
                    "raw_message" => visible.raw_message,
                    "context_msgs" => visible.context_msgs,
                    "llm_text" | "reasoning_content" => visible.llm_text,
                    "tool_calls" | "tool_call.deny" => visible.tool_calls,
                    "tool_results" => visible.tool_results,
                    "final_text" => visible.final_text,
                    "memory" => visible.memory,
                    _ => true,
                }
            };
            let kept = |f: &str| -> bool {
                match f {
                    "raw_message" => ctx.raw_message == "changed",
                    "context_msgs" => ctx.context_msgs_json != "[]",
                    "llm_text" => ctx.llm_text == "changed",
                    "tool_calls" => ctx.tool_calls[0].arguments_json != "{}",
                    "tool_call.deny" => ctx.tool_calls[0].deny,
                    "tool_results" => !ctx.tool_results.is_empty(),
                    "final_text" => ctx.final_text == "changed",
                    "response" => ctx.response.is_some(),
                    "extra" => ctx.extra_json != "{}",
                    _ => unreachable!(),
                }
            };
            for f in [
                "raw_message",
                "context_msgs",
                "llm_text",
                "tool_calls",
                "tool_call.deny",
                "tool_results",
                "final_text",
                "response",
                "extra",
            ] {
                assert_eq!(kept(f), allowed.contains(&f), "{stage:?}: field {f}");
                assert_eq!(
                    dropped.contains(&f),
                    seen(f) && !allowed.contains(&f),
                    "{stage:?}: dropped {f}: {dropped:?}"
                );
            }
            for ro in [
                "user_id",
                "group_id",
                "reasoning_content",
                "token_usage",
                "phase",
                "memory",
                "no_memory",
            ] {
                assert_eq!(dropped.contains(&ro), seen(ro), "{stage:?}: {ro}");
            }
            assert_eq!(
                (ctx.user_id.as_str(), ctx.no_memory),
                ("u", false),
                "{stage:?}"
            );
        }
        assert_eq!(STAGES.len(), 7);
    }

    #[test]
    fn reserialized_json_is_not_a_write() {
        let mut ctx = base();
        let mut p = base();
        p.context_msgs_json = " [ ] ".into();
        p.extra_json = "{ }".into();
        let visible = Visible::of(Stage::PreAction, true);
        assert!(apply(Stage::PreAction, visible, &mut ctx, p).is_empty());
    }

    #[test]
    fn fields_not_sent_are_neither_applied_nor_reported() {
        let mut ctx = base();
        ctx.context_msgs_json = r#"[{"role":"user","content":"hi"}]"#.into();
        ctx.memory.push(Default::default());
        ctx.phase = Stage::PreAction as i32;
        // A pre_action hook that declared no_context_msgs answers them empty.
        let visible = Visible::of(Stage::PreAction, false);
        let sent = view(Stage::PreAction, &ctx, visible);
        assert_eq!(sent.context_msgs_json, "");
        assert_eq!((sent.raw_message.as_str(), sent.memory.len()), ("", 1));
        let dropped = apply(Stage::PreAction, visible, &mut ctx, sent);
        assert!(dropped.is_empty(), "{dropped:?}");
        assert!(ctx.context_msgs_json.contains("hi") && ctx.raw_message == "hi");
    }

    #[test]
    fn deny_alone_is_allowed_only_before_toolcall() {
        for stage in STAGES {
            let mut ctx = base();
            let mut p = base();
            p.tool_calls[0].deny = true;
            p.tool_calls[0].deny_reason = "no".into();
            // Every list visible: the check is about the matrix, not what is sent.
            let visible = Visible {
                tool_calls: true,
                ..Visible::default()
            };
            let dropped = apply(stage, visible, &mut ctx, p);
            assert_eq!(
                ctx.tool_calls[0].deny,
                stage == Stage::BeforeToolcall,
                "{stage:?}"
            );
            assert_eq!(
                dropped == ["tool_call.deny"],
                stage != Stage::BeforeToolcall,
                "{stage:?} {dropped:?}"
            );
        }
    }
}
