//! Defects found by the second red-team review (exitq v3): each test
//! failed (a broken guarantee, or a hang caught by a watchdog) before its
//! fix, through the public API only.
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use exitq::Domain;

mod pthread_util;
mod skip_util;
mod watch_util;

/// How long a wait for something that takes milliseconds may last before
/// it is taken for a hang: long enough that a loaded machine never trips it
/// (the waits here were 5 to 30 s).
const LIMIT: Duration = Duration::from_secs(60);

/// Before a test forks: exitq's once-per-process set-up (membarrier
/// registration, the fork handler) done, so that no other test's thread
/// is inside it at the fork (a `OnceLock` being initialized at a fork
/// stays so in the child, which would wait for it forever).
fn before_fork() {
    drop(Domain::new());
}

// ---- cancellation inside exitq: the doorbell's `write` ----

extern "C-unwind" {
    /// glibc's pthread_testcancel(3): acts on a pending cancellation.
    /// "C-unwind": the cancellation unwinds out of it.
    fn pthread_testcancel();
}

/// What a cancelled thread does with the domain.
#[derive(Clone, Copy)]
enum FirstUse {
    /// Its first `defer` (opens the thread's first batch).
    Defer,
    /// Its first `register_exit` (arms the domain's first hook).
    RegisterExit,
}

struct Start {
    domain: Domain,
    first: FirstUse,
    /// The callback or hook ran (it must, exactly once).
    ran: Arc<AtomicUsize>,
    /// The exitq call returned (the cancellation acted after it).
    returned: Arc<AtomicBool>,
}

/// With a cancellation pending, makes the thread's first use of a domain
/// whose reclaimer sleeps without a timeout: the call wakes it (rings its
/// doorbell). Everything with a destructor lives in this frame, which
/// returns before the cancellation point the test itself provides.
fn first_use_with_cancel_pending(arg: *mut c_void) {
    // SAFETY: `arg` is the `Box<Start>` leaked by the spawner for us.
    let start = unsafe { Box::from_raw(arg.cast::<Start>()) };
    // Deferred cancellation (the default): pending until a cancellation
    // point. SAFETY: our own, live thread.
    assert_eq!(unsafe { libc::pthread_cancel(libc::pthread_self()) }, 0);
    let ran = start.ran.clone();
    match start.first {
        FirstUse::Defer => start.domain.defer(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        }),
        FirstUse::RegisterExit => start.domain.register_exit(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        }),
    }
    start.returned.store(true, Ordering::SeqCst);
}

extern "C-unwind" fn cancelled_after_first_use(arg: *mut c_void) -> *mut c_void {
    first_use_with_cancel_pending(arg);
    // SAFETY: a cancellation point; the forced unwind passes only this
    // plain frame.
    unsafe { pthread_testcancel() };
    unreachable!("the cancellation was pending")
}

/// The reclaimer's doorbell is an eventfd (v3), rung with `write(2)`, a
/// cancellation point. A thread with a cancellation pending whose first
/// `defer` (or `register_exit`) woke a reclaimer that slept without a
/// timeout was cancelled inside exitq, in the middle of the call: the
/// callback (the hook) was lost, never run, and the forced unwind went
/// through exitq's frames, which the crate docs promise never happens
/// ("a cancellation never acts inside exitq").
#[test]
fn a_pending_cancellation_does_not_act_inside_the_reclaimers_wake_up() {
    // In a child: on the code before the fix the forced unwind through
    // exitq's frames aborted the whole process (glibc's `__pthread_unwind`).
    before_fork();
    let code = watch_util::fork_child(LIMIT * 2, || {
        for first in [FirstUse::Defer, FirstUse::RegisterExit] {
            if let Err(what) = cancel_rounds(first) {
                return what;
            }
        }
        0
    });
    assert_eq!(
        code, 0,
        "exit code {code}: 1 the cancellation acted inside exitq, 2 a callback or hook was lost, \
         3 the thread was not cancelled, 101 a panic (134: aborted by the forced unwind)"
    );
}

/// Three rounds of a cancelled thread's first use of a domain whose
/// reclaimer has parked; `Err(code)` on the first violation.
fn cancel_rounds(first: FirstUse) -> Result<(), i32> {
    // A reclaimer that parks (sleeps without a timeout) soon after it goes
    // idle.
    let d = Domain::builder()
        .flush_latency(Duration::from_micros(500))
        .exit_poll(Some(Duration::from_micros(500)))
        .build();
    let ran = Arc::new(AtomicUsize::new(0));
    for round in 0..3 {
        // Idle for many polls: the reclaimer has parked.
        thread::sleep(Duration::from_millis(100));
        let returned = Arc::new(AtomicBool::new(false));
        let start = Box::new(Start {
            domain: d.clone(),
            first,
            ran: ran.clone(),
            returned: returned.clone(),
        });
        let tid = pthread_util::spawn(cancelled_after_first_use, start);
        if !pthread_util::join_was_cancelled(tid) {
            return Err(3);
        }
        d.barrier();
        if !returned.load(Ordering::SeqCst) {
            return Err(1);
        }
        if ran.load(Ordering::SeqCst) != round + 1 {
            return Err(2);
        }
    }
    Ok(())
}

// ---- the doorbell: wake-ups of a parked reclaimer ----

/// Builds a domain whose reclaimer parks soon after it goes idle; with
/// `no_fds`, while the process has no file descriptor left, so the
/// doorbell has no eventfd and falls back to park/unpark.
fn parking_domain(no_fds: bool) -> Domain {
    let build = || {
        Domain::builder()
            .flush_latency(Duration::from_millis(1))
            .exit_poll(Some(Duration::from_millis(1)))
            .build()
    };
    if !no_fds {
        return build();
    }
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    // Every descriptor number below the limit in use: fill the table up to
    // a low limit.
    let low = libc::rlimit {
        rlim_cur: 64,
        rlim_max: old.rlim_max,
    };
    // SAFETY: valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let mut opened = Vec::new();
    loop {
        // SAFETY: a plain dup of stdin-or-whatever; -1 once the table is full.
        let fd = unsafe { libc::dup(2) };
        if fd < 0 {
            break;
        }
        opened.push(fd);
    }
    // SAFETY: eventfd takes no pointers; checks the table is full.
    let probe = unsafe { libc::eventfd(0, 0) };
    assert!(probe < 0, "the descriptor table is not full");
    let d = build();
    for fd in opened {
        // SAFETY: our own duplicates.
        unsafe { libc::close(fd) };
    }
    // SAFETY: valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    d
}

/// Waits (at most 60 s) until `ran` reaches `want`, with no help.
fn ran_without_help(ran: &AtomicUsize, want: usize) -> bool {
    for _ in 0..60_000 {
        if ran.load(Ordering::SeqCst) >= want {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    false
}

/// A reclaimer parked (no timeout) must be woken by each kind of work only
/// it would run: an idle thread's first batch, an exited thread's hook,
/// a sealed batch whose grace period its idle thread asked for; with the
/// eventfd doorbell, and with the park/unpark fallback (no descriptor
/// left when the domain was built).
#[test]
fn a_parked_reclaimer_is_woken_with_and_without_an_eventfd() {
    before_fork();
    for no_fds in [false, true] {
        let code = watch_util::fork_child(LIMIT * 2, move || {
            let d = parking_domain(no_fds);
            let ran = Arc::new(AtomicUsize::new(0));
            // Senders that keep the idle threads alive until the end.
            let mut holders = Vec::new();
            // 0: an idle thread's first batch (held batches: the idle
            // steal); 1: an exited thread's hook; 2: a sealed batch of an
            // idle thread (a grace period asked for, then the steal).
            for (step, kind) in [0, 1, 2].into_iter().enumerate() {
                thread::sleep(Duration::from_millis(100)); // parked by now
                let (d2, r) = (d.clone(), ran.clone());
                let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
                let hold = (kind != 1).then(|| {
                    let (tx, rx) = std::sync::mpsc::channel::<()>();
                    holders.push(tx);
                    rx
                });
                let t = thread::spawn(move || {
                    match kind {
                        0 => d2.defer(move || {
                            r.fetch_add(1, Ordering::SeqCst);
                        }),
                        1 => d2.register_exit(move || {
                            r.fetch_add(1, Ordering::SeqCst);
                        }),
                        _ => {
                            d2.defer(move || {
                                r.fetch_add(1, Ordering::SeqCst);
                            });
                            d2.flush(); // sealed: a grace period asked for
                        }
                    }
                    done_tx.send(()).unwrap();
                    if let Some(rx) = hold {
                        let _ = rx.recv(); // alive and idle
                    }
                });
                done_rx.recv().unwrap();
                if kind == 1 {
                    t.join().unwrap();
                }
                if !ran_without_help(&ran, step + 1) {
                    return 10 + step as i32;
                }
            }
            drop(holders);
            0
        });
        assert_eq!(code, 0, "no_fds {no_fds}: step {} never ran", code - 10);
    }
}

// ---- cancellation inside exitq: a membarrier failure's report ----

/// Installs a seccomp filter on the calling thread (and the threads it
/// creates later) under which membarrier(2) fails with ENOMEM, as the
/// kernel's own refusal after registration would.
fn fail_membarrier_on_this_thread() {
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut prog = [
        // The syscall number (offset 0 of `struct seccomp_data`).
        ins(BPF_LD_W_ABS, 0, 0, 0),
        ins(BPF_JMP_JEQ_K, 0, 1, libc::SYS_membarrier as u32),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::ENOMEM as u32),
        ins(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: plain prctl calls; `fprog` points to a valid program that
    // outlives the call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &fprog as *const libc::sock_fprog,
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

struct Sealer {
    domain: Domain,
    returned: Arc<AtomicBool>,
}

/// With membarrier failing on this thread and a cancellation pending,
/// seals batches until one of its seals starts a grace period.
fn seal_with_cancel_pending(arg: *mut c_void) {
    // SAFETY: `arg` is the `Box<Sealer>` leaked by the spawner for us.
    let s = unsafe { Box::from_raw(arg.cast::<Sealer>()) };
    fail_membarrier_on_this_thread();
    // SAFETY: our own, live thread (deferred cancellation: pending).
    assert_eq!(unsafe { libc::pthread_cancel(libc::pthread_self()) }, 0);
    // Batches of one: each defer seals one and polls the grace period; the
    // eighth idle poll starts one (membarrier, which fails).
    for _ in 0..64 {
        s.domain.defer(|| ());
    }
    s.returned.store(true, Ordering::SeqCst);
}

extern "C-unwind" fn sealer_thread(arg: *mut c_void) -> *mut c_void {
    seal_with_cancel_pending(arg);
    // SAFETY: a cancellation point; the unwind passes only this frame.
    unsafe { pthread_testcancel() };
    unreachable!("the cancellation was pending")
}

/// A membarrier that fails after registration is reported once on stderr
/// (`eprintln!`: a `write`, a cancellation point). A thread's seal starts
/// grace periods itself (v3's polls), with its cancellation enabled: a
/// pending cancellation acted in the report, between claiming the grace
/// period and publishing it, so the forced unwind went through exitq (the
/// process aborted) and the grace period stayed claimed and unpublished
/// forever (every later `synchronize` would wait for it).
#[test]
fn a_pending_cancellation_does_not_act_inside_a_membarrier_failure_report() {
    if !exitq::membarrier_available() {
        return skip_util::skip("membarrier(2) PRIVATE_EXPEDITED is not available");
    }
    before_fork();
    let code = watch_util::fork_child(LIMIT * 2, || {
        let d = Domain::builder()
            .batch_size(1)
            .expedite(exitq::Expedite::Membarrier)
            .stall_timeout(Duration::from_secs(3600))
            .build();
        let returned = Arc::new(AtomicBool::new(false));
        let start = Box::new(Sealer {
            domain: d.clone(),
            returned: returned.clone(),
        });
        let tid = pthread_util::spawn(sealer_thread, start);
        if !pthread_util::join_was_cancelled(tid) {
            return 3;
        }
        let d2 = d.clone();
        let hung = std::panic::catch_unwind(|| {
            watch_util::within("synchronize", LIMIT, move || d2.synchronize())
        })
        .is_err();
        if hung {
            return 4;
        }
        if !returned.load(Ordering::SeqCst) {
            return 1;
        }
        0
    });
    assert_eq!(
        code, 0,
        "exit code {code}: 1 the cancellation acted inside exitq, 3 the thread was not \
         cancelled, 4 synchronize hung, 101 a panic (134: aborted by the forced unwind)"
    );
}

// ---- grace periods driven by the producers' polls ----

/// Small batches (a producer seals often); a first-check delay of 100 ms,
/// which makes the reclaimer's look for polls 800 ms long (8 delays): no
/// preemption of the producer on a loaded machine lasts that long, so the
/// reclaimer sees the producer's polls throughout.
fn polled_domain() -> exitq::DomainBuilder {
    Domain::builder()
        .batch_size(8)
        .first_check_delay(Duration::from_millis(100))
}

/// Runs a producer on this thread for at most `limit`: short `Reader`
/// sections, each deferring 16 counted callbacks (so its batches of 8
/// seal, and each seal polls the grace period), 100 µs of other work between
/// sections. Stops as soon as `until()` holds; returns whether it did.
fn produce_inside_sections(d: &Domain, limit: Duration, until: impl Fn() -> bool) -> bool {
    let mut reader = d.reader();
    let ran = Arc::new(AtomicUsize::new(0));
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        {
            let _g = reader.read();
            for _ in 0..16 {
                let ran = ran.clone();
                d.defer(move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
        }
        if until() {
            return true;
        }
        // Other work between sections (not a sleep: it keeps its CPU).
        let pause = std::time::Instant::now();
        while pause.elapsed() < Duration::from_micros(100) {
            std::hint::spin_loop();
        }
    }
    false
}

/// A thread leaked a guard and exited: its section must stop holding grace
/// periods once the thread is gone (the crate docs, "Leaks"): a grace
/// period that waits for it checks whether the thread exists, after its
/// first milliseconds, and frees the record. Only a grace period's leader
/// does that check, and v3's reclaimer leads none while threads poll: a
/// producer that seals batches inside its read sections (polling at each
/// seal, never waiting) kept the reclaimer from ever leading, so the
/// leaked section held every grace period for as long as it produced:
/// none of its callbacks ran, its memory grew without bound.
#[test]
fn a_leaked_guard_of_an_exited_thread_stops_holding_grace_periods_while_threads_poll() {
    let d = polled_domain()
        .stall_timeout(Duration::from_secs(3600))
        .build();
    let d2 = d.clone();
    thread::spawn(move || std::mem::forget(d2.read()))
        .join()
        .unwrap();
    let d3 = d.clone();
    let freed = watch_util::within("producer", 2 * LIMIT, move || {
        produce_inside_sections(&d3, LIMIT, || d3.stats().callbacks_run > 0)
    });
    assert!(
        freed,
        "no callback ran in {LIMIT:?}: the leaked section still holds the grace periods ({:?})",
        d.stats()
    );
}

/// A reader that holds a grace period past the stall timeout is reported
/// (the crate docs, "Stalls"). Only a grace period's leader reports, and
/// v3's reclaimer leads none while threads poll: with a producer sealing
/// inside its read sections, a reader stuck for seconds was never
/// reported.
#[test]
fn a_stalled_reader_is_reported_while_threads_poll() {
    let stalls = Arc::new(AtomicUsize::new(0));
    let s = stalls.clone();
    let d = polled_domain()
        .stall_timeout(Duration::from_millis(100))
        .stall_handler(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
        })
        .build();
    // A reader stuck in its section until the producer is done.
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let d2 = d.clone();
    let stuck = thread::spawn(move || {
        let _g = d2.read();
        entered_tx.send(()).unwrap();
        let _ = done_rx.recv();
    });
    entered_rx.recv().unwrap();
    let (d3, s3) = (d.clone(), stalls.clone());
    let reported = watch_util::within("producer", 2 * LIMIT, move || {
        produce_inside_sections(&d3, LIMIT, || s3.load(Ordering::SeqCst) > 0)
    });
    done_tx.send(()).unwrap();
    stuck.join().unwrap();
    assert!(
        reported,
        "a reader stuck for {LIMIT:?} was not reported (stall timeout 100 ms): {:?}",
        d.stats()
    );
}

// ---- shutdown ----

/// Dropping the last handle stops the reclaimer and runs every pending
/// callback without a grace period (the crate docs, "Shutdown"): no
/// section can be open any more, a leaked one included. A thread that
/// leaked a guard and lives on holds grace periods, and the reclaimer,
/// leading one for a thread's sealed batch, waited for that section
/// forever; shutdown joined it, and the drop never returned.
#[test]
fn dropping_the_last_handle_does_not_wait_for_a_live_threads_leaked_section() {
    let d = Domain::builder()
        .stall_timeout(Duration::from_secs(3600))
        .build();
    let (leaked_tx, leaked_rx) = std::sync::mpsc::channel::<()>();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let d2 = d.clone();
    let leaker = thread::spawn(move || {
        std::mem::forget(d2.read());
        drop(d2);
        leaked_tx.send(()).unwrap();
        let _ = end_rx.recv(); // alive until the end
    });
    leaked_rx.recv().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    d.defer(move || {
        r.fetch_add(1, Ordering::SeqCst);
    });
    d.flush(); // sealed: the reclaimer leads its grace period
    thread::sleep(Duration::from_millis(100)); // it waits in that grace period
    let dropped = std::panic::catch_unwind(|| {
        watch_util::within("dropping the last handle", LIMIT, move || drop(d))
    })
    .is_ok();
    end_tx.send(()).unwrap();
    leaker.join().unwrap();
    assert!(dropped, "the drop waited for a leaked section");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the pending callback did not run"
    );
}

// ---- fork: a child that builds its own domain ----

/// Set by the SIGSYS handler while it holds a thread inside the first
/// membarrier registration; cleared by the test to let it go.
static TRAPPED: AtomicBool = AtomicBool::new(false);
static RELEASE: AtomicBool = AtomicBool::new(false);

/// SIGSYS handler (a seccomp trap of membarrier): holds the calling thread
/// inside the system call until `RELEASE`, then makes the call fail with
/// ENOSYS (the domain falls back to fences).
#[cfg(target_arch = "x86_64")]
extern "C" fn hold_in_membarrier(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut c_void) {
    TRAPPED.store(true, Ordering::SeqCst);
    while !RELEASE.load(Ordering::SeqCst) {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: async-signal-safe; valid timespec.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
    // SAFETY: the kernel passes the interrupted context; RAX holds the
    // system call's return value once the handler returns.
    unsafe {
        (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RAX as usize] =
            -(libc::ENOSYS as i64);
    }
}

/// Makes membarrier(2) raise SIGSYS on the calling thread only.
#[cfg(target_arch = "x86_64")]
fn trap_membarrier_on_this_thread() {
    const SECCOMP_RET_TRAP: u32 = 0x0003_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut prog = [
        ins(0x20, 0, 0, 0),
        ins(0x15, 0, 1, libc::SYS_membarrier as u32),
        ins(0x06, 0, 0, SECCOMP_RET_TRAP),
        ins(0x06, 0, 0, SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: a valid handler and sigaction; plain prctl calls with a
    // valid program (copied by the kernel).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = hold_in_membarrier as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        assert_eq!(libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut()), 0);
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &fprog as *const libc::sock_fprog,
            ),
            0
        );
    }
}

const FORK_HELPER: &str = "EXITQ_RED2_FORK_HELPER";

/// Run by `a_child_builds_its_own_domain_while_the_parent_registers_membarrier`
/// in a fresh process of this test binary (where no domain was built
/// yet); does nothing otherwise.
#[test]
#[ignore = "a helper: run by a_child_builds_its_own_domain_while_the_parent_registers_membarrier"]
fn fork_helper_first_registration() {
    if std::env::var_os(FORK_HELPER).is_none() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // Thread A builds the process's first domain and is held inside
        // its membarrier registration.
        let a = thread::spawn(|| {
            trap_membarrier_on_this_thread();
            drop(Domain::new());
        });
        while !TRAPPED.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(1));
        }
        // Meanwhile this thread forks; the child builds its own domain,
        // as the crate docs' fork model says a child that wants RCU does.
        let code = watch_util::fork_child(LIMIT, || {
            drop(Domain::new());
            0
        });
        RELEASE.store(true, Ordering::SeqCst);
        a.join().unwrap();
        assert_eq!(code, 0);
    }
}

/// A child of `fork()` builds its own domain (the crate docs' fork model).
/// The membarrier registration was a `OnceLock`: forked while another
/// thread of the parent was inside it (the process's first domain being
/// built), the child found it being initialized forever, and its
/// `Domain::new` never returned.
#[test]
fn a_child_builds_its_own_domain_while_the_parent_registers_membarrier() {
    if !cfg!(target_arch = "x86_64") {
        return skip_util::skip("the SIGSYS handler sets an x86_64 register");
    }
    watch_util::run_ignored_alone("fork_helper_first_registration", FORK_HELPER, "1");
}
