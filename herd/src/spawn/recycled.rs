//! `--stacks recycled`: storm threads on stacks from an
//! [`exitq::stacks::StackPool`] instead of glibc's.
//!
//! With default attributes (`--stacks glibc`, the micro's behaviour) every
//! thread creation that misses glibc's small stack cache `mmap`s and
//! `mprotect`s a stack (`mmap_lock` held for writing) and every exit
//! `madvise`s the dead stack (`mmap_lock` for reading) and, past the cache
//! limit, `munmap`s it (writing): spawns and exits all contend on one
//! rwsem. A pooled stack is mapped once and handed to `pthread_create`
//! through `pthread_attr_setstack`; glibc neither madvises, caches nor
//! unmaps a user stack, so a spawn and an exit make no memory-map call.
//!
//! Which reap modes are sound (proof in [`exitq::stacks`]): a stack may be
//! reused only after its thread has been joined (the kernel clears the
//! thread's tid word, inside the stack, only when the thread has left the
//! address space, and `pthread_join` waits for exactly that).
//! * `--reap join`: the storm's reaper joins ([`PoolReap::Owner`]); the stack
//!   goes back to the pool right after `pthread_join`.
//! * `--reap detach`: the thread is not `pthread_detach`ed (a detached
//!   thread with a user stack gives no notice of its end); instead its exit
//!   destructor pushes the stack onto the pool's retired list (one CAS) and
//!   the pool's reclaimer joins it ([`PoolReap::Reclaimer`]). Nobody in the
//!   wave loop waits, as with detach.
//! * `--reap leak`: refused. A never-joined thread's descriptor stays in its
//!   stack and in glibc's list of user stacks: that stack could never be
//!   reused nor unmapped.
//! * `--spawn std`: refused (std::thread allocates its own stack).
//! * Every `--cancel` kind works: the pool's trampoline is a plain
//!   "C-unwind" frame a forced unwind may cross.

use std::time::Duration;

use exitq::stacks::{Release, StackPool, StackPoolStats};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::usage;
use crate::result::Metric;

use super::{Backend, Reap};

pub use exitq::stacks::Reap as PoolReap;

/// Where storm threads' stacks come from (`--stacks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Stacks {
    /// glibc's own (default attributes or `--stack-size`): the micro.
    #[default]
    Glibc,
    /// Stacks mapped once by an exitq StackPool and reused after the join.
    Recycled,
}

impl std::fmt::Display for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stacks::Glibc => "glibc",
            Stacks::Recycled => "recycled",
        })
    }
}

/// What the pool does with a recycled stack's pages (`--stack-release`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StackRelease {
    /// Keep them (no system call, no page fault on reuse).
    #[default]
    Keep,
    /// MADV_FREE, batched (one process_madvise per reclaimer round).
    Free,
    /// MADV_DONTNEED, batched (RSS falls at once).
    Dontneed,
}

impl StackRelease {
    fn to_pool(self) -> Release {
        match self {
            StackRelease::Keep => Release::Keep,
            StackRelease::Free => Release::Free,
            StackRelease::Dontneed => Release::DontNeed,
        }
    }
}

/// Refuses the combinations that cannot be made sound (exit 2).
pub fn validate(
    stacks: Stacks,
    release: Option<StackRelease>,
    spawn: Backend,
    reap: Reap,
) -> anyhow::Result<()> {
    if stacks == Stacks::Glibc {
        if release.is_some() {
            return Err(usage(
                "--stack-release",
                "only applies to --stacks recycled (glibc manages its own stacks' pages)",
            ));
        }
        return Ok(());
    }
    if spawn == Backend::Std {
        return Err(usage(
            "--stacks",
            "recycled needs --spawn pthread: std::thread maps its own stack and cannot be given \
             one (pthread_attr_setstack)",
        ));
    }
    if reap == Reap::Leak {
        return Err(usage(
            "--stacks",
            "recycled cannot be used with --reap leak: a thread that is never joined keeps its \
             descriptor (struct pthread) inside its stack, linked in glibc's list of user \
             stacks, so that stack could never be reused nor unmapped. Use --reap join, or \
             --reap detach (the pool's reclaimer then joins each thread after its exit)",
        ));
    }
    Ok(())
}

/// The stack pool of one storm run.
#[derive(Debug)]
pub struct Recycled {
    pool: StackPool,
    reap: PoolReap,
}

impl Recycled {
    /// A pool for threads of `stack_size` bytes (None: glibc's default
    /// thread stack size, so both `--stacks` choices give threads the same
    /// stack), keeping up to `keep` idle stacks (pass the most threads that
    /// can be retired at once, so the steady state never unmaps).
    pub fn new(
        stack_size: Option<usize>,
        keep: usize,
        release: StackRelease,
        reap: Reap,
    ) -> std::io::Result<Recycled> {
        let pool = StackPool::builder()
            .stack_size(stack_size.unwrap_or(0))
            .max_pooled(keep.clamp(1024, 1 << 20))
            .max_pooled_bytes(usize::MAX)
            .release(release.to_pool())
            .build()?;
        Ok(Recycled {
            pool,
            reap: match reap {
                Reap::Join => PoolReap::Owner,
                // Leak is refused by `validate`; should it get here anyway,
                // the reclaimer joins the threads (sound, never leaks).
                Reap::Detach | Reap::Leak => PoolReap::Reclaimer,
            },
        })
    }

    /// The pool.
    pub fn pool(&self) -> &StackPool {
        &self.pool
    }

    /// Who joins the pool's threads.
    pub fn reap(&self) -> PoolReap {
        self.reap
    }

    /// Waits until every stack is back (every thread joined), then unmaps
    /// the idle ones. Part of the measured phase: the storm pays for
    /// unmapping what it mapped. False if some thread did not end in time.
    pub fn drain(&self, timeout: Duration) -> bool {
        self.pool.drain(timeout)
    }

    /// The pool's counters.
    pub fn stats(&self) -> StackPoolStats {
        self.pool.stats()
    }

    /// The pool's counters and settings as JSON (RunResult details).
    pub fn to_json(&self) -> serde_json::Value {
        let s = self.stats();
        json!({
            "stack_size": self.pool.stack_size(),
            "mapping_size": self.pool.mapping_size(),
            "capacity": self.pool.capacity(),
            "reaped_by": match self.reap { PoolReap::Owner => "owner", PoolReap::Reclaimer => "reclaimer" },
            "stats": {
                "peak_mapped": s.peak_mapped,
                "mapped_at_end": s.mapped,
                "maps": s.maps,
                "unmaps": s.unmaps,
                "spawned": s.spawned,
                "spawn_failed": s.spawn_failed,
                "reused": s.reused,
                "recycled": s.recycled,
                "exit_pushes": s.exit_pushes,
                "tryjoin_busy": s.tryjoin_busy,
                "reclaim_rounds": s.reclaim_rounds,
                "canary_violations": s.canary_violations,
                "quarantined": s.quarantined,
                "process_madvise_calls": s.process_madvise_calls,
                "madvise_calls": s.madvise_calls,
                "released_ranges": s.released_ranges,
            },
        })
    }

    /// Flat metrics for compare/diff.
    pub fn metrics(&self) -> Vec<Metric> {
        let s = self.stats();
        vec![
            Metric::lower("stack_maps", "stacks", s.maps as f64),
            Metric::info("stacks_reused", "stacks", s.reused as f64),
            Metric::lower("stack_peak_mapped", "stacks", s.peak_mapped as f64),
            Metric::lower(
                "stack_canary_violations",
                "stacks",
                s.canary_violations as f64,
            ),
        ]
    }

    /// Warnings for the run's result (none when all is well).
    pub fn warnings(&self) -> Vec<String> {
        let s = self.stats();
        let mut w = Vec::new();
        if s.canary_violations > 0 {
            w.push(format!(
                "{} pooled stacks failed their canary check (far end written while lent or idle) \
                 and were quarantined",
                s.canary_violations
            ));
        }
        if s.lent > 0 {
            w.push(format!(
                "{} pooled stacks were still lent at the end (threads not joined in time)",
                s.lent
            ));
        }
        w
    }
}

/// `mmap_lock` figures from a `--contention` profile (the perf JSON of a
/// run): `mmap_lock_waits` and `mmap_lock_wait_ms` sum every rwsem wait on
/// the process's mmap_lock, found by address (`perf/mm_lock.rs`: the
/// addresses that only-mmap_lock callers waited on, whoever else waited
/// there, such as `exit_mm` inlined into `do_exit`); `rwsem_waits` sums
/// every rwsem (a cross-check: in a storm the process's mmap_lock is the
/// only contended rwsem). Empty when there is no contention profile or
/// it predates the attribution.
pub fn mmap_lock_metrics(perf: &serde_json::Value) -> Vec<Metric> {
    let c = &perf["contention"];
    let Some(by_lock) = c["by_lock"].as_array() else {
        return Vec::new();
    };
    let num = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    let rwsem: f64 = by_lock
        .iter()
        .filter(|r| r["class"].as_str().is_some_and(|c| c.starts_with("rwsem")))
        .map(|r| num(r, "contended"))
        .sum();
    let mm = &c["mmap_lock"];
    let mut out = Vec::new();
    if mm.is_object() {
        out.push(Metric::lower("mmap_lock_waits", "waits", num(mm, "waits")));
        out.push(Metric::lower(
            "mmap_lock_wait_ms",
            "ms",
            num(mm, "wait_ns") / 1e6,
        ));
    } else if c.get("mmap_lock").is_some() {
        // No mmap-only caller waited on any rwsem: none on the mmap_lock.
        out.push(Metric::lower("mmap_lock_waits", "waits", 0.0));
        out.push(Metric::lower("mmap_lock_wait_ms", "ms", 0.0));
    }
    out.push(Metric::lower("rwsem_waits", "waits", rwsem));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap_lock_metrics_read_the_attribution_by_address() {
        let perf = json!({"contention": {
            "by_lock": [
                {"class": "rwsem:R", "contended": 530},
                {"class": "rwsem:W", "contended": 71},
                {"class": "spinlock", "contended": 99},
            ],
            "mmap_lock": {"addresses": ["ffff8881058e38f8"], "waits": 594, "read_waits": 530,
                          "wait_ns": 1_500_000, "other_callers": 250},
        }});
        let m = mmap_lock_metrics(&perf);
        let get = |n: &str| m.iter().find(|x| x.name == n).unwrap().value;
        assert_eq!(get("mmap_lock_waits"), 594.0);
        assert_eq!(get("mmap_lock_wait_ms"), 1.5);
        assert_eq!(get("rwsem_waits"), 601.0);
        let none = json!({"contention": {"by_lock": [], "mmap_lock": null}});
        assert_eq!(mmap_lock_metrics(&none)[0].value, 0.0);
        assert!(mmap_lock_metrics(&json!({})).is_empty());
    }
}
