//! Raw pthreads whose start routine may be unwound by `pthread_cancel`
//! (shared by the exit-path tests).
#![allow(dead_code)] // each test file uses its own subset
use std::ffi::c_void;

/// A start routine glibc may unwind through on cancellation.
pub type Routine = extern "C-unwind" fn(*mut c_void) -> *mut c_void;

/// Starts a joinable pthread running `routine` with `arg` (leaked into
/// the thread: the routine takes ownership of the `Box`). Panics with the
/// error if the thread cannot be created.
pub fn spawn<T>(routine: Routine, arg: Box<T>) -> libc::pthread_t {
    let mut tid: libc::pthread_t = 0;
    // SAFETY: valid out-pointer, default attributes; the routine takes
    // ownership of the leaked Box. The transmute only changes the ABI name:
    // glibc unwinds through the routine on cancellation, which `C-unwind`
    // permits.
    let rc = unsafe {
        libc::pthread_create(
            &mut tid,
            std::ptr::null(),
            std::mem::transmute::<Routine, extern "C" fn(*mut c_void) -> *mut c_void>(routine),
            Box::into_raw(arg).cast(),
        )
    };
    assert_eq!(
        rc,
        0,
        "pthread_create: {}",
        std::io::Error::from_raw_os_error(rc)
    );
    tid
}

/// Joins `tid` (a joinable thread, joined once) and says whether it ended
/// by cancellation (its value is `PTHREAD_CANCELED`, `(void *) -1` in
/// glibc). Panics if the join fails.
pub fn join_was_cancelled(tid: libc::pthread_t) -> bool {
    let mut ret: *mut c_void = std::ptr::null_mut();
    // SAFETY: the caller's joinable thread, joined once; valid out-pointer.
    let rc = unsafe { libc::pthread_join(tid, &mut ret) };
    assert_eq!(
        rc,
        0,
        "pthread_join: {}",
        std::io::Error::from_raw_os_error(rc)
    );
    ret as isize == -1
}
