//! Read guards: [`Guard`] (a section of [`Domain::read`](crate::Domain::read)), what a guard's
//! outermost exit does, and [`ReadSection`], the trait over both kinds of
//! guard and the [`QsbrReader`](crate::QsbrReader) that typed pointers
//! ([`RcuCell`](crate::RcuCell)) borrow.
//!
//! A guard holds the record whose reader word it set and the domain it
//! belongs to; the domain is only compared (a guard of one domain does not
//! protect the objects of another), never followed on the fast path. The
//! domain's *key* is the address of its epoch word: entering a section has
//! it in a register already (a [`Reader`](crate::Reader) loads the epoch
//! through it, [`Domain::read`](crate::Domain::read) finds it at a fixed
//! offset of the domain's shared state), so comparing it costs a typed
//! pointer one load of its own copy and a compare.
use std::fmt;
use std::marker::PhantomData;

use crate::exit;
use crate::inner::Inner;
use crate::record::{Record, RETIRED, TEMPORARY};
use crate::section;
use crate::sync::AtomicU64;
use crate::thread as this_thread;

/// A read-side critical section of a [`Domain`](crate::Domain); ends when
/// dropped.
///
/// Not `Send`: a section belongs to the thread that entered it.
#[must_use = "the read section ends when the guard is dropped"]
pub struct Guard<'a> {
    record: &'a Record,
    inner: &'a Inner,
    _not_send: PhantomData<*const ()>,
}

impl<'a> Guard<'a> {
    /// A guard of a section just entered on `record` (its reader word set).
    #[inline(always)]
    pub(crate) fn entered(record: &'a Record, inner: &'a Inner) -> Guard<'a> {
        Guard {
            record,
            inner,
            _not_send: PhantomData,
        }
    }
}

impl fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("domain", &self.record.domain_id)
            .field("nesting", &self.record.nesting())
            .finish()
    }
}

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        end_section(self.record);
    }
}

/// A guard's exit from its section on `r` (also the loom model's).
#[inline(always)]
pub(crate) fn end_section(r: &Record) {
    // Outermost exit: one load of `flags`, on the line just written.
    if section::reader_exit(&r.ctr) && r.flags.get() != 0 {
        if let Some(o) = section_ended(r) {
            o.release(); // after the last use of the record
        }
    }
}

/// The outermost exit of a section whose record has `flags` set: a
/// temporary record or a retired main record is released. (Nothing runs
/// here: ready batches run from `defer`, also inside sections, see
/// local.rs; a `Reader`'s guard never gets here, its exit is one store.)
///
/// The caller's guard kept the domain alive until now (it borrows a
/// handle).
#[cold]
#[must_use]
fn section_ended(r: &Record) -> Option<exit::Orphan> {
    let flags = r.flags.get();
    debug_assert!(flags & (TEMPORARY | RETIRED) != 0, "flags {flags}");
    this_thread::unlink_aux(r);
    if flags & RETIRED != 0 {
        return exit::release_main(r);
    }
    r.release();
    None
}

/// A read section of some domain: [`Guard`] (from
/// [`Domain::read`](crate::Domain::read)),
/// [`ReaderGuard`](crate::ReaderGuard) (from
/// [`Reader::read`](crate::Reader::read)) or an online
/// [`QsbrReader`](crate::QsbrReader).
///
/// Typed pointers take `&'g impl ReadSection` and hand out references that
/// live for `'g`: as long as the borrow of the guard (or of the QSBR
/// reader, until its next `quiescent` or `offline`), so no reference
/// outlives its read section. Sealed: the guarantee rests on exitq's own
/// guards.
pub trait ReadSection: sealed::Sealed {}

pub(crate) mod sealed {
    /// The domain a guard protects: the address of its epoch word
    /// ([`key`](super::key)), compared only, never followed.
    pub trait Sealed {
        fn domain_key(&self) -> *const ();
    }
}

/// A domain's key, as guards report it: the address of its epoch word.
#[inline(always)]
pub(crate) fn key(inner: &Inner) -> *const () {
    (&inner.gp.hot.gp_ctr as *const AtomicU64).cast()
}

impl ReadSection for Guard<'_> {}

impl sealed::Sealed for Guard<'_> {
    #[inline(always)]
    fn domain_key(&self) -> *const () {
        key(self.inner)
    }
}
