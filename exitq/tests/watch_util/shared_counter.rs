//! A counter in memory shared with forked children (`MAP_SHARED`), so the
//! parent sees what ran in a child. Shared by `tests/fork.rs` and the
//! torture example (`examples/torture/world.rs`, through `#[path]`).

use std::sync::atomic::AtomicU64;

/// A fresh zeroed counter, mapped for the process's life.
pub fn shared_counter() -> &'static AtomicU64 {
    // SAFETY: a fresh anonymous shared mapping of one page, never unmapped.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of a shared counter");
    // SAFETY: zeroed, page-aligned, mapped for the process's life.
    unsafe { &*p.cast::<AtomicU64>() }
}
