//! The diagnosis from readings set by hand: each limit named with its
//! numbers, the fallback listing them all, and the memo.

use super::*;

/// Readings with every limit unknown, so only the one a test sets can be
/// at its ceiling; a non-root user.
fn none() -> Readings {
    Readings {
        uid: 1000,
        ..Readings::default()
    }
}

fn diag(r: &Readings) -> (Limit, String) {
    let d = r.diagnose(libc::EAGAIN, Some(8 << 20));
    (d.limit, d.detail)
}

#[test]
fn each_limit_is_named_with_its_numbers() {
    let r = Readings {
        max_map_count: Some(65530),
        mappings: Some(65529),
        ..none()
    };
    assert_eq!(
        diag(&r),
        (
            Limit::MaxMapCount,
            "vm.max_map_count 65530 reached: 65529 mappings in this process".into()
        )
    );

    let r = Readings {
        rlimit_nproc: Some(7),
        user_tasks: Some(7),
        uid: 65534,
        ..none()
    };
    assert_eq!(
        diag(&r),
        (
            Limit::RlimitNproc,
            "RLIMIT_NPROC 7 reached: user 65534 has 7 tasks".into()
        )
    );
    // Root is not stopped by RLIMIT_NPROC.
    assert_eq!(diag(&Readings { uid: 0, ..r }).0, Limit::Memory);

    let cgroup = |max, current| CgroupPids {
        dir: "/sys/fs/cgroup/x".into(),
        max,
        current: Some(current),
    };
    let r = Readings {
        // The own cgroup has room; its parent is full.
        cgroups: vec![cgroup(100, 3), cgroup(20, 20)],
        ..none()
    };
    assert_eq!(
        diag(&r),
        (
            Limit::CgroupPidsMax,
            "cgroup /sys/fs/cgroup/x pids.max 20 reached (pids.current 20)".into()
        )
    );

    let r = Readings {
        threads_max: Some(500),
        tasks: Some(499),
        ..none()
    };
    assert_eq!(
        diag(&r),
        (
            Limit::ThreadsMax,
            "kernel.threads-max 500 reached: 499 tasks on the system".into()
        )
    );

    let r = Readings {
        pid_max: Some(32768),
        tasks: Some(32500),
        ..none()
    };
    assert_eq!(diag(&r).0, Limit::PidMax);

    let r = Readings {
        rlimit_as: Some(64 << 20),
        address_space: Some(60 << 20),
        ..none()
    };
    let (l, d) = diag(&r);
    assert_eq!(l, Limit::RlimitAs);
    assert!(
        d.starts_with("RLIMIT_AS 67108864 reached: 62914560 bytes"),
        "{d}"
    );
    // A stack given to the thread maps nothing.
    assert_eq!(r.diagnose(libc::EAGAIN, Some(0)).limit, Limit::Memory);
}

#[test]
fn with_no_limit_reached_every_limit_is_listed_with_its_count() {
    let r = Readings {
        max_map_count: Some(65530),
        mappings: Some(200),
        rlimit_nproc: Some(4096),
        user_tasks: Some(12),
        cgroups: vec![CgroupPids {
            dir: "/sys/fs/cgroup/pids/a".into(),
            max: 500,
            current: Some(40),
        }],
        threads_max: Some(95000),
        pid_max: Some(4194304),
        tasks: Some(812),
        ..none()
    };
    let d = r.diagnose(libc::EAGAIN, None);
    assert_eq!(d.limit, Limit::Memory);
    for part in [
        "RLIMIT_NPROC 4096: user 1000 has 12 tasks",
        "cgroup /sys/fs/cgroup/pids/a pids.max 500 (pids.current 40)",
        "kernel.threads-max 95000, kernel.pid_max 4194304: 812 tasks on the system",
        "vm.max_map_count 65530: 200 mappings",
        "RLIMIT_AS unlimited",
        "memory",
    ] {
        assert!(d.detail.contains(part), "{part:?} in {}", d.detail);
    }
    let unknown = none().diagnose(libc::EAGAIN, None);
    assert!(
        unknown.detail.contains("kernel.threads-max unknown"),
        "{}",
        unknown.detail
    );
}

#[test]
fn other_errors_are_named_by_their_number() {
    let r = none();
    assert_eq!(
        r.diagnose(libc::EINVAL, Some(4096)).limit,
        Limit::InvalidAttributes
    );
    assert_eq!(r.diagnose(libc::EPERM, None).limit, Limit::Permission);
    let d = r.diagnose(libc::EBADF, None);
    assert_eq!((d.limit, d.detail.as_str()), (Limit::Unknown, "error 9"));
    let d = Readings {
        rlimit_nproc: Some(1),
        user_tasks: Some(1),
        uid: 65534,
        ..none()
    }
    .diagnose(libc::EAGAIN, None);
    assert_eq!(
        d.to_string(),
        "EAGAIN: RLIMIT_NPROC 1 reached: user 65534 has 1 task"
    );
}

#[test]
fn keys_name_each_limit_once() {
    for l in Limit::ALL {
        assert_eq!(Limit::from_key(l.key()), Some(l));
    }
    assert_eq!(Limit::from_key("rlimit_nproc"), Some(Limit::RlimitNproc));
    assert_eq!(Limit::from_key("nothing"), None);
}

#[test]
fn an_error_without_a_number_is_left_as_it_is() {
    let e = io::Error::other("no number");
    assert_eq!(explain_thread_error(&e, None), "no number");
    let e = io::Error::from_raw_os_error(libc::EAGAIN);
    let m = explain_thread_error(&e, None);
    assert!(m.starts_with(&format!("{e} (EAGAIN: ")), "{m}");
}

#[cfg(any(feature = "pool", feature = "stacks"))]
#[test]
fn a_recent_diagnosis_is_reused_until_a_thread_is_created() {
    let recent = Recent::default();
    recent.diagnose(libc::EAGAIN, 5, None);
    // Planted: a reading now would differ, so equality shows reuse.
    recent.0.lock().unwrap().as_mut().unwrap().3.detail = "planted".into();
    assert_eq!(recent.diagnose(libc::EAGAIN, 5, None).detail, "planted");
    assert_ne!(recent.diagnose(libc::EAGAIN, 6, None).detail, "planted");
    assert_ne!(recent.diagnose(libc::EINVAL, 6, None).detail, "planted");
}
