//! Issue 11, items 5 and 7, with real plugin processes (`tests/plugins/host_probe.py`,
//! one host-service call per tool call):
//! - secrets stay secret: another plugin's `secret` keys and core keys named like
//!   credentials (an LLM API key) read as `"••••••"` and cannot be overwritten without
//!   `settings_secrets`; core settings need `settings_core`; `hearth settings` masks
//!   unless `--show-secrets`;
//! - input on behalf of others: injected text speaks as the plugin (`plugin:<name>`);
//!   speaking as a user needs `input_as_user`, the user's cooldowns are not charged by a
//!   plugin without it, and history records which plugin injected a message.

use hearth_broker::storage::{ConversationKey, Conversations, Db, HistoryBudget};
use hearth_scripted::{Script, ScriptedLlm};
use serde_json::{json, Value};
use std::time::Duration;

use crate::harness::{final_of, repo, Broker, PluginDir};

const MASK: &str = "••••••";
const LONG: Duration = Duration::from_secs(30);

/// `tests/plugins/host_probe.py` named `name` with `capabilities` (None: the default).
fn probe(name: &str, capabilities: Option<&[&str]>) -> PluginDir {
    let mut manifest = json!({"name": name, "runtime": "python",
        "entry": repo().join("tests/plugins/host_probe.py")});
    if let Some(caps) = capabilities {
        manifest["capabilities"] = json!(caps);
    }
    PluginDir {
        dir: name.into(),
        manifest,
    }
}

/// `plugin` makes the host call `call(args…)` (with `kwargs`); its answer,
/// `{"ok": value}` or `{"error": code, "message": text}`.
async fn host(b: &mut Broker, plugin: &str, call: &str, args: Value, kwargs: Value) -> Value {
    let tool = format!("{plugin}_host");
    let r = b
        .call(&tool, json!({"call": call, "args": args, "kwargs": kwargs}))
        .await
        .unwrap_or_else(|e| panic!("{tool} {call}: {e:?}\nbroker log:\n{}", b.log()));
    assert!(r.success, "{tool} {call}: {}\n{}", r.error, b.log());
    let text = if r.data_json.is_empty() {
        &r.content
    } else {
        &r.data_json
    };
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {text}"))
}

/// What a host call should answer.
enum Want {
    /// This value.
    Is(Value),
    /// PERMISSION_DENIED naming the method and the capability.
    Denied(&'static str, &'static str),
}
use Want::{Denied, Is};

/// Runs each `(plugin, call, args, want)` in order, asserting its answer.
async fn run(b: &mut Broker, steps: &[(&str, &str, Value, Want)]) {
    for (plugin, call, args, want) in steps {
        match want {
            Is(value) => {
                let got = host(b, plugin, call, args.clone(), json!({})).await;
                assert_eq!(got, json!({ "ok": value }), "{plugin}: {call}{args}");
            }
            Denied(method, capability) => {
                denied(b, plugin, call, args.clone(), json!({}), method, capability).await
            }
        }
    }
}

/// Asserts `plugin`'s `call(args…)` is PERMISSION_DENIED naming `method` and
/// `capability`.
async fn denied(
    b: &mut Broker,
    plugin: &str,
    call: &str,
    args: Value,
    kwargs: Value,
    method: &str,
    capability: &str,
) {
    let got = host(b, plugin, call, args.clone(), kwargs).await;
    let message = got["message"].as_str().unwrap_or_default();
    assert!(
        got["error"] == "PERMISSION_DENIED"
            && message.contains(method)
            && message.contains(&format!("`{capability}`")),
        "{plugin}: {call}{args}: expected PERMISSION_DENIED naming {method} and `{capability}`, got {got}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_of_other_plugins_and_of_the_core_are_masked_without_settings_secrets() {
    let mut b = Broker::start(vec![
        probe("owner", None),
        probe("plain", None),
        probe("cross", Some(&["settings_cross", "settings_core"])),
        probe(
            "keeper",
            Some(&["settings_cross", "settings_core", "settings_secrets"]),
        ),
    ])
    .await;

    // The owner defines a secret key and reads it in clear: it is its own.
    let def =
        json!({"key": "api_key", "type": "string", "display_name": "API key", "secret": true});
    run(
        &mut b,
        &[
            (
                "owner",
                "settings.register_def",
                json!([def]),
                Is(json!(null)),
            ),
            (
                "owner",
                "settings.set",
                json!(["api_key", "sk-owner-1"]),
                Is(json!(null)),
            ),
            (
                "owner",
                "settings.set",
                json!(["greeting", "hi"]),
                Is(json!(null)),
            ),
            (
                "owner",
                "settings.get",
                json!(["api_key"]),
                Is(json!("sk-owner-1")),
            ),
        ],
    )
    .await;

    // settings_cross without settings_secrets: masked, and not overwritable.
    run(
        &mut b,
        &[
            (
                "cross",
                "settings.get_plugin",
                json!(["owner", "api_key"]),
                Is(json!(MASK)),
            ),
            (
                "cross",
                "settings.get_plugin",
                json!(["owner", "greeting"]),
                Is(json!("hi")),
            ),
            (
                "cross",
                "settings.set_plugin",
                json!(["owner", "api_key", "sk-attacker"]),
                Denied("Settings.SetPlugin", "settings_secrets"),
            ),
            (
                "cross",
                "settings.set_plugin",
                json!(["owner", "greeting", "yo"]),
                Is(json!(null)),
            ),
            (
                "cross",
                "settings.list_plugin",
                json!(["owner", ""]),
                Is(json!(["api_key", "greeting"])),
            ),
        ],
    )
    .await;
    let dump = host(&mut b, "cross", "settings.dump", json!([]), json!({})).await;
    assert_eq!(
        dump["ok"]["plugins"]["owner"]["api_key"],
        json!(MASK),
        "{dump}"
    );
    run(
        &mut b,
        &[(
            "owner",
            "settings.get",
            json!(["api_key"]),
            Is(json!("sk-owner-1")),
        )],
    )
    .await;

    // With settings_secrets: in clear, and overwritable; Dump still masks.
    run(
        &mut b,
        &[
            (
                "keeper",
                "settings.get_plugin",
                json!(["owner", "api_key"]),
                Is(json!("sk-owner-1")),
            ),
            (
                "keeper",
                "settings.set_plugin",
                json!(["owner", "api_key", "sk-owner-2"]),
                Is(json!(null)),
            ),
            (
                "owner",
                "settings.get",
                json!(["api_key"]),
                Is(json!("sk-owner-2")),
            ),
        ],
    )
    .await;
    let dump = host(&mut b, "keeper", "settings.dump", json!([]), json!({})).await;
    assert_eq!(
        dump["ok"]["plugins"]["owner"]["api_key"],
        json!(MASK),
        "{dump}"
    );

    // Core settings: an LLM API key set by the operator is secret by its name, a key
    // set with `--secret` by its def.
    for args in [
        &["settings", "set", "llm.openai.api_key", "sk-core-1"][..],
        &["settings", "set", "llm.openai.model", "gpt-4o-mini"],
        &["settings", "set", "core.admin_pin", "271828182", "--secret"],
    ] {
        let (code, out, err) = b.cli(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.starts_with("set "), "{out}");
    }
    // A default plugin (no settings_core) reads no core key at all.
    for (call, args, method) in [
        (
            "settings.get_core",
            json!(["llm.openai.model"]),
            "Settings.GetCore",
        ),
        (
            "settings.get_core",
            json!(["llm.openai.api_key"]),
            "Settings.GetCore",
        ),
        ("settings.list_core", json!(["llm."]), "Settings.ListCore"),
        (
            "settings.set_core",
            json!(["llm.openai.model", "x"]),
            "Settings.SetCore",
        ),
    ] {
        denied(
            &mut b,
            "plain",
            call,
            args,
            json!({}),
            method,
            "settings_core",
        )
        .await;
    }
    // settings_core: plain keys in clear, secrets masked and not overwritable.
    run(
        &mut b,
        &[
            (
                "cross",
                "settings.get_core",
                json!(["llm.openai.model"]),
                Is(json!("gpt-4o-mini")),
            ),
            (
                "cross",
                "settings.get_core",
                json!(["llm.openai.api_key"]),
                Is(json!(MASK)),
            ),
            (
                "cross",
                "settings.get_core",
                json!(["core.admin_pin"]),
                Is(json!(MASK)),
            ),
            (
                "cross",
                "settings.list_core",
                json!(["llm.openai."]),
                Is(json!(["llm.openai.api_key", "llm.openai.model"])),
            ),
            (
                "cross",
                "settings.set_core",
                json!(["llm.openai.api_key", "sk-attacker"]),
                Denied("Settings.SetCore", "settings_secrets"),
            ),
            // A credential-named key is secret before it exists, too.
            (
                "cross",
                "settings.set_core",
                json!(["llm.other.api_key", "sk-planted"]),
                Denied("Settings.SetCore", "settings_secrets"),
            ),
            (
                "cross",
                "settings.set_core",
                json!(["llm.openai.model", "gpt-4o"]),
                Is(json!(null)),
            ),
        ],
    )
    .await;
    let dump = host(&mut b, "cross", "settings.dump", json!([]), json!({})).await;
    assert_eq!(
        dump["ok"]["core"]["llm.openai.api_key"],
        json!(MASK),
        "{dump}"
    );
    assert_eq!(dump["ok"]["core"]["core.admin_pin"], json!(MASK), "{dump}");
    run(
        &mut b,
        &[
            (
                "keeper",
                "settings.get_core",
                json!(["llm.openai.api_key"]),
                Is(json!("sk-core-1")),
            ),
            (
                "keeper",
                "settings.get_core",
                json!(["core.admin_pin"]),
                Is(json!(271828182)),
            ),
        ],
    )
    .await;

    // The CLI masks core and plugin secrets unless --show-secrets.
    let (code, out, err) = b.cli(&["settings", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("llm.openai.api_key = \"{MASK}\""))
            && out.contains(&format!("core.admin_pin = \"{MASK}\""))
            && out.contains("llm.openai.model = \"gpt-4o\"")
            && !out.contains("sk-core-1")
            && !out.contains("271828182"),
        "{out}"
    );
    let (code, out, _) = b.cli(&["settings", "list", "--json", "--show-secrets"]);
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["llm.openai.api_key"], json!("sk-core-1"), "{out}");
    assert_eq!(listed["core.admin_pin"], json!(271828182), "{out}");
    let (code, out, _) = b.cli(&["settings", "get", "llm.openai.api_key"]);
    assert_eq!((code, out.trim()), (0, format!("\"{MASK}\"").as_str()));
    let (code, out, _) = b.cli(&["settings", "get", "llm.openai.api_key", "--show-secrets"]);
    assert_eq!((code, out.trim()), (0, "\"sk-core-1\""));
    let (code, out, _) = b.cli(&["settings", "list", "--plugin", "owner", "--json"]);
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed, json!({"api_key": MASK, "greeting": "yo"}), "{out}");
    let (code, out, _) = b.cli(&[
        "settings",
        "list",
        "--plugin",
        "owner",
        "--json",
        "--show-secrets",
    ]);
    assert_eq!(code, 0);
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["api_key"], json!("sk-owner-2"), "{out}");

    // No secret value reached the broker's log.
    let log = b.log();
    for secret in [
        "sk-owner-",
        "sk-core-1",
        "sk-attacker",
        "sk-planted",
        "271828182",
    ] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
}

fn call_step(matches: &str, calls: Value) -> Value {
    json!({"match": matches, "after_tool": false, "tool_calls": calls})
}

fn answer_step(matches: &str, content: &str) -> Value {
    json!({"match": matches, "after_tool": true, "content": content})
}

/// The history of `key` in the running broker's `hearth.db`: `(role, content,
/// injected_by)` per message.
async fn history(b: &Broker, user: &str, channel: &str) -> Vec<(String, Value, Option<String>)> {
    let db = Db::open(&b.data_dir()).await.unwrap();
    let key = ConversationKey {
        user_id: user.into(),
        group_id: None,
        channel: channel.into(),
    };
    Conversations::new(db, HistoryBudget::default())
        .history_with_injectors::<Value>(&key)
        .await
        .unwrap()
        .into_iter()
        .map(|(m, by)| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].clone(),
                by,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_input_speaks_as_the_plugin_unless_it_holds_input_as_user() {
    let llm = ScriptedLlm::start(
        Script::from_value(json!({
            "steps": [call_step("cool", json!([{"name": "cool"}])), answer_step("cool", "{tool_results}")],
            "default": {"content": "seen {user}"},
        }))
        .unwrap(),
    );
    let cool = PluginDir {
        dir: "cool".into(),
        manifest: json!({"name": "cool", "runtime": "python",
            "entry": repo().join("tests/plugins/lz_policy.py"),
            "env": {"LZ_NAME": "cool", "LZ_POLICY": r#"{"cooldown": 3600}"#}}),
    };
    let mut b = Broker::with_llm(
        vec![
            cool,
            probe("plain", None),
            probe("speaker", Some(&["input", "input_as_user"])),
        ],
        &llm,
        &[],
    )
    .await;

    // A default plugin may not speak as alice, by `source` or `user_id`, with any of
    // the three methods; nothing reaches her conversation or her cooldowns.
    for (call, method) in [
        ("input.inject_text", "Input.InjectText"),
        ("input.inject_text_no_memory", "Input.InjectTextNoMemory"),
        ("input.inject_interrupt_text", "Input.InjectInterruptText"),
    ] {
        denied(
            &mut b,
            "plain",
            call,
            json!(["alice", "test", "cool, says alice"]),
            json!({}),
            method,
            "input_as_user",
        )
        .await;
        denied(
            &mut b,
            "plain",
            call,
            json!(["", "test", "cool, says alice"]),
            json!({"user_id": "alice"}),
            method,
            "input_as_user",
        )
        .await;
    }
    denied(
        &mut b,
        "plain",
        "input.inject_text",
        json!(["plugin:speaker", "test", "as another plugin"]),
        json!({}),
        "Input.InjectText",
        "input_as_user",
    )
    .await;

    // Plain injection works as before (the SDK sends the plugin's name as `source`)
    // and is the plugin's: its cooldowns, its conversation.
    let r = host(
        &mut b,
        "plain",
        "input.inject_text",
        json!(["", "test", "cool please"]),
        json!({}),
    )
    .await;
    assert_eq!(r, json!({"ok": null}));
    b.wait_log(
        "reply to injected input: cool ran #1 for plugin:plain",
        LONG,
    )
    .await;
    // alice's cooldown was not charged: her own call of `cool` runs.
    let f = final_of(&b.chat("cool now", "alice").await);
    assert_eq!(f.text, "cool ran #2 for alice: {}", "{f:?}\n{}", b.log());
    let own = history(&b, "plugin:plain", "test").await;
    assert_eq!(
        own.first().cloned(),
        Some(("user".into(), json!("cool please"), Some("plain".into()))),
        "{own:?}"
    );
    assert_eq!(
        own.last().cloned(),
        Some((
            "assistant".into(),
            json!("cool ran #1 for plugin:plain: {}"),
            None
        )),
        "{own:?}"
    );
    // Only the input is marked: the tool exchange and the reply are the agent's.
    assert!(own[1..].iter().all(|(_, _, by)| by.is_none()), "{own:?}");

    // With input_as_user the plugin speaks as alice, into her history, and the
    // history and TextMemory say which plugin it was.
    let r = host(
        &mut b,
        "speaker",
        "input.inject_text",
        json!(["alice", "test", "hello as alice"]),
        json!({}),
    )
    .await;
    assert_eq!(r, json!({"ok": null}));
    b.wait_log("reply to injected input: seen hello as alice", LONG)
        .await;
    let alice = history(&b, "alice", "test").await;
    assert_eq!(
        alice[alice.len() - 2..],
        [
            (
                "user".into(),
                json!("hello as alice"),
                Some("speaker".into())
            ),
            ("assistant".into(), json!("seen hello as alice"), None),
        ],
        "{alice:?}"
    );
    // Her own message typed through a client has no injector.
    assert_eq!(
        alice[0],
        ("user".into(), json!("cool now"), None),
        "{alice:?}"
    );
    let text = b.text_memory();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let injected = |content: &str| {
        lines
            .iter()
            .find(|l| l["content"] == content)
            .unwrap_or_else(|| panic!("no TextMemory line {content:?}:\n{text}"))
            .get("injected_by")
            .cloned()
    };
    assert_eq!(injected("hello as alice"), Some(json!("speaker")), "{text}");
    assert_eq!(injected("cool please"), Some(json!("plain")), "{text}");
    assert_eq!(injected("cool now"), None, "{text}");

    // The plugin's own name or `plugin:<name>` is the plugin, with or without
    // input_as_user.
    let r = host(
        &mut b,
        "speaker",
        "input.inject_text",
        json!(["speaker", "test", "me again"]),
        json!({"user_id": "plugin:speaker"}),
    )
    .await;
    assert_eq!(r, json!({"ok": null}));
    b.wait_log("reply to injected input: seen me again", LONG)
        .await;
    let own = history(&b, "plugin:speaker", "test").await;
    assert_eq!(
        own[0],
        ("user".into(), json!("me again"), Some("speaker".into()))
    );
}
