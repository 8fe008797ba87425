//! Whom `RLIMIT_NPROC` stops, as the kernel decides it (`copy_process`:
//! not the kernel's root, not a holder of `CAP_SYS_RESOURCE` or
//! `CAP_SYS_ADMIN`), and what `exitq::limits::diagnose` says there. Each
//! case is a forked child at an `RLIMIT_NPROC` of 1 that first checks the
//! kernel's answer (can it create a thread?) and then the diagnosis of an
//! `EAGAIN`. Needs root (to become `nobody` keeping a capability).
use std::time::Duration;

use exitq::limits::{diagnose, Limit};

mod skip_util;
mod thread_limit_util;
mod watch_util;
use thread_limit_util::NOBODY;
use watch_util::fork_child;

/// How long a child may take; it only bounds how long a failure takes to
/// show.
/// (60 s: under load a child or a reclaimer may not run for seconds.)
const PATIENCE: Duration = Duration::from_secs(60);

const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYS_RESOURCE: u32 = 24;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAP_V3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// In a forked child only: sets this thread's effective and permitted
/// capabilities to `caps` (bit numbers), nothing inheritable.
fn set_caps(caps: &[u32]) {
    let mut data = [CapData::default(); 2];
    for &cap in caps {
        let word = &mut data[(cap / 32) as usize];
        word.effective |= 1 << (cap % 32);
        word.permitted |= 1 << (cap % 32);
    }
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    // SAFETY: `hdr` and the two `data` words are the layout capset(2)
    // reads for version 3; both outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}

/// In a forked child only: `RLIMIT_NPROC` = 1, then, if `uid` is not 0,
/// becomes `uid` keeping its capabilities (`PR_SET_KEEPCAPS`), then holds
/// exactly `caps`.
fn become_with_caps(uid: u32, caps: &[u32]) {
    let rl = libc::rlimit {
        rlim_cur: 1,
        rlim_max: 1,
    };
    // SAFETY: plain system calls on valid arguments, in a forked child of
    // one thread.
    let ok = unsafe {
        libc::setrlimit(libc::RLIMIT_NPROC, &rl) == 0
            && (uid == 0
                || (libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0
                    && libc::setgroups(0, std::ptr::null()) == 0
                    && libc::setgid(uid) == 0
                    && libc::setuid(uid) == 0))
    };
    assert!(
        ok,
        "could not become {uid}: {}",
        std::io::Error::last_os_error()
    );
    set_caps(caps);
}

/// This process's permitted capabilities (`CapPrm`).
fn permitted() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapPrm:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// Whether the kernel lets this process create one more thread.
fn can_create_a_thread() -> bool {
    std::thread::Builder::new()
        .spawn(|| ())
        .map(|t| t.join().unwrap())
        .is_ok()
}

/// `nobody` at `RLIMIT_NPROC` 1 holding `CAP_SYS_RESOURCE` (or
/// `CAP_SYS_ADMIN`) creates threads: the kernel exempts it. The diagnosis
/// of an `EAGAIN` there said "RLIMIT_NPROC 1 reached: user 65534 has 1
/// task" (only uid 0 was taken as exempt); it now says the limit is not
/// enforced for it. Without the capability the kernel refuses, and the
/// limit is named.
#[test]
fn a_capability_that_lifts_rlimit_nproc_is_seen() {
    if !thread_limit_util::root_or_skip("to become nobody keeping a capability") {
        return;
    }
    let held: Vec<_> = [
        (CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ]
    .into_iter()
    .filter(|&(cap, name)| {
        let held = permitted().is_some_and(|p| p & (1 << cap) != 0);
        if !held {
            // The other one checks the same exemption.
            eprintln!("NOTE: this process cannot hold {name} (bounding set): not checked");
        }
        held
    })
    .collect();
    if held.is_empty() {
        skip_util::skip("holds neither CAP_SYS_RESOURCE nor CAP_SYS_ADMIN to keep");
        return;
    }
    for (cap, name) in held {
        let code = fork_child(PATIENCE, || {
            become_with_caps(NOBODY, &[cap]);
            assert!(can_create_a_thread(), "the kernel exempts {name}");
            let d = diagnose(libc::EAGAIN, None);
            assert_ne!(d.limit, Limit::RlimitNproc, "{d}");
            let said = format!("RLIMIT_NPROC not enforced for a holder of {name}");
            assert!(d.detail.contains(&said), "{d}");
            0
        });
        assert_eq!(code, 0, "{name}");
    }
    let code = fork_child(PATIENCE, || {
        // Kept across setuid, but not effective: the kernel asks the
        // effective set.
        become_with_caps(NOBODY, &[]);
        assert!(!can_create_a_thread(), "RLIMIT_NPROC stops nobody");
        let d = diagnose(libc::EAGAIN, None);
        assert_eq!(d.limit, Limit::RlimitNproc, "{d}");
        assert!(
            thread_limit_util::names_rlimit_nproc(&d.detail, 1, NOBODY),
            "{d}"
        );
        0
    });
    assert_eq!(code, 0, "no capability");
}

/// Root without any capability is still the kernel's root (`INIT_USER`):
/// not stopped, and not told it was.
#[test]
fn root_without_capabilities_is_still_exempt() {
    if !thread_limit_util::root_or_skip("to drop root's capabilities") {
        return;
    }
    let code = fork_child(PATIENCE, || {
        become_with_caps(0, &[]);
        assert!(can_create_a_thread(), "the kernel exempts uid 0");
        let d = diagnose(libc::EAGAIN, None);
        assert_ne!(d.limit, Limit::RlimitNproc, "{d}");
        assert!(
            d.detail.contains("RLIMIT_NPROC not enforced for root"),
            "{d}"
        );
        0
    });
    assert_eq!(code, 0);
}

/// The count `RLIMIT_NPROC` is checked against, for a process whose
/// `/proc/<pid>/status` is long (1500 supplementary groups put
/// `Threads:` past 10 KiB): its threads were counted as 1 (the status was
/// read into 4 KiB, and a missing `Threads:` counts one task); all 3 are
/// counted now.
#[test]
fn the_threads_of_a_process_with_many_groups_are_counted() {
    if !thread_limit_util::root_or_skip("to give a process many groups") {
        return;
    }
    /// A user no other process runs as.
    const UID: u32 = 54_321;
    let code = fork_child(PATIENCE, || {
        let groups: Vec<libc::gid_t> = (0..1500).map(|i| 100_000 + i).collect();
        // SAFETY: plain system calls on valid arguments, in a forked child
        // of one thread.
        let ok = unsafe {
            libc::setgroups(groups.len(), groups.as_ptr()) == 0
                && libc::setgid(UID) == 0
                && libc::setuid(UID) == 0
        };
        assert!(
            ok,
            "could not become {UID}: {}",
            std::io::Error::last_os_error()
        );
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let at = status.find("Threads:").unwrap();
        assert!(at > 8192, "Threads: at byte {at} only");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let rx = std::sync::Arc::clone(&rx);
                std::thread::spawn(move || {
                    let _ = rx.lock().unwrap().recv();
                })
            })
            .collect();
        let n = exitq::limits::user_tasks(UID);
        drop(tx);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(n, Some(3), "this process and its two threads");
        0
    });
    assert_eq!(code, 0);
}

/// uid 0 of a user namespace whose 0 maps to another user outside (a
/// rootless container's root) is not the kernel's root, and its
/// capabilities are the namespace's: `RLIMIT_NPROC` stops it. It was told
/// "RLIMIT_NPROC not enforced for root" (uid 0 was taken as exempt); the
/// limit is named now.
#[test]
fn root_of_a_child_user_namespace_is_stopped_and_told() {
    if !thread_limit_util::root_or_skip("to map a user namespace's root elsewhere") {
        return;
    }
    /// The user outside that the namespace's root is.
    const OUTSIDE: u32 = 100_000;
    let code = fork_child(PATIENCE, || {
        let rl = libc::rlimit {
            rlim_cur: 1,
            rlim_max: 1,
        };
        // As a rootless container starts: an unprivileged user (here
        // 100000) makes the namespace and maps its root to itself.
        // SAFETY: plain system calls on valid arguments, in a forked child
        // of one thread (unshare(CLONE_NEWUSER) needs one).
        let became = unsafe {
            libc::setrlimit(libc::RLIMIT_NPROC, &rl) == 0
                && libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(OUTSIDE) == 0
                && libc::setuid(OUTSIDE) == 0
                // The uid change made it undumpable: its /proc files
                // root's, its uid_map not writable by it.
                && libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) == 0
        };
        assert!(
            became,
            "become {OUTSIDE}: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: as above.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            return 2;
        }
        std::fs::write("/proc/self/uid_map", format!("0 {OUTSIDE} 1\n"))
            .unwrap_or_else(|e| panic!("uid_map: {e}"));
        // SAFETY: as above; uid 0 is mapped now.
        assert_eq!(unsafe { libc::setuid(0) }, 0, "setuid(0) in the namespace");
        assert!(
            !can_create_a_thread(),
            "RLIMIT_NPROC stops the namespace's root"
        );
        let d = diagnose(libc::EAGAIN, None);
        assert_eq!(d.limit, Limit::RlimitNproc, "{d}");
        assert!(
            d.detail.starts_with("RLIMIT_NPROC 1 reached: user 0 has "),
            "{d}"
        );
        0
    });
    if code == 2 {
        skip_util::skip("an unprivileged user cannot make a user namespace here (unshare refused)");
        return;
    }
    assert_eq!(code, 0);
}
