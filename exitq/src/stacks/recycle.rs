//! Lending a stack and taking it back: the free queue, the retired list and
//! the count of lent stacks.
//!
//! * **Lending** (`take_stack`): pop the free queue (a bounded lock-free
//!   MPMC queue of idle stacks), check the canary, bump the generation; if
//!   nothing is pooled, map a fresh stack (and wake the reclaimer if retired
//!   stacks are waiting for it). Every lent stack counts in `lent`.
//! * **Retiring** (`push_retired`): a stack whose thread may still be
//!   running goes onto the retired list, a Treiber stack of `Header`s
//!   pushed with one CAS (by the exit path, a handle drop, or an owner that
//!   joined but leaves the page release to the reclaimer) and taken whole
//!   by the reclaimer with one swap (`take_retired`), so there is no ABA.
//! * **Taking back** (`give_back`): once the thread is joined (`reap.rs`),
//!   the stack's canary is checked and it goes back to the free queue, or is
//!   unmapped when the queue is full, and only then stops counting as lent:
//!   `lent == 0` proves every stack is in the queue or unmapped.

use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;

use super::error::SpawnError;
use super::shared::{Header, Shared};

impl Shared {
    /// A stack for a new thread: a pooled one whose canary checks out, or a
    /// freshly mapped one. Counts it as lent.
    pub(super) fn take_stack(&self) -> Result<NonNull<Header>, SpawnError> {
        while let Some(hdr) = self.free.as_ref().and_then(|q| q.pop()) {
            // SAFETY: popped from the free queue: we own it.
            let h = unsafe { hdr.as_ref() };
            let gen = h.gen.load(Ordering::Relaxed);
            if self.canary && !self.canary_hand_out(hdr, gen) {
                self.quarantine(hdr);
                continue;
            }
            h.gen.store(gen + 1, Ordering::Relaxed);
            self.c.reused.fetch_add(1, Ordering::Relaxed);
            self.c.lent.fetch_add(1, Ordering::Relaxed);
            return Ok(hdr);
        }
        // Nothing pooled: the retired stacks may be waiting for a round.
        if !self.retired.load(Ordering::Relaxed).is_null()
            || self.reclaimer_pending.load(Ordering::Relaxed) > 0
        {
            self.wake_reclaimer();
        }
        let hdr = self.map_stack()?;
        // SAFETY: freshly mapped: we own it.
        let h = unsafe { hdr.as_ref() };
        let gen = h.gen.load(Ordering::Relaxed);
        if self.canary {
            // A fresh stack's canary was written FREE(0) by map_stack.
            let ok = self.canary_hand_out(hdr, gen);
            debug_assert!(ok);
        }
        h.gen.store(gen + 1, Ordering::Relaxed);
        self.c.lent.fetch_add(1, Ordering::Relaxed);
        Ok(hdr)
    }

    /// [`recycle`](Self::recycle), then the stack stops counting as lent.
    /// In that order: `lent == 0` (Acquire) then proves the stack is in the
    /// queue or unmapped (the reclaimer's shutdown test relies on it).
    pub(super) fn give_back(&self, hdr: NonNull<Header>) {
        self.recycle(hdr);
        // Release: pairs with the Acquire loads of `lent` in `drain` and the
        // reclaimer's shutdown test.
        self.c.lent.fetch_sub(1, Ordering::Release);
    }

    /// A stack whose thread is provably gone (or never started) goes back:
    /// canary check, then the free queue, or unmapped when the pool is full.
    /// The caller has already released its pages if the policy says so.
    pub(super) fn recycle(&self, hdr: NonNull<Header>) {
        if self.canary && !self.canary_recycle(hdr) {
            self.quarantine(hdr);
            return;
        }
        self.c.recycled.fetch_add(1, Ordering::Relaxed);
        match self.free.as_ref().map(|q| q.push(hdr)) {
            Some(Ok(())) => {}
            Some(Err(hdr)) => self.unmap(hdr),
            None => self.unmap(hdr),
        }
    }

    /// One CAS push onto the retired list (Treiber push; the list is only
    /// ever taken whole, so there is no ABA).
    pub(super) fn push_retired(&self, hdr: NonNull<Header>) {
        // SAFETY: the pusher owns the header until the push succeeds.
        let h = unsafe { hdr.as_ref() };
        let mut head = self.retired.load(Ordering::Relaxed);
        loop {
            h.next.store(head, Ordering::Relaxed);
            // Release: pairs with the reclaimer's Acquire swap in
            // `take_retired`: it sees the header's fields (`next`, `thread`,
            // `flags`) as the pusher left them.
            match self.retired.compare_exchange_weak(
                head,
                hdr.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    pub(super) fn take_retired(&self) -> *mut Header {
        // Acquire: pairs with the Release CAS in `push_retired`.
        self.retired.swap(ptr::null_mut(), Ordering::Acquire)
    }
}
