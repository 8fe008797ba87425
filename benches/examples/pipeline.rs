//! A control for the machine, not for exitq: one producer fills 256-item
//! `Vec` buffers, hands them to a consumer thread over a channel, and gets
//! them back emptied (a pool of 256), the cross-core part of exitq's
//! producer/reclaimer design without exitq. Its ns per item moves with how
//! far apart the host runs this VM's two vCPUs.
//!
//!     cargo run --release -p benches --example pipeline -- [ITEMS] [ROUNDS]
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Instant;

const BUFFER: usize = 256;
const POOL: usize = 256;

fn round(items: usize) -> f64 {
    let (to_consumer, filled) = mpsc::sync_channel::<Vec<[usize; 4]>>(POOL);
    // Room for every buffer, the producer's own included: the consumer never blocks.
    let (to_producer, emptied) = mpsc::sync_channel::<Vec<[usize; 4]>>(POOL + 1);
    for _ in 0..POOL {
        to_producer.send(Vec::with_capacity(BUFFER)).unwrap();
    }
    let consumer = std::thread::spawn(move || {
        let mut sum = 0usize;
        while let Ok(mut v) = filled.recv() {
            for x in v.drain(..) {
                sum = sum.wrapping_add(x[0]);
            }
            let _ = to_producer.send(v);
        }
        sum
    });
    let t = Instant::now();
    let mut local = Vec::with_capacity(BUFFER);
    for i in 0..items {
        if local.len() == BUFFER {
            let next = emptied.recv().unwrap();
            to_consumer
                .send(std::mem::replace(&mut local, next))
                .unwrap();
        }
        local.push([i; 4]);
    }
    to_consumer.send(local).unwrap();
    drop(to_consumer);
    std::hint::black_box(consumer.join().unwrap());
    t.elapsed().as_nanos() as f64 / items as f64
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let parse = |i: usize, d: usize| {
        args.get(i)
            .map_or(Some(d), |s| s.parse().ok().filter(|&v| v > 0))
    };
    let (Some(items), Some(rounds)) = (parse(1, 20_000_000), parse(2, 3)) else {
        eprintln!("pipeline: ITEMS and ROUNDS must be positive integers");
        return ExitCode::from(2);
    };
    for _ in 0..rounds {
        println!("pipeline: {:.2} ns/item", round(items));
    }
    ExitCode::SUCCESS
}
