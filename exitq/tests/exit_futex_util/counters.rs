//! The per-thread perf counters: which tracepoints exist here (or why the
//! test cannot run), one thread's counter group, the ftrace filter on it,
//! and what it counted.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;

use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter};

use super::filter::{own_symbol, STD_THREAD_INFO_LOCK};

/// Where tracefs is looked for, in order.
pub const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The futex syscalls: the classic multiplexer, and the futex2 calls
/// (kernel 6.7+) that glibc may use in the future.
pub const FUTEX_CALLS: [&str; 5] = [
    "sys_enter_futex",
    "sys_enter_futex_wait",
    "sys_enter_futex_wake",
    "sys_enter_futex_waitv",
    "sys_enter_futex_requeue",
];

/// The tracepoint ids this test counts.
pub struct Tracepoints {
    /// `raw_syscalls:sys_enter`: every syscall (the group leader).
    pub syscalls: u64,
    /// `syscalls:sys_enter_sched_yield`: the test's own spin loops, left out
    /// of the syscall figures.
    pub sched_yield: u64,
    /// The futex tracepoints this kernel has: (name, id).
    pub futex: Vec<(&'static str, u64)>,
    /// The address of Rust std's exit-time lock, if the binary has symbols.
    pub std_lock: Option<u64>,
}

pub fn tracepoint_id(root: &std::path::Path, sys: &str, name: &str) -> io::Result<u64> {
    let path = root.join("events").join(sys).join(name).join("id");
    let text = std::fs::read_to_string(&path)?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: unparseable id {:?}", path.display(), text.trim()),
        )
    })
}

pub fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The tracepoints, or why the test cannot run here.
pub fn tracepoints() -> Result<Tracepoints, String> {
    let Some(root) = TRACEFS_ROOTS
        .iter()
        .map(PathBuf::from)
        .find(|r| r.join("events").is_dir())
    else {
        if let Some(denied) = TRACEFS_ROOTS.iter().find(|r| {
            std::fs::metadata(PathBuf::from(r).join("events"))
                .is_err_and(|e| e.kind() == io::ErrorKind::PermissionDenied)
        }) {
            return Err(format!(
                "tracefs at {denied} is not readable by this user (permission denied): \
                 run as root (CI does)"
            ));
        }
        return Err(format!(
            "tracefs is not mounted (no events/ under {}); as root: \
             mount -t tracefs nodev /sys/kernel/tracing",
            TRACEFS_ROOTS.join(" or ")
        ));
    };
    if !is_root() && !matches!(paranoid(), Some(p) if p <= 1) {
        return Err(format!(
            "not root and kernel.perf_event_paranoid is {:?}: per-thread kernel \
             tracepoint counters need <= 1 or CAP_PERFMON \
             (sudo sysctl kernel.perf_event_paranoid=1)",
            paranoid()
        ));
    }
    let unreadable = |what: &str, e: io::Error| {
        format!("tracepoint {what} unavailable in this kernel or tracefs ({e})")
    };
    let syscalls = tracepoint_id(&root, "raw_syscalls", "sys_enter")
        .map_err(|e| unreadable("raw_syscalls:sys_enter", e))?;
    let sched_yield = tracepoint_id(&root, "syscalls", "sys_enter_sched_yield")
        .map_err(|e| unreadable("syscalls:sys_enter_sched_yield", e))?;
    let mut futex = Vec::new();
    for name in FUTEX_CALLS {
        match tracepoint_id(&root, "syscalls", name) {
            Ok(id) => futex.push((name, id)),
            // futex2 calls are absent before kernel 6.7; the classic one must exist.
            Err(e) if name != "sys_enter_futex" && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(unreadable(&format!("syscalls:{name}"), e)),
        }
    }
    Ok(Tracepoints {
        syscalls,
        sched_yield,
        futex,
        std_lock: own_symbol(STD_THREAD_INFO_LOCK),
    })
}

/// One thread's counters: the group leader counts every syscall, the
/// members the futex calls.
pub struct Counters {
    pub syscalls: Counter,
    pub sched_yield: Counter,
    pub futex: Vec<Counter>,
    /// `sys_enter_futex` filtered to futex words outside the C runtime's
    /// own (see [`foreign_futex_filter`]).
    pub foreign: Counter,
}

impl Counters {
    /// Opens the group on thread `tid`, leader disabled, members enabled
    /// (they count while the leader does); `filter` selects the foreign
    /// futex calls.
    pub fn open(tp: &Tracepoints, tid: i32, filter: &str) -> io::Result<Counters> {
        let builder = |id: u64, enabled: bool| {
            let mut b = Builder::new(Tracepoint::with_id(id));
            // Tracepoints fire in the kernel: kernel events must be included.
            b.include_kernel()
                .exclude_user(false)
                .observe_pid(tid)
                .any_cpu()
                .enabled(enabled);
            b
        };
        let mut syscalls = builder(tp.syscalls, false).build()?;
        let sched_yield = builder(tp.sched_yield, true).build_with_group(&mut syscalls)?;
        let futex = tp
            .futex
            .iter()
            .map(|&(_, id)| builder(id, true).build_with_group(&mut syscalls))
            .collect::<io::Result<Vec<_>>>()?;
        // `sys_enter_futex` is always first in `tp.futex`.
        let foreign = builder(tp.futex[0].1, true).build_with_group(&mut syscalls)?;
        set_filter(foreign.as_raw_fd(), filter)?;
        Ok(Counters {
            syscalls,
            sched_yield,
            futex,
            foreign,
        })
    }

    pub fn read(&mut self) -> io::Result<Counts> {
        let syscalls = self.syscalls.read_full()?;
        let per_call = self
            .futex
            .iter_mut()
            .map(|c| c.read())
            .collect::<io::Result<Vec<_>>>()?;
        let yields = self.sched_yield.read()?;
        Ok(Counts {
            syscalls: syscalls.count() - yields,
            futex: per_call.iter().sum(),
            // futex2 calls are never the C runtime's (glibc 2.36 has none).
            foreign: self.foreign.read()? + per_call[1..].iter().sum::<u64>(),
            per_call,
            enabled_ns: syscalls.time_enabled().map_or(0, |d| d.as_nanos()),
        })
    }
}

/// `PERF_EVENT_IOC_SET_FILTER` (`_IOW('$', 6, char *)`).
pub const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;

/// Sets the ftrace filter of tracepoint counter `fd`.
pub fn set_filter(fd: RawFd, filter: &str) -> io::Result<()> {
    let filter = std::ffi::CString::new(filter).map_err(io::Error::other)?;
    // SAFETY:
    //   * `fd` is an open perf event owned by the caller.
    //   * the argument is a NUL-terminated string that outlives the call;
    //     the kernel only reads it.
    let rc = unsafe { libc::ioctl(fd, PERF_EVENT_IOC_SET_FILTER as _, filter.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What one thread's exit path made.
#[derive(Debug, Clone)]
pub struct Counts {
    /// Every syscall but `sched_yield` (the test's own spins).
    pub syscalls: u64,
    pub futex: u64,
    /// Futex calls on words that are not the C runtime's own.
    pub foreign: u64,
    pub per_call: Vec<u64>,
    pub enabled_ns: u128,
}
