//! MCP both ways, through `rmcp` (the official Rust SDK).
//!
//! - [`host`]: MCP servers as supervised plugins (`"runtime": "mcp"` in
//!   `plugin.json`, stdio `command` or Streamable HTTP `url`).
//! - [`convert`]: MCP tools and results ↔ Hearth's.
//! - [`import`]: `mcpServers` / `servers` files of Claude Desktop, Claude Code,
//!   Cursor and VS Code → plugin folders (`hearth mcp import`, `<data_dir>/mcp.json`).
//!
//! Value references in an MCP manifest's `env` and `headers` ([`resolve`]):
//! `${env:NAME}` (the broker's environment), `${env:NAME:-default}`, and
//! `${setting:KEY}` (the plugin's own setting `KEY`, e.g. a secret bearer token set
//! with `hearth settings set`), resolved at each start, never written back.

pub mod cli;
pub mod convert;
pub mod host;
pub mod import;
pub mod serve;

use std::collections::BTreeMap;

/// Installs the process's rustls crypto provider (ring, as the rest of the broker
/// uses) once, before any `rmcp` HTTP client is built: its reqwest 0.13 has none of
/// its own in Hearth's build and panics without one.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The `${setting:KEY}` keys `values` refer to.
pub fn setting_refs<'a>(values: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut keys = Vec::new();
    for v in values {
        let mut rest = v.as_str();
        while let Some(start) = rest.find("${setting:") {
            let after = &rest[start + "${setting:".len()..];
            let Some(end) = after.find('}') else { break };
            keys.push(after[..end].to_string());
            rest = &after[end + 1..];
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Resolves the references in `value` (see the module docs) from `env` and
/// `settings` (key → value of the plugin's own settings). Errors name the reference:
/// an unset variable without a default, a setting that is not set, an unknown kind
/// (`${input:…}` cannot be asked for here), an unterminated `${`.
pub fn resolve(
    value: &str,
    env: &dyn Fn(&str) -> Option<String>,
    settings: &BTreeMap<String, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("`{value}`: `${{` without a closing `}}`"))?;
        let reference = &after[..end];
        let resolved = match reference.split_once(':') {
            Some(("env", name)) => {
                let (name, default) = match name.split_once(":-") {
                    Some((n, d)) => (n, Some(d)),
                    None => (name, None),
                };
                match (env(name), default) {
                    (Some(v), _) => v,
                    (None, Some(d)) => d.to_string(),
                    (None, None) => {
                        return Err(format!(
                            "`${{{reference}}}`: environment variable {name} is not set in the broker's environment"
                        ))
                    }
                }
            }
            Some(("setting", key)) => settings.get(key).cloned().ok_or_else(|| {
                format!("`${{{reference}}}`: setting `{key}` is not set (hearth settings set <plugin> {key} VALUE)")
            })?,
            _ => {
                return Err(format!(
                    "`${{{reference}}}` is not a reference Hearth resolves (use ${{env:NAME}}, ${{env:NAME:-default}} or ${{setting:KEY}})"
                ))
            }
        };
        out.push_str(&resolved);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_resolve_from_env_defaults_and_settings() {
        let env = |k: &str| (k == "TOKEN").then(|| "abc".to_string());
        let settings = BTreeMap::from([("api_key".to_string(), "s3cret".to_string())]);
        assert_eq!(
            resolve("Bearer ${env:TOKEN}", &env, &settings).unwrap(),
            "Bearer abc"
        );
        assert_eq!(resolve("${env:NOPE:-d}/x", &env, &settings).unwrap(), "d/x");
        assert_eq!(
            resolve("k=${setting:api_key}", &env, &settings).unwrap(),
            "k=s3cret"
        );
        assert!(resolve("${env:NOPE}", &env, &settings)
            .unwrap_err()
            .contains("NOPE is not set"));
        assert!(resolve("${setting:other}", &env, &settings)
            .unwrap_err()
            .contains("`other` is not set"));
        assert!(resolve("${input:pat}", &env, &settings)
            .unwrap_err()
            .contains("not a reference"));
        assert!(resolve("${env:X", &env, &settings).is_err());
        assert_eq!(
            setting_refs([&"a ${setting:x} ${setting:y}".to_string()]),
            vec!["x", "y"]
        );
    }
}
