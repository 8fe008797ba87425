//! The reaper: a thread that joins retired threads in the background, so
//! the wave loop never waits for an exit (as the micro, which never joins).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{Context, Result};

use crate::spawn::Handle;

/// The reaper thread and its counts (`--reap join`).
pub(super) struct Reaper {
    tx: Option<Sender<Vec<Handle>>>,
    thread: Option<JoinHandle<()>>,
    reaped: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Reaper {
    /// Starts the reaper thread, after claiming `room` if given
    /// ([`exitq::limits::ThreadRoom`]).
    pub(super) fn start(room: Option<exitq::limits::ThreadRoom>) -> Result<Reaper> {
        let (tx, rx) = channel::<Vec<Handle>>();
        let reaped = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let (ok, bad) = (Arc::clone(&reaped), Arc::clone(&failed));
        let b = std::thread::Builder::new().name("herd-reaper".into());
        let thread = exitq::limits::spawn_std(room.as_ref(), b, None, move || {
            for batch in rx {
                for h in batch {
                    // Relaxed: read after this thread is joined.
                    if h.join() {
                        ok.fetch_add(1, Ordering::Relaxed);
                    } else {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
        .context("cannot start the reaper thread")?;
        Ok(Reaper {
            tx: Some(tx),
            thread: Some(thread),
            reaped,
            failed,
        })
    }

    /// Hands a retired wave's handles to the reaper.
    pub(super) fn reap(&self, handles: Vec<Handle>) {
        if let Some(tx) = &self.tx {
            // The reaper outlives the loop; a send cannot fail before
            // `finish` drops the sender.
            let _ = tx.send(handles);
        }
    }

    /// Waits until every handle sent was joined; returns (joined, failed).
    /// With `every_thread_exited` false (the drain gave up on threads still
    /// running: Ctrl-C, or a drain timeout) it does not wait: the reaper
    /// may be blocked joining one of those threads for as long as it
    /// sleeps or spins, so it is left to go on alone (never joined, nor
    /// detached: it may be exiting) and the counts are those so far.
    pub(super) fn finish(&mut self, every_thread_exited: bool) -> (u64, u64) {
        drop(self.tx.take());
        if let Some(h) = self.thread.take() {
            if every_thread_exited {
                let _ = h.join();
            } else {
                std::mem::forget(h);
            }
        }
        // Relaxed: the reaper thread was joined above, or the counts are
        // a snapshot.
        (
            self.reaped.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}
