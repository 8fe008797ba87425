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
    // In a child pid namespace the count is of the tasks it shows.
    let ns = Readings {
        child_pid_ns: true,
        ..r.clone()
    };
    let d = ns.diagnose(libc::EAGAIN, None);
    assert!(
        d.detail.contains(
            "RLIMIT_NPROC 4096: user 1000 has 12 tasks in this pid namespace (those of others \
             not seen)"
        ),
        "{}",
        d.detail
    );
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
    recent.0.lock().unwrap().as_mut().unwrap().2.detail = "planted".into();
    assert_eq!(recent.diagnose(libc::EAGAIN, 5, None).detail, "planted");
    assert_ne!(recent.diagnose(libc::EAGAIN, 6, None).detail, "planted");
    assert_ne!(recent.diagnose(libc::EINVAL, 6, None).detail, "planted");
}

/// `RLIMIT_NPROC` does not stop a holder of `CAP_SYS_RESOURCE` or
/// `CAP_SYS_ADMIN` (`copy_process`): at its limit, such a process was told
/// "RLIMIT_NPROC reached" (only uid 0 was taken as exempt). uid 0 of a
/// child user namespace is not the kernel's root: it is stopped.
#[test]
fn rlimit_nproc_is_not_named_for_whom_the_kernel_exempts() {
    let at_limit = Readings {
        rlimit_nproc: Some(7),
        user_tasks: Some(7),
        uid: 65534,
        ..none()
    };
    assert_eq!(diag(&at_limit).0, Limit::RlimitNproc);
    for (cap, who) in [(24, "CAP_SYS_RESOURCE"), (21, "CAP_SYS_ADMIN")] {
        let r = Readings {
            cap_eff: Some(1 << cap),
            ..at_limit.clone()
        };
        let (limit, detail) = diag(&r);
        assert_eq!(limit, Limit::Memory, "{detail}");
        assert!(
            detail.contains(&format!("RLIMIT_NPROC not enforced for a holder of {who}")),
            "{detail}"
        );
    }
    // Other capabilities do not lift it.
    let r = Readings {
        cap_eff: Some(!((1 << 24) | (1 << 21))),
        ..at_limit.clone()
    };
    assert_eq!(diag(&r).0, Limit::RlimitNproc);
    // Root of a rootless container, with every capability there.
    let r = Readings {
        uid: 0,
        cap_eff: Some(u64::MAX),
        child_user_ns: true,
        ..at_limit.clone()
    };
    let (limit, detail) = diag(&r);
    assert_eq!(limit, Limit::RlimitNproc);
    assert_eq!(detail, "RLIMIT_NPROC 7 reached: user 0 has 7 tasks");
    let r = Readings {
        uid_maps_to_root: true,
        ..r
    };
    assert_eq!(diag(&r).0, Limit::Memory);
}

/// A limit exactly at its ceiling is named before one only near it: at
/// `RLIMIT_NPROC` with the mappings 30 short of `vm.max_map_count`,
/// "vm.max_map_count reached" was said (the mappings were checked first,
/// with 64 of slack), though the mapping succeeded and the task limit
/// stopped the thread.
#[test]
fn a_limit_at_its_ceiling_is_named_before_one_near_it() {
    let r = Readings {
        max_map_count: Some(65530),
        mappings: Some(65500),
        rlimit_nproc: Some(7),
        user_tasks: Some(7),
        uid: 65534,
        ..none()
    };
    assert_eq!(diag(&r).0, Limit::RlimitNproc);
    // Both near: the order of the calls decides (the stack is mapped
    // first).
    let r = Readings {
        user_tasks: Some(6),
        ..r
    };
    assert_eq!(diag(&r).0, Limit::MaxMapCount);
    // The mappings at their ceiling, the tasks near theirs.
    let r = Readings {
        mappings: Some(65530),
        ..r
    };
    assert_eq!(diag(&r).0, Limit::MaxMapCount);
    // The cgroup full, threads-max one short: the cgroup.
    let r = Readings {
        threads_max: Some(500),
        tasks: Some(499),
        cgroups: vec![CgroupPids {
            dir: "/sys/fs/cgroup/x".into(),
            max: 20,
            current: Some(20),
        }],
        ..none()
    };
    assert_eq!(diag(&r).0, Limit::CgroupPidsMax);
    // kernel.pid_max is only ever near: an exact task limit wins.
    let r = Readings {
        pid_max: Some(32768),
        tasks: Some(32600),
        rlimit_nproc: Some(3),
        user_tasks: Some(3),
        uid: 65534,
        ..none()
    };
    assert_eq!(diag(&r).0, Limit::RlimitNproc);
}

/// A thread's stack mapped by glibc, and a pooled stack mapped by the
/// pool: `RLIMIT_DATA` (a private writable mapping is data) and strict
/// overcommit are named with their numbers; a stack's mapping was only
/// ever given a list of possibilities.
#[test]
fn the_memory_limits_of_a_stack_are_named_with_their_numbers() {
    let data = Readings {
        rlimit_data: Some(16 << 20),
        data: Some(14 << 20),
        ..none()
    };
    let (l, d) = diag(&data);
    assert_eq!(l, Limit::RlimitData);
    assert_eq!(
        d,
        "RLIMIT_DATA 16777216 reached: 14680064 bytes of private writable memory in use \
         (VmData), and the stack needs 8388608"
    );
    // The mmap reserves (RLIMIT_AS), the mprotect commits (RLIMIT_DATA).
    let m = data.diagnose_mapping(libc::ENOMEM, MapStep::Reserve, 8 << 20);
    assert_eq!(m.limit, Limit::Memory, "{m}");
    assert!(m.detail.contains("no free range of address space"), "{m}");
    let m = data.diagnose_mapping(libc::ENOMEM, MapStep::Commit, 8 << 20);
    assert_eq!(m.limit, Limit::RlimitData, "{m}");
    assert_eq!(
        m.to_string(),
        "ENOMEM: RLIMIT_DATA 16777216 reached: 14680064 bytes of private writable memory in \
         use (VmData), and the stack needs 8388608"
    );
    let small = data.diagnose_mapping(libc::ENOMEM, MapStep::Commit, 1 << 20);
    assert_eq!(small.limit, Limit::Memory, "{small}");
    assert!(
        small
            .detail
            .contains("RLIMIT_DATA 16777216: 14680064 bytes in use"),
        "{small}"
    );

    let space = Readings {
        rlimit_as: Some(64 << 20),
        address_space: Some(60 << 20),
        ..none()
    };
    let m = space.diagnose_mapping(libc::ENOMEM, MapStep::Reserve, 8 << 20);
    assert_eq!(m.limit, Limit::RlimitAs, "{m}");
    assert!(
        m.detail
            .starts_with("RLIMIT_AS 67108864 reached: 62914560 bytes"),
        "{m}"
    );
    assert_eq!(
        space
            .diagnose_mapping(libc::ENOMEM, MapStep::Commit, 8 << 20)
            .limit,
        Limit::Memory
    );

    let strict = Readings {
        overcommit_memory: Some(2),
        commit_limit: Some(1000 << 20),
        committed: Some(990 << 20),
        commit_reserve: Some(8 << 20),
        ..none()
    };
    let m = strict.diagnose_mapping(libc::ENOMEM, MapStep::Commit, 4 << 20);
    assert_eq!(m.limit, Limit::Overcommit, "{m}");
    assert!(
        m.detail
            .starts_with("vm.overcommit_memory 2: CommitLimit 1048576000 bytes reached"),
        "{m}"
    );
    // Heuristic overcommit does not refuse a stack.
    let loose = Readings {
        overcommit_memory: Some(0),
        ..strict
    };
    assert_eq!(
        loose
            .diagnose_mapping(libc::ENOMEM, MapStep::Commit, 4 << 20)
            .limit,
        Limit::Memory
    );

    let maps = Readings {
        max_map_count: Some(65530),
        mappings: Some(65529),
        ..none()
    };
    for step in [MapStep::Reserve, MapStep::Commit] {
        let m = maps.diagnose_mapping(libc::ENOMEM, step, 8 << 20);
        assert_eq!(m.limit, Limit::MaxMapCount, "{m}");
    }
    assert_eq!(
        maps.diagnose_mapping(libc::EINVAL, MapStep::Reserve, 8 << 20)
            .limit,
        Limit::InvalidAttributes
    );
}

/// Readings at the edges of `u64` (a garbled `/proc` file read as a huge
/// number) are compared without overflow and named, never a panic.
#[test]
fn huge_readings_do_not_overflow() {
    let huge = Readings {
        max_map_count: Some(u64::MAX),
        mappings: Some(u64::MAX),
        rlimit_nproc: Some(u64::MAX),
        user_tasks: Some(u64::MAX),
        uid: 65534,
        threads_max: Some(0),
        tasks: Some(u64::MAX),
        pid_max: Some(u64::MAX),
        rlimit_as: Some(u64::MAX - 1),
        address_space: Some(u64::MAX),
        rlimit_data: Some(0),
        data: Some(u64::MAX),
        overcommit_memory: Some(2),
        commit_limit: Some(0),
        committed: Some(u64::MAX),
        commit_reserve: Some(u64::MAX),
        ..none()
    };
    for stack in [None, Some(0), Some(u64::MAX)] {
        let d = huge.diagnose(libc::EAGAIN, stack);
        assert_ne!(d.limit, Limit::Unknown, "{d}");
    }
    for step in [MapStep::Reserve, MapStep::Commit] {
        huge.diagnose_mapping(libc::ENOMEM, step, u64::MAX);
    }
    let zero = Readings {
        address_space: Some(0),
        ..none()
    };
    zero.diagnose(libc::ENOMEM, Some(u64::MAX));
}

/// Under `mlockall(MCL_FUTURE)` a stack's `mmap` says EAGAIN at
/// `RLIMIT_MEMLOCK`: named with the locked bytes, unless the process holds
/// `CAP_IPC_LOCK`; an `mmap` that said ENOMEM is not a locking failure.
#[test]
fn locked_memory_is_named_for_a_refused_reservation() {
    let r = Readings {
        rlimit_memlock: Some(8 << 20),
        locked: Some(4 << 20),
        ..none()
    };
    let m = r.diagnose_mapping(libc::EAGAIN, MapStep::Reserve, 16 << 20);
    assert_eq!(m.limit, Limit::RlimitMemlock, "{m}");
    assert!(
        m.detail
            .starts_with("RLIMIT_MEMLOCK 8388608 reached: 4194304 bytes locked (VmLck)"),
        "{m}"
    );
    assert_eq!(diag(&r).0, Limit::RlimitMemlock);
    let m = r.diagnose_mapping(libc::ENOMEM, MapStep::Reserve, 16 << 20);
    assert_eq!(m.limit, Limit::Memory, "{m}");
    let ipc_lock = Readings {
        cap_eff: Some(1 << 14),
        ..r.clone()
    };
    let m = ipc_lock.diagnose_mapping(libc::EAGAIN, MapStep::Reserve, 16 << 20);
    assert_eq!(m.limit, Limit::Memory, "{m}");
    assert!(m.detail.contains("too much memory locked"), "{m}");
    // Nothing locked: a thread's creation is not put down to mlockall.
    let none_locked = Readings {
        locked: Some(0),
        ..r
    };
    assert_eq!(diag(&none_locked).0, Limit::Memory);
}

/// In a child pid namespace `kernel.pid_max` is the namespace's own (Linux
/// 6.14+) and caps its tasks' pids: with a namespace's `pid_max` of 1000
/// and 5000 tasks on the system, "kernel.pid_max 1000 reached: 5000 tasks
/// on the system hold pids" was said of a namespace holding 3.
#[test]
fn pid_max_in_a_pid_namespace_counts_its_tasks() {
    let r = Readings {
        pid_max: Some(1000),
        tasks: Some(5000),
        child_pid_ns: true,
        ns_tasks: Some(3),
        ..none()
    };
    let (limit, detail) = diag(&r);
    assert_eq!(limit, Limit::Memory, "{detail}");
    assert!(
        detail.contains("kernel.pid_max 1000: 3 task(s) in this pid namespace"),
        "{detail}"
    );
    let full = Readings {
        ns_tasks: Some(990),
        ..r
    };
    assert_eq!(
        diag(&full),
        (
            Limit::PidMax,
            "kernel.pid_max 1000 reached: 990 tasks in this pid namespace hold pids".into()
        )
    );
}
