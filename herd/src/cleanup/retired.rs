//! What the library strategies hand to their reclaimer: one object per
//! exiting thread, allocated at thread start (so the exit path allocates
//! nothing), whose drop frees the thread's unlinked registry entry.
//!
//! The library owns it from the retire on and drops it when no reader can
//! hold the entry any more (crossbeam-epoch's `defer_destroy`, sdd's
//! `Owned`, seize's `reclaim::boxed`, liburcu's `call_rcu` callback), so
//! the drop is where herd sees the free happen: [`free_entry`] stamps the
//! time and counts it.

use std::sync::Arc;

use super::registry::{free_entry, EntryRef, Shared};

/// One thread's retired registry entry (see the module docs).
#[derive(Debug)]
pub(super) struct Retired {
    entry: EntryRef,
    shared: Arc<Shared>,
}

impl Retired {
    /// The object that will free `entry` of the run `shared`.
    pub(super) fn new(entry: EntryRef, shared: Arc<Shared>) -> Retired {
        Retired { entry, shared }
    }
}

impl Drop for Retired {
    fn drop(&mut self) {
        free_entry(&self.shared, self.entry);
    }
}
