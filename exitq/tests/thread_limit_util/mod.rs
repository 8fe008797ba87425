//! Putting a forked child at a thread limit, so that its next thread
//! cannot be created, and checking that the error names that limit with
//! its numbers (`exitq::limits`): `RLIMIT_NPROC` as a user of its own, or a
//! pids cgroup whose `pids.max` is the child's own task count. Shared by
//! `red_pool.rs` and `red_stacks.rs` (which declare `skip_util` beside
//! it). Everything here needs root.
#![allow(dead_code)] // each test file uses its own subset

/// The uid of `nobody`.
pub const NOBODY: u32 = 65534;

/// Whether this process runs as root (able to become another user, to
/// make cgroups); if not, the test is skipped, saying it needs root `for`
/// something (`skip_util`).
pub fn root_or_skip(what_for: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() == 0 };
    if !root {
        crate::skip_util::skip(&format!("needs root {what_for}"));
    }
    root
}

/// The first uid of the range [`lone_uid`] picks from (far above the
/// users and the container ranges of a usual system).
const LONE_BASE: u32 = 0x7000_0000;

/// A uid no other process runs as: this process's own, from its pid (a
/// pid is below 2^22), so that no other task counts against its
/// `RLIMIT_NPROC`. As `nobody`, the tests at `RLIMIT_NPROC` 2 failed
/// whenever another process of `nobody` was alive, e.g. the child of
/// another test binary run at the same time (26 of 300 runs of
/// `red_stacks.rs` beside a loop of `red_pool.rs`).
pub fn lone_uid() -> u32 {
    LONE_BASE + std::process::id()
}

/// In a forked child only: becomes a user no other process runs as
/// ([`lone_uid`]; `nobody` if this user namespace cannot map it) with
/// `RLIMIT_NPROC` = `tasks`, so that once it has that many tasks no
/// thread can be created any more (`EAGAIN`), as at a user's process
/// limit. With 1 the child itself is the limit. Returns the uid. Panics if
/// it cannot.
pub fn become_lone_user_with_task_limit(tasks: u64) -> u32 {
    let rl = libc::rlimit {
        rlim_cur: tasks,
        rlim_max: tasks,
    };
    // SAFETY: plain system calls on valid arguments, in a forked child
    // (glibc's setuid/setgid change every thread of the child it created).
    let limited = unsafe {
        libc::setrlimit(libc::RLIMIT_NPROC, &rl) == 0 && libc::setgroups(0, std::ptr::null()) == 0
    };
    assert!(
        limited,
        "could not set RLIMIT_NPROC = {tasks}: {}",
        std::io::Error::last_os_error()
    );
    for uid in [lone_uid(), NOBODY] {
        // SAFETY: as above; a failed setgid or setuid (EINVAL: the uid is
        // not mapped here) changes nothing, and root tries the next one.
        if unsafe { libc::setgid(uid) == 0 && libc::setuid(uid) == 0 } {
            return uid;
        }
    }
    panic!(
        "could not become another user with RLIMIT_NPROC = {tasks}: {}",
        std::io::Error::last_os_error()
    );
}

/// `m` names `RLIMIT_NPROC` `limit` as reached, with the task count of
/// user `uid` (at least `limit`: other processes of that user count too):
/// `RLIMIT_NPROC 1 reached: user 65534 has 1 task`.
pub fn names_rlimit_nproc(m: &str, limit: u64, uid: u32) -> bool {
    let head = format!("RLIMIT_NPROC {limit} reached: user {uid} has ");
    let Some(at) = m.find(&head) else {
        return false;
    };
    let rest = &m[at + head.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    digits.parse::<u64>().is_ok_and(|n| n >= limit) && tail.starts_with(" task")
}

/// A pids cgroup made for one test and removed when dropped
/// (`testkit::PidsCgroup`): a child in it (`enter_full`) can create no
/// task.
pub struct PidsCgroup(testkit::PidsCgroup);

impl PidsCgroup {
    /// `exitq-test-<pid>-<name>` as root, or `None` with the test skipped
    /// saying why (`skip_util`).
    pub fn create_or_skip(name: &str) -> Option<PidsCgroup> {
        if !root_or_skip("to make a pids cgroup") {
            return None;
        }
        testkit::PidsCgroup::create(&format!("exitq-test-{}-{name}", std::process::id()))
            .map(PidsCgroup)
            .map_err(|why| crate::skip_util::skip(&why))
            .ok()
    }

    /// What exitq's diagnosis says when this cgroup, holding `tasks`,
    /// stopped a thread: `cgroup <dir> pids.max 2 reached (pids.current 2)`.
    pub fn reached(&self, tasks: u64) -> String {
        format!(
            "cgroup {} pids.max {tasks} reached (pids.current {tasks})",
            self.0.dir().display()
        )
    }

    /// In the forked child: [`testkit::PidsCgroup::enter_full`].
    pub fn enter_full(&self) -> Result<u64, String> {
        self.0.enter_full()
    }
}
