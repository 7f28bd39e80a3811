//! The plugin author's loop (issue 13, supervisor part), with real plugin processes:
//! - a reload (`--watch` or `hearth plugins reload`) starts the new version beside the
//!   serving one: a broken edit is reported at once (exit status and the stderr line
//!   that says why) while the old version keeps serving with its tools; a fix switches;
//!   reloads of different plugins never wait for each other, and a newer change
//!   supersedes a reload still in progress;
//! - a refused `hearth plugins load` leaves nothing behind, and says what is wrong;
//! - `hearth plugins attach-token`: a process started by hand attaches in place of a
//!   loaded plugin's own process (which comes back when it leaves), or as an ad-hoc
//!   plugin; tokens are one-time and expire.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hearth_proto::v1::plugin_host_client::PluginHostClient;
use hearth_proto::v1::{plugin_message, Hello, PluginMessage, PluginState};
use serde_json::{json, Value};

use crate::harness::{alive, not_shared, python, repo, wait_gone, Broker};

const LONG: Duration = Duration::from_secs(30);
/// Well below the 60 s startup timeout of the plugins here: an answer within it did
/// not wait for a timeout.
const SOON: Duration = Duration::from_secs(20);

/// A Python plugin whose tool `<name>_version` answers `version`.
fn versioned(name: &str, version: &str) -> String {
    format!(
        r#"from hearth_plugin import Plugin


class Versioned(Plugin):
    def name(self):
        return "{name}"

    def start(self, sdk):
        sdk.register_tool("{name}_version", {{"description": "Which version serves.",
                                              "parameters": {{"type": "object"}}}}, self.version)

    async def version(self, args):
        return "{version}"
"#
    )
}

/// A syntax error.
const BROKEN: &str = "from hearth_plugin import Plugin\n\ndef broken(:\n    pass\n";

/// A version that never registers: it sleeps (for longer than the test) first.
fn hanging(name: &str) -> String {
    format!(
        "import time\nprint(\"{name}: hanging before it registers\", flush=True)\ntime.sleep(120)\n{}",
        versioned(name, "never")
    )
}

/// Writes plugin folder `root/name` (plugin.json, main.py = `source`); a 60 s startup
/// timeout, so that an answer well before it did not wait for it.
fn plugin_folder(root: &Path, name: &str, source: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    not_shared(&dir);
    let manifest = json!({"name": name, "runtime": "python", "entry": "main.py",
        "startup_timeout_s": 60, "env": {"PYTHONDONTWRITEBYTECODE": "1"}});
    std::fs::write(dir.join("plugin.json"), manifest.to_string()).unwrap();
    std::fs::write(dir.join("main.py"), source).unwrap();
    dir
}

/// What `<name>_version` answers (or the error).
async fn version(b: &mut Broker, name: &str) -> String {
    match b.call(&format!("{name}_version"), json!({})).await {
        Ok(r) if r.success => r.content,
        Ok(r) => format!("tool error: {}", r.error),
        Err(e) => format!("status {:?}: {}", e.code(), e.message()),
    }
}

/// Polls `<name>_version` until it answers `want` (within `within`).
async fn wait_version(b: &mut Broker, name: &str, want: &str, within: Duration) {
    let started = Instant::now();
    loop {
        let got = version(b, name).await;
        if got == want {
            return;
        }
        if started.elapsed() > within {
            panic!(
                "{name}_version answers {got:?}, not {want:?}, after {within:?}\nbroker log:\n{}",
                b.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn load(b: &Broker, dir: &Path) {
    let (code, out, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "load {}: {out}{err}\n{}", dir.display(), b.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_edit_under_watch_keeps_the_old_version_serving() {
    let mut b = Broker::spawn(vec![], &["--watch"]).await;
    b.wait_log("--watch: watching", LONG).await;
    let root = b.root.path().join("plugins");
    let wa = plugin_folder(&root, "wa", &versioned("wa", "a1"));
    let wb = plugin_folder(&root, "wb", &versioned("wb", "b1"));
    // The watcher's events of these first writes are past before the plugins load.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    load(&b, &wa);
    load(&b, &wb);
    assert_eq!(version(&mut b, "wa").await, "a1");
    let before = b.plugin("wa").await;

    // A syntax error: reported as soon as the new process exits, naming its exit
    // status and the line that says why; the old process keeps serving its tools.
    std::fs::write(wa.join("main.py"), BROKEN).unwrap();
    let p = b
        .wait_for("wa", SOON, "a reported reload failure", |p| {
            p.reason.contains("reload failed")
        })
        .await;
    assert!(
        p.reason.contains("exit status 2")
            && p.reason.contains("SyntaxError")
            && p.reason.contains("previous version still serves"),
        "{}",
        p.reason
    );
    assert_eq!(p.state, PluginState::Ready as i32, "{p:?}");
    assert_eq!(p.pid, before.pid);
    assert_eq!(p.tools, vec!["wa_version".to_string()]);
    assert_eq!(version(&mut b, "wa").await, "a1");
    let log = b.wait_log("--watch: plugin wa: reload failed", LONG).await;
    assert!(log.contains("SyntaxError"), "{log}");
    let (code, out, _) = b.cli(&["plugins", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("└ reload failed"), "{out}");

    // The fix: the new version serves, the old process is gone, the reason too.
    std::fs::write(wa.join("main.py"), versioned("wa", "a2")).unwrap();
    wait_version(&mut b, "wa", "a2", SOON).await;
    let p = b.plugin("wa").await;
    assert!(p.reason.is_empty(), "{}", p.reason);
    assert_ne!(p.pid, before.pid);
    assert!(wait_gone(&[before.pid], LONG).is_empty());

    // A version that hangs before registering holds its own reload (up to its 60 s
    // startup timeout), not another plugin's: wb's edit is served meanwhile.
    std::fs::write(wa.join("main.py"), hanging("wa")).unwrap();
    b.wait_log("wa: hanging before it registers", LONG).await;
    std::fs::write(wb.join("main.py"), versioned("wb", "b2")).unwrap();
    wait_version(&mut b, "wb", "b2", SOON).await;
    assert_eq!(version(&mut b, "wa").await, "a2");
    // A newer change supersedes the reload in progress at once.
    std::fs::write(wa.join("main.py"), versioned("wa", "a3")).unwrap();
    wait_version(&mut b, "wa", "a3", SOON).await;
    let log = b.log();
    assert!(log.contains("a newer reload superseded this one"), "{log}");
    assert!(!log.contains("not ready"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_answers_a_broken_version_at_once_and_keeps_the_old_one() {
    let mut b = Broker::spawn(vec![], &[]).await;
    let dir = plugin_folder(&b.root.path().join("extra"), "rl", &versioned("rl", "1"));
    load(&b, &dir);
    let before = b.plugin("rl").await;

    std::fs::write(dir.join("main.py"), BROKEN).unwrap();
    let (code, out, err) = b.cli(&["plugins", "reload", "rl"]);
    assert_eq!(code, 5, "plugin error: {out}");
    for needed in [
        "plugin rl: reload failed: the new version",
        "exit status 2 before it registered",
        "SyntaxError",
        "(main.py, line 3)",
        "the previous version still serves",
    ] {
        assert!(err.contains(needed), "`{needed}` not in: {err}");
    }
    assert_eq!(version(&mut b, "rl").await, "1");
    let p = b.plugin("rl").await;
    assert_eq!((p.state, p.pid), (PluginState::Ready as i32, before.pid));
    assert!(p.reason.contains("SyntaxError"), "{}", p.reason);

    std::fs::write(dir.join("main.py"), versioned("rl", "22")).unwrap();
    let (code, out, err) = b.cli(&["plugins", "reload", "rl"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("rl ready"), "{out}");
    assert_eq!(version(&mut b, "rl").await, "22");
    let p = b.plugin("rl").await;
    assert!(p.reason.is_empty() && p.pid != before.pid, "{p:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_load_leaves_nothing_behind() {
    let mut b = Broker::start(vec![crate::harness::py_echo("py", json!({}))]).await;
    let rows = |plugins: &[hearth_proto::v1::PluginStatus], name: &str| {
        plugins.iter().filter(|p| p.name == name).count()
    };

    // A second folder with a name in use: an error, and no second row.
    let twin = b.write_plugin(&crate::harness::py_echo("py", json!({})));
    let (code, _, err) = b.cli(&["plugins", "load", twin.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("plugin name `py` is already used by"), "{err}");
    let plugins = b.plugins().await;
    assert_eq!(rows(&plugins, "py"), 1, "{plugins:?}");
    assert_eq!(plugins[0].state, PluginState::Ready as i32);
    // Unload stops the real one and leaves no row.
    let pid = plugins[0].pid;
    let (code, _, err) = b.cli(&["plugins", "unload", "py"]);
    assert_eq!(code, 0, "{err}");
    assert!(wait_gone(&[pid], LONG).is_empty());
    assert_eq!(rows(&b.plugins().await, "py"), 0);

    // What is wrong with a path is said plainly.
    let (code, _, err) = b.cli(&["plugins", "load", "/no/such/dir"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("/no/such/dir: the directory does not exist"),
        "{err}"
    );
    let empty = b.root.path().join("extra/empty");
    std::fs::create_dir_all(&empty).unwrap();
    not_shared(&empty);
    let (code, _, err) = b.cli(&["plugins", "load", empty.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("not a plugin directory") && err.contains("(no plugin.json"),
        "{err}"
    );

    // A plugin whose first process fails is not left behind either: the error says why.
    let broken = plugin_folder(&b.root.path().join("extra"), "broken", BROKEN);
    let (code, _, err) = b.cli(&["plugins", "load", broken.to_str().unwrap()]);
    assert_eq!(code, 5, "plugin error");
    assert!(
        err.contains("not loaded") && err.contains("exit status 2") && err.contains("SyntaxError"),
        "{err}"
    );
    assert!(b.plugins().await.is_empty(), "{:?}", b.plugins().await);
    // Fixed, it loads.
    std::fs::write(broken.join("main.py"), versioned("broken", "ok")).unwrap();
    load(&b, &broken);
    assert_eq!(version(&mut b, "broken").await, "ok");
}

/// `hearth plugins attach-token NAME` (shell form): the variables it exports.
fn attach_env(b: &Broker, name: &str) -> HashMap<String, String> {
    let (code, out, err) = b.cli(&["plugins", "attach-token", name]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("unset HEARTH_TOKEN_FD"), "{out}");
    let env: HashMap<String, String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect();
    for key in ["HEARTH_ADDR", "HEARTH_TOKEN", "HEARTH_PLUGIN"] {
        assert!(env.contains_key(key), "{key} missing: {out}");
    }
    assert_eq!(env["HEARTH_PLUGIN"], name);
    env
}

/// Starts `python -m hearth_plugin run tests/plugins/<file>` by hand, with `env`.
fn by_hand(b: &Broker, file: &str, env: &HashMap<String, String>) -> Child {
    let log = std::fs::File::create(b.root.path().join(format!("by-hand-{file}.log"))).unwrap();
    Command::new(python())
        .args(["-m", "hearth_plugin", "run"])
        .arg(repo().join("tests/plugins").join(file))
        .env_remove("HEARTH_TOKEN_FD")
        .envs(env)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// A raw `PluginHost.Attach` with `token`: its error.
async fn attach_refused(b: &Broker, token: &str) -> tonic::Status {
    let mut client = PluginHostClient::new(crate::harness::socket_channel(&b.data_dir()).await);
    let hello = PluginMessage {
        msg: Some(plugin_message::Msg::Hello(Hello {
            protocol_version: hearth_proto::PROTOCOL_VERSION.into(),
            sdk: "test".into(),
            ..Default::default()
        })),
    };
    let mut req = tonic::Request::new(tokio_stream::iter(vec![hello]));
    req.metadata_mut()
        .insert(hearth_proto::TOKEN_METADATA, token.parse().unwrap());
    match client.attach(req).await {
        Ok(_) => panic!("attach with {token} was accepted"),
        Err(e) => e,
    }
}

/// `tests/plugins/host_probe.py` as `name` makes host call `call(args…)`.
async fn host_call(b: &mut Broker, name: &str, call: &str, args: Value) -> Value {
    let r = b
        .call(&format!("{name}_host"), json!({"call": call, "args": args}))
        .await
        .unwrap_or_else(|e| panic!("{name}_host: {e:?}\n{}", b.log()));
    assert!(r.success, "{r:?}");
    let text = if r.data_json.is_empty() {
        &r.content
    } else {
        &r.data_json
    };
    serde_json::from_str(text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_started_by_hand_attaches_in_place_of_the_supervised_one() {
    let probe = crate::harness::PluginDir {
        dir: "hp".into(),
        manifest: json!({"name": "hp", "runtime": "python",
            "entry": repo().join("tests/plugins/host_probe.py"), "capabilities": ["settings_core"]}),
    };
    let mut b = Broker::start(vec![probe]).await;
    let own = b.plugin("hp").await;

    let env = attach_env(&b, "hp");
    let mut child = by_hand(&b, "host_probe.py", &env);
    let pid = child.id();
    // It registers, takes over (pid from the socket's peer credentials), and the
    // supervised process drains and stops.
    let p = b
        .wait_for("hp", LONG, "the attached process serving", |p| {
            p.attached && p.state == PluginState::Ready as i32
        })
        .await;
    assert_eq!(p.pid, pid, "{p:?}");
    assert_eq!(p.sandbox, "off (attached)");
    assert!(
        wait_gone(&[own.pid], LONG).is_empty(),
        "own process lives on"
    );
    let (code, out, _) = b.cli(&["plugins", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("hp") && l.contains("attached") && l.contains(&pid.to_string())),
        "{out}"
    );
    // It serves hp's tools with the manifest's capabilities.
    let got = host_call(&mut b, "hp", "settings.list_core", json!(["llm."])).await;
    assert!(got.get("ok").is_some(), "{got}");
    // The broker does not restart or reload what it did not start.
    let (code, _, err) = b.cli(&["plugins", "restart", "hp"]);
    assert_eq!(code, 5, "PluginError::Failed");
    assert!(err.contains("attached by hand"), "{err}");

    // Its token was for one session.
    let err = attach_refused(&b, &env["HEARTH_TOKEN"]).await;
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("used already"), "{}", err.message());

    // When it goes, the supervisor starts the plugin's own process again.
    child.kill().unwrap();
    child.wait().unwrap();
    let back = b
        .wait_for("hp", LONG, "its own process back", |p| {
            !p.attached && p.state == PluginState::Ready as i32 && p.pid != pid
        })
        .await;
    assert!(alive(back.pid));
    assert_ne!(back.sandbox, "off (attached)");
    let got = host_call(&mut b, "hp", "settings.list_core", json!(["llm."])).await;
    assert!(got.get("ok").is_some(), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_attached_by_hand_may_call_host_services_in_its_start() {
    let plugin = crate::harness::PluginDir {
        dir: "sh".into(),
        manifest: json!({"name": "sh", "runtime": "python",
            "entry": repo().join("tests/plugins/start_host.py")}),
    };
    let mut b = Broker::start(vec![plugin]).await;
    let r = b.call("sh_greeting", json!({})).await.unwrap();
    assert_eq!(r.content, "start() read 'hello'", "{r:?}");
    let (code, _, err) = b.cli(&[
        "settings",
        "set",
        "--plugin",
        "sh",
        "greeting",
        "\"hi there\"",
    ]);
    assert_eq!(code, 0, "{err}");

    // Host calls in start() come before the session opens: the attach token serves them.
    let env = attach_env(&b, "sh");
    let mut child = by_hand(&b, "start_host.py", &env);
    let pid = child.id();
    b.wait_for("sh", LONG, "the attached process serving", |p| {
        p.attached && p.state == PluginState::Ready as i32 && p.pid == pid
    })
    .await;
    let r = b.call("sh_greeting", json!({})).await.unwrap();
    assert_eq!(r.content, "start() read 'hi there'", "{r:?}\n{}", b.log());
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_token_for_an_unknown_name_makes_an_ad_hoc_plugin() {
    let mut b = Broker::start(vec![]).await;
    let (code, out, err) = b.cli(&["plugins", "attach-token", "adhoc", "--json"]);
    assert_eq!(code, 0, "{err}");
    let grant: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(grant["loaded"], json!(false));
    assert!(
        grant["expires_in_ms"].as_u64().unwrap() >= 60_000,
        "{grant}"
    );
    let env: HashMap<String, String> = grant["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    let mut child = by_hand(&b, "host_probe.py", &env);
    let p = b
        .wait_for("adhoc", LONG, "the ad-hoc plugin ready", |p| {
            p.attached && p.state == PluginState::Ready as i32
        })
        .await;
    assert_eq!((p.pid, p.runtime.as_str()), (child.id(), "-"));
    // Default capabilities: no core settings.
    let got = host_call(&mut b, "adhoc", "settings.list_core", json!(["llm."])).await;
    assert_eq!(got["error"], "PERMISSION_DENIED", "{got}");

    // Gone with its process, tools and all.
    child.kill().unwrap();
    child.wait().unwrap();
    let started = Instant::now();
    while b.plugins().await.iter().any(|p| p.name == "adhoc") {
        assert!(started.elapsed() < LONG, "adhoc still listed\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let err = b.call("adhoc_host", json!({})).await.unwrap_err();
    assert!(err.message().contains("unknown tool"), "{}", err.message());

    // Tokens: not a name, expired, made up.
    let (code, _, err) = b.cli(&["plugins", "attach-token", "../x"]);
    assert_eq!(code, 1);
    assert!(err.contains("is not a plugin name"), "{err}");
    let (code, out, err) = b.cli(&["plugins", "attach-token", "late", "--json", "--ttl-s", "1"]);
    assert_eq!(code, 0, "{err}");
    let token = serde_json::from_str::<Value>(&out).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let err = attach_refused(&b, &token).await;
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("expired"), "{}", err.message());
    let err = attach_refused(&b, "0123456789abcdef").await;
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert!(b.plugins().await.is_empty());
}
