//! Thread-exit hooks with a preallocated node, and the exit path.
//!
//! [`Domain::register_exit`](crate::Domain::register_exit) allocates the
//! hook's node (and boxes the closure) at registration and keeps it in the
//! thread's record. When the thread exits, the record's thread-local
//! destructor hands the thread's work to the domain:
//!
//! 1. owner side of the steal handshake (two plain stores and a load, plus
//!    a compiler fence). Should a stealer hold the record (the reclaimer's
//!    idle steal, `barrier`, shutdown), the exit does not wait for it: it
//!    leaves its hooks in the record and hands the rest of the exit to
//!    the stealer with one CAS, and returns (`handshake`, "An owner's exit
//!    is handed off"; steps 2-4 are then the stealer's, and step 4 is
//!    skipped for a record kept for a guard);
//! 2. link the thread's ready and sealed batches, its open batch and the
//!    preallocated exit-hook chain together (pointer writes);
//! 3. push the whole chain onto the domain's list: **one successful
//!    compare-and-swap**, still inside the handshake, so a concurrent
//!    `barrier` sees the work either in the record or on the list;
//! 4. release the record for reuse: an atomic read-modify-write of its
//!    state (`keep_or_release`: against shutdown's orphan marking), then
//!    one compare-and-swap, both uncontended, on the record's own cache
//!    line.
//!
//! No lock, no syscall, no wait, no allocation, no free (the record keeps
//! its spare batch for the next thread). The hooks then run on the reclaimer after a
//! grace period (reverse registration order within a thread), with the
//! batches. Because the exit path cannot wake the reclaimer (that would be
//! a system call, a `write` to its doorbell), an idle reclaimer polls every
//! [`exit_poll`](crate::DomainBuilder::exit_poll) while hooks are armed; any
//! reclaim pass, `barrier` or `exit_barrier` also picks the hooks up.
//!
//! # When the destructor runs
//!
//! The exit path is the destructor of a process-wide pthread key, armed
//! when the thread first uses a domain (`thread`, "The exit destructor").
//! glibc runs key destructors when the thread function returns, on
//! `pthread_exit`, and on `pthread_cancel` (after the forced unwind
//! reaches the start routine), after the thread-locals' destructors, in
//! the keys' creation order (the key is created with the first domain).
//! Code that runs later (the destructor of a key created after the first
//! domain) can still use the domain: `read` takes a temporary record for
//! the guard's lifetime, `defer` publishes the callback alone,
//! `register_exit` pushes the hook at once. Callers who control thread
//! exit themselves can call
//! [`Domain::retire_thread`](crate::Domain::retire_thread) at the point of
//! their choice.
//!
//! # A guard that outlives the destructor
//!
//! A guard held by a later destructor (a `Guard<'static>` of a domain in
//! a static, kept by a younger key's destructor) is still a read section
//! of the thread. The exit path then hands the work over as above but
//! keeps the record: the guard's outermost exit releases it. Should the guard never be dropped
//! (leaked), the section ends when the thread is gone: a grace period that
//! waits for it checks, after the first milliseconds, whether the thread
//! still exists. The same holds for the thread's `Reader`s and temporary
//! guards: the whole protocol, with who may release a record when, is the
//! state table in `record` ("A record's life").
//!
//! # After the domain is dropped
//!
//! A thread that still holds a record when the last
//! [`Domain`](crate::Domain) handle is dropped keeps the domain's memory
//! alive; its exit hooks still wait for its exit, and then run inline (no
//! reader can exist any more, so no grace period is needed).
use std::mem;
use std::sync::Arc;

use crate::batch::Work;
use crate::expedite::Fences;
use crate::handshake;
use crate::inner::Inner;
use crate::llist::{Chain, Node};
use crate::record::{Local, Record, FREE, IN_USE, ORPHANED, RETIRED};
use crate::sync::Ordering;
use crate::wake;

/// Registers hook `f` of the calling thread (`record`: its main record; or
/// `None` when the thread is already exiting: the hook is pushed at once).
pub(crate) fn register(inner: &Inner, record: Option<&Record>, f: Box<dyn FnOnce() + Send>) {
    let node = Node::new(Work::Exit(f));
    // SeqCst: store-buffering pair with the reclaimer's "publish my sleep
    // state; re-check armed_exits" so it does not sleep past `exit_poll`.
    if inner.armed_exits.fetch_add(1, Ordering::SeqCst) == 0 {
        // The first hook armed: the reclaimer must start polling for
        // exited threads, and may sleep with a timeout that does not cover
        // them (`inner.rs`, the reclaimer's states).
        inner.wake_reclaimer(wake::FIRST);
    }
    match record {
        // SAFETY: `exits` is touched only by the owner thread (us).
        Some(r) => unsafe { (*r.exits.get()).push_front(node) },
        None => inner.queue.push(node),
    }
}

/// The thread-exit procedure for one main record (see the module docs).
///
/// # Safety
///
/// Called by the thread that owns `r` (a main record, IN_USE or ORPHANED),
/// once, after removing it from the thread's list and cache.
#[must_use = "an orphan's strong count must be given back (`Orphan::release`)"]
pub(crate) unsafe fn retire(r: &Record) -> Retired {
    // SAFETY: a record in use keeps its domain alive (IN_USE: the domain has
    // not shut down; ORPHANED: the record holds a strong count).
    let inner: &Inner = unsafe { r.domain() };
    // SAFETY: the caller's contract.
    unsafe { retire_with(r, inner.gp.hot.fences, |work| inner.queue.push_chain(work)) }
}

/// [`retire`], pushing the work with `push` (the domain's queue; the loom
/// model's own).
///
/// # Safety
///
/// As [`retire`].
pub(crate) unsafe fn retire_with(
    r: &Record,
    fences: Fences,
    push: impl FnOnce(Chain<Work>),
) -> Retired {
    // SAFETY: `exits` is owner-only and we are the owner.
    let mut hooks: Chain<Work> = mem::take(unsafe { &mut *r.exits.get() });
    loop {
        if handshake::owner_begin(&r.busy, &r.steal, fences) {
            // SAFETY: we own the record and are inside an owner section
            // (no stealer touches `local` until we leave it).
            let local = unsafe { &mut *r.local.get() };
            let mut work = all_work(local, None);
            work.append(hooks);
            // Relaxed: hints for the reclaimer's idle steal.
            r.open_epoch.store(0, Ordering::Relaxed);
            r.active_epoch.store(0, Ordering::Relaxed);
            // The one CAS of the exit path, inside the handshake (module
            // docs, step 3).
            push(work);
            handshake::owner_end(&r.busy);
            return keep_or_release(r);
        }
        match hand_off(r, hooks) {
            Ok(retired) => return retired,
            Err(back) => hooks = back,
        }
    }
}

/// Seals an open batch for the domain's queue (`reclaim::sealed_for_queue`).
pub(crate) type Seal<'a> = dyn Fn(Box<Node<Work>>) -> Box<Node<Work>> + 'a;

/// Everything a record's batches hold, oldest first: the ready and sealed
/// batches, then the open one (sealed for the queue by `seal`, if given;
/// otherwise it keeps its counts and the runner settles them, `run`).
fn all_work(local: &mut Local, seal: Option<&Seal<'_>>) -> Chain<Work> {
    let mut work = local.take_queued();
    if let Some(open) = local.open.take() {
        work.push_back(match seal {
            Some(seal) => seal(open),
            None => open,
        });
    }
    work
}

/// A stealer holds the record: leave the exit to it (`handshake`, "An
/// owner's exit is handed off") rather than wait. `Err` gives the hooks
/// back if the stealer finished meanwhile (the caller enters as usual).
fn hand_off(r: &Record, hooks: Chain<Work>) -> Result<Retired, Chain<Work>> {
    // A guard of ours still open on the record keeps it, as in
    // `keep_or_release`. The domain cannot be orphaned while a stealer
    // holds the record (shutdown orphans after its own steal and the
    // reclaimer's join, and no `barrier` can start once no handle is
    // left), so that case does not arise here.
    let keep = r.nesting() > 0;
    // SAFETY: `handed` is ours until the hand-off succeeds: a stealer
    // reads it only after seeing `LEFT`, which only our CAS sets, and the
    // last life's stealer cleared it before the record was handed back.
    unsafe { *r.handed.get() = hooks };
    if !handshake::owner_hand_off(&r.steal, !keep) {
        // SAFETY: as above: the CAS failed, no stealer reads the slot.
        return Err(mem::take(unsafe { &mut *r.handed.get() }));
    }
    if keep {
        // Owner fields only: the stealer touches the batches, `handed` and
        // `steal`. The guard's release waits for the hand-off to finish
        // (`release_main`).
        r.flags.set(r.flags.get() | RETIRED);
        r.mark_retired();
        return Ok(Retired::Kept);
    }
    // The stealer releases the record: we must not look at it again.
    Ok(Retired::Released(None))
}

/// Stealer side of a hand-off (`reclaim::steal`, under the steal lock,
/// after [`handshake::stealer_done`] said `Left`): takes what the record
/// still holds and the owner's hooks, in the order the exit path would
/// have pushed them, and clears `steal`. `seal` seals an open batch for
/// the queue. The caller pushes the chain, then, if the owner asked for
/// it (`RELEASE`), hands the record back with [`release_main`]: the
/// stealer is the record's releaser for that life.
pub(crate) fn finish_hand_off(r: &Record, seal: &Seal<'_>) -> Chain<Work> {
    // SAFETY: the owner left (its CAS set `LEFT`); until `stealer_finish`
    // the batches and the `handed` slot are ours alone: the owner never
    // enters again, and no later owner exists before the record is handed
    // back, which waits for that clear.
    let mut work = all_work(unsafe { &mut *r.local.get() }, Some(seal));
    // SAFETY: as above.
    work.append(mem::take(unsafe { &mut *r.handed.get() }));
    // Relaxed: hints for the reclaimer's idle steal.
    r.open_epoch.store(0, Ordering::Relaxed);
    r.active_epoch.store(0, Ordering::Relaxed);
    handshake::stealer_finish(&r.steal);
    work
}

/// What [`keep_or_release`] (and so [`retire`]) did with a record.
#[must_use = "an orphan's strong count must be given back (`Orphan::release`)"]
pub(crate) enum Retired {
    /// Kept for a live guard (`RETIRED` set): still the caller's.
    Kept,
    /// Handed back: from now on the record may be another thread's, and
    /// the caller must not read it (not even its flags); for an orphaned
    /// record, the domain's strong count to give back after that.
    Released(Option<Orphan>),
}

/// The end of the exit procedure, once the work is handed over: the
/// record is released, or kept for a guard that outlives the thread's
/// exitq destructor (module docs; also the loom model's). Says which:
/// once released, the record is no longer the caller's to look at.
pub(crate) fn keep_or_release(r: &Record) -> Retired {
    // An orphaned record's open section was leaked: a live guard borrows a
    // handle, and none is left. Nothing can rely on it, so the record is
    // released and what we pushed runs now (`Orphan`); kept, it would
    // leave our exit hooks on the queue of a domain no one runs again.
    // An RMW (AcqRel), not a load: against shutdown's orphan CAS, either
    // it comes later and its drain sees our push (Release), or we see
    // `ORPHANED` (Acquire).
    let orphaned = r.state.fetch_or(0, Ordering::AcqRel) == ORPHANED;
    if r.nesting() > 0 && !orphaned {
        // That guard releases the record, or, leaked, a grace period once
        // the thread is gone (`record`, "A record's life").
        r.flags.set(r.flags.get() | RETIRED);
        r.mark_retired();
        return Retired::Kept;
    }
    Retired::Released(release_main(r))
}

/// Hands a retired main record back: one CAS. For an orphaned record
/// (its domain shut down meanwhile) it returns the strong count the record
/// holds, to be given back once the caller no longer uses the record
/// (giving it back may free the domain, and the record with it). Also the
/// end of a retired record's last guard.
#[must_use = "an orphan's strong count must be given back (`Orphan::release`)"]
pub(crate) fn release_main(r: &Record) -> Option<Orphan> {
    // A record kept for a guard at a hand-off goes back only once the
    // stealer finished it (`handshake`): a load that finds `LEFT` clear
    // everywhere else.
    if handshake::hand_off_pending(&r.steal) {
        handshake::wait_hand_off(&r.steal);
    }
    // The thread cannot be inside a section any more.
    r.end_ownership();
    // AcqRel: Release hands the record (and our pushes) over to the next
    // claimant and to shutdown's orphan scan; Acquire (on failure) pairs
    // with shutdown's orphan marking.
    match r
        .state
        .compare_exchange(IN_USE, FREE, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) => None,
        Err(_) => Some(Orphan(r.inner.cast::<Inner>())),
    }
}

/// The strong count of a shut-down domain that an orphaned record held.
pub(crate) struct Orphan(*const Inner);

impl Orphan {
    /// Runs what is queued (no reader can exist: see `domain::shutdown`)
    /// and gives the count back. Call it after the last use of the record.
    #[cold]
    pub(crate) fn release(self) {
        // SAFETY: as below: the count we hold keeps the domain alive.
        if unsafe { &*self.0 }.forked() {
            // A fork() child (a guard held across the fork, or the child's
            // exit): the queue is the parent's, which runs it; the count
            // stays with the parent's copy of the domain (`fork`).
            return;
        }
        {
            // SAFETY: the count we hold keeps the domain alive until the
            // decrement below; this reference ends before it.
            let inner: &Inner = unsafe { &*self.0 };
            loop {
                let chain = inner.queue.take_all();
                if chain.is_empty() {
                    break;
                }
                inner.run(chain);
            }
        }
        // SAFETY: shutdown incremented the strong count once for this
        // record (`domain::shutdown`), and the pointer is the record's,
        // taken from `Arc::as_ptr` at claim (provenance over the whole
        // allocation). Nothing touches the record or the domain after this.
        unsafe { Arc::decrement_strong_count(self.0) };
    }
}
