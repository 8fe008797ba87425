//! A `fork()` child builds its own pool (the crate docs' fork model) while
//! another thread of the parent is inside exitq's once-per-process set-up
//! (the process's first domain being built). That set-up was a
//! `std::sync::Once` (the fork handler's registration) and a `OnceLock`
//! (the exit key): the child found it "running" for ever, with no thread
//! to finish it, and its `Pool::new` never returned. Seen as a 30 s hang
//! of `red_pool.rs`'s pids.max test under load (the child's gdb stack was
//! in `fork::generation` once and `thread::exit_key` once); here the
//! parent's thread is held inside each step, so the old code hangs every
//! time (both tests failed before the fix: the child was killed at its
//! deadline, its stack in `Once::call`).
//!
//! The hold: this test binary defines `pthread_key_create` and
//! `pthread_atfork` (which exitq calls inside those steps), so exitq's
//! calls come here; on the one thread that armed it, the call waits until
//! the test lets it go, then does what glibc's would. Each scenario runs
//! in a fresh process of this binary (a helper test), where no domain was
//! built yet.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use exitq::pool::Pool;

mod watch_util;

/// How long the forked child may take (it builds a pool and runs a job).
const LIMIT: Duration = Duration::from_secs(10);

/// Which of exitq's once-per-process calls a thread is held in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    Nothing,
    /// `pthread_key_create`, inside the exit key's creation.
    KeyCreate,
    /// `pthread_atfork`, inside the fork handler's registration.
    Atfork,
}

thread_local! {
    /// The call to hold on this thread, once (no destructor, const: no
    /// key is created for it).
    static HOLD_HERE: Cell<Hold> = const { Cell::new(Hold::Nothing) };
}

/// A thread is being held.
static HELD: AtomicBool = AtomicBool::new(false);
/// The held thread may go on.
static RELEASE: AtomicBool = AtomicBool::new(false);

/// Holds the calling thread until [`RELEASE`] if it armed `what`.
fn hold_if_armed(what: Hold) {
    if HOLD_HERE.get() != what {
        return;
    }
    HOLD_HERE.set(Hold::Nothing);
    HELD.store(true, Ordering::SeqCst);
    while !RELEASE.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(1));
    }
}

type ForkHandler = Option<unsafe extern "C" fn()>;
type KeyDestructor = Option<unsafe extern "C" fn(*mut c_void)>;

extern "C" {
    // glibc's own entry points behind the two functions defined below.
    fn __pthread_key_create(key: *mut libc::pthread_key_t, dtor: KeyDestructor) -> libc::c_int;
    fn __register_atfork(
        prepare: ForkHandler,
        parent: ForkHandler,
        child: ForkHandler,
        dso_handle: *mut c_void,
    ) -> libc::c_int;
}

/// glibc's `pthread_key_create`, held on an armed thread.
///
/// # Safety
/// As `pthread_key_create(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_key_create(
    key: *mut libc::pthread_key_t,
    dtor: KeyDestructor,
) -> libc::c_int {
    hold_if_armed(Hold::KeyCreate);
    // SAFETY: the caller's arguments, as pthread_key_create's.
    unsafe { __pthread_key_create(key, dtor) }
}

/// glibc's `pthread_atfork`, held on an armed thread.
///
/// # Safety
/// As `pthread_atfork(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_atfork(
    prepare: ForkHandler,
    parent: ForkHandler,
    child: ForkHandler,
) -> libc::c_int {
    hold_if_armed(Hold::Atfork);
    // SAFETY: the caller's handlers; no DSO handle (the handlers live in
    // this executable, never unloaded), as glibc's own calls pass.
    unsafe { __register_atfork(prepare, parent, child, std::ptr::null_mut()) }
}

const HELPER: &str = "EXITQ_RED_FORK_HELPER";

/// Run by the tests below in a fresh process of this binary; does nothing
/// otherwise. A thread builds the process's first domain and is held
/// inside the step named by `EXITQ_RED_FORK_HELPER`; meanwhile this
/// thread forks, and the child builds a pool and runs a job on it.
#[test]
#[ignore = "a helper: run by the tests of this file"]
fn fork_helper_held_in_first_domain() {
    let hold = match std::env::var(HELPER).as_deref() {
        Ok("key_create") => Hold::KeyCreate,
        Ok("atfork") => Hold::Atfork,
        _ => return,
    };
    let a = thread::spawn(move || {
        HOLD_HERE.set(hold);
        drop(exitq::Domain::new());
    });
    let start = Instant::now();
    while !HELD.load(Ordering::SeqCst) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the first domain's build never made the call to hold (exitq no longer calls it?)"
        );
        thread::sleep(Duration::from_millis(1));
    }
    let code = watch_util::fork_child(LIMIT, || {
        let pool = Pool::new().expect("a pool in the child");
        let answer = pool.spawn(|| 6 * 7).expect("the pool runs");
        match answer.join() {
            Ok(42) => 0,
            _ => 1,
        }
    });
    RELEASE.store(true, Ordering::SeqCst);
    a.join().unwrap();
    assert_eq!(code, 0, "1: the job's answer was wrong");
}

/// Runs [`fork_helper_held_in_first_domain`] holding `hold`.
fn run_helper(hold: &str) {
    watch_util::run_ignored_alone("fork_helper_held_in_first_domain", HELPER, hold);
}

/// The exit key was a `OnceLock`: forked while another thread was
/// creating it, the child's `Pool::new` waited for it for ever.
#[test]
fn a_child_builds_a_pool_while_the_parent_creates_the_exit_key() {
    run_helper("key_create");
}

/// The fork handler's registration was a `Once`: forked while another
/// thread was registering it, the child's `Pool::new` waited for ever.
#[test]
fn a_child_builds_a_pool_while_the_parent_registers_the_fork_handler() {
    run_helper("atfork");
}
