//! The futex each idle worker sleeps on: its slot's `state` word (see
//! `idle.rs`), so a wake-up targets exactly one worker. Private futexes
//! (`FUTEX_PRIVATE_FLAG`): the words never leave the process. Under loom,
//! which has no futex, a wait is a yield.

use std::time::Duration;

use crate::sync::AtomicU32;

/// Sleeps while `word == expected`, at most `timeout` (forever if `None`).
/// Returns on a wake, a timeout, a signal or a changed word; callers always
/// re-check the state.
#[cfg(not(exitq_loom))]
pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY:
    //   * `word` is a live, aligned u32 for the duration of the call (we
    //     borrow it); FUTEX_WAIT only reads it.
    //   * `ts_ptr` is null or points at `ts`, which outlives the call.
    //   * Errors (EAGAIN when the word changed, ETIMEDOUT, EINTR) are all
    //     handled by the caller re-checking the state.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
        );
    }
}

/// Wakes one thread sleeping on `word`.
#[cfg(not(exitq_loom))]
pub(super) fn wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; `word` is live.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1i32,
        );
    }
}

/// Under loom (which has no futex): a wait is a yield, as a spurious
/// wake-up would be; callers re-check the state anyway.
#[cfg(exitq_loom)]
pub(super) fn wait(_word: &AtomicU32, _expected: u32, _timeout: Option<Duration>) {
    crate::sync::yield_now();
}

/// Under loom: waiters only yield, so there is nothing to wake.
#[cfg(exitq_loom)]
pub(super) fn wake(_word: &AtomicU32) {}

#[cfg(all(test, not(exitq_loom)))]
mod tests {
    use super::*;

    #[test]
    fn futex_wait_times_out_and_wakes() {
        let w = AtomicU32::new(7);
        let t0 = std::time::Instant::now();
        wait(&w, 7, Some(Duration::from_millis(20)));
        assert!(t0.elapsed() >= Duration::from_millis(15));
        // Mismatched value: returns at once.
        wait(&w, 8, None);
        wake(&w);
    }
}
