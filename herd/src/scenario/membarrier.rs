//! `herd membarrier`: what membarrier(2) PRIVATE_EXPEDITED costs the writer,
//! and what it saves every reader.
//!
//! An RCU-style reader must order "I am reading" before reading the data,
//! and the writer must see that. The symmetric way puts a full fence
//! (`mfence`/`lock`-prefixed op on x86) in every read section. The
//! asymmetric way (liburcu's urcu-memb, exitq's readers) leaves the reader a
//! compiler fence only and has the writer pay: `membarrier(PRIVATE_EXPEDITED)`
//! makes the kernel run a full barrier on every CPU currently running a
//! thread of this process, by IPI. This scenario measures both sides:
//!
//! 1. read-side cost: nanoseconds per read section with a compiler fence vs
//!    with a SeqCst fence, interleaved A B A B over `--read-rounds` rounds
//!    of `--read-slice` each (medians);
//! 2. writer cost: membarrier calls per second and the latency distribution
//!    (hdrhistogram) for `--duration`, with `--load` threads running read
//!    sections on the other CPUs (each call must interrupt them), the
//!    calling thread's CPU time per call, and how much the IPIs slow the
//!    readers down (their rate just before vs during the calls).
//!
//! The break-even figure divides one call's mean latency by the saving per
//! read section: a writer that issues fewer than one membarrier per that many
//! read sections comes out ahead.
//!
//! The kernel's answers go through [`Kernel`], so tests can fake a kernel
//! without membarrier (hidden `--fake-kernel` flag).

use std::hint::black_box;
use std::sync::atomic::{compiler_fence, fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use crossbeam_utils::CachePadded;
use serde::Serialize;

use super::gpkit::{
    self, fmt_ns, fmt_rate, format_duration, new_histogram, record, CpuTime, Latency, OutputArgs,
};
use super::load::{self, Load, LoadThreads};
use crate::error::usage;
use crate::export::format::fmt_value;
use crate::perf::{self, PerfArgs};
use crate::result::{Metric, RunResult};
use crate::runner;

/// `MEMBARRIER_CMD_QUERY` (linux/membarrier.h).
pub const CMD_QUERY: i32 = 0;
/// `MEMBARRIER_CMD_GLOBAL` (formerly SHARED): waits for an RCU grace period.
pub const CMD_GLOBAL: i32 = 1 << 0;
/// `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (Linux 4.14).
pub const CMD_PRIVATE_EXPEDITED: i32 = 1 << 3;
/// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED` (Linux 4.14).
pub const CMD_REGISTER_PRIVATE_EXPEDITED: i32 = 1 << 4;

/// Which membarrier command the writer issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Cmd {
    /// MEMBARRIER_CMD_PRIVATE_EXPEDITED: IPIs the CPUs running our threads.
    PrivateExpedited,
    /// MEMBARRIER_CMD_GLOBAL: waits for a kernel RCU grace period (slow).
    Global,
}

impl Cmd {
    fn bits(self) -> i32 {
        match self {
            Cmd::PrivateExpedited => CMD_PRIVATE_EXPEDITED,
            Cmd::Global => CMD_GLOBAL,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Cmd::PrivateExpedited => "private-expedited",
            Cmd::Global => "global",
        }
    }
}

/// A pretend kernel for tests of the failure paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FakeKernel {
    /// membarrier(2) does not exist (ENOSYS).
    Enosys,
    /// QUERY works but lists no PRIVATE_EXPEDITED commands.
    NoPrivateExpedited,
    /// REGISTER_PRIVATE_EXPEDITED fails with EPERM.
    RegisterFails,
}

/// Flags of `herd membarrier`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Reader threads running on the other CPUs while the writer calls
    /// membarrier: idle (none), busy (one per online CPU but one) or a count.
    #[arg(long, default_value = "busy", value_parser = Load::parse)]
    pub load: Load,
    /// How long the writer calls membarrier.
    #[arg(long, default_value = "1s", value_parser = gpkit::parse_duration)]
    pub duration: Duration,
    /// The membarrier command the writer issues.
    #[arg(long, value_enum, default_value_t = Cmd::PrivateExpedited)]
    pub cmd: Cmd,
    /// Read-side cost: rounds of (compiler fence, SeqCst fence), interleaved.
    #[arg(long, default_value_t = 6)]
    pub read_rounds: usize,
    /// Read-side cost: how long each mode runs in each round.
    #[arg(long, default_value = "50ms", value_parser = gpkit::parse_duration)]
    pub read_slice: Duration,
    /// Test hook: pretend the kernel lacks membarrier or refuses registration.
    #[arg(long, value_enum, hide = true)]
    pub fake_kernel: Option<FakeKernel>,
    /// perf counters.
    #[command(flatten)]
    pub perf: PerfArgs,
    /// Output format and repetitions.
    #[command(flatten)]
    pub output: OutputArgs,
}

impl Args {
    fn validate(&self) -> Result<()> {
        if self.duration < Duration::from_millis(1) {
            return Err(usage("--duration", "must be at least 1ms"));
        }
        if self.duration > gpkit::MAX_RUN {
            return Err(usage("--duration", "must be at most 24h"));
        }
        if !(1..=1000).contains(&self.read_rounds) {
            return Err(usage("--read-rounds", "must be between 1 and 1000"));
        }
        if self.read_slice < Duration::from_micros(100) || self.read_slice > Duration::from_secs(60)
        {
            return Err(usage("--read-slice", "must be between 100us and 60s"));
        }
        Ok(())
    }

    /// The arguments that reproduce this configuration (no output flags).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            "--load".into(),
            self.load.label(),
            "--duration".into(),
            format_duration(self.duration),
            "--cmd".into(),
            self.cmd.name().into(),
            "--read-rounds".into(),
            self.read_rounds.to_string(),
            "--read-slice".into(),
            format_duration(self.read_slice),
        ];
        if let Some(f) = self.fake_kernel {
            a.push("--fake-kernel".into());
            a.push(
                match f {
                    FakeKernel::Enosys => "enosys",
                    FakeKernel::NoPrivateExpedited => "no-private-expedited",
                    FakeKernel::RegisterFails => "register-fails",
                }
                .into(),
            );
        }
        a.extend(gpkit::perf_args(&self.perf));
        a
    }
}

/// The kernel's membarrier(2), or a fake one for tests.
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    fake: Option<FakeKernel>,
}

impl Kernel {
    /// membarrier(cmd, flags=0, cpu_id=0); the errno on failure.
    pub fn membarrier(&self, cmd: i32) -> std::result::Result<i64, nix::errno::Errno> {
        match self.fake {
            Some(FakeKernel::Enosys) => return Err(nix::errno::Errno::ENOSYS),
            Some(FakeKernel::NoPrivateExpedited) if cmd == CMD_QUERY => {
                return Ok(CMD_GLOBAL as i64)
            }
            Some(FakeKernel::RegisterFails) if cmd == CMD_REGISTER_PRIVATE_EXPEDITED => {
                return Err(nix::errno::Errno::EPERM)
            }
            _ => {}
        }
        // SAFETY: membarrier(2) takes three integer arguments and touches no
        // memory of ours; any command value is checked by the kernel.
        let r = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0u32, 0i32) };
        if r < 0 {
            Err(nix::errno::Errno::last())
        } else {
            Ok(r)
        }
    }

    /// Checks that `cmd` is supported and registers for it; a clear error
    /// when the kernel lacks it or registration fails.
    pub fn prepare(&self, cmd: Cmd) -> Result<i64> {
        let mask = match self.membarrier(CMD_QUERY) {
            Ok(m) => m,
            Err(nix::errno::Errno::ENOSYS) => bail!(
                "membarrier(2) is not available: the kernel returned ENOSYS (built without \
                 CONFIG_MEMBARRIER, older than Linux 4.3, or blocked by a seccomp filter)"
            ),
            Err(e) => bail!(
                "membarrier(MEMBARRIER_CMD_QUERY) failed: {e} ({})",
                e.desc()
            ),
        };
        let need = cmd.bits();
        if mask & need as i64 == 0 {
            bail!(
                "this kernel's membarrier(2) does not support MEMBARRIER_CMD_{} \
                 (supported command mask 0x{mask:x}; PRIVATE_EXPEDITED needs Linux 4.14){}",
                cmd.name().to_uppercase().replace('-', "_"),
                if cmd == Cmd::PrivateExpedited && mask & CMD_GLOBAL as i64 != 0 {
                    "; `--cmd global` works here"
                } else {
                    ""
                }
            );
        }
        if cmd == Cmd::PrivateExpedited {
            if let Err(e) = self.membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) {
                bail!(
                    "membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) failed: {e} ({}); \
                     without registration PRIVATE_EXPEDITED returns EPERM",
                    e.desc()
                );
            }
        }
        Ok(mask)
    }
}

/// One RCU-style read section: announce, fence, read, fence, retire.
/// `FULL` picks a SeqCst fence (symmetric) or a compiler fence (asymmetric:
/// the writer's membarrier supplies the hardware barrier).
#[inline(always)]
fn read_section<const FULL: bool>(slot: &AtomicU64, data: &AtomicU64, period: u64) -> u64 {
    // Relaxed: the writer reads `slot` after its membarrier (asymmetric) or
    // after its own SeqCst fence that pairs with the one below (symmetric).
    slot.store(period, Ordering::Relaxed);
    if FULL {
        // Pairs with the writer's SeqCst fence: orders the announce above
        // before the data load below (store-load ordering needs a full fence).
        fence(Ordering::SeqCst);
    } else {
        // Compiler-only: the writer's membarrier IPI makes this CPU execute a
        // full barrier, which supplies the hardware ordering when needed.
        compiler_fence(Ordering::SeqCst);
    }
    let v = data.load(Ordering::Relaxed);
    if FULL {
        // Pairs with the writer's fence: the data load completes before the
        // retire store below becomes visible.
        fence(Ordering::SeqCst);
    } else {
        // Compiler-only, as above: paired with the writer's membarrier.
        compiler_fence(Ordering::SeqCst);
    }
    slot.store(0, Ordering::Relaxed);
    v
}

/// A reader's announce slot and a data word, on their own cache lines and
/// visible to other threads (their addresses escape through `black_box`), so
/// the compiler must keep every access, as for a real reader registry.
fn shared_words() -> (Box<CachePadded<AtomicU64>>, Box<CachePadded<AtomicU64>>) {
    let slot = Box::new(CachePadded::new(AtomicU64::new(0)));
    let data = Box::new(CachePadded::new(AtomicU64::new(1)));
    black_box((
        &*slot as *const CachePadded<AtomicU64>,
        &*data as *const CachePadded<AtomicU64>,
    ));
    (slot, data)
}

/// Runs read sections for `slice`; returns nanoseconds per section.
fn time_reader<const FULL: bool>(slice: Duration) -> f64 {
    let (slot, data) = shared_words();
    let (slot, data) = (&*slot, &*data);
    let start = Instant::now();
    let mut sections = 0u64;
    let mut acc = 0u64;
    loop {
        for _ in 0..1024 {
            acc = acc.wrapping_add(read_section::<FULL>(slot, data, sections | 1));
        }
        sections += 1024;
        let el = start.elapsed();
        if el >= slice {
            black_box(acc);
            return el.as_nanos() as f64 / sections as f64;
        }
    }
}

/// Read-side cost of both fence kinds, interleaved.
#[derive(Debug, Clone, Serialize)]
pub struct ReadCost {
    /// ns per section with a compiler fence, each round.
    pub compiler_fence_ns: Vec<f64>,
    /// ns per section with a SeqCst fence, each round.
    pub seqcst_fence_ns: Vec<f64>,
    /// Median of `compiler_fence_ns`.
    pub compiler_median_ns: f64,
    /// Median of `seqcst_fence_ns`.
    pub seqcst_median_ns: f64,
}

fn median(v: &[f64]) -> f64 {
    crate::stats::Summary::of(v).map_or(0.0, |s| s.median)
}

/// Measures the read-side cost: `rounds` of (compiler, SeqCst), A B A B.
pub fn measure_read_cost(rounds: usize, slice: Duration) -> ReadCost {
    let (mut c, mut s) = (Vec::new(), Vec::new());
    // Warm up once so the first slice does not pay for page faults.
    time_reader::<false>(slice / 4);
    for _ in 0..rounds {
        c.push(time_reader::<false>(slice));
        s.push(time_reader::<true>(slice));
    }
    ReadCost {
        compiler_median_ns: median(&c),
        seqcst_median_ns: median(&s),
        compiler_fence_ns: c,
        seqcst_fence_ns: s,
    }
}

/// Per-reader section counters, sampled by the writer.
type Counters = Arc<Vec<CachePadded<AtomicU64>>>;

fn reader_total(c: &Counters) -> u64 {
    c.iter().map(|a| a.load(Ordering::Relaxed)).sum()
}

/// Runs `herd membarrier`.
pub fn run(args: &Args) -> Result<u8> {
    args.validate()?;
    let nload = args.load.threads(gpkit::usable_cpus().len());
    gpkit::preflight_threads("--load", &format!("{nload} reader(s)"), nload + 1)?;
    let (code, _) = gpkit::run_scenario("membarrier", &args.output, || run_once(args), render)?;
    Ok(code)
}

fn run_once(args: &Args) -> Result<RunResult> {
    let kernel = Kernel {
        fake: args.fake_kernel,
    };
    let mask = kernel.prepare(args.cmd)?;
    let cpus = gpkit::usable_cpus();
    let nload = args.load.threads(cpus.len());
    let mut result = RunResult::new(
        "membarrier",
        args.to_args(),
        serde_json::json!({
            "cmd": args.cmd,
            "load": args.load,
            "load_threads": nload,
            "duration_s": args.duration.as_secs_f64(),
            "read_rounds": args.read_rounds,
            "read_slice_s": args.read_slice.as_secs_f64(),
        }),
        gpkit::host_facts(),
    );

    // 1. Read side, before any load thread exists (quiet CPUs).
    let read = measure_read_cost(args.read_rounds, args.read_slice);

    // Counters before the readers: process-scope counters are inherited
    // only by threads created after they are opened.
    let mut session = perf::Session::open(&args.perf, &cpus)?;

    // 2. Readers on the other CPUs; they count their sections.
    let counters: Counters = Arc::new(
        (0..nload)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    );
    let c2 = Arc::clone(&counters);
    let load = LoadThreads::start("reader", nload, move |i, stop| {
        let (slot, data) = shared_words();
        let (slot, data) = (&*slot, &*data);
        let mut n = 0u64;
        let mut acc = 0u64;
        // At least one round of sections, however late the scheduler runs
        // us: the stop is checked after it.
        loop {
            for _ in 0..256 {
                acc = acc.wrapping_add(read_section::<false>(slot, data, n | 1));
            }
            n += 256;
            c2[i].store(n, Ordering::Relaxed);
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        black_box(acc);
        n
    })?;

    // Reader rate without membarrier, just before the calls.
    let baseline_window =
        (args.duration / 4).clamp(Duration::from_millis(5), Duration::from_millis(250));
    let (b0, bt0) = (reader_total(&counters), Instant::now());
    let mut completed = gpkit::wait_until(bt0 + baseline_window);
    let reader_rate_before = (reader_total(&counters) - b0) as f64 / bt0.elapsed().as_secs_f64();

    // 3. The writer's calls.
    let mut hist = new_histogram();
    let calls = AtomicUsize::new(0);
    let (r0, t_proc0, t_me0) = (
        reader_total(&counters),
        CpuTime::process(),
        CpuTime::thread(),
    );
    session.enable()?;
    let start = Instant::now();
    let deadline = start + args.duration;
    let bits = args.cmd.bits();
    if completed {
        loop {
            let t = Instant::now();
            if let Err(e) = kernel.membarrier(bits) {
                session.disable()?;
                bail!(
                    "membarrier(MEMBARRIER_CMD_{}) failed after {} calls: {e} ({})",
                    args.cmd.name().to_uppercase().replace('-', "_"),
                    calls.load(Ordering::Relaxed),
                    e.desc()
                );
            }
            let done = Instant::now();
            record(&mut hist, done - t);
            calls.fetch_add(1, Ordering::Relaxed);
            if done >= deadline {
                break;
            }
            if calls.load(Ordering::Relaxed).is_multiple_of(64) && runner::interrupted() {
                completed = false;
                break;
            }
        }
    }
    let elapsed = start.elapsed();
    session.disable()?;
    let me_cpu = CpuTime::thread().since(t_me0);
    let proc_cpu = CpuTime::process().since(t_proc0);
    let reader_rate_during = (reader_total(&counters) - r0) as f64 / elapsed.as_secs_f64();
    let reports = load.stop();
    let totals = load::totals(&reports);
    let report = session.finish()?;

    let calls = calls.into_inner() as u64;
    let lat = Latency::of(&hist);
    let secs = elapsed.as_secs_f64();
    let saved = read.seqcst_median_ns - read.compiler_median_ns;

    result.interrupted = !completed;
    result.push(Metric::higher("calls_per_s", "/s", calls as f64 / secs));
    result.push(Metric::lower("latency_mean_ns", "ns", lat.mean_ns));
    result.push(Metric::lower("latency_p50_ns", "ns", lat.p50_ns as f64));
    result.push(Metric::lower("latency_p99_ns", "ns", lat.p99_ns as f64));
    result.push(Metric::lower("latency_max_ns", "ns", lat.max_ns as f64));
    if calls > 0 {
        result.push(Metric::lower(
            "caller_cpu_ns_per_call",
            "ns",
            me_cpu.total() * 1e9 / calls as f64,
        ));
        result.push(Metric::lower(
            "caller_sys_ns_per_call",
            "ns",
            me_cpu.sys_s * 1e9 / calls as f64,
        ));
    }
    result.push(Metric::lower("process_user_s", "s", proc_cpu.user_s));
    result.push(Metric::lower("process_sys_s", "s", proc_cpu.sys_s));
    result.push(Metric::lower(
        "read_ns_compiler_fence",
        "ns",
        read.compiler_median_ns,
    ));
    result.push(Metric::lower(
        "read_ns_seqcst_fence",
        "ns",
        read.seqcst_median_ns,
    ));
    result.push(Metric::info("read_saved_ns", "ns", saved));
    if saved > 0.0 && calls > 0 {
        result.push(Metric::info(
            "break_even_sections_per_call",
            "sections",
            lat.mean_ns / saved,
        ));
    }
    if nload > 0 {
        result.push(Metric::info(
            "reader_sections_per_s_before",
            "/s",
            reader_rate_before,
        ));
        result.push(Metric::higher(
            "reader_sections_per_s_during",
            "/s",
            reader_rate_during,
        ));
        // Only when the readers ran in the baseline window (a loaded
        // machine may not schedule them in a short one).
        if reader_rate_before > 0.0 {
            result.push(Metric::lower(
                "reader_slowdown_pct",
                "%",
                100.0 * (1.0 - reader_rate_during / reader_rate_before),
            ));
        }
    }
    result.push(Metric::info("load_threads", "threads", nload as f64));
    result.push(Metric::info("calls", "calls", calls as f64));
    for m in report.metrics(0) {
        result.push(m);
    }
    for n in report.notes() {
        result.warnings.push(n);
    }
    result.perf = report.to_json();
    result.details = serde_json::json!({
        "query_mask": format!("0x{mask:x}"),
        "latency": lat,
        "read_cost": read,
        "elapsed_s": secs,
        "caller_cpu": me_cpu,
        "process_cpu": proc_cpu,
        "readers": reports,
        "reader_cpu": totals.cpu,
        "reader_baseline_window_s": baseline_window.as_secs_f64(),
    });
    Ok(result)
}

fn render(r: &RunResult) -> String {
    let m = |n: &str| r.metric(n);
    let d = &r.details;
    let lat = &d["latency"];
    let g = |k: &str| lat[k].as_f64().unwrap_or(0.0);
    let mut s = String::from("\n");
    s += &format!(
        "membarrier {} with {} reader thread(s) on the other CPUs, {:.2}s{}\n",
        r.config["cmd"].as_str().unwrap_or("?"),
        r.config["load_threads"],
        d["elapsed_s"].as_f64().unwrap_or(0.0),
        if r.interrupted { " (interrupted)" } else { "" }
    );
    s += &format!(
        "  writer: {} calls, {}  latency mean {}  p50 {}  p99 {}  max {}\n",
        lat["count"],
        fmt_rate(m("calls_per_s").unwrap_or(0.0)),
        fmt_ns(g("mean_ns")),
        fmt_ns(g("p50_ns")),
        fmt_ns(g("p99_ns")),
        fmt_ns(g("max_ns")),
    );
    if let (Some(c), Some(sys)) = (m("caller_cpu_ns_per_call"), m("caller_sys_ns_per_call")) {
        s += &format!(
            "  writer CPU per call: {} ({} in the kernel); process CPU user {}s sys {}s\n",
            fmt_ns(c),
            fmt_ns(sys),
            fmt_value(m("process_user_s").unwrap_or(0.0)),
            fmt_value(m("process_sys_s").unwrap_or(0.0)),
        );
    }
    s += &format!(
        "  reader: {} per section with a compiler fence, {} with a SeqCst fence: saves {} per read section\n",
        fmt_ns(m("read_ns_compiler_fence").unwrap_or(0.0)),
        fmt_ns(m("read_ns_seqcst_fence").unwrap_or(0.0)),
        fmt_ns(m("read_saved_ns").unwrap_or(0.0)),
    );
    if let Some(b) = m("break_even_sections_per_call") {
        s += &format!(
            "  break-even: one membarrier per {} read sections\n",
            fmt_value(b)
        );
    }
    if let (Some(b), Some(du), Some(sl)) = (
        m("reader_sections_per_s_before"),
        m("reader_sections_per_s_during"),
        m("reader_slowdown_pct"),
    ) {
        s += &format!(
            "  readers under the IPIs: {} before, {} during ({:.1}% slowdown)\n",
            fmt_rate(b),
            fmt_rate(du),
            sl
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_kernels_fail_clearly() {
        let e = Kernel {
            fake: Some(FakeKernel::Enosys),
        }
        .prepare(Cmd::PrivateExpedited)
        .unwrap_err();
        assert!(format!("{e}").contains("ENOSYS"), "{e}");
        let e = Kernel {
            fake: Some(FakeKernel::NoPrivateExpedited),
        }
        .prepare(Cmd::PrivateExpedited)
        .unwrap_err();
        assert!(format!("{e}").contains("--cmd global"), "{e}");
        let e = Kernel {
            fake: Some(FakeKernel::RegisterFails),
        }
        .prepare(Cmd::PrivateExpedited)
        .unwrap_err();
        assert!(format!("{e}").contains("REGISTER_PRIVATE_EXPEDITED"), "{e}");
    }

    #[test]
    fn real_kernel_registers_or_explains() {
        let real = Kernel { fake: None };
        match real.prepare(Cmd::PrivateExpedited) {
            Ok(mask) => {
                assert!(mask & CMD_PRIVATE_EXPEDITED as i64 != 0);
                real.membarrier(CMD_PRIVATE_EXPEDITED).unwrap();
            }
            // A kernel without it explains; under the test command as root
            // (HERD_TEST_STRICT=1, see herd/tests/common/skip.rs) it must
            // be there.
            Err(e) => {
                assert!(format!("{e:#}").contains("MEMBARRIER"), "{e:#}");
                assert!(
                    std::env::var("HERD_TEST_STRICT").as_deref() != Ok("1"),
                    "membarrier PRIVATE_EXPEDITED unavailable: {e:#}"
                );
                eprintln!("SKIPPED: membarrier PRIVATE_EXPEDITED unavailable here: {e:#}");
            }
        }
    }

    #[test]
    fn read_cost_measures_both_fence_kinds() {
        let r = measure_read_cost(3, Duration::from_millis(5));
        assert_eq!(r.compiler_fence_ns.len(), 3);
        assert!(r.compiler_median_ns > 0.0 && r.seqcst_median_ns > 0.0);
    }
}
