//! Sampling `lock:contention_begin`/`end` into per-CPU ring buffers,
//! drained by a thread while the scenario runs.
//!
//! Layout of the file descriptors: for every CPU, every target (the
//! process's cgroup, or one per existing thread inherited by the threads
//! they create, in process scope; `pid = -1` in system scope) and both tracepoints, one event with
//! `sample_period = 1`. The first event of each CPU owns that CPU's ring
//! buffer; the others write into it (`PERF_EVENT_IOC_SET_OUTPUT`), so there
//! is exactly one buffer per CPU whatever the thread count. Per-CPU is not
//! only for scale: the kernel refuses to mmap an inherited per-task event
//! that is not bound to a CPU.
//!
//! The drain thread is started *before* any counter is opened, so it is not
//! one of the threads that inherit the counters, and it is a registered
//! helper thread (`helpers.rs`), kept out of the counted cgroup (its own
//! futex calls and context switches are not herd's measurement). It polls
//! the buffers (woken at a quarter full, or every 10 ms), decodes each
//! sample into a compact [`LockEvent`] and counts `PERF_RECORD_LOST`.
//!
//! Times: every event is stamped with CLOCK_MONOTONIC (`use_clockid`),
//! not perf's default per-CPU clock, because a wait may begin on one CPU
//! and end on another. Losses: with `sample_id_all` a lost-samples record
//! carries its time, so the drain turns each into a [`Kind::Lost`] window
//! (from the ring's previous record to the loss) that the analysis uses to
//! drop waits that span it instead of pairing across the hole.
//!
//! Memory: the events go into chunks of [`CHUNK`] events, the first
//! allocated before sampling starts; a chunk allocated while sampling is
//! an `mmap`, which takes this process's `mmap_lock`, the very lock a
//! storm contends on, so each one is counted (`buffer_growths`) and noted.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{anyhow, Result};
use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter, Sampler};

use super::kallsyms::Symbols;
use super::lock_sample::{
    parse_lost, pick_caller, Kind, Layout, LockEvent, RECORD_LOST, RECORD_LOST_SAMPLES,
    SAMPLE_CALLCHAIN, SAMPLE_CPU, SAMPLE_RAW, SAMPLE_TID, SAMPLE_TIME,
};
use super::sys::{self, EventKind, Kernel, OpenContext, Target, Unavailable};

/// Ring buffer data size per CPU, bytes (plus one header page).
pub const RING_BYTES: usize = 1 << 20;
/// Events kept in memory at most (about 48 bytes each); beyond, counted as dropped.
pub const MAX_EVENTS: usize = 8 << 20;
/// Kernel call-chain depth recorded with each begin, to find the caller.
pub const STACK_DEPTH: u16 = 24;

const PERF_RECORD_SAMPLE: u32 = 9;
/// Events per buffer chunk (48 bytes each: 48 MiB a chunk).
pub const CHUNK: usize = 1 << 20;

/// What the drain thread collected.
#[derive(Debug, Default)]
pub struct Collected {
    /// Decoded events, in per-CPU order, and a [`Kind::Lost`] marker for
    /// every loss.
    pub events: Vec<LockEvent>,
    /// Samples the kernel dropped.
    pub lost: u64,
    /// Samples over [`MAX_EVENTS`].
    pub dropped: u64,
    /// Buffer chunks allocated while sampling (each an mmap).
    pub growths: u64,
}

/// The drain's event store: chunks that never move or reallocate.
#[derive(Debug, Default)]
struct Chunks {
    chunks: Vec<Vec<LockEvent>>,
    len: usize,
    growths: u64,
}

impl Chunks {
    /// With the first chunk allocated (before sampling starts).
    fn ready() -> Chunks {
        Chunks {
            chunks: vec![Vec::with_capacity(CHUNK)],
            ..Default::default()
        }
    }

    /// Adds `ev`; `false` when [`MAX_EVENTS`] are held already.
    fn push(&mut self, ev: LockEvent) -> bool {
        if self.len >= MAX_EVENTS {
            return false;
        }
        if self.chunks.last().is_none_or(|c| c.len() == c.capacity()) {
            self.chunks.push(Vec::with_capacity(CHUNK));
            self.growths += 1;
        }
        if let Some(c) = self.chunks.last_mut() {
            c.push(ev);
        }
        self.len += 1;
        true
    }

    fn into_vec(self) -> Vec<LockEvent> {
        self.chunks.concat()
    }
}

enum Start {
    Go(Vec<Sampler>, u64, Layout),
    Abort,
}

/// The drain thread, started before the counters are opened.
#[derive(Debug)]
pub struct Drain {
    stop: Arc<AtomicBool>,
    tx: Option<mpsc::Sender<Start>>,
    handle: Option<JoinHandle<Collected>>,
}

impl Drain {
    /// Starts the (idle) drain thread and returns once it registered as
    /// a helper (so it is never counted).
    pub fn spawn(syms: Arc<Symbols>) -> Result<Drain> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Start>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("herd-perf-drain".into())
            .spawn(move || {
                // Before the counters open: not counted (helpers.rs).
                super::helpers::register_current();
                let _ = ready_tx.send(());
                let c = match rx.recv() {
                    Ok(Start::Go(samplers, sample_type, layout)) => {
                        drain(samplers, sample_type, &layout, &syms, &stop2)
                    }
                    _ => Collected::default(),
                };
                super::helpers::leave();
                c
            })
            .map_err(|e| anyhow!("cannot start the contention drain thread: {e}"))?;
        ready_rx
            .recv()
            .map_err(|_| anyhow!("the contention drain thread died at start"))?;
        Ok(Drain {
            stop,
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    fn start(&mut self, samplers: Vec<Sampler>, sample_type: u64, layout: Layout) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Start::Go(samplers, sample_type, layout));
        }
    }

    /// Stops draining (after one last full pass) and returns what was read.
    pub fn finish(mut self) -> Collected {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Collected {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Start::Abort);
        }
        // Release pairs with the Acquire load in `drain`: everything the
        // caller did before stopping (disabling the events) happens before
        // the thread's final pass.
        self.stop.store(true, Ordering::Release);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

fn drain(
    mut samplers: Vec<Sampler>,
    sample_type: u64,
    layout: &Layout,
    syms: &Symbols,
    stop: &AtomicBool,
) -> Collected {
    let mut c = Collected::default();
    let mut store = Chunks::ready();
    // Per ring: the time of its last record, where a loss window begins.
    let mut last_time = vec![0u64; samplers.len()];
    let mut pollfds: Vec<libc::pollfd> = samplers
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_counter().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // Acquire pairs with the Release store in `Drain::stop_and_join`.
        let last = stop.load(Ordering::Acquire);
        for (ring, s) in samplers.iter_mut().enumerate() {
            while let Some(rec) = s.next_record() {
                match rec.ty() {
                    PERF_RECORD_SAMPLE => {
                        let body = rec.to_contiguous();
                        let ev =
                            super::lock_sample::parse_sample(&body, sample_type, layout, |chain| {
                                pick_caller(chain, syms)
                            });
                        if let Some(ev) = ev {
                            last_time[ring] = ev.time;
                            if !store.push(ev) {
                                c.dropped += 1;
                            }
                        }
                    }
                    ty @ (RECORD_LOST | RECORD_LOST_SAMPLES) => {
                        let body = rec.to_contiguous();
                        let Some((n, time, cpu)) = parse_lost(&body, ty) else {
                            continue;
                        };
                        c.lost += n;
                        // Without a time the window is unknown: from the
                        // ring's last record to the end of the run.
                        let marker = LockEvent {
                            time: last_time[ring],
                            addr: time.unwrap_or(u64::MAX),
                            caller: 0,
                            tid: 0,
                            cpu: cpu.unwrap_or(u32::MAX),
                            kind: Kind::Lost,
                        };
                        if let Some(t) = time {
                            last_time[ring] = t;
                        }
                        if !store.push(marker) {
                            c.dropped += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        if last {
            c.growths = store.growths;
            c.events = store.into_vec();
            return c;
        }
        // SAFETY:
        //   * `pollfds` is a live, exclusively borrowed array of
        //     `pollfds.len()` initialised `pollfd`s.
        //   * the fds belong to `samplers`, which outlive the call.
        unsafe {
            libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, 10);
        }
    }
}

/// One sampling event of tracepoint `id` on `cpu`: every hit sampled with
/// `sample_type`, stamped with CLOCK_MONOTONIC, and lost-sample records
/// carrying their time (`sample_id_all`).
pub fn sampling_builder(
    id: u64,
    cpu: usize,
    sample_type: u64,
    callchain: bool,
) -> Builder<'static> {
    let mut b = Builder::new(Tracepoint::with_id(id));
    b.include_kernel()
        .exclude_user(false)
        .one_cpu(cpu)
        .sample_period(1)
        .wakeup_watermark(RING_BYTES / 4)
        .clockid(perf_event::Clock::MONOTONIC)
        .sample_id_all(true);
    b.attrs_mut().sample_type = sample_type;
    if callchain {
        b.exclude_callchain_user(true).sample_max_stack(STACK_DEPTH);
    }
    b
}

/// The sampling events of one session.
#[derive(Debug)]
pub struct ContentionSampler {
    fds: Vec<RawFd>,
    /// Events writing into another event's buffer; kept open here.
    _redirected: Vec<Counter>,
    drain: Drain,
    /// Ring buffers opened (one per CPU).
    pub rings: usize,
}

impl ContentionSampler {
    /// Opens begin/end sampling on every CPU in `cpus` for `target` and
    /// hands the buffers to `drain`. On failure the drain thread is stopped
    /// and the reason given.
    pub fn open(
        kernel: &dyn Kernel,
        mut drain: Drain,
        layout: Layout,
        cpus: &[usize],
        target: Target<'_>,
        callchain: bool,
    ) -> Result<ContentionSampler, Unavailable> {
        let system = !matches!(target, Target::Threads(_));
        // One event pair per thread (inherited), or one per CPU.
        let pids: &[i32] = match target {
            Target::Threads(p) => p,
            _ => &[-1],
        };
        let mut sample_type = SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW;
        if callchain {
            sample_type |= SAMPLE_CALLCHAIN;
        }
        let mut samplers = Vec::with_capacity(cpus.len());
        let mut redirected = Vec::new();
        let mut fds = Vec::new();
        let ctx = OpenContext::of(kernel, system, None);
        let explain = |e: &std::io::Error| sys::explain_open_error(e, EventKind::RawSample, &ctx);
        for &cpu in cpus {
            let mut leader: Option<Sampler> = None;
            for &pid in pids {
                for id in [layout.begin_id, layout.end_id] {
                    let mut b = sampling_builder(id, cpu, sample_type, callchain);
                    match target {
                        Target::Threads(_) => b.observe_pid(pid).inherit(true),
                        Target::Cgroup(f) => b.observe_cgroup(f),
                        Target::AnyTask => b.any_pid(),
                    };
                    let counter = kernel.open(&b).map_err(|e| explain(&e))?;
                    fds.push(counter.as_raw_fd());
                    match &leader {
                        None => {
                            let s = counter.sampled(RING_BYTES).map_err(|e| {
                                Unavailable::fixable(
                                    format!(
                                        "cannot map a {} KiB ring buffer: {e}",
                                        RING_BYTES >> 10
                                    ),
                                    "as root, or raise kernel.perf_event_mlock_kb",
                                )
                            })?;
                            leader = Some(s);
                        }
                        Some(l) => {
                            sys::set_output(counter.as_raw_fd(), l.as_counter().as_raw_fd())
                                .map_err(|e| {
                                    Unavailable::fixable(
                                        format!("PERF_EVENT_IOC_SET_OUTPUT failed: {e}"),
                                        "",
                                    )
                                })?;
                            redirected.push(counter);
                        }
                    }
                }
            }
            samplers.extend(leader);
        }
        let rings = samplers.len();
        drain.start(samplers, sample_type, layout);
        Ok(ContentionSampler {
            fds,
            _redirected: redirected,
            drain,
            rings,
        })
    }

    /// Starts sampling.
    pub fn enable(&self) -> std::io::Result<()> {
        self.fds.iter().try_for_each(|&fd| sys::enable_fd(fd))
    }

    /// Stops sampling.
    pub fn disable(&self) -> std::io::Result<()> {
        self.fds.iter().try_for_each(|&fd| sys::disable_fd(fd))
    }

    /// Stops the drain thread and returns the samples, and the
    /// descriptors still open (the redirected events, for the closer).
    pub fn finish(self) -> (Collected, Vec<OwnedFd>) {
        let collected = self.drain.finish();
        let fds = self
            ._redirected
            .into_iter()
            // SAFETY: `into_raw_fd` gives up the Counter's ownership, so
            // the OwnedFd is the descriptor's only owner.
            .map(|c| unsafe { OwnedFd::from_raw_fd(c.into_raw_fd()) })
            .collect();
        (collected, fds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_stamped_with_clock_monotonic_and_losses_with_their_time() {
        let b = sampling_builder(408, 3, SAMPLE_TID | SAMPLE_TIME, true);
        let a = b.attrs();
        assert_eq!(a.use_clockid(), 1, "perf's default clock is per CPU");
        assert_eq!(a.clockid, libc::CLOCK_MONOTONIC);
        assert_eq!(a.sample_id_all(), 1, "lost records carry a time");
    }

    fn ev(time: u64) -> LockEvent {
        LockEvent {
            time,
            addr: 1,
            caller: 0,
            tid: 1,
            cpu: 0,
            kind: Kind::End,
        }
    }

    #[test]
    fn the_store_grows_by_chunks_and_counts_each_growth() {
        let mut c = Chunks::ready();
        assert_eq!(c.growths, 0, "the first chunk is allocated before sampling");
        let first = c.chunks[0].as_ptr();
        for t in 0..(CHUNK as u64 + 10) {
            assert!(c.push(ev(t)));
        }
        assert_eq!(c.growths, 1);
        assert_eq!(c.chunks[0].as_ptr(), first, "a chunk never reallocates");
        let v = c.into_vec();
        assert_eq!(v.len(), CHUNK + 10);
        assert_eq!(v[CHUNK + 9].time, CHUNK as u64 + 9);
    }
}
