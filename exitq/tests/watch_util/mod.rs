//! Watchdogs for tests whose failure would otherwise be a hang, shared by
//! the integration tests: [`within`] fails the test when a call does not
//! return in time, [`fork_child`] runs a closure in a forked child and
//! kills the child if it hangs. And [`Bomb`], a panic payload whose own
//! `Drop` panics.
#![allow(dead_code)] // each test file uses its own subset

pub mod shared_counter;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Runs `f` on a thread; fails the test if it does not return within
/// `limit` (a deadlock), instead of hanging.
pub fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: did not return within {limit:?} (deadlock)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

/// Waits for child `pid` for at most `limit`; kills it and fails the test
/// if it hangs. Returns its exit status.
pub fn wait_child(pid: libc::pid_t, limit: Duration) -> i32 {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our child; WNOHANG polls.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if r == pid {
            assert!(libc::WIFEXITED(status), "child died: status {status}");
            return libc::WEXITSTATUS(status);
        }
        if start.elapsed() > limit {
            // SAFETY: our child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: reap it.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            panic!("the forked child hung for {limit:?} (killed)");
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Forks; the child runs `child` (its panics silenced and turned into exit
/// code 101) and `_exit`s with the code it returns, without returning into
/// the test harness; the parent waits at most `limit` for it and returns
/// the code (a hang fails the test).
///
/// The child of a multi-threaded process should do little: no printing (a
/// lock another thread held at the fork stays held), no waiting for other
/// threads (they do not exist there).
pub fn fork_child(limit: Duration, child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `child` and `_exit`s; it never returns into
    // code that assumes the parent's threads exist.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        std::panic::set_hook(Box::new(|_| {}));
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        // SAFETY: ends the child at once, without running the parent's
        // destructors or atexit handlers.
        unsafe { libc::_exit(code) };
    }
    wait_child(pid, limit)
}

/// A panic payload whose own `Drop` panics (unless already unwinding).
/// Whoever drops it outside `catch_unwind` unwinds: a test that receives
/// one must `mem::forget` it.
pub struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        if !thread::panicking() {
            panic!("a panic payload whose drop panics (expected by the test)");
        }
    }
}

/// In a forked child only: becomes user `nobody` (65534) with
/// `RLIMIT_NPROC` = 1, so no thread can be created any more (`EAGAIN`),
/// as at a user's process limit. False if that failed (not root).
pub fn become_nobody_at_the_thread_limit() -> bool {
    let rl = libc::rlimit {
        rlim_cur: 1,
        rlim_max: 1,
    };
    // SAFETY: plain system calls on valid arguments, in a single-threaded
    // forked child (setuid reaches no other thread).
    unsafe {
        libc::setrlimit(libc::RLIMIT_NPROC, &rl) == 0
            && libc::setgroups(0, std::ptr::null()) == 0
            && libc::setgid(65534) == 0
            && libc::setuid(65534) == 0
    }
}

/// Whether this process runs as root (able to become another user).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
