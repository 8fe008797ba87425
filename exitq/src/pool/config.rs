//! The pool's [`PoolBuilder`], the settings it validates into a [`Config`], what
//! its [`on_retire`](PoolBuilder::on_retire) callback is told ([`Retirement`]),
//! and the exitq domain shared by pools built without one of their own.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a worker left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetireReason {
    /// It was idle past its (jittered) keep-alive and the pool was above
    /// `min_workers`.
    Idle,
    /// The pool was shut down.
    Shutdown,
}

/// The longest idle period (`keep_alive` plus its jitter) a pool accepts:
/// workers compute deadlines from it (`Instant` arithmetic), and an idle
/// period of years is a worker that never retires, which `min_workers`
/// says plainly.
const MAX_IDLE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The most workers a pool accepts: Linux's `PID_MAX_LIMIT` on 64-bit
/// (every thread needs a thread ID, at most `kernel.pid_max`, which can be
/// at most this). The slot table is allocated at build time, one 128-byte
/// slot per worker, so a larger `max_workers` only costs memory: up to
/// 2^32 it aborted the process in `build` (the allocation failed).
const MAX_WORKERS: usize = 1 << 22;

/// One worker's retirement, passed to
/// [`PoolBuilder::on_retire`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Retirement {
    /// Index of the worker's slot (`0..max_workers`).
    pub slot: usize,
    /// Why it left.
    pub reason: RetireReason,
    /// When the worker decided to leave (it then exited at once).
    pub decided_at: Instant,
    /// When its exit bookkeeping ran (on the reclaimer, after the thread
    /// was gone): `cleaned_at - decided_at` is the deferral.
    pub cleaned_at: Instant,
    /// For [`RetireReason::Idle`]: the keep-alive this worker drew for the
    /// idle period it left from, `keep_alive + uniform[0, jitter)` (see
    /// [`PoolBuilder::keep_alive_jitter`]). The worker was idle at least
    /// this long before `decided_at`: longer when it had to wait for a
    /// retirement token ([`PoolBuilder::retire_batch`]) or stayed at
    /// `min_workers` for a while. [`Duration::ZERO`] for
    /// [`RetireReason::Shutdown`].
    pub keep_alive: Duration,
}

/// The [`PoolBuilder::on_retire`] callback.
pub(super) type RetireCallback = Arc<dyn Fn(&Retirement) + Send + Sync + 'static>;

/// Configures a [`Pool`](super::Pool); see each setter for its default.
#[derive(Clone)]
pub struct PoolBuilder {
    min_workers: usize,
    max_workers: usize,
    keep_alive: Duration,
    keep_alive_jitter: Option<Duration>,
    retire_batch: usize,
    spin: Duration,
    max_spinners: Option<usize>,
    thread_name: String,
    stack_size: Option<usize>,
    on_retire: Option<RetireCallback>,
    domain: Option<crate::Domain>,
    thread_room: Option<crate::limits::ThreadRoom>,
}

impl fmt::Debug for PoolBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuilder")
            .field("min_workers", &self.min_workers)
            .field("max_workers", &self.max_workers)
            .field("keep_alive", &self.keep_alive)
            .field("keep_alive_jitter", &self.jitter())
            .field("retire_batch", &self.retire_batch)
            .field("spin", &self.spin)
            .field("max_spinners", &self.max_spinners)
            .field("thread_name", &self.thread_name)
            .field("stack_size", &self.stack_size)
            .field("on_retire", &self.on_retire.is_some())
            .field("domain", &self.domain.is_some())
            .field("thread_room", &self.thread_room.is_some())
            .finish()
    }
}

impl Default for PoolBuilder {
    fn default() -> Self {
        Self {
            min_workers: 0,
            max_workers: std::thread::available_parallelism().map_or(4, |n| n.get()),
            keep_alive: Duration::from_secs(10),
            keep_alive_jitter: None,
            retire_batch: 2,
            spin: Duration::from_micros(50),
            max_spinners: None,
            thread_name: "exitq-pool".into(),
            stack_size: None,
            on_retire: None,
            domain: None,
            thread_room: None,
        }
    }
}

impl PoolBuilder {
    /// Workers kept even when idle (started by [`PoolBuilder::build`]). Default 0.
    pub fn min_workers(mut self, n: usize) -> Self {
        self.min_workers = n;
        self
    }

    /// Most workers at once (at least 1, at least `min_workers`, at most
    /// 2^22, the most threads a Linux process can have). Default: the
    /// available parallelism. For jobs that block, set it higher. The
    /// pool allocates one slot (128 bytes) per worker when it is built.
    pub fn max_workers(mut self, n: usize) -> Self {
        self.max_workers = n;
        self
    }

    /// How long a worker above `min_workers` stays idle before it retires
    /// (plus jitter). Default 10 s. With the jitter, at most 365 days
    /// (`build` refuses more: workers that never retire are
    /// `min_workers(max_workers)`).
    pub fn keep_alive(mut self, d: Duration) -> Self {
        self.keep_alive = d;
        self
    }

    /// Each idle period lasts `keep_alive + uniform[0, jitter)`. Default:
    /// half the keep-alive. Zero gives the plain keep-alive of other pools
    /// (retirement is then staggered by `retire_batch` alone).
    pub fn keep_alive_jitter(mut self, d: Duration) -> Self {
        self.keep_alive_jitter = Some(d);
        self
    }

    /// At most this many workers retire per grace period (K >= 1): a
    /// retiring worker holds one of K tokens until its exit bookkeeping has
    /// run on the reclaimer. Default 2.
    pub fn retire_batch(mut self, k: usize) -> Self {
        self.retire_batch = k;
        self
    }

    /// How long a worker that ran out of jobs polls the queue before it
    /// parks (default 50 µs; zero: park at once). While a worker spins, a
    /// submit costs no syscall: the spinner takes the job, and wakes
    /// another worker itself if more jobs are queued. Costs up to this much
    /// CPU per idle transition of a worker.
    pub fn spin(mut self, d: Duration) -> Self {
        self.spin = d;
        self
    }

    /// Most workers spinning at once (default: half the available
    /// parallelism, at least 1, at most `max_workers`).
    pub fn max_spinners(mut self, n: usize) -> Self {
        self.max_spinners = Some(n);
        self
    }

    /// Worker thread names are `<prefix>-<slot>`. Default `exitq-pool`.
    /// A prefix with a NUL byte makes `build` fail (`InvalidInput`).
    pub fn thread_name(mut self, prefix: impl Into<String>) -> Self {
        self.thread_name = prefix.into();
        self
    }

    /// Stack size of worker threads in bytes. Default: the std default.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Called once per worker that left, from its exit bookkeeping (on the
    /// reclaimer thread, after the worker thread has exited). Keep it short
    /// and do not block; it must not submit to this pool and wait.
    pub fn on_retire(mut self, f: impl Fn(&Retirement) + Send + Sync + 'static) -> Self {
        self.on_retire = Some(Arc::new(f));
        self
    }

    /// The exitq domain whose reclaimer runs the workers' exit bookkeeping.
    /// Default: one domain shared by every pool of the process (built on
    /// first use, its reclaimer thread named `exitq-pool-reclaim`). How
    /// soon an exit is cleaned up, and so the pace of retirement with
    /// [`PoolBuilder::retire_batch`], follows the domain's
    /// [`exit_poll`](crate::DomainBuilder::exit_poll) and grace periods.
    /// A domain built before a `fork()` makes `build` fail in the child
    /// (`InvalidInput`).
    pub fn domain(mut self, domain: crate::Domain) -> Self {
        self.domain = Some(domain);
        self
    }

    /// Checks the room under `RLIMIT_AS` and `RLIMIT_DATA` before each
    /// worker is created ([`ThreadRoom`](crate::limits::ThreadRoom)): a
    /// worker that might get its stack but not the signal stack std maps
    /// for it (where std aborts the process) is not created, and counts as
    /// a failed creation, explained ([`Pool::last_spawn_error`](super::Pool::last_spawn_error)).
    /// For a process that runs up to those limits on purpose; each
    /// creation then reads `/proc/self/statm`. Default: no check.
    pub fn thread_room(mut self, room: crate::limits::ThreadRoom) -> Self {
        self.thread_room = Some(room);
        self
    }

    fn jitter(&self) -> Duration {
        // `keep_alive / 2` cannot overflow; `into_config` bounds the sum.
        self.keep_alive_jitter.unwrap_or(self.keep_alive / 2)
    }

    /// The settings checked and resolved for [`PoolBuilder::build`]: defaults
    /// filled in, the domain chosen (the shared one if none was given).
    ///
    /// # Errors
    /// `InvalidInput` for inconsistent settings (see [`PoolBuilder::build`]);
    /// the shared domain's error if it cannot be built.
    pub(super) fn into_config(self) -> io::Result<(Config, crate::Domain)> {
        let invalid = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, m.to_string()));
        if self.max_workers == 0 {
            return invalid("max_workers must be at least 1");
        }
        if self.max_workers > MAX_WORKERS {
            return invalid(
                "max_workers must be at most 4194304 (2^22, PID_MAX_LIMIT: no Linux \
                 process can have more threads)",
            );
        }
        if self.min_workers > self.max_workers {
            return invalid("min_workers must not exceed max_workers");
        }
        if self.retire_batch == 0 {
            return invalid("retire_batch must be at least 1");
        }
        if self.keep_alive.is_zero() {
            return invalid("keep_alive must be positive");
        }
        // std's `thread::Builder` panics on a name with a NUL byte, and it
        // would do so inside `try_spawn`, after the worker was counted and
        // its slot claimed, and inside a submitter's `enter`..`leave`: the
        // pool could then never shut down. Refused here instead.
        if self.thread_name.contains('\0') {
            return invalid("thread_name must not contain a NUL byte");
        }
        let jitter = self.jitter();
        if self.keep_alive.saturating_add(jitter) > MAX_IDLE {
            return invalid(
                "keep_alive + keep_alive_jitter must be at most 365 days \
                 (for workers that never retire, set min_workers to max_workers)",
            );
        }
        let domain = match self.domain {
            // A domain built before a `fork()` cannot be used in the child
            // (its methods panic there): each worker's `register_exit`
            // would panic at the worker's start, before it ever took a
            // job, leaving the job queued and the worker counted, and
            // `shutdown` waiting for it for ever. Refused here instead.
            Some(d) if d.inner.forked() => {
                return invalid(
                    "the domain was built before fork() (unusable in the child): \
                     build a new one in the child, or use the shared one",
                );
            }
            Some(d) => d,
            None => shared_domain()?,
        };
        let cfg = Config {
            min_workers: self.min_workers,
            max_workers: self.max_workers,
            keep_alive: self.keep_alive,
            jitter,
            retire_batch: self.retire_batch,
            spin: self.spin,
            max_spinners: self
                .max_spinners
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()) / 2)
                .clamp(1, self.max_workers),
            thread_name: self.thread_name,
            stack_size: self.stack_size,
            on_retire: self.on_retire,
            thread_room: self.thread_room,
        };
        Ok((cfg, domain))
    }
}

/// Settings fixed at build time.
pub(super) struct Config {
    pub(super) min_workers: usize,
    pub(super) max_workers: usize,
    pub(super) keep_alive: Duration,
    pub(super) jitter: Duration,
    /// Retirement tokens the pool starts with (see `retire.rs`).
    pub(super) retire_batch: usize,
    pub(super) spin: Duration,
    pub(super) max_spinners: usize,
    pub(super) thread_name: String,
    pub(super) stack_size: Option<usize>,
    pub(super) on_retire: Option<RetireCallback>,
    /// See [`PoolBuilder::thread_room`].
    pub(super) thread_room: Option<crate::limits::ThreadRoom>,
}

/// The domain shared by pools built without [`PoolBuilder::domain`].
///
/// Lock-free (a leaked box behind an atomic pointer), so a `fork()` that
/// happens while another thread builds it cannot leave a lock held in the
/// child; in the child the parent's domain is unusable (see the crate
/// docs), so it is left alone (leaked) and a new one is built.
fn shared_domain() -> io::Result<crate::Domain> {
    static SHARED: AtomicPtr<crate::Domain> = AtomicPtr::new(std::ptr::null_mut());
    loop {
        // Acquire: pairs with the Release CAS that installed it.
        let cur = SHARED.load(Ordering::Acquire);
        // SAFETY: installed boxes are leaked, never freed.
        if let Some(d) = unsafe { cur.as_ref() } {
            if !d.inner.forked() {
                return Ok(d.clone());
            }
        }
        let d = crate::Domain::builder()
            .thread_name("exitq-pool-reclaim")
            .try_build()
            .map_err(|e| {
                // `try_build` names the thread and the limit that stopped it.
                io::Error::new(
                    e.kind(),
                    format!("cannot start the pools' shared exitq domain: {e}"),
                )
            })?;
        let fresh = Box::into_raw(Box::new(d.clone()));
        // AcqRel: the Release half pairs with the Acquire load above (of a
        // later call): it publishes the box. The Acquire halves (success and
        // failure) are stronger than needed: on success we use our own
        // domain, on failure the loop re-reads the winner's box with that
        // Acquire load.
        match SHARED.compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(d),
            Err(_) => {
                // Another thread installed one first: use that one.
                // SAFETY: `fresh` was never published.
                drop(unsafe { Box::from_raw(fresh) });
            }
        }
    }
}
