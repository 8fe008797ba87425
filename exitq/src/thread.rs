//! The calling thread's side: which records it holds, whether it is inside
//! a read section, and the destructor that runs its exit path.
//!
//! # The thread's records
//!
//! * `main`: one record per domain the thread used (`Kind::Main`): its
//!   `Domain::read` sections, its batches, its exit hooks. Found through a
//!   one-entry cache keyed by the domain's address, else by walking the
//!   list; claimed on first use.
//! * `aux`: records whose read sections are the thread's too but that are
//!   not its main record: [`Reader`](crate::Reader)s' records, temporary
//!   guards' records, and a main record retired at thread exit while a
//!   guard on it is still alive. Walked by [`inside`], so that "is the
//!   caller inside a read section of this domain?" sees every kind of
//!   guard and no path waits for the caller's own section, and by the exit
//!   path (below).
//!
//! Both lists live in a thread-local without a destructor, readable until
//! the thread is gone (a `Reader` or a guard dropped by a later
//! destructor still unlinks itself).
//!
//! # The exit destructor
//!
//! When the thread claims its first record of either kind, it arms its
//! exit destructor ([`arm_exit`]): it sets its value of a process-wide
//! pthread key, created when the first domain is built, whose destructor
//! glibc runs at every thread exit (return, `pthread_exit`, cancellation)
//! after every thread-local destructor.
//!
//! Why not a Rust thread-local with a destructor (exitq's first design):
//! Rust registers those with glibc's `__cxa_thread_atexit_impl`, which
//! allocates and, under the process-wide `dl_load_lock`, looks up the
//! caller's shared object (`_dl_find_dso_for_object`) on every call:
//! about 300 ns per new thread in this VM, and one more global lock taken
//! by every thread of a herd. Setting a key is a store into the thread's
//! descriptor. Only if the key cannot be created (the process used up
//! `PTHREAD_KEYS_MAX`) or set (`ENOMEM` for a key above 31) does a thread
//! fall back to a thread-local with a destructor, which runs the same
//! path. glibc keeps a shared object with pending thread-local
//! destructors loaded; a key's destructor it does not know about, so the
//! first domain also pins the object exitq lives in (`pin_own_object`):
//! a `dlclose` of a plugin or JNI library that uses exitq leaves it
//! mapped for the threads that still have to exit.
//!
//! The exit path marks the thread as exiting (later uses of a domain take
//! temporary records and publish at once), marks every auxiliary record
//! retired (a section left open on one, by a leaked guard or `Reader`,
//! ends once the thread is gone: `record`, "A record's life"; records
//! claimed later are marked at claim), then takes the main records off
//! the list one at a time and retires each ([`exit::retire`](crate::exit));
//! user code that runs meanwhile (hooks of an orphaned domain) cannot
//! disturb that walk, and finds the records not yet walked through the
//! list, never through the cache, which stays empty from the exit path's
//! start (a record cached by a hook would outlive its release further on
//! in the walk). In a `fork()` child the walk leaves the records of
//! the parent's domains alone (`fork`).
//!
//! Order. Because the exit path runs after the thread-locals'
//! destructors, a guard or `Reader` dropped by one of them is released
//! the ordinary way, and what they defer goes to the thread's batches and
//! is handed over with them. glibc runs key destructors in the keys'
//! creation order (and again, up to four rounds, for keys set meanwhile):
//! a key created after the first domain has its destructor run after
//! exitq's exit path, and can still use a domain (temporary records,
//! published at once); a key created before (a runtime's) runs first and
//! uses the domain as any code of the thread does (a first claim there
//! arms exitq's key for the next round). The main thread arms a
//! thread-local destructor as well: glibc's `exit()` runs thread-local
//! destructors for it but no key destructors, and the exit hooks of a
//! domain dropped before `exit()` must still run. The path runs once,
//! whichever destructor comes first.
//!
//! # Orphans
//!
//! A main record whose domain was dropped while the thread still held it
//! is `ORPHANED` and keeps the domain's memory alive. Its exit hooks wait
//! for the thread's exit, as the docs promise; a record without hooks is
//! given back when the thread next claims a record, after the walk.
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use crate::exit;
use crate::fork;
use crate::inner::Inner;
use crate::past;
use crate::record::{Kind, Owner, Record, ORPHANED};
use crate::stats::Counters;
use crate::sync::Ordering;

/// The calling thread's exitq state (no destructor: see the module docs).
struct ThreadState {
    /// (domain, this thread's main record in it), keyed by the domain's
    /// address. An address is reused only after its `Inner` is freed, and a
    /// cached record keeps its `Inner` alive: it is `IN_USE` (the domain is
    /// live) or `ORPHANED` (the record holds a strong count); every path
    /// that releases a main record clears the entry first, and once the
    /// exit path has started the entry stays empty: its walk releases the
    /// records while user code runs between releases (an orphaned
    /// domain's exit hooks, which may use any domain), and an entry that
    /// code filled would hand a released record to the next use (another
    /// thread may have claimed it: a read section no grace period sees).
    cache: Cell<(*const Inner, *const Record)>,
    /// Head of the main records, linked through `Record::thread_next`.
    main: Cell<*const Record>,
    /// Head of the auxiliary records, linked the same way.
    aux: Cell<*const Record>,
    /// The exit destructor has started: no more main records.
    exiting: Cell<bool>,
    /// The exit destructor is armed ([`arm_exit`]): the fork generation
    /// it was armed in, plus one (0: not armed). A `fork()` child's
    /// thread, now its process's main thread, arms again.
    armed: Cell<u64>,
}

/// The fallback exit destructor: a thread-local whose destructor runs the
/// exit path, for a thread whose pthread key cannot be set.
struct ExitTrigger;

std::thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            cache: Cell::new((ptr::null(), ptr::null())),
            main: Cell::new(ptr::null()),
            aux: Cell::new(ptr::null()),
            exiting: Cell::new(false),
            armed: Cell::new(0),
        }
    };
    static EXIT: ExitTrigger = const { ExitTrigger };
}

impl Drop for ExitTrigger {
    fn drop(&mut self) {
        run_exit();
    }
}

/// The process's exit key, once created: 0 not yet, [`NO_KEY`] when
/// `pthread_key_create` failed (no keys left), else the key plus 2. Never
/// deleted: threads may be armed until the process ends.
///
/// An atomic, not a `OnceLock`: a `fork()` while another thread of the
/// parent was initializing the `OnceLock` (building the process's first
/// domain) left it "being initialized" for ever in the child, whose own
/// first domain then never got built (a forked test child hung in
/// `Pool::new`: `tests/red_fork.rs`). Now no thread waits for another.
static EXIT_KEY: AtomicU64 = AtomicU64::new(0);

/// [`EXIT_KEY`]'s value when no key could be created.
const NO_KEY: u64 = 1;

/// Creates the exit key if no domain did yet (a failure is kept: threads
/// then fall back to the thread-local destructor), and notes the main
/// thread, which arms the thread-local destructor as well (glibc's
/// `exit()` runs thread-local destructors for it, key destructors not, and
/// the exit hooks of a domain dropped before `exit()` must run then).
pub(crate) fn create_exit_key() {
    exit_key();
}

fn exit_key() -> Option<libc::pthread_key_t> {
    let decode = |v: u64| (v != NO_KEY).then(|| (v - 2) as libc::pthread_key_t);
    // Acquire: pairs with the AcqRel CAS below: the key it published was
    // created (and the main thread noted) before.
    let known = EXIT_KEY.load(AtomicOrdering::Acquire);
    if known != 0 {
        return decode(known);
    }
    // Once per process, but threads that get here at once each do it (the
    // steps are idempotent, and the losers' keys are deleted below); so
    // does a fork child whose parent was here at the fork (a child notes
    // its own main thread in its fork handler too).
    crate::record::note_main_thread();
    pin_own_object();
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is writable; `exit_destructor` has the signature
    // glibc expects and does not unwind (an `extern "C"` function
    // aborts instead).
    let rc = unsafe { libc::pthread_key_create(&mut key, Some(exit_destructor)) };
    let mine = if rc == 0 { u64::from(key) + 2 } else { NO_KEY };
    // AcqRel: the Release half publishes the key (see the load above);
    // the Acquire half, on failure, reads the winner's as that load does.
    match EXIT_KEY.compare_exchange(0, mine, AtomicOrdering::AcqRel, AtomicOrdering::Acquire) {
        Ok(_) => decode(mine),
        Err(winner) => {
            if rc == 0 {
                // SAFETY: our own key, just created, never set or
                // published.
                unsafe { libc::pthread_key_delete(key) };
            }
            decode(winner)
        }
    }
}

/// Makes the shared object holding exitq (if it is one: a plugin, a JNI
/// library) permanent, so that `dlclose` never unmaps it: glibc calls the
/// exit key's destructor, in that object, at every armed thread's exit,
/// and the domain's reclaimer thread runs there. (glibc keeps an object
/// with pending thread-local destructors loaded by itself; it knows
/// nothing of a key's.) One `dladdr` and one `dlopen(RTLD_NOLOAD |
/// RTLD_NODELETE)`, once per process; the handle is never closed. (In the
/// main program there is nothing to unload, and the call changes
/// nothing.)
fn pin_own_object() {
    #[cfg(not(any(miri, exitq_loom)))]
    {
        // SAFETY: `Dl_info` is plain data (pointers and integers), valid
        // zeroed.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let addr = exit_destructor as *const c_void;
        // SAFETY: dladdr only looks `addr` up and writes `info`.
        if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
            return;
        }
        // SAFETY: `dli_fname` is the loader's NUL-terminated name of an
        // object loaded now (ours); RTLD_NOLOAD only takes a reference to
        // it, RTLD_NODELETE marks it never to be unloaded.
        let _ = unsafe {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            )
        };
    }
}

/// The exit key's destructor: the thread is exiting.
extern "C" fn exit_destructor(_: *mut c_void) {
    run_exit();
}

/// Arms the calling thread's exit destructor (module docs, "The exit
/// destructor"); false if the thread's exit path has started (or its
/// thread-locals are being destroyed and the key could not be set).
fn arm_exit() -> bool {
    let (exiting, armed) = STATE.with(|s| (s.exiting.get(), s.armed.get()));
    if exiting {
        return false;
    }
    let generation = fork::current() + 1;
    if armed == generation {
        return true;
    }
    let keyed = exit_key().is_some_and(|key| {
        // Any non-null value: glibc calls a key's destructor only for a
        // non-null value, and ours ignores it.
        let armed = NonNull::<c_void>::dangling().as_ptr();
        // SAFETY: a key created by `exit_key` and never deleted.
        unsafe { libc::pthread_setspecific(key, armed) == 0 }
    });
    if !keyed || Owner::current().is_main() {
        // The fallback, or the main thread's destructor for `exit()`.
        let registered = EXIT.try_with(|_| ()).is_ok();
        if !registered && !keyed {
            // The thread-locals are being destroyed: the fallback
            // destructor can no longer be registered (or has run).
            return false;
        }
    }
    STATE.with(|s| s.armed.set(generation));
    true
}

/// The exit path (module docs): runs once per thread, from whichever
/// destructor armed it.
fn run_exit() {
    STATE.with(|s| {
        if s.exiting.replace(true) {
            return;
        }
        s.cache.set((ptr::null(), ptr::null()));
        // Readers' and temporary guards' records: a section on them
        // may never end (a leaked guard or `Reader`); once this thread
        // is gone, grace periods stop waiting for it (`record`, "A
        // record's life"). A `Reader` dropped later still releases its
        // record itself.
        for r in records(&s.aux) {
            r.mark_retired();
        }
        loop {
            let p = s.main.get();
            if p.is_null() {
                break;
            }
            // SAFETY: records in our list are IN_USE or ORPHANED and
            // owned by this thread; either way their domain is alive.
            let r = unsafe { &*p };
            s.main.set(r.thread_next.get());
            r.thread_next.set(ptr::null());
            // SAFETY: as above: the domain is alive.
            if unsafe { r.domain() }.forked() {
                // A fork() child exiting: the records and their work
                // are the parent's (`fork`); leave them.
                continue;
            }
            // SAFETY: our record, just unlinked: retired once.
            match unsafe { exit::retire(r) } {
                // A guard on it is still alive (a later thread-local
                // destructor holds it): its section is still ours.
                exit::Retired::Kept => link(&s.aux, r),
                // Released: `r` may be another thread's already (its
                // claim resets the flags), so it is not looked at again.
                // The orphan's count goes back after the last use of `r`
                // (it may be freed).
                exit::Retired::Released(orphan) => {
                    if let Some(o) = orphan {
                        o.release();
                    }
                }
            }
        }
    });
}

/// Pushes `r` at the front of a thread list.
fn link(head: &Cell<*const Record>, r: &Record) {
    r.thread_next.set(head.get());
    head.set(r);
}

/// Unlinks `r` from a thread list; true if it was there.
fn unlink(head: &Cell<*const Record>, r: &Record) -> bool {
    let mut prev: *const Record = ptr::null();
    let mut p = head.get();
    while !p.is_null() {
        if ptr::eq(p, r) {
            let next = r.thread_next.get();
            if prev.is_null() {
                head.set(next);
            } else {
                // SAFETY: `prev` is one of this thread's records.
                unsafe { (*prev).thread_next.set(next) };
            }
            r.thread_next.set(ptr::null());
            return true;
        }
        prev = p;
        // SAFETY: records in our lists are ours and alive.
        p = unsafe { (*p).thread_next.get() };
    }
    false
}

/// Iterates a thread list (the caller must not change it meanwhile).
fn records(head: &Cell<*const Record>) -> impl Iterator<Item = &Record> {
    let mut p = head.get();
    std::iter::from_fn(move || {
        if p.is_null() {
            return None;
        }
        // SAFETY: records in our lists are ours and alive (see `cache`).
        let r = unsafe { &*p };
        p = r.thread_next.get();
        Some(r)
    })
}

/// The cached main record, if the cache holds `inner`'s (the read and
/// defer fast paths).
#[inline(always)]
pub(crate) fn cached(inner: &Inner) -> Option<&Record> {
    let (key, p) = STATE.with(|s| s.cache.get());
    // SAFETY: the cache only holds a record this thread owns in that
    // domain, alive while the caller borrows the domain (see `cache`).
    ptr::eq(key, inner).then(|| unsafe { &*p })
}

/// The calling thread's main record in `inner`, claiming one on first use.
/// `None` once the thread's exit path has started (callers then publish at
/// once or take a temporary record).
#[inline]
pub(crate) fn main_record(arc: &Arc<Inner>) -> Option<&Record> {
    if let Some(r) = cached(arc) {
        return Some(r);
    }
    main_record_slow(arc)
}

#[cold]
fn main_record_slow(arc: &Arc<Inner>) -> Option<&Record> {
    let inner: &Inner = arc;
    if let Some(r) = existing_main(inner) {
        return Some(r);
    }
    if !arm_exit() {
        // The thread is exiting (its exit destructor ran or is running).
        return None;
    }
    let orphans = sweep_orphans();
    let (r, new) = inner
        .registry
        .claim(Arc::as_ptr(arc) as *const (), inner.id, Kind::Main);
    if new {
        Counters::add(&inner.stats.participants, 1);
    }
    STATE.with(|s| {
        link(&s.main, r);
        s.cache.set((inner, r));
    });
    for o in orphans {
        // SAFETY: an orphaned record of ours with no exit hooks, unlinked
        // by the sweep; released once, after the walk.
        if let exit::Retired::Released(Some(orphan)) = unsafe { exit::retire(o) } {
            orphan.release();
        }
    }
    Some(r)
}

/// The calling thread's main record in `inner`, if it has one (never
/// claims).
pub(crate) fn existing_main(inner: &Inner) -> Option<&Record> {
    if let Some(r) = cached(inner) {
        return Some(r);
    }
    STATE.with(|s| {
        let found = records(&s.main).find(|r| r.domain_id == inner.id)?;
        // Back online if `offline` left it offline: before the cache hands
        // the record to a section's entry (see `offline`).
        past::online(&inner.gp.hot.gp_ctr, &found.ctr);
        // Not while exiting: the exit walk releases the listed records one
        // by one, with user code (an orphaned domain's exit hooks) running
        // between releases; a record cached by that code would outlive its
        // release (see `cache`).
        if !s.exiting.get() {
            s.cache.set((inner, found));
        }
        // SAFETY: one of our records, alive while `inner` is borrowed.
        Some(unsafe { &*(found as *const Record) })
    })
}

/// The calling thread goes offline in `only`'s domain, or in every domain
/// it has a main record in (`Domain::thread_offline`,
/// `crate::thread_offline`): each such record outside any section shows
/// [`past::OFFLINE`], which every grace period's scan finds past, until
/// the thread next uses that domain. A record inside a section (a guard
/// still alive, leaked or not) keeps its word and holds grace periods as
/// before.
///
/// Back online lazily: the cache is cleared here, and it is filled again
/// only by [`existing_main`] (which calls [`past::online`]: an idle word,
/// then a full fence, before the caller's first load of the epoch) or by
/// a new claim. So every path that enters a section on a main record, or
/// defers into it, passes the fence first: `Domain::read`'s fast path
/// takes the record from the cache alone. `Reader`s' records (the `aux`
/// list) are left alone: their fast path takes no such turn
/// (`Reader::offline` goes offline and back eagerly).
pub(crate) fn offline(only: Option<&Inner>) {
    STATE.with(|s| {
        for r in records(&s.main) {
            if only.map_or(true, |inner| r.domain_id == inner.id) {
                past::offline(&r.ctr);
            }
        }
        s.cache.set((ptr::null(), ptr::null()));
    });
}

/// Shows the calling thread offline in every exitq domain until its next
/// use of each: call it before the thread blocks for a while (a pool's
/// worker about to park, a server thread waiting for a request, a
/// runtime's `on_thread_park` hook).
///
/// A grace period completes without membarrier(2) (an interrupt of every
/// CPU running a thread of the process) when every registered thread shows
/// it has seen the grace period start; a thread that used a domain and
/// then blocks cannot show it, and every grace period makes the heavy
/// barrier on its account while it sleeps. Offline, it counts as past
/// every grace period. Coming back is automatic: the thread's next
/// [`read`](crate::Domain::read), [`defer`](crate::Domain::defer) or
/// other use of a domain first makes one full fence (liburcu-qsbr's
/// `rcu_thread_offline` and `rcu_thread_online`, with the second done for
/// you). Costs a store per domain the thread has used, and the fence at
/// the next use. A read section the thread holds stays held (a guard's
/// domain is not taken offline under it); a [`Reader`](crate::Reader)'s
/// or [`QsbrReader`](crate::QsbrReader)'s own word is not changed: use
/// their `offline`. [`Domain::thread_offline`](crate::Domain::thread_offline)
/// does the same for one domain.
///
/// # Examples
///
/// ```
/// let domain = exitq::Domain::new();
/// let (tx, rx) = std::sync::mpsc::channel::<u32>();
/// let worker = {
///     let domain = domain.clone();
///     std::thread::spawn(move || loop {
///         exitq::thread_offline(); // about to block
///         let Ok(job) = rx.recv() else { break };
///         let _guard = domain.read(); // back online first, by itself
///         assert_eq!(job, 7);
///     })
/// };
/// tx.send(7).unwrap();
/// drop(tx);
/// worker.join().unwrap();
/// domain.synchronize();
/// ```
pub fn thread_offline() {
    offline(None);
}

/// Unlinks the orphaned main records that have no exit hooks and returns
/// them, to be released after the walk (releasing can free their domain,
/// which runs user code).
fn sweep_orphans() -> Vec<&'static Record> {
    STATE.with(|s| {
        let mut found = Vec::new();
        let mut p = s.main.get();
        while !p.is_null() {
            // SAFETY: our record (see `cache`); 'static until released.
            let r: &'static Record = unsafe { &*p };
            p = r.thread_next.get();
            // Acquire: pairs with shutdown's AcqRel orphan marking.
            if r.state.load(Ordering::Acquire) == ORPHANED {
                // SAFETY: `exits` is owner-only, and we are the owner.
                let no_hooks = unsafe { (*r.exits.get()).is_empty() };
                if no_hooks {
                    found.push(r);
                }
            }
        }
        for r in &found {
            unlink(&s.main, r);
            if ptr::eq(s.cache.get().1, *r) {
                s.cache.set((ptr::null(), ptr::null()));
            }
        }
        found
    })
}

/// Unlinks the calling thread's main record in `inner` (for
/// `retire_thread`); the caller then retires it.
pub(crate) fn unlink_main(inner: &Inner) -> Option<&Record> {
    let r = existing_main(inner)?;
    STATE.with(|s| {
        unlink(&s.main, r);
        s.cache.set((ptr::null(), ptr::null()));
    });
    Some(r)
}

/// Adds a reader's or a temporary guard's record to the thread's
/// auxiliary list, so that the thread's exit marks it retired (a leaked
/// section on it then ends once the thread is gone). If the exit path has
/// already run (or is running), it is marked now.
pub(crate) fn link_aux(r: &Record) {
    STATE.with(|s| link(&s.aux, r));
    // Arms the exit destructor if this is the thread's first record.
    if !arm_exit() {
        r.mark_retired();
    }
}

/// Removes a record from the thread's auxiliary list.
pub(crate) fn unlink_aux(r: &Record) {
    STATE.with(|s| unlink(&s.aux, r));
}

/// Whether the calling thread is inside a read section of `inner`, of any
/// kind: its main record's, a `Reader`'s, a temporary guard's.
pub(crate) fn inside(inner: &Inner) -> bool {
    open_sections(inner, |_| ())
}

/// Calls `f` on every record of the thread with an open read section of
/// `inner`; true if there was any.
pub(crate) fn open_sections(inner: &Inner, mut f: impl FnMut(&Record)) -> bool {
    let mut any = false;
    if let Some(r) = existing_main(inner) {
        if r.nesting() > 0 {
            f(r);
            any = true;
        }
    }
    STATE.with(|s| {
        for r in records(&s.aux) {
            if r.domain_id == inner.id && r.nesting() > 0 {
                f(r);
                any = true;
            }
        }
    });
    any
}

/// The calling thread's main record's reader word in `inner`, if it has
/// one (never claims, leaves the cache alone): for the offline unit tests
/// (`offline_tests.rs`).
#[cfg(test)]
pub(crate) fn main_word(inner: &Inner) -> Option<u64> {
    STATE.with(|s| {
        let r = records(&s.main).find(|r| r.domain_id == inner.id)?;
        Some(r.ctr.load(Ordering::Relaxed))
    })
}
