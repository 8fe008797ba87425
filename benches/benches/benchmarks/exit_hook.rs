//! Exit-hook cost: register a cleanup, then hand it over as a thread exit
//! does, against a mutex-protected registry (register = insert under the
//! lock; exit = lock and remove, run the cleanup).
//!
//! Timed (`iter_custom`): `threads` threads, started together, each doing
//! its share of `iters` register + exit cycles; then until every cleanup has
//! run (`exit_barrier` for exitq).
//!
//! * `exitq-retire`: `register_exit` (allocates the node) and
//!   `retire_thread` (the exact thread-exit procedure: one CAS push, one
//!   CAS release), then the reclaimer runs the hook after a grace period;
//! * `mutex-unregister`: `Mutex<HashMap<id, Box<dyn FnOnce>>>`; exit takes
//!   the lock, removes the entry and runs it.
//!
//! `*-threads` variants measure real thread exits: each iteration spawns a
//! thread that registers and exits (thread creation dominates; shown so the
//! hook cost can be read against it).
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use criterion::{criterion_group, Criterion};

use super::{bench_counted, count_into, THREADS};

type Registry = Mutex<HashMap<u64, Box<dyn FnOnce() + Send>>>;

fn exit_hooks(c: &mut Criterion) {
    let mut group = c.benchmark_group("exit_hook");
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);
    let domain = &exitq::Domain::new();
    for &threads in &THREADS {
        bench_counted(&mut group, "exitq-retire", threads, |ran, _| {
            let d = domain.clone();
            let producer = move |_, n| {
                for _ in 0..n {
                    d.register_exit(count_into(ran));
                    d.retire_thread();
                }
            };
            (producer, move || domain.exit_barrier())
        });
        bench_counted(&mut group, "mutex-unregister", threads, |ran, _| {
            let reg: Arc<Registry> = Arc::default();
            let producer = move |t: usize, n| {
                for i in 0..n {
                    let key = (t as u64) << 40 | i;
                    reg.lock().unwrap().insert(key, Box::new(count_into(ran)));
                    let hook = reg.lock().unwrap().remove(&key).unwrap();
                    hook();
                }
            };
            (producer, || {})
        });
    }
    // Real thread exits, `threads` spawning concurrently.
    for &threads in &THREADS {
        bench_counted(&mut group, "exitq-threads", threads, |ran, _| {
            let d = domain.clone();
            let producer = move |_, n| {
                for _ in 0..n {
                    let d = d.clone();
                    thread::spawn(move || d.register_exit(count_into(ran)))
                        .join()
                        .unwrap();
                }
            };
            (producer, move || domain.exit_barrier())
        });
        bench_counted(&mut group, "mutex-threads", threads, |ran, _| {
            let reg: Arc<Registry> = Arc::default();
            let next = Arc::new(AtomicU64::new(0));
            let producer = move |_, n| {
                for _ in 0..n {
                    let (reg, next) = (reg.clone(), next.clone());
                    thread::spawn(move || {
                        let key = next.fetch_add(1, Ordering::Relaxed);
                        reg.lock().unwrap().insert(key, Box::new(count_into(ran)));
                        // What a thread-exit destructor does with a locked registry.
                        struct Unregister(Arc<Registry>, u64);
                        impl Drop for Unregister {
                            fn drop(&mut self) {
                                let hook = self.0.lock().unwrap().remove(&self.1);
                                if let Some(hook) = hook {
                                    hook();
                                }
                            }
                        }
                        let _on_exit = Unregister(reg, key);
                    })
                    .join()
                    .unwrap();
                }
            };
            (producer, || {})
        });
    }
    group.finish();
}

criterion_group!(benches, exit_hooks);
