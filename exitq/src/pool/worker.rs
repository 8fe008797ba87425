//! A worker's life: run queued jobs, spin a little, park idle on its slot's
//! futex until notified, and leave after its keep-alive (if granted a
//! retirement token) or at shutdown.
//!
//! `main` is the loop; `idle_wait` is one idle period (park, keep-alive,
//! retirement); `go_idle` is the step into `IDLE` with its re-check, the
//! worker's side of the idle and shutdown Dekker pairs (`wake.rs`,
//! `submit.rs`). A worker touches its slot's state only through the
//! transitions of `idle.rs`'s state table. Its exit bookkeeping is not here:
//! it runs from the exit hook, after the thread is gone (`exit_hook.rs`).

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::RetireReason;
use super::exit_hook;
use super::futex;
use super::idle::Slot;
use super::idle::{IDLE, NOTIFIED, RUNNING};
use super::inner::Inner;
use super::job::{run_counted, Job};

/// What a worker does after its idle wait.
enum AfterIdle {
    /// Found work itself (its re-check, or an un-retire).
    Work,
    /// Was notified: counted in `waking` until it looks at the queue.
    Woken,
    /// Leaves, after an idle period whose drawn keep-alive this is.
    Retire(Duration),
}

/// Runs `job` (`run_counted`). A job that forks and returns in the child
/// ends the child here, with `_exit(0)`: the worker is the child's only
/// thread, and going on would run the parent's queued jobs a second time
/// (the parent runs them; `crate::fork`).
fn run_job(inner: &Inner, slot: &Slot, job: Job) {
    run_counted(slot, job);
    if inner.forked() {
        // SAFETY: `_exit` has no preconditions; it runs no destructor, no
        // atexit handler and flushes none of the parent's stdio buffers.
        unsafe { libc::_exit(0) };
    }
}

/// The worker thread of slot `slot_idx`.
pub(super) fn main(inner: Arc<Inner>, slot_idx: u32) {
    // SAFETY: detaches the calling thread, which is running (its
    // descriptor is valid); its spawner gave the handle up without
    // detaching or joining it (`grow.rs`), so this is its only detach.
    unsafe { libc::pthread_detach(libc::pthread_self()) };
    let record = exit_hook::register(&inner, slot_idx);
    let slot = inner.slots.get(slot_idx);
    inner.arrived();
    let mut woken = true;
    let mut rng = (u64::from(slot_idx) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ inner.epoch.elapsed().as_nanos() as u64
        | 1;
    loop {
        if woken {
            woken = false;
            if let Some(job) = inner.queue.pop() {
                inner.found_work();
                run_job(&inner, slot, job);
            }
        }
        while let Some(job) = inner.queue.pop() {
            run_job(&inner, slot, job);
        }
        if let Some(job) = inner.spin_for_job() {
            run_job(&inner, slot, job);
            continue;
        }
        if inner.is_shutdown() {
            // Shutdown: queue drained (no submitter can add more once the
            // bit is set and `begin_shutdown` saw them leave).
            if inner.queue.is_empty() {
                // Free the slot (now, or by the popper of its entry): a
                // submitter that entered before the shutdown bit may still
                // need a worker for its job after we left, and claims a
                // slot for it (test `pool::tests::a_job_queued_after_the_
                // last_worker_left_at_shutdown_still_runs`).
                inner.slots.retire(slot_idx);
                // SeqCst: pairs with the SeqCst CAS in `try_spawn`: a
                // spawner that reads this decrement also sees the slot
                // freed above (the release half), and with the SeqCst loads
                // of `workers` in `begin_shutdown` and `grow_for_queued_job`.
                inner.workers.fetch_sub(1, Ordering::SeqCst);
                record.set(
                    RetireReason::Shutdown,
                    inner.epoch.elapsed(),
                    Duration::ZERO,
                );
                break;
            }
            continue;
        }
        match idle_wait(&inner, slot_idx, &mut rng) {
            AfterIdle::Work => continue,
            AfterIdle::Woken => {
                inner.arrived();
                woken = true;
            }
            AfterIdle::Retire(keep_alive) => {
                record.set(RetireReason::Idle, inner.epoch.elapsed(), keep_alive);
                break;
            }
        }
    }
    // Nothing else here: the bookkeeping runs from the exit hook, after
    // this thread is gone.
}

/// Marks the worker idle, parks until notified, and handles its
/// keep-alive expiring.
fn idle_wait(inner: &Inner, i: u32, rng: &mut u64) -> AfterIdle {
    let slot = inner.slots.get(i);
    if let Some(after) = go_idle(inner, i) {
        return after;
    }
    // What `Retirement::keep_alive` reports: the first draw of this idle
    // period (a worker at `min_workers` draws again; those only add).
    let keep_alive = inner.keep_alive(rng);
    let mut deadline = Instant::now() + keep_alive;
    // Offline in every domain this worker's jobs used, until it next uses
    // one: while it sleeps, their grace periods need no heavy barrier on
    // its account (`crate::thread_offline`).
    crate::thread_offline();
    loop {
        let now = Instant::now();
        let wait = deadline.saturating_duration_since(now);
        if !wait.is_zero() {
            futex::wait(&slot.state, IDLE, Some(wait));
        }
        // Acquire: pairs with the SeqCst CAS to NOTIFIED (`Slots::notify`):
        // the notifier's count in `waking` (and the job) are visible.
        if slot.state.load(Ordering::Acquire) == NOTIFIED {
            slot.state.store(RUNNING, Ordering::Relaxed);
            return AfterIdle::Woken;
        }
        if Instant::now() < deadline {
            continue; // spurious wake-up or signal
        }
        // Keep-alive expired. Leave the notifiable state first.
        #[cfg(test)]
        inner.run_hook(super::inner::HookPoint::KeepAliveExpired(i));
        if !inner.slots.begin_retire(i) {
            slot.state.store(RUNNING, Ordering::Relaxed); // was NOTIFIED
            return AfterIdle::Woken;
        }
        if inner.try_retire() {
            // SeqCst fence: the retiring worker's side of the Dekker pair
            // with a submitter (push, fence in `push_and_wake`, read
            // `workers` in `try_spawn`): pairs with that fence. A job pushed
            // before our decrement may have seen the old count and started
            // no worker; take it back then.
            fence(Ordering::SeqCst);
            if (!inner.queue.is_empty() || inner.is_shutdown()) && inner.unretire() {
                // Relaxed: `RETIRING -> RUNNING`, as on the denied path
                // below. No one else writes the state of a `RETIRING` slot,
                // and a popper reading it skips any state but `IDLE`.
                slot.state.store(RUNNING, Ordering::Relaxed);
                return AfterIdle::Work;
            }
            // Our last access to the slot: frees it now, or leaves that to
            // the popper of our entry if it is still in the stack.
            inner.slots.retire(i);
            return AfterIdle::Retire(keep_alive);
        }
        // Denied (no token, or at min_workers): idle again, retry later.
        slot.state.store(RUNNING, Ordering::Relaxed);
        if let Some(after) = go_idle(inner, i) {
            return after;
        }
        let at_min = inner.workers.load(Ordering::Relaxed) <= inner.cfg.min_workers;
        deadline = if at_min {
            // Re-check only at keep-alive pace; a minimum worker stays.
            Instant::now() + inner.keep_alive(rng)
        } else {
            // Waiting for a token: try again after roughly one grace period.
            Instant::now() + inner.token_retry(rng)
        };
    }
}

/// RUNNING -> IDLE, onto the idle stack, then re-check for work. `None`:
/// the worker is idle and may park. `Some`: work or shutdown was found and
/// the worker is RUNNING again (`Woken` if a notification came meanwhile).
fn go_idle(inner: &Inner, i: u32) -> Option<AfterIdle> {
    let slot = inner.slots.get(i);
    // IDLE, and an entry in the idle stack unless one is still there: an
    // idle worker is always in the stack or being notified (Dekker with
    // `pop_idle` + `notify_slot`, see `Slots::enter_idle`).
    inner.slots.enter_idle(i);
    // SeqCst fence: the idle worker's side of two Dekker pairs: with a
    // submitter (pairs with the fence in `push_and_wake`, which then pops
    // the idle stack) and with `begin_shutdown` (pairs with the SeqCst
    // `fetch_or` of the bit in `close`, which then notifies every IDLE
    // slot). Either they see us idle, or our re-check sees their job or bit.
    fence(Ordering::SeqCst);
    if inner.queue.is_empty() && !inner.is_shutdown() {
        return None;
    }
    // Work arrived: take ourselves back, or accept a notification.
    if inner.slots.leave_idle(i) {
        Some(AfterIdle::Work)
    } else {
        // NOTIFIED: only we leave it.
        slot.state.store(RUNNING, Ordering::Relaxed);
        Some(AfterIdle::Woken)
    }
}
