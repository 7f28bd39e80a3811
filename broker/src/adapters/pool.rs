//! The VMs of one adapter and the threads they run on.
//!
//! A transform must be bounded in wall time, and the instruction hook cannot do that
//! alone: it runs only between VM instructions, so a C function — `string.find` with a
//! pathological pattern, `string.rep("", math.maxinteger)` — runs as long as it likes.
//! Nothing can stop a thread inside such a function, but its caller can stop waiting. So
//! each VM lives on a thread of its own (a [`Worker`]), a call is a job sent to that
//! thread, and the caller waits at most [`Limits::timeout`] (plus the time the script
//! spent in `http_get` / `http_post`, which has its own bound). A call past it fails alone
//! ([`Overran::Timeout`]); its worker is *abandoned*: flagged so the count hook ends the
//! script the moment it is back in Lua code, lowered to `SCHED_IDLE` (Linux) so what it
//! still burns is only otherwise idle CPU, and dropped — its thread ends, and its VM with
//! it, when the C function returns. Abandoned workers still running are counted; at
//! [`MAX_STUCK`] per adapter new sessions are refused ([`Overran::Stuck`]) instead of
//! piling up threads and memory.
//!
//! Calls of different sessions never share a VM: a session checks out a worker for its
//! whole life (one completion: request, response or every chunk of its stream — so
//! per-stream state a script keeps, like Gemini's, stays with its stream) and gives it
//! back at the end. Idle workers are kept, up to [`Limits::idle_vms`]; a new one is built
//! when none is idle, from the script's precompiled bytecode. (Measured against one VM per
//! call from bytecode, and against the old single VM behind a mutex: see the bench
//! `bench/adapters.rs`, "VM pool".)
//!
//! The caller waits on a channel. On a multi-thread tokio runtime's worker, a wait that
//! lasts longer than [`FAST_WAIT`] continues inside `block_in_place`, so an overrunning
//! transform does not hold a runtime thread for the whole bound.
//!
//! Where the VM thread runs (Linux): on the caller's CPU. The caller only waits meanwhile,
//! so that CPU is free, and a hand-over there costs ~5 µs; left to the scheduler, the VM
//! thread often woke on the other CPU, and two cross-CPU wake-ups cost ~60 µs per call on
//! the 2-CPU VM of BENCHMARKS.md (about 10× a streamed chunk's transform). An abandoned
//! thread gets its CPUs back, at idle priority.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

use super::sandbox::CallState;
use super::{HostPort, Limits, Loaded};

/// Abandoned workers of one adapter that may still be running before new sessions are
/// refused.
pub(crate) const MAX_STUCK: usize = 8;

/// How long a caller waits on its own thread before, on a multi-thread runtime, handing
/// that thread's runtime work to another (`block_in_place`): far above a normal transform
/// (microseconds to a few milliseconds), far below the bound.
const FAST_WAIT: Duration = Duration::from_millis(10);

/// How long a caller yields its CPU to the VM thread before it sleeps: most transforms
/// (a streamed chunk: ~10 µs) end within it.
const YIELD_WAIT: Duration = Duration::from_micros(200);

/// Work for a VM thread: gets the thread's VM slot (empty until a job builds it) and the
/// call state the VM is to be built with.
type Job = Box<dyn FnOnce(&mut Option<Loaded>, &Arc<CallState>) + Send>;

/// Why a call got no answer.
#[derive(Debug)]
pub(crate) enum Overran {
    /// It ran past the bound; its worker was abandoned.
    Timeout,
    /// This many abandoned workers are still running: no new session.
    Stuck(usize),
    /// The VM thread could not start, or ended without answering (a panic).
    Gone(String),
}

/// One VM thread, as its user holds it.
pub(crate) struct Worker {
    jobs: Sender<Job>,
    call: Arc<CallState>,
    thread: Arc<VmThread>,
}

/// The OS thread of a worker, for placing it (Linux; inert elsewhere).
#[derive(Debug, Default)]
struct VmThread {
    /// Its id; 0 before it starts and once it ends. Held while acting on the thread, so
    /// the id cannot be reused meanwhile.
    tid: Mutex<i32>,
    /// The CPU it was last bound to (-1: none).
    cpu: std::sync::atomic::AtomicI32,
    /// The CPUs it may run on by itself (its mask at start), restored when abandoned.
    home: Mutex<Option<CpuMask>>,
}

/// The workers of one adapter.
pub(crate) struct Pool {
    /// For thread names.
    name: String,
    timeout: Duration,
    idle_max: usize,
    idle: Mutex<Vec<Worker>>,
    /// Abandoned workers whose thread has not ended yet.
    stuck: Arc<AtomicUsize>,
}

impl Pool {
    pub(crate) fn new(name: &str, limits: &Limits) -> Pool {
        Pool {
            name: name.to_owned(),
            timeout: limits.timeout,
            idle_max: limits.idle_vms,
            idle: Mutex::new(Vec::new()),
            stuck: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The bound of one call, in milliseconds (for errors).
    pub(crate) fn timeout_ms(&self) -> u64 {
        self.timeout.as_millis().try_into().unwrap_or(u64::MAX)
    }

    /// An idle worker, or a new one (its VM is built by its first job).
    pub(crate) fn checkout(&self) -> Result<Worker, Overran> {
        let stuck = self.stuck.load(Ordering::SeqCst);
        if stuck >= MAX_STUCK {
            return Err(Overran::Stuck(stuck));
        }
        if let Some(worker) = self.idle_list().pop() {
            return Ok(worker);
        }
        self.spawn()
    }

    /// Gives a worker back (it is dropped, and its thread ends, past `idle_vms`).
    pub(crate) fn checkin(&self, worker: Worker) {
        let mut idle = self.idle_list();
        if idle.len() < self.idle_max {
            idle.push(worker);
        }
    }

    fn idle_list(&self) -> std::sync::MutexGuard<'_, Vec<Worker>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn(&self) -> Result<Worker, Overran> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let call = Arc::new(CallState::default());
        let thread = Arc::new(VmThread {
            cpu: std::sync::atomic::AtomicI32::new(-1),
            ..VmThread::default()
        });
        let (thread_call, thread_self, stuck) = (call.clone(), thread.clone(), self.stuck.clone());
        std::thread::Builder::new()
            .name(format!("hearth-lua-{}", self.name))
            .spawn(move || serve(inbox, thread_call, thread_self, stuck))
            .map_err(|e| Overran::Gone(format!("cannot start a VM thread: {e}")))?;
        Ok(Worker { jobs, call, thread })
    }

    /// Runs `job` on `worker`'s thread and waits for its answer within the bound. The
    /// worker comes back with the answer; past the bound it is abandoned.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        worker: Worker,
        source: Option<HostPort>,
        job: impl FnOnce(&mut Option<Loaded>, &Arc<CallState>) -> R + Send + 'static,
    ) -> Result<(Worker, R), Overran> {
        let (reply, answer) = mpsc::sync_channel::<R>(1);
        // The worker is idle and ours: nothing of an earlier call is running on it.
        worker.call.begin_call(source);
        worker.thread.follow_caller();
        let start = Instant::now();
        let job: Job = Box::new(move |slot, call| {
            let _ = reply.send(job(slot, call));
        });
        if worker.jobs.send(job).is_err() {
            return Err(Overran::Gone("the VM thread has ended".to_owned()));
        }
        match self.wait(&worker.call, &answer, start) {
            Ok(r) => Ok((worker, r)),
            Err(RecvTimeoutError::Timeout) => {
                self.abandon(worker);
                Err(Overran::Timeout)
            }
            Err(RecvTimeoutError::Disconnected) => Err(Overran::Gone(
                "the VM thread ended without answering".to_owned(),
            )),
        }
    }

    /// Waits for the answer until the bound (extended by the call's HTTP time) passes.
    fn wait<R>(
        &self,
        call: &CallState,
        answer: &Receiver<R>,
        start: Instant,
    ) -> Result<R, RecvTimeoutError> {
        // First yield the CPU rather than sleep: the VM thread runs on this CPU, and a
        // caller that slept would be woken on another, idle one (a cross-CPU wake-up).
        while start.elapsed() < YIELD_WAIT {
            match answer.try_recv() {
                Ok(r) => return Ok(r),
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(RecvTimeoutError::Disconnected)
                }
                Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
        let until = |limit: Option<Duration>| -> Result<R, RecvTimeoutError> {
            loop {
                let now = Instant::now();
                let mut deadline = start + self.timeout + call.http_wait(now);
                if let Some(limit) = limit {
                    deadline = deadline.min(start + limit);
                }
                if now >= deadline {
                    // A last look: the answer may have come with the deadline.
                    return answer.try_recv().map_err(|e| match e {
                        mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                        mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                    });
                }
                match answer.recv_timeout(deadline - now) {
                    Err(RecvTimeoutError::Timeout) => continue,
                    other => return other,
                }
            }
        };
        let on_runtime_worker = matches!(
            Handle::try_current().map(|h| h.runtime_flavor()),
            Ok(RuntimeFlavor::MultiThread)
        );
        if !on_runtime_worker || self.timeout <= FAST_WAIT {
            return until(None);
        }
        match until(Some(FAST_WAIT)) {
            Err(RecvTimeoutError::Timeout) if start.elapsed() < self.timeout => {
                tokio::task::block_in_place(|| until(None))
            }
            other => other,
        }
    }

    fn abandon(&self, worker: Worker) {
        // Counted before it is flagged: the thread uncounts itself when it ends flagged.
        self.stuck.fetch_add(1, Ordering::SeqCst);
        worker.call.abandoned.store(true, Ordering::SeqCst);
        worker.thread.release();
        // Dropping `jobs` ends the thread's loop once its job returns.
    }
}

/// A VM thread: runs jobs until its worker is dropped or abandoned.
fn serve(
    inbox: Receiver<Job>,
    call: Arc<CallState>,
    thread: Arc<VmThread>,
    stuck: Arc<AtomicUsize>,
) {
    thread.started();
    let mut slot: Option<Loaded> = None;
    while let Ok(job) = inbox.recv() {
        job(&mut slot, &call);
        if call.abandoned.load(Ordering::SeqCst) {
            break;
        }
    }
    drop(slot);
    *thread.tid.lock().unwrap_or_else(|p| p.into_inner()) = 0;
    if call.abandoned.load(Ordering::SeqCst) {
        stuck.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A set of CPUs (Linux `cpu_set_t`).
#[cfg(target_os = "linux")]
struct CpuMask(libc::cpu_set_t);

#[cfg(not(target_os = "linux"))]
struct CpuMask;

impl std::fmt::Debug for CpuMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CpuMask")
    }
}

#[cfg(target_os = "linux")]
impl VmThread {
    /// On the thread itself, first thing: its id and the CPUs it may use.
    fn started(&self) {
        // SAFETY: gettid has no preconditions; sched_getaffinity writes the mask it is given.
        let tid = unsafe { libc::gettid() };
        let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let got = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&mask), &mut mask) };
        if got == 0 {
            *self.home.lock().unwrap_or_else(|p| p.into_inner()) = Some(CpuMask(mask));
        }
        *self.tid.lock().unwrap_or_else(|p| p.into_inner()) = tid;
    }

    /// Binds the thread to the CPU the caller runs on, if it is not there already.
    fn follow_caller(&self) {
        // SAFETY: sched_getcpu has no preconditions (-1 on failure).
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu < 0 || self.cpu.load(Ordering::Relaxed) == cpu {
            return;
        }
        let tid = self.tid.lock().unwrap_or_else(|p| p.into_inner());
        if *tid == 0 {
            return;
        }
        // SAFETY: CPU_ZERO/CPU_SET on a local mask; the thread is alive (its tid is held).
        let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe { libc::CPU_SET(cpu as usize, &mut mask) };
        let set = unsafe { libc::sched_setaffinity(*tid, std::mem::size_of_val(&mask), &mask) };
        if set == 0 {
            self.cpu.store(cpu, Ordering::Relaxed);
        }
    }

    /// An abandoned thread still running: back to all its CPUs, but only their idle time
    /// (SCHED_IDLE, or nice 19 should that be refused).
    fn release(&self) {
        let tid = self.tid.lock().unwrap_or_else(|p| p.into_inner());
        if *tid == 0 {
            return;
        }
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain syscalls on a thread of this process that is alive (its tid is held).
        let idle = unsafe { libc::sched_setscheduler(*tid, libc::SCHED_IDLE, &param) };
        if idle != 0 {
            unsafe { libc::setpriority(libc::PRIO_PROCESS, *tid as libc::id_t, 19) };
        }
        if let Some(CpuMask(home)) = &*self.home.lock().unwrap_or_else(|p| p.into_inner()) {
            unsafe { libc::sched_setaffinity(*tid, std::mem::size_of_val(home), home) };
        }
    }
}

#[cfg(not(target_os = "linux"))]
impl VmThread {
    fn started(&self) {}
    fn follow_caller(&self) {}
    fn release(&self) {}
}
