//! tokio's spawn failure, caught and kept off stderr.
//!
//! With no thread in its blocking pool, tokio's `spawn_blocking` panics
//! when the OS refuses a thread ("OS can't spawn worker thread: ..."). The
//! caller catches the panic ([`catch`]) and reports the failure itself,
//! tokio's message included; but Rust's panic hook runs before the unwind
//! reaches `catch_unwind`, and the default one printed `thread 'main'
//! panicked at ...` (and with `RUST_BACKTRACE` a backtrace) once per failed
//! job, ahead of herd's own diagnosis.
//!
//! So while a [`QuietSpawnFailure`] lives, the panic hook is a wrapper of
//! the previous one that drops exactly that panic: its message is
//! tokio's, and it is raised on a thread inside [`catch`] (a thread-local
//! flag). Every other panic, on any thread, in or out of [`catch`], goes
//! to the previous hook as before. The hook is process-global, so it is
//! swapped once per run (the runtime's start and finish, before and after
//! the submitters), not around each call: per call, every job would take
//! the hook's global lock on the submit path, and concurrent submitters
//! would restore each other's hooks out of order. herd sets no other hook
//! meanwhile; the previous one is put back when the guard is dropped.

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe, PanicHookInfo};
use std::sync::Arc;
use std::thread;

/// How tokio's panic message begins (`tokio/src/runtime/blocking/pool.rs`,
/// `Spawner::spawn_blocking`).
const TOKIO_SPAWN_FAILURE: &str = "OS can't spawn worker thread";

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

thread_local! {
    /// This thread is inside [`catch`].
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// The panic hook that keeps tokio's spawn failure quiet inside
/// [`catch`], while it lives (module docs).
pub(super) struct QuietSpawnFailure {
    /// The hook it wraps, put back on drop.
    prev: Option<Arc<Hook>>,
}

impl QuietSpawnFailure {
    /// Wraps the current panic hook.
    pub(super) fn install() -> QuietSpawnFailure {
        let prev: Arc<Hook> = Arc::new(panic::take_hook());
        let forward = prev.clone();
        panic::set_hook(Box::new(move |info| {
            // try_with: a thread panicking while its thread-locals are
            // torn down has no flag, and is not inside `catch`.
            let inside = CATCHING.try_with(Cell::get).unwrap_or(false);
            if !(inside && is_spawn_failure(info.payload())) {
                forward(info);
            }
        }));
        QuietSpawnFailure { prev: Some(prev) }
    }
}

impl Drop for QuietSpawnFailure {
    fn drop(&mut self) {
        // set_hook and take_hook panic on a panicking thread (an abort in
        // a drop while unwinding): the wrapper stays, forwarding every
        // panic but the one it never sees outside `catch`.
        if thread::panicking() {
            return;
        }
        let Some(prev) = self.prev.take() else {
            return;
        };
        // Dropping the wrapper releases its reference to `prev`.
        drop(panic::take_hook());
        match Arc::try_unwrap(prev) {
            Ok(hook) => panic::set_hook(hook),
            Err(shared) => panic::set_hook(Box::new(move |info| shared(info))),
        }
    }
}

/// Runs `f`, catching a panic as `catch_unwind` does; tokio's spawn
/// failure raised in it is not printed while a [`QuietSpawnFailure`]
/// lives.
pub(super) fn catch<R>(f: impl FnOnce() -> R) -> thread::Result<R> {
    CATCHING.set(true);
    let r = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.set(false);
    r
}

/// Whether a panic payload is tokio's spawn failure.
fn is_spawn_failure(payload: &(dyn Any + Send)) -> bool {
    message(payload).starts_with(TOKIO_SPAWN_FAILURE)
}

/// The text of a panic payload.
pub(super) fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "spawn_blocking panicked".to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Only tokio's message raised inside `catch` is dropped: another
    /// panic inside it, tokio's message outside it (on this thread or on
    /// a thread started inside it) reach the previous hook, which is back
    /// once the guard is dropped. The panics of other tests, which run
    /// meanwhile in this process, pass through to libtest's hook.
    #[test]
    fn only_tokio_spawn_failure_inside_catch_is_kept_quiet() {
        const MARK: &str = "spawn_panic test";
        static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let original: Arc<Hook> = Arc::new(panic::take_hook());
        let others = original.clone();
        panic::set_hook(Box::new(move |info| {
            let m = message(info.payload());
            if m.contains(MARK) {
                SEEN.lock().unwrap().push(m);
            } else {
                others(info);
            }
        }));
        let tokio = |n: u32| format!("{TOKIO_SPAWN_FAILURE}: {MARK} {n}");

        let quiet = QuietSpawnFailure::install();
        assert!(catch(|| panic!("{}", tokio(1))).is_err());
        assert!(catch(|| panic!("{MARK} 2")).is_err());
        assert!(panic::catch_unwind(|| panic!("{}", tokio(3))).is_err());
        let on_another_thread = catch(|| thread::spawn(move || panic!("{}", tokio(4))).join());
        assert!(on_another_thread.unwrap().is_err());
        drop(quiet);
        assert!(catch(|| panic!("{}", tokio(5))).is_err());

        drop(panic::take_hook());
        panic::set_hook(Arc::try_unwrap(original).unwrap_or_else(|_| unreachable!()));
        assert_eq!(
            *SEEN.lock().unwrap(),
            [format!("{MARK} 2"), tokio(3), tokio(4), tokio(5),]
        );
    }
}
