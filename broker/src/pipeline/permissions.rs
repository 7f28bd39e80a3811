//! The stage permission matrix (seed `homeagent-plugin-sdk-api.md`, "阶段权限矩阵"),
//! enforced by the broker: after a hook returns, only the fields its stage may write
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

use hearth_proto::v1::{Stage, StageContext, ToolCallInfo};
use serde_json::Value;

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
pub fn apply(
    stage: Stage,
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

    if take(
        stage == OnInput,
        proposed.raw_message != current.raw_message,
        "raw_message",
    ) {
        current.raw_message = proposed.raw_message;
    }
    let msgs_changed = !same_json(&proposed.context_msgs_json, &current.context_msgs_json);
    if take(stage == PreAction, msgs_changed, "context_msgs") {
        current.context_msgs_json = proposed.context_msgs_json;
    }
    if take(
        stage == PostAction,
        proposed.llm_text != current.llm_text,
        "llm_text",
    ) {
        current.llm_text = proposed.llm_text;
    }
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
    if take(
        stage == BeforeOutput,
        proposed.final_text != current.final_text,
        "final_text",
    ) {
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
            proposed.reasoning_content != current.reasoning_content,
            "reasoning_content",
        ),
        (proposed.token_usage != current.token_usage, "token_usage"),
        (proposed.phase != current.phase, "phase"),
        (proposed.memory != current.memory, "memory"),
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

    /// A hook that writes every field.
    fn write_all(mut c: StageContext) -> StageContext {
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
        c.phase = 3;
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
            let dropped = apply(stage, &mut ctx, write_all(base()));
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
                    !allowed.contains(&f),
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
                assert!(dropped.contains(&ro), "{stage:?}: {ro} not reported");
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
        assert!(apply(Stage::OnInput, &mut ctx, p).is_empty());
    }

    #[test]
    fn deny_alone_is_allowed_only_before_toolcall() {
        for stage in STAGES {
            let mut ctx = base();
            let mut p = base();
            p.tool_calls[0].deny = true;
            p.tool_calls[0].deny_reason = "no".into();
            let dropped = apply(stage, &mut ctx, p);
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
