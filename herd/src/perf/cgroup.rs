//! A cgroup of this process's own, for process-scope counters, on cgroup
//! v2, v1 and hybrid hosts.
//!
//! Why a cgroup: inherited per-thread counters cost every thread creation
//! and exit a copy and a teardown of each counter (the kernel's
//! `inherit_event` under the parent counter's mutex: measured at +137%
//! system time on a storm). A per-CPU counter on a cgroup
//! (`PERF_FLAG_PID_CGROUP`, as `perf stat -G`) counts the same tasks with
//! no per-thread cost.
//!
//! Which hierarchy: the one the `perf_event` controller is bound to.
//! * cgroup v2 (unified): perf_event is an implicit controller there, on
//!   whenever it is not bound to a v1 hierarchy (this machine: v1
//!   hierarchies for cpu, memory, ... and a v2 one at
//!   `/sys/fs/cgroup/unified`, perf_event on neither v1 one, so v2).
//! * cgroup v1 or hybrid with perf_event mounted as a v1 hierarchy (e.g.
//!   `/sys/fs/cgroup/perf_event`, the usual systemd "hybrid" layout before
//!   v2 became the default): the v1 hierarchy, as `perf stat -G` finds it.
//!
//! Both are found through `/proc/self/mountinfo` (the mount point, and the
//! root of the mount within the hierarchy, which differs from `/` inside
//! containers) and `/proc/self/cgroup` (this process's path in each
//! hierarchy), both parsed by procfs: [`locate`], a pure function the tests
//! feed with faked files.
//!
//! The cgroup is created under the process's current one
//! (`<cgroup>/herd-perf-<pid>`), so every limit of the ancestors still
//! applies and it has no controller of its own. When herd's own helper
//! threads are running (`helpers.rs`: the progress bar's, the contention
//! drain), the counted cgroup is a threaded child, `herd-perf-<pid>/counted`
//! (cgroup v2 threaded mode): every thread of the process but the helpers
//! moves there, and threads created later inherit their creator's place,
//! so the workload is counted and the helpers, and indicatif's ticker
//! which a helper starts, are not. cgroup v1 has no threaded mode: there
//! the helpers are counted and a note says so. Dropping the
//! [`CgroupScope`] moves the process back and removes the directory;
//! [`CgroupScope::leave_to_closer`] leaves both to the process that closes
//! the counters after herd exits (see `closer.rs`), which saves herd a
//! second cgroup migration.

use std::io;
use std::path::{Path, PathBuf};

use procfs::process::MountInfos;
use procfs::{FromBufRead, ProcessCGroups};

use super::unavailable::{io_error, Unavailable};

/// Which cgroup version a hierarchy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// A v1 hierarchy with the perf_event controller.
    V1,
    /// The unified (v2) hierarchy.
    V2,
}

/// Where this process's perf_event cgroup is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hierarchy {
    /// v1 or v2.
    pub version: Version,
    /// Where the hierarchy is mounted.
    pub mount: PathBuf,
    /// This process's cgroup directory in it.
    pub own: PathBuf,
}

/// A cgroup file system in `/proc/self/mountinfo`.
#[derive(Debug)]
struct CgroupMount {
    /// The mount's root within the hierarchy.
    root: String,
    /// The mount point.
    point: String,
    fstype: String,
    /// Super-block options: the v1 controllers.
    options: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` is a space), which procfs
/// leaves in the root and the mount point.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v as char);
                i += 4;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// The cgroup mounts of a mountinfo text (procfs parses it).
fn cgroup_mounts(mountinfo: &str) -> Result<Vec<CgroupMount>, Unavailable> {
    let all = MountInfos::from_buf_read(mountinfo.as_bytes())
        .map_err(|e| Unavailable::fixable(format!("cannot parse /proc/self/mountinfo: {e}"), ""))?;
    Ok(all
        .into_iter()
        .filter(|m| m.fs_type.starts_with("cgroup"))
        .map(|m| CgroupMount {
            root: unescape(&m.root),
            point: unescape(&m.mount_point.to_string_lossy()),
            options: m.super_options.into_keys().collect(),
            fstype: m.fs_type,
        })
        .collect())
}

/// The command that mounts a v1 perf_event hierarchy.
pub(crate) const MOUNT_V1: &str =
    "mkdir -p /sys/fs/cgroup/perf_event && mount -t cgroup -o perf_event none /sys/fs/cgroup/perf_event";

/// Finds the hierarchy perf_event is bound to and this process's cgroup
/// in it, from the texts of `/proc/self/mountinfo` and `/proc/self/cgroup`.
pub(crate) fn locate(mountinfo: &str, self_cgroup: &str) -> Result<Hierarchy, Unavailable> {
    let mounts = cgroup_mounts(mountinfo)?;
    let groups = ProcessCGroups::from_buf_read(self_cgroup.as_bytes())
        .map_err(|e| Unavailable::fixable(format!("cannot parse /proc/self/cgroup: {e}"), ""))?;
    // v2 is hierarchy 0 with no controllers; a v1 hierarchy lists its own.
    let mut v1_path = None;
    let mut v2_path = None;
    for g in groups {
        if g.hierarchy == 0 && g.controllers.is_empty() {
            v2_path = Some(g.pathname);
        } else if g.controllers.iter().any(|c| c == "perf_event") {
            v1_path = Some((g.hierarchy, g.pathname));
        }
    }
    if let Some((id, path)) = v1_path {
        let Some(m) = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == "perf_event"))
        else {
            return Err(Unavailable::fixable(
                format!(
                    "the perf_event controller is bound to cgroup v1 hierarchy {id}, which is \
                     not mounted in this mount namespace"
                ),
                format!("as root: {MOUNT_V1}"),
            ));
        };
        return within(m, &path, Version::V1);
    }
    let Some(m) = mounts.iter().find(|m| m.fstype == "cgroup2") else {
        return Err(Unavailable::fixable(
            "no cgroup hierarchy has the perf_event controller: it is on cgroup v2, \
             which is not mounted, and no v1 perf_event hierarchy is",
            format!("as root: mount -t cgroup2 none /sys/fs/cgroup/unified, or: {MOUNT_V1}"),
        ));
    };
    let Some(path) = v2_path else {
        return Err(Unavailable::fixable(
            "this process has no cgroup v2 membership (/proc/self/cgroup has no 0:: line)",
            "",
        ));
    };
    within(m, &path, Version::V2)
}

/// This process's directory in mount `m`, from its path in the hierarchy.
fn within(m: &CgroupMount, path: &str, version: Version) -> Result<Hierarchy, Unavailable> {
    let root = m.root.trim_end_matches('/');
    let Some(rel) = path.strip_prefix(root) else {
        return Err(Unavailable::fixable(
            format!(
                "this process's cgroup {path} is outside the part of the hierarchy mounted \
                 at {} (mount root {})",
                m.point, m.root
            ),
            "mount the whole hierarchy, or use --perf-scope system",
        ));
    };
    let mount = PathBuf::from(&m.point);
    Ok(Hierarchy {
        version,
        own: mount.join(rel.trim_start_matches('/')),
        mount,
    })
}

/// The real kernel's hierarchy for this process.
pub(crate) fn locate_real() -> Result<Hierarchy, Unavailable> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map_err(|e| Unavailable::fixable(format!("cannot read {p}: {e}"), ""))
    };
    locate(&read("/proc/self/mountinfo")?, &read("/proc/self/cgroup")?)
}

/// This process in a cgroup of its own, for the life of the value.
#[derive(Debug)]
pub struct CgroupScope {
    /// The cgroup directory (`herd-perf-<pid>`).
    pub(crate) dir: PathBuf,
    /// The counted cgroup: `dir`, or its threaded child `counted` that
    /// holds every thread but the helpers.
    pub(crate) counted: PathBuf,
    /// The counted directory opened, for `perf_event_open`.
    pub(crate) file: std::fs::File,
    /// Helper threads kept out of the counted cgroup.
    pub(crate) helpers_excluded: usize,
    /// Why helper threads are counted after all (v1, or threaded mode
    /// refused), when there are any.
    pub(crate) helpers_counted: Option<String>,
    /// Where the hierarchy is mounted.
    pub(crate) mount: PathBuf,
    /// The cgroup the process came from (moved back there on drop).
    pub(crate) original: PathBuf,
    /// False once [`CgroupScope::leave_to_closer`] took the clean-up.
    owned: bool,
}

/// Why a cgroup operation failed, with a fix that fits the user.
fn failure(dir: &Path, what: &str, e: &io::Error, root: bool) -> Unavailable {
    let reason = format!("cgroup {}: {what}: {}", dir.display(), io_error(e));
    let fix = match (e.raw_os_error(), root) {
        (Some(libc::EACCES | libc::EPERM), false) => {
            "run as root, or delegate a cgroup to this user (systemd-run --user --scope -p Delegate=yes ...)"
        }
        (Some(libc::EACCES | libc::EPERM), true) => {
            "even root may not change this hierarchy here (a container's read-only or \
             delegated cgroup fs): run herd on the host, or use --perf-scope system"
        }
        (Some(libc::EROFS), _) => "the cgroup file system is mounted read-only (a container?): remount it rw, or use --perf-scope system",
        (Some(libc::EBUSY), _) => "the cgroup has controllers that forbid processes in inner nodes: use --perf-scope system",
        _ => "",
    };
    Unavailable::fixable(reason, fix)
}

impl CgroupScope {
    /// Creates the cgroup under this process's one in `h` and moves this
    /// process into it; with `helpers` (thread ids), every other thread
    /// moves on into a threaded child that the counters watch.
    pub(crate) fn enter(
        h: &Hierarchy,
        root: bool,
        helpers: &[i32],
    ) -> Result<CgroupScope, Unavailable> {
        remove_stale(&h.own);
        let pid = std::process::id();
        let dir = h.own.join(format!("herd-perf-{pid}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(failure(&dir, "cannot create", &e, root)),
        }
        if let Err(e) = std::fs::write(dir.join("cgroup.procs"), pid.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(failure(&dir, "cannot move this process in", &e, root));
        }
        let (counted, helpers_counted) = match (helpers.is_empty(), h.version) {
            (true, _) => (dir.clone(), None),
            (false, Version::V1) => (
                dir.clone(),
                Some("cgroup v1 has no threaded mode to keep them apart".to_string()),
            ),
            (false, Version::V2) => match split_helpers(&dir, helpers) {
                Ok(counted) => (counted, None),
                Err(why) => (dir.clone(), Some(why)),
            },
        };
        let file = match std::fs::File::open(&counted) {
            Ok(f) => f,
            Err(e) => {
                let _ = std::fs::write(h.own.join("cgroup.procs"), pid.to_string());
                let _ = std::fs::remove_dir(dir.join("counted"));
                let _ = std::fs::remove_dir(&dir);
                return Err(failure(&dir, "cannot open", &e, root));
            }
        };
        Ok(CgroupScope {
            helpers_excluded: if counted == dir { 0 } else { helpers.len() },
            helpers_counted,
            dir,
            counted,
            file,
            mount: h.mount.clone(),
            original: h.own.clone(),
            owned: true,
        })
    }

    /// The directories to remove, innermost first.
    pub(crate) fn dirs(&self) -> Vec<PathBuf> {
        if self.counted == self.dir {
            vec![self.dir.clone()]
        } else {
            vec![self.counted.clone(), self.dir.clone()]
        }
    }

    /// Leaves moving back and removing the directories to someone else
    /// (the closer process, which does it after this process has exited).
    pub(crate) fn leave_to_closer(mut self) -> (Vec<PathBuf>, PathBuf) {
        self.owned = false;
        (self.dirs(), self.original.clone())
    }
}

impl Drop for CgroupScope {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let _ = std::fs::write(
            self.original.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        // Exiting threads may linger a moment; rmdir fails (EBUSY) until
        // the cgroup is empty.
        for d in self.dirs() {
            for _ in 0..100 {
                if std::fs::remove_dir(&d).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// Makes `dir/counted` a threaded cgroup and moves every thread of this
/// process but `helpers` into it; on failure every thread is back in `dir`
/// and the reason is returned.
fn split_helpers(dir: &Path, helpers: &[i32]) -> Result<PathBuf, String> {
    let counted = dir.join("counted");
    let undo = |why: String| {
        for tid in crate::host::own_threads() {
            let _ = std::fs::write(dir.join("cgroup.threads"), tid.to_string());
        }
        let _ = std::fs::remove_dir(&counted);
        why
    };
    std::fs::create_dir(&counted)
        .or_else(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(|e| format!("cannot create {}: {}", counted.display(), io_error(&e)))?;
    std::fs::write(counted.join("cgroup.type"), "threaded")
        .map_err(|e| undo(format!("threaded mode refused: {}", io_error(&e))))?;
    for tid in crate::host::own_threads() {
        if helpers.contains(&tid) {
            continue;
        }
        if let Err(e) = std::fs::write(counted.join("cgroup.threads"), tid.to_string()) {
            // A thread that exited meanwhile is no reason to give up.
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(undo(format!(
                    "cannot move thread {tid} into {}: {}",
                    counted.display(),
                    io_error(&e)
                )));
            }
        }
    }
    Ok(counted)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine: v1 hierarchies for cpu, memory, ... (no perf_event)
    /// and v2 at /sys/fs/cgroup/unified.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
45 23 0:13 / /sys/kernel/tracing rw,relatime - tracefs nodev rw
";
    const HYBRID_CGROUP: &str = "\
9:name=systemd:/
4:memory:/process_api/5eca
1:cpu:/
0::/
";

    #[test]
    fn hybrid_without_a_v1_perf_event_uses_v2() {
        let h = locate(HYBRID_MOUNTINFO, HYBRID_CGROUP).unwrap();
        assert_eq!(h.version, Version::V2);
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(h.own, PathBuf::from("/sys/fs/cgroup/unified"));
    }

    #[test]
    fn a_v1_perf_event_hierarchy_is_found_through_mountinfo() {
        // Hybrid systemd layout: perf_event bound to v1 hierarchy 6,
        // combined with net_cls, mounted under a path with a space.
        let mountinfo = format!(
            "{HYBRID_MOUNTINFO}50 31 0:40 / /sys/fs/cgroup/perf\\040event rw - cgroup cgroup rw,net_cls,perf_event\n"
        );
        let cgroup = format!("6:net_cls,perf_event:/system.slice/job.service\n{HYBRID_CGROUP}");
        let h = locate(&mountinfo, &cgroup).unwrap();
        assert_eq!(h.version, Version::V1);
        assert_eq!(h.mount, PathBuf::from("/sys/fs/cgroup/perf event"));
        assert_eq!(
            h.own,
            PathBuf::from("/sys/fs/cgroup/perf event/system.slice/job.service")
        );
        // Bound to v1 but not mounted here: say so, with the mount command.
        let u = locate(HYBRID_MOUNTINFO, &cgroup).unwrap_err();
        assert!(u.reason.contains("bound to cgroup v1 hierarchy 6"), "{u:?}");
        assert!(u.fix.contains("mount -t cgroup -o perf_event"), "{u:?}");
    }

    #[test]
    fn v2_only_and_a_container_mount_root() {
        // Pure v2, the mount showing only the container's part of the tree.
        let mountinfo =
            "30 25 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let h = locate(mountinfo, "0::/docker/abc/app\n").unwrap();
        assert_eq!(h.own, PathBuf::from("/sys/fs/cgroup/app"));
        let u = locate(mountinfo, "0::/elsewhere\n").unwrap_err();
        assert!(u.reason.contains("outside the part"), "{u:?}");
        // Nothing mounted at all.
        let u = locate(
            "45 23 0:13 / /sys/kernel/tracing rw - tracefs nodev rw\n",
            "0::/\n",
        )
        .unwrap_err();
        assert!(u.reason.contains("not mounted"), "{u:?}");
    }

    #[test]
    fn failures_hint_what_fits_the_user() {
        let dir = Path::new("/sys/fs/cgroup/x");
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        assert!(failure(dir, "cannot create", &denied, false)
            .fix
            .starts_with("run as root"));
        let as_root = failure(dir, "cannot create", &denied, true);
        assert!(!as_root.fix.contains("run as root"), "{as_root:?}");
        assert!(as_root.reason.contains("EACCES") || as_root.reason.contains("denied"));
    }
}
