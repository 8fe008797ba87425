//! Deterministic interleavings of the pool's slot protocol, forced with the
//! test-only pause points of `HookPoint` (a thread is held at a point while
//! the test drives the others through their steps). Each test reproduces
//! one race found in review; see the module docs of `idle.rs`.

use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::idle::{FREE, IDLE, RETIRED};
use super::inner::{Hook, HookPoint, Inner};
use super::Pool;

/// Polls `cond` for up to 60 s, panicking with `what`: each wait is for
/// something that takes milliseconds, so only a defect trips it, not a
/// slow or loaded machine.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(60), "timed out: {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Joins `t` or gives up after 60 s (a thread that livelocked).
fn join_within<T: Send + 'static>(what: &str, t: thread::JoinHandle<T>) -> T {
    wait_until(what, || t.is_finished());
    t.join().expect(what)
}

/// A one-slot pool: every worker it ever has reuses slot 0.
fn one_slot_pool(keep_alive: Duration) -> Pool {
    Pool::builder()
        .min_workers(0)
        .max_workers(1)
        .keep_alive(keep_alive)
        .keep_alive_jitter(Duration::ZERO)
        .retire_batch(2)
        .spin(Duration::ZERO)
        .build()
        .expect("a one-slot pool")
}

/// Moves `phase` from `from` to `from + 1`; true if this call did.
fn advance(phase: &AtomicU8, from: u8) -> bool {
    phase
        .compare_exchange(from, from + 1, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

fn install(inner: &Inner, hook: Hook) {
    *inner.hook.lock().unwrap() = Some(hook);
}

/// A pause point: the first thread to reach it signals `paused` and waits
/// for `resume`.
struct Gate {
    paused: Mutex<mpsc::Sender<()>>,
    resume: Mutex<mpsc::Receiver<()>>,
}

impl Gate {
    fn new() -> (Arc<Gate>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (paused_tx, paused_rx) = mpsc::channel();
        let (resume_tx, resume_rx) = mpsc::channel();
        let gate = Arc::new(Gate {
            paused: Mutex::new(paused_tx),
            resume: Mutex::new(resume_rx),
        });
        (gate, paused_rx, resume_tx)
    }

    fn pause(&self) {
        self.paused.lock().unwrap().send(()).unwrap();
        self.resume.lock().unwrap().recv().unwrap();
    }
}

/// The race of the review note: a popper holding a stale idle-stack entry
/// of slot 0 (popped while worker 1 was idle there) must not free the slot
/// once worker 1 has left, worker 2 has reused the slot, gone idle (a new
/// entry in the stack) and retired. Before the fix, the popper read
/// `RETIRED` (worker 2's) and freed the slot while worker 2's entry was
/// still in the idle stack.
#[test]
fn a_stale_pop_does_not_free_a_reused_slot() {
    let pool = one_slot_pool(Duration::from_millis(30));
    let inner = pool.inner.clone();
    let slot = inner.slots.get(0);
    let ran = Arc::new(AtomicUsize::new(0));
    let run = |pool: &Pool| {
        let ran2 = ran.clone();
        let before = ran.load(Ordering::SeqCst);
        pool.execute(move || {
            ran2.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        wait_until("the job ran", || ran.load(Ordering::SeqCst) > before);
    };

    // The popper (below): pops worker 1's entry and is held before it
    // reads the slot's state. At `Checked` it records what it left behind.
    // Worker 1's keep-alive may expire before the popper pops (the test
    // thread and the popper may not run for longer than the keep-alive on
    // a loaded machine: then worker 1 left with its entry in the stack and
    // the interleaving under test never happened, and the test failed);
    // so a worker whose keep-alive expires before the pop waits for it.
    let (gate, paused, resume) = Gate::new();
    let phase = Arc::new(AtomicU8::new(0));
    let seen: Arc<Mutex<Option<(u32, bool)>>> = Arc::new(Mutex::new(None));
    {
        let (gate, phase, seen) = (gate.clone(), phase.clone(), seen.clone());
        install(
            &inner,
            Arc::new(move |inner: &Inner, at| match at {
                HookPoint::Popped(0) if advance(&phase, 0) => gate.pause(),
                HookPoint::Checked(0) if advance(&phase, 1) => {
                    let state = inner.slots.get(0).state.load(Ordering::SeqCst);
                    *seen.lock().unwrap() = Some((state, !inner.slots.idle_is_empty()));
                }
                HookPoint::KeepAliveExpired(0) => {
                    // Only worker 1 can get here before the pop (worker 2
                    // is started after it).
                    wait_until("the popper pops worker 1's entry", || {
                        phase.load(Ordering::SeqCst) >= 1
                    });
                }
                _ => {}
            }),
        );
    }

    // Worker 1 runs a job and parks idle on slot 0, with an entry in the
    // idle stack.
    run(&pool);
    wait_until("worker 1 parked with an idle-stack entry", || {
        slot.state.load(Ordering::SeqCst) == IDLE && !inner.slots.idle_is_empty()
    });

    let popper = {
        let inner = inner.clone();
        thread::spawn(move || inner.wake_one())
    };
    paused.recv().unwrap();

    // Worker 1's keep-alive expires (no job is queued): it retires and, its
    // entry being out of the stack, frees slot 0 itself.
    wait_until("worker 1 retired and freed slot 0", || {
        slot.state.load(Ordering::SeqCst) == FREE && inner.workers.load(Ordering::SeqCst) == 0
    });

    // Worker 2 takes slot 0, runs a job, parks (a new entry), and retires
    // with that entry still in the stack: the entry's popper frees the slot.
    run(&pool);
    assert_eq!(
        inner.spawned.load(Ordering::SeqCst),
        2,
        "worker 2 reuses slot 0"
    );
    wait_until("worker 2 retired", || {
        slot.state.load(Ordering::SeqCst) == RETIRED && inner.workers.load(Ordering::SeqCst) == 0
    });
    assert!(
        !inner.slots.idle_is_empty(),
        "worker 2's entry is in the stack"
    );

    // Release the stale popper.
    resume.send(()).unwrap();
    let woke = join_within("the popper returns", popper);
    assert!(!woke, "no worker was idle to wake");
    let (state, in_stack) = seen.lock().unwrap().expect("the popper checked slot 0");
    assert!(
        !(state == FREE && in_stack),
        "the stale popper freed slot 0 while worker 2's entry was still in the idle stack"
    );

    // The slot is still usable: a third worker takes it. It retires idle
    // or at shutdown, as its keep-alive and the scheduler have it.
    *inner.hook.lock().unwrap() = None;
    run(&pool);
    let report = pool.shutdown();
    assert_eq!(report.stats.spawned, 3);
    assert!(report.stats.retired_idle >= 2, "{:?}", report.stats);
    assert_eq!(
        report.stats.retired_idle + report.stats.retired_shutdown,
        3,
        "{:?}",
        report.stats
    );
    assert_eq!(report.stats.live_threads, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 3);
}

/// A worker that leaves at shutdown frees its slot. Before the fix it left
/// the slot `RETIRED` for good; a submitter that entered before the
/// shutdown bit and queued its job after the last worker left then reserved
/// a worker and spun forever in `claim_slot` looking for a free slot, and
/// `shutdown` waited forever for that submitter.
#[test]
fn a_job_queued_after_the_last_worker_left_at_shutdown_still_runs() {
    let pool = Arc::new(one_slot_pool(Duration::from_secs(10)));
    let inner = pool.inner.clone();

    // Worker 1 is busy with a job that waits for us.
    let (started_tx, started) = mpsc::channel();
    let (finish, finish_rx) = mpsc::channel::<()>();
    pool.execute(move || {
        started_tx.send(()).unwrap();
        finish_rx.recv().unwrap();
    })
    .unwrap();
    started.recv().unwrap();

    // A submitter enters and is held before it queues its job.
    let (gate, paused, resume) = Gate::new();
    let armed = Arc::new(AtomicU8::new(0));
    {
        let (gate, armed) = (gate.clone(), armed.clone());
        install(
            &inner,
            Arc::new(move |_: &Inner, at| {
                if at == HookPoint::BeforePush && advance(&armed, 0) {
                    gate.pause();
                }
            }),
        );
    }
    let ran = Arc::new(AtomicU32::new(0));
    let submitter = {
        let (pool, ran) = (pool.clone(), ran.clone());
        thread::spawn(move || {
            pool.execute(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })
            .is_ok()
        })
    };
    paused.recv().unwrap();

    // Shutdown begins (and waits for the submitter to leave).
    let shutdown = {
        let pool = pool.clone();
        thread::spawn(move || pool.shutdown())
    };
    wait_until("the shutdown bit is set", || inner.is_shutdown());

    // Worker 1 finishes, finds the queue empty and leaves.
    finish.send(()).unwrap();
    wait_until("worker 1 left", || {
        inner.workers.load(Ordering::SeqCst) == 0
    });

    // The submitter queues its job: it must get a worker (or run it).
    resume.send(()).unwrap();
    assert!(join_within("the submitter returns", submitter));
    let report = join_within("shutdown returns", shutdown);
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the job ran exactly once");
    assert_eq!(report.stats.live_threads, 0);
    assert_eq!(report.stats.workers, 0);
}
