//! herd's own helper threads, kept out of what the counters count.
//!
//! Two threads of a herd process are not the workload: the progress bar's
//! (drawn only on a terminal, `export/progress.rs`) and the contention
//! profile's ring-buffer drain (`sampler.rs`). Counted, they made the
//! figures differ between a terminal and a pipe, and with and without
//! `--contention`. Each registers itself here when it starts; process
//! scope then leaves them out: through the cgroup, by placing them outside
//! the counted (threaded) cgroup (`cgroup.rs`), and with inherited
//! counters, by not attaching to them. System scope counts every task on
//! its CPUs by definition, helpers included.

use std::sync::Mutex;

static HELPERS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Registers the calling thread as a helper (until [`leave`]).
pub fn register_current() {
    let tid = nix::unistd::gettid().as_raw();
    let mut h = HELPERS.lock().unwrap_or_else(|p| p.into_inner());
    if !h.contains(&tid) {
        h.push(tid);
    }
}

/// Unregisters the calling thread (it is about to exit).
pub fn leave() {
    let tid = nix::unistd::gettid().as_raw();
    HELPERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|&t| t != tid);
}

/// The helper threads alive now. Each is looked up on its own: a listing
/// of the process's threads can miss a live one (`host::own_threads`).
pub(crate) fn tids() -> Vec<i32> {
    let h = HELPERS.lock().unwrap_or_else(|p| p.into_inner());
    h.iter()
        .copied()
        .filter(|&t| crate::host::thread_alive(t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_thread_is_listed_while_alive() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            register_current();
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            wait.recv().unwrap();
            leave();
        });
        let tid = rx.recv().unwrap();
        assert!(tids().contains(&tid));
        go.send(()).unwrap();
        t.join().unwrap();
        assert!(!tids().contains(&tid));
    }
}
