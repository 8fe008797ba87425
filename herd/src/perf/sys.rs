//! The kernel side of the perf counters, behind one seam.
//!
//! Everything [`super::Session`] asks of the kernel goes through the
//! [`Kernel`] trait: tracepoint ids and formats from tracefs, the
//! `perf_event_open` call itself (alone, or into a per-CPU group),
//! `perf_event_paranoid`, the effective uid and the process's own cgroup. [`RealKernel`] talks to Linux; tests
//! implement the trait to fake the answers ("permission denied with
//! paranoid 2", "tracefs not mounted", "no PMU in this VM"), the way
//! perf-event's own `hooks` module lets its tests fake system calls.
//! [`explain_open_error`] turns an errno into a reason a user can act on,
//! with a fix that fits that user: root is never told to run as root, and
//! a descriptor shortage is named as such (with the budget, see
//! [`super::budget`]), never as a permission problem.

use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use super::budget::FdBudget;
use super::cgroup::{self, CgroupScope};
pub use super::tracefs::MOUNT_TRACEFS;
pub(crate) use super::unavailable::errno_name;
pub use super::unavailable::Unavailable;
use perf_event::{Builder, Counter};
use perf_event_open_sys::ioctls;

/// The start of the command that lets unprivileged users open a counter
/// (followed by the level the counter needs).
pub const SYSCTL_PARANOID: &str = "sysctl kernel.perf_event_paranoid=";

/// Everything the perf module asks of the kernel. Implement it to fake
/// the kernel's answers in tests.
pub trait Kernel: Send + Sync {
    /// The tracefs directory that has an `events/` tree, if any.
    fn tracefs(&self) -> Option<PathBuf>;

    /// Why there is no tracefs (called when [`Kernel::tracefs`] is `None`).
    fn tracefs_missing(&self) -> Unavailable {
        super::tracefs::missing(self.is_root(), &[])
    }

    /// Opens one counter as `builder` describes (the `perf_event_open` call).
    fn open(&self, builder: &Builder) -> io::Result<Counter>;

    /// Opens one counter as `builder` describes into the group that
    /// `leader` leads (same CPU; see `group.rs`). The default refuses
    /// (`Unsupported`): the counter is then opened alone through
    /// [`Kernel::open`], disabled, so a fake that answers only `open` sees
    /// every counter herd opens, ungrouped.
    fn open_member(&self, builder: &Builder, leader: &mut Counter) -> io::Result<Counter> {
        let _ = (builder, leader);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this kernel interface opens no group members",
        ))
    }

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
            return Err(self.tracefs_missing());
        };
        let path = root.join("events").join(sys).join(name).join(file);
        std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Unavailable::absent(format!(
                "tracepoint {sys}:{name} does not exist in this kernel ({} not found)",
                path.display()
            )),
            io::ErrorKind::PermissionDenied if self.is_root() => Unavailable::fixable(
                format!(
                    "cannot read {}: permission denied even as root (kernel lockdown or an \
                     LSM policy may hide tracefs)",
                    path.display()
                ),
                "check /sys/kernel/security/lockdown and the LSM policy, or run on the host",
            ),
            io::ErrorKind::PermissionDenied => Unavailable::fixable(
                format!("cannot read {}: permission denied", path.display()),
                format!(
                    "run as root, or as root make tracefs readable: `{MOUNT_TRACEFS} -o remount,mode=755`"
                ),
            ),
            _ => Unavailable::fixable(format!("cannot read {}: {e}", path.display()), ""),
        })
    }

    /// The id of the kprobe event `herd:<func>` (see `kprobe.rs`),
    /// defined first as root when missing.
    fn kprobe_id(&self, func: &str) -> Result<u64, Unavailable> {
        let Some(root) = self.tracefs() else {
            return Err(self.tracefs_missing());
        };
        super::kprobe::event_id(&root, func, self.is_root())
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
    /// tracefs, mounted as perf does (once, as root) when missing.
    fn tracefs(&self) -> Option<PathBuf> {
        super::tracefs::real().path()
    }

    fn tracefs_missing(&self) -> Unavailable {
        match super::tracefs::real() {
            super::tracefs::Located::Missing(u) => u.clone(),
            _ => super::tracefs::missing(self.is_root(), &[]),
        }
    }

    fn open(&self, builder: &Builder) -> io::Result<Counter> {
        builder.build()
    }

    fn open_member(&self, builder: &Builder, leader: &mut Counter) -> io::Result<Counter> {
        builder.build_with_group(leader)
    }

    fn paranoid(&self) -> Option<i32> {
        read_paranoid(Path::new("/proc/sys/kernel/perf_event_paranoid"))
    }

    fn is_root(&self) -> bool {
        nix::unistd::geteuid().is_root()
    }

    fn process_cgroup(&self) -> Result<CgroupScope, Unavailable> {
        CgroupScope::enter(
            &cgroup::locate_real()?,
            self.is_root(),
            &super::helpers::tids(),
        )
    }
}

/// Who a counter watches.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// These threads, inherited by the threads they create (any CPU).
    Threads(&'a [i32]),
    /// Every task of this cgroup, one counter per CPU.
    Cgroup(&'a std::fs::File),
    /// Every task, one counter per CPU.
    AnyTask,
}

/// Parses a `perf_event_paranoid` file.
pub(crate) fn read_paranoid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
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

/// What [`explain_open_error`] knows about the attempt besides the errno.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OpenContext<'a> {
    /// A per-CPU counter that watches every task (or a cgroup's tasks).
    pub system: bool,
    /// `kernel.perf_event_paranoid`, when readable.
    pub paranoid: Option<i32>,
    /// Effective uid 0.
    pub root: bool,
    /// The session's descriptor budget (for EMFILE), when known.
    pub budget: Option<&'a FdBudget>,
}

impl<'a> OpenContext<'a> {
    /// The context of `kernel` for a counter of this reach.
    pub fn of(kernel: &dyn Kernel, system: bool, budget: Option<&'a FdBudget>) -> Self {
        OpenContext {
            system,
            paranoid: kernel.paranoid(),
            root: kernel.is_root(),
            budget,
        }
    }
}

/// Turns a failed `perf_event_open` into a reason and a fix that fits the
/// user it is shown to.
///
/// The paranoid levels are the kernel's (Documentation/admin-guide/perf-security.rst):
/// kernel events need `<= 1`, CPU-wide events `<= 0`, raw tracepoint
/// samples `<= -1`, unless the process has CAP_PERFMON (root has it). Root
/// refused anyway is told what else refuses (lockdown, seccomp, a
/// container, an LSM), never to run as root; EMFILE is named as a
/// descriptor shortage with the budget, never as a permission problem.
pub(crate) fn explain_open_error(
    err: &io::Error,
    kind: EventKind,
    ctx: &OpenContext<'_>,
) -> Unavailable {
    let errno = err.raw_os_error().unwrap_or(0);
    let name = errno_name(errno);
    match errno {
        libc::EACCES | libc::EPERM => {
            let need = match (kind, ctx.system) {
                (EventKind::RawSample, _) => -1,
                (_, true) => 0,
                (EventKind::Hardware | EventKind::Software, false) => 1,
                (EventKind::Tracepoint, false) => 1,
            };
            let level = ctx
                .paranoid
                .map_or("unreadable".to_string(), |p| p.to_string());
            if ctx.root {
                Unavailable::fixable(
                    format!(
                        "permission denied ({name}) even as root (kernel.perf_event_paranoid is \
                         {level}, which root's CAP_PERFMON overrides): something else forbids \
                         perf_event_open here"
                    ),
                    "check kernel lockdown (dmesg: \"Kernel is locked down\"), a seccomp filter \
                     or container policy (docker: --cap-add PERFMON / a seccomp profile allowing \
                     perf_event_open), or an LSM policy",
                )
            } else {
                Unavailable::fixable(
                    format!(
                        "permission denied ({name}): kernel.perf_event_paranoid is {level}, \
                         this counter needs <= {need} or CAP_PERFMON"
                    ),
                    format!("run as root, or: sudo {SYSCTL_PARANOID}{need}"),
                )
            }
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
        libc::EMFILE => super::budget::emfile(ctx.budget, ctx.root),
        libc::ENFILE => Unavailable::fixable(
            format!(
                "the system's file table is full ({name}: fs.file-max reached), not this \
                 process's limit"
            ),
            if ctx.root {
                "raise it: sysctl fs.file-max=<more>, or close other programs' files"
            } else {
                "ask root to raise fs.file-max (sysctl fs.file-max=<more>)"
            },
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

/// An ioctl's return value as a result (-1 and errno on failure).
fn ioctl_result(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Starts counting on `fd` (and its inherited children).
pub(crate) fn enable_fd(fd: RawFd) -> io::Result<()> {
    // SAFETY: `fd` is a perf event descriptor the caller owns and keeps
    // open for the call; PERF_EVENT_IOC_ENABLE takes an integer (flags, 0
    // here), no pointer, so no memory is read or written.
    ioctl_result(unsafe { ioctls::ENABLE(fd, 0) })
}

/// Stops counting on `fd` (and its inherited children).
pub(crate) fn disable_fd(fd: RawFd) -> io::Result<()> {
    // SAFETY: as in `enable_fd`; PERF_EVENT_IOC_DISABLE takes flags too.
    ioctl_result(unsafe { ioctls::DISABLE(fd, 0) })
}

/// Sends the samples of `fd` into the ring buffer of `target` (same CPU).
pub(crate) fn set_output(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: `fd` and `target` are perf event descriptors the caller owns
    // and keeps open for the call; PERF_EVENT_IOC_SET_OUTPUT takes the
    // target descriptor as an integer, no pointer.
    ioctl_result(unsafe { ioctls::SET_OUTPUT(fd, target) })
}

/// The calling thread's id.
pub(crate) fn gettid() -> i32 {
    nix::unistd::gettid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(system: bool, paranoid: i32, root: bool) -> OpenContext<'static> {
        OpenContext {
            system,
            paranoid: Some(paranoid),
            root,
            budget: None,
        }
    }

    #[test]
    fn permission_errors_name_paranoid_and_the_fix() {
        let err = io::Error::from_raw_os_error(libc::EACCES);
        let u = explain_open_error(&err, EventKind::Tracepoint, &ctx(false, 2, false));
        assert!(!u.absent);
        assert!(u.reason.contains("perf_event_paranoid is 2"), "{u:?}");
        assert!(u.reason.contains("<= 1"), "{u:?}");
        assert!(u.fix.contains(&format!("{SYSCTL_PARANOID}1")), "{u:?}");
        let sys = explain_open_error(&err, EventKind::Software, &ctx(true, 1, false));
        assert!(sys.reason.contains("<= 0"), "{sys:?}");
        assert!(sys.fix.contains(&format!("{SYSCTL_PARANOID}0")), "{sys:?}");
        let raw = explain_open_error(&err, EventKind::RawSample, &ctx(false, 0, false));
        assert!(raw.reason.contains("<= -1"), "{raw:?}");
    }

    #[test]
    fn root_is_never_told_to_run_as_root() {
        for errno in [libc::EACCES, libc::EPERM, libc::EMFILE, libc::ENFILE] {
            let err = io::Error::from_raw_os_error(errno);
            for kind in [
                EventKind::Tracepoint,
                EventKind::RawSample,
                EventKind::Software,
            ] {
                let u = explain_open_error(&err, kind, &ctx(true, 2, true));
                let text = format!("{} {}", u.reason, u.fix).to_lowercase();
                assert!(!text.contains("run as root"), "{errno}: {u:?}");
                assert!(!text.contains("sudo"), "{errno}: {u:?}");
            }
        }
        let u = explain_open_error(
            &io::Error::from_raw_os_error(libc::EPERM),
            EventKind::Tracepoint,
            &ctx(false, 2, true),
        );
        assert!(u.reason.contains("even as root"), "{u:?}");
        assert!(u.fix.contains("lockdown"), "{u:?}");
    }

    #[test]
    fn emfile_is_named_as_a_descriptor_shortage_not_paranoid() {
        let err = io::Error::from_raw_os_error(libc::EMFILE);
        for root in [false, true] {
            let u = explain_open_error(&err, EventKind::Tracepoint, &ctx(true, 2, root));
            assert!(u.reason.contains("EMFILE"), "{u:?}");
            assert!(
                !u.reason.contains("paranoid") && !u.fix.contains("paranoid"),
                "{u:?}"
            );
            assert!(
                u.fix.contains("ulimit -n") || u.fix.contains("ulimit -Hn"),
                "{u:?}"
            );
        }
    }

    #[test]
    fn missing_pmu_is_absent_not_fixable() {
        let err = io::Error::from_raw_os_error(libc::ENOENT);
        let u = explain_open_error(&err, EventKind::Hardware, &ctx(false, -1, true));
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
