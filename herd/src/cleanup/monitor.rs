//! The registry monitor: a thread that walks the registry all run long,
//! every `--cleanup-monitor-us`, inside whatever protects readers in the
//! strategy (the one lock for `locked`, an exitq read guard for exitq,
//! sync and expedited, the library's read section for the others), and
//! counts the entries it saw and the violations it found.

use std::sync::atomic::Ordering;

use super::args::Strategy;
use super::reclaimers::Lib;
use super::registry::{lock, walk, Shared};

/// The monitor thread's loop, until `s.stop` (at least one walk, even in
/// a run shorter than the thread's start).
pub(super) fn run(s: &Shared, lib: Option<&Lib>) {
    let reader = lib.map(Lib::reader);
    loop {
        let (seen, bad) = match (s.strategy, lib, &reader) {
            (Strategy::Locked, _, _) => {
                let _w = lock(&s.writer);
                walk(s)
            }
            (_, Some(lib), Some(reader)) => lib.read(reader, || walk(s)),
            _ => {
                let d = s.domain.as_ref().expect("exitq strategies have a domain");
                let _g = d.read();
                walk(s)
            }
        };
        // Relaxed: statistics, read after the monitor is joined.
        s.walks.fetch_add(1, Ordering::Relaxed);
        s.walked_entries.fetch_add(seen, Ordering::Relaxed);
        if bad > 0 {
            s.violations.fetch_add(bad, Ordering::Relaxed);
        }
        if s.stop.load(Ordering::Relaxed) {
            break;
        }
        if s.monitor_pause.is_zero() {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(s.monitor_pause);
        }
    }
}
