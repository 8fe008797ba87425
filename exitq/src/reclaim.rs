//! Reclaim passes, stealing, and `barrier`.
//!
//! # The reclaim pass
//!
//! The domain's queue holds what no live thread will run: batches of
//! exited threads, of idle ones (taken by a stealer), offloaded batches,
//! exit hooks. A pass takes the whole queue with one swap, waits for one
//! grace period that started after the take, and runs everything. Passes
//! may run concurrently (the reclaimer thread, threads over the backlog
//! limit, `barrier` callers); each takes a disjoint set. A pass takes its
//! id and the queue in **one** critical section of the passes lock, so a
//! `barrier` that registers later waits for exactly the passes that took
//! work before it (v1 registered in two sections, and a barrier could slip
//! between them).
//!
//! # Stealing
//!
//! [`steal`] takes batches from other threads' records through the steal
//! handshake ([`handshake`]), one stealer at a time (the
//! steal lock, held until what was taken is on the queue). Two kinds:
//!
//! * [`Steal::Idle`] (the reclaimer, every flush latency): an open batch
//!   opened before the given poll epoch (a slow or idle producer), and the
//!   sealed batches of an owner that neither sealed nor ran any since then
//!   (it went idle, or sits in one long read section). Sealed batches of an
//!   active owner stay: they wait for a grace period another thread would
//!   wait for too, and their frees are best done where they were
//!   allocated.
//! * [`Steal::All`] (`barrier`, shutdown): every record in use, whatever
//!   its hints say, and the owner's run in progress is noted (`run_seq`).
//!
//! # `barrier`
//!
//! Work deferred before the call is, for every thread, in one of four
//! places, and every move between them happens inside an owner section of
//! the handshake or under the steal lock (never in between, where a
//! barrier could miss it):
//!
//! 1. the thread's open batch, sealed queue or ready queue: taken by
//!    `Steal::All`;
//! 2. the domain's queue: taken by the barrier's own pass;
//! 3. a pass that took it earlier: waited for (pass ids);
//! 4. a run of the owner in progress (it took ready batches, or a drain
//!    tick's callbacks, and runs them): seen as an odd `run_seq` under the
//!    handshake, waited for.
//!
//! So `barrier` returns once every callback whose `defer` returned before
//! it was called has run, whoever ran it.
//!
//! # Exits handed off
//!
//! A thread that exits while a stealer holds its record leaves its exit
//! to the stealer (`handshake`, "An owner's exit is handed off"): the
//! stealer, whichever kind, then takes every batch and the thread's exit
//! hooks, pushes them with what it took, and hands the record back, all
//! before it lets the steal lock go. So a `barrier` still finds the work
//! (in the record, or on the queue once it has the lock), and
//! `exit_barrier` takes the steal lock once before its pass: a thread
//! that exited before the call has its work on the queue by then.
use std::time::Duration;

use crate::batch::Work;
use crate::cancel::NoCancel;
use crate::exit;
use crate::handshake;
use crate::inner::{lock, Inner};
use crate::llist::{Chain, Node};
use crate::record::{Record, IN_USE};
use crate::stats::Counters;
use crate::sync::Ordering;

/// What [`steal`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Steal {
    /// Every record in use (`barrier`, shutdown).
    All,
    /// Records holding batches from before this poll epoch.
    Idle(u64),
}

/// Whether a hint epoch (0: nothing) is older than `before`.
fn stale(epoch: u64, before: u64) -> bool {
    epoch != 0 && epoch < before
}

/// A run of an owner seen in progress by a stealer: the record and the
/// odd `run_seq` it showed.
pub(crate) struct Running<'a> {
    record: &'a Record,
    seq: u64,
}

/// Takes batches from other threads' records (see [`Steal`]) and pushes
/// them onto the queue. Returns how many batches were taken and, for
/// `Steal::All`, the owners' runs seen in progress.
pub(crate) fn steal(inner: &Inner, which: Steal) -> (usize, Vec<Running<'_>>) {
    let (n, running, orphans) = steal_locked(inner, which);
    // Not expected (`exit::hand_off`), but should a record handed back by
    // a hand-off have been orphaned, its count goes back here, after the
    // lock (giving it back runs what is queued).
    for o in orphans {
        o.release();
    }
    (n, running)
}

/// [`steal`] under the steal lock; also returns the strong counts of
/// orphaned records it handed back.
fn steal_locked(inner: &Inner, which: Steal) -> (usize, Vec<Running<'_>>, Vec<exit::Orphan>) {
    let _one_stealer = lock(&inner.steal_lock);
    let mut marked: Vec<&Record> = Vec::new();
    for r in inner.registry.iter() {
        // Relaxed: a hint; a record handed back to FREE holds nothing (its
        // exit path pushed everything first).
        if r.state.load(Ordering::Relaxed) != IN_USE {
            continue;
        }
        if let Steal::Idle(before) = which {
            // Relaxed: hints; the handshake below re-reads them.
            let open = r.open_epoch.load(Ordering::Relaxed);
            let active = r.active_epoch.load(Ordering::Relaxed);
            if !stale(open, before) && !stale(active, before) {
                continue;
            }
        }
        handshake::stealer_mark(&r.steal);
        marked.push(r);
    }
    if marked.is_empty() {
        return (0, Vec::new(), Vec::new());
    }
    inner.gp.hot.fences.heavy();
    #[cfg(test)]
    {
        let hook = lock(&inner.steal_hook).clone();
        if let Some(hook) = hook {
            hook();
        }
    }
    let mut taken = Chain::new();
    let mut running = Vec::new();
    let mut handed_back = Vec::new();
    for r in marked {
        let stole = steal_marked(r, which, &mut taken, &|node| sealed_for_queue(inner, node));
        if let Some(seq) = stole.running {
            running.push(Running { record: r, seq });
        }
        if let Some(release) = stole.handed {
            Counters::add(&inner.stats.exit_handoffs, 1);
            if release {
                handed_back.push(r);
            }
        }
    }
    let n = taken.len();
    if n > 0 {
        Counters::add(&inner.stats.stolen_batches, n as u64);
        // Still under the steal lock: a later stealer (a `barrier`) sees
        // these on the queue, and so does an `exit_barrier` (`drain`).
        inner.queue.push_chain(taken);
    }
    // The records of owners that left their exit to us, once their work
    // is on the queue.
    let orphans = handed_back
        .into_iter()
        .filter_map(exit::release_main)
        .collect();
    (n, running, orphans)
}

/// One reclaim pass; returns the number of callbacks run.
pub(crate) fn reclaim_pass(inner: &Inner) -> usize {
    pass(inner).1
}

/// A reclaim pass (possibly empty) whose id orders it after every pass that
/// took work before this call: returns the id and the callbacks run.
fn pass(inner: &Inner) -> (u64, usize) {
    // One critical section: the id, the take, and (if it took work) the
    // registration (module docs).
    let (id, chain) = {
        let mut passes = lock(&inner.passes);
        let id = passes.next;
        passes.next += 1;
        let chain = inner.queue.take_all();
        if chain.is_empty() {
            return (id, 0);
        }
        passes.active.push(id);
        (id, chain)
    };
    // Everything taken needs a grace period that starts after the take.
    let g = inner.gp.snapshot();
    inner.gp.wait_for(g, &inner.registry, &inner.stats);
    let ran = inner.run(chain);
    Counters::add(&inner.stats.passes, 1);
    // Relaxed: a statistic.
    inner
        .stats
        .max_batch
        .fetch_max(ran.callbacks, Ordering::Relaxed);
    end_pass(inner, id);
    (id, ran.callbacks as usize)
}

/// Marks pass `id` done; wakes `barrier` callers and helpers waiting for
/// passes, if there are any (no futex call otherwise).
fn end_pass(inner: &Inner, id: u64) {
    let mut passes = lock(&inner.passes);
    passes.active.retain(|&a| a != id);
    if passes.waiters > 0 {
        inner.passes_cv.notify_all();
    }
}

/// Waits until no pass with an id below `id` is running.
fn wait_passes_before(inner: &Inner, id: u64) {
    let mut passes = lock(&inner.passes);
    while passes.active.iter().any(|&a| a < id) {
        passes.waiters += 1;
        passes = inner
            .passes_cv
            .wait(passes)
            .unwrap_or_else(|e| e.into_inner());
        passes.waiters -= 1;
    }
}

/// Waits until each owner run seen in progress has finished.
fn wait_runs(running: Vec<Running<'_>>) {
    for Running { record, seq } in running {
        handshake::run_wait(&record.run_seq, seq);
    }
}

/// An open batch taken for the domain's queue, sealed now: counted as
/// pending until it runs.
fn sealed_for_queue(inner: &Inner, mut node: Box<Node<Work>>) -> Box<Node<Work>> {
    if let Work::Batch(b) = &mut node.value {
        b.in_pending = true;
        // Relaxed: a counter; the batch moves through the list.
        inner.pending.fetch_add(b.len, Ordering::Relaxed);
    }
    Counters::add(&inner.stats.batches, 1);
    node
}

/// What [`steal_marked`] found in a record besides the batches it took.
pub(crate) struct Stole {
    /// The owner's run in progress (its odd `run_seq`), for `Steal::All`.
    pub(crate) running: Option<u64>,
    /// `Some(release)`: the owner exited meanwhile and left its exit to
    /// the stealer, which finished it here (its batches and hooks are in
    /// `taken`); the record is then the caller's to release if `release`
    /// (`exit::release_main`, after the push).
    pub(crate) handed: Option<bool>,
}

/// The stealer's part of the handshake for one record it marked, after
/// the heavy barrier: waits until the owner is outside its section, takes
/// what `which` says into `taken` (an open batch sealed by `seal`),
/// notes the owner's run in progress (`Steal::All`), and clears the
/// record's `steal` word, finishing the owner's exit if it handed it off
/// meanwhile. [`steal_locked`] runs it for every record it marked; the
/// loom models (`model::Rec::steal`) run this same function.
pub(crate) fn steal_marked(
    r: &Record,
    which: Steal,
    taken: &mut Chain<Work>,
    seal: &exit::Seal<'_>,
) -> Stole {
    handshake::stealer_wait(&r.busy);
    // SAFETY: steal handshake won: the owner is outside its batch access
    // and will not enter it until `steal` clears; the caller is the only
    // stealer (the steal lock).
    let local = unsafe { &mut *r.local.get() };
    // Relaxed (hints): written by the owner inside its sections, which
    // happened-before our Acquire of `busy`.
    let (take_open, take_sealed) = match which {
        Steal::All => (true, true),
        Steal::Idle(before) => (
            stale(r.open_epoch.load(Ordering::Relaxed), before),
            stale(r.active_epoch.load(Ordering::Relaxed), before),
        ),
    };
    if take_sealed {
        taken.append(local.take_queued());
        // Relaxed: a hint.
        r.active_epoch.store(0, Ordering::Relaxed);
    }
    if let Some(node) = take_open.then(|| local.open.take()).flatten() {
        taken.push_back(seal(node));
        // Relaxed: a hint.
        r.open_epoch.store(0, Ordering::Relaxed);
    }
    let running = match which {
        Steal::All => handshake::run_seen(&r.run_seq),
        Steal::Idle(_) => None,
    };
    let handed = match handshake::stealer_done(&r.steal) {
        handshake::Done::Cleared => None,
        handshake::Done::Left { release } => {
            // The owner exited meanwhile and left its exit to us.
            taken.append(exit::finish_hand_off(r, seal));
            Some(release)
        }
    };
    Stole { running, handed }
}

/// Pushes the calling thread's own batches onto the queue (owner side of
/// the handshake, the move inside the section).
pub(crate) fn push_own(inner: &Inner, r: &Record) {
    r.with_local(inner.gp.hot.fences, |local| {
        let mut chain = local.take_queued();
        if let Some(node) = local.open.take() {
            chain.push_back(sealed_for_queue(inner, node));
        }
        // Relaxed: hints.
        r.open_epoch.store(0, Ordering::Relaxed);
        r.active_epoch.store(0, Ordering::Relaxed);
        inner.queue.push_chain(chain);
    });
}

/// `barrier` (`steal_all`) and `exit_barrier`: the caller's own batches
/// onto the queue, every other thread's too (`barrier`), one pass, then
/// the passes and owner runs that took earlier work (module docs). The
/// caller checked it is outside every read section and callback of the
/// domain.
pub(crate) fn drain(inner: &Inner, own: Option<&Record>, steal_all: bool) {
    let _no_cancel = NoCancel::new();
    if let Some(r) = own {
        push_own(inner, r);
    }
    let running = if steal_all {
        steal(inner, Steal::All).1
    } else {
        // A thread that exited before the call may have left its exit to
        // a stealer still under way: it pushes that work before it lets
        // the steal lock go (`handshake`, "An owner's exit is handed
        // off").
        drop(lock(&inner.steal_lock));
        Vec::new()
    };
    let (id, _) = pass(inner);
    wait_passes_before(inner, id);
    wait_runs(running);
}

/// Over the backlog limit: help with a pass of the domain's queue while
/// fewer than `pass_cap` run, else wait (at most 1 ms) for one to finish.
/// False if there was nothing to help with or wait for.
pub(crate) fn help_or_wait(inner: &Inner) -> bool {
    // Unbounded help makes every producer a reclaimer, all running
    // callbacks at once on the same data.
    let busy = lock(&inner.passes).active.len() >= inner.pass_cap;
    if !busy && reclaim_pass(inner) > 0 {
        return true;
    }
    let mut passes = lock(&inner.passes);
    if passes.active.is_empty() {
        return !inner.queue.is_empty();
    }
    passes.waiters += 1;
    let (mut passes, _) = inner
        .passes_cv
        .wait_timeout(passes, Duration::from_millis(1))
        .unwrap_or_else(|e| e.into_inner());
    passes.waiters -= 1;
    true
}
