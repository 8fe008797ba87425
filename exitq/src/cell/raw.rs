//! The pointer both typed cells are built on: an `AtomicPtr<T>` that owns
//! the boxed `T` it points to (or nothing, when null), and the domain that
//! protects its readers. All of the cells' `unsafe` is here.
//!
//! # Ownership
//!
//! The pointer, when not null, came from [`boxed::into_raw`] (a `Box`, or
//! for a zero-sized `T` a byte of its own: caches tell values apart by
//! address) and is owned by the cell. A writer that takes it out of the cell (swap, CAS) owns it
//! from then on: it either defers its drop to the domain ([`Raw::retire`]:
//! the box is rebuilt and dropped by the callback, after a grace period)
//! or waits for a grace period itself ([`Raw::replace_after_grace_period`])
//! before rebuilding the box. No `Box` exists while readers may hold a
//! reference into it: a `Box` asserts unique access.
//!
//! # Orderings
//!
//! * Readers load with Acquire: pairs with the Release half of the swap or
//!   CAS that published the pointer, so the `T` it points to is seen
//!   initialised (liburcu's `rcu_dereference` against `rcu_assign_pointer`).
//! * Writers swap and CAS with SeqCst, for its AcqRel half: Release
//!   publishes the new box's contents to those loads; Acquire pairs with
//!   the Release of the write that published the old pointer, so this
//!   thread may read the old value (the reference `swap` returns) and the
//!   deferred drop it hands to the domain happens-after the old value's
//!   initialisation (the domain's callback machinery orders `defer` before
//!   the callback). SeqCst, with the SeqCst load of `keepers` after it:
//!   a cache that kept the old value published `keepers` before its
//!   adoption's full fence, and that fence precedes the swap in the single
//!   order of SeqCst operations (`keep.rs`), so the writer finds the
//!   caches. On x86-64 a SeqCst swap is the same `xchg` as an AcqRel one.
//! * A failed CAS loads with Acquire, for the same reason as a reader.
//!
//! # Caches
//!
//! `keepers` is null until the cell's first [`CellCache`](crate::CellCache);
//! then an `Arc<Keepers<T>>` (its raw pointer) the cell holds until it
//! drops, and every callback of a value retired since holds a clone of:
//! such a value is freed after its grace period only if no cache keeps it
//! (`keep.rs`), and `replace` waits for the caches that keep it.
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use super::boxed;
use super::keep::Keepers;
use crate::domain::Domain;
use crate::guard::{self, ReadSection};

/// An owning, possibly null, RCU-protected pointer (see the module docs).
pub(crate) struct Raw<T> {
    ptr: AtomicPtr<T>,
    /// The domain's key (`guard::key`), next to `ptr`: a read compares it
    /// with its guard's, from the line it loads the pointer from.
    key: *const (),
    domain: Domain,
    /// Null until the first cache; then an `Arc`'s raw pointer, owned by
    /// the cell (module docs: Caches).
    keepers: AtomicPtr<Keepers<T>>,
    /// The cell owns a `T` (drop check).
    _owns: PhantomData<Box<T>>,
}

// SAFETY: `key` is only compared, never followed; `ptr` and `domain` are
// `Send`, and `keepers` is an `Arc<Keepers<T>>`, `Send` and `Sync` for
// `T: Send`. Sending the cell sends the `T` it owns (`T: Send`).
unsafe impl<T: Send> Send for Raw<T> {}
// SAFETY: `key` is only compared; a shared cell hands `&T` to every thread
// that loads it (`T: Sync`). Writers, which move values in from any thread
// and drop old ones on another, require `T: Send` on their own, and so do
// caches, the only users of `keepers` on a shared cell.
unsafe impl<T: Sync> Sync for Raw<T> {}

/// A pointer taken out of its cell, owning its `T`, on its way to the drop
/// the domain runs after a grace period.
struct Retired<T>(*mut T);

// SAFETY: a `Retired` owns the `T` it points to (it was taken out of its
// cell, no one else frees it); sending it sends the `T`.
unsafe impl<T: Send> Send for Retired<T> {}

impl<T> Retired<T> {
    /// The pointer (called inside a closure, so that the closure captures
    /// the `Retired`, which is `Send`, not its field).
    fn into_raw(self) -> *mut T {
        self.0
    }

    /// Drops the value.
    ///
    /// # Safety
    ///
    /// No reference to the value remains (a grace period has passed since
    /// it was unpublished).
    unsafe fn drop_now(self) {
        // SAFETY: the pointer came from `boxed::into_raw` and is owned by
        // `self` (module docs); the caller guarantees no reader is left.
        unsafe { boxed::drop_raw(self.0) };
    }
}

/// Boxes a value for a cell (null for `None`). Called only once nothing
/// can panic before the box is published or given back.
fn into_raw<T>(value: Option<T>) -> *mut T {
    value.map_or(ptr::null_mut(), boxed::into_raw)
}

impl<T> Raw<T> {
    pub(crate) fn new(domain: &Domain, value: Option<T>) -> Raw<T> {
        Raw {
            ptr: AtomicPtr::new(into_raw(value)),
            key: guard::key(&domain.inner),
            domain: domain.clone(),
            keepers: AtomicPtr::new(ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The current value, for as long as both the cell and the guard are
    /// borrowed.
    ///
    /// # Panics
    ///
    /// If `guard` is a read section of another domain (it would not hold
    /// off this cell's deferred drops).
    #[inline]
    pub(crate) fn load<'g>(&'g self, guard: &'g impl ReadSection) -> Option<&'g T> {
        self.check(guard);
        // Acquire: pairs with the writer's Release (module docs).
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in the cell points to a live, boxed
        // `T`. It stays allocated for `'g`: the cell drops its value only
        // when dropped (and `&'g self` is borrowed), and a writer that
        // takes it out defers its drop until after a grace period, which
        // waits for `guard`'s section: it started before the pointer was
        // taken out of the cell (we just loaded it), and it lasts at least
        // as long as `'g` borrows the guard. No `&mut T` exists while the
        // cell is shared (`get_mut` needs `&mut self`).
        unsafe { p.as_ref() }
    }

    /// The current pointer, for a cache's compare with the one it keeps
    /// (it reads through its own, so nothing is synchronised here).
    #[inline(always)]
    pub(crate) fn current(&self) -> *mut T {
        // Relaxed: only compared (module docs of `keep.rs`).
        self.ptr.load(Ordering::Relaxed)
    }

    /// The current pointer, to read through (a cache's adoption).
    pub(crate) fn load_acquire(&self) -> *mut T {
        // Acquire: pairs with the writer's Release (module docs).
        self.ptr.load(Ordering::Acquire)
    }

    /// The cell's caches' slots, made on the first call.
    pub(crate) fn keepers(&self) -> &Keepers<T> {
        // Acquire: pairs with the Release half of the CAS below (the
        // `Keepers`' fields).
        let mut k = self.keepers.load(Ordering::Acquire);
        if k.is_null() {
            let new = Arc::into_raw(Arc::new(Keepers::new())).cast_mut();
            // SeqCst: published before the cache's first adoption (module
            // docs: the writer's SeqCst load after its swap); Acquire on
            // failure as the load above.
            k = match self.keepers.compare_exchange(
                ptr::null_mut(),
                new,
                Ordering::SeqCst,
                Ordering::Acquire,
            ) {
                Ok(_) => new,
                Err(found) => {
                    // SAFETY: ours from `into_raw` above, never published.
                    drop(unsafe { Arc::from_raw(new) });
                    found
                }
            };
        }
        // SAFETY: the cell holds this `Arc` until it drops, and `&self`
        // borrows the cell.
        unsafe { &*k }
    }

    /// The cell's `Keepers`, if a cache was ever made, as a new handle.
    /// After a swap or CAS that took a value out (module docs: SeqCst).
    fn keepers_handle(&self) -> Option<Arc<Keepers<T>>> {
        // SeqCst: module docs (Orderings).
        let k = self.keepers.load(Ordering::SeqCst);
        if k.is_null() {
            return None;
        }
        // SAFETY: the cell's own `Arc`, alive while `&self` is; a new
        // strong count for the handle returned.
        unsafe {
            Arc::increment_strong_count(k);
            Some(Arc::from_raw(k))
        }
    }

    #[inline(always)]
    fn check(&self, guard: &impl ReadSection) {
        if !ptr::eq(guard.domain_key(), self.key) {
            wrong_domain();
        }
    }

    /// Mutable access to the value (no reader can hold it: `&mut self`).
    pub(crate) fn get_mut(&mut self) -> Option<&mut T> {
        // SAFETY: a non-null pointer owns a live boxed `T`; `&mut self`
        // means no reference from `load` (they borrow the cell) is left.
        unsafe { self.ptr.get_mut().as_mut() }
    }

    /// Takes the value out (no reader can hold it: by value).
    pub(crate) fn into_inner(mut self) -> Option<T> {
        let p = std::mem::replace(self.ptr.get_mut(), ptr::null_mut());
        // SAFETY: as `get_mut`; the cell no longer owns `p` (null left in
        // its place), so the box is rebuilt once.
        unsafe { unpublished(p) }
    }
}

impl<T: Send + 'static> Raw<T> {
    /// Publishes `new` (null or from `into_raw`) and returns the old
    /// pointer, now owned by the caller.
    #[inline]
    fn exchange(&self, new: *mut T) -> *mut T {
        // SeqCst: module docs.
        self.ptr.swap(new, Ordering::SeqCst)
    }

    /// Publishes `new` and defers the old value's drop.
    pub(crate) fn store(&self, new: Option<T>) {
        self.retire(self.exchange(into_raw(new)));
    }

    /// Publishes `new`; the old value stays readable for `'g` (its drop is
    /// deferred past the guard's section).
    pub(crate) fn swap<'g>(&'g self, new: Option<T>, guard: &'g impl ReadSection) -> Option<&'g T> {
        self.check(guard);
        let old = self.exchange(into_raw(new));
        // SAFETY: `old` was the cell's (a live box, or null); its drop is
        // deferred below, after `guard`'s section, which started before it
        // was taken out; `'g` borrows the guard (as `load`).
        let r = unsafe { old.cast_const().as_ref() };
        self.retire(old);
        r
    }

    /// Publishes `new`, waits for a grace period, and returns the old value
    /// (no reader can hold it any more).
    ///
    /// # Panics
    ///
    /// Inside a read section of the domain (as `Domain::synchronize`).
    pub(crate) fn replace_after_grace_period(&self, new: Option<T>) -> Option<T> {
        // Check before publishing, so a panic loses nothing.
        self.domain.check_can_wait("replace");
        // Relaxed: a cache of this thread kept what it loaded on this
        // thread; a value once taken out never comes back, so what such a
        // cache keeps is the current value or an older one.
        if self
            .keepers_handle()
            .is_some_and(|k| k.kept_here(self.ptr.load(Ordering::Relaxed)))
        {
            panic!(
                "exitq: replace() called while a cache of this thread keeps the value (deadlock)"
            );
        }
        let old = self.exchange(into_raw(new));
        self.domain.synchronize();
        if let Some(k) = self.keepers_handle() {
            let (timeout, report) = self.domain.cache_stall_reporter();
            k.wait_unkept(old, timeout, report);
        }
        // SAFETY: `old` is ours (taken out above), a grace period has
        // passed since (every section that could have loaded it has ended)
        // and no cache keeps it.
        unsafe { unpublished(old) }
    }

    /// Publishes `new` if the cell still holds `current` (compared by
    /// address). Ok: the old value, readable for `'g`, its drop deferred.
    /// Err: the value found, and `new` given back (never published).
    pub(crate) fn compare_exchange<'g>(
        &'g self,
        current: *const T,
        new: Option<T>,
        guard: &'g impl ReadSection,
    ) -> Result<Option<&'g T>, (Option<&'g T>, Option<T>)> {
        self.check(guard);
        let new = into_raw(new);
        // SeqCst on success, Acquire on failure: module docs.
        match self.ptr.compare_exchange(
            current.cast_mut(),
            new,
            Ordering::SeqCst,
            Ordering::Acquire,
        ) {
            Ok(old) => {
                // SAFETY: as `swap`.
                let r = unsafe { old.cast_const().as_ref() };
                self.retire(old);
                Ok(r)
            }
            Err(found) => Err((
                // SAFETY: the cell's current pointer, loaded under `guard`:
                // as `load`.
                unsafe { found.cast_const().as_ref() },
                // SAFETY: `new` came from `into_raw` above and was not
                // published (the CAS failed).
                unsafe { unpublished(new) },
            )),
        }
    }

    /// Read-copy-update: publishes `f(current)` if no other writer
    /// replaced `current` meanwhile, else calls `f` again on what it found,
    /// in a fresh read section. A value that lost the race is dropped at
    /// once, outside the section (it was never published).
    pub(crate) fn update(&self, mut f: impl FnMut(Option<&T>) -> Option<T>) {
        loop {
            let lost = {
                let guard = self.domain.read();
                let current = self.load(&guard);
                let seen = current.map_or(ptr::null(), |c| c as *const T);
                match self.compare_exchange(seen, f(current), &guard) {
                    Ok(_) => return,
                    Err((_, new)) => new,
                }
            };
            drop(lost);
        }
    }

    /// Defers the drop of a pointer taken out of the cell.
    fn retire(&self, old: *mut T) {
        if old.is_null() {
            return;
        }
        let old = Retired(old);
        match self.keepers_handle() {
            // SAFETY: the callback runs after a grace period: every section
            // that could have loaded `old` (they all started before it was
            // taken out of the cell) has ended, no cache was ever made, and
            // `old` is ours alone.
            None => self.domain.defer(move || unsafe { old.drop_now() }),
            Some(k) => self.domain.defer(move || {
                // SAFETY: as above, and `release_or_park` frees only once
                // no cache keeps it (`keep.rs`).
                k.release_or_park(old.into_raw(), |p| unsafe { Retired(p).drop_now() })
            }),
        }
    }

    /// Hands a value a cache collected (retired earlier, its grace period
    /// passed, no cache keeping it) to the domain to drop: the domain's
    /// callbacks, not the reader's `load`, run user drops.
    pub(crate) fn drop_collected(&self, value: *mut T) {
        let old = Retired(value);
        // SAFETY: collected values are boxed `T`s no reader or cache can
        // reach (`keep.rs`); ours alone.
        self.domain.defer(move || unsafe { old.drop_now() });
    }
}

/// Unboxes what [`into_raw`] made and that was never published (a failed
/// CAS's `new`), or that no reader can reach any more.
///
/// # Safety
///
/// `p` is null or came from [`into_raw`], nothing else owns it, and no
/// reference to the value is left.
unsafe fn unpublished<T>(p: *mut T) -> Option<T> {
    // SAFETY: the caller's contract.
    (!p.is_null()).then(|| unsafe { boxed::take(p) })
}

impl<T> Drop for Raw<T> {
    fn drop(&mut self) {
        /// The cell's handle on its caches' `Keepers`, released after the
        /// value's drop, also while unwinding from it (the values parked
        /// there are dropped then, not leaked).
        struct Release<T>(*mut Keepers<T>);
        impl<T> Drop for Release<T> {
            fn drop(&mut self) {
                if !self.0.is_null() {
                    // SAFETY: the cell's own `Arc` (from `keepers`),
                    // released once.
                    drop(unsafe { Arc::from_raw(self.0) });
                }
            }
        }
        let _keepers = Release(*self.keepers.get_mut());
        // SAFETY: `&mut self`: no reference from `load` and no cache is
        // left, and the pointer, if not null, is the cell's own live box.
        drop(unsafe { unpublished(*self.ptr.get_mut()) });
    }
}

#[cold]
#[inline(never)]
fn wrong_domain() -> ! {
    panic!("exitq: a typed cell was accessed with a guard of another domain")
}
