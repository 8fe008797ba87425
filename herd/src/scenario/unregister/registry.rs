//! The registry updaters and readers share, and the use-after-free check
//! (module docs of `unregister`): objects are poisoned and reused, never
//! returned to the allocator while threads run, so a reader holding a freed
//! object sees the poison or a new generation instead of undefined
//! behaviour.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;

/// `magic` of a registered object.
const LIVE: u64 = 0x4c49_5645_4f42_4a31;
/// `magic` of a freed object.
const POISON: u64 = 0xdead_dead_dead_dead;

/// A registered object. All fields are atomics: a reader may read an object
/// while it is being freed (that is the bug we detect), never a data race.
#[derive(Debug)]
pub(super) struct Obj {
    magic: AtomicU64,
    generation: AtomicU64,
    key: AtomicU64,
    payload: [AtomicU64; 4],
}

/// A pointer to an [`Obj`] that can move between threads.
#[derive(Debug, Clone, Copy)]
pub(super) struct ObjPtr(pub(super) *mut Obj);
// SAFETY: an `Obj` is only atomics; who may poison or reuse it is decided by
// the registry protocol (slot ownership, grace periods), not by the pointer.
unsafe impl Send for ObjPtr {}

/// The registry: slots readers walk, and the free list of poisoned objects.
#[derive(Debug)]
pub(super) struct Registry {
    pub(super) slots: Box<[CachePadded<AtomicPtr<Obj>>]>,
    free: SegQueue<ObjPtr>,
    pub(super) allocated: AtomicU64,
}

impl Registry {
    pub(super) fn new(n: usize) -> Registry {
        Registry {
            slots: (0..n)
                .map(|_| CachePadded::new(AtomicPtr::new(ptr::null_mut())))
                .collect(),
            free: SegQueue::new(),
            allocated: AtomicU64::new(0),
        }
    }

    /// An object to register: a freed one if any, else a new allocation.
    pub(super) fn obtain(&self, key: u64) -> *mut Obj {
        let p = match self.free.pop() {
            Some(ObjPtr(p)) => p,
            None => {
                // Relaxed: a count read after every thread is joined.
                self.allocated.fetch_add(1, Ordering::Relaxed);
                Box::into_raw(Box::new(Obj {
                    magic: AtomicU64::new(POISON),
                    generation: AtomicU64::new(0),
                    key: AtomicU64::new(0),
                    payload: Default::default(),
                }))
            }
        };
        // SAFETY: `p` came from Box::into_raw and is only freed by `Drop for
        // Registry`, after every thread is joined.
        let o = unsafe { &*p };
        // Relaxed: all three are published by the Release store of the slot
        // (register), which readers load with Acquire.
        o.generation.fetch_add(1, Ordering::Relaxed);
        o.key.store(key, Ordering::Relaxed);
        o.payload[0].store(key.wrapping_mul(31), Ordering::Relaxed);
        o.magic.store(LIVE, Ordering::Relaxed);
        p
    }

    /// Frees an unregistered object: poison it and put it on the free list.
    pub(super) fn release(&self, p: *mut Obj) {
        // SAFETY: as in `obtain`: the memory lives until the registry drops.
        let o = unsafe { &*p };
        // Release: keeps the poison after this thread's earlier accesses to
        // `o`; pairs with the readers' Acquire loads of `magic` in `walk`.
        o.magic.store(POISON, Ordering::Release);
        self.free.push(ObjPtr(p));
    }

    /// Every object, in a slot or on the free list, counted once.
    pub(super) fn count_accounted(&self) -> u64 {
        let in_slots = self
            .slots
            .iter()
            // Relaxed: called after every thread is joined and the domain's
            // barrier() returned; both synchronise with the writers.
            .filter(|s| !s.load(Ordering::Relaxed).is_null())
            .count() as u64;
        in_slots + self.free.len() as u64
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for s in self.slots.iter() {
            // Relaxed: `&mut self`, no other thread can touch the slots.
            let p = s.swap(ptr::null_mut(), Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: every thread is joined (the registry is dropped when
                // the last Arc goes, after the domain ran every callback), and
                // each object is in exactly one place: one slot or the list.
                drop(unsafe { Box::from_raw(p) });
            }
        }
        while let Some(ObjPtr(p)) = self.free.pop() {
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// One reader's walk of the registry inside one read section; returns the
/// number of violations found (objects seen freed or reused).
pub(super) fn walk(reg: &Registry, seen: &mut Vec<(*mut Obj, u64)>) -> (u64, u64) {
    seen.clear();
    let mut violations = 0;
    let mut sum = 0u64;
    for s in reg.slots.iter() {
        // Acquire: pairs with the updater's Release swap that published it.
        let p = s.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: memory of every object stays valid until the registry drops.
        let o = unsafe { &*p };
        let generation = o.generation.load(Ordering::Relaxed);
        // Acquire: pairs with `release`'s Release store of the poison.
        if o.magic.load(Ordering::Acquire) != LIVE {
            violations += 1;
        }
        sum = sum
            .wrapping_add(o.key.load(Ordering::Relaxed))
            .wrapping_add(o.payload[0].load(Ordering::Relaxed));
        seen.push((p, generation));
    }
    // Re-check everything seen, still inside the section: a grace period
    // guarantees none of it was freed (poisoned or reused) meanwhile.
    for &(p, generation) in seen.iter() {
        // SAFETY: as above.
        let o = unsafe { &*p };
        // Acquire: pairs with `release`'s Release store of the poison.
        if o.magic.load(Ordering::Acquire) != LIVE
            || o.generation.load(Ordering::Relaxed) != generation
        {
            violations += 1;
        }
    }
    (violations, sum)
}
