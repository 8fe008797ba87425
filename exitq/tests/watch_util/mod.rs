//! Watchdogs for tests whose failure would otherwise be a hang, shared by
//! the integration tests: [`within`] fails the test when a call does not
//! return in time, [`fork_child`] runs a closure in a forked child and
//! kills the child if it hangs. And [`Bomb`], a panic payload whose own
//! `Drop` panics.
//!
//! # Forking a test process
//!
//! A test binary runs its tests on several threads, so a forked child
//! starts with whatever locks those threads held at the fork, held for
//! ever, and no thread to release them. The child used to install its own
//! panic hook (`std::panic::set_hook`, which takes the hook's lock for
//! writing): when another test was panicking at that moment (its thread in
//! the hook, printing, the lock held for reading), the child blocked for
//! good and its test failed as a hang, far from the test that really
//! failed. Now the hook that silences children is installed once in the
//! parent, before the first fork ([`quiet_panics_in_forked_children`]),
//! and the child runs nothing between the fork and its body; what the body
//! may do is in [`fork_child`]'s docs. A child that blocks all the same is
//! killed at the parent's deadline ([`wait_child`]) and the test fails
//! saying so; a child that panics fails the test with its panic message
//! (sent to the parent through a pipe), one killed by a signal with the
//! signal.
#![allow(dead_code)] // each test file uses its own subset

pub mod shared_counter;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{mpsc, Mutex, Once};
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
/// if it hangs, or if it was killed by a signal. Returns its exit status.
#[track_caller]
pub fn wait_child(pid: libc::pid_t, limit: Duration) -> i32 {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: our child; WNOHANG polls.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
        if r == pid {
            if libc::WIFSIGNALED(status) {
                let sig = libc::WTERMSIG(status);
                panic!(
                    "the forked child (pid {pid}) was killed by signal {sig} ({}){}",
                    signal_name(sig),
                    if sig == libc::SIGABRT {
                        ": it aborted (a panic that could not unwind, or a failed check)"
                    } else {
                        ""
                    }
                );
            }
            assert!(libc::WIFEXITED(status), "child died: status {status}");
            return libc::WEXITSTATUS(status);
        }
        if start.elapsed() > limit {
            let stuck = where_stuck(pid);
            // SAFETY: our child (not reaped yet: waitpid did not report it).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: reaps it, so no zombie is left behind.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            panic!(
                "the forked child (pid {pid}) did not end within {limit:?}, so it was killed. \
                 Either what it tests hangs, or the child blocked on a lock another thread of \
                 this test process held at the fork (the child has only the forking thread): \
                 see watch_util's docs for what a child may do.\n{stuck}"
            );
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Where a hung child is: the kernel's view (its wait channel and
/// system call) and, if gdb is installed, its stack, so that a hang seen
/// once under load says which lock or call it was.
fn where_stuck(pid: libc::pid_t) -> String {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{f}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| format!("({e})"))
    };
    let mut out = format!(
        "child's wchan: {}; syscall: {}",
        read("wchan"),
        read("syscall")
    );
    let gdb = std::process::Command::new("timeout")
        .args(["20", "gdb", "-batch", "-nx", "-p", &pid.to_string()])
        .args(["-ex", "thread apply all bt"])
        .stdin(std::process::Stdio::null())
        .output();
    match gdb {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let frames: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with('#'))
                .take(40)
                .collect();
            out.push_str("\nchild's stack (gdb):\n");
            out.push_str(&frames.join("\n"));
        }
        Ok(o) => out.push_str(&format!("\n(gdb gave no stack: {})", o.status)),
        Err(e) => out.push_str(&format!("\n(no gdb stack: {e})")),
    }
    out
}

/// The name of the signals a test child usually dies of.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        _ => "another signal",
    }
}

/// The process that installed the panic hook of
/// [`quiet_panics_in_forked_children`]: in any other (a forked child) the
/// hook prints nothing.
static HOOK_OWNER: AtomicI32 = AtomicI32::new(0);

/// The last panic message of a forked child, which [`fork_child`] sends
/// to the parent when the child's body ended in a panic. Only a child ever
/// locks it (the hook's parent side does not), so no parent thread can
/// hold it at a fork.
static CHILD_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Installs, once per process and in the parent (before any fork), the
/// panic hook forked children use: in the process that installed it, it
/// runs the hook that was there before (libtest's printing); in a forked
/// child it prints nothing and keeps the message for [`fork_child`].
///
/// Call it before forking (both [`fork_child`] and a test that forks by
/// itself do). A child must not call `std::panic::set_hook` or
/// `take_hook`: they take the hook's lock for writing, and a thread of the
/// parent that was in the middle of a panic at the fork (running the hook,
/// which holds that lock for reading while it prints) left it held for
/// ever in the child. A test binary that forks must not replace the hook
/// either, except by chaining to the one it took.
pub fn quiet_panics_in_forked_children() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        // SAFETY: getpid has no preconditions.
        HOOK_OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
        std::panic::set_hook(Box::new(move |info| {
            // SAFETY: getpid has no preconditions.
            if unsafe { libc::getpid() } == HOOK_OWNER.load(Ordering::SeqCst) {
                before(info);
            } else {
                let mut last = CHILD_PANIC.lock().unwrap_or_else(|p| p.into_inner());
                *last = Some(info.to_string());
            }
        }));
    });
}

/// Forks; the child runs `child` and `_exit`s with the code it returns,
/// without returning into the test harness; the parent waits at most
/// `limit` for it and returns the code. A hang fails the test (the child
/// is killed), and so does a child that panicked or died of a signal, with
/// the child's panic message.
///
/// # What a child may do
///
/// The child of a multi-threaded process has only the forking thread: a
/// lock another thread held at the fork stays held in the child for ever.
/// So the child does nothing between the fork and its body (the panic hook
/// was installed in the parent: [`quiet_panics_in_forked_children`]), and
/// the body should:
/// * not print (stdout's and stderr's locks), nor replace the panic hook;
/// * not wait for threads of the parent (they do not exist there).
///
/// Panicking is fine (the hook prints nothing in a child and takes no lock
/// a parent thread holds), and so is allocating: glibc's malloc takes all
/// its arenas' locks around `fork()` and resets them in the child. Should
/// a child block all the same, the parent's deadline kills it and fails the
/// test with a message that says so, instead of hanging.
#[track_caller]
pub fn fork_child(limit: Duration, child: impl FnOnce() -> i32) -> i32 {
    quiet_panics_in_forked_children();
    let mut fds = [0; 2];
    // Non-blocking: the child's one write cannot block on a full pipe, and
    // the parent's read cannot wait for another child that inherited the
    // write end (every child forked meanwhile by another test has it).
    // SAFETY: `fds` is a valid array of two ints.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    let [read_end, write_end] = fds;
    // SAFETY: the child runs `child` and `_exit`s; it never returns into
    // code that assumes the parent's threads exist.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)) {
            Ok(code) => code,
            Err(payload) => {
                // Not dropped: a payload whose drop panics would abort.
                std::mem::forget(payload);
                let last = CHILD_PANIC.lock().unwrap_or_else(|p| p.into_inner());
                let said = last.as_deref().unwrap_or("(no panic message)");
                // SAFETY: writes `said`'s bytes to the pipe the parent
                // reads; a short or failed write loses only the message.
                unsafe { libc::write(write_end, said.as_ptr().cast(), said.len()) };
                101
            }
        };
        // SAFETY: ends the child at once, without running the parent's
        // destructors or atexit handlers.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: the parent's copy of the write end, not used here.
    unsafe { libc::close(write_end) };
    let read = ReadEnd(read_end);
    let code = wait_child(pid, limit);
    let said = read.take();
    if code == 101 && !said.is_empty() {
        panic!("the forked child panicked: {said}");
    }
    code
}

/// The parent's end of [`fork_child`]'s pipe, closed when dropped (also
/// when `wait_child` fails the test).
struct ReadEnd(libc::c_int);

impl ReadEnd {
    /// What the child wrote (it has exited, so all of it is in the pipe).
    fn take(&self) -> String {
        let mut said = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reads into `buf`, a valid buffer of its length.
            let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            match usize::try_from(n) {
                Ok(n) if n > 0 => said.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&said).into_owned()
    }
}

impl Drop for ReadEnd {
    fn drop(&mut self) {
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
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

/// Runs this test binary's ignored test `name` alone, in a fresh process
/// with `key=value` in its environment (a scenario that needs a process
/// where nothing ran yet, no domain built, no other test's thread), and
/// fails the calling test with the helper's output unless it passed.
pub fn run_ignored_alone(name: &str, key: &str, value: &str) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--ignored", "--test-threads=1"])
        .env(key, value)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "the helper {name} failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
