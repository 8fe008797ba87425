//! Why a spawn failed ([`SpawnError`]), with the system limit that most
//! likely explains it.

use std::fmt;

/// Why [`StackPool::spawn`](super::StackPool::spawn) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpawnError {
    /// `mmap` of a new stack failed (`errno`): address space, overcommit or
    /// `vm.max_map_count`.
    Map(i32),
    /// `mprotect` of a new stack failed (`errno`): usually
    /// `vm.max_map_count` (each stack is two mappings).
    Protect(i32),
    /// `pthread_create` failed (`errno`; `EAGAIN`: `RLIMIT_NPROC`,
    /// `kernel.threads-max`, `kernel.pid_max` or a cgroup's `pids.max`).
    Create(i32),
}

impl SpawnError {
    /// The `errno` value behind the failure.
    pub fn errno(&self) -> i32 {
        match *self {
            SpawnError::Map(e) | SpawnError::Protect(e) | SpawnError::Create(e) => e,
        }
    }

    /// The system limit that most likely explains the failure.
    pub fn limit(&self) -> &'static str {
        match *self {
            SpawnError::Map(libc::ENOMEM) | SpawnError::Protect(libc::ENOMEM) => {
                "vm.max_map_count or memory overcommit (each pooled stack is 2 mappings)"
            }
            SpawnError::Map(_) | SpawnError::Protect(_) => "address space (RLIMIT_AS)",
            SpawnError::Create(libc::EAGAIN) => {
                "RLIMIT_NPROC, kernel.threads-max, kernel.pid_max or a cgroup pids.max limit"
            }
            SpawnError::Create(_) => "pthread_create",
        }
    }
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            SpawnError::Map(_) => "mmap of a thread stack",
            SpawnError::Protect(_) => "mprotect of a thread stack",
            SpawnError::Create(_) => "pthread_create on a pooled stack",
        };
        write!(
            f,
            "{what} failed: {} (likely limit: {})",
            std::io::Error::from_raw_os_error(self.errno()),
            self.limit()
        )
    }
}

impl std::error::Error for SpawnError {}
