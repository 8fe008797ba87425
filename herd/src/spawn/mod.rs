//! Thread backends and the life of one storm thread.
//!
//! A storm thread does what the classic C micro's thread does: spin for a
//! number of iterations, then block (`sleep`) until it is cancelled or the
//! sleep ends. Around that herd records, per thread, in a [`ThreadRec`]:
//! when creation was requested, when the thread started and on which CPU,
//! when its cancel was requested, and when its *exit destructor* ran and on
//! which CPU. The exit destructor is a pthread key destructor ([`exit_key`]),
//! which glibc runs at every thread exit: a return from the start routine,
//! and the forced unwind of `pthread_cancel` as well.
//!
//! Backends ([`Backend`]): [`pthread`] (raw `pthread_create` with default
//! attributes, the default, reproducing the C micro) and [`std_thread`]
//! (`std::thread::Builder`). Cancellation kinds ([`Cancel`]): `pthread`
//! (`pthread_cancel`, deferred, acting at the sleep), `flag` (a cooperative
//! stop word plus a futex wake-up) and `none` (threads end when their
//! sleep ends). Reaping ([`Reap`]): `join` (a reaper thread joins every
//! retired thread), `detach` (detached once the wave is retired; by the
//! thread itself as it exits, to dodge a glibc race: [`detach`])
//! and `leak` (never joined nor detached, as the micro: every stack stays
//! mapped until the process exits).
//!
//! # Extension points
//! * [`Hooks`]: code to run on each thread at start (cancellation
//!   disabled, before the spin) and in its exit destructor (also after a
//!   cancel). Exit-cleanup strategies (`herd::cleanup`) plug in here.
//! * [`pthread::StackChoice`]: the one place the pthread backend decides a
//!   thread's attributes and stack (default attributes; `--stack-size`).
//!   Recycled stacks become another variant there, releasing the stack
//!   from the exit hook.

pub mod detach;
pub mod failure;
pub(crate) mod fit;
pub mod pthread;
pub mod recycled;
pub mod std_thread;

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

use crate::host::{current_cpu, CpuMask};

/// How threads are created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Raw `pthread_create` with default attributes (as the C micro).
    Pthread,
    /// `std::thread::Builder` (Rust's runtime bookkeeping included).
    Std,
}

/// How a retired wave is told to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Cancel {
    /// `pthread_cancel`, deferred: acts at the thread's sleep (a forced unwind).
    Pthread,
    /// A stop flag the thread waits on (futex), set and woken by the spawner.
    Flag,
    /// No request: threads end when their sleep ends.
    None,
}

/// What happens to a thread's handle once its wave is retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Reap {
    /// A reaper thread joins each retired thread (stack returns to glibc).
    Join,
    /// Detached after the cancel request: glibc frees on exit. The thread
    /// detaches itself in its exit destructor, or is joined once gone if
    /// it exited first (glibc's `pthread_detach` of an exiting thread can
    /// read its unmapped descriptor: [`detach`]).
    Detach,
    /// Never joined nor detached (the micro): stacks stay mapped; about
    /// `vm.max_map_count / 2` threads in, creation fails with EAGAIN.
    Leak,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Pthread => "pthread",
            Backend::Std => "std",
        })
    }
}
impl std::fmt::Display for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cancel::Pthread => "pthread",
            Cancel::Flag => "flag",
            Cancel::None => "none",
        })
    }
}
impl std::fmt::Display for Reap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reap::Join => "join",
            Reap::Detach => "detach",
            Reap::Leak => "leak",
        })
    }
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall). Never 0 in practice,
/// which lets 0 mean "not stamped" in [`ThreadRec`].
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Spins `iterations` times. The empty `asm!` claims to read and change
/// the counter, so the compiler can neither delete the loop nor fold it,
/// yet it costs nothing: the loop is `inc; cmp; jne` on a register, the
/// same code gcc emits for `benches/c/storm_micro.c`'s loop with
/// `__asm__ volatile("" : "+r"(i))`. (`std::hint::black_box(i)` would
/// force a store and load per iteration and slow the spin down.)
#[inline(never)]
pub fn spin(iterations: u64) {
    let mut i = 0u64;
    while i < iterations {
        // SAFETY: the template is only a comment: it executes no instruction, touches
        // no memory or stack and leaves the flags alone (as declared); it
        // only makes `i` opaque to the optimiser.
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) i, options(nomem, nostack, preserves_flags));
        }
        i += 1;
    }
}

/// A hook run on a storm thread (see [`Hooks`]).
pub type Hook = Box<dyn Fn(&ThreadRec) + Send + Sync>;

/// Per-thread extension points. Both run on the storm thread itself.
///
/// * `on_start`: after the thread is registered for its exit destructor,
///   before the spin, with cancellation disabled, so it may call anything
///   (even cancellation points such as `write`). It must return; anything
///   it leaves behind must be released by `on_exit`.
/// * `on_exit`: inside the exit destructor, which glibc runs on a normal
///   return and after `pthread_cancel`'s unwind alike. It must not block
///   for long: its time is part of the measured exit path (see
///   [`ThreadRec::exit_hook_ns`]).
///
/// A panic in either is a bug in the hook: herd aborts with a message
/// (unwinding out of a thread start or a key destructor is not an option).
#[derive(Default)]
pub struct Hooks {
    /// Runs at thread start (see the type docs).
    pub on_start: Option<Hook>,
    /// Runs in the exit destructor (see the type docs).
    pub on_exit: Option<Hook>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("on_start", &self.on_start.is_some())
            .field("on_exit", &self.on_exit.is_some())
            .finish()
    }
}

/// What every thread of one run does; shared read-only by all of them.
/// Lives for the rest of the process (`Box::leak`): a leaked or stuck
/// thread may read it after the run returns.
#[derive(Debug)]
pub struct Body {
    /// Spin iterations before the sleep.
    pub spin: u64,
    /// Sleep length in nanoseconds (the cancellation point).
    pub sleep_ns: u64,
    /// How threads are asked to stop.
    pub cancel: Cancel,
    /// One mask per pinned CPU; [`ThreadRec::pin`] indexes it.
    pub pin_masks: Vec<CpuMask>,
    /// Per-thread extension points.
    pub hooks: Hooks,
    /// Exit destructors run so far (the drain waits for it to reach the
    /// number created).
    pub exits: CachePadded<AtomicU64>,
}

impl Body {
    /// Leaks a body for a run (see the type docs for why).
    pub fn leak(self) -> &'static Body {
        Box::leak(Box::new(self))
    }
}

/// No CPU pin for this thread.
pub const NO_PIN: u32 = u32::MAX;

/// One storm thread's record. The spawner owns it (records live in their
/// wave's preallocated `Vec`, never moved while a thread may use them);
/// the thread gets a raw pointer and uses the record until its exit
/// destructor stamps [`ThreadRec::exit_ns`], its last access. So a storm
/// thread never allocates or frees memory of ours: freeing from the exiting
/// thread would make each exit initialise a malloc tcache and take arena
/// locks, runtime bookkeeping the C micro does not have, in the very path
/// being measured. Times are [`now_ns`] values, 0 = not yet.
///
/// Orderings: the thread writes everything with Relaxed stores and then
/// stamps [`ThreadRec::exit_ns`] with Release in its exit destructor; the
/// spawner reads `exit_ns` with Acquire before reading the rest (or
/// freeing the record), so a non-zero `exit_ns` makes every earlier field
/// visible and the record free to drop.
#[derive(Debug)]
pub struct ThreadRec {
    /// The run's shared body.
    pub body: &'static Body,
    /// Index into [`Body::pin_masks`], or [`NO_PIN`].
    pub pin: u32,
    /// Creation requested (spawner, before pthread_create).
    pub create_ns: AtomicU64,
    /// The thread's first instruction of ours.
    pub start_ns: AtomicU64,
    /// CPU at start (after pinning), -1 unknown.
    pub start_cpu: AtomicI32,
    /// The spin ended (the thread is about to block in its sleep).
    pub spin_end_ns: AtomicU64,
    /// The spawner requested the stop (cancel or flag).
    pub cancel_ns: AtomicU64,
    /// The thread ended its sleep by itself (not cancelled/stopped).
    pub self_end_ns: AtomicU64,
    /// Exit destructor entered (Release; see the type docs).
    pub exit_ns: AtomicU64,
    /// CPU in the exit destructor, -1 unknown.
    pub exit_cpu: AtomicI32,
    /// Time spent in [`Hooks::on_exit`], ns.
    pub exit_hook_ns: AtomicU64,
    /// Stop word for [`Cancel::Flag`] (futex): 0 run, 1 stop.
    pub stop: AtomicU32,
    /// Who detaches the thread under `--reap detach`: the spawner's retire
    /// and the exit destructor race to move it ([`detach`]).
    reap: AtomicU8,
}

impl ThreadRec {
    /// A fresh record for a thread pinned by `pin`.
    pub fn new(body: &'static Body, pin: u32) -> ThreadRec {
        ThreadRec {
            body,
            pin,
            create_ns: AtomicU64::new(0),
            start_ns: AtomicU64::new(0),
            start_cpu: AtomicI32::new(-1),
            spin_end_ns: AtomicU64::new(0),
            cancel_ns: AtomicU64::new(0),
            self_end_ns: AtomicU64::new(0),
            exit_ns: AtomicU64::new(0),
            exit_cpu: AtomicI32::new(-1),
            exit_hook_ns: AtomicU64::new(0),
            stop: AtomicU32::new(0),
            reap: AtomicU8::new(detach::OPEN),
        }
    }

    /// True once the exit destructor has run (Acquire: see the type docs);
    /// from then on the thread no longer touches the record.
    pub fn exited(&self) -> bool {
        self.exit_ns.load(Ordering::Acquire) != 0
    }

    /// Asks the thread to stop the cooperative way: sets the stop word and
    /// wakes the thread if it waits on it.
    pub fn request_stop(&self) {
        // Release pairs with the Acquire load in `wait_flag`: nothing is
        // published through it today, but a hook may rely on it.
        self.stop.store(1, Ordering::Release);
        futex_wake(&self.stop);
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 we own; no memory is written.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 with a valid relative
    // timeout; the kernel only reads both.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Why a thread's wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The sleep ran to its end.
    Elapsed,
    /// The stop flag was set.
    Stopped,
}

/// [`Cancel::Flag`]'s wait: until the stop word is set or `sleep_ns` passed.
pub fn wait_flag(rec: &ThreadRec) -> WaitEnd {
    let deadline = now_ns() + rec.body.sleep_ns;
    loop {
        // Acquire pairs with the Release store in `request_stop`.
        if rec.stop.load(Ordering::Acquire) != 0 {
            return WaitEnd::Stopped;
        }
        let now = now_ns();
        if now >= deadline {
            return WaitEnd::Elapsed;
        }
        futex_wait(&rec.stop, 0, deadline - now);
    }
}

/// A plain (not cancelled) sleep of `ns`, resumed after signals.
pub fn sleep_plain(ns: u64) {
    let mut req = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        let mut rem = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: both pointers are valid timespecs for the call.
        let rc = unsafe { libc::nanosleep(&req, &mut rem) };
        if rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
        req = rem;
    }
}

static EXIT_KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();

/// The process-wide pthread key whose destructor is the storm threads'
/// exit destructor ([`exit_destructor`]).
pub fn exit_key() -> libc::pthread_key_t {
    *EXIT_KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is writable; `exit_destructor` has the signature
        // glibc expects and never unwinds (see its docs).
        let rc = unsafe { libc::pthread_key_create(&mut key, Some(exit_destructor)) };
        assert_eq!(rc, 0, "pthread_key_create failed: no keys left ({rc})");
        key
    })
}

/// Runs a hook; a panic is a bug that must not unwind into glibc: abort.
fn run_hook(hook: &Hook, rec: &ThreadRec, which: &str) {
    if catch_unwind(AssertUnwindSafe(|| hook(rec))).is_err() {
        eprintln!("herd: the thread {which} hook panicked; aborting (a hook must not panic)");
        std::process::abort();
    }
}

/// Start of every storm thread's own work, on the new thread, with
/// cancellation disabled: stamps the start, pins, registers the exit
/// destructor, runs the start hook and the spin. Returns with no value
/// that has a destructor left behind: afterwards the caller holds only the
/// raw pointer.
///
/// # Safety
/// `rec` points to a record that stays valid (not moved, not freed) until
/// its `exit_ns` is stamped by the exit destructor (see [`ThreadRec`]).
pub unsafe fn thread_prologue(rec: *const ThreadRec) {
    // SAFETY: per the contract the record is valid until the exit
    // destructor, which runs after everything this thread does with it.
    let r = unsafe { &*rec };
    r.start_ns.store(now_ns(), Ordering::Relaxed);
    if r.pin != NO_PIN {
        if let Some(mask) = r.body.pin_masks.get(r.pin as usize) {
            // A failure (CPU went offline) leaves the thread unpinned; the
            // placement report shows where it ran.
            let _ = mask.apply_to_current_thread();
        }
    }
    r.start_cpu.store(current_cpu(), Ordering::Relaxed);
    // SAFETY: the key exists; the value is the record pointer, used by
    // `exit_destructor` exactly once (glibc calls it once per non-null
    // value and clears the slot before the call). pthread_setspecific
    // does not allocate for the first 32 keys (glibc's static block).
    unsafe { libc::pthread_setspecific(exit_key(), rec.cast::<c_void>()) };
    if let Some(h) = &r.body.hooks.on_start {
        run_hook(h, r, "start");
    }
    spin(r.body.spin);
    r.spin_end_ns.store(now_ns(), Ordering::Relaxed);
}

/// Tags the key's value of a thread whose exit destructor already
/// deferred itself to the next round (records are 8-byte aligned).
const DEFERRED: usize = 1;

/// The exit destructor: glibc calls it when a storm thread exits, whether
/// it returned or was cancelled (after the unwind finished, from
/// `start_thread`, so no unwinding is in progress). Stamps the exit time
/// and CPU, runs the exit hook and counts the exit. It neither allocates
/// nor frees (see [`ThreadRec`]).
///
/// It runs last: glibc calls key destructors in rounds, each in the keys'
/// creation order, and another round while a destructor set a key. So on
/// its first call it sets its key again (tagged) and returns, and does its
/// work in the next round, after every other key's destructor, whichever
/// key was created first: exitq's exit path, a pthread key's destructor
/// created with the first `exitq::Domain`, is then inside the exit
/// latency whether or not the storm's key is older. (If the key cannot be
/// set again, it does its work now.)
///
/// # Safety
/// Called by glibc only, with a value set by [`thread_prologue`] (or by
/// its own first call, tagged).
unsafe extern "C" fn exit_destructor(value: *mut c_void) {
    if value.addr() & DEFERRED == 0 {
        let tagged = value.map_addr(|a| a | DEFERRED);
        // SAFETY: the key exists; glibc cleared it before this call.
        if unsafe { libc::pthread_setspecific(exit_key(), tagged) } == 0 {
            return;
        }
    }
    let entered = now_ns();
    let value = value.map_addr(|a| a & !DEFERRED);
    // SAFETY: `value` is the record pointer thread_prologue stored; the
    // record stays valid until the `exit_ns` store below.
    let rec = unsafe { &*value.cast_const().cast::<ThreadRec>() };
    rec.exit_cpu.store(current_cpu(), Ordering::Relaxed);
    if let Some(h) = &rec.body.hooks.on_exit {
        run_hook(h, rec, "exit");
        rec.exit_hook_ns
            .store(now_ns().saturating_sub(entered), Ordering::Relaxed);
    }
    let body = rec.body;
    // Settles who detaches the thread (`--reap detach`) while the record is
    // still ours.
    detach::at_exit(&rec.reap);
    // Release: publishes every field written above and in the prologue to
    // the spawner's Acquire load in `ThreadRec::exited`. This is the last
    // access to the record: the spawner may free it once it sees it.
    rec.exit_ns.store(entered, Ordering::Release);
    // Release pairs with the Acquire load in the drain (storm), which then
    // reads records of exited threads.
    body.exits.fetch_add(1, Ordering::Release);
}

/// One created thread's handle.
#[derive(Debug)]
pub enum Handle {
    /// A raw pthread (joinable until joined or detached).
    Pthread(libc::pthread_t),
    /// A std thread.
    Std(std::thread::JoinHandle<()>),
    /// A raw pthread on a pooled stack (`--stacks recycled`): joined through
    /// the pool, which then reuses the stack.
    Pooled(exitq::stacks::PooledThread),
}

impl Handle {
    /// `pthread_cancel` (pthread backend only; std threads are refused up
    /// front because std's catch_unwind aborts on a forced unwind).
    /// Returns the error number, 0 on success.
    pub fn cancel(&self) -> i32 {
        match self {
            // SAFETY: the thread is joinable (not yet joined or detached:
            // storms detach or hand to the reaper only after cancelling),
            // so its descriptor is valid even if it already exited.
            Handle::Pthread(t) => unsafe { libc::pthread_cancel(*t) },
            Handle::Std(_) => libc::ENOTSUP,
            Handle::Pooled(t) => t.cancel(),
        }
    }

    /// Joins the thread; false if it could not be joined (or panicked).
    pub fn join(self) -> bool {
        match self {
            Handle::Pthread(t) => {
                // SAFETY: `t` is joinable and joined once (self is consumed).
                unsafe { libc::pthread_join(t, std::ptr::null_mut()) == 0 }
            }
            Handle::Std(h) => h.join().is_ok(),
            Handle::Pooled(t) => t.join().is_ok(),
        }
    }

    /// Forgets the thread: never joined nor detached.
    pub fn leak(self) {
        match self {
            Handle::Pthread(_) => {}
            Handle::Std(h) => std::mem::forget(h),
            // Refused up front (--stacks recycled --reap leak); forgetting
            // the handle keeps the stack lent forever, which is sound.
            Handle::Pooled(t) => std::mem::forget(t),
        }
    }
}

/// Why a storm thread was not created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// The creation failed with this error number.
    Errno(i32),
    /// Not attempted: it might not have had room for std's signal stack
    /// (its diagnosis names the limit).
    NoRoom(exitq::limits::NoRoom),
}

/// Creates storm threads with one backend.
#[derive(Debug)]
pub enum Spawner {
    /// Raw pthreads.
    Pthread(pthread::PthreadSpawner),
    /// std threads.
    Std(std_thread::StdSpawner),
}

impl Spawner {
    /// A spawner for `backend`; `stack_size` None means the backend's
    /// default (glibc: RLIMIT_STACK; std: 2 MiB or RUST_MIN_STACK).
    pub fn new(backend: Backend, stack_size: Option<usize>) -> std::io::Result<Spawner> {
        Ok(match backend {
            Backend::Pthread => Spawner::Pthread(pthread::PthreadSpawner::new(stack_size)?),
            Backend::Std => Spawner::Std(std_thread::StdSpawner {
                stack_size,
                room: None,
            }),
        })
    }

    /// std threads claim `room` before each creation (`None`: no check;
    /// the pthread backend maps no signal stack and needs none).
    pub fn check_room(&mut self, room: Option<exitq::limits::ThreadRoom>) {
        if let Spawner::Std(s) = self {
            s.room = room;
        }
    }

    /// Creates one thread running `rec`. On failure returns the error
    /// number (EAGAIN, ENOMEM, EINVAL, ...) or the refusal for want of
    /// room ([`Spawner::check_room`]); the record is then unused.
    ///
    /// # Safety
    /// On success, `*rec` must stay valid (not moved or freed) until
    /// [`ThreadRec::exited`] returns true; if the thread never gets there
    /// (a drain timeout), the record must be leaked.
    pub unsafe fn spawn(&mut self, rec: *const ThreadRec) -> Result<Handle, Failed> {
        // The process-wide key is created before the first thread, outside
        // any timed section.
        let _ = exit_key();
        match self {
            // SAFETY: the caller's contract is passed on unchanged.
            Spawner::Pthread(s) => unsafe { s.spawn(rec) }.map_err(Failed::Errno),
            // SAFETY: as above.
            Spawner::Std(s) => unsafe { s.spawn(rec) },
        }
    }

    /// Switches the pthread backend to pooled stacks (`--stacks recycled`).
    pub fn use_recycled_stacks(&mut self, pool: recycled::Recycled) -> std::io::Result<()> {
        match self {
            Spawner::Pthread(s) => {
                s.use_recycled_stacks(pool);
                Ok(())
            }
            Spawner::Std(_) => Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "recycled stacks need the pthread backend",
            )),
        }
    }

    /// The stack pool, with `--stacks recycled`.
    pub fn recycled_stacks(&self) -> Option<&recycled::Recycled> {
        match self {
            Spawner::Pthread(s) => s.recycled_stacks(),
            Spawner::Std(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_takes_time_proportional_to_iterations() {
        // Not a timing assertion on the machine's speed: the loop must not
        // be folded away, so 100x the iterations costs clearly more.
        let t = |n| {
            let s = now_ns();
            spin(n);
            now_ns() - s
        };
        let small = (0..5).map(|_| t(100_000)).min().unwrap();
        let big = (0..5).map(|_| t(10_000_000)).min().unwrap();
        assert!(
            big > small * 10,
            "spin(10M) {big} ns vs spin(100K) {small} ns"
        );
    }
}
