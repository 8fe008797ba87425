//! Why a thread could not be created: the error number and the limit.
//!
//! `pthread_create` says only EAGAIN for most limits: the kernel's
//! task limits (clone fails with EAGAIN for `RLIMIT_NPROC`,
//! `kernel.threads-max`, the cgroup's `pids.max`, `kernel.pid_max`) and
//! glibc's failing stack `mmap` (ENOMEM from `vm.max_map_count`,
//! `RLIMIT_AS` or memory, which glibc reports as EAGAIN). [`diagnose`]
//! looks at the counters right after the failure and names the limit that
//! is at its ceiling. It runs once per wave with a failure, so the cost
//! (reading `/proc/self/maps`, scanning `/proc` for `RLIMIT_NPROC`) stays
//! off the common path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::host::{cgroup_pids, map_count, tasks_now, CgroupPids, HostFacts, Rlimit};

/// The limit that explains a creation failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `vm.max_map_count`: no room for another stack mapping.
    MaxMapCount,
    /// `RLIMIT_NPROC`: this user's task limit.
    RlimitNproc,
    /// The cgroup's `pids.max`.
    CgroupPidsMax,
    /// `kernel.threads-max`.
    ThreadsMax,
    /// `kernel.pid_max`: no free pid.
    PidMax,
    /// `RLIMIT_AS`: no address space for another stack.
    RlimitAs,
    /// Memory: the stack could not be mapped (overcommit) or the kernel
    /// could not allocate the task.
    Memory,
    /// Invalid attributes (EINVAL), e.g. a stack size the system refuses.
    InvalidAttributes,
    /// Not permitted (EPERM).
    Permission,
    /// None of the above matched.
    Unknown,
}

impl Limit {
    /// The limit's name as a user would search for it.
    pub fn name(self) -> &'static str {
        match self {
            Limit::MaxMapCount => "vm.max_map_count",
            Limit::RlimitNproc => "RLIMIT_NPROC",
            Limit::CgroupPidsMax => "cgroup pids.max",
            Limit::ThreadsMax => "kernel.threads-max",
            Limit::PidMax => "kernel.pid_max",
            Limit::RlimitAs => "RLIMIT_AS",
            Limit::Memory => "memory",
            Limit::InvalidAttributes => "invalid thread attributes",
            Limit::Permission => "permission",
            Limit::Unknown => "unknown limit",
        }
    }
}

/// Creation failures with the same error number and limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureGroup {
    /// Error number (e.g. 11).
    pub errno: i32,
    /// Its symbolic name (e.g. `EAGAIN`).
    pub errno_name: String,
    /// The limit that explains it.
    pub limit: Limit,
    /// `limit.name()`, for readers of the JSON.
    pub limit_name: String,
    /// How many creations failed this way.
    pub count: u64,
    /// First wave where it happened.
    pub first_wave: u32,
    /// Threads created successfully before the first failure of this kind.
    pub created_before: u64,
    /// The evidence: the counter and its ceiling at the first failure.
    pub evidence: String,
}

/// Counts failures by (errno, limit) and keeps the evidence.
#[derive(Debug, Default)]
pub struct Failures {
    groups: BTreeMap<(i32, Limit), FailureGroup>,
    /// Last diagnosis per errno, with the created count at the time.
    cached: BTreeMap<i32, (u32, u64, Limit, String)>,
}

impl Failures {
    /// Records a failure of `errno` in `wave` with `created` threads made
    /// so far. Diagnoses the first failure of each errno, then again only
    /// in a later wave where some thread was created since (the situation
    /// may have changed); a run stuck at one limit (the leak mode after its
    /// wall) is diagnosed once, so a 65K-line `/proc/self/maps` is not
    /// re-read for every failing wave.
    pub fn record(&mut self, errno: i32, wave: u32, created: u64, ctx: &DiagContext) {
        let stale =
            !matches!(self.cached.get(&errno), Some((w, c, _, _)) if *w == wave || *c == created);
        if stale {
            let (l, e) = diagnose(errno, ctx);
            self.cached.insert(errno, (wave, created, l, e));
        }
        // The evidence is copied only into a new group: past a limit every
        // creation fails (the leak mode: hundreds of thousands), and this
        // runs once per failure, in the measured phase.
        let (_, _, limit, evidence) = &self.cached[&errno];
        self.groups
            .entry((errno, *limit))
            .or_insert_with(|| FailureGroup {
                errno,
                errno_name: errno_name(errno).to_string(),
                limit: *limit,
                limit_name: limit.name().to_string(),
                count: 0,
                first_wave: wave,
                created_before: created,
                evidence: evidence.clone(),
            })
            .count += 1;
    }

    /// Total failures.
    pub fn total(&self) -> u64 {
        self.groups.values().map(|g| g.count).sum()
    }

    /// The groups, most frequent first.
    pub fn groups(&self) -> Vec<FailureGroup> {
        let mut v: Vec<_> = self.groups.values().cloned().collect();
        v.sort_by_key(|g| std::cmp::Reverse(g.count));
        v
    }
}

/// What [`diagnose`] needs to know about the run.
#[derive(Debug, Clone)]
pub struct DiagContext {
    /// Host facts read before the run.
    pub facts: HostFacts,
    /// Stack size of each thread, bytes.
    pub stack_bytes: u64,
}

/// `EAGAIN` etc. for an error number.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::ENOTSUP => "ENOTSUP",
        _ => "E?",
    }
}

/// Tasks of the real uid (what RLIMIT_NPROC counts), from `/proc`.
pub fn user_tasks() -> Option<u64> {
    let uid = nix::unistd::getuid().as_raw();
    let n = procfs::process::all_processes()
        .ok()?
        .filter_map(|p| p.ok()?.status().ok())
        .filter(|st| st.ruid == uid)
        .map(|st| st.threads.max(1))
        .sum();
    Some(n)
}

fn vm_size_bytes() -> Option<u64> {
    let kib = procfs::process::Process::myself()
        .ok()?
        .status()
        .ok()?
        .vmsize?;
    Some(kib * 1024)
}

/// Names the limit behind a creation failure, with the evidence.
pub fn diagnose(errno: i32, ctx: &DiagContext) -> (Limit, String) {
    let f = &ctx.facts;
    match errno {
        libc::EINVAL => {
            return (
                Limit::InvalidAttributes,
                format!("stack size {} bytes refused", ctx.stack_bytes),
            )
        }
        libc::EPERM => {
            return (
                Limit::Permission,
                "scheduling attributes not permitted".into(),
            )
        }
        libc::EAGAIN | libc::ENOMEM => {}
        _ => return (Limit::Unknown, format!("error {errno}")),
    }
    // A stack mapping plus its guard page: 2 more mappings per thread. The
    // count read afterwards can sit a little below the ceiling (glibc
    // unmaps a stack whose guard split failed; neighbouring PROT_NONE
    // mappings merge and split), so "at the ceiling" allows some slack.
    const MAP_SLACK: u64 = 64;
    if let (Some(max), Some(now)) = (f.max_map_count, map_count()) {
        if now + MAP_SLACK >= max {
            return (
                Limit::MaxMapCount,
                format!("{now} mappings in this process, vm.max_map_count = {max}"),
            );
        }
    }
    if !f.root {
        if let Some(Rlimit {
            soft: Some(lim), ..
        }) = f.rlimit_nproc
        {
            if let Some(n) = user_tasks() {
                if n + 1 >= lim {
                    return (
                        Limit::RlimitNproc,
                        format!("{n} tasks of this user, RLIMIT_NPROC = {lim}"),
                    );
                }
            }
        }
    }
    if let Some(c) = cgroup_pids() {
        if let (Some(max), Some(cur)) = (c.max, c.current) {
            if cur + 1 >= max {
                return (
                    Limit::CgroupPidsMax,
                    format!("{cur} tasks in cgroup {}, pids.max = {max}", c.path),
                );
            }
        }
    }
    let tasks = tasks_now();
    if let (Some(max), Some(n)) = (f.threads_max, tasks) {
        if n + 1 >= max {
            return (
                Limit::ThreadsMax,
                format!("{n} tasks on the system, kernel.threads-max = {max}"),
            );
        }
    }
    if let (Some(max), Some(n)) = (f.pid_max, tasks) {
        // Pids below 300 are reserved after the first wrap.
        if n + 300 >= max {
            return (
                Limit::PidMax,
                format!("{n} tasks on the system, kernel.pid_max = {max}"),
            );
        }
    }
    if let Some(Rlimit {
        soft: Some(lim), ..
    }) = f.rlimit_as
    {
        if let Some(vm) = vm_size_bytes() {
            if vm + ctx.stack_bytes > lim {
                return (
                    Limit::RlimitAs,
                    format!(
                        "address space {vm} bytes + stack {} > RLIMIT_AS = {lim}",
                        ctx.stack_bytes
                    ),
                );
            }
        }
    }
    (
        Limit::Memory,
        format!(
            "no task or mapping limit at its ceiling: the {}-byte stack or the task could not be allocated (memory, overcommit)",
            ctx.stack_bytes
        ),
    )
}

/// Mappings one running `std::thread` holds: its stack and guard page
/// (glibc), and the alternate signal stack Rust's std maps for it and that
/// stack's guard page. Measured: `scenario::load`'s test counts
/// `/proc/self/maps` around 100 parked threads.
pub(crate) const STD_THREAD_MAPPINGS: u64 = 4;

/// The limits that `threads` more threads alive at once, each holding
/// `maps_per_thread` mappings, would exceed, with the numbers (empty: they
/// fit). The task limits are `herd storm`'s pre-flight's
/// (`kernel.threads-max`, `kernel.pid_max`, the cgroup's `pids.max`,
/// `RLIMIT_NPROC` unless root), the mapping limit is `vm.max_map_count`
/// minus `maps_now`, the mappings the process has already.
pub(crate) fn thread_limit_problems(
    facts: &HostFacts,
    threads: u64,
    maps_per_thread: u64,
    maps_now: u64,
) -> Vec<String> {
    let mut p = Vec::new();
    let tasks = facts.tasks_now.unwrap_or(0);
    if let Some(max) = facts.threads_max {
        if tasks + threads > max {
            p.push(format!(
                "{tasks} tasks exist already and kernel.threads-max = {max}"
            ));
        }
    }
    if let Some(max) = facts.pid_max {
        if tasks + threads > max {
            p.push(format!(
                "{tasks} pids are in use and kernel.pid_max = {max}"
            ));
        }
    }
    if let Some(CgroupPids {
        path,
        max: Some(max),
        current,
    }) = &facts.cgroup_pids
    {
        let cur = current.unwrap_or(0);
        if cur + threads > *max {
            p.push(format!(
                "cgroup {path} has {cur} tasks and pids.max = {max}"
            ));
        }
    }
    if !facts.root {
        if let Some(Rlimit {
            soft: Some(lim), ..
        }) = facts.rlimit_nproc
        {
            let mine = user_tasks().unwrap_or(0);
            if mine + threads > lim {
                p.push(format!(
                    "this user has {mine} tasks and RLIMIT_NPROC = {lim} (ulimit -u)"
                ));
            }
        }
    }
    if let Some(max) = facts.max_map_count {
        let need = threads.saturating_mul(maps_per_thread);
        if maps_now + need > max {
            p.push(format!(
                "they need about {need} memory mappings ({maps_per_thread} each), the process \
                 has {maps_now} and vm.max_map_count = {max} leaves room for about {} threads",
                max.saturating_sub(maps_now) / maps_per_thread.max(1)
            ));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host facts with every limit unknown, so only the one a test sets
    /// can match.
    fn ctx() -> DiagContext {
        let mut facts = HostFacts::read();
        facts.max_map_count = None;
        facts.root = true;
        facts.threads_max = None;
        facts.pid_max = None;
        facts.rlimit_as = None;
        DiagContext {
            facts,
            stack_bytes: 8 << 20,
        }
    }

    #[test]
    fn names_each_limit_from_its_counter() {
        let c = ctx();
        assert_eq!(diagnose(libc::EAGAIN, &c).0, Limit::Memory);
        assert_eq!(diagnose(libc::EINVAL, &c).0, Limit::InvalidAttributes);
        assert_eq!(diagnose(libc::EPERM, &c).0, Limit::Permission);

        // Each limit is set at or below its counter's current value, never
        // *at* a reading: other tests in this process (and the system) create
        // and end threads concurrently, so a reading can be stale by the
        // time `diagnose` reads the counter again.
        let mut m = ctx();
        m.facts.max_map_count = Some(1);
        let (l, e) = diagnose(libc::EAGAIN, &m);
        assert_eq!(l, Limit::MaxMapCount);
        assert!(e.contains("vm.max_map_count"), "{e}");

        let mut t = ctx();
        t.facts.threads_max = Some(1);
        assert_eq!(diagnose(libc::EAGAIN, &t).0, Limit::ThreadsMax);

        let mut p = ctx();
        p.facts.pid_max = Some(1);
        assert_eq!(diagnose(libc::EAGAIN, &p).0, Limit::PidMax);

        let mut a = ctx();
        a.facts.rlimit_as = Some(Rlimit {
            soft: Some(1 << 20),
            hard: None,
        });
        assert_eq!(diagnose(libc::ENOMEM, &a).0, Limit::RlimitAs);

        let mut n = ctx();
        n.facts.root = false;
        n.facts.rlimit_nproc = Some(Rlimit {
            soft: Some(1),
            hard: Some(1),
        });
        assert_eq!(diagnose(libc::EAGAIN, &n).0, Limit::RlimitNproc);
    }

    #[test]
    fn groups_by_errno_and_limit() {
        let c = ctx();
        let mut f = Failures::default();
        for _ in 0..3 {
            f.record(libc::EAGAIN, 7, 100, &c);
        }
        f.record(libc::EINVAL, 8, 100, &c);
        assert_eq!(f.total(), 4);
        let g = f.groups();
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].errno_name.as_str(), g[0].count), ("EAGAIN", 3));
        assert_eq!((g[0].first_wave, g[0].created_before), (7, 100));
        assert_eq!(g[0].limit_name, "memory");
        assert_eq!(g[1].limit, Limit::InvalidAttributes);
    }
}
