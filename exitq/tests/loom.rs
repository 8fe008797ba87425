//! Loom models of exitq's lock-free core (run by scripts/test.d/20-loom.sh):
//!
//! ```text
//! RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p exitq --release --test loom --target-dir target/loom
//! ```
//!
//! Reduced size, as loom needs: two or three threads, one or two grace
//! periods, a few nodes. What is modelled: the lock-free list (push,
//! push_chain, take_all), the read-side / grace-period protocol (the steps
//! `Domain` runs, from `exitq::model`), including a reader that enters with
//! a stale epoch across two grace periods and nested sections, a QSBR
//! reader's quiescent states (stored or skipped) and going offline, the batch
//! steal handshake, an exiting owner's hand-off to a stealer (against a
//! stealer held up until the exit returned, against an idle steal and a
//! `barrier`, and for a record kept for a guard, through the exit and
//! record code itself), drain ticks against a `barrier` that splits a
//! ready batch with them (through the drain, batch and steal code), and a record's life (the release of a leaked record
//! racing its owner's guard drop and a new owner's claim, through the
//! record code itself). The mutex-protected sharing of grace periods
//! between callers is plain locked code and is covered by the unit and
//! stress tests instead.
#![cfg(exitq_loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use exitq::model::{self, AtomicBool, AtomicU64, AtomicU8, Chain, List, Node, Records};

/// Clones of the named `Arc`s, for a thread about to be spawned.
macro_rules! cloned {
    ($($a:ident),*) => {
        ($($a.clone()),*)
    };
}

/// `model::standing_word` / `Records::scan`: the record is past.
const PAST: u8 = 0;

/// `loom::model` with at least 3 preemptions: the races the models of
/// grace periods without the heavy barrier exist for may need a reader
/// preempted inside its section while two other threads go on. The seal
/// racing a poll's start does: it fails at 3, and passes at 2, without
/// the leader's fence or with `section::NESTED` Relaxed. The others fail
/// at 2 already with the code they guard weakened (the claim's fence,
/// the refresh's Release, `past::online`'s fence, `OFFLINE` overwritten,
/// an idle word trusted: re-checked 2026-12-06, on upstream loom too;
/// until then these docs said each passed at 2).
fn deep_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(3).max(3));
    builder.check(f);
}

#[test]
fn list_concurrent_pushes_and_take_all_lose_nothing() {
    loom::model(|| {
        let list = Arc::new(List::new());
        let pushers: Vec<_> = (0..2)
            .map(|t| {
                let list = list.clone();
                thread::spawn(move || {
                    list.push(Node::new(t * 10));
                    list.push(Node::new(t * 10 + 1));
                })
            })
            .collect();
        let taker = {
            let list = list.clone();
            thread::spawn(move || list.take_all().collect::<Vec<_>>())
        };
        for p in pushers {
            p.join().unwrap();
        }
        let mut all = taker.join().unwrap();
        all.extend(list.take_all());
        all.sort_unstable();
        assert_eq!(all, [0, 1, 10, 11]);
    });
}

#[test]
fn list_chain_push_stays_contiguous() {
    loom::model(|| {
        let list = Arc::new(List::new());
        let t = {
            let list = list.clone();
            thread::spawn(move || {
                let mut chain = Chain::new();
                chain.push_back(Node::new(1));
                chain.push_back(Node::new(2));
                list.push_chain(chain);
            })
        };
        list.push(Node::new(9));
        let first = list.take_all().collect::<Vec<_>>();
        t.join().unwrap();
        let mut all = first.clone();
        all.extend(list.take_all());
        // 1 and 2 always arrive together and in order.
        let pos1 = all.iter().position(|&x| x == 1).unwrap();
        assert_eq!(all[pos1 + 1], 2, "{all:?}");
        assert_eq!(all.len(), 3);
    });
}

const ALIVE: usize = 1;
const POISONED: usize = 2;

/// A reader reads through `current` inside a section; the writer unpublishes
/// object 0, runs grace period 1 and poisons it. The reader must never see
/// the poison.
#[test]
fn grace_period_waits_for_prior_readers() {
    loom::model(|| {
        let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
        let ctr = Arc::new(AtomicU64::new(0));
        let current = Arc::new(AtomicUsize::new(0));
        let objects = Arc::new([AtomicUsize::new(ALIVE), AtomicUsize::new(ALIVE)]);

        let reader = {
            let (gp_ctr, ctr, current, objects) = cloned!(gp_ctr, ctr, current, objects);
            thread::spawn(move || {
                model::reader_enter(&gp_ctr, &ctr);
                let i = current.load(Ordering::Acquire);
                let seen = objects[i].load(Ordering::Relaxed);
                model::reader_exit(&ctr);
                assert_eq!(seen, ALIVE, "reader saw object {i} poisoned");
            })
        };

        current.store(1, Ordering::Release);
        model::start_grace_period(&gp_ctr, 1);
        while model::holds_grace_period(&ctr, 1) {
            thread::yield_now();
        }
        objects[0].store(POISONED, Ordering::Relaxed);
        reader.join().unwrap();
    });
}

/// A grace period whose scan finds the reader already in its *next*
/// section (its word shows an epoch newer than the grace period): the
/// scanner frees what the reader's previous section read, so that read
/// must happen-before the free. Made Relaxed, the Release store of 0 that
/// ends the section (`section::reader_exit`) fails this model: the scanner
/// may see that 0 and free. The other half, the outermost entry store's
/// Release (`section::ENTRY`), is for a scanner that sees only the *next*
/// section's word: under C++20 a Relaxed store does not continue the exit
/// store's release sequence. Loom models the older rule (a later store by
/// the same thread continues it), so it passes with `ENTRY` Relaxed; miri
/// is the check for that half (`tests/miri_cell.rs`).
/// The scanner is a producer's poll (`GracePeriods::poll`): it starts
/// grace period 1, checks the reader once after its scan fence, and frees
/// only if the reader is past.
#[test]
fn a_scan_that_finds_the_reader_in_its_next_section_is_ordered_after_the_previous_one() {
    loom::model(|| {
        let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
        let ctr = Arc::new(AtomicU64::new(0));
        let current = Arc::new(AtomicUsize::new(0)); // 0: the object is published
        let object = Arc::new(UnsafeCell::new(ALIVE));

        let reader = {
            let (gp_ctr, ctr, current, object) = cloned!(gp_ctr, ctr, current, object);
            thread::spawn(move || {
                model::reader_enter(&gp_ctr, &ctr);
                if current.load(Ordering::Acquire) == 0 {
                    // SAFETY: (model) loom checks this read against the
                    // scanner's write.
                    let seen = object.with(|p| unsafe { *p });
                    assert_eq!(seen, ALIVE, "the reader saw the object freed");
                }
                model::reader_exit(&ctr);
                model::reader_enter(&gp_ctr, &ctr); // the next section
                model::reader_exit(&ctr);
            })
        };

        current.store(1, Ordering::Release); // unpublish
        model::start_grace_period(&gp_ctr, 1);
        model::full_fence(); // `grace::scan_fence`
        if !model::holds_grace_period(&ctr, 1) {
            // SAFETY: (model) loom checks this write against the read.
            object.with_mut(|p| unsafe { *p = POISONED });
        }
        reader.join().unwrap();
    });
}

/// Nested sections, and a reader that may load the epoch before grace
/// period 1 and store it after (stale epoch): grace period 2 must still wait
/// for a section that could have seen object 1.
#[test]
fn stale_epoch_reader_across_two_grace_periods() {
    loom::model(|| {
        two_grace_periods(|gp_ctr, ctr, current, objects| {
            model::reader_enter(gp_ctr, ctr);
            model::reader_enter(gp_ctr, ctr); // nested
            let i = current.load(Ordering::Acquire);
            assert!(!model::reader_exit(ctr));
            let seen = objects[i].load(Ordering::Relaxed);
            assert!(model::reader_exit(ctr));
            assert_eq!(seen, ALIVE, "reader saw object {i} poisoned");
        })
    });
}

/// One reader thread running `reader` (over the epoch, its reader word,
/// the index of the current object and the objects) while this thread
/// replaces object 0 by 1, runs grace period 1, poisons 0, replaces 1 by 2,
/// runs grace period 2 and poisons 1.
fn two_grace_periods(
    reader: impl FnOnce(&AtomicU64, &AtomicU64, &AtomicUsize, &[AtomicUsize; 3]) + Send + 'static,
) {
    let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
    let ctr = Arc::new(AtomicU64::new(0));
    let current = Arc::new(AtomicUsize::new(0));
    let objects = Arc::new([
        AtomicUsize::new(ALIVE),
        AtomicUsize::new(ALIVE),
        AtomicUsize::new(ALIVE),
    ]);
    let handle = {
        let (gp_ctr, ctr, current, objects) = cloned!(gp_ctr, ctr, current, objects);
        thread::spawn(move || reader(&gp_ctr, &ctr, &current, &objects))
    };
    for (g, (old, new)) in [(1u64, (0usize, 1usize)), (2, (1, 2))] {
        current.store(new, Ordering::Release);
        model::start_grace_period(&gp_ctr, g);
        while model::holds_grace_period(&ctr, g) {
            thread::yield_now();
        }
        objects[old].store(POISONED, Ordering::Relaxed);
    }
    handle.join().unwrap();
}

/// A QSBR reader (`QsbrReader`): online, it reads twice with a quiescent
/// state after each read (the relaxed epoch load may find the epoch
/// unchanged, stale or new: a store only in the last case), then goes
/// offline; a writer replaces the object and runs grace periods 1 and 2,
/// poisoning what each one retired. The reader must never see the poison:
/// a grace period waits for the reader's quiescent state after it started
/// (or its going offline), and whatever the reader reads after a
/// quiescent state that stored nothing was ordered by the Acquire load of
/// the epoch it stored before. Fails (the reader sees object 0 poisoned)
/// without `quiescent_store`'s light fence, which pairs with the leader's
/// heavy barrier: going online, the leader's scan could miss the word.
/// Weakening its Acquire load or Release store alone goes unseen here: the
/// fence, modelled as a read-modify-write of one global word, orders both
/// (miri checks those in tests/miri_cell.rs).
#[test]
fn a_qsbr_reader_is_waited_for_until_its_quiescent_state() {
    loom::model(|| {
        two_grace_periods(|gp_ctr, ctr, current, objects| {
            let mut word = model::qsbr_online(gp_ctr, ctr);
            for _ in 0..2 {
                let i = current.load(Ordering::Acquire);
                let seen = objects[i].load(Ordering::Relaxed);
                assert_eq!(seen, ALIVE, "QSBR reader saw object {i} poisoned");
                model::qsbr_quiescent(gp_ctr, ctr, &mut word);
            }
            model::qsbr_offline(ctr);
        })
    });
}

/// The batch steal handshake: the owner appends to its batch while a
/// stealer takes it; every item ends up exactly once on one side, and loom
/// checks the batch cell is never accessed by both at once. The owner's
/// loop is `defer`'s fast path (begin, and on refusal wait and retry); the
/// other models use `owner_section`, the loop every other owner access
/// goes through.
#[test]
fn steal_handshake_is_exclusive() {
    loom::model(|| {
        let busy = Arc::new(AtomicBool::new(false));
        let steal = Arc::new(AtomicU8::new(0));
        let batch = Arc::new(UnsafeCell::new(Vec::<u32>::new()));

        let owner = {
            let (busy, steal, batch) = cloned!(busy, steal, batch);
            thread::spawn(move || {
                for item in 0..2u32 {
                    loop {
                        if model::owner_begin(&busy, &steal) {
                            // SAFETY: the handshake admitted us (loom's
                            // UnsafeCell checks it really is exclusive).
                            batch.with_mut(|b| unsafe { (*b).push(item) });
                            model::owner_end(&busy);
                            break;
                        }
                        model::wait_for_stealer(&steal);
                    }
                }
            })
        };

        model::stealer_mark(&steal);
        model::heavy_barrier();
        model::stealer_wait(&busy);
        // SAFETY: the handshake admitted us (checked by loom's UnsafeCell).
        let mut stolen = batch.with_mut(|b| unsafe { std::mem::take(&mut *b) });
        assert_eq!(model::stealer_done(&steal), None, "no owner exits here");

        owner.join().unwrap();
        // SAFETY: the owner thread has been joined.
        stolen.extend(batch.with_mut(|b| unsafe { std::mem::take(&mut *b) }));
        stolen.sort_unstable();
        assert_eq!(stolen, [0, 1]);
    });
}

/// Two stealers at once (the reclaimer's idle steal and a `barrier`) and
/// the owner adding to its batch: with the steal lock, every item ends up
/// exactly once, on the domain's list or still with the owner (v1 had no
/// lock: both stealers could pass the handshake and take the same batch).
#[test]
fn two_stealers_take_each_item_exactly_once() {
    loom::model(|| {
        let busy = Arc::new(AtomicBool::new(false));
        let steal = Arc::new(AtomicU8::new(0));
        let batch = Arc::new(UnsafeCell::new(Vec::<u32>::new()));
        let list = Arc::new(List::new());
        let steal_lock = Arc::new(loom::sync::Mutex::new(()));

        let owner = {
            let (busy, steal, batch) = cloned!(busy, steal, batch);
            thread::spawn(move || {
                model::owner_section(&busy, &steal, || {
                    // SAFETY: the handshake admitted us (loom checks it).
                    batch.with_mut(|b| unsafe { (*b).push(7) })
                })
            })
        };
        let stealers: Vec<_> = (0..2)
            .map(|_| {
                let (busy, steal, batch, list, lock) = (
                    busy.clone(),
                    steal.clone(),
                    batch.clone(),
                    list.clone(),
                    steal_lock.clone(),
                );
                thread::spawn(move || {
                    let _one = lock.lock().unwrap();
                    model::stealer_mark(&steal);
                    model::heavy_barrier();
                    model::stealer_wait(&busy);
                    // SAFETY: handshake won and the only stealer (lock).
                    let taken = batch.with_mut(|b| unsafe { std::mem::take(&mut *b) });
                    assert_eq!(model::stealer_done(&steal), None, "no owner exits here");
                    for item in taken {
                        list.push(Node::new(item));
                    }
                })
            })
            .collect();
        owner.join().unwrap();
        for s in stealers {
            s.join().unwrap();
        }
        let mut all: Vec<u32> = list.take_all().collect();
        // SAFETY: every thread has been joined.
        all.extend(batch.with_mut(|b| unsafe { std::mem::take(&mut *b) }));
        assert_eq!(all, [7], "taken exactly once");
    });
}

/// The owner moves its batch onto the domain's list (thread exit, offload)
/// inside its section, while a `barrier` steals: an item deferred before
/// the barrier started is always found, stolen or on the list (v1 pushed
/// after leaving the section, and a barrier could see neither).
#[test]
fn barrier_finds_work_the_owner_moves_inside_its_section() {
    loom::model(|| {
        let busy = Arc::new(AtomicBool::new(false));
        let steal = Arc::new(AtomicU8::new(0));
        let batch = Arc::new(UnsafeCell::new(Vec::<u32>::new()));
        let list = Arc::new(List::new());
        let issued = Arc::new(AtomicUsize::new(0));

        let owner = {
            let (busy, steal, batch, list, issued) = cloned!(busy, steal, batch, list, issued);
            thread::spawn(move || {
                let section = |f: &dyn Fn(&mut Vec<u32>)| {
                    model::owner_section(&busy, &steal, || {
                        // SAFETY: the handshake admitted us.
                        batch.with_mut(|b| f(unsafe { &mut *b }))
                    })
                };
                section(&|b| b.push(1)); // defer
                issued.store(1, Ordering::Release); // defer returned
                section(&|b| {
                    for item in std::mem::take(b) {
                        list.push(Node::new(item)); // the move, inside
                    }
                });
            })
        };
        // The barrier: steal, then take the list.
        let seen_issued = issued.load(Ordering::Acquire);
        model::stealer_mark(&steal);
        model::heavy_barrier();
        model::stealer_wait(&busy);
        // SAFETY: handshake won (single stealer here).
        let mut found = batch.with_mut(|b| unsafe { std::mem::take(&mut *b) });
        assert_eq!(model::stealer_done(&steal), None, "no owner exits here");
        found.extend(list.take_all());
        if seen_issued == 1 {
            assert_eq!(
                found,
                [1],
                "the barrier missed a callback deferred before it"
            );
        }
        owner.join().unwrap();
    });
}

/// The owner takes ready work out of its record to run it after its
/// section (`run_seq` odd), while a `barrier` steals: the barrier either
/// takes the item itself or waits for the owner's run, and then sees its
/// effect.
#[test]
fn barrier_waits_for_an_owner_run_in_progress() {
    loom::model(|| {
        let busy = Arc::new(AtomicBool::new(false));
        let steal = Arc::new(AtomicU8::new(0));
        let batch = Arc::new(UnsafeCell::new(Vec::<u32>::new()));
        let seq = Arc::new(AtomicU64::new(0));
        let issued = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicUsize::new(0));

        let owner = {
            let (busy, steal, batch, seq, issued, ran) =
                cloned!(busy, steal, batch, seq, issued, ran);
            thread::spawn(move || {
                model::owner_section(&busy, &steal, || {
                    // SAFETY: the handshake admitted us.
                    batch.with_mut(|b| unsafe { (*b).push(1) })
                });
                issued.store(1, Ordering::Release);
                let mine = model::owner_section(&busy, &steal, || {
                    // SAFETY: the handshake admitted us.
                    let taken = batch.with_mut(|b| unsafe { std::mem::take(&mut *b) });
                    if !taken.is_empty() {
                        model::run_begin(&seq);
                    }
                    taken
                });
                if !mine.is_empty() {
                    ran.fetch_add(mine.len(), Ordering::Relaxed); // the callback
                    model::run_end(&seq);
                }
            })
        };
        let seen_issued = issued.load(Ordering::Acquire);
        model::stealer_mark(&steal);
        model::heavy_barrier();
        model::stealer_wait(&busy);
        // SAFETY: handshake won (single stealer here).
        let taken = batch.with_mut(|b| unsafe { std::mem::take(&mut *b) });
        let running = model::run_seen(&seq);
        assert_eq!(model::stealer_done(&steal), None, "no owner exits here");
        ran.fetch_add(taken.len(), Ordering::Relaxed); // the barrier's pass
        if let Some(s) = running {
            model::run_wait(&seq, s);
        }
        if seen_issued == 1 {
            assert_eq!(
                ran.load(Ordering::Relaxed),
                1,
                "barrier returned before the callback ran"
            );
        }
        owner.join().unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 1, "ran exactly once");
    });
}

/// Drain ticks (drain.rs) against a `barrier`, through the real code:
/// the owner's ready batch holds `TICK + 1` callbacks
/// (`Rec::ready_batch`, the batch code `defer` uses), and the owner runs
/// drain ticks until one takes nothing (`Rec::drain_tick`: the real
/// `drain::take` inside an owner section, `run_seq` odd, then the real
/// run after it: the first tick takes `TICK` through `Batch::take_tick`,
/// the second the last one through `take_some`), while a `barrier`
/// steals (the real `reclaim::steal_marked`: the ready queue, a batch
/// part-drained as it is), runs what it took (`Batch::run`, from the
/// drain cursor) and waits for the owner run it saw in progress. When the
/// barrier returns, every callback has run; each runs exactly once.
/// Checked against the code weakened (2026-12-07): a steal that does not
/// read `run_seq` fails ("callbacks when the barrier returned"), a stolen
/// batch run from its start instead of its drain cursor fails ("callback
/// 0 ran twice"), and a take without its `run_begin` fails (loom finds the
/// barrier waiting for a run that never ends).
#[test]
fn barrier_and_drain_ticks_split_a_batch() {
    const N: usize = exitq::model::TICK + 1;
    const ALL: u64 = (1 << N) - 1;
    loom::model(|| {
        let records = Arc::new(Records::new());
        let queue = Arc::new(model::Queue::new());
        let ran = Arc::new(AtomicU64::new(0));
        let owner = records.claim();
        owner.ready_batch(
            (0..N)
                .map(|i| {
                    let ran = ran.clone();
                    move || {
                        let before = ran.fetch_or(1 << i, Ordering::Relaxed);
                        assert_eq!(before & (1 << i), 0, "callback {i} ran twice");
                    }
                })
                .collect(),
        );
        let barrier = {
            let (records, queue, ran) = cloned!(records, queue, ran);
            thread::spawn(move || {
                let rec = records.oldest();
                let (handed, seen) = rec.steal_seeing_runs(&queue, true, || {});
                assert!(!handed, "no owner exits here");
                queue.run_all();
                rec.wait_run(seen);
                assert_eq!(
                    ran.load(Ordering::Relaxed),
                    ALL,
                    "callbacks when the barrier returned"
                );
            })
        };
        while owner.drain_tick() {}
        barrier.join().unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), ALL, "every callback ran");
    });
}

/// A batch sealed without the grace-period lock: the owner unpublishes
/// object 0, takes the snapshot (full fence, then `started + 1`), and frees
/// (poisons) it if that grace period has completed when it looks; a leader
/// runs grace periods 1 and 2. A reader must never see the poison.
#[test]
fn a_lock_free_snapshot_waits_for_every_prior_reader() {
    loom::model(|| {
        let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
        let ctr = Arc::new(AtomicU64::new(0));
        let started = Arc::new(AtomicU64::new(0));
        let completed = Arc::new(AtomicU64::new(0));
        let current = Arc::new(AtomicUsize::new(0));
        let objects = Arc::new([AtomicUsize::new(ALIVE), AtomicUsize::new(ALIVE)]);

        let reader = {
            let (gp_ctr, ctr, current, objects) = cloned!(gp_ctr, ctr, current, objects);
            thread::spawn(move || {
                model::reader_enter(&gp_ctr, &ctr);
                let i = current.load(Ordering::Acquire);
                let seen = objects[i].load(Ordering::Relaxed);
                model::reader_exit(&ctr);
                assert_eq!(seen, ALIVE, "reader saw object {i} freed");
            })
        };
        let leader = {
            let (gp_ctr, ctr, started, completed) = cloned!(gp_ctr, ctr, started, completed);
            thread::spawn(move || {
                for g in 1..=2u64 {
                    // (Under the grace-period lock in the real code.)
                    model::claim_started(&started, g);
                    model::start_grace_period(&gp_ctr, g);
                    while model::holds_grace_period(&ctr, g) {
                        thread::yield_now();
                    }
                    completed.store(g, Ordering::Release);
                }
            })
        };
        // The owner: unpublish, seal (snapshot), wait, free.
        current.store(1, Ordering::Release);
        let need = model::snapshot(&started);
        // `is_done` once (no spinning: loom explores the interleavings in
        // which the grace period has already completed here).
        if completed.load(Ordering::Acquire) >= need {
            objects[0].store(POISONED, Ordering::Relaxed);
        }
        reader.join().unwrap();
        leader.join().unwrap();
    });
}

/// A record's life (`record.rs`, "A record's life"): the owner thread
/// exited with a read section on its record still open (the exit
/// destructor kept the record, marked retired). Then, concurrently: the
/// owner's later thread-local destructor drops the guard after all (or
/// leaked it), and the thread dies; a grace-period leader waits for the
/// record and releases it once the thread is gone; a new thread claims a
/// record (the freed one, or a new one) and reads. Every interleaving:
/// the record is released exactly once, the new owner's section is never
/// ended by anyone else, and its guard's exit never releases the record it
/// owns (before the claim reset every owner field, a record freed by the
/// leader kept its old owner's `RETIRED` flag, and the new owner's first
/// guard released it: issue 25).
#[test]
fn leaked_release_races_a_guard_drop_and_a_claim() {
    for owner_drops_guard in [false, true] {
        loom::model(move || {
            let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
            let records = Arc::new(Records::new());
            let dead = Arc::new(AtomicBool::new(false));
            // The owner's read section, still open when its thread's exit
            // destructor ran.
            let old = records.claim();
            old.enter(&gp_ctr);
            assert!(!old.retire(), "kept for the live guard");
            let owner = {
                let (records, dead) = cloned!(records, dead);
                thread::spawn(move || {
                    if owner_drops_guard {
                        // A later thread-local destructor drops the guard.
                        records.oldest().exit();
                    }
                    // The thread is gone (what `tgkill` then tells).
                    dead.store(true, Ordering::Release);
                })
            };
            let leader = {
                let (records, dead) = cloned!(records, dead);
                thread::spawn(move || {
                    let old = records.oldest();
                    let mut released = false;
                    // Grace period 1: wait for the old section, or end it.
                    while old.holds(1) {
                        if old.release_leaked(|_| !dead.load(Ordering::Acquire)) {
                            released = true;
                            break;
                        }
                        thread::yield_now();
                    }
                    released
                })
            };
            let (records2, gp2) = (records.clone(), gp_ctr.clone());
            let claimant = thread::spawn(move || {
                let mine = records2.claim();
                mine.enter(&gp2);
                let word = mine.word();
                thread::yield_now();
                assert_eq!(mine.word(), word, "someone else ended my section");
                mine.exit();
                assert!(mine.in_use(), "my guard's exit released my record");
            });
            owner.join().unwrap();
            let released_by_leader = leader.join().unwrap();
            claimant.join().unwrap();
            assert_eq!(
                released_by_leader, !owner_drops_guard,
                "released once: by the guard's drop, else by the leader"
            );
            assert!(records.count() <= 2);
        });
    }
}

/// A grace period started and completed with no heavy barrier
/// (`past.rs`), three parties: a sealer unpublishes object 0 and seals
/// (its snapshot of `started`); a poller claims grace period 1, stores
/// its epoch with no barrier, and completes it only if the reader's word
/// shows the new epoch (past); a reader enters with no hardware fence (a
/// membarrier-mode entry that no barrier upgrades), nests, and enters
/// again. The sealer frees object 0 if the grace period its snapshot
/// needs has completed. Every interleaving: the reader never reads object
/// 0 concurrently with the free. Without the claim's fence between its
/// store of `started` and the epoch's (the code before, which relied on
/// the heavy barrier there), the sealer can read the old `started` while
/// the reader, past the new epoch, still finds object 0 published.
#[test]
fn a_grace_period_without_the_barrier_completes_only_on_readers_past_it() {
    deep_model(|| {
        let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
        let ctr = Arc::new(AtomicU64::new(0));
        let started = Arc::new(AtomicU64::new(0));
        let completed = Arc::new(AtomicU64::new(0));
        let current = Arc::new(AtomicUsize::new(0)); // 0: object 0 is published
        let object = Arc::new(UnsafeCell::new(ALIVE));

        let reader = {
            let (gp_ctr, ctr, current, object) = cloned!(gp_ctr, ctr, current, object);
            thread::spawn(move || {
                for _ in 0..2 {
                    model::reader_enter_unfenced(&gp_ctr, &ctr);
                    model::reader_enter(&gp_ctr, &ctr); // nested: no fence
                    if current.load(Ordering::Acquire) == 0 {
                        // SAFETY: (model) loom checks this read against
                        // the sealer's write.
                        let seen = object.with(|p| unsafe { *p });
                        assert_eq!(seen, ALIVE, "the reader saw object 0 freed");
                    }
                    model::reader_exit(&ctr);
                    model::reader_exit(&ctr);
                }
            })
        };
        let poller = {
            let (gp_ctr, ctr, started, completed) = cloned!(gp_ctr, ctr, started, completed);
            thread::spawn(move || {
                model::claim_started(&started, 1);
                model::publish_epoch(&gp_ctr, 1);
                model::full_fence(); // `grace::scan_fence`
                if model::standing_word(&ctr, 1) == PAST {
                    completed.store(1, Ordering::Release);
                }
            })
        };
        current.store(1, Ordering::Release); // unpublish
        let need = model::snapshot(&started);
        if completed.load(Ordering::Acquire) >= need {
            // SAFETY: (model) loom checks this write against the read.
            object.with_mut(|p| unsafe { *p = POISONED });
        }
        reader.join().unwrap();
        poller.join().unwrap();
    });
}

/// A claim racing a scan without the heavy barrier (`past.rs`, a free
/// record): a thread claims a record (a free one reused, or a new one
/// pushed onto the registry) and reads under an entry with no hardware
/// fence, then gives the record back; a poller unpublishes object 0,
/// starts grace period 1 with no barrier and frees the object if its scan
/// finds every record past, a free one counting as past. Every
/// interleaving: no read of a freed object. Without the full fence at the
/// end of `Registry::claim`, the scan can read the record `FREE` (or miss
/// the new one) while its new owner loads the old epoch and finds the
/// object published.
#[test]
fn a_claim_racing_a_scan_loads_the_new_epoch() {
    for reuse in [false, true] {
        deep_model(move || {
            let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
            let records = Arc::new(Records::new());
            if reuse {
                records.claim().release();
            }
            let current = Arc::new(AtomicUsize::new(0));
            let object = Arc::new(UnsafeCell::new(ALIVE));
            let claimant = {
                let (gp_ctr, records, current, object) = cloned!(gp_ctr, records, current, object);
                thread::spawn(move || {
                    let mine = records.claim();
                    mine.enter_unfenced(&gp_ctr);
                    if current.load(Ordering::Acquire) == 0 {
                        // SAFETY: (model) loom checks this read against
                        // the poller's write.
                        let seen = object.with(|p| unsafe { *p });
                        assert_eq!(seen, ALIVE, "the claimant saw object 0 freed");
                    }
                    mine.exit();
                    mine.release();
                })
            };
            current.store(1, Ordering::Release);
            model::publish_epoch(&gp_ctr, 1);
            model::full_fence(); // `grace::scan_fence`
            if records.scan(1, false) == PAST {
                // SAFETY: (model) loom checks this write against the read.
                object.with_mut(|p| unsafe { *p = POISONED });
            }
            claimant.join().unwrap();
            assert!(records.count() <= 1 + usize::from(!reuse));
        });
    }
}

/// The shared state of the models of one record without the heavy
/// barrier: the epoch, the record's word, which object is published (0),
/// and object 0.
#[allow(clippy::type_complexity)]
fn one_record() -> (
    Arc<AtomicU64>,
    Arc<AtomicU64>,
    Arc<AtomicUsize>,
    Arc<UnsafeCell<usize>>,
) {
    (
        Arc::new(AtomicU64::new(model::initial_epoch())),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(UnsafeCell::new(ALIVE)),
    )
}

/// A poll's side in the models of one record without the heavy barrier:
/// unpublish object 0 (`current` 1), start grace period 1 with the
/// epoch's store alone, and free (poison) the object if the record's word
/// shows its owner past.
fn poll_and_free(
    gp_ctr: &AtomicU64,
    ctr: &AtomicU64,
    current: &AtomicUsize,
    object: &UnsafeCell<usize>,
) {
    current.store(1, Ordering::Release);
    model::publish_epoch(gp_ctr, 1);
    model::full_fence(); // `grace::scan_fence`
    if model::standing_word(ctr, 1) == PAST {
        // SAFETY: (model) loom checks this write against the owner's reads.
        object.with_mut(|p| unsafe { *p = POISONED });
    }
}

/// A record whose owner defers under another record (a `Reader`) never
/// enters a section on it: its seal refreshes the idle word with the epoch
/// it loads (`past::refresh_idle`). The owner reads under the record,
/// leaves, refreshes, then enters again with no hardware fence; a poller
/// unpublishes object 0, starts grace period 1 with no barrier, and frees
/// the object if the record shows the new epoch. Every interleaving: no
/// read of a freed object, neither in the section before the refresh (the
/// refresh's Release) nor in the one after (the owner loads the epoch the
/// refresh showed, or a newer one).
#[test]
fn an_idle_word_refreshed_at_a_seal_shows_its_owner_past() {
    deep_model(|| {
        let (gp_ctr, ctr, current, object) = one_record();
        let owner = {
            let (gp_ctr, ctr, current, object) = cloned!(gp_ctr, ctr, current, object);
            thread::spawn(move || {
                let read = || {
                    if current.load(Ordering::Acquire) == 0 {
                        // SAFETY: (model) loom checks this read against
                        // the poller's write.
                        let seen = object.with(|p| unsafe { *p });
                        assert_eq!(seen, ALIVE, "the owner saw object 0 freed");
                    }
                };
                model::reader_enter_unfenced(&gp_ctr, &ctr);
                read();
                model::reader_exit(&ctr);
                model::refresh_idle(&gp_ctr, &ctr);
                model::reader_enter_unfenced(&gp_ctr, &ctr);
                read();
                model::reader_exit(&ctr);
            })
        };
        poll_and_free(&gp_ctr, &ctr, &current, &object);
        owner.join().unwrap();
    });
}

/// A thread goes offline between its sections (`past::offline`: the
/// reclaimer before it sleeps; or a `QsbrReader`'s `offline`) and back
/// online, then reads under an entry with no hardware fence (the QSBR
/// reader: under its online word); a poller unpublishes object 0, starts
/// grace period 1 with no barrier and frees the object if the word shows
/// the owner past (`OFFLINE` counts as past). Every interleaving: no read
/// of a freed object. Without the full fence on the way back online, the
/// poller can read `OFFLINE` while the owner, back online, loads the old
/// epoch and finds the object published (loom shows it for
/// `past::online` and for `qsbr::back_online_word`). The QSBR reader runs
/// as a thread no barrier comes to (`model::no_barrier_comes`): its
/// quiescent states' light fences are compiler fences, which order
/// nothing then (until 2026-12-06 they were full fences here, and the
/// model passed without `back_online_word`'s full fence). A third way: the
/// owner offline (`thread_offline`, called from a callback its seal runs)
/// reaches the seal's refresh of its idle word before it comes back
/// online lazily: the refresh must leave `OFFLINE` for `online` to find
/// (else the fence is skipped, and loom finds the freed object read).
#[test]
fn a_thread_back_online_loads_the_new_epoch() {
    for way in [Back::Online, Back::Qsbr, Back::RefreshedOffline] {
        back_online(way);
    }
}

#[derive(Clone, Copy)]
enum Back {
    Online,
    Qsbr,
    RefreshedOffline,
}

fn back_online(way: Back) {
    deep_model(move || {
        let (gp_ctr, ctr, current, object) = one_record();
        let owner = {
            let (gp_ctr, ctr, current, object) = cloned!(gp_ctr, ctr, current, object);
            thread::spawn(move || {
                match way {
                    Back::Qsbr => model::no_barrier_comes(|| {
                        model::qsbr_online(&gp_ctr, &ctr);
                        model::qsbr_offline(&ctr);
                        model::qsbr_back_online(&gp_ctr, &ctr);
                    }),
                    Back::Online => {
                        model::offline(&ctr);
                        model::online(&gp_ctr, &ctr);
                        model::reader_enter_unfenced(&gp_ctr, &ctr);
                    }
                    Back::RefreshedOffline => {
                        model::offline(&ctr);
                        model::refresh_idle(&gp_ctr, &ctr);
                        model::online(&gp_ctr, &ctr);
                        model::reader_enter_unfenced(&gp_ctr, &ctr);
                    }
                }
                if current.load(Ordering::Acquire) == 0 {
                    // SAFETY: (model) loom checks this read against the
                    // poller's write.
                    let seen = object.with(|p| unsafe { *p });
                    assert_eq!(seen, ALIVE, "the owner saw object 0 freed");
                }
                if !matches!(way, Back::Qsbr) {
                    model::reader_exit(&ctr);
                }
            })
        };
        poll_and_free(&gp_ctr, &ctr, &current, &object);
        owner.join().unwrap();
    });
}

/// Counts a model item's runs.
fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// An item that counts its runs in `c`.
fn counting(c: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let c = c.clone();
    move || {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Spins (yielding to loom) until `flag` is set.
fn wait_for(flag: &AtomicBool) {
    while !flag.load(Ordering::Acquire) {
        thread::yield_now();
    }
}

/// The end of a hand-off model, every thread joined: what is left on the
/// queue runs, the owner's batch and hook have run exactly once, and the
/// owner's record was handed back exactly once (a new claim reuses it).
fn all_ran_once_and_released(
    queue: &model::Queue,
    records: &Records,
    batch: &AtomicUsize,
    hook: &AtomicUsize,
) {
    queue.run_all();
    assert_eq!(batch.load(Ordering::Relaxed), 1, "batch ran exactly once");
    assert_eq!(hook.load(Ordering::Relaxed), 1, "hook ran exactly once");
    let again = records.claim();
    assert_eq!(records.count(), 1, "the record was not handed back");
    again.release();
}

/// The exit path against a stealer that holds the record until the exit
/// has returned (`handshake`, "An owner's exit is handed off"): the exit
/// returns whatever the interleaving (before the hand-off it waited for
/// the stealer, which here waits for it: no interleaving could end), the
/// record is released exactly once, by the owner or by the stealer, and
/// an `exit_barrier` that starts after the exit returned (it takes the
/// steal lock once) finds the thread's batch and exit hook run, each
/// exactly once.
#[test]
fn an_exit_returns_while_a_stealer_holds_the_record() {
    loom::model(|| {
        let records = Arc::new(Records::new());
        let queue = Arc::new(model::Queue::new());
        let steal_lock = Arc::new(loom::sync::Mutex::new(()));
        let exited = Arc::new(AtomicBool::new(false));
        let (batch, hook) = (counter(), counter());
        // This thread is the owner: a sealed batch and an exit hook.
        let owner = records.claim();
        owner.defer(counting(&batch));
        owner.register_exit(counting(&hook));

        let stealer = {
            let (records, queue, lock, exited) = cloned!(records, queue, steal_lock, exited);
            thread::spawn(move || {
                let _one = lock.lock().unwrap();
                // A `barrier`'s steal, held up after its heavy barrier
                // until the owner's exit has returned.
                records.oldest().steal(&queue, true, || wait_for(&exited))
            })
        };
        assert!(owner.exit_thread(&queue), "no guard: released");
        exited.store(true, Ordering::Release);

        // `exit_barrier`, after the exit returned: the steal lock once,
        // then a pass.
        drop(steal_lock.lock().unwrap());
        queue.run_all();
        assert_eq!(
            batch.load(Ordering::Relaxed),
            1,
            "exit_barrier missed the batch"
        );
        assert_eq!(
            hook.load(Ordering::Relaxed),
            1,
            "exit_barrier missed the hook"
        );

        stealer.join().unwrap();
        all_ran_once_and_released(&queue, &records, &batch, &hook);
    });
}

/// An exiting owner against two stealers, one after the other (the steal
/// lock): the reclaimer's idle steal (it takes nothing of a busy owner)
/// and a `barrier` (it takes everything, then runs the queue). Whichever
/// the owner hands its exit to, or neither: a batch sealed before the
/// barrier started has run when it returns, and at the end the batch and
/// the hook have run exactly once and the record is free.
#[test]
fn a_hand_off_races_an_idle_steal_and_a_barrier() {
    loom::model(|| {
        let records = Arc::new(Records::new());
        let queue = Arc::new(model::Queue::new());
        let steal_lock = Arc::new(loom::sync::Mutex::new(()));
        let issued = Arc::new(AtomicBool::new(false));
        let (batch, hook) = (counter(), counter());
        let owner = records.claim();
        owner.register_exit(counting(&hook));

        let stealers: Vec<_> = [false, true]
            .into_iter()
            .map(|is_barrier| {
                let (records, queue, lock, issued, batch) =
                    cloned!(records, queue, steal_lock, issued, batch);
                thread::spawn(move || {
                    let seen = issued.load(Ordering::Acquire);
                    let _one = lock.lock().unwrap();
                    records.oldest().steal(&queue, is_barrier, || {});
                    if is_barrier {
                        queue.run_all();
                        if seen {
                            assert_eq!(
                                batch.load(Ordering::Relaxed),
                                1,
                                "the barrier missed a batch sealed before it"
                            );
                        }
                    }
                })
            })
            .collect();
        owner.defer(counting(&batch));
        issued.store(true, Ordering::Release);
        assert!(owner.exit_thread(&queue), "no guard: released");
        for s in stealers {
            s.join().unwrap();
        }
        all_ran_once_and_released(&queue, &records, &batch, &hook);
    });
}

/// A guard that outlives the thread's exit destructor, at a hand-off: the
/// exit keeps the record for the guard (`RELEASE` not asked), the guard's
/// drop releases it only once the stealer finished the hand-off, and a
/// new owner that claims it meanwhile (and exits at once, itself possibly
/// handing off) never shares the batches or the `handed` slot with the
/// stealer: every item runs exactly once.
#[test]
fn a_record_kept_at_a_hand_off_goes_back_after_it() {
    loom::model(|| {
        let gp_ctr = Arc::new(AtomicU64::new(model::initial_epoch()));
        let records = Arc::new(Records::new());
        let queue = Arc::new(model::Queue::new());
        let steal_lock = Arc::new(loom::sync::Mutex::new(()));
        let (first, second) = (counter(), counter());
        let owner = records.claim();
        owner.enter(&gp_ctr); // a guard a later destructor still holds
        owner.register_exit(counting(&first));

        let stealer = {
            let (records, queue, lock) = cloned!(records, queue, steal_lock);
            thread::spawn(move || {
                let _one = lock.lock().unwrap();
                records.oldest().steal(&queue, false, || {})
            })
        };
        assert!(!owner.exit_thread(&queue), "kept for the live guard");
        owner.exit(); // the guard's drop: releases the record
        let next = {
            let (records, queue, second) = cloned!(records, queue, second);
            thread::spawn(move || {
                let mine = records.claim();
                mine.register_exit(counting(&second));
                assert!(mine.exit_thread(&queue), "no guard: released");
            })
        };
        next.join().unwrap();
        stealer.join().unwrap();
        queue.run_all();
        assert_eq!(first.load(Ordering::Relaxed), 1, "first owner's hook");
        assert_eq!(second.load(Ordering::Relaxed), 1, "second owner's hook");
        assert!(records.count() <= 2);
    });
}
