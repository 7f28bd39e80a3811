//! Host-cases plugin: runs the shared host-service cases (`tests/host_cases.json`)
//! through the Rust SDK's typed API (`host.settings().get_core(…)`,
//! `host.memory().merge_entities(…)` …), the Rust member of the case runners driven by
//! the broker's `tests/integration/host.rs`.
//!
//! `HOST_CASES_ROLE` picks what the plugin does (its name is `HEARTH_PLUGIN`):
//! - `runner` (default): tool `<name>_run` runs the file's `cases` and answers the
//!   report `{lang, section, total, passed, failed: [{step, note, call, args, expected,
//!   got, why?}]}`;
//! - `nocap`: the same tool runs `refusals` (manifest `"capabilities": []`);
//! - `other`: declares the setting `greeting` (default `"hello"`) in `start`, the
//!   target of the cases' cross-plugin settings calls; tool `<name>_ping`.
//!
//! `HOST_CASES_OTHER` names that other plugin (`${other}` in the cases);
//! `HOST_CASES_FILE` overrides the case file.
//!
//! Run: `cargo build -p hearth-plugin --example host_cases` → `target/debug/examples/host_cases`.

use std::collections::HashMap;

use hearth_plugin::{
    async_trait, BoxError, ConfigDef, Doc, Host, HostError, Plugin, PluginMetadata, Registrar,
    TextEvent, ToolDef, Triple,
};
use serde_json::{json, Map, Value};

const LANG: &str = "rust";

/// Why a call did not give a value.
enum Failure {
    /// The host service answered an error.
    Host(HostError),
    /// Something else (a bad argument in the case file, a value that does not map).
    Other(String),
}

impl From<HostError> for Failure {
    fn from(e: HostError) -> Failure {
        Failure::Host(e)
    }
}

fn other(e: impl std::fmt::Display) -> Failure {
    Failure::Other(e.to_string())
}

// ---------------------------------------------------------------- variables and matching

/// `${name}` substitution (see the `about` of tests/host_cases.json).
fn subst(v: &Value, env: &HashMap<String, Value>) -> Result<Value, String> {
    let text = |s: &str| -> Result<String, String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            let end = rest[start..]
                .find('}')
                .ok_or_else(|| format!("unclosed variable in {s:?}"))?
                + start;
            let name = &rest[start + 2..end];
            let value = env
                .get(name)
                .ok_or_else(|| format!("unknown variable ${{{name}}}"))?;
            out.push_str(&rest[..start]);
            match value {
                Value::String(v) => out.push_str(v),
                v => out.push_str(&v.to_string()),
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    };
    Ok(match v {
        Value::String(s) => {
            let whole = s
                .strip_prefix("${")
                .and_then(|r| r.strip_suffix('}'))
                .filter(|n| n.chars().all(|c| c.is_alphanumeric() || c == '_'));
            match whole {
                Some(name) => env
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("unknown variable ${{{name}}}"))?,
                None => Value::String(text(s)?),
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| subst(x, env)).collect::<Result<_, _>>()?),
        Value::Object(o) => {
            let mut m = Map::new();
            for (k, x) in o {
                m.insert(text(k)?, subst(x, env)?);
            }
            Value::Object(m)
        }
        other => other.clone(),
    })
}

fn type_is(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        _ => false,
    }
}

/// Equal numbers of the same kind (integer vs float are told apart, as in Python).
fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if a.is_f64() || b.is_f64() {
        return a.is_f64() && b.is_f64() && a.as_f64() == b.as_f64();
    }
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    int(a) == int(b)
}

/// `None` when `got` satisfies `exp`, else why not.
fn check_match(exp: &Value, got: &Value, path: &str) -> Option<String> {
    if let Some((op, arg)) = exp
        .as_object()
        .filter(|o| o.len() == 1)
        .and_then(|o| o.iter().next())
        .filter(|(k, _)| k.starts_with('$'))
    {
        let fail = |what: String| Some(format!("{path}: {what}, got {got}"));
        return match op.as_str() {
            "$any" => None,
            "$type" => (!type_is(arg.as_str().unwrap_or(""), got)).then(|| {
                format!(
                    "{path}: expected a {}, got {got}",
                    arg.as_str().unwrap_or("")
                )
            }),
            "$gt" => match (got.as_f64(), arg.as_f64()) {
                (Some(g), Some(a)) if got.is_number() && g > a => None,
                _ => fail(format!("expected a number > {arg}")),
            },
            "$contains" => match (got.as_str(), arg.as_str()) {
                (Some(g), Some(a)) if g.contains(a) => None,
                _ => fail(format!("expected a string containing {arg}")),
            },
            "$no_text" => got
                .to_string()
                .contains(arg.as_str().unwrap_or("\u{0}"))
                .then(|| format!("{path}: {arg} must not appear in {got}")),
            "$len" => {
                let len = match got {
                    Value::Array(a) => a.len(),
                    Value::String(s) => s.chars().count(),
                    Value::Object(o) => o.len(),
                    _ => usize::MAX,
                };
                (Some(len as u64) != arg.as_u64())
                    .then(|| format!("{path}: expected length {arg}, got {got}"))
            }
            "$subset" => {
                let (Some(g), Some(a)) = (got.as_object(), arg.as_object()) else {
                    return fail("expected an object".into());
                };
                for (k, e) in a {
                    let Some(x) = g.get(k) else {
                        return Some(format!("{path}: missing key {k:?} in {got}"));
                    };
                    if let Some(why) = check_match(e, x, &format!("{path}.{k}")) {
                        return Some(why);
                    }
                }
                None
            }
            "$includes" => {
                let (Some(g), Some(a)) = (got.as_array(), arg.as_array()) else {
                    return fail("expected an array".into());
                };
                a.iter()
                    .find(|e| g.iter().all(|x| check_match(e, x, path).is_some()))
                    .map(|e| format!("{path}: no element matches {e} in {got}"))
            }
            "$unordered" => {
                let (Some(g), Some(a)) = (got.as_array(), arg.as_array()) else {
                    return fail("expected an array".into());
                };
                if g.len() != a.len() {
                    return fail(format!("expected {} elements in any order", a.len()));
                }
                let mut left: Vec<&Value> = g.iter().collect();
                for e in a {
                    match left.iter().position(|x| check_match(e, x, path).is_none()) {
                        Some(i) => {
                            left.remove(i);
                        }
                        None => return Some(format!("{path}: no element matches {e} in {got}")),
                    }
                }
                None
            }
            "$each" => {
                let Some(g) = got.as_array() else {
                    return fail("expected an array".into());
                };
                g.iter()
                    .enumerate()
                    .find_map(|(i, x)| check_match(arg, x, &format!("{path}[{i}]")))
            }
            "$desc_by" => {
                let field = arg.as_str().unwrap_or("");
                let vals: Option<Vec<f64>> = got.as_array().and_then(|g| {
                    g.iter()
                        .map(|x| x.get(field).and_then(Value::as_f64))
                        .collect()
                });
                match vals {
                    None => fail(format!("expected objects with a numeric {field}")),
                    Some(v) if v.windows(2).all(|w| w[0] >= w[1]) => None,
                    Some(v) => Some(format!(
                        "{path}: not sorted by {field}, highest first: {v:?}"
                    )),
                }
            }
            "$all" => arg
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|e| check_match(e, got, path)),
            other => Some(format!("{path}: unknown matcher {other}")),
        };
    }
    match (exp, got) {
        (Value::Object(e), Value::Object(g)) => {
            let (mut ek, mut gk): (Vec<_>, Vec<_>) = (e.keys().collect(), g.keys().collect());
            ek.sort();
            gk.sort();
            if ek != gk {
                return Some(format!("{path}: keys {gk:?} instead of {ek:?}"));
            }
            e.iter()
                .find_map(|(k, x)| check_match(x, &g[k], &format!("{path}.{k}")))
        }
        (Value::Array(e), Value::Array(g)) if e.len() == g.len() => e
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (x, y))| check_match(x, y, &format!("{path}[{i}]"))),
        (Value::Number(a), Value::Number(b)) if same_number(a, b) => None,
        (Value::Number(_), _) => Some(format!("{path}: expected {exp}, got {got}")),
        (a, b) if a == b && !a.is_object() && !a.is_array() => None,
        _ => Some(format!("{path}: expected {exp}, got {got}")),
    }
}

// ---------------------------------------------------------------- calls

fn arg(args: &[Value], i: usize) -> Result<&Value, Failure> {
    args.get(i)
        .ok_or_else(|| other(format!("argument {i} missing")))
}

fn s(args: &[Value], i: usize) -> Result<&str, Failure> {
    arg(args, i)?
        .as_str()
        .ok_or_else(|| other(format!("argument {i}: expected a string")))
}

fn n(args: &[Value], i: usize) -> Result<u32, Failure> {
    arg(args, i)?
        .as_u64()
        .map(|v| v as u32)
        .ok_or_else(|| other(format!("argument {i}: expected a non-negative integer")))
}

fn parse<T: serde::de::DeserializeOwned>(args: &[Value], i: usize) -> Result<T, Failure> {
    serde_json::from_value(arg(args, i)?.clone()).map_err(|e| other(format!("argument {i}: {e}")))
}

fn triple(v: &Value) -> Result<Triple, Failure> {
    match v {
        Value::Array(items) if (3..=6).contains(&items.len()) => {
            let mut f = items
                .iter()
                .map(|x| x.as_str().unwrap_or_default().to_string());
            let mut next = || f.next().unwrap_or_default();
            Ok(Triple {
                subject: next(),
                relation: next(),
                object: next(),
                subject_type: next(),
                object_type: next(),
                session_id: next(),
            })
        }
        _ => serde_json::from_value(v.clone()).map_err(|e| other(format!("triple: {e}"))),
    }
}

fn to_json(v: impl serde::Serialize) -> Result<Value, Failure> {
    serde_json::to_value(v).map_err(other)
}

/// Runs `call` (`service.method`, snake_case as in the file) through the typed API.
async fn call(host: &Host, call: &str, a: &[Value]) -> Result<Value, Failure> {
    let null = |_: ()| Value::Null;
    Ok(match call {
        "settings.get" => host.settings().get(s(a, 0)?).await?,
        "settings.set" => host.settings().set(s(a, 0)?, arg(a, 1)?).await.map(null)?,
        "settings.list" => json!(host.settings().list(s(a, 0)?).await?),
        "settings.get_core" => host.settings().get_core(s(a, 0)?).await?,
        "settings.set_core" => host
            .settings()
            .set_core(s(a, 0)?, arg(a, 1)?)
            .await
            .map(null)?,
        "settings.list_core" => json!(host.settings().list_core(s(a, 0)?).await?),
        "settings.get_plugin" => host.settings().get_plugin(s(a, 0)?, s(a, 1)?).await?,
        "settings.set_plugin" => host
            .settings()
            .set_plugin(s(a, 0)?, s(a, 1)?, arg(a, 2)?)
            .await
            .map(null)?,
        "settings.list_plugin" => json!(host.settings().list_plugin(s(a, 0)?, s(a, 1)?).await?),
        "settings.register_def" => host
            .settings()
            .register_def(parse::<ConfigDef>(a, 0)?)
            .await
            .map(null)?,
        "settings.defs" => to_json(host.settings().defs(s(a, 0)?).await?)?,
        "settings.dump" => host.settings().dump().await?,
        "settings.plugins" => json!(host.settings().plugins().await?),
        "memory.recall" => {
            let keywords: Vec<String> = parse(a, 0)?;
            let (entities, relations) = host.memory().recall(keywords, n(a, 1)?).await?;
            json!({"entities": to_json(entities)?, "relations": to_json(relations)?})
        }
        "memory.commit" => {
            let triples = arg(a, 0)?
                .as_array()
                .ok_or_else(|| other("argument 0: expected an array of triples"))?
                .iter()
                .map(triple)
                .collect::<Result<Vec<_>, _>>()?;
            json!(host.memory().commit(triples).await?)
        }
        "memory.introspect" => host.memory().introspect().await?,
        "memory.merge_entities" => json!(host.memory().merge_entities(s(a, 0)?, s(a, 1)?).await?),
        "memory.purge" => {
            let criteria: HashMap<String, String> = parse(a, 0)?;
            json!(host.memory().purge(criteria, s(a, 1)?).await?)
        }
        "text_memory.append" => host
            .text_memory()
            .append(parse::<TextEvent>(a, 0)?)
            .await
            .map(null)?,
        "doc_memory.query" => to_json(host.doc_memory().query(s(a, 0)?, n(a, 1)?).await?)?,
        "doc_memory.insert" => host
            .doc_memory()
            .insert(parse::<Doc>(a, 0)?)
            .await
            .map(null)?,
        "doc_memory.remove" => host.doc_memory().remove(s(a, 0)?).await.map(null)?,
        "doc_memory.stats" => host.doc_memory().stats().await?,
        "knowledge.search" => to_json(host.knowledge().search(s(a, 0)?, n(a, 1)?).await?)?,
        "knowledge.add" => host.knowledge().add(s(a, 0)?, s(a, 1)?).await.map(null)?,
        "knowledge.list" => json!(host.knowledge().list().await?),
        "mcp.request" => host.mcp().request(s(a, 0)?, s(a, 1)?, arg(a, 2)?).await?,
        "mcp.resources" => json!(host.mcp().resources(s(a, 0)?).await?),
        "mcp.resource_templates" => json!(host.mcp().resource_templates(s(a, 0)?).await?),
        "mcp.read_resource" => json!(host.mcp().read_resource(s(a, 0)?, s(a, 1)?).await?),
        "mcp.prompts" => json!(host.mcp().prompts(s(a, 0)?).await?),
        "mcp.get_prompt" => {
            host.mcp()
                .get_prompt(s(a, 0)?, s(a, 1)?, arg(a, 2)?)
                .await?
        }
        "llm.list_sources" => json!(host.llm().list_sources().await?),
        "llm.set_source" => host.llm().set_source(s(a, 0)?).await.map(null)?,
        "llm.current_source" => json!(host.llm().current_source().await?),
        "input.inject_text" => host.inject_text(s(a, 0)?, s(a, 1)?).await.map(null)?,
        "input.inject_text_no_memory" => host
            .inject_text_no_memory(s(a, 0)?, s(a, 1)?)
            .await
            .map(null)?,
        "input.inject_interrupt_text" => host
            .inject_interrupt_text(s(a, 0)?, s(a, 1)?)
            .await
            .map(null)?,
        unknown => return Err(other(format!("no such call {unknown}"))),
    })
}

fn failure_json(f: &Failure) -> Value {
    match f {
        Failure::Host(e) => json!({"error": e.code_name(), "message": e.message()}),
        Failure::Other(e) => json!({"exception": e}),
    }
}

/// A failure record for step `step`, or `None` when it passed.
fn check(
    step: usize,
    case: &Value,
    env: &mut HashMap<String, Value>,
    outcome: Result<Value, Failure>,
) -> Option<Value> {
    let args = subst(&case["args"], env).unwrap_or(Value::Null);
    let record = |expected: Value, got: Value| {
        json!({"step": step, "note": case.get("note").cloned().unwrap_or(json!("")),
               "call": case["call"], "args": args, "expected": expected, "got": got})
    };
    if let Some(want) = case.get("error") {
        let want = subst(want, env).unwrap_or_else(|e| json!(e));
        return match outcome {
            Ok(v) => Some(record(json!({"error": want}), v)),
            Err(Failure::Host(e))
                if json!(e.code_name()) == want["code"]
                    && want["contains"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|c| e.message().contains(c.as_str().unwrap_or("\u{0}"))) =>
            {
                None
            }
            Err(f) => Some(record(json!({"error": want}), failure_json(&f))),
        };
    }
    let expected = match subst(&case["expect"], env) {
        Ok(e) => e,
        Err(e) => return Some(record(json!(e), Value::Null)),
    };
    match outcome {
        Err(f) => Some(record(expected, failure_json(&f))),
        Ok(got) => match check_match(&expected, &got, "$") {
            Some(why) => {
                let mut r = record(expected, got);
                r["why"] = json!(why);
                Some(r)
            }
            None => {
                if let Some(name) = case.get("save").and_then(Value::as_str) {
                    env.insert(name.into(), got);
                }
                None
            }
        },
    }
}

async fn run_section(host: &Host, file: &str, section: &str, me: &str, peer: &str) -> Value {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return json!({"error": format!("{file}: {e}")}),
    };
    let cases: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let cases = cases[section].as_array().cloned().unwrap_or_default();
    let mut env: HashMap<String, Value> = HashMap::from([
        ("self".to_string(), json!(me)),
        ("other".to_string(), json!(peer)),
        ("lang".to_string(), json!(LANG)),
    ]);
    let mut failed = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = case["call"].as_str().unwrap_or_default();
        let outcome = match subst(&case["args"], &env) {
            Ok(Value::Array(args)) => call(host, name, &args).await,
            Ok(_) => Err(other("args must be an array")),
            Err(e) => Err(other(e)),
        };
        if let Some(f) = check(i + 1, case, &mut env, outcome) {
            failed.push(f);
        }
    }
    json!({"lang": LANG, "section": section, "total": cases.len(),
           "passed": cases.len() - failed.len(), "failed": failed})
}

struct HostCases {
    name: String,
    role: String,
    peer: String,
    file: String,
}

#[async_trait]
impl Plugin for HostCases {
    fn metadata(&self) -> PluginMetadata {
        PluginMetadata {
            name: self.name.clone(),
            version: "1.0.0".into(),
            author: "hearth".into(),
            description: "Runs tests/host_cases.json through the typed host APIs".into(),
        }
    }

    async fn start(&mut self, reg: &mut Registrar) -> Result<(), BoxError> {
        let host = reg
            .host()
            .cloned()
            .ok_or("no host services outside serve")?;
        if self.role == "other" {
            let def = ConfigDef {
                key: "greeting".into(),
                r#type: "string".into(),
                display_name: "Greeting".into(),
                default: Some(json!("hello")),
                ..ConfigDef::default()
            };
            host.settings().register_def(def).await?;
            reg.register_tool(
                format!("{}_ping", self.name),
                ToolDef {
                    description: "Answers pong.".into(),
                    parameters: json!({"type": "object"}),
                    ..Default::default()
                },
                |_| async { Ok::<_, String>(json!("pong")) },
            )?;
            return Ok(());
        }
        let section = if self.role == "nocap" {
            "refusals"
        } else {
            "cases"
        };
        let (me, peer, file) = (self.name.clone(), self.peer.clone(), self.file.clone());
        reg.register_tool(
            format!("{}_run", self.name),
            ToolDef {
                description: format!("Runs the host-service {section}."),
                parameters: json!({"type": "object"}),
                ..Default::default()
            },
            move |_| {
                let (host, me, peer, file) = (host.clone(), me.clone(), peer.clone(), file.clone());
                async move { Ok::<_, String>(run_section(&host, &file, section, &me, &peer).await) }
            },
        )?;
        Ok(())
    }
}

fn main() {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    hearth_plugin::serve(HostCases {
        name: env("HEARTH_PLUGIN").unwrap_or_else(|| "host_cases_rust".into()),
        role: env("HOST_CASES_ROLE").unwrap_or_else(|| "runner".into()),
        peer: env("HOST_CASES_OTHER").unwrap_or_default(),
        file: env("HOST_CASES_FILE").unwrap_or_else(|| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/host_cases.json").into()
        }),
    })
}
