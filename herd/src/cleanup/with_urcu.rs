//! `--cleanup urcu`: liburcu's `call_rcu`, urcu-memb flavour (the default
//! flavour: readers pay a compiler barrier, the writer a membarrier), as
//! its API documentation prescribes: every thread that reads or calls
//! `call_rcu` registers (`rcu_register_thread`) and unregisters before it
//! ends; a removed node is handed to `call_rcu`, whose callback frees it
//! after a grace period, on liburcu's call_rcu worker thread.
//!
//! At exit: unlink, `call_rcu`, `rcu_unregister_thread`. The registry of
//! readers is a list under liburcu's registry mutex, which both
//! registering and unregistering take, and which `synchronize_rcu` (run by
//! the call_rcu worker once per batch) holds while it waits for readers.
//! At the end of the run [`Urcu::drive`] calls `rcu_barrier`, which waits
//! until every queued callback has run.

use super::liburcu::{Liburcu, RcuHead};
use super::retired::Retired;

/// The loaded library.
#[derive(Debug)]
pub(super) struct Urcu {
    lib: &'static Liburcu,
}

/// A retired entry with the `rcu_head` liburcu links it by, first.
#[repr(C)]
#[derive(Debug)]
pub(super) struct UrcuRetired {
    head: RcuHead,
    retired: Retired,
}

/// What a thread keeps from its start to its exit.
#[derive(Debug)]
pub(super) struct UrcuThread {
    retired: Box<UrcuRetired>,
}

/// A registered reader thread (the monitor); unregisters on drop.
#[derive(Debug)]
pub(super) struct UrcuReader {
    lib: &'static Liburcu,
}

impl Drop for UrcuReader {
    fn drop(&mut self) {
        // SAFETY: this thread registered in `Urcu::reader` and is not in a
        // read-side section (sections are scoped to `Urcu::read`).
        unsafe { (self.lib.unregister_thread)() };
    }
}

/// The call_rcu callback: frees the retired entry.
///
/// # Safety
/// `head` is the first field of a `UrcuRetired` boxed by `Urcu::exit`.
unsafe extern "C" fn free_retired(head: *mut RcuHead) {
    // SAFETY: `head` is the first field of a #[repr(C)] UrcuRetired that
    // came from Box::into_raw in `Urcu::exit`; liburcu calls this once.
    let b = unsafe { Box::from_raw(head.cast::<UrcuRetired>()) };
    // A panic must not unwind into C: the drop only stores and counts.
    drop(b);
}

impl Urcu {
    /// The strategy, with liburcu loaded (the caller checked it loads).
    pub(super) fn new(lib: &'static Liburcu) -> Urcu {
        Urcu { lib }
    }

    /// Thread start: register with liburcu; the object to retire.
    pub(super) fn register(&self, retired: Retired) -> UrcuThread {
        // SAFETY: registering the calling thread has no precondition but
        // not being registered already (each thread registers once).
        unsafe { (self.lib.register_thread)() };
        UrcuThread {
            retired: Box::new(UrcuRetired {
                head: RcuHead::new(),
                retired,
            }),
        }
    }

    /// Registers the calling thread as a reader.
    pub(super) fn reader(&self) -> UrcuReader {
        // SAFETY: as in `register`.
        unsafe { (self.lib.register_thread)() };
        UrcuReader { lib: self.lib }
    }

    /// Runs `f` in a read-side critical section (the thread is registered:
    /// it holds an [`UrcuReader`]).
    pub(super) fn read<R>(&self, _reader: &UrcuReader, f: impl FnOnce() -> R) -> R {
        // SAFETY: the thread is registered (the reader witnesses it); the
        // section is closed below on every path (`f` must not unwind:
        // walks do not panic).
        unsafe { (self.lib.read_lock)() };
        let r = f();
        // SAFETY: closes the section opened above.
        unsafe { (self.lib.read_unlock)() };
        r
    }

    /// The exit work: `unlink`, `call_rcu` the entry, unregister.
    pub(super) fn exit(&self, thread: UrcuThread, unlink: impl FnOnce()) {
        unlink();
        let p = Box::into_raw(thread.retired);
        // SAFETY: the thread is registered (`register`), outside any read
        // section; the head is the first field of the boxed object and is
        // not queued yet; `free_retired` reclaims exactly that box.
        unsafe {
            (self.lib.call_rcu)(std::ptr::addr_of_mut!((*p).head), free_retired);
            (self.lib.unregister_thread)();
        }
    }

    /// Waits until every queued callback has run (`rcu_barrier`), from a
    /// registered thread outside any read section.
    pub(super) fn drive(&self) {
        let reader = self.reader();
        // SAFETY: registered (`reader`), not in a read-side section.
        unsafe { (self.lib.barrier)() };
        drop(reader);
    }
}
