//! Health for load balancers and orchestrators: the standard gRPC health service
//! (`grpc.health.v1.Health`, from tonic-health) on the broker socket and `--listen`, and
//! `/healthz` / `/readyz` on the `--http-listen` server. None needs a token; none says
//! more than its status.
//!
//! Ready ([`Readiness::check`]) = storage open, the start-up plugin load pass done, and
//! at least one LLM source usable (not out, not every one in cooldown) or none
//! configured; not while stopping. A plugin crash does not make the broker unready
//! (`hearth_plugin_up` shows it). The gRPC overall status (service `""`) follows the
//! same rule: NOT_SERVING until ready, SERVING while ready, NOT_SERVING from the start
//! of shutdown so balancers stop routing before connections drain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::llm::SourcePool;

/// What the broker's readiness depends on; shared by `/readyz` and the gRPC reporter.
#[derive(Debug)]
pub struct Readiness {
    storage: AtomicBool,
    loaded: AtomicBool,
    stopping: AtomicBool,
    sources: std::sync::OnceLock<Arc<SourcePool>>,
    reporter: HealthReporter,
    /// The status last published; held while publishing, so publishers run one at a
    /// time and an unchanged status is not sent again (tonic-health wakes every
    /// `Watch` on each set).
    published: tokio::sync::Mutex<ServingStatus>,
}

impl Readiness {
    /// Not ready yet; `reporter` is the gRPC health service's, set NOT_SERVING here
    /// (tonic-health starts service `""` as SERVING).
    pub async fn new(reporter: HealthReporter) -> Arc<Readiness> {
        reporter
            .set_service_status("", ServingStatus::NotServing)
            .await;
        Arc::new(Readiness {
            storage: AtomicBool::new(false),
            loaded: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            sources: std::sync::OnceLock::new(),
            reporter,
            published: tokio::sync::Mutex::new(ServingStatus::NotServing),
        })
    }

    /// Storage opened, with the LLM sources whose state counts.
    pub fn storage_open(&self, sources: Arc<SourcePool>) {
        let _ = self.sources.set(sources);
        self.storage.store(true, Ordering::SeqCst);
    }

    /// The start-up plugin load pass is done; from now the gRPC status follows
    /// [`Readiness::check`] (re-checked every second: source cooldowns end by time).
    pub async fn loaded(self: &Arc<Self>) {
        self.loaded.store(true, Ordering::SeqCst);
        self.publish().await;
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(me) = me.upgrade() else { return };
                if me.stopping.load(Ordering::SeqCst) {
                    return;
                }
                me.publish().await;
            }
        });
    }

    /// The broker is stopping: not ready from now on.
    pub async fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.publish().await;
    }

    /// Whether the broker is stopping (long-lived responses, such as the admin page's
    /// live log, end then).
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    async fn publish(&self) {
        let mut published = self.published.lock().await;
        // Checked under the lock: a tick that read "ready" cannot publish it after
        // `stopping` published NOT_SERVING.
        let status = match self.check() {
            Ok(()) => ServingStatus::Serving,
            Err(_) => ServingStatus::NotServing,
        };
        if *published != status {
            self.reporter.set_service_status("", status).await;
            *published = status;
        }
    }

    /// Ok when ready; else why not (for the broker's own log, not for the endpoint).
    pub fn check(&self) -> Result<(), &'static str> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err("stopping");
        }
        if !self.storage.load(Ordering::SeqCst) {
            return Err("storage not open");
        }
        if !self.loaded.load(Ordering::SeqCst) {
            return Err("plugins not loaded");
        }
        if let Some(sources) = self.sources.get() {
            let statuses = sources.statuses();
            if !statuses.is_empty() && statuses.iter().all(|s| s.state != "ok") {
                return Err("no LLM source usable");
            }
        }
        Ok(())
    }
}
