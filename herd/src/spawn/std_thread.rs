//! The `std::thread` backend: Rust's runtime around the same thread body.
//!
//! std adds its own per-thread work (a `Thread` handle with a name slot,
//! an `Arc` packet for the result, the closure box, `catch_unwind`, thread
//! locals). That work is what this backend measures against the raw one.
//! `pthread_cancel` is not offered: std's `catch_unwind` around the closure
//! aborts the process when glibc's forced unwind reaches it
//! (rust-lang/rust#65441), so the storm refuses `--spawn std --cancel
//! pthread` up front.
//!
//! Given a room to claim ([`StdSpawner::room`]: `herd storm --spawn std
//! --force` under a finite `RLIMIT_AS` or `RLIMIT_DATA`), each creation
//! claims it first ([`exitq::limits::ThreadRoom`]): a thread that might
//! get its stack but not std's signal stack, where std aborts the process,
//! is not created ([`Failed::NoRoom`]). In those runs the creation time
//! the storm measures includes that check (a read of `/proc/self/statm`).

use std::sync::atomic::Ordering;

use exitq::limits::{NoRoom, ThreadRoom};

use super::{
    now_ns, sleep_plain, thread_prologue, wait_flag, Cancel, Failed, Handle, ThreadRec, WaitEnd,
};

/// Creates std threads.
#[derive(Debug)]
pub struct StdSpawner {
    /// Stack size (`None`: std's default, 2 MiB or `RUST_MIN_STACK`).
    pub stack_size: Option<usize>,
    /// The room each creation claims first (module docs).
    pub room: Option<ThreadRoom>,
}

impl StdSpawner {
    /// `std::thread::Builder::spawn`; returns the handle, the error number,
    /// or the refusal for want of room.
    ///
    /// # Safety
    /// As [`super::Spawner::spawn`]: on success `*rec` stays valid until
    /// the thread's exit destructor has stamped it.
    pub unsafe fn spawn(&mut self, rec: *const ThreadRec) -> Result<Handle, Failed> {
        let mut b = std::thread::Builder::new();
        if let Some(s) = self.stack_size {
            b = b.stack_size(s);
        }
        // A usize, so the closure is Send; it is the record's address.
        let raw = rec as usize;
        let stack = self.stack_size.map(|s| s as u64);
        let res = exitq::limits::spawn_std(self.room.as_ref(), b, stack, move || {
            let rec = raw as *const ThreadRec;
            // SAFETY: `raw` is the record, valid until this thread's exit
            // destructor (the caller's contract).
            unsafe { thread_prologue(rec) };
            // SAFETY: the record lives until the exit destructor, which runs
            // after this closure returns.
            let r = unsafe { &*rec };
            let end = match r.body.cancel {
                Cancel::Flag => wait_flag(r),
                // Pthread cancel is refused for std; treat like None if
                // ever asked (the thread ends when its sleep ends).
                Cancel::None | Cancel::Pthread => {
                    sleep_plain(r.body.sleep_ns);
                    WaitEnd::Elapsed
                }
            };
            if end == WaitEnd::Elapsed {
                r.self_end_ns.store(now_ns(), Ordering::Relaxed);
            }
        });
        match res {
            Ok(h) => Ok(Handle::Std(h)),
            // The closure was not run: the record is unused.
            Err(e) => Err(match NoRoom::of(&e) {
                Some(refused) => Failed::NoRoom(refused.clone()),
                None => Failed::Errno(e.raw_os_error().unwrap_or(libc::EAGAIN)),
            }),
        }
    }
}
