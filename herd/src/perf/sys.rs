//! The kernel side of the perf counters, behind one seam.
//!
//! Everything [`super::Session`] asks of the kernel goes through the
//! [`Kernel`] trait: tracepoint ids and formats from tracefs, the
//! `perf_event_open` call itself, `perf_event_paranoid` and the effective
//! uid. [`RealKernel`] talks to Linux; tests implement the trait to fake
//! the answers ("permission denied with paranoid 2", "tracefs not
//! mounted", "no PMU in this VM"), the way perf-event's own `hooks` module
//! lets its tests fake system calls. [`explain_open_error`] turns an errno
//! into a reason a user can act on, with the fix.

use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use perf_event::{Builder, Counter};
use serde::{Deserialize, Serialize};

/// Where tracefs is looked for, in order: the tracefs mount point, then
/// the legacy location under debugfs.
pub const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The command that mounts tracefs where herd looks first.
pub const MOUNT_TRACEFS: &str = "mount -t tracefs nodev /sys/kernel/tracing";

/// The command that lets unprivileged users open every counter herd uses.
pub const SYSCTL_PARANOID: &str = "sysctl kernel.perf_event_paranoid=-1";

/// Why a counter could not be opened, and what would fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// What went wrong, in the user's terms (with the errno where there is one).
    pub reason: String,
    /// What to do about it; empty when nothing can be done on this machine.
    pub fix: String,
    /// True when the machine simply does not have the event (no PMU in a VM,
    /// a tracepoint this kernel version lacks). `--require-perf` does not
    /// fail for these: no setting could make them appear.
    pub absent: bool,
}

impl Unavailable {
    /// A counter the user can make available (permissions, tracefs, limits).
    pub fn fixable(reason: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            fix: fix.into(),
            absent: false,
        }
    }

    /// A counter this hardware or kernel does not have.
    pub fn absent(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            fix: String::new(),
            absent: true,
        }
    }
}

/// Everything the perf module asks of the kernel. Implement it to fake
/// the kernel's answers in tests.
pub trait Kernel: Send + Sync {
    /// The tracefs directory that has an `events/` tree, if any.
    fn tracefs(&self) -> Option<PathBuf>;

    /// Opens one counter as `builder` describes (the `perf_event_open` call).
    fn open(&self, builder: &Builder) -> io::Result<Counter>;

    /// `/proc/sys/kernel/perf_event_paranoid`, when readable.
    fn paranoid(&self) -> Option<i32>;

    /// True when running with effective uid 0.
    fn is_root(&self) -> bool;

    /// Moves this process into a cgroup of its own for process-scope
    /// counting (see [`CgroupScope`]). The default refuses, so fakes test
    /// the inherited-counter path.
    fn process_cgroup(&self) -> Result<CgroupScope, Unavailable> {
        Err(Unavailable::absent(
            "no cgroup support in this kernel interface",
        ))
    }

    /// Reads `events/<sys>/<name>/<file>` under [`Kernel::tracefs`].
    fn tracepoint_file(&self, sys: &str, name: &str, file: &str) -> Result<String, Unavailable> {
        let Some(root) = self.tracefs() else {
            return Err(tracefs_missing());
        };
        let path = root.join("events").join(sys).join(name).join(file);
        std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Unavailable::absent(format!(
                "tracepoint {sys}:{name} does not exist in this kernel ({} not found)",
                path.display()
            )),
            io::ErrorKind::PermissionDenied => Unavailable::fixable(
                format!("cannot read {}: permission denied", path.display()),
                format!(
                    "run as root, or make tracefs readable (e.g. `{MOUNT_TRACEFS} -o remount,mode=755`)"
                ),
            ),
            _ => Unavailable::fixable(format!("cannot read {}: {e}", path.display()), ""),
        })
    }

    /// The numeric id of tracepoint `sys:name`.
    fn tracepoint_id(&self, sys: &str, name: &str) -> Result<u64, Unavailable> {
        let text = self.tracepoint_file(sys, name, "id")?;
        text.trim().parse().map_err(|_| {
            Unavailable::fixable(
                format!("tracepoint {sys}:{name}: unparseable id {:?}", text.trim()),
                "",
            )
        })
    }
}

/// The real kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealKernel;

impl Kernel for RealKernel {
    fn tracefs(&self) -> Option<PathBuf> {
        TRACEFS_ROOTS
            .iter()
            .map(PathBuf::from)
            .find(|root| root.join("events").is_dir())
    }

    fn open(&self, builder: &Builder) -> io::Result<Counter> {
        builder.build()
    }

    fn paranoid(&self) -> Option<i32> {
        read_paranoid(Path::new("/proc/sys/kernel/perf_event_paranoid"))
    }

    fn is_root(&self) -> bool {
        nix::unistd::geteuid().is_root()
    }

    fn process_cgroup(&self) -> Result<CgroupScope, Unavailable> {
        CgroupScope::enter()
    }
}

/// Who a counter watches.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// These threads, inherited by the threads they create (any CPU).
    Threads(&'a [i32]),
    /// Every task of this cgroup, one counter per CPU.
    Cgroup(&'a std::fs::File),
    /// Every task, one counter per CPU.
    AnyTask,
}

/// This process in a cgroup (v2) of its own, for the life of the value.
///
/// Why: inherited counters cost every thread creation and exit a copy and
/// a teardown of each counter (the kernel's `inherit_event` under the
/// parent counter's mutex): measured at +137% system time on a storm. A
/// per-CPU counter on a cgroup (`PERF_FLAG_PID_CGROUP`, as `perf stat -G`)
/// counts the same tasks with no per-thread cost. The cgroup is created
/// under the process's current one (`<cgroup>/herd-perf-<pid>`), so every
/// limit of the ancestors still applies and it has no controller of its
/// own. Dropping it moves the process back and removes the directory.
#[derive(Debug)]
pub struct CgroupScope {
    /// The cgroup directory.
    pub dir: PathBuf,
    /// The directory opened, for `perf_event_open`.
    pub file: std::fs::File,
    /// Where the cgroup v2 hierarchy is mounted.
    pub mount: PathBuf,
    original: PathBuf,
}

impl CgroupScope {
    /// Creates the cgroup and moves this process into it.
    pub fn enter() -> Result<CgroupScope, Unavailable> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let Some(mount) = mounts
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 2 && f[2] == "cgroup2")
            .map(|f| PathBuf::from(f[1]))
        else {
            return Err(Unavailable::fixable(
                "no cgroup v2 hierarchy is mounted",
                "mount -t cgroup2 none /sys/fs/cgroup/unified",
            ));
        };
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
            return Err(Unavailable::fixable(
                "this process has no cgroup v2 membership",
                "",
            ));
        };
        let original = mount.join(rel.trim().trim_start_matches('/'));
        remove_stale(&original);
        let pid = std::process::id();
        let dir = original.join(format!("herd-perf-{pid}"));
        let fail = |what: &str, e: io::Error| {
            Unavailable::fixable(
                format!("cgroup {}: {what}: {e}", dir.display()),
                "run as root",
            )
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail("cannot create", e)),
        }
        if let Err(e) = std::fs::write(dir.join("cgroup.procs"), pid.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(fail("cannot move this process in", e));
        }
        let file = match std::fs::File::open(&dir) {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::write(original.join("cgroup.procs"), pid.to_string());
                let _ = std::fs::remove_dir(&dir);
                return Err(fail("cannot open", e));
            }
        };
        Ok(CgroupScope {
            dir,
            file,
            mount,
            original,
        })
    }
}

impl Drop for CgroupScope {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.original.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        // Exiting threads may linger a moment; rmdir fails (EBUSY) until
        // the cgroup is empty.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Removes `herd-perf-<pid>` cgroups left by herd processes that died.
fn remove_stale(parent: &Path) {
    let Ok(dir) = std::fs::read_dir(parent) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("herd-perf-")) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Parses a `perf_event_paranoid` file.
pub fn read_paranoid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The explanation when no tracefs is mounted.
pub fn tracefs_missing() -> Unavailable {
    Unavailable::fixable(
        format!(
            "tracefs is not mounted (no events/ under {})",
            TRACEFS_ROOTS.join(" or ")
        ),
        format!("as root: {MOUNT_TRACEFS}"),
    )
}

/// What kind of event failed to open, for [`explain_open_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A kernel tracepoint (counted).
    Tracepoint,
    /// A kernel tracepoint sampled with raw data (the contention profile).
    RawSample,
    /// A software event (context switches, faults, clocks).
    Software,
    /// A hardware PMU event (cycles, instructions).
    Hardware,
}

/// Turns a failed `perf_event_open` into a reason and a fix.
///
/// `system` is true for per-CPU counters that watch every task. The
/// paranoid levels are the kernel's (Documentation/admin-guide/perf-security.rst):
/// kernel events need `<= 1`, CPU-wide events `<= 0`, raw tracepoint
/// samples `<= -1`, unless the process has CAP_PERFMON (root has it).
pub fn explain_open_error(
    err: &io::Error,
    kind: EventKind,
    system: bool,
    paranoid: Option<i32>,
    root: bool,
) -> Unavailable {
    let errno = err.raw_os_error().unwrap_or(0);
    let name = errno_name(errno);
    match errno {
        libc::EACCES | libc::EPERM => {
            let need = match (kind, system) {
                (EventKind::RawSample, _) => -1,
                (_, true) => 0,
                (EventKind::Hardware | EventKind::Software, false) => 1,
                (EventKind::Tracepoint, false) => 1,
            };
            let level = paranoid.map_or("unreadable".to_string(), |p| p.to_string());
            let who = if root {
                " even as root (a seccomp filter, container or LSM policy may forbid perf_event_open)"
            } else {
                ""
            };
            Unavailable::fixable(
                format!(
                    "permission denied ({name}){who}: kernel.perf_event_paranoid is {level}, \
                     this counter needs <= {need} or CAP_PERFMON"
                ),
                format!("run as root, or: sudo {SYSCTL_PARANOID}"),
            )
        }
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV | libc::ENOSYS
            if kind == EventKind::Hardware =>
        {
            Unavailable::absent(format!(
                "not supported by this CPU/VM ({name}: no hardware PMU event exposed; \
                 a VM needs a virtual PMU, e.g. QEMU -cpu host / KVM vPMU)"
            ))
        }
        libc::ENOSYS => Unavailable::absent(format!(
            "perf_event_open is not available in this kernel ({name}: CONFIG_PERF_EVENTS off?)"
        )),
        libc::ENOENT | libc::ENODEV | libc::EOPNOTSUPP => {
            Unavailable::absent(format!("this kernel does not support the event ({name})"))
        }
        libc::EMFILE | libc::ENFILE => Unavailable::fixable(
            format!("out of file descriptors ({name}): one counter per CPU per event"),
            "raise the limit, e.g. `ulimit -n 65536`",
        ),
        libc::EBUSY => Unavailable::fixable(
            format!("the PMU is busy ({name}): another tool holds it exclusively"),
            "stop the other profiler",
        ),
        libc::E2BIG => Unavailable::absent(format!(
            "this kernel is too old for the requested attributes ({name})"
        )),
        libc::EINVAL if kind == EventKind::Hardware => Unavailable::absent(format!(
            "not supported by this CPU/VM ({name}: the PMU rejects the event)"
        )),
        _ => Unavailable::fixable(format!("perf_event_open failed: {err} ({name})"), ""),
    }
}

/// An errno's symbolic name, e.g. `EACCES`.
pub fn errno_name(errno: i32) -> String {
    if errno == 0 {
        return "no errno".into();
    }
    format!("{:?}", nix::errno::Errno::from_raw(errno))
}

/// `PERF_EVENT_IOC_ENABLE` (`_IO('$', 0)`).
const IOC_ENABLE: libc::c_ulong = 0x2400;
/// `PERF_EVENT_IOC_DISABLE` (`_IO('$', 1)`).
const IOC_DISABLE: libc::c_ulong = 0x2401;
/// `PERF_EVENT_IOC_SET_OUTPUT` (`_IO('$', 5)`).
const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;

fn ioctl(fd: RawFd, request: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY:
    //   * `fd` is a perf event file descriptor owned by the caller and open
    //     for the duration of the call.
    //   * the three requests used here take an integer argument (0 or a
    //     file descriptor), no pointer, so no memory is read or written.
    let rc = unsafe { libc::ioctl(fd, request as _, arg) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Starts counting on `fd` (and its inherited children).
pub fn enable_fd(fd: RawFd) -> io::Result<()> {
    ioctl(fd, IOC_ENABLE, 0)
}

/// Stops counting on `fd` (and its inherited children).
pub fn disable_fd(fd: RawFd) -> io::Result<()> {
    ioctl(fd, IOC_DISABLE, 0)
}

/// Sends the samples of `fd` into the ring buffer of `target` (same CPU).
pub fn set_output(fd: RawFd, target: RawFd) -> io::Result<()> {
    ioctl(fd, IOC_SET_OUTPUT, target as libc::c_ulong)
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_errors_name_paranoid_and_the_fix() {
        let err = io::Error::from_raw_os_error(libc::EACCES);
        let u = explain_open_error(&err, EventKind::Tracepoint, false, Some(2), false);
        assert!(!u.absent);
        assert!(u.reason.contains("perf_event_paranoid is 2"), "{u:?}");
        assert!(u.reason.contains("<= 1"), "{u:?}");
        assert!(u.fix.contains(SYSCTL_PARANOID), "{u:?}");
        let sys = explain_open_error(&err, EventKind::Software, true, Some(1), false);
        assert!(sys.reason.contains("<= 0"), "{sys:?}");
        let raw = explain_open_error(&err, EventKind::RawSample, false, Some(0), false);
        assert!(raw.reason.contains("<= -1"), "{raw:?}");
    }

    #[test]
    fn missing_pmu_is_absent_not_fixable() {
        let err = io::Error::from_raw_os_error(libc::ENOENT);
        let u = explain_open_error(&err, EventKind::Hardware, false, Some(-1), true);
        assert!(u.absent);
        assert!(u.reason.contains("not supported by this CPU/VM"), "{u:?}");
        assert!(u.reason.contains("ENOENT"), "{u:?}");
    }

    #[test]
    fn paranoid_file_parses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("perf_event_paranoid");
        std::fs::write(&p, "-1\n").unwrap();
        assert_eq!(read_paranoid(&p), Some(-1));
        assert_eq!(read_paranoid(&dir.path().join("missing")), None);
    }
}
