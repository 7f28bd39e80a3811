//! Where a connection's password comes from when its URL has none, as libpq reads it
//! (so the `PGPASSWORD` and `~/.pgpass` an operator already uses for `psql` work):
//! 1. `PGPASSWORD`;
//! 2. the password file: `PGPASSFILE`, else `~/.pgpass`. Lines are
//!    `hostname:port:database:username:password`; `*` matches anything, `\:` and `\\`
//!    are a literal `:` and `\`, `#` starts a comment line; the first matching line
//!    wins. A Unix-socket connection matches the host `localhost`. Like libpq, a file
//!    that group or others may read is ignored (with a warning).
//!
//! `[storage] password_file` is applied before this, by putting the password in the URL
//! ([`crate::storage::StorageConfig::connection_url`]).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use tokio_postgres::config::Host;

/// Sets `config`'s password from `PGPASSWORD` or the password file when it has none.
pub(super) fn fill(config: &mut tokio_postgres::Config) {
    if config.get_password().is_some() {
        return;
    }
    if let Some(p) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
        config.password(p.as_encoded_bytes());
        return;
    }
    let file = match std::env::var_os("PGPASSFILE") {
        Some(f) => PathBuf::from(f),
        None => match std::env::var_os("HOME") {
            Some(home) => Path::new(&home).join(".pgpass"),
            None => return,
        },
    };
    let Ok(meta) = std::fs::metadata(&file) else {
        return;
    };
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            file = %file.display(),
            "the PostgreSQL password file is readable by group or others, so it is ignored (chmod 600 it), as libpq does"
        );
        return;
    }
    let Ok(text) = std::fs::read_to_string(&file) else {
        return;
    };
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(_)) | None => "localhost".into(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let user = config.get_user().unwrap_or("").to_string();
    let db = config.get_dbname().unwrap_or(&user).to_string();
    if let Some(password) = lookup(&text, [&host, &port, &db, &user]) {
        config.password(password);
    }
}

/// The password of the first line of `text` whose four fields match `want` (host,
/// port, database, user).
fn lookup(text: &str, want: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let fields = split(line);
            let [h, p, d, u, pw] = <[String; 5]>::try_from(fields).ok()?;
            [h, p, d, u]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w)
                .then_some(pw)
        })
}

/// The `:`-separated fields of a password file line, unescaped; the fifth field takes
/// the rest of the line.
fn split(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().unwrap().extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_line_wins_with_wildcards_and_escapes() {
        let text = "# comment\n\
                    db.example:5432:other:hearth:nope\n\
                    db.example:*:hearth:hearth:p\\:a\\\\ss:x\n\
                    *:*:*:*:fallback\n";
        let want = |h, p, d, u| lookup(text, [h, p, d, u]);
        assert_eq!(
            want("db.example", "5433", "hearth", "hearth").as_deref(),
            Some("p:a\\ss:x")
        );
        assert_eq!(
            want("db.example", "5432", "other", "hearth").as_deref(),
            Some("nope")
        );
        assert_eq!(
            want("elsewhere", "1", "x", "y").as_deref(),
            Some("fallback")
        );
        assert_eq!(lookup("short:line", ["short", "line", "", ""]), None);
    }
}
