//! Counters that cannot be opened: faked through the `Kernel` seam, so
//! these paths are tested on any machine (no root, no tracefs needed) -
//! except where a test also needs some real counters, which it says.

use std::io;
use std::path::PathBuf;

mod common;

use herd::perf::sys::{Kernel, RealKernel, MOUNT_TRACEFS, SYSCTL_PARANOID};
use herd::perf::{PerfArgs, Scope, Session};
use perf_event::{Builder, Counter};

/// A kernel that answers as configured: tracefs at `tracefs` (or none),
/// every `perf_event_open` failing with `errno` (or, when `errno` is
/// `None`, the real call except for hardware events failing with `hw_errno`).
struct Fake {
    tracefs: Option<PathBuf>,
    errno: Option<i32>,
    hw_errno: Option<i32>,
    paranoid: Option<i32>,
    root: bool,
}

impl Kernel for Fake {
    fn tracefs(&self) -> Option<PathBuf> {
        self.tracefs.clone()
    }
    fn open(&self, builder: &Builder) -> io::Result<Counter> {
        if let Some(e) = self.errno {
            return Err(io::Error::from_raw_os_error(e));
        }
        // PERF_TYPE_HARDWARE is 0.
        if let (Some(e), 0) = (self.hw_errno, builder.attrs().type_) {
            return Err(io::Error::from_raw_os_error(e));
        }
        builder.build()
    }
    fn paranoid(&self) -> Option<i32> {
        self.paranoid
    }
    fn is_root(&self) -> bool {
        self.root
    }
}

fn real_perf_permitted() -> Option<String> {
    let k = RealKernel;
    if k.is_root() || k.paranoid().is_some_and(|p| p <= 1) {
        None
    } else {
        Some(format!(
            "needs real software counters: not root and perf_event_paranoid={:?}",
            k.paranoid()
        ))
    }
}

#[test]
fn permission_denied_is_reported_with_paranoid_and_fix_and_the_run_completes() {
    let fake = Fake {
        tracefs: RealKernel.tracefs(),
        errno: Some(libc::EACCES),
        hw_errno: None,
        paranoid: Some(2),
        root: false,
    };
    for scope in [Scope::Process, Scope::System] {
        let args = PerfArgs {
            perf_scope: scope,
            ..Default::default()
        };
        let mut s =
            Session::open_with(&args, &[0, 1], &fake).expect("not fatal without --require-perf");
        assert!(!s.is_counting());
        s.enable().unwrap();
        s.disable().unwrap();
        let r = s.finish().unwrap();
        assert!(
            r.metrics(10).is_empty(),
            "no metric for a counter that did not count: {:?}",
            r.metrics(10)
        );
        let notes = r.notes();
        for c in &r.counters {
            assert!(
                notes.iter().any(|n| n.contains(&c.event)),
                "{} has a note: {notes:#?}",
                c.event
            );
        }
        let need = if scope == Scope::System {
            "<= 0"
        } else {
            "<= 1"
        };
        for n in &notes {
            if n.contains("tracefs is not mounted")
                || n.contains("via a cgroup")
                || n.contains("kprobe events")
            {
                continue; // no tracefs or kprobes on this machine: that reason comes first
            }
            assert!(n.contains("perf_event_paranoid is 2"), "{n}");
            assert!(n.contains(need), "{n}");
            assert!(n.contains(SYSCTL_PARANOID), "{n}");
        }
        let json = r.to_json();
        assert!(
            json["counters"][0]["unavailable"]["reason"].is_string(),
            "{json}"
        );
    }
}

#[test]
fn require_perf_makes_unavailable_counters_fatal() {
    let fake = Fake {
        tracefs: None,
        errno: Some(libc::EPERM),
        hw_errno: None,
        paranoid: Some(3),
        root: false,
    };
    let args = PerfArgs {
        require_perf: true,
        ..Default::default()
    };
    let err = Session::open_with(&args, &[], &fake).expect_err("--require-perf must fail");
    let msg = format!("{err:#}");
    assert!(msg.contains("--require-perf"), "{msg}");
    assert!(msg.contains(MOUNT_TRACEFS), "{msg}");
    assert!(msg.contains("perf_event_paranoid is 3"), "{msg}");
    assert_eq!(
        herd::error::exit_code_for(&err),
        herd::error::EXIT_RESOURCE,
        "a resource refusal before the run: exit 3"
    );
}

#[test]
fn missing_tracefs_names_the_mount_command_and_software_counters_still_count() {
    if let Some(why) = real_perf_permitted() {
        common::skip(&why);
        return;
    }
    let fake = Fake {
        tracefs: None,
        errno: None,
        hw_errno: None,
        paranoid: Some(-1),
        root: true,
    };
    let args = PerfArgs {
        contention: true,
        ..Default::default()
    };
    let mut s = Session::open_with(&args, &[], &fake).unwrap();
    s.enable().unwrap();
    std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(5)))
        .join()
        .unwrap();
    s.disable().unwrap();
    let r = s.finish().unwrap();
    for c in r.counters.iter().filter(|c| c.event.contains(':')) {
        let u = c
            .unavailable
            .as_ref()
            .unwrap_or_else(|| panic!("{} opened without tracefs", c.event));
        assert!(u.reason.contains("tracefs is not mounted"), "{u:?}");
        assert!(u.fix.contains(MOUNT_TRACEFS), "{u:?}");
    }
    assert!(
        r.value("context_switches").unwrap() > 0.0,
        "software counters are independent of tracefs"
    );
    assert!(r.contention.is_none());
    let u = r
        .contention_unavailable
        .as_ref()
        .expect("contention needs tracefs");
    assert!(u.fix.contains(MOUNT_TRACEFS));
    assert!(r
        .notes()
        .iter()
        .any(|n| n.contains("--contention profile unavailable")));
}

#[test]
fn absent_hardware_and_old_kernel_tracepoints_are_not_fatal_with_require_perf() {
    if let Some(why) = real_perf_permitted() {
        common::skip(&why);
        return;
    }
    let Some(real) = RealKernel.tracefs() else {
        common::skip("needs tracefs for the real tracepoint ids (mount -t tracefs nodev /sys/kernel/tracing)");
        return;
    };
    // A tracefs copy with only the ids of the classic events: like a
    // kernel before 6.7, without the futex2 syscalls.
    let dir = tempfile::tempdir().unwrap();
    for (sys, name) in [
        ("syscalls", "sys_enter_futex"),
        ("lock", "contention_begin"),
        ("sched", "sched_process_exit"),
        ("task", "task_newtask"),
    ] {
        let d = dir.path().join("events").join(sys).join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(
            real.join("events").join(sys).join(name).join("id"),
            d.join("id"),
        )
        .unwrap();
    }
    let fake = Fake {
        tracefs: Some(dir.path().to_path_buf()),
        errno: None,
        hw_errno: Some(libc::ENOENT),
        paranoid: Some(-1),
        root: true,
    };
    let args = PerfArgs {
        require_perf: true,
        ..Default::default()
    };
    let mut s =
        Session::open_with(&args, &[], &fake).expect("absent optional events are not fatal");
    // Counted for a moment (a counter never enabled is <not counted>).
    s.enable().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    s.disable().unwrap();
    let r = s.finish().unwrap();
    let reason = |ev: &str| {
        r.counters
            .iter()
            .find(|c| c.event == ev)
            .and_then(|c| c.unavailable.clone())
            .unwrap_or_else(|| panic!("{ev} should be unavailable"))
    };
    assert!(reason("cycles")
        .reason
        .contains("not supported by this CPU/VM"));
    assert!(reason("cycles").absent);
    assert!(reason("syscalls:sys_enter_futex_wait")
        .reason
        .contains("does not exist in this kernel"));
    assert!(r.value("sys_futex").is_some());
}

#[test]
fn root_refused_is_not_told_to_run_as_root_and_emfile_is_named() {
    for (errno, root, want) in [
        (libc::EPERM, true, "even as root"),
        (libc::EACCES, false, "perf_event_paranoid is 2"),
        (libc::EMFILE, true, "EMFILE"),
        (libc::EMFILE, false, "EMFILE"),
    ] {
        let fake = Fake {
            tracefs: RealKernel.tracefs(),
            errno: Some(errno),
            hw_errno: None,
            paranoid: Some(2),
            root,
        };
        let r = Session::open_with(&PerfArgs::default(), &[], &fake)
            .unwrap()
            .finish()
            .unwrap();
        let notes = r.notes().join("\n");
        assert!(notes.contains(want), "errno {errno} root {root}: {notes}");
        if root {
            assert!(!notes.contains("run as root"), "{notes}");
        }
        if errno == libc::EMFILE {
            assert!(
                !notes.contains("paranoid"),
                "EMFILE is not a paranoid problem: {notes}"
            );
            assert!(notes.contains("ulimit"), "{notes}");
        }
    }
}
