//! `[nats]` in `<data_dir>/hearth.toml`: where the NATS server is and how to log in.
//!
//! ```toml
//! [nats]
//! url = "tls://nats.example.com:4222"      # or urls = ["tls://a:4222", "tls://b:4222"]
//! name = "gpu-1"                           # this process's id on the bus (default: <host>-<pid>)
//! # One way to log in (or none):
//! creds = "/etc/hearth/node.creds"         # NATS credentials file (JWT + NKey seed), recommended
//! # nkey_seed_file = "/etc/hearth/node.nk" # an NKey user seed (SU…)
//! # user = "node-gpu-1"                    # with one of:
//! # password_file = "/etc/hearth/nats.pw" #   password / password_file / password_env
//! # token_env = "HEARTH_NATS_TOKEN"        # or token / token_file / token_env
//! ca = "/etc/hearth/nats-ca.pem"           # trust this CA for the server (implies TLS)
//! client_cert = "/etc/hearth/node.pem"     # mutual TLS: both or neither
//! client_key = "/etc/hearth/node.key"
//! local_address = "10.0.0.5"               # bind the client side here (port 0 = any)
//! subject_prefix = "hearth"                # first subject token(s) of every Hearth subject
//! ```
//!
//! Secrets (password, token, seeds, creds) come from this file, files it names or
//! environment variables it names — never from the command line. Relative paths are
//! relative to the data dir ([`NatsConfig::resolve_paths`]).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::NatsError;

/// The default [`NatsConfig::subject_prefix`].
pub const DEFAULT_SUBJECT_PREFIX: &str = "hearth";

/// The `[nats]` table of `<data_dir>/hearth.toml`: the server(s), this process's name
/// on the bus, credentials, TLS and the subject prefix.
///
/// It deserializes with serde (unknown keys are refused, naming the key), so the
/// hearth.toml loader (`crate::llm::config`, whose `RawConfig` lists the tables) takes it
/// as a `nats: Option<NatsConfig>` field; `hearth node --nats URL` will set
/// [`url`](Self::url) over it. Nothing reads `[nats]` yet: the loader still refuses the
/// table until the broker and `hearth node` use it (issue 17).
///
/// Call [`validate`](Self::validate) (done by [`connect`](super::connect)) before use;
/// its errors name the field. `Debug` masks inline `password` and `token`.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// One server: `nats://host:port`, `tls://host:port` (TLS required) or `host:port`
    /// (`nats://`, port 4222 by default). No user or password inside the URL.
    pub url: Option<String>,
    /// Several servers of one cluster (instead of `url`); the client picks one and moves
    /// to another when it is lost.
    #[serde(default)]
    pub urls: Vec<String>,
    /// This process's id on the bus and the connection's name in the server's logs and
    /// `/connz`: 1 to 64 of ASCII letters, digits, `_` and `-`. Default `<host>-<pid>`.
    pub name: Option<String>,
    /// A NATS credentials file (user JWT + NKey seed, as `nsc` writes it).
    pub creds: Option<PathBuf>,
    /// A file holding an NKey user seed (`SU…`).
    pub nkey_seed_file: Option<PathBuf>,
    /// User name for user/password login (with exactly one password source).
    pub user: Option<String>,
    /// The password inline.
    pub password: Option<String>,
    /// A file holding the password (trailing newline ignored).
    pub password_file: Option<PathBuf>,
    /// The name of an environment variable holding the password.
    pub password_env: Option<String>,
    /// A token inline.
    pub token: Option<String>,
    /// A file holding the token (trailing newline ignored).
    pub token_file: Option<PathBuf>,
    /// The name of an environment variable holding the token.
    pub token_env: Option<String>,
    /// PEM file of the CA(s) that signed the server's certificate; set = TLS required and
    /// only these CAs trusted. Unset with TLS = the system's CA store.
    pub ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with `client_key`).
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Local address of the client side: an IP (`"127.0.0.2"`, any port) or `IP:PORT`.
    pub local_address: Option<String>,
    /// First token(s) of every Hearth subject, e.g. `hearth` or `hearth.prod` (a deployment
    /// sharing an account with another). Default [`DEFAULT_SUBJECT_PREFIX`].
    #[serde(default = "default_subject_prefix")]
    pub subject_prefix: String,
    /// The first token of this client's request inboxes (where answers to its host calls
    /// and probes come). Default: `_INBOX_<name>` on a node (its NATS user needs to
    /// subscribe to its own inboxes only), `_INBOX` on a broker. A pool of nodes sharing
    /// one NATS user sets one prefix for all, e.g. `_INBOX_pool`.
    pub inbox_prefix: Option<String>,
    /// Brokers only: per-node policies, `[nats.nodes.<node>]`, keyed by node name. A node
    /// without an entry serves any plugin with the capabilities its manifest asks for, as
    /// a local plugin would.
    #[serde(default)]
    pub nodes: std::collections::BTreeMap<String, NodePolicy>,
}

/// `[nats.nodes.<node>]` of a broker's hearth.toml: what a plugin host may do.
/// `[nats.nodes."*"]` applies to every node without a table of its own (e.g. a pool of
/// nodes named after their pods).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodePolicy {
    /// Allow-list of capabilities (e.g. `["memory", "knowledge"]`): a remote plugin holds
    /// what its manifest asks for *and* this list names. Absent = the manifest's.
    pub capabilities: Option<Vec<String>>,
    /// The plugins this node may serve; the broker ignores the others it announces.
    /// Absent = any.
    pub plugins: Option<Vec<String>>,
}

impl NodePolicy {
    /// Whether the node may serve `plugin`.
    pub fn allows_plugin(&self, plugin: &str) -> bool {
        self.plugins
            .as_ref()
            .is_none_or(|list| list.iter().any(|p| p == plugin))
    }

    /// What a plugin of this node that asks for `wanted` holds.
    pub fn grant(&self, wanted: &[String]) -> Vec<String> {
        match &self.capabilities {
            None => wanted.to_vec(),
            Some(allow) => wanted
                .iter()
                .filter(|c| allow.contains(c))
                .cloned()
                .collect(),
        }
    }
}

fn default_subject_prefix() -> String {
    DEFAULT_SUBJECT_PREFIX.to_owned()
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: None,
            urls: Vec::new(),
            name: None,
            creds: None,
            nkey_seed_file: None,
            user: None,
            password: None,
            password_file: None,
            password_env: None,
            token: None,
            token_file: None,
            token_env: None,
            ca: None,
            client_cert: None,
            client_key: None,
            local_address: None,
            subject_prefix: default_subject_prefix(),
            inbox_prefix: None,
            nodes: Default::default(),
        }
    }
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mask = |s: &Option<String>| s.as_ref().map(|_| crate::storage::SECRET_MASK);
        f.debug_struct("NatsConfig")
            .field("url", &self.url)
            .field("urls", &self.urls)
            .field("name", &self.name)
            .field("creds", &self.creds)
            .field("nkey_seed_file", &self.nkey_seed_file)
            .field("user", &self.user)
            .field("password", &mask(&self.password))
            .field("password_file", &self.password_file)
            .field("password_env", &self.password_env)
            .field("token", &mask(&self.token))
            .field("token_file", &self.token_file)
            .field("token_env", &self.token_env)
            .field("ca", &self.ca)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field("local_address", &self.local_address)
            .field("subject_prefix", &self.subject_prefix)
            .field("inbox_prefix", &self.inbox_prefix)
            .field("nodes", &self.nodes)
            .finish()
    }
}

/// How a [`NatsConfig`] logs in, with the secrets still where the config says they are
/// (read by [`connect`](super::connect)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthKind {
    /// No credentials.
    None,
    /// `creds`.
    Creds,
    /// `nkey_seed_file`.
    Nkey,
    /// `user` + a password source.
    UserPassword,
    /// A token source.
    Token,
}

impl NatsConfig {
    /// The configured server URLs, `url` or `urls`, in order.
    pub fn servers(&self) -> Vec<&str> {
        match &self.url {
            Some(u) => vec![u.as_str()],
            None => self.urls.iter().map(String::as_str).collect(),
        }
    }

    /// Makes relative file paths (`creds`, `nkey_seed_file`, `password_file`,
    /// `token_file`, `ca`, `client_cert`, `client_key`) relative to `base` (the data dir).
    pub fn resolve_paths(&mut self, base: &Path) {
        for p in [
            &mut self.creds,
            &mut self.nkey_seed_file,
            &mut self.password_file,
            &mut self.token_file,
            &mut self.ca,
            &mut self.client_cert,
            &mut self.client_key,
        ]
        .into_iter()
        .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// The one way this config logs in. Assumes [`validate`](Self::validate) passed.
    pub fn auth_kind(&self) -> AuthKind {
        if self.creds.is_some() {
            AuthKind::Creds
        } else if self.nkey_seed_file.is_some() {
            AuthKind::Nkey
        } else if self.user.is_some() {
            AuthKind::UserPassword
        } else if self.token.is_some() || self.token_file.is_some() || self.token_env.is_some() {
            AuthKind::Token
        } else {
            AuthKind::None
        }
    }

    /// The parsed `local_address` (an IP alone means port 0), or `None` when unset.
    ///
    /// # Errors
    /// [`NatsError::Config`] naming `local_address` when it is neither an IP nor `IP:PORT`.
    pub fn local_socket_addr(&self) -> Result<Option<SocketAddr>, NatsError> {
        let Some(text) = self.local_address.as_deref() else {
            return Ok(None);
        };
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Some(addr));
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Some(SocketAddr::new(ip, 0)));
        }
        Err(NatsError::config(
            "local_address",
            format!(
                "`{text}` is not an IP address or IP:PORT (e.g. \"127.0.0.2\" or \"10.0.0.5:0\")"
            ),
        ))
    }

    /// Checks the table without touching files, the environment or the network: one
    /// server source with valid `nats://` / `tls://` URLs carrying no credentials, at most
    /// one way to log in with its parts complete, both or neither of `client_cert` /
    /// `client_key`, and well-formed `name`, `local_address` and `subject_prefix`.
    ///
    /// # Errors
    /// [`NatsError::Config`] naming the first offending field.
    pub fn validate(&self) -> Result<(), NatsError> {
        // Servers.
        if self.url.is_some() && !self.urls.is_empty() {
            return Err(NatsError::config("urls", "set `url` or `urls`, not both"));
        }
        let field = if self.url.is_some() { "url" } else { "urls" };
        let servers = self.servers();
        if servers.is_empty() {
            return Err(NatsError::config(
                "url",
                "no NATS server: set `url` (or `urls`), e.g. url = \"nats://127.0.0.1:4222\"",
            ));
        }
        for s in servers {
            check_url(field, s)?;
        }

        // Login: at most one way, each complete.
        let mut ways = Vec::new();
        if self.creds.is_some() {
            ways.push("creds");
        }
        if self.nkey_seed_file.is_some() {
            ways.push("nkey_seed_file");
        }
        let passwords: Vec<&str> = [
            ("password", self.password.is_some()),
            ("password_file", self.password_file.is_some()),
            ("password_env", self.password_env.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .collect();
        if self.user.is_some() || !passwords.is_empty() {
            ways.push("user");
        }
        let tokens: Vec<&str> = [
            ("token", self.token.is_some()),
            ("token_file", self.token_file.is_some()),
            ("token_env", self.token_env.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .collect();
        if !tokens.is_empty() {
            ways.push(tokens[0]);
        }
        if ways.len() > 1 {
            return Err(NatsError::config(
                ways[1],
                format!(
                    "set only one way to log in (`creds`, `nkey_seed_file`, `user` with a password, or a token); found `{}` and `{}`",
                    ways[0], ways[1]
                ),
            ));
        }
        if passwords.len() > 1 {
            return Err(NatsError::config(
                passwords[1],
                format!(
                    "set one of `password`, `password_file`, `password_env`; found `{}` and `{}`",
                    passwords[0], passwords[1]
                ),
            ));
        }
        if tokens.len() > 1 {
            return Err(NatsError::config(
                tokens[1],
                format!(
                    "set one of `token`, `token_file`, `token_env`; found `{}` and `{}`",
                    tokens[0], tokens[1]
                ),
            ));
        }
        match (&self.user, passwords.first()) {
            (Some(u), None) => {
                return Err(NatsError::config(
                    "user",
                    format!("user `{u}` needs `password_file`, `password_env` or `password`"),
                ))
            }
            (None, Some(p)) => {
                return Err(NatsError::config(p, "needs `user` as well"));
            }
            (Some(u), Some(_)) if u.is_empty() => {
                return Err(NatsError::config("user", "is empty"));
            }
            _ => {}
        }
        for (name, value) in [("password", &self.password), ("token", &self.token)] {
            if value.as_deref() == Some("") {
                return Err(NatsError::config(name, "is empty"));
            }
        }
        for (name, var) in [
            ("password_env", &self.password_env),
            ("token_env", &self.token_env),
        ] {
            if let Some(v) = var {
                if v.is_empty() || v.contains('=') || v.contains('\0') {
                    return Err(NatsError::config(
                        name,
                        format!("`{v}` is not an environment variable name"),
                    ));
                }
            }
        }
        for (name, path) in [
            ("creds", &self.creds),
            ("nkey_seed_file", &self.nkey_seed_file),
            ("password_file", &self.password_file),
            ("token_file", &self.token_file),
            ("ca", &self.ca),
            ("client_cert", &self.client_cert),
            ("client_key", &self.client_key),
        ] {
            if path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                return Err(NatsError::config(name, "is an empty path"));
            }
        }

        // TLS.
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => {
                return Err(NatsError::config(
                    "client_cert",
                    "needs `client_key` as well (mutual TLS takes both)",
                ))
            }
            (None, Some(_)) => {
                return Err(NatsError::config(
                    "client_key",
                    "needs `client_cert` as well (mutual TLS takes both)",
                ))
            }
            _ => {}
        }

        // Names.
        if let Some(name) = &self.name {
            check_name(name)?;
        }
        self.local_socket_addr()?;
        if let Some(prefix) = &self.inbox_prefix {
            let ok = !prefix.is_empty()
                && prefix.len() <= 64
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(NatsError::config(
                    "inbox_prefix",
                    format!("`{prefix}` must be 1 to 64 of ASCII letters, digits, `_` and `-` (one subject token, e.g. \"_INBOX_pool\")"),
                ));
            }
        }
        check_subject_prefix(&self.subject_prefix)
    }
}

/// `url` / `urls`: a `nats://` or `tls://` URL (or `host:port`) without credentials.
fn check_url(field: &'static str, url: &str) -> Result<(), NatsError> {
    let addr: async_nats::ServerAddr = url.parse().map_err(|e| {
        NatsError::config(
            field,
            format!("`{url}` is not a NATS server URL (nats://HOST:PORT or tls://HOST:PORT): {e}"),
        )
    })?;
    if !matches!(addr.scheme(), "nats" | "tls") {
        return Err(NatsError::config(
            field,
            format!(
                "`{url}`: only nats:// and tls:// URLs are supported, not {}://",
                addr.scheme()
            ),
        ));
    }
    let inner = addr.into_inner();
    if !inner.username().is_empty() || inner.password().is_some() {
        // Not echoing the URL: it holds a secret.
        return Err(NatsError::config(
            field,
            "a URL must not carry credentials; use `user` with `password_file` / `password_env`, a token source, `nkey_seed_file` or `creds`",
        ));
    }
    if inner.host_str().is_none_or(str::is_empty) {
        return Err(NatsError::config(field, format!("`{url}` has no host")));
    }
    Ok(())
}

/// `name`: 1 to 64 of ASCII letters, digits, `_`, `-` (one subject token, later).
fn check_name(name: &str) -> Result<(), NatsError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(NatsError::config(
            "name",
            format!("`{name}` must be 1 to 64 of ASCII letters, digits, `_` and `-`"),
        ))
    }
}

/// `subject_prefix`: dot-separated tokens of printable ASCII without wildcards.
fn check_subject_prefix(prefix: &str) -> Result<(), NatsError> {
    let bad_token = prefix.split('.').find(|t| {
        t.is_empty()
            || !t
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'*' && b != b'>')
    });
    match bad_token {
        None => Ok(()),
        Some(_) => Err(NatsError::config(
            "subject_prefix",
            format!("`{prefix}` must be one or more `.`-separated tokens of printable ASCII without spaces, `*` or `>` (e.g. \"hearth\" or \"hearth.prod\")"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        nats: NatsConfig,
    }

    fn parse(text: &str) -> Result<NatsConfig, String> {
        toml::from_str::<File>(text)
            .map(|f| f.nats)
            .map_err(|e| e.to_string())
    }

    fn invalid(text: &str) -> String {
        let cfg = parse(text).unwrap_or_else(|e| panic!("does not parse: {e}"));
        match cfg.validate() {
            Err(e) => e.to_string(),
            Ok(()) => panic!("validated: {text}"),
        }
    }

    #[test]
    fn full_table_parses_and_validates() {
        let cfg = parse(
            r#"
[nats]
urls = ["tls://a.example:4222", "b.example:4333"]
name = "gpu-1"
user = "node-gpu-1"
password_file = "nats.pw"
ca = "/etc/hearth/ca.pem"
client_cert = "node.pem"
client_key = "node.key"
local_address = "127.0.0.2"
subject_prefix = "hearth.prod"
"#,
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.servers(), ["tls://a.example:4222", "b.example:4333"]);
        assert_eq!(cfg.auth_kind(), AuthKind::UserPassword);
        assert_eq!(
            cfg.local_socket_addr().unwrap(),
            Some("127.0.0.2:0".parse().unwrap())
        );
        let mut resolved = cfg.clone();
        resolved.resolve_paths(Path::new("/data"));
        assert_eq!(
            resolved.password_file.as_deref(),
            Some(Path::new("/data/nats.pw"))
        );
        assert_eq!(
            resolved.ca.as_deref(),
            Some(Path::new("/etc/hearth/ca.pem"))
        );
        assert_eq!(
            resolved.client_key.as_deref(),
            Some(Path::new("/data/node.key"))
        );
    }

    #[test]
    fn defaults() {
        let cfg = parse("[nats]\nurl = \"nats://127.0.0.1:4222\"\n").unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.subject_prefix, "hearth");
        assert_eq!(cfg.auth_kind(), AuthKind::None);
        assert_eq!(cfg.local_socket_addr().unwrap(), None);
        assert_eq!(NatsConfig::default().subject_prefix, DEFAULT_SUBJECT_PREFIX);
        for (text, kind) in [
            ("creds = \"x.creds\"", AuthKind::Creds),
            ("nkey_seed_file = \"x.nk\"", AuthKind::Nkey),
            ("token_env = \"HEARTH_NATS_TOKEN\"", AuthKind::Token),
            ("token = \"t\"", AuthKind::Token),
            (
                "user = \"u\"\npassword_env = \"PW\"",
                AuthKind::UserPassword,
            ),
        ] {
            let cfg = parse(&format!("[nats]\nurl = \"h:1\"\n{text}\n")).unwrap();
            cfg.validate().unwrap();
            assert_eq!(cfg.auth_kind(), kind, "{text}");
        }
    }

    #[test]
    fn node_policies_and_inbox_prefix() {
        let cfg = parse(
            r#"
[nats]
url = "nats://127.0.0.1:4222"
inbox_prefix = "_INBOX_pool"
[nats.nodes.gpu-1]
capabilities = ["memory", "knowledge"]
plugins = ["ocr"]
[nats.nodes."*"]
capabilities = []
"#,
        )
        .unwrap();
        cfg.validate().unwrap();
        let gpu = &cfg.nodes["gpu-1"];
        let wanted = ["memory".to_string(), "settings_secrets".to_string()];
        assert_eq!(gpu.grant(&wanted), vec!["memory".to_string()]);
        assert!(gpu.allows_plugin("ocr") && !gpu.allows_plugin("shell"));
        assert!(cfg.nodes["*"].grant(&wanted).is_empty());
        assert_eq!(NodePolicy::default().grant(&wanted), wanted.to_vec());
        let err = parse("[nats]\nurl = \"h:1\"\n[nats.nodes.a]\ncaps = []\n").unwrap_err();
        assert!(err.contains("unknown field `caps`"), "{err}");
        let mut bad = cfg.clone();
        bad.inbox_prefix = Some("_INBOX.x".into());
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("inbox_prefix"));
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = parse("[nats]\nurl = \"h:1\"\npasword = \"x\"\n").unwrap_err();
        assert!(err.contains("unknown field `pasword`"), "{err}");
        let err = parse("[nats]\nurl = \"h:1\"\nprefix = \"x\"\n").unwrap_err();
        assert!(err.contains("unknown field `prefix`"), "{err}");
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("", "[nats] url: no NATS server"),
            (
                "url = \"h:1\"\nurls = [\"h:2\"]",
                "[nats] urls: set `url` or `urls`, not both",
            ),
            ("url = \"http://h:1\"", "[nats] url: `http://h:1`"),
            (
                "urls = [\"h:1\", \"ws://h:2\"]",
                "[nats] urls: `ws://h:2`: only nats:// and tls://",
            ),
            ("url = \"nats://\"", "[nats] url: `nats://`"),
            (
                "url = \"nats://bob:hunter2@h:1\"",
                "[nats] url: a URL must not carry credentials",
            ),
            (
                "url = \"nats://s3cret@h:1\"",
                "[nats] url: a URL must not carry credentials",
            ),
            (
                "url = \"h:1\"\ncreds = \"a\"\ntoken = \"t\"",
                "[nats] token: set only one way to log in",
            ),
            (
                "url = \"h:1\"\nnkey_seed_file = \"a\"\nuser = \"u\"\npassword = \"p\"",
                "[nats] user: set only one way",
            ),
            (
                "url = \"h:1\"\nuser = \"u\"",
                "[nats] user: user `u` needs `password_file`",
            ),
            (
                "url = \"h:1\"\npassword_file = \"p\"",
                "[nats] password_file: needs `user`",
            ),
            (
                "url = \"h:1\"\nuser = \"u\"\npassword = \"p\"\npassword_env = \"P\"",
                "[nats] password_env: set one of `password`",
            ),
            (
                "url = \"h:1\"\ntoken_file = \"t\"\ntoken_env = \"T\"",
                "[nats] token_env: set one of `token`",
            ),
            ("url = \"h:1\"\ntoken = \"\"", "[nats] token: is empty"),
            (
                "url = \"h:1\"\ntoken_env = \"A=B\"",
                "[nats] token_env: `A=B` is not an environment variable name",
            ),
            (
                "url = \"h:1\"\ncreds = \"\"",
                "[nats] creds: is an empty path",
            ),
            (
                "url = \"h:1\"\nclient_cert = \"c\"",
                "[nats] client_cert: needs `client_key`",
            ),
            (
                "url = \"h:1\"\nclient_key = \"k\"",
                "[nats] client_key: needs `client_cert`",
            ),
            (
                "url = \"h:1\"\nname = \"gpu.1\"",
                "[nats] name: `gpu.1` must be",
            ),
            ("url = \"h:1\"\nname = \"\"", "[nats] name: `` must be"),
            (
                "url = \"h:1\"\nlocal_address = \"localhost\"",
                "[nats] local_address: `localhost` is not an IP",
            ),
            (
                "url = \"h:1\"\nsubject_prefix = \"a..b\"",
                "[nats] subject_prefix: `a..b`",
            ),
            (
                "url = \"h:1\"\nsubject_prefix = \"hearth.>\"",
                "[nats] subject_prefix:",
            ),
            (
                "url = \"h:1\"\nsubject_prefix = \"a b\"",
                "[nats] subject_prefix:",
            ),
        ];
        for (body, want) in cases {
            let err = invalid(&format!("[nats]\n{body}\n"));
            assert!(
                err.starts_with(want),
                "{body:?}: got {err:?}, want {want:?}…"
            );
        }
        // The credential in a URL is not echoed.
        let err = invalid("[nats]\nurl = \"nats://bob:hunter2@h:1\"\n");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn local_address_forms() {
        for (text, want) in [
            ("127.0.0.2", "127.0.0.2:0"),
            ("127.0.0.3:4000", "127.0.0.3:4000"),
            ("::1", "[::1]:0"),
            ("[::1]:5", "[::1]:5"),
        ] {
            let cfg = NatsConfig {
                url: Some("h:1".into()),
                local_address: Some(text.into()),
                ..NatsConfig::default()
            };
            assert_eq!(
                cfg.local_socket_addr().unwrap(),
                Some(want.parse().unwrap()),
                "{text}"
            );
        }
    }

    #[test]
    fn debug_masks_inline_secrets() {
        let cfg = NatsConfig {
            url: Some("h:1".into()),
            user: Some("u".into()),
            password: Some("hunter2".into()),
            token: Some("s3cret-token".into()),
            ..NatsConfig::default()
        };
        let shown = format!("{cfg:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret-token"),
            "{shown}"
        );
        assert!(shown.contains(crate::storage::SECRET_MASK), "{shown}");
    }
}
