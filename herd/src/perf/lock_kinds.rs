//! The contention profile in a few stable rows, for `herd compare`: which
//! kinds of kernel lock the waits were on, per thread exit.
//!
//! The profile's own tables (by lock address, by caller) differ from run
//! to run (addresses, call sites), so they cannot be compared by
//! statistics; these kinds can, and every run reports every kind (0 when
//! it had no wait on it), so a mean over runs is never biased by absent
//! rows. A kind is told from the lock's class and the waiting function:
//!
//! | kind | waits on |
//! |---|---|
//! | `mmap_lock` | the process's mm lock (found by address, `mm_lock.rs`) |
//! | `rwsem_other` | any other rwsem |
//! | `rwlock` | rwlocks (in exit and fork paths: `tasklist_lock`) |
//! | `mutex` | kernel mutexes |
//! | `futex_hash` | spinlocks taken by `futex_*` functions (hash buckets) |
//! | `runqueue` | spinlocks of the scheduler's run queues (wake-ups, `task_rq_lock`) |
//! | `sighand` | spinlocks of signal code (`sighand->siglock`: cancel, sigprocmask, exit accounting) |
//! | `spinlock_other` | every other spinlock |

use super::contention::ContentionReport;
use crate::result::Metric;

/// The kinds, in the order they are reported.
pub const KINDS: &[&str] = &[
    "mmap_lock",
    "rwsem_other",
    "rwlock",
    "mutex",
    "futex_hash",
    "runqueue",
    "sighand",
    "spinlock_other",
];

/// The kind of a by-caller row that is not an rwsem (see the module docs).
fn kind_of(function: &str, class: &str) -> &'static str {
    if class.starts_with("rwlock") {
        "rwlock"
    } else if class.starts_with("mutex") {
        "mutex"
    } else if function.contains("futex") {
        "futex_hash"
    } else if function.contains("rq_lock")
        || function.starts_with("sched")
        || matches!(
            function,
            "try_to_wake_up"
                | "wake_up_new_task"
                | "__schedule"
                | "schedule_tail"
                | "finish_task_switch"
                | "ttwu_queue"
        )
    {
        "runqueue"
    } else if function.contains("sig") || function == "acct_collect" {
        "sighand"
    } else {
        "spinlock_other"
    }
}

/// Waits and wait time per kind: `(waits, ns)` in [`KINDS`] order.
pub fn totals(r: &ContentionReport) -> Vec<(u64, u64)> {
    let mut t = vec![(0u64, 0u64); KINDS.len()];
    let idx = |k: &str| KINDS.iter().position(|x| *x == k).expect("a known kind");
    // rwsems from the by-lock table (complete per lock), split by the mm
    // attribution; everything else by caller.
    let (mut rw_waits, mut rw_ns) = (0, 0);
    for l in r.by_lock.iter().filter(|l| l.class.starts_with("rwsem")) {
        rw_waits += l.contended;
        rw_ns += l.total_ns;
    }
    let (mm_waits, mm_ns) = r
        .mmap_lock
        .as_ref()
        .map_or((0, 0), |m| (m.waits, m.wait_ns));
    t[idx("mmap_lock")] = (mm_waits, mm_ns);
    t[idx("rwsem_other")] = (
        rw_waits.saturating_sub(mm_waits),
        rw_ns.saturating_sub(mm_ns),
    );
    for c in r.by_caller.iter().filter(|c| !c.class.starts_with("rwsem")) {
        let function = c.symbol.split('+').next().unwrap_or("");
        let k = &mut t[idx(kind_of(function, &c.class))];
        k.0 += c.contended;
        k.1 += c.total_ns;
    }
    t
}

/// `lock_waits_per_exit.KIND` and `lock_wait_us_per_exit.KIND` for every
/// kind (none without exits).
pub fn metrics(r: &ContentionReport, exits: u64) -> Vec<Metric> {
    if exits == 0 {
        return Vec::new();
    }
    let n = exits as f64;
    let mut out = Vec::new();
    for (kind, (waits, ns)) in KINDS.iter().zip(totals(r)) {
        out.push(Metric::lower(
            &format!("lock_waits_per_exit.{kind}"),
            "waits",
            waits as f64 / n,
        ));
        out.push(Metric::lower(
            &format!("lock_wait_us_per_exit.{kind}"),
            "us",
            ns as f64 / 1e3 / n,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::contention::WaitStat;
    use super::super::mm_lock::MmapLock;
    use super::*;

    fn row(symbol: &str, class: &str, contended: u64, total_ns: u64) -> WaitStat {
        WaitStat {
            symbol: symbol.into(),
            class: class.into(),
            contended,
            total_ns,
            ..Default::default()
        }
    }

    #[test]
    fn waits_are_sorted_into_kinds_and_every_kind_is_reported() {
        let r = ContentionReport {
            by_lock: vec![row("", "rwsem:R", 10, 1000), row("", "rwsem:W", 2, 500)],
            by_caller: vec![
                row("madvise_do_behavior+0x23f", "rwsem:R", 8, 900),
                row("futex_wake+0x40", "spinlock", 3, 30),
                row("try_to_wake_up+0x218", "spinlock", 4, 40),
                row("get_signal+0xd0", "spinlock", 5, 50),
                row("release_task+0x113", "rwlock:W", 6, 60),
                row("hrtimer_nanosleep+0xb5", "spinlock", 7, 70),
            ],
            mmap_lock: Some(MmapLock {
                waits: 11,
                wait_ns: 1400,
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = totals(&r);
        let get = |k: &str| t[KINDS.iter().position(|x| *x == k).unwrap()];
        assert_eq!(get("mmap_lock"), (11, 1400));
        assert_eq!(get("rwsem_other"), (1, 100));
        assert_eq!(get("futex_hash"), (3, 30));
        assert_eq!(get("runqueue"), (4, 40));
        assert_eq!(get("sighand"), (5, 50));
        assert_eq!(get("rwlock"), (6, 60));
        assert_eq!(get("spinlock_other"), (7, 70));
        assert_eq!(get("mutex"), (0, 0));
        let m = metrics(&r, 2);
        assert_eq!(m.len(), 2 * KINDS.len());
        let v = |n: &str| m.iter().find(|x| x.name == n).unwrap().value;
        assert_eq!(v("lock_waits_per_exit.sighand"), 2.5);
        assert_eq!(v("lock_wait_us_per_exit.mutex"), 0.0);
        assert!(metrics(&r, 0).is_empty());
    }
}
