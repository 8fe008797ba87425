//! Unit tests of the exit hand-off (`handshake`, "An owner's exit is
//! handed off") on a real domain: a stealer held up after marking a
//! thread's record (the domain's test hook in `reclaim::steal`) while
//! that thread exits. Before the hand-off, the exit waited for the
//! stealer, so the thread could not end until the steal did.
#[cfg(not(miri))]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
#[cfg(not(miri))]
use std::time::{Duration, Instant};

use crate::sync::Ordering;
use crate::Domain;

/// A bound that only a defect reaches.
#[cfg(not(miri))]
const BOUND: Duration = Duration::from_secs(60);

/// Waits (at most `BOUND`) until `done()`; returns whether it came.
#[cfg(not(miri))]
fn wait_until(done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > BOUND {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
    true
}

/// Whether the kernel still has thread `tid` of this process.
#[cfg(not(miri))]
fn thread_exists(tid: i32) -> bool {
    std::path::Path::new(&format!("/proc/self/task/{tid}")).exists()
}

/// The calling thread's tid.
#[cfg(not(miri))]
fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// A thread that defers one counted callback and registers one counted
/// exit hook in `d`, then exits when told to. Returns its tid, the
/// "exit now" sender and the join handle.
fn exiting_thread(
    d: &Domain,
    ran: &Arc<AtomicUsize>,
    hooked: &Arc<AtomicUsize>,
) -> (i32, mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (go, wait) = mpsc::channel::<()>();
    let (tid_tx, tid_rx) = mpsc::channel();
    let (d, ran, hooked) = (d.clone(), ran.clone(), hooked.clone());
    let t = thread::spawn(move || {
        d.defer(move || {
            ran.fetch_add(1, Ordering::Relaxed);
        });
        d.register_exit(move || {
            hooked.fetch_add(1, Ordering::Relaxed);
        });
        #[cfg(not(miri))]
        tid_tx.send(gettid()).unwrap();
        #[cfg(miri)]
        tid_tx.send(0).unwrap();
        wait.recv().unwrap();
    });
    (tid_rx.recv().unwrap(), go, t)
}

/// After a `barrier` that finished a thread's handed-off exit: its
/// callback and hook ran once each, the domain counted the hand-off, and
/// the record went back (a new thread reuses it).
fn handed_off_once(d: &Domain, ran: &AtomicUsize, hooked: &AtomicUsize) {
    assert_eq!(ran.load(Ordering::Relaxed), 1, "the callback ran once");
    assert_eq!(hooked.load(Ordering::Relaxed), 1, "the hook ran once");
    assert!(d.stats().exit_handoffs >= 1, "{:?}", d.stats());
    let before = d.stats().participants;
    let d2 = d.clone();
    thread::spawn(move || drop(d2.read())).join().unwrap();
    assert_eq!(
        d.stats().participants,
        before,
        "the handed-off record leaked"
    );
}

/// Sets `d`'s steal hook: the first call from `on` runs `f`.
fn hook_once(d: &Domain, on: thread::ThreadId, f: impl FnOnce() + Send + 'static) {
    let f = Mutex::new(Some(f));
    *crate::inner::lock(&d.inner.steal_hook) = Some(Arc::new(move || {
        if thread::current().id() == on {
            if let Some(f) = f.lock().unwrap().take() {
                f();
            }
        }
    }));
}

/// A `barrier` holds a thread's record (marked, waiting) while the thread
/// exits: the thread ends without waiting for it, the barrier finishes
/// its exit (the callback and the hook run, once each, by the time it
/// returns), and the record goes back for reuse.
#[cfg(not(miri))]
#[test]
fn an_exit_is_handed_to_a_barrier_that_holds_the_record() {
    let d = Domain::new();
    let (ran, hooked) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (tid, go, t) = exiting_thread(&d, &ran, &hooked);
    let ended = Arc::new(AtomicBool::new(false));
    let e = ended.clone();
    hook_once(&d, thread::current().id(), move || {
        go.send(()).unwrap();
        e.store(wait_until(|| !thread_exists(tid)), Ordering::Relaxed);
    });
    d.barrier();
    assert!(
        ended.load(Ordering::Relaxed),
        "the thread did not end while a barrier held its record (its exit waited)"
    );
    t.join().unwrap();
    handed_off_once(&d, &ran, &hooked);
    d.barrier();
    assert_eq!(ran.load(Ordering::Relaxed), 1, "the callback ran once");
    assert_eq!(hooked.load(Ordering::Relaxed), 1, "the hook ran once");
}

/// `exit_barrier` called after a thread exited while a stealer (a
/// `barrier` on another thread) still holds the thread's record: it
/// waits for the stealer to finish the hand-off, and the thread's hook
/// has run when it returns.
#[cfg(not(miri))]
#[test]
fn exit_barrier_waits_for_a_hand_off_under_way() {
    let d = Domain::new();
    let (ran, hooked) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (tid, go, t) = exiting_thread(&d, &ran, &hooked);
    let main_tid = gettid();
    let (gone_tx, gone) = mpsc::channel();
    let entering = Arc::new(AtomicBool::new(false));
    let (d2, entering2) = (d.clone(), entering.clone());
    let stealer = thread::spawn(move || {
        hook_once(&d2, thread::current().id(), move || {
            go.send(()).unwrap();
            gone_tx.send(wait_until(|| !thread_exists(tid))).unwrap();
            // Hold on until the main thread sleeps in its `exit_barrier`
            // (the steal lock), if it does: without the wait there, it
            // returns without sleeping, and we let go after the bound.
            wait_until(|| entering2.load(Ordering::Acquire) && sleeping(main_tid));
        });
        d2.barrier();
    });
    assert!(
        gone.recv().unwrap(),
        "the thread did not end while a barrier held its record"
    );
    t.join().unwrap();
    entering.store(true, Ordering::Release);
    d.exit_barrier();
    assert_eq!(
        hooked.load(Ordering::Relaxed),
        1,
        "exit_barrier returned before the hook of a thread that exited before it ran"
    );
    stealer.join().unwrap();
    assert_eq!(ran.load(Ordering::Relaxed), 1, "the callback ran once");
    assert_eq!(hooked.load(Ordering::Relaxed), 1, "the hook ran once");
}

/// The first test as miri runs it (no `/proc`, no `gettid` there): the
/// held-up barrier joins the exiting thread, which returns once its exit
/// (exitq's key destructor) has run. With the wait of before, miri
/// reports the deadlock. Miri checks the hand-off's unsafe code: the
/// batches and the `handed` slot passed from the owner to the stealer,
/// the record handed back by the stealer.
#[test]
fn a_barrier_joins_a_thread_whose_record_it_holds() {
    let d = Domain::new();
    let (ran, hooked) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (_, go, t) = exiting_thread(&d, &ran, &hooked);
    hook_once(&d, thread::current().id(), move || {
        go.send(()).unwrap();
        t.join().unwrap();
    });
    d.barrier();
    handed_off_once(&d, &ran, &hooked);
}

/// Whether thread `tid` of this process is asleep (state `S` in
/// `/proc/self/task/<tid>/stat`).
#[cfg(not(miri))]
fn sleeping(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('S')))
        .unwrap_or(false)
}
