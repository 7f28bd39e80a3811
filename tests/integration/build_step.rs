//! The manifest's `build` step (issue 16, item 4) with a real broker:
//! - the entry is built at load when missing, not rebuilt when nothing changed, rebuilt
//!   after a source edit (restart, `--watch`) and on every explicit reload; the startup
//!   timeout does not include the build; output goes into the plugin's log;
//! - a failing build marks the plugin `failed` with the compiler's first error line, no
//!   restart loop; a reload's failing build keeps the previous version serving;
//! - a build past `build_timeout_s` is killed with its process group; while it runs the
//!   plugin is `building`;
//! - a real `go build` in its sandbox (compile error named; the Go SDK plugin from
//!   `hearth new go`, its own `go test` and `hearth dev`);
//! - bad `build` values are manifest errors naming the field.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hearth_proto::v1::PluginState;
use serde_json::{json, Value};

use crate::harness::{alive, not_shared, repo, rust_binary, Broker, PluginDir};

const LONG: Duration = Duration::from_secs(60);
const HEARTH: &str = env!("CARGO_BIN_EXE_hearth");

/// A build script: it takes a while (longer than the 1 s startup timeout the plugins
/// here get), says so on stdout and stderr, copies the Rust stress plugin to
/// `bin/plugin`, and counts its runs in `bin/builds.log` (`bin/` is output, not a source).
fn build_script() -> String {
    format!(
        "set -e\necho \"compiling $(date +%s%N)\"\necho 'a warning on stderr' >&2\nsleep 1.5\nmkdir -p bin\ncp '{}' bin/plugin.tmp\nmv bin/plugin.tmp bin/plugin\necho built >> bin/builds.log\n",
        rust_binary("examples/stress").display()
    )
}

/// The manifest of a plugin `name` built by `build`; the stress binary's folder is
/// readable (the build copies it).
fn manifest(name: &str, build: Value) -> Value {
    json!({"name": name, "runtime": "exec", "entry": "bin/plugin", "build": build,
        "startup_timeout_s": 1, "build_timeout_s": 30, "env": {"HEARTH_FAULT": ""},
        "sandbox": {"read": [rust_binary("examples/stress").parent().unwrap()]}})
}

/// Writes plugin folder `root/name` with `manifest` and `files`.
fn folder(root: &Path, name: &str, manifest: &Value, files: &[(&str, &str)]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    not_shared(&dir);
    std::fs::write(dir.join("plugin.json"), manifest.to_string()).unwrap();
    for (rel, text) in files {
        std::fs::write(dir.join(rel), text).unwrap();
    }
    dir
}

/// How many times the build script ran.
fn builds(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("bin/builds.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// `hearth plugins logs NAME --json`: every line.
fn logs(b: &Broker, name: &str) -> Vec<Value> {
    let (code, out, err) = b.cli(&["plugins", "logs", name, "--json"]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The texts of the broker's marker lines about builds.
fn build_markers(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l["stream"] == "broker" && l["text"].as_str().unwrap().contains(" build"))
        .map(|l| l["text"].as_str().unwrap().to_string())
        .collect()
}

/// Pids of the processes in process group `pgid`.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(pgid) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

async fn wait_until(
    b: &mut Broker,
    name: &str,
    what: &str,
    check: impl Fn(&hearth_proto::v1::PluginStatus) -> bool,
) -> hearth_proto::v1::PluginStatus {
    b.wait_for(name, LONG, what, check).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_runs_when_the_entry_is_missing_or_older_than_its_sources() {
    let mut b = Broker::spawn(vec![], &[]).await;
    let root = b.root.path().join("extra");
    let dir = folder(
        &root,
        "gb",
        &manifest("gb", json!(["sh", "build.sh"])),
        &[("build.sh", &build_script()), ("main.src", "v1")],
    );
    // Load: no entry yet, so it is built first; the 1.5 s build does not count against
    // the 1 s startup timeout.
    let (code, out, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}\n{}", b.log());
    assert_eq!(builds(&dir), 1);
    let first = b.plugin("gb").await;
    assert_eq!(first.state, PluginState::Ready as i32);
    assert!(
        first.startup_ms < 1000,
        "startup counts from after the build: {first:?}"
    );
    let r = b.call("gb_echo", json!({"x": 1})).await.unwrap();
    assert!(r.success, "{r:?}");

    // Its output is in the plugin's log, between markers, before the process's own.
    let lines = logs(&b, "gb");
    let markers = build_markers(&lines);
    assert_eq!(markers.len(), 2, "{markers:?}");
    assert!(
        markers[0].contains("build: sh build.sh (bin/plugin does not exist; sandbox "),
        "{markers:?}"
    );
    assert!(markers[1].contains("build succeeded in"), "{markers:?}");
    let texts: Vec<&str> = lines.iter().map(|l| l["text"].as_str().unwrap()).collect();
    let compiling = texts
        .iter()
        .position(|t| t.starts_with("compiling "))
        .unwrap();
    assert!(texts.contains(&"a warning on stderr"), "{texts:?}");
    let started = texts
        .iter()
        .position(|t| t.ends_with(&format!("{} started", first.pid)))
        .unwrap_or_else(|| panic!("{texts:?}"));
    assert!(compiling < started, "{texts:?}");

    // Nothing changed: a restart starts the same binary, no build.
    let (code, _, err) = b.cli(&["plugins", "restart", "gb"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(builds(&dir), 1);
    assert_ne!(b.plugin("gb").await.pid, first.pid);

    // A source edited after the build: the next start builds again. (The pause makes the
    // edit's mtime newer on any file system's clock granularity.)
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(dir.join("main.src"), "v2").unwrap();
    let (code, _, err) = b.cli(&["plugins", "restart", "gb"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(builds(&dir), 2);
    let (code, _, err) = b.cli(&["plugins", "restart", "gb"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(builds(&dir), 2, "up to date again");

    // An explicit reload always runs the build (the tool decides what is up to date).
    let before = b.plugin("gb").await;
    let (code, out, err) = b.cli(&["plugins", "reload", "gb"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(builds(&dir), 3);
    let after = b.plugin("gb").await;
    assert!(
        after.pid != before.pid && after.reason.is_empty(),
        "{after:?}"
    );
    assert!(build_markers(&logs(&b, "gb"))
        .iter()
        .any(|m| m.contains("(explicit reload;")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_watch_a_source_edit_rebuilds_once_and_the_builds_output_does_not_reload() {
    let mut b = Broker::spawn(vec![], &["--watch"]).await;
    b.wait_log("--watch: watching", LONG).await;
    let root = b.root.path().join("plugins");
    let dir = folder(
        &root,
        "gw",
        &manifest("gw", json!(["sh", "build.sh"])),
        &[("build.sh", &build_script()), ("main.src", "v1")],
    );
    // The watcher's events of these first writes are past before the plugin loads.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (code, out, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    // The build wrote bin/plugin inside the watched folder: that is not a change of
    // the plugin's sources, so no reload follows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let first = b.plugin("gw").await;
    assert_eq!((builds(&dir), first.restarts), (1, 0), "{first:?}");

    std::fs::write(dir.join("main.src"), "v2").unwrap();
    let p = wait_until(&mut b, "gw", "the rebuilt version serving", |p| {
        p.state == PluginState::Ready as i32 && p.pid != first.pid
    })
    .await;
    assert_eq!(builds(&dir), 2);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let still = b.plugin("gw").await;
    assert_eq!((builds(&dir), still.pid), (2, p.pid), "one reload per edit");
    let log = b.log();
    assert_eq!(
        log.matches("--watch: files changed; reloading").count(),
        1,
        "{log}"
    );
}

/// A build that fails like `go build` does while `main.src` is missing or says
/// `broken`, and else runs `build.sh`.
fn failing_build() -> Value {
    json!(["sh", "-c", "if [ ! -f main.src ] || grep -q broken main.src; then echo '# example.com/gf' >&2; echo './main.go:12:2: undefined: foo' >&2; echo './main.go:14:9: too many errors' >&2; exit 1; fi; exec sh build.sh"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_build_is_a_failure_state_naming_the_error_without_a_restart_loop() {
    let plugin = PluginDir {
        dir: "gf".into(),
        manifest: manifest("gf", failing_build()),
    };
    let mut b = Broker::spawn(vec![plugin], &[]).await;
    let p = b.wait_state("gf", PluginState::Failed, LONG).await;
    assert_eq!(
        p.reason,
        "build failed (exit status 1): ./main.go:12:2: undefined: foo"
    );
    assert_eq!((p.restarts, p.pid), (0, 0), "{p:?}");
    assert_eq!(p.last_exit, "build failed (exit status 1)");
    let (code, out, _) = b.cli(&["plugins", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("failed") && out.contains("./main.go:12:2: undefined: foo"),
        "{out}"
    );
    let lines = logs(&b, "gf");
    let texts: Vec<&str> = lines.iter().map(|l| l["text"].as_str().unwrap()).collect();
    for line in [
        "# example.com/gf",
        "./main.go:12:2: undefined: foo",
        "./main.go:14:9: too many errors",
    ] {
        assert!(texts.contains(&line), "{line} not in the log: {texts:?}");
    }
    // No restart loop: it stays failed, with the one build.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let still = b.plugin("gf").await;
    assert_eq!(
        (still.state, still.restarts),
        (PluginState::Failed as i32, 0)
    );
    let markers = build_markers(&logs(&b, "gf"));
    assert_eq!(markers.len(), 2, "{markers:?}");
    assert!(
        markers[1].ends_with("build failed (exit status 1): ./main.go:12:2: undefined: foo"),
        "{markers:?}"
    );
    let err = b.call("gf_echo", json!({})).await.unwrap_err();
    assert!(err.message().contains("unknown tool"), "{err:?}");

    // Fixed, a reload builds and serves it.
    let dir = b.root.path().join("plugins/gf");
    std::fs::write(dir.join("build.sh"), build_script()).unwrap();
    std::fs::write(dir.join("main.src"), "fixed").unwrap();
    let (code, out, err) = b.cli(&["plugins", "reload", "gf"]);
    assert_eq!(code, 0, "{out}{err}\n{}", b.log());
    let serving = b.plugin("gf").await;
    assert_eq!(serving.state, PluginState::Ready as i32);
    assert!(b.call("gf_echo", json!({})).await.unwrap().success);

    // Broken again: the reload fails at once with the error line; the previous version
    // keeps serving. (The pause makes the edit newer than bin/plugin on any clock.)
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(dir.join("main.src"), "broken").unwrap();
    let (code, out, err) = b.cli(&["plugins", "reload", "gf"]);
    assert_eq!(code, 5, "{out}{err}");
    assert!(
        err.contains("reload failed: build failed (exit status 1): ./main.go:12:2: undefined: foo; the previous version still serves"),
        "{err}"
    );
    let p = b.plugin("gf").await;
    assert_eq!((p.state, p.pid), (PluginState::Ready as i32, serving.pid));
    assert!(p.reason.contains("undefined: foo"), "{p:?}");
    assert!(b.call("gf_echo", json!({})).await.unwrap().success);

    // A restart stops it and builds (main.src is newer than bin/plugin): the failed
    // build is the restart's answer, not a wait for the plugin to come back.
    let (code, _, err) = b.cli(&["plugins", "restart", "gf"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("not ready after restart (failed: build failed (exit status 1): ./main.go:12:2: undefined: foo)"),
        "{err}"
    );
    assert_eq!(b.plugin("gf").await.state, PluginState::Failed as i32);

    // An operator's load of a folder whose build fails leaves nothing behind and says why.
    let other = folder(
        &b.root.path().join("extra"),
        "gf2",
        &manifest("gf2", failing_build()),
        &[],
    );
    let (code, _, err) = b.cli(&["plugins", "load", other.to_str().unwrap()]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("not loaded: build failed (exit status 1): ./main.go:12:2: undefined: foo"),
        "{err}"
    );
    assert!(!b.plugins().await.iter().any(|p| p.name == "gf2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_past_its_timeout_is_killed_with_its_group_and_shows_as_building_meanwhile() {
    let mut m = manifest(
        "gt",
        json!([
            "sh",
            "-c",
            "echo compiling slowly; sleep 120 & sleep 120; wait"
        ]),
    );
    m["build_timeout_s"] = json!(3);
    let plugin = PluginDir {
        dir: "gt".into(),
        manifest: m,
    };
    let mut b = Broker::spawn(vec![plugin], &[]).await;
    let p = b.wait_state("gt", PluginState::Building, LONG).await;
    assert!(p.reason.starts_with("building: sh -c"), "{p:?}");
    let (code, out, _) = b.cli(&["plugins", "list", "--json"]);
    assert_eq!(code, 0);
    let list: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(list[0]["state"], "building", "{out}");
    // The build's group: the shell and its two sleeps.
    let marker = logs(&b, "gt")
        .into_iter()
        .find(|l| l["stream"] == "broker" && l["text"].as_str().unwrap().contains(" build: "))
        .unwrap();
    let pgid = marker["pid"].as_u64().unwrap() as u32;
    let started = Instant::now();
    while group_members(pgid).len() < 3 {
        assert!(
            started.elapsed() < LONG,
            "the build's processes did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let p = b.wait_state("gt", PluginState::Failed, LONG).await;
    assert!(p.reason.starts_with("build timed out after 3 s"), "{p:?}");
    assert!(
        group_members(pgid).is_empty(),
        "left behind: {:?}",
        group_members(pgid)
    );
    let texts: Vec<String> = logs(&b, "gt")
        .iter()
        .map(|l| l["text"].as_str().unwrap().to_string())
        .collect();
    assert!(texts.contains(&"compiling slowly".to_string()), "{texts:?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(b.plugin("gt").await.restarts, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_build_values_are_manifest_errors_naming_the_field() {
    let b = Broker::spawn(vec![], &[]).await;
    let root = b.root.path().join("extra");
    for (i, (build, needle)) in [
        (json!("go build"), "is not an array of strings"),
        (json!([]), "is empty"),
        (json!(["go", 7]), "item 1 (7) is not a string"),
        (json!([""]), "the program (item 0) is empty"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("bad{i}");
        let dir = folder(&root, &name, &manifest(&name, build), &[]);
        let (code, _, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("field `build`") && err.contains(needle),
            "{needle}: {err}"
        );
    }
    let mut m = manifest("bad9", json!(["true"]));
    m["build_timeout_s"] = json!(-1);
    let dir = folder(&root, "bad9", &m, &[]);
    let (code, _, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("field `build_timeout_s`"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_runs_in_its_own_sandbox_and_a_missing_tool_is_named() {
    let mut b = Broker::spawn(vec![], &[]).await;
    let root = b.root.path().join("extra");
    // The build may write its folder (bin/plugin) but not read the broker's data dir.
    let token = b.data_dir().join("admin.token");
    let mut m = manifest(
        "gs",
        json!([
            "sh",
            "-c",
            "cat \"$ADMIN\" && echo LEAKED; exec sh build.sh"
        ]),
    );
    m["env"]["ADMIN"] = json!(token);
    let dir = folder(&root, "gs", &m, &[("build.sh", &build_script())]);
    let (code, out, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let texts: Vec<String> = logs(&b, "gs")
        .iter()
        .map(|l| l["text"].as_str().unwrap().to_string())
        .collect();
    let secret = std::fs::read_to_string(&token).unwrap();
    assert!(
        !texts
            .iter()
            .any(|t| t == "LEAKED" || t.contains(secret.trim())),
        "{texts:?}"
    );
    if hearth_broker::supervisor::sandbox::landlock_abi().is_some() {
        assert!(
            texts.iter().any(|t| t.contains("Permission denied")),
            "{texts:?}"
        );
        let marker = build_markers(&logs(&b, "gs")).remove(0);
        assert!(marker.contains("sandbox landlock v"), "{marker}");
    }
    assert_eq!(b.plugin("gs").await.state, PluginState::Ready as i32);

    // A build tool that is not there: the load says which.
    let dir = folder(
        &root,
        "gn",
        &manifest("gn", json!(["hearth-no-such-build-tool", "build"])),
        &[],
    );
    let (code, _, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("not loaded: build could not start: cannot run `hearth-no-such-build-tool`"),
        "{err}"
    );
}

/// A Go source file with a compile error on line 4.
const BROKEN_GO: &str = "package main\n\nfunc main() {\n\tfoo()\n}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_compile_error_in_the_build_sandbox_names_the_file_and_line() {
    let b = Broker::spawn(vec![], &[]).await;
    let m = json!({"name": "gc", "runtime": "exec", "entry": "bin/plugin",
        "build": ["go", "build", "-buildvcs=false", "-o", "bin/plugin", "."]});
    let dir = folder(
        &b.root.path().join("extra"),
        "gc",
        &m,
        &[
            ("go.mod", "module gc\n\ngo 1.26.0\n"),
            ("main.go", BROKEN_GO),
        ],
    );
    let (code, _, err) = b.cli(&["plugins", "load", dir.to_str().unwrap()]);
    assert_eq!(code, 5, "{err}\n{}", b.log());
    assert!(
        err.contains("not loaded: build failed (exit status 1): ./main.go:4:2: undefined: foo"),
        "{err}\n{}",
        b.log()
    );
    assert!(!dir.join("bin/plugin").exists());
}

/// `hearth new go NAME` in `parent`.
fn new_go(parent: &Path, name: &str, style: &[&str]) -> PathBuf {
    let out = Command::new(HEARTH)
        .args(["new", "go", name])
        .args(style)
        .arg("--dir")
        .arg(parent)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("go test ./...") && printed.contains("hearth dev"),
        "{printed}"
    );
    parent.join(name)
}

#[test]
fn hearth_new_go_writes_a_module_on_this_checkouts_sdk_that_builds_and_tests() {
    let root = tempfile::tempdir().unwrap();
    for (name, style) in [
        ("greeter", &[][..]),
        ("hello-go", &["--style", "cyrene"][..]),
    ] {
        let dir = new_go(root.path(), name, style);
        for f in [
            "plugin.json",
            "go.mod",
            "main.go",
            "main_test.go",
            "README.md",
            ".gitignore",
        ] {
            assert!(dir.join(f).is_file(), "{name}: {f} missing");
        }
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(dir.join("plugin.json")).unwrap()).unwrap();
        assert_eq!(manifest["runtime"], "exec");
        assert_eq!(manifest["entry"], "bin/plugin");
        assert_eq!(
            manifest["build"],
            json!(["go", "build", "-buildvcs=false", "-o", "bin/plugin", "."])
        );
        let gomod = std::fs::read_to_string(dir.join("go.mod")).unwrap();
        assert!(gomod.starts_with(&format!("module {name}\n")), "{gomod}");
        assert!(
            gomod.contains("require github.com/hearth-dev/hearth/sdk-go v0.0.0"),
            "{gomod}"
        );
        let sdk = repo().join("sdk-go");
        assert!(
            gomod.contains(&format!(
                "replace github.com/hearth-dev/hearth/sdk-go => {}",
                sdk.display()
            )),
            "{gomod}"
        );
        // The scaffold's own test passes: `go test` (with vet) on this checkout's SDK.
        let test = Command::new("go")
            .args(["test", "./..."])
            .current_dir(&dir)
            .env("GOFLAGS", "-buildvcs=false")
            .output()
            .expect("go on PATH");
        assert!(
            test.status.success(),
            "{name}: go test failed:\n{}{}",
            String::from_utf8_lossy(&test.stdout),
            String::from_utf8_lossy(&test.stderr)
        );
    }
}

#[test]
fn a_scaffolded_go_plugin_is_built_and_served_by_hearth_dev_and_rebuilt_on_save() {
    let root = tempfile::tempdir().unwrap();
    let dir = new_go(root.path(), "gogreet", &[]);
    let data = root.path().join("data");
    let log = root.path().join("dev.log");
    let mut child = Command::new(HEARTH)
        .arg("dev")
        .arg(&dir)
        .arg("--data")
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let cli = |args: &[&str]| {
        let out = Command::new(HEARTH)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let wait = |what: &str, check: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !check() {
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "{what}: not within 180 s; hearth dev log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // The first build may be a cold one (grpc-go: ~20 s on a small machine).
    wait("gogreet ready", &|| {
        cli(&["plugins", "list", "--json"]).contains("\"ready\"")
    });
    assert_eq!(
        cli(&["tools", "call", "gogreet", r#"{"name":"Ann"}"#]),
        "Hello, Ann."
    );
    let main = dir.join("main.go");
    let code = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, code.replace("\"Hello, %s%s\"", "\"Howdy, %s%s\"")).unwrap();
    wait("the rebuilt plugin", &|| {
        cli(&["tools", "call", "gogreet", r#"{"name":"Ann"}"#]) == "Howdy, Ann."
    });
    let dev_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(dev_log.contains("build succeeded"), "{dev_log}");
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("hearth dev did not stop");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
