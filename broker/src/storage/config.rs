//! `[storage]` of `hearth.toml`: where the broker keeps its state.
//!
//! ```toml
//! [storage]
//! url = "postgres://hearth@db.example.com:5432/hearth?sslmode=require"
//! password_file = "/etc/hearth/pg.pw"   # or the password in the url, or HEARTH_STORAGE_URL
//! ca = "/etc/hearth/pg-ca.pem"          # trust this CA for the server's certificate (else the system's)
//! broker_id = "broker-1"                # unique per broker on the database; default <host>-<pid>-<random>
//! lease_ttl_s = 15                      # a dead broker's conversations move after at most this
//! ```
//!
//! Without `url` (and without `--storage-url` / `HEARTH_STORAGE_URL`) the broker uses
//! `<data_dir>/hearth.db` (SQLite), as before.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The `[storage]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// `postgres://user[:password]@host[:port]/database[?sslmode=disable|prefer|require]`
    /// or libpq's `key=value` form; `None` = SQLite in the data dir.
    pub url: Option<String>,
    /// A file holding the password (its first line; read at start, relative to the
    /// data dir), instead of one in the URL.
    pub password_file: Option<PathBuf>,
    /// A PEM file of CA certificates to trust for the server's TLS certificate (a
    /// managed service's own CA), besides the system's; relative to the data dir.
    pub ca: Option<PathBuf>,
    /// This broker's id on the database (leases name it); unique among the brokers
    /// sharing it. Default: `<host>-<pid>-<4 random hex digits>`, new at each start.
    pub broker_id: Option<String>,
    /// Seconds a conversation lease lives unless renewed (renewed every third of it):
    /// how long a frozen or cut-off broker keeps its conversations. Default 15.
    pub lease_ttl_s: Option<f64>,
}

impl StorageConfig {
    /// Makes relative paths relative to `data_dir`.
    pub fn resolve_paths(&mut self, data_dir: &Path) {
        for p in [&mut self.password_file, &mut self.ca]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = data_dir.join(&*p);
            }
        }
    }

    /// The lease time to live.
    ///
    /// # Errors
    /// `lease_ttl_s` not a number of seconds ≥ 1.
    pub fn lease_ttl(&self) -> Result<Duration, String> {
        match self.lease_ttl_s {
            None => Ok(super::pg::leases::DEFAULT_TTL),
            Some(s) if s.is_finite() && s >= 1.0 => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(format!(
                "[storage] lease_ttl_s: {s} is not a number of seconds ≥ 1"
            )),
        }
    }

    /// The URL with the password of `password_file` in it, when one is given and the
    /// URL has no password of its own (a password in the URL, e.g. from
    /// `--storage-url`, wins). Without either, the connection takes `PGPASSWORD` or
    /// `~/.pgpass` (`storage::pg`).
    ///
    /// # Errors
    /// The file cannot be read, or the URL does not parse.
    pub fn connection_url(&self) -> Result<Option<String>, String> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let Some(file) = self.password_file.as_ref().filter(|_| !has_password(url)) else {
            return Ok(Some(url.clone()));
        };
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("[storage] password_file: {}: {e}", file.display()))?;
        let password = text.lines().next().unwrap_or("").trim_end();
        // The key=value form takes a password key; a URL takes it percent-encoded.
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let (scheme, rest) = url.split_once("://").expect("checked");
            let (auth, host) = rest
                .split_once('@')
                .ok_or_else(|| "[storage] url: a password_file needs a user in the url (postgres://user@host/db)".to_string())?;
            let user = auth.split(':').next().unwrap_or(auth);
            Ok(Some(format!(
                "{scheme}://{user}:{}@{host}",
                percent_encode(password)
            )))
        } else {
            Ok(Some(format!(
                "{url} password='{}'",
                password.replace('\\', "\\\\").replace('\'', "\\'")
            )))
        }
    }

    /// This broker's id: `broker_id`, or `<host>-<pid>-<random>`.
    pub fn broker_id(&self) -> String {
        if let Some(id) = &self.broker_id {
            return id.clone();
        }
        let mut random = [0u8; 2];
        let _ = getrandom::fill(&mut random);
        format!(
            "{}-{}-{:02x}{:02x}",
            crate::nats::host_name(),
            std::process::id(),
            random[0],
            random[1]
        )
    }
}

/// Whether `url` carries a password: `postgres://user:password@…`, or a `password=`
/// pair of the key=value form.
fn has_password(url: &str) -> bool {
    match url.split_once("://") {
        Some((_, rest)) => rest
            .split('/')
            .next()
            .and_then(|authority| authority.rsplit_once('@'))
            .is_some_and(|(auth, _)| auth.contains(':')),
        None => url
            .split_whitespace()
            .any(|pair| pair.trim_start().starts_with("password=")),
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_file_goes_into_either_url_form() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), "p@ss w'rd\nignored\n").unwrap();
        let mut c = StorageConfig {
            url: Some("postgres://hearth@db:5432/hearth".into()),
            password_file: Some("pw".into()),
            ..Default::default()
        };
        c.resolve_paths(dir.path());
        assert_eq!(
            c.connection_url().unwrap().unwrap(),
            "postgres://hearth:p%40ss%20w%27rd@db:5432/hearth"
        );
        c.url = Some("host=db user=hearth".into());
        assert_eq!(
            c.connection_url().unwrap().unwrap(),
            "host=db user=hearth password='p@ss w\\'rd'"
        );
        // A password of the URL's own wins over the file.
        for own in [
            "postgres://hearth:given@db/hearth",
            "host=db user=hearth password=given",
        ] {
            c.url = Some(own.into());
            assert_eq!(c.connection_url().unwrap().unwrap(), own);
        }
        c.url = Some("postgres://db/hearth".into());
        assert!(c.connection_url().unwrap_err().contains("needs a user"));
        c.password_file = Some(dir.path().join("missing"));
        assert!(c.connection_url().unwrap_err().contains("password_file"));
    }

    #[test]
    fn lease_ttl_is_checked() {
        let c = |s| StorageConfig {
            lease_ttl_s: s,
            ..Default::default()
        };
        assert_eq!(c(None).lease_ttl().unwrap(), Duration::from_secs(15));
        assert_eq!(
            c(Some(2.5)).lease_ttl().unwrap(),
            Duration::from_millis(2500)
        );
        assert!(c(Some(0.5)).lease_ttl().is_err());
        assert!(c(Some(f64::NAN)).lease_ttl().is_err());
    }
}
