//! Grace periods of `Domain`, each guarantee with a test that fails if it
//! is broken: `synchronize` waits for every read section that started
//! before it (guards, nested guards, a registered `Reader`'s) and for no
//! later one, refuses inside a section, reports a stalled reader instead of
//! hanging silently, and no callback runs while a prior reader still reads
//! its object. The rest of `Domain`'s guarantees: `tests/domain.rs`.
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use exitq::Domain;

mod domains_util;
mod skip_util;
mod stall_util;
use domains_util::domains;

/// A thread holds a read section (entered by `hold`, which calls
/// `wait_inside` while inside and leaves after it returns); `synchronize`
/// on this thread must not return before the holder has left.
fn synchronize_waits_for_holder(
    name: &str,
    d: &Domain,
    hold: impl FnOnce(Domain, &dyn Fn()) + Send + 'static,
) {
    let inside = Arc::new(AtomicBool::new(false));
    let left = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let holder = {
        let (d, inside, left, release) = (d.clone(), inside.clone(), left.clone(), release.clone());
        thread::spawn(move || {
            hold(d, &|| {
                inside.store(true, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
                left.store(true, Ordering::SeqCst);
            })
        })
    };
    while !inside.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    let releaser = stall_util::release_after(&release, Duration::from_millis(30));
    d.synchronize();
    assert!(
        left.load(Ordering::SeqCst),
        "{name}: synchronize returned while a prior reader was inside"
    );
    holder.join().unwrap();
    releaser.join().unwrap();
}

#[test]
fn synchronize_waits_for_a_reader_that_started_before() {
    for (name, d) in domains() {
        synchronize_waits_for_holder(name, &d, |d, wait_inside| {
            let _guard = d.read();
            wait_inside();
        });
    }
}

#[test]
fn synchronize_does_not_wait_for_later_readers_or_nested_guards_of_others() {
    let d = Domain::new();
    // Nested guards on this thread, released before synchronize.
    {
        let _a = d.read();
        let _b = d.read();
    }
    d.synchronize();
    d.synchronize_expedited();
    let s = d.stats();
    assert_eq!(s.synchronize_calls, 2);
    assert_eq!(s.expedited, 1);
    assert!(s.grace_periods >= 2);
}

#[test]
#[should_panic(expected = "inside a read-side critical section")]
fn synchronize_inside_a_guard_panics_instead_of_deadlocking() {
    let d = Domain::new();
    let _g = d.read();
    d.synchronize();
}

#[test]
fn a_stalled_reader_is_reported_not_a_silent_hang() {
    let (d, reports) = stall_util::reporting_domain();
    let release = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = {
        let (d, release) = (d.clone(), release.clone());
        thread::Builder::new()
            .name("slow-reader".into())
            .spawn(move || {
                let _g = d.read();
                ready_tx.send(()).unwrap();
                while !release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(1));
                }
            })
            .unwrap()
    };
    ready_rx.recv().unwrap();
    let releaser = stall_util::release_after_first_report(&release, &reports);
    d.synchronize();
    releaser.join().unwrap();
    reader.join().unwrap();
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].thread_name.as_deref(), Some("slow-reader"));
    assert_eq!(reports[0].held_by, exitq::HeldBy::Guard);
    assert!(reports[0].waited >= Duration::from_millis(20));
    assert_eq!(d.stats().stalls, 1);
}

#[test]
fn callbacks_never_run_while_a_prior_reader_reads_the_object() {
    // Readers validate a canary of the object they reach through an
    // AtomicPtr; the writer swaps in a new object and defers poisoning and
    // freeing the old one. A callback that ran too early would make a reader
    // see the poison (or a use-after-free under miri/ASan).
    const CANARY: u64 = 0x5EED_CAFE_F00D_BEEF;
    const POISON: u64 = 0xDEAD_DEAD_DEAD_DEAD;
    struct Obj {
        canary: AtomicU64,
    }
    for (name, d) in domains() {
        let updates = if cfg!(debug_assertions) {
            20_000
        } else {
            200_000
        };
        let shared = Arc::new(std::sync::atomic::AtomicPtr::new(Box::into_raw(Box::new(
            Obj {
                canary: AtomicU64::new(CANARY),
            },
        ))));
        let stop = Arc::new(AtomicBool::new(false));
        let bad = Arc::new(AtomicUsize::new(0));
        let reads = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (d, shared, stop, bad, reads) = (
                    d.clone(),
                    shared.clone(),
                    stop.clone(),
                    bad.clone(),
                    reads.clone(),
                );
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _g = d.read();
                        let p = shared.load(Ordering::Acquire);
                        for _ in 0..4 {
                            // SAFETY: freed only after a grace period.
                            if unsafe { (*p).canary.load(Ordering::Relaxed) } != CANARY {
                                bad.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Keep updating until the readers have overlapped the updates a fair
        // amount (on a loaded 2-CPU machine they may start late).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut done = 0u64;
        while done < updates
            || (reads.load(Ordering::Relaxed) < 10_000 && std::time::Instant::now() < deadline)
        {
            let new = Box::into_raw(Box::new(Obj {
                canary: AtomicU64::new(CANARY),
            }));
            let old = shared.swap(new, Ordering::AcqRel) as usize;
            d.defer(move || {
                let old = old as *mut Obj;
                // SAFETY: unreachable for readers that start from now on;
                // earlier readers are gone (grace period).
                unsafe {
                    (*old).canary.store(POISON, Ordering::Relaxed);
                    drop(Box::from_raw(old));
                }
            });
            done += 1;
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        d.barrier();
        assert_eq!(
            bad.load(Ordering::Relaxed),
            0,
            "{name}: a reader saw a poisoned object"
        );
        let reads = reads.load(Ordering::Relaxed);
        assert!(
            reads >= 10_000,
            "{name}: only {reads} reads overlapped the updates"
        );
        assert_eq!(d.stats().callbacks_run, done, "{name}");
        // SAFETY: all threads are gone.
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
    }
}

#[test]
fn guards_dropped_out_of_order_keep_the_section_open() {
    let d = Domain::new();
    let (in_tx, in_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let left = Arc::new(AtomicBool::new(false));
    let reader = {
        let (d, left) = (d.clone(), left.clone());
        thread::spawn(move || {
            let outer = d.read();
            let inner = d.read();
            drop(outer); // out of order: the section must stay open
            in_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            left.store(true, Ordering::SeqCst);
            drop(inner);
        })
    };
    in_rx.recv().unwrap();
    let releaser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(30));
        go_tx.send(()).unwrap();
    });
    d.synchronize();
    assert!(
        left.load(Ordering::SeqCst),
        "the inner guard was not waited for"
    );
    reader.join().unwrap();
    releaser.join().unwrap();
}

/// A registered `Reader`'s guard holds grace periods like
/// `Domain::read`'s (also with a domain guard nested in it), a forgotten
/// one ends with its reader, and the record is reused after the reader
/// drops.
#[test]
fn a_registered_readers_guards_hold_grace_periods() {
    for (name, d) in domains() {
        synchronize_waits_for_holder(name, &d, |d, wait_inside| {
            let mut reader = d.reader();
            let section = reader.read();
            // A domain guard nested inside, dropped first: the reader's
            // section still holds the grace period.
            drop(d.read());
            wait_inside();
            drop(section);
            // A forgotten guard's section ends when its reader drops.
            std::mem::forget(reader.read());
        });
        // The holder's reader record was released: a new reader reuses it.
        let before = d.stats().participants;
        for _ in 0..10 {
            let mut reader = d.reader();
            drop(reader.read());
        }
        assert_eq!(d.stats().participants, before, "{name}: records reused");
        d.synchronize();
    }
}

/// A producer that defers `n` callbacks inside its `Reader`'s sections;
/// all have run when it returns the domain's stats.
fn produce_under_a_reader(d: &Domain, n: usize) -> exitq::DomainStats {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut reader = d.reader();
    for _ in 0..n {
        let _g = reader.read();
        let ran = ran.clone();
        d.defer(move || {
            ran.fetch_add(1, Ordering::Relaxed);
        });
    }
    drop(reader);
    d.barrier();
    assert_eq!(ran.load(Ordering::Relaxed), n, "every callback ran once");
    d.stats()
}

/// Whether grace periods may complete without the heavy barrier here
/// (membarrier mode); if not, says so (a skip).
fn barrier_free_possible() -> bool {
    let possible = exitq::membarrier_available();
    if !possible {
        skip_util::skip(
            "membarrier(2) unavailable: in fence mode every grace period makes its fence",
        );
    }
    possible
}

/// A producer's run: some of its grace periods completed without the
/// heavy barrier.
fn assert_some_barrier_free(s: &exitq::DomainStats) {
    assert!(s.grace_periods >= 10, "grace periods ran: {s:?}");
    assert!(
        s.heavy_barriers < s.grace_periods,
        "some grace period completed without a membarrier: {s:?}"
    );
}

/// The grace periods a busy producer's polls start complete without the
/// heavy barrier (`exitq/src/past.rs`): its records show its sections
/// entered after each start, and its main record is refreshed at its
/// seals. (A few are led by `barrier` or a reclaimer takeover, with it.)
#[test]
fn a_busy_producers_grace_periods_need_no_heavy_barrier() {
    if !barrier_free_possible() {
        return;
    }
    let d = Domain::builder().batch_size(16).build();
    let s = produce_under_a_reader(&d, 200_000);
    assert_some_barrier_free(&s);
}

/// A producer's run (`produce_under_a_reader`) while another thread,
/// registered in the domain by `block`, blocks: `block` calls its second
/// argument, which returns once the producer is done.
fn produce_beside_a_blocked_thread(
    d: &Domain,
    n: usize,
    block: impl FnOnce(&Domain, &dyn Fn()) + Send + 'static,
) -> exitq::DomainStats {
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let blocked = {
        let d = d.clone();
        thread::spawn(move || {
            block(&d, &|| {
                blocked_tx.send(()).unwrap();
                let _ = done_rx.recv();
            })
        })
    };
    blocked_rx.recv().unwrap();
    let s = produce_under_a_reader(d, n);
    drop(done_tx);
    blocked.join().unwrap();
    s
}

/// A registered thread that stays idle (a parked worker): its record never
/// shows a newer epoch, so no grace period may complete without the heavy
/// barrier (before or after the epoch's store), whatever the producer's
/// records show.
#[test]
fn with_an_idle_registered_thread_every_grace_period_makes_the_heavy_barrier() {
    for (name, d) in domains() {
        let s = produce_beside_a_blocked_thread(&d, 100_000, |d, block| {
            drop(d.read()); // claims the thread's record, before any grace period
            block();
        });
        // With the reclaimer thread, the producer's polls drive many; the
        // inline reclaimer cannot wait inside the sections (one, at the end).
        let least = if name == "inline" { 1 } else { 10 };
        assert!(s.grace_periods >= least, "{name}: grace periods ran: {s:?}");
        assert!(
            s.heavy_barriers >= s.grace_periods,
            "{name}: a grace period completed without the heavy barrier while a \
             record showed no newer epoch: {s:?}"
        );
    }
}

/// The same idle thread, offline while it blocks (`exitq::thread_offline`,
/// `Domain::thread_offline`, `Reader::offline`, `QsbrReader::offline`, as
/// a server waiting for a request): every scan finds its records past, so the producer's grace periods need no heavy barrier on
/// its account; after the block it uses the domain again (back online by
/// itself) and its guard holds a grace period.
#[test]
fn an_idle_thread_offline_does_not_make_grace_periods_need_the_heavy_barrier() {
    if !barrier_free_possible() {
        return;
    }
    type Block = fn(&Domain, &dyn Fn());
    let ways: [(&str, Block); 4] = [
        ("exitq::thread_offline", |d, block| {
            d.defer(|| ()); // a batch and a record, as a worker's job leaves
            drop(d.read());
            exitq::thread_offline();
            block();
            assert_back_online(d);
        }),
        ("Domain::thread_offline", |d, block| {
            drop(d.read());
            d.thread_offline();
            block();
            assert_back_online(d);
        }),
        ("Reader::offline", |d, block| {
            let mut reader = d.reader();
            drop(reader.read());
            reader.offline(block);
            drop(reader.read());
        }),
        ("QsbrReader::offline", |d, block| {
            let mut reader = d.qsbr_reader();
            reader.offline(block);
            reader.quiescent();
        }),
    ];
    for (name, block) in ways {
        let d = Domain::builder().batch_size(16).build();
        let s = produce_beside_a_blocked_thread(&d, 200_000, block);
        assert!(s.grace_periods >= 10, "{name}: grace periods ran: {s:?}");
        assert!(
            s.heavy_barriers < s.grace_periods,
            "{name}: with the idle thread offline, some grace period completes \
             without a membarrier: {s:?}"
        );
    }
}

/// A `Reader` whose guard was forgotten, offline while its thread blocks:
/// going offline ends the forgotten section (as the reader's next `read`
/// would), so a grace period completes while the thread blocks; the
/// thread leaves its block only when told, or after 60 s (a section left
/// held: `synchronize` returns only then, and the assertion fails).
#[test]
fn a_readers_offline_ends_a_forgotten_guards_section() {
    for (name, d) in domains() {
        let (blocked_tx, blocked_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let left = Arc::new(AtomicBool::new(false));
        let blocked = {
            let (d, left) = (d.clone(), left.clone());
            thread::spawn(move || {
                let mut reader = d.reader();
                std::mem::forget(reader.read());
                reader.offline(|| {
                    blocked_tx.send(()).unwrap();
                    let _ = done_rx.recv_timeout(Duration::from_secs(60));
                    left.store(true, Ordering::SeqCst);
                });
            })
        };
        blocked_rx.recv().unwrap();
        d.synchronize();
        assert!(
            !left.load(Ordering::SeqCst),
            "{name}: synchronize waited for a forgotten guard's section of a reader offline"
        );
        drop(done_tx);
        blocked.join().unwrap();
    }
}

/// The calling thread, back from offline by using the domain: a guard it
/// takes now holds a grace period another thread waits for.
fn assert_back_online(d: &Domain) {
    let guard = d.read();
    let waited = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (d, waited) = (d.clone(), waited.clone());
        thread::spawn(move || {
            d.synchronize();
            waited.store(true, Ordering::SeqCst);
        })
    };
    thread::sleep(Duration::from_millis(20));
    assert!(
        !waited.load(Ordering::SeqCst),
        "synchronize returned while a guard taken back online was alive"
    );
    drop(guard);
    waiter.join().unwrap();
}

/// An `exitq::pool` worker parks offline (`pool/worker.rs`): a producer on
/// the pool's domain, whose exit hooks gave the worker a record, is not
/// made to pay the heavy barrier for every grace period while it sleeps.
#[test]
#[cfg(feature = "pool")]
fn a_parked_pool_worker_does_not_make_grace_periods_need_the_heavy_barrier() {
    if !barrier_free_possible() {
        return;
    }
    let d = Domain::builder().batch_size(16).build();
    let pool = exitq::pool::Pool::builder()
        .domain(d.clone())
        .max_workers(1)
        .spin(Duration::ZERO)
        .keep_alive(Duration::from_secs(600))
        .build()
        .unwrap();
    let d2 = d.clone();
    pool.spawn(move || drop(d2.read()))
        .ok()
        .unwrap()
        .join()
        .unwrap();
    while pool.stats().idle == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    let s = produce_under_a_reader(&d, 200_000);
    assert_some_barrier_free(&s);
    pool.shutdown();
}

/// Callbacks that defer give the thread running them a record: here the
/// reclaimer thread's, running an exited thread's callback. Its record is
/// offline while it sleeps and shows the epoch it has seen at each of its
/// rounds (`exitq/src/past.rs`), so a producer's grace periods still
/// complete without the heavy barrier (before, once the reclaimer had a
/// record, idle between its rounds, every one made it).
#[test]
fn a_reclaimer_whose_callbacks_deferred_does_not_make_every_grace_period_need_the_heavy_barrier() {
    if !barrier_free_possible() {
        return;
    }
    let d = Domain::builder().batch_size(16).build();
    let ran = Arc::new(AtomicUsize::new(0));
    {
        let (d, ran) = (d.clone(), ran.clone());
        thread::spawn(move || {
            let d2 = d.clone();
            d.defer(move || {
                d2.defer(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                })
            });
        })
        .join()
        .unwrap();
    }
    // The exited thread's callback runs on the reclaimer thread (a pass),
    // and its defer claims the reclaimer a record; the second stage then
    // runs there too.
    while ran.load(Ordering::Relaxed) == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    let s = produce_under_a_reader(&d, 200_000);
    assert_some_barrier_free(&s);
}
