//! `--reap detach` without glibc's detach race.
//!
//! # The race
//!
//! glibc's `pthread_detach` (nptl/pthread_detach.c, the same from 2.x to
//! Debian 12's 2.36) marks the thread detached with a compare-and-swap of
//! its descriptor's `joinid`, and then reads the descriptor's
//! `cancelhandling` to see whether the thread has begun to exit (if so it
//! frees the thread's control block itself). Between the two, the thread
//! can finish exiting: `start_thread` sees it detached and puts its stack
//! (the descriptor lives at its top) in glibc's stack cache, the kernel
//! clears its tid, and any thread whose own exit takes the cache over its
//! limit (40 MiB: five 8 MiB stacks) unmaps it (`free_stacks`). The
//! detacher's read then faults. A storm has hundreds of threads exiting
//! while the spawner detaches them: `herd storm --reap detach` died of
//! SIGSEGV in `pthread_detach` in about 1 run in 500 beside `stress-ng
//! --cpu 4` (2026-12-06, 20 waves of 25 threads), the spawner preempted
//! between the two accesses. The same crash is reported against oneTBB
//! (uxlfoundation/oneTBB#1758, glibc 2.31). Dropping a Rust `JoinHandle`
//! calls `pthread_detach` too.
//!
//! # The handshake
//!
//! So the spawner never detaches a thread that may be exiting. Each
//! [`ThreadRec`] carries a word that the spawner's retire and the
//! thread's exit destructor both try to move from `OPEN`:
//! * the spawner first (`DETACH`): the thread detaches itself in its exit
//!   destructor ([`at_exit`]), which cannot race with its own exit, and
//!   glibc then frees its control block as it exits, as for any detached
//!   thread ("glibc frees on exit"). The spawner never touches the handle
//!   again.
//! * the thread first (`EXITING`): it exits joinable. The spawner keeps its
//!   handle and reaps it with `pthread_tryjoin_np` once the kernel has
//!   cleared its tid (`EBUSY` before): the spawner frees the control
//!   block, as `pthread_detach` of a thread that has already exited does.
//!   Such threads are swept at every retire and, at the end of the storm,
//!   until none is left (the drain's wait bounds it). They are counted
//!   ([`Detacher::after_exit`]).
//!
//! Pooled threads (`--stacks recycled`) are never detached (their pool
//! joins them) and never asked.

use std::sync::atomic::{AtomicU8, Ordering};

use super::{Handle, ThreadRec};

/// Neither side has moved the word.
pub(super) const OPEN: u8 = 0;
/// The spawner retired the thread for detaching: the thread detaches
/// itself in its exit destructor.
const DETACH: u8 = 1;
/// The thread's exit destructor came first: the spawner joins it once it
/// is gone.
const EXITING: u8 = 2;
/// After DETACH: the thread has detached itself.
const SELF_DETACHED: u8 = 3;

/// The thread's side, from its exit destructor, before its last access to
/// the record.
pub(super) fn at_exit(word: &AtomicU8) {
    // AcqRel: the Acquire of a failed exchange that reads DETACH pairs
    // with the spawner's Release in `Detacher::detach`, so the spawner's
    // last use of the handle (its `pthread_cancel`) happens before this
    // thread detaches itself and exits.
    if word.compare_exchange(OPEN, EXITING, Ordering::AcqRel, Ordering::Acquire) == Err(DETACH) {
        // SAFETY: detaching the calling thread: it is running, so its
        // descriptor is valid, and no other thread uses its handle any
        // more (the spawner gave it up with DETACH).
        if unsafe { libc::pthread_detach(libc::pthread_self()) } == 0 {
            // Relaxed: read only after the exit destructor's Release
            // `exit_ns` store (the unit tests).
            word.store(SELF_DETACHED, Ordering::Relaxed);
        }
    }
}

/// The spawner's side of `--reap detach`.
#[derive(Debug, Default)]
pub struct Detacher {
    /// Threads whose exit destructor came first, not yet gone.
    late: Vec<libc::pthread_t>,
    /// Threads whose exit destructor came first (all of them, reaped or
    /// not).
    pub after_exit: u64,
    /// Joins of such threads that failed (an error other than `EBUSY`).
    pub failed: u64,
}

impl Detacher {
    /// Detaches a retired thread (see the module docs): asks it to detach
    /// itself, or keeps it to join once it is gone. `rec` is its record.
    pub fn detach(&mut self, h: Handle, rec: &ThreadRec) {
        let t = match h {
            Handle::Pthread(t) => t,
            Handle::Std(h) => std::os::unix::thread::JoinHandleExt::into_pthread_t(h),
            // Spawned with `Reap::Reclaimer`: dropping the handle lets the
            // pool's reclaimer join the thread once it has exited.
            Handle::Pooled(p) => return drop(p),
        };
        // AcqRel: Release pairs with the thread's Acquire in `at_exit` (see
        // there); Acquire, when the thread came first, orders its exit
        // destructor before our join.
        let won = rec
            .reap
            .compare_exchange(OPEN, DETACH, Ordering::AcqRel, Ordering::Acquire);
        if won.is_err() {
            self.after_exit += 1;
            self.late.push(t);
        }
    }

    /// Joins every kept thread that is gone; true if none is left.
    pub fn sweep(&mut self) -> bool {
        let mut failed = 0;
        self.late.retain(|&t| {
            // SAFETY: `t` is joinable (its exit destructor found the word
            // OPEN, so nobody detached it) and joined at most once: it
            // leaves the list once the call returns anything but EBUSY.
            match unsafe { libc::pthread_tryjoin_np(t, std::ptr::null_mut()) } {
                libc::EBUSY => true,
                0 => false,
                _ => {
                    failed += 1;
                    false
                }
            }
        });
        self.failed += failed;
        self.late.is_empty()
    }

    /// Sweeps until every kept thread is joined or `deadline_ns` (a
    /// [`super::now_ns`] value) passes; returns how many are left (never
    /// joined: leaked, as `--reap leak` leaks).
    pub fn finish(&mut self, deadline_ns: u64) -> u64 {
        while !self.sweep() && super::now_ns() < deadline_ns {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        self.late.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spawn::pthread::PthreadSpawner;
    use crate::spawn::std_thread::StdSpawner;
    use crate::spawn::{now_ns, Body, Cancel, Spawner, NO_PIN};

    fn spawner(std: bool) -> Spawner {
        if std {
            Spawner::Std(StdSpawner {
                stack_size: None,
                room: None,
            })
        } else {
            Spawner::Pthread(PthreadSpawner::new(None).unwrap())
        }
    }

    fn body(cancel: Cancel, sleep_ns: u64) -> &'static Body {
        Body {
            spin: 0,
            sleep_ns,
            cancel,
            pin_masks: Vec::new(),
            hooks: Default::default(),
            exits: Default::default(),
        }
        .leak()
    }

    /// Waits (bounded) for the thread's exit destructor.
    fn wait_exited(rec: &ThreadRec) {
        let deadline = now_ns() + 20_000_000_000;
        while !rec.exited() {
            assert!(now_ns() < deadline, "the thread did not exit");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn a_thread_retired_before_its_exit_detaches_itself() {
        for std in [false, true] {
            let rec = Box::new(ThreadRec::new(body(Cancel::Flag, 20_000_000_000), NO_PIN));
            // SAFETY: the record is boxed (never moves) and outlives the
            // thread's exit destructor (waited for below).
            let h = unsafe { spawner(std).spawn(&*rec) }.unwrap();
            let mut d = Detacher::default();
            d.detach(h, &rec);
            assert_eq!((d.after_exit, d.late.len()), (0, 0), "std {std}");
            rec.request_stop();
            wait_exited(&rec);
            assert_eq!(rec.reap.load(Ordering::Relaxed), SELF_DETACHED, "std {std}");
        }
    }

    #[test]
    fn a_thread_that_exited_before_its_retire_is_joined_once_gone() {
        for std in [false, true] {
            let rec = Box::new(ThreadRec::new(body(Cancel::None, 0), NO_PIN));
            // SAFETY: as above.
            let h = unsafe { spawner(std).spawn(&*rec) }.unwrap();
            wait_exited(&rec);
            let mut d = Detacher::default();
            d.detach(h, &rec);
            assert_eq!(d.after_exit, 1, "std {std}");
            assert_eq!(rec.reap.load(Ordering::Relaxed), EXITING, "std {std}");
            assert_eq!(d.finish(now_ns() + 20_000_000_000), 0, "std {std}");
            assert_eq!(d.failed, 0, "std {std}");
        }
    }
}
