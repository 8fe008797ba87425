//! The `std::thread` backend: Rust's runtime around the same thread body.
//!
//! std adds its own per-thread work (a `Thread` handle with a name slot,
//! an `Arc` packet for the result, the closure box, `catch_unwind`, thread
//! locals). That work is what this backend measures against the raw one.
//! `pthread_cancel` is not offered: std's `catch_unwind` around the closure
//! aborts the process when glibc's forced unwind reaches it
//! (rust-lang/rust#65441), so the storm refuses `--spawn std --cancel
//! pthread` up front.

use std::sync::atomic::Ordering;

use super::{now_ns, sleep_plain, thread_prologue, wait_flag, Cancel, Handle, ThreadRec, WaitEnd};

/// Creates std threads.
#[derive(Debug)]
pub struct StdSpawner {
    /// Stack size (`None`: std's default, 2 MiB or `RUST_MIN_STACK`).
    pub stack_size: Option<usize>,
}

impl StdSpawner {
    /// `std::thread::Builder::spawn`; returns the handle or the error number.
    ///
    /// # Safety
    /// As [`super::Spawner::spawn`]: on success `*rec` stays valid until
    /// the thread's exit destructor has stamped it.
    pub unsafe fn spawn(&mut self, rec: *const ThreadRec) -> Result<Handle, i32> {
        let mut b = std::thread::Builder::new();
        if let Some(s) = self.stack_size {
            b = b.stack_size(s);
        }
        // A usize, so the closure is Send; it is the record's address.
        let raw = rec as usize;
        let res = b.spawn(move || {
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
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EAGAIN)),
        }
    }
}
