//! The perf counters against the real kernel: a small storm of threads must
//! show up as futex calls, thread creations and exactly as many exits.
//!
//! Needs root (or perf_event_paranoid <= 1) and tracefs; otherwise every
//! test prints `SKIPPED: <why>`; under scripts/test.sh as root (CI), which
//! mounts tracefs, a missing capability fails the test instead.

mod common;

use std::sync::{Arc, Barrier, Condvar, Mutex};

use herd::perf::sys::{Kernel, RealKernel};
use herd::perf::{Method, PerfArgs, Report, Scope, Session};

/// `waves` waves of `per_wave` threads that meet at a barrier, hand a
/// token around a mutex + condvar (futex wait/wake), then exit and are joined.
fn futex_storm(waves: usize, per_wave: usize) -> u64 {
    let mut exited = 0;
    for _ in 0..waves {
        let barrier = Arc::new(Barrier::new(per_wave));
        let token = Arc::new((Mutex::new(0usize), Condvar::new()));
        let handles: Vec<_> = (0..per_wave)
            .map(|i| {
                let (barrier, token) = (barrier.clone(), token.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let (m, cv) = &*token;
                    let mut turn = m.lock().unwrap();
                    while *turn != i {
                        turn = cv.wait(turn).unwrap();
                    }
                    *turn += 1;
                    cv.notify_all();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
            exited += 1;
        }
    }
    exited
}

/// One test function for the whole binary: process-scope counters see
/// every thread of the process, so no other test may run (or have its
/// harness thread exit, or be spawned) while one measures.
#[test]
fn real_kernel_counters() {
    if !common::perf_usable() {
        return;
    }
    eprintln!("-- process scope: futex, newtask, exits");
    process_scope_counts_futex_newtask_and_every_exit();
    eprintln!("-- process scope with inherited counters (no cgroup)");
    process_scope_inherited_counters_count_the_same();
    eprintln!("-- inherited counters on a kernel that misses exits: reported, not 0");
    inherited_exits_missed_are_reported_unavailable();
    eprintln!("-- --per-node with inherited counters: a usage error (exit 2)");
    per_node_needs_per_cpu_counters();
    eprintln!("-- enable/disable alternating: only enabled periods count");
    counts_accumulate_over_enabled_periods_only();
    eprintln!("-- system scope");
    system_scope_counts_per_cpu_including_our_threads();
    eprintln!("-- contention profile on mmap_lock");
    contention_sampler_pairs_begin_and_end_on_mmap_lock();
    eprintln!("-- herd's helper threads are not counted (cgroup and inherited)");
    helper_threads_are_not_counted();
}

/// A registered helper thread (as the progress bar's and the contention
/// drain are) makes 20,000 futex calls while the counters run; process
/// scope must not count them, through the cgroup (threaded split) or with
/// inherited counters. Before the fix both counted them.
fn helper_threads_are_not_counted() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    const CALLS: usize = 20_000;
    for (name, kernel) in [
        ("real kernel", &RealKernel as &dyn Kernel),
        ("inherited", &InheritOnly),
    ] {
        common::quiesce();
        let go = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (g, d) = (go.clone(), done.clone());
        let helper = std::thread::spawn(move || {
            herd::perf::helpers::register_current();
            ready_tx.send(()).unwrap();
            while !g.load(Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let word = AtomicU32::new(0);
            for _ in 0..CALLS {
                // SAFETY: FUTEX_WAKE on a valid word; nothing is written.
                unsafe {
                    libc::syscall(
                        libc::SYS_futex,
                        word.as_ptr(),
                        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                        1,
                    );
                }
            }
            d.store(true, Ordering::Release);
            herd::perf::helpers::leave();
        });
        ready_rx.recv().unwrap();
        let mut s = Session::open_with(&PerfArgs::default(), &[], kernel).unwrap();
        s.enable().unwrap();
        go.store(true, Ordering::Release);
        while !done.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        s.disable().unwrap();
        let r = s.finish().unwrap();
        helper.join().unwrap();
        let futex = r.value("sys_futex").unwrap();
        eprintln!(
            "{name}: method {:?}, sys_futex {futex}, helpers excluded {}",
            r.method, r.helpers_excluded
        );
        assert!(
            r.helpers_counted.is_none(),
            "{name}: {:?}",
            r.helpers_counted
        );
        assert!(r.helpers_excluded >= 1, "{name}");
        assert!(
            futex < (CALLS / 10) as f64,
            "{name}: the helper's {CALLS} futex calls were counted ({futex})"
        );
    }
}

/// The real kernel without the cgroup method: process scope falls back to
/// counters inherited thread by thread.
struct InheritOnly;

impl Kernel for InheritOnly {
    fn tracefs(&self) -> Option<std::path::PathBuf> {
        RealKernel.tracefs()
    }
    fn open(&self, b: &perf_event::Builder) -> std::io::Result<perf_event::Counter> {
        RealKernel.open(b)
    }
    fn paranoid(&self) -> Option<i32> {
        RealKernel.paranoid()
    }
    fn is_root(&self) -> bool {
        RealKernel.is_root()
    }
}

fn per_node_needs_per_cpu_counters() {
    common::quiesce();
    let args = PerfArgs {
        per_node: true,
        ..Default::default()
    };
    let err = match Session::open_with(&args, &[], &InheritOnly) {
        Ok(_) => panic!("--per-node opened per-thread counters"),
        Err(e) => e,
    };
    assert_eq!(herd::error::exit_code_for(&err), 2, "{err:#}");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("--per-node") && msg.contains("--perf-scope system"),
        "{msg}"
    );
    // The cgroup method has per-CPU values: --per-node opens.
    let s = Session::open_with(&args, &[], &RealKernel).unwrap();
    let r = s.finish().unwrap();
    assert_eq!(r.method, Method::Cgroup, "{:?}", r.method_fallback);
    assert!(r.per_node);
    assert!(
        r.counters
            .iter()
            .filter(|c| c.value.is_some())
            .all(|c| !c.per_node.is_empty()),
        "every counted counter has per-node values"
    );
}

fn process_scope_inherited_counters_count_the_same() {
    common::quiesce();
    let mut s = Session::open_with(&PerfArgs::default(), &[], &InheritOnly).unwrap();
    s.enable().unwrap();
    let exits = futex_storm(3, 16);
    s.disable().unwrap();
    let r = s.finish().unwrap();
    assert_eq!(r.method, Method::Inherit);
    assert!(r.threads_at_open >= 1);
    assert!(
        r.counters.iter().all(|c| c.per_cpu.is_empty()),
        "per-thread counters have no CPU"
    );
    assert!(
        r.notes().iter().any(|n| n.contains("via a cgroup")),
        "{:?}",
        r.notes()
    );
    assert_eq!(r.value("task_exits"), Some(exits as f64));
    assert_eq!(r.value("tasks_created"), Some(exits as f64));
    assert!(r.value("sys_futex").unwrap() > 0.0);
}

/// The real kernel without the cgroup method, where `sched_process_exit`
/// is never seen on inherited counters: its id is that of a tracepoint
/// nothing here fires (`syscalls:sys_enter_reboot`), as if the kernel
/// detached the counters before the exit tracepoint (Debian's 6.1 does).
struct ExitsMissed;

impl Kernel for ExitsMissed {
    fn tracefs(&self) -> Option<std::path::PathBuf> {
        RealKernel.tracefs()
    }
    fn open(&self, b: &perf_event::Builder) -> std::io::Result<perf_event::Counter> {
        RealKernel.open(b)
    }
    fn paranoid(&self) -> Option<i32> {
        RealKernel.paranoid()
    }
    fn is_root(&self) -> bool {
        RealKernel.is_root()
    }
    fn tracepoint_id(&self, sys: &str, name: &str) -> Result<u64, herd::perf::sys::Unavailable> {
        match (sys, name) {
            ("sched", "sched_process_exit") => {
                RealKernel.tracepoint_id("syscalls", "sys_enter_reboot")
            }
            _ => RealKernel.tracepoint_id(sys, name),
        }
    }
}

fn inherited_exits_missed_are_reported_unavailable() {
    common::quiesce();
    let mut s = Session::open_with(&PerfArgs::default(), &[], &ExitsMissed).unwrap();
    s.enable().unwrap();
    let exits = futex_storm(2, 8);
    s.disable().unwrap();
    let r = s.finish().unwrap();
    assert_eq!(r.method, Method::Inherit);
    let c = r
        .counters
        .iter()
        .find(|c| c.metric == "task_exits")
        .unwrap();
    assert_eq!(c.value, None, "never a silent 0: {c:?}");
    let u = c.unavailable.as_ref().expect("task_exits unavailable");
    assert!(u.reason.contains("probe thread's exit counted 0"), "{u:?}");
    assert!(u.fix.contains("--perf-scope system"), "{u:?}");
    assert!(r.metrics(exits).iter().all(|m| m.name != "task_exits"));
    assert!(
        r.notes()
            .iter()
            .any(|n| n.contains("sched:sched_process_exit unavailable")),
        "{:?}",
        r.notes()
    );
    // Everything else still counts; the probe's thread is not counted.
    assert_eq!(r.value("tasks_created"), Some(exits as f64));
    // With --require-perf a counter that cannot count is fatal.
    common::quiesce();
    let strict = PerfArgs {
        require_perf: true,
        ..Default::default()
    };
    let err = Session::open_with(&strict, &[], &ExitsMissed).unwrap_err();
    assert!(
        format!("{err:#}").contains("sched:sched_process_exit"),
        "{err:#}"
    );
}

fn counts_accumulate_over_enabled_periods_only() {
    common::quiesce();
    let mut s = Session::open(&PerfArgs::default(), &[]).unwrap();
    s.enable().unwrap();
    let a = futex_storm(1, 8);
    s.disable().unwrap();
    let hidden = futex_storm(1, 5); // not counted
    s.enable().unwrap();
    s.enable().unwrap(); // a second enable is a no-op
    let b = futex_storm(1, 3);
    s.disable().unwrap();
    s.disable().unwrap();
    let r = s.finish().unwrap();
    assert_eq!(hidden, 5);
    // Tracepoint counts are exact, never scaled: a loaded machine gives a
    // cgroup counter less running than enabled time on a CPU, and scaling
    // that once turned these 11 exits into 24.17.
    let exits = r
        .counters
        .iter()
        .find(|c| c.metric == "task_exits")
        .unwrap();
    assert_eq!(exits.raw, Some(a + b), "{exits:?}");
    assert_eq!(r.value("task_exits"), Some((a + b) as f64));
    assert_eq!(r.value("tasks_created"), Some((a + b) as f64));
}

fn measure(args: &PerfArgs, work: impl FnOnce() -> u64) -> (Report, u64) {
    common::quiesce();
    let mut s = Session::open(args, &[]).expect("open");
    s.enable().unwrap();
    let exits = work();
    s.disable().unwrap();
    (s.finish().unwrap(), exits)
}

fn process_scope_counts_futex_newtask_and_every_exit() {
    let args = PerfArgs::default();
    let (r, exits) = measure(&args, || futex_storm(4, 16));
    // As root, process scope counts through the process's own cgroup.
    if RealKernel.is_root() {
        assert_eq!(r.method, Method::Cgroup, "{:?}", r.method_fallback);
    }
    eprintln!("{}", r.counter_table());
    for n in r.notes() {
        eprintln!("{n}");
    }
    assert_eq!(exits, 64);
    assert_eq!(
        r.value("task_exits"),
        Some(exits as f64),
        "one sched_process_exit per thread"
    );
    assert_eq!(
        r.value("tasks_created"),
        Some(exits as f64),
        "one task_newtask per thread"
    );
    let futex = r
        .metrics(exits)
        .iter()
        .find(|m| m.name == "futex_calls")
        .map(|m| m.value);
    assert!(futex.unwrap_or(0.0) > 0.0, "futex calls counted: {futex:?}");
    assert!(r.value("context_switches").unwrap_or(0.0) > 0.0);
    assert!(r.value("task_clock_ms").unwrap_or(0.0) > 0.0);
    let per_exit = r
        .metrics(exits)
        .into_iter()
        .find(|m| m.name == "futex_per_exit")
        .unwrap();
    assert!(per_exit.value > 0.0);
    // Every required counter opened on this machine.
    for c in &r.counters {
        assert!(
            c.optional || c.unavailable.is_none(),
            "{} unavailable: {:?}",
            c.event,
            c.unavailable
        );
    }
}

/// Threads that map, touch and unmap memory in one address space: every
/// mmap/munmap takes the process's mmap_lock for writing and page faults
/// take it for reading, so they contend on it (an rwsem).
fn mmap_storm(threads: usize, iters: usize) -> u64 {
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..iters {
                    let len = 256 << 10;
                    // SAFETY: an anonymous private mapping, not aliased; unmapped below.
                    let p = unsafe {
                        libc::mmap(
                            std::ptr::null_mut(),
                            len,
                            libc::PROT_READ | libc::PROT_WRITE,
                            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                            -1,
                            0,
                        )
                    };
                    assert_ne!(p, libc::MAP_FAILED);
                    for off in (0..len).step_by(4096) {
                        // SAFETY: `off < len`, inside the mapping we own.
                        unsafe { (p as *mut u8).add(off).write_volatile(1) };
                    }
                    // SAFETY: `p`/`len` is exactly the mapping created above.
                    unsafe { libc::munmap(p, len) };
                }
            })
        })
        .collect();
    let n = handles.len() as u64;
    for h in handles {
        h.join().unwrap();
    }
    n
}

fn contention_sampler_pairs_begin_and_end_on_mmap_lock() {
    let args = PerfArgs {
        contention: true,
        ..Default::default()
    };
    let (r, exits) = measure(&args, || mmap_storm(8, 400));
    for n in r.notes() {
        eprintln!("{n}");
    }
    let table = r.contention_table().expect("contention profile taken");
    eprintln!("{table}");
    let c = r.contention.as_ref().unwrap();
    assert!(c.pairs > 0, "mmap/munmap storm must contend: {c:?}");
    assert!(
        c.by_lock.iter().any(|s| s.class.starts_with("rwsem")),
        "mmap_lock is an rwsem"
    );
    // Every sample is accounted for: a begin is paired, nested into the
    // same wait (mutex spin then sleep) or unfinished; an end is paired or unmatched.
    assert!(c.pairs + c.unfinished <= c.begins);
    assert_eq!(c.pairs + c.unmatched_ends, c.ends);
    if c.rows_omitted == 0 {
        assert_eq!(c.by_lock.iter().map(|s| s.contended).sum::<u64>(), c.pairs);
        assert_eq!(
            c.by_lock.iter().map(|s| s.total_ns).sum::<u64>(),
            c.total_wait_ns
        );
    }
    for s in &c.by_lock {
        assert!(s.min_ns <= s.avg_ns() && s.avg_ns() <= s.max_ns, "{s:?}");
    }
    // With no sample lost, the sampled begins are what the counter counted:
    // the counters are enabled just before the samplers and disabled just
    // after them, so the counter may also see a contention or two in
    // between, never fewer.
    if c.lost == 0 && c.dropped == 0 {
        let counted = r.value("lock_contentions").unwrap();
        let begins = c.begins as f64;
        assert!(
            begins <= counted && counted - begins <= 2.0 + counted * 0.01,
            "sampled {begins} begins, counted {counted}"
        );
    } else {
        eprintln!(
            "lost {} dropped {}: not comparing with the counter",
            c.lost, c.dropped
        );
    }
    assert_eq!(r.value("task_exits"), Some(exits as f64));
    assert!(table.contains("contended") && table.contains("total wait") && table.contains("lost:"));
}

fn system_scope_counts_per_cpu_including_our_threads() {
    let cpus = herd::host::online_cpus();
    let args = PerfArgs {
        perf_scope: Scope::System,
        ..Default::default()
    };
    let mut s = Session::open(&args, &cpus).unwrap();
    s.enable().unwrap();
    let exits = futex_storm(2, 8);
    s.disable().unwrap();
    let r = s.finish().unwrap();
    assert_eq!(r.cpus, cpus);
    let exit = r
        .counters
        .iter()
        .find(|c| c.metric == "task_exits")
        .unwrap();
    assert_eq!(exit.fds, cpus.len(), "one counter per CPU");
    // Every CPU's value, in the CPU list's order, summing to the total.
    for c in r.counters.iter().filter(|c| c.unavailable.is_none()) {
        let listed: Vec<usize> = c.per_cpu.iter().map(|v| v.cpu).collect();
        assert_eq!(listed, cpus, "{}: one value per CPU", c.metric);
        let raw: u64 = c.per_cpu.iter().map(|v| v.raw).sum();
        assert_eq!(Some(raw), c.raw, "{}", c.metric);
        let sum: f64 = c.per_cpu.iter().map(|v| v.value).sum();
        assert!((sum - c.value.unwrap()).abs() < 1e-9, "{}", c.metric);
    }
    // Any task on these CPUs counts: at least ours.
    assert!(exit.value.unwrap() >= exits as f64, "{exit:?}");
    assert!(r.value("tasks_created").unwrap() >= exits as f64);
    assert!(r.value("sys_futex").unwrap() > 0.0);
    assert!(r.value("cpu_clock_ms").unwrap() > 0.0);
}
