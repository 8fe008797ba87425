//! Counting calls of a kernel function: a kprobe, as a tracefs event.
//!
//! The futex work of thread exits is partly invisible to the syscall
//! tracepoints: every exiting thread with a clear-tid address (every
//! pthread) has the kernel write 0 there and wake one waiter on it
//! (`mm_release()` -> `do_futex(FUTEX_WAKE)`), with no system call. Every
//! futex(2) also enters `do_futex()`, so a counter on `do_futex` minus
//! `syscalls:sys_enter_futex` is the in-kernel wakes of exits.
//!
//! Why a tracefs kprobe event (`p:herd/do_futex do_futex` in
//! `kprobe_events`, as `perf probe` makes `probe:do_futex`) and not the
//! kprobe PMU (`perf_event_open` of type `kprobe`): the PMU creates and
//! registers a kprobe per descriptor, one per CPU, and unregistering each
//! waits for a grace period; a named event is one kprobe for every
//! counter, opened like any tracepoint (and kept registered across child
//! runs by `keeper.rs`). herd defines it once, as root, and leaves it
//! defined (a defined, unused kprobe event costs nothing; `echo
//! '-:herd/do_futex' >> kprobe_events` removes it).
//!
//! Optional everywhere: kernels without CONFIG_KPROBE_EVENTS (this
//! machine's) and locked-down kernels have none, and the note says so.

use std::io::Write as _;
use std::path::Path;

use super::unavailable::{io_error, Unavailable};

/// The tracefs group herd's kprobe events live in.
pub const GROUP: &str = "herd";

/// The `kprobe_events` line that defines `herd/<func>`.
pub fn definition(func: &str) -> String {
    format!("p:{GROUP}/{func} {func}")
}

/// The id of the kprobe event on `func` under `tracefs`, defining it
/// first (as root) when it does not exist yet.
pub fn event_id(tracefs: &Path, func: &str, root: bool) -> Result<u64, Unavailable> {
    let id_file = tracefs.join("events").join(GROUP).join(func).join("id");
    if let Some(id) = read_id(&id_file) {
        return Ok(id);
    }
    let defs = tracefs.join("kprobe_events");
    if !defs.exists() {
        return Err(Unavailable::absent(format!(
            "this kernel has no kprobe events ({} missing: CONFIG_KPROBES/CONFIG_KPROBE_EVENTS \
             off), so the in-kernel futex wakes of exits cannot be counted",
            defs.display()
        )));
    }
    if !root {
        return Err(Unavailable::fixable(
            format!("the kprobe event {GROUP}:{func} is not defined"),
            format!(
                "as root, once: echo '{}' >> {}",
                definition(func),
                defs.display()
            ),
        ));
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&defs)
        .map_err(|e| refused(&defs, &e))?;
    writeln!(f, "{}", definition(func)).map_err(|e| refused(&defs, &e))?;
    read_id(&id_file).ok_or_else(|| {
        Unavailable::absent(format!(
            "defined {} but {} did not appear",
            definition(func),
            id_file.display()
        ))
    })
}

fn read_id(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// A definition the kernel refused: locked down (EPERM), the function
/// not probeable or unknown (EINVAL, ENOENT). Nothing a user of herd can
/// change, so absent, with the errno.
fn refused(defs: &Path, e: &std::io::Error) -> Unavailable {
    Unavailable::absent(format!(
        "the kernel refused a kprobe event in {} ({}; a locked-down kernel forbids kprobes)",
        defs.display(),
        io_error(e)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defines_the_event_once_as_root_and_explains_otherwise() {
        let t = tempfile::tempdir().unwrap();
        // No kprobe_events at all (this machine): absent.
        let u = event_id(t.path(), "do_futex", true).unwrap_err();
        assert!(u.absent && u.reason.contains("no kprobe events"), "{u:?}");
        std::fs::write(t.path().join("kprobe_events"), "").unwrap();
        // Not root: the command to define it.
        let u = event_id(t.path(), "do_futex", false).unwrap_err();
        assert!(!u.absent, "{u:?}");
        assert!(
            u.fix.contains("echo 'p:herd/do_futex do_futex' >>"),
            "{u:?}"
        );
        // Root: appended (a real kernel then shows events/herd/do_futex).
        let u = event_id(t.path(), "do_futex", true).unwrap_err();
        assert!(u.reason.contains("did not appear"), "{u:?}");
        let defs = std::fs::read_to_string(t.path().join("kprobe_events")).unwrap();
        assert_eq!(defs, "p:herd/do_futex do_futex\n");
        // Defined: its id.
        let d = t.path().join("events/herd/do_futex");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("id"), "1234\n").unwrap();
        assert_eq!(event_id(t.path(), "do_futex", false).unwrap(), 1234);
    }
}
