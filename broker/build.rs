//! Records the commit the binary is built from (`hearth --version`, `hearth_build_info`):
//! `HEARTH_COMMIT` if set (release builds from a tarball), else `git rev-parse`, else
//! `unknown`. (Uncommitted changes are not marked: watching the index would rebuild the
//! broker on every `git add`.)

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=HEARTH_COMMIT");
    let commit = std::env::var("HEARTH_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Rebuild when HEAD moves (a commit, a checkout).
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        // The branch's ref file, when it is loose (a packed ref has none to watch).
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            if std::path::Path::new(&dir).join(&r).exists() {
                println!("cargo:rerun-if-changed={dir}/{r}");
            }
        }
    }
    println!("cargo:rustc-env=HEARTH_BUILD_COMMIT={commit}");
}
