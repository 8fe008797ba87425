//! Starting a worker for a queued job no idle worker took: reserve a place
//! in `workers` (at most `max_workers`), claim a free slot, create the
//! thread; and what happens when the thread cannot be created.
//!
//! # Reserving and claiming
//! `try_spawn` raises `workers` with a SeqCst CAS (the submitter's side of
//! the retirement Dekker pair, see `wake.rs`), and only then claims a slot.
//! Every available worker holds one slot and `workers <= max_workers`, so a
//! free slot exists, though it may still be `RETIRED` with its entry in the
//! idle stack: popping that entry frees it (`idle.rs`, "Who frees a retired
//! slot"), so `claim_slot` drains the stack, and notifies any idle worker it
//! finds there instead (then the reservation is undone).
//!
//! # A spawn that fails
//! The reservation and the slot are given back, the failure is counted with
//! the limit that stopped it, read from the system right then and named
//! with its numbers ([`crate::limits`]; [`Pool::last_spawn_error`](super::Pool::last_spawn_error)),
//! and if no worker exists at all, the caller runs every queued job itself.
//! Every one, not only its own: while `spawn` runs, the new worker is
//! counted in `waking` (so its `arrived` cannot come first), and a
//! concurrent submitter that reads that count skips its wake-up; if the
//! spawn then fails and no worker exists, nobody else would take that
//! submitter's job until the next submit.
//! A worker refused for want of room for std's signal stack
//! ([`PoolBuilder::thread_room`](super::PoolBuilder::thread_room)) fails
//! the same way, its refusal the explanation.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_utils::Backoff;

use super::inner::Inner;
use super::worker;

impl Inner {
    /// No idle worker took the job: start one if below `max_workers`. If
    /// that fails and no worker exists at all, run queued work here.
    pub(super) fn grow_for_queued_job(self: &Arc<Self>) {
        if self.try_spawn().is_err() {
            // SeqCst: the submitter's read of the retirement Dekker pair
            // (our caller fenced after queueing): pairs with the SeqCst
            // decrement in `try_retire`, whose worker then fences and
            // re-checks the queue (`worker::idle_wait`). Either it sees our
            // job or we see it gone and run the job here.
            if self.workers.load(Ordering::SeqCst) == 0 {
                // Every queued job, not one: a concurrent submitter may
                // have skipped its wake-up while our spawn was counted in
                // `waking` (module docs), and no worker will take its job.
                while let Some(job) = self.queue.pop() {
                    self.run_on_caller(job);
                }
            }
        }
    }

    /// Starts one worker if `workers < max_workers`. Ok(false) at max.
    /// The error of a thread that cannot be created says which limit
    /// stopped it (`crate::limits`), as `last_spawn_error` keeps it.
    pub(super) fn try_spawn(self: &Arc<Self>) -> io::Result<bool> {
        let max = self.cfg.max_workers;
        let mut w = self.workers.load(Ordering::Relaxed);
        loop {
            if w >= max {
                return Ok(false);
            }
            // SeqCst: the submitter's side of the retirement Dekker pair:
            // pairs with the SeqCst decrement in `try_retire` (then fence,
            // re-check the queue): either it sees our job or we see the
            // lower count and start a worker for it.
            match self
                .workers
                .compare_exchange_weak(w, w + 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        self.peak_workers.fetch_max(w + 1, Ordering::Relaxed);
        let Some(slot) = self.claim_slot() else {
            // An idle worker showed up while we looked; it has the job.
            // SeqCst: pairs with the SeqCst loads of `workers` (`begin_shutdown`,
            // `grow_for_queued_job`), as every RMW of it; this undo needs only
            // the RMW order: stronger than needed.
            self.workers.fetch_sub(1, Ordering::SeqCst);
            return Ok(false);
        };
        match self.spawn_thread(slot) {
            Ok(()) => {
                self.spawned.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.slots.unclaim(slot);
                // SeqCst: pairs as the undo above; and with the SeqCst CAS
                // in `try_spawn`: the slot is free again first, so a
                // spawner whose CAS reads this finds it in `claim_slot`.
                self.workers.fetch_sub(1, Ordering::SeqCst);
                self.spawn_failures.fetch_add(1, Ordering::Relaxed);
                let why = format!(
                    "cannot create a worker thread: {}",
                    self.spawn_diagnosis.explain(
                        &e,
                        self.spawned.load(Ordering::Relaxed),
                        self.cfg.stack_size.map(|s| s as u64)
                    )
                );
                *self
                    .last_spawn_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
                Err(io::Error::new(e.kind(), why))
            }
        }
    }

    /// Claims a free slot for a reserved worker (see the module docs).
    /// Returns None if an idle worker was found (and notified) instead.
    fn claim_slot(&self) -> Option<u32> {
        let backoff = Backoff::new();
        loop {
            if let Some(i) = self.slots.claim_free() {
                return Some(i);
            }
            while let Some(i) = self.slots.pop_idle() {
                if self.notify_slot(i) {
                    return None;
                }
            }
            if let Some(i) = self.slots.claim_free() {
                return Some(i);
            }
            // A leaving worker is between `RETIRED` and freeing its slot,
            // or a popper between taking its entry and freeing it.
            backoff.snooze();
        }
    }

    /// Creates the worker thread for claimed slot `slot`.
    fn spawn_thread(self: &Arc<Self>, slot: u32) -> io::Result<()> {
        let mut b = std::thread::Builder::new().name(format!("{}-{slot}", self.cfg.thread_name));
        if let Some(s) = self.cfg.stack_size {
            b = b.stack_size(s);
        }
        let me = Arc::clone(self);
        self.threads.fetch_add(1, Ordering::Relaxed);
        // The new worker is on its way to the queue (see `wake.rs`).
        // SeqCst: pairs with the SeqCst loads of `waking` in
        // `push_and_wake` (after the submitter's fence); the thread's start
        // orders the worker's `arrived` after it. The undo below pairs with
        // the same loads.
        self.waking.fetch_add(1, Ordering::SeqCst);
        // With a room to check, a worker refused for want of it fails here
        // as one `pthread_create` refused.
        let room = self.cfg.thread_room.as_ref();
        let stack = self.cfg.stack_size.map(|s| s as u64);
        let spawned = crate::limits::spawn_std(room, b, stack, move || worker::main(me, slot));
        match spawned {
            // The worker detaches itself (`worker::main`): dropping the
            // handle would call `pthread_detach` here, and glibc's detach
            // of a thread that finishes exiting meanwhile (a worker that
            // found the pool shutting down) reads its descriptor after
            // another exit may have unmapped it. Nothing joins a worker.
            Ok(h) => {
                let _ = std::os::unix::thread::JoinHandleExt::into_pthread_t(h);
                Ok(())
            }
            Err(e) => {
                self.waking.fetch_sub(1, Ordering::SeqCst);
                self.threads.fetch_sub(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}
