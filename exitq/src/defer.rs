//! Deferred callbacks: per-thread batches, publication, the reclaimer,
//! `barrier`.
//!
//! # The batch
//!
//! `defer(f)` stores the closure in the calling thread's open batch: inline
//! when it fits in three words, boxed otherwise. The batch is packed in
//! runs of closures of one type (see [`Batch`]), so `defer(move ||
//! drop(p))` writes one word: the fast path compares the closure's entry
//! point with the open run's and copies the captured words. No shared
//! atomic is touched per call. A full batch is published whole with one
//! compare-and-swap onto the domain's list. Batch nodes are recycled
//! through a bounded pool, so a steady producer does not allocate either.
//!
//! # Taking a batch from another thread (the steal handshake)
//!
//! A thread that defers a few callbacks and goes idle must not keep them
//! forever (crossbeam-epoch's weakness), and `barrier` must see every
//! callback deferred before it. So other threads can take an open batch,
//! with an asymmetric handshake that costs the owner only plain stores:
//!
//! * owner, around every batch access: `busy = 1`; light fence; if `steal`
//!   is set, back off (`busy = 0`, wait until `steal` clears, retry);
//!   otherwise use the batch; `busy = 0` (Release).
//! * stealer: `steal = 1` on every candidate; one heavy barrier
//!   (membarrier); for each candidate wait until `busy == 0` (Acquire),
//!   take the batch, `steal = 0` (Release).
//!
//! Store-buffering: either the owner sees `steal` (and keeps out), or the
//! stealer sees `busy` (and waits for the Release of `busy = 0`, after which
//! the owner's batch writes are visible). The owner's Acquire load of
//! `steal` seeing 0 after a steal sees the stealer's writes.
//!
//! # Who publishes, when
//!
//! * the owner: batch full, [`Domain::flush`], [`Domain::barrier`], thread
//!   exit (with the exit hooks, in the same single CAS);
//! * the reclaimer thread: batches opened at least one flush latency ago
//!   (it polls while batches are open);
//! * [`Domain::barrier`]: every open batch of every thread, so "deferred
//!   before the barrier" means, for every thread, *returned from `defer`
//!   before `barrier` was called* (happens-before).
//!
//! # The reclaim pass
//!
//! Take the whole list with one swap, wait one grace period for all of it,
//! run every callback (each under `catch_unwind`: a panic is counted and the
//! rest still run), recycle the nodes. Passes may run concurrently (the
//! reclaimer thread, helpers over the backlog limit, `barrier` callers);
//! each takes a disjoint set. A pass registers itself and takes the list
//! under one small lock, so `barrier` can wait for exactly the passes that
//! took work before it.
use std::mem::{self, MaybeUninit};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::domain::protocol;
use crate::domain::{
    lock, Counters, Domain, Inner, Participant, Reclaimer, AWAKE, IN_CALLBACK, IN_USE, PARKED,
    POLLING,
};
use crate::llist::{Chain, Node};
use crate::sync::Ordering;

/// Words of inline storage for one deferred closure: closures up to this
/// size (and word-aligned) are stored in the batch itself; larger ones are
/// boxed and the batch holds the box pointer.
const INLINE_WORDS: usize = 3;

/// A batch item's entry point: consumes the closure stored at the pointer.
type Call = unsafe fn(*mut usize);

/// Whether `F` is stored inline (else boxed).
#[inline(always)]
const fn fits_inline<F>() -> bool {
    mem::size_of::<F>() <= INLINE_WORDS * mem::size_of::<usize>()
        && mem::align_of::<F>() <= mem::align_of::<usize>()
}

/// Words one `F` takes in a batch: its size rounded up to words (0 for a
/// zero-sized closure), or 1 (the box) when boxed.
#[inline(always)]
const fn words_of<F>() -> usize {
    if fits_inline::<F>() {
        mem::size_of::<F>().div_ceil(mem::size_of::<usize>())
    } else {
        1
    }
}

/// A type-erased `FnOnce() + Send` on its way into a batch: the entry
/// point, the inline words (or the box pointer) and how many words count.
pub(crate) struct Deferred {
    call: Call,
    words: usize,
    data: MaybeUninit<[usize; INLINE_WORDS]>,
}

impl Deferred {
    #[inline(always)]
    pub(crate) fn new<F: FnOnce() + Send + 'static>(f: F) -> Deferred {
        let mut data = MaybeUninit::<[usize; INLINE_WORDS]>::uninit();
        if fits_inline::<F>() {
            /// # Safety
            /// `raw` holds an `F` written by `new` and not yet consumed
            /// (word-aligned: `F`'s alignment is at most a word's).
            unsafe fn call_inline<F: FnOnce()>(raw: *mut usize) {
                // SAFETY: per the contract, read once, then the slot is dead.
                let f: F = unsafe { ptr::read(raw.cast::<F>()) };
                f();
            }
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
    /// Counted in `pending` and removed from `open_batches` (false when
    /// pushed at thread exit, where only one CAS is allowed: the reclaimer
    /// accounts for it then).
    pub(crate) accounted: bool,
}

impl Batch {
    /// Words of batch memory for `batch_size` callbacks: enough for that
    /// many closures of up to `INLINE_WORDS` words of one type. Runs of
    /// alternating types need two header words each, so such a batch may
    /// be published with fewer callbacks.
    fn capacity(batch_size: usize) -> usize {
        batch_size.saturating_mul(INLINE_WORDS).saturating_add(2)
    }

    fn new(batch_size: usize) -> Batch {
        let mut buf = Vec::with_capacity(Batch::capacity(batch_size));
        buf.resize(buf.capacity(), MaybeUninit::uninit());
        Batch {
            buf: buf.into_boxed_slice(),
            used: 0,
            len: 0,
            accounted: false,
        }
    }

    /// Runs every callback once, each under `catch_unwind`; returns
    /// (callbacks run, of which panicked) and leaves the batch empty.
    pub(crate) fn run(&mut self) -> (u64, u64) {
        let base = self.buf.as_mut_ptr().cast::<usize>();
        let (mut ran, mut panicked) = (0u64, 0u64);
        let mut at = 0;
        while at < self.used {
            // SAFETY: `at` is the start of a run (the encoding written by
            // `OpenBatch`): its entry point, then its count word.
            let call: Call = unsafe { ptr::read(base.add(at).cast::<Call>()) };
            // SAFETY: as above.
            let header = unsafe { *base.add(at + 1) };
            let (count, words) = (header >> 2, header & 3);
            // SAFETY: the run's closures follow its header.
            let data = unsafe { base.add(at + 2) };
            let mut next = 0;
            while next < count {
                // Several closures per `catch_unwind`; after a panic, resume
                // after the closure that panicked (`next` already moved on).
                let done = catch_unwind(AssertUnwindSafe(|| {
                    while next < count {
                        // SAFETY: closure `next` of this run, written by
                        // `OpenBatch::push` and not yet consumed; `next`
                        // moves past it before the call, so it is consumed
                        // exactly once even if it panics.
                        let item = unsafe { data.add(next * words) };
                        next += 1;
                        // SAFETY: `call` is this run's entry point for the
                        // closures stored at `item`.
                        unsafe { call(item) };
                    }
                }));
                if done.is_err() {
                    panicked += 1;
                }
            }
            ran += count as u64;
            at += 2 + count * words;
        }
        self.used = 0;
        self.len = 0;
        (ran, panicked)
    }
}

/// A thread's open batch and its write cursor (in the participant record;
/// the owner writes it, a stealer takes it under the steal handshake).
/// The fast path of `defer` checks three words of it and writes the
/// closure at `cur`.
pub(crate) struct OpenBatch {
    node: Option<Box<Node<Work>>>,
    /// Entry point of the open run (as an address; 0: no open run).
    run_call: usize,
    /// Words per closure of the open run.
    run_words: usize,
    /// Callbacks the batch may still take (0 when none is open).
    left: usize,
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
            cur: ptr::null_mut(),
            end: ptr::null_mut(),
            run_header: ptr::null_mut(),
            run_left: 0,
            opened_with: 0,
        }
    }

    /// The fast path: appends `d` to the open run if it has the same type
    /// and fits. Returns it back otherwise.
    #[inline(always)]
    fn try_push(&mut self, d: Deferred, words: usize) -> Result<(), Deferred> {
        debug_assert_eq!(words, d.words);
        // Comparing entry points as addresses: two closure types whose
        // entry points share an address (identical code merged by the
        // linker) with the same word count behave the same, so they may
        // share a run; equal types never compare unequal within one
        // batch's lifetime except across codegen units, which only starts a
        // new run.
        let room = (self.end as usize).wrapping_sub(self.cur as usize) / mem::size_of::<usize>();
        if self.run_call == d.call as usize
            && self.run_words == words
            && self.left != 0
            && room >= words
        {
            // SAFETY: `cur..cur + words` lies inside the open batch's
            // memory (`room`), owned by us (handshake); `data` holds
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

    /// Opens a run for `d` and appends it, if the open batch has room for
    /// the run's header and `d`. Returns it back otherwise.
    fn push_new_run(&mut self, d: Deferred) -> Result<(), Deferred> {
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

    /// Opens `node` (an empty batch) for `batch_size` callbacks.
    fn open(&mut self, mut node: Box<Node<Work>>, batch_size: usize) {
        let Work::Batch(b) = &mut node.value else {
            unreachable!("exit node as a batch")
        };
        debug_assert!(b.used == 0 && b.len == 0);
        b.accounted = false;
        let range = b.buf.as_mut_ptr_range();
        self.cur = range.start.cast::<usize>();
        self.end = range.end.cast::<usize>();
        self.left = batch_size;
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
        b.len = self.opened_with - self.left;
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

impl Domain {
    /// Runs `f` after a grace period: once every read section that started
    /// before this call has ended. Exactly once, on the reclaimer thread (or
    /// on a thread running a reclaim step: see [`Reclaimer`]).
    ///
    /// The closure goes into this thread's batch (no shared atomic per call;
    /// closures up to three words are stored inline, larger ones boxed). A
    /// full batch is published with one compare-and-swap; see
    /// [`Builder::flush_latency`](crate::Builder::flush_latency) for partial
    /// batches.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let domain = exitq::Domain::new();
    /// let ran = Arc::new(AtomicUsize::new(0));
    /// for _ in 0..1000 {
    ///     let ran = ran.clone();
    ///     domain.defer(move || { ran.fetch_add(1, Ordering::Relaxed); });
    /// }
    /// domain.barrier();
    /// assert_eq!(ran.load(Ordering::Relaxed), 1000);
    /// ```
    #[inline]
    pub fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
        let d = Deferred::new(f);
        match self.participant() {
            Some(r) => self.defer_in(r, d, words_of::<F>()),
            None => self.defer_orphan(d),
        }
    }

    #[inline(always)]
    fn defer_in(&self, r: &Participant, d: Deferred, words: usize) {
        if !protocol::owner_begin(&r.busy, &r.steal, self.inner.hot.fences) {
            return self.defer_contended(r, d);
        }
        // SAFETY: we are the owner, `busy` is set and no steal was
        // requested after it (handshake in the module docs).
        let open = unsafe { &mut *r.batch.get() };
        match open.try_push(d, words) {
            Ok(()) if open.left != 0 => protocol::owner_end(&r.busy),
            Ok(()) => self.close_full(r, open),
            Err(d) => self.defer_slow(r, open, d),
        }
    }

    /// The batch is full: take it, leave the handshake, publish it.
    #[inline(never)]
    fn close_full(&self, r: &Participant, open: &mut OpenBatch) {
        let full = open.take();
        // Relaxed: only read under the handshake or as an aging hint.
        r.batch_epoch.store(0, Ordering::Relaxed);
        protocol::owner_end(&r.busy);
        if let Some(node) = full {
            self.publish(Some(r), node);
        }
    }

    /// A new run, a new batch, or a full batch to publish first.
    #[cold]
    fn defer_slow(&self, r: &Participant, open: &mut OpenBatch, d: Deferred) {
        let d = match open.push_new_run(d) {
            Ok(()) if open.left != 0 => return protocol::owner_end(&r.busy),
            Ok(()) => return self.close_full(r, open),
            Err(d) => d,
        };
        // No batch, or no room for a new run: publish what is there, open
        // a fresh batch.
        let full = open.take();
        self.open_batch(r, open);
        let pushed = open.push_new_run(d);
        debug_assert!(pushed.is_ok(), "an empty batch takes any closure");
        if pushed.is_ok() && open.left == 0 {
            // batch_size 1: published at once.
            let one = open.take();
            r.batch_epoch.store(0, Ordering::Relaxed);
            protocol::owner_end(&r.busy);
            for node in full.into_iter().chain(one) {
                self.publish(Some(r), node);
            }
            return;
        }
        protocol::owner_end(&r.busy);
        if let Some(node) = full {
            self.publish(Some(r), node);
        }
    }

    /// Opens a batch in `open` (a recycled node, or a new one).
    fn open_batch(&self, r: &Participant, open: &mut OpenBatch) {
        let batch_size = self.inner.config.batch_size;
        let node = self
            .inner
            .recycle
            .pop()
            .unwrap_or_else(|| Node::new(Work::Batch(Batch::new(batch_size))));
        open.open(node, batch_size);
        // Relaxed: an aging hint, read by the reclaimer under the handshake.
        r.batch_epoch.store(
            self.inner.poll_epoch.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        // SeqCst: store-buffering pair with the reclaimer's "sleeping =
        // true; re-check open batches" (it must not park without a timeout
        // while a batch is open).
        if self.inner.open_batches.fetch_add(1, Ordering::SeqCst) == 0 {
            // A parked reclaimer must start polling for this batch.
            self.inner.wake_reclaimer(false);
        }
    }

    #[cold]
    fn defer_contended(&self, r: &Participant, d: Deferred) {
        // A stealer is taking our batch: wait for it (it only swaps a
        // pointer), then retry.
        protocol::wait_for_stealer(&r.steal);
        let words = d.words;
        self.defer_in(r, d, words)
    }

    /// The thread's TLS is gone (called from a later TLS destructor):
    /// publish the callback alone.
    #[cold]
    fn defer_orphan(&self, d: Deferred) {
        let mut open = OpenBatch::new();
        let node = Node::new(Work::Batch(Batch::new(1)));
        open.open(node, 1);
        let pushed = open.push_new_run(d);
        debug_assert!(pushed.is_ok(), "an empty batch takes any closure");
        let Some(node) = open.take() else {
            unreachable!("just opened")
        };
        // `publish` expects an open batch to close.
        self.inner.open_batches.fetch_add(1, Ordering::SeqCst);
        self.publish(None, node);
    }

    /// Publishes a closed batch: one CAS, then wake or help.
    fn publish(&self, r: Option<&Participant>, mut node: Box<Node<Work>>) {
        let inner = &*self.inner;
        let len = inner.account(&mut node);
        Counters::add(&inner.stats.batches, 1);
        let pending = inner.pending.fetch_add(len, Ordering::Relaxed) + len;
        inner.queue.push(node);
        let inside = r.is_some_and(|r| r.nesting() > 0) || IN_CALLBACK.get() == inner.id;
        match inner.config.reclaimer {
            Reclaimer::Thread => inner.wake_reclaimer(pending >= inner.wake_threshold()),
            Reclaimer::Inline if !inside => {
                inner.reclaim_pass();
            }
            Reclaimer::Inline => {}
        }
        if pending > inner.config.backlog_limit {
            inner.relieve_backlog(inside);
        }
    }

    /// Publishes this thread's open batch now (one CAS). With
    /// [`Reclaimer::Inline`], also runs a reclaim step.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// domain.defer(|| ());
    /// domain.flush();
    /// assert_eq!(domain.stats().batches, 1);
    /// ```
    pub fn flush(&self) {
        let Some(r) = self.existing_participant() else {
            return;
        };
        if let Some(node) = self.take_own_batch(r) {
            self.publish(Some(r), node);
        } else if self.inner.config.reclaimer == Reclaimer::Inline && r.nesting() == 0 {
            self.inner.reclaim_pass();
        }
    }

    /// Takes this thread's open batch (owner side of the handshake).
    pub(crate) fn take_own_batch(&self, r: &Participant) -> Option<Box<Node<Work>>> {
        take_own_batch(r, self.inner.hot.fences)
    }

    /// Returns once every callback deferred before the call (by any thread:
    /// `defer` returned before `barrier` was called) has run, and every
    /// thread that exited before the call has had its exit hooks run.
    ///
    /// Publishes every thread's open batch (one membarrier for all of
    /// them), then runs a reclaim pass on the calling thread and waits for
    /// passes that took earlier work on other threads.
    ///
    /// # Panics
    ///
    /// Inside a read guard of this domain, or inside one of its callbacks
    /// (both would deadlock); in the child of a `fork()`.
    pub fn barrier(&self) {
        self.drain("barrier", true);
    }

    pub(crate) fn drain(&self, what: &str, steal: bool) {
        self.assert_not_reading(what);
        if IN_CALLBACK.get() == self.inner.id {
            panic!("exitq: {what}() called from a callback of the same domain (deadlock)");
        }
        if let Some(r) = self.existing_participant() {
            if let Some(node) = self.take_own_batch(r) {
                self.inner.push_batch(node);
            }
        }
        if steal {
            self.inner.steal_batches(None);
        }
        let my_pass = self.inner.reclaim_pass_id();
        self.inner.wait_passes_upto(my_pass);
    }
}

/// Owner side of the steal handshake: take the open batch, if any.
pub(crate) fn take_own_batch(
    r: &Participant,
    fences: crate::expedite::Fences,
) -> Option<Box<Node<Work>>> {
    loop {
        if protocol::owner_begin(&r.busy, &r.steal, fences) {
            // SAFETY: owner, `busy` set, no steal requested (handshake).
            let batch = unsafe { (*r.batch.get()).take() };
            // Relaxed: aging hint.
            r.batch_epoch.store(0, Ordering::Relaxed);
            protocol::owner_end(&r.busy);
            return batch;
        }
        protocol::wait_for_stealer(&r.steal);
    }
}

impl Inner {
    /// Counts a batch being published (pending, open batches); returns its
    /// length.
    pub(crate) fn account(&self, node: &mut Node<Work>) -> usize {
        match &mut node.value {
            Work::Batch(b) => {
                if !b.accounted {
                    b.accounted = true;
                    // Relaxed: a hint for the reclaimer's poll decision.
                    self.open_batches.fetch_sub(1, Ordering::Relaxed);
                }
                b.len
            }
            Work::Exit(_) => 0,
        }
    }

    /// Backlog at which a publisher wakes a polling reclaimer at once
    /// (four batches): below it, the next poll (at most a flush latency
    /// away) picks the work up.
    pub(crate) fn wake_threshold(&self) -> usize {
        self.config.batch_size.saturating_mul(4)
    }

    /// Publishes a batch without waking or helping (the caller reclaims).
    pub(crate) fn push_batch(&self, mut node: Box<Node<Work>>) {
        let len = self.account(&mut node);
        Counters::add(&self.stats.batches, 1);
        // Relaxed: a counter; the list push publishes the batch itself.
        self.pending.fetch_add(len, Ordering::Relaxed);
        self.queue.push(node);
    }

    /// Takes open batches from other threads and publishes them: all of
    /// them (`older_than: None`), or those opened before that poll epoch.
    /// Returns how many were taken.
    pub(crate) fn steal_batches(&self, older_than: Option<u64>) -> usize {
        let mut marked: Vec<&Participant> = Vec::new();
        for r in self.participants() {
            // Relaxed: hint; the handshake below re-checks under `busy`.
            let epoch = r.batch_epoch.load(Ordering::Relaxed);
            if epoch == 0 || older_than.is_some_and(|limit| epoch >= limit) {
                continue;
            }
            if r.state.load(Ordering::Relaxed) != IN_USE {
                continue;
            }
            protocol::stealer_mark(&r.steal);
            marked.push(r);
        }
        if marked.is_empty() {
            return 0;
        }
        self.hot.fences.heavy();
        let mut taken = 0;
        for r in marked {
            protocol::stealer_wait(&r.busy);
            // SAFETY: steal handshake won: the owner is outside its batch
            // access and will not enter it until `steal` clears.
            let batch = unsafe { (*r.batch.get()).take() };
            r.batch_epoch.store(0, Ordering::Relaxed);
            protocol::stealer_done(&r.steal);
            if let Some(node) = batch {
                Counters::add(&self.stats.stolen_batches, 1);
                self.push_batch(node);
                taken += 1;
            }
        }
        taken
    }

    /// One reclaim pass; returns the number of callbacks run.
    pub(crate) fn reclaim_pass(&self) -> usize {
        let (id, chain) = {
            let mut passes = lock(&self.passes);
            let id = passes.next;
            passes.next += 1;
            let chain = self.queue.take_all();
            if chain.is_empty() {
                return 0;
            }
            passes.active.push(id);
            (id, chain)
        };
        let ran = self.run_pass(chain);
        self.end_pass(id);
        ran
    }

    /// A pass (possibly empty) whose id orders it after every pass that
    /// took work before this call; returns that id.
    pub(crate) fn reclaim_pass_id(&self) -> u64 {
        let (id, chain) = {
            let mut passes = lock(&self.passes);
            let id = passes.next;
            passes.next += 1;
            (id, self.queue.take_all())
        };
        if !chain.is_empty() {
            {
                lock(&self.passes).active.push(id);
            }
            self.run_pass(chain);
            self.end_pass(id);
        }
        id
    }

    /// Marks pass `id` done; wakes `barrier` callers and helpers waiting
    /// for passes, if there are any (no futex call otherwise).
    fn end_pass(&self, id: u64) {
        let mut passes = lock(&self.passes);
        passes.active.retain(|&a| a != id);
        if passes.waiters > 0 {
            self.passes_cv.notify_all();
        }
    }

    /// Waits until no pass with an id up to `id` is running.
    pub(crate) fn wait_passes_upto(&self, id: u64) {
        let mut passes = lock(&self.passes);
        while passes.active.iter().any(|&a| a <= id) {
            passes.waiters += 1;
            passes = self
                .passes_cv
                .wait(passes)
                .unwrap_or_else(|e| e.into_inner());
            passes.waiters -= 1;
        }
    }

    fn run_pass(&self, chain: Chain<Work>) -> usize {
        self.synchronize(false);
        let ran = self.run_chain(chain);
        Counters::add(&self.stats.passes, 1);
        self.stats
            .max_batch
            .fetch_max(ran as u64, Ordering::Relaxed);
        ran
    }

    /// Runs every callback and hook of `chain` (the grace period is the
    /// caller's business); returns how many ran.
    pub(crate) fn run_chain(&self, mut chain: Chain<Work>) -> usize {
        let previous = IN_CALLBACK.replace(self.id);
        let (mut ran, mut panicked, mut exits, mut batch_items) = (0u64, 0u64, 0u64, 0usize);
        while let Some(mut node) = chain.pop_front() {
            if let Work::Batch(b) = &mut node.value {
                if b.accounted {
                    batch_items += b.len;
                } else {
                    // Pushed at thread exit (one CAS, no accounting there):
                    // it is no longer open.
                    b.accounted = true;
                    // Relaxed: a hint for the reclaimer's poll decision.
                    self.open_batches.fetch_sub(1, Ordering::Relaxed);
                }
                let (n, p) = b.run();
                ran += n;
                panicked += p;
                if let Err(node) = self.recycle.push(node) {
                    drop(node);
                }
            } else {
                let Work::Exit(hook) = node.value else {
                    unreachable!()
                };
                if catch_unwind(AssertUnwindSafe(hook)).is_err() {
                    panicked += 1;
                }
                ran += 1;
                exits += 1;
            }
        }
        IN_CALLBACK.set(previous);
        // Relaxed: counters.
        self.pending.fetch_sub(batch_items, Ordering::Relaxed);
        if exits > 0 {
            self.armed_exits
                .fetch_sub(exits as usize, Ordering::Relaxed);
            Counters::add(&self.stats.exits_run, exits);
        }
        Counters::add(&self.stats.callbacks_run, ran);
        if panicked > 0 {
            Counters::add(&self.stats.callbacks_panicked, panicked);
        }
        ran as usize
    }

    /// Over the backlog limit: help reclaim, or wait for the passes in
    /// flight, until the backlog is under the limit.
    #[cold]
    pub(crate) fn relieve_backlog(&self, inside: bool) {
        if inside {
            Counters::add(&self.stats.backlog_overruns, 1);
            return;
        }
        Counters::add(&self.stats.backlog_waits, 1);
        while self.pending.load(Ordering::Relaxed) > self.config.backlog_limit {
            // Help with a pass of our own while fewer than `pass_cap`
            // passes run; otherwise wait for one to finish. Unbounded help
            // makes every producer a reclaimer, all running callbacks at
            // once on the same data.
            let busy = lock(&self.passes).active.len() >= self.pass_cap;
            if !busy && self.reclaim_pass() > 0 {
                continue;
            }
            let mut passes = lock(&self.passes);
            if passes.active.is_empty() {
                // Nothing in flight and nothing queued: what remains is
                // being accounted by a concurrent publisher. Re-check.
                drop(passes);
                thread::yield_now();
                continue;
            }
            passes.waiters += 1;
            let (mut passes, _) = self
                .passes_cv
                .wait_timeout(passes, Duration::from_millis(1))
                .unwrap_or_else(|e| e.into_inner());
            passes.waiters -= 1;
        }
    }

    /// The reclaimer thread's loop.
    pub(crate) fn reclaimer_main(self: Arc<Inner>) {
        let _ = self.reclaimer_thread.set(thread::current());
        let flush = self.config.flush_latency;
        let mut last_poll = Instant::now();
        loop {
            if self.shut_down.load(Ordering::Acquire) {
                break;
            }
            let mut ran = self.reclaim_pass();
            // Callbacks may have deferred more on this thread: publish them.
            ran += self.flush_reclaimer_batch();
            // Age open batches: take those opened two polls ago (so at least
            // one flush latency old).
            if last_poll.elapsed() >= flush {
                last_poll = Instant::now();
                let epoch = self.poll_epoch.fetch_add(1, Ordering::Relaxed) + 1;
                if self.open_batches.load(Ordering::Relaxed) > 0 {
                    ran += self.steal_batches(Some(epoch - 1));
                }
            }
            if ran > 0 {
                continue;
            }
            let must_poll = || {
                self.open_batches.load(Ordering::SeqCst) > 0
                    || (self.config.exit_poll.is_some()
                        && self.armed_exits.load(Ordering::SeqCst) > 0)
            };
            let state = if must_poll() { POLLING } else { PARKED };
            // SeqCst: store-buffering pair with publishers (`wake_reclaimer`
            // after their SeqCst push / open_batches or armed_exits
            // increment): either we see their change below, or they see
            // our state and unpark us.
            self.sleeping.store(state, Ordering::SeqCst);
            let changed = !self.queue.is_empty()
                || self.shut_down.load(Ordering::SeqCst)
                || (state == PARKED && must_poll());
            if changed {
                self.sleeping.store(AWAKE, Ordering::SeqCst);
                continue;
            }
            if state == PARKED {
                thread::park();
            } else {
                let timeout = if self.open_batches.load(Ordering::Relaxed) > 0 {
                    flush.saturating_sub(last_poll.elapsed())
                } else {
                    // Polling for exit hooks implies `exit_poll` is set.
                    self.config.exit_poll.unwrap_or(flush)
                };
                thread::park_timeout(timeout.max(Duration::from_micros(50)));
            }
            self.sleeping.store(AWAKE, Ordering::SeqCst);
        }
        // Shutdown (Handle::drop) drains what is left after joining us.
        self.flush_reclaimer_batch();
    }

    /// Publishes the calling thread's open batch of this domain, if any
    /// (callbacks running on the reclaimer may defer more).
    fn flush_reclaimer_batch(&self) -> usize {
        let Some(r) = crate::domain::thread_record(self) else {
            return 0;
        };
        match take_own_batch(r, self.hot.fences) {
            Some(node) => {
                self.push_batch(node);
                1
            }
            None => 0,
        }
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Domain>();
}

/// The batch encoding on its own (no threads, so miri runs it too:
/// `scripts/test.d/30-miri.sh`).
#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};

    fn open(batch_size: usize) -> OpenBatch {
        let mut open = OpenBatch::new();
        open.open(Node::new(Work::Batch(Batch::new(batch_size))), batch_size);
        open
    }

    /// Appends `f` as `defer` does: the fast path, else a new run. A
    /// closure the batch refuses is handed back intact: it runs here.
    fn push<F: FnOnce() + Send + 'static>(open: &mut OpenBatch, f: F) -> bool {
        let refused = match open.try_push(Deferred::new(f), words_of::<F>()) {
            Ok(()) => return true,
            Err(d) => match open.push_new_run(d) {
                Ok(()) => return true,
                Err(d) => d,
            },
        };
        let mut data = refused.data;
        // SAFETY: `refused` holds an unconsumed closure for `call`.
        unsafe { (refused.call)(data.as_mut_ptr().cast::<usize>()) };
        false
    }

    fn run(open: &mut OpenBatch) -> (usize, u64, u64) {
        let mut node = open.take().expect("a batch is open");
        let Work::Batch(b) = &mut node.value else {
            unreachable!()
        };
        let len = b.len;
        let (ran, panicked) = b.run();
        assert_eq!((b.len, b.used), (0, 0), "a run batch is empty");
        (len, ran, panicked)
    }

    #[test]
    fn closure_sizes_and_types_mixed_each_run_once_in_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut b = open(64);
        let mut expected = Vec::new();
        for i in 0..40usize {
            let log = log.clone();
            let ok = match i % 6 {
                // Two words: an Arc and an index.
                0 | 1 => push(&mut b, move || log.lock().unwrap().push(i)),
                // Three words, one of them a heap string (drop checked by miri).
                2 => {
                    let s = format!("{i}");
                    push(&mut b, move || {
                        log.lock().unwrap().push(s.parse::<usize>().unwrap())
                    })
                }
                // Larger than three words: boxed.
                3 => {
                    let big = [i; 8];
                    push(&mut b, move || log.lock().unwrap().push(big[7]))
                }
                // 12 bytes: two words, the second one half padding.
                4 => {
                    let (a, c) = (i as u32, i as u64);
                    let log2 = log.clone();
                    drop(log);
                    push(&mut b, move || {
                        assert_eq!(u64::from(a), c);
                        log2.lock().unwrap().push(a as usize)
                    })
                }
                _ => push(&mut b, move || log.lock().unwrap().push(i)),
            };
            assert!(ok, "item {i} fits (64 callbacks, 194 words)");
            expected.push(i);
        }
        let (len, ran, panicked) = run(&mut b);
        assert_eq!((len, ran, panicked), (40, 40, 0));
        assert_eq!(*log.lock().unwrap(), expected);
        assert_eq!(Arc::strong_count(&log), 1, "every closure was consumed");
    }

    #[test]
    fn zero_sized_closures_take_no_batch_memory() {
        static RAN: AtomicUsize = AtomicUsize::new(0);
        let mut b = open(300);
        let start = b.cur;
        for _ in 0..300 {
            assert!(push(&mut b, || {
                RAN.fetch_add(1, Ordering::Relaxed);
            }));
        }
        // Miri gives each use of a function pointer its own address (they
        // are not guaranteed unique), so every closure opens a run there.
        if !cfg!(miri) {
            assert_eq!(b.cur, start.wrapping_add(2), "one run header, no items");
        }
        assert_eq!(b.left, 0, "full at batch_size");
        assert!(
            !push(&mut b, || {
                RAN.fetch_add(1000, Ordering::Relaxed);
            }),
            "a full batch takes nothing more"
        );
        assert_eq!(RAN.load(Ordering::Relaxed), 1000);
        assert_eq!(run(&mut b), (300, 300, 0));
        assert_eq!(RAN.load(Ordering::Relaxed), 1300);
    }

    #[test]
    fn one_word_closures_of_one_type_take_one_word_each() {
        let n = Arc::new(AtomicUsize::new(0));
        let mut b = open(256);
        let start = b.cur;
        for _ in 0..256 {
            let n = n.clone();
            assert!(push(&mut b, move || {
                n.fetch_add(1, Ordering::Relaxed);
            }));
        }
        if !cfg!(miri) {
            // (Under miri each closure opens a run: see above.)
            assert_eq!(b.cur, start.wrapping_add(2 + 256), "an Arc is one word");
        }
        assert_eq!(run(&mut b), (256, 256, 0));
        assert_eq!(n.load(Ordering::Relaxed), 256);
        assert_eq!(Arc::strong_count(&n), 1);
    }

    #[test]
    fn alternating_large_types_fill_the_memory_before_the_count() {
        // 4 callbacks: 14 words. Runs of one 3-word closure take 5 words,
        // so a third alternating run does not fit.
        let ran = Arc::new(AtomicUsize::new(0));
        let mut b = open(4);
        let r1 = ran.clone();
        let x = [1usize, 2];
        assert!(push(&mut b, move || {
            r1.fetch_add(x[0], Ordering::Relaxed);
        }));
        let r2 = ran.clone();
        // Different code (not merged with the first closure's by LLVM's
        // function merging, which would let them share a run).
        let y = [20u64, 10];
        assert!(push(&mut b, move || {
            r2.fetch_add(y[1] as usize, Ordering::Relaxed);
        }));
        let r3 = ran.clone();
        let z = [100u32, 0, 0, 0];
        assert!(!push(&mut b, move || {
            r3.fetch_add(z[0] as usize, Ordering::Relaxed);
        }));
        assert_eq!(
            ran.load(Ordering::Relaxed),
            100,
            "the refused one came back"
        );
        assert_eq!(run(&mut b), (2, 2, 0));
        assert_eq!(ran.load(Ordering::Relaxed), 111);
        assert_eq!(Arc::strong_count(&ran), 1);
    }

    #[test]
    fn a_panic_skips_only_the_closure_that_panicked() {
        let ran = Arc::new(AtomicUsize::new(0));
        let mut b = open(32);
        for i in 0..20usize {
            let ran = ran.clone();
            assert!(push(&mut b, move || {
                ran.fetch_add(1, Ordering::Relaxed);
                if i % 7 == 3 {
                    panic!("callback {i} panics (expected by the test)");
                }
            }));
        }
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let result = run(&mut b);
        std::panic::set_hook(hook);
        assert_eq!(result, (20, 20, 3), "items 3, 10, 17 panic");
        assert_eq!(ran.load(Ordering::Relaxed), 20, "each ran exactly once");
        assert_eq!(Arc::strong_count(&ran), 1);
    }

    #[test]
    fn batch_size_one_holds_the_largest_inline_closure() {
        let mut b = open(1);
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let pad = [7u8; 16];
        assert!(push(&mut b, move || {
            r.fetch_add(usize::from(pad[15]), Ordering::Relaxed);
        }));
        assert_eq!(b.left, 0);
        assert_eq!(run(&mut b), (1, 1, 0));
        assert_eq!(ran.load(Ordering::Relaxed), 7);
    }
}
