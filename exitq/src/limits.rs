//! Which limit stopped a thread from being created, with its numbers.
//!
//! `pthread_create` (and so `std::thread::spawn`) says EAGAIN for most
//! limits: the kernel refuses the task (`clone` fails with EAGAIN at
//! `RLIMIT_NPROC`, `kernel.threads-max`, a cgroup's `pids.max`, or with no
//! free pid below `kernel.pid_max`), or glibc cannot map the stack
//! (`vm.max_map_count`, `RLIMIT_AS`, memory; glibc says EAGAIN for that
//! ENOMEM too). The error alone cannot tell them apart. [`diagnose`] reads,
//! right after the failure, each of those limits and the counter it caps
//! ([`Readings::now`]), and names the one at its ceiling with both numbers:
//!
//! * `RLIMIT_NPROC 7 reached: user 65534 has 7 tasks`
//! * `cgroup /sys/fs/cgroup/x pids.max 20 reached (pids.current 20)`
//! * `vm.max_map_count 65530 reached: 65529 mappings in this process`
//!
//! When none is at its ceiling it says so, with every limit and its count
//! read ([`Limit::Memory`]: the task or its stack could not be allocated).
//!
//! exitq explains each thread it cannot create this way: a domain's
//! reclaimer thread ([`DomainBuilder::try_build`](crate::DomainBuilder::try_build),
//! so also the pools' shared domain), a pool worker (`exitq::pool`:
//! `Pool::last_spawn_error` and `build`'s error), a thread on a pooled
//! stack (`exitq::stacks`: `SpawnError::Create`) and the stack pool's
//! reclaimer. herd counts its creation failures by the [`Limit`] found
//! here.
//!
//! # Cost
//!
//! Only on the failure path: a few small files of `/proc` and `/sys`, the
//! lines of `/proc/self/maps`, and, for `RLIMIT_NPROC` (not enforced for
//! root), a scan of every process's `/proc/<pid>/status`. It allocates a
//! little (the message, the cgroup paths), never panics and never waits
//! for anything but those reads. The pool and the stack pool keep their
//! last diagnosis and reuse it while failures of the same error follow
//! with no thread created in between (for at most a second), so a pool
//! stuck at a limit does not rescan `/proc` for every submit.
//!
//! # Limits
//!
//! A count is read after the failure, so it can sit a little below its
//! ceiling (a thread ended meanwhile): a counter within one task (64
//! mappings, 300 pids) of its limit counts as reached. `RLIMIT_NPROC`
//! counts the tasks of the real user that this process sees in `/proc`
//! (another pid namespace's are not seen), and is skipped for root, whom
//! the kernel exempts. Limits the process cannot see (a cgroup above its
//! cgroup namespace) are not named: the fallback lists what was read.

use std::fmt;
use std::io;
#[cfg(any(feature = "pool", feature = "stacks"))]
use std::sync::Mutex;
#[cfg(any(feature = "pool", feature = "stacks"))]
use std::time::{Duration, Instant};

mod read;

pub use read::{
    cgroup_pids, map_count, max_map_count, pid_max, tasks_now, threads_max, user_tasks, CgroupPids,
};

/// The limit that explains a thread-creation failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// `vm.max_map_count`: no room for another stack mapping.
    MaxMapCount,
    /// `RLIMIT_NPROC`: the user's task limit.
    RlimitNproc,
    /// A cgroup's `pids.max`.
    CgroupPidsMax,
    /// `kernel.threads-max`.
    ThreadsMax,
    /// `kernel.pid_max`: no free pid.
    PidMax,
    /// `RLIMIT_AS`: no address space for another stack.
    RlimitAs,
    /// Memory: no limit above was at its ceiling, so the stack could not
    /// be mapped (overcommit) or the kernel could not allocate the task.
    Memory,
    /// Invalid attributes (EINVAL), e.g. a stack size the system refuses.
    InvalidAttributes,
    /// Not permitted (EPERM).
    Permission,
    /// Another error.
    Unknown,
}

impl Limit {
    /// Every limit.
    pub const ALL: [Limit; 10] = [
        Limit::MaxMapCount,
        Limit::RlimitNproc,
        Limit::CgroupPidsMax,
        Limit::ThreadsMax,
        Limit::PidMax,
        Limit::RlimitAs,
        Limit::Memory,
        Limit::InvalidAttributes,
        Limit::Permission,
        Limit::Unknown,
    ];

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

    /// A stable identifier (`rlimit_nproc`), for machine-read output.
    pub fn key(self) -> &'static str {
        match self {
            Limit::MaxMapCount => "max_map_count",
            Limit::RlimitNproc => "rlimit_nproc",
            Limit::CgroupPidsMax => "cgroup_pids_max",
            Limit::ThreadsMax => "threads_max",
            Limit::PidMax => "pid_max",
            Limit::RlimitAs => "rlimit_as",
            Limit::Memory => "memory",
            Limit::InvalidAttributes => "invalid_attributes",
            Limit::Permission => "permission",
            Limit::Unknown => "unknown",
        }
    }

    /// The limit whose [`key`](Limit::key) is `key`.
    pub fn from_key(key: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.key() == key)
    }
}

/// Why a thread could not be created: the error, the limit that explains
/// it, and the numbers that show it ([`diagnose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// The error number (`EAGAIN`, ...).
    pub errno: i32,
    /// The limit found at its ceiling, or [`Limit::Memory`] when none was.
    pub limit: Limit,
    /// The limit with its value and the count it caps, e.g.
    /// `RLIMIT_NPROC 7 reached: user 65534 has 7 tasks`; or, for
    /// [`Limit::Memory`], every limit read with its count.
    pub detail: String,
}

impl fmt::Display for Diagnosis {
    /// `EAGAIN: RLIMIT_NPROC 7 reached: user 65534 has 7 tasks`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", errno_name(self.errno), self.detail)
    }
}

/// `EAGAIN` etc. for an error number a thread creation returns (`E?` for
/// others).
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::ENOTSUP => "ENOTSUP",
        _ => "E?",
    }
}

/// The stack a thread of unknown stack size is taken to map: std's
/// default (`RUST_MIN_STACK` aside).
const DEFAULT_STACK: u64 = 2 << 20;

/// Why a thread could not be created, from its error number: reads the
/// limits now ([`Readings::now`]) and names the one at its ceiling.
/// `stack_bytes` is the stack the new thread would have mapped (0 for a
/// stack given to it, `None`: std's default, 2 MiB), for `RLIMIT_AS`.
pub fn diagnose(errno: i32, stack_bytes: Option<u64>) -> Diagnosis {
    Readings::now().diagnose(errno, stack_bytes)
}

/// A thread-creation error with the limit that explains it:
/// `Resource temporarily unavailable (os error 11) (EAGAIN: RLIMIT_NPROC 7
/// reached: user 65534 has 7 tasks)`. An error without an OS error number
/// is returned as it is. `stack_bytes` as for [`diagnose`].
pub fn explain_thread_error(e: &io::Error, stack_bytes: Option<u64>) -> String {
    explain(e, |errno| diagnose(errno, stack_bytes))
}

/// `e` with the diagnosis of its error number, if it has one.
fn explain(e: &io::Error, diagnose: impl FnOnce(i32) -> Diagnosis) -> String {
    match e.raw_os_error() {
        Some(errno) => format!("{e} ({})", diagnose(errno)),
        None => e.to_string(),
    }
}

/// Each limit that can stop a thread's creation, and the counter it caps,
/// as read at one moment; `None` where unreadable (or, for a limit,
/// unlimited). [`Readings::diagnose`] decides from them alone, so a test
/// can set any of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Readings {
    /// `vm.max_map_count`.
    pub max_map_count: Option<u64>,
    /// The mappings of this process.
    pub mappings: Option<u64>,
    /// `RLIMIT_NPROC`'s soft limit.
    pub rlimit_nproc: Option<u64>,
    /// The real uid (0: root, whom `RLIMIT_NPROC` does not stop).
    pub uid: u32,
    /// The tasks of that user (read only when `RLIMIT_NPROC` applies).
    pub user_tasks: Option<u64>,
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
    /// This process's address space, bytes (read only under `RLIMIT_AS`).
    pub address_space: Option<u64>,
}

/// Mappings short of `vm.max_map_count` that count as reached: glibc
/// unmaps a stack whose guard could not be set up, and neighbouring
/// mappings merge and split, so the count read afterwards can sit a
/// little below the ceiling.
const MAP_SLACK: u64 = 64;

/// Pids short of `kernel.pid_max` that count as reached: pids below 300
/// are not reused after the first wrap.
const PID_SLACK: u64 = 300;

impl Readings {
    /// Reads every limit and counter now.
    pub fn now() -> Readings {
        let uid = read::real_uid();
        let rlimit_nproc = read::rlimit(libc::RLIMIT_NPROC);
        let rlimit_as = read::rlimit(libc::RLIMIT_AS);
        Readings {
            max_map_count: max_map_count(),
            mappings: map_count(),
            rlimit_nproc,
            uid,
            user_tasks: (uid != 0 && rlimit_nproc.is_some())
                .then(|| user_tasks(uid))
                .flatten(),
            cgroups: cgroup_pids(),
            threads_max: threads_max(),
            pid_max: pid_max(),
            tasks: tasks_now(),
            rlimit_as,
            address_space: rlimit_as.and_then(|_| read::address_space()),
        }
    }

    /// The limit behind a creation failure with `errno`, from these
    /// readings; `stack_bytes` as for [`diagnose`].
    pub fn diagnose(&self, errno: i32, stack_bytes: Option<u64>) -> Diagnosis {
        let found = |limit, detail| Diagnosis {
            errno,
            limit,
            detail,
        };
        match errno {
            libc::EAGAIN | libc::ENOMEM => {}
            libc::EINVAL => {
                return found(
                    Limit::InvalidAttributes,
                    match stack_bytes {
                        Some(s) => {
                            format!("the thread's attributes were refused (stack size {s} bytes)")
                        }
                        None => "the thread's attributes were refused (its stack size?)".into(),
                    },
                )
            }
            libc::EPERM => {
                return found(
                    Limit::Permission,
                    "the thread's scheduling attributes are not permitted".into(),
                )
            }
            _ => return found(Limit::Unknown, format!("error {errno}")),
        }
        match self.at_ceiling(stack_bytes.unwrap_or(DEFAULT_STACK)) {
            Some((limit, detail)) => found(limit, detail),
            None => found(
                Limit::Memory,
                format!(
                    "no limit is at its ceiling ({}): the task could not be allocated or its \
                     stack not mapped (memory, overcommit), or a limit not visible here",
                    self.summary()
                ),
            ),
        }
    }

    /// The first limit at its ceiling, with its numbers.
    fn at_ceiling(&self, stack: u64) -> Option<(Limit, String)> {
        // The ceiling and the count when the count is within `slack` of it.
        let reached = |ceiling: Option<u64>, count: Option<u64>, slack: u64| match (ceiling, count)
        {
            (Some(max), Some(n)) if n.saturating_add(slack) >= max => Some((max, n)),
            _ => None,
        };
        if let Some((max, n)) = reached(self.max_map_count, self.mappings, MAP_SLACK) {
            let detail = format!("vm.max_map_count {max} reached: {n} mappings in this process");
            return Some((Limit::MaxMapCount, detail));
        }
        let nproc = reached(self.rlimit_nproc, self.user_tasks, 1).filter(|_| self.uid != 0);
        if let Some((lim, n)) = nproc {
            let detail = format!("RLIMIT_NPROC {lim} reached: {}", self.user_has(n));
            return Some((Limit::RlimitNproc, detail));
        }
        for c in &self.cgroups {
            if let Some((max, cur)) = reached(Some(c.max), c.current, 1) {
                let detail = format!(
                    "cgroup {} pids.max {max} reached (pids.current {cur})",
                    c.dir
                );
                return Some((Limit::CgroupPidsMax, detail));
            }
        }
        if let Some((max, n)) = reached(self.threads_max, self.tasks, 1) {
            let detail = format!("kernel.threads-max {max} reached: {n} tasks on the system");
            return Some((Limit::ThreadsMax, detail));
        }
        if let Some((max, n)) = reached(self.pid_max, self.tasks, PID_SLACK) {
            let detail = format!("kernel.pid_max {max} reached: {n} tasks on the system hold pids");
            return Some((Limit::PidMax, detail));
        }
        // Reached when the stack (and its guard page) does not fit.
        let with_stack = self.address_space.map(|vm| vm.saturating_add(stack));
        if let (Some((lim, _)), Some(vm)) =
            (reached(self.rlimit_as, with_stack, 0), self.address_space)
        {
            let detail = format!(
                "RLIMIT_AS {lim} reached: {vm} bytes of address space in use, and the stack \
                 needs {stack}"
            );
            return Some((Limit::RlimitAs, detail));
        }
        None
    }

    /// `user 65534 has 7 tasks`.
    fn user_has(&self, n: u64) -> String {
        format!(
            "user {} has {n} task{}",
            self.uid,
            if n == 1 { "" } else { "s" }
        )
    }

    /// Every limit with its count, for the fallback.
    fn summary(&self) -> String {
        let num = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), |v| v.to_string());
        let mut parts = Vec::new();
        parts.push(match (self.uid, self.rlimit_nproc) {
            (0, _) => "RLIMIT_NPROC not enforced for root".to_string(),
            (_, None) => "RLIMIT_NPROC unlimited".to_string(),
            (_, Some(lim)) => match self.user_tasks {
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
        parts.push(format!(
            "kernel.threads-max {}, kernel.pid_max {}: {} tasks on the system",
            num(self.threads_max),
            num(self.pid_max),
            num(self.tasks)
        ));
        parts.push(format!(
            "vm.max_map_count {}: {} mappings",
            num(self.max_map_count),
            num(self.mappings)
        ));
        parts.push(match self.rlimit_as {
            None => "RLIMIT_AS unlimited".to_string(),
            Some(lim) => format!("RLIMIT_AS {lim}: {} bytes in use", num(self.address_space)),
        });
        parts.join("; ")
    }
}

/// The last diagnosis of a pool's creation failures, reused while nothing
/// changed: the same error, no thread created since (`created`, the
/// pool's count of created threads, is the same), at most [`FRESH`] old.
/// A pool at its limit fails every creation it tries; this keeps it from
/// rescanning `/proc` for each. Never blocks: when another thread holds it,
/// the caller diagnoses for itself.
#[cfg(any(feature = "pool", feature = "stacks"))]
#[derive(Debug, Default)]
pub(crate) struct Recent(Mutex<Option<(i32, u64, Instant, Diagnosis)>>);

/// How long a diagnosis is reused at most.
#[cfg(any(feature = "pool", feature = "stacks"))]
const FRESH: Duration = Duration::from_secs(1);

#[cfg(any(feature = "pool", feature = "stacks"))]
impl Recent {
    /// `e` explained as [`explain_thread_error`] does, by
    /// [`Recent::diagnose`].
    #[cfg(feature = "pool")]
    pub(crate) fn explain(&self, e: &io::Error, created: u64, stack_bytes: Option<u64>) -> String {
        explain(e, |errno| self.diagnose(errno, created, stack_bytes))
    }

    /// The diagnosis of a failure with `errno` after `created` threads
    /// were created; `stack_bytes` as for [`diagnose`].
    pub(crate) fn diagnose(&self, errno: i32, created: u64, stack_bytes: Option<u64>) -> Diagnosis {
        if let Ok(last) = self.0.try_lock() {
            if let Some((e, c, at, d)) = &*last {
                if *e == errno && *c == created && at.elapsed() < FRESH {
                    return d.clone();
                }
            }
        }
        let d = diagnose(errno, stack_bytes);
        if let Ok(mut last) = self.0.try_lock() {
            *last = Some((errno, created, Instant::now(), d.clone()));
        }
        d
    }
}

#[cfg(test)]
mod tests;
