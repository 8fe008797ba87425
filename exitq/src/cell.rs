//! Typed RCU pointers: [`RcuCell<T>`] (always holds a value) and
//! [`RcuOption<T>`](crate::RcuOption) (may be empty), cells that own a
//! boxed `T`, hand readers a `&T` that lives as long as their read guard,
//! and defer the drop of every value a writer replaces until after a grace
//! period.
//!
//! # Mapping to the references
//!
//! | liburcu | crossbeam-epoch | exitq |
//! |---|---|---|
//! | `rcu_dereference(p)` | `Atomic::load(ord, &guard) -> Shared<'g, T>` | [`load(&guard) -> &'g T`](RcuCell::load) |
//! | `rcu_assign_pointer(p, v)` + `call_rcu(free)` | `Atomic::swap` + `Guard::defer_destroy` (unsafe) | [`store(v)`](RcuCell::store) |
//! | `rcu_xchg_pointer(p, v)` | `Atomic::swap(v, ord, &guard) -> Shared<'g, T>` | [`swap(v, &guard) -> &'g T`](RcuCell::swap) (old value readable under the guard, drop deferred) |
//! | `rcu_xchg_pointer` + `synchronize_rcu()` | - | [`replace(v) -> T`](RcuCell::replace) (waits a grace period, gives the old value back) |
//! | `rcu_cmpxchg_pointer(p, old, v)` | `Atomic::compare_exchange` | [`compare_exchange(&current, v, &guard)`](RcuCell::compare_exchange), [`update(f)`](RcuCell::update) |
//! | `NULL` | `Shared::null()`, `as_ref() -> Option<&T>` | [`RcuOption<T>`](crate::RcuOption): `load -> Option<&'g T>` |
//! | - (arc-swap's `Cache`) | - | [`cache() -> CellCache`](RcuCell::cache): [`load(&mut self) -> &T`](CellCache::load), no section (the kept value is protected by a hazard pointer); [`RcuOption::cache`](crate::RcuOption::cache) `-> OptionCache`: `load(&mut self) -> Option<&T>` |
//!
//! Unlike crossbeam-epoch's `Atomic<T>`, a cell owns its value (dropping
//! the cell drops it, as `arc-swap`'s `ArcSwap` does) and every operation
//! is safe: no raw or `Shared` pointer reaches user code, so there is
//! nothing to `defer_destroy` by hand. Emptiness is a type, as in
//! `arc-swap` (`ArcSwap` / `ArcSwapOption`): an [`RcuCell`] is never
//! empty and its readers never test for null; an
//! [`RcuOption`] is, with no allocation for "empty".
//!
//! # What the compiler enforces
//!
//! * A loaded `&'g T` borrows both the guard and the cell: it cannot
//!   outlive the read section, nor the cell (which drops its value when
//!   dropped).
//! * Writers need `T: Send + 'static` (the old value is dropped later, on
//!   whichever thread runs the callback); sharing a cell between threads
//!   needs `T: Sync` (readers on every thread get `&T`).
//! * [`get_mut`](RcuCell::get_mut) and [`into_inner`](RcuCell::into_inner)
//!   need `&mut self` or `self`: no reader can hold a reference then.
//!
//! What it cannot enforce is that the guard belongs to the cell's domain (a
//! guard of another domain does not hold off this cell's drops): that is
//! one comparison of two addresses per access, and a mismatch panics.
//!
//! Compare-and-swap compares addresses: `current` must be a reference
//! loaded from the cell to succeed. While any reference to a value is
//! alive its address cannot be reused (the value is not freed before the
//! guard ends), so there is no ABA. Zero-sized values too: each gets a
//! byte of its own (`boxed.rs`), so a reference to another zero-sized
//! value, or to one the cell held before, fails the compare.
//!
//! A [`CellCache`] reads one cell the way arc-swap's `Cache` does: it
//! keeps the value it loaded last and, while the cell's pointer still
//! equals it, returns it after one load and one compare, with no section
//! and no announcement. Its protection is a hazard pointer (one slot per
//! cache, published with a full fence at each miss): a value replaced
//! while a cache keeps it is dropped after its grace period *and* after
//! the cache moves on; `replace` waits for that too. An [`OptionCache`]
//! is the same for an [`RcuOption`] (an empty cell is
//! kept as a null pointer, nothing to protect). The handshakes and their
//! proof are in `cell/keep.rs`.
//!
//! The unsafe core shared by both cells, with its ownership and ordering
//! rules, is in `cell/raw.rs`.
use std::fmt;

use crate::domain::Domain;
use crate::guard::ReadSection;

mod boxed;
mod cache;
pub(crate) mod keep;
mod option;
mod raw;

pub use cache::{CellCache, OptionCache};
pub use option::RcuOption;
use raw::Raw;

/// An RCU-protected value that is always present: readers
/// [`load`](RcuCell::load) a `&T` under a read guard of the cell's domain;
/// writers [`store`](RcuCell::store), [`swap`](RcuCell::swap),
/// [`replace`](RcuCell::replace) or
/// [`compare_exchange`](RcuCell::compare_exchange) it, and the value they
/// replace is dropped after a grace period (see the [module
/// docs](crate::cell) for how this maps to liburcu and crossbeam-epoch).
///
/// The cell keeps a handle of its domain (so the domain lives at least as
/// long as the cell). Reading costs the guard, one comparison (the guard's
/// domain against the cell's), an Acquire load and the dereference.
///
/// # Examples
///
/// ```
/// use exitq::{Domain, RcuCell};
///
/// #[derive(Debug)]
/// struct Config { verbose: bool, name: String }
///
/// let domain = Domain::new();
/// let config = RcuCell::new(&domain, Config { verbose: false, name: "a".into() });
///
/// // A reader: the reference lives as long as the guard.
/// {
///     let guard = domain.read();
///     let c: &Config = config.load(&guard);
///     assert!(!c.verbose);
/// }
///
/// // A writer: the old value is dropped after every reader that could see
/// // it has left.
/// config.store(Config { verbose: true, name: "b".into() });
/// assert_eq!(config.with(|c| c.name.clone()), "b");
///
/// // Read-copy-update with a compare-and-swap loop.
/// config.update(|c| Config { verbose: !c.verbose, name: c.name.clone() });
/// assert!(!config.with(|c| c.verbose));
/// domain.barrier(); // both replaced values have been dropped
/// ```
///
/// A reference cannot outlive its guard:
///
/// ```compile_fail,E0597
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let value = {
///     let guard = domain.read();
///     cell.load(&guard) // error: `guard` does not live long enough
/// };
/// assert_eq!(*value, 1);
/// ```
///
/// nor its [`Reader`](crate::Reader)'s guard:
///
/// ```compile_fail,E0505
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let mut reader = domain.reader();
/// let guard = reader.read();
/// let value = cell.load(&guard);
/// drop(guard); // error: cannot move out of `guard` because it is borrowed
/// assert_eq!(*value, 1);
/// ```
///
/// nor the cell:
///
/// ```compile_fail,E0505
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let guard = domain.read();
/// let value = cell.load(&guard);
/// drop(cell); // error: cannot move out of `cell` because it is borrowed
/// assert_eq!(*value, 1);
/// ```
///
/// and a value that cannot move to another thread cannot be replaced (its
/// drop would run elsewhere):
///
/// ```compile_fail,E0599
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, std::rc::Rc::new(1));
/// cell.store(std::rc::Rc::new(2)); // error: `store` needs `Rc<i32>: Send`
/// ```
///
/// nor can a value that cannot be shared be read from other threads:
///
/// ```compile_fail,E0277
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, std::cell::Cell::new(1));
/// std::thread::scope(|s| {
///     s.spawn(|| cell.with(|c| c.get())); // error: `Cell<i32>` cannot be shared between threads
/// });
/// ```
pub struct RcuCell<T> {
    /// Never null (every constructor and writer stores a box).
    raw: Raw<T>,
}

/// A failed [`compare_exchange`](RcuCell::compare_exchange): the value the
/// cell holds, and the new value, given back unpublished.
#[derive(Debug)]
pub struct CompareExchangeError<C, N> {
    /// What the cell holds (readable as long as the guard).
    pub current: C,
    /// The value that was not stored.
    pub new: N,
}

/// An `RcuCell`'s pointer as a reference: never null.
#[inline(always)]
fn present<T>(value: Option<&T>) -> &T {
    match value {
        Some(v) => v,
        // SAFETY: an `RcuCell`'s pointer is never null: `new` and every
        // writer store a box, and only `into_inner` (which consumes the
        // cell) takes it out.
        None => unsafe { std::hint::unreachable_unchecked() },
    }
}

impl<T> RcuCell<T> {
    /// A cell of `domain` holding `value`.
    pub fn new(domain: &Domain, value: T) -> RcuCell<T> {
        RcuCell {
            raw: Raw::new(domain, Some(value)),
        }
    }

    /// The current value (liburcu's `rcu_dereference`), for as long as
    /// `guard` (a [`Guard`](crate::Guard), a
    /// [`ReaderGuard`](crate::ReaderGuard) or a
    /// [`QsbrReader`](crate::QsbrReader)) and the cell are borrowed.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the cell's.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let cell = exitq::RcuCell::new(&domain, [1u8, 2, 3]);
    /// let mut reader = domain.reader();
    /// let guard = reader.read();
    /// assert_eq!(cell.load(&guard)[2], 3);
    /// ```
    #[inline]
    pub fn load<'g>(&'g self, guard: &'g impl ReadSection) -> &'g T {
        present(self.raw.load(guard))
    }

    /// Calls `f` on the current value inside a read section of the cell's
    /// domain ([`Domain::read`]) and returns its result.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        let guard = self.raw.domain().read();
        f(self.load(&guard))
    }

    /// The value, mutably: no reader can hold it (`&mut self`).
    pub fn get_mut(&mut self) -> &mut T {
        match self.raw.get_mut() {
            Some(v) => v,
            None => unreachable!("an RcuCell is never empty"),
        }
    }

    /// The value (no reader can hold it: the cell is consumed).
    pub fn into_inner(self) -> T {
        match self.raw.into_inner() {
            Some(v) => v,
            None => unreachable!("an RcuCell is never empty"),
        }
    }

    /// The domain whose grace periods protect the cell's readers.
    pub fn domain(&self) -> &Domain {
        self.raw.domain()
    }
}

impl<T: Send + 'static> RcuCell<T> {
    /// Replaces the value (liburcu's `rcu_assign_pointer`); the old one is
    /// dropped after a grace period ([`Domain::defer`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let cell = exitq::RcuCell::new(&domain, String::from("old"));
    /// cell.store(String::from("new"));
    /// assert_eq!(cell.with(|s| s.clone()), "new");
    /// ```
    pub fn store(&self, value: T) {
        self.raw.store(Some(value));
    }

    /// Replaces the value and returns the old one (liburcu's
    /// `rcu_xchg_pointer`), readable for as long as `guard`; its drop is
    /// deferred past the guard's section.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the cell's.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let cell = exitq::RcuCell::new(&domain, 1u32);
    /// let guard = domain.read();
    /// let old = cell.swap(2, &guard);
    /// assert_eq!((*old, *cell.load(&guard)), (1, 2));
    /// ```
    pub fn swap<'g>(&'g self, value: T, guard: &'g impl ReadSection) -> &'g T {
        present(self.raw.swap(Some(value), guard))
    }

    /// Replaces the value, waits for a grace period
    /// ([`Domain::synchronize`]) and returns the old value: no reader can
    /// hold it any more. Costs a grace period; prefer
    /// [`store`](RcuCell::store) unless the old value is wanted back.
    /// A [`CellCache`] that keeps the old value is a reader too: `replace`
    /// also waits for the caches of other threads that keep it to load
    /// again (or drop). So order caches and `replace`s as you would locks:
    /// a thread that keeps a cache of cell X while it replaces Y's value,
    /// beside one that keeps a cache of Y while it replaces X's, waits for
    /// the other for ever (each `replace` reports the stall, `HeldBy::Cache`,
    /// and waits on). Load or drop the cache before such a `replace`.
    ///
    /// # Panics
    ///
    /// Inside a read section of the cell's domain, or while a cache of
    /// this thread keeps the current value (waiting would deadlock),
    /// before anything is replaced; in the child of a `fork()`.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let cell = exitq::RcuCell::new(&domain, vec![1, 2]);
    /// let mut old = cell.replace(Vec::new());
    /// old.push(3); // ours alone
    /// assert_eq!(old, [1, 2, 3]);
    /// ```
    pub fn replace(&self, value: T) -> T {
        match self.raw.replace_after_grace_period(Some(value)) {
            Some(v) => v,
            None => unreachable!("an RcuCell is never empty"),
        }
    }

    /// Stores `new` if the cell still holds `current` (compared by address:
    /// a reference loaded from this cell), as liburcu's
    /// `rcu_cmpxchg_pointer`. On success returns the old value (readable
    /// for as long as `guard`, its drop deferred); on failure the value
    /// the cell holds and `new`, unpublished.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the cell's.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let cell = exitq::RcuCell::new(&domain, 1u32);
    /// let guard = domain.read();
    /// let seen = cell.load(&guard);
    /// assert!(cell.compare_exchange(seen, *seen + 1, &guard).is_ok());
    /// // `seen` is no longer the current value:
    /// let err = cell.compare_exchange(seen, 10, &guard).unwrap_err();
    /// assert_eq!((*err.current, err.new), (2, 10));
    /// ```
    pub fn compare_exchange<'g>(
        &'g self,
        current: &T,
        new: T,
        guard: &'g impl ReadSection,
    ) -> Result<&'g T, CompareExchangeError<&'g T, T>> {
        self.raw
            .compare_exchange(current, Some(new), guard)
            .map(present)
            .map_err(|(current, new)| CompareExchangeError {
                current: present(current),
                new: new.expect("given back as it was passed"),
            })
    }

    /// Read-copy-update: computes a new value from the current one and
    /// stores it with [`compare_exchange`](RcuCell::compare_exchange),
    /// retrying (with a fresh read section and `f` called again) when
    /// another writer got there first. The replaced value is dropped after
    /// a grace period; a value that lost the race is dropped at once
    /// (outside the read section).
    pub fn update(&self, mut f: impl FnMut(&T) -> T) {
        self.raw.update(|current| Some(f(present(current))));
    }
}

impl<T: fmt::Debug> fmt::Debug for RcuCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with(|v| f.debug_struct("RcuCell").field("value", v).finish())
    }
}
