//! Where the exit path runs among a thread's other exit destructors (the
//! `thread` module docs, "The exit destructor"), in a process of its own
//! (`harness = false`): which pthread keys exist before the first domain,
//! and what the main thread does at `exit()`, are the test's to decide.
//!
//! 1. A pthread key created *before* the first domain, whose destructor
//!    is a thread's first use of exitq: its callback and exit hook run.
//! 2. A thread-local destructor (created before the thread's first use of
//!    exitq) defers into the thread's own batch, which the exit path hands
//!    over afterwards: nothing is published alone. A key created *after*
//!    the first domain runs after the exit path: its callback is
//!    published alone, and runs.
//! 3. The main thread's exit hook of a domain dropped before `exit()`
//!    runs at `exit()` (glibc runs no key destructors there), checked by
//!    re-running this binary as a child.
//! 4. With every pthread key used up before the first domain, threads fall
//!    back to a thread-local destructor: hooks and callbacks still run.
//! 5. A thread that used exitq forks: in the child it is the main thread,
//!    and a hook of a domain built and dropped there runs at `exit()`.
//! 6. exitq in a shared object (the example `exit_dso`) that is
//!    `dlclose`d while a thread that used it lives: the object stays
//!    loaded (exitq pins it), the thread's exit destructor runs, and the
//!    callback and hook run.
use std::cell::Cell;
use std::ffi::{c_void, CStr, CString};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::Duration;

use exitq::Domain;

mod skip_util;

static DOMAIN: OnceLock<Domain> = OnceLock::new();
static BEFORE_KEY_DEFER: AtomicUsize = AtomicUsize::new(0);
static BEFORE_KEY_HOOK: AtomicUsize = AtomicUsize::new(0);
static AFTER_KEY_DEFER: AtomicUsize = AtomicUsize::new(0);
static TLS_DEFER: AtomicUsize = AtomicUsize::new(0);
static BODY_DEFER: AtomicUsize = AtomicUsize::new(0);

const CHILD: &str = "EXITQ_EXIT_ORDER_CHILD";
const MAIN_HOOK_LINE: &[u8] = b"main thread exit hook ran\n";
const DSO_LINE: &[u8] = b"shared object still loaded, its callback and hook ran\n";

fn domain() -> &'static Domain {
    DOMAIN.get().expect("built in main")
}

fn count(c: &'static AtomicUsize) -> impl FnOnce() + Send + 'static {
    move || {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

fn new_key(dtor: extern "C" fn(*mut c_void)) -> libc::pthread_key_t {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is writable; `dtor` does not unwind (extern "C").
    let rc = unsafe { libc::pthread_key_create(&mut key, Some(dtor)) };
    assert_eq!(rc, 0, "pthread_key_create: {rc}");
    key
}

fn set_key(key: libc::pthread_key_t) {
    // SAFETY: a live key; any non-null value arms its destructor.
    let rc = unsafe {
        libc::pthread_setspecific(key, std::ptr::NonNull::<u8>::dangling().as_ptr().cast())
    };
    assert_eq!(rc, 0, "pthread_setspecific: {rc}");
}

extern "C" fn before_key_dtor(_: *mut c_void) {
    let d = domain();
    d.defer(count(&BEFORE_KEY_DEFER));
    d.register_exit(count(&BEFORE_KEY_HOOK));
}

extern "C" fn after_key_dtor(_: *mut c_void) {
    let d = domain();
    let _g = d.read();
    d.defer(count(&AFTER_KEY_DEFER));
}

struct DefersOnDrop;

impl Drop for DefersOnDrop {
    fn drop(&mut self) {
        domain().defer(count(&TLS_DEFER));
    }
}

thread_local! {
    static DEFERS_ON_DROP: Cell<Option<DefersOnDrop>> = const { Cell::new(None) };
}

fn check(what: &str, got: usize, want: usize, failures: &mut Vec<String>) {
    if got != want {
        failures.push(format!("{what}: {got}, expected {want}"));
    }
}

/// Each counter counted exactly one run.
fn ran_once(counters: &[(&str, &AtomicUsize)], failures: &mut Vec<String>) {
    for (what, c) in counters {
        check(what, c.load(Ordering::Relaxed), 1, failures);
    }
}

fn settle() {
    domain().exit_barrier();
    domain().barrier();
}

fn parent() -> ExitCode {
    let mut failures = Vec::new();
    // 1: a key created before any domain.
    let before = new_key(before_key_dtor);
    // A flush latency beyond the test: a thread's batch leaves only with
    // its exit chain (or is published alone).
    let _ = DOMAIN.set(
        Domain::builder()
            .flush_latency(Duration::from_secs(3600))
            .build(),
    );
    let after = new_key(after_key_dtor);

    thread::spawn(move || set_key(before)).join().unwrap();
    settle();
    ran_once(
        &[
            (
                "defer from a key destructor older than the domain",
                &BEFORE_KEY_DEFER,
            ),
            (
                "exit hook from a key destructor older than the domain",
                &BEFORE_KEY_HOOK,
            ),
        ],
        &mut failures,
    );

    // 2: a thread-local destructor and a younger key.
    let batches = domain().stats().batches;
    thread::spawn(move || {
        DEFERS_ON_DROP.set(Some(DefersOnDrop));
        set_key(after);
        let d = domain();
        let _g = d.read();
        d.defer(count(&BODY_DEFER));
    })
    .join()
    .unwrap();
    settle();
    let s = domain().stats();
    ran_once(
        &[
            ("body defer", &BODY_DEFER),
            ("thread-local destructor's defer", &TLS_DEFER),
            ("younger key destructor's defer", &AFTER_KEY_DEFER),
        ],
        &mut failures,
    );
    // Only the younger key's callback is published alone (a batch the
    // exit path hands over is not counted: `DomainStats::batches`). Two
    // would mean the thread-local destructor ran after the exit path.
    check(
        "batches sealed by the thread",
        (s.batches - batches) as usize,
        1,
        &mut failures,
    );

    // 3-5: the main thread at exit(), every key taken, a fork child's
    // main thread; 6: exitq in a shared object closed while its threads
    // live.
    let mut children = vec![
        ("main", "main thread's hook at exit()", MAIN_HOOK_LINE),
        ("no-keys", "every key used up", MAIN_HOOK_LINE),
        (
            "fork",
            "a fork child's main thread at exit()",
            MAIN_HOOK_LINE,
        ),
    ];
    if dso_path().exists() {
        children.push(("dso", "exitq in a dlclose'd shared object", DSO_LINE));
    } else {
        skip_util::skip(&format!(
            "{} not built (`cargo test` builds every example; `cargo build -p exitq --example exit_dso`)",
            dso_path().display()
        ));
    }
    for (mode, what, line) in children {
        let out = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, mode)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines = stdout.matches(std::str::from_utf8(line).unwrap()).count();
        if !out.status.success() || lines != 1 {
            failures.push(format!(
                "child '{mode}' ({what}): {}, its line {lines} times (expected 1)\nstdout:\n{stdout}\nstderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    if failures.is_empty() {
        println!("exit_order: all passed");
        ExitCode::SUCCESS
    } else {
        for f in &failures {
            eprintln!("exit_order: FAILED: {f}");
        }
        ExitCode::FAILURE
    }
}

/// The main thread registers an exit hook, the domain is dropped, and the
/// process exits (returning from `main`): the hook must run then, once.
/// In `no-keys` mode every pthread key is taken first, and a spawned
/// thread's hook and callback must run too (the fallback destructor).
fn child(mode: &str) -> ExitCode {
    if mode == "dso" {
        return dso_child();
    }
    if mode == "fork" {
        return fork_child();
    }
    if mode == "no-keys" {
        // std's own key (created with the first thread it starts) first.
        thread::spawn(|| ()).join().unwrap();
        let mut taken = 0;
        loop {
            let mut key: libc::pthread_key_t = 0;
            // SAFETY: `key` is writable; no destructor.
            if unsafe { libc::pthread_key_create(&mut key, None) } != 0 {
                break;
            }
            taken += 1;
        }
        eprintln!("child: {taken} pthread keys taken");
    }
    let d = Domain::new();
    if mode == "no-keys" {
        static RAN: AtomicUsize = AtomicUsize::new(0);
        let t = {
            let d = d.clone();
            thread::spawn(move || {
                d.defer(count(&RAN));
                d.register_exit(count(&RAN));
            })
        };
        t.join().unwrap();
        d.exit_barrier();
        d.barrier();
        let ran = RAN.load(Ordering::Relaxed);
        if ran != 2 {
            eprintln!("child: the thread's callback and hook ran {ran} times, expected 2");
            return ExitCode::FAILURE;
        }
    }
    d.register_exit(|| {
        // SAFETY: writes a static buffer to stdout (fd 1): the process is
        // exiting, so no Rust stdout machinery.
        unsafe { libc::write(1, MAIN_HOOK_LINE.as_ptr().cast(), MAIN_HOOK_LINE.len()) };
    });
    drop(d); // the main thread's record now holds the hook alone
    ExitCode::SUCCESS
}

/// A thread that armed its exit destructor (a key's only: it is not the
/// main thread) forks; in the child it is the main thread: a domain built
/// there gets its exit hook run at the child's `exit()`, as on a main
/// thread (the thread arms again, the thread-local destructor too).
fn fork_child() -> ExitCode {
    let d = Domain::new();
    let t = thread::spawn(move || {
        d.defer(|| ()); // arms this thread's exit destructor
                        // SAFETY: the child only builds a domain, registers a hook, drops
                        // the domain and calls exit(): what a fork child may do with
                        // exitq (the crate docs' fork model).
        match unsafe { libc::fork() } {
            -1 => panic!("fork: {}", std::io::Error::last_os_error()),
            0 => {
                let d2 = Domain::new();
                d2.register_exit(|| {
                    // SAFETY: a static buffer to fd 1 (the parent's pipe).
                    unsafe { libc::write(1, MAIN_HOOK_LINE.as_ptr().cast(), MAIN_HOOK_LINE.len()) };
                });
                drop(d2);
                // SAFETY: exit() runs the calling thread's thread-local
                // destructors (glibc's `__call_tls_dtors`), then exits.
                unsafe { libc::exit(0) }
            }
            pid => {
                let mut status = 0;
                // SAFETY: our child; `status` is writable.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
            }
        }
    });
    if t.join().unwrap() {
        ExitCode::SUCCESS
    } else {
        eprintln!("child: the fork child failed");
        ExitCode::FAILURE
    }
}

/// The example `exit_dso`, built beside this test's binary
/// (`target/<profile>/deps/exit_order-*` -> `target/<profile>/examples/`).
fn dso_path() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile_dir.join("examples").join("libexit_dso.so")
}

fn dlsym<T>(handle: *mut c_void, name: &CStr) -> T {
    // SAFETY: a live handle and a NUL-terminated name.
    let f = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!f.is_null(), "{name:?} not found in the shared object");
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: the symbol is a function of type `T` (the example's
    // `extern "C"` signatures, as the callers name them).
    unsafe { std::mem::transmute_copy(&f) }
}

/// Loads the shared object, uses its domain on a thread, closes the
/// object while the thread (and the domain's reclaimer) lives, lets the
/// thread exit, then finds the object still loaded and its callback and
/// hook run. Unpinned, the thread's exit destructor would jump into
/// unmapped code.
fn dso_child() -> ExitCode {
    let path = CString::new(dso_path().into_os_string().into_vec()).unwrap();
    // SAFETY: a NUL-terminated path; loading runs no code of ours but the
    // object's initialisers (Rust's: none that matter).
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        eprintln!("child: dlopen failed");
        return ExitCode::FAILURE;
    }
    let use_it: extern "C" fn() = dlsym(h, c"exit_dso_use");
    let (used_tx, used_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let t = thread::spawn(move || {
        use_it();
        used_tx.send(()).unwrap();
        go_rx.recv().unwrap();
    });
    used_rx.recv().unwrap();
    // SAFETY: our handle, closed once; nothing of ours uses `use_it` after.
    unsafe { libc::dlclose(h) };
    go_tx.send(()).unwrap();
    t.join().unwrap();
    // SAFETY: as above; RTLD_NOLOAD only finds an object still loaded.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        eprintln!("child: the shared object was unloaded by dlclose");
        return ExitCode::FAILURE;
    }
    let settle: extern "C" fn() -> usize = dlsym(h, c"exit_dso_settle");
    let ran = settle();
    if ran != 2 {
        eprintln!("child: the object's callback and hook ran {ran} times, expected 2");
        return ExitCode::FAILURE;
    }
    print!("{}", std::str::from_utf8(DSO_LINE).unwrap());
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    match std::env::var(CHILD) {
        Ok(mode) => child(&mode),
        Err(_) => parent(),
    }
}
