//! The shared state of one domain, and what every mechanism needs of it:
//! counters, the pool of empty batches, waking the reclaimer, the fork
//! check, and what happens when the last reference goes.
//!
//! The mechanisms live in their own modules and work on this state:
//! grace periods (`grace`), the owner's batches (`local`), reclaim passes
//! and stealing (`reclaim`), the reclaimer thread (`reclaimer`), the exit
//! path (`exit`). The public facade is `domain`.
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread;

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;

use crate::batch::{Batch, Work, FIRST_BATCH};
use crate::config::{Builder, Config};
use crate::doorbell::Doorbell;
use crate::expedite::Fences;
use crate::fork;
use crate::grace::GracePeriods;
use crate::llist::{List, Node};
use crate::record::{Record, Registry};
use crate::run::{run_chain, Ran};
use crate::stats::{Counters, Stats};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crate::wake::{self, Wake};

/// Reclaim passes in flight (see `reclaim`).
pub(crate) struct Passes {
    /// The next pass id.
    pub(crate) next: u64,
    /// Ids of the passes that took work and have not finished running it.
    pub(crate) active: Vec<u64>,
    /// Threads blocked on `passes_cv` (`barrier` callers, producers over
    /// the backlog limit): a pass ending with none skips the futex wake.
    pub(crate) waiters: usize,
}

/// The shared state of a domain.
pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) gp: GracePeriods,
    pub(crate) config: Config,
    pub(crate) registry: Registry,
    /// Work no live thread will run: batches of exited threads, of idle
    /// threads (taken by a stealer), offloaded batches, exit hooks.
    pub(crate) queue: CachePadded<List<Work>>,
    pub(crate) passes: Mutex<Passes>,
    pub(crate) passes_cv: Condvar,
    /// Held by stealers from marking until what they took is on `queue`
    /// (one stealer at a time: `handshake`).
    pub(crate) steal_lock: Mutex<()>,
    /// Unit tests: called by every stealer after its marks and heavy
    /// barrier, before it waits for the owners (`reclaim::steal`).
    #[cfg(test)]
    pub(crate) steal_hook: Mutex<Option<std::sync::Arc<dyn Fn() + Send + Sync>>>,
    /// Sealed callbacks not yet run (the backlog).
    pub(crate) pending: CachePadded<AtomicUsize>,
    /// Batches held by threads (open or sealed): while any, the reclaimer
    /// polls, to take those of idle threads.
    pub(crate) held: CachePadded<AtomicUsize>,
    /// Exit hooks registered and not yet run.
    pub(crate) armed_exits: AtomicUsize,
    /// Advanced by the reclaimer every flush latency; ages held batches.
    pub(crate) poll_epoch: AtomicU64,
    /// The reclaimer thread's state: `AWAKE`, `POLLING` or `PARKED`
    /// (`wake.rs`).
    pub(crate) sleeping: AtomicU32,
    /// What the reclaimer sleeps on, and a publisher rings.
    pub(crate) doorbell: Doorbell,
    pub(crate) shut_down: AtomicBool,
    pub(crate) stats: Counters,
    /// Emptied batch nodes, reused when a thread opens a batch.
    pub(crate) recycle: ArrayQueue<Box<Node<Work>>>,
    /// Emptied small nodes ([`FIRST_BATCH`] callbacks), reused for threads'
    /// first batches.
    recycle_first: ArrayQueue<Box<Node<Work>>>,
    /// Reclaim passes that may run at once before producers over the
    /// backlog limit wait instead of helping: half the CPUs, at least 2.
    pub(crate) pass_cap: usize,
    /// The fork generation the domain was built in (`fork`).
    fork_gen: u64,
}

impl Inner {
    pub(crate) fn new(b: Builder, fences: Fences) -> Inner {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        // Relaxed: only uniqueness matters.
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Inner {
            id,
            gp: GracePeriods::new(
                fences,
                b.first_check_delay,
                b.stall_timeout,
                b.stall_handler,
            ),
            config: Config {
                batch_size: b.batch_size,
                flush_latency: b.flush_latency,
                backlog_limit: b.backlog_limit,
                exit_poll: b.exit_poll,
                reclaimer: b.reclaimer,
                callbacks: b.callbacks,
                thread_name: b.thread_name,
            },
            registry: Registry::new(),
            queue: CachePadded::new(List::new()),
            passes: Mutex::new(Passes {
                next: 1,
                active: Vec::new(),
                waiters: 0,
            }),
            passes_cv: Condvar::new(),
            steal_lock: Mutex::new(()),
            #[cfg(test)]
            steal_hook: Mutex::new(None),
            pending: CachePadded::new(AtomicUsize::new(0)),
            held: CachePadded::new(AtomicUsize::new(0)),
            armed_exits: AtomicUsize::new(0),
            poll_epoch: AtomicU64::new(1),
            sleeping: AtomicU32::new(wake::AWAKE),
            doorbell: Doorbell::new(),
            shut_down: AtomicBool::new(false),
            stats: Counters::default(),
            // Emptied batches kept for reuse beyond each thread's spare: a
            // quarter of the backlog limit's worth, at most 1024.
            recycle: ArrayQueue::new((b.backlog_limit / b.batch_size / 4).clamp(16, 1024)),
            recycle_first: ArrayQueue::new(1024),
            pass_cap: thread::available_parallelism().map_or(2, |n| (n.get() / 2).max(2)),
            fork_gen: fork::generation(),
        }
    }

    /// Whether this process is a `fork()` child of the one that built the
    /// domain.
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        fork::is_child(self.fork_gen)
    }

    /// Panics in the child of a `fork()` (see the crate docs).
    #[inline]
    pub(crate) fn check_fork(&self) {
        if self.forked() {
            forked_panic();
        }
    }

    /// An empty batch node, recycled or new: for a thread's `first` batch
    /// a small one ([`FIRST_BATCH`] callbacks, if the batch size is
    /// larger), else one of the batch size.
    pub(crate) fn empty_batch(&self, first: bool) -> Box<Node<Work>> {
        let (queue, size) = if first && FIRST_BATCH < self.config.batch_size {
            (&self.recycle_first, FIRST_BATCH)
        } else {
            (&self.recycle, self.config.batch_size)
        };
        queue
            .pop()
            .unwrap_or_else(|| Node::new(Work::Batch(Batch::new(size))))
    }

    /// Keeps an emptied batch node for reuse, with the nodes of its size
    /// (or frees it: a full pool, or a node smaller than both sizes).
    pub(crate) fn recycle_node(&self, node: Box<Node<Work>>) {
        let queue = match &node.value {
            Work::Batch(b) if b.holds(self.config.batch_size) => &self.recycle,
            Work::Batch(b) if b.holds(FIRST_BATCH) => &self.recycle_first,
            _ => return,
        };
        if let Err(node) = queue.push(node) {
            drop(node);
        }
    }

    /// Whether `node` is a batch of the full batch size (a record's spare
    /// must be: `drain::keep_node`).
    pub(crate) fn full_size(&self, node: &Node<Work>) -> bool {
        matches!(&node.value, Work::Batch(b) if b.holds(self.config.batch_size))
    }

    /// Runs `chain` and settles the counters.
    pub(crate) fn run(&self, chain: crate::llist::Chain<Work>) -> Ran {
        let ran = run_chain(self.id, chain, |node| self.recycle_node(node));
        self.settle(&ran);
        ran
    }

    /// Settles the counters after a run.
    pub(crate) fn settle(&self, ran: &Ran) {
        // Relaxed (all): counters; the work itself was handed over through
        // the list, the handshake or the pass lock.
        if ran.pending > 0 {
            self.pending.fetch_sub(ran.pending, Ordering::Relaxed);
        }
        if ran.held > 0 {
            self.held.fetch_sub(ran.held, Ordering::Relaxed);
        }
        if ran.exits > 0 {
            self.armed_exits
                .fetch_sub(ran.exits as usize, Ordering::Relaxed);
            Counters::add(&self.stats.exits_run, ran.exits);
        }
        // Only when something ran to settle: a drain tick that finished
        // no batch counts nothing yet (`drain.rs`), and an add of 0 would
        // still take the shared line from the other CPUs.
        if ran.callbacks > 0 {
            Counters::add(&self.stats.callbacks_run, ran.callbacks);
        }
        if ran.panicked > 0 {
            Counters::add(&self.stats.callbacks_panicked, ran.panicked);
        }
    }

    /// Wakes the reclaimer thread if it sleeps without a timeout, or
    /// (`Wake::Always`) also if it sleeps with one. One syscall then (a
    /// write to its doorbell, no futex); nothing otherwise. Other work
    /// waits for its next poll: waking the reclaimer for every sealed batch
    /// would cost a syscall and a context switch per batch.
    #[inline]
    pub(crate) fn wake_reclaimer(&self, wake: Wake) {
        if wake::claim(&self.sleeping, wake) {
            self.doorbell.ring();
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let c = &self.stats;
        let get = Counters::get;
        Stats {
            grace_periods: get(&c.grace_periods),
            expedited: get(&c.expedited),
            synchronize_calls: get(&c.synchronize_calls),
            callbacks_run: get(&c.callbacks_run),
            callbacks_panicked: get(&c.callbacks_panicked),
            batches: get(&c.batches),
            batches_run_locally: get(&c.batches_run_locally),
            max_batch: get(&c.max_batch),
            // Relaxed: snapshots of counters.
            pending: self.pending.load(Ordering::Relaxed) as u64,
            exits_run: get(&c.exits_run),
            exits_armed: self.armed_exits.load(Ordering::Relaxed) as u64,
            stalls: get(&c.stalls),
            takeovers: get(&c.takeovers),
            poll_yields: get(&c.poll_yields),
            heavy_barriers: get(&c.heavy_barriers),
            passes: get(&c.passes),
            stolen_batches: get(&c.stolen_batches),
            exit_handoffs: get(&c.exit_handoffs),
            backlog_waits: get(&c.backlog_waits),
            backlog_overruns: get(&c.backlog_overruns),
            participants: get(&c.participants),
            membarrier_failures: crate::expedite::failures(),
        }
    }
}

#[cold]
fn forked_panic() -> ! {
    panic!(
        "exitq: a Domain was used in the child of fork(); its reclaimer and the \
         parent's other threads do not exist here. Build a new Domain in the child."
    )
}

/// Locks a mutex of the domain, ignoring poisoning: every mutex guards
/// plain counters or nothing, still consistent after a panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Record {
    /// The domain this record belongs to.
    ///
    /// # Safety
    ///
    /// The record is in use (`IN_USE` or `ORPHANED`, which keep the domain
    /// alive: see `record`), or the caller otherwise knows the domain is
    /// alive.
    #[inline]
    pub(crate) unsafe fn domain(&self) -> &Inner {
        // SAFETY: the caller's contract; `inner` was set from an `Inner`
        // inside an `Arc` at claim.
        unsafe { &*self.inner.cast::<Inner>() }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.forked() {
            // fork() child: the parent runs these callbacks; running them
            // twice would be worse than leaking them.
            std::mem::forget(self.queue.take_all());
            return;
        }
        // Anything still queued (pushed by an orphaned thread after the
        // shutdown drain and not run by it) or still held in a record runs
        // now: no reader exists (every record is released).
        let mut leftover = self.queue.take_all();
        self.registry.free_all(|node| leftover.push_back(node));
        if !leftover.is_empty() {
            let ran = run_chain(self.id, leftover, drop);
            self.settle(&ran);
        }
    }
}
