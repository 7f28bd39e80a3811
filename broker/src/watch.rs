//! `hearth run --watch`: reload a plugin when files in its directory change.
//!
//! Events are debounced (300 ms) so an editor's save or a build's burst of writes is
//! one reload. Changes under `__pycache__`, `node_modules`, `target` and hidden
//! directories, and editor swap/backup files, are ignored.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};

use crate::supervisor::Supervisor;

/// Quiet period after the last change before a reload.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// True for paths whose changes are not code changes.
fn ignored(path: &Path) -> bool {
    let noisy_dir = path.components().any(|c| match c {
        Component::Normal(n) => {
            let n = n.to_string_lossy();
            n.starts_with('.') || n == "__pycache__" || n == "node_modules" || n == "target"
        }
        _ => false,
    });
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    noisy_dir
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".swx")
        || name.ends_with(".pyc")
        || name.ends_with(".tmp")
}

/// Watches `roots` recursively and reloads the plugin whose directory holds each
/// changed file. Keep the returned debouncer alive for as long as watching should go on.
pub fn spawn(
    supervisor: Arc<Supervisor>,
    roots: &[PathBuf],
) -> notify_debouncer_mini::notify::Result<Debouncer<RecommendedWatcher>> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<PathBuf>>();
    let mut debouncer = new_debouncer(DEBOUNCE, move |events: DebounceEventResult| match events {
        Ok(events) => {
            let paths: Vec<PathBuf> = events.into_iter().map(|e| e.path).collect();
            let _ = tx.send(paths);
        }
        Err(e) => tracing::warn!("--watch: {e}"),
    })?;
    for root in roots {
        if root.is_dir() {
            debouncer.watcher().watch(root, RecursiveMode::Recursive)?;
            tracing::info!("--watch: watching {}", root.display());
        }
    }
    tokio::spawn(async move {
        while let Some(paths) = rx.recv().await {
            let plugins = supervisor.plugins();
            let mut changed = BTreeSet::new();
            for path in paths.iter().filter(|p| !ignored(p)) {
                let owner = plugins.iter().find(|p| path.starts_with(&p.spec().dir));
                if let Some(p) = owner {
                    changed.insert(p.name().to_string());
                }
            }
            for name in changed {
                tracing::info!(plugin = %name, "--watch: files changed; reloading");
                match supervisor.reload(&name).await {
                    Ok(_) => tracing::info!(plugin = %name, "--watch: reloaded"),
                    Err(e) => tracing::error!(plugin = %name, "--watch: reload failed: {e}"),
                }
            }
        }
    });
    Ok(debouncer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_ignored() {
        assert!(ignored(Path::new(
            "/p/calc/__pycache__/main.cpython-311.pyc"
        )));
        assert!(ignored(Path::new("/p/w/node_modules/x/index.js")));
        assert!(ignored(Path::new("/p/calc/.main.py.swp")));
        assert!(!ignored(Path::new("/p/calc/main.py")));
        assert!(!ignored(Path::new("/p/hello/bin/hello")));
    }
}
