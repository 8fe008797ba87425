//! The torture's command line.
use std::time::Instant;

/// Parsed options.
pub(crate) struct Opts {
    pub(crate) seconds: u64,
    pub(crate) threads: usize,
    pub(crate) qsbr: usize,
    pub(crate) handoffs: usize,
    pub(crate) seed: u64,
}

pub(crate) fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        seconds: 10,
        threads: 12,
        qsbr: 3,
        handoffs: 1,
        seed: Instant::now().elapsed().as_nanos() as u64
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            let v = args.next().ok_or_else(|| format!("{name} needs a value"))?;
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number: '{v}'"))
        };
        match a.as_str() {
            "--seconds" => o.seconds = value("--seconds")?,
            "--threads" => o.threads = value("--threads")? as usize,
            "--qsbr" => o.qsbr = value("--qsbr")? as usize,
            "--handoffs" => o.handoffs = value("--handoffs")? as usize,
            "--seed" => o.seed = value("--seed")?,
            "-h" | "--help" => {
                println!(
                    "usage: torture [--seconds N] [--threads N] [--qsbr N] [--handoffs N] [--seed N]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    if o.seconds == 0 || o.threads == 0 || o.threads > 1024 || o.qsbr > 1024 || o.handoffs > 64 {
        return Err(
            "--seconds must be positive, --threads in 1..=1024, --qsbr in 0..=1024, \
             --handoffs in 0..=64"
                .into(),
        );
    }
    Ok(o)
}
