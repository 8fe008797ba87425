//! The typed pointer's read cost, interleaved: guard + load + dereference
//! of an `RcuCell` against the same `Reader` guard with a plain Acquire
//! load of an `AtomicPtr` dereferenced by hand (what the cell replaces),
//! plus `Domain::read` + `RcuCell::load` and crossbeam-epoch's `pin` +
//! `Atomic::load`. Each round times a slice of every variant, in an order
//! that alternates (A B C D, D C B A, ...), so a slow period of the machine
//! hits all of them; the ratios are per round, and the figure is their
//! median (with the quartiles). Criterion's `read_guard` group measures
//! the same variants one after the other instead.
//!
//!     cargo run --release -p benches --example read_cell -- [ROUNDS] [ITERS]
//!
//! Defaults: 400 rounds of 200 000 iterations per variant.
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Instant;

type Variant<'a> = (&'static str, Box<dyn FnMut(u64) + 'a>);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> Result<u64, String> {
        match args.get(i) {
            None => Ok(default),
            Some(s) => match s.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("argument {}: '{s}' is not a positive count", i + 1)),
            },
        }
    };
    let (rounds, iters) = match (num(0, 400), num(1, 200_000)) {
        (Ok(r), Ok(i)) if args.len() <= 2 => (r as usize, i),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("read_cell: {e}\nusage: read_cell [ROUNDS] [ITERS]");
            return ExitCode::from(2);
        }
        _ => {
            eprintln!("usage: read_cell [ROUNDS] [ITERS]");
            return ExitCode::from(2);
        }
    };
    let domain = exitq::Domain::new();
    drop(domain.read()); // register this thread outside the timing
    let cell = exitq::RcuCell::new(&domain, 7u64);
    let raw = AtomicPtr::new(Box::into_raw(Box::new(7u64)));
    let atomic = crossbeam_epoch::Atomic::new(7u64);
    let handle = crossbeam_epoch::default_collector().register();
    let mut reader_a = domain.reader();
    let mut reader_b = domain.reader();
    let mut variants: Vec<Variant> = vec![
        (
            "Reader + Acquire load (baseline)",
            Box::new(|n| {
                for _ in 0..n {
                    let _guard = black_box(&mut reader_a).read();
                    let p = black_box(&raw).load(Ordering::Acquire);
                    // SAFETY: `p` is the live box, freed after the rounds.
                    black_box(unsafe { *p });
                }
            }),
        ),
        (
            "Reader + RcuCell::load",
            Box::new(|n| {
                for _ in 0..n {
                    let guard = black_box(&mut reader_b).read();
                    black_box(*black_box(&cell).load(&guard));
                }
            }),
        ),
        (
            "Domain::read + RcuCell::load",
            Box::new(|n| {
                for _ in 0..n {
                    let guard = black_box(&domain).read();
                    black_box(*black_box(&cell).load(&guard));
                }
            }),
        ),
        (
            "crossbeam pin + Atomic::load",
            Box::new(|n| {
                for _ in 0..n {
                    let guard = black_box(&handle).pin();
                    let p = black_box(&atomic).load(Ordering::Acquire, &guard);
                    // SAFETY: `atomic` holds a live value for all rounds.
                    black_box(*unsafe { p.deref() });
                }
            }),
        ),
    ];
    let k = variants.len();
    let names: Vec<&str> = variants.iter().map(|v| v.0).collect();
    let mut ns = vec![Vec::with_capacity(rounds); k];
    for v in variants.iter_mut() {
        (v.1)(iters / 10); // warm up
    }
    for round in 0..rounds {
        for j in 0..k {
            let i = if round % 2 == 0 { j } else { k - 1 - j };
            let start = Instant::now();
            (variants[i].1)(iters);
            ns[i].push(start.elapsed().as_secs_f64() * 1e9 / iters as f64);
        }
    }
    drop(variants);
    // SAFETY: the rounds are done; no reader is left.
    drop(unsafe { Box::from_raw(raw.load(Ordering::Relaxed)) });
    // SAFETY: no guard is left; the value is dropped once.
    drop(unsafe { atomic.into_owned() });

    let quartiles = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        (at(0.25), at(0.5), at(0.75))
    };
    println!("read_cell: {rounds} rounds x {iters} iterations, interleaved");
    println!(
        "{:34} {:>9} {:>22}",
        "variant", "ns/op", "ratio to baseline"
    );
    for i in 0..k {
        let (_, med, _) = quartiles(ns[i].clone());
        let ratios = ns[i].iter().zip(&ns[0]).map(|(x, b)| x / b).collect();
        let (q1, rm, q3) = quartiles(ratios);
        println!("{:34} {med:9.3} {rm:8.3} [{q1:.3}, {q3:.3}]", names[i]);
    }
    ExitCode::SUCCESS
}
