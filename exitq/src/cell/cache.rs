//! [`QsbrCache`]: a reading thread's cache of the value an
//! [`RcuCell`](crate::RcuCell) held when it last loaded it, as `arc-swap`'s
//! `Cache`: a load compares the cell's pointer with the cached one and,
//! while they are equal, hands out the *cached* pointer, which the thread
//! holds already (in a register, in a loop), so what the reader does with
//! the value need not wait for the shared load: the compare is a branch the
//! processor predicts.
//!
//! # Invariant
//!
//! The cached pointer is dereferenced only when (1) it equals the pointer
//! just loaded from the cell, inside the current read section, and (2) the
//! value it was loaded from is still allocated. (1) alone is not enough:
//! a value freed after the cache took it may have its address reused by a
//! later value, and the old pointer does not give access to the new
//! allocation (its provenance is the freed one's), so equal addresses would
//! not make the read sound. (2) is what a [`QsbrReader`]'s stamp gives:
//! the cache records the reader's stamp with the pointer, and the stamp
//! changes whenever the reader stores its word (a quiescent state that
//! stores, going offline and back); while it is unchanged the reader has
//! been in one read section since the pointer was loaded, and a value
//! loaded in a section is not freed before the section ends (the grace
//! period its drop waits for started after it was taken out of the cell,
//! so it waits for the section). Stamps are never reused (by any reader),
//! so a cache used with another reader, or a later one, misses.
//!
//! With (1) and (2), the cached and the loaded pointer point to the same
//! live allocation (two live allocations never share an address), the one
//! the cell holds now: the reference is the one `load` would return.
//!
//! Only a `QsbrReader` gives (2) cheaply: a guard's section (and a
//! [`Reader`](crate::Reader)'s) ends at every drop, so a cache would miss
//! on every new section.
//!
//! # Orderings
//!
//! The load is [`RcuCell::load`](crate::RcuCell::load)'s (Acquire, pairing
//! with the writer's Release that published the pointer). On a hit, what
//! the reader reads through the cached pointer was made visible to this
//! thread by the Acquire load that first loaded it (the value is immutable
//! while shared: no `&mut T` exists while the cell is).
use std::cell::Cell;
use std::fmt;
use std::ptr;

use super::RcuCell;
use crate::qsbr::QsbrReader;

/// A cache of an [`RcuCell`]'s value for a thread that reads it under a
/// [`QsbrReader`] (`arc-swap`'s `Cache` for exitq): [`load`](QsbrCache::load)
/// returns what [`RcuCell::load`] would, but while the cell still holds the
/// value it returned last, it returns the pointer it kept rather than the
/// one it just loaded, so the reads of the value do not wait for the load
/// of the shared pointer. It pays off in tight read loops over a value that
/// changes rarely (compared with how often it is read); a reader that
/// reads the cell once per request gains nothing from it.
///
/// The cache keeps no value alive: it holds a pointer it follows only while
/// the reader it was loaded under has held its read section since (see
/// the module docs of `cell/cache.rs`), so it delays no grace period,
/// unlike arc-swap's `Cache`, which holds the value's `Arc`. Not `Send`:
/// it is a thread's, as its reader is.
///
/// # Examples
///
/// ```
/// let domain = exitq::Domain::new();
/// let config = exitq::RcuCell::new(&domain, String::from("v1"));
/// let cache = exitq::QsbrCache::new(&config);
/// let mut reader = domain.qsbr_reader();
/// for _ in 0..3 {
///     assert_eq!(cache.load(&reader), "v1"); // hits after the first
///     reader.quiescent();
/// }
/// config.store(String::from("v2"));
/// assert_eq!(cache.load(&reader), "v2"); // the cell changed: reloaded
/// ```
///
/// A reference still cannot outlive the next quiescent state:
///
/// ```compile_fail,E0502
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let cache = exitq::QsbrCache::new(&cell);
/// let mut reader = domain.qsbr_reader();
/// let value = cache.load(&reader);
/// reader.quiescent(); // error: `reader` is borrowed by `value`
/// assert_eq!(*value, 1);
/// ```
///
/// nor the cell:
///
/// ```compile_fail,E0505
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let cache = exitq::QsbrCache::new(&cell);
/// drop(cell); // error: `cell` is borrowed by `cache`
/// let reader = domain.qsbr_reader();
/// assert_eq!(*cache.load(&reader), 1);
/// ```
pub struct QsbrCache<'c, T> {
    cell: &'c RcuCell<T>,
    /// The pointer the last load returned (null before the first).
    seen: Cell<*const T>,
    /// The stamp of the reader it was loaded under (0: none; stamps start
    /// at 1).
    stamp: Cell<u64>,
}

impl<'c, T> QsbrCache<'c, T> {
    /// An empty cache of `cell` (its first load is a miss).
    pub fn new(cell: &'c RcuCell<T>) -> QsbrCache<'c, T> {
        QsbrCache {
            cell,
            seen: Cell::new(ptr::null()),
            stamp: Cell::new(0),
        }
    }

    /// The cell's current value, as [`RcuCell::load(&reader)`](RcuCell::load),
    /// for as long as `reader` is borrowed (at most until its next
    /// quiescent state).
    ///
    /// # Panics
    ///
    /// If `reader` belongs to another domain than the cell's.
    #[inline]
    pub fn load<'g>(&self, reader: &'g QsbrReader) -> &'g T
    where
        'c: 'g,
    {
        let now = self.cell.load(reader);
        let seen = self.seen.get();
        if ptr::eq(now, seen) && self.stamp.get() == reader.stamp() {
            // SAFETY: `seen` was returned by a load under `reader` while its
            // stamp was what it is now, so the reader has been in the same
            // read section since, and the value `seen` points to, loaded
            // in that section, is still allocated (module docs, (2)). It
            // is at the address the cell holds now, under the same reader
            // (`now`, checked against the cell's domain by `load`), so it
            // is that value, and lives as long as `now` does: `'g`.
            return unsafe { &*seen };
        }
        self.seen.set(now);
        self.stamp.set(reader.stamp());
        now
    }

    /// The cell this cache reads.
    pub fn cell(&self) -> &'c RcuCell<T> {
        self.cell
    }
}

impl<T> fmt::Debug for QsbrCache<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QsbrCache")
            .field("seen", &self.seen.get())
            .field("stamp", &self.stamp.get())
            .finish()
    }
}
