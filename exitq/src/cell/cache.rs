//! [`CellCache`] and [`OptionCache`]: a reader bound to one cell that
//! keeps the value it last loaded and, while the cell still holds it,
//! hands it out again after one load and one compare: arc-swap's `Cache`,
//! with a hazard pointer (`keep.rs`) where arc-swap keeps a reference
//! count. Both are a [`Kept`] (the pointer and its slot); they differ in
//! whether the cell may be empty.
use std::fmt;

use super::keep::{Keepers, Slot};
use super::option::RcuOption;
use super::raw::Raw;
use super::RcuCell;

/// A cache of one [`RcuCell`]'s value: [`load`](CellCache::load) compares
/// the cell's pointer with the one it kept and, while they are equal,
/// returns the kept value without a read section, a quiescent state or
/// any store. Made by [`RcuCell::cache`].
///
/// The kept value stays alive until the cache's next load that finds the
/// cell changed, or its drop, whatever grace periods pass meanwhile: a
/// cache holds no grace period (a thread may keep one for ever and block;
/// `store`, `swap` and the other writes never wait for it), but a value a
/// writer replaced while a cache keeps it is dropped only after the cache
/// moves on. [`RcuCell::replace`] waits for that, as it waits for read
/// sections (see there: order caches and `replace`s as locks).
///
/// A miss, and the cache's drop, may collect values that writers left
/// for it (kept when their grace period ended) and hand them to the
/// domain's [`defer`](crate::Domain::defer). Like any `defer`, that can
/// run this thread's ready callbacks there (`Callbacks::Local`, the
/// default), values' drops among them: do not load or drop a cache while
/// holding a lock your callbacks or drops take, or build the domain with
/// [`Callbacks::Offload`](crate::Callbacks::Offload). Collecting looks
/// each such value up in every cache slot of the cell: with hundreds of
/// caches each keeping a different replaced value, one miss or drop
/// takes time in proportion to values times slots (1,000 caches of one
/// cell, each keeping its own value, dropped one by one: 4 s in all on
/// the 2-CPU VM of 2026-12-06).
///
/// A cache belongs to the thread that made it (not `Send`): the protocol
/// is arc-swap's `Cache` (a relaxed load and a compare per hit), the
/// protection a hazard pointer published at each miss with a full fence.
/// Leaking a cache (`std::mem::forget`) leaks the value it keeps, as
/// leaking an `Arc` would, and a [`RcuCell::replace`] that takes that
/// value out waits for the leaked cache for ever (on the leaking thread
/// it panics instead: a cache of this thread keeps the value).
///
/// # Examples
///
/// ```
/// let domain = exitq::Domain::new();
/// let config = exitq::RcuCell::new(&domain, String::from("v1"));
/// let mut cache = config.cache();
/// assert_eq!(cache.load(), "v1");
/// config.store(String::from("v2"));
/// assert_eq!(cache.load(), "v2"); // a miss: the cell changed
/// assert_eq!(cache.load(), "v2"); // a hit
/// ```
///
/// A loaded reference lives until the cache's next load:
///
/// ```compile_fail,E0499
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let mut cache = cell.cache();
/// let a = cache.load();
/// let b = cache.load(); // error: `cache` is already borrowed by `a`
/// assert_eq!(*a, *b);
/// ```
///
/// and a cache cannot move to another thread:
///
/// ```compile_fail,E0277
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let mut cache = cell.cache();
/// std::thread::scope(|s| {
///     s.spawn(move || *cache.load()); // error: `*mut u64` cannot be sent between threads
/// });
/// ```
pub struct CellCache<'c, T: Send + 'static> {
    kept: Kept<'c, T>,
}

/// A cache of one [`RcuOption`]'s value, as [`CellCache`] is of an
/// [`RcuCell`]'s: [`load`](OptionCache::load) returns `None` while the
/// cell is empty, and an empty cell costs the same load and compare.
/// Made by [`RcuOption::cache`].
///
/// # Examples
///
/// ```
/// let domain = exitq::Domain::new();
/// let route = exitq::RcuOption::empty(&domain);
/// let mut cache = route.cache();
/// assert_eq!(cache.load(), None);
/// route.store(Some(String::from("eth0")));
/// assert_eq!(cache.load().map(String::as_str), Some("eth0"));
/// route.take();
/// assert_eq!(cache.load(), None);
/// ```
pub struct OptionCache<'c, T: Send + 'static> {
    kept: Kept<'c, T>,
}

/// What a cache is: the cell, its slot and the pointer it reads through,
/// published in the slot (null while an `RcuOption` is empty).
struct Kept<'c, T: Send + 'static> {
    raw: &'c Raw<T>,
    keepers: &'c Keepers<T>,
    slot: &'c Slot<T>,
    /// The value this cache reads through, published in `slot`. A raw
    /// pointer: the cache belongs to this thread (`replace`'s check looks
    /// at the slot's owner), neither `Send` nor `Sync`.
    kept: *mut T,
}

impl<'c, T: Send + 'static> Kept<'c, T> {
    fn new(raw: &'c Raw<T>) -> Self {
        let keepers = raw.keepers();
        let slot = keepers.claim();
        let kept = miss(raw, keepers, slot);
        Kept {
            raw,
            keepers,
            slot,
            kept,
        }
    }

    /// The cell's current pointer, published in the slot: the kept one
    /// while the cell still holds it (a load and a compare), else the new
    /// one, kept from now on. Non-null pointers stay valid until the next
    /// call or the drop (`keep.rs`).
    #[inline]
    fn load(&mut self) -> *mut T {
        if self.raw.current() != self.kept {
            self.kept = miss(self.raw, self.keepers, self.slot);
        }
        self.kept
    }
}

impl<T: Send + Sync + 'static> RcuCell<T> {
    /// A cache of this cell for the calling thread (see [`CellCache`]):
    /// reads without a section, faster than [`load`](RcuCell::load) under
    /// any guard while the cell changes less often than it is read.
    ///
    /// Costs a slot in the cell (made once, reused by later caches) and
    /// a full fence per miss. While the cell has caches, each value a
    /// writer replaces is looked up in their slots after its grace period
    /// (one load per cache).
    pub fn cache(&self) -> CellCache<'_, T> {
        CellCache {
            kept: Kept::new(&self.raw),
        }
    }
}

impl<T: Send + Sync + 'static> CellCache<'_, T> {
    /// The cell's current value: the kept one while the cell still holds
    /// it (a load and a compare), else the new one, kept from now on.
    #[inline]
    pub fn load(&mut self) -> &T {
        let p = self.kept.load();
        // SAFETY: `p` came from the cell (never null: an `RcuCell`'s
        // pointer) and is published in our slot since before we first
        // read through it (`adopt`): no writer frees it while the slot
        // holds it (`keep.rs`), and the slot holds it until our next miss
        // or drop, which the returned borrow of `self` outlives neither.
        unsafe { &*p }
    }
}

impl<T: Send + Sync + 'static> RcuOption<T> {
    /// A cache of this cell for the calling thread (see [`OptionCache`]
    /// and [`RcuCell::cache`], whose costs it shares).
    pub fn cache(&self) -> OptionCache<'_, T> {
        OptionCache {
            kept: Kept::new(&self.raw),
        }
    }
}

impl<T: Send + Sync + 'static> OptionCache<'_, T> {
    /// The cell's current value, `None` while it is empty: the kept one
    /// while the cell still holds it (a load and a compare), else the new
    /// one, kept from now on.
    #[inline]
    pub fn load(&mut self) -> Option<&T> {
        let p = self.kept.load();
        // SAFETY: as `CellCache::load`; null is an empty cell, kept as
        // nothing to protect.
        unsafe { p.as_ref() }
    }
}

/// A miss: the value to keep from now on. Out of line, and not given the
/// cache's address, so that the hit loop can keep the cache's fields in
/// registers.
#[cold]
#[inline(never)]
fn miss<T: Send + 'static>(raw: &Raw<T>, keepers: &Keepers<T>, slot: &Slot<T>) -> *mut T {
    keepers.adopt(slot, || raw.load_acquire(), |p| raw.drop_collected(p))
}

impl<T: Send + 'static> Drop for Kept<'_, T> {
    fn drop(&mut self) {
        let raw = self.raw;
        self.keepers
            .release_slot(self.slot, |p| raw.drop_collected(p));
    }
}

impl<T: Send + Sync + fmt::Debug + 'static> fmt::Debug for CellCache<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: as `load`: the kept value is alive while the slot holds
        // it, and `&self` keeps the slot unchanged.
        let kept = unsafe { &*self.kept.kept };
        f.debug_struct("CellCache").field("kept", kept).finish()
    }
}

impl<T: Send + Sync + fmt::Debug + 'static> fmt::Debug for OptionCache<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: as `CellCache`'s `Debug`; null is an empty cell.
        let kept = unsafe { self.kept.kept.as_ref() };
        f.debug_struct("OptionCache").field("kept", &kept).finish()
    }
}
