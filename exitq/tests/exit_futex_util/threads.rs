//! The test threads and their hand-shake with the main thread: what a
//! thread does before it exits ([`Role`]), how it ends ([`Exit`]), and
//! [`run_group`], which starts a group, opens each thread's counters,
//! releases, cancels and joins them, and reads what they counted.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use exitq::Domain;

use super::counters::{Counters, Counts, Tracepoints};
use super::filter::foreign_futex_filter;
use crate::pthread_util;

/// `PERF_EVENT_IOC_ENABLE` (`_IO('$', 0)`).
pub const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
/// `PERF_IOC_FLAG_GROUP`: apply the ioctl to the whole group.
pub const PERF_IOC_FLAG_GROUP: libc::c_ulong = 1;

extern "C-unwind" {
    /// glibc's `sleep`, a cancellation point; `C-unwind` because
    /// `pthread_cancel` unwinds out of it.
    #[link_name = "sleep"]
    fn sleep_cancellable(seconds: libc::c_uint) -> libc::c_uint;
}

/// What a test thread does before it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Registers two exit hooks, defers a callback, takes a read guard.
    Hook,
    /// The same steps without exitq.
    Control,
    /// Control, plus one `FUTEX_WAKE` syscall after enabling its counters.
    Sanity,
}

/// How a test thread ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// A `std::thread` whose function returns.
    Return,
    /// A raw pthread cancelled (deferred) while it sleeps; it waits for
    /// `pthread_cancel` to return before its final stage
    /// ([`AwaitCanceller`]).
    Cancel,
    /// The same without the wait: glibc's final stage races with the
    /// canceller (reported, not compared; see [`AwaitCanceller`]).
    CancelRaced,
}

/// The hand-shake between the main thread and one test thread: atomics
/// only, so the test thread makes no futex call of its own.
pub struct Slot {
    /// The thread's tid, 0 until published.
    pub tid: AtomicI32,
    /// The thread's `pthread_self()` (glibc's `struct pthread`).
    pub pd: AtomicUsize,
    /// The counter group's leader fd, -1 until the counters are open.
    pub fd: AtomicI32,
    /// Set by a cancelled thread right before it sleeps.
    pub armed: AtomicBool,
    /// Set by the main thread once `pthread_cancel` on the thread returned.
    pub cancelled: AtomicBool,
}

/// Everything a test thread gets.
pub struct Job {
    pub role: Role,
    pub exit: Exit,
    /// Index into `Shared::runs` for a hook thread.
    pub index: usize,
    pub slot: Arc<Slot>,
    pub shared: Arc<Shared>,
}

/// State shared by one phase's threads.
pub struct Shared {
    pub domain: Domain,
    /// Released together in a concurrent wave; set from the start otherwise.
    pub go: AtomicBool,
    /// Runs of each hook thread's first hook.
    pub runs: Vec<AtomicU32>,
    /// Runs of the second hooks and of the deferred callbacks.
    pub others: AtomicUsize,
}

/// Runs the role's setup, hands the main thread its tid, waits for its
/// counters and the start signal, and enables the counters. Everything the
/// thread does after this returns is counted.
pub fn prepare(job: Job) -> Arc<Slot> {
    let Job {
        role,
        exit: _,
        index,
        slot,
        shared,
    } = job;
    if role == Role::Hook {
        let s = shared.clone();
        shared.domain.register_exit(move || {
            s.runs[index].fetch_add(1, Ordering::Relaxed);
        });
        let s = shared.clone();
        shared.domain.register_exit(move || {
            s.others.fetch_add(1, Ordering::Relaxed);
        });
        // Left in the thread's open batch: the exit path hands it over.
        let s = shared.clone();
        shared.domain.defer(move || {
            s.others.fetch_add(1, Ordering::Relaxed);
        });
        drop(shared.domain.read());
    }
    // SAFETY: pthread_self has no preconditions and cannot fail.
    let pd = unsafe { libc::pthread_self() };
    slot.pd.store(pd as usize, Ordering::Relaxed);
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // Release: pairs with the main thread's Acquire load in `wait_tid`
    // (the registration above happens-before the counters open).
    slot.tid.store(tid, Ordering::Release);
    // No futex: spin (yielding) until the main thread opened the counters.
    let fd = loop {
        // Acquire: pairs with the main thread's Release store of the fd.
        let fd = slot.fd.load(Ordering::Acquire);
        if fd >= 0 {
            break fd;
        }
        std::thread::yield_now();
    };
    // Acquire: pairs with the main thread's Release store of `go`.
    while !shared.go.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    // The thread keeps nothing of the test's but its slot (the main thread
    // holds other references, so these drops free nothing).
    drop(shared);
    enable(fd);
    if role == Role::Sanity {
        futex_wake();
    }
    slot
}

/// Enables the counter group `fd` of the calling thread.
pub fn enable(fd: RawFd) {
    // SAFETY:
    //   * `fd` is the leader of a perf counter group that the main thread
    //     keeps open until it has joined this thread.
    //   * the request takes an integer argument, no memory is accessed.
    let rc = unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ENABLE as _, PERF_IOC_FLAG_GROUP) };
    assert_eq!(rc, 0, "enable: {}", io::Error::last_os_error());
}

/// One `FUTEX_WAKE` syscall on a private word nobody waits on.
pub fn futex_wake() {
    let word = AtomicU32::new(0);
    // SAFETY: a valid, aligned futex word that outlives the call; FUTEX_WAKE
    // reads no other argument.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
    assert_eq!(rc, 0, "FUTEX_WAKE woke someone");
}

/// Holds a cancelled thread, in a thread-local destructor (after the
/// forced unwind, next to exitq's), until `pthread_cancel` has returned in
/// the main thread.
///
/// Without it, glibc's own exit races with the canceller: `pthread_cancel`
/// holds the target's `exit_lock` while it sends the signal, and a target
/// that unwinds faster reaches the same lock in its final stage
/// (`start_thread` sets `exiting` under it), then waits for it with a futex
/// call and wakes with another: 0 to 2 futex calls per cancelled thread,
/// hook or not, by timing alone. Waiting here takes that race out so the
/// comparison is exact; the raced figure is in `docs/exitq-tests.md#tests`.
pub struct AwaitCanceller(Option<Arc<Slot>>);

impl Drop for AwaitCanceller {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            // Acquire: pairs with the main thread's Release store after
            // `pthread_cancel` returned.
            while !slot.cancelled.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
    }
}

thread_local! {
    static AWAIT_CANCELLER: std::cell::RefCell<AwaitCanceller> =
        const { std::cell::RefCell::new(AwaitCanceller(None)) };
}

pub extern "C-unwind" fn cancelled_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the Box leaked by `spawn` for this thread.
    let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
    if job.exit == Exit::Cancel {
        // Registers the destructor now, not on the exit path.
        AWAIT_CANCELLER.with(|a| a.borrow_mut().0 = Some(job.slot.clone()));
    }
    let slot = prepare(*job);
    // Release: pairs with the main thread's Acquire load before it cancels
    // (the counters are enabled by then).
    slot.armed.store(true, Ordering::Release);
    drop(slot);
    loop {
        // SAFETY: a cancellation point; no live destructors in this frame.
        unsafe { sleep_cancellable(1) };
    }
}

/// A running test thread.
pub enum Handle {
    Std(std::thread::JoinHandle<()>),
    Pthread(libc::pthread_t),
}

pub fn spawn(exit: Exit, job: Job) -> Handle {
    match exit {
        Exit::Return => Handle::Std(
            std::thread::Builder::new()
                .name("exit-futex".into())
                .spawn(move || drop(prepare(job)))
                .expect("spawn a test thread"),
        ),
        Exit::Cancel | Exit::CancelRaced => {
            let tid = pthread_util::spawn(cancelled_main, Box::new(job));
            Handle::Pthread(tid)
        }
    }
}

pub fn wait_tid(slot: &Slot) -> i32 {
    loop {
        // Acquire: pairs with the thread's Release store of its tid.
        let tid = slot.tid.load(Ordering::Acquire);
        if tid != 0 {
            return tid;
        }
        std::thread::yield_now();
    }
}

/// One started test thread, seen from the main thread.
pub struct Running {
    pub role: Role,
    pub slot: Arc<Slot>,
    pub handle: Handle,
    pub counters: Counters,
}

/// Starts `role` threads in order, opens their counters, releases them
/// together, cancels them if `exit` says so, joins them and reads their
/// counters.
pub fn run_group(
    exit: Exit,
    roles: &[Role],
    shared: &Arc<Shared>,
    tp: &Tracepoints,
    next_hook: &mut usize,
) -> Vec<(Role, Counts)> {
    let mut running = Vec::with_capacity(roles.len());
    for &role in roles {
        let slot = Arc::new(Slot {
            tid: AtomicI32::new(0),
            pd: AtomicUsize::new(0),
            fd: AtomicI32::new(-1),
            armed: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
        });
        let index = if role == Role::Hook {
            *next_hook += 1;
            *next_hook - 1
        } else {
            usize::MAX
        };
        let job = Job {
            role,
            exit,
            index,
            slot: slot.clone(),
            shared: shared.clone(),
        };
        let handle = spawn(exit, job);
        let tid = wait_tid(&slot);
        // Read after the thread's setup: its malloc arena exists by now.
        let filter = foreign_futex_filter(slot.pd.load(Ordering::Relaxed) as u64, tp.std_lock);
        let counters = Counters::open(tp, tid, &filter)
            .unwrap_or_else(|e| panic!("perf_event_open on thread {tid}: {e}"));
        // Release: pairs with the thread's Acquire load of its fd.
        slot.fd
            .store(counters.syscalls.as_raw_fd(), Ordering::Release);
        running.push(Running {
            role,
            slot,
            handle,
            counters,
        });
    }
    // Release: pairs with the threads' Acquire loads of `go`.
    shared.go.store(true, Ordering::Release);
    for r in &running {
        if let Handle::Pthread(tid) = r.handle {
            // Acquire: pairs with the thread's Release store of `armed`.
            while !r.slot.armed.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            // SAFETY: a live joinable thread, joined below.
            let rc = unsafe { libc::pthread_cancel(tid) };
            assert_eq!(rc, 0, "pthread_cancel");
            // Release: pairs with the Acquire load in `AwaitCanceller::drop`.
            r.slot.cancelled.store(true, Ordering::Release);
        }
    }
    running
        .into_iter()
        .map(|mut r| {
            match r.handle {
                Handle::Std(h) => h.join().expect("test thread panicked"),
                Handle::Pthread(tid) => {
                    let mut ret: *mut c_void = std::ptr::null_mut();
                    // SAFETY: a joinable thread, joined once.
                    let rc = unsafe { libc::pthread_join(tid, &mut ret) };
                    assert_eq!(rc, 0, "pthread_join");
                    // PTHREAD_CANCELED is `(void *) -1` in glibc.
                    assert_eq!(ret as isize, -1, "the thread was not cancelled");
                }
            }
            let counts = r
                .counters
                .read()
                .expect("read the counters of a dead thread");
            (r.role, counts)
        })
        .collect()
}

/// `n` roles per kind in A B B A order.
pub fn interleaved(n: usize) -> Vec<Role> {
    (0..n)
        .flat_map(|i| {
            if i % 2 == 0 {
                [Role::Hook, Role::Control]
            } else {
                [Role::Control, Role::Hook]
            }
        })
        .collect()
}
