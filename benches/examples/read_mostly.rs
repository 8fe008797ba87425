//! The read-mostly pointer as a whole process: one writer thread replaces
//! an 80-byte configuration as fast as it can, reader threads load the
//! current one and validate every word of it, for a fixed time.
//!
//!     cargo run --release -p benches --example read_mostly -- IMPL READERS [SECONDS [WRITE_GAP_US]]
//!
//! WRITE_GAP_US (default 0: as fast as it can) paces the writer: one write
//! per that many microseconds, so that every implementation's readers see
//! the same rate of change (a faster writer invalidates the readers' cache
//! lines more often, so full-speed read rates also measure the writer).
//!
//! IMPL is one of:
//! * `exitq`: an `RcuCell` read through a `Reader` per reader thread
//!   (`Reader::read` + `RcuCell::load`); the writer `store`s (the old value
//!   is dropped after a grace period);
//! * `exitq-qsbr`: the same cell read through a `QsbrReader` per reader
//!   thread (`RcuCell::load(&reader)`, no section), announcing a quiescent
//!   state after every read: what a server does once per request;
//! * `exitq-qsbr-per64`: the same, announcing one quiescent state per 64
//!   reads (an extra row: a loop that reads many times per iteration);
//! * `exitq-cache`: the same cell read through a `CellCache` per reader
//!   thread (`RcuCell::cache`, `CellCache::load`: the kept value while the
//!   cell's pointer is unchanged, arc-swap's `Cache` with a hazard pointer);
//! * `arc-swap`: an `ArcSwap`, readers `load`, the writer `store`s;
//! * `arc-swap-cache`: the same with arc-swap's `Cache` per reader (a load
//!   that only re-reads the shared pointer while it is unchanged);
//! * `crossbeam`: crossbeam-epoch's `Atomic` with a registered
//!   `LocalHandle` per thread, `pin` + `load`; the writer `swap`s and
//!   `defer_destroy`s the old value;
//! * `seize`: an `AtomicPtr` under a seize `Collector` (batch size
//!   `SEIZE_BATCH`, default 256), `enter` + `protect`; the writer `swap`s
//!   and `defer_retire`s the old value.
//!
//! Prints `IMPL READERS SECONDS READS_PER_S WRITES_PER_S READS WRITES`
//! (rates over the timed phase, then the totals, which the script divides
//! by the whole process's wall time); exits 1 if a reader saw an
//! inconsistent configuration. `scripts/bench-read-mostly.sh`
//! interleaves the implementations.
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// The configuration: 80 bytes, every word derived from `seq`, so a reader
/// can tell a torn or freed one.
#[derive(Clone)]
struct Config {
    seq: u64,
    words: [u64; 8],
    check: u64,
}

impl Config {
    fn new(seq: u64) -> Config {
        let mut words = [0u64; 8];
        let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for w in &mut words {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *w = x;
        }
        let check = words.iter().fold(seq, |a, w| a ^ w);
        Config { seq, words, check }
    }

    /// Whether every word is as `new` wrote it.
    #[inline(always)]
    fn valid(&self) -> bool {
        self.words.iter().fold(self.seq, |a, w| a ^ w) == self.check
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // Poison: a reader that still sees this object fails validation.
        self.check = !self.check;
        black_box(&mut self.check);
    }
}

/// What one implementation provides: a reader loop and a writer loop, each
/// run until `stop`; each returns its operation count (reads return also
/// the invalid ones seen).
trait Bench: Send + Sync + 'static {
    fn read_loop(&self, stop: &AtomicBool) -> (u64, u64);
    fn write_loop(&self, stop: &AtomicBool, pace: &mut Pace) -> u64;
    /// Prints the implementation's own counters, if it has any
    /// (`EXITQ_STATS=1`).
    fn report(&self) {}
}

/// The writer's pacing: one write per `gap` (zero: no pacing).
struct Pace {
    gap: Duration,
    next: Instant,
}

impl Pace {
    /// Waits (spinning: a sleep is far coarser than the gaps used) until
    /// the next write is due.
    #[inline]
    fn wait(&mut self) {
        if self.gap.is_zero() {
            return;
        }
        self.next += self.gap;
        while Instant::now() < self.next {
            std::hint::spin_loop();
        }
    }
}

/// Checks one loaded configuration; counts it as a read.
#[inline(always)]
fn check(c: &Config, reads: &mut u64, bad: &mut u64) {
    *bad += u64::from(!c.valid());
    *reads += 1;
}

/// Runs `body` until `stop`, looking at the flag every 64 iterations.
#[inline(always)]
fn until(stop: &AtomicBool, mut body: impl FnMut()) {
    // Relaxed: a flag; the counts are handed over by `join`.
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..64 {
            body();
        }
    }
}

struct Exitq {
    domain: exitq::Domain,
    cell: exitq::RcuCell<Config>,
}

impl Exitq {
    fn new() -> Exitq {
        let domain = exitq::Domain::new();
        let cell = exitq::RcuCell::new(&domain, Config::new(1));
        Exitq { domain, cell }
    }
}

impl Bench for Exitq {
    fn report(&self) {
        eprintln!("{:#?}", self.domain.stats());
    }
    fn read_loop(&self, stop: &AtomicBool) -> (u64, u64) {
        let mut reader = self.domain.reader();
        let (mut reads, mut bad) = (0, 0);
        until(stop, || {
            let guard = reader.read();
            check(self.cell.load(&guard), &mut reads, &mut bad);
        });
        (reads, bad)
    }
    fn write_loop(&self, stop: &AtomicBool, pace: &mut Pace) -> u64 {
        let mut seq = 1;
        until(stop, || {
            seq += 1;
            self.cell.store(Config::new(seq));
            pace.wait();
        });
        seq - 1
    }
}

/// exitq with a `QsbrReader` per reader thread, announcing a quiescent
/// state every `per` reads.
struct ExitqQsbr {
    exitq: Exitq,
    per: u32,
}

impl Bench for ExitqQsbr {
    fn report(&self) {
        self.exitq.report();
    }
    fn read_loop(&self, stop: &AtomicBool) -> (u64, u64) {
        let mut reader = self.exitq.domain.qsbr_reader();
        let (mut reads, mut bad) = (0, 0);
        if self.per == 1 {
            until(stop, || {
                check(self.exitq.cell.load(&reader), &mut reads, &mut bad);
                reader.quiescent();
            });
        } else {
            let mut left = self.per;
            until(stop, || {
                check(self.exitq.cell.load(&reader), &mut reads, &mut bad);
                left -= 1;
                if left == 0 {
                    left = self.per;
                    reader.quiescent();
                }
            });
        }
        (reads, bad)
    }
    fn write_loop(&self, stop: &AtomicBool, pace: &mut Pace) -> u64 {
        self.exitq.write_loop(stop, pace)
    }
}

/// exitq with a `CellCache` per reader thread.
struct ExitqCache(Exitq);

impl Bench for ExitqCache {
    fn report(&self) {
        self.0.report();
    }
    fn read_loop(&self, stop: &AtomicBool) -> (u64, u64) {
        let mut cache = self.0.cell.cache();
        let (mut reads, mut bad) = (0, 0);
        until(stop, || check(cache.load(), &mut reads, &mut bad));
        (reads, bad)
    }
    fn write_loop(&self, stop: &AtomicBool, pace: &mut Pace) -> u64 {
        self.0.write_loop(stop, pace)
    }
}

struct ArcSwap {
    cell: arc_swap::ArcSwap<Config>,
    cache: bool,
}

impl Bench for ArcSwap {
    fn read_loop(&self, stop: &AtomicBool) -> (u64, u64) {
        let (mut reads, mut bad) = (0, 0);
        if self.cache {
            let mut cache = arc_swap::Cache::new(&self.cell);
            until(stop, || check(cache.load(), &mut reads, &mut bad));
        } else {
            until(stop, || check(&self.cell.load(), &mut reads, &mut bad));
        }
        (reads, bad)
    }
    fn write_loop(&self, stop: &AtomicBool, pace: &mut Pace) -> u64 {
        let mut seq = 1;
        until(stop, || {
            seq += 1;
            self.cell.store(Arc::new(Config::new(seq)));
            pace.wait();
        });
        seq - 1
    }
}

struct Crossbeam {
    collector: crossbeam_epoch::Collector,
    cell: crossbeam_epoch::Atomic<Config>,
}

impl Bench for Crossbeam {
    fn read_loop(&self, stop: &AtomicBool) -> (u64, u64) {
        let handle = self.collector.register();
        let (mut reads, mut bad) = (0, 0);
        until(stop, || {
            let guard = handle.pin();
            let p = self.cell.load(Ordering::Acquire, &guard);
            // SAFETY: the cell always holds a live value; it is destroyed
            // only after the guards that could see it are gone.
            check(unsafe { p.deref() }, &mut reads, &mut bad);
        });
        (reads, bad)
    }
    fn write_loop(&self, stop: &AtomicBool, pace: &mut Pace) -> u64 {
        let handle = self.collector.register();
        let mut seq = 1;
        until(stop, || {
            seq += 1;
            let guard = handle.pin();
            let new = crossbeam_epoch::Owned::new(Config::new(seq));
            let old = self.cell.swap(new, Ordering::AcqRel, &guard);
            // SAFETY: `old` is unreachable now; destroyed once, after the
            // guards that could see it.
            unsafe { guard.defer_destroy(old) };
            drop(guard);
            pace.wait();
        });
        seq - 1
    }
}

impl Drop for Crossbeam {
    fn drop(&mut self) {
        // SAFETY: no thread uses the cell any more.
        drop(unsafe {
            std::mem::replace(&mut self.cell, crossbeam_epoch::Atomic::null()).into_owned()
        });
    }
}

struct Seize {
    collector: seize::Collector,
    cell: AtomicPtr<Config>,
}

impl Bench for Seize {
    fn read_loop(&self, stop: &AtomicBool) -> (u64, u64) {
        use seize::Guard;
        let (mut reads, mut bad) = (0, 0);
        until(stop, || {
            let guard = self.collector.enter();
            let p = guard.protect(&self.cell, Ordering::Acquire);
            // SAFETY: protected by the guard; the cell is never null.
            check(unsafe { &*p }, &mut reads, &mut bad);
        });
        (reads, bad)
    }
    fn write_loop(&self, stop: &AtomicBool, pace: &mut Pace) -> u64 {
        use seize::Guard;
        let mut seq = 1;
        until(stop, || {
            seq += 1;
            let guard = self.collector.enter();
            let new = Box::into_raw(Box::new(Config::new(seq)));
            let old = guard.swap(&self.cell, new, Ordering::AcqRel);
            // SAFETY: `old` is unreachable now, was boxed, retired once.
            unsafe { guard.defer_retire(old, seize::reclaim::boxed) };
            drop(guard);
            pace.wait();
        });
        seq - 1
    }
}

impl Drop for Seize {
    fn drop(&mut self) {
        // SAFETY: no thread uses the cell any more; it holds a boxed value.
        drop(unsafe { Box::from_raw(self.cell.load(Ordering::Relaxed)) });
    }
}

fn build(name: &str) -> Result<Arc<dyn Bench>, String> {
    Ok(match name {
        "exitq" => Arc::new(Exitq::new()),
        "exitq-qsbr" => Arc::new(ExitqQsbr {
            exitq: Exitq::new(),
            per: 1,
        }),
        "exitq-qsbr-per64" => Arc::new(ExitqQsbr {
            exitq: Exitq::new(),
            per: 64,
        }),
        "exitq-cache" => Arc::new(ExitqCache(Exitq::new())),
        "arc-swap" | "arc-swap-cache" => Arc::new(ArcSwap {
            cell: arc_swap::ArcSwap::from_pointee(Config::new(1)),
            cache: name == "arc-swap-cache",
        }),
        "crossbeam" => Arc::new(Crossbeam {
            collector: crossbeam_epoch::Collector::new(),
            cell: crossbeam_epoch::Atomic::new(Config::new(1)),
        }),
        "seize" => {
            let batch = benches::seize_batch()?;
            Arc::new(Seize {
                collector: seize::Collector::new().batch_size(batch),
                cell: AtomicPtr::new(Box::into_raw(Box::new(Config::new(1)))),
            })
        }
        other => {
            return Err(format!(
                "unknown IMPL '{other}' (exitq, exitq-qsbr, exitq-qsbr-per64, exitq-cache, \
                 arc-swap, arc-swap-cache, crossbeam, seize)"
            ))
        }
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: read_mostly IMPL READERS [SECONDS [WRITE_GAP_US]]";
    let parsed = (|| {
        let name = args.get(1).ok_or(usage)?.clone();
        let readers = match args.get(2).map(|s| s.parse::<usize>()) {
            Some(Ok(n)) if (1..=1024).contains(&n) => n,
            _ => return Err(format!("READERS must be 1 to 1024 ({usage})")),
        };
        let secs = match args.get(3).map(|s| s.parse::<f64>()) {
            None => 3.0,
            Some(Ok(s)) if s > 0.0 && s <= 3600.0 => s,
            _ => return Err(format!("SECONDS must be in (0, 3600] ({usage})")),
        };
        let gap = match args.get(4).map(|s| s.parse::<u64>()) {
            None => 0,
            Some(Ok(us)) if us <= 1_000_000 => us,
            _ => return Err(format!("WRITE_GAP_US must be 0 to 1000000 ({usage})")),
        };
        if args.len() > 5 {
            return Err(usage.to_string());
        }
        Ok((name, readers, secs, Duration::from_micros(gap)))
    })();
    let (name, readers, secs, gap) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("read_mostly: {e}");
            return ExitCode::from(2);
        }
    };
    let bench = match build(&name) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("read_mostly: {e}");
            return ExitCode::from(2);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(readers + 2));
    let bad = Arc::new(AtomicU64::new(0));
    let reader_threads: Vec<_> = (0..readers)
        .map(|_| {
            let (bench, stop, start, bad) =
                (bench.clone(), stop.clone(), start.clone(), bad.clone());
            thread::spawn(move || {
                start.wait();
                let (reads, b) = bench.read_loop(&stop);
                // Relaxed: summed after `join`.
                bad.fetch_add(b, Ordering::Relaxed);
                reads
            })
        })
        .collect();
    let writer = {
        let (bench, stop, start) = (bench.clone(), stop.clone(), start.clone());
        thread::spawn(move || {
            start.wait();
            let mut pace = Pace {
                gap,
                next: Instant::now(),
            };
            bench.write_loop(&stop, &mut pace)
        })
    };
    start.wait();
    let t0 = Instant::now();
    thread::sleep(Duration::from_secs_f64(secs));
    // Relaxed: the threads' results come back through `join`.
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = reader_threads
        .into_iter()
        .map(|h| h.join().expect("reader"))
        .sum();
    let writes = writer.join().expect("writer");
    let elapsed = t0.elapsed().as_secs_f64();
    if std::env::var_os("EXITQ_STATS").is_some() {
        bench.report();
    }
    drop(bench);
    let bad = bad.load(Ordering::Relaxed);
    if bad > 0 {
        eprintln!("read_mostly: {name}: {bad} reads saw an invalid configuration");
        return ExitCode::from(1);
    }
    println!(
        "{name} {readers} {secs} {:.0} {:.0} {reads} {writes}",
        reads as f64 / elapsed,
        writes as f64 / elapsed
    );
    ExitCode::SUCCESS
}
