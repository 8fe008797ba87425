//! Finding tracefs, and mounting it the way `perf` does when it is missing.
//!
//! Tracepoint counters need the tracepoints' ids (and the contention
//! profile their `format` files), which only tracefs shows. Many machines
//! do not mount it at boot (this one does not); `perf stat -e
//! syscalls:sys_enter_futex` then mounts it itself (tools/lib/api/fs:
//! tracefs at `/sys/kernel/tracing`, and if that fails debugfs at
//! `/sys/kernel/debug`, whose `tracing/` directory is the legacy place).
//! herd does the same, once per process, and says so in one line on
//! stderr. As another user it mounts nothing and the note gives the exact
//! command to run as root.
//!
//! [`locate`] is the decision on explicit facts (is there an `events/`
//! directory, may we mount, what did the mount answer), so tests can play
//! every case; [`real`] is the process-wide answer on this machine.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::unavailable::{io_error, Unavailable};

pub use crate::host::MOUNT_TRACEFS;
pub(crate) use crate::host::TRACEFS_ROOTS;

/// What [`locate`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// Already mounted there.
    Found(PathBuf),
    /// Mounted by this call (the line to print says how).
    Mounted(PathBuf, String),
    /// Not mounted; why (with the mount errors when one was tried).
    Missing(Unavailable),
}

/// The mount operations [`locate`] needs (the real one is mount(2)).
pub trait Mounter {
    /// True when `dir/events` is a directory.
    fn has_events(&self, dir: &Path) -> bool;
    /// `mount(source, target, fstype, 0, NULL)`.
    fn mount(&self, source: &str, target: &str, fstype: &str) -> io::Result<()>;
}

/// Finds tracefs, or mounts it as perf does when `may_mount` (root):
/// tracefs at `/sys/kernel/tracing`, else debugfs at `/sys/kernel/debug`
/// (whose `tracing/` the kernel then provides).
pub fn locate(m: &dyn Mounter, may_mount: bool) -> Located {
    if let Some(p) = TRACEFS_ROOTS
        .iter()
        .map(PathBuf::from)
        .find(|p| m.has_events(p))
    {
        return Located::Found(p);
    }
    if !may_mount {
        return Located::Missing(missing(false, &[]));
    }
    let mut errors = Vec::new();
    let tracing = Path::new(TRACEFS_ROOTS[0]);
    match m.mount("nodev", TRACEFS_ROOTS[0], "tracefs") {
        Ok(()) if m.has_events(tracing) => {
            return Located::Mounted(
                tracing.to_path_buf(),
                format!(
                    "herd: tracefs was not mounted; mounted it at {} as perf does \
                     (`{MOUNT_TRACEFS}`): tracepoint counters need it",
                    TRACEFS_ROOTS[0]
                ),
            )
        }
        Ok(()) => errors.push(format!(
            "mounted tracefs at {} but it has no events/",
            TRACEFS_ROOTS[0]
        )),
        Err(e) => errors.push(format!(
            "mount tracefs at {}: {}",
            TRACEFS_ROOTS[0],
            io_error(&e)
        )),
    }
    let legacy = Path::new(TRACEFS_ROOTS[1]);
    match m.mount("nodev", "/sys/kernel/debug", "debugfs") {
        Ok(()) if m.has_events(legacy) => Located::Mounted(
            legacy.to_path_buf(),
            format!(
                "herd: tracefs was not mounted and could not be ({}); mounted debugfs at \
                 /sys/kernel/debug as perf does, tracepoints are read from {}",
                errors.join("; "),
                TRACEFS_ROOTS[1]
            ),
        ),
        Ok(()) => {
            errors.push(format!(
                "mounted debugfs but {} has no events/",
                TRACEFS_ROOTS[1]
            ));
            Located::Missing(missing(true, &errors))
        }
        Err(e) => {
            errors.push(format!(
                "mount debugfs at /sys/kernel/debug: {}",
                io_error(&e)
            ));
            Located::Missing(missing(true, &errors))
        }
    }
}

/// The explanation when tracefs is not available: for root, what the
/// mounts answered; for anyone else, the command to run as root.
pub fn missing(root: bool, mount_errors: &[String]) -> Unavailable {
    let reason = format!(
        "tracefs is not mounted (no events/ under {})",
        TRACEFS_ROOTS.join(" or ")
    );
    if root && mount_errors.is_empty() {
        Unavailable::fixable(reason, format!("mount it: {MOUNT_TRACEFS}"))
    } else if root {
        Unavailable::fixable(
            format!(
                "{reason}, and mounting it failed ({})",
                mount_errors.join("; ")
            ),
            "the kernel may lack CONFIG_TRACING, or this container forbids mounts: \
             mount tracefs from the host",
        )
    } else {
        Unavailable::fixable(reason, format!("as root: {MOUNT_TRACEFS}"))
    }
}

/// mount(2) and the real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct SysMounter;

impl Mounter for SysMounter {
    fn has_events(&self, dir: &Path) -> bool {
        dir.join("events").is_dir()
    }

    fn mount(&self, source: &str, target: &str, fstype: &str) -> io::Result<()> {
        nix::mount::mount(
            Some(source),
            target,
            Some(fstype),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(io::Error::from)
    }
}

/// This process's answer, found (and mounted, as root) once.
pub fn real() -> &'static Located {
    static LOCATED: OnceLock<Located> = OnceLock::new();
    LOCATED.get_or_init(|| {
        let located = locate(&SysMounter, nix::unistd::geteuid().is_root());
        if let Located::Mounted(_, line) = &located {
            eprintln!("{line}");
        }
        located
    })
}

impl Located {
    /// The directory, when there is one.
    pub fn path(&self) -> Option<PathBuf> {
        match self {
            Located::Found(p) | Located::Mounted(p, _) => Some(p.clone()),
            Located::Missing(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A file system where `events/` appears under the targets that were
    /// mounted successfully (`ok` lists the fstypes whose mount works).
    struct Fake {
        present: RefCell<Vec<PathBuf>>,
        ok: Vec<&'static str>,
        tried: RefCell<Vec<String>>,
    }

    impl Fake {
        fn new(present: &[&str], ok: &[&'static str]) -> Fake {
            Fake {
                present: RefCell::new(present.iter().map(PathBuf::from).collect()),
                ok: ok.to_vec(),
                tried: RefCell::new(Vec::new()),
            }
        }
    }

    impl Mounter for Fake {
        fn has_events(&self, dir: &Path) -> bool {
            self.present.borrow().iter().any(|p| p == dir)
        }
        fn mount(&self, _source: &str, target: &str, fstype: &str) -> io::Result<()> {
            self.tried.borrow_mut().push(format!("{fstype}@{target}"));
            if !self.ok.contains(&fstype) {
                return Err(io::Error::from_raw_os_error(libc::ENODEV));
            }
            let dir = match fstype {
                "debugfs" => PathBuf::from(target).join("tracing"),
                _ => PathBuf::from(target),
            };
            self.present.borrow_mut().push(dir);
            Ok(())
        }
    }

    #[test]
    fn found_where_mounted_without_mounting() {
        let f = Fake::new(&["/sys/kernel/debug/tracing"], &["tracefs"]);
        assert_eq!(
            locate(&f, true),
            Located::Found("/sys/kernel/debug/tracing".into())
        );
        assert!(f.tried.borrow().is_empty());
    }

    #[test]
    fn root_mounts_tracefs_first_and_says_so_in_one_line() {
        let f = Fake::new(&[], &["tracefs", "debugfs"]);
        match locate(&f, true) {
            Located::Mounted(p, line) => {
                assert_eq!(p, PathBuf::from("/sys/kernel/tracing"));
                assert!(line.contains("mounted it at /sys/kernel/tracing"), "{line}");
                assert!(!line.contains('\n'), "one line: {line}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(*f.tried.borrow(), ["tracefs@/sys/kernel/tracing"]);
    }

    #[test]
    fn root_falls_back_to_debugfs_as_perf_does() {
        let f = Fake::new(&[], &["debugfs"]);
        match locate(&f, true) {
            Located::Mounted(p, line) => {
                assert_eq!(p, PathBuf::from("/sys/kernel/debug/tracing"));
                assert!(line.contains("ENODEV"), "{line}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            *f.tried.borrow(),
            ["tracefs@/sys/kernel/tracing", "debugfs@/sys/kernel/debug"]
        );
    }

    #[test]
    fn hints_fit_the_user() {
        // Not root: nothing is mounted, the note gives the command for root.
        let f = Fake::new(&[], &["tracefs"]);
        let Located::Missing(u) = locate(&f, false) else {
            panic!()
        };
        assert!(f.tried.borrow().is_empty());
        assert_eq!(u.fix, format!("as root: {MOUNT_TRACEFS}"));
        // Root, and both mounts fail: no "as root" hint, the errors instead.
        let f = Fake::new(&[], &[]);
        let Located::Missing(u) = locate(&f, true) else {
            panic!()
        };
        assert!(u.reason.contains("mounting it failed"), "{u:?}");
        assert!(u.reason.contains("ENODEV"), "{u:?}");
        assert!(!u.fix.contains("as root"), "{u:?}");
    }
}
