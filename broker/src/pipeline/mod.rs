//! The message pipeline: `on_input` → `pre_action` → [LLM → `post_action` → per
//! tool call: `before_toolcall` → execute → `after_toolcall`]* → `before_output` →
//! `after_output` (DESIGN.md "Pipeline"; seed `homeagent-plugin-sdk-api.md`).
//!
//! - [`permissions`]: the permission matrix, enforced after every hook.
//! - [`memory`]: graph memory, documents and knowledge recalled before `pre_action`.
//! - [`policy`]: LinkZone `ai.tool` call policies (max_calls, cooldown, confirm).
//! - [`turn`]: one turn of the agent (stages, the LLM tool-calling loop, history).
//! - this module: running the hooks of one stage.
//!
//! Hooks of one stage run in plugin load order, then registration order, each
//! seeing the previous one's writes. `after_output` hooks only observe and run
//! concurrently. A hook's error or timeout is logged with its plugin's name and the
//! pipeline goes on without its writes. Own-tools hooks see `before_toolcall` /
//! `after_toolcall` only for their own plugin's tools.

pub mod memory;
pub mod permissions;
pub mod policy;
pub mod turn;

use std::sync::Arc;
use std::time::Duration;

use hearth_proto::stage_name;
use hearth_proto::v1::{Stage, StageContext};

use crate::registry::Hook;
use crate::supervisor::session::InvokeError;
use crate::supervisor::Supervisor;

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

/// Runs stage hooks on plugins.
#[derive(Debug, Clone)]
pub struct Hooks {
    supervisor: Arc<Supervisor>,
    timeout: Duration,
}

impl Hooks {
    /// Hooks of `supervisor`'s plugins, each allowed `timeout`.
    pub fn new(supervisor: Arc<Supervisor>, timeout: Duration) -> Hooks {
        Hooks {
            supervisor,
            timeout,
        }
    }

    /// Every hook of `stage` in run order; `tool_owner` (the plugin owning the tool
    /// of a `before_toolcall`/`after_toolcall`) filters own-tools hooks.
    fn hooks(&self, stage: Stage, tool_owner: Option<&str>) -> Vec<Hook> {
        let toolcall = matches!(stage, Stage::BeforeToolcall | Stage::AfterToolcall);
        let registry = self.supervisor.registry();
        self.supervisor
            .plugins()
            .iter()
            .flat_map(|p| registry.hooks(p.name(), stage))
            .filter(|h| !(toolcall && h.own_tools_only && tool_owner != Some(h.plugin.as_str())))
            .collect()
    }

    /// Sends `ctx` to one hook and returns the context it answered, or `None` (logged)
    /// when the plugin is not ready, failed, timed out or answered an error.
    async fn call(&self, hook: &Hook, ctx: &StageContext) -> Option<StageContext> {
        let stage = hook.stage;
        let plugin = self.supervisor.plugin(&hook.plugin)?;
        let session = plugin.session.borrow().clone();
        let Some(session) = session else {
            tracing::warn!(plugin = %hook.plugin, stage = stage_name(stage), hook = %hook.hook_id, "hook skipped: plugin not ready");
            return None;
        };
        let mut sent = ctx.clone();
        sent.phase = stage as i32;
        match session
            .run_stage(stage, &hook.hook_id, sent, self.timeout)
            .await
        {
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
            Err(InvokeError::Failed(e)) => {
                tracing::warn!(plugin = %hook.plugin, stage = stage_name(stage), hook = %hook.hook_id, "hook skipped: {e}");
                None
            }
            Err(InvokeError::NotSent(reason)) => {
                tracing::warn!(plugin = %hook.plugin, stage = stage_name(stage), hook = %hook.hook_id, "hook skipped: plugin {reason}");
                None
            }
        }
    }

    /// Runs the hooks of `stage` on `ctx` in order, applying each one's permitted
    /// writes. Stops at the first hook that sets `response` (except in
    /// `before_toolcall`, where `response` denies only that call and the caller
    /// decides) and returns who did. `after_output` hooks run concurrently and
    /// change nothing.
    pub async fn run(
        &self,
        stage: Stage,
        ctx: &mut StageContext,
        tool_owner: Option<&str>,
    ) -> Option<ShortCircuit> {
        ctx.phase = stage as i32;
        let hooks = self.hooks(stage, tool_owner);
        if stage == Stage::AfterOutput {
            let seen = ctx.clone();
            let calls = hooks.iter().map(|h| async {
                if let Some(answer) = self.call(h, &seen).await {
                    let dropped = permissions::apply(stage, &mut seen.clone(), answer);
                    report(h, &dropped);
                }
            });
            futures_util::future::join_all(calls).await;
            return None;
        }
        for hook in &hooks {
            let Some(answer) = self.call(hook, ctx).await else {
                continue;
            };
            let dropped = permissions::apply(stage, ctx, answer);
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
