//! Prometheus metrics (`--http-listen` … `/metrics`), with `prometheus-client`.
//!
//! Recording is off — every `record_*` is one `OnceLock::get` — until [`enable`] is
//! called, which `hearth run` does only when `--http-listen` is given. Families and
//! their labels (closed value sets; no conversation, call or user ids):
//!
//! | name | type | labels |
//! |---|---|---|
//! | `hearth_plugin_up` | gauge 0/1 | `plugin` (scrape time) |
//! | `hearth_plugin_restarts_total` | counter | `plugin` (scrape time) |
//! | `hearth_tool_calls_total` | counter | `tool`, `outcome` ([`Outcome`]) |
//! | `hearth_tool_call_duration_seconds` | histogram | `tool` |
//! | `hearth_hook_duration_seconds` | histogram | `stage`, `plugin` |
//! | `hearth_turns_total` | counter | `outcome` (`ok`, `error`, `short_circuit`, `cancelled`) |
//! | `hearth_turn_duration_seconds` | histogram | — |
//! | `hearth_turns_waiting` / `hearth_turns_running` | gauge | — (scrape time) |
//! | `hearth_llm_requests_total` | counter | `source`, `outcome` (`ok`, `error`, `timeout`, `rate_limited`, `cancelled`) |
//! | `gen_ai_client_inference_duration_seconds` | histogram | `gen_ai_operation_name`, `gen_ai_provider_name`, `gen_ai_request_model`, `error_type` |
//! | `gen_ai_client_inference_usage_{input,output}_tokens_total` | counter | the same + `gen_ai_token_modality` |
//! | `gen_ai_execute_tool_duration_seconds` | histogram | `gen_ai_tool_name`, `error_type` |
//! | `hearth_nats_connected` | gauge 0/1 | — (scrape time; brokers with `--nats`, nodes) |
//! | `hearth_nats_connects_total` | counter | — (first connect and every reconnect) |
//! | `hearth_nats_messages_total` / `hearth_nats_bytes_total` | counter | `direction` (`in`, `out`) |
//! | `hearth_nats_nodes` | gauge | — (brokers: plugin hosts heard from) |
//! | `process_*` | | cpu, memory, fds, threads, start time (scrape time, /proc) |
//! | `hearth_build_info` | gauge 1 | `version`, `commit` |

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::names::{CALL_BUCKETS, GENAI_BUCKETS, TURN_BUCKETS};
use crate::agent::Agent;
use crate::supervisor::Supervisor;

/// How a tool call ended, as the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool answered with success.
    Ok,
    /// The tool answered with an error (its handler said no or failed).
    Error,
    /// No answer within the timeout.
    Timeout,
    /// The caller cancelled (a turn interrupted, a client gone).
    Cancelled,
    /// The plugin's process ended with the call in flight, or it was not running.
    PluginGone,
    /// Refused before the plugin was asked: policy, confirmation, saturation.
    Denied,
    /// Unknown tool or arguments that failed its schema.
    InvalidArgs,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::PluginGone => "plugin_gone",
            Outcome::Denied => "denied",
            Outcome::InvalidArgs => "invalid_args",
        }
    }

    /// The `error.type` this outcome records, `None` for `ok`.
    pub fn error_type(self) -> Option<&'static str> {
        match self {
            Outcome::Ok => None,
            Outcome::Error => Some("tool_error"),
            other => Some(other.as_str()),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcome {
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GenAiTool {
    gen_ai_tool_name: String,
    error_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabel {
    stage: &'static str,
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceOutcome {
    source: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Inference {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InferenceTokens {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    gen_ai_token_modality: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}
fn genai_histogram() -> Histogram {
    Histogram::new(GENAI_BUCKETS)
}

/// The registry and the families the broker records into.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    tool_calls: Family<ToolOutcome, Counter>,
    tool_duration: Histograms<ToolLabel>,
    execute_tool: Histograms<GenAiTool>,
    hook_duration: Histograms<HookLabel>,
    turns: Family<OutcomeLabel, Counter>,
    turn_duration: Histogram,
    llm_requests: Family<SourceOutcome, Counter>,
    inference_duration: Histograms<Inference>,
    input_tokens: Family<InferenceTokens, Counter>,
    output_tokens: Family<InferenceTokens, Counter>,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The metrics, when recording is on.
pub fn get() -> Option<&'static Metrics> {
    METRICS.get()
}

/// Turns recording on, with scrape-time collectors over `supervisor` (plugin up,
/// restarts), `agent` (turns waiting and running) and this process. Idempotent: a
/// second call keeps the first registry.
pub fn enable(supervisor: Arc<Supervisor>, agent: Option<Agent>) -> &'static Metrics {
    METRICS.get_or_init(|| Metrics::new(supervisor, agent))
}

impl Metrics {
    fn new(supervisor: Arc<Supervisor>, agent: Option<Agent>) -> Metrics {
        let mut r = Registry::default();
        let tool_calls = Family::<ToolOutcome, Counter>::default();
        r.register(
            "hearth_tool_calls",
            "Tool calls by tool and outcome",
            tool_calls.clone(),
        );
        let tool_duration: Histograms<ToolLabel> = Family::new_with_constructor(call_histogram);
        r.register_with_unit(
            "hearth_tool_call_duration",
            "Tool call duration from the broker's dispatch to the plugin's answer",
            Unit::Seconds,
            tool_duration.clone(),
        );
        let hook_duration: Histograms<HookLabel> = Family::new_with_constructor(call_histogram);
        r.register_with_unit(
            "hearth_hook_duration",
            "Stage hook duration by stage and plugin",
            Unit::Seconds,
            hook_duration.clone(),
        );
        let turns = Family::<OutcomeLabel, Counter>::default();
        r.register("hearth_turns", "Agent turns by outcome", turns.clone());
        let turn_duration = Histogram::new(TURN_BUCKETS);
        r.register_with_unit(
            "hearth_turn_duration",
            "Agent turn duration, from start to the final event",
            Unit::Seconds,
            turn_duration.clone(),
        );
        let llm_requests = Family::<SourceOutcome, Counter>::default();
        r.register(
            "hearth_llm_requests",
            "LLM API requests by source and outcome",
            llm_requests.clone(),
        );
        let inference_duration: Histograms<Inference> =
            Family::new_with_constructor(genai_histogram);
        r.register_with_unit(
            "gen_ai_client_inference_duration",
            "GenAI inference request duration (gen_ai.client.inference.duration)",
            Unit::Seconds,
            inference_duration.clone(),
        );
        let input_tokens = Family::<InferenceTokens, Counter>::default();
        r.register(
            "gen_ai_client_inference_usage_input_tokens",
            "Input tokens used (gen_ai.client.inference.usage.input_tokens)",
            input_tokens.clone(),
        );
        let output_tokens = Family::<InferenceTokens, Counter>::default();
        r.register(
            "gen_ai_client_inference_usage_output_tokens",
            "Output tokens used (gen_ai.client.inference.usage.output_tokens)",
            output_tokens.clone(),
        );
        let execute_tool: Histograms<GenAiTool> = Family::new_with_constructor(genai_histogram);
        r.register_with_unit(
            "gen_ai_execute_tool_duration",
            "GenAI tool execution duration (gen_ai.execute_tool.duration)",
            Unit::Seconds,
            execute_tool.clone(),
        );
        r.register_collector(Box::new(Plugins(supervisor)));
        if let Some(agent) = agent {
            r.register_collector(Box::new(Turns(agent)));
        }
        r.register_collector(Box::new(Process));
        r.register_collector(Box::new(BuildInfo));
        r.register_collector(Box::new(NatsCollector));
        Metrics {
            registry: r,
            tool_calls,
            tool_duration,
            execute_tool,
            hook_duration,
            turns,
            turn_duration,
            llm_requests,
            inference_duration,
            input_tokens,
            output_tokens,
        }
    }

    /// The exposition: Prometheus text 0.0.4, or OpenMetrics 1.0 when `openmetrics`
    /// (the scraper's `Accept` asked for `application/openmetrics-text`). Returns the
    /// body and its content type.
    pub fn render(&self, openmetrics: bool) -> (String, &'static str) {
        let mut body = String::with_capacity(16 * 1024);
        if openmetrics {
            let _ = prometheus_client::encoding::text::encode(&mut body, &self.registry);
            (
                body,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        } else {
            let _ = prometheus_client::encoding::prometheus_text::encode(&mut body, &self.registry);
            (
                body,
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            )
        }
    }
}

/// The `tool` label of a call of `name`: the name when a plugin registered it, else
/// `_unknown` (names an LLM or a caller made up must not make series).
pub fn tool_label<'a>(registry: &crate::registry::Registry, name: &'a str) -> &'a str {
    if registry.get(name).is_some() {
        name
    } else {
        "_unknown"
    }
}

/// Records a finished tool call (`hearth_tool_calls_total`,
/// `hearth_tool_call_duration_seconds`, `gen_ai_execute_tool_duration_seconds`).
pub fn record_tool_call(tool: &str, outcome: Outcome, elapsed: Duration) {
    let Some(m) = get() else { return };
    m.tool_calls
        .get_or_create(&ToolOutcome {
            tool: tool.to_string(),
            outcome: outcome.as_str(),
        })
        .inc();
    let secs = elapsed.as_secs_f64();
    if outcome != Outcome::InvalidArgs && outcome != Outcome::Denied {
        m.tool_duration
            .get_or_create(&ToolLabel {
                tool: tool.to_string(),
            })
            .observe(secs);
        m.execute_tool
            .get_or_create(&GenAiTool {
                gen_ai_tool_name: tool.to_string(),
                error_type: outcome.error_type().unwrap_or(""),
            })
            .observe(secs);
    }
}

/// A tool call being measured: [`CallRecord::finish`] records its outcome; dropped
/// unfinished (the caller gave up: a turn interrupted, a client gone) it records
/// `cancelled`. `None` from [`CallRecord::start`] when metrics are off.
#[derive(Debug)]
pub struct CallRecord {
    tool: String,
    started: std::time::Instant,
    outcome: Option<Outcome>,
}

impl CallRecord {
    /// Starts measuring a call of `tool`.
    pub fn start(tool: &str) -> Option<CallRecord> {
        get()?;
        Some(CallRecord {
            tool: tool.to_string(),
            started: std::time::Instant::now(),
            outcome: None,
        })
    }

    /// The call ended with `outcome`.
    pub fn finish(&mut self, outcome: Outcome) {
        self.outcome = Some(outcome);
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        record_tool_call(
            &self.tool,
            self.outcome.unwrap_or(Outcome::Cancelled),
            self.started.elapsed(),
        );
    }
}

impl Outcome {
    /// The outcome of a routed call's result.
    pub fn of(result: &Result<hearth_proto::v1::ToolResult, crate::error::CallError>) -> Outcome {
        use crate::error::CallError;
        match result {
            Ok(r) if r.success => Outcome::Ok,
            Ok(_) => Outcome::Error,
            Err(CallError::Timeout { .. }) => Outcome::Timeout,
            Err(CallError::PluginGone { .. } | CallError::NotReady { .. }) => Outcome::PluginGone,
            Err(CallError::Saturated { .. }) => Outcome::Denied,
            Err(
                CallError::UnknownTool { .. }
                | CallError::InvalidArguments { .. }
                | CallError::TooLarge { .. },
            ) => Outcome::InvalidArgs,
        }
    }
}

/// Records one stage hook run (`hearth_hook_duration_seconds`).
pub fn record_hook(stage: &'static str, plugin: &str, elapsed: Duration) {
    let Some(m) = get() else { return };
    m.hook_duration
        .get_or_create(&HookLabel {
            stage,
            plugin: plugin.to_string(),
        })
        .observe(elapsed.as_secs_f64());
}

/// Records a finished turn (`hearth_turns_total`, `hearth_turn_duration_seconds`);
/// `outcome` ∈ `ok`, `error`, `short_circuit`, `cancelled`.
pub fn record_turn(outcome: &'static str, elapsed: Duration) {
    let Some(m) = get() else { return };
    m.turns.get_or_create(&OutcomeLabel { outcome }).inc();
    m.turn_duration.observe(elapsed.as_secs_f64());
}

/// One LLM API request, for [`record_llm_request`].
#[derive(Debug)]
pub struct LlmRequest<'a> {
    /// The source's name in hearth.toml.
    pub source: &'a str,
    /// `gen_ai.provider.name`.
    pub provider: &'a str,
    /// The model asked for.
    pub model: &'a str,
    /// `ok`, `error`, `timeout`, `rate_limited` or `cancelled`.
    pub outcome: &'static str,
    /// `error.type` when it failed (`timeout`, an HTTP status, `_OTHER`), else empty.
    pub error_type: &'a str,
    /// From sending to the last byte.
    pub elapsed: Duration,
    /// Tokens, when the API reported them.
    pub input_tokens: u64,
    /// Tokens, when the API reported them.
    pub output_tokens: u64,
}

/// Records an LLM request (`hearth_llm_requests_total`, the GenAI inference duration and,
/// when reported, token counters with `gen_ai_token_modality="unknown"`: the adapters
/// know totals only).
pub fn record_llm_request(r: &LlmRequest<'_>) {
    let Some(m) = get() else { return };
    m.llm_requests
        .get_or_create(&SourceOutcome {
            source: r.source.to_string(),
            outcome: r.outcome,
        })
        .inc();
    if r.outcome == "cancelled" {
        return;
    }
    m.inference_duration
        .get_or_create(&Inference {
            gen_ai_operation_name: "chat",
            gen_ai_provider_name: r.provider.to_string(),
            gen_ai_request_model: r.model.to_string(),
            error_type: r.error_type.to_string(),
        })
        .observe(r.elapsed.as_secs_f64());
    let tokens = |n: u64, family: &Family<InferenceTokens, Counter>| {
        if n > 0 {
            family
                .get_or_create(&InferenceTokens {
                    gen_ai_operation_name: "chat",
                    gen_ai_provider_name: r.provider.to_string(),
                    gen_ai_request_model: r.model.to_string(),
                    gen_ai_token_modality: "unknown",
                })
                .inc_by(n);
        }
    };
    tokens(r.input_tokens, &m.input_tokens);
    tokens(r.output_tokens, &m.output_tokens);
}

/// `hearth_plugin_up` and `hearth_plugin_restarts_total`, read from the supervisor at
/// each scrape (no stale series for unloaded plugins).
#[derive(Debug)]
struct Plugins(Arc<Supervisor>);

impl Collector for Plugins {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let up = Family::<PluginLabel, Gauge>::default();
        let restarts = Family::<PluginLabel, Counter>::default();
        for p in self.0.plugins() {
            let s = p.snapshot();
            let label = PluginLabel { plugin: s.name };
            let ready = s.state == hearth_proto::v1::PluginState::Ready;
            up.get_or_create(&label).set(i64::from(ready));
            restarts.get_or_create(&label).inc_by(u64::from(s.restarts));
        }
        up.encode(encoder.encode_descriptor(
            "hearth_plugin_up",
            "1 when the plugin is ready (registered and serving), else 0",
            None,
            up.metric_type(),
        )?)?;
        restarts.encode(encoder.encode_descriptor(
            "hearth_plugin_restarts",
            "Plugin process restarts since the broker started",
            None,
            restarts.metric_type(),
        )?)?;
        Ok(())
    }
}

/// `hearth_turns_waiting` and `hearth_turns_running`, from the agent's scheduler.
#[derive(Debug)]
struct Turns(Agent);

impl Collector for Turns {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let load = self.0.load();
        for (name, help, v) in [
            (
                "hearth_turns_waiting",
                "Inputs waiting for their conversation's turn",
                load.waiting,
            ),
            ("hearth_turns_running", "Turns running now", load.running),
        ] {
            let g = ConstGauge::new(v as i64);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

/// The NATS connection `/metrics` reports on (see [`watch_nats`]).
struct NatsLink {
    client: async_nats::Client,
    /// Plugin hosts this broker hears from (`None` on a node).
    nodes: Option<Box<dyn Fn() -> usize + Send + Sync>>,
}

static NATS_LINK: OnceLock<NatsLink> = OnceLock::new();

/// Reports `client` (this process's NATS connection) as the `hearth_nats_*` series,
/// with `nodes` (a broker's count of plugin hosts) as `hearth_nats_nodes`. The first
/// call wins; cheap when recording is off (read at scrape time only).
pub fn watch_nats(client: async_nats::Client, nodes: Option<Box<dyn Fn() -> usize + Send + Sync>>) {
    let _ = NATS_LINK.set(NatsLink { client, nodes });
}

/// `hearth_nats_*` from the client's own counters, at scrape time.
#[derive(Debug)]
struct NatsCollector;

impl Collector for NatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use std::sync::atomic::Ordering::Relaxed;
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct Direction {
            direction: &'static str,
        }
        let Some(link) = NATS_LINK.get() else {
            return Ok(());
        };
        let connected = link.client.connection_state() == async_nats::connection::State::Connected;
        let stats = link.client.statistics();
        ConstGauge::new(i64::from(connected)).encode(encoder.encode_descriptor(
            "hearth_nats_connected",
            "1 while this process's NATS connection is up, else 0",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?)?;
        ConstCounter::new(stats.connects.load(Relaxed)).encode(encoder.encode_descriptor(
            "hearth_nats_connects",
            "NATS connections made: the first and every reconnect",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?)?;
        for (name, help, inbound, outbound) in [
            (
                "hearth_nats_messages",
                "NATS messages received (in) and sent (out)",
                &stats.in_messages,
                &stats.out_messages,
            ),
            (
                "hearth_nats_bytes",
                "NATS message payload bytes received (in) and sent (out)",
                &stats.in_bytes,
                &stats.out_bytes,
            ),
        ] {
            let f = Family::<Direction, Counter>::default();
            f.get_or_create(&Direction { direction: "in" })
                .inc_by(inbound.load(Relaxed));
            f.get_or_create(&Direction { direction: "out" })
                .inc_by(outbound.load(Relaxed));
            f.encode(encoder.encode_descriptor(name, help, None, f.metric_type())?)?;
        }
        if let Some(nodes) = &link.nodes {
            ConstGauge::new(nodes() as i64).encode(encoder.encode_descriptor(
                "hearth_nats_nodes",
                "Plugin hosts (hearth node) this broker hears from",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?)?;
        }
        Ok(())
    }
}

/// `hearth_build_info{version, commit} 1`.
#[derive(Debug)]
struct BuildInfo;

impl Collector for BuildInfo {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct Build {
            version: &'static str,
            commit: &'static str,
        }
        let f = Family::<Build, Gauge>::default();
        f.get_or_create(&Build {
            version: env!("CARGO_PKG_VERSION"),
            commit: crate::BUILD_COMMIT,
        })
        .set(1);
        f.encode(encoder.encode_descriptor(
            "hearth_build_info",
            "Hearth's version and the commit it was built from",
            None,
            f.metric_type(),
        )?)
    }
}

/// The standard `process_*` metrics of this process, from /proc (the names
/// client_golang and client_python use).
#[derive(Debug)]
struct Process;

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = ProcessStats::read() else {
            return Ok(());
        };
        let c = ConstCounter::new(p.cpu_seconds);
        c.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            c.metric_type(),
        )?)?;
        for (name, help, v) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                p.rss_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                p.vsize_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                p.start_time,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                p.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                p.max_fds,
            ),
            ("process_threads", "Number of OS threads", p.threads),
        ] {
            let g = ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

/// This process's figures from `/proc/self`.
#[derive(Debug, Default)]
struct ProcessStats {
    cpu_seconds: f64,
    rss_bytes: f64,
    vsize_bytes: f64,
    start_time: f64,
    open_fds: f64,
    max_fds: f64,
    threads: f64,
}

impl ProcessStats {
    fn read() -> Option<ProcessStats> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        // /proc/[pid]/stat numbering (man 5 proc) minus 3: state is field 3.
        let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
        // SAFETY: sysconf reads a constant.
        let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
        let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        });
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own.
        let max_fds = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
            0 => limit.rlim_cur as f64,
            _ => 0.0,
        };
        Some(ProcessStats {
            cpu_seconds: (num(14)? + num(15)?) / tick,
            threads: num(20)?,
            start_time: boot.unwrap_or(0.0) + num(22)? / tick,
            vsize_bytes: num(23)?,
            rss_bytes: num(24)? * page,
            open_fds: std::fs::read_dir("/proc/self/fd")
                .map(|d| d.count() as f64)
                .unwrap_or(0.0),
            max_fds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_stats_read() {
        let p = ProcessStats::read().expect("/proc/self/stat parses");
        assert!(p.rss_bytes > 0.0);
        assert!(p.threads >= 1.0);
        assert!(p.open_fds >= 3.0);
        assert!(p.start_time > 1.6e9, "start time {}", p.start_time);
    }

    #[test]
    fn outcome_labels() {
        assert_eq!(Outcome::PluginGone.as_str(), "plugin_gone");
        assert_eq!(Outcome::Ok.error_type(), None);
        assert_eq!(Outcome::Error.error_type(), Some("tool_error"));
    }
}
