//! `exitq::limits::diagnose` in a child pid namespace with its own `/proc`
//! (a container): its `kernel.pid_max` is the namespace's own (Linux
//! 6.14+), capping the pids of the namespace's tasks, not of the
//! system's. Made as a rootless container is, by `nobody` (as
//! `unshare -U -r -p -f --mount-proc`): on a kernel without a per-namespace
//! `pid_max` the write reaches the system's, which `nobody` may not
//! change, so the test can never lower the host's. Needs root (to become
//! `nobody`).
use std::time::Duration;

use exitq::limits::{diagnose, Limit};

mod skip_util;
mod thread_limit_util;
mod watch_util;
use watch_util::fork_child;

/// How long a child may take; it only bounds how long a failure takes to
/// show.
/// (60 s: under load a child or a reclaimer may not run for seconds.)
const PATIENCE: Duration = Duration::from_secs(60);

/// What the namespace's first process found, as its exit code.
const OK: i32 = 0;
const NO_NAMESPACE: i32 = 2;
const NO_PROC: i32 = 3;
const NO_PID_MAX: i32 = 4;
const NAMED_PID_MAX: i32 = 5;
const OTHER: i32 = 6;

/// The smallest `kernel.pid_max` above the 300 reserved pids with room
/// for the namespace's one task: the system's tasks are far more.
const NS_PID_MAX: u64 = 302;

/// The first process of a new pid namespace, with `/proc` mounted for it
/// and `kernel.pid_max` set to [`NS_PID_MAX`]: diagnoses an EAGAIN of a
/// thread given its stack (only the task limits apply). Its exit code
/// says what it found (no panics: it is pid 1 of its namespace).
fn in_the_namespace() -> i32 {
    let proc_ = c"/proc";
    // SAFETY: NUL-terminated strings; a mount namespace of our own, made
    // private first, so the host's /proc is untouched.
    let mounted = unsafe {
        libc::mount(
            c"proc".as_ptr(),
            proc_.as_ptr(),
            c"proc".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if mounted != 0 {
        return NO_PROC;
    }
    if std::fs::write("/proc/sys/kernel/pid_max", NS_PID_MAX.to_string()).is_err()
        || exitq::limits::pid_max() != Some(NS_PID_MAX)
    {
        return NO_PID_MAX;
    }
    let d = diagnose(libc::EAGAIN, Some(0));
    eprintln!("in the pid namespace: {d}");
    match d.limit {
        Limit::PidMax => NAMED_PID_MAX,
        Limit::Memory if d.detail.contains("task(s) in this pid namespace") => OK,
        _ => OTHER,
    }
}

/// A namespace with a `kernel.pid_max` of 302 and one task, on a system
/// with hundreds: "kernel.pid_max 302 reached: N tasks on the system hold
/// pids" was said (the system's tasks against the namespace's limit). Its
/// own tasks are counted now, and no limit is at its ceiling.
#[test]
fn a_pid_namespace_is_judged_by_its_own_tasks() {
    if !thread_limit_util::root_or_skip("to become nobody") {
        return;
    }
    let code = fork_child(PATIENCE, || {
        let nobody = thread_limit_util::NOBODY;
        // SAFETY: plain system calls on valid arguments in a forked child
        // of one thread (unshare(CLONE_NEWUSER) needs one).
        let became = unsafe {
            libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(nobody) == 0
                && libc::setuid(nobody) == 0
                // The uid change made it undumpable: its uid_map root's.
                && libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) == 0
        };
        assert!(became, "become nobody: {}", std::io::Error::last_os_error());
        let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS;
        // SAFETY: as above.
        if unsafe { libc::unshare(flags) } != 0 {
            return NO_NAMESPACE;
        }
        if std::fs::write("/proc/self/uid_map", format!("0 {nobody} 1\n")).is_err() {
            return NO_NAMESPACE;
        }
        // SAFETY: the mounts changed are those of the new mount namespace.
        let ok = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) == 0
        };
        if !ok {
            return NO_NAMESPACE;
        }
        // SAFETY: the child runs `in_the_namespace` and `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the namespace's first process with its finding.
            unsafe { libc::_exit(in_the_namespace()) };
        }
        assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
        let mut status = 0;
        // SAFETY: our own child; `status` is a valid int.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            OTHER
        }
    });
    match code {
        NO_NAMESPACE => skip_util::skip(
            "nobody cannot make a user, pid and mount namespace here (unprivileged user \
             namespaces off?)",
        ),
        NO_PID_MAX => {
            skip_util::skip("kernel.pid_max is not per pid namespace here (Linux < 6.14)")
        }
        _ => assert_eq!(
            code, OK,
            "3: /proc not mounted; 5: kernel.pid_max named; 6: another limit (see stderr)"
        ),
    }
}
