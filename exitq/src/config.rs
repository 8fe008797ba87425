//! Configuration: the [`DomainBuilder`], who runs callbacks ([`Reclaimer`],
//! [`Callbacks`]), and stall reports ([`Stall`]).
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::expedite::Expedite;

/// Who drives grace periods and runs the work no live thread will run
/// (batches of exited and idle threads, exit hooks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reclaimer {
    /// A dedicated thread (the default). It leads the grace periods that
    /// threads wait for when they stop driving them (a thread whose sealed
    /// batches wait drives their grace period at its seals), takes the work of
    /// exited threads at most once per `exit_poll` (one grace period for all
    /// the threads that exited meanwhile), polls every `flush_latency` while
    /// some thread holds batches (to take those of idle threads) and every
    /// `exit_poll` while exit hooks are armed (the exit path makes no syscall,
    /// so it cannot wake it), and sleeps without a timeout once idle for two
    /// polls. It sleeps on an eventfd, so neither its polls nor its wake-ups
    /// are futex calls.
    #[default]
    Thread,
    /// No thread: the thread that seals a batch runs the grace period it
    /// needs itself (each sealed batch costs its thread a grace period,
    /// unless it is inside a read guard), and [`Domain::flush`],
    /// [`Domain::barrier`] and [`Domain::exit_barrier`] run what is
    /// pending. Batches of idle threads wait for those calls.
    ///
    /// [`Domain::flush`]: crate::Domain::flush
    /// [`Domain::barrier`]: crate::Domain::barrier
    /// [`Domain::exit_barrier`]: crate::Domain::exit_barrier
    Inline,
}

/// Where a live thread's deferred callbacks run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Callbacks {
    /// On the thread that deferred them (the default), as the kernel runs RCU
    /// callbacks on the CPU that queued them: once a later seal finds a sealed
    /// batch's grace period passed, the thread runs its callbacks a few at a
    /// time from its next `defer`s (also inside a read section: see
    /// [`Domain::defer`](crate::Domain::defer)), or all at once at
    /// [`flush`](crate::Domain::flush). A freed object goes back to the
    /// allocator cache of the thread that allocated it, and nothing a callback
    /// touches crosses cores. The reclaimer runs the batches of threads that
    /// exited, went idle, or left ready batches unrun for a flush latency.
    #[default]
    Local,
    /// Every callback on the reclaimer (the kernel's `rcu_nocbs`,
    /// liburcu's `call_rcu` thread): a full batch is pushed onto the
    /// domain's queue with one compare-and-swap and never runs on the
    /// deferring thread. For callers that defer while holding a lock their
    /// callbacks take, or that must never run foreign code in `defer`.
    Offload,
}

/// A reader that held up a grace period for longer than the stall timeout,
/// or a cache that held up a [`RcuCell::replace`](crate::RcuCell::replace)
/// for as long ([`HeldBy::Cache`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stall {
    /// Kernel thread id of the reader (as in `/proc/self/task/<tid>`); of
    /// the thread that made the cache, for [`HeldBy::Cache`].
    pub tid: i32,
    /// The reader thread's name, if it had one (and still runs).
    pub thread_name: Option<String>,
    /// How long the grace period had waited for it when reported; how
    /// long `replace` had waited for the cache after its grace period.
    pub waited: Duration,
    /// The grace period's number; for [`HeldBy::Cache`], the last one
    /// completed when reported (`replace`'s has passed).
    pub grace_period: u64,
    /// What holds it: a kind of read section, or a cache.
    pub held_by: HeldBy,
}

/// The kind of read section that holds a stalled grace period, or the
/// cache that holds up a `replace` ([`Stall::held_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeldBy {
    /// A [`Guard`](crate::Guard) of [`Domain::read`](crate::Domain::read)
    /// (held too long, or leaked).
    Guard,
    /// A [`ReaderGuard`](crate::ReaderGuard) (held too long, or leaked).
    ReaderGuard,
    /// An online [`QsbrReader`](crate::QsbrReader) that announced no
    /// quiescent state since the grace period started (blocked while
    /// online, a loop that does not call `quiescent`, or leaked).
    QsbrReader,
    /// A [`CellCache`](crate::CellCache) or
    /// [`OptionCache`](crate::OptionCache) that keeps the value a
    /// [`RcuCell::replace`](crate::RcuCell::replace) took out: its
    /// thread neither loads it again nor drops it (or it was leaked, and
    /// `replace` waits for ever).
    Cache,
}

impl HeldBy {
    /// What usually causes the stall, for the default report.
    pub(crate) fn hint(self) -> &'static str {
        match self {
            HeldBy::Guard | HeldBy::ReaderGuard => "a read guard held too long, or leaked?",
            HeldBy::QsbrReader => {
                "an online QsbrReader: call quiescent() once per loop iteration and \
                 go offline() around blocking calls; or leaked?"
            }
            HeldBy::Cache => {
                "a cache that its thread does not load again or drop; or leaked \
                 (then replace waits for ever)?"
            }
        }
    }
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.held_by {
            HeldBy::Guard => "a read guard",
            HeldBy::ReaderGuard => "a Reader's guard",
            HeldBy::QsbrReader => "an online QsbrReader that announced no quiescent state",
            HeldBy::Cache => {
                return write!(
                    f,
                    "exitq: replace() stalled for {:?} after grace period {} by a cache of \
                     thread {} ({}) that keeps the value it took out",
                    self.waited,
                    self.grace_period,
                    self.tid,
                    self.thread_name.as_deref().unwrap_or("unnamed or exited")
                );
            }
        };
        write!(
            f,
            "exitq: grace period {} stalled for {:?} by reader thread {} ({}): {what}",
            self.grace_period,
            self.waited,
            self.tid,
            self.thread_name.as_deref().unwrap_or("unnamed")
        )
    }
}

/// A stall handler: called on the thread running the grace period.
pub type StallHandler = Arc<dyn Fn(&Stall) + Send + Sync>;

/// The name `inner.rs` still uses (to be renamed there).
pub(crate) use DomainBuilder as Builder;

/// Upper bound of [`DomainBuilder::batch_size`].
pub(crate) const MAX_BATCH_SIZE: usize = 1 << 16;

/// Upper bound of [`DomainBuilder::first_check_delay`]: every normal
/// grace period's leader naps this long, and nothing cuts the nap short.
pub(crate) const MAX_FIRST_CHECK_DELAY: Duration = Duration::from_secs(1);

/// Configures and builds a [`Domain`](crate::Domain).
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
pub struct DomainBuilder {
    pub(crate) first_check_delay: Duration,
    pub(crate) batch_size: usize,
    pub(crate) flush_latency: Duration,
    pub(crate) backlog_limit: usize,
    pub(crate) stall_timeout: Duration,
    pub(crate) exit_poll: Option<Duration>,
    pub(crate) reclaimer: Reclaimer,
    pub(crate) callbacks: Callbacks,
    pub(crate) expedite: Expedite,
    pub(crate) stall_handler: Option<StallHandler>,
    pub(crate) thread_name: String,
}

impl fmt::Debug for DomainBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DomainBuilder")
            .field("first_check_delay", &self.first_check_delay)
            .field("batch_size", &self.batch_size)
            .field("flush_latency", &self.flush_latency)
            .field("backlog_limit", &self.backlog_limit)
            .field("stall_timeout", &self.stall_timeout)
            .field("exit_poll", &self.exit_poll)
            .field("reclaimer", &self.reclaimer)
            .field("callbacks", &self.callbacks)
            .field("expedite", &self.expedite)
            .field("stall_handler", &self.stall_handler.is_some())
            .field("thread_name", &self.thread_name)
            .finish()
    }
}

impl Default for DomainBuilder {
    fn default() -> Self {
        DomainBuilder {
            first_check_delay: Duration::from_micros(25),
            batch_size: 256,
            flush_latency: Duration::from_millis(10),
            backlog_limit: 1 << 20,
            stall_timeout: Duration::from_secs(5),
            exit_poll: Some(Duration::from_millis(10)),
            reclaimer: Reclaimer::Thread,
            callbacks: Callbacks::Local,
            expedite: Expedite::Auto,
            stall_handler: None,
            thread_name: "exitq-reclaim".to_owned(),
        }
    }
}

impl DomainBuilder {
    /// Sleep this long after starting a normal grace period before the first
    /// check of the readers (default 25 µs, at most 1 s): short readers
    /// finish meanwhile and concurrent callers join the same grace period.
    /// Zero disables it. Expedited grace periods never wait.
    ///
    /// Longer delays, up to `Duration::MAX`, are clamped to 1 s: the
    /// leader's sleep cannot be cut short, so a longer one would hold up
    /// every normal grace period (the reclaimer's passes, exit hooks,
    /// `barrier`, dropping the domain) as long. The reclaimer takes over a
    /// grace period asked for and left undriven after eight of these delays
    /// (at least 1 ms).
    pub fn first_check_delay(mut self, delay: Duration) -> Self {
        self.first_check_delay = delay.min(MAX_FIRST_CHECK_DELAY);
        self
    }

    /// Callbacks per thread-local batch (default 256, clamped to 1..=65536:
    /// each batch's memory is three words per callback, so a larger batch
    /// only costs memory). A batch is sealed when full and waits for one
    /// grace period as a whole. A thread's first batch holds 32 callbacks
    /// when the batch size is larger (a short-lived thread that defers a
    /// few callbacks hands over a 0.8 KB batch, not the full size's 6 KB),
    /// its later ones the batch size.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.clamp(1, MAX_BATCH_SIZE);
        self
    }

    /// How long a thread may keep callbacks the reclaimer could run
    /// (default 10 ms, at least 100 µs): the reclaimer thread takes batches
    /// that were opened, or sealed and left unrun, at least this long ago
    /// from their thread (within one to two flush latencies). With
    /// [`Reclaimer::Inline`] there is no thread to do that: batches of idle
    /// threads run at [`Domain::barrier`](crate::Domain::barrier) or when
    /// their thread defers again, flushes or exits.
    ///
    /// Any value is accepted; a huge one (up to `Duration::MAX`) means
    /// practically never: the reclaimer thread then never takes idle
    /// threads' batches by age (they wait as with `Reclaimer::Inline`), and
    /// never parks (its sleeps keep a timeout; while exit hooks are armed
    /// it still looks for them every [`exit_poll`](Self::exit_poll)).
    pub fn flush_latency(mut self, latency: Duration) -> Self {
        self.flush_latency = latency.max(Duration::from_micros(100));
        self
    }

    /// Most sealed callbacks allowed to wait (default 2^20). A thread that
    /// seals a batch past it waits for the grace period its oldest batch
    /// needs and runs what is ready (or, while fewer reclaim passes than
    /// half the CPUs, at least 2, run, helps with the domain's queue).
    /// Inside a read guard or a callback waiting would deadlock: the
    /// overrun is counted instead ([`DomainStats::backlog_overruns`]).
    ///
    /// [`DomainStats::backlog_overruns`]: crate::DomainStats::backlog_overruns
    pub fn backlog_limit(mut self, n: usize) -> Self {
        self.backlog_limit = n.max(1);
        self
    }

    /// Report a reader that holds up a grace period longer than this
    /// (default 5 s), and a cache that holds up a `replace` as long after
    /// its grace period. Any value is accepted; a huge one (up to
    /// `Duration::MAX`) means stalls are practically never reported (the
    /// grace period waits for the reader all the same).
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// How often the reclaimer thread takes the work that exited threads
    /// left (their exit hooks and batches), and looks for it while exit
    /// hooks are armed (default 10 ms): the threads that exit within one
    /// such period share one grace period and one run. `None`: never poll
    /// for hooks (they then run at the next reclaim pass, `barrier` or
    /// `exit_barrier`), and queued work waits at most a flush latency.
    /// This bounds the latency between a thread's exit and its cleanup
    /// (plus a grace period).
    ///
    /// Any period is accepted (at least 100 µs); a huge one (up to
    /// `Duration::MAX`) means practically never: exited threads' hooks and
    /// batches may then wait for a pass the reclaimer runs for other work
    /// (a backlog on the queue, batches it took from idle threads), for
    /// [`Domain::barrier`](crate::Domain::barrier) or
    /// [`Domain::exit_barrier`](crate::Domain::exit_barrier), or for the
    /// domain's drop.
    pub fn exit_poll(mut self, period: Option<Duration>) -> Self {
        self.exit_poll = period.map(|p| p.max(Duration::from_micros(100)));
        self
    }

    /// Who drives grace periods and runs what no live thread will (default
    /// [`Reclaimer::Thread`]).
    pub fn reclaimer(mut self, reclaimer: Reclaimer) -> Self {
        self.reclaimer = reclaimer;
        self
    }

    /// Where live threads' callbacks run (default [`Callbacks::Local`]).
    pub fn callbacks(mut self, callbacks: Callbacks) -> Self {
        self.callbacks = callbacks;
        self
    }

    /// membarrier(2) or fences (default [`Expedite::Auto`]).
    pub fn expedite(mut self, expedite: Expedite) -> Self {
        self.expedite = expedite;
        self
    }

    /// Called once per stalled reader per grace period, and once per
    /// `replace` held up by a cache ([`HeldBy::Cache`]), instead of the
    /// default line on stderr. Runs on the thread waiting for the grace
    /// period (or in `replace`), inside that wait; a panic in it is
    /// caught and ignored.
    /// Waiting for a grace period of the same domain in it
    /// (`synchronize`, `barrier`, `exit_barrier`, `RcuCell::replace`)
    /// would wait for itself, so those panic there; `defer` and `flush`
    /// there only queue.
    pub fn stall_handler(mut self, handler: impl Fn(&Stall) + Send + Sync + 'static) -> Self {
        self.stall_handler = Some(Arc::new(handler));
        self
    }

    /// Name of the reclaimer thread (default `exitq-reclaim`).
    ///
    /// It must not contain a NUL byte (a thread name is a C string):
    /// [`try_build`](Self::try_build) then returns an error of kind
    /// [`InvalidInput`](std::io::ErrorKind::InvalidInput), and
    /// [`build`](Self::build) panics, whichever the [`Reclaimer`].
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = name.into();
        self
    }
}

/// The settings a built domain runs with.
pub(crate) struct Config {
    pub(crate) batch_size: usize,
    pub(crate) flush_latency: Duration,
    pub(crate) backlog_limit: usize,
    pub(crate) exit_poll: Option<Duration>,
    pub(crate) reclaimer: Reclaimer,
    pub(crate) callbacks: Callbacks,
    pub(crate) thread_name: String,
}
