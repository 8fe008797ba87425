//! Pre-flight: will the storm's threads fit under the host's limits?
//!
//! From the configuration and the host facts it predicts the peak number
//! of live threads (tasks) and of stack mappings, and compares them with
//! every limit that can stop `pthread_create`: `kernel.threads-max`,
//! `kernel.pid_max`, the cgroup's `pids.max`, `RLIMIT_NPROC` (not for
//! root), `vm.max_map_count`, `RLIMIT_AS`, `RLIMIT_DATA` and memory.
//!
//! The task and mapping limits are tested as for every herd scenario
//! ([`crate::spawn::fit`]); this module words them for the storm and adds
//! its own (the leak mode's mapping wall, `RLIMIT_AS`, memory).
//! `RLIMIT_AS` is [`fit::address_space`]: the stacks (with std's guard and
//! signal stack for `--spawn std`) on top of the process's `VmSize` now,
//! 16 MiB of slack and the 64 MiB each new malloc arena reserves
//! ([`fit::arena_reserve_bytes`]: std threads and herd's helpers make
//! them, up to glibc's arena limit; the pthread backend's threads never
//! allocate). `RLIMIT_DATA` is [`fit::data`]: the stacks (without their guard pages,
//! with std's signal stack for `--spawn std`) on top of the process's
//! `VmData` now and a malloc arena for each of the first threads.
//!
//! The model: a retired wave is cancelled and exits, so with `--cancel
//! pthread|flag` about `(lag + 2) x per-wave` threads are alive at once
//! (lag + 1 waves running plus one exiting). With `--cancel none` threads
//! live until their sleep ends, so at least that many. Each thread's stack
//! is two mappings (stack and guard page); `--reap leak` keeps every stack
//! mapped until the process exits, so its mappings grow with every thread
//! created: the micro's ~32K-thread wall at vm.max_map_count = 65530.
//!
//! A certain failure is refused (exit 2) unless `--force`; the leak mode's
//! mapping wall is only a warning, because reproducing it (and counting
//! the failures) is the point of the micro.

use serde::{Deserialize, Serialize};

use super::options::Config;
use crate::host::{human_bytes, map_count, HostFacts};
use crate::spawn::fit::{self, TaskLimit};
use crate::spawn::{Backend, Cancel, Reap};

/// Threads of herd's own beside the storm's that may allocate, and so
/// make a malloc arena each: the reaper (`--spawn std`), perf's reader
/// and sampler drain, the method probe.
const HELPER_THREADS: u64 = 4;

/// Address space the pre-flight keeps free for what is neither a stack
/// nor a malloc arena: perf's rings (1 MiB and a page per CPU and sampled
/// event), the run's records.
const ADDRESS_SLACK: u64 = 16 << 20;

/// What pre-flight predicted and decided.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Preflight {
    /// Stack size each thread maps, bytes.
    pub stack_bytes: u64,
    /// Predicted peak of live storm threads.
    pub peak_live_threads: u64,
    /// True when the prediction is a lower bound (`--cancel none`).
    pub peak_is_lower_bound: bool,
    /// Predicted peak of this process's mappings.
    pub peak_mappings: u64,
    /// Threads that fit before `vm.max_map_count` (leak mode), if limited.
    pub leak_thread_capacity: Option<u64>,
    /// Things that will (probably) make creation fail, with the limit.
    pub problems: Vec<String>,
    /// Problems that are only warnings (leak mode's mapping wall).
    pub warnings: Vec<String>,
    /// Problems `--force` does not run past: `--spawn std` at the mapping
    /// wall, where a thread whose stack still got its mappings cannot map
    /// the signal stack std gives it and std aborts the process ("failed
    /// to allocate an alternative stack"; 4 runs in 4 aborted, exit 134).
    #[serde(default)]
    pub fatal: Vec<String>,
}

/// The stack a thread of `cfg` maps.
pub fn stack_bytes(cfg: &Config, facts: &HostFacts) -> u64 {
    if let Some(s) = cfg.stack_size {
        return s;
    }
    match cfg.spawn {
        Backend::Pthread => facts
            .default_thread_stack_bytes
            .or(facts.rlimit_stack.and_then(|r| r.soft))
            .unwrap_or(8 << 20),
        Backend::Std => std::env::var("RUST_MIN_STACK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2 << 20),
    }
}

/// Runs the pre-flight checks against this process's mappings now.
pub fn check(cfg: &Config, facts: &HostFacts) -> Preflight {
    check_with_maps(cfg, facts, map_count().unwrap_or(0))
}

/// [`check`] with the process's current mapping count given (tests: other
/// threads of a test process map and unmap stacks at any moment).
pub fn check_with_maps(cfg: &Config, facts: &HostFacts, maps_now: u64) -> Preflight {
    let stack = stack_bytes(cfg, facts);
    let total = cfg.total_threads();
    let live = cfg
        .per_wave
        .saturating_mul((cfg.lag + 2).min(cfg.waves))
        .min(total);
    let stacks_mapped = if cfg.reap == Reap::Leak { total } else { live };
    // A stack is two mappings (stack and guard page); a std thread's
    // signal stack two more while it runs.
    let maps_per_thread = match cfg.spawn {
        Backend::Pthread => 2,
        Backend::Std => crate::spawn::failure::STD_THREAD_MAPPINGS,
    };
    let mut p = Preflight {
        stack_bytes: stack,
        peak_live_threads: live,
        peak_is_lower_bound: cfg.cancel == Cancel::None,
        peak_mappings: maps_now.saturating_add(stacks_mapped.saturating_mul(maps_per_thread)),
        ..Default::default()
    };
    for l in fit::task_limits(facts, live) {
        p.problems.push(match l {
            TaskLimit::ThreadsMax { tasks, max } => format!(
                "about {live} threads alive at once, {tasks} tasks exist already, kernel.threads-max = {max}"
            ),
            TaskLimit::PidMax { tasks, max } => format!(
                "about {live} threads alive at once need as many pids; {tasks} in use, kernel.pid_max = {max}"
            ),
            TaskLimit::CgroupPids { path, current, max } => format!(
                "about {live} threads alive at once, cgroup {path} has {current} tasks and pids.max = {max}"
            ),
            TaskLimit::RlimitNproc { mine, limit } => format!(
                "about {live} threads alive at once, this user has {mine} tasks, RLIMIT_NPROC = {limit} (ulimit -u)"
            ),
        });
    }
    if let Some(m) = fit::mappings(facts, stacks_mapped, maps_per_thread, maps_now) {
        let (max, room) = (m.max, m.room);
        if cfg.reap == Reap::Leak {
            p.leak_thread_capacity = Some(room);
        }
        if m.over {
            let msg = format!(
                "{} keeps {stacks_mapped} stacks mapped ({maps_per_thread} mappings each) but \
                 vm.max_map_count = {max} leaves room for about {room} threads: after that \
                 pthread_create fails with EAGAIN",
                if cfg.reap == Reap::Leak {
                    "--reap leak"
                } else {
                    "this run"
                }
            );
            if cfg.spawn == Backend::Std {
                p.fatal.push(format!(
                    "{msg}, or a thread that was created cannot map the signal stack std gives \
                     it and std aborts the whole process: with --spawn std even --force does \
                     not run past this wall (--spawn pthread counts the failures)"
                ));
            } else if cfg.reap == Reap::Leak {
                p.warnings.push(format!(
                    "{msg}; the failures will be counted (use --reap join or detach to run them all)"
                ));
            } else {
                p.problems.push(msg);
            }
        }
    }
    // Address space: the stacks (with std's guard and signal stack for
    // `--spawn std`) on top of `VmSize` now, the malloc arenas glibc makes
    // for the first threads that allocate (a std thread does in its
    // start-up; the pthread backend's threads never allocate, herd's own
    // helpers do) with the moment one being made maps twice its 64 MiB,
    // and a slack for the rest (perf's rings, the result).
    let allocating = match cfg.spawn {
        Backend::Pthread => HELPER_THREADS,
        Backend::Std => live.saturating_add(HELPER_THREADS),
    };
    let arenas = fit::new_arenas(allocating);
    let as_now = crate::host::address_space_bytes()
        .unwrap_or(0)
        .saturating_add(ADDRESS_SLACK)
        .saturating_add(fit::arena_reserve_bytes(allocating))
        .saturating_add(if arenas > 0 {
            fit::ARENA_RESERVE_BYTES
        } else {
            0
        });
    let as_per_stack = match cfg.spawn {
        Backend::Pthread => stack,
        Backend::Std => stack.saturating_add(crate::spawn::failure::STD_THREAD_EXTRA_BYTES),
    };
    if let Some(a) = fit::address_space(facts, stacks_mapped, as_per_stack, as_now) {
        if a.over {
            let mut msg = format!(
                "{stacks_mapped} stacks of {} need {} of address space, the process has {} \
                 (VmSize now, {arenas} malloc arenas of {} each that glibc reserves for the \
                 first threads that allocate, and {} kept free) and RLIMIT_AS = {} (ulimit -v) \
                 leaves room for about {} threads",
                human_bytes(stack),
                human_bytes(a.need),
                human_bytes(as_now),
                human_bytes(fit::ARENA_RESERVE_BYTES),
                human_bytes(ADDRESS_SLACK),
                human_bytes(a.limit),
                a.room
            );
            if arenas > 0 {
                msg.push_str(
                    " (MALLOC_ARENA_MAX=1 makes glibc reserve no arena per thread; --force runs \
                     anyway, each std thread checking its room before it is created)",
                );
            }
            if cfg.reap == Reap::Leak {
                p.warnings
                    .push(format!("{msg}; creation will fail once it is used up"));
            } else {
                p.problems.push(msg);
            }
        }
    }
    // Private writable memory: each stack counts (not its guard page), so
    // does std's signal stack, and each of the first threads' malloc arena.
    let data_per_stack = match cfg.spawn {
        Backend::Pthread => stack,
        Backend::Std => stack.saturating_add(crate::spawn::failure::STD_THREAD_DATA_EXTRA_BYTES),
    };
    let data_now = crate::host::data_bytes()
        .unwrap_or(0)
        .saturating_add(fit::arena_data_bytes(live));
    if let Some(d) = fit::data(facts, stacks_mapped, data_per_stack, data_now) {
        if d.over {
            let msg = format!(
                "{stacks_mapped} stacks of {} need {} of private writable memory, the process has {} \
                 (VmData, with malloc's arenas) and RLIMIT_DATA = {} (ulimit -d) leaves room for \
                 about {} threads",
                human_bytes(stack),
                human_bytes(d.need),
                human_bytes(data_now),
                human_bytes(d.limit),
                d.room
            );
            if cfg.reap == Reap::Leak {
                p.warnings
                    .push(format!("{msg}; creation will fail once it is used up"));
            } else {
                p.problems.push(msg);
            }
        }
    }
    if let Some(mem) = facts.mem_total_bytes {
        if stack > mem {
            p.problems.push(format!(
                "one stack of {} is larger than the machine's memory ({}): it cannot be mapped",
                human_bytes(stack),
                human_bytes(mem)
            ));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::Rlimit;
    use crate::scenario::storm::options::{Pin, Preset};

    fn cfg(waves: u64, per_wave: u64, lag: u64, reap: Reap) -> Config {
        Config {
            preset: Preset::Default,
            waves,
            per_wave,
            lag,
            slots: lag + 1,
            spin: 0,
            sleep_ms: 0,
            spawn: Backend::Pthread,
            stack_size: Some(64 << 10),
            stacks: Default::default(),
            stack_release: Default::default(),
            cancel: Cancel::Pthread,
            reap,
            cpus: vec![0],
            pin: Pin::None,
            force: false,
            futex_hash: Default::default(),
            cleanup: Default::default(),
        }
    }

    fn facts() -> HostFacts {
        let mut f = HostFacts::read();
        f.threads_max = Some(1_000_000);
        f.pid_max = Some(4_000_000);
        f.tasks_now = Some(100);
        f.cgroup_pids = None;
        f.max_map_count = Some(1_000_000);
        f.rlimit_as = None;
        f.rlimit_data = None;
        f.root = true;
        f
    }

    #[test]
    fn live_threads_follow_lag() {
        let p = check(&cfg(1000, 100, 5, Reap::Join), &facts());
        assert_eq!(p.peak_live_threads, 700);
        assert!(p.problems.is_empty() && p.warnings.is_empty(), "{p:?}");
        // Fewer waves than lag + 2: all of them.
        assert_eq!(
            check(&cfg(2, 100, 5, Reap::Join), &facts()).peak_live_threads,
            200
        );
    }

    #[test]
    fn std_threads_at_the_mapping_wall_are_fatal_even_forced() {
        // 700 live threads; room for 300 of 2 mappings or 150 of 4.
        let mut f = facts();
        let now = 500;
        f.max_map_count = Some(now + 600);
        for reap in [Reap::Join, Reap::Leak] {
            let mut c = cfg(1000, 100, 5, reap);
            c.force = true;
            let p = check_with_maps(&c, &f, now);
            assert!(p.fatal.is_empty(), "pthread, {reap:?}: {p:?}");
            c.spawn = Backend::Std;
            let p = check_with_maps(&c, &f, now);
            assert!(
                p.fatal.len() == 1
                    && p.fatal[0].contains("vm.max_map_count")
                    && p.fatal[0].contains("4 mappings each")
                    && p.fatal[0].contains("about 150 threads")
                    && p.fatal[0].contains("std aborts"),
                "std, {reap:?}: {p:?}"
            );
            assert!(
                !p.warnings.iter().any(|w| w.contains("vm.max_map_count")),
                "{p:?}"
            );
        }
        // Room for the std threads' four mappings each: nothing fatal.
        f.max_map_count = Some(now + 4 * 700);
        let mut c = cfg(1000, 100, 5, Reap::Join);
        c.spawn = Backend::Std;
        assert!(check_with_maps(&c, &f, now).fatal.is_empty());
    }

    #[test]
    fn leak_mapping_wall_is_a_warning_with_capacity() {
        // The mapping count is an input: other tests' threads map and unmap
        // stacks while this one runs, so a count read here could differ
        // from the one a `check` reads a moment later.
        let mut f = facts();
        let now = 500;
        f.max_map_count = Some(now + 2 * 30_000);
        let p = check_with_maps(&cfg(1000, 100, 5, Reap::Leak), &f, now);
        assert!(p.problems.is_empty(), "{p:?}");
        assert!(p.warnings[0].contains("vm.max_map_count"), "{p:?}");
        assert_eq!(p.leak_thread_capacity, Some(30_000));
        // The same wall without leaking is not reached: no warning.
        assert!(check_with_maps(&cfg(1000, 100, 5, Reap::Join), &f, now)
            .warnings
            .is_empty());
        // `check` reads the real count.
        assert!(check(&cfg(1000, 100, 5, Reap::Leak), &f).peak_mappings > 2 * 100_000);
    }

    #[test]
    fn task_limits_refuse() {
        let mut f = facts();
        f.threads_max = Some(500);
        let p = check(&cfg(10, 100, 5, Reap::Join), &f);
        assert!(
            p.problems.iter().any(|m| m.contains("kernel.threads-max")),
            "{p:?}"
        );
        let mut f = facts();
        f.pid_max = Some(600);
        let p = check(&cfg(10, 100, 5, Reap::Join), &f);
        assert!(
            p.problems.iter().any(|m| m.contains("kernel.pid_max")),
            "{p:?}"
        );
        let mut f = facts();
        f.root = false;
        f.rlimit_nproc = Some(Rlimit {
            soft: Some(50),
            hard: Some(50),
        });
        let p = check(&cfg(10, 100, 5, Reap::Join), &f);
        assert!(
            p.problems.iter().any(|m| m.contains("RLIMIT_NPROC")),
            "{p:?}"
        );
        let mut f = facts();
        f.rlimit_as = Some(Rlimit {
            soft: Some(1 << 20),
            hard: None,
        });
        let p = check(&cfg(10, 100, 5, Reap::Join), &f);
        assert!(p.problems.iter().any(|m| m.contains("RLIMIT_AS")), "{p:?}");
        // 700 stacks of 64 KiB alive at once need 43.8 MiB of data: refused
        // under 32 MiB, naming how many fit; fine under 1 GiB.
        let mut f = facts();
        f.rlimit_data = Some(Rlimit {
            soft: Some(32 << 20),
            hard: None,
        });
        let p = check(&cfg(10, 100, 5, Reap::Join), &f);
        assert!(
            p.problems
                .iter()
                .any(|m| m.contains("RLIMIT_DATA = 32.0 MiB") && m.contains("room for about")),
            "{p:?}"
        );
        // The leak mode is warned, its failures counted.
        let p = check(&cfg(10, 100, 5, Reap::Leak), &f);
        assert!(p.problems.is_empty(), "{p:?}");
        assert!(
            p.warnings.iter().any(|m| m.contains("RLIMIT_DATA")),
            "{p:?}"
        );
        f.rlimit_data = Some(Rlimit {
            soft: Some(1 << 30),
            hard: None,
        });
        let p = check(&cfg(10, 100, 5, Reap::Join), &f);
        assert!(p.problems.is_empty(), "{p:?}");
    }

    #[test]
    fn a_stack_larger_than_memory_is_refused() {
        let mut c = cfg(1, 1, 0, Reap::Join);
        let f = facts();
        c.stack_size = Some(f.mem_total_bytes.unwrap() * 2);
        let p = check(&c, &f);
        assert!(
            p.problems.iter().any(|m| m.contains("cannot be mapped")),
            "{p:?}"
        );
    }
}
