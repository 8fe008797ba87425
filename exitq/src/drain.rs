//! The owner's drain: running its ready batches a few callbacks at a time,
//! interleaved with the `defer`s that allocate.
//!
//! A thread whose sealed batch's grace period has completed could run the
//! whole batch at once (256 callbacks by default). In the usual job (the
//! callback frees what the thread allocated before deferring it) that is
//! 256 frees in a row, then 256 allocations: glibc's per-thread cache
//! (tcache) holds 7 chunks per size, so 249 of the frees and most of the
//! allocations go to the shared bins, each with an atomic
//! compare-and-swap once the process has a second thread (the reclaimer is
//! one). Measured here: freeing 256 at a time costs 12-20 ns more per
//! object than freeing 7 at a time, which stays in the tcache.
//!
//! So ready batches go to the record's `ready` queue, and the owner runs
//! them [`TICK`] callbacks per `TICK` `defer`s: the kernel's
//! `rcu_do_batch` runs at most `blimit` callbacks per invocation for the
//! same reason of spreading.
//! The tick costs the fast path nothing: the open batch's countdown
//! (`OpenBatch::left`), which `defer` checks anyway, is cut to the next
//! tick (`OpenBatch::tick`), so every `TICK`th `defer` takes the slow path.
//!
//! # Inside the handshake
//!
//! The callbacks of a tick are moved out of the ready batch into the
//! tick's array (its drain cursor advances: `Batch::take_tick`, one
//! unrolled copy when the current run holds the whole tick, else
//! `Batch::take_some`, one copy loop per closure width) inside the owner
//! section, with `run_seq` made
//! odd there, and run after it, where they lie in the array
//! (`Item::run_in`): a `barrier` that steals the
//! rest of the batch meanwhile finds the tick's callbacks gone and waits
//! for the owner's run, as for a whole batch (`handshake`). A stealer
//! takes a partly drained batch as it is; whoever runs it resumes at its
//! cursor. The counters of a batch (`pending`, `held`, `callbacks_run`)
//! are settled once, by whoever finishes it, so a tick touches no shared
//! counter.
use std::mem::MaybeUninit;

use crate::batch::{Item, Work};
use crate::handshake;
use crate::inner::Inner;
use crate::llist::{Chain, Node};
use crate::record::{Local, Record};
use crate::run;
use crate::stats::Counters;

/// Callbacks run per tick, and `defer`s between
/// ticks: glibc's tcache holds 7 chunks per size class.
///
/// No catch-up: a tick runs `TICK` callbacks however many batches are
/// ready. A grace period makes every batch sealed before it started ready
/// at once (with 4 threads on 2 CPUs, where a preempted reader holds a
/// grace period for a time slice, about 20 per thread), and a thread
/// drains one callback per `defer` while it seals one per `defer`, so the
/// backlog stays at that burst's size. Running more per tick past a
/// backlog overflowed glibc's tcache into its fastbins, whose chunks
/// `malloc` then pops cold: v3's first cut ran 8 ticks' worth past 8 ready
/// batches (45% of the time in `malloc`/`free` at 4 threads), then past
/// 64 (24%); without catch-up `defer_free` at 4 threads took 42 ns per
/// operation against 51 past 64 (7 interleaved rounds, 2026-12-03).
pub(crate) const TICK: usize = 7;

/// What a tick took out of the record, to run after the owner section.
pub(crate) struct Drain {
    items: [MaybeUninit<Item>; TICK],
    len: usize,
    /// Ready batches whose every callback was taken (settled after the
    /// run, their nodes recycled).
    finished: Chain<Work>,
}

impl Default for Drain {
    fn default() -> Drain {
        Drain {
            items: [const { MaybeUninit::uninit() }; TICK],
            len: 0,
            finished: Chain::new(),
        }
    }
}

impl Drain {
    /// Whether the tick took anything (then `run_seq` is odd).
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0 && self.finished.is_empty()
    }

    /// Leaks what was taken (a `fork()` child: it is the parent's).
    pub(crate) fn forget(&mut self) {
        self.len = 0;
        std::mem::forget(std::mem::take(&mut self.finished));
    }
}

/// One tick, inside the owner section: takes the next callbacks of the
/// ready batches into `drain` (`TICK`), makes `run_seq` odd if it took
/// any, and arms the next tick if batches are still ready. The caller may
/// run callbacks (`local::may_run`).
pub(crate) fn take(r: &Record, local: &mut Local, drain: &mut Drain) {
    while drain.len < TICK {
        let Some(Work::Batch(b)) = local.ready.front_mut() else {
            break;
        };
        drain.len += match drain.len {
            0 => b.take_tick(&mut drain.items),
            n => b.take_some(&mut drain.items[n..]),
        };
        if b.drained() {
            let node = local.ready.pop_front().expect("front exists");
            drain.finished.push_back(node);
        }
    }
    if !drain.is_empty() {
        handshake::run_begin(&r.run_seq);
    }
    arm(local);
}

/// Arms the next tick if batches are ready (else `left` is the batch's
/// whole room). Inside the owner section, after anything that changed the
/// open batch or the ready queue.
pub(crate) fn arm(local: &mut Local) {
    if local.ready.is_empty() {
        local.open.untick();
    } else {
        local.open.tick(TICK);
    }
}

/// After the owner section: runs what `take` took, settles the batches it
/// finished (counted as run by their thread) and ends the run
/// (`run_seq` even).
pub(crate) fn run(inner: &Inner, r: &Record, drain: &mut Drain) {
    run_with(
        inner.id,
        r,
        drain,
        |node| keep_node(inner, r, node),
        |ran| {
            inner.settle(ran);
            if ran.batches > 0 {
                Counters::add(&inner.stats.batches_run_locally, ran.batches);
            }
        },
    );
}

/// [`run()`] with what needs the domain passed in: `keep` takes each
/// finished batch's node, `settle` the counts before the run ends (a
/// `barrier` that waits for the run then finds them settled). The loom
/// models (`model::Rec::drain_tick`) run it with no domain.
#[inline(always)]
pub(crate) fn run_with(
    domain_id: u64,
    r: &Record,
    drain: &mut Drain,
    keep: impl FnMut(Box<Node<Work>>),
    settle: impl FnOnce(&run::Ran),
) {
    if drain.is_empty() {
        return;
    }
    let len = std::mem::take(&mut drain.len);
    let finished = std::mem::take(&mut drain.finished);
    // SAFETY: `take` initialised the first `len` items, none run yet;
    // `len` was reset, so they are never read again.
    let ran =
        unsafe { run::run_items_and_chain(domain_id, &mut drain.items[..len], finished, keep) };
    settle(&ran);
    handshake::run_end(&r.run_seq);
}

/// Keeps an emptied batch node as the record's spare, or in the pool.
pub(crate) fn keep_node(inner: &Inner, r: &Record, node: Box<Node<Work>>) {
    if !inner.full_size(&node) {
        // A small node as the spare would give the owner small batches
        // from then on.
        inner.recycle_node(node);
        return;
    }
    match r.spare.take() {
        None => r.spare.set(Some(node)),
        Some(spare) => {
            r.spare.set(Some(spare));
            inner.recycle_node(node);
        }
    }
}
