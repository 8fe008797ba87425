//! Decoding `lock:contention_begin` / `lock:contention_end` samples: the
//! tracepoints' `format` files (field offsets), the raw sample layout that
//! [`super::sampler`] asks the kernel for, the lock flags and the class
//! names `perf lock` gives them, and the caller picked from a call chain.
//! What the samples add up to is [`super::contention`].

use std::collections::HashMap;

use super::kallsyms::Symbols;

/// `LCB_F_SPIN`: a spinning lock (spinlock, rwlock, qrwlock).
pub const LCB_F_SPIN: u32 = 1 << 0;
/// `LCB_F_READ`: waiting for the read side.
pub const LCB_F_READ: u32 = 1 << 1;
/// `LCB_F_WRITE`: waiting for the write side.
pub const LCB_F_WRITE: u32 = 1 << 2;
/// `LCB_F_RT`: an rt-mutex based lock.
pub const LCB_F_RT: u32 = 1 << 3;
/// `LCB_F_PERCPU`: a percpu rw-semaphore.
pub const LCB_F_PERCPU: u32 = 1 << 4;
/// `LCB_F_MUTEX`: a mutex (with `LCB_F_SPIN`: optimistic spinning).
pub const LCB_F_MUTEX: u32 = 1 << 5;

/// The lock class for contention flags, named as `perf lock contention`
/// names them (tools/perf/builtin-lock.c, `lock_type_table`, whose first
/// entry is flags 0: a semaphore).
pub fn lock_class(flags: u32) -> String {
    let known = LCB_F_SPIN | LCB_F_READ | LCB_F_WRITE | LCB_F_RT | LCB_F_PERCPU | LCB_F_MUTEX;
    let rw = |base: &str| {
        if flags & LCB_F_READ != 0 {
            format!("{base}:R")
        } else {
            format!("{base}:W")
        }
    };
    let name = match flags & known {
        f if f & LCB_F_MUTEX != 0 => "mutex".to_string(),
        f if f & LCB_F_PERCPU != 0 => rw("pcpu-sem"),
        f if f & LCB_F_RT != 0 && f & (LCB_F_READ | LCB_F_WRITE) != 0 => rw("rwlock-rt"),
        f if f & LCB_F_RT != 0 => "rt-mutex".to_string(),
        f if f & LCB_F_SPIN != 0 && f & (LCB_F_READ | LCB_F_WRITE) != 0 => rw("rwlock"),
        LCB_F_SPIN => "spinlock".to_string(),
        f if f & (LCB_F_READ | LCB_F_WRITE) != 0 => rw("rwsem"),
        // `down()` and friends pass no flags (kernel/locking/semaphore.c).
        0 => "semaphore".to_string(),
        _ => format!("unknown:{flags:#x}"),
    };
    if flags & !known != 0 {
        format!("{name}+{:#x}", flags & !known)
    } else {
        name
    }
}

/// One field of a tracepoint's `format` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Byte offset in the raw record.
    pub offset: usize,
    /// Size in bytes (1, 2, 4 or 8 for the fields read here).
    pub size: usize,
}

impl Field {
    /// Reads the field from a raw record (native endian), if it fits.
    pub fn read(&self, raw: &[u8]) -> Option<u64> {
        let b = raw.get(self.offset..self.offset + self.size)?;
        Some(match self.size {
            1 => b[0] as u64,
            2 => u16::from_ne_bytes(b.try_into().ok()?) as u64,
            4 => u32::from_ne_bytes(b.try_into().ok()?) as u64,
            8 => u64::from_ne_bytes(b.try_into().ok()?),
            _ => return None,
        })
    }
}

/// Parses a tracefs `format` file into `name -> field`.
pub fn parse_format(text: &str) -> HashMap<String, Field> {
    let mut fields = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let (mut offset, mut size) = (None, None);
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            } else if decl.is_none() && !part.is_empty() {
                decl = Some(part);
            }
        }
        let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
            continue;
        };
        // "void * lock_addr", "unsigned int flags", "char comm[16]"
        let name = decl
            .rsplit(|c: char| c.is_whitespace() || c == '*')
            .next()
            .unwrap_or("")
            .split('[')
            .next()
            .unwrap_or("");
        if !name.is_empty() {
            fields.insert(name.to_string(), Field { offset, size });
        }
    }
    fields
}

/// Where the fields herd needs sit in the two tracepoints' raw records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Tracepoint id of `lock:contention_begin`.
    pub begin_id: u64,
    /// Tracepoint id of `lock:contention_end`.
    pub end_id: u64,
    /// `common_type` (the tracepoint id), same in both.
    pub common_type: Field,
    /// `lock_addr` in contention_begin.
    pub begin_addr: Field,
    /// `flags` in contention_begin.
    pub begin_flags: Field,
    /// `lock_addr` in contention_end.
    pub end_addr: Field,
}

impl Layout {
    /// Builds the layout from the two `format` files.
    pub fn new(
        begin_id: u64,
        begin_fmt: &str,
        end_id: u64,
        end_fmt: &str,
    ) -> Result<Layout, String> {
        let b = parse_format(begin_fmt);
        let e = parse_format(end_fmt);
        let get = |m: &HashMap<String, Field>, tp: &str, f: &str| {
            m.get(f)
                .copied()
                .ok_or_else(|| format!("lock:{tp} format has no field `{f}`"))
        };
        Ok(Layout {
            begin_id,
            end_id,
            common_type: get(&b, "contention_begin", "common_type")?,
            begin_addr: get(&b, "contention_begin", "lock_addr")?,
            begin_flags: get(&b, "contention_begin", "flags")?,
            end_addr: get(&e, "contention_end", "lock_addr")?,
        })
    }
}

/// `PERF_SAMPLE_TID`.
pub const SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`.
pub const SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_CALLCHAIN`.
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
/// `PERF_SAMPLE_CPU`.
pub const SAMPLE_CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_RAW`.
pub const SAMPLE_RAW: u64 = 1 << 10;
/// Call-chain entries at or above this are context markers, not addresses
/// (`PERF_CONTEXT_MAX`, -4095).
pub const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// What a sample says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// contention_begin with its flags.
    Begin(u32),
    /// contention_end.
    End,
    /// Not a sample: the kernel lost samples on CPU `cpu` between `time`
    /// (the ring's previous record) and `addr` (the time of its
    /// `PERF_RECORD_LOST`), so any wait across that window may be missing
    /// its begin or end.
    Lost,
}

/// One contention event, compact (the sampler may hold millions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockEvent {
    /// CLOCK_MONOTONIC, ns (the sampler asks for it: perf's default clock
    /// is per-CPU, and a wait may begin on one CPU and end on another).
    pub time: u64,
    /// Lock address (for [`Kind::Lost`]: the end of the lost window).
    pub addr: u64,
    /// First call-chain address outside the lock code (0 when unknown).
    pub caller: u64,
    /// Thread id.
    pub tid: u32,
    /// CPU the event fired on.
    pub cpu: u32,
    /// Begin or end.
    pub kind: Kind,
}

fn take<const N: usize>(buf: &[u8], at: &mut usize) -> Option<[u8; N]> {
    let b = buf.get(*at..*at + N)?.try_into().ok()?;
    *at += N;
    Some(b)
}

/// Parses the body of a `PERF_RECORD_SAMPLE` written with `sample_type`
/// (which must be [`SAMPLE_TID`] | [`SAMPLE_TIME`] | [`SAMPLE_CPU`] |
/// [`SAMPLE_RAW`], optionally with [`SAMPLE_CALLCHAIN`]). `caller` picks
/// the caller from the call chain. `None` for a record that is not one of
/// the two tracepoints or is truncated.
pub fn parse_sample(
    body: &[u8],
    sample_type: u64,
    layout: &Layout,
    caller: impl Fn(&[u64]) -> u64,
) -> Option<LockEvent> {
    let mut at = 0;
    let _pid = u32::from_ne_bytes(take(body, &mut at)?);
    let tid = u32::from_ne_bytes(take(body, &mut at)?);
    let time = u64::from_ne_bytes(take(body, &mut at)?);
    let cpu = u32::from_ne_bytes(take(body, &mut at)?);
    let _res = u32::from_ne_bytes(take::<4>(body, &mut at)?);
    let mut chain = Vec::new();
    if sample_type & SAMPLE_CALLCHAIN != 0 {
        let nr = u64::from_ne_bytes(take(body, &mut at)?) as usize;
        if nr > body.len() / 8 {
            return None;
        }
        chain.reserve(nr);
        for _ in 0..nr {
            chain.push(u64::from_ne_bytes(take(body, &mut at)?));
        }
    }
    let size = u32::from_ne_bytes(take(body, &mut at)?) as usize;
    let raw = body.get(at..at + size)?;
    let ty = layout.common_type.read(raw)?;
    let (kind, addr) = if ty == layout.begin_id {
        let flags = layout.begin_flags.read(raw)? as u32;
        (Kind::Begin(flags), layout.begin_addr.read(raw)?)
    } else if ty == layout.end_id {
        (Kind::End, layout.end_addr.read(raw)?)
    } else {
        return None;
    };
    let caller = match kind {
        Kind::Begin(_) if !chain.is_empty() => caller(&chain),
        _ => 0,
    };
    Some(LockEvent {
        time,
        addr,
        caller,
        tid,
        cpu,
        kind,
    })
}

/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = 2;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const RECORD_LOST_SAMPLES: u32 = 13;

/// Parses a `PERF_RECORD_LOST` (`{id, lost}`) or `PERF_RECORD_LOST_SAMPLES`
/// (`{lost}`) body followed by the `sample_id` that `sample_id_all` adds
/// (for [`SAMPLE_TID`] | [`SAMPLE_TIME`] | [`SAMPLE_CPU`]: pid, tid,
/// time, cpu, reserved): `(lost, time, cpu)`; time and cpu are `None`
/// when the record is too short to carry them.
pub fn parse_lost(body: &[u8], ty: u32) -> Option<(u64, Option<u64>, Option<u32>)> {
    let mut at = match ty {
        RECORD_LOST => 8,
        RECORD_LOST_SAMPLES => 0,
        _ => return None,
    };
    let lost = u64::from_ne_bytes(take(body, &mut at)?);
    let id = (|| {
        let _pid = u32::from_ne_bytes(take(body, &mut at)?);
        let _tid = u32::from_ne_bytes(take(body, &mut at)?);
        let time = u64::from_ne_bytes(take(body, &mut at)?);
        let cpu = u32::from_ne_bytes(take(body, &mut at)?);
        Some((time, cpu))
    })();
    Some((lost, id.map(|i| i.0), id.map(|i| i.1)))
}

/// The first address in a kernel call chain that is not a context marker
/// and not lock/scheduler/tracing code.
pub fn pick_caller(chain: &[u64], syms: &Symbols) -> u64 {
    chain
        .iter()
        .copied()
        .filter(|&ip| ip < PERF_CONTEXT_MAX)
        .find(|&ip| !syms.is_lock_frame(ip))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN_FMT: &str = "name: contention_begin
ID: 408
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned int flags;\toffset:16;\tsize:4;\tsigned:0;
";
    const END_FMT: &str = "name: contention_end
ID: 407
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:void * lock_addr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int ret;\toffset:16;\tsize:4;\tsigned:1;
";

    fn layout() -> Layout {
        Layout::new(408, BEGIN_FMT, 407, END_FMT).unwrap()
    }

    fn sample(
        tid: u32,
        time: u64,
        cpu: u32,
        chain: &[u64],
        ty: u16,
        addr: u64,
        flags: u32,
    ) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(tid.to_ne_bytes()); // pid
        b.extend(tid.to_ne_bytes());
        b.extend(time.to_ne_bytes());
        b.extend(cpu.to_ne_bytes());
        b.extend(0u32.to_ne_bytes());
        if !chain.is_empty() {
            b.extend((chain.len() as u64).to_ne_bytes());
            for ip in chain {
                b.extend(ip.to_ne_bytes());
            }
        }
        let mut raw = vec![0u8; 20];
        raw[0..2].copy_from_slice(&ty.to_ne_bytes());
        raw[8..16].copy_from_slice(&addr.to_ne_bytes());
        raw[16..20].copy_from_slice(&flags.to_ne_bytes());
        raw.extend([0u8; 4]); // the kernel pads raw data to 8 bytes with the size word
        b.extend((raw.len() as u32).to_ne_bytes());
        b.extend(raw);
        b
    }

    #[test]
    fn format_files_parse() {
        let f = parse_format(BEGIN_FMT);
        assert_eq!(f["lock_addr"], Field { offset: 8, size: 8 });
        assert_eq!(
            f["flags"],
            Field {
                offset: 16,
                size: 4
            }
        );
        assert_eq!(f["common_type"], Field { offset: 0, size: 2 });
        assert!(
            Layout::new(408, END_FMT, 407, END_FMT).is_err(),
            "begin needs flags"
        );
        let arr = parse_format("\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;");
        assert_eq!(
            arr["comm"],
            Field {
                offset: 8,
                size: 16
            }
        );
    }

    #[test]
    fn classes_follow_perf_names() {
        assert_eq!(lock_class(LCB_F_SPIN), "spinlock");
        assert_eq!(lock_class(LCB_F_SPIN | LCB_F_READ), "rwlock:R");
        assert_eq!(lock_class(LCB_F_SPIN | LCB_F_WRITE), "rwlock:W");
        assert_eq!(lock_class(LCB_F_READ), "rwsem:R");
        assert_eq!(lock_class(LCB_F_WRITE), "rwsem:W");
        assert_eq!(lock_class(LCB_F_RT), "rt-mutex");
        assert_eq!(lock_class(LCB_F_PERCPU | LCB_F_WRITE), "pcpu-sem:W");
        assert_eq!(lock_class(LCB_F_MUTEX), "mutex");
        assert_eq!(lock_class(LCB_F_MUTEX | LCB_F_SPIN), "mutex");
        assert_eq!(
            lock_class(0),
            "semaphore",
            "flags 0 is down() (perf: semaphore)"
        );
        assert_eq!(lock_class(LCB_F_SPIN | 1 << 9), "spinlock+0x200");
    }

    #[test]
    fn lost_records_carry_their_time_and_cpu_with_sample_id_all() {
        let mut lost = Vec::new();
        lost.extend(77u64.to_ne_bytes()); // id
        lost.extend(5u64.to_ne_bytes()); // lost
        lost.extend(1u32.to_ne_bytes()); // pid
        lost.extend(1u32.to_ne_bytes()); // tid
        lost.extend(9_000u64.to_ne_bytes()); // time
        lost.extend(3u32.to_ne_bytes()); // cpu
        lost.extend(0u32.to_ne_bytes());
        assert_eq!(
            parse_lost(&lost, RECORD_LOST),
            Some((5, Some(9_000), Some(3)))
        );
        assert_eq!(
            parse_lost(&lost[8..], RECORD_LOST_SAMPLES),
            Some((5, Some(9_000), Some(3)))
        );
        assert_eq!(parse_lost(&lost[..16], RECORD_LOST), Some((5, None, None)));
        assert_eq!(parse_lost(&lost, 9), None);
    }

    #[test]
    fn samples_parse_with_and_without_call_chains() {
        let l = layout();
        let base = SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW;
        let b = sample(7, 100, 1, &[], 408, 0xdead, LCB_F_WRITE);
        let e = parse_sample(&b, base, &l, |_| 0).unwrap();
        assert_eq!(
            (e.tid, e.time, e.cpu, e.addr, e.kind),
            (7, 100, 1, 0xdead, Kind::Begin(LCB_F_WRITE))
        );
        let b = sample(
            7,
            150,
            0,
            &[PERF_CONTEXT_MAX + 3986, 0x10, 0x20],
            408,
            0xbeef,
            LCB_F_SPIN,
        );
        let e = parse_sample(&b, base | SAMPLE_CALLCHAIN, &l, |c| c[2]).unwrap();
        assert_eq!((e.addr, e.caller), (0xbeef, 0x20));
        let b = sample(7, 150, 0, &[], 407, 0xbeef, 0);
        assert_eq!(parse_sample(&b, base, &l, |_| 0).unwrap().kind, Kind::End);
        let other = sample(7, 150, 0, &[], 999, 0xbeef, 0);
        assert_eq!(parse_sample(&other, base, &l, |_| 0), None);
        assert_eq!(
            parse_sample(&b[..b.len() - 20], base, &l, |_| 0),
            None,
            "truncated"
        );
    }
}
