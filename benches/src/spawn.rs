//! Where the churn example's threads get their stacks (`--stacks`):
//! `std::thread` (glibc's stack cache, the default), or an exitq
//! [`StackPool`] that maps each stack once and reuses it after the join.
//!
//! On this workload the kernel's thread creation and exit are 90% of the
//! time, most of it stack mapping under the process's `mmap_lock`
//! (`mmap`, `mprotect`, `madvise`, `munmap` for every thread whose stack
//! glibc's 40 MiB cache cannot hold). No reclaimer changes that; a pooled
//! stack makes a spawn and an exit with no memory-map call at all (see
//! `exitq::stacks`). The same spawner serves every implementation, so
//! reclaimers can be compared on either kind of stack.
use std::ffi::c_void;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::thread::{self, JoinHandle};

use exitq::stacks::{PooledThread, Reap, StackPool};

/// Rust's default thread stack (`std::thread`'s 2 MiB), the size pooled
/// stacks get too, so that both kinds run the same threads.
pub const STACK_SIZE: usize = 2 << 20;

/// The work of one thread.
pub type Body = Box<dyn FnOnce() + Send + 'static>;

/// Which stacks (`--stacks std|recycled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacks {
    /// `std::thread::Builder::spawn`: glibc maps, caches and unmaps.
    Std,
    /// An exitq `StackPool`, joined by the spawner (`Reap::Owner`).
    Recycled,
}

impl Stacks {
    /// Parses `std` or `recycled`.
    pub fn parse(s: &str) -> Result<Stacks, String> {
        match s {
            "std" => Ok(Stacks::Std),
            "recycled" => Ok(Stacks::Recycled),
            _ => Err(format!("--stacks must be 'std' or 'recycled', got '{s}'")),
        }
    }
}

/// Starts threads on the chosen stacks.
#[derive(Debug)]
pub enum Spawner {
    Std,
    Pool(StackPool),
}

/// A started thread, to be joined.
#[derive(Debug)]
pub enum Handle {
    Std(JoinHandle<()>),
    Pool(PooledThread),
}

/// What a pooled thread returns when its body panicked (the panic is
/// caught in the trampoline: it must not unwind into glibc's frame).
const PANICKED: usize = 1;

impl Spawner {
    /// A spawner for `stacks`; a pool is built here (no stack mapped yet).
    pub fn new(stacks: Stacks) -> std::io::Result<Spawner> {
        Ok(match stacks {
            Stacks::Std => Spawner::Std,
            Stacks::Recycled => Spawner::Pool(StackPool::builder().stack_size(STACK_SIZE).build()?),
        })
    }

    /// Starts `body` on a new thread. The error names the failure and the
    /// limit that stopped it.
    pub fn spawn(&self, body: Body) -> Result<Handle, String> {
        match self {
            Spawner::Std => thread::Builder::new()
                .stack_size(STACK_SIZE)
                .spawn(body)
                .map(Handle::Std)
                .map_err(|e| std_spawn_error(&e)),
            Spawner::Pool(pool) => {
                let arg = Box::into_raw(Box::new(body)).cast::<c_void>();
                // SAFETY: `start` takes `arg` back as the `Box<Body>` made
                // just above, once, and unwinds nothing into glibc (it
                // catches the body's panics); nobody but the returned
                // handle joins the thread; a churn body uses a few KiB of
                // stack, far below `STACK_SIZE`.
                match unsafe { pool.spawn(start, arg, Reap::Owner) } {
                    Ok(t) => Ok(Handle::Pool(t)),
                    Err(e) => {
                        // SAFETY: the thread was not created, so `arg` was
                        // not handed over: it is still ours, freed once.
                        drop(unsafe { Box::from_raw(arg.cast::<Body>()) });
                        Err(e.to_string())
                    }
                }
            }
        }
    }
}

impl Handle {
    /// Waits for the thread; an error if it panicked or could not be
    /// joined.
    pub fn join(self) -> Result<(), String> {
        match self {
            Handle::Std(h) => h.join().map_err(|_| "a thread panicked".to_string()),
            Handle::Pool(t) => match t.join() {
                Ok(r) if r as usize == PANICKED => Err("a thread panicked".into()),
                Ok(_) => Ok(()),
                Err(e) => Err(format!(
                    "pthread_join failed: {}",
                    std::io::Error::from_raw_os_error(e)
                )),
            },
        }
    }
}

/// `std::thread`'s spawn error, with the limit that stopped it and its
/// numbers (`exitq::limits`, as `exitq::stacks::SpawnError` names it for a
/// pooled stack).
fn std_spawn_error(e: &std::io::Error) -> String {
    format!(
        "std::thread::spawn failed: {}",
        exitq::limits::explain_thread_error(e, Some(STACK_SIZE as u64))
    )
}

/// A pooled thread's start routine: runs the `Box<Body>` behind `arg`.
extern "C-unwind" fn start(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `Spawner::spawn` passed a `Box<Body>` it gave up, taken
    // back only here.
    let body = unsafe { Box::from_raw(arg.cast::<Body>()) };
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(()) => ptr::null_mut(),
        Err(_) => ptr::without_provenance_mut(PANICKED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Both kinds run every body once, and a pooled stack is reused after
    /// the join (the pool maps fewer stacks than it lends).
    #[test]
    fn runs_every_body_on_both_kinds_of_stack() {
        for stacks in [Stacks::Std, Stacks::Recycled] {
            let spawner = Spawner::new(stacks).expect("a spawner");
            let ran = Arc::new(AtomicUsize::new(0));
            for _ in 0..8 {
                let wave: Vec<Handle> = (0..4)
                    .map(|_| {
                        let ran = ran.clone();
                        spawner
                            .spawn(Box::new(move || {
                                // Relaxed: read after the joins.
                                ran.fetch_add(1, Ordering::Relaxed);
                            }))
                            .expect("a thread")
                    })
                    .collect();
                for h in wave {
                    h.join().expect("joined");
                }
            }
            assert_eq!(ran.load(Ordering::Relaxed), 32, "{stacks:?}");
            if let Spawner::Pool(pool) = &spawner {
                let s = pool.stats();
                assert_eq!(s.spawned, 32);
                assert!(s.maps <= 4, "stacks mapped: {} for 4 at a time", s.maps);
                assert_eq!(s.reused, 32 - s.maps);
                assert_eq!(s.lent, 0, "every stack is back after the joins");
            }
        }
    }

    /// A panicking body is reported by `join`, on both kinds (on a pooled
    /// stack the trampoline catches it: it must not unwind into glibc).
    #[test]
    fn a_panicking_body_is_an_error_not_an_abort() {
        for stacks in [Stacks::Std, Stacks::Recycled] {
            let spawner = Spawner::new(stacks).expect("a spawner");
            let h = spawner
                .spawn(Box::new(|| panic!("a deliberate panic")))
                .expect("a thread");
            assert_eq!(h.join(), Err("a thread panicked".to_string()), "{stacks:?}");
        }
    }

    #[test]
    fn a_std_spawn_failure_names_the_limit() {
        let e = std_spawn_error(&std::io::Error::from_raw_os_error(libc::EAGAIN));
        assert!(e.contains("RLIMIT_NPROC"), "{e}");
        let e = std_spawn_error(&std::io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(e.contains("vm.max_map_count"), "{e}");
    }

    #[test]
    fn parses_the_two_kinds_and_names_a_bad_one() {
        assert_eq!(Stacks::parse("std"), Ok(Stacks::Std));
        assert_eq!(Stacks::parse("recycled"), Ok(Stacks::Recycled));
        assert!(Stacks::parse("glibc").unwrap_err().contains("'glibc'"));
    }
}
