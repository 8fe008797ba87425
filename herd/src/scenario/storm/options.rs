//! `herd storm`'s flags and their validation into a typed [`Config`].
//!
//! Every knob is optional on the command line; a [`Preset`] supplies the
//! ones not given. Validation happens here, before anything runs, and
//! every error names the flag it is about (exit 2).

use serde::{Deserialize, Serialize};

use crate::error::usage;
use crate::export::run::OutputArgs;
use crate::host::futex_hash::Choice as FutexChoice;
use crate::host::{format_cpu_list, parse_cpu_list_for, HostFacts};
use crate::perf::PerfArgs;
use crate::spawn::recycled::{StackRelease, Stacks};
use crate::spawn::{Backend, Cancel, Reap};

/// Starting points for the storm's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// The micro's shape, scaled to finish in seconds: 1000 waves x 100
    /// threads, 20 slots, lag 5, spin 100K, sleep 100 ms, reaped by join.
    Default,
    /// The posted micro exactly: 1000 waves x 100 threads, 20 slots, lag 5,
    /// spin 1M, sleep 1 s, pthread_cancel, never joined (--reap leak).
    Micro,
}

/// Where threads are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Pin {
    /// Threads may run on any CPU of --cpus (the process's mask).
    None,
    /// Thread k is bound to the (k mod n)-th CPU of --cpus at start.
    RoundRobin,
}

/// Flags of `herd storm` (and plain `herd`).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Settings the other flags start from; a flag given explicitly
    /// overrides its preset value.
    #[arg(long, value_enum, default_value_t = Preset::Default)]
    pub preset: Preset,
    /// Number of waves [default: 1000].
    #[arg(long, value_name = "N")]
    pub waves: Option<u64>,
    /// Threads per wave [default: 100].
    #[arg(long, value_name = "N")]
    pub per_wave: Option<u64>,
    /// Wave i cancels wave i-LAG [default: 5]; must be < --slots.
    #[arg(long, value_name = "N")]
    pub lag: Option<u64>,
    /// Size of the ring of wave slots holding thread handles [default: 20].
    #[arg(long, value_name = "N")]
    pub slots: Option<u64>,
    /// Spin iterations each thread runs before its sleep [default: 100000; micro 1000000].
    #[arg(long, value_name = "ITERATIONS")]
    pub spin: Option<u64>,
    /// Sleep (the cancellation point) in milliseconds [default: 100; micro 1000].
    #[arg(long, value_name = "MS")]
    pub sleep_ms: Option<u64>,
    /// Thread backend [default: pthread].
    #[arg(long, value_enum)]
    pub spawn: Option<Backend>,
    /// Thread stack size, e.g. 64K, 8M (default: the backend's own:
    /// glibc uses RLIMIT_STACK, std 2 MiB).
    #[arg(long, value_name = "BYTES")]
    pub stack_size: Option<String>,
    /// Where thread stacks come from: glibc's own, or recycled from an
    /// exitq stack pool (mapped once, reused after the join) [default: glibc].
    #[arg(long, value_enum)]
    pub stacks: Option<Stacks>,
    /// With --stacks recycled: what a recycled stack's pages become
    /// (batched madvise off the exit path) [default: keep].
    #[arg(long, value_enum)]
    pub stack_release: Option<StackRelease>,
    /// How a retired wave is stopped [default: pthread].
    #[arg(long, value_enum)]
    pub cancel: Option<Cancel>,
    /// What happens to a retired thread's handle [default: join; micro leak].
    #[arg(long, value_enum)]
    pub reap: Option<Reap>,
    /// CPUs to run on, e.g. 0-3,8 [default: every CPU this process may use].
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Thread placement over --cpus [default: none].
    #[arg(long, value_enum)]
    pub pin: Option<Pin>,
    /// Run even when pre-flight predicts that threads cannot be created
    /// (failures are then counted and named).
    #[arg(long)]
    pub force: bool,
    /// Futex hash table: `default` (the kernel's choice: a private table
    /// per process since 6.16), `global` (the shared table, as before
    /// 6.16), or a private table of N buckets (a power of two) [default:
    /// default].
    #[arg(long, value_name = "default|global|N")]
    pub futex_hash: Option<String>,
    /// Exit-cleanup strategy and its size (`herd::cleanup`).
    #[command(flatten)]
    pub cleanup: crate::cleanup::CleanupArgs,
    /// perf counters.
    #[command(flatten)]
    pub perf: PerfArgs,
    /// Output format and repetitions.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// The validated, typed storm configuration (serialized into results).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The preset the knobs started from.
    pub preset: Preset,
    /// Number of waves.
    pub waves: u64,
    /// Threads per wave.
    pub per_wave: u64,
    /// Wave i retires wave i-lag.
    pub lag: u64,
    /// Ring size.
    pub slots: u64,
    /// Spin iterations.
    pub spin: u64,
    /// Sleep, ms.
    pub sleep_ms: u64,
    /// Backend.
    pub spawn: Backend,
    /// Explicit stack size in bytes (None: backend default).
    pub stack_size: Option<u64>,
    /// Where stacks come from.
    #[serde(default)]
    pub stacks: Stacks,
    /// Page policy of recycled stacks.
    #[serde(default)]
    pub stack_release: StackRelease,
    /// Cancellation kind.
    pub cancel: Cancel,
    /// Reaping.
    pub reap: Reap,
    /// CPUs, sorted.
    pub cpus: Vec<usize>,
    /// Placement.
    pub pin: Pin,
    /// Run despite a pre-flight refusal.
    pub force: bool,
    /// The futex hash the storm runs on (`host/futex_hash.rs`).
    #[serde(default)]
    pub futex_hash: FutexChoice,
    /// Exit-cleanup strategy (`cleanup`, `cleanup_work`, ... at top level).
    #[serde(flatten)]
    pub cleanup: crate::cleanup::CleanupArgs,
}

/// Largest accepted values: far beyond any useful run, small enough that
/// a typo is caught before it allocates or runs for days.
pub const MAX_WAVES: u64 = 100_000_000;
/// See [`MAX_WAVES`].
pub const MAX_PER_WAVE: u64 = 1_000_000;
/// See [`MAX_WAVES`].
pub const MAX_SLOTS: u64 = 100_000;
/// See [`MAX_WAVES`]: about an hour of spinning per thread.
pub const MAX_SPIN: u64 = 10_000_000_000_000;
/// See [`MAX_WAVES`]: one day.
pub const MAX_SLEEP_MS: u64 = 86_400_000;
/// glibc's PTHREAD_STACK_MIN on x86_64 (16 KiB); smaller is EINVAL.
pub const MIN_STACK: u64 = 16 * 1024;
/// Largest stack accepted: 1 TiB.
pub const MAX_STACK: u64 = 1 << 40;

/// Parses `64K`, `8M`, `1G`, `4096` (binary units) into bytes. Not bytesize:
/// it reads `64K` as 64,000 bytes (SI), where stack sizes, as in `ulimit -s`
/// and glibc, are binary.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1 << 40),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

fn range(flag: &str, v: u64, min: u64, max: u64, why_min: &str) -> anyhow::Result<u64> {
    if v < min {
        return Err(usage(flag, format!("{v} is too small: {why_min}")));
    }
    if v > max {
        return Err(usage(
            flag,
            format!("{v} is absurdly large (at most {max})"),
        ));
    }
    Ok(v)
}

impl Config {
    /// Validates `args` against `facts` (online CPUs).
    pub fn from_args(a: &Args, facts: &HostFacts) -> anyhow::Result<Config> {
        let micro = a.preset == Preset::Micro;
        let waves = range(
            "--waves",
            a.waves.unwrap_or(1000),
            1,
            MAX_WAVES,
            "at least 1 wave",
        )?;
        let per_wave = range(
            "--per-wave",
            a.per_wave.unwrap_or(100),
            1,
            MAX_PER_WAVE,
            "at least 1 thread per wave",
        )?;
        let slots = range(
            "--slots",
            a.slots.unwrap_or(20),
            1,
            MAX_SLOTS,
            "at least 1 slot",
        )?;
        let lag = a.lag.unwrap_or(5);
        if lag >= slots {
            return Err(usage(
                "--lag",
                format!(
                    "{lag} must be smaller than --slots ({slots}): a wave is cancelled LAG waves \
                     later, and its handles must still be in its slot then"
                ),
            ));
        }
        let spin = range(
            "--spin",
            a.spin.unwrap_or(if micro { 1_000_000 } else { 100_000 }),
            0,
            MAX_SPIN,
            "",
        )?;
        let sleep_ms = range(
            "--sleep-ms",
            a.sleep_ms.unwrap_or(if micro { 1000 } else { 100 }),
            0,
            MAX_SLEEP_MS,
            "",
        )?;
        let spawn = a.spawn.unwrap_or(Backend::Pthread);
        let cancel = a.cancel.unwrap_or(Cancel::Pthread);
        let reap = a
            .reap
            .unwrap_or(if micro { Reap::Leak } else { Reap::Join });
        if spawn == Backend::Std && cancel == Cancel::Pthread {
            return Err(usage(
                "--cancel",
                "pthread cannot be used with --spawn std: std::thread runs the thread inside \
                 catch_unwind, and glibc's forced unwind from pthread_cancel then aborts the whole \
                 process (\"FATAL: exception not rethrown\", rust-lang/rust#65441). Use \
                 --cancel flag or none with --spawn std, or --spawn pthread",
            ));
        }
        if cfg!(panic = "abort") && cancel == Cancel::Pthread {
            return Err(usage(
                "--cancel",
                "pthread needs herd built with panic=unwind: the forced unwind of \
                 pthread_cancel passes through Rust frames, which a panic=abort build may \
                 not unwind (see herd/src/spawn/pthread.rs)",
            ));
        }
        let stacks = a.stacks.unwrap_or_default();
        crate::spawn::recycled::validate(stacks, a.stack_release, spawn, reap)?;
        let stack_size = match &a.stack_size {
            None => None,
            Some(s) => {
                let v = parse_size(s).ok_or_else(|| {
                    usage(
                        "--stack-size",
                        format!("`{s}` is not a size (e.g. 65536, 64K, 8M)"),
                    )
                })?;
                let v = range(
                    "--stack-size",
                    v,
                    MIN_STACK,
                    MAX_STACK,
                    "glibc needs at least PTHREAD_STACK_MIN (16 KiB)",
                )?;
                // The pool rounds a size up to pages (as glibc does).
                let pool_min = exitq::stacks::min_stack_size() as u64;
                // SAFETY: sysconf only reads a configuration value.
                let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
                if stacks == Stacks::Recycled && v.div_ceil(page) * page < pool_min {
                    return Err(usage(
                        "--stack-size",
                        format!(
                            "{v} is below the minimum {pool_min} of --stacks recycled \
                             (PTHREAD_STACK_MIN, the pool's header and a page, rounded up to pages)"
                        ),
                    ));
                }
                Some(v)
            }
        };
        let cpus = match &a.cpus {
            None => facts.allowed_cpus.clone(),
            Some(list) => {
                let cpus = parse_cpu_list_for("--cpus", list)?;
                for &c in &cpus {
                    if !facts.online_cpus.contains(&c) {
                        return Err(usage(
                            "--cpus",
                            format!(
                                "CPU {c} is not online (online CPUs: {})",
                                format_cpu_list(&facts.online_cpus)
                            ),
                        ));
                    }
                    if !facts.allowed_cpus.contains(&c) {
                        return Err(usage(
                            "--cpus",
                            format!(
                                "CPU {c} is not in this process's affinity mask (allowed: {})",
                                format_cpu_list(&facts.allowed_cpus)
                            ),
                        ));
                    }
                }
                cpus
            }
        };
        Ok(Config {
            preset: a.preset,
            waves,
            per_wave,
            lag,
            slots,
            spin,
            sleep_ms,
            spawn,
            stack_size,
            stacks,
            stack_release: a.stack_release.unwrap_or_default(),
            cancel,
            reap,
            cpus,
            pin: a.pin.unwrap_or(Pin::None),
            force: a.force,
            futex_hash: match &a.futex_hash {
                None => FutexChoice::Default,
                Some(s) => s.parse().map_err(|e| usage("--futex-hash", e))?,
            },
            cleanup: {
                a.cleanup.validate()?;
                a.cleanup.clone()
            },
        })
    }

    /// Threads the run tries to create.
    pub fn total_threads(&self) -> u64 {
        self.waves.saturating_mul(self.per_wave)
    }

    /// One line describing the configuration (table header).
    pub fn describe(&self) -> String {
        format!(
            "herd storm: {} waves x {} threads (lag {}, slots {}), spin {}, sleep {} ms; \
             spawn {}, stacks {}, cancel {}, reap {}; CPUs {}, pin {}",
            self.waves,
            self.per_wave,
            self.lag,
            self.slots,
            self.spin,
            self.sleep_ms,
            self.spawn,
            self.stacks,
            self.cancel,
            self.reap,
            format_cpu_list(&self.cpus),
            match self.pin {
                Pin::None => "none",
                Pin::RoundRobin => "round-robin",
            }
        ) + &match self.futex_hash {
            FutexChoice::Default => String::new(),
            FutexChoice::Global => "; futex hash global".into(),
            FutexChoice::Private(n) => format!("; futex hash {n} buckets"),
        } + &match self.cleanup.cleanup {
            crate::cleanup::Strategy::None => String::new(),
            s => format!(
                "; cleanup {} ({} words)",
                s.name(),
                self.cleanup.cleanup_work
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("8m"), Some(8 << 20));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }
}
