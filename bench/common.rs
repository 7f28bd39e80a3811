//! Helpers shared by the benchmark harnesses (`broker`, `chaos`, `agent`, `adapters`, `host`).
// Each harness compiles this file on its own and uses only part of it.
#![allow(dead_code)]

/// `name` from the environment as a number, else `default`; a value that is not a
/// number stops the bench, naming the variable.
pub fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The 1, 5 and 15 minute load averages, space separated.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One line naming the CPU model, CPU count, kernel and load at start.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|v| v.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "CPU: {model}; {cpus} CPUs available; Linux {}; loadavg at start: {}",
        kernel.trim(),
        loadavg()
    )
}

/// Latency summary in microseconds (nearest-rank percentiles).
#[derive(Clone, Copy)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// Mean, min, max and nearest-rank percentiles of `us`.
pub fn summarize(mut us: Vec<f64>) -> Summary {
    assert!(!us.is_empty());
    us.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = us.len();
    let rank = |p: f64| us[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    Summary {
        n,
        mean: us.iter().sum::<f64>() / n as f64,
        min: us[0],
        p50: rank(0.50),
        p90: rank(0.90),
        p99: rank(0.99),
        p999: rank(0.999),
        max: us[n - 1],
    }
}

/// utime + stime of `pid` in microseconds (from /proc/<pid>/stat, clock ticks).
pub fn cpu_us(pid: u32) -> u64 {
    cpu_us_of(&format!("/proc/{pid}/stat"))
}

/// utime + stime in microseconds from a `stat` file of /proc.
fn cpu_us_of(path: &str) -> u64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let rest: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: u64 = rest.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + rest.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ticks * 1_000_000 / hz.max(1)
}

/// The `/proc/<pid>/task/<tid>` folders of the threads of `pid` whose name starts with
/// `threads` (every thread when empty); none when the process is gone.
fn threads_of(pid: u32, threads: &str) -> Vec<std::path::PathBuf> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .map(|task| task.path())
        .filter(|task| {
            let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            comm.trim_end().starts_with(threads)
        })
        .collect()
}

/// utime + stime of the threads of `pid` whose name starts with `threads`, in
/// microseconds (from /proc/<pid>/task/*/stat).
pub fn threads_cpu_us(pid: u32, threads: &str) -> u64 {
    threads_of(pid, threads)
        .iter()
        .map(|task| cpu_us_of(&task.join("stat").to_string_lossy()))
        .sum()
}

/// Context switches (voluntary and not) of `pid` so far, summed over its threads whose
/// name starts with `threads` (all threads when empty), from /proc/<pid>/task/*/status.
/// A thread that sleeps and is woken counts one: the per-call figure counts wake-ups.
pub fn context_switches(pid: u32, threads: &str) -> u64 {
    threads_of(pid, threads)
        .iter()
        .map(|task| {
            let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
            status
                .lines()
                .filter(|l| l.starts_with("voluntary_ctxt") || l.starts_with("nonvoluntary_ctxt"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// CPU time of the calling thread in microseconds (`CLOCK_THREAD_CPUTIME_ID`, ns
/// resolution): the difference over a batch of calls is the CPU they used, without the
/// time the thread spent preempted on a loaded machine.
pub fn thread_cpu_us() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3
}

/// The current time as `YYYY-MM-DD HH:MM UTC` (for the header of a bench's output).
pub fn utc_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%d %H:%M UTC")
        .to_string()
}

/// Deterministic pseudo-random numbers (SplitMix64): the same sequence for the same
/// seed on every run, without a dependency.
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
