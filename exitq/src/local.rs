//! The owner's side of deferred callbacks: the open batch, sealing, and
//! running its own callbacks once their grace period has passed.
//!
//! # Callbacks run where they were queued
//!
//! A full batch is *sealed*: it records the grace period it needs
//! ([`GracePeriods::snapshot`](crate::grace::GracePeriods::snapshot)) and
//! joins the thread's queue of sealed batches, oldest first, in the
//! thread's own record. The thread records that it waits for that grace
//! period ([`GracePeriods::request`](crate::grace::GracePeriods::request))
//! and drives it itself at its seals
//! ([`GracePeriods::poll`](crate::grace::GracePeriods::poll)); the
//! reclaimer thread takes a grace period over only when nobody drives it
//! (`look.rs`), and a request wakes it only if it sleeps without a
//! timeout, so a steady producer never wakes it. Once a sealed batch's
//! grace period has completed (one Acquire load tells), the thread runs
//! its callbacks — the kernel's per-CPU `rcu_do_batch`, crossbeam's
//! collect-on-pin. A freed object goes back to the allocator cache of the
//! thread that allocated it, and the lines a callback touches stay on
//! that core.
//!
//! A thread's ready batches go to its record's `ready` queue, and it runs
//! them a few callbacks at a time, a drain tick of [`drain::TICK`] per
//! `TICK` `defer`s, so that its frees interleave with its allocations and
//! stay in glibc's 7-chunk per-thread cache ([`drain`]); a flush runs
//! them whole. A tick that is not a seal does nothing but take and run
//! (`slow_visit`); promoting batches whose grace period completed,
//! asking for the next grace period and the backlog check follow seals.
//! (Run whole, a batch's 256 frees overflowed that cache: `malloc` and
//! `free` took 45% of a 1-thread producer's time, 12% with the ticks;
//! docs/results-exitq.md, "What was tried".)
//!
//! **Also inside the thread's own read sections**, as crossbeam-epoch
//! collects inside `pin` and sdd inside `Guard::new`: `defer` is nearly
//! always called inside one (the object was unlinked there), and a batch
//! whose grace period has completed holds nothing that section can reach
//! (a section that started before the grace period would still hold it; a
//! later one cannot see what was unlinked before it). v2 ran them only
//! outside every section, so a thread that deferred inside `Reader`
//! sections, whose exit is one store and runs nothing, never ran its own
//! batches: all of them waited for the final `barrier` (244 ns per
//! operation in `defer_free` at 1 thread, against 40 when they ran here).
//! What runs inside a section must not wait for a grace period: a callback
//! that calls `synchronize`, `barrier` or `RcuCell::replace` there panics
//! (caught and counted) instead of deadlocking on its own section.
//!
//! Never inside one of the domain's callbacks (a callback that defers does
//! not run batches recursively), and never waiting: a wait for a grace
//! period (the inline reclaimer's, a backlog's) happens only outside
//! every section. A guard's exit runs nothing (v2's `Domain::read` guards
//! ran what waited for their end, `RUN_PENDING`; with batches run inside
//! sections that bought little, and a `Reader`'s exit never could): what
//! becomes ready after the thread's last seal runs at its next seal or
//! flush, or, should the thread go idle, by the reclaimer's idle steal.
//!
//! What the thread does not run, the reclaimer does: batches of threads
//! that exited (pushed at exit), that went idle or left ready batches
//! unrun for a flush latency (taken through the steal handshake), and, with
//! [`Callbacks::Offload`], every batch (pushed onto the domain's queue when
//! sealed: the v1 and kernel `rcu_nocbs` behaviour).
//!
//! # Inside the handshake
//!
//! Every access to the record's batches is one owner section of the steal
//! handshake ([`handshake`]), and every move of work happens inside one:
//! sealing into the queue, pushing onto the domain's list, and taking ready
//! batches (or a drain tick's callbacks) to run, with `run_seq` made odd in
//! the same section, so a `barrier` that finds them gone knows a run is in
//! progress and waits for it. Callbacks run after the section ends, so a
//! callback may defer, flush or be stolen from.

use crate::batch::{fits_inline, Deferred, Work};
use crate::cancel::NoCancel;
use crate::config::{Callbacks, Reclaimer};
use crate::drain::{self, keep_node, Drain};
use crate::handshake;
use crate::inner::Inner;
use crate::llist::{Chain, Node};
use crate::past;
use crate::reclaim;
use crate::record::{Local, Record};
use crate::run;
use crate::stall;
use crate::stats::Counters;
use crate::sync::Ordering;
use crate::thread;
use crate::wake::{self, Wake};

/// What to do after an owner section that sealed or took work.
#[derive(Default)]
struct After {
    /// The highest grace period a newly sealed batch waits for (0: none).
    need_gp: u64,
    /// The grace period the oldest sealed batch still waits for (0: none).
    oldest_gp: u64,
    /// Ready batches taken to run whole (`run_seq` was made odd).
    batches: Chain<Work>,
    /// Callbacks a drain tick took (`run_seq` was made odd).
    drain: Drain,
    /// A batch was pushed onto the domain's queue (offload).
    offloaded: bool,
    /// The backlog after sealing.
    pending: usize,
    /// Sealed batches remain in the thread's queue.
    sealed_left: bool,
    /// Some of them are ready.
    ready_left: bool,
}

/// Whether the calling thread may run `inner`'s ready callbacks now:
/// outside the domain's callbacks (a callback that defers does not run
/// batches recursively) and its stall handler (which runs on the thread
/// leading a grace period: a callback that waited for one there would
/// wait for itself). Inside a read section it may: a batch whose grace
/// period has completed holds nothing the section can reach.
#[inline]
fn may_run(inner: &Inner) -> bool {
    !run::in_callback(inner.id) && !stall::in_handler(inner.gp.id())
}

/// Whether the calling thread may wait for a grace period: as `may_run`,
/// and outside every read section of the domain (inside one, the wait
/// would be for its own section).
fn may_wait(inner: &Inner) -> bool {
    may_run(inner) && !thread::inside(inner)
}

/// `defer` in the child of a `fork()`, where sealing a batch (or waiting
/// for a stealer, or pushing alone) refuses with a panic (crate docs,
/// "fork()"): false in the process that built the domain; panics in a
/// child; true in a child whose thread is already unwinding (a destructor
/// that defers while the child unwinds from such a refusal, or from a run
/// whose callback forked). A second panic there would abort the child
/// ("panic in a destructor during cleanup", `tests/fork.rs`), so the
/// caller leaks the callback instead and returns: the child can run
/// nothing of the domain's, and leaks the rest of it alike.
fn leaks_in_child(inner: &Inner) -> bool {
    if !inner.forked() {
        return false;
    }
    if !std::thread::panicking() {
        inner.check_fork();
    }
    true
}

/// Appends `f` to the open batch of `r` (the calling thread's main
/// record). A closure stored inline goes straight into the batch
/// (`OpenBatch::try_push_fn`); a boxed one, or any slow path, through a
/// [`Deferred`].
#[inline(always)]
pub(crate) fn defer<F: FnOnce() + Send + 'static>(inner: &Inner, r: &Record, f: F) {
    if !fits_inline::<F>() {
        return push(inner, r, Deferred::new(f));
    }
    if !handshake::owner_begin(&r.busy, &r.steal, inner.gp.hot.fences) {
        return defer_contended(inner, r, Deferred::new(f));
    }
    // SAFETY: as in `push`.
    let local = unsafe { &mut *r.local.get() };
    match local.open.try_push_fn(f) {
        Ok(()) if local.open.left() != 0 => handshake::owner_end(&r.busy),
        Ok(()) => slow_visit(inner, r),
        Err(f) => defer_slow(inner, r, Deferred::new(f)),
    }
}

/// Appends `d` to the open batch of `r`, as [`defer`].
#[inline]
fn push(inner: &Inner, r: &Record, d: Deferred) {
    if !handshake::owner_begin(&r.busy, &r.steal, inner.gp.hot.fences) {
        return defer_contended(inner, r, d);
    }
    // SAFETY: we are the owner, `busy` is set and no steal was requested
    // after it (handshake). The borrow is not used after the calls below,
    // which end the section.
    let local = unsafe { &mut *r.local.get() };
    let words = d.words();
    match local.open.try_push(d, words) {
        Ok(()) if local.open.left() != 0 => handshake::owner_end(&r.busy),
        Ok(()) => slow_visit(inner, r),
        Err(d) => defer_slow(inner, r, d),
    }
}

#[cold]
fn defer_contended(inner: &Inner, r: &Record, d: Deferred) {
    // In a fork() child the stealer that marked the record does not exist:
    // refuse rather than wait for it forever.
    if leaks_in_child(inner) {
        // A `Deferred` has no destructor: returning leaks its closure
        // (neither run nor dropped).
        return;
    }
    // A stealer is taking our batches: wait for it (it only moves a few
    // pointers), then retry.
    handshake::wait_for_stealer(&r.steal);
    push(inner, r, d)
}

/// `left` reached zero: the batch is full (seal it, take what is ready
/// and drain a tick, then `finish`), or only a drain tick is due (take
/// and run it). Called inside the owner section `defer` began; ends it.
#[inline(never)]
fn slow_visit(inner: &Inner, r: &Record) {
    let allowed = may_run(inner);
    let mut drain = Drain::default();
    let ticked = {
        // SAFETY: still inside the owner section `defer` began; this
        // borrow ends before `owner_end`.
        let local = unsafe { &mut *r.local.get() };
        local.open.untick();
        // A drain tick, not a seal: take the tick and run it, nothing else
        // (the rest was 3.5% of a steady producer's instructions,
        // docs/results-exitq.md). A sealed batch whose grace period completes
        // meanwhile becomes ready at the next seal (`promote`), flush or
        // steal: at most a batch's worth of `defer`s later. What `finish`
        // does after a seal (ask for a grace period, poll it, relieve a
        // backlog) follows a seal only. The inline reclaimer, which waits
        // for grace periods at ticks too (outside sections), keeps the
        // full path.
        let tick_only =
            local.open.left() != 0 && allowed && inner.config.reclaimer != Reclaimer::Inline;
        if tick_only {
            drain::take(r, local, &mut drain);
            update_sealed_hint(inner, r, local);
        }
        tick_only
    };
    if ticked {
        handshake::owner_end(&r.busy);
        if inner.forked() {
            // As in `finish`: nothing of the parent's runs in a child.
            drain.forget();
            leaks_in_child(inner);
            return;
        }
        drain::run(inner, r, &mut drain);
        return;
    }
    let mut after = After::default();
    {
        // SAFETY: as above.
        let local = unsafe { &mut *r.local.get() };
        if local.open.left() == 0 {
            if let Some(node) = local.open.take() {
                seal(inner, r, local, node, &mut after);
            }
        }
        promote_or_note(inner, r, local, allowed, &mut after);
    }
    handshake::owner_end(&r.busy);
    finish(inner, r, &mut after, allowed);
}

/// A new run, a new batch, or a full batch to seal first. Called inside
/// the owner section, as `slow_visit`.
#[cold]
fn defer_slow(inner: &Inner, r: &Record, d: Deferred) {
    let mut after = After::default();
    let allowed = may_run(inner);
    {
        // SAFETY: still inside the owner section `defer` began (the
        // caller's `owner_begin`). The borrow's last use comes before
        // `owner_end` or before `slow_visit`, which borrows the batches
        // again and ends the section; on the other paths it ends with this
        // block, before `owner_end`.
        let local = unsafe { &mut *r.local.get() };
        local.open.untick();
        let d = match local.open.push_new_run(d) {
            Ok(()) if local.open.left() != 0 => {
                if allowed {
                    drain::arm(local);
                }
                handshake::owner_end(&r.busy);
                return;
            }
            Ok(()) => return slow_visit(inner, r),
            Err(d) => d,
        };
        // No batch, or no room for a new run: seal what is there, open a
        // fresh batch.
        if let Some(node) = local.open.take() {
            seal(inner, r, local, node, &mut after);
        }
        open_batch(inner, r, local);
        let pushed = local.open.push_new_run(d);
        debug_assert!(pushed.is_ok(), "an empty batch takes any closure");
        if local.open.left() == 0 {
            // batch_size 1: sealed at once.
            if let Some(node) = local.open.take() {
                seal(inner, r, local, node, &mut after);
            }
        }
        promote_or_note(inner, r, local, allowed, &mut after);
    }
    handshake::owner_end(&r.busy);
    finish(inner, r, &mut after, allowed);
}

/// If the thread may run callbacks now: moves the ready sealed batches to
/// the ready queue and drains a tick of it (`drain.rs`). Else notes what
/// waits. Inside the owner section.
fn promote_or_note(inner: &Inner, r: &Record, local: &mut Local, allowed: bool, after: &mut After) {
    if allowed {
        promote(inner, r, local, after);
        drain::take(r, local, &mut after.drain);
    } else {
        note_left(inner, local, after);
    }
}

/// Takes every ready batch to run whole (`flush`, the backlog, the inline
/// reclaimer): the ready queue, then the sealed batches whose grace period
/// has completed. Inside the owner section.
fn take_all_ready(inner: &Inner, r: &Record, local: &mut Local, after: &mut After) {
    promote(inner, r, local, after);
    after.batches.append(std::mem::take(&mut local.ready));
    drain::arm(local);
    if !after.batches.is_empty() {
        begin_run(r);
    }
}

/// Opens a batch in `local` (the record's spare node, a recycled one, or a
/// new one; the owner's first batch in this life a small one, see
/// [`FIRST_BATCH`](crate::batch::FIRST_BATCH)). Inside the owner section.
fn open_batch(inner: &Inner, r: &Record, local: &mut Local) {
    let first = !r.opened.replace(true);
    let node = r.spare.take().unwrap_or_else(|| inner.empty_batch(first));
    // Counted in `held` below.
    local.open.open(node, inner.config.batch_size, true);
    // Relaxed: a hint for the reclaimer's idle steal.
    r.open_epoch
        .store(inner.poll_epoch.load(Ordering::Relaxed), Ordering::Relaxed);
    // SeqCst: store-buffering pair with the reclaimer's "publish my sleep
    // state; re-check held batches" (it must not park without a timeout
    // while a thread holds batches).
    if inner.held.fetch_add(1, Ordering::SeqCst) == 0 {
        // The first batch held: the reclaimer may sleep with a timeout
        // that does not cover it (`inner.rs`, the reclaimer's states).
        inner.wake_reclaimer(wake::FIRST);
    }
}

/// Seals `node` (taken from the open batch): tags it with the grace period
/// it needs and queues it in the thread, or (offload) on the domain.
/// Inside the owner section.
fn seal(
    inner: &Inner,
    r: &Record,
    local: &mut Local,
    mut node: Box<Node<Work>>,
    after: &mut After,
) {
    // Relaxed: a hint (the batch is no longer open).
    r.open_epoch.store(0, Ordering::Relaxed);
    let Work::Batch(b) = &mut node.value else {
        unreachable!("an exit hook as a batch")
    };
    let g = inner.gp.snapshot();
    b.wait_gp = g;
    b.in_pending = true;
    // Relaxed: a counter; the batch itself moves through the handshake or
    // the list.
    after.pending = inner.pending.fetch_add(b.len, Ordering::Relaxed) + b.len;
    Counters::add(&inner.stats.batches, 1);
    if inner.config.callbacks == Callbacks::Offload {
        let was_held = std::mem::take(&mut b.in_held);
        // Inside the owner section (`handshake`: every move inside one).
        inner.queue.push(node);
        if was_held {
            // SeqCst, and after the push (SeqCst): a reclaimer's look
            // (`wake::fall_asleep`) that finds no batch held finds this
            // one queued, so a polling reclaimer's timeout covers it
            // without a wake-up.
            inner.held.fetch_sub(1, Ordering::SeqCst);
        }
        after.offloaded = true;
        return;
    }
    // Relaxed: a hint for the reclaimer's idle steal (an aging clock).
    r.active_epoch
        .store(inner.poll_epoch.load(Ordering::Relaxed), Ordering::Relaxed);
    after.need_gp = after.need_gp.max(g);
    local.sealed.push_back(node);
}

/// Moves every sealed batch whose grace period has completed to the ready
/// queue. Inside the owner section.
fn promote(inner: &Inner, r: &Record, local: &mut Local, after: &mut After) {
    let done = inner.gp.completed();
    while let Some(Work::Batch(b)) = local.sealed.front() {
        if b.wait_gp > done {
            break;
        }
        let node = local.sealed.pop_front().expect("front exists");
        local.ready.push_back(node);
    }
    update_sealed_hint(inner, r, local);
    note_left(inner, local, after);
}

/// `run_seq` odd: a run of work taken in this owner section is in progress.
fn begin_run(r: &Record) {
    handshake::run_begin(&r.run_seq);
}

/// `run_seq` even again: the run has finished.
fn end_run(r: &Record) {
    handshake::run_end(&r.run_seq);
}

fn update_sealed_hint(inner: &Inner, r: &Record, local: &Local) {
    let epoch = if local.sealed.is_empty() && local.ready.is_empty() {
        0
    } else {
        // Relaxed: an aging clock.
        inner.poll_epoch.load(Ordering::Relaxed)
    };
    // Relaxed: a hint for the reclaimer's idle steal.
    r.active_epoch.store(epoch, Ordering::Relaxed);
}

fn note_left(inner: &Inner, local: &Local, after: &mut After) {
    if let Some(Work::Batch(b)) = local.sealed.front() {
        after.sealed_left = true;
        after.oldest_gp = b.wait_gp;
        after.ready_left = inner.gp.is_done(b.wait_gp);
    }
}

/// After the owner section: run what was taken, ask for a grace period
/// and drive it, or wait for it (the inline reclaimer), and help with the
/// backlog.
fn finish(inner: &Inner, r: &Record, after: &mut After, allowed: bool) {
    if inner.forked() {
        // The child of a fork(): nothing of the parent's may run here (what
        // was taken is leaked), and the section has ended, so panicking
        // leaves no `busy` set.
        after.drain.forget();
        std::mem::forget(std::mem::take(after));
        leaks_in_child(inner);
        return;
    }
    drain::run(inner, r, &mut after.drain);
    if !after.batches.is_empty() {
        let chain = std::mem::take(&mut after.batches);
        let ran = run::run_chain(inner.id, chain, |node| keep_node(inner, r, node));
        inner.settle(&ran);
        Counters::add(&inner.stats.batches_run_locally, ran.batches);
        end_run(r);
    }
    let inline = inner.config.reclaimer == Reclaimer::Inline;
    let waits = after.sealed_left && !after.ready_left;
    if after.offloaded {
        if inline {
            if may_wait(inner) {
                reclaim::reclaim_pass(inner);
            }
        } else {
            inner.wake_reclaimer(Wake::backlog(
                after.pending >= inner.config.batch_size.saturating_mul(4),
            ));
        }
    } else if after.need_gp != 0 && !inline && inner.gp.request(after.need_gp) {
        // Recorded for the reclaimer, which takes over if we stop driving
        // it (below); woken only if it sleeps without a timeout (with one,
        // it looks within `look::DRIVEN`: we hold batches).
        inner.wake_reclaimer(Wake::IfParked);
    }
    if allowed && waits && !inline && after.need_gp != 0 {
        // We sealed and our oldest batch waits: drive its grace period
        // along ourselves, without waiting (`GracePeriods::poll`). At
        // seals, not at every drain tick: the cadence of grace periods is
        // one per few seals. Our record's idle word first shows the epoch
        // we see now, so grace periods started before need no heavy
        // barrier on our account (`past.rs`).
        past::refresh_idle(&inner.gp.hot.gp_ctr, &r.ctr);
        inner.gp.poll(&inner.registry, &inner.stats);
    }
    if inline && waits && may_wait(inner) {
        // No reclaimer: run the grace period ourselves (each sealed batch
        // costs its thread one), then what is ready, and the domain's queue.
        inner.gp.wait_for(
            after.need_gp.max(after.oldest_gp),
            &inner.registry,
            &inner.stats,
        );
        run_ready(inner, r);
        if !inner.queue.is_empty() {
            reclaim::reclaim_pass(inner);
        }
    }
    if after.pending > inner.config.backlog_limit {
        relieve_backlog(inner, r, allowed);
    }
}

/// Runs every ready batch of the calling thread, if it may (one owner
/// section to take them). Returns how many batches ran.
pub(crate) fn run_ready(inner: &Inner, r: &Record) -> usize {
    if !may_run(inner) {
        return 0;
    }
    let mut after = After::default();
    r.with_local(inner.gp.hot.fences, |local| {
        take_all_ready(inner, r, local, &mut after)
    });
    let n = after.batches.len();
    if n > 0 {
        let ran = run::run_chain(inner.id, std::mem::take(&mut after.batches), |node| {
            keep_node(inner, r, node)
        });
        inner.settle(&ran);
        Counters::add(&inner.stats.batches_run_locally, ran.batches);
        end_run(r);
    }
    n
}

/// Seals the calling thread's open batch now and runs every batch that is
/// ready (`Domain::flush`). With [`Reclaimer::Inline`], also waits for the
/// grace period the thread's batches need and runs them and the domain's
/// queue.
pub(crate) fn flush(inner: &Inner, r: &Record) {
    let mut after = After::default();
    let allowed = may_run(inner);
    r.with_local(inner.gp.hot.fences, |local| {
        local.open.untick();
        if let Some(node) = local.open.take() {
            seal(inner, r, local, node, &mut after);
        }
        if allowed {
            take_all_ready(inner, r, local, &mut after);
        } else {
            note_left(inner, local, &mut after);
        }
    });
    finish(inner, r, &mut after, allowed);
    if inner.config.reclaimer == Reclaimer::Inline && !inner.queue.is_empty() && may_wait(inner) {
        reclaim::reclaim_pass(inner);
    }
}

/// Over the backlog limit after sealing: wait for the grace period our
/// oldest batch needs and run what is ready, and help with the domain's
/// queue, until the backlog is under the limit.
#[cold]
fn relieve_backlog(inner: &Inner, r: &Record, allowed: bool) {
    if !allowed || !may_wait(inner) {
        Counters::add(&inner.stats.backlog_overruns, 1);
        return;
    }
    Counters::add(&inner.stats.backlog_waits, 1);
    let _no_cancel = NoCancel::new();
    // Relaxed: a counter, re-read each round.
    while inner.pending.load(Ordering::Relaxed) > inner.config.backlog_limit {
        let oldest = oldest_wait(inner, r);
        if oldest != 0 {
            inner.gp.wait_for(oldest, &inner.registry, &inner.stats);
            if run_ready(inner, r) > 0 {
                continue;
            }
        }
        if !reclaim::help_or_wait(inner) {
            // Nothing of ours, nothing queued, no pass running: what
            // remains is other threads' own batches; they run them.
            break;
        }
    }
}

/// The grace period the calling thread's oldest sealed batch waits for
/// (0: none).
fn oldest_wait(inner: &Inner, r: &Record) -> u64 {
    r.with_local(inner.gp.hot.fences, |local| match local.sealed.front() {
        Some(Work::Batch(b)) => b.wait_gp,
        _ => 0,
    })
}

/// `defer` when the thread's exitq state is gone (from a later
/// destructor, a younger pthread key's): the callback is sealed alone and
/// pushed onto the domain's queue.
#[cold]
pub(crate) fn defer_alone(inner: &Inner, d: Deferred) {
    if leaks_in_child(inner) {
        // A `Deferred` has no destructor: returning leaks its closure
        // (neither run nor dropped).
        return;
    }
    let mut open = crate::batch::OpenBatch::new();
    open.open(
        Node::new(Work::Batch(crate::batch::Batch::new(1))),
        1,
        false,
    );
    let pushed = open.push_new_run(d);
    debug_assert!(pushed.is_ok(), "an empty batch takes any closure");
    let Some(mut node) = open.take() else {
        unreachable!("just opened")
    };
    let Work::Batch(b) = &mut node.value else {
        unreachable!("a batch")
    };
    b.in_pending = true;
    // Relaxed: a counter.
    inner.pending.fetch_add(b.len, Ordering::Relaxed);
    Counters::add(&inner.stats.batches, 1);
    inner.queue.push(node);
    match inner.config.reclaimer {
        // Always: we hold no batch, so nothing a polling reclaimer watched
        // need cover this one (`wake.rs`).
        Reclaimer::Thread => inner.wake_reclaimer(wake::FIRST),
        Reclaimer::Inline => {
            if may_wait(inner) {
                reclaim::reclaim_pass(inner);
            }
        }
    }
}
