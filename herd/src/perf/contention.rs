//! The `--contention` profile: kernel lock contention without BPF.
//!
//! The kernel fires `lock:contention_begin(lock_addr, flags)` when a task
//! starts waiting for a lock and `lock:contention_end(lock_addr, ret)` when
//! it gets it (include/trace/events/lock.h). [`super::sampler`] records
//! both with their raw payload, thread id, CPU and CLOCK_MONOTONIC time
//! (and the kernel call chain of the begin, to name the caller). Here the
//! samples are merged in time order, paired per task (a task waits for
//! one lock at a time, but a lock's slow path may itself contend on an
//! inner spinlock, so begins nest as a stack), and summed per lock and per
//! caller, the way `perf lock contention` (tracepoint mode) does.
//!
//! A task is its tid, except tid 0: every CPU's idle task is tid 0 (and so
//! is interrupt work that lands on it), so in system scope tid 0 is one
//! task per CPU, paired within its CPU only.
//!
//! Losses: where the kernel dropped samples (a full ring), a begin or an
//! end may be missing. A wait whose begin and end are both seen but which
//! spans a lost window on the CPU of either is dropped and counted
//! (`broken_by_loss`), and so is a begin that would otherwise have merged
//! with a later begin of the same lock across such a window (the stale
//! wait would have absorbed the next one).
//!
//! Nothing is hidden: samples the kernel dropped (`PERF_RECORD_LOST`),
//! samples over herd's memory cap, waits dropped around a loss, begins
//! without an end (still waiting when counting stopped) and ends without a
//! begin (waiting started before) are all counted and printed under the
//! table. Decoding the raw samples is [`super::lock_sample`].

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::kallsyms::{Region, Symbols};
use super::lock_sample::{lock_class, Kind, LockEvent, LCB_F_READ};
use super::mm_lock::{only_mmap_lock, MmapLock};

/// Wait statistics of one row (a lock, or a caller).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitStat {
    /// Lock address (hex) for by-lock rows; empty for by-caller rows.
    pub address: String,
    /// Kernel symbol of the lock (static locks) or of the caller
    /// (`func+0xoff`); empty when unknown.
    pub symbol: String,
    /// For by-lock rows without a symbol: `kernel image` (a static lock,
    /// kallsyms lists no data symbols) or `dynamic` (inside a heap object).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// Lock class (`spinlock`, `rwsem:W`, `mutex`, ...).
    pub class: String,
    /// Completed waits.
    pub contended: u64,
    /// Sum of waits, ns.
    pub total_ns: u64,
    /// Longest wait, ns.
    pub max_ns: u64,
    /// Shortest wait, ns.
    pub min_ns: u64,
}

impl WaitStat {
    /// Mean wait, ns.
    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.contended).unwrap_or(0)
    }

    fn add(&mut self, wait: u64) {
        if self.contended == 0 || wait < self.min_ns {
            self.min_ns = wait;
        }
        self.contended += 1;
        self.total_ns += wait;
        self.max_ns = self.max_ns.max(wait);
    }
}

/// The whole contention profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContentionReport {
    /// Per lock address and class, sorted by total wait (largest first).
    pub by_lock: Vec<WaitStat>,
    /// Per caller and class, sorted by total wait (empty without call chains).
    pub by_caller: Vec<WaitStat>,
    /// Rows left out of `by_lock`/`by_caller` to bound the JSON size.
    pub rows_omitted: u64,
    /// Samples read (begins + ends).
    pub samples: u64,
    /// contention_begin samples read.
    pub begins: u64,
    /// contention_end samples read.
    pub ends: u64,
    /// Begin/end pairs matched (= sum of `contended`).
    pub pairs: u64,
    /// Total wait over all pairs, ns.
    pub total_wait_ns: u64,
    /// Longest single wait, ns.
    pub max_wait_ns: u64,
    /// Begins still waiting when counting stopped.
    pub unfinished: u64,
    /// Ends whose begin came before counting started (or was lost).
    pub unmatched_ends: u64,
    /// Samples the kernel dropped because a ring buffer was full.
    pub lost: u64,
    /// Samples read but discarded over herd's in-memory cap.
    pub dropped: u64,
    /// Waits left out because they spanned a window of lost samples on
    /// their begin's or end's CPU (their begin or end may be another
    /// wait's), and stale begins not merged across one.
    #[serde(default)]
    pub broken_by_loss: u64,
    /// Buffer chunks herd allocated while sampling (each an mmap, taking
    /// the process's mmap_lock).
    #[serde(default)]
    pub buffer_growths: u64,
    /// The waits on the process's mmap_lock, found by address (mm_lock.rs).
    #[serde(default)]
    pub mmap_lock: Option<MmapLock>,
    /// Ring buffers (one per CPU) and the size of each, KiB.
    pub ring_buffers: usize,
    /// Size of each ring buffer, KiB.
    pub ring_kib: usize,
    /// True when /proc/kallsyms hides addresses (symbols unresolved).
    pub kallsyms_hidden: bool,
    /// True when kallsyms lists static data (CONFIG_KALLSYMS_ALL), so
    /// static locks can be named.
    pub kallsyms_data: bool,
}

/// Rows kept per table in the report.
pub const MAX_ROWS: usize = 100;

/// Windows of lost samples per CPU, sorted, for [`Losses::crosses`].
#[derive(Debug, Default)]
struct Losses {
    /// cpu -> (from, to) windows, sorted by `from` (a ring's windows never
    /// overlap, so also by `to`). `u32::MAX` holds windows of unknown CPU,
    /// which count for every CPU.
    by_cpu: HashMap<u32, Vec<(u64, u64)>>,
}

impl Losses {
    fn new(events: &[LockEvent]) -> Losses {
        let mut l = Losses::default();
        for e in events.iter().filter(|e| e.kind == Kind::Lost) {
            l.by_cpu.entry(e.cpu).or_default().push((e.time, e.addr));
        }
        for w in l.by_cpu.values_mut() {
            w.sort_unstable();
        }
        l
    }

    fn on(&self, cpu: u32, start: u64, end: u64) -> bool {
        let Some(w) = self.by_cpu.get(&cpu) else {
            return false;
        };
        // The first window ending after `start`; it overlaps if it begins
        // before `end`.
        let i = w.partition_point(|&(_, to)| to <= start);
        w.get(i).is_some_and(|&(from, _)| from < end)
    }

    /// True when a wait from `start` (on `a`) to `end` (on `b`) spans lost
    /// samples of either CPU.
    fn crosses(&self, a: u32, b: u32, start: u64, end: u64) -> bool {
        !self.by_cpu.is_empty()
            && (self.on(a, start, end) || self.on(b, start, end) || self.on(u32::MAX, start, end))
    }
}

/// One begin waiting for its end.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    addr: u64,
    start: u64,
    flags: u32,
    caller: u64,
    cpu: u32,
}

/// The task an event belongs to: its tid, or for tid 0 (each CPU's idle
/// task) the CPU's own.
fn task_of(e: &LockEvent) -> (u32, u32) {
    (e.tid, if e.tid == 0 { e.cpu } else { u32::MAX })
}

/// Pairs begins and ends per task and sums waits per lock and caller.
///
/// `events` need not be sorted (they come from per-CPU buffers); they are
/// sorted by time here, begins before ends at equal times.
pub fn analyse(events: &mut [LockEvent], syms: &Symbols) -> ContentionReport {
    events.sort_by_key(|e| (e.time, matches!(e.kind, Kind::End)));
    let losses = Losses::new(events);
    let mut waiting: HashMap<(u32, u32), Vec<Waiting>> = HashMap::new();
    let mut by_lock: HashMap<(u64, String), WaitStat> = HashMap::new();
    let mut by_caller: HashMap<(u64, String), WaitStat> = HashMap::new();
    // rwsem address -> (an mmap-only caller waited on it, waits, read
    // waits, total ns, waits by other callers): see mm_lock.rs.
    let mut rwsem_waits: HashMap<u64, (bool, u64, u64, u64, u64)> = HashMap::new();
    let mut r = ContentionReport {
        samples: events.iter().filter(|e| e.kind != Kind::Lost).count() as u64,
        kallsyms_hidden: syms.hidden,
        kallsyms_data: syms.data_symbols,
        ..Default::default()
    };
    r.begins = events
        .iter()
        .filter(|e| matches!(e.kind, Kind::Begin(_)))
        .count() as u64;
    r.ends = r.samples - r.begins;
    for e in events.iter() {
        if e.kind == Kind::Lost {
            continue;
        }
        let stack = waiting.entry(task_of(e)).or_default();
        match e.kind {
            Kind::Lost => {}
            Kind::Begin(flags) => match stack.last_mut() {
                // The same lock again before its end: a mutex that stopped
                // spinning and now sleeps. One wait, from the first begin;
                // the class is the latest. Not across lost samples: the
                // first begin's end (and this begin's pair) may be lost.
                Some(top)
                    if top.addr == e.addr && !losses.crosses(top.cpu, e.cpu, top.start, e.time) =>
                {
                    top.flags = flags
                }
                Some(top) if top.addr == e.addr => {
                    r.broken_by_loss += 1;
                    *top = Waiting {
                        addr: e.addr,
                        start: e.time,
                        flags,
                        caller: e.caller,
                        cpu: e.cpu,
                    };
                }
                _ => stack.push(Waiting {
                    addr: e.addr,
                    start: e.time,
                    flags,
                    caller: e.caller,
                    cpu: e.cpu,
                }),
            },
            Kind::End => {
                let Some(pos) = stack.iter().rposition(|w| w.addr == e.addr) else {
                    r.unmatched_ends += 1;
                    continue;
                };
                // Begins above it never ended: the kernel gave up on them
                // (trylock-style paths); count them as unfinished.
                r.unfinished += (stack.len() - pos - 1) as u64;
                let w = stack[pos];
                stack.truncate(pos);
                if losses.crosses(w.cpu, e.cpu, w.start, e.time) {
                    r.broken_by_loss += 1;
                    continue;
                }
                let wait = e.time.saturating_sub(w.start);
                let class = lock_class(w.flags);
                r.pairs += 1;
                r.total_wait_ns += wait;
                r.max_wait_ns = r.max_wait_ns.max(wait);
                let addr = w.addr;
                by_lock
                    .entry((addr, class.clone()))
                    .or_insert_with(|| WaitStat {
                        address: format!("{addr:016x}"),
                        symbol: syms.lock_name(addr).unwrap_or_default(),
                        region: match syms.region(addr) {
                            Region::KernelImage => "kernel image".into(),
                            Region::Dynamic => "dynamic".into(),
                        },
                        class: class.clone(),
                        ..Default::default()
                    })
                    .add(wait);
                let func = syms.function(w.caller).map(|(n, _)| n);
                if class.starts_with("rwsem") {
                    let mm = func.is_some_and(only_mmap_lock);
                    let e = rwsem_waits.entry(addr).or_default();
                    e.0 |= mm;
                    e.1 += 1;
                    e.2 += u64::from(w.flags & LCB_F_READ != 0);
                    e.3 += wait;
                    e.4 += u64::from(!mm);
                }
                if w.caller != 0 {
                    let caller = w.caller;
                    by_caller
                        .entry((caller, class.clone()))
                        .or_insert_with(|| WaitStat {
                            symbol: syms
                                .function(caller)
                                .map(|(n, off)| format!("{n}+{off:#x}"))
                                .unwrap_or_else(|| format!("{caller:#x}")),
                            class,
                            ..Default::default()
                        })
                        .add(wait);
                }
            }
        }
    }
    r.unfinished += waiting.values().map(|s| s.len() as u64).sum::<u64>();
    r.mmap_lock = mmap_lock_of(&rwsem_waits);
    let sorted = |m: HashMap<(u64, String), WaitStat>, omitted: &mut u64| {
        let mut v: Vec<WaitStat> = m.into_values().collect();
        v.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then(b.contended.cmp(&a.contended))
        });
        if v.len() > MAX_ROWS {
            *omitted += (v.len() - MAX_ROWS) as u64;
            v.truncate(MAX_ROWS);
        }
        v
    };
    let mut omitted = 0;
    r.by_lock = sorted(by_lock, &mut omitted);
    r.by_caller = sorted(by_caller, &mut omitted);
    r.rows_omitted = omitted;
    r
}

/// The mm locks among the rwsem waits (see mm_lock.rs); `None` when no
/// mmap-only caller waited on any rwsem.
fn mmap_lock_of(rwsem: &HashMap<u64, (bool, u64, u64, u64, u64)>) -> Option<MmapLock> {
    let mut m = MmapLock::default();
    let mut addrs: Vec<u64> = rwsem.iter().filter(|(_, v)| v.0).map(|(&a, _)| a).collect();
    if addrs.is_empty() {
        return None;
    }
    addrs.sort_unstable();
    for a in addrs {
        let (_, waits, read, ns, other) = rwsem[&a];
        m.addresses.push(format!("{a:016x}"));
        m.waits += waits;
        m.read_waits += read;
        m.wait_ns += ns;
        m.other_callers += other;
    }
    Some(m)
}

/// A duration the way perf prints it: `812 ns`, `3.25 us`, `1.20 ms`, `2.01 s`.
pub fn fmt_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.2} us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// Rows printed per table (the JSON has up to [`MAX_ROWS`]).
pub const PRINT_ROWS: usize = 20;

impl ContentionReport {
    /// Renders the profile like `perf lock contention` (by caller) and
    /// `perf lock contention -l` (by lock), with the accounting footer.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let head = |out: &mut String, last: &str| {
            let _ = writeln!(
                out,
                " {:>9} {:>12} {:>12} {:>12} {:>12}   {last}\n",
                "contended", "total wait", "max wait", "avg wait", "type"
            );
        };
        let row = |out: &mut String, s: &WaitStat, last: &str| {
            let _ = writeln!(
                out,
                " {:>9} {:>12} {:>12} {:>12} {:>12}   {last}",
                s.contended,
                fmt_ns(s.total_ns),
                fmt_ns(s.max_ns),
                fmt_ns(s.avg_ns()),
                s.class
            );
        };
        let _ = writeln!(
            out,
            "kernel lock contention (lock:contention_begin/end, sorted by total wait)\n"
        );
        if self.by_caller.is_empty() && self.by_lock.is_empty() {
            let _ = writeln!(out, " no completed lock waits were recorded\n");
        }
        if !self.by_caller.is_empty() {
            head(&mut out, "caller");
            for s in self.by_caller.iter().take(PRINT_ROWS) {
                row(&mut out, s, &s.symbol);
            }
            if self.by_caller.len() > PRINT_ROWS {
                let _ = writeln!(
                    out,
                    " ... {} more callers in --json",
                    self.by_caller.len() - PRINT_ROWS
                );
            }
            out.push('\n');
        }
        if !self.by_lock.is_empty() {
            head(&mut out, &format!("{:>16}   symbol", "address"));
            for s in self.by_lock.iter().take(PRINT_ROWS) {
                let sym = match (s.symbol.is_empty(), s.region.as_str()) {
                    (false, _) => s.symbol.as_str(),
                    (true, "kernel image") => "(static: kernel image or module; unnamed)",
                    _ => "(in a heap object)",
                };
                row(&mut out, s, &format!("{:>16}   {sym}", s.address));
            }
            if self.by_lock.len() > PRINT_ROWS {
                let _ = writeln!(
                    out,
                    " ... {} more locks in --json",
                    self.by_lock.len() - PRINT_ROWS
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "samples: {}  waits paired: {}  total wait: {}  max wait: {}",
            self.samples,
            self.pairs,
            fmt_ns(self.total_wait_ns),
            fmt_ns(self.max_wait_ns)
        );
        let _ = writeln!(
            out,
            "unpaired: {} begins still waiting at the end, {} ends whose begin preceded counting",
            self.unfinished, self.unmatched_ends
        );
        let _ = write!(
            out,
            "lost: {} samples dropped by the kernel (ring buffers full; {} x {} KiB), {} over herd's memory cap",
            self.lost, self.ring_buffers, self.ring_kib, self.dropped
        );
        if self.broken_by_loss > 0 {
            let _ = write!(
                out,
                "; {} waits spanning a loss left out (their begin or end may be another wait's)",
                self.broken_by_loss
            );
        }
        if self.buffer_growths > 0 {
            let _ = write!(
                out,
                "\nherd's sample buffer grew {} times while sampling (each an mmap under this process's mmap_lock, counted in the profile)",
                self.buffer_growths
            );
        }
        if self.rows_omitted > 0 {
            let _ = write!(
                out,
                "\nrows: {} beyond the top {MAX_ROWS} left out of the JSON",
                self.rows_omitted
            );
        }
        if !self.kallsyms_hidden && !self.kallsyms_data && !self.by_lock.is_empty() {
            let _ = write!(
                out,
                "\nsymbols: this kernel's kallsyms lists no static data (CONFIG_KALLSYMS_ALL=n): static locks such as tasklist_lock show as addresses"
            );
        }
        if self.kallsyms_hidden {
            let _ = write!(
                out,
                "\nsymbols: /proc/kallsyms hides addresses (run as root or sysctl kernel.kptr_restrict=0)"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::lock_sample::{LCB_F_MUTEX, LCB_F_SPIN, LCB_F_WRITE};

    fn ev(tid: u32, time: u64, addr: u64, kind: Kind) -> LockEvent {
        LockEvent {
            time,
            addr,
            caller: 0,
            tid,
            cpu: 0,
            kind,
        }
    }

    #[test]
    fn pairing_is_per_thread_nests_and_counts_the_unpaired() {
        let syms = Symbols::parse("ffffffff82000000 D tasklist_lock\nffffffff82000100 D after\n");
        let tl = 0xffffffff82000000;
        let mm = 0xffff888000001000;
        let mut evs = vec![
            // thread 1 waits 50 ns on tasklist_lock (write), thread 2 interleaved 30 ns
            ev(1, 100, tl, Kind::Begin(LCB_F_SPIN | LCB_F_WRITE)),
            ev(2, 110, tl, Kind::Begin(LCB_F_SPIN | LCB_F_WRITE)),
            ev(1, 150, tl, Kind::End),
            ev(2, 140, tl, Kind::End), // out of order across CPUs: sorted by time
            // thread 3: rwsem wait with an inner spinlock contention nested inside
            ev(3, 200, mm, Kind::Begin(LCB_F_WRITE)),
            ev(3, 210, tl + 8, Kind::Begin(LCB_F_SPIN)),
            ev(3, 215, tl + 8, Kind::End),
            ev(3, 400, mm, Kind::End),
            // mutex: spin begin then sleep begin, one end -> one wait of 90
            ev(4, 500, mm + 64, Kind::Begin(LCB_F_MUTEX | LCB_F_SPIN)),
            ev(4, 520, mm + 64, Kind::Begin(LCB_F_MUTEX)),
            ev(4, 590, mm + 64, Kind::End),
            // end without begin, begin without end
            ev(5, 600, mm, Kind::End),
            ev(6, 700, mm, Kind::Begin(LCB_F_READ)),
        ];
        let r = analyse(&mut evs, &syms);
        assert_eq!((r.samples, r.begins, r.ends), (13, 7, 6));
        assert_eq!(r.pairs, 5);
        assert_eq!((r.unfinished, r.unmatched_ends), (1, 1));
        assert_eq!(r.total_wait_ns, 50 + 30 + 5 + 200 + 90);
        assert_eq!(r.max_wait_ns, 200);
        let tasklist = r
            .by_lock
            .iter()
            .find(|s| s.symbol == "tasklist_lock")
            .unwrap();
        assert_eq!(
            (
                tasklist.contended,
                tasklist.total_ns,
                tasklist.max_ns,
                tasklist.min_ns
            ),
            (2, 80, 50, 30)
        );
        assert_eq!(tasklist.class, "rwlock:W");
        assert_eq!(tasklist.avg_ns(), 40);
        let inner = r
            .by_lock
            .iter()
            .find(|s| s.symbol == "tasklist_lock+0x8")
            .unwrap();
        assert_eq!(
            (inner.contended, inner.total_ns, inner.class.as_str()),
            (1, 5, "spinlock")
        );
        let rwsem = r.by_lock.iter().find(|s| s.class == "rwsem:W").unwrap();
        assert_eq!((rwsem.total_ns, rwsem.symbol.as_str()), (200, ""));
        let mutex = r.by_lock.iter().find(|s| s.class == "mutex").unwrap();
        assert_eq!(mutex.total_ns, 90);
        assert_eq!(r.by_lock[0].total_ns, 200, "sorted by total wait");
        let text = r.render();
        assert!(text.contains("tasklist_lock"), "{text}");
        assert!(text.contains("rwlock:W"), "{text}");
        assert!(text.contains("lost: 0 samples"), "{text}");
    }

    fn on(cpu: u32, mut e: LockEvent) -> LockEvent {
        e.cpu = cpu;
        e
    }

    #[test]
    fn tid_0_is_one_task_per_cpu() {
        // Two CPUs' idle tasks (tid 0) wait on the same lock at once.
        let l = 0xffff888000002000;
        let mut evs = vec![
            on(0, ev(0, 100, l, Kind::Begin(LCB_F_SPIN))),
            on(1, ev(0, 110, l, Kind::Begin(LCB_F_SPIN))),
            on(1, ev(0, 130, l, Kind::End)),
            on(0, ev(0, 150, l, Kind::End)),
        ];
        let r = analyse(&mut evs, &Symbols::default());
        assert_eq!(r.pairs, 2, "{r:?}");
        assert_eq!(r.total_wait_ns, 50 + 20);
        assert_eq!((r.unfinished, r.unmatched_ends), (0, 0));
    }

    fn lost(cpu: u32, from: u64, to: u64) -> LockEvent {
        LockEvent {
            time: from,
            addr: to,
            caller: 0,
            tid: 0,
            cpu,
            kind: Kind::Lost,
        }
    }

    #[test]
    fn a_loss_never_merges_a_stale_wait_into_the_next() {
        let l = 0xffff888000003000;
        // Thread 1's end at ~155 and its next begin were lost (window
        // 150-160 on CPU 0); then it waits again from 200 to 250.
        let mut evs = vec![
            ev(1, 100, l, Kind::Begin(LCB_F_WRITE)),
            lost(0, 150, 160),
            ev(1, 200, l, Kind::Begin(LCB_F_WRITE)),
            ev(1, 250, l, Kind::End),
        ];
        let r = analyse(&mut evs, &Symbols::default());
        assert_eq!((r.pairs, r.total_wait_ns), (1, 50), "{r:?}");
        assert_eq!(r.broken_by_loss, 1);
        assert_eq!(r.samples, 3, "markers are not samples");
        // A pair spanning a loss on its CPU is left out; one on another
        // CPU's loss is kept.
        let mut evs = vec![
            ev(2, 100, l, Kind::Begin(LCB_F_WRITE)),
            lost(0, 120, 130),
            ev(2, 200, l, Kind::End),
            on(1, ev(3, 300, l, Kind::Begin(LCB_F_WRITE))),
            lost(0, 310, 320),
            on(1, ev(3, 400, l, Kind::End)),
        ];
        let r = analyse(&mut evs, &Symbols::default());
        assert_eq!(
            (r.pairs, r.total_wait_ns, r.broken_by_loss),
            (1, 100, 1),
            "{r:?}"
        );
        assert!(r.render().contains("1 waits spanning a loss left out"));
    }

    #[test]
    fn the_mmap_lock_is_found_by_address_whoever_waits_on_it() {
        let syms = Symbols::parse(
            "ffffffff81100000 T madvise_do_behavior\nffffffff81100800 T do_exit\nffffffff81101000 T after\n",
        );
        let (madvise, do_exit) = (0xffffffff81100010, 0xffffffff81100820);
        let (mm, other) = (0xffff888000004000, 0xffff888000005000);
        let w = |tid, t, addr, caller, flags| {
            let mut b = ev(tid, t, addr, Kind::Begin(flags));
            b.caller = caller;
            [b, ev(tid, t + 10, addr, Kind::End)]
        };
        let mut evs: Vec<LockEvent> = [
            w(1, 100, mm, madvise, LCB_F_READ),
            // exit_mm inlined into do_exit: the same lock, counted now.
            w(2, 200, mm, do_exit, LCB_F_READ),
            w(3, 300, mm, do_exit, LCB_F_WRITE),
            // do_exit on another rwsem: not the mm's.
            w(4, 400, other, do_exit, LCB_F_READ),
        ]
        .concat();
        let r = analyse(&mut evs, &syms);
        let m = r.mmap_lock.expect("found");
        assert_eq!(m.addresses, vec![format!("{mm:016x}")]);
        assert_eq!((m.waits, m.read_waits, m.wait_ns), (3, 2, 30));
        assert_eq!(m.other_callers, 2, "the waits attribution by caller missed");
    }

    #[test]
    fn durations_print_like_perf() {
        assert_eq!(fmt_ns(812), "812 ns");
        assert_eq!(fmt_ns(3_250), "3.25 us");
        assert_eq!(fmt_ns(1_200_000), "1.20 ms");
        assert_eq!(fmt_ns(2_010_000_000), "2.01 s");
    }
}
