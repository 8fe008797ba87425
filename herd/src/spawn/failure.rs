//! Counting thread-creation failures by error number and limit.
//!
//! Which limit stopped a creation is exitq's diagnosis
//! ([`exitq::limits`]): right after the failure it reads each limit that
//! can stop `pthread_create` (`vm.max_map_count`, `RLIMIT_NPROC`, the
//! cgroup's `pids.max`, `kernel.threads-max`, `kernel.pid_max`,
//! `RLIMIT_AS`, `RLIMIT_DATA`) and the counter it caps, and names the one
//! at its ceiling with both numbers, or lists them all when none is
//! (memory). herd counts
//! the failures of a run by that limit ([`Failures`]) and diagnoses once
//! per wave with a failure, so the cost (reading `/proc/self/maps`,
//! scanning `/proc` for `RLIMIT_NPROC`) stays off the common path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use exitq::limits::{errno_name, Limit};
use exitq::limits::{Diagnosis, NoRoom, Readings};

use super::fit::{self, TaskLimit};
use crate::host::HostFacts;

/// Creation failures with the same error number and limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureGroup {
    /// Error number (e.g. 11).
    pub errno: i32,
    /// Its symbolic name (e.g. `EAGAIN`).
    pub errno_name: String,
    /// The limit that explains it (in JSON its [`Limit::key`], e.g.
    /// `rlimit_nproc`).
    #[serde(with = "limit_key")]
    pub limit: Limit,
    /// `limit.name()`, for readers of the JSON.
    pub limit_name: String,
    /// How many creations failed this way.
    pub count: u64,
    /// First wave where it happened.
    pub first_wave: u32,
    /// Threads created successfully before the first failure of this kind.
    pub created_before: u64,
    /// The evidence: the limit, its value and the counter at the first
    /// failure (`RLIMIT_NPROC 20 reached: user 65534 has 20 tasks`).
    pub evidence: String,
}

/// A [`Limit`] as its key in JSON (`rlimit_nproc`).
mod limit_key {
    use super::Limit;
    use serde::{de::Error as _, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(limit: &Limit, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(limit.key())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Limit, D::Error> {
        let key = String::deserialize(d)?;
        Limit::from_key(&key).ok_or_else(|| D::Error::custom(format!("unknown limit {key:?}")))
    }
}

/// Counts failures by (errno, limit) and keeps the evidence.
#[derive(Debug, Default)]
pub struct Failures {
    groups: BTreeMap<(i32, Limit), FailureGroup>,
    /// Last diagnosis per errno, with the wave and created count at the time.
    cached: BTreeMap<i32, (u32, u64, Diagnosis)>,
    /// Diagnoses made (each reads the limits and counters).
    diagnoses: u64,
    /// Creations refused for want of room ([`Failures::record_refused`]).
    refused: u64,
}

impl Failures {
    /// Records a failure of `errno` in `wave` with `created` threads made
    /// so far. Diagnoses the first failure of each errno, then again only
    /// in a later wave where some thread was created since (the situation
    /// may have changed); a run stuck at one limit (the leak mode after its
    /// wall) is diagnosed once, so a 65K-line `/proc/self/maps` is not
    /// re-read for every failing wave.
    pub fn record(&mut self, errno: i32, wave: u32, created: u64, ctx: &DiagContext) {
        let fresh = self
            .needs_diagnosis(errno, wave, created)
            .then(|| ctx.diagnose(errno));
        self.record_with(errno, wave, created, fresh);
    }

    /// Whether a failure of `errno` in `wave` with `created` threads made
    /// so far needs a diagnosis of its own ([`Failures::record`]'s rule),
    /// for a caller that diagnoses outside its lock and then calls
    /// [`Failures::record_with`].
    pub fn needs_diagnosis(&self, errno: i32, wave: u32, created: u64) -> bool {
        !matches!(self.cached.get(&errno), Some((w, c, _)) if *w == wave || *c == created)
    }

    /// Records a failure as [`Failures::record`] does, with the diagnosis
    /// `fresh` made for it, or `None` to reuse the last of its errno (a
    /// first failure of an errno without one is recorded as unknown).
    pub fn record_with(&mut self, errno: i32, wave: u32, created: u64, fresh: Option<Diagnosis>) {
        if let Some(d) = fresh {
            self.diagnoses += 1;
            self.cached.insert(errno, (wave, created, d));
        }
        let (_, _, d) = self
            .cached
            .entry(errno)
            .or_insert_with(|| (wave, created, Readings::default().diagnose(errno, None)));
        Self::count(&mut self.groups, d, wave, created);
    }

    /// Records a creation herd did not attempt, for want of room for
    /// std's signal stack ([`exitq::limits::NoRoom`]: its diagnosis came
    /// with the refusal, read from `/proc/self/statm`): counted with the
    /// failures of its errno and limit, and not kept for the next failure
    /// of its errno, whose cause it may not be.
    pub fn record_refused(&mut self, refused: &NoRoom, wave: u32, created: u64) {
        self.refused += 1;
        Self::count(&mut self.groups, &refused.0, wave, created);
    }

    /// One more failure in the group of `d`'s errno and limit.
    fn count(
        groups: &mut BTreeMap<(i32, Limit), FailureGroup>,
        d: &Diagnosis,
        wave: u32,
        created: u64,
    ) {
        let errno = d.errno;
        // The evidence is copied only into a new group: past a limit every
        // creation fails (the leak mode: hundreds of thousands), and this
        // runs once per failure, in the measured phase.
        groups
            .entry((errno, d.limit))
            .or_insert_with(|| FailureGroup {
                errno,
                errno_name: errno_name(errno).to_string(),
                limit: d.limit,
                limit_name: d.limit.name().to_string(),
                count: 0,
                first_wave: wave,
                created_before: created,
                evidence: d.detail.clone(),
            })
            .count += 1;
    }

    /// Diagnoses made so far (at most one per errno and wave).
    pub fn diagnoses(&self) -> u64 {
        self.diagnoses
    }

    /// Creations refused for want of room, each with its own diagnosis
    /// (not among [`Failures::diagnoses`]).
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Total failures.
    pub fn total(&self) -> u64 {
        self.groups.values().map(|g| g.count).sum()
    }

    /// The groups, most frequent first.
    pub fn groups(&self) -> Vec<FailureGroup> {
        let mut v: Vec<_> = self.groups.values().cloned().collect();
        v.sort_by_key(|g| std::cmp::Reverse(g.count));
        v
    }
}

/// What a diagnosis needs to know about the run.
#[derive(Debug, Clone)]
pub struct DiagContext {
    /// Stack size of each thread, bytes (for `RLIMIT_AS`).
    pub stack_bytes: u64,
    /// Reads the limits and counters ([`Readings::now`]; tests set their
    /// own).
    pub read: fn() -> Readings,
}

impl DiagContext {
    /// Diagnoses from the limits and counters read now.
    pub fn new(stack_bytes: u64) -> DiagContext {
        DiagContext {
            stack_bytes,
            read: Readings::now,
        }
    }

    /// The limit behind a failure with `errno` ([`exitq::limits`]).
    pub fn diagnose(&self, errno: i32) -> Diagnosis {
        (self.read)().diagnose(errno, Some(self.stack_bytes))
    }
}

/// Mappings one running `std::thread` holds: its stack and guard page
/// (glibc), and the alternate signal stack Rust's std maps for it and that
/// stack's guard page. Measured: `scenario::load`'s test counts
/// `/proc/self/maps` around 100 parked threads.
pub(crate) const STD_THREAD_MAPPINGS: u64 = 4;

/// Address space one `std::thread` takes beyond its stack: the guard
/// page glibc maps below it, and the alternate signal stack Rust's std
/// maps when the thread starts (`SIGSTKSZ`, or more on a CPU with large
/// vector registers, `AT_MINSIGSTKSZ`) with its own guard page. Rounded
/// up: an allowance, not a measurement.
pub(crate) const STD_THREAD_EXTRA_BYTES: u64 = 64 << 10;

/// Private writable memory (`VmData`, what `RLIMIT_DATA` caps) one
/// `std::thread` takes beyond its stack: std's alternate signal stack
/// (measured 8 kB on kernel 6.18 and glibc 2.36: `SIGSTKSZ`; more with
/// large vector registers, `AT_MINSIGSTKSZ`). Neither guard page counts
/// (`PROT_NONE`); the thread's malloc arena is counted apart
/// ([`super::fit::arena_data_bytes`]). Rounded up: an allowance.
pub(crate) const STD_THREAD_DATA_EXTRA_BYTES: u64 = 64 << 10;

/// The stack of a `std::thread` built without a size: std's default,
/// 2 MiB, or `RUST_MIN_STACK`, which std reads the same way.
pub(crate) use exitq::limits::std_stack_bytes;

/// The address space one `std::thread` of this process takes: its stack
/// ([`std_stack_bytes`]) and [`STD_THREAD_EXTRA_BYTES`].
pub(crate) fn std_thread_bytes() -> u64 {
    std_stack_bytes().saturating_add(STD_THREAD_EXTRA_BYTES)
}

/// The private writable memory one `std::thread` of this process
/// takes: its stack ([`std_stack_bytes`]) and
/// [`STD_THREAD_DATA_EXTRA_BYTES`].
pub(crate) fn std_thread_data_bytes() -> u64 {
    std_stack_bytes().saturating_add(STD_THREAD_DATA_EXTRA_BYTES)
}

/// What `threads` more threads alive at once take of the process: per
/// thread, mappings (`vm.max_map_count`), bytes of address space
/// (`RLIMIT_AS`) and of private writable memory (`RLIMIT_DATA`), and what
/// the process holds of each already.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ThreadCost {
    /// Mappings per thread.
    pub maps_per_thread: u64,
    /// Mappings of the process now (with any slack the caller keeps).
    pub maps_now: u64,
    /// Address space per thread, bytes.
    pub bytes_per_thread: u64,
    /// Address space of the process now (`VmSize`, with any slack and
    /// the malloc arenas counted in `arenas`).
    pub bytes_now: u64,
    /// New malloc arenas the threads can make ([`super::fit::new_arenas`]),
    /// whose reservations (64 MiB each) `bytes_now` counts: named in the
    /// `RLIMIT_AS` finding with the ways out.
    pub arenas: u64,
    /// Private writable memory per thread, bytes.
    pub data_per_thread: u64,
    /// Private writable memory of the process now (`VmData`, with any
    /// slack).
    pub data_now: u64,
}

/// The limits that `threads` more threads alive at once, each costing
/// what `cost` says, would exceed, with the numbers (empty: they fit):
/// [`super::fit`]'s task limits (`kernel.threads-max`, `kernel.pid_max`,
/// the cgroup's `pids.max`, `RLIMIT_NPROC` unless root), `vm.max_map_count`
/// minus the mappings the process has already, `RLIMIT_AS` minus the
/// address space it has already, and `RLIMIT_DATA` minus the private
/// writable memory it has already; `herd storm`'s pre-flight tests the
/// same.
pub(crate) fn thread_limit_problems(
    facts: &HostFacts,
    threads: u64,
    cost: ThreadCost,
) -> Vec<String> {
    let ThreadCost {
        maps_per_thread,
        maps_now,
        bytes_per_thread,
        bytes_now,
        arenas,
        data_per_thread,
        data_now,
    } = cost;
    let mut p: Vec<String> = fit::task_limits(facts, threads)
        .into_iter()
        .map(|l| match l {
            TaskLimit::ThreadsMax { tasks, max } => {
                format!("{tasks} tasks exist already and kernel.threads-max = {max}")
            }
            TaskLimit::PidMax { tasks, max } => {
                format!("{tasks} pids are in use and kernel.pid_max = {max}")
            }
            TaskLimit::CgroupPids { path, current, max } => {
                format!("cgroup {path} has {current} tasks and pids.max = {max}")
            }
            TaskLimit::RlimitNproc { mine, limit } => {
                format!("this user has {mine} tasks and RLIMIT_NPROC = {limit} (ulimit -u)")
            }
        })
        .collect();
    if let Some(m) = fit::mappings(facts, threads, maps_per_thread, maps_now) {
        if m.over {
            p.push(format!(
                "they need about {} memory mappings ({maps_per_thread} each), the process \
                 has {maps_now} and vm.max_map_count = {} leaves room for about {} threads",
                m.need, m.max, m.room
            ));
        }
    }
    if let Some(a) = fit::address_space(facts, threads, bytes_per_thread, bytes_now) {
        if a.over {
            let arena_note = if arenas == 0 {
                String::new()
            } else {
                format!(
                    ", {arenas} malloc arenas ({} each: {}) that glibc reserves for the first                      {arenas} new threads that allocate",
                    crate::host::human_bytes(fit::ARENA_RESERVE_BYTES),
                    crate::host::human_bytes(arenas.saturating_mul(fit::ARENA_RESERVE_BYTES))
                )
            };
            let ways_out = if arenas == 0 {
                ""
            } else {
                " (MALLOC_ARENA_MAX=1 makes glibc reserve no arena per thread; herd agent's                  --force runs anyway, checking each thread's room before creating it)"
            };
            p.push(format!(
                "they need about {} of address space ({} each: stack, guard page and signal                  stack), the process has {} (VmSize now{arena_note}, and what it keeps free for                  other mappings) and RLIMIT_AS = {} (ulimit -v) leaves room for about {}                  threads{ways_out}",
                crate::host::human_bytes(a.need),
                crate::host::human_bytes(bytes_per_thread),
                crate::host::human_bytes(bytes_now),
                crate::host::human_bytes(a.limit),
                a.room
            ));
        }
    }
    if let Some(d) = fit::data(facts, threads, data_per_thread, data_now) {
        if d.over {
            p.push(format!(
                "they need about {} of private writable memory ({} each: stack and signal \
                 stack; guard pages do not count), the process has {} (VmData, with what it \
                 keeps free for malloc's arenas and other data) and RLIMIT_DATA = {} \
                 (ulimit -d) leaves room for about {} threads",
                crate::host::human_bytes(d.need),
                crate::host::human_bytes(data_per_thread),
                crate::host::human_bytes(data_now),
                crate::host::human_bytes(d.limit),
                d.room
            ));
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings with every limit unknown, as root: every EAGAIN is
    /// "memory".
    fn nothing() -> Readings {
        Readings::default()
    }

    /// `nobody` at an `RLIMIT_NPROC` of 20.
    fn at_nproc() -> Readings {
        let mut r = Readings::default();
        r.uid = 65534;
        r.rlimit_nproc = Some(20);
        r.user_tasks = Some(20);
        r
    }

    fn ctx(read: fn() -> Readings) -> DiagContext {
        DiagContext {
            stack_bytes: 8 << 20,
            read,
        }
    }

    #[test]
    fn groups_by_errno_and_limit() {
        let c = ctx(nothing);
        let mut f = Failures::default();
        for _ in 0..3 {
            f.record(libc::EAGAIN, 7, 100, &c);
        }
        f.record(libc::EINVAL, 8, 100, &c);
        assert_eq!(f.total(), 4);
        let g = f.groups();
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].errno_name.as_str(), g[0].count), ("EAGAIN", 3));
        assert_eq!((g[0].first_wave, g[0].created_before), (7, 100));
        assert_eq!(g[0].limit_name, "memory");
        assert_eq!(g[1].limit, Limit::InvalidAttributes);
    }

    /// One diagnosis per errno and wave (and none again in a later wave
    /// where no thread was created since), however many failures.
    #[test]
    fn diagnoses_once_per_errno_and_wave() {
        let c = ctx(at_nproc);
        let mut f = Failures::default();
        for wave in 1..=3 {
            for i in 0..100 {
                f.record(
                    libc::EAGAIN,
                    wave,
                    40 * u64::from(wave) + u64::from(i > 50),
                    &c,
                );
            }
        }
        f.record(libc::EINVAL, 3, 200, &c);
        assert_eq!(f.total(), 301);
        assert_eq!(f.diagnoses(), 4, "3 waves of EAGAIN, one EINVAL");
        // A wave with no thread created since the last diagnosis: none.
        f.record(libc::EAGAIN, 4, 120, &c);
        assert_eq!(f.diagnoses(), 4);
        // The split form (diagnosed outside a lock) counts the same.
        assert!(f.needs_diagnosis(libc::EAGAIN, 5, 500));
        f.record_with(libc::EAGAIN, 5, 500, Some(c.diagnose(libc::EAGAIN)));
        assert!(!f.needs_diagnosis(libc::EAGAIN, 5, 501));
        assert_eq!(f.diagnoses(), 5);
    }

    #[test]
    fn a_group_names_the_limit_with_its_numbers_and_keeps_its_json_key() {
        let mut f = Failures::default();
        f.record(libc::EAGAIN, 1, 40, &ctx(at_nproc));
        let g = &f.groups()[0];
        assert_eq!(g.limit, Limit::RlimitNproc);
        assert_eq!(g.limit_name, "RLIMIT_NPROC");
        assert_eq!(
            g.evidence,
            "RLIMIT_NPROC 20 reached: user 65534 has 20 tasks"
        );
        // The JSON of results written before: `limit` is the snake_case key.
        let json = serde_json::to_value(g).unwrap();
        assert_eq!(json["limit"], "rlimit_nproc");
        let back: FailureGroup = serde_json::from_value(json).unwrap();
        assert_eq!(&back, g);
        for (key, limit) in [
            ("max_map_count", Limit::MaxMapCount),
            ("cgroup_pids_max", Limit::CgroupPidsMax),
            ("threads_max", Limit::ThreadsMax),
            ("pid_max", Limit::PidMax),
            ("rlimit_as", Limit::RlimitAs),
            ("memory", Limit::Memory),
            ("invalid_attributes", Limit::InvalidAttributes),
            ("permission", Limit::Permission),
            ("unknown", Limit::Unknown),
        ] {
            assert_eq!(limit.key(), key);
        }
        let mut bad = serde_json::to_value(g).unwrap();
        bad["limit"] = "nothing".into();
        assert!(serde_json::from_value::<FailureGroup>(bad).is_err());
    }
}
