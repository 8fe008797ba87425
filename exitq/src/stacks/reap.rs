//! Reaping: when a stack is free again, who joins its thread ([`Reap`]),
//! and the pool's reclaimer thread that joins the others.
//!
//! # When is a stack free? (the proof)
//!
//! With a user-provided stack, glibc keeps the thread descriptor
//! (`struct pthread`, the TCB: tid word, TSD, cancellation state, rseq area,
//! the `__stack_user` list link) *inside* that stack, at its top
//! (`allocatestack.c`: `pd = stackaddr - TLS_TCB_SIZE - adj`). So the stack is
//! in use not only while the start routine runs, but through every
//! thread-exit destructor and the rest of glibc's `start_thread` after them,
//! up to the `exit` system call, and glibc itself still reads the descriptor
//! when the thread is joined. Returning the stack from an exit destructor is
//! therefore **not** safe on its own: glibc is still running on it.
//!
//! The event that proves the thread is completely gone is the kernel's
//! `CLONE_CHILD_CLEARTID`: glibc's `pthread_create` passes `&pd->tid` as the
//! clear-child-tid address. When the thread exits, the kernel's `do_exit` →
//! `exit_mm` → `exit_mm_release` → `mm_release` writes 0 to that word and
//! futex-wakes it, and right after that `exit_mm` detaches the task from the
//! address space (`current->mm = NULL`): from then on the task cannot execute
//! a user instruction or touch user memory (robust-futex and PI cleanup,
//! the last kernel accesses to user memory, happen before the clear, in
//! `futex_exit_release`). `pthread_join` and `pthread_tryjoin_np` wait for
//! exactly that word to become 0, and then, before returning, run glibc's
//! `__nptl_free_tcb` → `__nptl_deallocate_stack`, which unlinks the
//! descriptor from `__stack_user` and frees the DTV. So:
//!
//! > **After `pthread_join`/`pthread_tryjoin_np` on a thread has returned 0,
//! > no thread, no glibc structure and no kernel path reads or writes that
//! > thread's stack any more.** This is the stack's "grace period".
//!
//! The pool therefore recycles a stack *only* after a successful join of the
//! thread that used it, done either by the owner ([`Reap::Owner`],
//! [`PooledThread::join`](crate::stacks::PooledThread::join)) or by the
//! pool's reclaimer ([`Reap::Reclaimer`], `pthread_tryjoin_np`, never
//! blocking on one slow thread). Nothing else (not the exit destructor, not a
//! timer) ever makes a stack reusable.
//!
//! What this means for a caller's "reap" policy (join, detach, leak) is
//! on [`Reap`].
//!
//! # Reclaimer thread (why not an exitq `Domain`)
//!
//! A stack's grace period is the kernel's tid clear, not an RCU reader grace
//! period, and waiting for it may take a few retries; inside a `Domain`'s
//! reclaimer that would delay unrelated callbacks, and `register_exit`
//! preallocates a heap node per thread, while here the node lives in the
//! stack. So the pool has its own small reclaimer thread. It sleeps with a
//! backoff (1 ms while there is work, up to 64 ms when idle); the exit path
//! never wakes it (that would be a system call), a spawner that finds no free
//! stack does.

use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::shared::{Header, Shared, FLAG_JOINED};

/// Who joins a pooled thread, which is what makes its stack reusable.
///
/// A stack is recycled only after its thread was joined (the proof is in
/// the docs of `stacks/reap.rs`). What that means for a caller's "reap"
/// policy:
///
/// * *join* (the owner joins): sound, [`Reap::Owner`].
/// * *detach* (nobody waits): a detached thread with a user stack gives no
///   public notice of its end (glibc frees its descriptor from the thread
///   itself, then keeps running on the stack). So a pooled thread is never
///   `pthread_detach`ed; [`Reap::Reclaimer`] gives the same "fire and
///   forget" behaviour: the exit path pushes the stack onto the pool's
///   retired list and the reclaimer joins it.
/// * *leak* (never joined, never detached): unsound to recycle, ever: the
///   descriptor stays linked in glibc's `__stack_user` list (walked by
///   `fork`, `setxid`), so the stack can be neither reused nor unmapped.
///   Callers must refuse it (herd does, with exit code 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reap {
    /// The owner joins the thread with
    /// [`PooledThread::join`](super::PooledThread::join); the stack is
    /// recycled as soon as `pthread_join` returns. No exit hook.
    Owner,
    /// Nobody outside the pool joins ("detached" behaviour): the exit path
    /// pushes the stack onto the pool's retired list (one CAS) and the
    /// reclaimer joins the thread with `pthread_tryjoin_np`, then recycles
    /// the stack. The thread must never be joined or detached by anyone
    /// else.
    Reclaimer,
}

/// The reclaimer: takes the retired list, joins each thread without
/// blocking, releases pages in batches, recycles; at shutdown, waits for
/// every lent stack and unmaps everything.
pub(super) fn run(sh: Arc<Shared>) {
    let mut r = Reclaimer::default();
    let mut idle_rounds = 0u32;
    loop {
        r.take_retired(&sh);
        let had_work = r.busy();
        r.join_pending(&sh);
        r.give_back_ready(&sh);
        // Release: pairs with the Acquire load in `StackPool::drain` (lent
        // and pending both 0 mean every stack is back in the queue or
        // unmapped and every thread joined).
        sh.reclaimer_pending.store(r.waiting(), Ordering::Release);
        if had_work {
            sh.c.reclaim_rounds.fetch_add(1, Ordering::Relaxed);
            idle_rounds = 0;
        } else {
            idle_rounds = (idle_rounds + 1).min(6);
        }
        if r.done(&sh) {
            sh.unmap_idle();
            sh.unmap_quarantine();
            return;
        }
        // Saturating: a `reclaim_interval` near `Duration::MAX` must not
        // overflow here (the panic ended the reclaimer, and with it every
        // `Reclaimer` stack's way back and `drain`).
        let sleep = if r.busy() {
            sh.interval
        } else {
            sh.interval.saturating_mul(1 << idle_rounds)
        };
        std::thread::park_timeout(sleep);
    }
}

/// The reclaimer's private lists.
#[derive(Default)]
struct Reclaimer {
    /// Threads pushed but still in their exit tail (the reclaimer owns
    /// these headers).
    pending: Vec<NonNull<Header>>,
    /// Unsound test mode: stacks recycled early, threads still to be joined.
    join_later: Vec<libc::pthread_t>,
    /// Stacks whose thread is joined, to give back this round.
    ready: Vec<NonNull<Header>>,
}

impl Reclaimer {
    /// Threads still to join.
    fn busy(&self) -> bool {
        !self.pending.is_empty() || !self.join_later.is_empty()
    }

    /// How many threads are still to join (published for `drain`).
    fn waiting(&self) -> usize {
        self.pending.len() + self.join_later.len()
    }

    /// Takes the whole retired list into `pending`.
    fn take_retired(&mut self, sh: &Shared) {
        let mut p = sh.take_retired();
        let mut took = 0u64;
        while let Some(hdr) = NonNull::new(p) {
            // SAFETY: taken from the retired list: the reclaimer owns it.
            p = unsafe { hdr.as_ref() }.next.load(Ordering::Relaxed);
            took += 1;
            self.pending.push(hdr);
        }
        if took > 0 {
            sh.c.exit_pushes.fetch_add(took, Ordering::Relaxed);
        }
    }

    /// Joins what can be joined without blocking; moves those stacks to
    /// `ready`. A thread still in its exit tail stays pending.
    fn join_pending(&mut self, sh: &Shared) {
        let Reclaimer {
            pending,
            join_later,
            ready,
        } = self;
        pending.retain(|&hdr| {
            // SAFETY: owned by the reclaimer (`take_retired`).
            let h = unsafe { hdr.as_ref() };
            if h.flags.load(Ordering::Relaxed) & FLAG_JOINED != 0 {
                ready.push(hdr);
                return false;
            }
            let t = h.thread.load(Ordering::Relaxed);
            if sh.unsound_recycle_at_exit {
                // THE MISTAKE (tests only): reuse before the join.
                join_later.push(t);
                ready.push(hdr);
                return false;
            }
            // SAFETY: `t` is a joinable thread that nobody else joins or
            // detaches (spawn's contract), not yet joined.
            match unsafe { libc::pthread_tryjoin_np(t, ptr::null_mut()) } {
                0 => {
                    // The kernel cleared the tid and glibc released the
                    // descriptor: the stack is free (module docs).
                    ready.push(hdr);
                    false
                }
                libc::EBUSY => {
                    sh.c.tryjoin_busy.fetch_add(1, Ordering::Relaxed);
                    true
                }
                rc => {
                    // Cannot happen for a valid joinable thread; keep the
                    // stack out of circulation rather than guess.
                    eprintln!("exitq::stacks: pthread_tryjoin_np failed ({rc}); stack kept aside");
                    sh.quarantine(hdr);
                    // Release: pairs with the Acquire loads of `lent` in
                    // `drain` and in `done`, as in `give_back`: quarantined
                    // before it stops counting.
                    sh.c.lent.fetch_sub(1, Ordering::Release);
                    false
                }
            }
        });
        join_later.retain(|&t| {
            // SAFETY: as above; each of these is joined exactly once.
            let rc = unsafe { libc::pthread_tryjoin_np(t, ptr::null_mut()) };
            rc == libc::EBUSY
        });
    }

    /// Releases the ready stacks' pages (one batch) and gives them back.
    fn give_back_ready(&mut self, sh: &Shared) {
        if self.ready.is_empty() {
            return;
        }
        if let Some(advice) = sh.release.advice() {
            sh.release_pages(&self.ready, advice);
        }
        for hdr in self.ready.drain(..) {
            sh.give_back(hdr);
        }
    }

    /// The pool is gone and every stack is back: time to unmap and leave.
    fn done(&self, sh: &Shared) -> bool {
        // Acquire (`shutdown`): pairs with the last `StackPool` drop's
        // Release store. Acquire (`lent`): pairs with the Release decrement
        // in `give_back` (owners give back on their own threads): their
        // stacks are in the free queue before we unmap it. Acquire
        // (`retired`): pairs with the Release CAS in `push_retired`;
        // stronger than needed: every stack on the list still counts as
        // lent, and a non-null head only sends us round again, to the
        // Acquire swap in `take_retired`.
        sh.shutdown.load(Ordering::Acquire)
            && sh.c.lent.load(Ordering::Acquire) == 0
            && !self.busy()
            && sh.retired.load(Ordering::Acquire).is_null()
    }
}
