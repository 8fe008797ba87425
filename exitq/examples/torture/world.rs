//! What every role shares: the domains under test ([`Slot`]), the
//! violation and operation counters, the per-thread random generator,
//! and [`retire`], how every object is retired.
//!
//! Each slot publishes an object twice: through a raw `AtomicPtr`
//! (`current`: retired by `defer` or after `synchronize`) and through a
//! typed [`RcuCell`] (`cell`: its value, a [`Tracked`] object, retired
//! when the cell drops it, after a grace period). Both are poisoned when
//! retired and freed one grace period later, so a reader that sees a
//! poisoned object caught a use after free before it could happen.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use exitq::{Domain, RcuCell, RcuOption};

pub(crate) const ALIVE: u64 = 0xA11E;
pub(crate) const POISONED: u64 = 0xDEAD;

/// The object readers validate and writers retire.
pub(crate) struct Obj {
    pub(crate) state: AtomicU64,
    pub(crate) generation: u64,
}

/// An object published through a slot's [`RcuCell`]: when the cell drops
/// it (a grace period after it was replaced), it is retired as
/// [`retire`] retires a raw one (poisoned, freed a grace period
/// later).
pub(crate) struct Tracked {
    /// The `Obj` (a `Box::into_raw`, as an address: `Send`).
    obj: usize,
    slot: usize,
}

impl Tracked {
    pub(crate) fn new(slot: usize, generation: u64) -> Tracked {
        Tracked {
            obj: new_obj(generation) as usize,
            slot,
        }
    }

    /// The object, valid while the cell's value is (the caller's read
    /// section, or its ownership of the value).
    pub(crate) fn obj(&self) -> *const Obj {
        self.obj as *const Obj
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        retire(self.slot, self.obj);
    }
}

/// A long-lived domain under test and what the checks need of it.
pub(crate) struct Slot {
    pub(crate) name: &'static str,
    pub(crate) domain: Domain,
    pub(crate) current: AtomicPtr<Obj>,
    /// The typed pointer (loads through guards, `Reader`s and
    /// `QsbrReader`s; `store`, `replace` and `update` by writers).
    pub(crate) cell: RcuCell<Tracked>,
    /// The typed pointer that empties and fills again: read through the
    /// cache readers' `OptionCache`s and under guards, written by them
    /// (`caches.rs`).
    pub(crate) option: RcuOption<Tracked>,
    /// Counted defers whose `defer` returned (Release after it returns).
    pub(crate) issued: AtomicU64,
    /// Counted callbacks that ran.
    pub(crate) ran: AtomicU64,
    /// Counted callbacks made to panic.
    pub(crate) panics: AtomicU64,
}

/// Violations, one counter per guarantee.
#[derive(Default)]
pub(crate) struct Violations {
    pub(crate) read_after_poison: AtomicU64,
    pub(crate) callback_twice: AtomicU64,
    pub(crate) barrier_early: AtomicU64,
    pub(crate) hook_early: AtomicU64,
    pub(crate) hook_twice: AtomicU64,
    pub(crate) hook_missing: AtomicU64,
    pub(crate) callback_missing: AtomicU64,
    pub(crate) panics_miscounted: AtomicU64,
    pub(crate) pending_left: AtomicU64,
    pub(crate) nested_barrier_returned: AtomicU64,
    pub(crate) ran_in_fork_child: AtomicU64,
    pub(crate) fork_child_failed: AtomicU64,
    pub(crate) polled_never_barrier_free: AtomicU64,
    pub(crate) never_asleep_offline: AtomicU64,
    pub(crate) never_cached: AtomicU64,
    pub(crate) hook_after_barrier: AtomicU64,
    pub(crate) payload_corrupt: AtomicU64,
    pub(crate) handoffs_not_run: AtomicU64,
    pub(crate) fork_child_panicked: AtomicU64,
}

impl Violations {
    pub(crate) fn all(&self) -> [(&'static str, u64); 19] {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            (
                "read after poison (use after free)",
                g(&self.read_after_poison),
            ),
            ("callback ran twice", g(&self.callback_twice)),
            (
                "barrier returned before an earlier callback ran",
                g(&self.barrier_early),
            ),
            (
                "exit hook ran before its thread finished",
                g(&self.hook_early),
            ),
            ("exit hook ran twice", g(&self.hook_twice)),
            ("exit hook never ran", g(&self.hook_missing)),
            ("counted callback never ran", g(&self.callback_missing)),
            ("panics not counted as panics", g(&self.panics_miscounted)),
            ("callbacks still pending at the end", g(&self.pending_left)),
            (
                "barrier nested through another domain's callback returned",
                g(&self.nested_barrier_returned),
            ),
            (
                "callback or hook ran in a fork child",
                g(&self.ran_in_fork_child),
            ),
            (
                "fork child hung or saw an entry point not refused",
                g(&self.fork_child_failed),
            ),
            (
                "unexpected panic in a fork child (an abort there, if in a destructor)",
                g(&self.fork_child_panicked),
            ),
            (
                "polled domain: no grace period completed without a heavy barrier (path not run)",
                g(&self.polled_never_barrier_free),
            ),
            (
                "streamers never slept offline in 100,000 rounds (path not run)",
                g(&self.never_asleep_offline),
            ),
            (
                "cache readers made no cache, or read none through a cell or an option cache (path not run)",
                g(&self.never_cached),
            ),
            (
                "exit hook of a joined thread not run when a later exit_barrier, barrier or its domain's drop returned",
                g(&self.hook_after_barrier),
            ),
            (
                "a deferred callback's payload was corrupt (use after free)",
                g(&self.payload_corrupt),
            ),
            (
                "hand-off waves: no thread, or in 2,000 threads no retire_thread or no domain drop (path not run)",
                g(&self.handoffs_not_run),
            ),
        ]
    }
}

/// Operation counts, for the report and the watchdog.
#[derive(Default)]
pub(crate) struct Ops {
    pub(crate) reads: AtomicU64,
    pub(crate) replaces_deferred: AtomicU64,
    pub(crate) replaces_synchronized: AtomicU64,
    pub(crate) counted_defers: AtomicU64,
    pub(crate) barriers: AtomicU64,
    pub(crate) exit_threads: AtomicU64,
    pub(crate) cancelled_threads: AtomicU64,
    pub(crate) hooks_registered: AtomicU64,
    pub(crate) hooks_ran: AtomicU64,
    /// Threads whose older pthread key's destructor used exitq.
    pub(crate) elder_key_uses: AtomicU64,
    pub(crate) churned_domains: AtomicU64,
    /// Reads of a shared domain by hooks inside an exit walk (`exits.rs`).
    pub(crate) walk_reads: AtomicU64,
    pub(crate) leaked_guards: AtomicU64,
    pub(crate) leaked_readers: AtomicU64,
    pub(crate) leaked_qsbr_readers: AtomicU64,
    pub(crate) qsbr_reads: AtomicU64,
    pub(crate) qsbr_quiescent: AtomicU64,
    pub(crate) qsbr_offline: AtomicU64,
    pub(crate) qsbr_waits: AtomicU64,
    pub(crate) qsbr_readers_made: AtomicU64,
    pub(crate) cell_writes: AtomicU64,
    pub(crate) nested_rounds: AtomicU64,
    pub(crate) nested_barriers_refused: AtomicU64,
    pub(crate) forks: AtomicU64,
    pub(crate) forks_in_callbacks: AtomicU64,
    pub(crate) streamed: AtomicU64,
    pub(crate) offline_naps: AtomicU64,
    pub(crate) caches_made: AtomicU64,
    pub(crate) cache_reads: AtomicU64,
    pub(crate) cache_naps: AtomicU64,
    pub(crate) option_reads: AtomicU64,
    pub(crate) option_empty_reads: AtomicU64,
    pub(crate) option_writes: AtomicU64,
    /// Threads of the hand-off waves (`handoffs.rs`), their
    /// `retire_thread` calls, the waves' domains dropped under exiting
    /// threads, the exit hand-offs those showed before their drop, and
    /// the barrier loopers' rounds.
    pub(crate) handoff_threads: AtomicU64,
    pub(crate) handoff_retired: AtomicU64,
    pub(crate) handoff_drops: AtomicU64,
    pub(crate) dropped_domain_handoffs: AtomicU64,
    pub(crate) handoff_barriers: AtomicU64,
}

pub(crate) struct World {
    pub(crate) slots: Vec<Slot>,
    pub(crate) stop: AtomicBool,
    pub(crate) v: Violations,
    pub(crate) ops: Ops,
    /// Per-hook run counts, to find hooks that never ran.
    pub(crate) hooks: Mutex<Vec<Arc<AtomicU32>>>,
    /// Callbacks and hooks that ran in a fork child, counted in memory
    /// shared with the children (`forker.rs`).
    pub(crate) in_child: &'static AtomicU64,
    /// Panics in fork children that the panic hook did not expect (a
    /// second refusal while unwinding, which aborts the child), counted
    /// in memory shared with the children.
    pub(crate) child_panics: &'static AtomicU64,
}

impl World {
    /// How many slots the mixed roles use: all but the last, the polled
    /// domain, which only the streamers use (`streams.rs`).
    pub(crate) fn shared(&self) -> usize {
        self.slots.len() - 1
    }
}

pub(crate) static WORLD: OnceLock<World> = OnceLock::new();

pub(crate) fn world() -> &'static World {
    WORLD.get().expect("initialised in main")
}

/// xorshift64*: a per-thread generator, seeded from the run's seed.
pub(crate) struct Rng(Cell<u64>);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(Cell::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1))
    }
    pub(crate) fn next(&self) -> u64 {
        let mut x = self.0.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&self, n: u64) -> u64 {
        self.next() % n
    }
    pub(crate) fn chance(&self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub(crate) fn inc(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// Counts callbacks that never ran (`ran < issued`) or ran twice
/// (`ran > issued`), once every one of them should have run.
pub(crate) fn count_unrun_or_twice(issued: u64, ran: u64) {
    let v = &world().v;
    if ran < issued {
        v.callback_missing
            .fetch_add(issued - ran, Ordering::Relaxed);
    }
    if ran > issued {
        v.callback_twice.fetch_add(ran - issued, Ordering::Relaxed);
    }
}

/// Set in a fork child only (`forker.rs`).
pub(crate) static IN_FORK_CHILD: AtomicBool = AtomicBool::new(false);

/// Called by every callback and hook: counts it if it runs in a fork
/// child (nothing of the parent's may run there).
#[inline]
pub(crate) fn not_in_child() {
    if IN_FORK_CHILD.load(Ordering::Relaxed) {
        world().in_child.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) fn new_obj(generation: u64) -> *mut Obj {
    Box::into_raw(Box::new(Obj {
        state: AtomicU64::new(ALIVE),
        generation,
    }))
}

/// The callback that retires `old`: poison it (it must not have been
/// poisoned already), and free it one more grace period later.
pub(crate) fn retire(slot_index: usize, old: usize) {
    not_in_child();
    let obj = old as *mut Obj;
    // SAFETY: `old` is an object unpublished before the `defer` that runs
    // us, freed only by the callback we defer below.
    let prev = unsafe { (*obj).state.swap(POISONED, Ordering::AcqRel) };
    if prev != ALIVE {
        inc(&world().v.callback_twice);
        return; // freeing twice would be worse
    }
    world().slots[slot_index].domain.defer(move || {
        not_in_child();
        // SAFETY: poisoned above, after a grace period; freed once here,
        // another grace period later.
        drop(unsafe { Box::from_raw(old as *mut Obj) });
    });
}
