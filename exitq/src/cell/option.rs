//! [`RcuOption<T>`]: the typed RCU pointer that may be empty (a null
//! pointer, no allocation), as `arc-swap`'s `ArcSwapOption` beside
//! `ArcSwap`.
use std::fmt;

use super::raw::Raw;
use super::CompareExchangeError;
use crate::domain::Domain;
use crate::guard::ReadSection;

/// An RCU-protected value that may be absent: [`RcuCell`](crate::RcuCell)'s
/// operations with `Option`s (an empty cell is a null pointer: nothing is
/// allocated for it), plus [`take`](RcuOption::take).
///
/// # Examples
///
/// ```
/// use exitq::{Domain, RcuOption};
///
/// let domain = Domain::new();
/// let slot: RcuOption<String> = RcuOption::empty(&domain);
/// {
///     let guard = domain.read();
///     assert!(slot.load(&guard).is_none());
/// }
/// slot.store(Some("hello".to_owned()));
/// assert_eq!(slot.with(|s| s.map(|s| s.len())), Some(5));
/// slot.take(); // "hello" is dropped after a grace period
/// assert!(slot.with(|s| s.is_none()));
/// ```
///
/// A reference cannot outlive its guard:
///
/// ```compile_fail,E0597
/// let domain = exitq::Domain::new();
/// let slot = exitq::RcuOption::new(&domain, Some(1u64));
/// let value = {
///     let guard = domain.read();
///     slot.load(&guard) // error: `guard` does not live long enough
/// };
/// assert_eq!(value, Some(&1));
/// ```
pub struct RcuOption<T> {
    pub(super) raw: Raw<T>,
}

impl<T> RcuOption<T> {
    /// A cell of `domain` holding `value`.
    pub fn new(domain: &Domain, value: Option<T>) -> RcuOption<T> {
        RcuOption {
            raw: Raw::new(domain, value),
        }
    }

    /// An empty cell of `domain`.
    pub fn empty(domain: &Domain) -> RcuOption<T> {
        RcuOption::new(domain, None)
    }

    /// The current value, if any, for as long as `guard` and the cell are
    /// borrowed (see [`RcuCell::load`](crate::RcuCell::load)).
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the cell's.
    #[inline]
    pub fn load<'g>(&'g self, guard: &'g impl ReadSection) -> Option<&'g T> {
        self.raw.load(guard)
    }

    /// Calls `f` on the current value inside a read section of the cell's
    /// domain and returns its result.
    pub fn with<R>(&self, f: impl FnOnce(Option<&T>) -> R) -> R {
        let guard = self.raw.domain().read();
        f(self.load(&guard))
    }

    /// The value, mutably: no reader can hold it (`&mut self`).
    pub fn get_mut(&mut self) -> Option<&mut T> {
        self.raw.get_mut()
    }

    /// The value (no reader can hold it: the cell is consumed).
    pub fn into_inner(self) -> Option<T> {
        self.raw.into_inner()
    }

    /// The domain whose grace periods protect the cell's readers.
    pub fn domain(&self) -> &Domain {
        self.raw.domain()
    }
}

impl<T: Send + 'static> RcuOption<T> {
    /// Replaces the value (`None` empties the cell); the old one, if any,
    /// is dropped after a grace period.
    pub fn store(&self, value: Option<T>) {
        self.raw.store(value);
    }

    /// Empties the cell; the old value, if any, is dropped after a grace
    /// period (`store(None)`).
    pub fn take(&self) {
        self.store(None);
    }

    /// Replaces the value and returns the old one, readable for as long as
    /// `guard`; its drop is deferred past the guard's section.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the cell's.
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let slot = exitq::RcuOption::new(&domain, Some(1u32));
    /// let guard = domain.read();
    /// assert_eq!(slot.swap(None, &guard), Some(&1));
    /// assert_eq!(slot.swap(Some(2), &guard), None);
    /// ```
    pub fn swap<'g>(&'g self, value: Option<T>, guard: &'g impl ReadSection) -> Option<&'g T> {
        self.raw.swap(value, guard)
    }

    /// Replaces the value, waits for a grace period and returns the old
    /// one (see [`RcuCell::replace`](crate::RcuCell::replace)); waits too
    /// for the [`OptionCache`](crate::OptionCache)s of other threads that
    /// keep the old value.
    ///
    /// # Panics
    ///
    /// Inside a read section of the cell's domain, or while a cache of
    /// this thread keeps the current value (not `None`: an empty cell
    /// keeps nothing alive), before anything is replaced; in the child of
    /// a `fork()`.
    pub fn replace(&self, value: Option<T>) -> Option<T> {
        self.raw.replace_after_grace_period(value)
    }

    /// Stores `new` if the cell still holds `current` (an address loaded
    /// from this cell, or `None` for "still empty"). On success returns the
    /// old value (readable for as long as `guard`, its drop deferred); on
    /// failure the value the cell holds and `new`, unpublished.
    ///
    /// # Panics
    ///
    /// If `guard` belongs to another domain than the cell's.
    ///
    /// # Examples
    ///
    /// ```
    /// // Initialise once: only the first writer's value is kept.
    /// let domain = exitq::Domain::new();
    /// let slot = exitq::RcuOption::empty(&domain);
    /// let guard = domain.read();
    /// assert!(slot.compare_exchange(None, Some("first"), &guard).is_ok());
    /// let lost = slot.compare_exchange(None, Some("second"), &guard).unwrap_err();
    /// assert_eq!((lost.current, lost.new), (Some(&"first"), Some("second")));
    /// ```
    pub fn compare_exchange<'g>(
        &'g self,
        current: Option<&T>,
        new: Option<T>,
        guard: &'g impl ReadSection,
    ) -> Result<Option<&'g T>, CompareExchangeError<Option<&'g T>, Option<T>>> {
        let current = current.map_or(std::ptr::null(), |c| c as *const T);
        self.raw
            .compare_exchange(current, new, guard)
            .map_err(|(current, new)| CompareExchangeError { current, new })
    }

    /// Read-copy-update: stores `f(current)` with
    /// [`compare_exchange`](RcuOption::compare_exchange), retrying with a
    /// fresh read section when another writer got there first (see
    /// [`RcuCell::update`](crate::RcuCell::update)).
    pub fn update(&self, f: impl FnMut(Option<&T>) -> Option<T>) {
        self.raw.update(f);
    }
}

impl<T: fmt::Debug> fmt::Debug for RcuOption<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with(|v| f.debug_struct("RcuOption").field("value", &v).finish())
    }
}
