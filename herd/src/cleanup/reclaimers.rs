//! The library strategies behind one interface: start of a thread
//! (register, preallocate what it will retire), its exit work (unlink
//! while the library protects it, then retire), the monitor's read
//! sections, and driving the library to completion at the end of a run.
//! Each library's own way is in its `with_*.rs`.

use std::time::{Duration, Instant};

use crossbeam_epoch::LocalHandle;

use super::args::{CleanupArgs, Strategy};
use super::liburcu;
use super::retired::Retired;
use super::with_crossbeam::{Epoch, EpochThread};
use super::with_sdd::{self as sdd_way, SddThread};
use super::with_seize::{Seize, SeizeThread};
use super::with_urcu::{Urcu, UrcuReader, UrcuThread};
use crate::error::usage;

/// How long [`Lib::drive`] keeps driving a library that has not freed
/// everything yet.
pub(super) const DRIVE_DEADLINE: Duration = Duration::from_secs(30);

/// A run's reclamation library.
#[derive(Debug)]
pub(super) enum Lib {
    CrossbeamEpoch(Epoch),
    Sdd,
    /// Boxed: seize's collector is large (its per-thread tables).
    Seize(Box<Seize>),
    Urcu(Urcu),
}

/// A thread's library state, from its start to its exit.
#[derive(Debug)]
pub(super) enum LibThread {
    CrossbeamEpoch(EpochThread),
    Sdd(SddThread),
    Seize(SeizeThread),
    Urcu(UrcuThread),
}

/// The monitor's reader registration.
#[derive(Debug)]
pub(super) enum Reader {
    CrossbeamEpoch(LocalHandle),
    Sdd,
    Seize,
    Urcu(UrcuReader),
}

/// How a run's library was driven to completion at its end.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Drive {
    /// What herd did (e.g. `pin+flush x 12`, `rcu_barrier`).
    pub how: String,
    /// Rounds of it (pins, guards), 1 for a single call.
    pub rounds: u64,
}

impl Lib {
    /// The library of `args.cleanup` (None for herd's own strategies).
    pub(super) fn start(args: &CleanupArgs) -> anyhow::Result<Option<Lib>> {
        Ok(Some(match args.cleanup {
            Strategy::CrossbeamEpoch => Lib::CrossbeamEpoch(Epoch::new()),
            Strategy::Sdd => Lib::Sdd,
            Strategy::Seize => Lib::Seize(Box::new(Seize::new(args.seize_batch))),
            Strategy::Urcu => Lib::Urcu(Urcu::new(
                liburcu::load().map_err(|why| usage("--cleanup", why))?,
            )),
            _ => return Ok(None),
        }))
    }

    /// Thread start (see each library's module).
    pub(super) fn register(&self, retired: Retired) -> LibThread {
        match self {
            Lib::CrossbeamEpoch(e) => LibThread::CrossbeamEpoch(e.register(retired)),
            Lib::Sdd => LibThread::Sdd(sdd_way::register(retired)),
            Lib::Seize(s) => LibThread::Seize(s.register(retired)),
            Lib::Urcu(u) => LibThread::Urcu(u.register(retired)),
        }
    }

    /// The calling thread's reader registration (the monitor's).
    pub(super) fn reader(&self) -> Reader {
        match self {
            Lib::CrossbeamEpoch(e) => Reader::CrossbeamEpoch(e.reader()),
            Lib::Sdd => Reader::Sdd,
            Lib::Seize(_) => Reader::Seize,
            Lib::Urcu(u) => Reader::Urcu(u.reader()),
        }
    }

    /// Runs `f` in a read-side section of the library.
    pub(super) fn read<R>(&self, reader: &Reader, f: impl FnOnce() -> R) -> R {
        match (self, reader) {
            (Lib::CrossbeamEpoch(_), Reader::CrossbeamEpoch(h)) => Epoch::read(h, f),
            (Lib::Sdd, _) => sdd_way::read(f),
            (Lib::Seize(s), _) => s.read(f),
            (Lib::Urcu(u), Reader::Urcu(r)) => u.read(r, f),
            _ => unreachable!("a reader of another library"),
        }
    }

    /// The exit work of a thread: `unlink` inside what the library needs
    /// around it, then the retire.
    pub(super) fn exit(&self, thread: LibThread, unlink: impl FnOnce()) {
        match (self, thread) {
            (Lib::CrossbeamEpoch(e), LibThread::CrossbeamEpoch(t)) => e.exit(t, unlink),
            (Lib::Sdd, LibThread::Sdd(t)) => sdd_way::exit(t, unlink),
            (Lib::Seize(s), LibThread::Seize(t)) => s.exit(t, unlink),
            (Lib::Urcu(u), LibThread::Urcu(t)) => u.exit(t, unlink),
            _ => unreachable!("a thread of another library"),
        }
    }

    /// Drives the library until `done()` (every entry freed), within
    /// [`DRIVE_DEADLINE`]. `quiescent`: no thread is inside the library or
    /// will enter it again (every registered thread finished its exit work,
    /// the monitor is stopped), which seize's `reclaim_all` needs.
    pub(super) fn drive(&self, done: impl Fn() -> bool, quiescent: bool) -> Drive {
        let deadline = Instant::now() + DRIVE_DEADLINE;
        match self {
            Lib::CrossbeamEpoch(e) => Drive {
                how: "pin + flush from the finishing thread".into(),
                rounds: e.drive(done, deadline),
            },
            Lib::Sdd => Drive {
                how: "accelerated sdd::Guard from the finishing thread".into(),
                rounds: sdd_way::drive(done, deadline),
            },
            Lib::Seize(s) if quiescent => {
                // SAFETY: `quiescent` is reclaim_all's contract (see above).
                unsafe { s.drive() };
                Drive {
                    how: "Collector::reclaim_all (every thread gone)".into(),
                    rounds: 1,
                }
            }
            Lib::Seize(_) => Drive {
                how: "none: threads still running, reclaim_all is not safe".into(),
                rounds: 0,
            },
            Lib::Urcu(u) => {
                u.drive();
                Drive {
                    how: "rcu_barrier".into(),
                    rounds: 1,
                }
            }
        }
    }
}
