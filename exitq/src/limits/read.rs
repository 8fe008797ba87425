//! The readings behind a diagnosis: each limit and the counter it caps,
//! from `/proc` and `/sys` (and `getrlimit`). A reading that fails is
//! `None` (or left out), never guessed, never a panic.
//!
//! The small files are read into buffers on the stack and parsed as bytes
//! (a process name in `/proc/<pid>/status` need not be UTF-8), and
//! `/proc/self/maps` is streamed: right after a failure at
//! `vm.max_map_count` a heap buffer the size of that file (megabytes)
//! would need a new mapping itself. The cgroup files are found through
//! `/proc/self/cgroup` and `/proc/self/mountinfo`, read whole (small).

use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::MetadataExt;

/// A cgroup on this process's path that limits its tasks (`pids.max` is a
/// number, not `max`): cgroup v2, or the v1 `pids` controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupPids {
    /// The cgroup's directory (e.g. `/sys/fs/cgroup/user.slice`).
    pub dir: String,
    /// Its `pids.max`.
    pub max: u64,
    /// Its `pids.current`, the tasks in it and below it now.
    pub current: Option<u64>,
}

/// Reads up to `buf.len()` bytes of `path`: `None` if it cannot be opened
/// or read.
pub(super) fn read_into<'a>(path: &str, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    let mut f = File::open(path).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.get(..len)
}

/// The number at the start of `s` after any blanks (`None`: no digits,
/// e.g. `max`, or too large).
fn leading_u64(s: &[u8]) -> Option<u64> {
    let blanks = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let s = s.get(blanks..)?;
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(s.get(..digits)?).ok()?.parse().ok()
}

/// A file holding one number (a sysctl, `pids.max`, `pids.current`).
pub(super) fn read_u64(path: &str) -> Option<u64> {
    let mut buf = [0u8; 32];
    leading_u64(read_into(path, &mut buf)?)
}

/// `vm.max_map_count`: the mappings one process may have.
pub fn max_map_count() -> Option<u64> {
    read_u64("/proc/sys/vm/max_map_count")
}

/// `kernel.threads-max`: the tasks the whole system may have.
pub fn threads_max() -> Option<u64> {
    read_u64("/proc/sys/kernel/threads-max")
}

/// `kernel.pid_max`: the largest pid, so also a ceiling on tasks.
pub fn pid_max() -> Option<u64> {
    read_u64("/proc/sys/kernel/pid_max")
}

/// The tasks (threads) on the system now: `/proc/loadavg`'s
/// `running/total`.
pub fn tasks_now() -> Option<u64> {
    let mut buf = [0u8; 128];
    let text = read_into("/proc/loadavg", &mut buf)?;
    let field = text.split(|b| b.is_ascii_whitespace()).nth(3)?;
    let slash = field.iter().position(|&b| b == b'/')?;
    leading_u64(field.get(slash + 1..)?)
}

/// The memory mappings of this process now (lines of `/proc/self/maps`),
/// streamed through a buffer on the stack.
pub fn map_count() -> Option<u64> {
    let mut f = File::open("/proc/self/maps").ok()?;
    let mut buf = [0u8; 16 * 1024];
    let mut lines = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Some(lines),
            Ok(n) => lines += buf.get(..n)?.iter().filter(|&&b| b == b'\n').count() as u64,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// The value of `key` (e.g. `Threads:`) in a `/proc/<pid>/status` text.
pub(super) fn status_field(status: &[u8], key: &[u8]) -> Option<u64> {
    status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(key))
        .and_then(leading_u64)
}

/// The tasks whose real user is `uid`, what `RLIMIT_NPROC` counts: the
/// threads of every process in `/proc` with that real uid. Processes of
/// other pid namespaces are not seen (the count is then low).
pub fn user_tasks(uid: u32) -> Option<u64> {
    scan_tasks(uid).map(|t| t.user)
}

/// The tasks `/proc` shows, counted in one scan.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scanned {
    /// All of them: in a child pid namespace with its own `/proc`, that
    /// namespace's tasks, each holding one of its pids.
    pub(super) all: u64,
    /// Those whose real user is the `uid` asked for.
    pub(super) user: u64,
}

/// The threads of every process in `/proc`, and of those whose real user
/// is `uid`.
pub(super) fn scan_tasks(uid: u32) -> Option<Scanned> {
    // `Threads:` comes after `Groups:`, which can be long.
    let mut buf = [0u8; 16 * 1024];
    let mut path = String::with_capacity(32);
    let mut n = Scanned { all: 0, user: 0 };
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        path.clear();
        path.push_str("/proc/");
        path.push_str(pid);
        path.push_str("/status");
        // A process that ended meanwhile has no status: not counted.
        let Some(status) = read_into(&path, &mut buf) else {
            continue;
        };
        // A zombie shows 0 threads and still holds its task.
        let threads = status_field(status, b"Threads:").unwrap_or(1).max(1);
        n.all = n.all.saturating_add(threads);
        if status_field(status, b"Uid:") == Some(u64::from(uid)) {
            n.user = n.user.saturating_add(threads);
        }
    }
    Some(n)
}

/// The inode of the initial pid namespace (`PROC_PID_INIT_INO`).
const INIT_PID_NS_INO: u64 = 0xEFFF_FFFC;

/// Whether this process is in a pid namespace other than the initial one
/// (`false` when `/proc` cannot tell): then `/proc` shows that
/// namespace's tasks, and `kernel.pid_max` is its own (Linux 6.14+).
pub(super) fn child_pid_ns() -> bool {
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() != INIT_PID_NS_INO)
}

/// The soft limit of `resource` (`None`: unlimited, or unreadable).
pub(super) fn rlimit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable rlimit; getrlimit only writes it.
    if unsafe { libc::getrlimit(resource, &mut rl) } != 0 || rl.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(rl.rlim_cur)
}

/// The real uid of this process (the user `RLIMIT_NPROC` counts for).
pub(super) fn real_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// This process's address space now, bytes (`/proc/self/statm`'s size).
pub(super) fn address_space() -> Option<u64> {
    let mut buf = [0u8; 128];
    let pages = leading_u64(read_into("/proc/self/statm", &mut buf)?)?;
    pages.checked_mul(page_size())
}

/// The page size, bytes (4096 if it cannot be read).
pub(super) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096)
}

/// `RLIMIT_DATA`'s soft limit, or its hard one when the soft one is 0
/// (`may_expand_vm`'s allowance); `None`: unlimited.
pub(super) fn rlimit_data() -> Option<u64> {
    match rlimit(libc::RLIMIT_DATA) {
        Some(0) => rlimit_max(libc::RLIMIT_DATA),
        soft => soft,
    }
}

/// The hard limit of `resource` (`None`: unlimited, or unreadable).
pub(super) fn rlimit_max(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable rlimit; getrlimit only writes it.
    if unsafe { libc::getrlimit(resource, &mut rl) } != 0 || rl.rlim_max == libc::RLIM_INFINITY {
        return None;
    }
    Some(rl.rlim_max)
}

/// A `kB` field of `/proc/self/status` or `/proc/meminfo` (`VmData:`,
/// `CommitLimit:`), in bytes, from a text read whole.
fn kb_field(text: &[u8], key: &[u8]) -> Option<u64> {
    status_field(text, key)?.checked_mul(1024)
}

/// A `kB` field of `/proc/self/status` now, bytes: `VmData:` (private
/// writable memory, what `RLIMIT_DATA` caps), `VmLck:` (locked memory,
/// `RLIMIT_MEMLOCK`).
pub(super) fn status_bytes(key: &[u8]) -> Option<u64> {
    // Large: the `Groups:` line before it can be long.
    let mut buf = [0u8; 16 * 1024];
    kb_field(read_into("/proc/self/status", &mut buf)?, key)
}

/// `vm.overcommit_memory` (2: strict accounting against `CommitLimit`).
pub(super) fn overcommit_memory() -> Option<u64> {
    read_u64("/proc/sys/vm/overcommit_memory")
}

/// `CommitLimit` and `Committed_AS` of `/proc/meminfo`, bytes.
pub(super) fn commit() -> (Option<u64>, Option<u64>) {
    let mut buf = [0u8; 8 * 1024];
    match read_into("/proc/meminfo", &mut buf) {
        Some(text) => (
            kb_field(text, b"CommitLimit:"),
            kb_field(text, b"Committed_AS:"),
        ),
        None => (None, None),
    }
}

/// `vm.admin_reserve_kbytes` and `vm.user_reserve_kbytes`, bytes: the
/// memory strict overcommit keeps back from a process.
pub(super) fn commit_reserves() -> (Option<u64>, Option<u64>) {
    let kb = |path| read_u64(path).and_then(|k| k.checked_mul(1024));
    (
        kb("/proc/sys/vm/admin_reserve_kbytes"),
        kb("/proc/sys/vm/user_reserve_kbytes"),
    )
}

/// The cgroups on this process's path that limit its tasks, its own first
/// and then each ancestor: in the cgroup v2 hierarchy and in the v1 `pids`
/// controller's, whichever are mounted. Any of them can be the one whose
/// `pids.max` a new task hits.
pub fn cgroup_pids() -> Vec<CgroupPids> {
    let mut found = Vec::new();
    let (Ok(groups), Ok(mounts)) = (
        fs::read_to_string("/proc/self/cgroup"),
        fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return found;
    };
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let v2 = id == "0" && controllers.is_empty();
        if !v2 && !controllers.split(',').any(|c| c == "pids") {
            continue;
        }
        if let Some((root, mount)) = cgroup_mount(&mounts, v2) {
            // The path is relative to the mount's root when the mount shows
            // only part of the hierarchy.
            let rel = match path.strip_prefix(root) {
                Some(rest) if root != "/" => rest,
                _ => path,
            };
            walk_up(mount, rel, &mut found);
        }
    }
    found
}

/// The root and mount point of the cgroup v2 hierarchy (`v2`) or of the
/// v1 hierarchy with the `pids` controller, from `/proc/self/mountinfo`.
fn cgroup_mount(mountinfo: &str, v2: bool) -> Option<(&str, &str)> {
    mountinfo.lines().find_map(|line| {
        let (mine, theirs) = line.split_once(" - ")?;
        let mut mine = mine.split(' ');
        let root = mine.nth(3)?;
        let point = mine.next()?;
        let mut theirs = theirs.split(' ');
        let fstype = theirs.next()?;
        let options = theirs.nth(1).unwrap_or("");
        let fits = if v2 {
            fstype == "cgroup2"
        } else {
            fstype == "cgroup" && options.split(',').any(|o| o == "pids")
        };
        fits.then_some((root, point))
    })
}

/// From `mount` + `rel` up to `mount`, each cgroup whose `pids.max` is a
/// number.
fn walk_up(mount: &str, rel: &str, found: &mut Vec<CgroupPids>) {
    let mut rel = rel.trim_end_matches('/');
    loop {
        let dir = format!("{}{rel}", mount.trim_end_matches('/'));
        if let Some(max) = read_u64(&format!("{dir}/pids.max")) {
            let current = read_u64(&format!("{dir}/pids.current"));
            found.push(CgroupPids { dir, max, current });
        }
        match rel.rfind('/') {
            Some(i) if !rel.is_empty() => rel = &rel[..i],
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_as_bytes() {
        assert_eq!(leading_u64(b" 42\n"), Some(42));
        assert_eq!(leading_u64(b"max\n"), None);
        assert_eq!(leading_u64(b""), None);
        assert_eq!(leading_u64(b"99999999999999999999999"), None);
        let status = b"Name:\t\xffodd\nUid:\t65534\t65534\t65534\t65534\nThreads:\t7\n";
        assert_eq!(status_field(status, b"Uid:"), Some(65534));
        assert_eq!(status_field(status, b"Threads:"), Some(7));
        assert_eq!(status_field(status, b"Gid:"), None);
    }

    #[test]
    fn the_counters_of_this_machine_are_read() {
        assert!(max_map_count().is_some_and(|m| m > 0));
        assert!(threads_max().is_some_and(|m| m > 0));
        assert!(pid_max().is_some_and(|m| m > 0));
        assert!(tasks_now().is_some_and(|n| n > 0));
        assert!(map_count().is_some_and(|n| n > 5));
        // This test's own threads are among them.
        assert!(user_tasks(real_uid()).is_some_and(|n| n >= 1));
        assert!(address_space().is_some_and(|b| b > 0));
        assert!(status_bytes(b"VmData:").is_some_and(|b| b > 0));
        assert!(status_bytes(b"VmLck:").is_some());
        let (limit, committed) = commit();
        assert!(limit.is_some_and(|b| b > 0) && committed.is_some_and(|b| b > 0));
        assert!(overcommit_memory().is_some_and(|m| m <= 2));
    }

    #[test]
    fn the_cgroup_mounts_are_found() {
        let info = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                    39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
                    41 31 0:38 /ns /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup_mount(info, false),
            Some(("/", "/sys/fs/cgroup/pids"))
        );
        assert_eq!(
            cgroup_mount(info, true),
            Some(("/ns", "/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup_mount("", true), None);
    }
}
