//! Canary words at the far end of every stack.
//!
//! # Canaries
//!
//! With [`StackPoolBuilder::canary`](crate::stacks::StackPoolBuilder::canary) (the default),
//! the four lowest words of each stack hold a state word and three pattern
//! words:
//! * hand-out: the spawner swaps the state from `FREE(gen)` to
//!   `IN_USE(gen+1)`; anything else (or a damaged pattern) means someone
//!   wrote the far end of a stack that should be idle;
//! * recycle: after the join, the recycler swaps `IN_USE(gen)` to
//!   `FREE(gen)` with a CAS; anything else means the far end was written
//!   while the stack was lent (a thread that nearly overflowed, or one that
//!   still runs on it).
//!
//! State table of the state word (`canary[0]`; `g` is the stack's hand-out
//! generation, `Header::gen`):
//!
//! | from          | to              | by                                            |
//! |---------------|-----------------|-----------------------------------------------|
//! | (mapped)      | `FREE(0)`       | `canary_init`, with the pattern words         |
//! | `FREE(g)`     | `IN_USE(g + 1)` | the spawner's swap at hand-out; `gen` becomes `g + 1` |
//! | `IN_USE(g)`   | `FREE(g)`       | the recycler's CAS, after the join            |
//! | anything else | `QUARANTINED`   | a failed check (`quarantine`): never lent again |
//!
//! Every access is Relaxed: the words are owned by whoever owns the stack
//! (ownership passes with the orderings described in `shared.rs`), and a
//! thread that writes them by mistake is what the check detects, not a
//! party to any protocol.
//!
//! A stack failing either check is counted in
//! [`StackPoolStats::canary_violations`](crate::stacks::StackPoolStats::canary_violations) and
//! quarantined: never handed out again, unmapped only when the pool is
//! drained. The test suite uses this to show that an unsound recycling rule
//! (returning the stack from the exit destructor) is caught, and that the
//! join rule is never.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use super::shared::{Header, Shared};

/// Number of 64-bit canary words at the far (lowest) end of every stack.
pub(super) const CANARY_WORDS: usize = 4;

/// Canary state word of a stack that is idle in the pool (generation `gen`).
#[inline]
pub(super) fn canary_free(gen: u64) -> u64 {
    0x4652_4545_5354_4b00 ^ gen.rotate_left(8)
}

/// Canary state word of a stack lent to a thread (generation `gen`).
#[inline]
pub(super) fn canary_in_use(gen: u64) -> u64 {
    0x494e_5553_4553_5400 ^ gen.rotate_left(8)
}

/// Canary state word the pool writes into a quarantined stack.
pub(super) const CANARY_QUARANTINED: u64 = 0x5155_4152_414e_5449;

/// Pattern word `i` (1..CANARY_WORDS) of the stack whose canary is at `at`.
#[inline]
fn canary_pattern(at: usize, i: usize) -> u64 {
    (0x5041_5454_4552_4e00 | i as u64) ^ (at as u64)
}

impl Shared {
    pub(super) fn canary(&self, hdr: NonNull<Header>) -> &[AtomicU64; CANARY_WORDS] {
        // SAFETY: the lowest 32 bytes of the stack are mapped read-write for
        // as long as the stack is mapped (and we hold it); the address is
        // page aligned. They are accessed only atomically by the pool, so a
        // thread writing them by mistake is a detectable race, not UB here.
        unsafe { &*self.stack_low(hdr).cast::<[AtomicU64; CANARY_WORDS]>() }
    }

    /// A fresh stack's canary: `FREE(0)` and the pattern words.
    pub(super) fn canary_init(&self, hdr: NonNull<Header>) {
        let c = self.canary(hdr);
        let at = c.as_ptr() as usize;
        c[0].store(canary_free(0), Ordering::Relaxed);
        for (i, w) in c.iter().enumerate().skip(1) {
            w.store(canary_pattern(at, i), Ordering::Relaxed);
        }
    }

    /// Hand-out check: FREE(gen) → IN_USE(gen+1); false if anything else
    /// was there (someone wrote the far end of an idle stack).
    pub(super) fn canary_hand_out(&self, hdr: NonNull<Header>, gen: u64) -> bool {
        let c = self.canary(hdr);
        let at = c.as_ptr() as usize;
        let seen = c[0].swap(canary_in_use(gen + 1), Ordering::Relaxed);
        let pattern_ok =
            (1..CANARY_WORDS).all(|i| c[i].load(Ordering::Relaxed) == canary_pattern(at, i));
        if seen != canary_free(gen) || !pattern_ok {
            self.c.canary_violations.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Recycle check: IN_USE(gen) → FREE(gen); false if the far end was
    /// written while the stack was lent.
    pub(super) fn canary_recycle(&self, hdr: NonNull<Header>) -> bool {
        // SAFETY: the caller owns the stack (joined, or unsound test mode).
        let gen = unsafe { hdr.as_ref() }.gen.load(Ordering::Relaxed);
        let c = self.canary(hdr);
        let at = c.as_ptr() as usize;
        let swapped = c[0]
            .compare_exchange(
                canary_in_use(gen),
                canary_free(gen),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok();
        let pattern_ok =
            (1..CANARY_WORDS).all(|i| c[i].load(Ordering::Relaxed) == canary_pattern(at, i));
        if !swapped || !pattern_ok {
            self.c.canary_violations.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub(super) fn quarantine(&self, hdr: NonNull<Header>) {
        self.canary(hdr)[0].store(CANARY_QUARANTINED, Ordering::Relaxed);
        self.c.quarantined.fetch_add(1, Ordering::Relaxed);
        self.quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(hdr);
    }

    pub(super) fn unmap_quarantine(&self) {
        let q = std::mem::take(&mut *self.quarantine.lock().unwrap_or_else(|e| e.into_inner()));
        for h in q {
            self.unmap(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state words are distinct: free from lent, one generation from
    /// the next, and neither is the quarantine mark or an untouched page.
    #[test]
    fn state_words_never_collide() {
        for g in 0..4096u64 {
            for h in g..g + 3 {
                assert_ne!(canary_free(g), canary_in_use(h), "{g} {h}");
                assert_ne!(canary_in_use(g), canary_free(h), "{g} {h}");
            }
            assert_ne!(canary_free(g), canary_free(g + 1));
            assert_ne!(canary_in_use(g), canary_in_use(g + 1));
            for w in [canary_free(g), canary_in_use(g)] {
                assert_ne!(w, CANARY_QUARANTINED);
                assert_ne!(w, 0);
            }
        }
    }
}
