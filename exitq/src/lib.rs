//! exitq: a lock-free thread-exit cleanup queue with RCU-style deferred,
//! batched reclamation.
//!
//! When a thread exits, runtimes usually do their bookkeeping under a global
//! lock (unregister from a registry, return buffers, merge statistics). When
//! many threads exit together, they queue on that lock (futex wait/wake on
//! one word). exitq turns the per-exit work into **one compare-and-swap of a
//! node allocated in advance**, and lets one reclaimer run the cleanups in
//! batches after **one grace period per batch** (the kernel's `call_rcu`
//! idea instead of `synchronize_rcu` per update).
//!
//! # The model
//!
//! A [`Domain`] owns:
//!
//! * **readers**: [`Domain::read`] returns a [`Guard`]; the code inside is a
//!   read-side critical section. Entering costs a thread-local lookup, a
//!   load and a store of the thread's reader word and a compiler fence: the
//!   writer side pays instead, with membarrier(2) (see [`expedite`]). A
//!   [`Reader`] registered once ([`Domain::reader`]) skips the lookup.
//! * **grace periods**: [`Domain::synchronize`] returns once every read
//!   section that started before the call has ended; concurrent callers
//!   share grace periods. [`Domain::synchronize_expedited`] trades CPU for
//!   latency.
//! * **deferred callbacks**: [`Domain::defer`] puts a closure in the calling
//!   thread's batch (no shared atomic per call). A full batch is *sealed*
//!   with the grace period it needs and stays with its thread; once that
//!   grace period has passed, **the thread that queued the callbacks runs
//!   them** (from a later `defer`, [`Domain::flush`] or the end of its read
//!   section; never inside a read guard), as the kernel runs RCU callbacks
//!   on the CPU that queued them: a freed object goes back to the allocator
//!   cache of the thread that allocated it. The reclaimer thread drives
//!   grace periods and runs what no live thread will: batches of threads
//!   that exited, went idle, or left ready batches unrun for a flush
//!   latency ([`Callbacks::Offload`] sends every callback there instead).
//!   [`Domain::barrier`] waits until everything deferred before it has run.
//! * **thread-exit hooks**: [`Domain::register_exit`] allocates the hook's
//!   node now; when the thread exits (returns, `pthread_exit`, or
//!   `pthread_cancel`) its thread-local destructor pushes the node, together
//!   with the thread's batches, with one CAS: no lock, no syscall, no
//!   allocation. See [`exit`].
//!
//! The mechanisms live one per module, each with its protocol and every
//! memory ordering written down: `grace` (the read side and grace
//! periods), `record` (the registry and the state words), `handshake`
//! (how another thread takes a thread's batches), `local` (the owner's
//! batches), `reclaim` (passes, stealing, `barrier`), `reclaimer` (the
//! thread), `run` (running work), [`exit`], `cancel` (see [Cancellation](crate#cancellation)),
//! `fork`; `domain` is the public facade.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::{AtomicPtr, Ordering};
//! use std::sync::Arc;
//!
//! struct Config { verbose: bool }
//!
//! let domain = exitq::Domain::new();
//! let current = Arc::new(AtomicPtr::new(Box::into_raw(Box::new(Config { verbose: false }))));
//!
//! // Readers, on any thread:
//! {
//!     let _guard = domain.read();
//!     // SAFETY (example): the object is freed only after a grace period.
//!     let verbose = unsafe { (*current.load(Ordering::Acquire)).verbose };
//!     assert!(!verbose);
//! }
//!
//! // A writer replaces the object and defers freeing the old one.
//! let old = current.swap(Box::into_raw(Box::new(Config { verbose: true })), Ordering::AcqRel);
//! let old = old as usize; // raw pointers are not Send
//! domain.defer(move || {
//!     // SAFETY (example): every reader that could see `old` has left.
//!     drop(unsafe { Box::from_raw(old as *mut Config) });
//! });
//!
//! // A thread registers its cleanup; it runs after the thread exits.
//! let d = domain.clone();
//! std::thread::spawn(move || d.register_exit(|| println!("thread cleaned up")))
//!     .join()
//!     .unwrap();
//! domain.barrier(); // the deferred free and the exit hook have run
//! assert_eq!(domain.stats().exits_run, 1);
//! # drop(unsafe { Box::from_raw(current.load(Ordering::Acquire)) });
//! ```
//!
//! # Guarantees
//!
//! Each is checked by a test that fails if it is broken (`exitq/tests`;
//! `tests/regress.rs` holds the ones v1 broke), by the torture test
//! (`cargo run --release -p exitq --example torture -- --seconds 60`: every
//! API at random on many threads, every violation counted), by loom models
//! of each handshake (`tests/loom.rs`) and by miri on the core
//! (`tests/miri_core.rs`).
//!
//! * **Exactly once.** Every deferred callback and every exit hook runs
//!   exactly once: including the batches of idle and exited threads,
//!   everything pending when the domain is dropped, and when a callback
//!   panics (even with a payload whose `Drop` panics too).
//! * **After its grace period.** A callback never runs while a read section
//!   that started before it was deferred is still open.
//! * **`barrier`.** When [`Domain::barrier`] returns, every callback whose
//!   `defer` returned before it was called has run, whoever ran it (its
//!   thread, a reclaim pass, the reclaimer): work moves between a thread's
//!   batches, the domain's queue and a run in progress only inside one
//!   handshake section, with one stealer at a time.
//! * **Shutdown.** Dropping the last `Domain` handle takes every thread's
//!   batches, stops and joins the reclaimer thread, and runs every pending
//!   callback on the dropping thread. Exit hooks of threads that are still
//!   alive wait for those threads' exit, then run inline (no reader can
//!   exist any more).
//! * **Panics.** A panicking callback or hook is caught, counted
//!   ([`Stats::callbacks_panicked`]) and the rest still run.
//! * **Stalls.** A reader that holds up a grace period for longer than the
//!   stall timeout is counted and reported (a stall handler, or one line on
//!   stderr naming the thread); the grace period keeps waiting. A guard
//!   leaked by a thread that exited stops holding grace periods once the
//!   thread is gone.
//! * **Progress.** Grace periods advance whenever a thread that waits for
//!   one runs: the reclaimer runs them, and a thread whose sealed batches
//!   wait helps (polls the readers once, or starts one when none completed
//!   for a while) without blocking, so a reclaimer starved of CPU does not
//!   stop reclamation.
//! * **Bounded memory.** At most `backlog_limit` sealed callbacks wait: a
//!   thread past the limit waits for its oldest batch's grace period and
//!   runs it, or helps with the domain's queue (except inside a read guard
//!   or a callback, where waiting would deadlock: counted in
//!   [`Stats::backlog_overruns`]).
//! * **No deadlock by misuse.** `synchronize`, `barrier` and friends panic
//!   with a message instead of deadlocking when called inside a read
//!   section of the same domain, of any kind (a `Domain::read` guard, a
//!   `Reader`'s, one taken during thread teardown), or `barrier` inside one
//!   of its callbacks. Running ready callbacks never waits for a grace
//!   period.
//!
//! Callbacks may run inside `defer` and `flush` (outside any read guard):
//! do not call them while holding a lock your callbacks take, or choose
//! [`Callbacks::Offload`].
//!
//! # Costs
//!
//! | operation | cost |
//! |---|---|
//! | `read()` + drop | TLS lookup; one load + one store of the thread's reader word on entry (plus a load of the epoch) and on exit; a compiler fence (a full fence in fallback mode) |
//! | [`Reader::read`] + drop | no TLS lookup and no nesting (`&mut self`): one store of the epoch on entry, one store of 0 and one load of the record's flags on exit, the fence as above |
//! | `defer(f)` | TLS lookup, the closure's captured words written into the batch (one word for `move \|\| drop(p)`; a two-word run header when the closure type changes), 2 plain stores + 1 load (steal handshake); closures over 3 words are boxed |
//! | full batch (default 256) | sealed: a full fence and a load for its grace period, two counters; the thread's ready batches run; a wake-up syscall only if the reclaimer sleeps |
//! | thread exit | one CAS on the list head, one CAS on the thread's own record |
//! | grace period | one membarrier (IPI to every CPU running a thread of the process), a 25 µs sleep (normal), a scan of the records |
//! | `barrier()` | one membarrier to take every thread's batches, one reclaim pass, waits for passes and threads' runs that took earlier work |
//!
//! Figures and the commands that reproduce them: `docs/exitq.md`.
//!
//! # Cancellation
//!
//! exitq disables `pthread_cancel` (deferred cancellation) around its own
//! waits and while it runs callbacks, so a cancellation never acts inside
//! exitq: it stays pending and acts at the thread's next cancellation point
//! after exitq returns. Asynchronous cancellation is not supported. See
//! `cancel.rs` for the model.
//!
//! # fork()
//!
//! Like liburcu without its atfork hooks: a `Domain` must not be used in the
//! child of `fork()`. The reclaimer thread does not exist in the child, and
//! the records of the parent's other threads look alive. `synchronize`,
//! `barrier`, `exit_barrier`, `flush`, `reader` and sealing a batch panic
//! with a message there (a `pthread_atfork` handler makes the check one
//! load); dropping the domain in the child leaks its memory and pending
//! callbacks (they belong to the parent, which still runs them). A child
//! that only `exec`s needs nothing; a child that wants RCU builds its own
//! `Domain` ([`pool::Pool`]'s shared domain does so by itself).
//!
//! # Scale
//!
//! Nothing is sized by CPU count: records are per thread (allocated on first
//! use, reused after the thread exits), the lists are unbounded, and a grace
//! period scans the records that exist. The reclaimer is one thread per
//! domain; callbacks run on the threads that queued them, so their work
//! scales with the threads, not with the reclaimer.
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
compile_error!(
    "exitq supports Linux with glibc only: it uses membarrier(2), gettid(2), \
     tgkill(2), pthread_setcancelstate and glibc's thread-exit destructor order"
);

mod batch;
mod cancel;
mod config;
mod domain;
pub mod exit;
pub mod expedite;
mod fork;
mod grace;
mod handshake;
mod inner;
pub mod llist;
mod local;
pub mod pool;
mod reclaim;
mod reclaimer;
mod record;
mod run;
pub mod stacks;
mod stats;
mod sync;
mod thread;

/// Entry points for the loom models in `tests/loom.rs` (only built with
/// `--cfg exitq_loom`): the protocol steps the domain runs, with loom's
/// atomics, a full fence modelled as a read-modify-write of one global word
/// (see `sync.rs`), and the membarrier mode's compiler fence modelled the
/// same way (membarrier puts a full barrier there).
#[cfg(exitq_loom)]
#[doc(hidden)]
pub mod model {
    use crate::expedite::Fences;
    use crate::{grace, handshake};
    pub use loom::sync::atomic::{AtomicBool, AtomicU64};

    const FENCES: Fences = Fences { membarrier: true };

    pub fn reader_enter(gp_ctr: &AtomicU64, ctr: &AtomicU64) {
        grace::reader_enter(gp_ctr, ctr, FENCES)
    }
    pub fn reader_exit(ctr: &AtomicU64) -> bool {
        grace::reader_exit(ctr)
    }
    /// The epoch word before any grace period.
    pub fn initial_epoch() -> u64 {
        grace::epoch_word(0)
    }
    pub fn start_grace_period(gp_ctr: &AtomicU64, g: u64) {
        grace::start_grace_period(gp_ctr, g, FENCES)
    }
    pub fn holds_grace_period(ctr: &AtomicU64, g: u64) -> bool {
        grace::holds_grace_period(ctr, g)
    }
    pub fn owner_begin(busy: &AtomicBool, steal: &AtomicBool) -> bool {
        handshake::owner_begin(busy, steal, FENCES)
    }
    pub fn owner_end(busy: &AtomicBool) {
        handshake::owner_end(busy)
    }
    pub fn wait_for_stealer(steal: &AtomicBool) {
        handshake::wait_for_stealer(steal)
    }
    pub fn stealer_mark(steal: &AtomicBool) {
        handshake::stealer_mark(steal)
    }
    pub fn stealer_wait(busy: &AtomicBool) {
        handshake::stealer_wait(busy)
    }
    pub fn stealer_done(steal: &AtomicBool) {
        handshake::stealer_done(steal)
    }
    /// The heavy barrier alone (a stealer's, between marking and waiting).
    pub fn heavy_barrier() {
        FENCES.heavy()
    }
    pub fn run_begin(seq: &AtomicU64) {
        handshake::run_begin(seq)
    }
    pub fn run_end(seq: &AtomicU64) {
        handshake::run_end(seq)
    }
    pub fn run_seen(seq: &AtomicU64) -> Option<u64> {
        handshake::run_seen(seq)
    }
    pub fn run_wait(seq: &AtomicU64, seen: u64) {
        handshake::run_wait(seq, seen)
    }
    /// A full fence (`GracePeriods::snapshot`'s).
    pub fn full_fence() {
        crate::sync::full_fence()
    }
}

pub use config::{Builder, Callbacks, Reclaimer, Stall, StallHandler};
pub use domain::{Domain, Guard, Reader, ReaderGuard};
pub use expedite::{membarrier_available, Expedite};
pub use stats::Stats;
