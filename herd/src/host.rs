//! Host facts and limits (what `herd env` prints), read through procfs
//! where it has them; CPU lists and masks are `cpus.rs` (re-exported here).
//!
//! [`HostFacts::read`] gathers what decides whether a storm can run: the
//! online CPUs, NUMA nodes, kernel, the thread limits (`kernel.threads-max`,
//! `kernel.pid_max`, `vm.max_map_count`, the cgroup's `pids.max`,
//! `RLIMIT_NPROC`, `RLIMIT_STACK`, `RLIMIT_AS`, `RLIMIT_DATA`) and whether perf counters
//! and tracefs are usable. A fact that cannot be read is `None` and shown
//! as "unknown", never guessed. `herd env` prints them
//! ([`crate::scenario::env`]).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod cpus;
pub(crate) mod futex_hash;
pub(crate) mod numa;

pub use cpus::online_cpus;
pub(crate) use cpus::{allowed_cpus, current_cpu, format_cpu_list, parse_cpu_list_for, CpuMask};

/// A soft and hard resource limit; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rlimit {
    /// The limit that applies now (`None`: unlimited).
    pub soft: Option<u64>,
    /// The ceiling an unprivileged process may raise `soft` to.
    pub hard: Option<u64>,
}

impl Rlimit {
    /// Reads `resource` with getrlimit(2).
    pub fn read(resource: libc::__rlimit_resource_t) -> Option<Rlimit> {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `rl` is a valid, writable rlimit; getrlimit only writes it.
        if unsafe { libc::getrlimit(resource, &mut rl) } != 0 {
            return None;
        }
        let conv = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
        Some(Rlimit {
            soft: conv(rl.rlim_cur),
            hard: conv(rl.rlim_max),
        })
    }

    fn show(&self, unit: impl Fn(u64) -> String) -> String {
        let one = |v: Option<u64>| v.map(&unit).unwrap_or_else(|| "unlimited".into());
        format!("{} (hard {})", one(self.soft), one(self.hard))
    }
}

/// One NUMA node and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaNode {
    /// Node id (`/sys/devices/system/node/nodeN`).
    pub id: usize,
    /// Its CPUs.
    pub cpus: Vec<usize>,
}

/// The cgroup task limit of this process, when there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CgroupPids {
    /// The cgroup's directory (e.g. `/sys/fs/cgroup/user.slice`).
    pub path: String,
    /// `pids.max` (`None`: "max", unlimited).
    pub max: Option<u64>,
    /// `pids.current` when read.
    pub current: Option<u64>,
}

/// Facts about the machine and this process's limits.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostFacts {
    /// Host name.
    pub hostname: String,
    /// Kernel release and version (`uname -rv`).
    pub kernel: String,
    /// Machine architecture (`uname -m`).
    pub arch: String,
    /// Online CPUs (`/sys/devices/system/cpu/online`).
    pub online_cpus: Vec<usize>,
    /// CPUs this process may run on (its affinity mask).
    pub allowed_cpus: Vec<usize>,
    /// NUMA nodes with their CPUs (empty when the kernel shows none).
    pub numa_nodes: Vec<NumaNode>,
    /// Total memory in bytes.
    pub mem_total_bytes: Option<u64>,
    /// `kernel.threads-max`: tasks the whole system may have.
    pub threads_max: Option<u64>,
    /// `kernel.pid_max`: the largest pid/tid, so also a task ceiling.
    pub pid_max: Option<u64>,
    /// `vm.max_map_count`: memory mappings one process may have. Each
    /// un-joined thread keeps two (stack and guard page).
    pub max_map_count: Option<u64>,
    /// Tasks on the system now (`/proc/loadavg`).
    pub tasks_now: Option<u64>,
    /// The cgroup `pids.max` that leaves this process the least room.
    pub cgroup_pids: Option<CgroupPids>,
    /// `RLIMIT_NPROC`: tasks this user may have (not enforced for root).
    pub rlimit_nproc: Option<Rlimit>,
    /// `RLIMIT_STACK`: glibc's default thread stack size is its soft value.
    pub rlimit_stack: Option<Rlimit>,
    /// `RLIMIT_AS`: address space; thread stacks count against it.
    pub rlimit_as: Option<Rlimit>,
    /// `RLIMIT_DATA`: private writable memory (`VmData`); thread stacks
    /// count against it too (Linux 4.7+), their guard pages do not.
    /// Absent from results written before it was recorded.
    #[serde(default)]
    pub rlimit_data: Option<Rlimit>,
    /// glibc's default thread stack size (`pthread_getattr_default_np`).
    pub default_thread_stack_bytes: Option<u64>,
    /// Page size in bytes.
    pub page_size: u64,
    /// `kernel.perf_event_paranoid`.
    pub perf_event_paranoid: Option<i64>,
    /// Whether a perf counter could be opened: herd tries one (a software
    /// task-clock counter on itself, kernel included) at startup.
    pub perf_usable: bool,
    /// Why the trial counter could not be opened, when it could not.
    pub perf_error: Option<String>,
    /// Where tracefs is mounted (`None`: not mounted, tracepoints unusable).
    pub tracefs: Option<String>,
    /// Whether tracepoint ids can be read from tracefs (e.g.
    /// `events/sched/sched_process_exit/id`), as perf tracepoints need.
    pub tracepoints_usable: bool,
    /// Effective uid is 0.
    pub root: bool,
    /// glibc version (`gnu_get_libc_version`).
    pub libc: String,
    /// Whether tracefs offers kprobe events (`kprobe_events`), which herd
    /// needs to count the in-kernel futex wakes of exits (`perf/kprobe.rs`).
    #[serde(default)]
    pub kprobe_events: bool,
    /// The futex hash this process uses (per-process tables, 6.16+).
    #[serde(default)]
    pub futex_hash: Option<futex_hash::FutexHash>,
}

fn read_trim(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_u64(path: impl AsRef<Path>) -> Option<u64> {
    read_trim(path)?.parse().ok()
}

extern "C" {
    fn gnu_get_libc_version() -> *const libc::c_char;
    fn pthread_getattr_default_np(attr: *mut libc::pthread_attr_t) -> libc::c_int;
}

/// Where tracefs is looked for, in order: the tracefs mount point, then
/// the legacy location under debugfs (perf's order; mounting is
/// `perf::tracefs`'s business, host facts only look).
pub(crate) const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The command that mounts tracefs where herd looks first.
pub const MOUNT_TRACEFS: &str = "mount -t tracefs nodev /sys/kernel/tracing";

/// Where tracefs is mounted now (an `events/` directory under one of
/// [`TRACEFS_ROOTS`]), without mounting anything.
pub(crate) fn tracefs_mounted() -> Option<PathBuf> {
    TRACEFS_ROOTS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

/// glibc's default stack size for new threads (what `pthread_create` with
/// default attributes maps), read with `pthread_getattr_default_np`.
pub(crate) fn default_thread_stack() -> Option<u64> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: pthread_getattr_default_np initialises `attr` on success
    // (returns 0); we only read it then, and destroy it after.
    unsafe {
        if pthread_getattr_default_np(attr.as_mut_ptr()) != 0 {
            return None;
        }
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstacksize(attr.as_ptr(), &mut size);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        (rc == 0).then_some(size as u64)
    }
}

impl HostFacts {
    /// Reads every fact; unreadable ones are `None`.
    pub fn read() -> HostFacts {
        let uts = nix::sys::utsname::uname().ok();
        let s = |f: &dyn Fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
            uts.as_ref()
                .map(|u| f(u).to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let kernel = format!("{} {}", s(&|u| u.release()), s(&|u| u.version()));
        let online_cpus = online_cpus();
        let allowed_cpus = allowed_cpus().unwrap_or_else(|| online_cpus.clone());
        let paranoid =
            read_trim("/proc/sys/kernel/perf_event_paranoid").and_then(|v| v.parse().ok());
        let perf_error = perf_trial().err();
        let tracefs = tracefs_mounted().map(|p| p.display().to_string());
        let tracefs_ref = tracefs.clone();
        let tracepoints_usable = tracefs.as_ref().is_some_and(|t| {
            read_u64(Path::new(t).join("events/sched/sched_process_exit/id")).is_some()
        });
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
        let libc_version = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) }
            .to_string_lossy()
            .into_owned();
        HostFacts {
            hostname: s(&|u| u.nodename()),
            kernel: kernel.trim().to_string(),
            arch: s(&|u| u.machine()),
            online_cpus,
            allowed_cpus,
            numa_nodes: numa_nodes(),
            mem_total_bytes: mem_total(),
            threads_max: exitq::limits::threads_max(),
            pid_max: exitq::limits::pid_max(),
            max_map_count: exitq::limits::max_map_count(),
            tasks_now: tasks_now(),
            cgroup_pids: cgroup_pids(),
            rlimit_nproc: Rlimit::read(libc::RLIMIT_NPROC),
            rlimit_stack: Rlimit::read(libc::RLIMIT_STACK),
            rlimit_as: Rlimit::read(libc::RLIMIT_AS),
            rlimit_data: Rlimit::read(libc::RLIMIT_DATA),
            default_thread_stack_bytes: default_thread_stack(),
            page_size: if page > 0 { page as u64 } else { 4096 },
            perf_event_paranoid: paranoid,
            perf_usable: perf_error.is_none(),
            perf_error,
            tracefs,
            tracepoints_usable,
            root,
            libc: libc_version,
            kprobe_events: tracefs_ref
                .as_ref()
                .is_some_and(|t| Path::new(t).join("kprobe_events").exists()),
            futex_hash: Some(futex_hash::FutexHash::read()),
        }
    }

    /// The facts as JSON (for `RunResult::host`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The facts as an aligned two-column table.
    pub fn table(&self) -> String {
        let unknown = || "unknown".to_string();
        let num = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(unknown);
        let bytes = |v: u64| human_bytes(v);
        let mut rows: Vec<(&str, String)> = vec![
            ("host", format!("{} ({})", self.hostname, self.arch)),
            ("kernel", self.kernel.clone()),
            ("glibc", self.libc.clone()),
            (
                "online CPUs",
                format!(
                    "{} ({})",
                    format_cpu_list(&self.online_cpus),
                    self.online_cpus.len()
                ),
            ),
            (
                "allowed CPUs",
                format!(
                    "{} ({})",
                    format_cpu_list(&self.allowed_cpus),
                    self.allowed_cpus.len()
                ),
            ),
        ];
        let numa = if self.numa_nodes.is_empty() {
            "none reported".to_string()
        } else {
            self.numa_nodes
                .iter()
                .map(|n| format!("node{}: {}", n.id, format_cpu_list(&n.cpus)))
                .collect::<Vec<_>>()
                .join("; ")
        };
        rows.push(("NUMA nodes", numa));
        rows.push((
            "memory",
            self.mem_total_bytes.map(bytes).unwrap_or_else(unknown),
        ));
        rows.push(("kernel.threads-max", num(self.threads_max)));
        rows.push(("kernel.pid_max", num(self.pid_max)));
        rows.push(("vm.max_map_count", num(self.max_map_count)));
        rows.push(("tasks now", num(self.tasks_now)));
        rows.push((
            "cgroup pids.max",
            match &self.cgroup_pids {
                None => "none".into(),
                Some(c) => format!(
                    "{} (current {}, {})",
                    c.max.map(|v| v.to_string()).unwrap_or_else(|| "max".into()),
                    num(c.current),
                    c.path
                ),
            },
        ));
        let rl = |r: &Option<Rlimit>, f: &dyn Fn(u64) -> String| {
            r.map(|r| r.show(f)).unwrap_or_else(unknown)
        };
        let mut nproc = rl(&self.rlimit_nproc, &|v| v.to_string());
        if self.root {
            nproc.push_str(" [not enforced for root]");
        }
        rows.push(("RLIMIT_NPROC", nproc));
        rows.push(("RLIMIT_STACK", rl(&self.rlimit_stack, &bytes)));
        rows.push(("RLIMIT_AS", rl(&self.rlimit_as, &bytes)));
        rows.push(("RLIMIT_DATA", rl(&self.rlimit_data, &bytes)));
        rows.push((
            "default thread stack",
            self.default_thread_stack_bytes
                .map(bytes)
                .unwrap_or_else(unknown),
        ));
        rows.push((
            "perf_event_paranoid",
            self.perf_event_paranoid
                .map(|v| v.to_string())
                .unwrap_or_else(unknown),
        ));
        rows.push((
            "perf counters",
            if self.perf_usable {
                "usable".into()
            } else if self.root {
                format!(
                    "not usable even as root: {} (kernel lockdown, seccomp, a container or an LSM policy forbids perf_event_open)",
                    self.perf_error.as_deref().unwrap_or("unknown error")
                )
            } else {
                format!(
                    "not usable: {} (run as root, or: sudo sysctl kernel.perf_event_paranoid=1)",
                    self.perf_error.as_deref().unwrap_or("unknown error")
                )
            },
        ));
        rows.push((
            "tracefs",
            match &self.tracefs {
                None if self.root => format!(
                    "not mounted (herd mounts it when it first counts, as perf does: {})",
                    MOUNT_TRACEFS
                ),
                None => format!("not mounted (as root: {})", MOUNT_TRACEFS),
                Some(t) if self.tracepoints_usable => format!("{t} (tracepoints usable)"),
                Some(t) if self.root => {
                    format!("{t} (tracepoint ids not readable even as root: lockdown or an LSM?)")
                }
                Some(t) => format!("{t} (tracepoint ids not readable: run as root)"),
            },
        ));
        rows.push((
            "exit futex wakes",
            if self.kprobe_events {
                "countable (kprobe event herd:do_futex minus futex(2) calls)".into()
            } else {
                "not countable here: no kprobe events (CONFIG_KPROBE_EVENTS); one per exiting \
                 thread with a clear-tid address, i.e. every pthread"
                    .to_string()
            },
        ));
        rows.push((
            "futex hash",
            self.futex_hash
                .as_ref()
                .map(|h| h.describe())
                .unwrap_or_else(unknown),
        ));
        rows.push(("root", if self.root { "yes" } else { "no" }.into()));
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (k, v) in rows {
            let _ = writeln!(out, "{k:<width$}  {v}");
        }
        out
    }
}

/// Bytes as B, KiB, MiB, GiB, ... with one decimal (`8.0 MiB`), by bytesize.
pub(crate) fn human_bytes(v: u64) -> String {
    bytesize::ByteSize::b(v).display().iec().to_string()
}

fn numa_nodes() -> Vec<NumaNode> {
    numa::NodeMap::read().nodes().to_vec()
}

fn mem_total() -> Option<u64> {
    use procfs::Current as _;
    procfs::Meminfo::current().ok().map(|m| m.mem_total)
}

/// Tasks on the whole system now (`/proc/loadavg`: running/total).
pub(crate) use exitq::limits::tasks_now;

/// The cgroup `pids.max`/`pids.current` that leaves this process the least
/// room: of its own cgroup and its ancestors, in cgroup v2 and in the v1
/// `pids` controller, those with a limit (read by [`exitq::limits`]).
pub(crate) fn cgroup_pids() -> Option<CgroupPids> {
    exitq::limits::cgroup_pids()
        .into_iter()
        .min_by_key(|c| c.max.saturating_sub(c.current.unwrap_or(0)))
        .map(|c| CgroupPids {
            path: c.dir,
            max: Some(c.max),
            current: c.current,
        })
}

/// Opens (and drops) one software counter on this process, kernel
/// included, the way herd's perf sessions do.
fn perf_trial() -> std::result::Result<(), String> {
    use perf_event::events::Software;
    perf_event::Builder::new(Software::TASK_CLOCK)
        .observe_self()
        .any_cpu()
        .include_kernel()
        .build()
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Memory mappings of this process now (lines of `/proc/self/maps`),
/// streamed through a stack buffer: this runs right after `pthread_create`
/// failed at `vm.max_map_count` too.
pub(crate) use exitq::limits::map_count;

/// This process's address space now, bytes (`VmSize`: the first field
/// of `/proc/self/statm`, in pages), what `RLIMIT_AS` is checked against.
pub(crate) fn address_space_bytes() -> Option<u64> {
    let statm = fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages.saturating_mul(if page > 0 { page as u64 } else { 4096 }))
}

/// This process's private writable memory now, bytes (`VmData` of
/// `/proc/self/status`), what `RLIMIT_DATA` is checked against.
pub(crate) fn data_bytes() -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmData:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// The thread ids of this process now (`/proc/self/task`), sorted.
///
/// One reading of `/proc/self/task` can miss a thread that is alive all
/// along when an older thread exits while it is read. The kernel
/// (`proc_task_readdir` in fs/proc/base.c) ends a `getdents` call early
/// when the thread it just listed has exited, and the next call resumes by
/// position in the thread list, from which the exited thread is now gone:
/// the thread after it is skipped. (A test binary running thread-heavy
/// tests beside this one saw it.) Each miss needs its own exit at the wrong moment, so
/// the directory is read until two readings in a row agree (no thread
/// listed in the first exited before the second), or [`LISTINGS`] times
/// under unending churn; the result is every thread seen in any reading
/// that is still alive.
pub fn own_threads() -> Vec<i32> {
    let mut last = read_task_dir();
    let mut seen = last.clone();
    let mut changed = false;
    for _ in 1..LISTINGS {
        let next = read_task_dir();
        if next == last {
            break;
        }
        changed = true;
        seen.extend_from_slice(&next);
        last = next;
    }
    if changed {
        seen.sort_unstable();
        seen.dedup();
        seen.retain(|&tid| thread_alive(tid));
    }
    seen
}

/// How many times [`own_threads`] reads the directory at most.
const LISTINGS: usize = 16;

/// One reading of `/proc/self/task`, sorted (empty if it cannot be read).
fn read_task_dir() -> Vec<i32> {
    let mut tids: Vec<i32> = fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    tids.sort_unstable();
    tids
}

/// Whether thread `tid` of this process is alive: a lookup of its
/// directory, which (unlike a listing) finds it exactly.
pub(crate) fn thread_alive(tid: i32) -> bool {
    Path::new(&format!("/proc/self/task/{tid}")).exists()
}

#[cfg(test)]
impl NumaNode {
    /// Node `id` holding `cpus`.
    pub(crate) fn of(id: usize, cpus: impl IntoIterator<Item = usize>) -> NumaNode {
        NumaNode {
            id,
            cpus: cpus.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_binary_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(8 << 20), "8.0 MiB");
        assert_eq!(human_bytes(25_232_932_864), "23.5 GiB");
    }

    #[test]
    fn facts_are_read() {
        let f = HostFacts::read();
        assert!(!f.online_cpus.is_empty());
        assert!(f.threads_max.is_some());
        assert!(f.default_thread_stack_bytes.is_some());
        assert!(f.table().contains("vm.max_map_count"));
    }

    #[test]
    fn address_space_is_read_in_bytes() {
        // A process with a Rust runtime and a test harness maps megabytes.
        let vm = address_space_bytes().unwrap();
        assert!(vm > 1 << 20, "{vm}");
        assert_eq!(vm % 4096, 0, "{vm}");
    }

    #[test]
    fn data_is_read_in_bytes() {
        // The test harness's heap and its threads' stacks are data.
        let data = data_bytes().unwrap();
        assert!(data > 1 << 20, "{data}");
        assert_eq!(data % 1024, 0, "{data}");
    }

    #[test]
    fn map_count_counts_lines() {
        // Other tests in this process create and end threads (stack
        // mappings) concurrently, so compare only readings taken while the
        // map count held still: a whole-file read before and after
        // `map_count` that agree with each other.
        let whole = || {
            fs::read_to_string("/proc/self/maps")
                .unwrap()
                .lines()
                .count() as u64
        };
        let mut last = None;
        for _ in 0..200 {
            let before = whole();
            let n = map_count().unwrap();
            let after = whole();
            if before == after {
                // The reads may differ by a mapping or two (the read buffers).
                assert!(n.abs_diff(before) <= 4 && n > 5, "{n} vs {before}");
                return;
            }
            last = Some((before, n, after));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("the map count never held still for one reading: {last:?}");
    }

    /// A ring of 60 threads, the oldest ended and a new one started
    /// without pause, while this thread lists its process's threads:
    /// every ring thread alive from before a listing to after it must be in
    /// it. A single reading of `/proc/self/task` (what this function was)
    /// failed this in each of 4 runs, missing 2 to over 10 threads.
    #[test]
    fn own_threads_never_misses_a_thread_while_older_ones_exit() {
        use std::collections::{BTreeSet, VecDeque};
        use std::sync::mpsc::{channel, TryRecvError};
        use std::sync::{Arc, Mutex};

        let alive = Arc::new(Mutex::new(BTreeSet::new()));
        let (stop, stopped) = channel::<()>();
        let ring = {
            let alive = alive.clone();
            std::thread::spawn(move || {
                let mut ring = VecDeque::new();
                while stopped.try_recv() == Err(TryRecvError::Empty) {
                    let (tell, told) = channel();
                    let (end, ended) = channel::<()>();
                    let t = std::thread::spawn(move || {
                        tell.send(nix::unistd::gettid().as_raw()).unwrap();
                        let _ = ended.recv();
                    });
                    let tid = told.recv().unwrap();
                    alive.lock().unwrap().insert(tid);
                    ring.push_back((t, end, tid));
                    if ring.len() > 60 {
                        let (t, end, tid) = ring.pop_front().unwrap();
                        alive.lock().unwrap().remove(&tid);
                        drop(end);
                        t.join().unwrap();
                    }
                }
                for (t, end, _) in ring {
                    drop(end);
                    t.join().unwrap();
                }
            })
        };
        while alive.lock().unwrap().len() < 60 {
            std::thread::yield_now();
        }
        let mut missed: Vec<i32> = Vec::new();
        for _ in 0..60_000 {
            let before = alive.lock().unwrap().clone();
            let listed = own_threads();
            let after = alive.lock().unwrap().clone();
            missed.extend(
                before
                    .intersection(&after)
                    .filter(|t| listed.binary_search(t).is_err())
                    .copied(),
            );
        }
        drop(stop);
        ring.join().unwrap();
        assert!(missed.is_empty(), "live threads not listed: {missed:?}");
    }
}
