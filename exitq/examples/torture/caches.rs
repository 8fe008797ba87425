//! Cache readers (`cache_reader`): each keeps a `CellCache` of most shared
//! domains' cells and loads through them (checking, as every reader does,
//! that the value's object is not poisoned, also after a random delay), so
//! that the values the writers replace are often still kept when their
//! grace period ends (parked, then dropped when the cache moves on); they
//! sleep with their caches alive, drop and remake caches (slots given back
//! and claimed again), write the cells without waiting (`store`,
//! `update`), and now and then drop every cache and `replace` a value,
//! which waits for the other threads' caches. A cache reader never waits
//! while it keeps a value, so the workers' `replace` calls, which wait for
//! its caches to move on, always end.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use exitq::CellCache;

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
        inc(&w.ops.caches_made);
        for _ in 0..rng.below(400) {
            generation += 1;
            let i = rng.below(shared.len() as u64) as usize;
            match rng.below(100) {
                0..=79 => {
                    if let Some(c) = caches[i].as_mut() {
                        // SAFETY: the `Obj` is poisoned when the cell
                        // drops the value (after its grace period, and
                        // after every cache that kept it moved on) and
                        // freed a grace period later.
                        check_obj(unsafe { &*c.load().obj() }, &rng);
                        inc(&w.ops.cache_reads);
                    }
                }
                80..=89 => write_cell(i, &rng, generation, false),
                90..=93 => {
                    thread::sleep(Duration::from_micros(rng.below(500)));
                    inc(&w.ops.cache_naps);
                }
                94..=97 => {
                    caches[i] = match caches[i].take() {
                        Some(_) => None,
                        None => Some(shared[i].cell.cache()),
                    };
                }
                _ => {
                    caches.clear();
                    write_cell(i, &rng, generation, true); // may wait
                    break;
                }
            }
        }
    }
}
