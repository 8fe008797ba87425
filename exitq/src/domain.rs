//! Grace periods: the reader registry, the global epoch, `synchronize`.
//!
//! # Readers
//!
//! Each thread that uses a domain gets a *participant* record (cache-line
//! aligned, allocated once and reused by later threads after its owner
//! exits) linked into the domain's registry, a push-only lock-free list that
//! readers never lock. A thread finds its record through a one-entry
//! thread-local cache keyed by the domain's unique id, so the read-side fast
//! path is: a thread-local load and compare, a nesting counter, one load of
//! the domain's epoch word, one store of it into the record, and a fence
//! that is only a compiler fence when the writer side uses membarrier(2)
//! (see [`expedite`](crate::expedite)). Leaving the outermost section is a
//! Release store of 0.
//!
//! # Grace periods
//!
//! A reader's word packs the epoch it saw at its outermost entry (48 bits)
//! above its nesting depth (16 bits), like liburcu's `ctr`, so entering and
//! leaving a section are one load and one store each. The epoch is a
//! counter, not liburcu's one-bit parity, so a single pass over the registry
//! completes a grace period where urcu-memb needs two parity flips and two
//! waits (48 bits do not wrap in practice, see `protocol::epoch_word`).
//! Grace period number `g`:
//!
//! 1. heavy barrier (membarrier, or a full fence in fallback mode);
//! 2. store `g + 1` into the epoch (Release);
//! 3. for a normal grace period, sleep `first_check_delay` (interrupted if
//!    an expedited caller arrives);
//! 4. for every participant, wait until its state is 0 (outside any
//!    section) or greater than `g` (its section started after step 2).
//!
//! Why one pass is enough: a reader whose section still shows an epoch
//! `<= g` started before step 2 and is waited for; a reader showing `> g`
//! loaded the epoch after step 2, so (by the heavy barrier of step 1 paired
//! with the reader's fence) it also sees every removal made before the grace
//! period started; a reader showing 0 that enters later with a stale epoch
//! is ordered the same way by the barrier of step 1. The Acquire load in
//! step 4 pairs with the reader's Release store of 0, so a section that
//! ended happens-before `synchronize` returns.
//!
//! # Sharing
//!
//! `synchronize` needs a grace period that *starts* after it is called. The
//! callers agree through a small mutex-protected state (writers only; readers
//! never touch it): `started`/`completed` counters. A caller targets
//! `started + 1`; if no grace period is running it becomes the leader and
//! runs it, otherwise it waits on a condition variable, so any number of
//! concurrent callers share at most two grace periods.
//!
//! # Stalls
//!
//! While waiting in step 4, a participant that holds the grace period for
//! longer than `stall_timeout` is reported once per grace period: the
//! `stalls` counter is incremented and the stall handler (default: one line
//! on stderr naming the thread) is called. Waiting continues: a grace
//! period is never cut short.
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

use crate::defer::{OpenBatch, Work};
use crate::expedite::{Expedite, Fences};
use crate::llist::{Chain, List, Node};
use crate::sync::{self, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Who runs the deferred callbacks and exit hooks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reclaimer {
    /// A dedicated thread (the default). It sleeps when there is nothing to
    /// do; it polls every `flush_latency` while some thread holds an
    /// unpublished batch and every `exit_poll` while exit hooks are armed
    /// (the exit path makes no syscall, so it cannot wake it).
    #[default]
    Thread,
    /// No thread: callers of [`Domain::defer`] (when they publish a batch),
    /// [`Domain::flush`], [`Domain::barrier`] and [`Domain::exit_barrier`]
    /// run the reclaim step themselves.
    Inline,
}

/// A reader that held up a grace period for longer than the stall timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stall {
    /// Kernel thread id of the reader (as in `/proc/self/task/<tid>`).
    pub tid: i32,
    /// The reader thread's name, if it had one.
    pub thread_name: Option<String>,
    /// How long the grace period had waited for it when reported.
    pub waited: Duration,
    /// The grace period's number.
    pub grace_period: u64,
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exitq: grace period {} stalled for {:?} by reader thread {} ({})",
            self.grace_period,
            self.waited,
            self.tid,
            self.thread_name.as_deref().unwrap_or("unnamed")
        )
    }
}

/// A stall handler: called on the thread running the grace period.
pub type StallHandler = Arc<dyn Fn(&Stall) + Send + Sync>;

/// Counters of a domain since it was built (a snapshot; see [`Domain::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Grace periods completed.
    pub grace_periods: u64,
    /// Calls to [`Domain::synchronize_expedited`].
    pub expedited: u64,
    /// Calls to [`Domain::synchronize`] and [`Domain::synchronize_expedited`].
    pub synchronize_calls: u64,
    /// Deferred callbacks and exit hooks that have run (panicked ones included).
    pub callbacks_run: u64,
    /// Callbacks and exit hooks that panicked (caught; the rest still ran).
    pub callbacks_panicked: u64,
    /// Batches published to the domain (full, flushed, stolen or left at exit).
    pub batches: u64,
    /// Most callbacks run after a single grace period.
    pub max_batch: u64,
    /// Published deferred callbacks not yet run.
    pub pending: u64,
    /// Exit hooks that have run.
    pub exits_run: u64,
    /// Exit hooks registered and not yet run.
    pub exits_armed: u64,
    /// Readers reported for stalling a grace period.
    pub stalls: u64,
    /// Reclaim passes (take everything, one grace period, run) that found work.
    pub passes: u64,
    /// Batches taken from an idle thread (older than the flush latency) or
    /// by `barrier`.
    pub stolen_batches: u64,
    /// Times a producer over the backlog limit helped reclaim or waited.
    pub backlog_waits: u64,
    /// Times the backlog limit was exceeded where waiting would deadlock
    /// (inside a read guard or a callback).
    pub backlog_overruns: u64,
    /// Participant records (threads that used the domain, reused after exit).
    pub participants: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) grace_periods: AtomicU64,
    pub(crate) expedited: AtomicU64,
    pub(crate) synchronize_calls: AtomicU64,
    pub(crate) callbacks_run: AtomicU64,
    pub(crate) callbacks_panicked: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) max_batch: AtomicU64,
    pub(crate) exits_run: AtomicU64,
    pub(crate) stalls: AtomicU64,
    pub(crate) passes: AtomicU64,
    pub(crate) stolen_batches: AtomicU64,
    pub(crate) backlog_waits: AtomicU64,
    pub(crate) backlog_overruns: AtomicU64,
    pub(crate) participants: AtomicU64,
}

impl Counters {
    #[inline]
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        // Relaxed: statistics only; no other memory is published through them.
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Configures and builds a [`Domain`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use exitq::{Domain, Reclaimer};
///
/// let domain = Domain::builder()
///     .batch_size(128)
///     .flush_latency(Duration::from_millis(5))
///     .reclaimer(Reclaimer::Inline)
///     .build();
/// domain.defer(|| ());
/// domain.barrier();
/// assert_eq!(domain.stats().callbacks_run, 1);
/// ```
#[derive(Clone)]
pub struct Builder {
    pub(crate) first_check_delay: Duration,
    pub(crate) batch_size: usize,
    pub(crate) flush_latency: Duration,
    pub(crate) backlog_limit: usize,
    pub(crate) stall_timeout: Duration,
    pub(crate) exit_poll: Option<Duration>,
    pub(crate) reclaimer: Reclaimer,
    pub(crate) expedite: Expedite,
    pub(crate) stall_handler: Option<StallHandler>,
    pub(crate) thread_name: String,
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("first_check_delay", &self.first_check_delay)
            .field("batch_size", &self.batch_size)
            .field("flush_latency", &self.flush_latency)
            .field("backlog_limit", &self.backlog_limit)
            .field("stall_timeout", &self.stall_timeout)
            .field("exit_poll", &self.exit_poll)
            .field("reclaimer", &self.reclaimer)
            .field("expedite", &self.expedite)
            .field("stall_handler", &self.stall_handler.is_some())
            .field("thread_name", &self.thread_name)
            .finish()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            first_check_delay: Duration::from_micros(25),
            batch_size: 256,
            flush_latency: Duration::from_millis(10),
            backlog_limit: 1 << 20,
            stall_timeout: Duration::from_secs(5),
            exit_poll: Some(Duration::from_millis(10)),
            reclaimer: Reclaimer::Thread,
            expedite: Expedite::Auto,
            stall_handler: None,
            thread_name: "exitq-reclaim".to_owned(),
        }
    }
}

impl Builder {
    /// Sleep this long after starting a normal grace period before the first
    /// check of the readers (default 25 µs): short readers finish meanwhile
    /// and concurrent callers join the same grace period. Zero disables it.
    /// Expedited grace periods never wait.
    pub fn first_check_delay(mut self, delay: Duration) -> Self {
        self.first_check_delay = delay;
        self
    }

    /// Callbacks per thread-local batch (default 256, clamped to 1..=65536:
    /// each batch's memory is three words per callback, so a larger batch
    /// only costs memory). A full batch is published with one
    /// compare-and-swap.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.clamp(1, MAX_BATCH_SIZE);
        self
    }

    /// How long a partly filled batch may stay with its thread (default
    /// 10 ms). The reclaimer thread takes batches older than this from idle
    /// threads (publication within one to two flush latencies). With
    /// [`Reclaimer::Inline`] there is no thread to do that: batches of idle
    /// threads are published by [`Domain::barrier`] or when their thread
    /// defers again, flushes or exits.
    pub fn flush_latency(mut self, latency: Duration) -> Self {
        self.flush_latency = latency.max(Duration::from_micros(100));
        self
    }

    /// Most published callbacks allowed to wait for reclamation (default
    /// 2^20). A thread that publishes past it helps reclaim (while fewer
    /// reclaim passes than half the CPUs, at least 2, run), or waits until
    /// the backlog is below the limit again. (Inside a read guard or a
    /// callback waiting would deadlock: the overrun is counted instead.)
    pub fn backlog_limit(mut self, n: usize) -> Self {
        self.backlog_limit = n.max(1);
        self
    }

    /// Report a reader that holds up a grace period longer than this
    /// (default 5 s).
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// How often an idle reclaimer thread looks for hooks of exited threads
    /// while exit hooks are armed (default 10 ms). `None`: never poll; exit
    /// hooks then run at the next publish, `barrier` or `exit_barrier`.
    /// This bounds the latency between a thread's exit and its cleanup.
    pub fn exit_poll(mut self, period: Option<Duration>) -> Self {
        self.exit_poll = period.map(|p| p.max(Duration::from_micros(100)));
        self
    }

    /// Who runs the callbacks (default [`Reclaimer::Thread`]).
    pub fn reclaimer(mut self, reclaimer: Reclaimer) -> Self {
        self.reclaimer = reclaimer;
        self
    }

    /// membarrier(2) or fences (default [`Expedite::Auto`]).
    pub fn expedite(mut self, expedite: Expedite) -> Self {
        self.expedite = expedite;
        self
    }

    /// Called once per stalled reader per grace period, instead of the
    /// default line on stderr. Runs on the thread waiting for the grace
    /// period; a panic in it is caught and ignored.
    pub fn stall_handler(mut self, handler: impl Fn(&Stall) + Send + Sync + 'static) -> Self {
        self.stall_handler = Some(Arc::new(handler));
        self
    }

    /// Name of the reclaimer thread (default `exitq-reclaim`).
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }

    /// Builds the domain.
    ///
    /// # Panics
    ///
    /// If [`Expedite::Membarrier`] was asked for and the kernel refuses it,
    /// or the reclaimer thread cannot be spawned; use
    /// [`try_build`](Builder::try_build) to handle those.
    pub fn build(self) -> Domain {
        match self.try_build() {
            Ok(domain) => domain,
            Err(e) => panic!("exitq: cannot build domain: {e}"),
        }
    }

    /// Builds the domain, or says why not (membarrier unavailable with
    /// [`Expedite::Membarrier`]; reclaimer thread not spawned, e.g. at
    /// `RLIMIT_NPROC` or `threads-max`).
    pub fn try_build(self) -> io::Result<Domain> {
        let fences = Fences::resolve(self.expedite)?;
        let inner = Arc::new(Inner::new(self, fences));
        let handle = Arc::new(Handle {
            inner: inner.clone(),
            reclaimer: Mutex::new(None),
        });
        if inner.config.reclaimer == Reclaimer::Thread {
            let worker = inner.clone();
            let join = thread::Builder::new()
                .name(inner.config.thread_name.clone())
                .spawn(move || worker.reclaimer_main())?;
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
            .field("membarrier", &self.inner.hot.fences.membarrier)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for Domain {
    fn default() -> Self {
        Domain::new()
    }
}

/// The last user handle: dropping it shuts the domain down.
struct Handle {
    inner: Arc<Inner>,
    reclaimer: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let join = lock(&self.reclaimer).take();
        self.inner.shutdown(join);
    }
}

/// Reclaimer states (`Inner::sleeping`).
pub(crate) const AWAKE: u32 = 0;
/// Parked with a timeout (polling for open batches or exit hooks).
pub(crate) const POLLING: u32 = 1;
/// Parked without a timeout.
pub(crate) const PARKED: u32 = 2;

pub(crate) const FREE: u32 = 0;
pub(crate) const IN_USE: u32 = 1;
/// The domain shut down while the owner thread still held the record: the
/// record holds one strong count of the domain, dropped by the owner.
pub(crate) const ORPHANED: u32 = 2;

/// One thread's record in one domain.
///
/// Field ownership: `ctr`, `busy`, `batch*`, `exits`, `thread_next`
/// are written by the owner thread only (the stealer also writes `batch` and
/// `batch_epoch` under the steal handshake, see `defer.rs`); `steal` by
/// stealers; `state` by claim/release/shutdown with CAS.
#[repr(align(128))]
pub(crate) struct Participant {
    /// Reader word (owner writes, grace periods read): 0 outside any read
    /// section; otherwise the epoch loaded on entry above the nesting
    /// depth (`protocol::NEST_BITS`).
    pub(crate) ctr: AtomicU64,
    /// Owner is inside `defer`'s batch access (steal handshake).
    pub(crate) busy: AtomicBool,
    /// A stealer wants the batch (steal handshake).
    pub(crate) steal: AtomicBool,
    /// The open batch, if any.
    pub(crate) batch: UnsafeCell<OpenBatch>,
    /// Poll epoch when the open batch was opened; 0 = no open batch.
    pub(crate) batch_epoch: AtomicU64,
    /// Exit hooks registered by the owner, preallocated (owner only).
    pub(crate) exits: UnsafeCell<Chain<Work>>,
    /// FREE, IN_USE or ORPHANED.
    pub(crate) state: AtomicU32,
    pub(crate) domain_id: u64,
    pub(crate) inner: *const Inner,
    /// Registry link; immutable once the record is published.
    next: *mut Participant,
    /// The owner thread's list of its records (owner only).
    pub(crate) thread_next: Cell<*const Participant>,
    owner: Mutex<Owner>,
    stalled_gp: AtomicU64,
}

// SAFETY: the `UnsafeCell`/`Cell` fields are accessed by one thread at a
// time, as documented on the struct: the owner, or a stealer that has won
// the steal handshake (`defer.rs`). Raw pointers point into the domain,
// which outlives every record in use (`state` protocol).
unsafe impl Sync for Participant {}
// SAFETY: as above; the record moves between threads only through the
// registry, with ownership transferred by the `state` CAS.
unsafe impl Send for Participant {}

/// Who owns a record, for stall reports: kernel tid and the raw
/// `PR_GET_NAME` bytes (no allocation).
#[derive(Default, Clone, Copy)]
struct Owner {
    tid: i32,
    name: [u8; 16],
}

impl Owner {
    /// The calling thread's identity: two syscalls on the thread's first
    /// call, then a thread-local read.
    fn current() -> Owner {
        let cached = OWNER.get();
        if cached.tid != 0 {
            return cached;
        }
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        let mut name = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included.
        unsafe {
            libc::prctl(
                libc::PR_GET_NAME,
                name.as_mut_ptr() as libc::c_ulong,
                0,
                0,
                0,
            )
        };
        let owner = Owner { tid, name };
        OWNER.set(owner);
        owner
    }

    fn name(&self) -> Option<String> {
        let len = self.name.iter().position(|&b| b == 0).unwrap_or(16);
        (len > 0).then(|| String::from_utf8_lossy(&self.name[..len]).into_owned())
    }
}

impl Participant {
    fn new(inner: *const Inner, domain_id: u64) -> Participant {
        Participant {
            ctr: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            steal: AtomicBool::new(false),
            batch: UnsafeCell::new(OpenBatch::new()),
            batch_epoch: AtomicU64::new(0),
            exits: UnsafeCell::new(Chain::new()),
            state: AtomicU32::new(IN_USE),
            domain_id,
            inner,
            next: ptr::null_mut(),
            thread_next: Cell::new(ptr::null()),
            owner: Mutex::new(Owner::default()),
            stalled_gp: AtomicU64::new(0),
        }
    }

    fn set_owner(&self) {
        *lock(&self.owner) = Owner::current();
    }

    #[inline]
    pub(crate) fn nesting(&self) -> u32 {
        protocol::nesting(&self.ctr)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of our mutexes leaves plain counters that
    // are still consistent; keep going rather than poison every user.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read-mostly words every reader touches: kept on their own cache line.
pub(crate) struct Hot {
    /// The epoch word readers copy on entry (`protocol::epoch_word`).
    pub(crate) gp_ctr: AtomicU64,
    pub(crate) fences: Fences,
    /// A reader word's value outside any section (0) when an outermost
    /// entry needs only a compiler fence (membarrier mode); in fence mode
    /// a value the word never holds (nesting `NEST_MASK` is refused). One
    /// comparison then finds "outermost entry, and the fast kind", and
    /// everything else takes `protocol::reader_enter`.
    pub(crate) fast_idle: u64,
}

impl Hot {
    fn fast_idle(fences: Fences) -> u64 {
        if fences.membarrier {
            0
        } else {
            u64::MAX
        }
    }
}

struct GpState {
    started: u64,
    completed: u64,
    /// An expedited caller is waiting: the leader skips its delay.
    expedite: bool,
    /// Threads blocked on `gp_cv` (callers waiting for a grace period, a
    /// leader in its first-check delay): without any, completing a grace
    /// period skips the futex wake (most passes of the reclaimer have no
    /// company).
    waiters: usize,
}

pub(crate) struct Passes {
    pub(crate) next: u64,
    pub(crate) active: Vec<u64>,
    /// Threads blocked on `passes_cv` (`barrier` callers, producers over
    /// the backlog limit): a pass ending with none skips the futex wake.
    pub(crate) waiters: usize,
}

/// Upper bound of [`Builder::batch_size`].
const MAX_BATCH_SIZE: usize = 1 << 16;

pub(crate) struct Config {
    pub(crate) first_check_delay: Duration,
    pub(crate) batch_size: usize,
    pub(crate) flush_latency: Duration,
    pub(crate) backlog_limit: usize,
    pub(crate) stall_timeout: Duration,
    pub(crate) exit_poll: Option<Duration>,
    pub(crate) reclaimer: Reclaimer,
    pub(crate) stall_handler: Option<StallHandler>,
    pub(crate) thread_name: String,
}

/// The shared state of a domain.
pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) hot: CachePadded<Hot>,
    pub(crate) config: Config,
    /// Push-only list of participant records.
    registry: AtomicPtr<Participant>,
    /// Published batches and exit hooks waiting for a grace period.
    pub(crate) queue: CachePadded<List<Work>>,
    gp: Mutex<GpState>,
    gp_cv: Condvar,
    pub(crate) passes: Mutex<Passes>,
    pub(crate) passes_cv: Condvar,
    /// Published deferred callbacks not yet run.
    pub(crate) pending: CachePadded<AtomicUsize>,
    /// Batches open in threads (a hint that makes the reclaimer poll).
    pub(crate) open_batches: AtomicUsize,
    /// Exit hooks registered and not yet run.
    pub(crate) armed_exits: AtomicUsize,
    /// Advanced by the reclaimer every flush latency; ages open batches.
    pub(crate) poll_epoch: AtomicU64,
    /// The reclaimer thread's state: `AWAKE`, `POLLING` (parked with a
    /// timeout) or `PARKED` (no timeout: only a wake-up brings it back).
    pub(crate) sleeping: AtomicU32,
    pub(crate) reclaimer_thread: OnceLock<Thread>,
    pub(crate) shut_down: AtomicBool,
    pub(crate) stats: Counters,
    /// Emptied batch nodes, reused by `defer`.
    pub(crate) recycle: ArrayQueue<Box<Node<Work>>>,
    /// Reclaim passes that may run at once before producers over the
    /// backlog limit wait instead of helping: half the CPUs, at least 2 (with
    /// 1, a producer on a 2-CPU machine only waited while the reclaimer,
    /// cache-cold on a large backlog, ran alone: a slow state that kept
    /// itself going).
    pub(crate) pass_cap: usize,
    /// The process that built the domain (fork detection).
    pid: u32,
}

impl Inner {
    fn new(b: Builder, fences: Fences) -> Inner {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        // Relaxed: only uniqueness matters.
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Inner {
            id,
            hot: CachePadded::new(Hot {
                gp_ctr: AtomicU64::new(protocol::epoch_word(0)),
                fences,
                fast_idle: Hot::fast_idle(fences),
            }),
            config: Config {
                first_check_delay: b.first_check_delay,
                batch_size: b.batch_size,
                flush_latency: b.flush_latency,
                backlog_limit: b.backlog_limit,
                stall_timeout: b.stall_timeout,
                exit_poll: b.exit_poll,
                reclaimer: b.reclaimer,
                stall_handler: b.stall_handler,
                thread_name: b.thread_name,
            },
            registry: AtomicPtr::new(ptr::null_mut()),
            queue: CachePadded::new(List::new()),
            gp: Mutex::new(GpState {
                started: 0,
                completed: 0,
                expedite: false,
                waiters: 0,
            }),
            gp_cv: Condvar::new(),
            passes: Mutex::new(Passes {
                next: 1,
                active: Vec::new(),
                waiters: 0,
            }),
            passes_cv: Condvar::new(),
            pending: CachePadded::new(AtomicUsize::new(0)),
            open_batches: AtomicUsize::new(0),
            armed_exits: AtomicUsize::new(0),
            poll_epoch: AtomicU64::new(1),
            sleeping: AtomicU32::new(AWAKE),
            reclaimer_thread: OnceLock::new(),
            shut_down: AtomicBool::new(false),
            stats: Counters::default(),
            // Emptied batches kept for reuse: a quarter of the backlog
            // limit's worth, at most 1024 (6 MiB at the default batch size
            // of 256). A producer that runs ahead of the reclaimer by up to
            // that much reuses memory another core just read instead of
            // faulting in fresh pages (2 producers on this 2-CPU VM:
            // median 8.9 against 9.7 ns per callback over 8 interleaved
            // runs, keeping 1024 against 64; benches/examples/defer_cpu.rs).
            recycle: ArrayQueue::new((b.backlog_limit / b.batch_size / 4).clamp(16, 1024)),
            pass_cap: thread::available_parallelism().map_or(2, |n| (n.get() / 2).max(2)),
            pid: std::process::id(),
        }
    }

    /// Iterates the registry. Records are never removed while `self` lives.
    pub(crate) fn participants(&self) -> impl Iterator<Item = &Participant> + '_ {
        // Acquire: pairs with the Release CAS that published each record
        // (we read its initialised fields).
        let mut p = self.registry.load(Ordering::Acquire);
        std::iter::from_fn(move || {
            if p.is_null() {
                return None;
            }
            // SAFETY: published records stay allocated until `Inner` drops.
            let r = unsafe { &*p };
            p = r.next;
            Some(r)
        })
    }

    /// A record for the calling thread: a free one reused, or a new one.
    fn claim_participant(&self) -> &Participant {
        for r in self.participants() {
            // Acquire on success: pairs with the AcqRel release at the
            // previous owner's exit, so its last writes (empty batch, ctr 0)
            // are visible to us.
            if r.state.load(Ordering::Relaxed) == FREE
                && r.state
                    .compare_exchange(FREE, IN_USE, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                r.set_owner();
                return r;
            }
        }
        let r = Box::into_raw(Box::new(Participant::new(self, self.id)));
        // SAFETY: `r` is fresh and ours until published below.
        unsafe { (*r).set_owner() };
        let mut head = self.registry.load(Ordering::Relaxed);
        loop {
            // SAFETY: not yet published; we are the only one writing it.
            unsafe { (*r).next = head };
            // Release: publishes the record's fields to registry scanners
            // (their Acquire load in `participants`).
            match self
                .registry
                .compare_exchange_weak(head, r, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        Counters::add(&self.stats.participants, 1);
        // SAFETY: published records live as long as `self`.
        unsafe { &*r }
    }

    fn check_fork(&self) {
        if std::process::id() != self.pid {
            panic!(
                "exitq: a Domain was used in the child of fork(); its reclaimer and the \
                 parent's other threads do not exist here. Build a new Domain in the child."
            );
        }
    }

    /// One grace period that starts after this call (shared with concurrent
    /// callers).
    pub(crate) fn synchronize(&self, expedited: bool) {
        self.check_fork();
        // Full fence: orders the caller's removals before the grace period
        // it will wait for (pairs with the readers' fences / the leader's
        // membarrier; see the module docs, fallback-mode argument).
        sync::full_fence();
        let mut st = lock(&self.gp);
        let target = st.started + 1;
        if expedited && st.started > st.completed {
            st.expedite = true;
            if st.waiters > 0 {
                self.gp_cv.notify_all();
            }
        }
        loop {
            if st.completed >= target {
                return;
            }
            if st.started == st.completed {
                st.started += 1;
                let g = st.started;
                let exp = expedited || std::mem::take(&mut st.expedite);
                drop(st);
                self.run_grace_period(g, exp);
                st = lock(&self.gp);
                st.completed = g;
                if st.waiters > 0 {
                    self.gp_cv.notify_all();
                }
                continue;
            }
            st.waiters += 1;
            st = self.gp_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            st.waiters -= 1;
        }
    }

    fn run_grace_period(&self, g: u64, expedited: bool) {
        protocol::start_grace_period(&self.hot.gp_ctr, g, self.hot.fences);
        // Step 3: let short readers finish, and callers join.
        let delay = self.config.first_check_delay;
        if !expedited && !delay.is_zero() {
            let mut st = lock(&self.gp);
            st.waiters += 1;
            let (mut st, _) = self
                .gp_cv
                .wait_timeout_while(st, delay, |s| !s.expedite)
                .unwrap_or_else(|e| e.into_inner());
            st.waiters -= 1;
        }
        // Step 4: wait for the readers that started before step 2.
        let start = Instant::now();
        for r in self.participants() {
            let mut backoff = WaitBackoff::new(expedited);
            loop {
                if !protocol::holds_grace_period(&r.ctr, g) {
                    break;
                }
                let waited = start.elapsed();
                if waited >= self.config.stall_timeout
                    && r.stalled_gp.swap(g, Ordering::Relaxed) != g
                {
                    self.report_stall(r, g, waited);
                }
                backoff.wait();
            }
        }
        Counters::add(&self.stats.grace_periods, 1);
    }

    #[cold]
    fn report_stall(&self, r: &Participant, g: u64, waited: Duration) {
        Counters::add(&self.stats.stalls, 1);
        let stall = {
            let owner = *lock(&r.owner);
            Stall {
                tid: owner.tid,
                thread_name: owner.name(),
                waited,
                grace_period: g,
            }
        };
        match &self.config.stall_handler {
            Some(handler) => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&stall)));
            }
            None => eprintln!("{stall}; still waiting (a read guard held too long, or leaked?)"),
        }
    }

    /// Wakes the reclaimer thread if it is parked without a timeout, or
    /// (`urgent`) also if it is polling. One syscall then; nothing
    /// otherwise. Non-urgent work waits for the next poll (at most a flush
    /// latency): waking the reclaimer for every published batch would cost
    /// a futex wake and a context switch per batch (the call_rcu lesson:
    /// wake on a backlog high-water mark).
    #[inline]
    pub(crate) fn wake_reclaimer(&self, urgent: bool) {
        // SeqCst: store-buffering pair with the reclaimer's "publish my
        // sleep state; re-check queue / open batches / armed exits"
        // (reclaimer_main).
        let state = self.sleeping.load(Ordering::SeqCst);
        if (state == PARKED || (urgent && state == POLLING))
            && self.sleeping.swap(AWAKE, Ordering::SeqCst) != AWAKE
        {
            if let Some(t) = self.reclaimer_thread.get() {
                t.unpark();
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let c = &self.stats;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            grace_periods: get(&c.grace_periods),
            expedited: get(&c.expedited),
            synchronize_calls: get(&c.synchronize_calls),
            callbacks_run: get(&c.callbacks_run),
            callbacks_panicked: get(&c.callbacks_panicked),
            batches: get(&c.batches),
            max_batch: get(&c.max_batch),
            pending: self.pending.load(Ordering::Relaxed) as u64,
            exits_run: get(&c.exits_run),
            exits_armed: self.armed_exits.load(Ordering::Relaxed) as u64,
            stalls: get(&c.stalls),
            passes: get(&c.passes),
            stolen_batches: get(&c.stolen_batches),
            backlog_waits: get(&c.backlog_waits),
            backlog_overruns: get(&c.backlog_overruns),
            participants: get(&c.participants),
        }
    }

    /// Runs when the last `Domain` handle is dropped.
    fn shutdown(&self, reclaimer: Option<JoinHandle<()>>) {
        if std::process::id() != self.pid {
            // fork() child: the reclaimer and the other threads do not exist
            // here; running the parent's callbacks twice would be worse than
            // leaking them. Documented in the crate docs.
            std::mem::forget(reclaimer);
            return;
        }
        // SeqCst: ordered before the orphan marking below and the exiting
        // threads' checks (exit.rs).
        self.shut_down.store(true, Ordering::SeqCst);
        // Publish every thread's open batch (ours included).
        self.steal_batches(None);
        if let Some(join) = reclaimer {
            self.wake_reclaimer(true);
            if let Some(t) = self.reclaimer_thread.get() {
                t.unpark();
            }
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
        for r in self.participants() {
            // AcqRel: pairs with the owner's release CAS at exit (exit.rs).
            if r.state
                .compare_exchange(IN_USE, ORPHANED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // SAFETY: `self` is inside an `Arc` (every `Inner` is built
                // by `try_build` into one); the count is given back by the
                // owner thread (exit.rs `release_orphan`).
                unsafe { Arc::increment_strong_count(self as *const Inner) };
            }
        }
        // No handle is left, so no read guard exists (each was dropped
        // before its thread's handle, and the handles' Arc counts order
        // those drops before this one): run everything without a grace
        // period.
        loop {
            let chain = self.queue.take_all();
            if chain.is_empty() {
                break;
            }
            self.run_chain(chain);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Anything still queued (pushed by an orphaned thread after the
        // shutdown drain and not run by it) runs now: no reader exists.
        let chain = self.queue.take_all();
        if !chain.is_empty() {
            self.run_chain(chain);
        }
        // Acquire: pairs with the records' publication (Release CAS); we
        // are the last user anyway (`&mut self`).
        let mut p = self.registry.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: every record was allocated by `claim_participant` with
            // `Box`, and no thread holds one: in-use records were orphaned
            // and each holds a strong count, so we only get here after their
            // owners released them.
            let r = unsafe { Box::from_raw(p) };
            p = r.next;
            // SAFETY: the owner is gone; we are the only accessor.
            if let Some(batch) = unsafe { (*r.batch.get()).take() } {
                let mut chain = Chain::new();
                chain.push_back(batch);
                self.run_chain(chain);
            }
        }
    }
}

/// Waiting for a reader: spin briefly, then sleep with exponential backoff.
struct WaitBackoff {
    spins: u32,
    sleep: Duration,
    max_sleep: Duration,
}

impl WaitBackoff {
    fn new(expedited: bool) -> Self {
        WaitBackoff {
            spins: if expedited { 1000 } else { 8 },
            sleep: Duration::from_micros(10),
            max_sleep: if expedited {
                Duration::from_micros(100)
            } else {
                Duration::from_millis(1)
            },
        }
    }

    fn wait(&mut self) {
        if self.spins > 0 {
            self.spins -= 1;
            if self.spins % 64 == 0 {
                sync::yield_now();
            } else {
                std::hint::spin_loop();
            }
            return;
        }
        #[cfg(exitq_loom)]
        sync::yield_now();
        #[cfg(not(exitq_loom))]
        thread::sleep(self.sleep);
        self.sleep = (self.sleep * 2).min(self.max_sleep);
    }
}

thread_local! {
    /// One-entry cache: (domain, this thread's record in it), keyed by the
    /// domain's address. An address is reused only after its `Inner` is
    /// freed, and a cached record keeps its `Inner` alive: it is IN_USE
    /// (the domain is live) or ORPHANED (the record holds a strong count);
    /// every path that releases a record clears the entry first
    /// (`ThreadRecords::drop`, `unlink_participant`, the orphan sweep in
    /// `participant_slow`). Comparing addresses saves `read` a dependent
    /// load of the domain id.
    static CACHE: Cell<(*const Inner, *const Participant)> = const { Cell::new((ptr::null(), ptr::null())) };
    /// This thread's records; its destructor runs the thread-exit path.
    static THREAD: ThreadRecords = const { ThreadRecords { head: Cell::new(ptr::null()) } };
    /// This thread's tid and name once looked up (no destructor, so it
    /// stays readable during TLS teardown and frees nothing at exit).
    static OWNER: Cell<Owner> = const { Cell::new(Owner { tid: 0, name: [0; 16] }) };
    /// Id of the domain whose callbacks this thread is running (0: none).
    pub(crate) static IN_CALLBACK: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread's records, linked through `Participant::thread_next`.
pub(crate) struct ThreadRecords {
    pub(crate) head: Cell<*const Participant>,
}

impl Drop for ThreadRecords {
    fn drop(&mut self) {
        CACHE.set((ptr::null(), ptr::null()));
        let mut p = self.head.replace(ptr::null());
        while !p.is_null() {
            // SAFETY: records in our list are IN_USE or ORPHANED and owned by
            // this thread; either way their domain is alive (see `state`).
            let r = unsafe { &*p };
            p = r.thread_next.get();
            // SAFETY: `r` is owned by the calling thread, which is exiting.
            unsafe { crate::exit::retire(r) };
        }
    }
}

/// The calling thread's record in `inner`, if it has one (never registers).
pub(crate) fn thread_record(inner: &Inner) -> Option<&Participant> {
    let (key, p) = CACHE.get();
    if ptr::eq(key, inner) {
        // SAFETY: the cache only holds a record this thread owns in that
        // domain, which is alive while `inner` is borrowed.
        return Some(unsafe { &*p });
    }
    THREAD
        .try_with(|records| {
            let mut p = records.head.get();
            while !p.is_null() {
                // SAFETY: records in our list are owned by this thread and
                // their domains are alive (IN_USE or ORPHANED).
                let r = unsafe { &*p };
                if r.domain_id == inner.id {
                    return Some(p);
                }
                p = r.thread_next.get();
            }
            None
        })
        .ok()
        .flatten()
        // SAFETY: as above.
        .map(|p| unsafe { &*p })
}

impl Domain {
    /// A domain with the default settings and a reclaimer thread.
    ///
    /// # Panics
    ///
    /// If the reclaimer thread cannot be spawned (see [`Builder::try_build`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// domain.synchronize();
    /// ```
    pub fn new() -> Domain {
        Builder::default().build()
    }

    /// A builder to configure a domain.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// This thread's record, registering it on first use. `None` only while
    /// the thread's TLS is being destroyed (after its exitq destructor ran).
    #[inline]
    pub(crate) fn participant(&self) -> Option<&Participant> {
        let (key, p) = CACHE.get();
        if ptr::eq(key, Arc::as_ptr(&self.inner)) {
            // SAFETY: the cache only holds a record this thread owns in this
            // (live, since `&self`) domain; it is cleared when the record is
            // released.
            return Some(unsafe { &*p });
        }
        self.participant_slow()
    }

    #[cold]
    fn participant_slow(&self) -> Option<&Participant> {
        THREAD
            .try_with(|records| {
                let mut prev: *const Participant = ptr::null();
                let mut p = records.head.get();
                while !p.is_null() {
                    // SAFETY: records in our list are owned by this thread
                    // and their domains are alive (IN_USE or ORPHANED).
                    let r = unsafe { &*p };
                    let next = r.thread_next.get();
                    if r.domain_id == self.inner.id {
                        CACHE.set((Arc::as_ptr(&self.inner), p));
                        return Some(p);
                    }
                    // Acquire: pairs with shutdown's AcqRel orphan marking.
                    if r.state.load(Ordering::Acquire) == ORPHANED {
                        // Unlink first: releasing may free the record.
                        if prev.is_null() {
                            records.head.set(next);
                        } else {
                            // SAFETY: `prev` is one of our records.
                            unsafe { (*prev).thread_next.set(next) };
                        }
                        if ptr::eq(CACHE.get().1, p) {
                            // Releasing may free that domain (see CACHE).
                            CACHE.set((ptr::null(), ptr::null()));
                        }
                        // SAFETY: our record, of a domain that shut down.
                        unsafe { crate::exit::retire(r) };
                    } else {
                        prev = p;
                    }
                    p = next;
                }
                let r = self.inner.claim_participant();
                r.thread_next.set(records.head.get());
                records.head.set(r);
                CACHE.set((Arc::as_ptr(&self.inner), r));
                Some(r as *const Participant)
            })
            .ok()
            .flatten()
            // SAFETY: a record owned by this thread in a live domain.
            .map(|p| unsafe { &*p })
    }

    /// This thread's record if it already has one (never registers).
    pub(crate) fn existing_participant(&self) -> Option<&Participant> {
        thread_record(&self.inner)
    }

    /// Removes this thread's record for this domain from its thread list
    /// (for `retire_thread`); the caller then retires it.
    pub(crate) fn unlink_participant(&self) -> Option<&Participant> {
        let found = THREAD
            .try_with(|records| {
                let mut prev: *const Participant = ptr::null();
                let mut p = records.head.get();
                while !p.is_null() {
                    // SAFETY: as in `participant_slow`.
                    let r = unsafe { &*p };
                    let next = r.thread_next.get();
                    if r.domain_id == self.inner.id {
                        if prev.is_null() {
                            records.head.set(next);
                        } else {
                            // SAFETY: `prev` is one of our records.
                            unsafe { (*prev).thread_next.set(next) };
                        }
                        return Some(p);
                    }
                    prev = p;
                    p = next;
                }
                None
            })
            .ok()
            .flatten()?;
        if ptr::eq(CACHE.get().1, found) {
            CACHE.set((ptr::null(), ptr::null()));
        }
        // SAFETY: still IN_USE by this thread; the domain is alive (`&self`).
        Some(unsafe { &*found })
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
        let (key, p) = CACHE.get();
        if ptr::eq(key, Arc::as_ptr(&self.inner)) {
            // SAFETY: as in `participant`.
            let r = unsafe { &*p };
            self.enter(r);
            return Guard {
                record: r,
                temporary: false,
                _not_send: PhantomData,
            };
        }
        self.read_slow()
    }

    #[cold]
    fn read_slow(&self) -> Guard<'_> {
        let (record, temporary) = match self.participant() {
            Some(r) => (r, false),
            // TLS already destroyed (called from a later thread-local
            // destructor): borrow a record for the guard's lifetime.
            None => (self.inner.claim_participant(), true),
        };
        self.enter(record);
        Guard {
            record,
            temporary,
            _not_send: PhantomData,
        }
    }

    #[inline(always)]
    fn enter(&self, r: &Participant) {
        let hot = &self.inner.hot;
        // Relaxed: only this thread writes its reader word.
        if r.ctr.load(Ordering::Relaxed) == hot.fast_idle {
            // Outermost entry, membarrier mode (see `Hot::fast_idle`).
            // Acquire: pairs with the leader's Release store of the epoch
            // (`protocol::start_grace_period`).
            r.ctr
                .store(hot.gp_ctr.load(Ordering::Acquire), Ordering::Relaxed);
            // Orders the store before the section's loads; pairs with the
            // leader's membarrier (expedite.rs).
            sync::compiler_fence();
        } else {
            // Nested entry, or fence mode.
            protocol::reader_enter(&hot.gp_ctr, &r.ctr, hot.fences);
        }
    }

    /// Waits for one full grace period: every read section that started
    /// before the call has ended when it returns. Concurrent callers share
    /// grace periods. A normal grace period first sleeps
    /// `first_check_delay`, then polls the readers with exponential backoff.
    ///
    /// # Panics
    ///
    /// If the calling thread holds a read guard of this domain (that would
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
        self.assert_not_reading("synchronize");
        Counters::add(&self.inner.stats.synchronize_calls, 1);
        self.inner.synchronize(false);
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
        self.assert_not_reading("synchronize_expedited");
        Counters::add(&self.inner.stats.synchronize_calls, 1);
        Counters::add(&self.inner.stats.expedited, 1);
        self.inner.synchronize(true);
    }

    pub(crate) fn assert_not_reading(&self, what: &str) {
        if let Some(r) = self.existing_participant() {
            if r.nesting() > 0 {
                panic!("exitq: {what}() called inside a read-side critical section of the same domain (deadlock)");
            }
        }
    }

    /// A snapshot of the domain's counters.
    pub fn stats(&self) -> Stats {
        self.inner.snapshot()
    }

    /// Whether this domain's writers use membarrier(2) (readers then pay
    /// only a compiler fence).
    pub fn uses_membarrier(&self) -> bool {
        self.inner.hot.fences.membarrier
    }
}

/// A read-side critical section of a [`Domain`]; ends when dropped.
///
/// Not `Send`: a section belongs to the thread that entered it.
#[must_use = "the read section ends when the guard is dropped"]
pub struct Guard<'a> {
    record: &'a Participant,
    /// The record was claimed for this guard only (the thread's TLS was
    /// already gone): released when it drops. A field of the guard, not of
    /// the record, so the common drop reads nothing but the reader word.
    temporary: bool,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("domain", &self.record.domain_id)
            .field("nesting", &self.record.nesting())
            .finish()
    }
}

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        let r = self.record;
        if protocol::reader_exit(&r.ctr) && self.temporary {
            release_record(r);
        }
    }
}

/// A reader registered once: a participant record of its own, so
/// [`Reader::read`] skips the thread-local lookup that [`Domain::read`]
/// makes (the counterpart of crossbeam-epoch's `LocalHandle`), and takes
/// `&mut self`: a reader's sections cannot nest (the borrow checker
/// refuses a second guard while one lives), so entering is one store of
/// the epoch into the reader word and leaving is one store of 0, with no
/// load of the word to track nesting. For hot loops that enter and leave
/// read sections millions of times; nest with [`Domain::read`] or a second
/// reader.
///
/// The record is released when the reader drops. A reader's guard is a
/// read section of the thread holding it for grace periods; one thread may
/// hold several readers. Not `Send`.
///
/// Unlike [`Domain::read`]'s guards, a reader's guard is not seen by the
/// deadlock check of [`Domain::synchronize`]: calling `synchronize` (or
/// `barrier`) while the same thread holds a reader's guard deadlocks.
///
/// # Examples
///
/// ```
/// let domain = exitq::Domain::new();
/// let mut reader = domain.reader();
/// for _ in 0..1000 {
///     let _guard = reader.read();
///     // ... read shared data; `domain.read()` may nest in here ...
/// }
/// drop(reader);
/// domain.synchronize();
/// ```
///
/// A reader's sections do not nest:
///
/// ```compile_fail
/// let domain = exitq::Domain::new();
/// let mut reader = domain.reader();
/// let outer = reader.read();
/// let inner = reader.read(); // error: `reader` is already borrowed
/// drop((outer, inner));
/// ```
pub struct Reader<'a> {
    /// What `read` touches, copied here so entering a section follows no
    /// pointer but the reader's own: the reader word, the domain's epoch
    /// word, and the fence mode.
    record: &'a Participant,
    gp_ctr: &'a AtomicU64,
    fences: Fences,
    domain: &'a Domain,
    _not_send: PhantomData<*const ()>,
}

impl Domain {
    /// Registers a [`Reader`]: claims a participant record for it (a free
    /// one is reused; otherwise one allocation).
    ///
    /// # Panics
    ///
    /// In the child of a `fork()`.
    pub fn reader(&self) -> Reader<'_> {
        self.inner.check_fork();
        Reader {
            record: self.inner.claim_participant(),
            gp_ctr: &self.inner.hot.gp_ctr,
            fences: self.inner.hot.fences,
            domain: self,
            _not_send: PhantomData,
        }
    }
}

impl Reader<'_> {
    /// Enters a read section: stores the current epoch into the reader's
    /// word, then a compiler fence (a full fence without membarrier). The
    /// section ends when the guard drops (a store of 0).
    #[inline]
    pub fn read(&mut self) -> ReaderGuard<'_> {
        let ctr = &self.record.ctr;
        // The word is 0 here: the previous guard (which borrowed `self`
        // mutably) stored 0 when it dropped, or `mem::forget`ed it and
        // this overwrite ends that section (as a thread exit would).
        // Acquire: pairs with the leader's Release store of the epoch
        // (`protocol::start_grace_period`); the store is the same as
        // `protocol::reader_enter`'s outermost entry (nesting 1).
        ctr.store(self.gp_ctr.load(Ordering::Acquire), Ordering::Relaxed);
        // Orders the store before the section's loads (pairs with the
        // leader's membarrier, or its fence in fallback mode).
        self.fences.light();
        ReaderGuard {
            ctr,
            _not_send: PhantomData,
        }
    }

    /// The domain this reader belongs to.
    pub fn domain(&self) -> &Domain {
        self.domain
    }
}

/// A read section of a [`Reader`]; ends when dropped.
#[must_use = "the read section ends when the guard is dropped"]
pub struct ReaderGuard<'r> {
    ctr: &'r AtomicU64,
    _not_send: PhantomData<*const ()>,
}

impl Drop for ReaderGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: the section's accesses happen-before a grace period
        // leader's Acquire load that sees 0 (`holds_grace_period`), as
        // `protocol::reader_exit`.
        self.ctr.store(0, Ordering::Release);
    }
}

impl fmt::Debug for ReaderGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderGuard").finish_non_exhaustive()
    }
}

impl fmt::Debug for Reader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("domain", &self.record.domain_id)
            .field("reading", &(self.record.nesting() > 0))
            .finish()
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        // Guards borrow the reader mutably, so none is left (a forgotten
        // one would stall grace periods forever: end it, as a thread exit
        // does). Release: as a guard's exit.
        self.record.ctr.store(0, Ordering::Release);
        release_record(self.record);
    }
}

/// Hands back a record borrowed for one guard (see `read_slow`) or held by
/// a [`Reader`].
#[cold]
fn release_record(r: &Participant) {
    // Release: hands the record back (pairs with the claim's Acquire CAS).
    r.state.store(FREE, Ordering::Release);
}

/// The steps of the read-side, grace-period and steal-handshake protocols,
/// as small functions shared by [`Domain`] and the loom models
/// (`tests/loom.rs`), so the models check the code that runs.
pub(crate) mod protocol {
    use crate::expedite::Fences;
    use crate::sync::{AtomicBool, AtomicU64, Ordering};

    /// Bits of a reader word that count nesting; the rest is the epoch.
    pub const NEST_BITS: u32 = 16;
    /// Mask of the nesting count in a reader word.
    pub const NEST_MASK: u64 = (1 << NEST_BITS) - 1;

    /// The epoch word of grace period `g` (what readers copy): epoch
    /// `g + 1` above a nesting count of 1. 48 bits of epoch do not wrap in
    /// practice (2^48 grace periods at one per microsecond is 8.9 years;
    /// a normal grace period takes at least its 25 µs first-check delay).
    #[inline]
    pub const fn epoch_word(g: u64) -> u64 {
        ((g + 1) << NEST_BITS) | 1
    }

    /// Enters a read section (`Domain::read`). The reader word `ctr` holds
    /// the epoch seen at the outermost entry and the nesting depth (as in
    /// liburcu), so entering and leaving are one load and one store each.
    #[inline(always)]
    pub fn reader_enter(gp_ctr: &AtomicU64, ctr: &AtomicU64, fences: Fences) {
        // Relaxed: only this thread writes its reader word.
        let tmp = ctr.load(Ordering::Relaxed);
        if tmp & NEST_MASK == 0 {
            // Acquire: pairs with the leader's Release store of the epoch
            // (`start_grace_period`); free on x86.
            ctr.store(gp_ctr.load(Ordering::Acquire), Ordering::Relaxed);
            // Orders the store above before the section's loads: a compiler
            // fence paired with the leader's membarrier, or a full fence
            // paired with the leader's fence (fallback).
            fences.light();
        } else {
            if tmp & NEST_MASK == NEST_MASK {
                nested_too_deep();
            }
            ctr.store(tmp + 1, Ordering::Relaxed);
        }
    }

    #[cold]
    fn nested_too_deep() -> ! {
        panic!("exitq: read guards nested {NEST_MASK} deep (leaked guards?)")
    }

    /// Leaves a read section; true if it was the outermost one.
    #[inline(always)]
    pub fn reader_exit(ctr: &AtomicU64) -> bool {
        // Relaxed: only this thread writes its reader word.
        let tmp = ctr.load(Ordering::Relaxed);
        if tmp & NEST_MASK == 1 {
            // Release: the section's accesses happen-before a grace period
            // leader's Acquire load that sees 0 (`holds_grace_period`).
            ctr.store(0, Ordering::Release);
            true
        } else {
            ctr.store(tmp - 1, Ordering::Relaxed);
            false
        }
    }

    /// Nesting depth of a reader word.
    #[inline]
    pub fn nesting(ctr: &AtomicU64) -> u32 {
        (ctr.load(Ordering::Relaxed) & NEST_MASK) as u32
    }

    /// Steps 1 and 2 of grace period `g` (see the module docs).
    #[inline]
    pub fn start_grace_period(gp_ctr: &AtomicU64, g: u64, fences: Fences) {
        // Step 1: every reader passes a full barrier (pairs with the
        // readers' light fence; see expedite.rs).
        fences.heavy();
        // Step 2. Release: pairs with the readers' Acquire load of the
        // epoch: a reader that sees g + 1 sees every removal ordered before
        // this grace period.
        gp_ctr.store(epoch_word(g), Ordering::Release);
    }

    /// Step 4: whether the reader with word `ctr` still holds grace period
    /// `g` (it is inside a section that started before step 2).
    #[inline]
    pub fn holds_grace_period(ctr: &AtomicU64, g: u64) -> bool {
        // Acquire: pairs with the reader's Release store of 0 when it leaves
        // its outermost section (`reader_exit`): the section's accesses
        // happen-before whatever the grace period's caller does next.
        let c = ctr.load(Ordering::Acquire);
        c != 0 && (c >> NEST_BITS) <= g
    }

    /// Owner side of the steal handshake, before touching its batch: true
    /// if it may; false if a steal is in progress (then `busy` is cleared
    /// again and the owner must `wait_for_stealer` and retry).
    #[inline(always)]
    pub fn owner_begin(busy: &AtomicBool, steal: &AtomicBool, fences: Fences) -> bool {
        // Relaxed: ordered before the load of `steal` by the light fence
        // (paired with the stealer's heavy barrier).
        busy.store(true, Ordering::Relaxed);
        fences.light();
        // Acquire: pairs with the stealer's Release of `steal = false`
        // (`stealer_done`): its batch writes are visible to us.
        if steal.load(Ordering::Acquire) {
            owner_end(busy);
            return false;
        }
        true
    }

    /// Owner side: done touching the batch.
    #[inline(always)]
    pub fn owner_end(busy: &AtomicBool) {
        // Release: our batch writes happen-before a stealer's Acquire load
        // of `busy == false` (`stealer_wait`).
        busy.store(false, Ordering::Release);
    }

    /// Owner side: wait until the stealer is done.
    #[cold]
    pub fn wait_for_stealer(steal: &AtomicBool) {
        // Acquire: pairs with `stealer_done`'s Release.
        wait_while_set(steal);
    }

    /// Spins, then yields, while `flag` is set; each load is Acquire (the
    /// callers say what it pairs with).
    fn wait_while_set(flag: &AtomicBool) {
        let backoff = crossbeam_utils::Backoff::new();
        while flag.load(Ordering::Acquire) {
            if backoff.is_completed() {
                crate::sync::yield_now();
            } else {
                backoff.snooze();
            }
        }
    }

    /// Stealer side, for each candidate, before one heavy barrier for all.
    #[inline]
    pub fn stealer_mark(steal: &AtomicBool) {
        // Relaxed: ordered before our loads of `busy` by the heavy barrier
        // that follows (the owner's store of `busy` before its load of
        // `steal` by its light fence).
        steal.store(true, Ordering::Relaxed);
    }

    /// Stealer side, after the heavy barrier: wait until the owner is out.
    #[inline]
    pub fn stealer_wait(busy: &AtomicBool) {
        // Acquire: pairs with `owner_end`'s Release: the owner's batch
        // writes are visible to us.
        wait_while_set(busy);
    }

    /// Stealer side: done with the batch.
    #[inline]
    pub fn stealer_done(steal: &AtomicBool) {
        // Release: pairs with `owner_begin`'s Acquire load of `steal`.
        steal.store(false, Ordering::Release);
    }
}
