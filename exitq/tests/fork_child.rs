//! `watch_util::fork_child`, the forked-child runner the other tests use:
//! a child forked while another thread of the test process is in the
//! middle of a panic does not hang, and a child's panic fails the test
//! with the child's message. Each test failed on the runner before the
//! change (the child installed its own panic hook; a panic was only exit
//! code 101).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

mod watch_util;
use watch_util::fork_child;

/// Long enough for any child here, also on a loaded machine (it was 5 s);
/// a hang fails in this time.
const LIMIT: Duration = Duration::from_secs(60);

/// The name of the thread whose panic the hook below holds.
const HELD: &str = "held-in-the-panic-hook";

/// One test at a time: the first replaces the panic hook for a while, and
/// a child forked by another test meanwhile would start with the hook's
/// lock held for writing (the very hang the first test is about).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Another test's thread is inside the panic hook (printing its failure,
/// the hook's lock held for reading) when this one forks. The child used
/// to install its own hook first (`set_hook`, the lock for writing): it
/// blocked for ever, and this test failed as a hang that had nothing to do
/// with it. Now the child touches no hook before its body.
#[test]
fn a_child_forked_while_another_thread_panics_does_not_hang() {
    let _one = one_at_a_time();
    // Whatever hook the runner installs, it is in place before ours.
    assert_eq!(fork_child(LIMIT, || 0), 0);
    let (entered_tx, entered) = mpsc::channel::<()>();
    let release = Arc::new(AtomicBool::new(false));
    let before = Arc::new(std::panic::take_hook());
    {
        let (before, release) = (before.clone(), release.clone());
        let entered_tx = std::sync::Mutex::new(entered_tx);
        std::panic::set_hook(Box::new(move |info| {
            if thread::current().name() == Some(HELD) {
                let _ = entered_tx.lock().map(|tx| tx.send(()));
                while !release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
            } else {
                before(info);
            }
        }));
    }
    let panicker = thread::Builder::new()
        .name(HELD.into())
        .spawn(|| panic!("a panic held in the hook (expected by the test)"))
        .unwrap();
    entered.recv().unwrap();
    // The hook's lock is held (for reading) by the panicking thread now.
    let code = std::panic::catch_unwind(|| fork_child(LIMIT, || 7));
    release.store(true, Ordering::SeqCst);
    assert!(panicker.join().is_err());
    // Our hook out, the runner's (or libtest's) back in.
    drop(std::panic::take_hook());
    let before = Arc::try_unwrap(before).unwrap_or_else(|_| unreachable!("one owner left"));
    std::panic::set_hook(before);
    assert_eq!(
        code.ok(),
        Some(7),
        "the child forked during another thread's panic hung"
    );
}

/// A child that panics fails the test with its own message (it was exit
/// code 101, with the message lost).
#[test]
fn a_child_s_panic_fails_the_test_with_its_message() {
    let _one = one_at_a_time();
    let message = failure_of(|| {
        let why = String::from("the child's own words");
        panic!("{why}")
    });
    assert!(
        message.contains("the forked child panicked") && message.contains("the child's own words"),
        "{message:?}"
    );
}

/// A child killed by a signal fails the test naming the signal.
#[test]
fn a_child_killed_by_a_signal_fails_the_test_naming_it() {
    let _one = one_at_a_time();
    // SAFETY: ends this (forked) process at once.
    let message = failure_of(|| unsafe { libc::abort() });
    assert!(message.contains("SIGABRT"), "{message:?}");
}

/// The message `fork_child` fails the test with when it runs `child`
/// (empty if it does not fail).
fn failure_of(child: impl FnOnce() -> i32) -> String {
    let failed =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fork_child(LIMIT, child)));
    failed
        .err()
        .and_then(|e| e.downcast::<String>().ok())
        .map(|m| *m)
        .unwrap_or_default()
}
