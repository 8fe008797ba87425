//! The readings a diagnosis decides from ([`Readings`]), and the decision:
//! which limit is at its ceiling, in the order the failing calls meet
//! them.
//!
//! # Order
//!
//! A new thread's stack is mapped first (glibc's `mmap` of the whole
//! stack `PROT_NONE`, then `mprotect` of all but the guard read-write),
//! then the task is made (`clone`). The mapping meets
//! `vm.max_map_count` (both calls: the `mprotect` splits the mapping),
//! `RLIMIT_MEMLOCK` (the `mmap`, EAGAIN, when `mlockall(MCL_FUTURE)` locks
//! every new mapping), `RLIMIT_AS` (the `mmap`: `may_expand_vm` against
//! the address space),
//! `RLIMIT_DATA` (the `mprotect`: a private writable mapping is data
//! since Linux 4.7, `is_data_mapping`) and strict overcommit (the
//! `mprotect` charges the now writable pages when
//! `vm.overcommit_memory` = 2, where `MAP_NORESERVE` is ignored). The
//! task meets, in `copy_process`'s order, `RLIMIT_NPROC`,
//! `kernel.threads-max`, the cgroups' `pids.max` and a free pid below
//! `kernel.pid_max`.
//!
//! Counts are read after the failure, so a limit is looked for twice:
//! first exactly at its ceiling, then within a little of it (a thread
//! ended meanwhile: 64 mappings, one task, 300 pids). A limit exactly at
//! its ceiling is named before one merely near it, whatever their order:
//! at `RLIMIT_NPROC` with the mappings 30 short of `vm.max_map_count` the
//! task limit stopped the thread, not the mappings.

use super::exempt::{self, nproc_exempt};
use super::read::CgroupPids;
use super::read::{self, cgroup_pids, map_count, max_map_count, pid_max, tasks_now, threads_max};
use super::{Diagnosis, Limit, MapStep};

/// Each limit that can stop a thread's creation or its stack's mapping,
/// and the counter it caps, as read at one moment; `None` where
/// unreadable (or, for a limit, unlimited). [`Readings::diagnose`] and
/// [`Readings::diagnose_mapping`] decide from them alone, so a test can
/// set any of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Readings {
    /// `vm.max_map_count`.
    pub max_map_count: Option<u64>,
    /// The mappings of this process.
    pub mappings: Option<u64>,
    /// `RLIMIT_NPROC`'s soft limit.
    pub rlimit_nproc: Option<u64>,
    /// The real uid (0: root, whom `RLIMIT_NPROC` does not stop, see
    /// `child_user_ns`).
    pub uid: u32,
    /// The effective capabilities of the thread that failed (`CapEff`):
    /// `CAP_SYS_RESOURCE` or `CAP_SYS_ADMIN` lift `RLIMIT_NPROC`. Read
    /// when `RLIMIT_NPROC` is set.
    pub cap_eff: Option<u64>,
    /// This process is in a user namespace other than the initial one:
    /// its capabilities do not lift `RLIMIT_NPROC`, and its `uid` 0 is
    /// the kernel's root only if `uid_maps_to_root`.
    pub child_user_ns: bool,
    /// In a child user namespace: `uid` maps to uid 0 outside it.
    pub uid_maps_to_root: bool,
    /// The tasks of that user (read only when `RLIMIT_NPROC` applies).
    pub user_tasks: Option<u64>,
    /// This process is in a pid namespace other than the initial one:
    /// `user_tasks` counts only the tasks this namespace shows, and its
    /// own `kernel.pid_max` (Linux 6.14+) caps `ns_tasks`.
    pub child_pid_ns: bool,
    /// In a child pid namespace, the tasks its `/proc` shows: those
    /// holding its pids.
    pub ns_tasks: Option<u64>,
    /// The cgroups on this process's path with a `pids.max`, its own first.
    pub cgroups: Vec<CgroupPids>,
    /// `kernel.threads-max`.
    pub threads_max: Option<u64>,
    /// `kernel.pid_max`.
    pub pid_max: Option<u64>,
    /// The tasks on the system.
    pub tasks: Option<u64>,
    /// `RLIMIT_AS`'s soft limit, bytes.
    pub rlimit_as: Option<u64>,
    /// This process's address space, bytes (`VmSize`; read under
    /// `RLIMIT_AS` or strict overcommit).
    pub address_space: Option<u64>,
    /// `RLIMIT_MEMLOCK`'s soft limit, bytes.
    pub rlimit_memlock: Option<u64>,
    /// This process's locked memory, bytes (`VmLck`; read under
    /// `RLIMIT_MEMLOCK`).
    pub locked: Option<u64>,
    /// `RLIMIT_DATA`'s soft limit, bytes (its hard limit when the soft one
    /// is 0, as the kernel takes it).
    pub rlimit_data: Option<u64>,
    /// This process's private writable memory, bytes (`VmData`; read
    /// under `RLIMIT_DATA`).
    pub data: Option<u64>,
    /// `vm.overcommit_memory` (2: strict).
    pub overcommit_memory: Option<u64>,
    /// `CommitLimit` of `/proc/meminfo`, bytes (read under strict
    /// overcommit, as are the two below).
    pub commit_limit: Option<u64>,
    /// `Committed_AS` of `/proc/meminfo`, bytes.
    pub committed: Option<u64>,
    /// The part of `CommitLimit` this process may not have, bytes:
    /// `vm.admin_reserve_kbytes` (unless it holds `CAP_SYS_ADMIN`) and
    /// the least of `vm.user_reserve_kbytes` and 1/32 of its address
    /// space (`__vm_enough_memory`).
    pub commit_reserve: Option<u64>,
}

/// What the failed call needed: the address space it reserves
/// (`RLIMIT_AS`), the private writable bytes it commits (`RLIMIT_DATA`,
/// strict overcommit), whether it made a task.
#[derive(Debug, Clone, Copy)]
struct Needs {
    reserve: u64,
    commit: u64,
    task: bool,
    /// Locked memory may have refused the reservation: an anonymous
    /// `mmap` said EAGAIN (nothing else makes it), or a thread's creation
    /// (glibc's `mmap` under `mlockall(MCL_FUTURE)`).
    memlock: bool,
}

/// Whether a limit is looked for exactly at its ceiling, or near it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Exact,
    Near,
}

impl Pass {
    /// Mappings short of `vm.max_map_count` that count as reached:
    /// exactly, the two a stack needs (the `[vsyscall]` line is counted
    /// too); near, also what glibc unmapped after a failed guard and
    /// neighbours merging and splitting.
    fn map_slack(self) -> u64 {
        match self {
            Pass::Exact => 2,
            Pass::Near => 64,
        }
    }

    /// Tasks short of a task limit that count as reached (near: one
    /// ended meanwhile).
    fn task_slack(self) -> u64 {
        match self {
            Pass::Exact => 0,
            Pass::Near => 1,
        }
    }
}

/// Pids short of `kernel.pid_max` that count as reached: pids below 300
/// are not reused after the first wrap, so the tasks can exhaust the pids
/// that many short of it. Only ever near: the count cannot say it.
const PID_SLACK: u64 = 300;

impl Readings {
    /// Reads every limit and counter now.
    pub fn now() -> Readings {
        let uid = read::real_uid();
        let rlimit_nproc = read::rlimit(libc::RLIMIT_NPROC);
        let rlimit_as = read::rlimit(libc::RLIMIT_AS);
        let rlimit_data = read::rlimit_data();
        let overcommit_memory = read::overcommit_memory();
        let strict = overcommit_memory == Some(2);
        let rlimit_memlock = read::rlimit(libc::RLIMIT_MEMLOCK);
        let cap_eff = (rlimit_nproc.is_some() || strict || rlimit_memlock.is_some())
            .then(exempt::cap_eff)
            .flatten();
        let child_user_ns = exempt::child_user_ns();
        let mut r = Readings {
            max_map_count: max_map_count(),
            mappings: map_count(),
            rlimit_nproc,
            uid,
            cap_eff,
            child_user_ns,
            uid_maps_to_root: child_user_ns && exempt::uid_maps_to_root(uid),
            user_tasks: None,
            child_pid_ns: read::child_pid_ns(),
            ns_tasks: None,
            cgroups: cgroup_pids(),
            threads_max: threads_max(),
            pid_max: pid_max(),
            tasks: tasks_now(),
            rlimit_as,
            address_space: (rlimit_as.is_some() || strict)
                .then(read::address_space)
                .flatten(),
            rlimit_memlock,
            locked: rlimit_memlock.and_then(|_| read::status_bytes(b"VmLck:")),
            rlimit_data,
            data: rlimit_data.and_then(|_| read::status_bytes(b"VmData:")),
            overcommit_memory,
            commit_limit: None,
            committed: None,
            commit_reserve: None,
        };
        let nproc = r.rlimit_nproc.is_some() && r.nproc_exempt().is_none();
        if nproc || r.child_pid_ns {
            let scanned = read::scan_tasks(uid);
            if nproc {
                r.user_tasks = scanned.map(|t| t.user);
            }
            if r.child_pid_ns {
                r.ns_tasks = scanned.map(|t| t.all);
            }
        }
        if strict {
            (r.commit_limit, r.committed) = read::commit();
            r.commit_reserve = r.strict_reserve(read::commit_reserves());
        }
        r
    }

    /// `__vm_enough_memory`'s reserves for this process, from the admin
    /// and user reserves.
    fn strict_reserve(&self, (admin, user): (Option<u64>, Option<u64>)) -> Option<u64> {
        let admin_cap = self
            .cap_eff
            .is_some_and(|c| !self.child_user_ns && c & (1 << exempt::CAP_SYS_ADMIN) != 0);
        let admin = if admin_cap { 0 } else { admin? };
        let user = user?.min(self.address_space? / 32);
        admin.checked_add(user)
    }

    /// Why `RLIMIT_NPROC` does not stop this process (`None`: it does).
    fn nproc_exempt(&self) -> Option<&'static str> {
        nproc_exempt(
            self.uid,
            self.cap_eff,
            self.child_user_ns,
            self.uid_maps_to_root,
        )
    }

    /// The limit behind a thread-creation failure with `errno`, from these
    /// readings; `stack_bytes` as for [`diagnose`](super::diagnose).
    pub fn diagnose(&self, errno: i32, stack_bytes: Option<u64>) -> Diagnosis {
        let stack = stack_bytes.unwrap_or(super::DEFAULT_STACK);
        let needs = Needs {
            reserve: stack,
            commit: stack,
            task: true,
            memlock: true,
        };
        let refused = || match stack_bytes {
            Some(s) => format!("the thread's attributes were refused (stack size {s} bytes)"),
            None => "the thread's attributes were refused (its stack size?)".into(),
        };
        let eperm = "the thread's scheduling attributes are not permitted";
        if let Some(d) = other_errors(errno, refused, eperm) {
            return d;
        }
        self.named(
            errno,
            needs,
            "the task could not be allocated or its stack not mapped (memory, overcommit), or a \
             limit not visible here",
        )
    }

    /// The limit behind a failure with `errno` to map a thread stack of
    /// `bytes` (`step` says which call failed), from these readings.
    pub fn diagnose_mapping(&self, errno: i32, step: MapStep, bytes: u64) -> Diagnosis {
        let (needs, what) = match step {
            MapStep::Reserve => (
                Needs {
                    reserve: bytes,
                    commit: 0,
                    task: false,
                    memlock: errno == libc::EAGAIN,
                },
                if errno == libc::EAGAIN {
                    "too much memory locked (mlockall(MCL_FUTURE) locks every new mapping), or a \
                     limit not visible here"
                } else {
                    "no free range of address space that large, or a limit not visible here"
                },
            ),
            MapStep::Commit => (
                Needs {
                    reserve: 0,
                    commit: bytes,
                    task: false,
                    memlock: false,
                },
                "the kernel could not allocate the mapping (memory), or a limit not visible here",
            ),
        };
        let refused = || format!("a stack mapping of {bytes} bytes was refused");
        if let Some(d) = other_errors(errno, refused, "the stack mapping is not permitted") {
            return d;
        }
        self.named(errno, needs, what)
    }

    /// The limit at its ceiling for a failure with `errno`, or the
    /// fallback listing every limit read, ending in `otherwise`.
    fn named(&self, errno: i32, needs: Needs, otherwise: &str) -> Diagnosis {
        let (limit, detail) = [Pass::Exact, Pass::Near]
            .into_iter()
            .find_map(|pass| self.at_ceiling(needs, pass))
            .unwrap_or_else(|| {
                let summary = self.summary(needs);
                (
                    Limit::Memory,
                    format!("no limit is at its ceiling ({summary}): {otherwise}"),
                )
            });
        Diagnosis {
            errno,
            limit,
            detail,
        }
    }

    /// The first limit at its ceiling in `pass`, with its numbers.
    fn at_ceiling(&self, needs: Needs, pass: Pass) -> Option<(Limit, String)> {
        let maps = needs.reserve > 0 || needs.commit > 0;
        if maps {
            if let Some((max, n)) = reached(self.max_map_count, self.mappings, pass.map_slack()) {
                let detail =
                    format!("vm.max_map_count {max} reached: {n} mappings in this process");
                return Some((Limit::MaxMapCount, detail));
            }
            if pass == Pass::Exact {
                if let Some(found) = self.memory_at_ceiling(needs) {
                    return Some(found);
                }
            }
        }
        if needs.task {
            return self.tasks_at_ceiling(pass);
        }
        None
    }

    /// `RLIMIT_AS`, `RLIMIT_DATA` or strict overcommit, when what the
    /// call needed does not fit under it.
    fn memory_at_ceiling(&self, needs: Needs) -> Option<(Limit, String)> {
        if let Some(found) = self.memlock_at_ceiling(needs) {
            return Some(found);
        }
        if let (Some(lim), Some(vm)) = (self.rlimit_as, self.address_space) {
            if needs.reserve > 0 && vm.saturating_add(needs.reserve) > lim {
                let detail = format!(
                    "RLIMIT_AS {lim} reached: {vm} bytes of address space in use (VmSize), and \
                     the stack needs {}",
                    needs.reserve
                );
                return Some((Limit::RlimitAs, detail));
            }
        }
        if let (Some(lim), Some(data)) = (self.rlimit_data, self.data) {
            if needs.commit > 0 && data.saturating_add(needs.commit) > lim {
                let detail = format!(
                    "RLIMIT_DATA {lim} reached: {data} bytes of private writable memory in use \
                     (VmData), and the stack needs {}",
                    needs.commit
                );
                return Some((Limit::RlimitData, detail));
            }
        }
        if let (Some(2), Some(limit), Some(used)) =
            (self.overcommit_memory, self.commit_limit, self.committed)
        {
            let reserve = self.commit_reserve.unwrap_or(0);
            let want = used.saturating_add(needs.commit).saturating_add(reserve);
            if needs.commit > 0 && want >= limit {
                let detail = format!(
                    "vm.overcommit_memory 2: CommitLimit {limit} bytes reached: Committed_AS \
                     {used}, the stack needs {}, {reserve} kept in reserve",
                    needs.commit
                );
                return Some((Limit::Overcommit, detail));
            }
        }
        None
    }

    /// `RLIMIT_MEMLOCK` under `mlockall(MCL_FUTURE)`, which locks every
    /// new mapping (`mlock_future_ok`, before the address space is
    /// checked): when the reservation does not fit beside the locked
    /// memory. For a thread's creation only when some memory is locked
    /// (`mlockall` itself is not visible). Not for `CAP_IPC_LOCK`.
    fn memlock_at_ceiling(&self, needs: Needs) -> Option<(Limit, String)> {
        let (Some(lim), Some(locked)) = (self.rlimit_memlock, self.locked) else {
            return None;
        };
        let ipc_lock = !self.child_user_ns
            && self
                .cap_eff
                .is_some_and(|c| c & (1 << exempt::CAP_IPC_LOCK) != 0);
        let plausible = needs.memlock && needs.reserve > 0 && (!needs.task || locked > 0);
        if !plausible || ipc_lock || locked.saturating_add(needs.reserve) <= lim {
            return None;
        }
        let detail = format!(
            "RLIMIT_MEMLOCK {lim} reached: {locked} bytes locked (VmLck), and the stack needs {} \
             (mlockall(MCL_FUTURE) locks every new mapping)",
            needs.reserve
        );
        Some((Limit::RlimitMemlock, detail))
    }

    /// A task limit at its ceiling in `pass`, in `copy_process`'s order.
    fn tasks_at_ceiling(&self, pass: Pass) -> Option<(Limit, String)> {
        let slack = pass.task_slack();
        let nproc = reached(self.rlimit_nproc, self.user_tasks, slack)
            .filter(|_| self.nproc_exempt().is_none());
        if let Some((lim, n)) = nproc {
            let detail = format!("RLIMIT_NPROC {lim} reached: {}", self.user_has(n));
            return Some((Limit::RlimitNproc, detail));
        }
        if let Some((max, n)) = reached(self.threads_max, self.tasks, slack) {
            let detail = format!("kernel.threads-max {max} reached: {n} tasks on the system");
            return Some((Limit::ThreadsMax, detail));
        }
        for c in &self.cgroups {
            if let Some((max, cur)) = reached(Some(c.max), c.current, slack) {
                let detail = format!(
                    "cgroup {} pids.max {max} reached (pids.current {cur})",
                    c.dir
                );
                return Some((Limit::CgroupPidsMax, detail));
            }
        }
        if pass == Pass::Near {
            // `kernel.pid_max` read here is this namespace's, which caps
            // the pids of its tasks, not the system's.
            let (holders, whose) = self.pid_holders();
            if let Some((max, n)) = reached(self.pid_max, holders, PID_SLACK) {
                let detail = format!("kernel.pid_max {max} reached: {n} tasks {whose} hold pids");
                return Some((Limit::PidMax, detail));
            }
        }
        None
    }

    /// The tasks whose pids `kernel.pid_max` caps, and where they are.
    fn pid_holders(&self) -> (Option<u64>, &'static str) {
        if self.child_pid_ns {
            (self.ns_tasks, "in this pid namespace")
        } else {
            (self.tasks, "on the system")
        }
    }

    /// `user 65534 has 7 tasks`.
    fn user_has(&self, n: u64) -> String {
        format!(
            "user {} has {n} task{}",
            self.uid,
            if n == 1 { "" } else { "s" }
        )
    }

    /// Every limit that applies to what the call needed, with its count,
    /// for the fallback.
    fn summary(&self, needs: Needs) -> String {
        let mut parts = Vec::new();
        if needs.task {
            self.task_summary(&mut parts);
        }
        if needs.reserve > 0 || needs.commit > 0 {
            parts.push(format!(
                "vm.max_map_count {}: {} mappings",
                num(self.max_map_count),
                num(self.mappings)
            ));
        }
        if needs.reserve > 0 && needs.memlock {
            if let (Some(lim), Some(locked)) = (self.rlimit_memlock, self.locked) {
                parts.push(format!("RLIMIT_MEMLOCK {lim}: {locked} bytes locked"));
            }
        }
        if needs.reserve > 0 {
            parts.push(match self.rlimit_as {
                None => "RLIMIT_AS unlimited".to_string(),
                Some(lim) => format!("RLIMIT_AS {lim}: {} bytes in use", num(self.address_space)),
            });
        }
        if needs.commit > 0 {
            parts.push(match self.rlimit_data {
                None => "RLIMIT_DATA unlimited".to_string(),
                Some(lim) => format!("RLIMIT_DATA {lim}: {} bytes in use", num(self.data)),
            });
            parts.push(match self.overcommit_memory {
                Some(2) => format!(
                    "vm.overcommit_memory 2: CommitLimit {}, Committed_AS {}",
                    num(self.commit_limit),
                    num(self.committed)
                ),
                mode => format!("vm.overcommit_memory {}", num(mode)),
            });
        }
        if needs.reserve > 0 || needs.commit > 0 {
            parts.push(format!(
                "the stack needs {}",
                needs.reserve.max(needs.commit)
            ));
        }
        parts.join("; ")
    }

    /// The task limits with their counts.
    fn task_summary(&self, parts: &mut Vec<String>) {
        parts.push(match (self.nproc_exempt(), self.rlimit_nproc) {
            (Some(who), _) => format!("RLIMIT_NPROC not enforced for {who}"),
            (_, None) => "RLIMIT_NPROC unlimited".to_string(),
            (_, Some(lim)) => match self.user_tasks {
                Some(n) if self.child_pid_ns => format!(
                    "RLIMIT_NPROC {lim}: {} in this pid namespace (those of others not seen)",
                    self.user_has(n)
                ),
                Some(n) => format!("RLIMIT_NPROC {lim}: {}", self.user_has(n)),
                None => format!("RLIMIT_NPROC {lim}: tasks of user {} unknown", self.uid),
            },
        });
        if self.cgroups.is_empty() {
            parts.push("no cgroup pids.max".to_string());
        }
        for c in &self.cgroups {
            parts.push(format!(
                "cgroup {} pids.max {} (pids.current {})",
                c.dir,
                c.max,
                num(c.current)
            ));
        }
        if self.child_pid_ns {
            parts.push(format!(
                "kernel.threads-max {}: {} tasks on the system; kernel.pid_max {}: {} task(s) \
                 in this pid namespace",
                num(self.threads_max),
                num(self.tasks),
                num(self.pid_max),
                num(self.ns_tasks)
            ));
        } else {
            parts.push(format!(
                "kernel.threads-max {}, kernel.pid_max {}: {} tasks on the system",
                num(self.threads_max),
                num(self.pid_max),
                num(self.tasks)
            ));
        }
    }
}

/// A reading, or `unknown`.
fn num(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".to_string(), |v| v.to_string())
}

/// The ceiling and the count when the count is within `slack` of it.
fn reached(ceiling: Option<u64>, count: Option<u64>, slack: u64) -> Option<(u64, u64)> {
    match (ceiling, count) {
        (Some(max), Some(n)) if n.saturating_add(slack) >= max => Some((max, n)),
        _ => None,
    }
}

/// The diagnosis of an error no limit explains (`EINVAL`, `EPERM`,
/// others), `None` for `EAGAIN` and `ENOMEM`; `refused` says what EINVAL
/// refused, `eperm` what EPERM did not permit.
fn other_errors(errno: i32, refused: impl FnOnce() -> String, eperm: &str) -> Option<Diagnosis> {
    let (limit, detail) = match errno {
        libc::EAGAIN | libc::ENOMEM => return None,
        libc::EINVAL => (Limit::InvalidAttributes, refused()),
        libc::EPERM => (Limit::Permission, eperm.to_string()),
        _ => (Limit::Unknown, format!("error {errno}")),
    };
    Some(Diagnosis {
        errno,
        limit,
        detail,
    })
}
