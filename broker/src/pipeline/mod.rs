//! The message pipeline: `on_input` → `pre_action` → [LLM → `post_action` → per
//! tool call: `before_toolcall` → execute → `after_toolcall`]* → `before_output` →
//! `after_output` (DESIGN.md "Pipeline"; seed `homeagent-plugin-sdk-api.md`).
//!
//! - [`permissions`]: the permission matrix, enforced after every hook, and what
//!   each stage's hooks receive.
//! - [`memory`]: graph memory, documents and knowledge recalled before `pre_action`.
//! - [`policy`]: LinkZone `ai.tool` call policies (max_calls, cooldown, confirm).
//! - this module: running the hooks of one stage. The turn that drives the stages is
//!   [`crate::agent::turn`].
//!
//! Hooks of one stage run in plugin load order, then registration order, each
//! seeing the previous one's writes. `after_output` hooks only observe and run
//! concurrently. A hook's error or timeout is logged with its plugin's name and the
//! pipeline goes on without its writes. Own-tools hooks see `before_toolcall` /
//! `after_toolcall` only for their own plugin's tools.

pub mod memory;
/// The stage permission matrix: the wire contract's ([`hearth_proto::permissions`]),
/// which the SDK test harnesses share.
pub use hearth_proto::permissions;
pub mod policy;

use std::sync::Arc;
use std::time::Duration;

use hearth_proto::stage_name;
use hearth_proto::v1::{Stage, StageContext};

use crate::registry::Hook;
use crate::router::ToolRouter;
use permissions::Visible;

/// Default time one hook may take, in milliseconds.
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 5000;

/// A hook set `response`: the pipeline jumps to `after_output` with it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShortCircuit {
    /// Stage where it happened.
    pub stage: Stage,
    /// Plugin whose hook set it.
    pub plugin: String,
}

/// Runs stage hooks on plugins, through the router (ready session, restart wait,
/// `max_concurrency`).
#[derive(Debug, Clone)]
pub struct Hooks {
    router: Arc<ToolRouter>,
    timeout: Duration,
}

impl Hooks {
    /// Hooks of the router's plugins, each allowed `timeout`.
    pub fn new(router: Arc<ToolRouter>, timeout: Duration) -> Hooks {
        Hooks { router, timeout }
    }

    /// True when `hook` runs at `stage` for a call of `tool_owner`'s tool: own-tools
    /// hooks see `before_toolcall` / `after_toolcall` only for their plugin's tools.
    fn applies(hook: &Hook, stage: Stage, tool_owner: Option<&str>) -> bool {
        let toolcall = matches!(stage, Stage::BeforeToolcall | Stage::AfterToolcall);
        !(toolcall && hook.own_tools_only && tool_owner != Some(hook.plugin.as_str()))
    }

    /// True when some plugin hooks `stage` (for `tool_owner`'s tools, at the
    /// tool-call stages). Callers skip preparing a stage's context when none does.
    pub fn any(&self, stage: Stage, tool_owner: Option<&str>) -> bool {
        self.router
            .registry()
            .stage_hooks(stage)
            .iter()
            .any(|h| Self::applies(h, stage, tool_owner))
    }

    /// Sends `ctx` (what the hook may see of it) to one hook and returns the context
    /// it answered, or `None` (logged) when the plugin is not ready, failed, timed
    /// out or answered an error.
    async fn call(&self, hook: &Hook, ctx: StageContext) -> Option<StageContext> {
        use opentelemetry::context::FutureExt as _;
        let stage = hook.stage;
        let started = std::time::Instant::now();
        let span = crate::observe::trace::hook_span(stage_name(stage), &hook.plugin, &hook.hook_id);
        let run = self.router.run_stage(hook, ctx, self.timeout);
        let result = match &span {
            Some(span) => run.with_context(span.context().clone()).await,
            None => run.await,
        };
        crate::observe::metrics::record_hook(stage_name(stage), &hook.plugin, started.elapsed());
        if let Some(span) = &span {
            match &result {
                Ok(r) if !r.error.is_empty() => span.fail("hook_error", r.error.clone()),
                Ok(_) => {}
                Err(e) => span.fail(e.error_type(), e.to_string()),
            }
        }
        match result {
            Ok(r) if !r.error.is_empty() => {
                tracing::warn!(plugin = %hook.plugin, stage = stage_name(stage), hook = %hook.hook_id, "hook failed, its writes skipped: {}", r.error);
                None
            }
            Ok(r) => match r.context {
                Some(mut c) => {
                    c.phase = stage as i32;
                    Some(c)
                }
                None => {
                    tracing::warn!(plugin = %hook.plugin, stage = stage_name(stage), hook = %hook.hook_id, "hook answered no context; skipped");
                    None
                }
            },
            Err(e) => {
                tracing::warn!(plugin = %hook.plugin, stage = stage_name(stage), hook = %hook.hook_id, "hook skipped: {e}");
                None
            }
        }
    }

    /// Runs the hooks of `stage` on `ctx` in order, each receiving what its stage
    /// may see ([`permissions::view`]) and its permitted writes applied. Stops at the
    /// first hook that sets `response` (except in `before_toolcall`, where
    /// `response` denies only that call and the caller decides) and returns who did.
    /// `after_output` hooks run concurrently and change nothing.
    pub async fn run(
        &self,
        stage: Stage,
        ctx: &mut StageContext,
        tool_owner: Option<&str>,
    ) -> Option<ShortCircuit> {
        ctx.phase = stage as i32;
        let all = self.router.registry().stage_hooks(stage);
        let hooks: Vec<&Hook> = all
            .iter()
            .filter(|h| Self::applies(h, stage, tool_owner))
            .collect();
        if hooks.is_empty() {
            return None;
        }
        if stage == Stage::AfterOutput {
            let visible = Visible::of(stage, true);
            let sent = permissions::view(stage, ctx, visible);
            let calls = hooks.into_iter().map(|h| {
                let sent = sent.clone();
                async move {
                    let mut seen = sent.clone();
                    if let Some(answer) = self.call(h, sent).await {
                        let dropped = permissions::apply(stage, visible, &mut seen, answer);
                        report(h, &dropped);
                    }
                }
            });
            futures_util::future::join_all(calls).await;
            return None;
        }
        for hook in hooks {
            let visible = Visible::of(stage, !hook.no_context_msgs);
            let sent = permissions::view(stage, ctx, visible);
            let Some(answer) = self.call(hook, sent).await else {
                continue;
            };
            let dropped = permissions::apply(stage, visible, ctx, answer);
            report(hook, &dropped);
            if ctx.response.is_some() {
                if stage != Stage::BeforeToolcall {
                    tracing::info!(plugin = %hook.plugin, stage = stage_name(stage), "response set: short-circuit to after_output");
                }
                return Some(ShortCircuit {
                    stage,
                    plugin: hook.plugin.clone(),
                });
            }
            if stage == Stage::BeforeToolcall && ctx.tool_calls.iter().any(|c| c.deny) {
                return Some(ShortCircuit {
                    stage,
                    plugin: hook.plugin.clone(),
                });
            }
        }
        None
    }
}

fn report(hook: &Hook, dropped: &[&'static str]) {
    if !dropped.is_empty() {
        tracing::warn!(
            plugin = %hook.plugin,
            stage = stage_name(hook.stage),
            hook = %hook.hook_id,
            "writes outside the permission matrix dropped: {}",
            dropped.join(", ")
        );
    }
}
