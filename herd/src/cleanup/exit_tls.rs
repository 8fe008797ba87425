//! The exit work of the library strategies (and exitq's exit stamp) runs
//! from a thread-local destructor of herd's own, armed at thread start.
//!
//! Why not the storm's pthread-key exit destructor, like `locked`: glibc
//! runs thread-local destructors (`__call_tls_dtors`, where Rust's
//! `thread_local!` destructors live) *before* pthread-key destructors, so
//! by then sdd's per-thread collector and seize's thread id are gone, and
//! touching them again panics. A thread-local destructor is also how a
//! Rust runtime would attach exit work to a thread.
//!
//! Order: glibc's `__cxa_thread_atexit_impl`, which Rust registers every
//! thread-local destructor with on Linux, runs them last registered,
//! first run. The start hook first makes the library create its own
//! thread-locals (an sdd guard, a seize `enter`), then arms this one, so
//! this destructor runs first, while the library's are alive (checked by
//! `later_destructors_run_first` below). For exitq the slot holds only a
//! time stamp; it runs before exitq's own exit destructor (a pthread
//! key's, after every thread-local destructor) pushes the thread's
//! cleanup.
//!
//! Cancellation: a `pthread_cancel`led storm thread runs these destructors
//! after the forced unwind has finished (from glibc's `start_thread`), and
//! a cancelled thread cannot be cancelled again, so no unwind ever crosses
//! this destructor or the library code it calls.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The work to run at thread exit.
type Work = Box<dyn FnOnce()>;

struct Slot(Cell<Option<Work>>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(work) = self.0.take() {
            if catch_unwind(AssertUnwindSafe(work)).is_err() {
                eprintln!("herd: the thread's exit work panicked; aborting (it must not panic)");
                std::process::abort();
            }
        }
    }
}

thread_local! {
    static SLOT: Slot = const { Slot(Cell::new(None)) };
}

/// Arms `work` to run when the calling thread exits (once; a second call
/// on the same thread is a bug).
pub(super) fn arm(work: Work) {
    SLOT.with(|s| {
        let old = s.0.replace(Some(work));
        debug_assert!(old.is_none(), "exit work armed twice on one thread");
    });
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::{Arc, Mutex};

    struct Note(Arc<Mutex<Vec<&'static str>>>, &'static str);
    impl Drop for Note {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(self.1);
        }
    }
    thread_local! {
        static FIRST: Cell<Option<Note>> = const { Cell::new(None) };
        static SECOND: Cell<Option<Note>> = const { Cell::new(None) };
    }

    #[test]
    fn later_destructors_run_first() {
        // What exit_tls relies on: a thread-local armed later is
        // destroyed earlier.
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&log);
        std::thread::spawn(move || {
            FIRST.with(|c| c.set(Some(Note(Arc::clone(&l), "first"))));
            SECOND.with(|c| c.set(Some(Note(l, "second"))));
        })
        .join()
        .unwrap();
        assert_eq!(*log.lock().unwrap(), ["second", "first"]);
    }

    #[test]
    fn armed_work_runs_at_exit() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (l, l2) = (Arc::clone(&log), Arc::clone(&log));
        std::thread::spawn(move || {
            super::arm(Box::new(move || l.lock().unwrap().push("ran")));
            l2.lock().unwrap().push("body");
        })
        .join()
        .unwrap();
        assert_eq!(*log.lock().unwrap(), ["body", "ran"]);
    }
}
