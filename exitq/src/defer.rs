//! Deferred callbacks: per-thread batches, publication, the reclaimer,
//! `barrier`.
//!
//! # The batch
//!
//! `defer(f)` stores the closure in the calling thread's open batch: inline
//! (a function pointer and three words, like crossbeam's `Deferred`) when it
//! fits, boxed otherwise. No shared atomic is touched per call. A full batch
//! is published whole with one compare-and-swap onto the domain's list.
//! Batch nodes are recycled through a bounded pool, so a steady producer
//! does not allocate either.
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

/// Inline storage of a deferred closure: three words.
type Data = [usize; 3];

/// A type-erased `FnOnce() + Send`, stored inline when it fits.
pub(crate) struct Deferred {
    call: unsafe fn(*mut Data),
    data: MaybeUninit<Data>,
}

// SAFETY: a `Deferred` is only built from `F: Send`.
unsafe impl Send for Deferred {}

impl Deferred {
    #[inline]
    pub(crate) fn new<F: FnOnce() + Send + 'static>(f: F) -> Deferred {
        let mut data = MaybeUninit::<Data>::uninit();
        if mem::size_of::<F>() <= mem::size_of::<Data>()
            && mem::align_of::<F>() <= mem::align_of::<Data>()
        {
            /// # Safety
            /// `raw` holds an `F` written by `new` and not yet consumed.
            unsafe fn call_inline<F: FnOnce()>(raw: *mut Data) {
                // SAFETY: per the contract, read once, then the slot is dead.
                let f: F = unsafe { ptr::read(raw.cast::<F>()) };
                f();
            }
            // SAFETY: `F` fits in `Data` (size and alignment checked above).
            unsafe { ptr::write(data.as_mut_ptr().cast::<F>(), f) };
            Deferred {
                call: call_inline::<F>,
                data,
            }
        } else {
            /// # Safety
            /// `raw` holds a `Box<F>` written by `new` and not yet consumed.
            unsafe fn call_boxed<F: FnOnce()>(raw: *mut Data) {
                // SAFETY: per the contract, read once, then the slot is dead.
                let f: Box<F> = unsafe { ptr::read(raw.cast::<Box<F>>()) };
                f();
            }
            // SAFETY: a `Box` is one pointer: it fits in `Data`.
            unsafe { ptr::write(data.as_mut_ptr().cast::<Box<F>>(), Box::new(f)) };
            Deferred {
                call: call_boxed::<F>,
                data,
            }
        }
    }

    /// Runs the closure (consuming it, also if it panics).
    #[inline]
    pub(crate) fn call(self) {
        let mut this = mem::ManuallyDrop::new(self);
        // SAFETY: `data` holds the closure `call` was made for, and the
        // `ManuallyDrop` makes this the only use.
        unsafe { (this.call)(this.data.as_mut_ptr()) }
    }
}

/// What the domain's list carries.
pub(crate) enum Work {
    /// Deferred callbacks. `accounted`: counted in `pending` and removed
    /// from `open_batches` at publication (false when pushed at thread exit,
    /// where only one CAS is allowed: the reclaimer accounts for it).
    Batch {
        items: Vec<Deferred>,
        accounted: bool,
    },
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
            Some(r) => self.defer_in(r, d),
            None => self.defer_orphan(d),
        }
    }

    #[inline]
    fn defer_in(&self, r: &Participant, d: Deferred) {
        if !protocol::owner_begin(&r.busy, &r.steal, self.inner.hot.fences) {
            return self.defer_contended(r, d);
        }
        // SAFETY: we are the owner, `busy` is set and no steal was
        // requested after it (handshake in the module docs).
        let slot = unsafe { &mut *r.batch.get() };
        let full = match slot {
            Some(node) => match &mut node.value {
                Work::Batch { items, .. } if items.len() + 1 < self.inner.config.batch_size => {
                    items.push(d);
                    None
                }
                Work::Batch { items, .. } => {
                    items.push(d);
                    slot.take()
                }
                Work::Exit(_) => unreachable!("exit node in a batch slot"),
            },
            None => {
                self.open_batch(r, slot, d);
                if self.inner.config.batch_size == 1 {
                    slot.take()
                } else {
                    None
                }
            }
        };
        if full.is_some() {
            // Relaxed: only read under the handshake or as an aging hint.
            r.batch_epoch.store(0, Ordering::Relaxed);
        }
        protocol::owner_end(&r.busy);
        if let Some(node) = full {
            self.publish(Some(r), node);
        }
    }

    #[cold]
    fn open_batch(&self, r: &Participant, slot: &mut Option<Box<Node<Work>>>, d: Deferred) {
        let mut node = self.inner.recycle.pop().unwrap_or_else(|| {
            Node::new(Work::Batch {
                items: Vec::with_capacity(self.inner.config.batch_size),
                accounted: false,
            })
        });
        if let Work::Batch { items, accounted } = &mut node.value {
            items.push(d);
            *accounted = false;
        }
        *slot = Some(node);
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
        self.defer_in(r, d)
    }

    /// The thread's TLS is gone (called from a later TLS destructor):
    /// publish the callback alone.
    #[cold]
    fn defer_orphan(&self, d: Deferred) {
        let node = Node::new(Work::Batch {
            items: vec![d],
            accounted: false,
        });
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
            Work::Batch { items, accounted } => {
                if !*accounted {
                    *accounted = true;
                    // Relaxed: a hint for the reclaimer's poll decision.
                    self.open_batches.fetch_sub(1, Ordering::Relaxed);
                }
                items.len()
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
        let mut passes = lock(&self.passes);
        passes.active.retain(|&a| a != id);
        drop(passes);
        self.passes_cv.notify_all();
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
            lock(&self.passes).active.retain(|&a| a != id);
            self.passes_cv.notify_all();
        }
        id
    }

    /// Waits until no pass with an id up to `id` is running.
    pub(crate) fn wait_passes_upto(&self, id: u64) {
        let mut passes = lock(&self.passes);
        while passes.active.iter().any(|&a| a <= id) {
            passes = self
                .passes_cv
                .wait(passes)
                .unwrap_or_else(|e| e.into_inner());
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
            if let Work::Batch { items, accounted } = &mut node.value {
                if *accounted {
                    batch_items += items.len();
                } else {
                    // Pushed at thread exit (one CAS, no accounting there):
                    // it is no longer open.
                    *accounted = true;
                    // Relaxed: a hint for the reclaimer's poll decision.
                    self.open_batches.fetch_sub(1, Ordering::Relaxed);
                }
                for d in items.drain(..) {
                    if catch_unwind(AssertUnwindSafe(|| d.call())).is_err() {
                        panicked += 1;
                    }
                    ran += 1;
                }
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
            if self.reclaim_pass() > 0 {
                continue;
            }
            let passes = lock(&self.passes);
            if passes.active.is_empty() {
                // Nothing in flight and nothing queued: what remains is
                // being accounted by a concurrent publisher. Re-check.
                drop(passes);
                thread::yield_now();
                continue;
            }
            let _ = self
                .passes_cv
                .wait_timeout(passes, Duration::from_millis(1))
                .unwrap_or_else(|e| e.into_inner());
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
