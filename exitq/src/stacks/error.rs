//! Why a spawn failed ([`SpawnError`]): for a thread that could not be
//! created, the limit that stopped it, read right then ([`crate::limits`]);
//! for a stack that could not be mapped, the limits that may explain it.

use std::fmt;

use crate::limits::Diagnosis;

/// Why [`StackPool::spawn`](super::StackPool::spawn) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpawnError {
    /// `mmap` of a new stack failed (`errno`): address space, overcommit or
    /// `vm.max_map_count`.
    Map(i32),
    /// `mprotect` of a new stack failed (`errno`): usually
    /// `vm.max_map_count` (each stack is two mappings).
    Protect(i32),
    /// `pthread_create` failed: its `errno` and the limit found at its
    /// ceiling right after, with its numbers (`EAGAIN: RLIMIT_NPROC 7
    /// reached: user 65534 has 7 tasks`).
    Create(Diagnosis),
}

impl SpawnError {
    /// The `errno` value behind the failure.
    pub fn errno(&self) -> i32 {
        match self {
            SpawnError::Map(e) | SpawnError::Protect(e) => *e,
            SpawnError::Create(d) => d.errno,
        }
    }

    /// The system limit that explains the failure: for
    /// [`SpawnError::Create`] the one found at its ceiling
    /// ([`Limit::name`](crate::limits::Limit::name)), for a stack the
    /// limits that may.
    pub fn limit(&self) -> &'static str {
        match self {
            SpawnError::Map(libc::ENOMEM) | SpawnError::Protect(libc::ENOMEM) => {
                "vm.max_map_count or memory overcommit (each pooled stack is 2 mappings)"
            }
            SpawnError::Map(_) | SpawnError::Protect(_) => "address space (RLIMIT_AS)",
            SpawnError::Create(d) => d.limit.name(),
        }
    }
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let err = std::io::Error::from_raw_os_error(self.errno());
        match self {
            SpawnError::Map(_) => write!(f, "mmap of a thread stack failed: {err}"),
            SpawnError::Protect(_) => write!(f, "mprotect of a thread stack failed: {err}"),
            SpawnError::Create(d) => {
                return write!(f, "pthread_create on a pooled stack failed: {err} ({d})")
            }
        }?;
        write!(f, " (likely limit: {})", self.limit())
    }
}

impl std::error::Error for SpawnError {}
