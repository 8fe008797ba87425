//! Extreme `DomainBuilder` settings: a huge `Duration` must not kill the
//! reclaimer thread (an overflow panic left a domain that `build()` had
//! returned running without it, so exit hooks of exited threads no longer
//! ran by themselves), and a thread name `std` refuses must make
//! `try_build` return an error, not panic.
//!
//! Each test gives its domain a reclaimer thread name of its own (at most
//! 15 bytes, the kernel's `comm`) and names the threads it spawns after
//! it, so the panics it looks for are its own: the tests of this file run
//! in parallel in one process, under one panic hook.
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

use exitq::{Domain, DomainBuilder, Reclaimer};

/// How long a test waits for something that should happen by itself.
/// This only bounds how long a failure takes to be noticed: nothing here
/// asserts how fast anything happens.
/// (60 s: under load a child or a reclaimer may not run for seconds.)
const PATIENCE: Duration = Duration::from_secs(60);

/// Panics seen in any thread of this process: (thread name, message).
static PANICS: Mutex<Vec<(Option<String>, String)>> = Mutex::new(Vec::new());

/// Installs, once for the whole process, a panic hook that records every
/// panic (any thread) and then hands it to the hook it replaced (so the
/// usual message is still printed). It is never removed: the tests run in
/// parallel, and restoring the previous hook under another test would
/// lose that test's panics.
fn record_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
                (*s).to_owned()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "<non-string payload>".to_owned()
            };
            let message = match info.location() {
                Some(l) => format!("{message} at {}:{}", l.file(), l.line()),
                None => message,
            };
            let name = thread::current().name().map(str::to_owned);
            PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((name, message));
            previous(info);
        }));
    });
}

/// Panics recorded in threads named `tag...` (this test's reclaimer and
/// helper threads) or in unnamed threads (nobody's in particular).
fn panics_of(tag: &str) -> Vec<(Option<String>, String)> {
    PANICS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(name, _)| name.as_deref().map_or(true, |n| n.starts_with(tag)))
        .cloned()
        .collect()
}

fn assert_no_panics(tag: &str) {
    let panics = panics_of(tag);
    assert!(panics.is_empty(), "{tag}: panics: {panics:?}");
}

/// Whether a thread of this process is named `name` (at most 15 bytes).
fn thread_named(name: &str) -> bool {
    assert!(name.len() <= 15, "{name}: longer than a kernel comm");
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim_end() == name)
    })
}

/// A domain that a failing test leaks instead of dropping: dropping runs
/// a grace period on the dropping thread, which, with a broken
/// first-check delay, may sleep for ever and turn the failure into a hang.
struct Leaky(Option<Domain>);

impl std::ops::Deref for Leaky {
    type Target = Domain;
    fn deref(&self) -> &Domain {
        self.0.as_ref().unwrap()
    }
}

impl Drop for Leaky {
    fn drop(&mut self) {
        if thread::panicking() {
            std::mem::forget(self.0.take());
        }
    }
}

/// Polls `done` until it holds or [`PATIENCE`] ran out; whether it held.
fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > PATIENCE {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// Spawns a thread named `tag-x` that registers an exit hook counting in
/// `ran`, and joins it.
fn exit_with_hook(d: &Domain, tag: &str, ran: &Arc<AtomicUsize>) {
    let (d, ran) = (d.clone(), ran.clone());
    thread::Builder::new()
        .name(format!("{tag}-x"))
        .spawn(move || {
            d.register_exit(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            });
        })
        .unwrap()
        .join()
        .unwrap();
}

/// The domain's reclaimer (thread `tag`) runs the exit hooks of exited
/// threads by itself, twice (the second time after it slept following its
/// first pass), stays alive, and nothing panicked.
fn hooks_run_by_themselves(tag: &str, builder: DomainBuilder) {
    record_panics();
    let mut d = Leaky(Some(builder.thread_name(tag).build()));
    let ran = Arc::new(AtomicUsize::new(0));
    for round in 1..=2 {
        exit_with_hook(&d, tag, &ran);
        let ok = wait_until(|| ran.load(Ordering::Relaxed) == round);
        assert!(
            ok,
            "{tag}: round {round}: the exit hook did not run by itself within {PATIENCE:?}; \
             reclaimer alive: {}; panics: {:?}; {:?}",
            thread_named(tag),
            panics_of(tag),
            d.stats()
        );
        // Let the reclaimer finish its round and fall asleep.
        thread::sleep(Duration::from_millis(50));
    }
    assert_no_panics(tag);
    assert!(thread_named(tag), "{tag}: the reclaimer thread is gone");
    drop(d.0.take());
    assert_no_panics(tag);
}

/// Just above `u64::MAX / 2` seconds: twice this overflows a `Duration`.
fn above_half() -> Duration {
    Duration::from_secs(u64::MAX / 2 + 1)
}

#[test]
fn flush_latency_max_keeps_the_reclaimer() {
    hooks_run_by_themselves("bl-fl-max", Domain::builder().flush_latency(Duration::MAX));
}

#[test]
fn flush_latency_above_half_max_keeps_the_reclaimer() {
    hooks_run_by_themselves("bl-fl-half", Domain::builder().flush_latency(above_half()));
}

#[test]
fn first_check_delay_max_keeps_the_reclaimer() {
    hooks_run_by_themselves(
        "bl-fc-max",
        Domain::builder().first_check_delay(Duration::MAX),
    );
}

#[test]
fn first_check_delay_above_an_eighth_of_max_keeps_the_reclaimer() {
    // Eight times this overflows a `Duration`.
    hooks_run_by_themselves(
        "bl-fc-eighth",
        Domain::builder().first_check_delay(Duration::from_secs(u64::MAX / 8 + 1)),
    );
}

#[test]
fn first_check_delay_above_a_sixteenth_of_max_keeps_the_reclaimer() {
    // Eight times this no longer fits an `Instant` (`Instant + lag`).
    hooks_run_by_themselves(
        "bl-fc-16th",
        Domain::builder().first_check_delay(Duration::from_secs(u64::MAX / 16 + 1)),
    );
}

#[test]
fn stall_timeout_max_keeps_the_reclaimer() {
    hooks_run_by_themselves("bl-st-max", Domain::builder().stall_timeout(Duration::MAX));
}

#[test]
fn stall_timeout_above_half_max_keeps_the_reclaimer() {
    hooks_run_by_themselves("bl-st-half", Domain::builder().stall_timeout(above_half()));
}

/// With a huge `exit_poll` the reclaimer legitimately never polls for
/// exited threads' hooks (`DomainBuilder::exit_poll`): they wait for a
/// reclaim pass, `barrier` or `exit_barrier`. So: the reclaimer stays
/// alive and does its other work (it takes the batch of an idle live
/// thread after a flush latency and runs it), nothing panics, and
/// `barrier` runs the hooks.
fn hooks_wait_for_barrier(tag: &str, period: Duration) {
    record_panics();
    let mut d = Leaky(Some(
        Domain::builder()
            .exit_poll(Some(period))
            .thread_name(tag)
            .build(),
    ));
    let ran = Arc::new(AtomicUsize::new(0));
    for round in 1..=2 {
        exit_with_hook(&d, tag, &ran);
        // Let the reclaimer look, go round and fall asleep.
        thread::sleep(Duration::from_millis(100));
        assert_no_panics(tag);
        assert!(
            thread_named(tag),
            "{tag}: round {round}: the reclaimer thread is gone; {:?}",
            d.stats()
        );
        d.barrier();
        assert_eq!(ran.load(Ordering::Relaxed), round, "{tag}: {:?}", d.stats());
    }
    // A live thread that deferred a callback and went idle: the reclaimer
    // takes its batch after a flush latency (10 ms) and runs it.
    let run = Arc::new(AtomicUsize::new(0));
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let idle = {
        let (d, run) = (Domain::clone(&d), run.clone());
        thread::Builder::new()
            .name(format!("{tag}-i"))
            .spawn(move || {
                d.defer(move || {
                    run.fetch_add(1, Ordering::Relaxed);
                });
                let _ = stop_rx.recv();
            })
            .unwrap()
    };
    let ok = wait_until(|| run.load(Ordering::Relaxed) == 1);
    drop(stop_tx);
    idle.join().unwrap();
    assert!(
        ok,
        "{tag}: an idle thread's callback did not run by itself within {PATIENCE:?}; \
         reclaimer alive: {}; panics: {:?}; {:?}",
        thread_named(tag),
        panics_of(tag),
        d.stats()
    );
    assert_no_panics(tag);
    assert!(thread_named(tag), "{tag}: the reclaimer thread is gone");
    drop(d.0.take());
    assert_no_panics(tag);
}

#[test]
fn exit_poll_max_keeps_the_reclaimer() {
    hooks_wait_for_barrier("bl-ep-max", Duration::MAX);
}

#[test]
fn exit_poll_above_half_max_keeps_the_reclaimer() {
    hooks_wait_for_barrier("bl-ep-half", above_half());
}

#[test]
fn try_build_refuses_a_thread_name_with_a_nul_byte() {
    // Also without a reclaimer thread (documented on `thread_name`).
    for reclaimer in [Reclaimer::Thread, Reclaimer::Inline] {
        let built = panic::catch_unwind(|| {
            Domain::builder()
                .reclaimer(reclaimer)
                .thread_name("exitq\0reclaim")
                .try_build()
                .map(drop)
        });
        let err = match built {
            Ok(Err(e)) => e,
            Ok(Ok(())) => panic!("{reclaimer:?}: try_build accepted a thread name with a NUL byte"),
            Err(_) => panic!("{reclaimer:?}: try_build panicked on a thread name with a NUL byte"),
        };
        assert_eq!(
            err.kind(),
            io::ErrorKind::InvalidInput,
            "{reclaimer:?}: {err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("thread name") && message.contains("NUL"),
            "{reclaimer:?}: {message}"
        );
    }
}

#[test]
fn build_panics_with_a_clear_message_on_a_thread_name_with_a_nul_byte() {
    // `build` panics on what `try_build` refuses (its docs), with the
    // reason in the message.
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        Domain::builder().thread_name("exitq\0reclaim").build()
    }));
    let payload = match caught {
        Ok(_) => panic!("build accepted a thread name with a NUL byte"),
        Err(p) => p,
    };
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(
        message.starts_with("exitq: cannot build domain")
            && message.contains("thread name")
            && message.contains("NUL"),
        "{message}"
    );
}
