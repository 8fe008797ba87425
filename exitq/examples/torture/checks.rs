//! The run's verdict: the watchdog (no role may stop making progress),
//! the checks once every role stopped, and the report.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::opts::Opts;
use crate::world::{count_unrun_or_twice, inc, world};

/// Fails the run if some role stops making progress (the hand-off waves
/// and the QSBR workers' waits for grace periods too, if there are any).
pub(crate) fn watchdog(start: Instant, limit: Duration, handoffs: bool, qsbr: bool) {
    let w = world();
    let snapshot = || {
        let o = &w.ops;
        [
            o.reads.load(Ordering::Relaxed),
            o.barriers.load(Ordering::Relaxed),
            o.exit_threads.load(Ordering::Relaxed),
            o.cancelled_threads.load(Ordering::Relaxed),
            o.churned_domains.load(Ordering::Relaxed),
            o.nested_rounds.load(Ordering::Relaxed),
            o.forks.load(Ordering::Relaxed),
            o.handoff_threads.load(Ordering::Relaxed),
            o.handoff_barriers.load(Ordering::Relaxed),
            o.qsbr_waits.load(Ordering::Relaxed),
        ]
    };
    let names = [
        "readers",
        "barriers",
        "exit threads",
        "cancelled threads",
        "domain churn",
        "nested barriers",
        "forks",
        "hand-off threads",
        "hand-off barrier loops",
        "QSBR workers' waits",
    ];
    let mut watched = [true; 10];
    watched[7..9].fill(handoffs);
    watched[9] = qsbr;
    let mut last = snapshot();
    let mut since = [Instant::now(); 10];
    while !w.stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(200));
        let now = snapshot();
        for k in (0..names.len()).filter(|&k| watched[k]) {
            if now[k] != last[k] {
                since[k] = Instant::now();
            } else if since[k].elapsed() > limit {
                eprintln!(
                    "torture: FAILURE: no progress of {} for {:?} (at {:?} into the run): a hang",
                    names[k],
                    limit,
                    start.elapsed()
                );
                hang_exit();
            }
        }
        last = now;
    }
}

/// Ends a run that hangs: every thread's stack first (`gdb`, attached to
/// this process, when it is on the PATH: which thread waits for what is
/// the first question a hang asks), then exit status 1.
pub(crate) fn hang_exit() -> ! {
    let pid = std::process::id().to_string();
    // Lets gdb, a child, attach without root where Yama's ptrace scope
    // allows only ancestors by default (a failure only costs the dump).
    // SAFETY: prctl with integer arguments; it changes no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    let dumped = std::process::Command::new("gdb")
        .args(["-p", &pid, "-batch", "-nx", "-ex", "thread apply all bt 40"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status();
    match dumped {
        Ok(status) if status.success() => {}
        Ok(status) => eprintln!("torture: gdb could not dump the threads' stacks ({status})"),
        Err(e) => eprintln!("torture: no thread stacks: gdb not run ({e})"),
    }
    std::process::exit(1)
}

/// After every role stopped: each domain's counted callbacks all ran once,
/// the panics were counted, nothing is pending; every hook ran.
pub(crate) fn final_checks() {
    let w = world();
    for slot in &w.slots {
        slot.domain.barrier();
        count_unrun_or_twice(
            slot.issued.load(Ordering::Relaxed),
            slot.ran.load(Ordering::Relaxed),
        );
        // Retire callbacks defer the final free: a second barrier runs it.
        slot.domain.barrier();
        let s = slot.domain.stats();
        if s.callbacks_panicked != slot.panics.load(Ordering::Relaxed) {
            inc(&w.v.panics_miscounted);
        }
        if s.pending != 0 {
            w.v.pending_left.fetch_add(s.pending, Ordering::Relaxed);
        }
    }
    // The streamers drive the polled domain's grace periods with their
    // polls: some must have completed without a heavy barrier.
    let polled = w.slots[w.shared()].domain.stats();
    if polled.grace_periods > 0
        && polled.heavy_barriers >= polled.grace_periods
        && exitq::membarrier_available()
    {
        inc(&w.v.polled_never_barrier_free);
    }
    // One streamer round in 5,000 sleeps with every record offline: in
    // 100,000 rounds, none would happen once in about 5e8 runs.
    if w.ops.streamed.load(Ordering::Relaxed) >= 100_000
        && w.ops.offline_naps.load(Ordering::Relaxed) == 0
    {
        inc(&w.v.never_asleep_offline);
    }
    if w.ops.caches_made.load(Ordering::Relaxed) == 0
        || w.ops.cache_reads.load(Ordering::Relaxed) == 0
        || w.ops.option_reads.load(Ordering::Relaxed) == 0
    {
        inc(&w.v.never_cached);
    }
    // Hooks of exited threads: an exit barrier per domain, then count.
    for slot in &w.slots {
        slot.domain.exit_barrier();
    }
    let missing = w
        .hooks
        .lock()
        .unwrap()
        .iter()
        .filter(|c| c.load(Ordering::Relaxed) == 0)
        .count() as u64;
    w.v.hook_missing.fetch_add(missing, Ordering::Relaxed);
    // What ran in fork children, counted in memory shared with them (every
    // child has ended: waited for, or killed and reaped).
    let in_children = w.in_child.load(Ordering::SeqCst);
    w.v.ran_in_fork_child
        .fetch_add(in_children, Ordering::Relaxed);
    w.v.fork_child_panicked
        .fetch_add(w.child_panics.load(Ordering::SeqCst), Ordering::Relaxed);
}

pub(crate) fn report(opts: &Opts, took: Duration, role_panics: &HashMap<&str, u32>) -> ExitCode {
    let w = world();
    let o = &w.ops;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "torture: {:.1} s: {} reads, {} replaces by defer, {} by synchronize, {} counted defers, \
         {} barriers, {} exited and {} cancelled threads, {} of {} exit hooks ran ({} threads used exitq from an older key's destructor), {} domains dropped under live threads ({} reads in their exit walks), \
         {} guards, {} readers and {} QSBR readers leaked, {} nested rounds ({} nested barriers refused), \
         {} forks with a held guard or QSBR reader, {} by a callback; {} cell writes; QSBR: {} reads, {} quiescent states, \
         {} offline periods, {} waits offline, {} readers rebuilt; {} streamer rounds ({} asleep offline); \
         cache readers: {} rounds of caches, {} reads, {} naps with caches kept, \
         {} option reads ({} empty), {} option writes; hand-off waves: {} threads ({} retire_thread calls), \
         {} domains dropped while threads exit ({} exit hand-offs in them before the drop), {} barrier-loop rounds",
        took.as_secs_f64(),
        g(&o.reads),
        g(&o.replaces_deferred),
        g(&o.replaces_synchronized),
        g(&o.counted_defers),
        g(&o.barriers),
        g(&o.exit_threads),
        g(&o.cancelled_threads),
        g(&o.hooks_ran),
        g(&o.hooks_registered),
        g(&o.elder_key_uses),
        g(&o.churned_domains),
        g(&o.walk_reads),
        g(&o.leaked_guards),
        g(&o.leaked_readers),
        g(&o.leaked_qsbr_readers),
        g(&o.nested_rounds),
        g(&o.nested_barriers_refused),
        g(&o.forks),
        g(&o.forks_in_callbacks),
        g(&o.cell_writes),
        g(&o.qsbr_reads),
        g(&o.qsbr_quiescent),
        g(&o.qsbr_offline),
        g(&o.qsbr_waits),
        g(&o.qsbr_readers_made),
        g(&o.streamed),
        g(&o.offline_naps),
        g(&o.caches_made),
        g(&o.cache_reads),
        g(&o.cache_naps),
        g(&o.option_reads),
        g(&o.option_empty_reads),
        g(&o.option_writes),
        g(&o.handoff_threads),
        g(&o.handoff_retired),
        g(&o.handoff_drops),
        g(&o.dropped_domain_handoffs),
        g(&o.handoff_barriers),
    );
    for slot in &w.slots {
        let s = slot.domain.stats();
        println!(
            "torture: domain '{}': {} grace periods ({} heavy barriers), {} callbacks run ({} batches, \
             {} run by their thread), {} stolen, {} exit hand-offs, {} passes, {} panics caught, {} backlog waits, \
             {} overruns",
            slot.name,
            s.grace_periods,
            s.heavy_barriers,
            s.callbacks_run,
            s.batches,
            s.batches_run_locally,
            s.stolen_batches,
            s.exit_handoffs,
            s.passes,
            s.callbacks_panicked,
            s.backlog_waits,
            s.backlog_overruns
        );
    }
    let mut failed = false;
    for (what, n) in w.v.all() {
        println!("torture: {what}: {n}");
        failed |= n != 0;
    }
    for (role, n) in role_panics {
        println!("torture: {n} {role} thread(s) panicked");
        failed = true;
    }
    if failed {
        println!("torture: FAILURE (seed {})", opts.seed);
        ExitCode::from(1)
    } else {
        println!("torture: SUCCESS");
        ExitCode::SUCCESS
    }
}
