//! The batch: how deferred closures are stored until they run.
//!
//! `defer(f)` stores the closure in the calling thread's open batch: inline
//! when it fits in three words, boxed otherwise. The batch is packed in
//! runs of closures of one type (see [`Batch`]), so `defer(move ||
//! drop(p))` writes one word: the fast path compares the closure's entry
//! point with the open run's and writes the closure itself
//! ([`OpenBatch::try_push_fn`]; a boxed closure, or a slow path, goes
//! through a [`Deferred`]). No shared atomic is touched per call.
//!
//! Whoever runs a sealed batch hints the memory of the callbacks it runs
//! next ([`prefetch`]): a drain tick the next tick's, a
//! whole-batch run [`AHEAD`] callbacks ahead.
//!
//! A batch is a [`Node`] of the domain's lock-free list carrying
//! [`Work::Batch`], so the same node moves, without copying or allocating,
//! from the thread's open batch to its sealed queue, then to its ready
//! queue or to the domain's queue (at thread exit, or when another thread
//! takes it), and back to a pool of empty batches (or the record's spare)
//! once it has run.
//!
//! A thread's first batch is small ([`FIRST_BATCH`] callbacks, 0.8 KB
//! against 6 KB at the default batch size of 256), its later ones full:
//! most short-lived threads defer a few callbacks and exit, and their
//! batch waits a grace period or two in the domain's queue, so in a herd
//! of exiting threads the nodes are most of the memory exitq holds (and
//! the pages glibc's arenas grow for it, under the process's `mmap_lock`).
//! Small and full nodes are pooled apart (`Inner::recycle_node`); a
//! record's spare is always a full one (`drain::keep_node`).
//!
//! This module is all single-threaded code (the callers own the batch), so
//! miri checks it on its own (`scripts/test.d/30-miri.sh`).
use std::any::Any;
use std::mem::{self, MaybeUninit};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::llist::Node;
use crate::prefetch;

/// Words of inline storage for one deferred closure: closures up to this
/// size (and word-aligned) are stored in the batch itself; larger ones are
/// boxed and the batch holds the box pointer.
const INLINE_WORDS: usize = 3;

/// Callbacks of a thread's first batch (module docs): room for what a
/// short-lived thread defers, then full batches.
pub(crate) const FIRST_BATCH: usize = 32;

/// Callbacks ahead of the running one whose memory a whole-batch run
/// hints ([`prefetch`]): a few hundred nanoseconds of callbacks, a miss's
/// latency.
const AHEAD: usize = 8;

/// A batch item's entry point: consumes the closure stored at the pointer.
type Call = unsafe fn(*mut usize);

/// Whether `F` is stored inline (else boxed).
#[inline(always)]
pub(crate) const fn fits_inline<F>() -> bool {
    mem::size_of::<F>() <= INLINE_WORDS * mem::size_of::<usize>()
        && mem::align_of::<F>() <= mem::align_of::<usize>()
}

/// Words one `F` takes in a batch: its size rounded up to words (0 for a
/// zero-sized closure), or 1 (the box) when boxed.
#[inline(always)]
pub(crate) const fn words_of<F>() -> usize {
    if fits_inline::<F>() {
        mem::size_of::<F>().div_ceil(mem::size_of::<usize>())
    } else {
        1
    }
}

/// The entry point of an inline `F` (`Deferred::new`, and the typed fast
/// path `OpenBatch::try_push_fn`, which must name the same one).
///
/// # Safety
///
/// `raw` holds an `F` written by `Deferred::new` or `try_push_fn` and not
/// yet consumed (word-aligned: `F`'s alignment is at most a word's).
unsafe fn call_inline<F: FnOnce()>(raw: *mut usize) {
    // SAFETY: per the contract, read once, then the slot is dead.
    let f: F = unsafe { ptr::read(raw.cast::<F>()) };
    f();
}

/// A type-erased `FnOnce() + Send` on its way into a batch: the entry
/// point, the inline words (or the box pointer) and how many words count.
pub(crate) struct Deferred {
    call: Call,
    words: usize,
    data: MaybeUninit<[usize; INLINE_WORDS]>,
}

impl Deferred {
    /// Batch words the closure takes (see [`words_of`]).
    #[inline(always)]
    pub(crate) fn words(&self) -> usize {
        self.words
    }

    #[inline(always)]
    pub(crate) fn new<F: FnOnce() + Send + 'static>(f: F) -> Deferred {
        let mut data = MaybeUninit::<[usize; INLINE_WORDS]>::uninit();
        if fits_inline::<F>() {
            // SAFETY: `F` fits in `data` (size and alignment checked).
            unsafe { ptr::write(data.as_mut_ptr().cast::<F>(), f) };
            Deferred {
                call: call_inline::<F>,
                words: words_of::<F>(),
                data,
            }
        } else {
            /// # Safety
            /// `raw` holds a `Box<F>` written by `new` and not yet consumed.
            unsafe fn call_boxed<F: FnOnce()>(raw: *mut usize) {
                // SAFETY: per the contract, read once, then the slot is dead.
                let f: Box<F> = unsafe { ptr::read(raw.cast::<Box<F>>()) };
                f();
            }
            // SAFETY: a `Box` is one word: it fits in `data`.
            unsafe { ptr::write(data.as_mut_ptr().cast::<Box<F>>(), Box::new(f)) };
            Deferred {
                call: call_boxed::<F>,
                words: 1,
                data,
            }
        }
    }
}

/// A batch of deferred callbacks, packed as runs of closures of one type
/// (liburcu's `defer_rcu` queue stores the function only when it changes,
/// for the same reason): each run is a header of two words (the entry
/// point, then `count << 2 | words per closure`) followed by `count`
/// closures of that many words each. Deferring `move || drop(ptr)` costs
/// one word of batch memory instead of four, so a batch crosses from its
/// producer to the reclaimer in a quarter of the cache lines.
pub(crate) struct Batch {
    buf: Box<[MaybeUninit<usize>]>,
    /// Words written; valid once the batch is sealed (`OpenBatch::take`).
    used: usize,
    /// Callbacks in the batch.
    pub(crate) len: usize,
    /// Callbacks when sealed (what `pending` counts for this batch).
    pub(crate) sealed_len: usize,
    /// The grace period that must complete before the batch runs (0: none
    /// chosen yet; a reclaim pass then waits for one that starts after it
    /// took the batch).
    pub(crate) wait_gp: u64,
    /// `sealed_len` is counted in the domain's `pending` (sealed, not yet
    /// run).
    pub(crate) in_pending: bool,
    /// Counted in the domain's `held` batches (held by a thread). A batch
    /// pushed at thread exit, where only one compare-and-swap is allowed,
    /// keeps its counts: whoever runs it settles them.
    pub(crate) in_held: bool,
    /// The drain cursor ([`Batch::take_some`]): the word where the run of
    /// the next callback starts, how many of that run's callbacks were
    /// taken, and how many callbacks were taken in all. [`Batch::run`]
    /// resumes there.
    at: usize,
    in_run: usize,
    taken: usize,
}

/// One callback taken out of a batch: its entry point and its words,
/// moved out of the batch memory (which may then be run, stolen or reused
/// by others). It must be run ([`Item::run_in`]; dropping it leaks the
/// closure).
pub(crate) struct Item {
    call: Call,
    data: MaybeUninit<[usize; INLINE_WORDS]>,
}

impl Item {
    /// Runs the callback in `slot` where it lies, consuming it (also if it
    /// panics): a drain tick's callbacks run from its array without a
    /// copy each (`run::run_items_and_chain`).
    ///
    /// # Safety
    ///
    /// `slot` holds an `Item` not run yet; afterwards the slot is dead:
    /// nothing reads or runs it as an `Item` again.
    #[inline]
    pub(crate) unsafe fn run_in(slot: &mut MaybeUninit<Item>) {
        let item = slot.as_mut_ptr();
        // SAFETY: the caller's contract: an `Item` whose `data` holds the
        // closure's words, not consumed yet, with `call` its entry point;
        // consumed here, once.
        unsafe { ((*item).call)(ptr::addr_of_mut!((*item).data).cast::<usize>()) }
    }
}

impl Batch {
    /// Words of batch memory for `batch_size` callbacks: enough for that
    /// many closures of up to `INLINE_WORDS` words of one type. Runs of
    /// alternating types need two header words each, so such a batch may
    /// be sealed with fewer callbacks.
    fn capacity(batch_size: usize) -> usize {
        batch_size.saturating_mul(INLINE_WORDS).saturating_add(2)
    }

    /// Whether the batch memory holds `batch_size` callbacks of one type
    /// (the node may serve a batch of that size).
    #[inline]
    pub(crate) fn holds(&self, batch_size: usize) -> bool {
        self.buf.len() >= Batch::capacity(batch_size)
    }

    /// Callbacks of one type the batch memory holds.
    #[inline]
    fn slots(&self) -> usize {
        self.buf.len().saturating_sub(2) / INLINE_WORDS
    }

    /// An empty batch for `batch_size` callbacks.
    pub(crate) fn new(batch_size: usize) -> Batch {
        let mut buf = Vec::with_capacity(Batch::capacity(batch_size));
        buf.resize(buf.capacity(), MaybeUninit::uninit());
        Batch {
            buf: buf.into_boxed_slice(),
            used: 0,
            len: 0,
            sealed_len: 0,
            wait_gp: 0,
            in_pending: false,
            in_held: false,
            at: 0,
            in_run: 0,
            taken: 0,
        }
    }

    /// Whether every callback was taken out (`take_some`).
    #[inline]
    pub(crate) fn drained(&self) -> bool {
        self.taken == self.len
    }

    /// Runs every callback not taken out yet once (from the drain cursor
    /// on), each under `catch_unwind`; returns (the batch's callbacks, run
    /// here or taken out before, of which panicked here) and leaves the
    /// batch empty. `forked` says whether the process is now a fork child
    /// of the one the run started in (`run.rs` passes the fork-generation
    /// check): a callback that forks and returns in the child stops the
    /// child's run right after it (the rest is the parent's, `fork.rs`),
    /// leaving the batch as it is for the caller to abandon.
    pub(crate) fn run(&mut self, forked: impl Fn() -> bool) -> (u64, u64) {
        let base = self.buf.as_mut_ptr().cast::<usize>();
        let (mut ran, mut panicked) = (self.taken as u64, 0u64);
        let mut at = self.at;
        let mut resume = self.in_run;
        while at < self.used {
            // SAFETY: `at` is the start of a run (the encoding written by
            // `OpenBatch`): its entry point, then its count word.
            let call: Call = unsafe { ptr::read(base.add(at).cast::<Call>()) };
            // SAFETY: as above.
            let header = unsafe { *base.add(at + 1) };
            let (count, words) = (header >> 2, header & 3);
            // SAFETY: the run's closures follow its header.
            let data = unsafe { base.add(at + 2) };
            // The first run may have been drained in part.
            let mut next = std::mem::take(&mut resume);
            ran -= next as u64;
            while next < count {
                // Several closures per `catch_unwind`; after a panic, resume
                // after the closure that panicked (`next` already moved on).
                let done = catch_unwind(AssertUnwindSafe(|| {
                    while next < count {
                        // SAFETY: closure `next` of this run, written by
                        // `OpenBatch` and not yet consumed; `next`
                        // moves past it before the call, so it is consumed
                        // exactly once even if it panics.
                        let item = unsafe { data.add(next * words) };
                        if next + AHEAD < count {
                            // SAFETY: closure `next + AHEAD` of this run,
                            // not yet consumed, inside the batch we own.
                            unsafe { prefetch::targets(item.add(AHEAD * words), words) };
                        }
                        next += 1;
                        // SAFETY: `call` is this run's entry point for the
                        // closures stored at `item`.
                        unsafe { call(item) };
                        if forked() {
                            break;
                        }
                    }
                }));
                if let Err(payload) = done {
                    panicked += 1;
                    drop_payload(payload);
                }
                if forked() {
                    return (ran, panicked);
                }
            }
            ran += count as u64;
            at += 2 + count * words;
        }
        self.reset();
        (ran, panicked)
    }

    /// Empties the batch for reuse (its callbacks ran).
    fn reset(&mut self) {
        self.used = 0;
        self.len = 0;
        self.sealed_len = 0;
        self.at = 0;
        self.in_run = 0;
        self.taken = 0;
    }
}

/// A thread's open batch and its write cursor (in the participant record;
/// the owner writes it, a stealer takes it under the steal handshake).
/// The fast path of `defer` checks it (`joins_run`: the open run's entry
/// point and width, `left`, the room between `cur` and `end`) and writes
/// the closure at `cur`.
pub(crate) struct OpenBatch {
    node: Option<Box<Node<Work>>>,
    /// Entry point of the open run (as an address; 0: no open run).
    run_call: usize,
    /// Words per closure of the open run.
    run_words: usize,
    /// Callbacks the batch may take before `defer` takes its slow path
    /// (0 when none is open): all it may still take, or fewer while a
    /// drain tick is armed ([`OpenBatch::tick`]).
    left: usize,
    /// Callbacks the batch may take beyond `left` (a drain tick's).
    reserve: usize,
    /// Next free word, and the end of the batch memory.
    cur: *mut usize,
    end: *mut usize,
    /// The open run's count word, and `left` when the run opened.
    run_header: *mut usize,
    run_left: usize,
    /// `left` when the batch opened.
    opened_with: usize,
}

impl OpenBatch {
    pub(crate) const fn new() -> OpenBatch {
        OpenBatch {
            node: None,
            run_call: 0,
            run_words: 0,
            left: 0,
            reserve: 0,
            cur: ptr::null_mut(),
            end: ptr::null_mut(),
            run_header: ptr::null_mut(),
            run_left: 0,
            opened_with: 0,
        }
    }

    /// Whether a closure with entry point `call` and `words` words may be
    /// appended to the open run: the fast paths' one check.
    ///
    /// Comparing entry points as addresses: two closure types whose entry
    /// points share an address (identical code merged by the linker) with
    /// the same word count behave the same, so they may share a run; equal
    /// types never compare unequal within one batch's lifetime except
    /// across codegen units, which only starts a new run.
    #[inline(always)]
    fn joins_run(&self, call: Call, words: usize) -> bool {
        let room = (self.end as usize).wrapping_sub(self.cur as usize) / mem::size_of::<usize>();
        self.run_call == call as usize && self.run_words == words && self.left != 0 && room >= words
    }

    /// The fast path: appends `d` to the open run if it has the same type
    /// and fits. Returns it back otherwise.
    #[inline(always)]
    pub(crate) fn try_push(&mut self, d: Deferred, words: usize) -> Result<(), Deferred> {
        debug_assert_eq!(words, d.words);
        if self.joins_run(d.call, words) {
            // SAFETY: `cur..cur + words` lies inside the open batch's
            // memory (`joins_run` checked the room), owned by us
            // (handshake); `data` holds
            // `words` initialised words of the closure (padding bytes may
            // be uninitialised, which the `MaybeUninit` buffer allows).
            unsafe {
                copy_words(d.data.as_ptr().cast::<usize>(), self.cur, words);
                self.cur = self.cur.add(words);
            }
            self.left -= 1;
            Ok(())
        } else {
            Err(d)
        }
    }

    /// The fast path for a closure whose type is known here (inline,
    /// [`fits_inline`]): as [`try_push`](OpenBatch::try_push), writing `f`
    /// straight into the batch. Through a `Deferred`, the compiler kept the
    /// closure in a stack slot (the slow paths take it by value) and copied
    /// its two words with one 16-byte load across two 8-byte stores, a
    /// store-forwarding stall: a third of `defer_free`'s producer loop.
    #[inline(always)]
    pub(crate) fn try_push_fn<F: FnOnce() + Send + 'static>(&mut self, f: F) -> Result<(), F> {
        debug_assert!(fits_inline::<F>());
        let words = words_of::<F>();
        if self.joins_run(call_inline::<F>, words) {
            // SAFETY: `cur..cur + words` lies inside the open batch's
            // memory (`joins_run` checked the room), owned by us
            // (handshake), word-aligned, and
            // `F` fits in `words` words with at most a word's alignment
            // (`fits_inline`): the same bytes `Deferred::new` then
            // `try_push` would write, read back by `call_inline::<F>`, this
            // run's entry point.
            unsafe {
                ptr::write(self.cur.cast::<F>(), f);
                self.cur = self.cur.add(words);
            }
            self.left -= 1;
            Ok(())
        } else {
            Err(f)
        }
    }

    /// Opens a run for `d` and appends it, if the open batch has room for
    /// the run's header and `d`. Returns it back otherwise.
    pub(crate) fn push_new_run(&mut self, d: Deferred) -> Result<(), Deferred> {
        let room = (self.end as usize).wrapping_sub(self.cur as usize) / mem::size_of::<usize>();
        if self.left == 0 || room < 2 + d.words {
            return Err(d);
        }
        self.close_run();
        // SAFETY: two header words fit (`room`); the entry point is written
        // as its own type so it keeps its provenance for `Batch::run`.
        unsafe {
            ptr::write(self.cur.cast::<Call>(), d.call);
            self.run_header = self.cur.add(1);
            *self.run_header = d.words;
            self.cur = self.cur.add(2);
        }
        self.run_call = d.call as usize;
        self.run_words = d.words;
        self.run_left = self.left;
        let words = d.words;
        self.try_push(d, words)
    }

    /// Writes the open run's count into its header.
    fn close_run(&mut self) {
        if self.run_call != 0 {
            let count = self.run_left - self.left;
            // SAFETY: `run_header` points into the open batch's memory.
            unsafe { *self.run_header = (count << 2) | self.run_words };
            self.run_call = 0;
        }
    }

    /// Callbacks the open batch may take before the next slow path (0
    /// when none is open, or when a drain tick is due).
    #[inline(always)]
    pub(crate) fn left(&self) -> usize {
        self.left
    }

    /// Arms a drain tick: `defer` takes its slow path after at most
    /// `every` more callbacks, even if the batch has room for more (the
    /// owner then drains a few ready callbacks, `local.rs`). Costs the
    /// fast path nothing: it already counts `left` down.
    pub(crate) fn tick(&mut self, every: usize) {
        self.set_left((self.left + self.reserve).min(every));
    }

    /// Disarms the drain tick: `left` is all the batch may take again.
    pub(crate) fn untick(&mut self) {
        self.set_left(self.left + self.reserve);
    }

    /// Sets `left` out of the batch's room (`left + reserve`), keeping the
    /// open run's count right (it is `run_left - left`).
    fn set_left(&mut self, left: usize) {
        let total = self.left + self.reserve;
        debug_assert!(left <= total);
        // (Wrapping: without an open run `run_left` is stale and unused.)
        self.run_left = self.run_left.wrapping_add(left).wrapping_sub(self.left);
        self.left = left;
        self.reserve = total - left;
    }

    /// Opens `node` (an empty batch) for `batch_size` callbacks, or as many
    /// as its memory holds if fewer (a thread's small first batch); `held`:
    /// whether it counts in the domain's held batches (`Batch::in_held`).
    pub(crate) fn open(&mut self, mut node: Box<Node<Work>>, batch_size: usize, held: bool) {
        let Work::Batch(b) = &mut node.value else {
            unreachable!("exit node as a batch")
        };
        debug_assert!(b.used == 0 && b.len == 0);
        b.wait_gp = 0;
        b.in_pending = false;
        b.in_held = held;
        let range = b.buf.as_mut_ptr_range();
        self.cur = range.start.cast::<usize>();
        self.end = range.end.cast::<usize>();
        let batch_size = batch_size.min(b.slots());
        self.left = batch_size;
        self.reserve = 0;
        self.opened_with = batch_size;
        self.run_call = 0;
        self.node = Some(node);
    }

    /// Seals and takes the open batch, if any.
    pub(crate) fn take(&mut self) -> Option<Box<Node<Work>>> {
        let mut node = self.node.take()?;
        self.close_run();
        let Work::Batch(b) = &mut node.value else {
            unreachable!("exit node as a batch")
        };
        let start = b.buf.as_mut_ptr().cast::<usize>();
        b.used = (self.cur as usize - start as usize) / mem::size_of::<usize>();
        b.len = self.opened_with - self.left - self.reserve;
        b.sealed_len = b.len;
        *self = OpenBatch::new();
        Some(node)
    }
}

/// Copies `words` (at most `INLINE_WORDS`) words: unrolled, because a
/// `memcpy` call would cost more than the rest of `defer`'s fast path. As
/// `MaybeUninit` words, which keep pointer provenance and padding as is.
///
/// # Safety
///
/// As `ptr::copy_nonoverlapping(src, dst, words)`.
#[inline(always)]
unsafe fn copy_words(src: *const usize, dst: *mut usize, words: usize) {
    type W = MaybeUninit<usize>;
    let (src, dst) = (src.cast::<W>(), dst.cast::<W>());
    // SAFETY: the caller's contract, `words` words each side (all arms).
    unsafe {
        match words {
            0 => {}
            1 => ptr::write(dst, ptr::read(src)),
            2 => ptr::write(dst.cast::<[W; 2]>(), ptr::read(src.cast::<[W; 2]>())),
            _ => {
                debug_assert_eq!(words, INLINE_WORDS);
                ptr::write(dst.cast::<[W; 3]>(), ptr::read(src.cast::<[W; 3]>()))
            }
        }
    }
}

/// What the domain's list carries.
pub(crate) enum Work {
    /// Deferred callbacks.
    Batch(Batch),
    /// One exit hook (allocated at registration).
    Exit(Box<dyn FnOnce() + Send>),
}

/// Drops a panic payload caught from a callback. A payload whose own
/// `Drop` panics must not escape the thread running callbacks: that second
/// panic is caught too and its payload leaked (dropping it could panic
/// again, forever).
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        mem::forget(again);
    }
}

mod take;

/// The batch encoding on its own (no threads, so miri runs it too:
/// `scripts/test.d/30-miri.sh`).
#[cfg(test)]
mod tests;
