//! QSBR workers (`qsbr_worker`): a `QsbrReader` online on every domain
//! all along, the way a liburcu-qsbr thread runs, mixed with every other
//! API of the same thread.
//!
//! Loads go through the online readers (the typed cell's value, and the
//! raw pointer read inside the reader's section), several of them between
//! two quiescent states at random; each reader announces one now and then
//! (never so rarely that it stalls grace periods: writers and the watchdog
//! notice). The thread goes offline on one domain around a sleep (with a
//! guard read inside), and on every domain at once around the waits
//! (`synchronize`, `synchronize_expedited`, `barrier`, the cell's
//! `replace`): online on one domain while waiting for another's grace
//! period, two such threads could wait for each other (the documented
//! cycle). Online, it writes (`store`, `update`, raw `defer`), defers
//! counted callbacks, enters guard and `Reader` sections nested inside the
//! online reader, flushes, and drops and rebuilds its readers.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use exitq::QsbrReader;

use crate::workers::{check_cell, check_current, counted_defer, replace, write_cell};
use crate::world::{inc, new_obj, retire, world, Rng, ALIVE};

/// Runs `f` with every reader of `readers` offline (nested `offline`
/// calls, so each comes back online when `f` returns or unwinds).
fn all_offline(readers: &mut [Option<QsbrReader>], f: &mut dyn FnMut()) {
    match readers.split_first_mut() {
        None => f(),
        Some((Some(q), rest)) => q.offline(|| all_offline(rest, f)),
        Some((None, rest)) => all_offline(rest, f),
    }
}

/// The online reader of a slot (rebuilt at the top of each iteration).
fn online(reader: &Option<QsbrReader>) -> &QsbrReader {
    reader.as_ref().expect("online")
}

pub(crate) fn qsbr_worker(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0x95B2 ^ (id as u64) << 36);
    let mut readers: Vec<Option<QsbrReader>> = w.slots[..w.shared()]
        .iter()
        .map(|s| Some(s.domain.qsbr_reader()))
        .collect();
    let mut plain: Vec<_> = w.slots[..w.shared()]
        .iter()
        .map(|s| s.domain.reader())
        .collect();
    let mut generation = 0u64;
    while !w.stop.load(Ordering::Relaxed) {
        let i = rng.below(w.shared() as u64) as usize;
        let slot = &w.slots[i];
        generation += 1;
        if readers[i].is_none() {
            readers[i] = Some(slot.domain.qsbr_reader());
            inc(&w.ops.qsbr_readers_made);
        }
        match rng.below(100) {
            0..=44 => {
                // Loads through the online reader, maybe several before a
                // quiescent state: the first stays valid until it.
                let q = online(&readers[i]);
                let tracked = slot.cell.load(q);
                check_cell(slot, q, &rng);
                if rng.chance(30) {
                    check_current(slot, &rng);
                }
                // SAFETY: loaded under `q`, still online (no quiescent
                // state or offline since: the borrow checker sees to it);
                // poisoned, then freed a grace period later.
                let first = unsafe { &*tracked.obj() };
                if first.state.load(Ordering::Acquire) != ALIVE {
                    inc(&w.v.read_after_poison);
                }
                inc(&w.ops.qsbr_reads);
            }
            45..=54 => {
                // Offline around a sleep; a guard's section inside.
                let q = readers[i].as_mut().expect("online");
                q.offline(|| {
                    let g = slot.domain.read();
                    check_cell(slot, &g, &rng);
                    drop(g);
                    thread::sleep(Duration::from_micros(rng.below(300)));
                });
                inc(&w.ops.qsbr_offline);
            }
            55..=62 => {
                all_offline(&mut readers, &mut || match rng.below(5) {
                    0 => slot.domain.synchronize(),
                    1 => slot.domain.synchronize_expedited(),
                    2 => slot.domain.barrier(),
                    _ => replace(i, &rng, generation), // may wait
                });
                inc(&w.ops.qsbr_waits);
            }
            63..=74 => {
                // Writes while online: nothing that waits.
                if rng.chance(50) {
                    write_cell(i, &rng, generation, false);
                } else {
                    let old = slot.current.swap(new_obj(generation), Ordering::AcqRel) as usize;
                    slot.domain.defer(move || retire(i, old));
                    inc(&w.ops.replaces_deferred);
                }
            }
            75..=82 => counted_defer(slot, &rng),
            83..=92 => {
                // Sections of the other kinds inside the online reader.
                if rng.chance(50) {
                    let g = slot.domain.read();
                    check_cell(slot, &g, &rng);
                } else {
                    let g = plain[i].read();
                    check_cell(slot, &g, &rng);
                }
                check_cell(slot, online(&readers[i]), &rng);
            }
            93..=96 => drop(readers[i].take()),
            _ => slot.domain.flush(),
        }
        // A quiescent state per reader, most iterations.
        for q in readers.iter_mut().flatten() {
            if rng.chance(60) {
                q.quiescent();
                inc(&w.ops.qsbr_quiescent);
            }
        }
    }
    drop(plain.drain(..));
}
