//! The exit path makes no futex syscall (and a returning thread no syscall
//! beyond what a thread without exitq makes): counted by the kernel, per
//! thread.
//!
//! Each test thread gets its own perf counters, opened by the main thread on
//! the test thread's tid (`perf_event_open(pid = tid, cpu = -1)`): the
//! tracepoints `syscalls:sys_enter_futex` (plus the futex2 calls
//! `sys_enter_futex_{wait,wake,waitv,requeue}` where the kernel has them)
//! and `raw_syscalls:sys_enter` (every syscall). They form one group whose
//! leader starts disabled. The thread itself enables the group, with one
//! `ioctl`, as its last act before it exits (returns from its function, or
//! sleeps and is cancelled with `pthread_cancel`), so the counts cover
//! exactly its exit path: Rust's and glibc's thread teardown, the
//! thread-local destructors (where exitq hands the thread's hooks and open
//! batch to the domain) and the kernel's exit. A counter on a thread stays
//! readable after the thread died.
//!
//! *Hook* threads have registered exit hooks, deferred a callback (left in
//! their open batch) and used a read guard; *control* threads do the same
//! steps without touching exitq. They run interleaved (A B B A), one at a
//! time and in concurrent waves. One at a time, the futex counts of hook
//! and control threads must be equal. In every phase, a second
//! `sys_enter_futex` counter with an ftrace filter on the futex word's
//! address counts the *foreign* futex calls: those not on the runtime's own
//! words (glibc's and the loader's data, a malloc arena's header, the
//! thread's own `struct pthread`, Rust std's exit-time lock), which is where
//! anything exitq waited on or woke would be; hook threads must make none.
//! That separates exitq from the contention of glibc's and std's own
//! teardown when threads exit together. *Sanity* threads make one
//! `FUTEX_WAKE` syscall on a word of their stack after enabling their
//! counters and must count it, as foreign too, so the test cannot pass
//! because the counters or the filter count nothing. Finally
//! `exit_barrier` must find every hook run exactly once.
//!
//! Needs root (or `kernel.perf_event_paranoid <= 1`) and a mounted tracefs;
//! otherwise it prints `SKIPPED: <why>` to stderr and returns. CI on the
//! project machine runs as root and `scripts/test.sh` mounts tracefs, so it
//! runs there. Reproduce the figures in `docs/exitq.md#tests` with
//! `cargo test -p exitq --release --test exit_futex -- --nocapture`.
use std::ffi::c_void;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use exitq::{Domain, Reclaimer};

mod pthread_util;
use perf_event::events::Tracepoint;
use perf_event::{Builder, Counter};

/// Hook threads (and as many control threads) per phase.
const THREADS: usize = 200;
/// Threads per concurrent wave (half hook, half control).
const WAVE: usize = 40;

/// `PERF_EVENT_IOC_ENABLE` (`_IO('$', 0)`).
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
/// `PERF_IOC_FLAG_GROUP`: apply the ioctl to the whole group.
const PERF_IOC_FLAG_GROUP: libc::c_ulong = 1;

/// Where tracefs is looked for, in order.
const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The futex syscalls: the classic multiplexer, and the futex2 calls
/// (kernel 6.7+) that glibc may use in the future.
const FUTEX_CALLS: [&str; 5] = [
    "sys_enter_futex",
    "sys_enter_futex_wait",
    "sys_enter_futex_wake",
    "sys_enter_futex_waitv",
    "sys_enter_futex_requeue",
];

extern "C-unwind" {
    /// glibc's `sleep`, a cancellation point; `C-unwind` because
    /// `pthread_cancel` unwinds out of it.
    #[link_name = "sleep"]
    fn sleep_cancellable(seconds: libc::c_uint) -> libc::c_uint;
}

/// Prints straight to the process's stderr: libtest captures `eprintln!`
/// of passing tests, and a skip or a figure must be seen in CI logs.
fn say(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// The tracepoint ids this test counts.
struct Tracepoints {
    /// `raw_syscalls:sys_enter`: every syscall (the group leader).
    syscalls: u64,
    /// `syscalls:sys_enter_sched_yield`: the test's own spin loops, left out
    /// of the syscall figures.
    sched_yield: u64,
    /// The futex tracepoints this kernel has: (name, id).
    futex: Vec<(&'static str, u64)>,
    /// The address of Rust std's exit-time lock, if the binary has symbols.
    std_lock: Option<u64>,
}

fn tracepoint_id(root: &std::path::Path, sys: &str, name: &str) -> io::Result<u64> {
    let path = root.join("events").join(sys).join(name).join("id");
    let text = std::fs::read_to_string(&path)?;
    text.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: unparseable id {:?}", path.display(), text.trim()),
        )
    })
}

fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The tracepoints, or why the test cannot run here.
fn tracepoints() -> Result<Tracepoints, String> {
    let Some(root) = TRACEFS_ROOTS
        .iter()
        .map(PathBuf::from)
        .find(|r| r.join("events").is_dir())
    else {
        if let Some(denied) = TRACEFS_ROOTS.iter().find(|r| {
            std::fs::metadata(PathBuf::from(r).join("events"))
                .is_err_and(|e| e.kind() == io::ErrorKind::PermissionDenied)
        }) {
            return Err(format!(
                "tracefs at {denied} is not readable by this user (permission denied): \
                 run as root (CI does)"
            ));
        }
        return Err(format!(
            "tracefs is not mounted (no events/ under {}); as root: \
             mount -t tracefs nodev /sys/kernel/tracing",
            TRACEFS_ROOTS.join(" or ")
        ));
    };
    if !is_root() && !matches!(paranoid(), Some(p) if p <= 1) {
        return Err(format!(
            "not root and kernel.perf_event_paranoid is {:?}: per-thread kernel \
             tracepoint counters need <= 1 or CAP_PERFMON \
             (sudo sysctl kernel.perf_event_paranoid=1)",
            paranoid()
        ));
    }
    let unreadable = |what: &str, e: io::Error| {
        format!("tracepoint {what} unavailable in this kernel or tracefs ({e})")
    };
    let syscalls = tracepoint_id(&root, "raw_syscalls", "sys_enter")
        .map_err(|e| unreadable("raw_syscalls:sys_enter", e))?;
    let sched_yield = tracepoint_id(&root, "syscalls", "sys_enter_sched_yield")
        .map_err(|e| unreadable("syscalls:sys_enter_sched_yield", e))?;
    let mut futex = Vec::new();
    for name in FUTEX_CALLS {
        match tracepoint_id(&root, "syscalls", name) {
            Ok(id) => futex.push((name, id)),
            // futex2 calls are absent before kernel 6.7; the classic one must exist.
            Err(e) if name != "sys_enter_futex" && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(unreadable(&format!("syscalls:{name}"), e)),
        }
    }
    Ok(Tracepoints {
        syscalls,
        sched_yield,
        futex,
        std_lock: own_symbol(STD_THREAD_INFO_LOCK),
    })
}

/// One thread's counters: the group leader counts every syscall, the
/// members the futex calls.
struct Counters {
    syscalls: Counter,
    sched_yield: Counter,
    futex: Vec<Counter>,
    /// `sys_enter_futex` filtered to futex words outside the C runtime's
    /// own (see [`foreign_futex_filter`]).
    foreign: Counter,
}

impl Counters {
    /// Opens the group on thread `tid`, leader disabled, members enabled
    /// (they count while the leader does); `filter` selects the foreign
    /// futex calls.
    fn open(tp: &Tracepoints, tid: i32, filter: &str) -> io::Result<Counters> {
        let builder = |id: u64, enabled: bool| {
            let mut b = Builder::new(Tracepoint::with_id(id));
            // Tracepoints fire in the kernel: kernel events must be included.
            b.include_kernel()
                .exclude_user(false)
                .observe_pid(tid)
                .any_cpu()
                .enabled(enabled);
            b
        };
        let mut syscalls = builder(tp.syscalls, false).build()?;
        let sched_yield = builder(tp.sched_yield, true).build_with_group(&mut syscalls)?;
        let futex = tp
            .futex
            .iter()
            .map(|&(_, id)| builder(id, true).build_with_group(&mut syscalls))
            .collect::<io::Result<Vec<_>>>()?;
        // `sys_enter_futex` is always first in `tp.futex`.
        let foreign = builder(tp.futex[0].1, true).build_with_group(&mut syscalls)?;
        set_filter(foreign.as_raw_fd(), filter)?;
        Ok(Counters {
            syscalls,
            sched_yield,
            futex,
            foreign,
        })
    }

    fn read(&mut self) -> io::Result<Counts> {
        let syscalls = self.syscalls.read_full()?;
        let per_call = self
            .futex
            .iter_mut()
            .map(|c| c.read())
            .collect::<io::Result<Vec<_>>>()?;
        let yields = self.sched_yield.read()?;
        Ok(Counts {
            syscalls: syscalls.count() - yields,
            futex: per_call.iter().sum(),
            // futex2 calls are never the C runtime's (glibc 2.36 has none).
            foreign: self.foreign.read()? + per_call[1..].iter().sum::<u64>(),
            per_call,
            enabled_ns: syscalls.time_enabled().map_or(0, |d| d.as_nanos()),
        })
    }
}

/// `PERF_EVENT_IOC_SET_FILTER` (`_IOW('$', 6, char *)`).
const PERF_EVENT_IOC_SET_FILTER: libc::c_ulong = 0x4008_2406;

/// Sets the ftrace filter of tracepoint counter `fd`.
fn set_filter(fd: RawFd, filter: &str) -> io::Result<()> {
    let filter = std::ffi::CString::new(filter).map_err(io::Error::other)?;
    // SAFETY:
    //   * `fd` is an open perf event owned by the caller.
    //   * the argument is a NUL-terminated string that outlives the call;
    //     the kernel only reads it.
    let rc = unsafe { libc::ioctl(fd, PERF_EVENT_IOC_SET_FILTER as _, filter.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The C runtime libraries whose own locks an exiting thread may contend
/// on: glibc (`free_list_lock`, the stack cache, `main_arena`), the
/// dynamic loader (the unwinder's `dl_iterate_phdr` lock) and libgcc's
/// unwinder.
const RUNTIME_LIBS: [&str; 3] = ["/libc.so.6", "/ld-linux-x86-64.so.2", "/libgcc_s.so.1"];

/// glibc's `HEAP_MAX_SIZE` on 64-bit: a thread arena's heap starts at a
/// multiple of it, with the arena's `malloc_state` (and its mutex) first.
const ARENA_HEAP_ALIGN: u64 = 64 << 20;

/// The mangled-name tail of Rust std's `stack_overflow::thread_info::LOCK`:
/// a global `Mutex<()>` every `std::thread` takes on exit (dropping its
/// signal-stack handler), so threads exiting together contend on it.
const STD_THREAD_INFO_LOCK: &str = "14stack_overflow11thread_info4LOCK";

/// The run-time address of the symbol of this executable whose name
/// contains `needle`, from its ELF symbol table (`None` if stripped).
fn own_symbol(needle: &str) -> Option<u64> {
    let exe = std::fs::read("/proc/self/exe").ok()?;
    let u16_at = |o: usize| Some(u16::from_le_bytes(exe.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(exe.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(exe.get(o..o + 8)?.try_into().ok()?));
    // ELF64 little-endian only (x86_64).
    if exe.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (shoff, shentsize, shnum) = (u64_at(0x28)? as usize, u16_at(0x3a)?, u16_at(0x3c)?);
    let section = |i: usize| shoff + i * shentsize as usize;
    // SHT_SYMTAB = 2.
    let symtab = (0..shnum as usize).find(|&i| u32_at(section(i) + 4) == Some(2))?;
    let (sym_off, sym_size) = (
        u64_at(section(symtab) + 0x18)? as usize,
        u64_at(section(symtab) + 0x20)? as usize,
    );
    let strtab = section(u32_at(section(symtab) + 0x28)? as usize);
    let str_off = u64_at(strtab + 0x18)? as usize;
    let value = (0..sym_size / 24).find_map(|k| {
        let sym = sym_off + k * 24;
        let name = str_off + u32_at(sym)? as usize;
        let end = name + exe.get(name..)?.iter().position(|&b| b == 0)?;
        let matches = std::str::from_utf8(&exe[name..end]).ok()?.contains(needle);
        if matches {
            u64_at(sym + 8)
        } else {
            None
        }
    })?;
    // A position-independent executable is mapped at the start of its
    // first mapping (file offset 0, first segment at address 0).
    let exe_path = std::fs::read_link("/proc/self/exe").ok()?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let base = maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let lo = f.next()?.split_once('-')?.0;
        let offset = f.nth(1)?;
        let path = f.nth(2)?;
        if path == exe_path.to_str()? && u64::from_str_radix(offset, 16).ok()? == 0 {
            u64::from_str_radix(lo, 16).ok()
        } else {
            None
        }
    })?;
    Some(base + value)
}

/// An ftrace filter for `sys_enter_futex` that keeps only the futex calls
/// on words that are *not* the runtime's own: not in the data (or bss)
/// of [`RUNTIME_LIBS`], not in a glibc thread arena's header, not in the
/// exiting thread's own `struct pthread` at `pd` (its `exit_lock`, which
/// `pthread_cancel` holds while it signals the thread), and not Rust std's
/// exit-time lock at `std_lock` ([`STD_THREAD_INFO_LOCK`]).
///
/// Whatever exitq (or the test) might wait on or wake lives elsewhere
/// (heap, other statics of the binary, stacks), so on an exit path these
/// calls are the ones exitq could be responsible for.
fn foreign_futex_filter(pd: u64, std_lock: Option<u64>) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let mut skip: Vec<(u64, u64)> = vec![(pd, pd + 0x1000)];
    if let Some(lock) = std_lock {
        skip.push((lock, lock + 4));
    }
    let mut runtime_end = None;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let Some((lo, hi)) = fields.next().and_then(|r| r.split_once('-')) else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        let path = fields.nth(4);
        if path.is_some_and(|p| RUNTIME_LIBS.iter().any(|l| p.ends_with(l))) {
            skip.push((lo, hi));
            runtime_end = Some(hi);
            continue;
        }
        if path.is_none() {
            if runtime_end == Some(lo) {
                // The library's bss, right after its file mappings.
                skip.push((lo, hi));
            } else if lo % ARENA_HEAP_ALIGN == 0 {
                skip.push((lo, lo + 0x1000));
            }
        }
        runtime_end = None;
    }
    skip.iter()
        .map(|(lo, hi)| format!("(uaddr < {lo:#x} || uaddr >= {hi:#x})"))
        .collect::<Vec<_>>()
        .join(" && ")
}

/// What one thread's exit path made.
#[derive(Debug, Clone)]
struct Counts {
    /// Every syscall but `sched_yield` (the test's own spins).
    syscalls: u64,
    futex: u64,
    /// Futex calls on words that are not the C runtime's own.
    foreign: u64,
    per_call: Vec<u64>,
    enabled_ns: u128,
}

/// What a test thread does before it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Registers two exit hooks, defers a callback, takes a read guard.
    Hook,
    /// The same steps without exitq.
    Control,
    /// Control, plus one `FUTEX_WAKE` syscall after enabling its counters.
    Sanity,
}

/// How a test thread ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// A `std::thread` whose function returns.
    Return,
    /// A raw pthread cancelled (deferred) while it sleeps; it waits for
    /// `pthread_cancel` to return before its final stage
    /// ([`AwaitCanceller`]).
    Cancel,
    /// The same without the wait: glibc's final stage races with the
    /// canceller (reported, not compared; see [`AwaitCanceller`]).
    CancelRaced,
}

/// The hand-shake between the main thread and one test thread: atomics
/// only, so the test thread makes no futex call of its own.
struct Slot {
    /// The thread's tid, 0 until published.
    tid: AtomicI32,
    /// The thread's `pthread_self()` (glibc's `struct pthread`).
    pd: AtomicUsize,
    /// The counter group's leader fd, -1 until the counters are open.
    fd: AtomicI32,
    /// Set by a cancelled thread right before it sleeps.
    armed: AtomicBool,
    /// Set by the main thread once `pthread_cancel` on the thread returned.
    cancelled: AtomicBool,
}

/// Everything a test thread gets.
struct Job {
    role: Role,
    exit: Exit,
    /// Index into `Shared::runs` for a hook thread.
    index: usize,
    slot: Arc<Slot>,
    shared: Arc<Shared>,
}

/// State shared by one phase's threads.
struct Shared {
    domain: Domain,
    /// Released together in a concurrent wave; set from the start otherwise.
    go: AtomicBool,
    /// Runs of each hook thread's first hook.
    runs: Vec<AtomicU32>,
    /// Runs of the second hooks and of the deferred callbacks.
    others: AtomicUsize,
}

/// Runs the role's setup, hands the main thread its tid, waits for its
/// counters and the start signal, and enables the counters. Everything the
/// thread does after this returns is counted.
fn prepare(job: Job) -> Arc<Slot> {
    let Job {
        role,
        exit: _,
        index,
        slot,
        shared,
    } = job;
    if role == Role::Hook {
        let s = shared.clone();
        shared.domain.register_exit(move || {
            s.runs[index].fetch_add(1, Ordering::Relaxed);
        });
        let s = shared.clone();
        shared.domain.register_exit(move || {
            s.others.fetch_add(1, Ordering::Relaxed);
        });
        // Left in the thread's open batch: the exit path hands it over.
        let s = shared.clone();
        shared.domain.defer(move || {
            s.others.fetch_add(1, Ordering::Relaxed);
        });
        drop(shared.domain.read());
    }
    // SAFETY: pthread_self has no preconditions and cannot fail.
    let pd = unsafe { libc::pthread_self() };
    slot.pd.store(pd as usize, Ordering::Relaxed);
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // Release: pairs with the main thread's Acquire load in `wait_tid`
    // (the registration above happens-before the counters open).
    slot.tid.store(tid, Ordering::Release);
    // No futex: spin (yielding) until the main thread opened the counters.
    let fd = loop {
        // Acquire: pairs with the main thread's Release store of the fd.
        let fd = slot.fd.load(Ordering::Acquire);
        if fd >= 0 {
            break fd;
        }
        std::thread::yield_now();
    };
    // Acquire: pairs with the main thread's Release store of `go`.
    while !shared.go.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    // The thread keeps nothing of the test's but its slot (the main thread
    // holds other references, so these drops free nothing).
    drop(shared);
    enable(fd);
    if role == Role::Sanity {
        futex_wake();
    }
    slot
}

/// Enables the counter group `fd` of the calling thread.
fn enable(fd: RawFd) {
    // SAFETY:
    //   * `fd` is the leader of a perf counter group that the main thread
    //     keeps open until it has joined this thread.
    //   * the request takes an integer argument, no memory is accessed.
    let rc = unsafe { libc::ioctl(fd, PERF_EVENT_IOC_ENABLE as _, PERF_IOC_FLAG_GROUP) };
    assert_eq!(rc, 0, "enable: {}", io::Error::last_os_error());
}

/// One `FUTEX_WAKE` syscall on a private word nobody waits on.
fn futex_wake() {
    let word = AtomicU32::new(0);
    // SAFETY: a valid, aligned futex word that outlives the call; FUTEX_WAKE
    // reads no other argument.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        )
    };
    assert_eq!(rc, 0, "FUTEX_WAKE woke someone");
}

/// Holds a cancelled thread, in a thread-local destructor (after the
/// forced unwind, next to exitq's), until `pthread_cancel` has returned in
/// the main thread.
///
/// Without it, glibc's own exit races with the canceller: `pthread_cancel`
/// holds the target's `exit_lock` while it sends the signal, and a target
/// that unwinds faster reaches the same lock in its final stage
/// (`start_thread` sets `exiting` under it), then waits for it with a futex
/// call and wakes with another: 0 to 2 futex calls per cancelled thread,
/// hook or not, by timing alone. Waiting here takes that race out so the
/// comparison is exact; the raced figure is in `docs/exitq.md#tests`.
struct AwaitCanceller(Option<Arc<Slot>>);

impl Drop for AwaitCanceller {
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            // Acquire: pairs with the main thread's Release store after
            // `pthread_cancel` returned.
            while !slot.cancelled.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
    }
}

thread_local! {
    static AWAIT_CANCELLER: std::cell::RefCell<AwaitCanceller> =
        const { std::cell::RefCell::new(AwaitCanceller(None)) };
}

extern "C-unwind" fn cancelled_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: the Box leaked by `spawn` for this thread.
    let job = unsafe { Box::from_raw(arg.cast::<Job>()) };
    if job.exit == Exit::Cancel {
        // Registers the destructor now, not on the exit path.
        AWAIT_CANCELLER.with(|a| a.borrow_mut().0 = Some(job.slot.clone()));
    }
    let slot = prepare(*job);
    // Release: pairs with the main thread's Acquire load before it cancels
    // (the counters are enabled by then).
    slot.armed.store(true, Ordering::Release);
    drop(slot);
    loop {
        // SAFETY: a cancellation point; no live destructors in this frame.
        unsafe { sleep_cancellable(1) };
    }
}

/// A running test thread.
enum Handle {
    Std(std::thread::JoinHandle<()>),
    Pthread(libc::pthread_t),
}

fn spawn(exit: Exit, job: Job) -> Handle {
    match exit {
        Exit::Return => Handle::Std(
            std::thread::Builder::new()
                .name("exit-futex".into())
                .spawn(move || drop(prepare(job)))
                .expect("spawn a test thread"),
        ),
        Exit::Cancel | Exit::CancelRaced => {
            let tid = pthread_util::spawn(cancelled_main, Box::new(job));
            Handle::Pthread(tid)
        }
    }
}

fn wait_tid(slot: &Slot) -> i32 {
    loop {
        // Acquire: pairs with the thread's Release store of its tid.
        let tid = slot.tid.load(Ordering::Acquire);
        if tid != 0 {
            return tid;
        }
        std::thread::yield_now();
    }
}

/// One started test thread, seen from the main thread.
struct Running {
    role: Role,
    slot: Arc<Slot>,
    handle: Handle,
    counters: Counters,
}

/// Starts `role` threads in order, opens their counters, releases them
/// together, cancels them if `exit` says so, joins them and reads their
/// counters.
fn run_group(
    exit: Exit,
    roles: &[Role],
    shared: &Arc<Shared>,
    tp: &Tracepoints,
    next_hook: &mut usize,
) -> Vec<(Role, Counts)> {
    let mut running = Vec::with_capacity(roles.len());
    for &role in roles {
        let slot = Arc::new(Slot {
            tid: AtomicI32::new(0),
            pd: AtomicUsize::new(0),
            fd: AtomicI32::new(-1),
            armed: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
        });
        let index = if role == Role::Hook {
            *next_hook += 1;
            *next_hook - 1
        } else {
            usize::MAX
        };
        let job = Job {
            role,
            exit,
            index,
            slot: slot.clone(),
            shared: shared.clone(),
        };
        let handle = spawn(exit, job);
        let tid = wait_tid(&slot);
        // Read after the thread's setup: its malloc arena exists by now.
        let filter = foreign_futex_filter(slot.pd.load(Ordering::Relaxed) as u64, tp.std_lock);
        let counters = Counters::open(tp, tid, &filter)
            .unwrap_or_else(|e| panic!("perf_event_open on thread {tid}: {e}"));
        // Release: pairs with the thread's Acquire load of its fd.
        slot.fd
            .store(counters.syscalls.as_raw_fd(), Ordering::Release);
        running.push(Running {
            role,
            slot,
            handle,
            counters,
        });
    }
    // Release: pairs with the threads' Acquire loads of `go`.
    shared.go.store(true, Ordering::Release);
    for r in &running {
        if let Handle::Pthread(tid) = r.handle {
            // Acquire: pairs with the thread's Release store of `armed`.
            while !r.slot.armed.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            // SAFETY: a live joinable thread, joined below.
            let rc = unsafe { libc::pthread_cancel(tid) };
            assert_eq!(rc, 0, "pthread_cancel");
            // Release: pairs with the Acquire load in `AwaitCanceller::drop`.
            r.slot.cancelled.store(true, Ordering::Release);
        }
    }
    running
        .into_iter()
        .map(|mut r| {
            match r.handle {
                Handle::Std(h) => h.join().expect("test thread panicked"),
                Handle::Pthread(tid) => {
                    let mut ret: *mut c_void = std::ptr::null_mut();
                    // SAFETY: a joinable thread, joined once.
                    let rc = unsafe { libc::pthread_join(tid, &mut ret) };
                    assert_eq!(rc, 0, "pthread_join");
                    // PTHREAD_CANCELED is `(void *) -1` in glibc.
                    assert_eq!(ret as isize, -1, "the thread was not cancelled");
                }
            }
            let counts = r
                .counters
                .read()
                .expect("read the counters of a dead thread");
            (r.role, counts)
        })
        .collect()
}

/// `n` roles per kind in A B B A order.
fn interleaved(n: usize) -> Vec<Role> {
    (0..n)
        .flat_map(|i| {
            if i % 2 == 0 {
                [Role::Hook, Role::Control]
            } else {
                [Role::Control, Role::Hook]
            }
        })
        .collect()
}

/// Sums of one role's counts.
#[derive(Debug, Default)]
struct Totals {
    threads: u64,
    syscalls: u64,
    futex: u64,
    max_futex: u64,
    foreign: u64,
    per_call: Vec<u64>,
}

fn totals(results: &[(Role, Counts)], role: Role) -> Totals {
    let mut t = Totals::default();
    for (_, c) in results.iter().filter(|(r, _)| *r == role) {
        t.threads += 1;
        t.syscalls += c.syscalls;
        t.futex += c.futex;
        t.max_futex = t.max_futex.max(c.futex);
        t.foreign += c.foreign;
        t.per_call.resize(c.per_call.len(), 0);
        for (sum, v) in t.per_call.iter_mut().zip(&c.per_call) {
            *sum += v;
        }
    }
    t
}

/// One phase: `THREADS` hook and `THREADS` control threads exiting the
/// `exit` way, one at a time (`wave == 1`) or in waves of `wave` threads
/// released together, with a sanity thread before and after.
fn phase(tp: &Tracepoints, exit: Exit, reclaimer: Reclaimer, wave: usize) -> (Totals, Totals) {
    let name = format!(
        "{exit:?}, {reclaimer:?} reclaimer, {}",
        if wave == 1 {
            "one thread at a time".to_string()
        } else {
            format!("waves of {wave} threads released together")
        }
    );
    let shared = Arc::new(Shared {
        // Publishing the open batch is left to the exit path (no flush by
        // latency while the thread waits for its counters).
        domain: Domain::builder()
            .reclaimer(reclaimer)
            .flush_latency(Duration::from_secs(3600))
            .build(),
        go: AtomicBool::new(wave == 1),
        runs: (0..THREADS).map(|_| AtomicU32::new(0)).collect(),
        others: AtomicUsize::new(0),
    });
    let mut results = Vec::new();
    let mut next_hook = 0;
    // A sanity thread first: the counters must count a futex call.
    results.extend(run_group(
        exit,
        &[Role::Sanity],
        &shared,
        tp,
        &mut next_hook,
    ));
    let roles = interleaved(THREADS);
    for chunk in roles.chunks(wave) {
        if wave > 1 {
            shared.go.store(false, Ordering::Relaxed);
        }
        results.extend(run_group(exit, chunk, &shared, tp, &mut next_hook));
    }
    results.extend(run_group(
        exit,
        &[Role::Sanity],
        &shared,
        tp,
        &mut next_hook,
    ));
    assert_eq!(next_hook, THREADS);

    // The counters are live: each sanity thread counted its FUTEX_WAKE.
    for (_, c) in results.iter().filter(|(r, _)| *r == Role::Sanity) {
        assert!(
            c.futex >= 1,
            "{name}: a sanity thread's FUTEX_WAKE was not counted: {c:?}"
        );
        assert!(
            c.foreign >= 1,
            "{name}: the foreign-futex filter hid a sanity thread's FUTEX_WAKE: {c:?}"
        );
        assert!(c.enabled_ns > 0, "{name}: counters never enabled: {c:?}");
    }
    let hook = totals(&results, Role::Hook);
    let control = totals(&results, Role::Control);
    let sanity = totals(&results, Role::Sanity);
    let per = |x: u64, t: &Totals| x as f64 / t.threads as f64;
    say(&format!(
        "exit_futex [{name}]: futex syscalls per exiting thread: hook {:.3} ({} in {} threads, \
         max {} in one, {} not on the runtime's own words), control {:.3} ({} in {}, max {}, \
         {} not the runtime's); all syscalls per exit: hook {:.2}, control {:.2}; sanity \
         threads {} futex in {}",
        per(hook.futex, &hook),
        hook.futex,
        hook.threads,
        hook.max_futex,
        hook.foreign,
        per(control.futex, &control),
        control.futex,
        control.threads,
        control.max_futex,
        control.foreign,
        per(hook.syscalls, &hook),
        per(control.syscalls, &control),
        sanity.futex,
        sanity.threads,
    ));
    if hook.futex + control.futex > 0 {
        let names: Vec<String> = tp
            .futex
            .iter()
            .zip(hook.per_call.iter().zip(&control.per_call))
            .map(|((n, _), (h, c))| format!("{n}: hook {h}, control {c}"))
            .collect();
        say(&format!(
            "exit_futex [{name}]: by call: {}",
            names.join("; ")
        ));
    }

    // Every hook ran exactly once, every deferred callback ran.
    shared.domain.exit_barrier();
    for (i, r) in shared.runs.iter().enumerate() {
        assert_eq!(
            r.load(Ordering::Relaxed),
            1,
            "{name}: hook thread {i}'s hook ran a wrong number of times"
        );
    }
    assert_eq!(shared.others.load(Ordering::Relaxed), 2 * THREADS, "{name}");
    let s = shared.domain.stats();
    assert_eq!(s.exits_run, 2 * THREADS as u64, "{name}: {s:?}");
    (hook, control)
}

#[test]
fn the_exit_path_makes_no_futex_syscall() {
    let tp = match tracepoints() {
        Ok(tp) => tp,
        Err(why) => {
            say(&format!("SKIPPED: exit_futex: {why}"));
            return;
        }
    };
    // Keeps the tracepoints registered for the whole test: otherwise every
    // thread's counters register and unregister the syscall tracepoints,
    // which waits for RCU grace periods in the kernel (~0.2 s per thread).
    // SAFETY: gettid has no preconditions and cannot fail.
    let _registered = Counters::open(&tp, unsafe { libc::gettid() }, "uaddr == 0")
        .unwrap_or_else(|e| panic!("perf_event_open on the main thread: {e}"));
    // Every phase: no futex call of a hook thread's exit path is on a word
    // outside the C runtime's own (`foreign`), i.e. none is exitq's (or
    // anything else's it could cause). Sanity threads prove the filter
    // still sees a foreign call.
    //
    // One at a time (each way to exit, each reclaimer), also: hook and
    // control threads make the same number of futex calls in total (0 on
    // this machine) and no hook thread more than the worst control thread;
    // a returning thread, the same number of syscalls of any kind (a
    // cancelled thread may or may not enter its `sleep` before the cancel
    // lands).
    //
    // Concurrent waves and the raced cancel are not compared in total:
    // there glibc's own teardown contends on its own locks, hook or not
    // (`free_list_lock` when a thread leaves its malloc arena, now and then
    // in a wave; the target's `exit_lock` against `pthread_cancel`, most
    // of the time), which the foreign count leaves out.
    let phases = [
        (Exit::Return, Reclaimer::Thread, 1),
        (Exit::Return, Reclaimer::Inline, 1),
        (Exit::Cancel, Reclaimer::Thread, 1),
        (Exit::Cancel, Reclaimer::Inline, 1),
        (Exit::Return, Reclaimer::Thread, WAVE),
        (Exit::Cancel, Reclaimer::Thread, WAVE),
        (Exit::CancelRaced, Reclaimer::Thread, 1),
    ];
    if let Some(lock) = tp.std_lock {
        say(&format!(
            "exit_futex: Rust std's thread_info lock at {lock:#x} counts as the runtime's"
        ));
    } else {
        say(
            "exit_futex: NOTE: Rust std's thread_info lock not found in this binary's symbols \
             (stripped?): futex calls on it count as foreign, so std threads exiting in waves \
             are not checked for foreign futex calls",
        );
    }
    for (exit, reclaimer, wave) in phases {
        let (hook, control) = phase(&tp, exit, reclaimer, wave);
        let what = format!("{exit:?}, {reclaimer:?} reclaimer, waves of {wave}");
        let std_waves = exit == Exit::Return && wave > 1;
        assert!(
            hook.foreign == 0 || (std_waves && tp.std_lock.is_none()),
            "{what}: exiting threads with exit hooks made {} futex syscalls on words that \
             are not the runtime's own (control threads: {})",
            hook.foreign,
            control.foreign
        );
        if wave > 1 || exit == Exit::CancelRaced {
            continue;
        }
        assert_eq!(
            hook.futex, control.futex,
            "{what}: exiting threads with exit hooks made {} futex syscalls, the same \
             threads without exitq {}",
            hook.futex, control.futex
        );
        assert!(
            hook.max_futex <= control.max_futex,
            "{what}: a thread with exit hooks made {} futex syscalls on its exit path, \
             a control thread at most {}",
            hook.max_futex,
            control.max_futex
        );
        if exit == Exit::Return {
            assert_eq!(
                hook.syscalls, control.syscalls,
                "{what}: syscalls on the exit path, hook threads vs control threads"
            );
        }
    }
}
