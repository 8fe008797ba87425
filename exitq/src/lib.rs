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
//!   [`Reader`] registered once ([`Domain::reader`]) skips the lookup; it
//!   owns a handle of the domain, so it can live in a worker's struct or a
//!   `thread_local!`. A [`QsbrReader`] ([`Domain::qsbr_reader`]) is
//!   liburcu-qsbr's model: online from its creation to its drop, so loads
//!   under it enter no section at all; its thread announces quiescent
//!   states instead ([Choosing a reader](crate#choosing-a-reader)).
//! * **grace periods**: [`Domain::synchronize`] returns once every read
//!   section that started before the call has ended; concurrent callers
//!   share grace periods. [`Domain::synchronize_expedited`] trades CPU for
//!   latency.
//! * **deferred callbacks**: [`Domain::defer`] puts a closure in the calling
//!   thread's batch (no shared atomic per call). A full batch is *sealed*
//!   with the grace period it needs and stays with its thread; once that
//!   grace period has passed, **the thread that queued the callbacks runs
//!   them** (7 per 7 later `defer`s once a seal found them ready, even
//!   inside a read section, or at [`Domain::flush`]), as the kernel runs
//!   RCU callbacks on the CPU that queued them: a freed object goes back to the allocator
//!   cache of the thread that allocated it. The reclaimer thread drives
//!   grace periods and runs what no live thread will: batches of threads
//!   that exited, went idle, or left ready batches unrun for a flush
//!   latency ([`Callbacks::Offload`] sends every callback there instead).
//!   [`Domain::barrier`] waits until everything deferred before it has run.
//! * **thread-exit hooks**: [`Domain::register_exit`] allocates the hook's
//!   node now; when the thread exits (returns, `pthread_exit`, or
//!   `pthread_cancel`) its exit destructor (a pthread key's) pushes the
//!   node, together with the thread's batches, with one CAS: no lock, no
//!   syscall, no allocation, no wait (should a steal of the thread's
//!   batches be under way at that moment, the exit is left to the stealer
//!   with one CAS instead). See [`exit`].
//!
//! The mechanisms live one per module, each with its protocol and every
//! memory ordering written down: `section` and `grace` (the read side
//! and grace periods), `record` (the registry, and a record's life: who may claim,
//! release and reuse it when), `handshake`
//! (how another thread takes a thread's batches), `local` (the owner's
//! batches), `reclaim` (passes, stealing, `barrier`), `reclaimer` (the
//! thread), `run` (running work), [`exit`], `cancel` (see [Cancellation](crate#cancellation)),
//! `fork`; `domain` is the public facade, `guard` and `reader` its two
//! kinds of read section, [`cell`] the typed pointers.
//!
//! # Example
//!
//! ```
//! use exitq::{Domain, RcuCell};
//!
//! struct Config { verbose: bool }
//!
//! let domain = Domain::new();
//! let current = RcuCell::new(&domain, Config { verbose: false });
//!
//! // Readers, on any thread: the reference lives as long as the guard.
//! {
//!     let guard = domain.read();
//!     assert!(!current.load(&guard).verbose);
//! }
//!
//! // A writer replaces the object; the old one is dropped after a grace
//! // period (every reader that could see it has left).
//! current.store(Config { verbose: true });
//!
//! // A thread registers its cleanup; it runs after the thread exits.
//! let d = domain.clone();
//! std::thread::spawn(move || d.register_exit(|| println!("thread cleaned up")))
//!     .join()
//!     .unwrap();
//! domain.barrier(); // the deferred drop and the exit hook have run
//! assert_eq!(domain.stats().exits_run, 1);
//! ```
//!
//! [`RcuCell`] and [`RcuOption`] are the typed RCU pointers (liburcu's
//! `rcu_dereference` / `rcu_assign_pointer` / `rcu_xchg_pointer`,
//! crossbeam-epoch's `Atomic`, without `unsafe`: see [`cell`]; a
//! [`CellCache`] reads one cell as arc-swap's `Cache` does);
//! [`Domain::defer`] and [`Domain::defer_drop`] defer anything else.
//!
//! # In a thread pool
//!
//! A pool author needs two hooks: at a worker's start, register its
//! cleanup ([`Domain::register_exit`]: the node is allocated then, not at
//! exit); at its stop, hand the cleanup over ([`Domain::retire_thread`]:
//! one compare-and-swap, no lock, no syscall; without it the thread's
//! exit does the same a little later). The cleanups run on the reclaimer
//! after a grace period, in batches. A third hook, where the pool has
//! one, takes a parked worker offline ([`thread_offline`]). tokio's
//! runtime:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let domain = exitq::Domain::new();
//! let (started, cleaned) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
//! let (start, stop, s, c) = (domain.clone(), domain.clone(), started.clone(), cleaned.clone());
//! let rt = tokio::runtime::Builder::new_multi_thread()
//!     .worker_threads(2)
//!     .thread_keep_alive(Duration::from_millis(10)) // idle blocking threads retire
//!     .on_thread_start(move || {
//!         s.fetch_add(1, Ordering::Relaxed);
//!         let (c, state) = (c.clone(), vec![0u8; 4096]); // this worker's state
//!         start.register_exit(move || {
//!             drop(state);
//!             c.fetch_add(1, Ordering::Relaxed);
//!         });
//!     })
//!     .on_thread_stop(move || stop.retire_thread())
//!     .on_thread_park(exitq::thread_offline) // parked: no membarrier on its account
//!     .build()
//!     .unwrap();
//! rt.block_on(async { tokio::task::spawn_blocking(|| ()).await.unwrap() });
//! drop(rt); // waits for every runtime thread to stop
//! domain.exit_barrier();
//! assert_eq!(cleaned.load(Ordering::Relaxed), started.load(Ordering::Relaxed));
//! ```
//!
//! rayon's thread pools take the same two lines
//! (`ThreadPoolBuilder::start_handler` and `exit_handler`):
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//!
//! let domain = exitq::Domain::new();
//! let (cleaned, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
//! let (start, stop, c, s) = (domain.clone(), domain.clone(), cleaned.clone(), stopped.clone());
//! let pool = rayon::ThreadPoolBuilder::new()
//!     .num_threads(4)
//!     .start_handler(move |_index| {
//!         let c = c.clone();
//!         start.register_exit(move || { c.fetch_add(1, Ordering::Relaxed); });
//!     })
//!     .exit_handler(move |_index| {
//!         stop.retire_thread();
//!         s.fetch_add(1, Ordering::Release);
//!     })
//!     .build()
//!     .unwrap();
//! pool.install(|| ());
//! drop(pool); // rayon's workers exit on their own
//! while stopped.load(Ordering::Acquire) < 4 {
//!     std::thread::yield_now();
//! }
//! domain.exit_barrier();
//! assert_eq!(cleaned.load(Ordering::Relaxed), 4);
//! ```
//!
//! `examples/tokio_pool.rs` and `examples/rayon_pool.rs` keep per-worker
//! statistics shards in an [`RcuCell`] registry this way; the tests
//! `tokio_pool` and `rayon_pool` count every cleanup (exactly once) and the
//! syscalls of the hand-over (none). `exitq::pool` is exitq's own pool.
//!
//! # Choosing a reader
//!
//! | reader | for | a read costs |
//! |---|---|---|
//! | [`Domain::read`] guard | any code, occasional reads, nested sections, nothing to set up | a TLS lookup, two stores of the reader word, a compiler fence |
//! | [`Reader::read`] guard | a thread that reads often (a worker's loop); the `Reader` lives in its struct or a `thread_local!` | two stores, the fence; no lookup, no nesting |
//! | [`QsbrReader`] | a thread that runs a loop it controls (a server's request loop, an event loop) and reads many times per iteration or per request | nothing but the load: the thread calls [`QsbrReader::quiescent`] once per iteration (a load and a compare; a store only after a grace period started) |
//! | [`CellCache`] ([`RcuCell::cache`]; [`OptionCache`] for an [`RcuOption`], [`RcuOption::cache`]) | a thread that reads one cell that changes rarely (a configuration, a routing table), as arc-swap's `Cache` | a load of the cell's pointer and a compare with the kept one; no section, no announcement, no grace period held; a miss (the cell changed) a store and a full fence |
//!
//! A thread about to block for a while (a parked worker, a server thread
//! waiting for a request) calls [`thread_offline`] (every domain it has
//! used; [`Domain::thread_offline`] for one): grace periods started
//! meanwhile need no membarrier on its account, and its next use of a
//! domain brings it back online by itself. `Reader` and `QsbrReader`
//! have `offline(f)`. `exitq::pool` workers do it before they park; for
//! tokio, `.on_thread_park(exitq::thread_offline)`.
//!
//! Every kind is a [`ReadSection`]: `RcuCell::load(&guard)` or
//! `RcuCell::load(&qsbr_reader)`, and the reference borrows it, so none
//! outlives its guard, or a QSBR reader's next `quiescent` or `offline`.
//!
//! A QSBR reader holds every grace period of its domain from one quiescent
//! state to the next. A thread that stops announcing them (blocked in a
//! `recv`, a lock or I/O while online, or a loop that forgot to call
//! `quiescent`) stalls them all: deferred frees pile up, `synchronize`,
//! `barrier` and `RcuCell::replace` wait, and past `backlog_limit` so do
//! other threads' `defer`s. Go offline around anything that blocks
//! ([`QsbrReader::offline`]). The stall report says so: its
//! [`Stall::held_by`] is [`HeldBy::QsbrReader`], and the default report on
//! stderr reads "grace period G stalled for T by reader thread TID (NAME):
//! an online QsbrReader that announced no quiescent state". As inside any
//! read section, waiting for a grace period of the domain while online
//! panics (wait inside `offline`); and a thread online on domain A that
//! waits for domain B's grace period (`synchronize`, `barrier`, or a
//! `defer` into B that waits: B's [`Reclaimer::Inline`] pass, B past its
//! backlog limit) can deadlock with a thread online on B that waits for
//! A's. Order such waits as you would locks, go offline around them, or
//! stay online on B too (a thread inside a section of B never waits in B's
//! `defer`).
//!
//! # Features
//!
//! `pool` (`exitq::pool`: an elastic thread pool whose workers retire
//! through exit hooks) and `stacks` (`exitq::stacks`: thread stacks mapped
//! once and recycled), both on by default. The reclamation core alone (what is
//! described above: [`Domain`], the guards, [`Reader`], [`QsbrReader`], [`RcuCell`] and
//! [`RcuOption`], exit hooks) is
//! `exitq = { version = "0.1", default-features = false }`; it depends on
//! neither. [`limits`], always there, names the limit that stopped a
//! thread's creation (a domain's reclaimer, a pool's worker, a thread on a
//! pooled stack), with its numbers.
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
//!   exist any more). A section leaked by a thread that lives on does not
//!   hold the shutdown up (a grace period in progress stops waiting).
//! * **Panics.** A panicking callback or hook is caught, counted
//!   ([`DomainStats::callbacks_panicked`]) and the rest still run (also
//!   when the payload's own `Drop` panics; the same holds for the jobs of
//!   `exitq::pool`).
//! * **Stalls.** A reader that holds up a grace period for longer than the
//!   stall timeout is counted and reported (a stall handler, or one line on
//!   stderr naming the thread and the kind of section, [`Stall::held_by`]);
//!   the grace period keeps waiting. A section
//!   leaked by a thread stops holding grace periods once the thread is
//!   gone ([Leaks](crate#leaks)).
//! * **Progress.** Grace periods advance whenever a thread that waits for
//!   one runs: a thread whose sealed batches wait drives them at its seals
//!   (checks the readers once, or starts one) without blocking, and the
//!   reclaimer runs one when none completed and no thread polled for a
//!   millisecond (10 ms while threads poll at a cadence: a writer that
//!   seals every few milliseconds keeps its own), so neither a reclaimer
//!   starved of CPU nor a thread that stopped deferring stops reclamation;
//!   and it leads one that polls left unfinished for 10 ms (ending leaked
//!   sections, reporting stalls). [`DomainStats::takeovers`] counts the
//!   grace periods it took over. A thread whose polls find one grace
//!   period held at 16 of its seals in a row yields its CPU, so that a
//!   reader preempted inside its section runs again
//!   ([`DomainStats::poll_yields`]).
//! * **Bounded memory.** At most `backlog_limit` sealed callbacks wait: a
//!   thread past the limit waits for its oldest batch's grace period and
//!   runs it, or helps with the domain's queue (except inside a read guard
//!   or a callback, where waiting would deadlock: counted in
//!   [`DomainStats::backlog_overruns`]).
//! * **No deadlock by misuse.** `synchronize`, `barrier` and friends panic
//!   with a message instead of deadlocking when called inside a read
//!   section of the same domain, of any kind (a `Domain::read` guard, a
//!   `Reader`'s, an online `QsbrReader`, one taken during thread teardown,
//!   a leaked one), or
//!   `barrier` inside one of its callbacks or any of them inside its stall
//!   handler (`tests/red.rs`), also when callbacks of other
//!   domains run nested in between on the thread (A's callback runs B's
//!   barrier, whose callback calls A's: `tests/regress.rs`
//!   `a_barrier_nested_through_another_domains_callback_panics`). Running
//!   ready callbacks never waits for a grace period. What no library can
//!   see is a cycle across threads that the callbacks themselves build (a
//!   callback of A waiting for B's barrier on one thread while a callback
//!   of B waits for A's on another): order such waits as you would locks.
//!
//! Callbacks may run inside `defer` and `flush`, also inside the calling
//! thread's read sections (as crossbeam-epoch's run inside `pin`), and
//! inside a cell cache's miss or drop (which hand values writers left for
//! it to `defer`: [`CellCache`]): do not
//! call them while holding a lock your callbacks take, or choose
//! [`Callbacks::Offload`]; and a callback must not wait for a grace period
//! (`synchronize`, `barrier`, `RcuCell::replace`): where it runs inside a
//! read section that panics (caught and counted), as the kernel forbids
//! blocking in an RCU callback.
//!
//! # Costs
//!
//! | operation | cost |
//! |---|---|
//! | `read()` + drop | TLS lookup; one load + one store of the thread's reader word on entry (plus a load of the epoch) and on exit; a compiler fence (a full fence in fallback mode) |
//! | [`Reader::read`] + drop | no TLS lookup and no nesting (`&mut self`): one store of the epoch on entry, one store on exit (the word idle, its epoch kept), the fence as above |
//! | [`QsbrReader`] | a load under it: no section; [`QsbrReader::quiescent`]: a load of the epoch and a compare, a store and the fence only once a grace period started since the last; [`QsbrReader::offline`]: two stores, a load and a full fence back online (offline, it needs no grace period's heavy barrier) |
//! | [`RcuCell::load`] | one load and a compare (the guard's domain key against the cell's), then the Acquire load of the pointer |
//! | [`CellCache::load`] | a hit: a relaxed load of the cell's pointer, a compare, the kept value; a miss: the pointer published in the cache's slot, a full fence, the pointer loaded again (and parked values collected, if any) |
//! | `defer(f)` | TLS lookup, the closure's captured words written into the batch (one word for `move \|\| drop(p)`; a two-word run header when the closure type changes), 2 plain stores + 1 load (steal handshake); closures over 3 words are boxed |
//! | ready callbacks | run by their thread 7 per 7 `defer`s (a drain tick: the `defer` that reaches it takes the slow path, disables cancellation, runs 7, settles a batch's counters once it is done) |
//! | full batch (default 256) | sealed: a full fence and a load for its grace period, two counters; the record's idle word refreshed with the epoch (a load, a store); a poll of the grace period (a scan of the reader words, or, at the 16th poll that finds none running, starting one: the epoch's store alone in membarrier mode); a wake-up syscall only if the reclaimer sleeps without a timeout |
//! | thread exit | one CAS on the list head; on the thread's own record, an uncontended read-modify-write of its state (against shutdown's orphan marking) and one CAS |
//! | grace period | led by `synchronize` or the reclaimer: one membarrier (IPI to every other CPU running a thread of the process), a scan of the records, and a normal `synchronize` naps 25 µs first; started by a thread's poll: scans only, when every record shows its owner past its start (threads that keep entering sections), else one membarrier after 4 polls that could not tell ([`DomainStats::heavy_barriers`]) |
//! | [`thread_offline`] | a store per domain the thread has used; its next use of each takes the slow lookup and a full fence (back online) |
//! | `barrier()` | one membarrier to take every thread's batches, one reclaim pass, waits for passes and threads' runs that took earlier work |
//!
//! Figures and the commands that reproduce them: `docs/results-exitq.md#benchmarks`
//! in the repository.
//!
//! # Cancellation
//!
//! exitq disables `pthread_cancel` (deferred cancellation) around its own
//! waits and while it runs callbacks, so a cancellation never acts inside
//! exitq: it stays pending and acts at the thread's next cancellation point
//! after exitq returns. A cancelled thread's exit runs its thread-local
//! and key destructors, so its exit hooks and batches are handed over as at a
//! return, and sections it leaked end once it is gone. Asynchronous
//! cancellation is not supported. `cancel.rs` states the model; proven by
//! `tests/exit.rs` `exit_hooks_run_for_cancelled_pthreads`,
//! `tests/regress.rs`
//! `a_thread_cancelled_while_waiting_for_a_grace_period_leaves_no_stuck_state`,
//! `tests/red2.rs` `a_pending_cancellation_does_not_act_inside_the_reclaimers_wake_up`,
//! `tests/exit_alloc.rs` and `tests/exit_futex.rs` (the exit path of a
//! cancelled thread allocates nothing and makes no futex call),
//! `tests/leak.rs` `a_leaked_reader_of_a_cancelled_thread_stops_holding_grace_periods`
//! and the torture test's cancelled threads.
//!
//! # fork()
//!
//! Like liburcu without its atfork hooks: a `Domain` (and a
//! `exitq::pool::Pool`) must not be used in the child of `fork()`. The
//! reclaimer thread, the pool's workers and the parent's other threads do
//! not exist in the child, and the records of those threads look alive.
//! So in a child:
//!
//! * `synchronize`, `barrier`, `exit_barrier`, `flush`, `reader`,
//!   `register_exit`, `retire_thread` and sealing a batch panic with a
//!   message (a `pthread_atfork` handler makes the check one load), as do
//!   the pool's `execute`, `spawn`, `scope`, `shutdown` and
//!   `shutdown_now`; a `defer` made while the child already unwinds from
//!   such a panic (a destructor that defers, as a cache or a value that
//!   retires another does) leaks its callback instead, since a second
//!   panic would abort the child;
//! * nothing of the parent's runs: not the batches waiting for the end of
//!   a guard held across the fork and dropped in the child, not an
//!   orphaned record's hooks, not the work the child's own exit (`exit`,
//!   which runs its thread-local destructors) would hand over, nor the
//!   rest of a run whose callback forked and returned in the child (the
//!   exitq call that ran it panics there, having run nothing more; a pool
//!   worker's child ends when the job returns); every callback and hook
//!   runs exactly once, in the parent;
//! * dropping the domain or the pool leaks its memory and pending work
//!   (the parent's, which the parent runs).
//!
//! A child that only `exec`s needs nothing; a child that wants RCU builds
//! its own `Domain` (`exitq::pool::Pool`'s shared domain does so by itself).
//! `fork.rs` states the mechanism; proven by `tests/fork.rs` (a guard held
//! across the fork, a child that exits normally, every entry point of a
//! domain and of a pool, a callback and a pool job that fork, a
//! destructor that defers while the child unwinds) and the
//! torture test's forks with held guards and forking callbacks.
//!
//! # Leaks
//!
//! Leaking is safe (`mem::forget` is safe Rust), and exitq stays sound
//! whatever is leaked:
//!
//! * a [`Guard`] or a [`ReaderGuard`] leaked by a thread that lives on
//!   keeps its section open: grace periods wait (and report a stall), as
//!   for a guard held that long. Once the thread is gone (it returned,
//!   called `pthread_exit` or was cancelled: its exit destructor ran),
//!   the section ends: a grace period that waits for it checks,
//!   after its first milliseconds, whether the thread still exists, and
//!   frees the record. The same for a [`Reader`] leaked with a guard, an
//!   online [`QsbrReader`] leaked, and for any of them leaked by a
//!   destructor that runs after exitq's own (a younger pthread key's);
//! * a freed record goes to its next owner clean: claiming a record resets
//!   every owner field, and a record is released exactly once per owner
//!   (`record`, "A record's life", has the state table and who may make
//!   each transition);
//! * a leaked [`Domain`] handle (or a leaked [`Reader`] or [`QsbrReader`],
//!   which own one)
//!   keeps the domain, its reclaimer thread and its pending work alive: it
//!   never shuts down. So does a handle captured by the domain's own
//!   deferred callbacks or exit hooks while they wait: a cycle, as of
//!   `Arc`s (with [`Reclaimer::Inline`], callbacks that hold the last
//!   handle and sit in exited threads' batches wait for a `barrier` no
//!   one will call, and never run). A guard leaked by a thread whose
//!   domain is then dropped keeps the domain's memory (not its thread)
//!   alive;
//! * a leaked [`CellCache`] or [`OptionCache`] keeps its value until the
//!   cell and its callbacks are gone, as a leaked `Arc` would, and holds no
//!   grace period; a [`RcuCell::replace`] that takes that value out waits
//!   for it for ever, and reports it as a stall ([`HeldBy::Cache`]) after
//!   the stall timeout; on the leaking thread itself, `replace` panics
//!   instead (a cache of its own keeps the value).
//!
//! A thread that ends without running its destructors (a raw `exit`
//! system call) is not seen to end: its leaked sections stay open.
//! Proven by `tests/leak.rs` (each case, and the use after free that a
//! dirty record once caused), `tests/regress.rs`
//! `a_leaked_guard_of_an_exited_thread_does_not_hang_grace_periods`, the
//! loom model `leaked_release_races_a_guard_drop_and_a_claim` and the
//! torture test's leaks.
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
    "exitq supports Linux with glibc only (target_os = \"linux\", target_env = \"gnu\"): \
     it uses membarrier(2), gettid(2), tgkill(2), futex(2), pidfd_open(2), \
     pthread_tryjoin_np, pthread_setcancelstate and glibc's thread-exit destructor \
     order (thread-locals, then pthread keys in creation order); musl, Android (bionic), \
     the BSDs, macOS and \
     Windows have no equivalent of some of them"
);
#[cfg(not(all(target_has_atomic = "64", target_has_atomic = "ptr")))]
compile_error!(
    "exitq needs 64-bit and pointer-sized atomics (target_has_atomic = \"64\" and \"ptr\"): \
     its reader words and epoch are AtomicU64"
);

mod backoff;
mod batch;
mod cancel;
pub mod cell;
mod config;
mod domain;
mod doorbell;
mod drain;
mod epoch;
pub mod exit;
pub mod expedite;
mod fork;
mod grace;
mod guard;
#[cfg(test)]
mod handoff_tests;
mod handshake;
mod inner;
pub mod limits;
mod llist;
mod local;
mod look;
#[cfg(test)]
mod offline_tests;
mod past;
#[cfg(feature = "pool")]
pub mod pool;
mod prefetch;
mod qsbr;
mod reader;
mod reclaim;
mod reclaimer;
mod record;
mod run;
mod section;
#[cfg(feature = "stacks")]
pub mod stacks;
mod stall;
mod stats;
mod stuck;
mod sync;
mod thread;
mod wake;

#[cfg(exitq_loom)]
#[doc(hidden)]
pub mod model;

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use cell::{CellCache, CompareExchangeError, OptionCache, RcuCell, RcuOption};
pub use config::{Callbacks, DomainBuilder, HeldBy, Reclaimer, Stall, StallHandler};
pub use domain::Domain;
pub use expedite::{membarrier_available, Expedite};
pub use guard::{Guard, ReadSection};
pub use qsbr::QsbrReader;
pub use reader::{Reader, ReaderGuard};
pub use stats::DomainStats;
pub use thread::thread_offline;
