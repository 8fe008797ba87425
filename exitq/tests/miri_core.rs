//! The domain's unsafe core under miri (scripts/test.d/30-miri.sh): small
//! scenarios that drive every raw-pointer and `UnsafeCell` path — the
//! batch moving between the open slot, the sealed queue, a stealer and the
//! domain's list, records claimed and released, callbacks taken out of a
//! batch and run elsewhere — so miri's data-race, use-after-free,
//! provenance and leak checks see them. Also run as plain tests (larger
//! under `cfg(not(miri))`).
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;

use exitq::Domain;

mod miri_util;
use miri_util::domains;

const N: usize = if cfg!(miri) { 40 } else { 4000 };

/// Frees boxes the thread allocated; every one exactly once (miri: no
/// leak, no double free).
#[test]
fn deferred_frees_on_one_thread() {
    for (name, d) in domains() {
        let ran = Arc::new(AtomicUsize::new(0));
        let mut reader = d.reader();
        for i in 0..N {
            let b = Box::new([i; 4]);
            let ran = ran.clone();
            if i % 3 == 0 {
                let _g = reader.read();
                d.defer(move || {
                    assert_eq!(b[3], i);
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            } else {
                let _g = d.read();
                d.defer(move || {
                    drop(b);
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
            if i % 17 == 0 {
                d.flush();
            }
        }
        drop(reader);
        d.barrier();
        assert_eq!(ran.load(Ordering::Relaxed), N, "{name}");
    }
}

/// One thread defers while another calls `barrier` (steals its batches
/// through the handshake) and a third exits with hooks and batches.
#[test]
fn defer_barrier_and_exit_on_three_threads() {
    for (name, d) in domains() {
        let ran = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel::<()>();
        let producer = {
            let (d, ran) = (d.clone(), ran.clone());
            thread::spawn(move || {
                for i in 0..N {
                    let b = Box::new(i);
                    let ran = ran.clone();
                    d.defer(move || {
                        drop(b);
                        ran.fetch_add(1, Ordering::Relaxed);
                    });
                }
                tx.send(()).unwrap();
            })
        };
        let exiter = {
            let (d, ran) = (d.clone(), ran.clone());
            thread::spawn(move || {
                let r = ran.clone();
                d.register_exit(move || {
                    r.fetch_add(1, Ordering::Relaxed);
                });
                let ran = ran.clone();
                d.defer(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            })
        };
        for _ in 0..3 {
            d.barrier();
        }
        rx.recv().unwrap();
        producer.join().unwrap();
        exiter.join().unwrap();
        d.barrier();
        assert_eq!(ran.load(Ordering::Relaxed), N + 2, "{name}");
    }
}

/// Dropping the last handle with batches still held by a live thread:
/// shutdown steals and runs them; the thread's record is orphaned and its
/// hook runs at its exit.
#[test]
fn shutdown_with_a_live_thread() {
    let ran = Arc::new(AtomicUsize::new(0));
    let d = Domain::builder().batch_size(8).build();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let t = {
        let (d, ran) = (d.clone(), ran.clone());
        thread::spawn(move || {
            let r = ran.clone();
            d.register_exit(move || {
                r.fetch_add(100, Ordering::Relaxed);
            });
            for _ in 0..5 {
                let ran = ran.clone();
                d.defer(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
            drop(d);
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        })
    };
    held_rx.recv().unwrap();
    drop(d);
    assert_eq!(
        ran.load(Ordering::Relaxed),
        5,
        "shutdown ran the thread's callbacks"
    );
    go_tx.send(()).unwrap();
    t.join().unwrap();
    assert_eq!(
        ran.load(Ordering::Relaxed),
        105,
        "the hook ran at the thread's exit"
    );
}

/// A record's whole life with every kind of owner (`record.rs`, "A
/// record's life"): a thread holds a main record and a `Reader` in a
/// thread-local destroyed after exitq's own (so its exit marks the
/// reader's record retired, and the reader's drop releases it later);
/// later threads claim both records again (the claim resets every owner
/// field) and read and defer on them. Under miri: no race or
/// use-after-free on the marks, the resets and the thread lists.
#[test]
fn records_pass_between_owners_of_every_kind() {
    use std::cell::RefCell;
    thread_local! {
        // Initialised first, destroyed after exitq's own thread-local.
        static READER: RefCell<Option<exitq::Reader>> = const { RefCell::new(None) };
    }
    let d = Domain::builder().batch_size(2).build();
    let ran = Arc::new(AtomicUsize::new(0));
    for round in 0..3 {
        let (d, ran) = (d.clone(), ran.clone());
        thread::spawn(move || {
            READER.with(|_| ());
            for _ in 0..3 {
                let ran = ran.clone();
                let _g = d.read();
                d.defer(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
            let mut r = d.reader();
            drop(r.read());
            if round == 1 {
                // A guard taken in teardown, after exitq's destructor.
                READER.with(|slot| *slot.borrow_mut() = Some(r));
            }
        })
        .join()
        .unwrap();
    }
    d.barrier();
    assert_eq!(ran.load(Ordering::Relaxed), 9);
    assert_eq!(d.stats().participants, 2, "both records reused");
}

/// Going offline and back (`thread_offline`, `Domain::thread_offline`,
/// `Reader::offline`) on a thread with records in two domains, one of them
/// dropped meanwhile (its record orphaned, still in the thread's list when
/// `thread_offline` walks it), while another thread runs grace periods;
/// the thread exits offline. Under miri: the walk, the emptied cache and
/// the lookup that comes back online touch only live records.
#[test]
fn offline_and_back_with_an_orphaned_record() {
    let a = Domain::builder().batch_size(2).build();
    let ran = Arc::new(AtomicUsize::new(0));
    let (a2, ran2) = (a.clone(), ran.clone());
    let user = thread::spawn(move || {
        let b = Domain::new();
        drop(b.read());
        let count = |ran: &Arc<AtomicUsize>| {
            let ran = ran.clone();
            move || {
                ran.fetch_add(1, Ordering::Relaxed);
            }
        };
        a2.defer(count(&ran2));
        let mut reader = a2.reader();
        drop(reader.read());
        exitq::thread_offline();
        drop(b); // orphans the thread's record in `b`
        reader.offline(exitq::thread_offline);
        {
            let _g = a2.read(); // back online in `a`
            a2.defer(count(&ran2));
        }
        a2.thread_offline();
        drop(reader.read());
        a2.defer(count(&ran2));
        exitq::thread_offline(); // exits offline
    });
    let a3 = a.clone();
    let waiter = thread::spawn(move || a3.synchronize());
    user.join().unwrap();
    waiter.join().unwrap();
    a.barrier();
    assert_eq!(ran.load(Ordering::Relaxed), 3);
}

/// Barriers nested across domains (a callback of A runs B's barrier, whose
/// callback calls A's barrier and must panic): the run frames linked on
/// the running thread's stack, under miri.
#[test]
fn barriers_nested_across_domains_refuse_without_waiting() {
    let a = Domain::builder().batch_size(2).build();
    let b = Domain::builder()
        .reclaimer(exitq::Reclaimer::Inline)
        .build();
    let refused = Arc::new(AtomicUsize::new(0));
    let (a2, b2, r) = (a.clone(), b.clone(), refused.clone());
    a.defer(move || {
        let b3 = b2.clone();
        b2.defer(move || {
            if std::panic::catch_unwind(|| a2.barrier()).is_err() {
                r.fetch_add(1, Ordering::Relaxed);
            }
        });
        b3.barrier();
    });
    a.barrier();
    assert_eq!(refused.load(Ordering::Relaxed), 1);
}
