//! Drift tests: the broker's rules checked against the golden files the SDK test
//! harnesses check their copies against (`hearth_plugin.testing`,
//! `hearth-plugin/testing`, `hearth_plugin::testing`). A change of a rule here fails
//! these tests until the golden file, and with it each SDK's copy, is updated.
//!
//! - Argument validation ([`crate::schema::ArgsSchema`]):
//!   `sdk-python/tests/golden/broker_validation.json` (regenerated with
//!   `.venv/bin/python sdk-python/tests/test_broker_validation.py --update`) and
//!   `sdk-node/test/fixtures/schema-golden.json` (edited by hand: a failure here lists
//!   the broker's answer for each case that differs).
//! - The stage permission matrix ([`crate::pipeline::permissions`]):
//!   `tests/golden/stage-permissions.json`.
//! - Setting types ([`crate::storage::ConfigDef::check`]): `tests/golden/setting-types.json`.
//! - Trigger matching ([`crate::triggers::TriggerSet`]): `tests/golden/triggers.json`.
//!
//! The last three are the broker's own: after a deliberate change, rewrite them with
//! `HEARTH_UPDATE_GOLDEN=1 cargo test -p hearth-broker --lib golden` (inputs are kept,
//! the expected outcomes recomputed), review the diff, and update the SDK copies until
//! their tests pass again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hearth_proto::v1::{
    MemItem, Stage, StageContext, ToolCallInfo, ToolResultInfo, Trigger, TriggerType,
};
use serde_json::{json, Value};

use crate::pipeline::permissions::{apply, view, Visible};
use crate::schema::ArgsSchema;
use crate::storage::ConfigDef;
use crate::triggers::TriggerSet;

/// `path` relative to the repository root.
fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read_json(path: &str) -> Value {
    let file = repo_file(path);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e} (a golden file of the drift tests)", file.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Whether the broker's own golden files are rewritten instead of checked.
fn updating() -> bool {
    std::env::var_os("HEARTH_UPDATE_GOLDEN").is_some_and(|v| v == "1")
}

fn write(path: &str, text: String) {
    let file = repo_file(path);
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    eprintln!("wrote {}", file.display());
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap()
}

const REGENERATE: &str = "if the broker's change is deliberate, run \
    `HEARTH_UPDATE_GOLDEN=1 cargo test -p hearth-broker --lib golden`, review the diff and \
    update the SDK copies (hearth_plugin.testing, hearth-plugin/testing, hearth_plugin::testing)";

// ------------------------------------------------------------------ argument validation

/// The broker's verdict on `args`: `None` = valid, else the message a call gets.
fn verdict(schema: &Value, args: &Value) -> Result<Option<String>, String> {
    let compiled = ArgsSchema::from_value(schema.clone())?;
    Ok(compiled.validate(args).err())
}

#[test]
fn python_validation_golden_is_what_the_broker_answers() {
    let golden = read_json("sdk-python/tests/golden/broker_validation.json");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (name, case) in golden.as_object().unwrap() {
        if name.starts_with('_') {
            continue;
        }
        let schema = &case["schema"];
        let args = case["args"].as_array().unwrap();
        let want = case["broker"].as_array().unwrap();
        assert_eq!(
            args.len(),
            want.len(),
            "{name}: one verdict per argument set"
        );
        for (a, want) in args.iter().zip(want) {
            let want = want.as_str().unwrap();
            let got = match verdict(schema, a) {
                Err(_) if want.starts_with("META-INVALID") => continue,
                Err(e) => format!("schema refused: {e}"),
                Ok(None) => "ok".to_string(),
                Ok(Some(msg)) => msg,
            };
            checked += 1;
            if got != want {
                wrong.push(format!("{name} {a}:\n  golden: {want}\n  broker: {got}"));
            }
        }
    }
    assert!(checked > 50, "only {checked} cases");
    assert!(
        wrong.is_empty(),
        "the broker's argument validation no longer matches \
         sdk-python/tests/golden/broker_validation.json ({} of {checked}); if the change is \
         deliberate, regenerate it (`.venv/bin/python sdk-python/tests/test_broker_validation.py \
         --update`) and sdk-node/test/fixtures/schema-golden.json, and update the SDK copies:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn node_validation_golden_is_what_the_broker_answers() {
    let golden = read_json("sdk-node/test/fixtures/schema-golden.json");
    let cases = golden["cases"].as_array().unwrap();
    assert!(cases.len() > 50, "only {} cases", cases.len());
    let mut wrong = Vec::new();
    for case in cases {
        let want = case["expected"].as_str().unwrap();
        let got = match verdict(&case["schema"], &case["args"]) {
            Err(e) => format!("schema refused: {e}"),
            Ok(None) => "OK".to_string(),
            Ok(Some(msg)) => msg,
        };
        if got != want {
            wrong.push(format!(
                "{} with {}:\n  golden: {want}\n  broker: {got}",
                case["schema"], case["args"]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "the broker's argument validation no longer matches \
         sdk-node/test/fixtures/schema-golden.json ({} of {}); if the change is deliberate, \
         write the broker's answers below into it as `expected`, regenerate \
         sdk-python/tests/golden/broker_validation.json and update the SDK copies:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

// ------------------------------------------------------------------ permission matrix

const STAGE_PERMISSIONS: &str = "tests/golden/stage-permissions.json";

const STAGES: [Stage; 7] = [
    Stage::OnInput,
    Stage::PreAction,
    Stage::PostAction,
    Stage::BeforeToolcall,
    Stage::AfterToolcall,
    Stage::BeforeOutput,
    Stage::AfterOutput,
];

/// Every field of `StageContext` as `apply` names it (`tool_call.deny` is the deny
/// flag of a tool call, `context_msgs` is `context_msgs_json`, `extra` `extra_json`).
const FIELDS: [&str; 16] = [
    "raw_message",
    "user_id",
    "group_id",
    "context_msgs",
    "llm_text",
    "reasoning_content",
    "token_usage",
    "tool_calls",
    "tool_call.deny",
    "tool_results",
    "final_text",
    "response",
    "phase",
    "memory",
    "no_memory",
    "extra",
];

/// A context of `stage` with every field set.
fn full_context(stage: Stage) -> StageContext {
    StageContext {
        raw_message: "hi".into(),
        user_id: "u".into(),
        group_id: "g".into(),
        context_msgs_json: r#"[{"role":"user","content":"hi"}]"#.into(),
        llm_text: "text".into(),
        reasoning_content: "why".into(),
        token_usage: [("total".to_string(), 1)].into_iter().collect(),
        tool_calls: vec![ToolCallInfo {
            id: "c1".into(),
            name: "t".into(),
            plugin: "p".into(),
            arguments_json: "{}".into(),
            ..Default::default()
        }],
        tool_results: vec![ToolResultInfo {
            call_id: "c1".into(),
            name: "t".into(),
            plugin: "p".into(),
            success: true,
            result_json: "1".into(),
        }],
        final_text: "final".into(),
        response: Some("earlier".into()),
        phase: stage as i32,
        memory: vec![MemItem {
            role: "user".into(),
            content: "m".into(),
            score: 1.0,
        }],
        no_memory: true,
        extra_json: r#"{"a":1}"#.into(),
    }
}

/// Whether `field` of `full` was sent in `sent`.
fn sent(field: &str, full: &StageContext, sent: &StageContext) -> bool {
    match field {
        "raw_message" => sent.raw_message == full.raw_message,
        "user_id" => sent.user_id == full.user_id,
        "group_id" => sent.group_id == full.group_id,
        "context_msgs" => sent.context_msgs_json == full.context_msgs_json,
        "llm_text" => sent.llm_text == full.llm_text,
        "reasoning_content" => sent.reasoning_content == full.reasoning_content,
        "token_usage" => sent.token_usage == full.token_usage,
        "tool_calls" | "tool_call.deny" => sent.tool_calls == full.tool_calls,
        "tool_results" => sent.tool_results == full.tool_results,
        "final_text" => sent.final_text == full.final_text,
        "response" => sent.response == full.response,
        "phase" => sent.phase == full.phase,
        "memory" => sent.memory == full.memory,
        "no_memory" => sent.no_memory == full.no_memory,
        "extra" => sent.extra_json == full.extra_json,
        _ => unreachable!("{field}"),
    }
}

/// A hook's answer: `ctx` (what it was sent) with `field` written. A list it was not
/// sent gets an entry.
fn write_field(mut ctx: StageContext, field: &str) -> StageContext {
    match field {
        "raw_message" => ctx.raw_message = "changed".into(),
        "user_id" => ctx.user_id = "mallory".into(),
        "group_id" => ctx.group_id = "other".into(),
        "context_msgs" => ctx.context_msgs_json = r#"[{"role":"system","content":"x"}]"#.into(),
        "llm_text" => ctx.llm_text = "changed".into(),
        "reasoning_content" => ctx.reasoning_content = "changed".into(),
        "token_usage" => {
            ctx.token_usage.insert("total".into(), 9);
        }
        "tool_calls" => match ctx.tool_calls.first_mut() {
            Some(c) => c.arguments_json = r#"{"a":1}"#.into(),
            None => ctx.tool_calls.push(ToolCallInfo {
                id: "new".into(),
                name: "t".into(),
                arguments_json: "{}".into(),
                ..Default::default()
            }),
        },
        "tool_call.deny" => match ctx.tool_calls.first_mut() {
            Some(c) => {
                c.deny = true;
                c.deny_reason = "no".into();
            }
            None => ctx.tool_calls.push(ToolCallInfo {
                id: "new".into(),
                deny: true,
                deny_reason: "no".into(),
                ..Default::default()
            }),
        },
        "tool_results" => match ctx.tool_results.first_mut() {
            Some(r) => r.result_json = "2".into(),
            None => ctx.tool_results.push(ToolResultInfo {
                call_id: "new".into(),
                result_json: "2".into(),
                ..Default::default()
            }),
        },
        "final_text" => ctx.final_text = "changed".into(),
        "response" => ctx.response = Some("changed".into()),
        "phase" => ctx.phase = ctx.phase % 7 + 1,
        "memory" => match ctx.memory.first_mut() {
            Some(m) => m.content = "changed".into(),
            None => ctx.memory.push(MemItem {
                role: "user".into(),
                content: "changed".into(),
                score: 1.0,
            }),
        },
        "no_memory" => ctx.no_memory = !ctx.no_memory,
        "extra" => ctx.extra_json = r#"{"k":1}"#.into(),
        _ => unreachable!("{field}"),
    }
    ctx
}

/// Whether `field` of `after` differs from `before`.
fn differs(field: &str, before: &StageContext, after: &StageContext) -> bool {
    match field {
        "tool_call.deny" => before
            .tool_calls
            .iter()
            .zip(&after.tool_calls)
            .any(|(a, b)| (a.deny, &a.deny_reason) != (b.deny, &b.deny_reason)),
        "tool_calls" => before.tool_calls != after.tool_calls,
        other => !sent(other, before, after),
    }
}

/// `{"stage", "no_context_msgs", "fields": {field: {"visible", "kept"}}}` of each hook
/// kind, computed with `view` and `apply`. Panics when `apply` reports a dropped write
/// other than exactly the visible writes it did not keep.
fn permission_matrix() -> Vec<Value> {
    let mut hooks = Vec::new();
    let kinds = STAGES
        .iter()
        .map(|s| (*s, false))
        .chain([(Stage::PreAction, true)]);
    for (stage, no_context_msgs) in kinds {
        let name = hearth_proto::stage_name(stage);
        let visible = Visible::of(stage, !no_context_msgs);
        let mut fields = serde_json::Map::new();
        for field in FIELDS {
            let full = full_context(stage);
            let sent_ctx = view(stage, &full, visible);
            let is_visible = sent(field, &full, &sent_ctx);
            let mut current = full.clone();
            let dropped = apply(stage, visible, &mut current, write_field(sent_ctx, field));
            let kept = differs(field, &full, &current);
            let reported: Vec<&str> = if is_visible && !kept {
                vec![field]
            } else {
                vec![]
            };
            assert_eq!(
                dropped, reported,
                "{name} (no_context_msgs {no_context_msgs}): a write of {field} \
                 (visible {is_visible}, kept {kept}) reported {dropped:?}"
            );
            fields.insert(
                field.to_string(),
                json!({"visible": is_visible, "kept": kept}),
            );
        }
        hooks.push(json!({"stage": name, "no_context_msgs": no_context_msgs, "fields": fields}));
    }
    hooks
}

fn permissions_file(hooks: &[Value]) -> String {
    let mut out = String::from("{\n");
    out += &format!(
        " \"about\": {},\n",
        to_json(&"The stage permission matrix the broker enforces (broker/src/pipeline/permissions.rs): \
            for each kind of hook (its stage; a pre_action hook may declare no_context_msgs) and each \
            StageContext field, whether the hook is sent the field (`visible`) and whether a write of it \
            is applied (`kept`). A visible write that is not kept is dropped and reported; a write of a \
            field that was not sent is ignored (not applied, not reported). Fields: `context_msgs` is \
            context_msgs_json, `extra` extra_json, `tool_call.deny` the deny flag and reason of a tool \
            call. Checked by the broker (broker/src/golden.rs) and each SDK harness; regenerate with \
            `HEARTH_UPDATE_GOLDEN=1 cargo test -p hearth-broker --lib golden`.")
    );
    out += &format!(" \"fields\": {},\n", to_json(&FIELDS));
    out += " \"hooks\": [\n";
    for (i, hook) in hooks.iter().enumerate() {
        out += &format!(
            "  {{\"stage\": {}, \"no_context_msgs\": {}, \"fields\": {{\n",
            hook["stage"], hook["no_context_msgs"]
        );
        for (j, field) in FIELDS.iter().enumerate() {
            let cell = &hook["fields"][field];
            out += &format!(
                "   {}: {{\"visible\": {}, \"kept\": {}}}{}\n",
                to_json(field),
                cell["visible"],
                cell["kept"],
                if j + 1 < FIELDS.len() { "," } else { "" }
            );
        }
        out += &format!("  }}}}{}\n", if i + 1 < hooks.len() { "," } else { "" });
    }
    out += " ]\n}\n";
    out
}

#[test]
fn stage_permissions_golden_is_the_broker_matrix() {
    let hooks = permission_matrix();
    if updating() {
        write(STAGE_PERMISSIONS, permissions_file(&hooks));
        return;
    }
    let golden = read_json(STAGE_PERMISSIONS);
    assert_eq!(
        golden["fields"],
        json!(FIELDS),
        "{STAGE_PERMISSIONS}: fields; {REGENERATE}"
    );
    let want = golden["hooks"].as_array().unwrap();
    let mut wrong = Vec::new();
    assert_eq!(
        want.len(),
        hooks.len(),
        "{STAGE_PERMISSIONS}: hooks; {REGENERATE}"
    );
    for (got, want) in hooks.iter().zip(want) {
        for field in FIELDS {
            if got["fields"][field] != want["fields"][field]
                || got["stage"] != want["stage"]
                || got["no_context_msgs"] != want["no_context_msgs"]
            {
                wrong.push(format!(
                    "{} (no_context_msgs {}) {field}: golden {}, broker {}",
                    want["stage"],
                    want["no_context_msgs"],
                    want["fields"][field],
                    got["fields"][field]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "broker/src/pipeline/permissions.rs no longer matches {STAGE_PERMISSIONS}; {REGENERATE}:\n{}",
        wrong.join("\n")
    );
}

// ------------------------------------------------------------------ setting types

const SETTING_TYPES: &str = "tests/golden/setting-types.json";

#[test]
fn setting_types_golden_is_what_the_broker_checks() {
    let golden = read_json(SETTING_TYPES);
    let cases = golden["cases"].as_array().unwrap();
    let mut wrong = Vec::new();
    let mut lines = Vec::new();
    for case in cases {
        let def = ConfigDef {
            key: "k".into(),
            r#type: case["type"].as_str().unwrap().into(),
            secret: case["secret"].as_bool().unwrap(),
            ..ConfigDef::default()
        };
        let text = case["value_json"].as_str().unwrap();
        let value: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let got = match def.check(&value) {
            Ok(()) => Value::Null,
            Err(reason) => Value::String(reason),
        };
        if got != case["error"] {
            wrong.push(format!(
                "type {:?} secret {} value {text}:\n  golden: {}\n  broker: {got}",
                def.r#type, def.secret, case["error"]
            ));
        }
        lines.push(format!(
            "  {{\"type\": {}, \"secret\": {}, \"value_json\": {}, \"error\": {}}}",
            to_json(&def.r#type),
            def.secret,
            to_json(&text),
            got
        ));
    }
    if updating() {
        write(
            SETTING_TYPES,
            format!(
                "{{\n \"about\": {},\n \"cases\": [\n{}\n ]\n}}\n",
                golden["about"],
                lines.join(",\n")
            ),
        );
        return;
    }
    assert!(cases.len() > 20, "only {} cases", cases.len());
    assert!(
        wrong.is_empty(),
        "ConfigDef::check no longer matches {SETTING_TYPES}; {REGENERATE}:\n{}",
        wrong.join("\n")
    );
}

// ------------------------------------------------------------------ triggers

const TRIGGERS: &str = "tests/golden/triggers.json";

fn trigger_of(t: &Value) -> Trigger {
    Trigger {
        r#type: t[0].as_i64().unwrap() as i32,
        pattern: t[1].as_str().unwrap().into(),
    }
}

/// What the broker does with one case of the trigger golden: `compiled` (per trigger,
/// null = kept, else the reason it was rejected) and `match` (null, or the index of
/// the trigger that matched and its params).
fn trigger_outcome(case: &Value) -> BTreeMap<&'static str, Value> {
    let triggers: Vec<Trigger> = case["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(trigger_of)
        .collect();
    let (set, rejected) = TriggerSet::compile(&triggers, None);
    let mut out = BTreeMap::new();
    let mut rejected = rejected.into_iter();
    let mut compiled = Vec::new();
    let mut kept = set.triggers.iter().map(|t| &t.trigger).peekable();
    for t in &triggers {
        if kept.peek() == Some(&t) {
            kept.next();
            compiled.push(Value::Null);
        } else {
            let r = rejected.next().expect("a trigger left out is reported");
            // Regex error texts are the engine's own; the SDKs only say "invalid regex".
            let reason = if t.r#type == TriggerType::TriggerRegex as i32 {
                r.reason
                    .split_once(':')
                    .map_or(r.reason.clone(), |(head, _)| head.to_string())
            } else {
                r.reason
            };
            compiled.push(Value::String(reason));
        }
    }
    out.insert("compiled", Value::Array(compiled));
    let index_of = |m: &crate::triggers::Match| {
        triggers
            .iter()
            .position(|t| *t == m.trigger)
            .expect("the trigger that matched is one registered")
    };
    let found = if let Some(event) = case.get("event").and_then(Value::as_str) {
        set.match_event(event, case["message"].as_str().unwrap())
    } else {
        set.match_message(case["message"].as_str().unwrap())
    };
    out.insert(
        "match",
        match found {
            None => Value::Null,
            Some(m) => json!({"trigger": index_of(&m), "params": m.params}),
        },
    );
    out
}

#[test]
fn triggers_golden_is_what_the_broker_matches() {
    let golden = read_json(TRIGGERS);
    let cases = golden["cases"].as_array().unwrap();
    let mut wrong = Vec::new();
    let mut lines = Vec::new();
    for case in cases {
        let got = trigger_outcome(case);
        for (k, v) in &got {
            if case[*k] != *v {
                wrong.push(format!(
                    "triggers {} message {}{}: {k}:\n  golden: {}\n  broker: {v}",
                    case["triggers"],
                    case["message"],
                    case.get("event")
                        .map(|e| format!(" (event {e})"))
                        .unwrap_or_default(),
                    case[*k]
                ));
            }
        }
        let event = case
            .get("event")
            .map(|e| format!(", \"event\": {e}"))
            .unwrap_or_default();
        lines.push(format!(
            "  {{\"triggers\": {}, \"message\": {}{event},\n   \"compiled\": {}, \"match\": {}}}",
            to_json(&case["triggers"]),
            to_json(&case["message"]),
            got["compiled"],
            got["match"]
        ));
    }
    if updating() {
        write(
            TRIGGERS,
            format!(
                "{{\n \"about\": {},\n \"cases\": [\n{}\n ]\n}}\n",
                golden["about"],
                lines.join(",\n")
            ),
        );
        return;
    }
    assert!(cases.len() > 20, "only {} cases", cases.len());
    assert!(
        wrong.is_empty(),
        "broker/src/triggers no longer matches {TRIGGERS}; {REGENERATE}:\n{}",
        wrong.join("\n")
    );
}
