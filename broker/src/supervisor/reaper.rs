//! The reaper: a tiny companion process (`hearth __reaper`) that kills every plugin
//! process group when the broker dies, however it dies.
//!
//! PR_SET_PDEATHSIG only reaches a plugin's direct child; a plugin started through a
//! wrapper (`sh -c`, a launcher script) or one that started grandchildren would
//! outlive a SIGKILLed broker. The broker tells the reaper each group it starts
//! (`+PGID` line on the reaper's stdin) and ends (`-PGID`); when the pipe closes —
//! the kernel closes it when the broker exits for any reason — the reaper sends
//! SIGKILL to every group still listed and exits. It runs in its own process group,
//! so Ctrl-C in a terminal does not reach it.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// The broker's handle on its reaper process.
#[derive(Debug)]
pub struct Reaper {
    pipe: Mutex<Option<(Child, ChildStdin)>>,
}

impl Reaper {
    /// Starts `<current exe> __reaper`.
    pub fn start() -> std::io::Result<Reaper> {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe()?;
        // A clean environment: plugins can read a process's initial environment in
        // /proc, and the broker's may hold API keys.
        let mut child = Command::new(exe)
            .arg("__reaper")
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped stdin");
        Ok(Reaper {
            pipe: Mutex::new(Some((child, stdin))),
        })
    }

    /// A reaper that does nothing (unit tests, or when the companion cannot start).
    pub fn disabled() -> Reaper {
        Reaper {
            pipe: Mutex::new(None),
        }
    }

    fn send(&self, line: String) {
        let mut pipe = self.pipe.lock().unwrap();
        if let Some((_, stdin)) = pipe.as_mut() {
            if let Err(e) = stdin.write_all(line.as_bytes()) {
                tracing::error!(
                    "reaper pipe: {e}; plugin groups will not be cleaned up if the broker dies"
                );
                *pipe = None;
            }
        }
    }

    /// Lists process group `pgid` for cleanup.
    pub fn track(&self, pgid: u32) {
        if pgid > 1 {
            self.send(format!("+{pgid}\n"));
        }
    }

    /// Drops process group `pgid` from the list (it has been cleaned up).
    pub fn untrack(&self, pgid: u32) {
        if pgid > 1 {
            self.send(format!("-{pgid}\n"));
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some((mut child, stdin)) = self.pipe.lock().unwrap().take() {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// Body of `hearth __reaper`: reads `+PGID`/`-PGID` lines until EOF, then SIGKILLs
/// every group still listed.
pub fn reaper_main() -> std::process::ExitCode {
    // SAFETY: plain signal disposition changes before any threads exist.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let mut groups = BTreeSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (op, pgid) = line.split_at(line.len().min(1));
        match (op, pgid.parse::<u32>()) {
            ("+", Ok(p)) => {
                groups.insert(p);
            }
            ("-", Ok(p)) => {
                groups.remove(&p);
            }
            _ => {}
        }
    }
    for pgid in groups {
        super::process::signal_group(pgid, libc::SIGKILL);
    }
    std::process::ExitCode::SUCCESS
}
