//! Scoped jobs: [`Pool::scope`](super::Pool::scope) lets jobs borrow from
//! the caller's stack, like `std::thread::scope`, and waits for all of them.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::Duration;

use super::inner::Inner;
use super::job::Job;
use crate::batch::drop_payload;

/// Shared between a scope's owner and its jobs.
struct ScopeState {
    /// Jobs started and not yet finished.
    pending: AtomicUsize,
    /// The first panic payload of a job, re-raised by `scope`.
    panic: Mutex<Option<Box<dyn Any + Send + 'static>>>,
    /// The thread waiting in `scope`.
    owner: Thread,
}

/// Counts a scoped job as done when dropped: after everything the job did,
/// also when something unwinds out of it.
struct Done(Arc<ScopeState>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.job_done();
    }
}

impl ScopeState {
    fn job_done(&self) {
        // AcqRel: the Release half pairs with the owner's Acquire load of
        // `pending` in `wait_all` (publishes the job's effects and a stored
        // panic); the Acquire half makes the last job see every other job's
        // Release decrement before it unparks the owner.
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.owner.unpark();
        }
    }
}

/// A scope to start jobs that may borrow anything outliving `'env`. See
/// [`Pool::scope`](super::Pool::scope).
pub struct Scope<'scope, 'env: 'scope> {
    inner: &'scope Arc<Inner>,
    state: Arc<ScopeState>,
    /// Invariance over 'scope, like `std::thread::Scope`.
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

impl fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("pending", &self.state.pending.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<'scope> Scope<'scope, '_> {
    /// Runs `f` on the pool; `scope` returns only after `f` has finished.
    /// If the pool is shut down, `f` runs right here on the caller.
    pub fn execute<F>(&'scope self, f: F)
    where
        F: FnOnce() + Send + 'scope,
    {
        // Relaxed: the job's own completion (AcqRel) orders the count.
        self.state.pending.fetch_add(1, Ordering::Relaxed);
        let done = Done(self.state.clone());
        let job: Box<dyn FnOnce() + Send + 'scope> = Box::new(move || {
            let done = done; // dropped last: the job is done after all below
            if let Err(p) = panic::catch_unwind(AssertUnwindSafe(f)) {
                let mut first = done.0.panic.lock().unwrap_or_else(|e| e.into_inner());
                if first.is_none() {
                    *first = Some(p);
                } else {
                    drop(first);
                    // Under `catch_unwind`: a payload whose `Drop` panics
                    // must not unwind out of the job.
                    drop_payload(p);
                }
            }
        });
        // SAFETY: the job only borrows data that outlives 'scope. `Pool::scope`
        // does not return (nor unwind) before `pending` is back to 0, i.e.
        // before this closure has run to completion (its `done` is dropped
        // last) or been dropped unrun (a panic in `submit`; its captures,
        // the borrows among them, are dropped before `done`), and no other
        // path drops a scoped job unrun: `shutdown_now` runs scoped jobs
        // instead of returning them, and a rejected job runs inline below.
        // So extending the closure's lifetime to 'static is never observed.
        let job: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(job) };
        if let Err(job) = self.inner.submit(Job::scoped(job)) {
            job.run();
        }
    }
}

/// Runs `f` with a [`Scope`], then waits (helping with queued jobs) until
/// every job started in the scope has finished. Re-raises `f`'s panic, or
/// else the first panic of a job.
pub(super) fn run<'env, F, T>(inner: &Arc<Inner>, f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
{
    inner.check_fork();
    let scope = Scope {
        inner,
        state: Arc::new(ScopeState {
            pending: AtomicUsize::new(0),
            panic: Mutex::new(None),
            owner: std::thread::current(),
        }),
        scope: PhantomData,
        env: PhantomData,
    };
    let result = panic::catch_unwind(AssertUnwindSafe(|| f(&scope)));
    wait_all(inner, &scope.state);
    match result {
        Err(p) => panic::resume_unwind(p),
        Ok(v) => {
            let first = scope
                .state
                .panic
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(p) = first {
                panic::resume_unwind(p);
            }
            v
        }
    }
}

/// Waits until `state.pending == 0`. While waiting, the owner runs queued
/// jobs of the pool itself: a scope opened inside a pool job can then never
/// deadlock waiting for workers that are all busy waiting too.
fn wait_all(inner: &Inner, state: &ScopeState) {
    // Acquire pairs with the AcqRel decrement in `job_done`.
    while state.pending.load(Ordering::Acquire) != 0 {
        // A scope entered before a fork() and waited for in the child: its
        // jobs ran on the parent's workers, which do not exist here.
        inner.check_fork();
        if let Some(job) = inner.queue.pop() {
            inner.run_on_caller(job);
            continue;
        }
        // The last job unparks us; the timeout is only a backstop for jobs
        // queued behind busy workers that we could help with.
        std::thread::park_timeout(Duration::from_millis(1));
    }
}
