//! The reclaimer's doorbell: how the reclaimer thread sleeps, with or
//! without a timeout, and how another thread wakes it, without a futex.
//!
//! A futex call takes the lock of a bucket in the kernel's futex hash
//! table, shared by every futex of the system that hashes there; in a
//! thread-exit herd those bucket locks are the hottest locks of the
//! process (every exiting thread's join and runtime locks go through
//! them). A reclaimer that slept on a futex (`thread::park_timeout`) paid
//! one futex call per poll and one more per wake-up, on the exiting
//! threads' behalf. The doorbell is an `eventfd` of the domain's own
//! instead: the reclaimer sleeps in `ppoll` on it (a timed sleep, or an
//! unbounded one), and a publisher wakes it with one `write`; the wait
//! queue behind it is the eventfd's, touched by nobody else. So the
//! reclaimer's sleeps and wake-ups cost no futex call at all.
//!
//! Without an eventfd (its creation failed: out of file descriptors, or
//! under miri), the doorbell falls back to `thread::park` and `unpark`.
//!
//! Ringing is the `write` system call made directly, never glibc's
//! `write` wrapper, which is a cancellation point: a publisher rings from
//! inside `defer` and `register_exit` on threads that may be cancelled,
//! and a cancellation must never act inside exitq (`cancel`). The
//! reclaimer's own `ppoll` and `read` may be (nobody cancels it).
//!
//! Who rings and when is the reclaimer's sleep protocol (`Inner::sleeping`,
//! `reclaimer.rs`); a ring that finds it awake costs nothing but leaves the
//! doorbell set, so its next sleep returns at once and re-checks.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use std::thread::{self, Thread};
use std::time::Duration;

/// The reclaimer's doorbell (see the module docs).
pub(crate) struct Doorbell {
    /// The eventfd, or `None` for the park/unpark fallback.
    fd: Option<OwnedFd>,
    /// The sleeping thread, for the fallback.
    thread: OnceLock<Thread>,
}

impl Doorbell {
    /// A doorbell with an eventfd if one can be made.
    pub(crate) fn new() -> Doorbell {
        Doorbell {
            fd: eventfd(),
            thread: OnceLock::new(),
        }
    }

    /// Registers the calling thread as the one that sleeps (call once,
    /// from that thread, before its first `sleep`).
    pub(crate) fn register(&self) {
        let _ = self.thread.set(thread::current());
    }

    /// Sleeps until rung, or until `timeout` passed (`None`: until rung).
    /// May return early (a ring from before the call, a signal).
    pub(crate) fn sleep(&self, timeout: Option<Duration>) {
        let Some(fd) = &self.fd else {
            match timeout {
                Some(t) => thread::park_timeout(t),
                None => thread::park(),
            }
            return;
        };
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: one valid pollfd; `tsp` is null or points to `ts`,
        // alive for the call; no signal mask change (null).
        let n = unsafe { libc::ppoll(&mut pfd, 1, tsp, std::ptr::null()) };
        if n > 0 && pfd.revents & libc::POLLIN != 0 {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into `count` from our eventfd
            // (nonblocking: EAGAIN if another reader took it, harmless).
            unsafe {
                libc::read(
                    fd.as_raw_fd(),
                    (&mut count as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }

    /// Wakes the sleeper (or makes its next `sleep` return at once).
    pub(crate) fn ring(&self) {
        match &self.fd {
            Some(fd) => {
                let one = 1u64;
                // The system call itself, not glibc's `write`: that one is
                // a cancellation point, and `ring` runs inside `defer` and
                // `register_exit` (the first batch, the first hook), on
                // threads whose cancellation is enabled; a cancellation
                // acting there unwound through exitq's frames (the process
                // aborted) and lost the callback (`tests/red2.rs`).
                // `syscall(2)` is no cancellation point, and costs no more.
                // SAFETY: writes 8 bytes from `one` to our eventfd
                // (nonblocking; it only fails when the counter is
                // saturated, i.e. already rung).
                unsafe {
                    libc::syscall(
                        libc::SYS_write,
                        fd.as_raw_fd(),
                        (&one as *const u64).cast::<libc::c_void>(),
                        std::mem::size_of::<u64>(),
                    )
                };
            }
            None => {
                if let Some(t) = self.thread.get() {
                    t.unpark();
                }
            }
        }
    }
}

/// A nonblocking, close-on-exec eventfd (`None` under miri or on failure).
fn eventfd() -> Option<OwnedFd> {
    if cfg!(miri) {
        return None;
    }
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    // SAFETY: a fresh descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}
