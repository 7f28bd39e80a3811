//! The spawn token reaches the plugin through an inherited pipe (`HEARTH_TOKEN_FD`), never
//! through its environment; a bad `HEARTH_TOKEN_FD` exits 2 naming it. The
//! `token_probe` example runs as a real process against the fake broker.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::broker::{Broker, Session};
use crate::process::{example_bin, exit_code, read_all};

/// `token_probe` as `broker`'s plugin, run through `sh -c script` (`$0` = the probe,
/// `$1` = `arg`) with `HEARTH_ADDR` and `HEARTH_PLUGIN` set and no `HEARTH_TOKEN_FD`
/// or `HEARTH_TOKEN` unless `envs` sets them.
fn probe(broker: &Broker, script: &str, arg: &str, envs: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script])
        .arg(example_bin("token_probe"))
        .arg(arg)
        .env_remove("HEARTH_TOKEN")
        .env_remove("HEARTH_TOKEN_FD")
        .env("HEARTH_ADDR", &broker.addr)
        .env("HEARTH_PLUGIN", "token_probe")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// The next session of `broker`, or a panic with the plugin's stderr if it exits first.
async fn attach(broker: &mut Broker, child: &mut Child) -> Session {
    tokio::select! {
        s = broker.session() => s,
        status = child.wait() => {
            let err = read_all(child.stderr.take()).await;
            panic!("plugin exited ({status:?}) before attaching: {}", String::from_utf8_lossy(&err))
        }
    }
}

/// (dev, ino) of what `path` (a `/proc/<pid>/fd/<n>` link) refers to.
fn file_id(path: &str) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[tokio::test]
async fn token_from_an_inherited_pipe_only_authenticates_and_is_left_nowhere() {
    let mut broker = Broker::unix();
    // As the broker does: the token in a pipe, its write end closed, the read end on fd 3
    // of the plugin. std has no dup2, so `sh` moves the pipe from stdin to fd 3.
    let (reader, mut writer) = std::io::pipe().unwrap();
    writer
        .write_all(format!("{}\n", broker.token).as_bytes())
        .unwrap();
    drop(writer);
    let pipe = file_id(&format!("/proc/self/fd/{}", reader.as_raw_fd())).unwrap();
    let mut child = probe(
        &broker,
        "exec \"$0\" 3<&0 </dev/null",
        "",
        &[("HEARTH_TOKEN_FD", "3")],
    )
    .stdin(Stdio::from(reader))
    .spawn()
    .unwrap();

    // The fake broker refuses Attach without the right token (UNAUTHENTICATED).
    let mut s = attach(&mut broker, &mut child).await;
    let (hello, register) = s.handshake().await;
    let pid = child.id().unwrap();
    assert_eq!(hello.pid, pid);
    assert_eq!(register.plugin.unwrap().name, "token_probe");

    // /proc/<pid>/environ is the environment the process started with: the token was
    // never in it (`HEARTH_TOKEN_FD=3` is, as a number only; removing a variable later
    // does not rewrite this initial block).
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
    let token = broker.token.as_bytes();
    assert!(!vars
        .iter()
        .any(|v| v.windows(token.len()).any(|w| w == token)));
    assert!(!vars.iter().any(|v| v.starts_with(b"HEARTH_TOKEN=")));
    // The pipe is closed: no fd of the plugin refers to it any more.
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .collect();
    assert!(
        !fds.iter().any(|fd| file_id(fd) == Some(pipe)),
        "the token pipe is still open in the plugin"
    );
    // Inside the plugin HEARTH_TOKEN_FD is gone, and its child processes never see it.
    let r = s.call(1, "token_probe", json!({})).await;
    assert!(r.success, "{}", r.error);
    assert_eq!(
        serde_json::from_str::<Value>(&r.content).unwrap(),
        json!({"fd_env": null, "token_env": null, "child_fd_env": "unset"})
    );
}

/// Runs the probe with `HEARTH_TOKEN_FD=value` (`HEARTH_TOKEN` set too: a bad fd does
/// not fall back to it) and returns its stderr after checking it exited 2.
async fn refused(broker: &Broker, script: &str, arg: &str, value: &str) -> String {
    let mut child = probe(
        broker,
        script,
        arg,
        &[("HEARTH_TOKEN_FD", value), ("HEARTH_TOKEN", &broker.token)],
    )
    .spawn()
    .unwrap();
    let stderr = child.stderr.take();
    assert_eq!(exit_code(&mut child).await, 2);
    String::from_utf8(read_all(stderr).await).unwrap()
}

#[tokio::test]
async fn bad_token_fd_exits_2_naming_it() {
    let mut broker = Broker::unix();
    let plain = "exec \"$0\"";
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "{}", broker.token).unwrap();
    let file = file.path().to_str().unwrap().to_owned();
    for (script, arg, value, want) in [
        (
            plain,
            "",
            "987",
            "HEARTH_TOKEN_FD=987: cannot read the token: fd 987 is not open",
        ),
        (
            plain,
            "",
            "three",
            "HEARTH_TOKEN_FD=three: not a file descriptor number",
        ),
        (
            plain,
            "",
            "1",
            "HEARTH_TOKEN_FD=1: cannot read the token: fd 1 is stdin, stdout or stderr",
        ),
        // A regular file holding the token, inherited as fd 3: not the pipe the
        // contract names, so neither read nor closed.
        (
            "exec \"$0\" 3<\"$1\"",
            &file,
            "3",
            "HEARTH_TOKEN_FD=3: cannot read the token: fd 3 is not a pipe",
        ),
    ] {
        let err = refused(&broker, script, arg, value).await;
        assert!(err.contains(&format!("hearth-plugin: {want}\n")), "{err}");
    }
    let none = tokio::time::timeout(std::time::Duration::from_millis(200), broker.session()).await;
    assert!(none.is_err(), "a plugin attached anyway");
}
