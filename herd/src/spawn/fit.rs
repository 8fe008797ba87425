//! Will `n` more threads alive at once fit under the host's limits? The
//! one pre-flight test behind `herd storm`'s pre-flight
//! (`scenario::storm::preflight`) and the std-thread scenarios'
//! ([`super::failure::thread_limit_problems`], `gpkit::preflight_threads`).
//!
//! Task limits ([`task_limits`]): `kernel.threads-max` and
//! `kernel.pid_max` against the tasks on the system, the (tightest)
//! cgroup's `pids.max` against its `pids.current`, and `RLIMIT_NPROC`
//! against this user's tasks (not for root, where it is not enforced).
//! Mappings ([`mappings`]): `vm.max_map_count` against the mappings the
//! process has now plus the threads' own. Address space
//! ([`address_space`]): `RLIMIT_AS` against the process's address space
//! now (`VmSize`) plus the threads' stacks.
//! Private writable memory ([`data`]): `RLIMIT_DATA` (`ulimit -d`)
//! against the process's `VmData` now plus the threads' stacks. Since
//! Linux 4.7 it caps every private writable mapping (`is_data_mapping`),
//! and glibc's `mprotect` of a new stack makes one, so each thread's
//! stack counts in `VmData`, its guard page (`PROT_NONE`) not. Checked on
//! kernel 6.18 (2026-12, a C program creating threads of 2 MiB stacks):
//! with `ulimit -d` at 64 MiB the 32nd `pthread_create` failed with
//! EAGAIN (`VmData` 63712 kB), at 16 MiB the 8th. Per thread, measured
//! with `VmData` before and after 100 threads that wait on a barrier:
//! the stack exactly (2048 kB for 2 MiB, with a 4 KiB, 1 MiB or no
//! guard page alike), plus 8 kB for a Rust `std::thread` (its signal
//! stack), plus 132 kB for each thread whose first `malloc` makes glibc
//! a new arena (up to 8 per CPU; the arena's 64 MiB reservation is
//! `PROT_NONE` and counts in `VmSize` only). Before this was modelled
//! `herd storm --waves 1 --per-wave 200` under `ulimit -d 204800`
//! passed the pre-flight and then counted 176 failures.
//! Each caller words the findings for its report; the numbers and the
//! comparisons are these.

use crate::host::{CgroupPids, HostFacts, Rlimit};

/// Tasks of the real uid (what RLIMIT_NPROC counts), from `/proc`.
pub fn user_tasks() -> Option<u64> {
    exitq::limits::user_tasks(nix::unistd::getuid().as_raw())
}

/// A task limit that `threads` more threads would exceed, with its numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TaskLimit {
    /// `kernel.threads-max`: `tasks` on the system now.
    ThreadsMax { tasks: u64, max: u64 },
    /// `kernel.pid_max`: `tasks` on the system hold pids.
    PidMax { tasks: u64, max: u64 },
    /// The cgroup's `pids.max`: `current` tasks in cgroup `path`.
    CgroupPids {
        path: String,
        current: u64,
        max: u64,
    },
    /// `RLIMIT_NPROC` (soft): `mine` tasks of this user.
    RlimitNproc { mine: u64, limit: u64 },
}

/// The task limits that `threads` more tasks alive at once would exceed
/// (empty: they fit). A limit or count that cannot be read is taken as
/// no limit / zero.
pub(crate) fn task_limits(facts: &HostFacts, threads: u64) -> Vec<TaskLimit> {
    let mut v = Vec::new();
    let tasks = facts.tasks_now.unwrap_or(0);
    let over = |now: u64, max: u64| now.saturating_add(threads) > max;
    if let Some(max) = facts.threads_max {
        if over(tasks, max) {
            v.push(TaskLimit::ThreadsMax { tasks, max });
        }
    }
    if let Some(max) = facts.pid_max {
        if over(tasks, max) {
            v.push(TaskLimit::PidMax { tasks, max });
        }
    }
    if let Some(CgroupPids {
        path,
        max: Some(max),
        current,
    }) = &facts.cgroup_pids
    {
        let current = current.unwrap_or(0);
        if over(current, *max) {
            v.push(TaskLimit::CgroupPids {
                path: path.clone(),
                current,
                max: *max,
            });
        }
    }
    if !facts.root {
        if let Some(Rlimit {
            soft: Some(limit), ..
        }) = facts.rlimit_nproc
        {
            let mine = user_tasks().unwrap_or(0);
            if over(mine, limit) {
                v.push(TaskLimit::RlimitNproc { mine, limit });
            }
        }
    }
    v
}

/// `vm.max_map_count` for `threads` threads of `per_thread` mappings each,
/// with `maps_now` mappings in the process already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mappings {
    /// The threads' mappings.
    pub need: u64,
    /// `vm.max_map_count`.
    pub max: u64,
    /// Threads that fit in what is left.
    pub room: u64,
    /// `maps_now + need` exceeds `max`.
    pub over: bool,
}

/// The mapping budget of `threads` threads (`None`: `vm.max_map_count`
/// unknown).
pub(crate) fn mappings(
    facts: &HostFacts,
    threads: u64,
    per_thread: u64,
    maps_now: u64,
) -> Option<Mappings> {
    let max = facts.max_map_count?;
    let need = threads.saturating_mul(per_thread);
    Some(Mappings {
        need,
        max,
        room: max.saturating_sub(maps_now) / per_thread.max(1),
        over: maps_now.saturating_add(need) > max,
    })
}

/// `RLIMIT_AS` for `threads` threads of `per_thread` bytes of address
/// space each, with `in_use` bytes mapped already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AddressSpace {
    /// The threads' address space.
    pub need: u64,
    /// `RLIMIT_AS` (soft), bytes.
    pub limit: u64,
    /// Threads that fit in what is left.
    pub room: u64,
    /// `in_use + need` exceeds `limit`.
    pub over: bool,
}

/// The address-space budget of `threads` threads (`None`: no `RLIMIT_AS`).
pub(crate) fn address_space(
    facts: &HostFacts,
    threads: u64,
    per_thread: u64,
    in_use: u64,
) -> Option<AddressSpace> {
    let limit = facts.rlimit_as?.soft?;
    let need = threads.saturating_mul(per_thread);
    Some(AddressSpace {
        need,
        limit,
        room: limit.saturating_sub(in_use) / per_thread.max(1),
        over: in_use.saturating_add(need) > limit,
    })
}

/// `RLIMIT_DATA` for `threads` threads of `per_thread` bytes of private
/// writable memory each, with `in_use` bytes of it (`VmData`) already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Data {
    /// The threads' private writable memory.
    pub need: u64,
    /// `RLIMIT_DATA` (soft; its hard limit when the soft one is 0, the
    /// kernel's allowance in `may_expand_vm`), bytes.
    pub limit: u64,
    /// Threads that fit in what is left.
    pub room: u64,
    /// `in_use + need` exceeds `limit`.
    pub over: bool,
}

/// The data budget of `threads` threads (`None`: no `RLIMIT_DATA`).
pub(crate) fn data(facts: &HostFacts, threads: u64, per_thread: u64, in_use: u64) -> Option<Data> {
    let limit = match facts.rlimit_data? {
        Rlimit {
            soft: Some(0),
            hard,
        } => hard?,
        Rlimit { soft, .. } => soft?,
    };
    let need = threads.saturating_mul(per_thread);
    Some(Data {
        need,
        limit,
        room: limit.saturating_sub(in_use) / per_thread.max(1),
        over: in_use.saturating_add(need) > limit,
    })
}

/// VmData glibc commits for a new malloc arena (its first heap's
/// top), measured: 132 kB more per thread for the first threads that
/// allocate, none past the arena limit.
pub(crate) use exitq::limits::ARENA_DATA_BYTES;

/// Address space a new glibc malloc arena reserves (`PROT_NONE`, 64 MiB:
/// counted by `RLIMIT_AS`, not by `RLIMIT_DATA`).
pub(crate) use exitq::limits::ARENA_RESERVE_BYTES;

pub(crate) use exitq::limits::{glibc_arena_limit, glibc_arena_max};

/// The arena limit of this process: [`glibc_arena_limit`] with its
/// environment (what glibc read at exec, unless herd changed it since,
/// which it does not) and its affinity mask now (all online CPUs when
/// it cannot be read). A thread pinned later sees fewer CPUs, so fewer
/// arenas: this is the most.
pub(crate) fn arena_limit() -> u64 {
    let var = |k: &str| std::env::var(k).ok();
    let cpus = crate::host::allowed_cpus()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(crate::host::online_cpus)
        .len() as u64;
    glibc_arena_limit(
        glibc_arena_max(
            var("MALLOC_ARENA_MAX").as_deref(),
            var("GLIBC_TUNABLES").as_deref(),
        ),
        cpus,
    )
}

/// The new malloc arenas `threads` new threads can make under an arena
/// limit of `limit` (the main arena is one): one each for the first
/// that allocate while fewer than `limit` exist; then glibc hands out
/// existing ones (and when a new one cannot be mapped it reuses one).
/// Arenas that exist already beside the main one are not subtracted:
/// glibc has no public count of them (`malloc_info`'s XML lists them),
/// the pre-flights run before the run's threads, when few exist, and an
/// arena counted twice (in `VmSize` now and as a new one) errs towards
/// refusing. Arenas of exited threads are reused, so threads over a run
/// make no more than this either.
pub(crate) fn new_arenas_under(limit: u64, threads: u64) -> u64 {
    threads.min(limit.saturating_sub(1))
}

/// [`new_arenas_under`] this process's [`arena_limit`].
pub(crate) fn new_arenas(threads: u64) -> u64 {
    new_arenas_under(arena_limit(), threads)
}

/// VmData the malloc arenas of `threads` new threads that allocate can
/// take: [`ARENA_DATA_BYTES`] for each of [`new_arenas`].
pub(crate) fn arena_data_bytes(threads: u64) -> u64 {
    new_arenas(threads).saturating_mul(ARENA_DATA_BYTES)
}

/// Address space the malloc arenas of `threads` new threads that
/// allocate can reserve: [`ARENA_RESERVE_BYTES`] for each of
/// [`new_arenas`] (on 2 CPUs up to 15, 960 MiB; none with
/// `MALLOC_ARENA_MAX=1`).
pub(crate) fn arena_reserve_bytes(threads: u64) -> u64 {
    new_arenas(threads).saturating_mul(ARENA_RESERVE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> HostFacts {
        let mut f = HostFacts::read();
        f.threads_max = Some(1000);
        f.pid_max = Some(2000);
        f.tasks_now = Some(100);
        f.cgroup_pids = Some(CgroupPids {
            path: "/x".into(),
            max: Some(500),
            current: Some(50),
        });
        f.max_map_count = Some(10_000);
        f.root = true;
        f
    }

    #[test]
    fn each_limit_at_its_edge() {
        let f = facts();
        // 50 + 450 = pids.max: fits; one more does not.
        assert!(task_limits(&f, 450).is_empty());
        assert_eq!(
            task_limits(&f, 451),
            [TaskLimit::CgroupPids {
                path: "/x".into(),
                current: 50,
                max: 500
            }]
        );
        let all = task_limits(&f, 1901);
        assert!(all.contains(&TaskLimit::ThreadsMax {
            tasks: 100,
            max: 1000
        }));
        assert!(all.contains(&TaskLimit::PidMax {
            tasks: 100,
            max: 2000
        }));
        // Root: RLIMIT_NPROC is not enforced.
        let mut f = facts();
        f.rlimit_nproc = Some(Rlimit {
            soft: Some(1),
            hard: Some(1),
        });
        assert!(task_limits(&f, 10).is_empty());
        f.root = false;
        assert!(matches!(
            task_limits(&f, 10)[..],
            [TaskLimit::RlimitNproc { limit: 1, .. }]
        ));
        // A huge request does not wrap around.
        assert_eq!(task_limits(&facts(), u64::MAX).len(), 3);
    }

    #[test]
    fn mapping_room() {
        let m = mappings(&facts(), 2_000, 4, 2_000).unwrap();
        assert_eq!((m.need, m.room, m.over), (8_000, 2_000, false));
        assert!(mappings(&facts(), 2_001, 4, 2_000).unwrap().over);
        assert!(mappings(&facts(), u64::MAX, 4, 0).unwrap().over);
        let mut f = facts();
        f.max_map_count = None;
        assert_eq!(mappings(&f, 1, 4, 0), None);
    }

    #[test]
    fn address_space_room() {
        let mut f = facts();
        f.rlimit_as = None;
        assert_eq!(address_space(&f, 1000, 2 << 20, 0), None);
        f.rlimit_as = Some(Rlimit {
            soft: Some(300 << 20),
            hard: None,
        });
        // 100 MiB in use leaves 200 MiB: 100 stacks of 2 MiB, not 101.
        let a = address_space(&f, 100, 2 << 20, 100 << 20).unwrap();
        assert_eq!((a.need, a.room, a.over), (200 << 20, 100, false));
        assert!(address_space(&f, 101, 2 << 20, 100 << 20).unwrap().over);
        assert!(address_space(&f, u64::MAX, 2 << 20, 0).unwrap().over);
        assert_eq!(address_space(&f, 1, 2 << 20, u64::MAX).unwrap().room, 0);
    }

    #[test]
    fn data_room() {
        let mut f = facts();
        f.rlimit_data = None;
        assert_eq!(data(&f, 1000, 2 << 20, 0), None);
        f.rlimit_data = Some(Rlimit {
            soft: Some(64 << 20),
            hard: None,
        });
        // 4 MiB in use leaves 60 MiB: 30 stacks of 2 MiB, not 31.
        let d = data(&f, 30, 2 << 20, 4 << 20).unwrap();
        assert_eq!(
            (d.need, d.limit, d.room, d.over),
            (60 << 20, 64 << 20, 30, false)
        );
        assert!(data(&f, 31, 2 << 20, 4 << 20).unwrap().over);
        assert!(data(&f, u64::MAX, 2 << 20, 0).unwrap().over);
        assert_eq!(data(&f, 1, 2 << 20, u64::MAX).unwrap().room, 0);
        // A soft limit of 0 allows up to the hard one (the kernel's
        // allowance); 0 with no hard limit is no limit.
        f.rlimit_data = Some(Rlimit {
            soft: Some(0),
            hard: Some(16 << 20),
        });
        assert_eq!(data(&f, 1, 2 << 20, 0).unwrap().limit, 16 << 20);
        f.rlimit_data = Some(Rlimit {
            soft: Some(0),
            hard: None,
        });
        assert_eq!(data(&f, 1, 2 << 20, 0), None);
        assert_eq!(arena_data_bytes(0), 0);
        assert_eq!(arena_data_bytes(1), new_arenas(1) * ARENA_DATA_BYTES);
        assert_eq!(arena_reserve_bytes(1), new_arenas(1) * ARENA_RESERVE_BYTES);
    }

    #[test]
    fn new_arenas_up_to_the_limit() {
        // The limit: exitq::limits::glibc_arena_limit (tested there).
        let on2 = glibc_arena_limit(None, 2);
        assert_eq!(new_arenas_under(on2, 0), 0);
        assert_eq!(new_arenas_under(on2, 10), 10);
        assert_eq!(new_arenas_under(on2, 1000), 15);
        // MALLOC_ARENA_MAX=1: none; =4: three.
        assert_eq!(new_arenas_under(glibc_arena_limit(Some(1), 2), 1000), 0);
        assert_eq!(new_arenas_under(glibc_arena_limit(Some(4), 2), 1000), 3);
        assert_eq!(new_arenas_under(u64::MAX, u64::MAX), u64::MAX - 1);
    }
}
