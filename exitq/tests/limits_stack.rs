//! A thread stack that cannot be mapped, named by the limit that stopped
//! it with its numbers (`exitq::limits`): a pooled stack
//! (`SpawnError::Map`, `SpawnError::Protect`, the pool's prefill) and a
//! stack glibc maps for `std::thread`. Each in a forked child whose
//! `RLIMIT_AS` or `RLIMIT_DATA` is lowered to a little above what it uses,
//! so a stack of 16 MiB does not fit. No root needed.
use std::ffi::c_void;
use std::time::Duration;

use exitq::limits::explain_thread_error;
use exitq::stacks::{Reap, SpawnError, StackPool};

mod watch_util;
use watch_util::fork_child;

/// How long a child may take; it only bounds how long a failure takes to
/// show.
/// (60 s: under load a child or a reclaimer may not run for seconds.)
const PATIENCE: Duration = Duration::from_secs(60);

/// The stack asked for: larger than the headroom left under the limit,
/// and than any stack glibc cached from the parent's threads (so glibc
/// maps a new one).
const STACK: usize = 16 << 20;

/// Headroom left under a lowered limit: enough for the diagnosis itself
/// (its strings, the directory reads of `/proc`).
const HEADROOM: u64 = 2 << 20;

/// Returns its argument.
unsafe extern "C-unwind" fn identity(arg: *mut c_void) -> *mut c_void {
    arg
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    let kb: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

/// In a forked child only: sets `resource`'s soft limit to what the
/// process uses now (`key` of `/proc/self/status`) plus [`HEADROOM`];
/// returns that limit.
fn lower(resource: libc::__rlimit_resource_t, key: &str) -> u64 {
    let lim = status_bytes(key) + HEADROOM;
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid rlimit pointers; a forked child's own limits.
    unsafe {
        assert_eq!(libc::getrlimit(resource, &mut rl), 0);
        rl.rlim_cur = lim;
        assert_eq!(libc::setrlimit(resource, &rl), 0);
    }
    lim
}

/// `m` names `limit` (`RLIMIT_DATA`) with the value `lim` as reached,
/// with the bytes in use and the bytes needed, which do not fit under it.
fn names_with_numbers(m: &str, limit: &str, lim: u64) -> bool {
    let head = format!("{limit} {lim} reached: ");
    let Some(at) = m.find(&head) else {
        return false;
    };
    let rest = &m[at + head.len()..];
    let used: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Some(needs) = rest.split("the stack needs ").nth(1) else {
        return false;
    };
    let needs: String = needs.chars().take_while(char::is_ascii_digit).collect();
    match (used.parse::<u64>(), needs.parse::<u64>()) {
        (Ok(used), Ok(needs)) => used + needs > lim && needs >= STACK as u64 / 2,
        _ => false,
    }
}

/// A pooled stack under a lowered `RLIMIT_AS`: its `mmap` fails. The
/// error listed "address space (RLIMIT_AS)" or "vm.max_map_count or
/// memory overcommit" by the errno alone; it now names `RLIMIT_AS` with
/// the address space in use and the stack's size.
#[test]
fn a_stack_beyond_rlimit_as_names_it() {
    let code = fork_child(PATIENCE, || {
        let pool = StackPool::builder().stack_size(STACK).build().unwrap();
        let lim = lower(libc::RLIMIT_AS, "VmSize:");
        // SAFETY: `identity` is a plain function; joined through the handle.
        let e = unsafe { pool.spawn(identity, std::ptr::null_mut(), Reap::Owner) }
            .expect_err("a 16 MiB stack beyond RLIMIT_AS");
        assert!(matches!(e, SpawnError::Map(_)), "{e}");
        assert_eq!(e.limit(), "RLIMIT_AS", "{e}");
        let m = e.to_string();
        assert!(m.starts_with("mmap of a thread stack failed"), "{m}");
        assert!(names_with_numbers(&m, "RLIMIT_AS", lim), "{m}");
        0
    });
    assert_eq!(code, 0);
}

/// A pooled stack under a lowered `RLIMIT_DATA`: its `PROT_NONE` `mmap`
/// is no data, the `mprotect` that makes it writable is (Linux 4.7+) and
/// fails. The error listed "address space (RLIMIT_AS)"; it now names
/// `RLIMIT_DATA` with the private writable memory in use. A pool
/// prefilled there fails to build with the same diagnosis (its error was
/// the bare OS error).
#[test]
fn a_stack_beyond_rlimit_data_names_it() {
    let code = fork_child(PATIENCE, || {
        let pool = StackPool::builder().stack_size(STACK).build().unwrap();
        let lim = lower(libc::RLIMIT_DATA, "VmData:");
        // SAFETY: as above.
        let e = unsafe { pool.spawn(identity, std::ptr::null_mut(), Reap::Owner) }
            .expect_err("a 16 MiB stack beyond RLIMIT_DATA");
        assert!(matches!(e, SpawnError::Protect(_)), "{e}");
        assert_eq!(e.errno(), libc::ENOMEM, "{e}");
        assert_eq!(e.limit(), "RLIMIT_DATA", "{e}");
        let m = e.to_string();
        assert!(m.starts_with("mprotect of a thread stack failed"), "{m}");
        assert!(names_with_numbers(&m, "RLIMIT_DATA", lim), "{m}");

        let Err(e) = StackPool::builder().stack_size(STACK).prefill(1).build() else {
            panic!("a prefilled stack beyond RLIMIT_DATA was mapped");
        };
        let m = e.to_string();
        assert!(m.starts_with("cannot prefill the stack pool"), "{m}");
        assert!(names_with_numbers(&m, "RLIMIT_DATA", lim), "{m}");
        0
    });
    assert_eq!(code, 0);
}

/// A `std::thread` whose stack glibc cannot make writable under
/// `RLIMIT_DATA`: `pthread_create` says EAGAIN, and the diagnosis said no
/// limit was at its ceiling (it did not read `RLIMIT_DATA`). It now names
/// it.
#[test]
fn a_std_thread_beyond_rlimit_data_names_it() {
    let code = fork_child(PATIENCE, || {
        let lim = lower(libc::RLIMIT_DATA, "VmData:");
        let e = std::thread::Builder::new()
            .stack_size(STACK)
            .spawn(|| ())
            .map(|t| t.join())
            .expect_err("a 16 MiB stack beyond RLIMIT_DATA");
        let m = explain_thread_error(&e, Some(STACK as u64));
        assert!(m.contains("(EAGAIN: RLIMIT_DATA "), "{m}");
        assert!(names_with_numbers(&m, "RLIMIT_DATA", lim), "{m}");
        0
    });
    assert_eq!(code, 0);
}

/// A pooled stack under `mlockall(MCL_FUTURE)` beyond `RLIMIT_MEMLOCK`
/// (as `nobody` when run as root: `CAP_IPC_LOCK` lifts the limit): its
/// `mmap` says EAGAIN. The error said "address space (RLIMIT_AS)"; it now
/// names `RLIMIT_MEMLOCK` with the locked bytes and the stack's size.
#[test]
fn a_stack_beyond_rlimit_memlock_names_it() {
    const NOBODY: u32 = 65534;
    let code = fork_child(PATIENCE, || {
        let pool = StackPool::builder().stack_size(STACK).build().unwrap();
        let lim = 1 << 20;
        let rl = libc::rlimit {
            rlim_cur: lim,
            rlim_max: lim,
        };
        // SAFETY: plain system calls on valid arguments, in a forked child
        // of one thread (glibc's setuid would change any other too).
        let ok = unsafe {
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) == 0
                && (libc::geteuid() != 0
                    || (libc::setgroups(0, std::ptr::null()) == 0
                        && libc::setgid(NOBODY) == 0
                        && libc::setuid(NOBODY) == 0))
                && libc::mlockall(libc::MCL_FUTURE) == 0
        };
        assert!(ok, "setup: {}", std::io::Error::last_os_error());
        // SAFETY: as above.
        let e = unsafe { pool.spawn(identity, std::ptr::null_mut(), Reap::Owner) }
            .expect_err("a 16 MiB stack locked beyond RLIMIT_MEMLOCK");
        // SAFETY: undoes the mlockall; no arguments.
        unsafe { libc::munlockall() };
        assert!(matches!(e, SpawnError::Map(_)), "{e}");
        assert_eq!(e.errno(), libc::EAGAIN, "{e}");
        assert_eq!(e.limit(), "RLIMIT_MEMLOCK", "{e}");
        let m = e.to_string();
        assert!(names_with_numbers(&m, "RLIMIT_MEMLOCK", lim), "{m}");
        0
    });
    assert_eq!(code, 0);
}
