//! Helpers shared by the stack-pool tests.
#![allow(dead_code)]

use std::ffi::c_void;

extern "C-unwind" {
    /// `usleep` is a cancellation point: a cancelled thread is force-unwound
    /// out of it, so it is declared "C-unwind" (RFC 2945).
    pub fn usleep(usec: libc::c_uint) -> libc::c_int;
}

/// Lowest address and size of the calling thread's stack (for a pooled
/// thread: exactly what the pool passed to `pthread_attr_setstack`).
pub fn own_stack() -> (*mut u8, usize) {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut addr: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: pthread_getattr_np initialises `attr`; destroyed after use.
    unsafe {
        assert_eq!(
            libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()),
            0
        );
        assert_eq!(
            libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size),
            0
        );
        libc::pthread_attr_destroy(attr.as_mut_ptr());
    }
    (addr.cast(), size)
}

/// Lines of /proc/self/maps whose range is exactly `len` bytes long.
pub fn mappings_of_len(len: usize) -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("read /proc/self/maps")
        .lines()
        .filter(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let mut it = range.split('-');
            match (it.next(), it.next()) {
                (Some(a), Some(b)) => {
                    let a = usize::from_str_radix(a, 16).unwrap_or(0);
                    let b = usize::from_str_radix(b, 16).unwrap_or(0);
                    b - a == len
                }
                _ => false,
            }
        })
        .count()
}

/// Resident pages in [addr, addr + len) (mincore).
pub fn resident_pages(addr: *mut u8, len: usize) -> usize {
    let page = 4096usize;
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `addr` is page aligned and the range is mapped (checked by the
    // caller); `vec` has one byte per page.
    let rc = unsafe { libc::mincore(addr.cast(), len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

/// (major, minor) of the running kernel.
pub fn kernel_version() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = r.trim().split(|c: char| !c.is_ascii_digit());
    let major = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let minor = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (major, minor)
}
