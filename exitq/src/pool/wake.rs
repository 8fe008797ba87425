//! Getting a worker to each queued job: leave it to a worker already on its
//! way to the queue, else wake the idle worker that went idle last, else
//! start one (`grow.rs`), else a busy worker takes it when done.
//!
//! # Counters a submitter reads
//! * `Inner::spinning`: workers polling the queue before they park
//!   ([`PoolBuilder::spin`](super::PoolBuilder::spin)). While one spins, a submit
//!   makes no syscall: the spinner takes the job.
//! * `Inner::waking`: workers notified, or just spawned, that have not
//!   looked at the queue yet. While one is on its way, submits wake nobody
//!   else: at most one wake-up is in flight, and the woken worker wakes the
//!   next one if jobs are still queued (`found_work`, the chained wake-up).
//!   A burst thus ramps the pool up at the pace the woken threads get a CPU.
//!   The chain is for parallelism only: the worker on its way drains the
//!   whole queue, so no job depends on it.
//!
//! # No job is stranded (the Dekker pairs)
//! A submitter queues its job, runs a SeqCst fence, and only then reads
//! what tells it whether someone else will take the job. Each such party
//! writes its side, runs a SeqCst fence, and then re-reads the queue. Of two
//! SeqCst fences one is first in the single total order, and the reads after
//! the later one see the writes before the earlier one: so in each row
//! either the submitter sees the other side's write and acts, or the other
//! side's re-read sees the job.
//!
//! | submitter reads, after push + fence | the other side writes, fences, re-reads the queue | where |
//! |---|---|---|
//! | `spinning > 0`: skip the wake-up | a spinner giving up: `spinning -= 1`, then the idle path below | `spin_for_job`, `worker::go_idle` |
//! | `waking > 0`: skip the wake-up | a woken or new worker: `waking -= 1`, fence, pops | `arrived` |
//! | an idle-stack entry whose slot is `IDLE`: notify it | a worker going idle: `IDLE`, entry in the stack, fence, re-check (takes itself back) | `worker::go_idle`, `idle.rs` |
//! | `workers < max_workers`: start a worker | a retiring worker: `workers -= 1`, fence, re-check (un-retires) | `retire::try_retire`, `worker::idle_wait` |
//!
//! `waking` is raised before the notify CAS (so the worker's `arrived`
//! cannot come first) and lowered again if the CAS fails; meanwhile a
//! submitter may skip its wake-up. That strands nothing: the CAS failed
//! because the worker left `IDLE` by itself (it found work in its re-check,
//! or its keep-alive expired), and both paths re-check the queue after a
//! fence. The same transient count around a spawn that fails is discussed
//! in `grow.rs`.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::futex;
#[cfg(test)]
use super::inner::HookPoint;
use super::inner::Inner;
use super::job::Job;

impl Inner {
    /// Queues `job` (between `enter` and `leave`) and makes sure a worker
    /// will run it: wake the idle worker on top of the idle stack, else
    /// start a worker if below max, else a busy worker takes it when done.
    pub(super) fn push_and_wake(self: &Arc<Self>, job: Job) {
        #[cfg(test)]
        self.run_hook(HookPoint::BeforePush);
        self.queue.push(job);
        // SeqCst fence: the submitter's fence of every Dekker pair (module
        // docs): pairs with the fences in `arrived`, `worker::go_idle` (also
        // reached by a spinner giving up) and `worker::idle_wait` (after a
        // retirement).
        fence(Ordering::SeqCst);
        // SeqCst: pairs with the SeqCst decrements in `spin_for_job` and
        // `arrived`; stronger than needed: with the fences on both sides
        // of each pair, Relaxed loads would do.
        if self.spinning.load(Ordering::SeqCst) > 0 || self.waking.load(Ordering::SeqCst) > 0 {
            // A worker is polling the queue right now, or is on its way to
            // it (`waking`): it takes the job without a syscall of ours and
            // wakes help if more work piles up (`found_work`).
            return;
        }
        // With no worker, the queued jobs run here, before our `leave`.
        self.while_submitting(|| self.wake_or_grow());
    }

    /// A worker that was notified or spawned starts looking at the queue.
    pub(super) fn arrived(&self) {
        // SeqCst: the worker's side of the `waking` Dekker pair with
        // `push_and_wake` (push, fence, read `waking`): a submitter that saw
        // us on our way skipped its wake-up, and our queue pops after this
        // fence (which pairs with the submitter's) see its job.
        self.waking.fetch_sub(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// After a woken worker's first job: if more jobs are queued and nobody
    /// else is on the way, wake (or start) the next worker.
    pub(super) fn found_work(self: &Arc<Self>) {
        // SeqCst: pairs with the SeqCst writes of `spinning` and `waking`;
        // stronger than needed: the chained wake-up is pacing, no job
        // depends on it (module docs), so a stale count costs at most one
        // wake-up too many or too few.
        if !self.queue.is_empty()
            && self.spinning.load(Ordering::SeqCst) == 0
            && self.waking.load(Ordering::SeqCst) == 0
        {
            self.wake_or_grow();
        }
    }

    /// Wakes an idle worker, else starts one if below max.
    fn wake_or_grow(self: &Arc<Self>) {
        if !self.wake_one() {
            self.grow_for_queued_job();
        }
    }

    /// A worker that ran out of jobs polls the queue for `cfg.spin` before
    /// parking, if fewer than `max_spinners` already do. Returns a job it
    /// found. While it spins, submitters skip their wake-up syscall.
    pub(super) fn spin_for_job(self: &Arc<Self>) -> Option<Job> {
        if self.cfg.spin.is_zero() {
            return None;
        }
        // SeqCst: pairs with the SeqCst loads of `spinning` in
        // `push_and_wake` (after the submitter's fence): one that sees it
        // relies on us, and we poll the queue from now on. The undo below
        // pairs with the same loads, as the decrement after the loop does.
        if self.spinning.fetch_add(1, Ordering::SeqCst) >= self.cfg.max_spinners {
            self.spinning.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let t0 = Instant::now();
        let mut found = None;
        'spin: loop {
            for _ in 0..64 {
                if let Some(job) = self.queue.pop() {
                    found = Some(job);
                    break 'spin;
                }
                std::hint::spin_loop();
            }
            if t0.elapsed() >= self.cfg.spin || self.is_shutdown() {
                break;
            }
        }
        // SeqCst: the spinner's side of the `spinning` Dekker pair with
        // `push_and_wake`: after this, submitters wake or spawn instead of
        // relying on us; our caller re-checks the queue after the fence in
        // `go_idle` (none found), or we do after the fence below.
        self.spinning.fetch_sub(1, Ordering::SeqCst);
        if found.is_some() {
            // SeqCst fence: pairs with the submitter's fence in
            // `push_and_wake`, as in `go_idle`.
            fence(Ordering::SeqCst);
            if !self.queue.is_empty() {
                // More work than one spinner takes: get help (the chained
                // wake-up keeps parallelism growing during a burst).
                self.wake_or_grow();
            }
        }
        found
    }

    /// Pops the idle stack until an idle worker is found and notified.
    pub(super) fn wake_one(&self) -> bool {
        while let Some(i) = self.slots.pop_idle() {
            if self.notify_slot(i) {
                return true;
            }
        }
        false
    }

    /// Notifies popped slot `i` if it is idle. An entry in any other state
    /// is stale and skipped (`pop_idle` already freed the slot if its
    /// worker left with the entry in the stack).
    pub(super) fn notify_slot(&self, i: u32) -> bool {
        #[cfg(test)]
        self.run_hook(HookPoint::Popped(i));
        let notified = self.notify_popped(i);
        #[cfg(test)]
        self.run_hook(HookPoint::Checked(i));
        notified
    }

    /// The body of `notify_slot`.
    fn notify_popped(&self, i: u32) -> bool {
        if !self.slots.is_idle(i) {
            // A stale entry: its worker is running, retiring or gone. Never
            // act on a `RETIRED` seen here: it may be a later worker's
            // (the slot reused since our pop), and `pop_idle` has already
            // freed the slot if the freeing was ours (idle.rs docs).
            return false;
        }
        self.notify_if_idle(i)
    }

    /// `IDLE -> NOTIFIED` and a futex wake, counted in `waking`; false if
    /// slot `i` was not `IDLE`. Also the shutdown sweep's step (every slot,
    /// in the idle stack or not).
    pub(super) fn notify_if_idle(&self, i: u32) -> bool {
        // Counted before the CAS so the worker's `arrived` cannot run
        // first; undone if the CAS fails. SeqCst: the count submitters read
        // after their fence (`push_and_wake`); the notify CAS (SeqCst)
        // publishes it to the worker, whose Acquire load of `NOTIFIED`
        // pairs with that CAS and orders its `arrived` after this.
        self.waking.fetch_add(1, Ordering::SeqCst);
        match self.slots.notify(i) {
            Ok(()) => {
                futex::wake(&self.slots.get(i).state);
                true
            }
            Err(_) => {
                // It found work, or its keep-alive expired, meanwhile (and
                // re-checks the queue itself: module docs). SeqCst: pairs
                // with the loads in `push_and_wake`, as the increment above.
                self.waking.fetch_sub(1, Ordering::SeqCst);
                false
            }
        }
    }
}
