//! Why a spawn failed ([`SpawnError`]): the call that failed, and the
//! limit that stopped it with its numbers, read right then
//! ([`crate::limits`]): for a thread that could not be created, the task
//! and stack limits; for a stack that could not be mapped, the limits of
//! the `mmap` or `mprotect` that failed.

use std::fmt;

use crate::limits::Diagnosis;

/// Why [`StackPool::spawn`](super::StackPool::spawn) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpawnError {
    /// `mmap` of a new stack failed: its `errno` and the limit found at
    /// its ceiling right after (`vm.max_map_count`, `RLIMIT_AS`), with its
    /// numbers (`ENOMEM: RLIMIT_AS 67108864 reached: ...`), or every
    /// limit read when none was.
    Map(Diagnosis),
    /// `mprotect` of a new stack (read-write above its guard) failed: its
    /// `errno` and the limit found at its ceiling right after
    /// (`vm.max_map_count`: each stack is two mappings; `RLIMIT_DATA`;
    /// `vm.overcommit_memory` = 2), with its numbers.
    Protect(Diagnosis),
    /// `pthread_create` failed: its `errno` and the limit found at its
    /// ceiling right after, with its numbers (`EAGAIN: RLIMIT_NPROC 7
    /// reached: user 65534 has 7 tasks`).
    Create(Diagnosis),
}

impl SpawnError {
    /// The diagnosis: the `errno`, the limit, its numbers.
    pub fn diagnosis(&self) -> &Diagnosis {
        match self {
            SpawnError::Map(d) | SpawnError::Protect(d) | SpawnError::Create(d) => d,
        }
    }

    /// The `errno` value behind the failure.
    pub fn errno(&self) -> i32 {
        self.diagnosis().errno
    }

    /// The system limit that explains the failure, found at its ceiling
    /// ([`Limit::name`](crate::limits::Limit::name); `memory` when none
    /// was).
    pub fn limit(&self) -> &'static str {
        self.diagnosis().limit.name()
    }
}

impl fmt::Display for SpawnError {
    /// `mmap of a thread stack failed: Cannot allocate memory (os error
    /// 12) (ENOMEM: RLIMIT_AS 67108864 reached: ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let err = std::io::Error::from_raw_os_error(self.errno());
        let call = match self {
            SpawnError::Map(_) => "mmap of a thread stack",
            SpawnError::Protect(_) => "mprotect of a thread stack",
            SpawnError::Create(_) => "pthread_create on a pooled stack",
        };
        write!(f, "{call} failed: {err} ({})", self.diagnosis())
    }
}

impl std::error::Error for SpawnError {}
