//! The fork model (crate docs, "fork()"): in the child of `fork()`, nothing
//! of the parent's runs (every callback and hook runs once, in the parent),
//! and every entry point that could hang or run the parent's work refuses
//! with a panic, for a `Domain` and for a `Pool`. A hang in a child is a
//! test failure (the child is killed), never a hanging test.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use exitq::Domain;

mod watch_util;
use watch_util::{fork_child, wait_child};

const LIMIT: Duration = Duration::from_secs(60);

/// A counter in memory shared with forked children (`MAP_SHARED`), so the
/// parent sees what ran in a child.
struct SharedCounter(&'static AtomicU64);

impl SharedCounter {
    fn new() -> SharedCounter {
        // SAFETY: a fresh anonymous shared mapping of one page; never
        // unmapped (leaked for the test's life).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        // SAFETY: zeroed, page-aligned, mapped for the process's life.
        SharedCounter(unsafe { &*p.cast::<AtomicU64>() })
    }
    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Issue 25, fourth case. A thread holds a guard inside which ready
/// batches wait for the section's end (`RUN_PENDING`), and forks; the
/// child drops the guard. Before: the child ran those batches, and the
/// parent ran them again (every callback of the batch twice).
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
    defer4(&d); // batch 2, sealed inside: batch 1 now waits for `g`'s end
    assert_eq!(runs.get(), 0, "nothing ran inside the guard");
    let code = fork_child(LIMIT, || {
        drop(g.take());
        i32::from(runs.get() != 0)
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
        let checks: [&dyn Fn(); 8] = [
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
        ];
        let mut refused = 0;
        for (i, f) in checks.iter().enumerate() {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                refused |= 1 << i;
            }
        }
        refused
    });
    assert_eq!(
        code, 0b1111_1111,
        "every entry point refused in the child (bit per check)"
    );
    d.barrier();
}

/// Issue 25, sixth case: a `Pool` built in the parent refuses in the child
/// (its workers do not exist there), and dropping it returns. Before:
/// `execute` queued a job no worker would run, and `shutdown` hung.
#[test]
fn a_parents_pool_refuses_in_a_forked_child() {
    use exitq::pool::Pool;
    let pool = Pool::builder().min_workers(1).build().expect("pool");
    let (tx, rx) = mpsc::channel();
    assert!(pool.execute(move || tx.send(()).unwrap()).is_ok());
    rx.recv().unwrap();
    let code = fork_child(LIMIT, || {
        let checks: [&dyn Fn(); 5] = [
            &|| drop(pool.execute(|| ())),
            &|| drop(pool.spawn(|| ())),
            &|| pool.scope(|s| s.execute(|| ())),
            &|| drop(pool.shutdown_now()),
            &|| {
                pool.shutdown();
            },
        ];
        let mut refused = 0;
        for (i, f) in checks.iter().enumerate() {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                refused |= 1 << i;
            }
        }
        refused
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
#[test]
fn a_pool_built_in_a_forked_child_works() {
    use exitq::pool::Pool;
    let parent_pool = Pool::new().expect("pool");
    let (tx, rx) = mpsc::channel();
    assert!(parent_pool.execute(move || tx.send(()).unwrap()).is_ok());
    rx.recv().unwrap();
    let code = fork_child(LIMIT, || {
        let pool = Pool::new().expect("pool in the child");
        let (tx, rx) = mpsc::channel();
        assert!(pool.execute(move || tx.send(7u8).unwrap()).is_ok());
        i32::from(rx.recv_timeout(Duration::from_secs(20)) != Ok(7))
    });
    assert_eq!(code, 0, "the child's pool ran its job");
}
