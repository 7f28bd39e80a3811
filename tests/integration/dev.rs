//! `hearth new` and `hearth dev` as a plugin author runs them: a scaffolded Python
//! plugin served by `hearth dev` with its scripted LLM, `--trace` lines, reload on
//! save, and a temp data dir that is gone after a stop. (The Node and Rust scaffolds
//! and the packaged SDKs are run by `scripts/author-kit`.)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::python;

const HEARTH: &str = env!("CARGO_BIN_EXE_hearth");

/// A `hearth dev` process, stopped (SIGTERM, then SIGKILL) on drop; its stderr in a file.
struct Dev {
    child: Child,
    data: PathBuf,
    log: PathBuf,
}

impl Dev {
    fn start(dir: &Path, data: PathBuf, log: PathBuf, extra: &[&str]) -> Dev {
        let child = Command::new(HEARTH)
            .arg("dev")
            .arg(dir)
            .arg("--data")
            .arg(&data)
            .args(extra)
            .env("HEARTH_PYTHON", python())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("hearth dev");
        Dev { child, data, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(HEARTH)
            .arg("--data-dir")
            .arg(&self.data)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )
    }

    /// Waits (up to 30 s) until `check` holds, else fails with the dev log.
    fn wait(&self, what: &str, mut check: impl FnMut(&Dev) -> bool) {
        let started = Instant::now();
        while !check(self) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{what}: not within 30 s; hearth dev log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn call(&self, tool: &str, args: &str) -> String {
        let (ok, out, err) = self.cli(&["tools", "call", tool, args]);
        assert!(ok, "tools call {tool}: {err}\n{}", self.log());
        out
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "hearth dev did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn new_plugin(parent: &Path, args: &[&str]) -> String {
    let out = Command::new(HEARTH)
        .arg("new")
        .args(args)
        .arg("--dir")
        .arg(parent)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_scaffolded_python_plugin_runs_under_hearth_dev_traces_and_reloads_on_save() {
    let root = tempfile::tempdir().unwrap();
    let printed = new_plugin(root.path(), &["python", "greeter"]);
    assert!(
        printed.contains("test_main.py") && printed.contains("hearth dev"),
        "{printed}"
    );
    let dir = root.path().join("greeter");
    for f in [
        "plugin.json",
        "main.py",
        "test_main.py",
        "README.md",
        "requirements.txt",
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    // A second `hearth new` of the same name leaves the folder alone.
    let out = Command::new(HEARTH)
        .args(["new", "python", "greeter", "--dir"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));

    let data = root.path().join("data");
    let mut dev = Dev::start(
        &dir,
        data.clone(),
        root.path().join("dev.log"),
        &["--trace"],
    );
    dev.wait("greeter ready", |d| {
        d.cli(&["plugins", "list", "--json"])
            .1
            .contains("\"ready\"")
    });
    assert_eq!(dev.call("greeter", r#"{"name":"Ann"}"#), "Hello, Ann.");
    // The scripted LLM answers chat (the default script echoes the user).
    let (ok, out, err) = dev.cli(&["chat", "hi there"]);
    assert!(ok, "{err}");
    assert!(out.contains("you said: hi there"), "{out}");
    // --trace: the session's messages, decoded, one line each.
    let log = dev.log();
    for needle in [
        "greeter → broker Hello(",
        "greeter → broker Register(",
        "broker → greeter InvokeTool(",
        "args_json: \"{\\\"name\\\":\\\"Ann\\\"}\"",
        "greeter → broker ToolResult(",
    ] {
        assert!(
            log.contains(needle),
            "trace line {needle:?} missing:\n{log}"
        );
    }
    assert!(
        log.contains(&format!("data dir   {}", data.display())),
        "{log}"
    );

    // Save a change: the plugin is reloaded and answers with the new code.
    let main = dir.join("main.py");
    let code = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, code.replace("Hello, {name}", "Howdy, {name}")).unwrap();
    dev.wait("the reloaded plugin", |d| {
        d.cli(&["tools", "call", "greeter", r#"{"name":"Ann"}"#]).1 == "Howdy, Ann."
    });

    let status = dev.stop();
    assert!(status.success(), "{status:?}\n{}", dev.log());
    // --data keeps the data dir; without it, a temp one is removed (next test).
    assert!(data.join("hearth.db").exists());
}

#[test]
fn hearth_dev_uses_the_folders_venv_removes_its_temp_dir_and_refuses_a_missing_folder() {
    let root = tempfile::tempdir().unwrap();
    new_plugin(root.path(), &["python", "tidy", "--style", "homeagent"]);
    // The folder's own .venv (as the generated README makes it) is the plugin's Python
    // when neither HEARTH_PYTHON nor the manifest names one.
    // (A link to the test venv: a venv is found through the folder its python sits in.)
    let test_venv = std::path::Path::new(&python())
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    std::os::unix::fs::symlink(&test_venv, root.path().join("tidy/.venv")).unwrap();
    let venv = root.path().join("tidy/.venv/bin");
    let log = root.path().join("dev.log");
    let mut child = Command::new(HEARTH)
        .arg("dev")
        .arg(root.path().join("tidy"))
        .env_remove("HEARTH_PYTHON")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let data = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(line) = text
            .lines()
            .find(|l| l.trim_start().starts_with("data dir"))
        {
            break PathBuf::from(line.trim_start().trim_start_matches("data dir").trim());
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut dev = Dev {
        child: std::mem::replace(&mut child, Command::new("true").spawn().unwrap()),
        data: data.clone(),
        log,
    };
    let _ = child.wait();
    dev.wait("tidy ready", |d| {
        d.cli(&["plugins", "list", "--json"])
            .1
            .contains("\"ready\"")
    });
    assert_eq!(
        dev.call("tidy", r#"{"name":"Bo","excited":true}"#),
        "Hello, Bo!"
    );
    let picked = format!("Python from {}", venv.join("python").display());
    assert!(dev.log().contains(&picked), "{}", dev.log());
    let status = dev.stop();
    assert!(status.success(), "{status:?}\n{}", dev.log());
    assert!(!data.exists(), "{} left behind", data.display());

    let out = Command::new(HEARTH)
        .args(["dev", "/no/such/plugin"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/no/such/plugin: does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
