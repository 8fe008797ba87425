//! Multi-threaded stress: millions of callbacks (release; scaled down in
//! debug builds) and waves of exiting threads, every callback and hook
//! checked to run exactly once.
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use exitq::{Domain, Expedite, Reclaimer};

const SCALE: usize = if cfg!(debug_assertions) { 20 } else { 1 };

fn exactly_once(name: &str, domain: Domain, producers: usize, per_producer: usize) {
    let total = producers * per_producer;
    let hits: Arc<Vec<AtomicU8>> = Arc::new((0..total).map(|_| AtomicU8::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    // Readers keep grace periods honest (they must end for any to finish).
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (d, stop) = (domain.clone(), stop.clone());
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _g = d.read();
                    let _h = d.read();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let (d, hits) = (domain.clone(), hits.clone());
            thread::spawn(move || {
                for i in p * per_producer..(p + 1) * per_producer {
                    let hits = hits.clone();
                    d.defer(move || {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    if i % 100_000 == 0 {
                        d.synchronize();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    domain.barrier();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let wrong: Vec<(usize, u8)> = hits
        .iter()
        .enumerate()
        .map(|(i, h)| (i, h.load(Ordering::Relaxed)))
        .filter(|&(_, h)| h != 1)
        .take(10)
        .collect();
    assert!(
        wrong.is_empty(),
        "{name}: callbacks not run exactly once (index, runs): {wrong:?}"
    );
    let s = domain.stats();
    assert_eq!(s.callbacks_run, total as u64, "{name}: {s:?}");
    assert_eq!(s.pending, 0, "{name}: {s:?}");
    eprintln!("{name}: {total} callbacks, {s:?}");
}

#[test]
fn millions_of_callbacks_exactly_once() {
    exactly_once("thread", Domain::new(), 4, 1_000_000 / SCALE);
}

#[test]
fn exactly_once_inline_reclaimer() {
    exactly_once(
        "inline",
        Domain::builder().reclaimer(Reclaimer::Inline).build(),
        4,
        250_000 / SCALE,
    );
}

#[test]
fn exactly_once_fence_fallback_small_batches() {
    exactly_once(
        "fallback",
        Domain::builder()
            .expedite(Expedite::Fallback)
            .batch_size(7)
            .build(),
        3,
        200_000 / SCALE,
    );
}

#[test]
fn waves_of_exiting_threads() {
    let waves = 40 / SCALE.min(4);
    let per_wave = 32;
    let domain = Domain::new();
    let hooks_ran = Arc::new(AtomicUsize::new(0));
    let deferred_ran = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (d, stop) = (domain.clone(), stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _g = d.read();
            }
        })
    };
    for wave in 0..waves {
        let threads: Vec<_> = (0..per_wave)
            .map(|_| {
                let (d, h, r) = (domain.clone(), hooks_ran.clone(), deferred_ran.clone());
                thread::spawn(move || {
                    let h = h.clone();
                    d.register_exit(move || {
                        h.fetch_add(1, Ordering::Relaxed);
                    });
                    for _ in 0..100 {
                        let r = r.clone();
                        d.defer(move || {
                            r.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                    let _g = d.read();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        if wave % 8 == 7 {
            domain.exit_barrier();
            assert_eq!(hooks_ran.load(Ordering::Relaxed), (wave + 1) * per_wave);
        }
    }
    domain.exit_barrier();
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(hooks_ran.load(Ordering::Relaxed), waves * per_wave);
    assert_eq!(deferred_ran.load(Ordering::Relaxed), waves * per_wave * 100);
    let s = domain.stats();
    assert_eq!(s.exits_run, (waves * per_wave) as u64, "{s:?}");
    assert!(
        s.participants <= (per_wave + 4) as u64,
        "records not reused: {s:?}"
    );
}
