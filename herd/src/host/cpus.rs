//! CPU lists and affinity masks, sized at run time: lists are
//! `Vec<usize>` in the kernel's cpulist format (`0-3,8`), masks
//! ([`CpuMask`]) bitmaps sized from the largest CPU id they hold, so a
//! 384-CPU machine (or CPU ids above 1023, beyond glibc's fixed
//! `cpu_set_t`) works the same as this 2-CPU one. The one parser of CPU
//! lists in herd (`/sys` files, `--cpus`, `/proc` status lines).

use std::fmt::Write as _;

use anyhow::Result;

use crate::error::usage;

/// Online CPUs; falls back to `0..sysconf(_SC_NPROCESSORS_ONLN)`.
pub fn online_cpus() -> Vec<usize> {
    if let Ok(list) = std::fs::read_to_string("/sys/devices/system/cpu/online") {
        if let Ok(cpus) = parse_cpu_list(&list) {
            if !cpus.is_empty() {
                return cpus;
            }
        }
    }
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    (0..n).collect()
}

/// The CPUs this thread can run on: its affinity mask (`Cpus_allowed_list`
/// of its `/proc` status, which has no size limit, unlike a fixed
/// `cpu_set_t`) less the CPUs that are not online. The mask also holds
/// possible CPUs that are offline (hot-plug slots, a VM's `maxcpus`, as in
/// the guest of `vm-run.sh --x2apic-ids`: 16 online of 258), where
/// `sched_setaffinity` fails with EINVAL; `sched_getaffinity` leaves them
/// out the same way.
pub fn allowed_cpus() -> Option<Vec<usize>> {
    let tid = nix::unistd::gettid().as_raw();
    let status = procfs::process::Process::myself()
        .ok()?
        .task_from_tid(tid)
        .ok()?
        .status()
        .ok()?;
    let mut cpus: Vec<usize> = status
        .cpus_allowed_list?
        .into_iter()
        .flat_map(|(a, b)| a as usize..=b as usize)
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    let online = online_cpus(); // ascending, as sysfs lists them
    cpus.retain(|c| online.binary_search(c).is_ok());
    Some(cpus)
}

/// Largest CPU id accepted in a list: far above any real machine, small
/// enough that a mask for it is a few KiB (a typo like `0-99999999` is
/// refused instead of allocating).
pub const MAX_CPU_ID: usize = 1 << 16;

/// Parses a CPU list like `0-3,8,10-11` (the kernel's cpulist format) into
/// sorted, de-duplicated CPU ids. `flag` names the option in errors.
pub fn parse_cpu_list_for(flag: &str, s: &str) -> Result<Vec<usize>> {
    parse_cpu_list(s).map_err(|e| usage(flag, e))
}

/// Parses a kernel-style CPU list; the error message says what is wrong.
pub fn parse_cpu_list(s: &str) -> std::result::Result<Vec<usize>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty CPU list".into());
    }
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let num = |t: &str| -> std::result::Result<usize, String> {
            let v: usize = t
                .trim()
                .parse()
                .map_err(|_| format!("`{t}` is not a CPU number (expected e.g. 0-3,8)"))?;
            if v > MAX_CPU_ID {
                return Err(format!(
                    "CPU {v} is above the largest supported id {MAX_CPU_ID}"
                ));
            }
            Ok(v)
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("range `{part}` goes backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Formats sorted CPU ids back into the compact `0-3,8` form.
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

/// An affinity mask sized at run time: one bit per CPU id up to the
/// largest one set, in the kernel's `unsigned long` word layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuMask {
    words: Vec<libc::c_ulong>,
}

impl CpuMask {
    const BITS: usize = libc::c_ulong::BITS as usize;

    /// A mask with exactly `cpus` set.
    pub fn of(cpus: &[usize]) -> CpuMask {
        let max = cpus.iter().copied().max().unwrap_or(0);
        // The kernel rejects a mask shorter than its nr_cpu_ids only when
        // bits beyond are needed; a mask covering our largest CPU suffices.
        let mut words = vec![0; max / Self::BITS + 1];
        for &c in cpus {
            words[c / Self::BITS] |= 1 << (c % Self::BITS);
        }
        CpuMask { words }
    }

    /// Size in bytes, as sched_setaffinity(2) wants it.
    pub fn size_bytes(&self) -> usize {
        self.words.len() * std::mem::size_of::<libc::c_ulong>()
    }

    /// Binds the calling thread to this mask (sched_setaffinity(0, ...)).
    /// Async-signal-safe and allocation-free, so threads call it at start.
    pub fn apply_to_current_thread(&self) -> std::io::Result<()> {
        // SAFETY: the pointer and size describe `self.words`, which lives
        // for the call; the kernel only reads `size_bytes()` bytes.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_setaffinity,
                0,
                self.size_bytes(),
                self.words.as_ptr(),
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// The CPU the calling thread runs on now (sched_getcpu), or -1.
#[inline]
pub fn current_cpu() -> i32 {
    // SAFETY: sched_getcpu has no preconditions (vDSO/rseq read).
    unsafe { libc::sched_getcpu() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_list_round_trip() {
        let l = parse_cpu_list("0-3,8,10-11").unwrap();
        assert_eq!(l, vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(format_cpu_list(&l), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&parse_cpu_list("5").unwrap()), "5");
        let big = parse_cpu_list("0-127,256-383").unwrap();
        assert_eq!(big.len(), 256);
        assert_eq!(format_cpu_list(&big), "0-127,256-383");
        assert_eq!(parse_cpu_list("3,1,1-2").unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn cpu_lists_parse_ranges_beyond_64() {
        assert_eq!(parse_cpu_list("0-3,8\n"), Ok(vec![0, 1, 2, 3, 8]));
        let big = parse_cpu_list("0-127,256-383").unwrap();
        assert_eq!(big.len(), 256);
        assert_eq!(big[128], 256);
    }

    #[test]
    fn cpu_list_errors() {
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("a")
            .unwrap_err()
            .contains("not a CPU number"));
        assert!(parse_cpu_list("4-2").unwrap_err().contains("backwards"));
        assert!(parse_cpu_list("0-99999999")
            .unwrap_err()
            .contains("largest"));
    }

    /// The CPUs set in a mask, read back from its words.
    fn set_in(m: &CpuMask) -> Vec<usize> {
        let mut out = Vec::new();
        for (i, w) in m.words.iter().enumerate() {
            for b in 0..CpuMask::BITS {
                if w & (1 << b) != 0 {
                    out.push(i * CpuMask::BITS + b);
                }
            }
        }
        out
    }

    #[test]
    fn mask_beyond_1024_cpus() {
        let cpus = vec![0, 63, 64, 127, 128, 1023, 1024, 4095];
        let m = CpuMask::of(&cpus);
        assert_eq!(set_in(&m), cpus);
        assert_eq!(m.size_bytes(), 4096 / 8);
    }

    #[test]
    fn own_mask_applies() {
        let allowed = allowed_cpus().unwrap();
        CpuMask::of(&allowed).apply_to_current_thread().unwrap();
        assert!(allowed.contains(&(current_cpu() as usize)));
    }
}
