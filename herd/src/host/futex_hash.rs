//! The futex hash a process uses, and setting it (Linux 6.16+).
//!
//! Every futex operation hashes its address into a table of buckets, each
//! with a spinlock: the futex hash-bucket locks a storm's exits contend on.
//! Before 6.16 every process shared one global table. Since 6.16
//! (`PR_FUTEX_HASH`, CONFIG_FUTEX_PRIVATE_HASH) a process gets a private
//! table when it creates its first thread, sized by the kernel and grown
//! as its thread count grows (this 2-CPU machine gives 16 buckets), and a
//! process may choose: `prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, N)`
//! with N a power of two, or 0 for the global table. Which table a storm
//! runs on changes the contention it sees, so herd reports it (in `herd
//! env` and with every run) and `herd storm --futex-hash` sets it.

use serde::{Deserialize, Serialize};

/// `PR_FUTEX_HASH` (include/uapi/linux/prctl.h, 6.16).
pub const PR_FUTEX_HASH: libc::c_int = 78;
/// `PR_FUTEX_HASH_SET_SLOTS`.
pub const SET_SLOTS: libc::c_ulong = 1;
/// `PR_FUTEX_HASH_GET_SLOTS`.
pub const GET_SLOTS: libc::c_ulong = 2;

/// This process's futex hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FutexHash {
    /// True when the kernel has per-process futex hashes.
    pub per_process: bool,
    /// Buckets of this process's private table; 0: the global table.
    /// `None` when the kernel has no per-process hashes (global only).
    pub slots: Option<u64>,
}

impl FutexHash {
    /// This process's futex hash now.
    pub fn read() -> FutexHash {
        // SAFETY: prctl with integer arguments only; GET_SLOTS reads.
        let rc = unsafe { libc::prctl(PR_FUTEX_HASH, GET_SLOTS, 0, 0, 0) };
        FutexHash {
            per_process: rc >= 0,
            slots: (rc >= 0).then_some(rc as u64),
        }
    }

    /// One line for `herd env` and the run's table.
    pub fn describe(&self) -> String {
        match self.slots {
            None => {
                "global table only (kernel before 6.16, or CONFIG_FUTEX_PRIVATE_HASH off)".into()
            }
            Some(0) => "this process: the global table (per-process tables available, \
                        PR_FUTEX_HASH; a process gets its own at its first thread)"
                .into(),
            Some(n) => format!("this process: a private table of {n} buckets (PR_FUTEX_HASH)"),
        }
    }
}

/// What `--futex-hash` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    /// Whatever the kernel gives (a private table since 6.16).
    #[default]
    Default,
    /// The shared global table (SET_SLOTS 0).
    Global,
    /// A private table of this many buckets (a power of two, >= 2).
    Private(u64),
}

impl std::str::FromStr for Choice {
    type Err = String;
    fn from_str(s: &str) -> Result<Choice, String> {
        match s {
            "default" => Ok(Choice::Default),
            "global" => Ok(Choice::Global),
            n => match n.parse::<u64>() {
                Ok(v) if v >= 2 && v.is_power_of_two() && v <= 1 << 24 => Ok(Choice::Private(v)),
                _ => Err(format!(
                    "`{s}`: expected default, global, or a bucket count that is a power of \
                     two between 2 and 16777216"
                )),
            },
        }
    }
}

/// Applies `choice` to this process; the error names what the kernel said.
pub fn apply(choice: Choice) -> Result<FutexHash, String> {
    let slots = match choice {
        Choice::Default => return Ok(FutexHash::read()),
        Choice::Global => 0,
        Choice::Private(n) => n,
    };
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(PR_FUTEX_HASH, SET_SLOTS, slots as libc::c_ulong, 0, 0) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        let now = FutexHash::read();
        return Err(if !now.per_process {
            "this kernel has no per-process futex hash (needs 6.16+ with \
             CONFIG_FUTEX_PRIVATE_HASH)"
                .to_string()
        } else {
            format!("prctl(PR_FUTEX_HASH, SET_SLOTS, {slots}) failed: {e}")
        });
    }
    Ok(FutexHash::read())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse() {
        assert_eq!("global".parse(), Ok(Choice::Global));
        assert_eq!("default".parse(), Ok(Choice::Default));
        assert_eq!("64".parse(), Ok(Choice::Private(64)));
        assert!("48".parse::<Choice>().is_err(), "not a power of two");
        assert!("1".parse::<Choice>().is_err());
        assert!("x".parse::<Choice>().is_err());
    }

    #[test]
    fn read_and_describe() {
        let h = FutexHash::read();
        assert_eq!(h.per_process, h.slots.is_some());
        assert!(!h.describe().is_empty());
        // This test process has threads: on a 6.16+ kernel it has a table.
        if let Some(n) = h.slots {
            assert!(n == 0 || n.is_power_of_two(), "{n}");
        }
    }
}
