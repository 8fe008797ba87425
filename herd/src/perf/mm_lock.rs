//! The process's `mmap_lock` in a contention profile, found by address.
//!
//! The mm's lock (`mm->mmap_lock`, an rwsem inside the mm) has no symbol;
//! it shows as an address "in a heap object". Which address it is, the
//! callers say: some kernel functions take no rwsem but the mm's (the
//! memory-map system calls, the page-fault path). Every rwsem wait on an
//! address such a caller waited on is the mm's, whoever waited: `exit_mm`'s
//! read lock, inlined into `do_exit`, shows as `rwsem:R do_exit`, and
//! `do_exit` may wait on other rwsems too, so counting by caller missed
//! those waits (1,104 of 2,521 rwsem waits on a 60 x 100 storm, all on the
//! one mmap_lock the address table showed).

use serde::{Deserialize, Serialize};

/// Kernel functions whose rwsem contention can only be on a process's
/// `mmap_lock`: the memory-map system calls (`mmap`, `mprotect`,
/// `munmap`, `madvise`, `process_madvise`, `brk`, `mremap`), the
/// page-fault path and `exit_mm` (where not inlined).
pub const MMAP_LOCK_ONLY_CALLERS: &[&str] = &[
    "madvise_do_behavior",
    "madvise_lock",
    "do_madvise",
    "vector_madvise",
    "vm_mmap_pgoff",
    "do_mmap",
    "__vm_munmap",
    "__x64_sys_munmap",
    "do_mprotect_pkey",
    "__x64_sys_mprotect",
    "lock_mm_and_find_vma",
    "do_user_addr_fault",
    "exc_page_fault",
    "exit_mm",
    "__do_sys_brk",
    "__x64_sys_brk",
    "do_brk_flags",
    "__mm_populate",
    "mmap_read_lock_killable",
    "do_mremap",
];

/// True when a wait by `function` can only be on an mm's `mmap_lock`.
pub fn only_mmap_lock(function: &str) -> bool {
    MMAP_LOCK_ONLY_CALLERS.contains(&function)
}

/// The waits on the mm locks of a profile (every rwsem wait on an address
/// an mmap-only caller waited on).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MmapLock {
    /// The lock addresses (hex), one per mm seen (a storm has one).
    pub addresses: Vec<String>,
    /// Completed waits on them.
    pub waits: u64,
    /// Of which for reading.
    pub read_waits: u64,
    /// Sum of the waits, ns.
    pub wait_ns: u64,
    /// Of `waits`, those whose caller is not an mmap-only function (e.g.
    /// `do_exit`): what attribution by caller missed.
    pub other_callers: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn do_exit_is_not_an_mmap_only_caller() {
        assert!(only_mmap_lock("madvise_do_behavior"));
        assert!(!only_mmap_lock("do_exit"), "do_exit takes other rwsems too");
    }
}
