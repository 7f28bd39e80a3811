//! `hearth run --watch`: reload a plugin when files in its directory change.
//!
//! Only writes, creations, renames and removals count (not reads or metadata), and
//! they are debounced (300 ms) so an editor's save or a build's burst of writes is
//! one reload. Each reload runs on its own ([`Supervisor::reload_on_change`]: the new version
//! starts beside the serving one, which keeps serving if the new one fails): a slow
//! or broken plugin never holds up another's reload, and a newer change to the same
//! plugin supersedes a reload still in progress. Changes under `__pycache__`,
//! `node_modules`, `target` and hidden directories, and editor swap/backup files, are
//! ignored; so is what a plugin's `build` step writes (`bin/`, its entry: see
//! [`crate::supervisor::build::is_source`]), whose reload runs the build only when the
//! mtime rule says so.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use crate::error::PluginError;
use crate::supervisor::Supervisor;

/// Quiet period after the last change before a reload.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// True for paths whose changes are not code changes.
pub(crate) fn ignored(path: &Path) -> bool {
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

/// True for events that change a file's content or presence.
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(m) => !matches!(m, ModifyKind::Metadata(_)),
        _ => false,
    }
}

/// Watches `roots` recursively and reloads the plugin whose directory holds each
/// changed file. Keep the returned watcher alive for as long as watching should go on.
pub fn spawn(supervisor: Arc<Supervisor>, roots: &[PathBuf]) -> notify::Result<RecommendedWatcher> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    // Noise is judged below the watched root: a root inside a hidden folder
    // (`~/.config/…`, a `/tmp/.tmpXXXX` test dir) still has its changes seen.
    let watched: Vec<PathBuf> = roots.to_vec();
    let below_root = move |p: &Path| -> bool {
        let rel = watched
            .iter()
            .filter_map(|r| p.strip_prefix(r).ok())
            .min_by_key(|rel| rel.components().count())
            .unwrap_or(p);
        !ignored(rel)
    };
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if is_change(&event.kind) => {
                for path in event.paths.into_iter().filter(|p| below_root(p)) {
                    let _ = tx.send(path);
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("--watch: {e}"),
        })?;
    for root in roots {
        if root.is_dir() {
            watcher.watch(root, RecursiveMode::Recursive)?;
            tracing::info!("--watch: watching {}", root.display());
        }
    }
    tokio::spawn(async move {
        // Reloads in progress; dropped (aborted) with this task.
        let mut reloads = tokio::task::JoinSet::new();
        while let Some(first) = rx.recv().await {
            // Debounce: collect until the tree has been quiet for DEBOUNCE.
            let mut paths = vec![first];
            while let Ok(Some(p)) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                paths.push(p);
            }
            while reloads.try_join_next().is_some() {}
            let plugins = supervisor.plugins();
            let mut changed = BTreeSet::new();
            for path in &paths {
                if let Some(p) = plugins.iter().find(|p| path.starts_with(&p.spec().dir)) {
                    // A plugin with a build step reloads on its sources only, not on
                    // what its build writes (`bin/plugin`).
                    let spec = p.spec();
                    if spec.build.is_none()
                        || crate::supervisor::build::is_source(&spec.dir, &spec.entry, path)
                    {
                        changed.insert(p.name().to_string());
                    }
                }
            }
            for name in changed {
                tracing::info!(plugin = %name, "--watch: files changed; reloading");
                let supervisor = supervisor.clone();
                reloads.spawn(async move {
                    match supervisor.reload_on_change(&name).await {
                        Ok(_) => tracing::info!(plugin = %name, "--watch: reloaded"),
                        Err(e @ PluginError::Superseded { .. }) => {
                            tracing::info!(plugin = %name, "--watch: {e}")
                        }
                        Err(e) => tracing::error!(plugin = %name, "--watch: {e}"),
                    }
                });
            }
        }
    });
    Ok(watcher)
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
