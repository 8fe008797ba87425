//! CPU time per deferred callback, all run: where criterion's `defer`
//! group gives wall time, this gives the producers' and the whole
//! process's CPU time (getrusage) per callback, which a noisy shared
//! machine disturbs less, and the domain's counters.
//!
//!     cargo run --release -p benches --example defer_cpu -- [exitq|crossbeam] [THREADS] [CALLBACKS] [ROUNDS]
//!
//! Defaults: exitq, 1 thread, 20 M callbacks, 3 rounds. `BACKLOG=N` sets
//! the domain's backlog limit.
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: `getrusage` writes one `rusage`; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a `rusage`.
    unsafe { libc::getrusage(who, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> Result<T, String> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| format!("argument {i}: cannot parse '{s}'")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let parsed = (|| {
        let which = args.get(1).cloned().unwrap_or_else(|| "exitq".into());
        if which != "exitq" && which != "crossbeam" {
            return Err(format!("unknown kind '{which}' (exitq or crossbeam)"));
        }
        let threads: usize = arg(&args, 2, 1)?;
        let n: u64 = arg(&args, 3, 20_000_000)?;
        let rounds: usize = arg(&args, 4, 3)?;
        if threads == 0 || n == 0 || rounds == 0 {
            return Err("THREADS, CALLBACKS and ROUNDS must be positive".into());
        }
        Ok((which, threads, n, rounds))
    })();
    let (which, threads, n, rounds) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("defer_cpu: {e}");
            return ExitCode::from(2);
        }
    };
    let mut builder = exitq::Domain::builder();
    if let Some(b) = std::env::var("BACKLOG").ok().and_then(|b| b.parse().ok()) {
        builder = builder.backlog_limit(b);
    }
    let domain = builder.build();
    let per = n / threads as u64;
    let total = per * threads as u64;
    for _ in 0..rounds {
        let ran: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let (t0, c0) = (Instant::now(), cpu(libc::RUSAGE_SELF));
        let producer_cpu: Vec<Duration> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (d, which) = (domain.clone(), which.as_str());
                    s.spawn(move || {
                        let c = cpu(libc::RUSAGE_THREAD);
                        if which == "exitq" {
                            for _ in 0..per {
                                d.defer(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                });
                            }
                        } else {
                            for _ in 0..per {
                                crossbeam_epoch::pin().defer(move || {
                                    ran.fetch_add(1, Ordering::Relaxed);
                                });
                            }
                            crossbeam_epoch::pin().flush();
                        }
                        cpu(libc::RUSAGE_THREAD) - c
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        if which == "exitq" {
            domain.barrier();
        } else {
            while ran.load(Ordering::Relaxed) < total {
                crossbeam_epoch::pin().flush();
            }
        }
        let (wall, process) = (t0.elapsed(), cpu(libc::RUSAGE_SELF) - c0);
        let ns = |d: Duration, k: u64| d.as_nanos() as f64 / k as f64;
        println!(
            "{which} threads={threads}: all run {:.2} ns/callback wall, busiest producer {:.2} ns/callback CPU, process {:.2} ns/callback CPU",
            ns(wall, total),
            ns(*producer_cpu.iter().max().unwrap(), per),
            ns(process, total),
        );
    }
    if which == "exitq" {
        println!("{:?}", domain.stats());
    }
    ExitCode::SUCCESS
}
