//! Whom `RLIMIT_NPROC` does not stop.
//!
//! The kernel's check (`copy_process` in `kernel/fork.c`) refuses a new
//! task over `RLIMIT_NPROC` only when
//!
//! ```text
//! p->real_cred->user != INIT_USER &&
//!     !capable(CAP_SYS_RESOURCE) && !capable(CAP_SYS_ADMIN)
//! ```
//!
//! * `INIT_USER` is the user of the kernel's uid 0: the real uid 0 of the
//!   initial user namespace, or, in a child user namespace, a real uid
//!   that its `uid_map` maps to uid 0 outside (exact when that outside is
//!   the initial namespace, the usual container). Deeper nesting is read
//!   as one level, and cannot be read further from inside: a process in
//!   the namespace sees `uid_map` relative to its parent namespace only
//!   (user_namespaces(7)), so whether the parent's uid 0 is the kernel's
//!   is not visible to it. uid 0 of a rootless container maps elsewhere:
//!   it is limited.
//! * `capable()` asks for the capability in the initial user namespace,
//!   in the effective set of the thread that calls `clone`: a process
//!   that kept `CAP_SYS_RESOURCE` or `CAP_SYS_ADMIN` past a `setuid` is
//!   exempt; capabilities held inside a child user namespace are not.
//!
//! So root that dropped both capabilities is still exempt, and a non-root
//! holder of either is too.

use super::read::read_into;

/// `CAP_IPC_LOCK`'s bit in a capability set (lifts `RLIMIT_MEMLOCK`).
pub(super) const CAP_IPC_LOCK: u32 = 14;
/// `CAP_SYS_ADMIN`'s bit in a capability set.
pub(super) const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_SYS_RESOURCE`'s bit in a capability set.
pub(super) const CAP_SYS_RESOURCE: u32 = 24;

/// The inode of the initial user namespace (`PROC_USER_INIT_INO` in
/// `include/linux/proc_ns.h`, fixed since Linux 3.8).
const INIT_USER_NS_INO: u64 = 0xEFFF_FFFD;

/// Why `RLIMIT_NPROC` does not stop a process whose real uid is `uid`,
/// whose calling thread's effective capabilities are `cap_eff` (`None`:
/// unknown, taken as none), in a child user namespace (`child_user_ns`)
/// where `uid` maps to uid 0 outside (`maps_to_root`); `None`: it stops
/// it.
pub(super) fn nproc_exempt(
    uid: u32,
    cap_eff: Option<u64>,
    child_user_ns: bool,
    maps_to_root: bool,
) -> Option<&'static str> {
    if child_user_ns {
        // Capabilities here are this namespace's, not the initial one's.
        return maps_to_root.then_some("a user mapped to root outside this user namespace");
    }
    if uid == 0 {
        return Some("root");
    }
    let has = |cap: u32| cap_eff.is_some_and(|c| c & (1 << cap) != 0);
    if has(CAP_SYS_RESOURCE) {
        Some("a holder of CAP_SYS_RESOURCE")
    } else if has(CAP_SYS_ADMIN) {
        Some("a holder of CAP_SYS_ADMIN")
    } else {
        None
    }
}

/// The effective capabilities of the calling thread (`CapEff` of
/// `/proc/thread-self/status`: capabilities are per thread, and the
/// kernel asks the one that calls `clone`).
pub(super) fn cap_eff() -> Option<u64> {
    let mut buf = [0u8; 16 * 1024];
    let status = read_into("/proc/thread-self/status", &mut buf)?;
    let line = status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"CapEff:"))?;
    hex_u64(line)
}

/// A hexadecimal number after blanks (`None`: none, or too large).
fn hex_u64(s: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(s).ok()?.trim();
    if s.is_empty() {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// Whether this process is in a user namespace other than the initial one
/// (`false` when `/proc` cannot tell).
pub(super) fn child_user_ns() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/user").is_ok_and(|m| m.ino() != INIT_USER_NS_INO)
}

/// Whether `uid_map` (`inside outside count` lines) maps `uid` to uid 0
/// of the namespace outside.
pub(super) fn maps_to_root(uid_map: &[u8], uid: u32) -> bool {
    let uid = u64::from(uid);
    uid_map.split(|&b| b == b'\n').any(|line| {
        let mut fields = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .map(|f| {
                std::str::from_utf8(f)
                    .ok()
                    .and_then(|f| f.parse::<u64>().ok())
            });
        let (Some(Some(inside)), Some(Some(outside)), Some(Some(count))) =
            (fields.next(), fields.next(), fields.next())
        else {
            return false;
        };
        uid >= inside && uid - inside < count && outside.checked_add(uid - inside) == Some(0)
    })
}

/// [`maps_to_root`] for this process's `/proc/self/uid_map`.
pub(super) fn uid_maps_to_root(uid: u32) -> bool {
    let mut buf = [0u8; 4096];
    read_into("/proc/self/uid_map", &mut buf).is_some_and(|map| maps_to_root(map, uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_the_two_capabilities_are_exempt_in_the_initial_namespace() {
        let res = 1u64 << CAP_SYS_RESOURCE;
        let admin = 1u64 << CAP_SYS_ADMIN;
        assert_eq!(nproc_exempt(0, Some(0), false, false), Some("root"));
        assert_eq!(nproc_exempt(1000, Some(0), false, false), None);
        assert_eq!(nproc_exempt(1000, None, false, false), None);
        assert!(nproc_exempt(1000, Some(res), false, false).is_some());
        assert!(nproc_exempt(1000, Some(admin), false, false).is_some());
        // Other capabilities do not lift it.
        assert_eq!(nproc_exempt(1000, Some(!(res | admin)), false, false), None);
        // A child namespace: its root and its capabilities are not the
        // kernel's, unless mapped to root outside.
        assert_eq!(nproc_exempt(0, Some(u64::MAX), true, false), None);
        assert!(nproc_exempt(0, Some(0), true, true).is_some());
    }

    /// This machine's thread has a CapEff line (read.rs's test of the real
    /// files had this check, which made read.rs import this module back).
    #[test]
    fn this_thread_s_capabilities_are_read() {
        assert!(cap_eff().is_some());
    }

    #[test]
    fn uid_maps_and_capability_masks_are_parsed_without_panics() {
        assert!(maps_to_root(b"         0          0 4294967295\n", 0));
        assert!(!maps_to_root(b"         0     100000      65536\n", 0));
        assert!(maps_to_root(b"0 100000 1000\n1000 0 1\n", 1000));
        assert!(!maps_to_root(b"0 100000 1000\n1000 0 1\n", 1001));
        for junk in [
            &b""[..],
            b"x y z",
            b"0 0",
            b"0 18446744073709551615 9",
            b"5 0 -1",
        ] {
            assert!(!maps_to_root(junk, 7), "{junk:?}");
        }
        assert_eq!(hex_u64(b"\t000001ffffffffff"), Some(0x1ff_ffff_ffff));
        assert_eq!(hex_u64(b"\t"), None);
        assert_eq!(hex_u64(b"\tfffffffffffffffff"), None);
        assert_eq!(hex_u64(b"\tzz"), None);
    }
}
