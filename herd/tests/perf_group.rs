//! Per-CPU perf groups (`perf/group.rs`) against the real kernel: one
//! group per CPU, read with one `read()` per CPU, counting exactly what
//! the ungrouped counters counted; an event that fails on one CPU is
//! unavailable and leaves no descriptor behind; a kernel that refuses
//! group members still counts everything, alone.
//!
//! Needs root (or perf_event_paranoid <= 1) and tracefs; otherwise the
//! test prints `SKIPPED: <why>`; under scripts/test.sh as root (CI), which
//! mounts tracefs, a missing capability fails the test instead.

mod common;

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use herd::perf::sys::{EventKind, Kernel, RealKernel};
use herd::perf::{CounterReading, Method, PerfArgs, Report, Scope, Session};
use perf_event::{Builder, Counter};

/// `n` threads that each take a shared lock and exit, joined.
fn threads(n: usize) -> u64 {
    let m = std::sync::Arc::new(std::sync::Mutex::new(0u64));
    let hs: Vec<_> = (0..n)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || *m.lock().unwrap() += 1)
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let n = *m.lock().unwrap();
    n
}

fn measure(args: &PerfArgs, cpus: &[usize], kernel: &dyn Kernel, n: usize) -> (Report, u64) {
    common::quiesce();
    let mut s = Session::open_with(args, cpus, kernel).expect("open");
    s.enable().unwrap();
    let exited = threads(n);
    s.disable().unwrap();
    (s.finish().unwrap(), exited)
}

fn counter<'r>(r: &'r Report, metric: &str) -> &'r CounterReading {
    r.counters
        .iter()
        .find(|c| c.metric == metric)
        .unwrap_or_else(|| panic!("no {metric} in {:?}", r.counters))
}

/// Descriptors of the hardware counters opened (never grouped).
fn hardware_fds(r: &Report) -> usize {
    let catalog = herd::perf::events::catalog(r.scope);
    r.counters
        .iter()
        .filter(|c| {
            catalog
                .iter()
                .any(|e| e.metric == c.metric && e.kind() == EventKind::Hardware)
        })
        .map(|c| c.fds)
        .sum()
}

/// The layout every per-CPU session must have: one group per CPU, one
/// read per group plus one per ungrouped (hardware) counter, every
/// counter one descriptor per CPU, per-CPU values adding up to totals.
fn check_grouped(r: &Report, cpus: usize) {
    assert_eq!(r.groups, cpus, "one group per CPU");
    assert_eq!(r.reads, cpus + hardware_fds(r), "one read() per CPU");
    for c in r.counters.iter().filter(|c| c.unavailable.is_none()) {
        assert_eq!(c.fds, cpus, "{}", c.metric);
        assert_eq!(c.per_cpu.len(), cpus, "{}", c.metric);
        let sum: u64 = c.per_cpu.iter().map(|v| v.raw).sum();
        assert_eq!(Some(sum), c.raw, "{}", c.metric);
        assert!(!c.not_counted, "{} not counted", c.metric);
    }
    eprintln!(
        "   {} groups, {} reads; open {} us, enable {} us, disable {} us, read {} us",
        r.groups, r.reads, r.open_us, r.enable_us, r.disable_us, r.read_us
    );
}

/// The real kernel, but refusing every group member: every event after
/// the first on a CPU is counted alone (the default `open_member`).
struct Ungrouped;

impl Kernel for Ungrouped {
    fn tracefs(&self) -> Option<std::path::PathBuf> {
        RealKernel.tracefs()
    }
    fn open(&self, b: &Builder) -> io::Result<Counter> {
        RealKernel.open(b)
    }
    fn paranoid(&self) -> Option<i32> {
        RealKernel.paranoid()
    }
    fn is_root(&self) -> bool {
        RealKernel.is_root()
    }
    fn process_cgroup(
        &self,
    ) -> Result<herd::perf::cgroup::CgroupScope, herd::perf::sys::Unavailable> {
        RealKernel.process_cgroup()
    }
}

/// The real kernel, failing every open of tracepoint `sys:name` with
/// EACCES from the `nth` on (0-based, counting opens alone and into
/// groups): the event opens on the first `nth` CPUs, then fails, as a
/// member and alone.
struct FailNth {
    id: u64,
    nth: usize,
    seen: AtomicUsize,
}

impl FailNth {
    fn new(sys: &str, name: &str, nth: usize) -> FailNth {
        FailNth {
            id: RealKernel.tracepoint_id(sys, name).unwrap(),
            nth,
            seen: AtomicUsize::new(0),
        }
    }
    fn check(&self, b: &Builder) -> io::Result<()> {
        // PERF_TYPE_TRACEPOINT is 2.
        let a = b.attrs();
        // Relaxed: one thread opens.
        if a.type_ == 2
            && a.config == self.id
            && self.seen.fetch_add(1, Ordering::Relaxed) >= self.nth
        {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        Ok(())
    }
}

impl Kernel for FailNth {
    fn tracefs(&self) -> Option<std::path::PathBuf> {
        RealKernel.tracefs()
    }
    fn open(&self, b: &Builder) -> io::Result<Counter> {
        self.check(b)?;
        RealKernel.open(b)
    }
    fn open_member(&self, b: &Builder, leader: &mut Counter) -> io::Result<Counter> {
        self.check(b)?;
        RealKernel.open_member(b, leader)
    }
    fn paranoid(&self) -> Option<i32> {
        RealKernel.paranoid()
    }
    fn is_root(&self) -> bool {
        RealKernel.is_root()
    }
}

/// One test function for the whole binary: process-scope counters see
/// every thread of the process, so no other test may run meanwhile.
#[test]
fn grouped_counters_on_the_real_kernel() {
    if !common::perf_usable() {
        return;
    }
    let online = herd::host::online_cpus();
    let system = PerfArgs {
        perf_scope: Scope::System,
        ..Default::default()
    };

    eprintln!("-- system scope: one group and one read per CPU, exits on the CPUs");
    let (r, exited) = measure(&system, &online, &RealKernel, 64);
    assert_eq!(r.method, Method::PerCpu);
    check_grouped(&r, online.len());
    let exits = counter(&r, "task_exits");
    // Any task's exit on these CPUs counts too (a shared machine).
    assert!(exits.raw.unwrap() >= exited, "{exits:?}");
    assert!(counter(&r, "tasks_created").raw.unwrap() >= exited);

    eprintln!("-- an event failing on one CPU: unavailable, none of its descriptors left");
    let k = online.len().min(2) - 1;
    for (sys, name, metric) in [
        // The first event of the catalog: it would lead every group.
        ("syscalls", "sys_enter_futex", "sys_futex"),
        ("task", "task_newtask", "tasks_created"),
    ] {
        // Warm up the process-wide descriptors (the session lock file).
        let before = herd::perf::budget::open_now();
        let fake = FailNth::new(sys, name, k);
        let mut s = Session::open_with(&system, &online, &fake).unwrap();
        let opened = herd::perf::budget::open_now() - before;
        s.enable().unwrap();
        threads(8);
        s.disable().unwrap();
        let r = s.finish().unwrap();
        let c = counter(&r, metric);
        assert!(c.raw.is_none() && c.fds == 0, "{c:?}");
        assert!(
            c.unavailable.as_ref().unwrap().reason.contains("EACCES"),
            "{c:?}"
        );
        let counted: usize = r.counters.iter().map(|c| c.fds).sum();
        assert_eq!(
            opened as usize, counted,
            "open descriptors = the counters' own"
        );
        assert_eq!(
            r.fd_budget.as_ref().unwrap().events as usize * online.len(),
            counted + r.counters.iter().filter(|c| c.fds == 0).count() * online.len(),
            "the budget planned every event on every CPU"
        );
        check_grouped(&r, online.len());
    }

    if !RealKernel.is_root() {
        common::skip("the rest: process scope counts through a cgroup only as root");
        return;
    }
    eprintln!("-- process scope through the cgroup: grouped, every exit exactly");
    let process = PerfArgs::default();
    let (r, exited) = measure(&process, &[], &RealKernel, 64);
    assert_eq!(r.method, Method::Cgroup, "{:?}", r.method_fallback);
    check_grouped(&r, online.len());
    assert_eq!(counter(&r, "task_exits").raw, Some(exited));
    assert_eq!(counter(&r, "tasks_created").raw, Some(exited));

    eprintln!("-- a kernel refusing group members: every counter alone, the same counts");
    let (r, exited) = measure(&process, &[], &Ungrouped, 64);
    assert_eq!(r.method, Method::Cgroup, "{:?}", r.method_fallback);
    assert_eq!(r.groups, online.len(), "leaders without members");
    let counted: usize = r.counters.iter().map(|c| c.fds).sum();
    assert_eq!(r.reads, counted, "one read() per counter");
    assert_eq!(counter(&r, "task_exits").raw, Some(exited));
    assert_eq!(counter(&r, "tasks_created").raw, Some(exited));
}
