//! Staggered retirement: when an idle worker may leave, and how many may be
//! leaving at once.
//!
//! # Keep-alive with jitter
//! Workers started by one burst go idle together; with a plain keep-alive
//! they would all time out in the same instant and exit as a herd. So each
//! idle period lasts `keep_alive + uniform[0, jitter)` (`Inner::keep_alive`,
//! a xorshift per worker: jitter needs no quality).
//!
//! # Retirement tokens
//! At most `retire_batch` (K) workers may be between "decided to retire" and
//! "cleaned up by the reclaimer" at once. `Inner::retire_tokens` starts at K:
//!
//! * a worker whose keep-alive expired takes a token (`Inner::try_retire`)
//!   and then lowers `workers`, unless that would go below `min_workers`
//!   (then it gives the token straight back and stays);
//! * the token comes back only from the worker's exit hook
//!   (`exit_hook::worker_exited`), which exitq runs after the thread is gone
//!   and a grace period has passed, in a batch with other exits. So at most
//!   K workers exit per grace period;
//! * a worker that finds work right after lowering `workers` takes itself
//!   back (`Inner::unretire`) and returns its token at once;
//! * a worker denied a token stays idle (and available) and asks again after
//!   roughly one grace period (`worker::idle_wait`).
//!
//! The token count needs only the atomicity of its read-modify-writes; the
//! Acquire/Release pairs on it (give-back Release, take Acquire) make a
//! retiring worker start after the bookkeeping of the exit whose token it
//! got, which nothing relies on: stronger than needed, and cheap (the
//! operations are RMWs anyway).
//!
//! `workers` is lowered with a SeqCst CAS: it is one side of the Dekker
//! pair with `try_spawn` (see `wake.rs`, "No job is stranded").

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::inner::Inner;

impl Inner {
    /// Idle timeout for the next idle period.
    pub(super) fn keep_alive(&self, rng: &mut u64) -> Duration {
        let j = self.cfg.jitter.as_nanos() as u64;
        let extra = if j == 0 { 0 } else { next_rand(rng) % j };
        self.cfg.keep_alive + Duration::from_nanos(extra)
    }

    /// The pause before a worker denied a token asks again: roughly one
    /// grace period, jittered.
    pub(super) fn token_retry(&self, rng: &mut u64) -> Duration {
        let base =
            (self.cfg.keep_alive / 16).clamp(Duration::from_millis(1), Duration::from_millis(20));
        base + Duration::from_nanos(next_rand(rng) % base.as_nanos() as u64)
    }

    /// A worker whose keep-alive expired asks to leave: it needs a token
    /// and the pool must stay at or above `min_workers`.
    pub(super) fn try_retire(&self) -> bool {
        let mut t = self.retire_tokens.load(Ordering::Relaxed);
        loop {
            if t == 0 {
                self.retire_deferred.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            // Acquire: pairs with the Release give-backs (`worker_exited`,
            // and the two below); stronger than needed (module docs).
            match self.retire_tokens.compare_exchange_weak(
                t,
                t - 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => t = now,
            }
        }
        let mut w = self.workers.load(Ordering::Relaxed);
        loop {
            if w <= self.cfg.min_workers {
                // Release: pairs with the Acquire CAS above (of the next
                // worker to take this token); stronger than needed.
                self.retire_tokens.fetch_add(1, Ordering::Release);
                return false;
            }
            // SeqCst: the decrement of the Dekker pair with `try_spawn`'s
            // SeqCst CAS (`wake.rs` docs); our caller then fences and
            // re-checks the queue (`worker::idle_wait`).
            match self
                .workers
                .compare_exchange_weak(w, w - 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Undoes `try_retire` when work arrived meanwhile; false at max (then
    /// the other workers take the work).
    pub(super) fn unretire(&self) -> bool {
        let mut w = self.workers.load(Ordering::Relaxed);
        loop {
            if w >= self.cfg.max_workers {
                return false;
            }
            // SeqCst: as every RMW of `workers` (read by the Dekker pairs in
            // `wake.rs`); this undo needs only the RMW order, which keeps
            // the count within `max_workers`: stronger than needed.
            match self
                .workers
                .compare_exchange_weak(w, w + 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => {
                    // Release: pairs with the Acquire CAS in `try_retire`,
                    // as above; stronger than needed.
                    self.retire_tokens.fetch_add(1, Ordering::Release);
                    return true;
                }
                Err(now) => w = now,
            }
        }
    }
}

/// xorshift64*: jitter only, not for anything that needs quality.
fn next_rand(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}
