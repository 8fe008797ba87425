//! Pieces shared by the grace-period scenarios (`unregister`, `gp`,
//! `membarrier`): duration parsing, per-thread and per-process CPU time,
//! latency histograms, the CPUs load threads may use, and the run/output
//! flow every herd scenario follows ([`run_scenario`]: one [`RunResult`] per
//! repetition, repetitions in child processes, table/JSON/CSV through
//! [`crate::export::run`]).

use std::time::{Duration, Instant};

use anyhow::Result;
use hdrhistogram::Histogram;
use serde::Serialize;

pub use crate::export::run::OutputArgs;
use crate::result::RunResult;
use crate::runner;

/// Longest duration accepted by a duration flag: a week.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Longest `--duration` of a scenario run: a day (`--duration 2h` works).
pub const MAX_RUN: Duration = Duration::from_secs(24 * 3600);

/// Parses a duration with humantime: a number and a unit (`250ns`, `10us`,
/// `1.5ms`, `2s`, `10min`, `2h`, or sums like `1h 30m`); `0` alone is
/// allowed. At most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let d = humantime::parse_duration(t).map_err(|e| match e {
        humantime::DurationError::UnknownUnit { unit, .. } if unit.is_empty() => {
            format!("`{t}` has no unit (e.g. 100us, 5s, 2h)")
        }
        humantime::DurationError::UnknownUnit { unit, .. } => {
            format!("`{t}`: unknown unit `{unit}` (use ns, us, ms, s, min, h, ...)")
        }
        e => format!("`{t}`: {e}"),
    })?;
    if d > MAX_DURATION {
        return Err(format!("`{t}` is out of range (at most a week)"));
    }
    Ok(d)
}

/// Formats a duration the way [`parse_duration`] reads it, in the largest
/// unit that keeps it an integer (`0`, `10us`, `1ms`, `1500us`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0".into()
    } else if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

/// User and system CPU time, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CpuTime {
    /// User-mode seconds.
    pub user_s: f64,
    /// Kernel-mode seconds.
    pub sys_s: f64,
}

impl CpuTime {
    /// CPU time of the calling thread so far.
    pub fn thread() -> CpuTime {
        Self::of(nix::sys::resource::UsageWho::RUSAGE_THREAD)
    }

    /// CPU time of the whole process so far (every thread, live or joined).
    pub fn process() -> CpuTime {
        Self::of(nix::sys::resource::UsageWho::RUSAGE_SELF)
    }

    fn of(who: nix::sys::resource::UsageWho) -> CpuTime {
        match nix::sys::resource::getrusage(who) {
            Ok(u) => {
                let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
                CpuTime {
                    user_s: tv(u.user_time()),
                    sys_s: tv(u.system_time()),
                }
            }
            // getrusage(2) only fails for an invalid `who`; report nothing used.
            Err(_) => CpuTime::default(),
        }
    }

    /// User plus system seconds.
    pub fn total(&self) -> f64 {
        self.user_s + self.sys_s
    }

    /// `self - earlier`, clamped at zero.
    pub fn since(&self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_s: (self.user_s - earlier.user_s).max(0.0),
            sys_s: (self.sys_s - earlier.sys_s).max(0.0),
        }
    }

    /// Sum of two CPU times.
    pub fn plus(&self, o: CpuTime) -> CpuTime {
        CpuTime {
            user_s: self.user_s + o.user_s,
            sys_s: self.sys_s + o.sys_s,
        }
    }
}

/// A latency histogram in nanoseconds, 1 ns to 100 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

/// Records `d` (saturating at the histogram's bounds).
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_nanos() as u64).max(1));
}

/// A histogram summarised for JSON and tables (nanoseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Mean, ns.
    pub mean_ns: f64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Largest sample, ns.
    pub max_ns: u64,
}

impl Latency {
    /// Summarises `h` (all zero when empty).
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            count: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

/// Human-friendly nanoseconds: `850ns`, `12.3us`, `4.56ms`, `1.20s`.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0}ns")
    } else if ns < 1e6 {
        format!("{:.1}us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2}ms", ns / 1e6)
    } else {
        format!("{:.2}s", ns / 1e9)
    }
}

/// Human-friendly rate: `812/s`, `45.2K/s`, `3.10M/s`.
pub fn fmt_rate(per_s: f64) -> String {
    if per_s < 1e3 {
        format!("{per_s:.0}/s")
    } else if per_s < 1e6 {
        format!("{:.1}K/s", per_s / 1e3)
    } else {
        format!("{:.2}M/s", per_s / 1e6)
    }
}

/// The CPUs this process may run on (its affinity mask; all online CPUs
/// when that cannot be read): what "one load thread per CPU" counts.
pub fn usable_cpus() -> Vec<usize> {
    crate::host::allowed_cpus()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(crate::host::online_cpus)
}

/// Host facts recorded with every result.
pub fn host_facts() -> serde_json::Value {
    crate::host::HostFacts::read().to_json()
}

/// Mappings [`preflight_threads`] keeps free for what is not a thread.
const MAPPING_SLACK: u64 = 256;

/// Address space [`preflight_threads`] keeps free for what is neither a
/// thread's stack nor a malloc arena the threads make (those are counted,
/// [`crate::spawn::fit::arena_reserve_bytes`]): perf's rings (1 MiB and a
/// page per CPU and sampled event), the job log's growth (32 bytes a
/// job: 16 MiB is half a million jobs), the exitq domain.
const ADDRESS_SLACK: u64 = 16 << 20;

/// Address space kept free, beside the arenas, while glibc makes them:
/// `new_heap` (`malloc/arena.c`, 2.36) maps twice an arena's 64 MiB to
/// find an aligned one, then unmaps the rest, so for a moment an arena
/// being made holds 128 MiB (a thread whose stack is mapped in that
/// moment could fail, or abort for its signal stack).
const ARENA_TRANSIENT: u64 = crate::spawn::fit::ARENA_RESERVE_BYTES;

/// Private writable memory (`VmData`) [`preflight_threads`] keeps free
/// for what is not a thread's stack or malloc arena: the job log, the
/// heap's growth, the exitq domain.
const DATA_SLACK: u64 = 32 << 20;

/// Pre-flight of a scenario's std threads, before any is created: refuses
/// (exit 3, [`crate::error::ResourceError`] about `flag`) when `threads`
/// threads alive at once would not fit under the host's limits
/// ([`preflight_threads_problem`]).
pub fn preflight_threads(flag: &str, what: &str, threads: usize) -> Result<()> {
    match preflight_threads_problem(what, threads) {
        None => Ok(()),
        Some(why) => Err(crate::error::resource(flag, why.text)),
    }
}

/// What [`preflight_threads`] refuses (`None`: the threads fit):
/// `threads` std threads alive at once against `vm.max_map_count` (the
/// mappings in use now, at [`crate::spawn::failure::STD_THREAD_MAPPINGS`]
/// per thread), `RLIMIT_AS` (the address space in use now, at
/// [`crate::spawn::failure::std_thread_bytes`] per thread, and the 64 MiB
/// each new malloc arena reserves, [`crate::spawn::fit::arena_reserve_bytes`]),
/// `RLIMIT_DATA`
/// (`VmData` now, at [`crate::spawn::failure::std_thread_data_bytes`] per
/// thread, and a malloc arena for each of the first threads,
/// [`crate::spawn::fit::arena_data_bytes`]), `RLIMIT_NPROC`, `kernel.threads-max`, `kernel.pid_max` and the
/// cgroup's `pids.max`. Past the mapping, address-space or data wall, std's
/// start-up of a thread that was created aborts the whole process (it
/// cannot map the thread's signal stack: "failed to allocate an
/// alternative stack", then "fatal runtime error"); past the task limits
/// thread creation fails half-way through.
pub fn preflight_threads_problem(what: &str, threads: usize) -> Option<ThreadsProblem> {
    let facts = crate::host::HostFacts::read();
    // Each of the first threads that allocate makes glibc a malloc arena
    // of 64 MiB (up to its arena limit): counted in the address space in
    // use, with the moment one being made maps twice that.
    let arenas = crate::spawn::fit::new_arenas(threads as u64);
    let arena_bytes = crate::spawn::fit::arena_reserve_bytes(threads as u64)
        .saturating_add(if arenas > 0 { ARENA_TRANSIENT } else { 0 });
    // Slack for what the run maps besides its threads' stacks and arenas
    // (perf buffers, the job log, the exitq domain): a request just under
    // the wall would otherwise pass and still abort.
    let cost = crate::spawn::failure::ThreadCost {
        maps_per_thread: crate::spawn::failure::STD_THREAD_MAPPINGS,
        maps_now: crate::host::map_count().unwrap_or(0) + MAPPING_SLACK,
        bytes_per_thread: crate::spawn::failure::std_thread_bytes(),
        bytes_now: crate::host::address_space_bytes()
            .unwrap_or(0)
            .saturating_add(ADDRESS_SLACK)
            .saturating_add(arena_bytes),
        arenas,
        data_per_thread: crate::spawn::failure::std_thread_data_bytes(),
        data_now: crate::host::data_bytes()
            .unwrap_or(0)
            .saturating_add(DATA_SLACK)
            .saturating_add(crate::spawn::fit::arena_data_bytes(threads as u64)),
    };
    let mapping_wall =
        crate::spawn::fit::mappings(&facts, threads as u64, cost.maps_per_thread, cost.maps_now)
            .is_some_and(|m| m.over);
    let problems = crate::spawn::failure::thread_limit_problems(&facts, threads as u64, cost);
    if problems.is_empty() {
        return None;
    }
    let text = format!(
        "{what}: about {threads} threads alive at once, more than this host can create \
         (counting {MAPPING_SLACK} mappings, {} of address space and {} of data of slack, \
         and {arenas} new malloc arenas): {}",
        crate::host::human_bytes(ADDRESS_SLACK),
        crate::host::human_bytes(DATA_SLACK),
        problems.join("; ")
    );
    Some(ThreadsProblem { text, mapping_wall })
}

/// A refusal of [`preflight_threads_problem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadsProblem {
    /// The refusal, worded with every limit in the way.
    pub text: String,
    /// One of them is `vm.max_map_count`. Running past it anyway would
    /// most likely abort the process: a thread whose stack still got its
    /// two mappings then needs two more for the signal stack std maps in
    /// its start-up, and std aborts when it cannot ("failed to allocate
    /// an alternative stack"). Past `RLIMIT_AS` or `RLIMIT_DATA` the 2 MiB
    /// stack fails first but for the last few KiB of room (the signal
    /// stack's size).
    pub mapping_wall: bool,
}

/// Explains a failed thread creation: the errno and the limit behind it,
/// named with its numbers by [`exitq::limits::diagnose`] (read right after
/// the failure, while the limit is still at its ceiling).
pub fn spawn_error(role: &str, index: usize, err: std::io::Error) -> anyhow::Error {
    let Some(errno) = err.raw_os_error() else {
        return anyhow::anyhow!("cannot create {role} thread #{index}: {err}");
    };
    // std::thread's default stack (RUST_MIN_STACK aside).
    let d = exitq::limits::diagnose(errno, Some(2 << 20));
    anyhow::anyhow!(
        "cannot create {role} thread #{index}: {} ({err}): limit {} ({}); \
         {index} {role} thread(s) were running",
        exitq::limits::errno_name(errno),
        d.limit.name(),
        d.detail
    )
}

/// The run/output flow of every herd scenario: with `-r N` (N > 1, and not
/// already a child) re-run herd once per repetition in a child process and
/// print the summary ([`crate::export::run::repeat`]); otherwise measure
/// once in this process and print the result with the scenario's own
/// section below the metrics table. Returns the exit code (130 after Ctrl-C)
/// and, when measured here, the result.
pub fn run_scenario(
    scenario: &str,
    out: &OutputArgs,
    once: impl FnOnce() -> Result<RunResult>,
    section: impl Fn(&RunResult) -> String,
) -> Result<(u8, Option<RunResult>)> {
    if out.runs > 1 && !runner::is_child() {
        return Ok((crate::export::run::repeat(scenario, out, &[])?, None));
    }
    runner::install_interrupt_handler();
    let mut r = once()?;
    if let Some(p) = crate::perf::Report::from_json(&r.perf) {
        r.checks_failed.extend(p.checks());
    }
    crate::export::run::emit(&r, out, section)?;
    if !out.json && !out.csv {
        for w in &r.warnings {
            eprintln!("warning: {w}");
        }
    }
    for c in &r.checks_failed {
        eprintln!("herd: check failed: {c}");
    }
    let code = if runner::interrupted() {
        crate::error::EXIT_INTERRUPTED
    } else {
        crate::result::run_code(&r)
    };
    Ok((code, Some(r)))
}

/// The command-line form of `perf` (for child runs), defaults left out.
pub fn perf_args(perf: &crate::perf::PerfArgs) -> Vec<String> {
    let mut a = Vec::new();
    if perf.perf_scope != crate::perf::Scope::default() {
        a.push("--perf-scope".into());
        a.push("system".into());
    }
    for (on, flag) in [
        (perf.no_perf, "--no-perf"),
        (perf.require_perf, "--require-perf"),
        (perf.contention, "--contention"),
        (perf.allow_lost_samples, "--allow-lost-samples"),
    ] {
        if on {
            a.push(flag.to_string());
        }
    }
    a
}

/// Sleeps until `deadline` or Ctrl-C, whichever comes first, checking every
/// few milliseconds. Returns false if interrupted.
pub fn wait_until(deadline: Instant) -> bool {
    loop {
        if runner::interrupted() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(10)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_round_trip() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
        assert_eq!(
            parse_duration("1.5ms").unwrap(),
            Duration::from_micros(1500)
        );
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("250ns").unwrap(), Duration::from_nanos(250));
        assert!(parse_duration("10").unwrap_err().contains("no unit"));
        assert!(parse_duration("10xs").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("ms").is_err());
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("10min").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("8days")
            .unwrap_err()
            .contains("at most a week"));
        assert!(parse_duration("-1s").is_err());
        for s in ["0", "10us", "1ms", "1500us", "3s", "7ns", "7200s"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }

    #[test]
    fn thread_cpu_time_advances_with_work() {
        // Spin until this thread's own CPU clock has advanced by 5 ms (not
        // for a wall-clock time: on a loaded machine a thread may get little
        // CPU in any fixed window). The bound on wall time only stops a
        // broken clock from hanging the test.
        let t0 = CpuTime::thread();
        let start = Instant::now();
        let mut x = 0u64;
        let mut used = CpuTime::thread().since(t0);
        while used.total() <= 0.005 && start.elapsed() < Duration::from_secs(60) {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            used = CpuTime::thread().since(t0);
        }
        assert!(used.total() > 0.005, "60 s of spinning used {used:?}");
    }

    #[test]
    fn latency_quantiles() {
        let mut h = new_histogram();
        for i in 1..=100u64 {
            record(&mut h, Duration::from_micros(i));
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 100);
        assert!((49_000..=51_000).contains(&l.p50_ns), "{l:?}");
        assert!(l.max_ns >= 99_000);
        assert_eq!(Latency::of(&new_histogram()), Latency::default());
    }
}
