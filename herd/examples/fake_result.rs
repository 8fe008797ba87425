//! Prints a fake `herd storm --json` result on a host of any size, for
//! measuring `herd report` (docs/herd-guide.md#herd-report):
//!
//! ```sh
//! cargo run --release -p herd --example fake_result -- --cpus 512 --nodes 4 --threads 100000 > big.json
//! herd report big.json -o big.html
//! ```

#[path = "../tests/common/fake_result.rs"]
mod fake_result;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut cpus, mut nodes, mut threads) = (512usize, 4usize, 100_000u64);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|v| v.parse::<u64>().ok());
        match (flag.as_str(), value) {
            ("--cpus", Some(v)) if v > 0 => cpus = v as usize,
            ("--nodes", Some(v)) if v > 0 => nodes = v as usize,
            ("--threads", Some(v)) => threads = v,
            _ => {
                eprintln!("usage: fake_result [--cpus N] [--nodes N] [--threads N]");
                std::process::exit(2);
            }
        }
    }
    let v = fake_result::storm(cpus, nodes, threads);
    println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
}
