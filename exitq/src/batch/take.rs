//! The drain tick's take: moving callbacks out of a sealed batch into a
//! tick's slots, advancing the batch's drain cursor (`drain.rs`).
use std::mem::MaybeUninit;
use std::ptr;

use super::{copy_words, Batch, Call, Item, INLINE_WORDS};
use crate::prefetch;

impl Batch {
    /// [`Batch::take_some`] into a whole tick's `N` slots: when the current
    /// run has `N` callbacks left or more (a steady producer's every tick),
    /// they are taken with `N` and the closure width known to the compiler:
    /// one unrolled copy and prefetch, no loop over runs.
    #[inline(always)]
    pub(crate) fn take_tick<const N: usize>(&mut self, out: &mut [MaybeUninit<Item>; N]) -> usize {
        if self.at >= self.used {
            return 0;
        }
        let base = self.buf.as_mut_ptr().cast::<usize>();
        // SAFETY: `at` is the start of a run (the encoding written by
        // `OpenBatch`): its entry point, then its count word.
        let header = unsafe { *base.add(self.at + 1) };
        let (count, words) = (header >> 2, header & 3);
        let left = count - self.in_run;
        if left < N {
            return self.take_some(out);
        }
        // SAFETY: as above.
        let call: Call = unsafe { ptr::read(base.add(self.at).cast::<Call>()) };
        // Hint the next tick's callbacks here only if the run holds them
        // all (the common case), else as `take_some` does.
        let ahead = left >= 2 * N;
        // SAFETY: closures `in_run..in_run + N` of this run, not yet taken
        // (the cursor moves past them below, so each is moved out exactly
        // once), `words` words each, at most `INLINE_WORDS`; with `ahead`,
        // the `N` after them are in the run too.
        unsafe {
            let src = base.add(self.at + 2 + self.in_run * words);
            match words {
                0 => take_tick_run::<0, N>(call, src, out, false),
                1 => take_tick_run::<1, N>(call, src, out, ahead),
                2 => take_tick_run::<2, N>(call, src, out, ahead),
                _ => take_tick_run::<INLINE_WORDS, N>(call, src, out, ahead),
            }
        }
        self.in_run += N;
        self.taken += N;
        if !ahead {
            self.prefetch_next(N);
        }
        N
    }

    /// Moves callbacks, oldest first, out of the sealed batch into `out`
    /// (as many as it has slots, or as the batch has left), advancing the
    /// drain cursor; returns how many (the first slots written). Each is
    /// then the caller's to run (`Item::run_in`), whatever happens to the
    /// batch meanwhile.
    ///
    /// Across runs and batches, into any number of slots (a tick that
    /// `take_tick` cannot fill from one run): a run's callbacks are copied
    /// in one loop per closure width, the cursor kept in locals and stored
    /// once.
    pub(crate) fn take_some(&mut self, out: &mut [MaybeUninit<Item>]) -> usize {
        let base = self.buf.as_mut_ptr().cast::<usize>();
        let (mut at, mut in_run, mut n) = (self.at, self.in_run, 0);
        while n < out.len() && at < self.used {
            // SAFETY: `at` is the start of a run (the encoding written by
            // `OpenBatch`): its entry point, then its count word.
            let call: Call = unsafe { ptr::read(base.add(at).cast::<Call>()) };
            // SAFETY: as above.
            let header = unsafe { *base.add(at + 1) };
            let (count, words) = (header >> 2, header & 3);
            if in_run == count {
                at += 2 + count * words;
                in_run = 0;
                continue;
            }
            let k = (count - in_run).min(out.len() - n);
            let slots = &mut out[n..n + k];
            // SAFETY: closures `in_run..in_run + k` of this run, not yet
            // taken (the cursor moves past them below, so each is moved out
            // exactly once), `words` words each, at most `INLINE_WORDS`.
            unsafe {
                let src = base.add(at + 2 + in_run * words);
                match words {
                    0 => take_run::<0>(call, src, slots),
                    1 => take_run::<1>(call, src, slots),
                    2 => take_run::<2>(call, src, slots),
                    _ => take_run::<INLINE_WORDS>(call, src, slots),
                }
            }
            in_run += k;
            n += k;
        }
        (self.at, self.in_run) = (at, in_run);
        self.taken += n;
        self.prefetch_next(out.len());
        n
    }

    /// Hints the memory of the next `n` callbacks of the open run past
    /// the drain cursor ([`prefetch`]): they run at the
    /// next tick, a few `defer`s from now.
    #[inline]
    fn prefetch_next(&self, n: usize) {
        if self.at >= self.used {
            return;
        }
        let base = self.buf.as_ptr().cast::<usize>();
        // SAFETY: `at` is the start of a run (as in `take_some`).
        let header = unsafe { *base.add(self.at + 1) };
        let (count, words) = (header >> 2, header & 3);
        let next = count.saturating_sub(self.in_run).min(n);
        // SAFETY: closures `in_run..in_run + next` of this run, written by
        // `OpenBatch` and not taken: `next * words` consecutive words
        // inside `buf`, which the caller owns (`&self`, in its owner
        // section).
        unsafe { prefetch::targets(base.add(self.at + 2 + self.in_run * words), next * words) };
    }
}

/// Moves `slots.len()` closures of `W` words each, starting at `src`, into
/// `slots` as [`Item`]s with entry point `call` (`Batch::take_some`).
///
/// # Safety
///
/// `src` holds `slots.len()` consecutive closures of one run (entry point
/// `call`, `W` words each, `W <= INLINE_WORDS`), not yet moved out; the
/// caller's cursor moves past them.
#[inline(always)]
unsafe fn take_run<const W: usize>(call: Call, src: *const usize, slots: &mut [MaybeUninit<Item>]) {
    for (j, slot) in slots.iter_mut().enumerate() {
        let item = slot.as_mut_ptr();
        // SAFETY: closure `j` of the caller's range: `W` words inside the
        // batch, written straight into the slot's `data` (`W <=
        // INLINE_WORDS`; no whole `Item` built and moved: its unused words
        // stay unwritten), beside its entry point. The slot is the
        // caller's to write.
        unsafe {
            ptr::addr_of_mut!((*item).call).write(call);
            copy_words(
                src.add(j * W),
                ptr::addr_of_mut!((*item).data).cast::<usize>(),
                W,
            );
        }
    }
}

/// [`take_run`] of `N` callbacks, `W` words each, then (with `ahead`)
/// hints the `N` after them ([`prefetch::targets`]), with both counts
/// known to the compiler.
///
/// # Safety
///
/// As [`take_run`]; with `ahead`, the `N * W` words after the range are
/// closures of the same run, not taken.
#[inline(always)]
unsafe fn take_tick_run<const W: usize, const N: usize>(
    call: Call,
    src: *const usize,
    out: &mut [MaybeUninit<Item>; N],
    ahead: bool,
) {
    // SAFETY: the caller's contract.
    unsafe { take_run::<W>(call, src, out) };
    if ahead {
        // SAFETY: the caller's contract: `N * W` words of the run, which
        // the caller owns (in its owner section).
        unsafe { prefetch::targets(src.add(N * W), N * W) };
    }
}
