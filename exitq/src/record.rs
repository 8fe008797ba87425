//! Participant records and the domain's registry of them.
//!
//! Each thread that uses a domain gets a *record* (cache-line aligned,
//! allocated once and reused by later threads after its owner is done)
//! linked into the domain's registry, a push-only lock-free list that
//! readers never lock and grace periods scan. Records are also claimed by
//! [`Reader`](crate::Reader)s (a record of their own) and by guards taken
//! after the thread's exitq state was torn down (a temporary record).
//!
//! # A record's life
//!
//! Two words say where a record is: `state` (`FREE`, `IN_USE`,
//! `ORPHANED`) and `retired` (0, or the owner's *life* and tid once its
//! thread is exiting while a read section on the record may stay open).
//! Every other field belongs to the record's current owner (see "Field
//! ownership"). Each transition has one owner:
//!
//! | from | event | to | done by |
//! |---|---|---|---|
//! | `FREE` | claim: CAS `FREE → IN_USE` (Acquire), then [`Record::take_over`] resets **every** owner field (flags, kind, thread link, `retired`, reader word, hints, stall mark) and starts a new life | `IN_USE` | the claiming thread (`Registry::claim`): `thread` for a main record, `Domain::reader`, a guard taken during teardown |
//! | `IN_USE` | read sections, `defer`, runs of its batches (the batches under the steal handshake) | `IN_USE` | the owner thread (a stealer takes batches, never the record) |
//! | `IN_USE` | the owner's last use, outside any section and any run of its batches (`retire_thread` refuses inside a callback): thread exit or `retire_thread` (main, `exit::release_main`), `Reader` dropped, a temporary guard's section ended ([`Record::release`]); [`Record::end_ownership`] then the `state` store/CAS (Release) | `FREE` | the owner |
//! | `IN_USE` | thread exit while a stealer holds the record (`steal` set): the owner hands its exit off with one CAS and returns (`handshake`, "An owner's exit is handed off"); the stealer takes the batches and the `handed` hooks, clears `steal`, and, asked to (`RELEASE`: no guard holds the record), releases it as above (`exit::finish_hand_off`) | `FREE` (without `RELEASE`: `IN_USE`, retired, below) | the stealer, for that life |
//! | `IN_USE` | the owner thread is exiting and a section on the record may stay open: a main record retired under a live guard (`RETIRED` flag; an `ORPHANED` one is released instead, `exit::keep_or_release`: its section can only be leaked), every record of the thread's auxiliary list at its exit, a temporary record (claimed during teardown): [`Record::mark_retired`] (Release) | `IN_USE`, retired | the owner |
//! | `IN_USE`, retired | the section's guard (or the `Reader`) is dropped after all, by a later destructor: release as above (`retired` back to 0) | `FREE` | the owner |
//! | `IN_USE`, retired | the guard was leaked and the owner thread is gone: a grace period waiting for the record wins the CAS of `retired` back to 0 (Acquire), stores 0 into the reader word and CASes `IN_USE → FREE` ([`Record::release_leaked`]) | `FREE` | a grace-period leader |
//! | `IN_USE` (retired or not) | the last `Domain` handle dropped: CAS `IN_USE → ORPHANED` (AcqRel); the record holds a strong count of the domain | `ORPHANED` | the shutting-down thread (`domain::shutdown`) |
//! | `ORPHANED` | the owner's release CAS fails: it gives the count back after its last use of the record (`exit::Orphan`; the record is freed with the domain) | (freed) | the owner |
//!
//! **Exactly one releaser per life.** The owner releases while its thread
//! lives (or the stealer it handed its exit off to, then never the owner;
//! a record kept for a guard is released only once that hand-off is
//! finished, `handshake::hand_off_pending`); `release_leaked` only once `tgkill(tid, 0)` says the thread is
//! gone (its death happens-after its last write: the kernel's exit path
//! and the lookup take the same locks), by a CAS of the `retired` word, so
//! of two grace periods only one wins, and a mark left from an earlier
//! life (the life counter is part of the word) never matches. So no owner
//! ever finds its record released under it, and no claimant inherits its
//! predecessor's flags: before the reset at claim, a record freed by
//! `release_leaked` kept its old owner's `RETIRED` flag, and its next
//! owner's first guard released it while it was still that owner's (issue
//! 25; `tests/leak.rs`). The loom model
//! `leaked_release_races_a_guard_drop_and_a_claim` (`tests/loom.rs`) runs
//! the release, the owner's guard drop and a claim against each other.
//!
//! A record is never removed from the registry while the domain lives, so
//! a grace period may scan records being claimed or released: a free
//! record's reader word is 0.
//!
//! # Field ownership
//!
//! `ctr` is written by the owner, and, once per leaked life, by the
//! grace-period leader that wins `release_leaked` (its owner thread is
//! gone by then); `busy`, `flags`, `kind`, `life`, `exits`, `spare`,
//! `thread_next` and `run_seq` by the owner only; `local` by the owner or
//! by a stealer that won the steal handshake
//! ([`handshake`]); `steal` by stealers, and once by an exiting owner
//! that hands its exit off; `handed` by that owner, then by the stealer
//! that finishes the hand-off (with the record's release, if the owner
//! asked: the stealer is then the releaser of that life); the idle-steal
//! hints `open_epoch`/`active_epoch` by the owner inside its sections or by
//! a stealer under the handshake; `state` and `retired` as in the table.
use std::cell::{Cell, UnsafeCell};
use std::ptr;
use std::sync::atomic::AtomicI32; // a process-wide static, outside loom models
use std::sync::Mutex;

use crate::batch::{OpenBatch, Work};
use crate::expedite::Fences;
use crate::handshake;
use crate::llist::{Chain, Node};
use crate::sync::{self, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Bits of a reader word (`Record::ctr`) that count nesting; the rest is
/// the epoch seen at the outermost entry (see `grace`).
pub(crate) const NEST_BITS: u32 = 16;
/// Mask of the nesting count in a reader word.
pub(crate) const NEST_MASK: u64 = (1 << NEST_BITS) - 1;

/// `state`: no owner.
pub(crate) const FREE: u32 = 0;
/// `state`: owned by one thread.
pub(crate) const IN_USE: u32 = 1;
/// `state`: the domain shut down while the owner held the record.
pub(crate) const ORPHANED: u32 = 2;

/// What a record is for (owner-only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A thread's own record: its read sections of `Domain::read`, its
    /// batches and exit hooks. Released at thread exit.
    Main,
    /// A [`Reader`](crate::Reader)'s: read sections only. Released when the
    /// reader drops.
    Reader,
    /// One guard's, taken after the thread's exitq state was torn down.
    /// Released when the guard drops.
    Temporary,
    /// A [`QsbrReader`](crate::QsbrReader)'s: online (a section) from its
    /// claim to its release, moved on by quiescent states. Released when
    /// the reader drops.
    Qsbr,
}

/// `flags` (owner-only): a main record retired at thread exit while a guard on it was
/// still alive (held by a later destructor); that guard's
/// outermost exit releases it.
pub(crate) const RETIRED: u8 = 2;
/// `flags`: a temporary record, released by its guard's exit.
pub(crate) const TEMPORARY: u8 = 4;

/// A thread's batches: the open one, the sealed ones waiting for their
/// grace period (oldest first), and the ready ones the owner is draining
/// (`drain.rs`; the front one may be drained in part).
/// Accessed by the owner inside a handshake section, or by a stealer that
/// won the handshake.
pub(crate) struct Local {
    pub(crate) open: OpenBatch,
    pub(crate) sealed: Chain<Work>,
    pub(crate) ready: Chain<Work>,
}

impl Local {
    /// Takes the ready and the sealed batches, oldest first (the open one
    /// stays). A drain tick armed on the open batch is disarmed.
    pub(crate) fn take_queued(&mut self) -> Chain<Work> {
        self.open.untick();
        let mut chain = std::mem::take(&mut self.ready);
        chain.append(std::mem::take(&mut self.sealed));
        chain
    }
}

/// One participant's record in one domain.
#[repr(align(128))]
pub(crate) struct Record {
    /// Reader word (owner writes, grace periods read): the epoch loaded on
    /// entry above the nesting depth (`NEST_BITS`); outside any read
    /// section the nesting is 0 and the epoch stays (an idle word,
    /// `past.rs`), or the word is `past::OFFLINE`, or 0 (a fresh or
    /// released record).
    pub(crate) ctr: AtomicU64,
    /// `RETIRED`, `TEMPORARY` (owner-only; next to `ctr`, so a guard's
    /// outermost exit reads it from the line it just wrote).
    pub(crate) flags: Cell<u8>,
    /// What the record is for (owner-only, set at claim).
    pub(crate) kind: Cell<Kind>,
    /// Owner is inside an access to `local` (steal handshake).
    pub(crate) busy: AtomicBool,
    /// A stealer wants `local`, and whether the owner left its exit to it
    /// (steal handshake: `STEAL`, `LEFT`, `RELEASE`).
    pub(crate) steal: AtomicU8,
    /// The thread's batches (steal handshake).
    pub(crate) local: UnsafeCell<Local>,
    /// The owner's runs (owner writes; stealers read under the handshake):
    ///
    /// | value | meaning |
    /// |---|---|
    /// | even  | no run in progress |
    /// | odd   | the owner took ready batches, or a drain tick's callbacks, out of `local` (inside its section: `handshake::run_begin`) and runs them; advanced to even when they have run (`run_end`, Release) |
    ///
    /// A `barrier` that sees an odd value waits until it changes.
    pub(crate) run_seq: AtomicU64,
    /// Hints for the reclaimer's idle steal (Relaxed; written by the owner
    /// inside its sections, or by a stealer under the handshake): the
    /// poll epoch when the open batch was opened (0: none open), and of the
    /// owner's last seal or run while it holds sealed batches (0: none
    /// held). The reclaimer takes an open batch that is old, and sealed
    /// batches only from an owner that did nothing with them for a flush
    /// latency: a batch waiting for its grace period gains nothing from
    /// moving to another thread, and its frees would become cross-thread
    /// frees.
    pub(crate) open_epoch: AtomicU64,
    pub(crate) active_epoch: AtomicU64,
    /// Exit hooks registered by the owner, preallocated (owner only).
    pub(crate) exits: UnsafeCell<Chain<Work>>,
    /// The exit hooks of an owner that left its exit to a stealer: the
    /// owner's until its hand-off CAS succeeds, then the stealer's until
    /// it clears `steal` (`handshake`, "An owner's exit is handed off").
    pub(crate) handed: UnsafeCell<Chain<Work>>,
    /// One emptied batch node kept for the owner's next batch (owner only:
    /// memory this core just wrote; kept across owners). Always a full one
    /// (`drain::keep_node`).
    pub(crate) spare: Cell<Option<Box<Node<Work>>>>,
    /// The owner has opened a batch in this life (owner only): its first
    /// one is small (`local::open_batch`).
    pub(crate) opened: Cell<bool>,
    /// `FREE`, `IN_USE` or `ORPHANED` (see the module docs).
    pub(crate) state: AtomicU32,
    pub(crate) domain_id: u64,
    /// The domain's shared state (`inner::Inner`), type-erased here to keep
    /// this module below it; see `Record::inner`.
    pub(crate) inner: *const (),
    /// Registry link; immutable once the record is published.
    next: *mut Record,
    /// The owner thread's list of its records (owner only).
    pub(crate) thread_next: Cell<*const Record>,
    /// Who owns the record and for what, for stall reports (set at claim;
    /// `kind` is owner-only, this copy is for the grace period's thread).
    owner: Mutex<(Owner, Kind)>,
    pub(crate) stalled_gp: AtomicU64,
    /// 0, or, once the owner thread is exiting with a section on the record
    /// possibly left open, `life << 32 | tid`: a grace period waiting for
    /// the record ends the section of a leaked guard once that thread is
    /// gone (module docs, "A record's life").
    pub(crate) retired: AtomicU64,
    /// The owner's life: advanced at each claim (owner only), so a
    /// `retired` mark names one owner.
    life: Cell<u32>,
}

// SAFETY: the `UnsafeCell`/`Cell` fields are accessed by one thread at a
// time, as documented on the module: the owner, or a stealer that has won
// the steal handshake (`local`), or, for `handed`, the exiting owner until
// its CAS sets `LEFT` and the one stealer holding the steal lock after it
// sees `LEFT` (handshake.rs, "An owner's exit is handed off": the record
// is released only after that stealer cleared `LEFT`). Raw pointers point
// into the domain, which outlives every record in use (`state` protocol).
unsafe impl Sync for Record {}
// SAFETY: as above; a record moves between threads only through the
// registry, with ownership transferred by the `state` CAS.
unsafe impl Send for Record {}

impl Record {
    fn new(inner: *const (), domain_id: u64, kind: Kind) -> Record {
        Record {
            ctr: AtomicU64::new(0),
            flags: Cell::new(0),
            kind: Cell::new(kind),
            busy: AtomicBool::new(false),
            steal: AtomicU8::new(0),
            local: UnsafeCell::new(Local {
                open: OpenBatch::new(),
                sealed: Chain::new(),
                ready: Chain::new(),
            }),
            run_seq: AtomicU64::new(0),
            open_epoch: AtomicU64::new(0),
            active_epoch: AtomicU64::new(0),
            exits: UnsafeCell::new(Chain::new()),
            handed: UnsafeCell::new(Chain::new()),
            spare: Cell::new(None),
            opened: Cell::new(false),
            state: AtomicU32::new(IN_USE),
            domain_id,
            inner,
            next: ptr::null_mut(),
            thread_next: Cell::new(ptr::null()),
            owner: Mutex::new((Owner::default(), kind)),
            stalled_gp: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            life: Cell::new(0),
        }
    }

    /// Runs `f` on the record's batches inside one owner section of the
    /// steal handshake ([`handshake::owner_section`]). Owner only.
    #[inline]
    pub(crate) fn with_local<R>(&self, fences: Fences, f: impl FnOnce(&mut Local) -> R) -> R {
        handshake::owner_section(&self.busy, &self.steal, fences, || {
            // SAFETY: the caller owns the record, and inside the owner
            // section no stealer touches `local` (handshake); the borrow
            // ends with `f`, before the section does.
            f(unsafe { &mut *self.local.get() })
        })
    }

    /// The claimant's first writes (right after its CAS `FREE → IN_USE`,
    /// or on a new record before it is published): every owner field back
    /// to its initial value, a new life. What a previous owner left behind
    /// (flags, a `retired` mark, a thread link, a stall mark) never carries
    /// over. Kept on purpose: `spare` (an empty batch node, a cache) and
    /// `run_seq` (even, counting on: a `barrier` compares it).
    pub(crate) fn take_over(&self, kind: Kind) {
        debug_assert!(
            !self.busy.load(Ordering::Relaxed),
            "claimed inside a section"
        );
        // SAFETY: `exits` is owner-only, and we are the owner now.
        debug_assert!(unsafe { (*self.exits.get()).is_empty() }, "hooks left");
        // SAFETY: no hand-off is under way on a free record (`handshake`).
        debug_assert!(unsafe { (*self.handed.get()).is_empty() }, "handed");
        debug_assert!(self.run_seq.load(Ordering::Relaxed) % 2 == 0, "a run left");
        self.life.set(self.life.get().wrapping_add(1));
        self.kind.set(kind);
        self.flags.set(0);
        self.opened.set(false);
        self.thread_next.set(ptr::null());
        // Relaxed (all): values every release path already left (0), set
        // again so that the reset does not depend on which path that was;
        // nobody acts on them before the claimant's next Release.
        self.retired.store(0, Ordering::Relaxed);
        self.ctr.store(0, Ordering::Relaxed);
        self.stalled_gp.store(0, Ordering::Relaxed);
        self.open_epoch.store(0, Ordering::Relaxed);
        self.active_epoch.store(0, Ordering::Relaxed);
        self.set_owner(kind);
    }

    /// Nesting depth of the record's read sections.
    #[inline]
    pub(crate) fn nesting(&self) -> u32 {
        // Relaxed: read by the owner (its own word) or as a snapshot.
        (self.ctr.load(Ordering::Relaxed) & NEST_MASK) as u32
    }

    /// The owner's identity and what the record is for, for stall
    /// reports.
    pub(crate) fn owner(&self) -> (Owner, Kind) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_owner(&self, kind: Kind) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = (Owner::current(), kind);
    }

    /// Marks the record as its exiting owner's, with a section that may
    /// stay open (owner only): once the owner thread is gone, a grace
    /// period that waits for the record releases it.
    pub(crate) fn mark_retired(&self) {
        let tid = Owner::current().tid as u32;
        // Release: pairs with `release_leaked_with`'s CAS (Acquire): the
        // owner's writes before the mark (its exit path's) are visible to
        // the grace period that releases the record.
        self.retired.store(
            u64::from(self.life.get()) << 32 | u64::from(tid),
            Ordering::Release,
        );
    }

    /// The owner's last writes before it hands the record back
    /// ([`release`](Record::release), `exit::release_main`): the section
    /// is over, the mark gone, the owner fields clean.
    pub(crate) fn end_ownership(&self) {
        self.flags.set(0);
        self.thread_next.set(ptr::null());
        // Relaxed: `release_leaked_with` acts only once the owner thread is
        // gone, so after this store (module docs, "Exactly one releaser").
        self.retired.store(0, Ordering::Relaxed);
        // Release: as a guard's exit (for a reader of the word that sees
        // 0 before the `state` store below).
        self.ctr.store(0, Ordering::Release);
    }

    /// Called by a grace period waiting for this record: if it is retired
    /// and its owner thread no longer exists, the section that holds it
    /// was leaked: end it and hand the record back. True if it did.
    #[cold]
    pub(crate) fn release_leaked(&self) -> bool {
        self.release_leaked_with(thread_alive)
    }

    /// [`release_leaked`](Record::release_leaked), asking `alive` whether
    /// a thread exists (the loom model answers for it).
    pub(crate) fn release_leaked_with(&self, alive: impl FnOnce(i32) -> bool) -> bool {
        // Relaxed: a hint; the CAS below decides.
        let mark = self.retired.load(Ordering::Relaxed);
        if mark == 0 || alive(mark as u32 as i32) {
            return false;
        }
        // The owner left its exit to a stealer still finishing it: not
        // yet (a later scan releases it; `handshake`).
        if handshake::hand_off_pending(&self.steal) {
            return false;
        }
        // Acquire: pairs with `mark_retired`'s Release. One winner: the
        // owner is gone (so it stores nothing more), a concurrent releaser
        // fails this CAS, and a later life's mark differs.
        if self
            .retired
            .compare_exchange(mark, 0, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Release: as a guard's exit.
        self.ctr.store(0, Ordering::Release);
        // Release: hands the record back (pairs with the claim's Acquire).
        // Fails only if the domain shut down meanwhile (`ORPHANED`): the
        // record then stays with the domain.
        let _ = self
            .state
            .compare_exchange(IN_USE, FREE, Ordering::Release, Ordering::Relaxed);
        true
    }

    /// Whether the record has no owner (a grace period's scan: `past.rs`).
    #[inline]
    pub(crate) fn is_free(&self) -> bool {
        // Acquire: pairs with the Release that handed the record back: the
        // last owner's sections happen-before the scan's caller goes on.
        self.state.load(Ordering::Acquire) == FREE
    }

    /// Hands the record back for reuse (a reader's or a temporary guard's:
    /// never orphaned, a live guard or reader holds a domain handle).
    #[cold]
    pub(crate) fn release(&self) {
        self.end_ownership();
        // Release: hands the record back (pairs with the claim's Acquire CAS).
        self.state.store(FREE, Ordering::Release);
    }
}

/// Whether thread `tid` of this process still exists.
fn thread_alive(tid: i32) -> bool {
    #[cfg(any(miri, exitq_loom))]
    {
        let _ = tid;
        true
    }
    #[cfg(not(any(miri, exitq_loom)))]
    {
        // SAFETY: tgkill with signal 0 only checks for existence and
        // permission; it delivers nothing.
        let r = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
}

/// The process's main thread's tid (its pid); 0 until the first domain.
static MAIN_TID: AtomicI32 = AtomicI32::new(0);

/// Notes the process's main thread: when the first domain is built, and
/// in a `fork()` child (whose only thread, the forking one, is its main
/// thread), from its fork handler.
pub(crate) fn note_main_thread() {
    #[cfg(not(any(miri, exitq_loom)))]
    // SAFETY: getpid has no preconditions (and is async-signal-safe).
    let pid = unsafe { libc::getpid() };
    #[cfg(any(miri, exitq_loom))]
    let pid = 0;
    // Relaxed: read by threads created later (ordered by their creation)
    // or by the thread that stored it.
    MAIN_TID.store(pid, Ordering::Relaxed);
}

#[cfg(not(miri))]
extern "C" {
    // In glibc's libc.so since 2.34 (librt before); the `libc` crate does
    // not declare it for Linux.
    fn pthread_getcpuclockid(thread: libc::pthread_t, clock: *mut libc::clockid_t) -> libc::c_int;
}

/// The calling thread's kernel tid, without a system call where it can:
/// `gettid(2)` costs about 230 ns in this VM, a tenth of a herd thread's
/// whole exitq cost. glibc keeps the tid in the thread's descriptor
/// (the kernel writes it at `clone`), and `pthread_getcpuclockid` returns
/// it encoded as the thread's CPU-time clock, in the kernel's ABI
/// (`include/linux/posix-timers_types.h`): `~tid << 3`, low bits
/// `CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED` (6). Anything else falls
/// back to `gettid`.
#[cfg(not(miri))]
fn current_tid() -> i32 {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `pthread_self()` is the calling thread's own, live handle;
    // `clock` is writable.
    let rc = unsafe { pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    if rc == 0 && clock & 7 == 6 {
        let tid = !(clock >> 3);
        if tid > 0 {
            return tid;
        }
    }
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Who owns a record, for stall reports and leaked-guard checks: its
/// kernel tid. The thread's name is read only when a report needs it
/// (`/proc/self/task/<tid>/comm`): a `prctl` per new thread cost every
/// thread of a herd a syscall for a report that almost never comes.
#[derive(Default, Clone, Copy)]
pub(crate) struct Owner {
    pub(crate) tid: i32,
}

std::thread_local! {
    /// This thread's tid once looked up (no destructor, so it stays
    /// readable during TLS teardown and frees nothing at exit).
    static OWNER: Cell<Owner> = const { Cell::new(Owner { tid: 0 }) };
}

/// Forgets the calling thread's cached identity: called in the child of
/// `fork()` (`fork::in_child`, on the forking thread, the child's only
/// one), whose tid differs from its parent's. A stale tid names no thread
/// of the child, so `release_leaked` would take the thread for gone while
/// it lives and end a live section.
#[cfg_attr(any(miri, exitq_loom), allow(dead_code))]
pub(crate) fn forget_owner() {
    OWNER.set(Owner::default());
}

impl Owner {
    /// The calling thread's identity: looked up on the thread's first
    /// call ([`current_tid`], no system call), then a thread-local read.
    pub(crate) fn current() -> Owner {
        let cached = OWNER.get();
        if cached.tid != 0 {
            return cached;
        }
        #[cfg(not(miri))]
        let tid = current_tid();
        #[cfg(miri)]
        let tid = 1; // miri has no gettid: stall reports say thread 1
        let owner = Owner { tid };
        OWNER.set(owner);
        owner
    }

    /// Whether this is the process's main thread (as noted by
    /// [`note_main_thread`]).
    pub(crate) fn is_main(&self) -> bool {
        // Relaxed: see `MAIN_TID`.
        self.tid == MAIN_TID.load(Ordering::Relaxed)
    }

    /// The thread's name now, if it has one and still exists.
    pub(crate) fn name(&self) -> Option<String> {
        if cfg!(miri) {
            return None;
        }
        let comm = std::fs::read_to_string(format!("/proc/self/task/{}/comm", self.tid)).ok()?;
        let name = comm.trim_end_matches('\n');
        (!name.is_empty()).then(|| name.to_owned())
    }
}

/// The domain's push-only list of records.
pub(crate) struct Registry {
    head: AtomicPtr<Record>,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Iterates the registry. Records are never removed while the domain
    /// lives.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Record> + '_ {
        // Acquire: pairs with the Release CAS that published each record
        // (we read its initialised fields).
        let mut p = self.head.load(Ordering::Acquire);
        std::iter::from_fn(move || {
            if p.is_null() {
                return None;
            }
            // SAFETY: published records stay allocated until the registry
            // is dropped (`free_all`).
            let r = unsafe { &*p };
            p = r.next;
            Some(r)
        })
    }

    /// A record for the calling thread: a free one reused, or a new one
    /// (one allocation). Returns it and whether it is new.
    pub(crate) fn claim(&self, inner: *const (), domain_id: u64, kind: Kind) -> (&Record, bool) {
        let claimed = self.claim_record(inner, domain_id, kind);
        // Full fence between the claim (the state's CAS, or the push onto
        // the registry) and the owner's first load of the epoch: a grace
        // period's scan that read the record `FREE` (or did not find it)
        // after its own scan fence is then followed by this fence, so the
        // owner loads the new epoch (`past.rs`, a free record).
        sync::full_fence();
        claimed
    }

    fn claim_record(&self, inner: *const (), domain_id: u64, kind: Kind) -> (&Record, bool) {
        for r in self.iter() {
            // Acquire on success: pairs with the Release that handed the
            // record back (`Record::release`, the exit path's CAS), so the
            // previous owner's last writes (empty batches, ctr 0) are
            // visible to us.
            if r.state.load(Ordering::Relaxed) == FREE
                && r.state
                    .compare_exchange(FREE, IN_USE, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                r.take_over(kind);
                return (r, false);
            }
        }
        let r = Box::into_raw(Box::new(Record::new(inner, domain_id, kind)));
        // SAFETY: `r` is fresh and ours until published below.
        unsafe { (*r).take_over(kind) };
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: not yet published; we are the only one writing it.
            unsafe { (*r).next = head };
            // Release: publishes the record's fields to registry scanners
            // (their Acquire load in `iter`).
            match self
                .head
                .compare_exchange_weak(head, r, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        // SAFETY: published records live as long as the registry.
        (unsafe { &*r }, true)
    }

    /// Frees every record, handing back whatever batches they still hold
    /// (the domain is being freed; no thread holds a record any more).
    pub(crate) fn free_all(&mut self, mut leftover: impl FnMut(Box<Node<Work>>)) {
        // Acquire: pairs with the records' publication; we are the last
        // user anyway (`&mut self`).
        let mut p = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: every record was allocated by `claim` with `Box`, and
            // no thread holds one (the caller's contract).
            let r = unsafe { Box::from_raw(p) };
            p = r.next;
            let mut local = r.local.into_inner();
            for node in ChainNodes(local.take_queued()) {
                leftover(node);
            }
            if let Some(node) = local.open.take() {
                leftover(node);
            }
        }
    }
}

/// Iterates a chain's nodes (not their values).
pub(crate) struct ChainNodes<T>(pub(crate) Chain<T>);

impl<T> Iterator for ChainNodes<T> {
    type Item = Box<Node<T>>;
    fn next(&mut self) -> Option<Box<Node<T>>> {
        self.0.pop_front()
    }
}

#[cfg(all(test, not(miri), not(exitq_loom)))]
mod tests {
    use super::current_tid;

    /// The tid decoded from the thread's CPU clock is the kernel's, on the
    /// main thread and on new ones (whose descriptors glibc reuses).
    #[test]
    fn current_tid_is_gettid() {
        // SAFETY: gettid has no preconditions.
        assert_eq!(current_tid(), unsafe { libc::gettid() });
        for _ in 0..4 {
            let pairs: Vec<(i32, i32)> = (0..8)
                .map(|_| {
                    // SAFETY: as above.
                    std::thread::spawn(|| (current_tid(), unsafe { libc::gettid() }))
                })
                .map(|t| t.join().unwrap())
                .collect();
            for (decoded, real) in pairs {
                assert_eq!(decoded, real);
            }
        }
    }
}
