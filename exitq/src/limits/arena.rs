//! glibc's malloc arena limit, as glibc 2.36 reads it: the most arenas
//! (the main one among them) a process keeps. Each new arena reserves
//! [`super::ARENA_RESERVE_BYTES`] of address space, so the limit bounds
//! what threads can take under `RLIMIT_AS` beyond their stacks
//! ([`super::ThreadRoom`], herd's pre-flights).

/// glibc's `arena_test` (`NARENAS_FROM_NCORES (1)` on 64-bit): the
/// arenas made before the per-CPU limit is first computed.
const GLIBC_ARENA_TEST: u64 = 8;

/// The `glibc.malloc.arena_max` glibc 2.36 takes from its environment,
/// given the values of `MALLOC_ARENA_MAX` and `GLIBC_TUNABLES` (`None`:
/// unset, or no valid value: then the per-CPU default holds). Pure, for
/// tests; [`arena_limit`] reads this process's environment.
///
/// Checked in glibc 2.36's source (tag `glibc-2.36`: `elf/dl-tunables.c`,
/// `elf/dl-tunables.list`, `elf/dl-misc.c`, `malloc/arena.c`):
/// `MALLOC_ARENA_MAX` is the tunable's environment alias; `__tunables_init`
/// skips an alias whose tunable is already set, and `parse_tunables` sets
/// a tunable from `GLIBC_TUNABLES` whether or not its alias set it first,
/// so a valid `glibc.malloc.arena_max` in `GLIBC_TUNABLES` wins, in
/// either order, and of several the last one. A value is read by
/// `_dl_strtoul` (leading blanks, a sign, `0x` hex or `0` octal, digits
/// up to the first other character, the rest ignored: `4x` is 4,
/// garbage is 0) and dropped when below the tunable's `minval` of 1, as
/// if unset (so an invalid tunable leaves `MALLOC_ARENA_MAX` in force).
pub fn glibc_arena_max(malloc_arena_max: Option<&str>, tunables: Option<&str>) -> Option<u64> {
    let valid = |v: &str| Some(dl_strtoul(v)).filter(|&n| n >= 1);
    let tunable = tunables.and_then(|t| {
        // The last valid one: read from the end.
        t.rsplit(':')
            .filter_map(|pair| pair.split_once('='))
            .filter(|(name, _)| *name == "glibc.malloc.arena_max")
            .find_map(|(_, v)| valid(v))
    });
    tunable.or_else(|| malloc_arena_max.and_then(valid))
}

/// glibc's `_dl_strtoul` (`elf/dl-misc.c`, 2.36): what it makes of a
/// tunable's value.
fn dl_strtoul(s: &str) -> u64 {
    let s = s.trim_start_matches([' ', '\t']);
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (base, digits) = if let Some(hex) = s.strip_prefix("0x").or(s.strip_prefix("0X")) {
        (16, hex)
    } else if s.starts_with('0') {
        (8, s)
    } else {
        (10, s)
    };
    if !s.starts_with(|c: char| c.is_ascii_digit()) {
        return 0;
    }
    let mut n: u64 = 0;
    for d in digits.chars().map_while(|c| c.to_digit(base)) {
        let d = u64::from(d);
        if n >= (u64::MAX - d) / u64::from(base) {
            return u64::MAX;
        }
        n = n * u64::from(base) + d;
    }
    if negative {
        n.wrapping_neg()
    } else {
        n
    }
}

/// The most malloc arenas glibc 2.36 keeps (the main one among them),
/// given `arena_max` ([`glibc_arena_max`]) and `cpus`, the CPUs of the
/// affinity mask of the thread that first needs the limit (glibc's
/// `__get_nprocs_sched`). `arena_get2` (`malloc/arena.c`): with
/// `arena_max` set, that many; else no limit until more than
/// `arena_test` (8) exist, then 8 per CPU: at least 9 on one CPU.
pub fn glibc_arena_limit(arena_max: Option<u64>, cpus: u64) -> u64 {
    arena_max.unwrap_or_else(|| {
        cpus.max(1)
            .saturating_mul(GLIBC_ARENA_TEST)
            .max(GLIBC_ARENA_TEST + 1)
    })
}

/// The arena limit of this process: [`glibc_arena_limit`] with its
/// environment (what glibc read at exec, unless the process changed it
/// since) and the calling thread's affinity mask now (`sched_getaffinity`,
/// as glibc reads it; all configured CPUs when it cannot be read, more
/// than glibc would see). A thread pinned later sees fewer CPUs, so fewer
/// arenas: read before pinning, this is the most.
pub fn arena_limit() -> u64 {
    let var = |k: &str| std::env::var(k).ok();
    glibc_arena_limit(
        glibc_arena_max(
            var("MALLOC_ARENA_MAX").as_deref(),
            var("GLIBC_TUNABLES").as_deref(),
        ),
        affinity_cpus(),
    )
}

/// CPUs in the calling thread's affinity mask, or all configured CPUs.
fn affinity_cpus() -> u64 {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, filled by the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            let n = libc::CPU_COUNT(&set);
            if n > 0 {
                return n as u64;
            }
        }
        libc::sysconf(libc::_SC_NPROCESSORS_CONF).max(1) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_max_as_glibc_reads_it() {
        let max = glibc_arena_max;
        assert_eq!(max(None, None), None);
        assert_eq!(max(Some("1"), None), Some(1));
        assert_eq!(max(Some("4"), None), Some(4));
        // _dl_strtoul: blanks, a prefix of digits, hex and octal.
        assert_eq!(max(Some(" 4x"), None), Some(4));
        assert_eq!(max(Some("0x10"), None), Some(16));
        assert_eq!(max(Some("010"), None), Some(8));
        // Garbage and 0 are below minval 1: as if unset.
        assert_eq!(max(Some("many"), None), None);
        assert_eq!(max(Some(""), None), None);
        assert_eq!(max(Some("0"), None), None);
        // The tunable among others wins over the alias; of several the last.
        let t =
            "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=2:glibc.malloc.top_pad=67108864";
        assert_eq!(max(Some("4"), Some(t)), Some(2));
        assert_eq!(max(None, Some(t)), Some(2));
        assert_eq!(
            max(
                None,
                Some("glibc.malloc.arena_max=3:glibc.malloc.arena_max=5")
            ),
            Some(5)
        );
        // An invalid tunable leaves MALLOC_ARENA_MAX in force; others and
        // names that only start alike do not count.
        assert_eq!(max(Some("4"), Some("glibc.malloc.arena_max=x")), Some(4));
        assert_eq!(
            max(
                Some("4"),
                Some("glibc.malloc.arena_max_=1:arena_max=1:glibc.malloc.arena_test=1")
            ),
            Some(4)
        );
        assert_eq!(max(None, Some("glibc.malloc.arena_max")), None);
    }

    #[test]
    fn the_limit_by_default_and_set() {
        // The default: 8 per CPU, at least 9 (arena_test + 1); the main
        // arena is one of them.
        assert_eq!(glibc_arena_limit(None, 1), 9);
        assert_eq!(glibc_arena_limit(None, 2), 16);
        assert_eq!(glibc_arena_limit(None, 0), 9);
        assert_eq!(glibc_arena_limit(Some(4), 2), 4);
        assert_eq!(glibc_arena_limit(Some(1), 64), 1);
        assert!(arena_limit() >= 1);
    }
}
