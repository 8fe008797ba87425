//! Cache readers (`cache_reader`): each keeps a `CellCache` of most shared
//! domains' cells and an `OptionCache` of many of their options, and loads
//! through them (checking, as every reader does, that the value's object
//! is not poisoned, also after a random delay), so that the values the
//! writers replace are often still kept when their grace period ends
//! (parked, then dropped when the cache moves on); they sleep with their
//! caches alive, drop and remake caches (slots given back and claimed
//! again), write the cells and empty and fill the options without waiting
//! (`store`, `update`, `take`), read the options under guards too, and now
//! and then drop every cache and `replace` a value, which waits for the
//! other threads' caches. A cache reader never waits while it keeps a
//! value, so the `replace` calls, which wait for its caches to move on,
//! always end.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use exitq::{CellCache, OptionCache};

use crate::workers::{check_obj, write_cell};
use crate::world::{inc, world, Rng, Tracked};

/// Cache reader threads.
pub(crate) const CACHE_READERS: usize = 2;

pub(crate) fn cache_reader(id: usize, seed: u64) {
    let w = world();
    let rng = Rng::new(seed ^ 0xCAC4E ^ (id as u64) << 40);
    let shared = &w.slots[..w.shared()];
    let mut generation = 0u64;
    while !w.stop.load(Ordering::Relaxed) {
        let mut caches: Vec<Option<CellCache<'static, Tracked>>> = shared
            .iter()
            .map(|s| rng.chance(80).then(|| s.cell.cache()))
            .collect();
        let mut options: Vec<Option<OptionCache<'static, Tracked>>> = shared
            .iter()
            .map(|s| rng.chance(60).then(|| s.option.cache()))
            .collect();
        inc(&w.ops.caches_made);
        for _ in 0..rng.below(400) {
            generation += 1;
            let i = rng.below(shared.len() as u64) as usize;
            match rng.below(100) {
                0..=59 => {
                    if let Some(c) = caches[i].as_mut() {
                        // SAFETY: the `Obj` is poisoned when the cell
                        // drops the value (after its grace period, and
                        // after every cache that kept it moved on) and
                        // freed a grace period later.
                        check_obj(unsafe { &*c.load().obj() }, &rng);
                        inc(&w.ops.cache_reads);
                    }
                }
                60..=74 => read_option(i, options[i].as_mut(), &rng),
                75..=79 => write_option(i, &rng, generation, false),
                80..=89 => write_cell(i, &rng, generation, false),
                90..=93 => {
                    thread::sleep(Duration::from_micros(rng.below(500)));
                    inc(&w.ops.cache_naps);
                }
                94..=97 => {
                    if rng.chance(50) {
                        caches[i] = match caches[i].take() {
                            Some(_) => None,
                            None => Some(shared[i].cell.cache()),
                        };
                    } else {
                        options[i] = match options[i].take() {
                            Some(_) => None,
                            None => Some(shared[i].option.cache()),
                        };
                    }
                }
                _ => {
                    caches.clear();
                    options.clear();
                    // Either may wait.
                    if rng.chance(50) {
                        write_cell(i, &rng, generation, true);
                    } else {
                        write_option(i, &rng, generation, true);
                    }
                    break;
                }
            }
        }
    }
}

/// Reads slot `i`'s option through `cache`, or under a guard without one.
fn read_option(i: usize, cache: Option<&mut OptionCache<'static, Tracked>>, rng: &Rng) {
    let w = world();
    let check = |v: Option<&Tracked>| match v {
        // SAFETY: as the cell's values (`cache_reader`): the `Obj` is
        // poisoned only once no cache keeps its value and no section
        // can reach it.
        Some(t) => check_obj(unsafe { &*t.obj() }, rng),
        None => inc(&w.ops.option_empty_reads),
    };
    match cache {
        Some(c) => check(c.load()),
        None => {
            let slot = &w.slots[i];
            let guard = slot.domain.read();
            check(slot.option.load(&guard));
        }
    }
    inc(&w.ops.option_reads);
}

/// Empties, fills or replaces slot `i`'s option; only with `may_wait` by
/// `replace` (which waits for a grace period and the other caches).
fn write_option(i: usize, rng: &Rng, generation: u64, may_wait: bool) {
    let option = &world().slots[i].option;
    let fresh = || Some(Tracked::new(i, generation));
    match rng.below(4) {
        0 if may_wait => drop(option.replace(if rng.chance(50) { fresh() } else { None })),
        1 => option.take(),
        2 => option.update(|v| if v.is_none() { fresh() } else { None }),
        _ => option.store(fresh()),
    }
    inc(&world().ops.option_writes);
}
