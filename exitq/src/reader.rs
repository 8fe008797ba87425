//! [`Reader`]: a registered reader that owns a handle of its domain, and
//! its guard, [`ReaderGuard`].
//!
//! A reader claims a record of its own (`Kind::Reader`) and links it into
//! the thread's auxiliary list, so the deadlock checks of `synchronize` and
//! `barrier` see its sections as the thread's. It copies what entering a
//! section touches (the record, the domain's epoch word, the fence mode)
//! into itself, so [`Reader::read`] follows no pointer but its own fields.
//! Those pointers stay valid because the reader owns a [`Domain`] clone:
//! the domain's shared state, which holds the records and the epoch word,
//! outlives the reader.
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;

use crate::domain::Domain;
use crate::expedite::Fences;
use crate::guard::{sealed, ReadSection};
use crate::past;
use crate::record::{Kind, Record};
use crate::section;
use crate::sync::{AtomicU64, Ordering};
use crate::thread as this_thread;

/// A reader registered once: a record of its own, so [`Reader::read`] skips
/// the thread-local lookup that [`Domain::read`] makes (the counterpart of
/// crossbeam-epoch's `LocalHandle`), and takes `&mut self`: a reader's
/// sections cannot nest (the borrow checker refuses a second guard while
/// one lives), so entering is one store of the epoch into the reader word
/// and leaving is one store (the word idle, its epoch kept), with no load
/// of the word to track nesting. For hot loops that enter and leave read
/// sections millions of times; nest with [`Domain::read`] or a second
/// reader.
///
/// A reader owns a handle of its domain (it keeps the domain alive, as a
/// [`Domain`] clone does) and borrows nothing, so it can live in a worker's
/// struct or in a `thread_local!`. Its record is released when it drops.
/// A reader's guard is a read section of the thread holding it, for grace
/// periods and for the deadlock checks of [`Domain::synchronize`] and
/// [`Domain::barrier`] (they panic inside one); one thread may hold several
/// readers. Not `Send`: the reader is registered with the thread that
/// created it.
///
/// # Examples
///
/// ```
/// let domain = exitq::Domain::new();
/// let mut reader = domain.reader();
/// for _ in 0..1000 {
///     let _guard = reader.read();
///     // ... read shared data; `domain.read()` may nest in here ...
/// }
/// drop(reader);
/// domain.synchronize();
/// ```
///
/// In a worker's state, built on the worker thread:
///
/// ```
/// struct Worker {
///     reader: exitq::Reader,
///     seen: u64,
/// }
///
/// let domain = exitq::Domain::new();
/// let d = domain.clone();
/// std::thread::spawn(move || {
///     let mut w = Worker { reader: d.reader(), seen: 0 };
///     drop(d); // the reader keeps the domain alive
///     for _ in 0..10 {
///         let _guard = w.reader.read();
///         w.seen += 1;
///     }
/// })
/// .join()
/// .unwrap();
/// domain.synchronize();
/// ```
///
/// In a thread-local, claimed on the thread's first use and released at its
/// exit:
///
/// ```
/// use std::cell::RefCell;
/// use std::sync::OnceLock;
///
/// static DOMAIN: OnceLock<exitq::Domain> = OnceLock::new();
/// thread_local! {
///     static READER: RefCell<exitq::Reader> =
///         RefCell::new(DOMAIN.get_or_init(exitq::Domain::new).reader());
/// }
///
/// let sum: u64 = READER.with_borrow_mut(|reader| {
///     let _guard = reader.read();
///     40 + 2
/// });
/// assert_eq!(sum, 42);
/// ```
///
/// A reader's sections do not nest:
///
/// ```compile_fail,E0499
/// let domain = exitq::Domain::new();
/// let mut reader = domain.reader();
/// let outer = reader.read();
/// let inner = reader.read(); // error: `reader` is already borrowed
/// drop((outer, inner));
/// ```
///
/// and a reader stays on its thread:
///
/// ```compile_fail,E0277
/// let reader = exitq::Domain::new().reader();
/// std::thread::spawn(move || drop(reader)); // error: `Reader` is not `Send`
/// ```
pub struct Reader {
    /// What `read` touches, copied here so entering a section follows no
    /// pointer but the reader's own: the reader's record (its reader word),
    /// the domain's epoch word, and the fence mode. Both pointers point
    /// into the domain's shared state, kept alive by `domain`. The raw
    /// pointers also make the reader neither `Send` nor `Sync`.
    record: *const Record,
    gp_ctr: *const AtomicU64,
    fences: Fences,
    /// Dropped by `Drop`, by value (see `claim_reader`).
    domain: ManuallyDrop<Domain>,
}

impl Domain {
    /// Registers a [`Reader`] on the calling thread: claims a record for it
    /// (a free one is reused; otherwise one allocation). The reader holds a
    /// handle of the domain.
    ///
    /// # Panics
    ///
    /// In the child of a `fork()`.
    #[inline(always)]
    pub fn reader(&self) -> Reader {
        let (record, domain) = self.claim_reader(Kind::Reader);
        Reader {
            record,
            gp_ctr: &self.inner.gp.hot.gp_ctr,
            fences: self.inner.gp.hot.fences,
            domain: ManuallyDrop::new(domain),
        }
    }

    /// A record for a [`Reader`] or a [`QsbrReader`](crate::QsbrReader)
    /// (`kind`), and the domain handle the reader keeps.
    ///
    /// Out of line, returning values, while the reader's constructor and
    /// `Drop` are inlined and hand its fields over by value
    /// ([`release_reader`]): so nothing takes the reader's address, and a
    /// loop that enters sections (or announces quiescent states) keeps
    /// the reader's fields in registers. Otherwise the compiler must reload
    /// them from memory after every fence and Acquire load (another thread
    /// could have written memory whose address escaped), a few loads per
    /// read (measured: 12 loads per iteration of `read_mostly`'s QSBR
    /// loop, 9 without, against arc-swap `Cache`'s 7).
    ///
    /// # Panics
    ///
    /// In the child of a `fork()`.
    #[inline(never)]
    pub(crate) fn claim_reader(&self, kind: Kind) -> (*const Record, Domain) {
        self.inner.check_fork();
        (self.claim_aux(kind), self.clone())
    }
}

impl Reader {
    /// Enters a read section: stores the current epoch into the reader's
    /// word, then a compiler fence (a full fence without membarrier). The
    /// section ends when the guard drops (one store: the word idle).
    #[inline]
    pub fn read(&mut self) -> ReaderGuard<'_> {
        // SAFETY: the record was claimed for this reader and stays in the
        // registry of the domain, whose shared state `self.domain` keeps
        // alive; only this thread writes it (the reader is not `Send`).
        let record = unsafe { &*self.record };
        // SAFETY: the epoch word lives in the same shared state.
        let gp_ctr = unsafe { &*self.gp_ctr };
        // The word is idle here: the previous guard (which borrowed `self`
        // mutably) stored its idle word when it dropped, or was
        // `mem::forget`ed and this overwrite ends that section (as a
        // thread exit would). The store is `section::reader_enter`'s
        // outermost entry (nesting 1; its orderings there).
        let word = section::entry_store(gp_ctr, &record.ctr);
        // Orders the store before the section's loads (pairs with the
        // leader's membarrier, or its fence in fallback mode).
        self.fences.light();
        ReaderGuard {
            record,
            word,
            // The domain's key (`guard::key`): the epoch word's address.
            key: self.gp_ctr.cast(),
            _not_send: PhantomData,
        }
    }

    /// Runs `f` with this reader offline: its word shows no section, and
    /// every grace period's scan finds it past, so grace periods need no
    /// heavy barrier (membarrier(2)) on its account while `f` blocks. Back
    /// online when `f` returns or unwinds: an idle word, then a full fence
    /// before the reader's next load of the epoch (liburcu-qsbr's
    /// `rcu_thread_offline` / `rcu_thread_online`). A reader that stays
    /// idle without it makes every grace period make the barrier. A
    /// section of a guard that was forgotten (`mem::forget`) ends here, as
    /// at the next [`read`](Reader::read).
    ///
    /// # Examples
    ///
    /// ```
    /// let domain = exitq::Domain::new();
    /// let mut reader = domain.reader();
    /// drop(reader.read());
    /// reader.offline(|| std::thread::sleep(std::time::Duration::from_millis(1)));
    /// drop(reader.read());
    /// ```
    pub fn offline<R>(&mut self, f: impl FnOnce() -> R) -> R {
        /// Goes back online when dropped (also when `f` unwinds).
        struct Online<'a>(&'a Reader);
        impl Drop for Online<'_> {
            fn drop(&mut self) {
                // SAFETY: as in `read`.
                let (record, gp_ctr) = unsafe { (&*self.0.record, &*self.0.gp_ctr) };
                past::online(gp_ctr, &record.ctr);
            }
        }
        // SAFETY: as in `read`.
        let record = unsafe { &*self.record };
        // A forgotten guard's section ends here, as at `read`'s entry.
        past::offline_reader(&record.ctr);
        let _online = Online(self);
        f()
    }

    /// The domain this reader belongs to.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }
}

/// A read section of a [`Reader`]; ends when dropped.
#[must_use = "the read section ends when the guard is dropped"]
pub struct ReaderGuard<'r> {
    record: &'r Record,
    /// The word the section stored (an epoch word: nesting 1).
    word: u64,
    /// The domain's key (`guard::key`), compared by [`ReadSection`] users
    /// only.
    key: *const (),
    _not_send: PhantomData<*const ()>,
}

impl Drop for ReaderGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Idle (nesting 0), the section's epoch kept (`past.rs`). Release:
        // the section's accesses happen-before a grace period's Acquire
        // load that sees it (`epoch::holds_grace_period`, `past::standing`),
        // as `section::reader_exit`.
        // Nothing else: a reader's record is never retired or temporary,
        // and a section's end runs nothing (local.rs).
        self.record.ctr.store(self.word - 1, Ordering::Release);
    }
}

impl ReadSection for ReaderGuard<'_> {}

impl sealed::Sealed for ReaderGuard<'_> {
    #[inline(always)]
    fn domain_key(&self) -> *const () {
        self.key
    }
}

impl fmt::Debug for ReaderGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderGuard").finish_non_exhaustive()
    }
}

impl fmt::Debug for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: as in `read`.
        let record = unsafe { &*self.record };
        f.debug_struct("Reader")
            .field("domain", &record.domain_id)
            .field("reading", &(record.nesting() > 0))
            .finish()
    }
}

impl Drop for Reader {
    // Inlined, handing the fields over by value (see `claim_reader`).
    #[inline]
    fn drop(&mut self) {
        // Guards borrow the reader mutably, so none is left (a forgotten
        // one would stall grace periods forever: the release ends it, as
        // a thread exit does).
        // SAFETY: taken once, here; the field is never used again.
        release_reader(self.record, unsafe { ManuallyDrop::take(&mut self.domain) });
    }
}

/// The end of a [`Reader`] or a [`QsbrReader`](crate::QsbrReader): its
/// record out of the thread's auxiliary list and handed back (its word 0,
/// a Release store, as a section's exit: `Record::release`), then its
/// domain handle dropped. Out of line, by value: see
/// [`Domain::claim_reader`].
#[inline(never)]
pub(crate) fn release_reader(record: *const Record, domain: Domain) {
    // SAFETY: the record was claimed for the reader that is ending, in
    // the domain whose handle we hold until the end of this function.
    let record = unsafe { &*record };
    this_thread::unlink_aux(record);
    record.release();
    drop(domain);
}
