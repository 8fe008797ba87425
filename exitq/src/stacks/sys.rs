//! What the pool asks of the C library and the system: the `pthread_create`
//! that may unwind, glibc's default thread attributes, the page size, errno.
//! No pool state here.

use std::ffi::c_void;

/// A thread start routine that may be unwound by a forced unwind
/// (`pthread_cancel`, `pthread_exit`): it must be a "plain old frame" at
/// every cancellation point it reaches (no live destructors, no
/// `catch_unwind`), see RFC 2945 ("C-unwind" ABI).
pub type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

extern "C" {
    /// `pthread_create` with a start routine that may be force-unwound
    /// (glibc's `start_thread` catches the forced unwind of cancellation
    /// and `pthread_exit` at its own frame, so unwinding *out of* the start
    /// routine into glibc is how every cancelled thread ends).
    #[link_name = "pthread_create"]
    pub(super) fn pthread_create_unwind(
        thread: *mut libc::pthread_t,
        attr: *const libc::pthread_attr_t,
        start: unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void,
        arg: *mut c_void,
    ) -> libc::c_int;
}

pub(super) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

pub(super) fn round_up(n: usize, to: usize) -> Option<usize> {
    Some(n.checked_add(to - 1)? / to * to)
}

/// glibc's default thread stack size (what `pthread_create` with default
/// attributes uses): `RLIMIT_STACK`, or 2 MiB if that is unlimited.
pub fn default_stack_size() -> usize {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    let mut size: usize = 0;
    // SAFETY: pthread_getattr_default_np initialises `attr`, which is
    // destroyed after reading its stack size.
    let rc = unsafe {
        let rc = pthread_getattr_default_np(attr.as_mut_ptr());
        if rc == 0 {
            libc::pthread_attr_getstacksize(attr.as_ptr(), &mut size);
            libc::pthread_attr_destroy(attr.as_mut_ptr());
        }
        rc
    };
    if rc == 0 && size > 0 {
        size
    } else {
        2 << 20
    }
}

extern "C" {
    fn pthread_getattr_default_np(attr: *mut libc::pthread_attr_t) -> libc::c_int;
}
