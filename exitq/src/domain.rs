//! The public face of a domain: [`Domain`] and its methods, and building
//! and shutting down. The guards are in `guard`, [`Reader`](crate::Reader)
//! in `reader`, typed pointers in `cell`.
//!
//! Each method is a thin entry point: it checks what the docs promise
//! (not inside a read section where waiting would deadlock, not in the
//! child of a `fork()`), finds the calling thread's record, and hands over
//! to the mechanism's module: `grace` (grace periods), `local` (the
//! thread's batches), `reclaim` (passes, stealing, `barrier`), `exit`
//! (exit hooks), `reclaimer` (the thread).
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

use crate::batch::Deferred;
use crate::config::{DomainBuilder, Reclaimer};
use crate::exit;
use crate::expedite::Fences;
use crate::guard::Guard;
use crate::inner::{lock, Inner};
use crate::local;
use crate::reclaim::{self, Steal};
use crate::reclaimer;
use crate::record::{Kind, Record, IN_USE, NEST_MASK, ORPHANED, TEMPORARY};
use crate::run;
use crate::section;
use crate::stall;
use crate::stats::{Counters, DomainStats};
use crate::sync::{self, Ordering};
use crate::thread as this_thread;
use crate::wake::Wake;

impl DomainBuilder {
    /// Builds the domain.
    ///
    /// # Panics
    ///
    /// If [`Expedite::Membarrier`](crate::Expedite::Membarrier) was asked
    /// for and the kernel refuses it, if the
    /// [thread name](DomainBuilder::thread_name) contains a NUL byte, or if
    /// the reclaimer thread cannot be spawned, with the reason in the
    /// message; use [`try_build`](DomainBuilder::try_build) to handle those.
    pub fn build(self) -> Domain {
        match self.try_build() {
            Ok(domain) => domain,
            Err(e) => panic!("exitq: cannot build domain: {e}"),
        }
    }

    /// Builds the domain, or says why not (membarrier unavailable with
    /// [`Expedite::Membarrier`](crate::Expedite::Membarrier); a
    /// [thread name](DomainBuilder::thread_name) with a NUL byte, as
    /// [`io::ErrorKind::InvalidInput`]; reclaimer thread not spawned, with
    /// the limit that stopped it and its numbers, e.g. `RLIMIT_NPROC 7
    /// reached: user 65534 has 7 tasks`: see [`crate::limits`]).
    pub fn try_build(self) -> io::Result<Domain> {
        // std's `thread::Builder` panics on such a name; refuse it before
        // anything is set up (whichever the reclaimer, so that a name
        // does not become an error only when the reclaimer changes).
        if self.thread_name.contains('\0') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "reclaimer thread name {:?} contains a NUL byte",
                    self.thread_name
                ),
            ));
        }
        let fences = Fences::resolve(self.expedite)?;
        // The exit key exists before any thread uses the domain, so keys
        // created after the first domain have their destructors run after
        // exitq's exit path (`thread`, "The exit destructor").
        crate::thread::create_exit_key();
        let inner = Arc::new(Inner::new(self, fences));
        let handle = Arc::new(Handle {
            inner: inner.clone(),
            reclaimer: Mutex::new(None),
        });
        if inner.config.reclaimer == Reclaimer::Thread {
            let worker = inner.clone();
            let join = thread::Builder::new()
                .name(inner.config.thread_name.clone())
                .spawn(move || reclaimer::run(worker))
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "cannot start the domain's reclaimer thread {}: {}",
                            inner.config.thread_name,
                            crate::limits::explain_thread_error(&e, None)
                        ),
                    )
                })?;
            *lock(&handle.reclaimer) = Some(join);
        }
        Ok(Domain {
            inner,
            _handle: handle,
        })
    }
}

/// An RCU domain: readers, grace periods, deferred callbacks and thread-exit
/// hooks. Cheap to clone (two `Arc`s); dropping the last clone runs
/// everything pending and stops the reclaimer thread.
///
/// See the [crate documentation](crate) for the model and the guarantees.
#[derive(Clone)]
pub struct Domain {
    pub(crate) inner: Arc<Inner>,
    /// Shared by the clones; the last one dropped shuts the domain down.
    _handle: Arc<Handle>,
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Domain")
            .field("id", &self.inner.id)
            .field("membarrier", &self.inner.gp.hot.fences.membarrier)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for Domain {
    fn default() -> Self {
        Domain::new()
    }
}

// A panic never leaves a domain inconsistent: callbacks and stall handlers
// run under `catch_unwind`, every lock ignores poisoning (it guards plain
// counters), and exitq's own state changes are complete before user code
// runs. So a domain may be used across `catch_unwind` (the stall handler's
// `dyn Fn` would otherwise make it neither).
impl std::panic::UnwindSafe for Domain {}
impl std::panic::RefUnwindSafe for Domain {}

/// The last user handle: dropping it shuts the domain down.
struct Handle {
    inner: Arc<Inner>,
    reclaimer: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let join = lock(&self.reclaimer).take();
        shutdown(&self.inner, join);
    }
}

/// Runs when the last `Domain` handle is dropped: publish every thread's
/// batches, stop the reclaimer, orphan the records live threads still
/// hold, and run everything on the dropping thread.
fn shutdown(arc: &Arc<Inner>, reclaimer: Option<JoinHandle<()>>) {
    let inner: &Inner = arc;
    if inner.forked() {
        // fork() child: the reclaimer and the other threads do not exist
        // here; running the parent's callbacks twice would be worse than
        // leaking them. Documented in the crate docs.
        std::mem::forget(reclaimer);
        return;
    }
    // Read by the reclaimer thread only (reclaimer.rs), which then leaves
    // its loop (the join below orders its last writes before our drain).
    // SeqCst: the other half of the store-buffering pair with its
    // published sleep state and SeqCst re-check before it sleeps, so it
    // cannot park after missing this store (we also wake it below).
    // Exiting threads learn of the shutdown from the orphan marking below,
    // not from this flag.
    inner.shut_down.store(true, Ordering::SeqCst);
    // A grace period the reclaimer leads stops waiting (a section leaked
    // by a live thread would hold it, and the join below, forever).
    inner.gp.stop();
    if let Some(r) = this_thread::existing_main(inner) {
        reclaim::push_own(inner, r);
    }
    reclaim::steal(inner, Steal::All);
    if let Some(join) = reclaimer {
        inner.wake_reclaimer(Wake::Always);
        // Asleep with a long timeout or about to sleep: the doorbell
        // stays rung, so its next sleep returns at once.
        inner.doorbell.ring();
        if join.thread().id() == thread::current().id() {
            // Dropped from a callback on the reclaimer thread itself: it
            // finishes its loop and exits on its own.
            drop(join);
        } else {
            let _ = join.join();
        }
    }
    // Records still held by live threads keep the domain alive; their
    // owners run their exit hooks inline when they exit (exit.rs).
    for r in inner.registry.iter() {
        // AcqRel: pairs with the owner's release CAS at exit (exit.rs).
        if r.state
            .compare_exchange(IN_USE, ORPHANED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: `arc` is a live `Arc` (the pointer keeps its
            // provenance over the whole allocation); the count is given
            // back by the owner thread (`exit::release_main`).
            unsafe { Arc::increment_strong_count(Arc::as_ptr(arc)) };
        }
    }
    // No handle is left, so no read guard exists (each borrows a handle
    // or a `Reader`, which owns one),
    // and no thread holds batches (stolen above; none can defer): run
    // everything without a grace period.
    loop {
        let chain = inner.queue.take_all();
        if chain.is_empty() {
            break;
        }
        inner.run(chain);
    }
}

impl Domain {
    /// A domain with the default settings and a reclaimer thread.
    ///
    /// # Panics
    ///
    /// If the reclaimer thread cannot be spawned (see
    /// [`try_new`](Domain::try_new)).
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// domain.synchronize();
    /// ```
    pub fn new() -> Domain {
        DomainBuilder::default().build()
    }

    /// A domain with the default settings, or why not: the reclaimer
    /// thread could not be spawned (the limit that stopped it named, as
    /// [`DomainBuilder::try_build`] reports it).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// let domain = exitq::Domain::try_new()?;
    /// domain.synchronize();
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_new() -> io::Result<Domain> {
        DomainBuilder::default().try_build()
    }

    /// A builder to configure a domain.
    pub fn builder() -> DomainBuilder {
        DomainBuilder::default()
    }

    /// Enters a read-side critical section; it lasts until the guard drops.
    ///
    /// Nestable and cheap: after a thread's first call, a thread-local
    /// lookup, a nesting counter, one load and one store, and a compiler
    /// fence (a full fence in fallback mode). Grace periods that start after
    /// this call wait for the guard to drop; those that started before do
    /// not. Calling [`synchronize`](Domain::synchronize) or
    /// [`barrier`](Domain::barrier) on the same domain while holding a guard
    /// would deadlock, so they panic instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicPtr, Ordering};
    ///
    /// let domain = exitq::Domain::new();
    /// let shared = AtomicPtr::new(Box::into_raw(Box::new(7u64)));
    /// {
    ///     let _guard = domain.read();
    ///     // SAFETY (example): the pointer is only freed after a grace period.
    ///     let value = unsafe { *shared.load(Ordering::Acquire) };
    ///     assert_eq!(value, 7);
    /// }
    /// // Writer: unpublish, wait for readers, free.
    /// let old = shared.swap(Box::into_raw(Box::new(8u64)), Ordering::AcqRel);
    /// domain.synchronize();
    /// // SAFETY (example): no reader can still hold `old`.
    /// drop(unsafe { Box::from_raw(old) });
    /// # drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    /// ```
    #[inline]
    pub fn read(&self) -> Guard<'_> {
        match this_thread::cached(&self.inner) {
            Some(r) => {
                self.enter(r);
                Guard::entered(r, &self.inner)
            }
            None => self.read_slow(),
        }
    }

    /// Claims a record that is not the thread's main one (a `Reader`'s, a
    /// temporary guard's) and links it into the thread's auxiliary list, so
    /// the deadlock checks see its sections.
    pub(crate) fn claim_aux(&self, kind: Kind) -> &Record {
        let (r, new) =
            self.inner
                .registry
                .claim(Arc::as_ptr(&self.inner) as *const (), self.inner.id, kind);
        if new {
            Counters::add(&self.inner.stats.participants, 1);
        }
        this_thread::link_aux(r);
        r
    }

    #[cold]
    fn read_slow(&self) -> Guard<'_> {
        let record = match this_thread::main_record(&self.inner) {
            Some(r) => r,
            // The thread's exitq state is gone (called from a later
            // destructor): a record for this guard only.
            None => {
                let r = self.claim_aux(Kind::Temporary);
                r.flags.set(TEMPORARY);
                r
            }
        };
        self.enter(record);
        Guard::entered(record, &self.inner)
    }

    #[inline(always)]
    fn enter(&self, r: &Record) {
        let hot = &self.inner.gp.hot;
        // Relaxed: only this thread writes its reader word.
        if r.ctr.load(Ordering::Relaxed) & NEST_MASK == hot.fast_idle {
            // Outermost entry, membarrier mode (see `grace::Hot::fast_idle`).
            section::entry_store(&hot.gp_ctr, &r.ctr);
            // Orders the store before the section's loads; pairs with the
            // leader's membarrier (expedite.rs).
            sync::compiler_fence();
        } else {
            // Nested entry, or fence mode.
            section::reader_enter(&hot.gp_ctr, &r.ctr, hot.fences);
        }
    }

    /// Waits for one full grace period: every read section that started
    /// before the call has ended when it returns. Concurrent callers share
    /// grace periods. A normal grace period first sleeps
    /// `first_check_delay`, then polls the readers with exponential backoff.
    ///
    /// # Panics
    ///
    /// If the calling thread is inside a read section of this domain (a
    /// guard of [`read`](Domain::read) or of a [`Reader`](crate::Reader): that would
    /// deadlock), or in the child of a `fork()`.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// domain.synchronize();
    /// assert!(domain.stats().grace_periods >= 1);
    /// ```
    pub fn synchronize(&self) {
        self.check_can_wait("synchronize");
        Counters::add(&self.inner.stats.synchronize_calls, 1);
        self.inner
            .gp
            .synchronize(&self.inner.registry, &self.inner.stats, false);
    }

    /// Like [`synchronize`](Domain::synchronize) but for latency: no initial
    /// delay, the readers are polled in a spin loop first, and a normal
    /// grace period in progress skips its delay. Costs one membarrier (an
    /// IPI to every CPU running a thread of this process), plus CPU time
    /// spinning.
    ///
    /// # Panics
    ///
    /// As [`synchronize`](Domain::synchronize).
    pub fn synchronize_expedited(&self) {
        self.check_can_wait("synchronize_expedited");
        Counters::add(&self.inner.stats.synchronize_calls, 1);
        Counters::add(&self.inner.stats.expedited, 1);
        self.inner
            .gp
            .synchronize(&self.inner.registry, &self.inner.stats, true);
    }

    /// The stall timeout, and the report of a cache of thread `tid` that
    /// held up a `replace` that long (`RcuCell::replace`).
    pub(crate) fn cache_stall_reporter(
        &self,
    ) -> (
        std::time::Duration,
        impl FnOnce(i32, std::time::Duration) + '_,
    ) {
        (self.inner.gp.stall_timeout(), move |tid, waited| {
            self.inner
                .gp
                .report_cache_stall(tid, waited, &self.inner.stats)
        })
    }

    /// Panics where waiting for a grace period would deadlock or hang.
    pub(crate) fn check_can_wait(&self, what: &str) {
        self.inner.check_fork();
        if this_thread::inside(&self.inner) {
            panic!("exitq: {what}() called inside a read-side critical section of the same domain (deadlock)");
        }
        if stall::in_handler(self.inner.gp.id()) {
            panic!("exitq: {what}() called from the stall handler of the same domain (deadlock)");
        }
    }

    /// Runs `f` after a grace period: once every read section that started
    /// before this call has ended. Exactly once: by default on this thread
    /// (see [`Callbacks`](crate::Callbacks)), a few callbacks per later
    /// `defer` once a seal found its batch ready, or at
    /// [`flush`](Domain::flush); on the reclaimer if this thread exits,
    /// goes idle or leaves it unrun for a flush latency.
    ///
    /// The closure goes into this thread's batch (no shared atomic per call;
    /// closures up to three words are stored inline, larger ones boxed). A
    /// full batch is sealed and waits for one grace period as a whole.
    /// Callbacks may run inside `defer`, also inside a read section of the
    /// calling thread (their grace period has passed: nothing they free is
    /// reachable there): do not call it while holding a lock your
    /// callbacks take, or use [`Callbacks::Offload`](crate::Callbacks::Offload);
    /// a callback must not wait for a grace period (see the crate docs).
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
        match this_thread::main_record(&self.inner) {
            Some(r) => local::defer(&self.inner, r, f),
            None => local::defer_alone(&self.inner, Deferred::new(f)),
        }
    }

    /// Drops `value` after a grace period: [`defer`](Domain::defer) of
    /// `move || drop(value)` (one word in the batch), the `call_rcu(free)`
    /// of a value unlinked from a structure readers traverse, such as a
    /// list node. The value's `Drop` runs where callbacks run.
    ///
    /// For a value published through one pointer, [`RcuCell`] does the
    /// unlinking and the deferring, without any `unsafe`.
    ///
    /// [`RcuCell`]: crate::RcuCell
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let node = Box::new([0u8; 64]);
    /// domain.defer_drop(node);
    /// domain.barrier();
    /// assert_eq!(domain.stats().callbacks_run, 1);
    /// ```
    #[inline]
    pub fn defer_drop<T: ?Sized + Send + 'static>(&self, value: Box<T>) {
        self.defer(move || drop(value));
    }

    /// Seals this thread's open batch now and runs those of its batches
    /// whose grace period has passed (also inside a read section). With
    /// [`Reclaimer::Inline`], also runs the grace period its batches need
    /// and the domain's queue.
    ///
    /// # Panics
    ///
    /// In the child of a `fork()`.
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
        self.inner.check_fork();
        if let Some(r) = this_thread::existing_main(&self.inner) {
            local::flush(&self.inner, r);
        } else if self.inner.config.reclaimer == Reclaimer::Inline
            && !this_thread::inside(&self.inner)
            && !run::in_callback(self.inner.id)
            && !stall::in_handler(self.inner.gp.id())
        {
            reclaim::reclaim_pass(&self.inner);
        }
    }

    /// Returns once every callback deferred before the call (by any thread:
    /// `defer` returned before `barrier` was called) has run, and every
    /// thread that exited before the call has had its exit hooks run.
    ///
    /// Takes every thread's batches (one membarrier for all of them), runs
    /// a reclaim pass on the calling thread, and waits for the passes and
    /// the threads' own runs that took earlier work.
    ///
    /// # Panics
    ///
    /// Inside a read section of this domain, or inside one of its callbacks
    /// (both would deadlock); in the child of a `fork()`.
    pub fn barrier(&self) {
        self.drain("barrier", true);
    }

    /// Returns once every thread that exited before the call (its exit
    /// destructor happened-before this call, e.g. it was joined) has had its
    /// exit hooks and left-over callbacks run.
    ///
    /// # Panics
    ///
    /// As [`barrier`](Domain::barrier).
    pub fn exit_barrier(&self) {
        self.drain("exit_barrier", false);
    }

    fn drain(&self, what: &str, steal_all: bool) {
        self.check_can_wait(what);
        if run::in_callback(self.inner.id) {
            panic!("exitq: {what}() called from a callback of the same domain (deadlock)");
        }
        let own = this_thread::existing_main(&self.inner);
        reclaim::drain(&self.inner, own, steal_all);
    }

    /// Registers `f` to run after the calling thread exits (also when it is
    /// cancelled with `pthread_cancel`), on the reclaimer, after a grace
    /// period.
    ///
    /// Allocates now, so the exit path does not: it pushes the
    /// preallocated node with one compare-and-swap (see the
    /// [module docs](crate::exit)). Hooks of one thread run in reverse
    /// registration order.
    ///
    /// # Panics
    ///
    /// In the child of a `fork()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    ///
    /// let domain = exitq::Domain::new();
    /// let cleaned = Arc::new(AtomicBool::new(false));
    /// let (d, c) = (domain.clone(), cleaned.clone());
    /// std::thread::spawn(move || {
    ///     d.register_exit(move || c.store(true, Ordering::Release));
    /// })
    /// .join()
    /// .unwrap();
    /// domain.exit_barrier();
    /// assert!(cleaned.load(Ordering::Acquire));
    /// ```
    pub fn register_exit<F: FnOnce() + Send + 'static>(&self, f: F) {
        // In a fork() child the hook could never run.
        self.inner.check_fork();
        exit::register(
            &self.inner,
            this_thread::main_record(&self.inner),
            Box::new(f),
        );
    }

    /// Runs the thread-exit procedure for this domain now instead of at
    /// thread exit: hands the calling thread's batches and its exit hooks
    /// to the domain (the hooks then run after a grace period, as if the
    /// thread had exited) and releases its record. For threads that end
    /// through a path of their own (e.g. a pthread-key destructor, or
    /// before `pthread_exit` in foreign code). The thread may keep using the
    /// domain afterwards; it gets a fresh record.
    ///
    /// # Panics
    ///
    /// Inside a read section of this domain, or inside one of its
    /// callbacks or exit hooks (the thread may be running its own batches
    /// there: its record must stay its own until that run ends); in the
    /// child of a `fork()`.
    pub fn retire_thread(&self) {
        self.check_can_wait("retire_thread");
        if run::in_callback(self.inner.id) {
            panic!("exitq: retire_thread() called from a callback of the same domain (its record may be running its batches)");
        }
        if let Some(r) = this_thread::unlink_main(&self.inner) {
            // SAFETY: the record is owned by the calling thread and was just
            // unlinked from its list, so it is retired once; it is outside
            // any section (checked above), so it is released at once, and
            // not orphaned (`&self` is a live handle).
            let retired = unsafe { exit::retire(r) };
            debug_assert!(
                matches!(retired, exit::Retired::Released(None)),
                "a live handle's record outside any section is released, not orphaned"
            );
            if let exit::Retired::Released(Some(o)) = retired {
                o.release();
            }
        }
    }

    /// Shows the calling thread offline in this domain until its next use
    /// of it: grace periods then need no heavy barrier (membarrier(2)) on
    /// its account while it blocks. Back online by itself, with a full
    /// fence, at the thread's next `read`, `defer` or other use of the
    /// domain. A section the thread holds stays held. See
    /// [`thread_offline`](crate::thread_offline), which does it for every
    /// domain the thread has used.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// domain.defer(|| ()); // the thread is registered now
    /// domain.thread_offline();
    /// std::thread::sleep(std::time::Duration::from_millis(1)); // blocks
    /// let _guard = domain.read(); // back online
    /// ```
    pub fn thread_offline(&self) {
        this_thread::offline(Some(&self.inner));
    }

    /// A snapshot of the domain's counters.
    pub fn stats(&self) -> DomainStats {
        self.inner.snapshot()
    }

    /// Whether this domain's writers use membarrier(2) (readers then pay
    /// only a compiler fence).
    pub fn uses_membarrier(&self) -> bool {
        self.inner.gp.hot.fences.membarrier
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Domain>();
}
