//! Room for one more `std::thread` under `RLIMIT_AS` and `RLIMIT_DATA`,
//! checked before it is created ([`ThreadRoom`], [`spawn_std`]).
//!
//! # Why
//!
//! A std thread maps two things: its stack (glibc, in `pthread_create`:
//! the stack and its guard page) and, first thing in the new thread, the
//! alternate signal stack std gives it (`SIGSTKSZ` or the kernel's
//! `AT_MINSIGSTKSZ`, whichever is larger, plus a guard page; 12 KiB on
//! x86-64). When the stack cannot be mapped, `pthread_create` fails with
//! EAGAIN and `Builder::spawn` returns the error: a failure the caller
//! can count. When the stack fits but the signal stack does not (less
//! than those 12 KiB left beside it), std panics in the new thread
//! ("failed to allocate an alternative stack") outside any `catch_unwind`
//! and the whole process aborts. Measured on kernel 6.18 and glibc 2.36
//! with `herd agent --mode thread --force` under `prlimit --as`: of 9
//! limits one page apart at the edge, 3 aborted (exit 134), 4 counted the
//! failure, 2 created the thread.
//!
//! So a caller that runs threads up to those limits on purpose asks
//! first: [`ThreadRoom::claim`] reads the limits and the process's usage
//! and refuses ([`NoRoom`], a [`Diagnosis`] naming the limit, with EAGAIN,
//! what `pthread_create` says at that limit) unless the whole thread fits
//! with a margin. A thread not created is then counted like one
//! `pthread_create` refused.
//!
//! # What a thread needs
//!
//! Under `RLIMIT_AS` (the `mmap`s, `may_expand_vm`): the stack, its guard
//! page, the signal stack and its guard page, and a malloc arena's
//! reservation ([`ARENA_RESERVE_BYTES`], `PROT_NONE`): a new thread's
//! first `malloc` (glibc's `pthread_getattr_np` in std's start-up, before
//! the signal stack is mapped) makes it an arena of its own while fewer
//! than glibc's limit exist (8 per CPU). Under `RLIMIT_DATA` (private
//! writable mappings): the stack, the signal stack with its guard page
//! (mapped writable, then the guard made `PROT_NONE`), and the arena's
//! first heap ([`ARENA_DATA_BYTES`]). On top, a margin ([`MARGIN_BYTES`])
//! for what the process maps meanwhile that is not a thread (a large
//! `malloc`, the heap growing).
//!
//! # Arenas
//!
//! The arena is counted only while glibc may still make one. It makes at
//! most `limit - 1` in the process's life ([`super::arena_limit`]: 8 per
//! CPU, at least 9, or `glibc.malloc.arena_max` from `GLIBC_TUNABLES`,
//! else `MALLOC_ARENA_MAX`; 1: none), never frees one, and below the
//! limit gives each new thread an arena no other thread is attached to:
//! a new one, or one of an exited thread (`arena_get2`: the free list
//! first; `reused_arena` shares one only once the limit is reached). So
//! when `n` claimed threads are alive at once, each allocating from an
//! arena other than the main one ([`Claim::started`] allocates once and
//! reads the chunk's `NON_MAIN_ARENA` bit), either the limit was reached
//! or glibc has made at least `n` arenas: at most `limit - 1 - n` are
//! left to make, with `n` the most such threads alive at once so far
//! ([`Started`] counts them). This is an upper bound of the truth:
//! arenas made by threads not claimed, or held by threads no longer
//! alive, only make the truth smaller. (Counting every claimed thread
//! that started would not be: a thread that took an exited thread's
//! arena made none.) Threads being created each promise one arena, and
//! together no more than are left.
//!
//! Still conservative: while arenas are left, every claim counts one
//! though its thread may take a freed arena, and under a limit too small
//! for all of them (on 2 CPUs 15 arenas reserve 960 MiB) glibc's arena
//! `mmap` fails at the edge, the thread runs without one, and arenas stay
//! "left": each claim keeps counting 64 MiB, so threads are refused from
//! about 64 MiB below the limit, where a thread without an arena would
//! fit. With `MALLOC_ARENA_MAX=1` (or the tunable) none is counted.
//!
//! # Threads being created at once
//!
//! The usage is read from `/proc/self/statm` (`VmSize`, and data plus
//! stack, which is `VmData` and the main thread's stack: a little more
//! than `RLIMIT_DATA` counts, so the check errs towards refusing). It does
//! not show what threads being created will map: the stack of one whose
//! `pthread_create` is under way, the signal stack of one that has not
//! run yet (on 2 CPUs a spawner makes several before they run). So every
//! claim is added to a process-wide count of bytes promised ([`Claims`])
//! *before* the promises and then the usage are read, and the check is
//! `usage + promised + margin <= limit`: of two claims racing, each sees
//! the other's promise or its mapping, or both (counted twice: a refusal
//! too many, never an abort); a promise given back after its mapping is
//! made is seen, or else its mapping is (the usage is read after). A promise ends in two parts: the stack's when the spawn call
//! returned (the stack is then mapped and in `VmSize`, or never will be),
//! the rest when the new thread runs its closure (std mapped the signal
//! stack before it) and has allocated once (its arena is made).
//!
//! # Cost
//!
//! Two `getrlimit` and one read of `/proc/self/statm` per claim: 8 to
//! 10 µs a claim measured (release build, 20,000 claims in a loop, on a
//! shared 2-CPU VM), against tens of µs for the creation. Only for
//! callers that ask: herd in runs forced past its
//! pre-flight (`--force`) under a finite limit, `exitq::pool` when given a
//! room ([`crate::pool::PoolBuilder::thread_room`]).
//!
//! # Not covered
//!
//! Mappings of other code beyond the margin while a thread starts (a
//! `malloc` of more than [`MARGIN_BYTES`] that misses the heap), and
//! threads created without a claim (a library's own), can still take the
//! last room between a check and a signal stack. So can an arena made
//! later by a claimed thread whose first one could not be mapped (glibc
//! tries again at its next `malloc`, outside any promise).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use super::read;
use super::{Diagnosis, Limit, DEFAULT_STACK};

/// Address space a new glibc malloc arena reserves (`HEAP_MAX_SIZE` on
/// 64-bit: twice the largest mmap threshold, 2 x 32 MiB), `PROT_NONE`:
/// counted by `RLIMIT_AS`, not by `RLIMIT_DATA`.
pub const ARENA_RESERVE_BYTES: u64 = 64 << 20;

/// Private writable memory a new glibc malloc arena commits at once (its
/// first heap's top), measured: 132 kB more `VmData` per thread for the
/// first threads that allocate, none past the arena limit.
pub const ARENA_DATA_BYTES: u64 = 132 << 10;

/// Room kept free beyond a thread's own needs, under each limit, for what
/// the process maps meanwhile that is not a thread (module docs).
pub const MARGIN_BYTES: u64 = 1 << 20;

/// Address space promised to threads being created (module docs), less
/// their arenas ([`STARTING`]).
static PROMISED_AS: AtomicU64 = AtomicU64::new(0);
/// Private writable memory promised to threads being created, less
/// their arenas.
static PROMISED_DATA: AtomicU64 = AtomicU64::new(0);
/// Claimed threads being created that have not allocated yet: each may
/// make one arena, while [`arenas_left`] allows (module docs).
static STARTING: AtomicU64 = AtomicU64::new(0);
/// Claimed threads alive that allocate from an arena other than the main
/// one ([`Started`]).
static HOLDERS: AtomicU64 = AtomicU64::new(0);
/// The most [`HOLDERS`] at once so far: at least that many arenas beside
/// the main one have been made (module docs).
static HOLDERS_PEAK: AtomicU64 = AtomicU64::new(0);

/// The new malloc arenas glibc may still make, at most, under an arena
/// limit of `limit` ([`super::arena_limit`], the main arena one of them)
/// when `peak` claimed threads alive at once have allocated from arenas
/// of their own: glibc made at least `peak` arenas beside the main one
/// (module docs), and makes no more than `limit - 1` in the process's
/// life.
fn arenas_left(limit: u64, peak: u64) -> u64 {
    limit.saturating_sub(1).saturating_sub(peak)
}

/// The arenas `starting` claimed threads being created can still make:
/// one each, and no more than are `left` ([`arenas_left`]).
fn arenas_promised(starting: u64, left: u64) -> u64 {
    starting.min(left)
}

/// Checks the room for std threads under `RLIMIT_AS` and `RLIMIT_DATA`
/// before they are created (module docs).
#[derive(Debug, Clone, Copy)]
pub struct ThreadRoom {
    /// The stack of a thread built without a size: std's (2 MiB, or
    /// `RUST_MIN_STACK`, read once as std does).
    default_stack: u64,
    /// glibc's malloc arena limit, the main arena one of them
    /// ([`super::arena_limit`]; 1: no thread makes an arena).
    arena_limit: u64,
    /// The page size.
    page: u64,
    /// std's signal stack, without its guard page.
    sigstack: u64,
}

/// What one thread takes under each limit, in the two parts a promise
/// ends in (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Need {
    /// Address space and data of the stack.
    stack: (u64, u64),
    /// Address space and data of the rest: signal stack and guard.
    start: (u64, u64),
    /// A malloc arena ([`ARENA_RESERVE_BYTES`], [`ARENA_DATA_BYTES`]):
    /// while glibc may still make one.
    arena: bool,
}

impl Need {
    /// Address space and data, all told.
    fn all(&self) -> (u64, u64) {
        let (arena_as, arena_data) = if self.arena {
            (ARENA_RESERVE_BYTES, ARENA_DATA_BYTES)
        } else {
            (0, 0)
        };
        (
            self.stack.0 + self.start.0 + arena_as,
            self.stack.1 + self.start.1 + arena_data,
        )
    }
}

impl ThreadRoom {
    /// A check for this process, or `None` when neither `RLIMIT_AS` nor
    /// `RLIMIT_DATA` is finite now (then there is nothing to check).
    pub fn new() -> Option<ThreadRoom> {
        if read::rlimit(libc::RLIMIT_AS).is_none() && read::rlimit_data().is_none() {
            return None;
        }
        Some(ThreadRoom::here())
    }

    /// The check with this process's sizes, whatever the limits.
    fn here() -> ThreadRoom {
        // SAFETY: getauxval has no preconditions.
        let minsig = unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) };
        let page = read::page_size();
        ThreadRoom {
            default_stack: std_stack_bytes(),
            arena_limit: super::arena_limit(),
            page,
            // What std maps (`stack_overflow::sigstack_size`).
            sigstack: round_up((libc::SIGSTKSZ as u64).max(minsig), page),
        }
    }

    /// What a thread of `stack` bytes (`None`: std's default) needs, when
    /// glibc may still make `arenas_left` new arenas.
    fn need(&self, stack: Option<u64>, arenas_left: u64) -> Need {
        let stack = round_up(stack.unwrap_or(self.default_stack), self.page);
        let page = self.page;
        Need {
            stack: (stack + page, stack),
            start: (self.sigstack + page, self.sigstack + page),
            arena: arenas_left > 0,
        }
    }

    /// Claims the room for one thread of `stack` bytes (`None`: std's
    /// default), or says which limit leaves too little. Reads both limits
    /// now and `/proc/self/statm`.
    pub fn claim(&self, stack: Option<u64>) -> Result<Claims, NoRoom> {
        let bare = self.need(stack, 0);
        // Promised, then the promises read, then the usage (module docs).
        let claims = Claims {
            stack: Claim::promise(bare.stack, false),
            start: Claim::promise(bare.start, true),
        };
        let promised = (
            PROMISED_AS.load(Ordering::SeqCst),
            PROMISED_DATA.load(Ordering::SeqCst),
        );
        let starting = STARTING.load(Ordering::SeqCst);
        let left = arenas_left(self.arena_limit, HOLDERS_PEAK.load(Ordering::SeqCst));
        let need = self.need(stack, left);
        let arenas = arenas_promised(starting, left);
        let promised = (
            promised
                .0
                .saturating_add(arenas.saturating_mul(ARENA_RESERVE_BYTES)),
            promised
                .1
                .saturating_add(arenas.saturating_mul(ARENA_DATA_BYTES)),
        );
        let usage = Usage::now();
        let limits = (read::rlimit(libc::RLIMIT_AS), read::rlimit_data());
        match self.verdict(need, limits, usage, promised) {
            None => Ok(claims),
            Some(d) => Err(NoRoom(d)),
        }
    }

    /// `None` when a thread needing `need` fits under `limits` (`RLIMIT_AS`,
    /// `RLIMIT_DATA`) beside `usage` and the bytes `promised` (its own
    /// included, arenas too), else the diagnosis of the first limit it does not fit.
    fn verdict(
        &self,
        need: Need,
        limits: (Option<u64>, Option<u64>),
        usage: Usage,
        promised: (u64, u64),
    ) -> Option<Diagnosis> {
        let own = need.all();
        let checks = [
            (
                Limit::RlimitAs,
                limits.0,
                usage.address_space,
                promised.0,
                own.0,
                "of address space in use (VmSize)",
            ),
            (
                Limit::RlimitData,
                limits.1,
                usage.data,
                promised.1,
                own.1,
                "of private writable memory and stack in use (VmData + VmStk)",
            ),
        ];
        for (limit, lim, used, promised, own, what) in checks {
            let (Some(lim), Some(used)) = (lim, used) else {
                continue;
            };
            let want = used.saturating_add(promised).saturating_add(MARGIN_BYTES);
            if want <= lim {
                continue;
            }
            let others = promised.saturating_sub(own);
            let left = lim.saturating_sub(used.saturating_add(others));
            let detail = format!(
                "{name} {lim} nearly reached: {used} bytes {what} and {others} promised to \
                 threads being created leave {left}, and a std thread needs {own} ({parts}) \
                 plus {MARGIN_BYTES} kept for other mappings: not created, as std aborts the \
                 whole process when a thread gets its stack but not its signal stack",
                name = limit.name(),
                parts = self.parts(limit, need),
            );
            return Some(Diagnosis {
                errno: libc::EAGAIN,
                limit,
                detail,
            });
        }
        None
    }

    /// What a thread needs under `limit`, in words.
    fn parts(&self, limit: Limit, need: Need) -> String {
        let stack = need.stack.1;
        let sig = self.sigstack;
        let arena = match (need.arena, limit) {
            (false, _) => String::new(),
            (true, Limit::RlimitAs) => {
                format!(", a malloc arena's reservation {ARENA_RESERVE_BYTES}")
            }
            (true, _) => format!(", a malloc arena's first heap {ARENA_DATA_BYTES}"),
        };
        match limit {
            Limit::RlimitAs => format!(
                "stack {stack} and guard page, std's signal stack {sig} and guard page{arena}"
            ),
            _ => format!("stack {stack}, std's signal stack {sig} and its guard page{arena}"),
        }
    }
}

/// The process's usage that the limits cap, from one read of
/// `/proc/self/statm`.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    /// `VmSize`, bytes (`RLIMIT_AS`).
    address_space: Option<u64>,
    /// Data and stack, bytes (`RLIMIT_DATA` caps the data part).
    data: Option<u64>,
}

impl Usage {
    fn now() -> Usage {
        let mut buf = [0u8; 128];
        let Some(text) = read::read_into("/proc/self/statm", &mut buf) else {
            return Usage::default();
        };
        Usage::parse(text, read::page_size())
    }

    /// `size resident shared text lib data dt`, in pages.
    fn parse(statm: &[u8], page: u64) -> Usage {
        let field = |i: usize| {
            let f = statm.split(|&b| b == b' ').nth(i)?;
            let f = std::str::from_utf8(f).ok()?.trim();
            f.parse::<u64>().ok()?.checked_mul(page)
        };
        Usage {
            address_space: field(0),
            data: field(5),
        }
    }
}

/// The stack of a `std::thread` built without a size: std's default,
/// 2 MiB, or `RUST_MIN_STACK`, which std reads the same way.
pub fn std_stack_bytes() -> u64 {
    std::env::var("RUST_MIN_STACK")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_STACK)
}

fn round_up(n: u64, page: u64) -> u64 {
    n.div_ceil(page).saturating_mul(page)
}

/// The room claimed for one thread, in the two parts it is given back in
/// (module docs).
#[derive(Debug)]
#[must_use = "dropping the claims gives the room back at once"]
pub struct Claims {
    /// The stack's: drop it once the spawn call has returned.
    pub stack: Claim,
    /// The rest: move it into the new thread and call
    /// [`Claim::started`] there first thing (dropped with the closure
    /// when the thread is not created).
    pub start: Claim,
}

/// Bytes promised to a thread being created, given back on drop.
#[derive(Debug)]
pub struct Claim {
    address_space: u64,
    data: u64,
    /// Counted in [`STARTING`]: the thread may still make an arena.
    starting: bool,
}

impl Claim {
    fn promise((address_space, data): (u64, u64), starting: bool) -> Claim {
        // SeqCst: a claim's promise and its reads of the promises and the
        // usage are ordered against every other claim's and every
        // thread's start (module docs).
        PROMISED_AS.fetch_add(address_space, Ordering::SeqCst);
        PROMISED_DATA.fetch_add(data, Ordering::SeqCst);
        if starting {
            STARTING.fetch_add(1, Ordering::SeqCst);
        }
        Claim {
            address_space,
            data,
            starting,
        }
    }

    /// On the new thread, first thing: std has mapped its signal stack;
    /// one allocation gives it its malloc arena (or finds it); then the
    /// room is given back, now counted in the usage. Keep what it returns
    /// until the thread ends.
    pub fn started(self) -> Started {
        let holder = allocates_from_own_arena();
        if holder {
            let now = HOLDERS.fetch_add(1, Ordering::SeqCst) + 1;
            HOLDERS_PEAK.fetch_max(now, Ordering::SeqCst);
        }
        drop(self);
        Started { holder }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        PROMISED_AS.fetch_sub(self.address_space, Ordering::SeqCst);
        PROMISED_DATA.fetch_sub(self.data, Ordering::SeqCst);
        if self.starting {
            STARTING.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A claimed thread that has started ([`Claim::started`]): while it is
/// kept, the thread counts among those holding an arena of their own if
/// it does (module docs). Drop it when the thread's work is done.
#[derive(Debug)]
#[must_use = "keep it until the thread ends"]
pub struct Started {
    holder: bool,
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.holder {
            HOLDERS.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Bytes asked of `malloc` to see which arena serves this thread: above
/// the tcache's sizes (1032 bytes by default), so it is carved from the
/// thread's arena, not a chunk another thread freed here.
#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(miri)
))]
const PROBE_BYTES: usize = 4096;

/// Allocates once (which gives a new thread its arena) and says whether
/// the memory came from a glibc arena other than the main one: the
/// `NON_MAIN_ARENA` bit (4) of the chunk's size word, just before the
/// memory, set, `IS_MMAPPED` (2) not (`malloc/malloc.c`; a thread whose
/// new arena could not be mapped gets `mmap`ed chunks, one served by the
/// main arena neither bit).
#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(miri)
))]
fn allocates_from_own_arena() -> bool {
    // SAFETY: a plain allocation, checked for null, freed once below.
    let p = unsafe { libc::malloc(PROBE_BYTES) };
    if p.is_null() {
        return false;
    }
    // SAFETY: glibc's malloc returns memory just after its chunk's size
    // word, which stays mapped and readable while the chunk is allocated
    // (until the `free` below).
    let size = unsafe { word_before(p) };
    // SAFETY: `p` came from `malloc` and is freed once.
    unsafe { libc::free(p) };
    size & 0b110 == 0b100
}

/// The 8 bytes just before `p`, read in assembly: they are glibc's chunk
/// header, outside the allocation `malloc` returned, which Rust code must
/// not read through `p` (an out-of-bounds read: undefined behaviour,
/// whatever the memory is); the instruction only reads bytes.
///
/// # Safety
///
/// The 8 bytes before `p` are mapped and readable, and no other thread
/// writes them meanwhile.
#[cfg(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(miri)
))]
#[inline]
unsafe fn word_before(p: *const libc::c_void) -> usize {
    let w: usize;
    // SAFETY: one 8-byte read at `p - 8` (the caller's contract); nothing
    // is written, the stack and flags are untouched.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "mov {w}, qword ptr [{p} - 8]",
            p = in(reg) p,
            w = out(reg) w,
            options(nostack, readonly, preserves_flags),
        );
    }
    // SAFETY: as above (`ldur`: the unscaled, signed-offset load).
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            "ldur {w}, [{p}, #-8]",
            p = in(reg) p,
            w = out(reg) w,
            options(nostack, readonly, preserves_flags),
        );
    }
    w
}

/// Not glibc on x86-64 or AArch64 (or miri, which runs no assembly):
/// allocates once, and counts no arena as held (so arenas are counted for
/// every claim while the limit allows).
#[cfg(not(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(miri)
)))]
fn allocates_from_own_arena() -> bool {
    drop(std::hint::black_box(Box::new(0u64)));
    false
}

/// A std thread not created: it might not have had room for its signal
/// stack ([`ThreadRoom::claim`]). As an [`io::Error`] (kind
/// `OutOfMemory`, no OS error number) it reads as its diagnosis;
/// [`NoRoom::of`] finds it in one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom(pub Diagnosis);

impl NoRoom {
    /// The refusal inside `e`, if `e` is one.
    pub fn of(e: &io::Error) -> Option<&NoRoom> {
        e.get_ref()?.downcast_ref::<NoRoom>()
    }
}

impl fmt::Display for NoRoom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for NoRoom {}

impl From<NoRoom> for io::Error {
    fn from(r: NoRoom) -> io::Error {
        io::Error::new(io::ErrorKind::OutOfMemory, r)
    }
}

/// `builder.spawn(f)`, after claiming the room for the thread when `room`
/// is given (`stack`: the size given to `builder`, `None`: std's
/// default). Not created for want of room, the error is a [`NoRoom`].
pub fn spawn_std<F, T>(
    room: Option<&ThreadRoom>,
    builder: thread::Builder,
    stack: Option<u64>,
    f: F,
) -> io::Result<thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let Some(room) = room else {
        return builder.spawn(f);
    };
    let Claims { stack, start } = room.claim(stack)?;
    let spawned = builder.spawn(move || {
        let _started = start.started();
        f()
    });
    // The stack is mapped now (and in the usage), or never will be.
    drop(stack);
    spawned
}

#[cfg(test)]
mod tests;
