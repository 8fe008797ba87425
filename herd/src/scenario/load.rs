//! Background load for the grace-period scenarios: `--load idle|busy|N`.
//!
//! * `idle`: no load threads; the other CPUs have nothing of ours to run.
//! * `busy`: one load thread per online CPU but one (at least one), so every
//!   CPU but the measuring thread's runs one of ours.
//! * `N`: exactly N load threads.
//!
//! What a load thread does is the scenario's choice (spin, run read-side
//! sections, park while registered as a reader); [`LoadThreads`] starts them
//! behind a start barrier, stops them with one flag, and joins them,
//! collecting each thread's iteration count and its own CPU time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use anyhow::Result;
use serde::Serialize;

use super::gpkit::{spawn_error, CpuTime};

/// Largest `--load N` accepted (a typo guard; 100+ CPU machines fit).
pub const MAX_LOAD_THREADS: usize = 65_536;

/// How many load threads run next to the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// No load threads.
    Idle,
    /// One per online CPU but one (at least one).
    Busy,
    /// Exactly this many.
    Threads(usize),
}

impl Load {
    /// Parses `idle`, `busy` or a thread count.
    pub fn parse(s: &str) -> std::result::Result<Load, String> {
        match s.trim() {
            "idle" => Ok(Load::Idle),
            "busy" => Ok(Load::Busy),
            t => match t.parse::<usize>() {
                Ok(0) => Ok(Load::Idle),
                Ok(n) if n <= MAX_LOAD_THREADS => Ok(Load::Threads(n)),
                Ok(n) => Err(format!("{n} load threads is more than {MAX_LOAD_THREADS}")),
                Err(_) => Err(format!("`{t}` is not idle, busy or a number of threads")),
            },
        }
    }

    /// The number of load threads on a host with `online` CPUs.
    pub fn threads(&self, online: usize) -> usize {
        match *self {
            Load::Idle => 0,
            Load::Busy => online.saturating_sub(1).max(1),
            Load::Threads(n) => n,
        }
    }

    /// The label used in tables and metric names (`idle`, `busy`, `4`).
    pub fn label(&self) -> String {
        match self {
            Load::Idle => "idle".into(),
            Load::Busy => "busy".into(),
            Load::Threads(n) => n.to_string(),
        }
    }
}

/// What one load thread did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LoadReport {
    /// Iterations of its loop (read sections, spins; the body decides).
    pub iterations: u64,
    /// Its own CPU time.
    pub cpu: CpuTime,
}

/// Running load threads; stopped and joined by [`LoadThreads::stop`] or on drop.
#[derive(Debug)]
pub struct LoadThreads {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<LoadReport>>,
}

impl LoadThreads {
    /// Starts `n` threads named `herd-<role>-<i>`, each running
    /// `body(i, &stop)` until it returns (the body polls `stop`, or waits in
    /// `std::thread::park()`: stopping unparks every thread), and
    /// returns once all of them are running. A thread that cannot be created
    /// stops the ones already started and is reported with its errno and the
    /// limit behind it.
    pub fn start<F>(role: &str, n: usize, body: F) -> Result<LoadThreads>
    where
        F: Fn(usize, &AtomicBool) -> u64 + Send + Sync + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let body = Arc::new(body);
        let gate = Arc::new(Gate::default());
        let mut me = LoadThreads {
            stop: Arc::clone(&stop),
            handles: Vec::with_capacity(n),
        };
        for i in 0..n {
            let (stop, body, g) = (Arc::clone(&stop), Arc::clone(&body), Arc::clone(&gate));
            let spawned = std::thread::Builder::new()
                .name(format!("herd-{role}-{i}"))
                .spawn(move || {
                    if !g.arrive_and_wait() {
                        return LoadReport::default();
                    }
                    let t0 = CpuTime::thread();
                    let iterations = body(i, &stop);
                    LoadReport {
                        iterations,
                        cpu: CpuTime::thread().since(t0),
                    }
                });
            match spawned {
                Ok(h) => me.handles.push(h),
                Err(e) => {
                    // Diagnose while the threads already created still
                    // count against the limit, then let them go.
                    let err = spawn_error(role, i, e);
                    gate.open(false);
                    return Err(err);
                }
            }
        }
        gate.wait_arrivals(n);
        gate.open(true);
        Ok(me)
    }

    /// How many threads run.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// True when no thread runs.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Stops every thread and returns what each did.
    pub fn stop(mut self) -> Vec<LoadReport> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Vec<LoadReport> {
        self.stop.store(true, Ordering::Relaxed);
        // Wake bodies that wait in `std::thread::park()` (idle readers): an
        // unpark happens-before the park it ends, so they see the flag.
        for h in &self.handles {
            h.thread().unpark();
        }
        self.handles
            .drain(..)
            .map(|h| h.join().unwrap_or_default())
            .collect()
    }
}

impl Drop for LoadThreads {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Start gate: threads arrive and wait until the starter opens it (to run)
/// or aborts (a later thread could not be created).
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    arrived: usize,
    open: Option<bool>,
}

impl Gate {
    /// Counts this thread as arrived and waits; true if the gate opened to run.
    fn arrive_and_wait(&self) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.arrived += 1;
        self.cv.notify_all();
        loop {
            if let Some(run) = st.open {
                return run;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn wait_arrivals(&self, n: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.arrived < n {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn open(&self, run: bool) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).open = Some(run);
        self.cv.notify_all();
    }
}

/// Sum of the load threads' iterations and CPU time.
pub fn totals(reports: &[LoadReport]) -> LoadReport {
    reports
        .iter()
        .fold(LoadReport::default(), |a, r| LoadReport {
            iterations: a.iterations + r.iterations,
            cpu: a.cpu.plus(r.cpu),
        })
}

// Tests that start threads live in tests/gp_load.rs (their own process):
// other unit tests compare task counts and must not see ours come and go.
#[cfg(test)]
mod tests {
    use super::*;

    /// What the pre-flight charges per std thread
    /// ([`crate::spawn::failure::STD_THREAD_MAPPINGS`]) is what one costs here:
    /// `/proc/self/maps` lines before and while 100 parked threads live.
    /// Other tests of this binary map and unmap meanwhile, so the smallest
    /// of a few tries is taken.
    #[test]
    fn a_std_thread_costs_the_mappings_preflight_charges() {
        let per_thread = (0..5)
            .map(|_| {
                let before = crate::host::map_count().unwrap();
                let t = LoadThreads::start("maps", 100, |_, stop| {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park();
                    }
                    0
                })
                .unwrap();
                let during = crate::host::map_count().unwrap();
                t.stop();
                (during.saturating_sub(before) as f64 / 100.0).round() as u64
            })
            .min()
            .unwrap();
        eprintln!("mappings per parked std thread: {per_thread}");
        assert!(
            per_thread <= crate::spawn::failure::STD_THREAD_MAPPINGS,
            "{per_thread} mappings per thread, the pre-flight charges {}",
            crate::spawn::failure::STD_THREAD_MAPPINGS
        );
        assert!(per_thread >= 2, "{per_thread}: not even stack and guard?");
    }

    #[test]
    fn parse_and_size() {
        assert_eq!(Load::parse("idle").unwrap(), Load::Idle);
        assert_eq!(Load::parse("busy").unwrap().threads(2), 1);
        assert_eq!(Load::parse("busy").unwrap().threads(1), 1);
        assert_eq!(Load::parse("busy").unwrap().threads(256), 255);
        assert_eq!(Load::parse("3").unwrap(), Load::Threads(3));
        assert_eq!(Load::parse("0").unwrap(), Load::Idle);
        assert!(Load::parse("lots").is_err());
        assert!(Load::parse("999999999").is_err());
    }
}
