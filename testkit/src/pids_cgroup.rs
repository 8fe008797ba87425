//! A pids cgroup made for one test and removed when dropped.
//!
//! Made in the cgroup v2 hierarchy where it offers the `pids` controller
//! (its children get `pids` once the root enables it in
//! `cgroup.subtree_control`), else in the v1 `pids` hierarchy, at their
//! usual places. Making one needs root; the caller decides what a test
//! does without it (skip loudly, or fail in CI).
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where cgroup hierarchies are mounted, tried in order: v2 (unified),
/// v2 beside v1 (hybrid), v1's `pids`.
const ROOTS: [&str; 3] = [
    "/sys/fs/cgroup",
    "/sys/fs/cgroup/unified",
    "/sys/fs/cgroup/pids",
];

/// A pids cgroup; its directory is removed when dropped.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    /// Makes `<leaf>` in the first hierarchy that offers `pids`. `Err`
    /// says, for each place tried, why none could be made here.
    pub fn create(leaf: &str) -> Result<PidsCgroup, String> {
        let mut why = Vec::new();
        for root in ROOTS {
            let root = Path::new(root);
            if let Ok(controllers) = std::fs::read_to_string(root.join("cgroup.controllers")) {
                if !controllers.split_whitespace().any(|c| c == "pids") {
                    why.push(format!(
                        "cgroup v2 at {} does not offer the pids controller",
                        root.display()
                    ));
                    continue;
                }
                if let Err(e) = std::fs::write(root.join("cgroup.subtree_control"), "+pids") {
                    why.push(format!("cannot enable pids below {}: {e}", root.display()));
                    continue;
                }
            } else if !root.join("tasks").exists() {
                why.push(format!("no cgroup hierarchy at {}", root.display()));
                continue;
            }
            let dir = root.join(leaf);
            match std::fs::create_dir(&dir) {
                Ok(()) if dir.join("pids.max").exists() => return Ok(PidsCgroup { dir }),
                Ok(()) => {
                    let _ = std::fs::remove_dir(&dir);
                    why.push(format!("{} has no pids.max", dir.display()));
                }
                Err(e) => why.push(format!("cannot make {}: {e}", dir.display())),
            }
        }
        Err(format!(
            "no pids cgroup can be made here: {}",
            why.join("; ")
        ))
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets `pids.max`: the tasks the cgroup may hold.
    pub fn set_max(&self, max: u64) -> Result<(), String> {
        self.write("pids.max", &max.to_string())
    }

    /// Moves the calling process into the cgroup and sets its `pids.max`
    /// to the tasks it has now (its threads), so that no further task
    /// fits. Returns that number. Meant for a forked test child.
    pub fn enter_full(&self) -> Result<u64, String> {
        self.write("cgroup.procs", &std::process::id().to_string())?;
        let current: u64 = std::fs::read_to_string(self.dir.join("pids.current"))
            .map_err(|e| format!("cannot read pids.current: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("pids.current: {e}"))?;
        self.set_max(current)?;
        Ok(current)
    }

    /// Makes `cmd`'s process move into the cgroup before it execs.
    pub fn enter_on_exec(&self, cmd: &mut Command) {
        let procs = CString::new(
            self.dir
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .expect("a cgroup path has no NUL");
        // SAFETY: the closure runs in the forked child before exec and only
        // makes system calls (open, write, close) on memory prepared
        // before the fork; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0": the writing process itself.
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if ok {
                    Ok(())
                } else {
                    Err(err)
                }
            });
        }
    }

    fn write(&self, file: &str, what: &str) -> Result<(), String> {
        std::fs::write(self.dir.join(file), what).map_err(|e| {
            format!(
                "cannot write {what} to {}: {e}",
                self.dir.join(file).display()
            )
        })
    }
}

impl Drop for PidsCgroup {
    /// Removes the cgroup once it is empty (its processes were reaped;
    /// the kernel lets go of their tasks a moment later).
    fn drop(&mut self) {
        let start = Instant::now();
        while std::fs::remove_dir(&self.dir).is_err() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
