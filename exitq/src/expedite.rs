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
use std::sync::OnceLock;

use crate::sync;

/// How the writer side forces readers' memory accesses into order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Expedite {
    /// membarrier(2) when available, fences otherwise (the default).
    #[default]
    Auto,
    /// Require membarrier(2) `PRIVATE_EXPEDITED`;
    /// [`Builder::try_build`](crate::Builder::try_build) fails without it.
    Membarrier,
    /// Never use membarrier: readers pay a full fence on entry.
    Fallback,
}

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> io::Result<libc::c_long> {
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
pub(crate) fn membarrier_registration() -> Result<(), io::ErrorKind> {
    static REGISTERED: OnceLock<Result<(), io::ErrorKind>> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        if cfg!(miri) || cfg!(exitq_loom) {
            return Err(io::ErrorKind::Unsupported);
        }
        let supported = membarrier(MEMBARRIER_CMD_QUERY).map_err(|e| e.kind())?;
        if supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED as libc::c_long == 0 {
            return Err(io::ErrorKind::Unsupported);
        }
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED).map_err(|e| e.kind())?;
        Ok(())
    })
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
    /// passed a full barrier (see the module docs).
    pub(crate) fn heavy(self) {
        if self.membarrier && !cfg!(exitq_loom) {
            // A failure here after a successful registration would be a
            // kernel bug; fall through to the fence so we stay correct for
            // our own thread and report loudly.
            if let Err(e) = membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) {
                panic!("exitq: membarrier(PRIVATE_EXPEDITED) failed after registration: {e}");
            }
        }
        sync::full_fence();
    }
}
