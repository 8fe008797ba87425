//! The exit path allocates nothing: a counting global allocator counts the
//! allocations (and frees) made by a thread from the moment its function
//! returns (or it is cancelled) until it is gone, i.e. during its
//! thread-local destructors, which is where exitq's exit path runs.
//!
//! Only this thread's allocations are counted (a thread-local flag), so the
//! test harness and the reclaimer cannot disturb the count.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use exitq::{Domain, Reclaimer};

mod pthread_util;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static FREES: AtomicUsize = AtomicUsize::new(0);

fn counting() -> bool {
    // A const, destructor-less thread-local: readable during TLS teardown.
    COUNTING.with(|c| c.get())
}

// SAFETY: forwards to the system allocator; counting has no side effects on
// the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counting() {
            FREES.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

extern "C-unwind" {
    #[link_name = "sleep"]
    fn sleep_cancellable(seconds: libc::c_uint) -> libc::c_uint;
}

struct Start {
    domain: Domain,
    cancel: bool,
    ready: Arc<AtomicUsize>,
}

fn prepare(arg: *mut c_void) -> bool {
    // SAFETY: the Box leaked by `run` for this thread.
    let start = unsafe { Box::from_raw(arg.cast::<Start>()) };
    for _ in 0..4 {
        start.domain.register_exit(|| ());
    }
    start.domain.defer(|| ());
    {
        let _g = start.domain.read();
    }
    let cancel = start.cancel;
    let ready = start.ready.clone();
    drop(start);
    ready.fetch_add(1, Ordering::Release);
    drop(ready);
    // From here on, every allocation by this thread is counted.
    COUNTING.with(|c| c.set(true));
    cancel
}

extern "C-unwind" fn thread_main(arg: *mut c_void) -> *mut c_void {
    if prepare(arg) {
        loop {
            // SAFETY: cancellation point; no live destructors in this frame.
            unsafe { sleep_cancellable(1) };
        }
    }
    std::ptr::null_mut()
}

fn run(cancel: bool) -> (usize, usize) {
    let d = Domain::builder().reclaimer(Reclaimer::Inline).build();
    ALLOCS.store(0, Ordering::Relaxed);
    FREES.store(0, Ordering::Relaxed);
    let ready = Arc::new(AtomicUsize::new(0));
    let start = Box::new(Start {
        domain: d.clone(),
        cancel,
        ready: ready.clone(),
    });
    let tid = pthread_util::spawn(thread_main, start);
    while ready.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    if cancel {
        // SAFETY: live joinable thread.
        assert_eq!(unsafe { libc::pthread_cancel(tid) }, 0);
    }
    // SAFETY: joined once.
    assert_eq!(unsafe { libc::pthread_join(tid, std::ptr::null_mut()) }, 0);
    let counts = (
        ALLOCS.load(Ordering::Relaxed),
        FREES.load(Ordering::Relaxed),
    );
    d.exit_barrier();
    let s = d.stats();
    assert_eq!(s.exits_run, 4, "{s:?}");
    assert_eq!(s.callbacks_run, 5, "{s:?}");
    counts
}

#[test]
fn the_exit_path_allocates_nothing() {
    for cancel in [false, true] {
        let (allocs, frees) = run(cancel);
        eprintln!("exit path (cancel={cancel}): {allocs} allocations, {frees} frees");
        assert_eq!(allocs, 0, "cancel={cancel}: the exiting thread allocated");
    }
}
