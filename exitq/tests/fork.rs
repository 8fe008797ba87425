//! The fork model (crate docs, "fork()"): in the child of `fork()`, nothing
//! of the parent's runs (every callback and hook runs once, in the parent),
//! and every entry point that could hang or run the parent's work refuses
//! with a panic, for a `Domain` and for a `Pool`. A hang in a child is a
//! test failure (the child is killed), never a hanging test.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use exitq::Domain;

mod watch_util;
use watch_util::{fork_child, wait_child};

const LIMIT: Duration = Duration::from_secs(60);

/// A counter in memory shared with forked children.
struct SharedCounter(&'static AtomicU64);

impl SharedCounter {
    fn new() -> SharedCounter {
        SharedCounter(watch_util::shared_counter::shared_counter())
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Runs each check under `catch_unwind` (in a forked child): bit `i` of the
/// result is set if check `i` panicked (refused).
fn refusals(checks: &[&dyn Fn()]) -> i32 {
    let mut refused = 0;
    for (i, f) in checks.iter().enumerate() {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
            refused |= 1 << i;
        }
    }
    refused
}

/// Issue 25, fourth case. A thread holds a guard inside which it deferred,
/// and forks; the child drops the guard. v2 ran, at a guard's end, the
/// ready batches that had waited for it (`RUN_PENDING`): the child ran
/// them, and the parent ran them again (every callback of the batch
/// twice). Since v3 ready batches run from `defer`, also inside sections,
/// and a guard's end runs nothing; this pins that the child still runs
/// nothing of the parent's on that path.
#[test]
fn a_guard_held_across_fork_runs_nothing_in_the_child() {
    let runs = Arc::new(SharedCounter::new());
    let d = Domain::builder()
        .batch_size(4)
        // No idle steal: the batches stay with their thread.
        .flush_latency(Duration::from_secs(60))
        .stall_timeout(Duration::from_secs(3600))
        .build();
    let defer4 = |d: &Domain| {
        for _ in 0..4 {
            let runs = runs.clone();
            d.defer(move || {
                runs.0.fetch_add(1, Ordering::SeqCst);
            });
        }
    };
    defer4(&d); // batch 1, sealed outside any section
    while d.stats().grace_periods == 0 {
        thread::sleep(Duration::from_millis(1)); // batch 1 becomes ready
    }
    let mut g = Some(d.read());
    defer4(&d); // batch 2, sealed inside; batch 1 ran at its first defer
    assert_eq!(runs.get(), 4, "batch 1 ran inside the guard (a drain tick)");
    let code = fork_child(LIMIT, || {
        drop(g.take());
        i32::from(runs.get() != 4)
    });
    assert_eq!(code, 0, "the child ran callbacks of the parent");
    drop(g.take());
    d.barrier();
    assert_eq!(runs.get(), 8, "every callback ran exactly once");
}

/// A thread whose domain was dropped while it holds a record (its exit
/// hooks wait for its exit) forks, and the child exits through `exit()`,
/// which runs the thread-local destructors. Before: the child ran the
/// parent's exit hook, and the parent ran it again at the thread's exit.
#[test]
fn a_child_exiting_normally_runs_no_exit_hook_of_the_parent() {
    let runs = Arc::new(SharedCounter::new());
    let r = runs.clone();
    thread::spawn(move || {
        let d = Domain::new();
        let r2 = r.clone();
        d.register_exit(move || {
            r2.0.fetch_add(1, Ordering::SeqCst);
        });
        drop(d); // the last handle: the hook waits for this thread's exit
                 // SAFETY: the child runs nothing but the thread-local destructors
                 // of this thread and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: `exit` runs this thread's thread-local destructors
            // (exitq's among them) and the atexit handlers, then ends the
            // child.
            unsafe { libc::exit(0) };
        }
        assert_eq!(wait_child(pid, LIMIT), 0);
        assert_eq!(r.get(), 0, "the child ran the parent's exit hook");
    })
    .join()
    .unwrap();
    assert_eq!(runs.get(), 1, "the hook ran once, at the thread's exit");
}

/// In the child of `fork()`, every entry point that could hang or run the
/// parent's callbacks refuses with a panic (the documented behaviour).
#[test]
fn domain_entry_points_refuse_in_a_forked_child() {
    let d = Domain::new();
    d.defer(|| ());
    let code = fork_child(LIMIT, || {
        refusals(&[
            &|| d.barrier(),
            &|| d.exit_barrier(),
            &|| d.flush(),
            &|| d.synchronize(),
            &|| {
                for _ in 0..10_000 {
                    d.defer(|| ());
                }
            },
            &|| drop(d.reader()),
            &|| d.register_exit(|| ()),
            &|| d.retire_thread(),
        ])
    });
    assert_eq!(
        code, 0b1111_1111,
        "every entry point refused in the child (bit per check)"
    );
    // One more (an exit code holds 8 bits).
    let code = fork_child(LIMIT, || refusals(&[&|| drop(d.qsbr_reader())]));
    assert_eq!(code, 1, "qsbr_reader refused in the child");
    d.barrier();
}

/// Issue 25, sixth case: a `Pool` built in the parent refuses in the child
/// (its workers do not exist there), and dropping it returns. Before:
/// `execute` queued a job no worker would run, and `shutdown` hung.
#[cfg(feature = "pool")]
#[test]
fn a_parents_pool_refuses_in_a_forked_child() {
    use exitq::pool::Pool;
    let pool = Pool::builder().min_workers(1).build().expect("pool");
    let (tx, rx) = std::sync::mpsc::channel();
    assert!(pool.execute(move || tx.send(()).unwrap()).is_ok());
    rx.recv().unwrap();
    let code = fork_child(LIMIT, || {
        refusals(&[
            &|| drop(pool.execute(|| ())),
            &|| drop(pool.spawn(|| ())),
            &|| pool.scope(|s| s.execute(|| ())),
            &|| drop(pool.shutdown_now()),
            &|| {
                pool.shutdown();
            },
        ])
    });
    assert_eq!(
        code, 0b1_1111,
        "every pool entry point refused in the child (bit per check)"
    );
    // And dropping it in a child returns (it is left alone).
    assert_eq!(
        fork_child(LIMIT, move || {
            drop(pool);
            0
        }),
        0
    );
}

/// In the child of `fork()`, a pool built on the shared domain gets a
/// domain of its own (the parent's is unusable there) and runs its jobs.
#[cfg(feature = "pool")]
#[test]
fn a_pool_built_in_a_forked_child_works() {
    use exitq::pool::Pool;
    let parent_pool = Pool::new().expect("pool");
    let (tx, rx) = std::sync::mpsc::channel();
    assert!(parent_pool.execute(move || tx.send(()).unwrap()).is_ok());
    rx.recv().unwrap();
    let code = fork_child(LIMIT, || {
        let pool = Pool::new().expect("pool in the child");
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(pool.execute(move || tx.send(7u8).unwrap()).is_ok());
        i32::from(rx.recv_timeout(LIMIT) != Ok(7))
    });
    assert_eq!(code, 0, "the child's pool ran its job");
}

/// A domain (batches of 4, flushed by hand) whose first callback calls
/// `fork()` and returns in the child, the child's pid stored in the
/// returned cell (by the parent; 0 if the fork failed), and the parent's
/// pid. Panics in forked children are made silent (the child's exitq call
/// panics).
fn domain_with_a_forking_callback() -> (Domain, Arc<AtomicU64>, libc::pid_t) {
    let d = Domain::builder()
        .batch_size(4)
        .flush_latency(Duration::from_secs(3600))
        .build();
    watch_util::quiet_panics_in_forked_children();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let child = Arc::new(AtomicU64::new(0));
    let c = child.clone();
    d.defer(move || {
        // SAFETY: the child runs only exitq's code (and what the test
        // runs while it unwinds) and `_exit`s in the test.
        let pid = unsafe { libc::fork() };
        c.store(pid.max(0) as u64, Ordering::SeqCst);
    });
    (d, child, parent)
}

/// A callback that calls `fork()` and returns in the child: the child goes
/// on with the run it forked inside of. Before the check after each
/// callback (`fork.rs`, `run.rs`) it ran the rest of the parent's batch,
/// which the parent runs too: every such callback ran twice (red team 2).
/// The child's `flush` panics after the forking callback (exit code 4 if
/// it returned).
#[test]
fn a_child_forked_inside_a_callback_runs_none_of_the_parents_other_callbacks() {
    let (d, child, parent) = domain_with_a_forking_callback();
    let counts = SharedCounter::new();
    for _ in 0..3 {
        let n = counts.0;
        d.defer(move || {
            n.fetch_add(1, Ordering::SeqCst);
        });
    }
    d.flush(); // sealed
    d.synchronize();
    // Runs the batch: its first callback forks. In the child the flush
    // panics after it (nothing more of the parent's runs there).
    let flushed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.flush()));
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != parent {
        // SAFETY: ends the child without returning into the harness.
        unsafe { libc::_exit(if flushed.is_err() { 0 } else { 4 }) };
    }
    assert!(flushed.is_ok(), "the parent's flush ran its callbacks");
    let pid = child.load(Ordering::SeqCst);
    assert!(pid > 0, "the callback forked");
    assert_eq!(wait_child(pid as libc::pid_t, LIMIT), 0);
    assert_eq!(
        counts.get(),
        3,
        "the child ran callbacks of the parent's batch"
    );
}

/// A destructor that defers while the child of a forking callback unwinds
/// from the exitq call that ran it (a cache letting go of what it kept, a
/// value whose drop retires another: the torture test's fork child, 2026-12-07,
/// "panic in a destructor during cleanup"). Sealing a batch refuses in a
/// child with a panic, and a panic while the thread unwinds aborts the
/// child: now such a `defer` leaks its callback instead (the child cannot
/// run it), and the child goes on unwinding to its `catch_unwind`. Each
/// of the destructor's defers runs in the parent (a count, in the
/// parent's memory), none twice; the child exits 0 (4 if the flush
/// returned; killed by SIGABRT before the fix).
#[test]
fn a_destructor_deferring_while_a_forked_child_unwinds_does_not_abort_it() {
    struct DeferOnDrop<'a> {
        domain: &'a Domain,
        ran: Arc<AtomicU64>,
    }
    impl Drop for DeferOnDrop<'_> {
        fn drop(&mut self) {
            // More than two batches of 4: every defer path that seals.
            for _ in 0..9 {
                let ran = self.ran.clone();
                self.domain.defer(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                });
            }
        }
    }
    let (d, child, parent) = domain_with_a_forking_callback();
    d.flush(); // sealed
    d.synchronize();
    let ran = Arc::new(AtomicU64::new(0));
    // The flush runs the forking callback; in the child it panics and the
    // guard's destructor defers while that panic unwinds.
    let flushed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _on_drop = DeferOnDrop {
            domain: &d,
            ran: ran.clone(),
        };
        d.flush();
    }));
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } != parent {
        // SAFETY: ends the child without returning into the harness.
        unsafe { libc::_exit(if flushed.is_err() { 0 } else { 4 }) };
    }
    assert!(flushed.is_ok(), "the parent's flush ran its callbacks");
    let pid = child.load(Ordering::SeqCst);
    assert!(pid > 0, "the callback forked");
    assert_eq!(
        wait_child(pid as libc::pid_t, LIMIT),
        0,
        "the child caught the refusal"
    );
    d.barrier();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        9,
        "the parent's defers ran once"
    );
}

/// A pool job that calls `fork()` and returns in the child: the child's
/// copy of the worker ends with the job (`_exit(0)`) instead of going on
/// with the parent's queue, whose jobs the parent runs (each once).
#[cfg(feature = "pool")]
#[test]
fn a_pool_job_that_forks_ends_the_child_when_it_returns() {
    use exitq::pool::Pool;
    let pool = Pool::builder()
        .min_workers(1)
        .max_workers(1)
        .build()
        .expect("pool");
    let counts = SharedCounter::new();
    let child = Arc::new(AtomicU64::new(0));
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    let c = child.clone();
    assert!(pool
        .execute(move || {
            started_tx.send(()).unwrap();
            wait.recv().unwrap();
            // SAFETY: the child runs the rest of this job and then the
            // pool's code, which ends it.
            let pid = unsafe { libc::fork() };
            c.store(pid.max(0) as u64, Ordering::SeqCst);
        })
        .is_ok());
    started.recv().unwrap(); // the worker is busy with the forking job
    for _ in 0..3 {
        let n = counts.0;
        assert!(pool
            .execute(move || {
                n.fetch_add(1, Ordering::SeqCst);
            })
            .is_ok());
    }
    assert_eq!(
        pool.stats().queued,
        3,
        "the three jobs wait in the queue behind the forking one"
    );
    go.send(()).unwrap();
    let start = std::time::Instant::now();
    while child.load(Ordering::SeqCst) == 0 || counts.get() < 3 {
        assert!(start.elapsed() < LIMIT, "the jobs ran");
        thread::sleep(Duration::from_millis(1));
    }
    let pid = child.load(Ordering::SeqCst) as libc::pid_t;
    assert_eq!(wait_child(pid, LIMIT), 0, "the child ended with its job");
    assert_eq!(counts.get(), 3, "the child ran the parent's queued jobs");
    assert_eq!(pool.stats().ran_on_caller, 0);
}
