//! The raw pthread backend: what the C micro does, from Rust, soundly.
//!
//! # Why `pthread_cancel` through Rust frames is sound here
//!
//! With deferred cancellation, `pthread_cancel` makes the target thread
//! run glibc's cancellation at its next cancellation point: glibc raises a
//! *forced unwind* (`_Unwind_ForcedUnwind`) that walks the thread's stack
//! up to `start_thread`, running cleanup handlers, and then the thread
//! exits (key destructors run afterwards, from `start_thread`).
//!
//! Rust's rules for that (the "C-unwind" ABI, RFC 2945, stable since 1.71):
//! * A foreign unwind may only cross Rust frames through functions whose
//!   ABI is `"C-unwind"`; crossing a plain `extern "C"` boundary is
//!   undefined behaviour. So both boundaries the unwind crosses are
//!   declared `"C-unwind"`: the start routine glibc calls ([`start`]) and
//!   the cancellation point we call ([`nanosleep_unwind`], declared below with
//!   `"C-unwind"` instead of libc's `"C"`). `pthread_create` is declared
//!   here too, so its start-routine parameter has the `"C-unwind"` type.
//! * A *forced* unwind is defined only through "plain old frames": frames
//!   with no destructor pending and no `catch_unwind`. At the one
//!   cancellation point that can act ([`cancellable_sleep`]'s
//!   `nanosleep`), the Rust frames on the stack are [`start`] and
//!   [`cancellable_sleep`], which hold only `Copy` values (a raw pointer,
//!   `timespec`s). Everything with a destructor (the record's `Arc`, hook
//!   state) lives either in the key destructor's slot (run after the
//!   unwind) or in [`super::thread_prologue`], which has returned.
//! * No other cancellation point can act: the thread disables cancellation
//!   first thing ([`set_cancel_state`]) and enables it only right before
//!   the sleep, so hooks may call `write` & co. (cancellation points) with
//!   destructors live. `pthread_setcancelstate(ENABLE)` is not itself a
//!   cancellation point under deferred cancellation.
//! * No `catch_unwind` frame is on this stack: unlike `std::thread`, whose
//!   runtime wraps the closure in `catch_unwind` and aborts the process on
//!   a forced unwind ("FATAL: exception not rethrown", rust-lang/rust#65441).
//!   That is why `--spawn std --cancel pthread` is refused.
//!
//! * herd is built with `panic = "unwind"` (the default), so these frames
//!   carry unwind tables and no abort-on-unwind guard; a `panic = "abort"`
//!   build refuses `--cancel pthread` (see `scenario::storm::options`).
//!
//! Default attributes: `pthread_create(&t, NULL, ...)` exactly as the C
//! micro unless `--stack-size` is given ([`StackChoice`]).

use std::ffi::{c_int, c_void};

use super::{sleep_plain, thread_prologue, wait_flag, Cancel, Handle, ThreadRec, WaitEnd};
use std::sync::atomic::Ordering;

const PTHREAD_CANCEL_ENABLE: c_int = 0;
const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// A start routine that a forced unwind may cross.
type StartRoutine = extern "C-unwind" fn(*mut c_void) -> *mut c_void;

extern "C-unwind" {
    /// glibc's nanosleep, a cancellation point: declared `"C-unwind"`
    /// because `pthread_cancel`'s forced unwind starts inside it.
    #[link_name = "nanosleep"]
    fn nanosleep_unwind(req: *const libc::timespec, rem: *mut libc::timespec) -> c_int;
}

extern "C" {
    /// glibc's pthread_create, with the start routine typed `"C-unwind"`.
    #[link_name = "pthread_create"]
    fn pthread_create_unwind(
        thread: *mut libc::pthread_t,
        attr: *const libc::pthread_attr_t,
        start: StartRoutine,
        arg: *mut c_void,
    ) -> c_int;
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}

/// Enables or disables cancellation for the calling thread. Not a
/// cancellation point.
fn set_cancel_state(enabled: bool) {
    let mut old = 0;
    let state = if enabled {
        PTHREAD_CANCEL_ENABLE
    } else {
        PTHREAD_CANCEL_DISABLE
    };
    // SAFETY: valid state constant and a writable `old`.
    unsafe { pthread_setcancelstate(state, &mut old) };
}

/// Sleeps `ns` at a cancellation point. The only Rust frames live while
/// the forced unwind may pass are this function's and [`start`]'s, and
/// both hold only `Copy` values (see the module docs).
#[inline(never)]
fn cancellable_sleep(ns: u64) {
    let mut req = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    let mut rem = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespecs; the function is declared "C-unwind", so a
    // forced unwind out of it (pthread_cancel) is defined; no destructor
    // is pending in this frame or the caller's.
    while unsafe { nanosleep_unwind(&req, &mut rem) } != 0 {
        // EINTR (a signal): sleep the rest.
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
        req = rem;
    }
}

/// The start routine of every raw storm thread. `arg` is its record, valid
/// until the thread's exit destructor (see [`ThreadRec`]).
extern "C-unwind" fn start(arg: *mut c_void) -> *mut c_void {
    set_cancel_state(false);
    let rec = arg.cast_const().cast::<ThreadRec>();
    // SAFETY: `arg` is the record, valid until the exit destructor (see `spawn`).
    unsafe { thread_prologue(rec) };
    // From here only the raw pointer is held. The record stays valid until
    // the exit destructor, which runs after this function returns or is
    // unwound.
    // SAFETY: as above, the record outlives this function.
    let r = unsafe { &*rec };
    let body = r.body;
    match body.cancel {
        Cancel::Pthread => {
            set_cancel_state(true);
            cancellable_sleep(body.sleep_ns);
            // Not cancelled during the sleep: end on our own.
            set_cancel_state(false);
            r.self_end_ns.store(super::now_ns(), Ordering::Relaxed);
        }
        Cancel::Flag => {
            if wait_flag(r) == WaitEnd::Elapsed {
                r.self_end_ns.store(super::now_ns(), Ordering::Relaxed);
            }
        }
        Cancel::None => {
            sleep_plain(body.sleep_ns);
            r.self_end_ns.store(super::now_ns(), Ordering::Relaxed);
        }
    }
    std::ptr::null_mut()
}

/// Where the pthread backend chooses a thread's attributes and stack.
///
/// This is the extension point for stack strategies: a variant that hands
/// each thread a recycled stack sets it per thread in
/// [`StackChoice::attr_for`] (`pthread_attr_setstack`) and releases it from
/// the exit hook.
#[derive(Debug)]
pub enum StackChoice {
    /// `pthread_create(.., NULL, ..)`: glibc's defaults (RLIMIT_STACK-sized
    /// stack from glibc's stack cache), exactly as the C micro.
    Default,
    /// Default attributes except the stack size (`--stack-size`).
    Size(Box<AttrBox>),
    /// A stack from an exitq StackPool per thread (`--stacks recycled`):
    /// [`PthreadSpawner::spawn`] creates the thread through the pool, which
    /// sets the stack with `pthread_attr_setstack` and takes it back after
    /// the thread is joined (see [`super::recycled`]).
    Recycled(super::recycled::Recycled),
}

/// An initialised `pthread_attr_t`, destroyed on drop.
#[derive(Debug)]
pub struct AttrBox(libc::pthread_attr_t);

impl Drop for AttrBox {
    fn drop(&mut self) {
        // SAFETY: initialised by pthread_attr_init in `StackChoice::new`
        // and destroyed once.
        unsafe { libc::pthread_attr_destroy(&mut self.0) };
    }
}

impl StackChoice {
    /// Default attributes, or a stack of `size` bytes.
    pub fn new(size: Option<usize>) -> std::io::Result<StackChoice> {
        let Some(size) = size else {
            return Ok(StackChoice::Default);
        };
        // SAFETY: pthread_attr_t is plain data; pthread_attr_init fully
        // initialises it before any other use.
        let mut attr = Box::new(AttrBox(unsafe { std::mem::zeroed() }));
        // SAFETY: `attr.0` is writable storage for an attribute object.
        let rc = unsafe { libc::pthread_attr_init(&mut attr.0) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        // SAFETY: `attr.0` was initialised above.
        let rc = unsafe { libc::pthread_attr_setstacksize(&mut attr.0, size) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(StackChoice::Size(attr))
    }

    /// The attributes for the next thread (`null` = defaults).
    pub fn attr_for(&mut self, _rec: &ThreadRec) -> *const libc::pthread_attr_t {
        match self {
            StackChoice::Default => std::ptr::null(),
            StackChoice::Size(a) => &a.0,
            // Not used: pooled threads are created by the pool (`spawn`).
            StackChoice::Recycled(_) => std::ptr::null(),
        }
    }
}

/// Creates raw pthreads.
#[derive(Debug)]
pub struct PthreadSpawner {
    stacks: StackChoice,
}

impl PthreadSpawner {
    /// A spawner with default attributes or the given stack size.
    pub fn new(stack_size: Option<usize>) -> std::io::Result<PthreadSpawner> {
        Ok(PthreadSpawner {
            stacks: StackChoice::new(stack_size)?,
        })
    }

    /// Switches to pooled stacks (`--stacks recycled`).
    pub fn use_recycled_stacks(&mut self, pool: super::recycled::Recycled) {
        self.stacks = StackChoice::Recycled(pool);
    }

    /// The stack pool, with `--stacks recycled`.
    pub fn recycled_stacks(&self) -> Option<&super::recycled::Recycled> {
        match &self.stacks {
            StackChoice::Recycled(r) => Some(r),
            _ => None,
        }
    }

    /// `pthread_create`; returns the handle or the error number.
    ///
    /// # Safety
    /// As [`super::Spawner::spawn`]: on success `*rec` stays valid until
    /// the thread's exit destructor has stamped it.
    pub unsafe fn spawn(&mut self, rec: *const ThreadRec) -> Result<Handle, i32> {
        let arg = rec.cast_mut().cast::<c_void>();
        if let StackChoice::Recycled(r) = &self.stacks {
            // SAFETY: `start` is the storm's start routine, sound to
            // force-unwind (module docs); the thread is joined only through
            // the returned handle (the reaper's `Handle::join`, or the
            // pool's reclaimer after `Handle::detach`); `arg` is the record,
            // valid until the thread's exit destructor (caller's contract).
            return match unsafe { r.pool().spawn(start, arg, r.reap()) } {
                Ok(t) => Ok(Handle::Pooled(t)),
                Err(e) => Err(e.errno()),
            };
        }
        // SAFETY: the caller keeps `*rec` valid for this call.
        let attr = self.stacks.attr_for(unsafe { &*rec });
        let mut tid: libc::pthread_t = 0;
        // SAFETY: `tid` is writable; `attr` is null or an initialised
        // attribute object owned by `self.stacks`; `start` has the
        // signature glibc calls; `arg` is the record, valid until the
        // thread's exit destructor (caller's contract).
        let rc = unsafe { pthread_create_unwind(&mut tid, attr, start, arg) };
        if rc != 0 {
            return Err(rc);
        }
        Ok(Handle::Pthread(tid))
    }
}
