//! Entry points for the loom models in `tests/loom.rs` (only built with
//! `--cfg exitq_loom`): the protocol
//! steps the domain runs, with loom's atomics, a full fence modelled as a
//! read-modify-write of one global word (see `sync.rs`), and the membarrier
//! mode's compiler fence modelled the same way (membarrier puts a full
//! barrier there). Not part of the API.
use crate::expedite::Fences;
use crate::section;
use crate::sync::Ordering;
use crate::{epoch, handshake, past, qsbr, record};
pub use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8};

const FENCES: Fences = Fences { membarrier: true };

pub fn reader_enter(gp_ctr: &AtomicU64, ctr: &AtomicU64) {
    section::reader_enter(gp_ctr, ctr, FENCES)
}
pub fn reader_exit(ctr: &AtomicU64) -> bool {
    section::reader_exit(ctr)
}
/// The epoch word before any grace period.
pub fn initial_epoch() -> u64 {
    epoch::epoch_word(0)
}
/// A `QsbrReader` going online (its creation, the end of `offline`):
/// returns its word.
pub fn qsbr_online(gp_ctr: &AtomicU64, ctr: &AtomicU64) -> u64 {
    qsbr::quiescent_store(gp_ctr, ctr, FENCES)
}
/// `QsbrReader::quiescent`: a store only if the epoch moved on.
pub fn qsbr_quiescent(gp_ctr: &AtomicU64, ctr: &AtomicU64, word: &mut u64) {
    if qsbr::quiescent_due(gp_ctr, *word) {
        *word = qsbr::quiescent_store(gp_ctr, ctr, FENCES);
    }
}
/// `QsbrReader::offline`'s store.
pub fn qsbr_offline(ctr: &AtomicU64) {
    past::offline_reader(ctr)
}
/// A `QsbrReader` back online after `offline`: returns its word.
pub fn qsbr_back_online(gp_ctr: &AtomicU64, ctr: &AtomicU64) -> u64 {
    qsbr::back_online_word(gp_ctr, ctr, FENCES)
}
/// Runs `f` on this thread as on one that no heavy barrier reaches: the
/// membarrier mode's compiler fences in the code `f` calls order nothing
/// (`sync::no_barrier_comes`), as on the hardware when no barrier comes.
pub fn no_barrier_comes<R>(f: impl FnOnce() -> R) -> R {
    crate::sync::no_barrier_comes(f)
}
/// A membarrier-mode outermost entry when no heavy barrier makes its
/// compiler fence a hardware one: the entry's store and nothing else
/// (what a grace period completed without the barrier relies on,
/// `past.rs`).
pub fn reader_enter_unfenced(gp_ctr: &AtomicU64, ctr: &AtomicU64) {
    section::entry_store(gp_ctr, ctr);
}
/// Step 2 alone: a poll's start of grace period `g` in membarrier mode.
pub fn publish_epoch(gp_ctr: &AtomicU64, g: u64) {
    epoch::publish_epoch(gp_ctr, g)
}
/// The heavy barrier after `g`'s epoch store (`GracePeriods::ensure_barrier`).
pub fn barrier_after(gp_ctr: &AtomicU64, g: u64) {
    epoch::barrier_after(gp_ctr, g, FENCES)
}
/// `GracePeriods::snapshot`: the grace period a batch sealed now waits for.
pub fn snapshot(started: &AtomicU64) -> u64 {
    epoch::snapshot_of(started)
}
/// `GracePeriods::begin`'s claim of grace period `g` in `started`.
pub fn claim_started(started: &AtomicU64, g: u64) {
    epoch::claim_started(started, g)
}
/// The owner goes offline (`past::offline`: the reclaimer before it
/// sleeps).
pub fn offline(ctr: &AtomicU64) {
    past::offline(ctr)
}
/// ... and back online (`past::online`).
pub fn online(gp_ctr: &AtomicU64, ctr: &AtomicU64) {
    past::online(gp_ctr, ctr)
}
/// A seal's refresh of its record's idle word (`past::refresh_idle`).
pub fn refresh_idle(gp_ctr: &AtomicU64, ctr: &AtomicU64) {
    past::refresh_idle(gp_ctr, ctr)
}
/// Where a record stands against grace period `g`, read off its word
/// alone, without the registry (`past::standing` for an `IN_USE` record):
/// 0 past, 1 unsure, 2 held.
pub fn standing_word(ctr: &AtomicU64, g: u64) -> u8 {
    past::standing_word(ctr, g).0 as u8
}
pub fn start_grace_period(gp_ctr: &AtomicU64, g: u64) {
    epoch::start_grace_period(gp_ctr, g, FENCES)
}
pub fn holds_grace_period(ctr: &AtomicU64, g: u64) -> bool {
    epoch::holds_grace_period(ctr, g)
}
pub fn owner_begin(busy: &AtomicBool, steal: &AtomicU8) -> bool {
    handshake::owner_begin(busy, steal, FENCES)
}
pub fn owner_end(busy: &AtomicBool) {
    handshake::owner_end(busy)
}
pub fn wait_for_stealer(steal: &AtomicU8) {
    handshake::wait_for_stealer(steal)
}
/// One whole owner section around `f` (`Record::with_local`'s loop).
pub fn owner_section<R>(busy: &AtomicBool, steal: &AtomicU8, f: impl FnOnce() -> R) -> R {
    handshake::owner_section(busy, steal, FENCES, f)
}
pub fn stealer_mark(steal: &AtomicU8) {
    handshake::stealer_mark(steal)
}
pub fn stealer_wait(busy: &AtomicBool) {
    handshake::stealer_wait(busy)
}
/// `None`: the word is clear again; `Some(release)`: the owner left its
/// exit to the stealer (`handshake::Done::Left`).
pub fn stealer_done(steal: &AtomicU8) -> Option<bool> {
    match handshake::stealer_done(steal) {
        handshake::Done::Cleared => None,
        handshake::Done::Left { release } => Some(release),
    }
}
/// An exiting owner's hand-off (`exit::hand_off`'s CAS): true if handed.
pub fn owner_hand_off(steal: &AtomicU8, release: bool) -> bool {
    handshake::owner_hand_off(steal, release)
}
/// The stealer's clear after finishing a hand-off.
pub fn stealer_finish(steal: &AtomicU8) {
    handshake::stealer_finish(steal)
}
/// Whether a hand-off is still being finished (a kept record's release
/// waits for it: `exit::release_main`).
pub fn hand_off_pending(steal: &AtomicU8) -> bool {
    handshake::hand_off_pending(steal)
}
/// A kept record's release: waits for the hand-off to finish.
pub fn wait_hand_off(steal: &AtomicU8) {
    handshake::wait_hand_off(steal)
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

pub use crate::wake::{Asleep, Wake, Watch, FIRST};
/// The reclaimer falling asleep (`wake::fall_asleep`): `look` is its look
/// at what it watches (SeqCst loads in the domain).
pub fn fall_asleep(sleeping: &AtomicU32, recent: bool, look: impl Fn() -> Watch) -> Asleep {
    crate::wake::fall_asleep(sleeping, recent, look)
}
/// A publisher's claim of the reclaimer's wake-up (`wake::claim`), after
/// its change (a SeqCst read-modify-write in the domain): true if it
/// rings the doorbell.
pub fn wake_claim(sleeping: &AtomicU32, wake: Wake) -> bool {
    crate::wake::claim(sleeping, wake)
}
/// The reclaimer's state word before it first sleeps (`AWAKE`).
pub fn awake_word() -> u32 {
    crate::wake::AWAKE
}

pub use crate::llist::{Chain, List, Node};

/// Callbacks per drain tick (`drain::TICK`).
pub const TICK: usize = crate::drain::TICK;

/// A domain's registry of records (`record::Registry`), for the model
/// of a record's life.
#[allow(missing_debug_implementations)]
pub struct Records(record::Registry);

/// One record of a [`Records`], as its owner or a grace period uses it.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct Rec<'a>(&'a record::Record);

impl Records {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Records {
        Records(record::Registry::new())
    }
    /// A main record for the calling thread, as `Registry::claim`
    /// gives it (a free one reused and reset, else a new one).
    pub fn claim(&self) -> Rec<'_> {
        Rec(self.0.claim(std::ptr::null(), 1, record::Kind::Main).0)
    }
    /// The record claimed first (the registry lists the newest first).
    pub fn oldest(&self) -> Rec<'_> {
        Rec(self.0.iter().last().expect("a record was claimed"))
    }
    /// How many records the registry holds.
    pub fn count(&self) -> usize {
        self.0.iter().count()
    }
    /// A poll's scan for grace period `g` (`past::scan`): 0 past, 1
    /// unsure, 2 held.
    pub fn scan(&self, g: u64, barriered: bool) -> u8 {
        match past::scan(&self.0, g, barriered) {
            past::Scan::Past => 0,
            past::Scan::Unsure(..) => 1,
            past::Scan::Held => 2,
        }
    }
}

impl Drop for Records {
    fn drop(&mut self) {
        self.0.free_all(drop);
    }
}

impl Rec<'_> {
    /// Enters a read section on the record (`Domain::read`).
    pub fn enter(self, gp_ctr: &AtomicU64) {
        section::reader_enter(gp_ctr, &self.0.ctr, FENCES)
    }
    /// A `Domain::read` guard's drop.
    pub fn exit(self) {
        crate::guard::end_section(self.0)
    }
    /// The owner's exit destructor after the hand-over of its work
    /// (`exit::retire`): the record is kept for a live guard, or
    /// released. True if released.
    pub fn retire(self) -> bool {
        match crate::exit::keep_or_release(self.0) {
            crate::exit::Retired::Kept => false,
            crate::exit::Retired::Released(orphan) => {
                assert!(orphan.is_none(), "no shutdown in the model");
                true
            }
        }
    }
    /// What a grace-period leader does while the record holds grace
    /// period `g`, after its first milliseconds: `alive` answers
    /// whether a thread still exists.
    pub fn release_leaked(self, alive: impl FnOnce(i32) -> bool) -> bool {
        self.0.release_leaked_with(alive)
    }
    pub fn holds(self, g: u64) -> bool {
        epoch::holds_grace_period(&self.0.ctr, g)
    }
    /// An outermost entry with no hardware fence (`reader_enter_unfenced`).
    pub fn enter_unfenced(self, gp_ctr: &AtomicU64) {
        section::entry_store(gp_ctr, &self.0.ctr);
    }
    /// The owner gives the record back (a `Reader` dropped).
    pub fn release(self) {
        self.0.release()
    }
    /// The record's reader word.
    pub fn word(self) -> u64 {
        self.0.ctr.load(Ordering::Relaxed)
    }
    /// Whether the record is `IN_USE` (Acquire, as a claim's CAS).
    pub fn in_use(self) -> bool {
        self.0.state.load(Ordering::Acquire) == record::IN_USE
    }
    pub fn same(self, other: Rec<'_>) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

/// A domain's queue for the exit hand-off models: every item is a closure
/// (an exit hook, or one standing for a batch of callbacks).
#[allow(missing_debug_implementations)]
pub struct Queue(crate::llist::List<crate::batch::Work>);

impl Queue {
    #[allow(clippy::new_without_default)]
    pub fn new() -> Queue {
        Queue(crate::llist::List::new())
    }
    /// Takes everything queued and runs it, in order (a batch from its
    /// drain cursor on, `Batch::run`, as a pass does); returns how many
    /// items (closures and batches).
    pub fn run_all(&self) -> usize {
        let mut n = 0;
        for node in record::ChainNodes(self.0.take_all()) {
            match node.value {
                crate::batch::Work::Exit(f) => f(),
                crate::batch::Work::Batch(mut b) => {
                    let (_, panicked) = b.run(|| false);
                    assert_eq!(panicked, 0, "the model's callbacks do not panic");
                }
            }
            n += 1;
        }
        n
    }
}

/// An item of the models' queue.
fn item(f: impl FnOnce() + Send + 'static) -> Box<Node<crate::batch::Work>> {
    Node::new(crate::batch::Work::Exit(Box::new(f)))
}

impl Rec<'_> {
    /// The owner seals a batch holding `f` (one owner section).
    pub fn defer(self, f: impl FnOnce() + Send + 'static) {
        let node = item(f);
        self.0
            .with_local(FENCES, move |local| local.sealed.push_back(node));
    }
    /// The owner registers an exit hook (`exit::register`).
    pub fn register_exit(self, f: impl FnOnce() + Send + 'static) {
        // SAFETY: `exits` is owner-only, and the model's caller owns `self`.
        unsafe { (*self.0.exits.get()).push_front(item(f)) }
    }
    /// The owner thread's exit (`exit::retire`, onto `queue`): true if the
    /// record was released (by the owner, or by the stealer it handed its
    /// exit off to); false if kept for the live guard.
    pub fn exit_thread(self, queue: &Queue) -> bool {
        // SAFETY: the model calls it once, from the owner thread, outside
        // any run.
        match unsafe { crate::exit::retire_with(self.0, FENCES, |w| queue.0.push_chain(w)) } {
            crate::exit::Retired::Kept => false,
            crate::exit::Retired::Released(orphan) => {
                assert!(orphan.is_none(), "no shutdown in the model");
                true
            }
        }
    }
    /// One stealer's steal of this record (`reclaim::steal_locked` for
    /// one record; the caller holds the model's steal lock): marks, the
    /// heavy barrier, then the real per-record step
    /// (`reclaim::steal_marked`: waits for the owner, takes every batch
    /// if `take` (`barrier`) or none (an idle steal that finds the owner
    /// active), finishes a hand-off if the owner left its exit
    /// meanwhile), pushes onto `queue`, and releases the record if asked.
    /// `between` runs after the barrier, before the wait (a stealer held
    /// up there). Returns whether it finished a hand-off.
    pub fn steal(self, queue: &Queue, take: bool, between: impl FnOnce()) -> bool {
        let (handed, running) = self.steal_seeing_runs(queue, take, between);
        assert!(running.is_none(), "the model's owner runs nothing");
        handed
    }
    /// [`steal`](Rec::steal), also returning the owner's run it saw in
    /// progress (`run_seq` odd: a drain tick's callbacks taken, not yet
    /// run), which a `barrier` waits for after its pass
    /// ([`wait_run`](Rec::wait_run)).
    pub fn steal_seeing_runs(
        self,
        queue: &Queue,
        take: bool,
        between: impl FnOnce(),
    ) -> (bool, Option<u64>) {
        let r = self.0;
        handshake::stealer_mark(&r.steal);
        FENCES.heavy();
        between();
        // `reclaim::steal_locked`'s step for one record, the same code:
        // `Steal::All` takes the sealed queue (the model's owner defers
        // there); `Steal::Idle(0)` finds every hint fresh and takes
        // nothing.
        let which = if take {
            crate::reclaim::Steal::All
        } else {
            crate::reclaim::Steal::Idle(0)
        };
        let mut taken = crate::llist::Chain::new();
        let stole = crate::reclaim::steal_marked(r, which, &mut taken, &|node| node);
        queue.0.push_chain(taken);
        if stole.handed == Some(true) {
            assert!(crate::exit::release_main(r).is_none(), "no shutdown");
        }
        (stole.handed.is_some(), stole.running)
    }
    /// A `barrier`'s wait, after its pass, for the owner's run it saw in
    /// progress (`reclaim::wait_runs` for this record).
    pub fn wait_run(self, seen: Option<u64>) {
        if let Some(s) = seen {
            handshake::run_wait(&self.0.run_seq, s);
        }
    }
    /// The owner's ready batch holding `fs`, written by the real batch
    /// code in one owner section: a batch opened for `fs.len()`
    /// callbacks, each pushed as `defer` pushes it (a new run for the
    /// first), sealed, on the record's ready queue (its grace period
    /// passed, as `promote` leaves it), the next drain tick armed.
    pub fn ready_batch<F: FnOnce() + Send + 'static>(self, fs: Vec<F>) {
        let n = fs.len();
        let node = Node::new(crate::batch::Work::Batch(crate::batch::Batch::new(n)));
        self.0.with_local(FENCES, move |local| {
            local.open.open(node, n, false);
            for f in fs {
                if let Err(f) = local.open.try_push_fn(f) {
                    let pushed = local.open.push_new_run(crate::batch::Deferred::new(f));
                    assert!(pushed.is_ok(), "the batch has room for every callback");
                }
            }
            let sealed = local.open.take().expect("the batch is open");
            local.ready.push_back(sealed);
            crate::drain::arm(local);
        });
    }
    /// The owner's drain tick as `local::slow_visit` runs it: the real
    /// `drain::take` inside an owner section (up to `drain::TICK`
    /// callbacks of the ready queue moved out, `run_seq` made odd if it
    /// took any), then `drain::run_with` after the section (they run
    /// where they lie, the emptied batch's node is dropped, `run_seq`
    /// even again). Returns whether the tick took anything.
    pub fn drain_tick(self) -> bool {
        let r = self.0;
        let mut drain = crate::drain::Drain::default();
        r.with_local(FENCES, |local| crate::drain::take(r, local, &mut drain));
        let took = !drain.is_empty();
        crate::drain::run_with(0, r, &mut drain, drop, |ran| {
            assert_eq!(ran.panicked, 0, "the model's callbacks do not panic")
        });
        took
    }
}

/// A cell's caches' slots and parked values (`cell/keep.rs`), over values
/// of type `T` the model allocates and frees itself.
#[allow(missing_debug_implementations)]
pub struct CacheKeepers<T>(crate::cell::keep::Keepers<T>);

/// One cache's slot of a [`CacheKeepers`].
#[allow(missing_debug_implementations)]
pub struct CacheSlot<'a, T>(&'a crate::cell::keep::Slot<T>);

impl<T> Clone for CacheSlot<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for CacheSlot<'_, T> {}

impl<T> CacheKeepers<T> {
    #[allow(clippy::new_without_default)]
    pub fn new() -> CacheKeepers<T> {
        CacheKeepers(crate::cell::keep::Keepers::new())
    }
    /// `RcuCell::cache`'s claim of a slot.
    pub fn claim(&self) -> CacheSlot<'_, T> {
        CacheSlot(self.0.claim())
    }
    /// A cache's miss: the value to read through from now on; `load` is
    /// the cell's Acquire load, `free` what a collect frees.
    pub fn adopt(
        &self,
        slot: CacheSlot<'_, T>,
        load: impl Fn() -> *mut T,
        free: impl FnMut(*mut T),
    ) -> *mut T {
        self.0.adopt(slot.0, load, free)
    }
    /// A cache's drop.
    pub fn release_slot(&self, slot: CacheSlot<'_, T>, free: impl FnMut(*mut T)) {
        self.0.release_slot(slot.0, free)
    }
    /// `replace`'s check: whether a cache of this thread keeps `value`.
    pub fn kept_here(&self, value: *mut T) -> bool {
        self.0.kept_here(value)
    }
    /// The callback of a value taken out of the cell, after its grace
    /// period.
    pub fn release_or_park(&self, value: *mut T, free: impl FnMut(*mut T)) {
        self.0.release_or_park(value, free)
    }
    /// The same callback inside run `run` (not 0) of callbacks, `last`
    /// the thread's last look at the slots (one look per run and cell).
    pub fn release_or_park_in(
        &self,
        value: *mut T,
        run: u64,
        last: &mut CacheLook,
        free: impl FnMut(*mut T),
    ) {
        self.0.release_or_park_in(value, run, &mut last.0, free)
    }
}

/// A thread's last look at a [`CacheKeepers`]' slots (`keep.rs`).
#[allow(missing_debug_implementations)]
pub struct CacheLook(crate::cell::keep::Look);

impl CacheLook {
    #[allow(clippy::new_without_default)]
    pub fn new() -> CacheLook {
        CacheLook(crate::cell::keep::Look::new())
    }
}

/// A writer's SeqCst swap of a cell's pointer followed by its SeqCst load
/// of the cell's `keepers` (`cell/raw.rs`), as loom can check it: loom
/// treats SeqCst as AcqRel, so the pair is modelled as the swap, a full
/// fence (`sync.rs`) and the load. Returns the old pointer and whether
/// the cell has caches.
pub fn swap_then_find_caches<T>(
    cell: &loom::sync::atomic::AtomicPtr<T>,
    new: *mut T,
    has_caches: &AtomicBool,
) -> (*mut T, bool) {
    let old = cell.swap(new, Ordering::AcqRel);
    crate::sync::full_fence();
    (old, has_caches.load(Ordering::Acquire))
}

/// A cache's publication of the cell's `keepers` before its first
/// adoption (`Raw::keepers`: a SeqCst CAS, modelled as a Release store;
/// the adoption's full fence follows).
pub fn publish_caches(has_caches: &AtomicBool) {
    has_caches.store(true, Ordering::Release);
}
