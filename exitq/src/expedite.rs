//! The asymmetric barrier: membarrier(2) `PRIVATE_EXPEDITED` for the writer,
//! so readers can get away with a compiler fence; a fence fallback where the
//! kernel lacks it.
//!
//! # The pairing
//!
//! A reader's fast path is "store my state; compiler fence; read shared
//! data" (and the mirror image on exit). Such a store-then-load sequence
//! needs a full barrier between the two accesses to be ordered against a
//! writer that does the same in reverse (store-buffering). Instead of paying
//! for that barrier on every read-side entry, the writer calls
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: the kernel makes every
//! running thread of the process execute a full barrier (an IPI) and relies
//! on the context switch barrier for threads that are not running, before
//! the call returns. Each reader therefore behaves as if a full barrier had
//! been inserted at *some* point of its instruction stream, and every access
//! before that point is visible to the writer after the call, every access
//! after it sees what the writer did before the call. This is liburcu's
//! urcu-memb flavour, Linux's `sys_membarrier` use in user-space RCU, and
//! folly's `asymmetricHeavyBarrier`.
//!
//! # Modes
//!
//! * [`Expedite::Membarrier`]: require membarrier; readers use compiler
//!   fences only. Registration (`MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`)
//!   happens once per process, when the first such domain is built.
//! * [`Expedite::Fallback`]: no membarrier; readers execute a full fence
//!   (`fence(SeqCst)`, `mfence`/`dmb ish`) on entry and the writer a full
//!   fence where it would have called membarrier. Correct everywhere, with a
//!   read side roughly 10-20x more expensive.
//! * [`Expedite::Auto`] (default): membarrier if the kernel supports and
//!   accepts the registration, the fallback otherwise (ENOSYS on old
//!   kernels, EINVAL/EPERM under some sandboxes).
//!
//! The mode is fixed per [`Domain`](crate::Domain) when it is built, before
//! any reader of that domain exists, so a reader can never run the light
//! fast path against a writer that skips the membarrier.
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::cancel::NoCancel;
use crate::sync;

/// How the writer side forces readers' memory accesses into order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Expedite {
    /// membarrier(2) when available, fences otherwise (the default).
    #[default]
    Auto,
    /// Require membarrier(2) `PRIVATE_EXPEDITED`;
    /// [`DomainBuilder::try_build`](crate::DomainBuilder::try_build) fails without it.
    Membarrier,
    /// Never use membarrier: readers pay a full fence on entry.
    Fallback,
}

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> io::Result<libc::c_long> {
    #[cfg(test)]
    if cmd == MEMBARRIER_CMD_PRIVATE_EXPEDITED && tests::inject_failure() {
        return Err(io::Error::from_raw_os_error(libc::ENOMEM));
    }
    // SAFETY: membarrier takes (cmd, flags, cpu_id) by value and touches no
    // user memory; any failure is reported through errno.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Queries and registers `PRIVATE_EXPEDITED` once per process; the outcome
/// (Ok, or why not) is remembered.
///
/// Threads that ask at once may each register (registering twice is
/// harmless), and none waits for another: a `OnceLock` did, and a `fork()`
/// while another thread of the parent was inside it (the process's first
/// domain being built) left it "being initialized" forever in the child,
/// whose own first `Domain::new` then never returned (`tests/red2.rs`).
pub(crate) fn membarrier_registration() -> Result<(), io::ErrorKind> {
    /// 0: not known yet; `REG_OK`; `REG_UNSUPPORTED`; else 2 + the errno.
    static REGISTERED: AtomicU32 = AtomicU32::new(0);
    const REG_OK: u32 = 1;
    const REG_UNSUPPORTED: u32 = u32::MAX;
    // Acquire: pairs with the Release store below: the registration that
    // stored `REG_OK` has returned.
    let known = REGISTERED.load(Ordering::Acquire);
    let outcome = if known != 0 {
        known
    } else {
        let errno = |e: io::Error| e.raw_os_error().map_or(REG_UNSUPPORTED, |n| 2 + n as u32);
        let outcome = if cfg!(miri) || cfg!(exitq_loom) {
            REG_UNSUPPORTED
        } else {
            match membarrier(MEMBARRIER_CMD_QUERY) {
                Err(e) => errno(e),
                Ok(s) if s & MEMBARRIER_CMD_PRIVATE_EXPEDITED as libc::c_long == 0 => {
                    REG_UNSUPPORTED
                }
                Ok(_) => match membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) {
                    Err(e) => errno(e),
                    Ok(_) => REG_OK,
                },
            }
        };
        // Release: see the load above.
        REGISTERED.store(outcome, Ordering::Release);
        outcome
    };
    match outcome {
        REG_OK => Ok(()),
        REG_UNSUPPORTED => Err(io::ErrorKind::Unsupported),
        e => Err(io::Error::from_raw_os_error((e - 2) as i32).kind()),
    }
}

/// Whether membarrier(2) `PRIVATE_EXPEDITED` is usable in this process
/// (registering it on first call).
///
/// # Examples
///
/// ```
/// println!("membarrier: {}", exitq::membarrier_available());
/// ```
pub fn membarrier_available() -> bool {
    membarrier_registration().is_ok()
}

/// The fence pair a domain uses; chosen once when the domain is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fences {
    /// true: membarrier on the writer side, compiler fences for readers.
    pub(crate) membarrier: bool,
}

impl Fences {
    pub(crate) fn resolve(mode: Expedite) -> io::Result<Fences> {
        match mode {
            Expedite::Fallback => Ok(Fences { membarrier: false }),
            Expedite::Auto => Ok(Fences {
                membarrier: membarrier_registration().is_ok(),
            }),
            Expedite::Membarrier => match membarrier_registration() {
                Ok(()) => Ok(Fences { membarrier: true }),
                Err(kind) => Err(io::Error::new(
                    kind,
                    "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is not available \
                     (kernel < 4.14, or blocked by a seccomp filter); use Expedite::Auto \
                     or Expedite::Fallback",
                )),
            },
        }
    }

    /// The reader-side (light) barrier.
    #[inline(always)]
    pub(crate) fn light(self) {
        if self.membarrier {
            sync::compiler_fence();
        } else {
            sync::full_fence();
        }
    }

    /// The writer-side (heavy) barrier: after it returns, every reader has
    /// passed a full barrier (see the module docs). Never fails: a
    /// membarrier error is retried, then replaced (see `heavy_membarrier`).
    pub(crate) fn heavy(self) {
        if self.membarrier && !cfg!(exitq_loom) {
            heavy_membarrier();
        }
        sync::full_fence();
    }
}

/// membarrier(2) calls that failed after a successful registration, in this
/// process (reported in every domain's `DomainStats::membarrier_failures`).
static FAILURES: AtomicU64 = AtomicU64::new(0);

/// The process's membarrier failures so far.
pub(crate) fn failures() -> u64 {
    // Relaxed: a statistic.
    FAILURES.load(Ordering::Relaxed)
}

/// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`, which must not fail once registered.
///
/// The kernel can still refuse it (ENOMEM when it cannot allocate its CPU
/// mask; a seccomp filter installed after registration). Readers in
/// membarrier mode rely on it, so giving up is not an option, and
/// panicking would leave the grace period half started. Instead: report
/// the first failure on stderr, count every one, retry three times, and
/// then force the barrier another way: on x86_64 by a TLB shootdown
/// (dirtying a private page and revoking its access makes the kernel
/// interrupt every CPU running a thread of the process, and an interrupt
/// is a full barrier: the fallback .NET's `FlushProcessWriteBuffers` uses),
/// elsewhere (where TLB invalidation is broadcast without interrupts) by
/// retrying membarrier until it succeeds.
fn heavy_membarrier() {
    let mut failed = 0u32;
    loop {
        match membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) {
            Ok(_) => return,
            Err(e) => {
                // Relaxed: a statistic.
                if FAILURES.fetch_add(1, Ordering::Relaxed) == 0 {
                    // The report is a `write`, a cancellation point, and a
                    // thread's seal starts grace periods with its
                    // cancellation enabled (`GracePeriods::poll`): acting
                    // here, between claiming a grace period and publishing
                    // it, a cancellation left it claimed forever and every
                    // later grace period waited for it (`tests/red2.rs`).
                    let _no_cancel = NoCancel::new();
                    eprintln!(
                        "exitq: membarrier(PRIVATE_EXPEDITED) failed after registration ({e}); \
                         retrying, then falling back to a TLB-shootdown barrier"
                    );
                }
                failed += 1;
                if failed >= 3 && shootdown_barrier() {
                    return;
                }
                std::thread::yield_now();
            }
        }
    }
}

/// A heavy barrier by TLB shootdown (x86_64 only; false elsewhere or if the
/// page cannot be set up).
fn shootdown_barrier() -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::sync::Mutex;
        static PAGE: Mutex<usize> = Mutex::new(0);
        let mut page = PAGE.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        if *page == 0 {
            // SAFETY: a fresh anonymous private mapping; checked below.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return false;
            }
            *page = p as usize;
        }
        let p = *page as *mut libc::c_void;
        // SAFETY: `p` is our page of `size` bytes, mapped above and never
        // unmapped; only this function (under `PAGE`) touches it.
        unsafe {
            if libc::mprotect(p, size, libc::PROT_READ | libc::PROT_WRITE) != 0 {
                return false;
            }
            // Dirty it, so the kernel cannot skip the flush.
            std::ptr::write_volatile(
                p.cast::<u64>(),
                std::ptr::read_volatile(p.cast::<u64>()) + 1,
            );
            libc::mprotect(p, size, libc::PROT_NONE) == 0
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static FAIL_NEXT: Cell<u32> = const { Cell::new(0) };
    }

    /// Whether the next PRIVATE_EXPEDITED call on this thread is to fail.
    pub(super) fn inject_failure() -> bool {
        let n = FAIL_NEXT.get();
        FAIL_NEXT.set(n.saturating_sub(1));
        n > 0
    }

    /// A membarrier that fails after registration neither panics nor
    /// returns without a barrier: it is counted, retried, and then (after
    /// three failures) replaced by the TLB-shootdown barrier.
    #[test]
    fn a_failing_membarrier_is_retried_then_replaced() {
        if cfg!(miri) {
            // miri has no membarrier(2); the fallback is what it checks.
            return;
        }
        if let Err(e) = membarrier_registration() {
            // The test command exports HERD_TEST_STRICT=1 as root, where a
            // missing capability is a failure, not a skip.
            let why = format!("membarrier PRIVATE_EXPEDITED is not available here: {e}");
            assert!(
                std::env::var("HERD_TEST_STRICT").as_deref() != Ok("1"),
                "{why}"
            );
            eprintln!("SKIPPED: {why}");
            return;
        }
        let fences = Fences { membarrier: true };
        let before = failures();
        FAIL_NEXT.set(2);
        fences.heavy();
        assert_eq!(failures() - before, 2, "two failures, then success");
        FAIL_NEXT.set(50);
        fences.heavy();
        assert_eq!(
            FAIL_NEXT.get(),
            47,
            "three tries, then the shootdown barrier"
        );
        assert_eq!(failures() - before, 5);
        assert!(shootdown_barrier(), "the fallback barrier works here");
    }
}
