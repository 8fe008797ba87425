//! The readers and writers (`worker`: every read and retire API at
//! random) and the barrier checkers (`checker`).

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use exitq::ReadSection;

use crate::world::{
    inc, new_obj, not_in_child, retire, world, Obj, Rng, Slot, Tracked, ALIVE, POISONED,
};

/// Inside a read section of `slot`: the current object is alive, now and
/// after a random delay.
pub(crate) fn check_current(slot: &Slot, rng: &Rng) {
    let p = slot.current.load(Ordering::Acquire);
    // SAFETY: objects are freed only two grace periods after they were
    // unpublished, and we are in a read section (the property under test:
    // a violation shows as a poisoned object long before a free).
    check_obj(unsafe { &*p }, rng);
}

/// The same for the object of `slot`'s typed cell, loaded under
/// `section` (a guard, a `Reader`'s guard, or an online `QsbrReader`).
pub(crate) fn check_cell(slot: &Slot, section: &impl ReadSection, rng: &Rng) {
    let tracked = slot.cell.load(section);
    // SAFETY: the `Obj` is poisoned when the cell drops `tracked` (a grace
    // period after it was replaced, so not before `section` ends) and freed
    // a grace period later.
    check_obj(unsafe { &*tracked.obj() }, rng);
}

/// `obj` is alive, now and after a random delay.
pub(crate) fn check_obj(obj: &Obj, rng: &Rng) {
    if obj.state.load(Ordering::Acquire) != ALIVE {
        inc(&world().v.read_after_poison);
    }
    match rng.below(100) {
        0 => thread::sleep(Duration::from_micros(200 + rng.below(800))),
        1..=30 => {
            for _ in 0..rng.below(300) {
                std::hint::spin_loop();
            }
        }
        _ => {}
    }
    if obj.state.load(Ordering::Acquire) != ALIVE
        || std::hint::black_box(obj.generation) == u64::MAX
    {
        inc(&world().v.read_after_poison);
    }
    inc(&world().ops.reads);
}

/// Replaces `slot`'s cell value (`store`: dropped after a grace period;
/// `replace`: waits for one, then drops it here; `update`). Waits only if
/// `may_wait` (outside every read section of the slot's domain).
pub(crate) fn write_cell(slot_index: usize, rng: &Rng, generation: u64, may_wait: bool) {
    let cell = &world().slots[slot_index].cell;
    match rng.below(3) {
        0 if may_wait => drop(cell.replace(Tracked::new(slot_index, generation))),
        1 => cell.update(|_| Tracked::new(slot_index, generation)),
        _ => cell.store(Tracked::new(slot_index, generation)),
    }
    inc(&world().ops.cell_writes);
}

/// Replaces `slot`'s object and retires the old one, by `defer` or by
/// `synchronize`; or its cell's value.
pub(crate) fn replace(slot_index: usize, rng: &Rng, generation: u64) {
    if rng.chance(30) {
        return write_cell(slot_index, rng, generation, true);
    }
    let slot = &world().slots[slot_index];
    let old = slot.current.swap(new_obj(generation), Ordering::AcqRel) as usize;
    match rng.below(10) {
        0 => {
            if rng.chance(50) {
                slot.domain.synchronize();
            } else {
                slot.domain.synchronize_expedited();
            }
            let obj = old as *mut Obj;
            // SAFETY: a grace period passed since `old` was unpublished.
            unsafe { (*obj).state.store(POISONED, Ordering::Release) };
            // SAFETY: no reader can hold it; nothing else frees it.
            drop(unsafe { Box::from_raw(obj) });
            inc(&world().ops.replaces_synchronized);
        }
        _ => {
            slot.domain.defer(move || retire(slot_index, old));
            inc(&world().ops.replaces_deferred);
        }
    }
}

/// A panic payload whose own `Drop` panics.
pub(crate) struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        if !thread::panicking() {
            panic!("torture: a panic payload whose drop panics (expected)");
        }
    }
}

/// A counted defer (for the barrier checks); a few of them panic.
pub(crate) fn counted_defer(slot: &'static Slot, rng: &Rng) {
    let panics = rng.chance(1);
    if panics {
        inc(&slot.panics);
    }
    slot.domain.defer(move || {
        not_in_child();
        slot.ran.fetch_add(1, Ordering::Relaxed);
        if panics {
            std::panic::panic_any(Bomb);
        }
    });
    // Release: the defer happens-before a checker that reads this count.
    slot.issued.fetch_add(1, Ordering::Release);
    inc(&world().ops.counted_defers);
}

/// Readers and writers: every API at random.
pub(crate) fn worker(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ (id as u64) << 32);
    let mut readers: Vec<_> = w.slots[..w.shared()]
        .iter()
        .map(|s| s.domain.reader())
        .collect();
    let mut generation = 0u64;
    while !w.stop.load(Ordering::Relaxed) {
        let i = rng.below(w.shared() as u64) as usize;
        let slot = &w.slots[i];
        generation += 1;
        match rng.below(100) {
            0..=39 => {
                let g = slot.domain.read();
                if rng.chance(20) {
                    let nested = slot.domain.read();
                    check_cell(slot, &nested, &rng);
                    check_current(slot, &rng);
                } else if rng.chance(50) {
                    check_cell(slot, &g, &rng);
                } else {
                    check_current(slot, &rng);
                }
            }
            40..=59 => {
                let g = readers[i].read();
                if rng.chance(50) {
                    check_cell(slot, &g, &rng);
                } else {
                    check_current(slot, &rng);
                }
                if rng.chance(10) {
                    // Defer inside a Reader's section: must not wait for it.
                    counted_defer(slot, &rng);
                }
            }
            60..=84 => replace(i, &rng, generation),
            85..=89 => {
                // Retire from inside a guard: the callback must wait.
                let _g = slot.domain.read();
                let old = slot.current.swap(new_obj(generation), Ordering::AcqRel) as usize;
                slot.domain.defer(move || retire(i, old));
                inc(&w.ops.replaces_deferred);
            }
            90..=97 => counted_defer(slot, &rng),
            _ => slot.domain.flush(),
        }
    }
    drop(readers.drain(..));
}

/// Barrier checkers.
pub(crate) fn checker(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xBA44 ^ (id as u64) << 40);
    while !w.stop.load(Ordering::Relaxed) {
        let slot = &w.slots[rng.below(w.shared() as u64) as usize];
        // Acquire: pairs with the Release after each counted defer.
        let before = slot.issued.load(Ordering::Acquire);
        slot.domain.barrier();
        if slot.ran.load(Ordering::Relaxed) < before {
            inc(&w.v.barrier_early);
        }
        inc(&w.ops.barriers);
        if rng.chance(30) {
            thread::sleep(Duration::from_micros(rng.below(2000)));
        }
    }
}
