//! Which limit stopped a thread from being created, or its stack from
//! being mapped, with its numbers.
//!
//! `pthread_create` (and so `std::thread::spawn`) says EAGAIN for most
//! limits: the kernel refuses the task (`clone` fails with EAGAIN at
//! `RLIMIT_NPROC`, `kernel.threads-max`, a cgroup's `pids.max`, or with no
//! free pid below `kernel.pid_max`), or glibc cannot map the stack
//! (`vm.max_map_count`, `RLIMIT_MEMLOCK` under `mlockall`, `RLIMIT_AS`,
//! `RLIMIT_DATA`, strict overcommit; glibc says EAGAIN for that ENOMEM
//! too). The error alone cannot tell
//! them apart. [`diagnose`] reads, right after the failure, each of those
//! limits and the counter it caps ([`Readings::now`]), and names the one
//! at its ceiling with both numbers:
//!
//! * `RLIMIT_NPROC 7 reached: user 65534 has 7 tasks`
//! * `cgroup /sys/fs/cgroup/x pids.max 20 reached (pids.current 20)`
//! * `vm.max_map_count 65530 reached: 65529 mappings in this process`
//! * `RLIMIT_DATA 16777216 reached: 14680064 bytes of private writable
//!   memory in use (VmData), and the stack needs 8392704`
//!
//! [`diagnose_mapping`] does the same for a stack the caller maps itself
//! (`exitq::stacks`: `SpawnError::Map`, `SpawnError::Protect`), for the
//! limits the failed `mmap` or `mprotect` meets ([`MapStep`]).
//!
//! When none is at its ceiling it says so, with every limit and its count
//! read ([`Limit::Memory`]: the task or its stack could not be allocated).
//! Which limits are looked for, in which order, and how near a count must
//! be to its ceiling: `readings.rs`. Who `RLIMIT_NPROC` does not stop
//! (root of the initial user namespace, a holder of `CAP_SYS_RESOURCE` or
//! `CAP_SYS_ADMIN`): `exempt.rs`.
//!
//! exitq explains each thread it cannot create this way: a domain's
//! reclaimer thread ([`DomainBuilder::try_build`](crate::DomainBuilder::try_build),
//! so also the pools' shared domain), a pool worker (`exitq::pool`:
//! `Pool::last_spawn_error` and `build`'s error), a thread on a pooled
//! stack and its stack (`exitq::stacks`: `SpawnError`) and the stack
//! pool's reclaimer. herd counts its creation failures by the [`Limit`]
//! found here.
//!
//! # Cost
//!
//! Only on the failure path: a few small files of `/proc` and `/sys`, the
//! lines of `/proc/self/maps`, and, for `RLIMIT_NPROC` (when it applies),
//! a scan of every process's `/proc/<pid>/status`. It allocates a little
//! (the message, the cgroup paths), never panics (a garbled or huge
//! number in a file is read as unknown) and never waits for anything but
//! those reads. The pool and the stack pool keep their last diagnosis and
//! reuse it while failures of the same error follow with no thread
//! created (no stack mapped) in between, for at most a second, so a pool
//! stuck at a limit does not rescan `/proc` for every submit.
//!
//! # Limits
//!
//! A count is read after the failure, so it can sit a little below its
//! ceiling (a thread ended meanwhile): a limit exactly at its ceiling is
//! named first, then one within a task (64 mappings, 300 pids) of it.
//! `RLIMIT_NPROC` counts the tasks of the real user that this process sees
//! in `/proc` (another pid namespace's are not seen), and the limits of
//! the user namespaces above this one are not read. Limits the process
//! cannot see (a cgroup above its cgroup namespace) are not named: the
//! fallback lists what was read. A memory cgroup's `memory.max` is not a
//! cause: it is charged when pages are touched, not when they are mapped.

use std::fmt;
use std::io;
#[cfg(any(feature = "pool", feature = "stacks"))]
use std::sync::Mutex;
#[cfg(any(feature = "pool", feature = "stacks"))]
use std::time::{Duration, Instant};

mod arena;
mod exempt;
mod read;
mod readings;
mod room;

pub use arena::{arena_limit, glibc_arena_limit, glibc_arena_max};
pub use read::{
    cgroup_pids, map_count, max_map_count, pid_max, tasks_now, threads_max, user_tasks, CgroupPids,
};
pub use readings::Readings;
pub use room::{
    spawn_std, std_stack_bytes, Claim, Claims, NoRoom, Started, ThreadRoom, ARENA_DATA_BYTES,
    ARENA_RESERVE_BYTES, MARGIN_BYTES,
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
    /// `RLIMIT_DATA`: no room for another stack's private writable pages.
    RlimitData,
    /// `RLIMIT_MEMLOCK` under `mlockall(MCL_FUTURE)`: another stack would
    /// be locked beyond it.
    RlimitMemlock,
    /// `vm.overcommit_memory` = 2: the stack's pages do not fit under
    /// `CommitLimit`.
    Overcommit,
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
    pub const ALL: [Limit; 13] = [
        Limit::MaxMapCount,
        Limit::RlimitNproc,
        Limit::CgroupPidsMax,
        Limit::ThreadsMax,
        Limit::PidMax,
        Limit::RlimitAs,
        Limit::RlimitData,
        Limit::RlimitMemlock,
        Limit::Overcommit,
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
            Limit::RlimitData => "RLIMIT_DATA",
            Limit::RlimitMemlock => "RLIMIT_MEMLOCK",
            Limit::Overcommit => "vm.overcommit_memory",
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
            Limit::RlimitData => "rlimit_data",
            Limit::RlimitMemlock => "rlimit_memlock",
            Limit::Overcommit => "overcommit",
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

/// Which call of a thread stack's mapping failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MapStep {
    /// The `mmap` that reserves the whole stack `PROT_NONE`: meets
    /// `vm.max_map_count`, `RLIMIT_MEMLOCK` (under `mlockall(MCL_FUTURE)`,
    /// EAGAIN) and `RLIMIT_AS` (and a full address space).
    Reserve,
    /// The `mprotect` that makes all but the guard read-write: meets
    /// `vm.max_map_count` (it splits the mapping), `RLIMIT_DATA` and
    /// strict overcommit.
    Commit,
}

/// Why a thread stack of `bytes` could not be mapped: reads the limits
/// now ([`Readings::now`]) and names the one at its ceiling for the call
/// that failed (`step`), with its numbers.
pub fn diagnose_mapping(errno: i32, step: MapStep, bytes: u64) -> Diagnosis {
    Readings::now().diagnose_mapping(errno, step, bytes)
}

/// The last diagnosis of a pool's creation failures, reused while nothing
/// changed: the same error of the same call, no thread created (no stack
/// mapped) since (`created`, the pool's count of them, is the same), at
/// most [`FRESH`] old. A pool at its limit fails every creation it tries;
/// this keeps it from rescanning `/proc` for each. Never blocks: when
/// another thread holds it, the caller diagnoses for itself.
#[cfg(any(feature = "pool", feature = "stacks"))]
#[derive(Debug, Default)]
pub(crate) struct Recent(Mutex<Option<(Key, Instant, Diagnosis)>>);

/// What a [`Recent`] diagnosis was for: the error, the mapping step that
/// failed (`None`: the thread's creation), the pool's count of creations.
#[cfg(any(feature = "pool", feature = "stacks"))]
type Key = (i32, Option<MapStep>, u64);

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

    /// The diagnosis of a creation failure with `errno` after `created`
    /// threads were created; `stack_bytes` as for [`diagnose`].
    pub(crate) fn diagnose(&self, errno: i32, created: u64, stack_bytes: Option<u64>) -> Diagnosis {
        self.reuse((errno, None, created), || diagnose(errno, stack_bytes))
    }

    /// The diagnosis of a failure with `errno` to map a stack of `bytes`
    /// at `step` after `mapped` stacks were mapped ([`diagnose_mapping`]).
    #[cfg(feature = "stacks")]
    pub(crate) fn diagnose_mapping(
        &self,
        errno: i32,
        step: MapStep,
        mapped: u64,
        bytes: u64,
    ) -> Diagnosis {
        self.reuse((errno, Some(step), mapped), || {
            diagnose_mapping(errno, step, bytes)
        })
    }

    /// The kept diagnosis if it is for `key` and fresh, else `fresh()`,
    /// kept.
    fn reuse(&self, key: Key, fresh: impl FnOnce() -> Diagnosis) -> Diagnosis {
        if let Ok(last) = self.0.try_lock() {
            if let Some((k, at, d)) = &*last {
                if *k == key && at.elapsed() < FRESH {
                    return d.clone();
                }
            }
        }
        let d = fresh();
        if let Ok(mut last) = self.0.try_lock() {
            *last = Some((key, Instant::now(), d.clone()));
        }
        d
    }
}

#[cfg(test)]
mod tests;
