//! `<data_dir>/hearth.toml`: LLM sources and agent settings, plus the quick-start
//! overrides (`--llm-url` / `HEARTH_LLM_URL` and friends).
//!
//! ```toml
//! [[sources]]
//! name = "openai"
//! base_url = "https://api.openai.com/v1"
//! model = "gpt-4o-mini"
//! api_key_env = "OPENAI_API_KEY"   # or api_key = "sk-…"
//! adapter = "openai"
//! priority = 1                       # lower is tried first
//! timeout_s = 120
//! max_concurrent = 8                 # requests in flight to this source (0 = no limit)
//!
//! [agent]
//! system_prompt = "You are a helpful assistant."
//! max_iterations = 10
//! history_messages = 40
//! stream = true
//! hook_timeout_ms = 5000
//! confirm_timeout_s = 60             # ai.tool `confirm`: how long the user has to answer
//! memory_top_k = 3                   # documents and knowledge entries recalled per message
//! max_concurrent_turns = 64          # turns running at once (different conversations)
//! queue_per_conversation = 32        # messages waiting per conversation; more = "busy"
//! source_queue_timeout_ms = 5000     # wait for a source slot before trying the next
//! turn_timeout_s = 600               # a turn that takes longer is cancelled (0 = none)
//!
//! [memory]
//! text_max_file_mb = 64              # TextMemory: a file never grows past this (0 = no limit)
//! text_max_age_days = 30             # TextMemory: files of older days are deleted (0 = keep)
//! timezone = "Asia/Shanghai"         # TextMemory day files: an IANA zone (default: the system's)
//!
//! [llm]
//! adapter_timeout_ms = 2000          # wall time of one adapter transform (and of loading a
//!                                    # script); past it that request fails alone
//!
//! [adapters]
//! http_allow = ["auth.example.com:443", "10.0.0.5:8080"]
//!                                    # hosts adapter scripts' http_get / http_post may reach
//!                                    # besides the source's own; the only way to reach a
//!                                    # loopback, LAN or link-local address
//! ```

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// Config file name inside the data dir.
pub const CONFIG_FILE: &str = "hearth.toml";

/// One LLM endpoint. Its `Debug` output masks the inline API key.
#[derive(Clone, PartialEq)]
pub struct Source {
    /// Unique name.
    pub name: String,
    /// API base URL, e.g. `https://api.openai.com/v1`; the adapter's endpoint is appended.
    pub base_url: String,
    /// Model name sent in requests.
    pub model: String,
    /// The key itself, when configured inline.
    pub api_key: Option<String>,
    /// Name of an environment variable holding the key.
    pub api_key_env: Option<String>,
    /// Adapter name (`openai`, …).
    pub adapter: String,
    /// Lower is tried first.
    pub priority: i64,
    /// Request timeout (whole response, or between streamed chunks).
    pub timeout: Duration,
    /// Most requests in flight to this source at once (seed provider config
    /// `max_concurrent`); 0 = no limit. Requests beyond it wait for a slot.
    pub max_concurrent: u32,
}

/// Like a derived `Debug`, with an inline `api_key` shown as
/// [`SECRET_MASK`](crate::storage::SECRET_MASK): the key is a secret.
impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field(
                "api_key",
                &self.api_key.as_ref().map(|_| crate::storage::SECRET_MASK),
            )
            .field("api_key_env", &self.api_key_env)
            .field("adapter", &self.adapter)
            .field("priority", &self.priority)
            .field("timeout", &self.timeout)
            .field("max_concurrent", &self.max_concurrent)
            .finish()
    }
}

impl Source {
    /// The API key: inline, else from the named environment variable; `None` when
    /// neither is set (local servers need none).
    pub fn api_key(&self) -> Option<String> {
        self.api_key
            .clone()
            .filter(|k| !k.is_empty())
            .or_else(|| {
                self.api_key_env
                    .as_ref()
                    .and_then(|v| std::env::var(v).ok())
            })
            .filter(|k| !k.is_empty())
    }
}

/// Agent behaviour (`[agent]`).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSettings {
    /// System prompt put first in every request.
    pub system_prompt: String,
    /// LLM rounds per turn before the loop stops with a clear message.
    pub max_iterations: u32,
    /// Messages of history kept per conversation.
    pub history_messages: usize,
    /// Ask the LLM for SSE streaming.
    pub stream: bool,
    /// Time one stage hook may take.
    pub hook_timeout: Duration,
    /// How long an `ai.tool` `confirm` question waits for the user's answer; no
    /// answer = the call is not run.
    pub confirm_timeout: Duration,
    /// DocMemory documents and Knowledge entries added to the context per message,
    /// each (0 = none; graph memory is recalled regardless).
    pub memory_top_k: u32,
    /// Turns (of different conversations) running at once; more wait, scheduled by
    /// priority and round-robin across conversations.
    pub max_concurrent_turns: usize,
    /// Messages that may wait per conversation (the running one not counted); one
    /// more is refused as "conversation busy".
    pub queue_per_conversation: usize,
    /// How long an LLM request waits for a slot of a source at its `max_concurrent`
    /// before the next source by priority is tried.
    pub source_queue_timeout: Duration,
    /// A turn running longer than this is cancelled with a clear error (`None` = no
    /// limit). Waits for LLM source slots count toward it.
    pub turn_timeout: Option<Duration>,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            system_prompt:
                "You are Hearth, a helpful assistant. Use the tools you are given when they help."
                    .into(),
            max_iterations: 10,
            history_messages: 40,
            stream: true,
            hook_timeout: Duration::from_millis(crate::pipeline::DEFAULT_HOOK_TIMEOUT_MS),
            confirm_timeout: Duration::from_secs(60),
            memory_top_k: 3,
            max_concurrent_turns: 64,
            queue_per_conversation: 32,
            source_queue_timeout: Duration::from_millis(5000),
            turn_timeout: Some(Duration::from_secs(600)),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    sources: Vec<RawSource>,
    #[serde(default)]
    agent: RawAgent,
    #[serde(default)]
    memory: RawMemory,
    #[serde(default)]
    llm: RawLlm,
    #[serde(default)]
    adapters: RawAdapters,
    nats: Option<crate::nats::NatsConfig>,
    #[serde(default)]
    storage: crate::storage::StorageConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLlm {
    adapter_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdapters {
    #[serde(default)]
    http_allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    text_max_file_mb: Option<f64>,
    text_max_age_days: Option<u32>,
    timezone: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    base_url: String,
    #[serde(default)]
    model: String,
    api_key: Option<String>,
    api_key_env: Option<String>,
    #[serde(default = "default_adapter")]
    adapter: String,
    #[serde(default)]
    priority: i64,
    timeout_s: Option<f64>,
    #[serde(default)]
    max_concurrent: u32,
}

fn default_adapter() -> String {
    "openai".into()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    system_prompt: Option<String>,
    max_iterations: Option<u32>,
    history_messages: Option<usize>,
    stream: Option<bool>,
    hook_timeout_ms: Option<u64>,
    confirm_timeout_s: Option<f64>,
    memory_top_k: Option<u32>,
    max_concurrent_turns: Option<usize>,
    queue_per_conversation: Option<usize>,
    source_queue_timeout_ms: Option<u64>,
    turn_timeout_s: Option<f64>,
}

/// Quick-start overrides from flags or environment: one source that goes first.
#[derive(Debug, Clone, Default)]
pub struct QuickSource {
    /// `--llm-url` / `HEARTH_LLM_URL`.
    pub url: Option<String>,
    /// `--llm-model` / `HEARTH_LLM_MODEL`.
    pub model: Option<String>,
    /// `--llm-adapter` / `HEARTH_LLM_ADAPTER`.
    pub adapter: Option<String>,
}

/// The loaded configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Sources, sorted by priority.
    pub sources: Vec<Source>,
    /// Agent settings.
    pub agent: AgentSettings,
    /// TextMemory file limits (`[memory]`).
    pub text_memory: crate::storage::TextMemoryOptions,
    /// Bounds of adapter scripts: `[llm] adapter_timeout_ms`, `[adapters] http_allow`
    /// (the rest at their defaults).
    pub adapter_limits: crate::adapters::Limits,
    /// `[nats]`: the bus to plugin hosts on other machines; `None` when absent (relative
    /// file paths already made relative to the data dir).
    pub nats: Option<crate::nats::NatsConfig>,
    /// `[storage]`: PostgreSQL shared by several brokers, or (default) SQLite in the
    /// data dir (relative paths already made relative to the data dir).
    pub storage: crate::storage::StorageConfig,
}

impl Config {
    /// Reads `<data_dir>/hearth.toml` (absent = defaults) and puts the quick-start
    /// source, if any, first. Errors name the file and the bad field.
    pub fn load(data_dir: &Path, quick: &QuickSource) -> Result<Config, String> {
        let path = data_dir.join(CONFIG_FILE);
        let raw: RawConfig = match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => RawConfig::default(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let mut sources = Vec::new();
        for s in raw.sources {
            if sources.iter().any(|o: &Source| o.name == s.name) {
                return Err(format!(
                    "{}: source `{}` is defined twice",
                    path.display(),
                    s.name
                ));
            }
            let timeout = s.timeout_s.unwrap_or(120.0);
            if !(timeout.is_finite() && timeout > 0.0) {
                return Err(format!(
                    "{}: source `{}`: timeout_s must be > 0",
                    path.display(),
                    s.name
                ));
            }
            sources.push(Source {
                name: s.name,
                base_url: s.base_url,
                model: s.model,
                api_key: s.api_key,
                api_key_env: s.api_key_env,
                adapter: s.adapter,
                priority: s.priority,
                timeout: Duration::from_secs_f64(timeout),
                max_concurrent: s.max_concurrent,
            });
        }
        sources.sort_by_key(|s| s.priority);
        if let Some(url) = quick.url.clone().filter(|u| !u.is_empty()) {
            sources.insert(
                0,
                Source {
                    name: "cli".into(),
                    base_url: url,
                    model: quick.model.clone().unwrap_or_else(|| "gpt-4o-mini".into()),
                    api_key: None,
                    api_key_env: Some("HEARTH_LLM_API_KEY".into()),
                    adapter: quick.adapter.clone().unwrap_or_else(default_adapter),
                    priority: i64::MIN,
                    timeout: Duration::from_secs(120),
                    max_concurrent: 0,
                },
            );
        }
        let d = AgentSettings::default();
        let a = raw.agent;
        let mut text_memory = crate::storage::TextMemoryOptions::default();
        if let Some(mb) = raw.memory.text_max_file_mb {
            if !(mb.is_finite() && mb >= 0.0) {
                return Err(format!(
                    "{}: [memory] text_max_file_mb must be >= 0",
                    path.display()
                ));
            }
            text_memory.max_file_bytes = (mb * 1024.0 * 1024.0) as u64;
        }
        if let Some(days) = raw.memory.text_max_age_days {
            text_memory.max_age_days = days;
        }
        if let Some(zone) = raw.memory.timezone.as_deref() {
            text_memory.time_zone = jiff::tz::TimeZone::get(zone.trim()).map_err(|e| {
                format!(
                    "{}: [memory] timezone: `{zone}` is not a time zone ({e}); use an IANA name such as Asia/Shanghai, or UTC",
                    path.display()
                )
            })?;
        }
        let mut adapter_limits = crate::adapters::Limits::default();
        match raw.llm.adapter_timeout_ms {
            Some(0) => {
                return Err(format!(
                    "{}: [llm] adapter_timeout_ms must be > 0",
                    path.display()
                ))
            }
            Some(ms) => adapter_limits.timeout = Duration::from_millis(ms),
            None => {}
        }
        for entry in &raw.adapters.http_allow {
            let host = entry
                .parse()
                .map_err(|e| format!("{}: [adapters] http_allow: {e}", path.display()))?;
            adapter_limits.http_allow.push(host);
        }
        let nats = raw.nats.map(|mut n| {
            n.resolve_paths(data_dir);
            n
        });
        let mut storage = raw.storage;
        storage.resolve_paths(data_dir);
        storage
            .lease_ttl()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Config {
            sources,
            text_memory,
            adapter_limits,
            nats,
            storage,
            agent: AgentSettings {
                system_prompt: a.system_prompt.unwrap_or(d.system_prompt),
                max_iterations: a.max_iterations.unwrap_or(d.max_iterations).max(1),
                history_messages: a.history_messages.unwrap_or(d.history_messages),
                stream: a.stream.unwrap_or(d.stream),
                hook_timeout: a
                    .hook_timeout_ms
                    .map(Duration::from_millis)
                    .unwrap_or(d.hook_timeout),
                confirm_timeout: match a.confirm_timeout_s {
                    Some(t) if !(t.is_finite() && t > 0.0) => {
                        return Err(format!(
                            "{}: [agent] confirm_timeout_s must be > 0",
                            path.display()
                        ))
                    }
                    Some(t) => Duration::from_secs_f64(t),
                    None => d.confirm_timeout,
                },
                memory_top_k: a
                    .memory_top_k
                    .unwrap_or(d.memory_top_k)
                    .min(crate::storage::MAX_TOP_K),
                max_concurrent_turns: match a.max_concurrent_turns {
                    Some(0) => {
                        return Err(format!(
                            "{}: [agent] max_concurrent_turns must be >= 1",
                            path.display()
                        ))
                    }
                    Some(n) => n,
                    None => d.max_concurrent_turns,
                },
                queue_per_conversation: a
                    .queue_per_conversation
                    .unwrap_or(d.queue_per_conversation),
                source_queue_timeout: a
                    .source_queue_timeout_ms
                    .map(Duration::from_millis)
                    .unwrap_or(d.source_queue_timeout),
                turn_timeout: match a.turn_timeout_s {
                    Some(0.0) => None,
                    Some(t) if !(t.is_finite() && t > 0.0) => {
                        return Err(format!(
                            "{}: [agent] turn_timeout_s must be >= 0 (0 = no limit)",
                            path.display()
                        ))
                    }
                    Some(t) => Some(Duration::from_secs_f64(t)),
                    None => d.turn_timeout,
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_load_sorted_and_quick_source_goes_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            r#"
            [[sources]]
            name = "b"
            base_url = "http://b/v1"
            priority = 2
            [[sources]]
            name = "a"
            base_url = "http://a/v1"
            model = "m"
            api_key = "k"
            priority = 1
            [agent]
            max_iterations = 3
            "#,
        )
        .unwrap();
        let c = Config::load(dir.path(), &QuickSource::default()).unwrap();
        assert_eq!(
            c.sources
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(c.sources[0].api_key().as_deref(), Some("k"));
        // The inline key is a secret: never in Debug output (logs).
        let debug = format!("{:?}", c.sources[0]);
        assert!(
            !debug.contains("\"k\"") && debug.contains(crate::storage::SECRET_MASK),
            "{debug}"
        );
        assert_eq!(c.agent.max_iterations, 3);
        let quick = QuickSource {
            url: Some("http://127.0.0.1:1/v1".into()),
            ..Default::default()
        };
        let c = Config::load(dir.path(), &quick).unwrap();
        assert_eq!(c.sources[0].name, "cli");
    }

    #[test]
    fn agent_and_memory_sections_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(CONFIG_FILE);
        std::fs::write(
            &file,
            "[agent]\nconfirm_timeout_s = 2.5\nmemory_top_k = 7\nmax_concurrent_turns = 3\n\
             queue_per_conversation = 0\nsource_queue_timeout_ms = 250\nturn_timeout_s = 0\n\
             [memory]\ntext_max_file_mb = 0.5\ntext_max_age_days = 0\n",
        )
        .unwrap();
        let c = Config::load(dir.path(), &QuickSource::default()).unwrap();
        assert_eq!(c.agent.confirm_timeout, Duration::from_millis(2500));
        assert_eq!(c.agent.memory_top_k, 7);
        assert_eq!(c.agent.max_concurrent_turns, 3);
        assert_eq!(c.agent.queue_per_conversation, 0);
        assert_eq!(c.agent.source_queue_timeout, Duration::from_millis(250));
        assert_eq!(c.agent.turn_timeout, None);
        assert_eq!(c.text_memory.max_file_bytes, 512 * 1024);
        assert_eq!(c.text_memory.max_age_days, 0);
        std::fs::write(&file, "[agent]\nconfirm_timeout_s = 0\n").unwrap();
        let err = Config::load(dir.path(), &QuickSource::default()).unwrap_err();
        assert!(err.contains("confirm_timeout_s must be > 0"), "{err}");
        std::fs::write(&file, "[agent]\nmax_concurrent_turns = 0\n").unwrap();
        let err = Config::load(dir.path(), &QuickSource::default()).unwrap_err();
        assert!(err.contains("max_concurrent_turns must be >= 1"), "{err}");
        std::fs::write(&file, "[memory]\ntimezone = \"Asia/Shanghai\"\n").unwrap();
        let c = Config::load(dir.path(), &QuickSource::default()).unwrap();
        assert_eq!(c.text_memory.time_zone.iana_name(), Some("Asia/Shanghai"));
        std::fs::write(&file, "[memory]\ntimezone = \"Mars/Olympus\"\n").unwrap();
        let err = Config::load(dir.path(), &QuickSource::default()).unwrap_err();
        assert!(err.contains("[memory] timezone: `Mars/Olympus`"), "{err}");
        std::fs::write(&file, "[memory]\ntext_max_age = 3\n").unwrap();
        let err = Config::load(dir.path(), &QuickSource::default()).unwrap_err();
        assert!(err.contains("text_max_age"), "{err}");
    }

    #[test]
    fn adapter_timeout_and_http_allow_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(CONFIG_FILE);
        let c = Config::load(dir.path(), &QuickSource::default()).unwrap();
        assert_eq!(c.adapter_limits.timeout, Duration::from_millis(2000));
        assert!(c.adapter_limits.http_allow.is_empty());
        std::fs::write(
            &file,
            "[llm]\nadapter_timeout_ms = 750\n\
             [adapters]\nhttp_allow = [\"Auth.Example.com:443\", \"10.0.0.5:8080\"]\n",
        )
        .unwrap();
        let c = Config::load(dir.path(), &QuickSource::default()).unwrap();
        assert_eq!(c.adapter_limits.timeout, Duration::from_millis(750));
        let allow: Vec<String> = c
            .adapter_limits
            .http_allow
            .iter()
            .map(|h| h.to_string())
            .collect();
        assert_eq!(allow, ["auth.example.com:443", "10.0.0.5:8080"]);
        std::fs::write(&file, "[llm]\nadapter_timeout_ms = 0\n").unwrap();
        let err = Config::load(dir.path(), &QuickSource::default()).unwrap_err();
        assert!(
            err.contains("[llm] adapter_timeout_ms must be > 0"),
            "{err}"
        );
        std::fs::write(&file, "[adapters]\nhttp_allow = [\"example.com\"]\n").unwrap();
        let err = Config::load(dir.path(), &QuickSource::default()).unwrap_err();
        assert!(
            err.contains("[adapters] http_allow: `example.com`: no port"),
            "{err}"
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            "[[sources]]\nname = \"x\"\nbase_url = 3\n",
        )
        .unwrap();
        let err = Config::load(dir.path(), &QuickSource::default()).unwrap_err();
        assert!(
            err.contains("hearth.toml") && err.contains("base_url"),
            "{err}"
        );
    }
}
