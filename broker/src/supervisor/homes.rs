//! A plugin's identity is its name, and a name belongs to the folder that first
//! loaded it: `<data_dir>/plugin-homes.json` maps each name to that folder
//! (canonical path). Settings, secrets and `plugin-data/<name>` follow the name, so
//! once a name has such state a different folder claiming it is refused until the
//! operator says it is the same plugin: `hearth plugins adopt NAME DIR`. A name
//! without state moves to the new folder freely.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// File name of the map inside the data dir (mode 0600, written by the broker and
/// by `hearth plugins adopt`).
pub const HOMES_FILE: &str = "plugin-homes.json";

/// The name → folder map of one data dir. Every call reads the file, so an adoption
/// written by the CLI is seen by a running broker at its next load.
#[derive(Debug, Clone)]
pub struct Homes {
    path: PathBuf,
}

impl Homes {
    /// The map of `data_dir`.
    pub fn new(data_dir: &Path) -> Homes {
        Homes {
            path: data_dir.join(HOMES_FILE),
        }
    }

    fn read(&self) -> Result<BTreeMap<String, PathBuf>, String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                format!(
                    "{}: not a JSON object of name → folder: {e}",
                    self.path.display()
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(format!("reading {}: {e}", self.path.display())),
        }
    }

    fn write(&self, homes: &BTreeMap<String, PathBuf>) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(homes).expect("a map of strings serializes");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&text))
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        written.map_err(|e| format!("writing {}: {e}", self.path.display()))
    }

    /// Lets `dir` load as `name`: a new name is recorded for `dir`; a known name must
    /// come from its recorded folder while `has_state()` says settings or data exist
    /// for it. Errors say which folder owns the name and the command that moves it.
    pub fn claim(
        &self,
        name: &str,
        dir: &Path,
        has_state: impl FnOnce() -> bool,
    ) -> Result<(), String> {
        let dir = canonical(dir);
        let mut homes = self.read()?;
        match homes.get(name) {
            Some(home) if *home == dir => Ok(()),
            // A recorded folder that is gone (moved or renamed on disk) changes
            // nothing: whoever put the new folder there must say it is the same plugin.
            Some(home) if has_state() => Err(format!(
                "the name `{name}` belongs to {} (its settings, secrets and data follow the name); if {} is the same plugin, run `hearth plugins adopt {name} {}`",
                home.display(),
                dir.display(),
                dir.display()
            )),
            _ => {
                homes.insert(name.to_string(), dir);
                self.write(&homes)
            }
        }
    }

    /// Records `dir` as the folder of `name` (`hearth plugins adopt`).
    pub fn adopt(&self, name: &str, dir: &Path) -> Result<Option<PathBuf>, String> {
        let mut homes = self.read()?;
        let old = homes.insert(name.to_string(), canonical(dir));
        self.write(&homes)?;
        Ok(old)
    }
}

fn canonical(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_stays_with_its_first_folder_until_adopted() {
        let data = tempfile::tempdir().unwrap();
        let (a, b) = (data.path().join("a"), data.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let homes = Homes::new(data.path());
        let state = || true;
        homes.claim("weather", &a, state).unwrap();
        homes.claim("weather", &a, state).unwrap();
        let err = homes.claim("weather", &b, state).unwrap_err();
        assert!(
            err.contains("hearth plugins adopt weather") && err.contains(&*b.to_string_lossy()),
            "{err}"
        );
        homes.claim("other", &b, state).unwrap();
        assert_eq!(
            homes.adopt("weather", &b).unwrap(),
            Some(std::fs::canonicalize(&a).unwrap())
        );
        homes.claim("weather", &b, state).unwrap();
        homes.claim("weather", &a, state).unwrap_err();
        // A name with no settings or data yet moves freely.
        homes.claim("weather", &a, || false).unwrap();
        homes.claim("weather", &a, state).unwrap();
    }
}
