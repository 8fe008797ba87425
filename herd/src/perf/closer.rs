//! Taking the counters' last close off the user-visible path.
//!
//! Closing the last perf counter of a tracepoint unregisters the kernel's
//! probe, and the kernel then waits for the probe's readers to finish
//! (`tracepoint_synchronize_unregister()`: an RCU grace period, more
//! with tasks-trace RCU): 20-40 ms per tracepoint here, about 0.3 s for
//! herd's eight, serially or from as many threads. Every herd process
//! paid that at its end, after its measurement, before its result was on
//! the screen; `compare` paid it once per child. It is the same lesson
//! herd measures in thread exits: take the heavy synchronize off the path
//! the user waits on.
//!
//! So at the end of a session herd hands the descriptors to a *closer*: a
//! fresh process of the herd executable (spawned with `posix_spawn`, so
//! the parent only waits for the `exec`), which inherits them, closes
//! everything else it inherited (so nobody waiting for a pipe's end waits
//! for it), closes the counters, and, when the counters watched herd's
//! own cgroup, moves itself out of it, waits for herd to exit and removes
//! the directory (so herd skips its own move back, a second cgroup
//! migration). herd closes its own copies, which costs nothing because
//! the closer still holds the counters, and exits at once.
//!
//! A closer does not race the next herd run: every session holds a shared
//! lock on a lock file for the life of its process ([`hold_session_lock`]),
//! and a closer takes it exclusively around each close. A run started
//! right after the last one (back to back, as a script or `perf-fixed-cost.sh
//! --gap-s 0` does) would otherwise find the previous closer inside a
//! grace period with the kernel's `event_mutex` held, and every
//! tracepoint counter it opens would wait for the rest of that closer's
//! work; with the lock it waits for one close at most, and the closer
//! finishes once no run measures (runs have priority: flock grants shared
//! locks while an exclusive one waits).
//!
//! When the close is cheap anyway it is done in place: in a child run of
//! `compare`/`sweep`/`-r`, whose parent keeps every tracepoint registered
//! ([`super::keeper`], announced in [`KEPT_ENV`]), and wherever the
//! deferral is not enabled (the library in tests: a spawned test binary
//! must never be mistaken for a closer). A child run without a keeping
//! parent closes in place too, so that no closer runs in the background of
//! the next measurement.
//!
//! The closer's variables ([`FDS_ENV`] and the others) are internal: a
//! request herd did not write (set by hand) is refused, exit 2 naming
//! the variable, before anything is closed ([`serve`]); those variables
//! without [`FDS_ENV`] are refused by `internal_env.rs`.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Environment of a closer: the descriptors to close (comma-separated).
pub const FDS_ENV: &str = "HERD_PERF_CLOSER_FDS";
/// Environment of a closer: herd's pid (to wait for its exit).
pub const PARENT_ENV: &str = "HERD_PERF_CLOSER_PARENT";
/// Environment of a closer: the cgroup directories to remove, innermost
/// first, one per line.
pub const CGROUP_ENV: &str = "HERD_PERF_CLOSER_CGROUP";
/// Environment of a closer: the cgroup to move itself to first.
pub const BACK_ENV: &str = "HERD_PERF_CLOSER_BACK";
/// Set by a parent that keeps every tracepoint registered for its child
/// runs ([`super::keeper`]): closing is cheap, close in place.
pub const KEPT_ENV: &str = "HERD_PERF_KEPT";

static ALLOWED: AtomicBool = AtomicBool::new(false);

/// Lets this executable defer closes to a closer. Only herd's `main` calls
/// it, after [`serve`] (the closer is this executable run again).
pub fn allow() {
    // Relaxed: a flag set once at start-up, before any session exists.
    ALLOWED.store(true, Ordering::Relaxed);
}

/// Where closes happen, and why there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// In this process: cheap (tracepoints kept registered by a parent).
    InPlaceKept,
    /// In this process: a child run without a keeping parent (no closer
    /// may run in the background of the next measurement), or deferral
    /// not enabled (the library outside herd's binary).
    InPlace,
    /// In a closer process after this one exits.
    Deferred,
}

/// The plan for this process, from explicit facts.
pub fn plan_for(allowed: bool, kept: bool, child: bool) -> Plan {
    match (allowed, kept, child) {
        (_, true, _) => Plan::InPlaceKept,
        (true, false, false) => Plan::Deferred,
        _ => Plan::InPlace,
    }
}

/// The plan for this process.
pub fn plan() -> Plan {
    plan_for(
        ALLOWED.load(Ordering::Relaxed),
        std::env::var_os(KEPT_ENV).is_some(),
        crate::runner::is_child(),
    )
}

/// What a closer must clean up besides the descriptors: the cgroup
/// directory and the cgroup to move out to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLeftover {
    /// `herd-perf-<pid>` (after its `counted` child, if any).
    pub dirs: Vec<PathBuf>,
    /// Where the closer moves itself before removing `dir`.
    pub back: PathBuf,
}

/// Closes `fds` where [`plan`] says; `cgroup` is cleaned up by the closer
/// when there is one (else the caller's `CgroupScope` drop does it).
/// Returns whether a closer took them (and the cgroup).
pub fn hand_off(fds: Vec<OwnedFd>, cgroup: Option<&CgroupLeftover>) -> bool {
    if fds.is_empty() || plan() != Plan::Deferred {
        drop(fds);
        return false;
    }
    match spawn(&fds, cgroup) {
        Ok(()) => {
            // The closer holds every counter now: these closes are cheap.
            drop(fds);
            true
        }
        Err(e) => {
            eprintln!("herd: could not start the perf closer ({e}); closing the counters here");
            drop(fds);
            false
        }
    }
}

fn spawn(fds: &[OwnedFd], cgroup: Option<&CgroupLeftover>) -> std::io::Result<()> {
    let exe = std::env::current_exe()?;
    // The closer inherits the counters: clear FD_CLOEXEC on each (the
    // perf crate opens them with it). No other thread of ours spawns
    // processes at this point of a run.
    for fd in fds {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )?;
    }
    let list: Vec<String> = fds.iter().map(|f| f.as_raw_fd().to_string()).collect();
    let mut cmd = Command::new(exe);
    cmd.env(FDS_ENV, list.join(","))
        .env(PARENT_ENV, std::process::id().to_string())
        .env_remove(KEPT_ENV)
        .env_remove(crate::runner::CHILD_ENV)
        .env_remove(CGROUP_ENV)
        .env_remove(BACK_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(c) = cgroup {
        let dirs: Vec<String> = c.dirs.iter().map(|d| d.display().to_string()).collect();
        cmd.env(CGROUP_ENV, dirs.join("\n")).env(BACK_ENV, &c.back);
    }
    // The child is not waited for: it outlives us, then init reaps it.
    cmd.spawn().map(drop)
}

/// When this process is a closer ([`FDS_ENV`] set), does the closer's work
/// and returns its exit code; `None` otherwise. herd's `main` calls it
/// first of all. The request is checked first ([`request`]): one herd did
/// not make (set by hand) is refused, exit 2 naming the variable, before
/// any descriptor is closed.
pub fn serve() -> Option<u8> {
    let fds = std::env::var_os(FDS_ENV)?;
    let Request {
        fds: keep,
        parent,
        cgroup,
        back,
    } = match request(&fds) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: {e}");
            return Some(crate::error::EXIT_USAGE);
        }
    };
    close_others(&keep);
    if let Some(back) = &back {
        // Out of herd's cgroup first, so that it can be removed.
        let _ = std::fs::write(back.join("cgroup.procs"), std::process::id().to_string());
    }
    let lock = open_lock();
    for fd in keep {
        // One close at a time, none while a run is measuring (module docs).
        let locked = lock
            .as_ref()
            .is_some_and(|l| lock_exclusive(l, Duration::from_secs(60)));
        // SAFETY: `fd` was handed to this process by herd for exactly this
        // (listed in FDS_ENV, inherited across exec); nothing else in this
        // process uses it.
        unsafe { libc::close(fd) };
        if let (true, Some(l)) = (locked, &lock) {
            // SAFETY: flock on a descriptor we own.
            unsafe { libc::flock(l.as_raw_fd(), libc::LOCK_UN) };
            // Let a session blocked on the lock take it before we try again.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    remove_when_gone(&cgroup, parent);
    Some(0)
}

/// What a closer was asked to do, as [`spawn`] wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Request {
    /// [`FDS_ENV`]: the counters to close.
    fds: Vec<i32>,
    /// [`PARENT_ENV`]: herd's pid.
    parent: u32,
    /// [`CGROUP_ENV`]: the directories to remove, innermost first.
    cgroup: Vec<PathBuf>,
    /// [`BACK_ENV`]: where to move first.
    back: Option<PathBuf>,
}

/// Why the closer's variables are refused when they are not what herd
/// writes: said with every refusal.
const INTERNAL: &str = "HERD_PERF_CLOSER_FDS, _PARENT, _CGROUP and _BACK are internal to herd, \
                        which sets them for the perf closer process it starts at the end of a \
                        run (herd/src/perf/closer.rs); set by hand they would make herd close \
                        descriptors instead of running the command: unset them";

/// Reads and checks the closer's request (`fds`: [`FDS_ENV`]'s value):
/// every descriptor a number from 3, open, and a perf counter (where
/// /proc says what it is); [`PARENT_ENV`] a process id; [`CGROUP_ENV`]
/// and [`BACK_ENV`] both or neither, absolute paths. The error names the
/// variable.
fn request(fds: &std::ffi::OsStr) -> Result<Request, String> {
    let bad = |var: &str, why: String| format!("invalid {var}: {why}. {INTERNAL}");
    let text = fds
        .to_str()
        .ok_or_else(|| bad(FDS_ENV, "not text".into()))?;
    let mut list = Vec::new();
    for item in text.split(',') {
        let fd: i32 = item
            .trim()
            .parse()
            .map_err(|_| bad(FDS_ENV, format!("`{item}` is not a descriptor number")))?;
        if fd < 3 {
            return Err(bad(
                FDS_ENV,
                format!("{fd} is standard input, output or error, never a perf counter"),
            ));
        }
        if let Some(why) = not_a_counter(fd) {
            return Err(bad(FDS_ENV, format!("descriptor {fd} {why}")));
        }
        list.push(fd);
    }
    let parent = match std::env::var(PARENT_ENV) {
        Ok(p) => p
            .parse::<u32>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| bad(PARENT_ENV, format!("`{p}` is not a process id")))?,
        Err(_) => {
            return Err(bad(
                PARENT_ENV,
                "not set (herd always sets it with HERD_PERF_CLOSER_FDS)".into(),
            ))
        }
    };
    let absolute = |var: &str, p: PathBuf| {
        if p.is_absolute() {
            Ok(p)
        } else {
            Err(bad(
                var,
                format!("`{}` is not an absolute path", p.display()),
            ))
        }
    };
    let (cgroup, back) = match (std::env::var_os(CGROUP_ENV), std::env::var_os(BACK_ENV)) {
        (None, None) => (Vec::new(), None),
        (Some(dirs), Some(back)) => {
            let dirs = dirs
                .to_str()
                .ok_or_else(|| bad(CGROUP_ENV, "not text".into()))?
                .lines()
                .map(|d| absolute(CGROUP_ENV, PathBuf::from(d)))
                .collect::<Result<Vec<_>, _>>()?;
            (dirs, Some(absolute(BACK_ENV, PathBuf::from(back))?))
        }
        (Some(_), None) => return Err(bad(CGROUP_ENV, format!("set without {BACK_ENV}"))),
        (None, Some(_)) => return Err(bad(BACK_ENV, format!("set without {CGROUP_ENV}"))),
    };
    Ok(Request {
        fds: list,
        parent,
        cgroup,
        back,
    })
}

/// Why descriptor `fd` is not one of the counters herd hands a closer:
/// not open, or (where /proc/self/fd says what it is) not a perf event.
fn not_a_counter(fd: i32) -> Option<String> {
    // SAFETY: F_GETFD only reads the descriptor's flags; any number is
    // safe to ask about (EBADF when it is not open).
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Some("is not open".into());
    }
    match std::fs::read_link(format!("/proc/self/fd/{fd}")) {
        Ok(target) if target != Path::new("anon_inode:[perf_event]") => {
            Some(format!("is {}, not a perf counter", target.display()))
        }
        // Without /proc, an open descriptor is all that can be checked.
        _ => None,
    }
}

/// The lock file shared by sessions and closers: `/run/lock` where it
/// exists (a tmpfs for exactly this), else `/tmp`; one per user.
fn lock_path() -> PathBuf {
    let dir = ["/run/lock", "/tmp"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("herd-perf-{}.lock", nix::unistd::geteuid()))
}

fn open_lock() -> Option<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        // Never follow a link planted in a shared directory.
        .custom_flags(libc::O_NOFOLLOW)
        .open(lock_path())
        .ok()
}

/// Takes the shared session lock for the rest of this process (a closer
/// closes nothing while any process holds it). Idempotent; a lock file
/// that cannot be opened only costs the protection.
pub fn hold_session_lock() {
    static HELD: OnceLock<Option<File>> = OnceLock::new();
    HELD.get_or_init(|| {
        let f = open_lock()?;
        // SAFETY: flock on a descriptor we own; it only changes the lock.
        (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) } == 0).then_some(f)
    });
}

/// Waits (at most `patience`) until no session holds the lock and takes
/// it exclusively; `false` when it could not (then close anyway).
fn lock_exclusive(f: &File, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        // SAFETY: flock on a descriptor we own; it only changes the lock.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Closes every inherited descriptor but 0-2 (`/dev/null`) and `keep`.
fn close_others(keep: &[i32]) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: an inherited descriptor this process never uses (the
            // directory's own descriptor may be among them, already closed
            // by then: EBADF is harmless).
            unsafe { libc::close(fd) };
        }
    }
}

/// Removes `dirs` (in order) once herd (`parent`) has exited and left
/// them empty.
fn remove_when_gone(dirs: &[PathBuf], parent: u32) {
    if dirs.is_empty() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    // Reparented once herd has exited.
    while nix::unistd::getppid().as_raw() as u32 == parent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    for dir in dirs {
        remove_dir(dir, deadline);
    }
}

fn remove_dir(dir: &Path, deadline: Instant) {
    while Instant::now() < deadline {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        // A parent keeps the tracepoints: in place, whoever we are.
        assert_eq!(plan_for(true, true, true), Plan::InPlaceKept);
        assert_eq!(plan_for(false, true, false), Plan::InPlaceKept);
        // A single run of herd: deferred.
        assert_eq!(plan_for(true, false, false), Plan::Deferred);
        // A child run with no keeping parent: in place, no background work.
        assert_eq!(plan_for(true, false, true), Plan::InPlace);
        // The library (tests): never spawns the current executable.
        assert_eq!(plan_for(false, false, false), Plan::InPlace);
        assert_eq!(plan(), Plan::InPlace, "not allowed in the test binary");
    }
}
