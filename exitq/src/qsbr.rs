//! [`QsbrReader`]: quiescent-state-based reclamation (liburcu-qsbr), typed.
//!
//! A QSBR reader is *online* from its creation to its drop: its record's
//! reader word says "in a read section since epoch E" the whole time, and
//! reads cost nothing but the loads themselves. Instead of entering and
//! leaving sections, the reader announces *quiescent states*
//! ([`QsbrReader::quiescent`]: "I hold no reference read before this
//! point"), once per request or loop iteration, and goes *offline* around
//! blocking calls ([`QsbrReader::offline`]). A quiescent state moves the
//! word to the current epoch ([`quiescent_due`]: a load and a compare,
//! and a store only when a grace period has started since the last one),
//! so grace periods check a QSBR reader exactly as any other section
//! (`epoch::holds_grace_period`): no new case in the grace-period code.
//!
//! # What the compiler enforces
//!
//! The reader itself is the read section ([`ReadSection`]): a typed
//! pointer loaded under it ([`RcuCell::load(&reader)`](crate::RcuCell::load))
//! borrows the reader, and `quiescent` and `offline` take `&mut self`, so
//! no reference outlives the quiescent state that lets a grace period
//! free what it points to. What it cannot enforce is that the thread
//! announces quiescent states at all: a reader that stops announcing
//! (blocked, or spinning in a loop that forgot to) holds every grace
//! period, and the stall report names it
//! ([`Stall::held_by`](crate::Stall::held_by)).
//!
//! # Life
//!
//! As a [`Reader`](crate::Reader): a record of its own (`Kind::Qsbr`),
//! linked into the thread's auxiliary list, so `synchronize` and `barrier`
//! panic on its thread while it is online (wait inside
//! [`offline`](QsbrReader::offline)); released when the reader drops
//! (offline first). Leaked with `mem::forget`, it stays online while its
//! thread lives (grace periods wait, a stall is reported) and stops
//! holding grace periods once the thread is gone: the thread's exit marks
//! its auxiliary records, and a grace period that waits for one releases
//! it once `tgkill` says the thread no longer exists (`record`, "A
//! record's life"). A panic inside `offline`'s closure brings the reader
//! back online before it unwinds further, so a reader that is used again
//! after `catch_unwind` is never offline while it hands out references.
use std::fmt;
use std::mem::ManuallyDrop;

use crate::domain::Domain;
use crate::expedite::Fences;
use crate::guard::{sealed, ReadSection};
use crate::past;
use crate::reader::release_reader;
use crate::record::{Kind, Record};
use crate::section;
use crate::sync::{self, AtomicU64, Ordering};

/// A quiescent-state-based reader (liburcu-qsbr's model): online from its
/// creation to its drop, so reads under it cost no section at all; it
/// announces a [quiescent state](QsbrReader::quiescent) once per request
/// or loop iteration (a load and a compare, a store only after a grace
/// period started), and goes [offline](QsbrReader::offline) around
/// blocking calls. It is itself the read section: `cell.load(&reader)`
/// returns a reference that borrows it, so the compiler refuses to keep
/// one across `quiescent` or `offline`.
///
/// A reader that stops announcing holds every grace period of its domain
/// (writers' `defer`red drops wait, `synchronize` waits, and a stall is
/// reported naming its thread): announce at least once per iteration of
/// the thread's loop, and go offline around anything that blocks
/// (a channel's `recv`, a lock, I/O). Waiting for a grace period
/// ([`Domain::synchronize`], [`Domain::barrier`], [`RcuCell::replace`])
/// while online panics, as inside any read section; wait inside
/// `offline`. As with locks, do not hold one domain's reader online while
/// waiting for another domain's grace period on a thread whose readers
/// the other domain's waiters hold (a cycle across threads); a `defer`
/// into a domain with [`Reclaimer::Inline`](crate::Reclaimer::Inline), or
/// past its backlog limit, may wait for that domain's grace period too
/// (never inside one of its own sections: stay online on both domains, or
/// go offline around it).
///
/// Not `Send`: the reader is registered with the thread that created it.
///
/// [`RcuCell::replace`]: crate::RcuCell::replace
///
/// # Examples
///
/// A worker that reads a configuration per request:
///
/// ```
/// use std::sync::mpsc;
///
/// let domain = exitq::Domain::new();
/// let config = exitq::RcuCell::new(&domain, String::from("v1"));
/// let (tx, rx) = mpsc::channel::<u32>();
/// std::thread::scope(|s| {
///     let (domain, config) = (&domain, &config);
///     let worker = s.spawn(move || {
///         let mut reader = domain.qsbr_reader();
///         let mut served = 0;
///         // Offline while blocked: the wait holds no grace period.
///         while let Ok(request) = reader.offline(|| rx.recv()) {
///             let cfg: &String = config.load(&reader); // no section to enter
///             assert!(cfg.starts_with('v'));
///             served += request;
///             reader.quiescent(); // `cfg` may be freed from here on
///         }
///         served
///     });
///     for request in 1..=3 {
///         tx.send(request).unwrap();
///         config.store(format!("v{}", request + 1)); // dropped after a grace period
///     }
///     drop(tx);
///     assert_eq!(worker.join().unwrap(), 6);
/// });
/// domain.barrier();
/// ```
///
/// A reference cannot outlive the next quiescent state:
///
/// ```compile_fail,E0502
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let mut reader = domain.qsbr_reader();
/// let value = cell.load(&reader);
/// reader.quiescent(); // error: `reader` is borrowed by `value`
/// assert_eq!(*value, 1);
/// ```
///
/// nor be used while the reader is offline:
///
/// ```compile_fail,E0502
/// let domain = exitq::Domain::new();
/// let cell = exitq::RcuCell::new(&domain, 1u64);
/// let mut reader = domain.qsbr_reader();
/// let value = cell.load(&reader);
/// reader.offline(|| std::thread::sleep(std::time::Duration::from_millis(1))); // error
/// assert_eq!(*value, 1);
/// ```
///
/// and the reader stays on its thread:
///
/// ```compile_fail,E0277
/// let reader = exitq::Domain::new().qsbr_reader();
/// std::thread::spawn(move || drop(reader)); // error: `QsbrReader` is not `Send`
/// ```
pub struct QsbrReader {
    /// What `quiescent` touches, copied here as `Reader` does: the
    /// record, the domain's epoch word (both in the domain's shared
    /// state, kept alive by `domain`; the raw pointers also make the
    /// reader neither `Send` nor `Sync`), the fence mode.
    record: *const Record,
    gp_ctr: *const AtomicU64,
    fences: Fences,
    /// The reader word as last stored online (owner copy; 0 while offline).
    word: u64,
    /// Dropped by `Drop`, passed by value (see `online`).
    domain: ManuallyDrop<Domain>,
}

impl Domain {
    /// Registers a [`QsbrReader`] on the calling thread, online: claims a
    /// record for it (a free one is reused; otherwise one allocation) and
    /// stores the current epoch into it. The reader holds a handle of the
    /// domain.
    ///
    /// # Panics
    ///
    /// In the child of a `fork()`.
    // Inlined, with the work out of line and the fields by value
    // (`Domain::claim_reader`).
    #[inline(always)]
    pub fn qsbr_reader(&self) -> QsbrReader {
        let (record, domain) = self.claim_reader(Kind::Qsbr);
        let gp_ctr: *const AtomicU64 = &self.inner.gp.hot.gp_ctr;
        let fences = self.inner.gp.hot.fences;
        QsbrReader {
            record,
            gp_ctr,
            fences,
            word: online(record, gp_ctr, fences),
            domain: ManuallyDrop::new(domain),
        }
    }
}

impl QsbrReader {
    /// The reader's record and the domain's epoch word.
    #[inline(always)]
    fn parts(&self) -> (&Record, &AtomicU64) {
        // SAFETY: the record was claimed for this reader and stays in the
        // registry of the domain, whose shared state `self.domain` keeps
        // alive, as does the epoch word; only this thread writes the
        // record's word (the reader is not `Send`).
        unsafe { (&*self.record, &*self.gp_ctr) }
    }

    /// Announces a quiescent state: no reference loaded under this reader
    /// before the call is used after it (the borrow checker makes sure:
    /// `&mut self`). One load of the domain's epoch and a compare; a store
    /// into the reader word (and a compiler fence, a full fence without
    /// membarrier) only when a grace period has started since the last
    /// announcement. Call it once per request or loop iteration.
    #[inline]
    pub fn quiescent(&mut self) {
        // SAFETY: as in `parts`.
        if quiescent_due(unsafe { &*self.gp_ctr }, self.word) {
            self.online();
        }
    }

    /// Runs `f` offline: the reader holds no grace period meanwhile (its
    /// word shows no section), so `f` may block, or wait for grace periods
    /// of this domain ([`Domain::synchronize`], [`Domain::barrier`]), and
    /// grace periods need no heavy barrier on its account. Back online when
    /// `f` returns or unwinds. Costs two stores, a load and a full fence
    /// (liburcu-qsbr's `rcu_thread_offline` / `rcu_thread_online`).
    pub fn offline<R>(&mut self, f: impl FnOnce() -> R) -> R {
        /// Goes back online when dropped (also when `f` unwinds).
        struct Online<'a>(&'a mut QsbrReader);
        impl Drop for Online<'_> {
            fn drop(&mut self) {
                let r = &mut *self.0;
                r.word = back_online(r.record, r.gp_ctr, r.fences);
            }
        }
        past::offline_reader(&self.parts().0.ctr);
        self.word = 0;
        let _online = Online(self);
        f()
    }

    /// Online: the current epoch into the word, as a section's entry (also
    /// a quiescent state's store, when the epoch moved on).
    #[inline]
    fn online(&mut self) {
        self.word = online(self.record, self.gp_ctr, self.fences);
    }

    /// The domain this reader belongs to.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }
}

/// [`QsbrReader::online`], out of line and over the reader's fields (not
/// `&mut QsbrReader`, see `Domain::claim_reader`). Returns the new word.
#[cold]
#[inline(never)]
fn online(record: *const Record, gp_ctr: *const AtomicU64, fences: Fences) -> u64 {
    // SAFETY: as in `QsbrReader::parts` (the caller's fields).
    let (record, gp_ctr) = unsafe { (&*record, &*gp_ctr) };
    quiescent_store(gp_ctr, &record.ctr, fences)
}

/// A QSBR reader's quiescent state ([`QsbrReader`]):
/// the reader word goes from "in a section since the epoch in `word`" to
/// "in a section since now", as a section's exit and the next one's entry
/// in one step, so grace periods check it as any other section
/// ([`crate::epoch::holds_grace_period`]). `word` is the reader's copy of its word (only
/// this thread writes it). True if the epoch moved on: the caller then
/// calls [`quiescent_store`] (kept out of line, so the loop around the
/// fast path keeps its values in registers).
///
/// While no grace period has started since the last store (the epoch is
/// still `word`), nothing is stored, as liburcu-qsbr's
/// `rcu_quiescent_state` skips: a grace period `g` waits only for words
/// showing an epoch `<= g`, and the word shows the latest published
/// epoch, greater than every such `g`, so storing it again would change no
/// check. Relaxed suffices for that load: what the reader reads next is
/// ordered after the Acquire load that read this same epoch before the
/// word was stored (`quiescent_store`, or the reader going online), which
/// pairs with that grace period's Release store of it, after its heavy
/// barrier and every removal before it.
#[inline(always)]
pub(crate) fn quiescent_due(gp_ctr: &AtomicU64, word: u64) -> bool {
    // Relaxed: see above.
    gp_ctr.load(Ordering::Relaxed) != word
}

/// The store of a quiescent state whose epoch moved on ([`quiescent_due`]);
/// also a QSBR reader's return online. Returns the new word.
#[inline]
pub(crate) fn quiescent_store(gp_ctr: &AtomicU64, ctr: &AtomicU64, fences: Fences) -> u64 {
    // An entry's store (Acquire load of the epoch, Release store):
    // everything the reader did since its last quiescent state
    // happens-before a grace period's Acquire load that sees the new epoch
    // (a section's exit, folded in).
    let now = section::entry_store(gp_ctr, ctr);
    // Orders the store before the reader's next loads, as an entry's.
    fences.light();
    now
}

/// Back online after `past::offline_reader`: a quiescent state's store, then a full
/// fence before the reader's next load (`past::online`'s argument: a scan
/// that read `OFFLINE` is followed by our fence, so we read what it
/// frees no more, or preceded by it, and reads our new word). Returns the
/// new word.
#[cold]
#[inline(never)]
fn back_online(record: *const Record, gp_ctr: *const AtomicU64, fences: Fences) -> u64 {
    // SAFETY: as in `QsbrReader::parts` (the caller's fields).
    let (record, gp_ctr) = unsafe { (&*record, &*gp_ctr) };
    back_online_word(gp_ctr, &record.ctr, fences)
}

/// [`back_online`] on the words themselves (and the loom models').
#[inline]
pub(crate) fn back_online_word(gp_ctr: &AtomicU64, ctr: &AtomicU64, fences: Fences) -> u64 {
    let word = quiescent_store(gp_ctr, ctr, fences);
    if fences.membarrier {
        // Full fence: pairs with a scan's fence (see above); in fence
        // mode `quiescent_store`'s was one already.
        sync::full_fence();
    }
    word
}

impl ReadSection for QsbrReader {}

impl sealed::Sealed for QsbrReader {
    #[inline(always)]
    fn domain_key(&self) -> *const () {
        // The domain's key (`guard::key`): the epoch word's address.
        self.gp_ctr.cast()
    }
}

impl fmt::Debug for QsbrReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (record, _) = self.parts();
        f.debug_struct("QsbrReader")
            .field("domain", &record.domain_id)
            .field(
                "online_since_epoch",
                &(self.word >> crate::record::NEST_BITS),
            )
            .finish()
    }
}

impl Drop for QsbrReader {
    // Inlined, handing the fields over by value (`Domain::claim_reader`).
    #[inline]
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is never used again.
        let domain = unsafe { ManuallyDrop::take(&mut self.domain) };
        release_reader(self.record, domain);
    }
}
