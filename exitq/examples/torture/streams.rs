//! The streamers: the only users of the last domain (`polled`), busy
//! threads whose seals drive its grace periods (`GracePeriods::poll`), so
//! that most of them complete without the heavy barrier (`past.rs`: every
//! record shows its owner past the start). Each streamer holds a `Reader`
//! and loops over its sections, nests `Domain::read` sections on its main
//! record, checks the current object and the cell's value, retires and
//! writes from inside and outside sections (so it seals and polls inside
//! them); the first also holds a `QsbrReader` online (quiescent states,
//! offline around sleeps and `barrier`). Now and then a streamer sleeps or
//! calls `barrier` or `synchronize`: its records then show old epochs (the
//! heavy barrier after the start settles them) and `synchronize` adopts
//! grace periods a poll started without the barrier. Or it sleeps with
//! every record offline (`thread_offline`, `Reader::offline`, sometimes
//! right after forgetting one of the reader's guards, `QsbrReader::offline`),
//! its main records coming back online lazily, sometimes with a section
//! right after the sleep.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use crate::workers::{check_cell, check_current, counted_defer, replace, write_cell};
use crate::world::{inc, new_obj, retire, world, Rng};

/// Streamer threads (three: more than this machine's two CPUs, so some
/// are preempted inside their sections, as in the steady-defer benchmark).
pub(crate) const STREAMERS: usize = 3;

pub(crate) fn streamer(id: usize, seed: u64) {
    let w = world();
    let i = w.shared();
    let slot = &w.slots[i];
    let rng = Rng::new(seed ^ 0x57AE ^ (id as u64) << 44);
    let mut reader = slot.domain.reader();
    let mut qsbr = (id == 0).then(|| slot.domain.qsbr_reader());
    let mut generation = 0u64;
    while !w.stop.load(Ordering::Relaxed) {
        generation += 1;
        {
            let g = reader.read();
            check_current(slot, &rng);
            check_cell(slot, &g, &rng);
            if rng.chance(10) {
                let _nested = slot.domain.read();
                check_current(slot, &rng);
            }
            match rng.below(100) {
                0..=39 => {
                    let old = slot.current.swap(new_obj(generation), Ordering::AcqRel) as usize;
                    slot.domain.defer(move || retire(i, old));
                    inc(&w.ops.replaces_deferred);
                }
                40..=49 => write_cell(i, &rng, generation, false),
                50..=59 => counted_defer(slot, &rng),
                _ => {}
            }
        }
        if let Some(q) = qsbr.as_mut() {
            check_cell(slot, q, &rng);
            q.quiescent();
        }
        match rng.below(20_000) {
            0 => match qsbr.as_mut() {
                // Waiting with the QSBR reader online would wait for
                // ourselves: offline around it.
                Some(q) => q.offline(|| slot.domain.barrier()),
                None => slot.domain.barrier(),
            },
            1..=2 => match qsbr.as_mut() {
                Some(q) => q.offline(|| replace(i, &rng, generation)),
                None => replace(i, &rng, generation),
            },
            3..=4 => match qsbr.as_mut() {
                Some(q) => q.offline(|| thread::sleep(Duration::from_micros(rng.below(2000)))),
                None => thread::sleep(Duration::from_micros(rng.below(2000))),
            },
            5..=8 => {
                // Every record offline around a sleep: the main records
                // (back online lazily, at their next use: sometimes a
                // section right after the sleep, still inside the others'
                // `offline`), the `Reader`'s and the `QsbrReader`'s.
                if rng.chance(50) {
                    exitq::thread_offline();
                } else {
                    slot.domain.thread_offline();
                }
                let nap = || {
                    thread::sleep(Duration::from_micros(rng.below(2000)));
                    if rng.chance(50) {
                        let _g = slot.domain.read();
                        check_current(slot, &rng);
                    }
                };
                if rng.chance(20) {
                    // A forgotten guard: going offline ends its section.
                    std::mem::forget(reader.read());
                }
                reader.offline(|| match qsbr.as_mut() {
                    Some(q) => q.offline(nap),
                    None => nap(),
                });
                inc(&w.ops.offline_naps);
            }
            _ => {}
        }
        inc(&w.ops.streamed);
    }
}
