//! A shared object that uses exitq, for `tests/exit_order.rs`: loaded with
//! `dlopen`, used by a thread, and `dlclose`d while that thread still
//! lives. exitq pins the object it lives in, so the thread's exit
//! destructor still finds its code.
//!
//! Built by `cargo test` (as every example) into
//! `target/<profile>/examples/libexit_dso.so`.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static DOMAIN: OnceLock<exitq::Domain> = OnceLock::new();
static RAN: AtomicUsize = AtomicUsize::new(0);

fn count() {
    RAN.fetch_add(1, Ordering::Relaxed);
}

/// Uses the object's domain on the calling thread: a deferred callback and
/// an exit hook, each counted when it runs.
#[no_mangle]
pub extern "C" fn exit_dso_use() {
    // No reclaimer thread: its std thread-locals would register glibc
    // destructors in this object, which keep it loaded by themselves.
    let d = DOMAIN.get_or_init(|| {
        exitq::Domain::builder()
            .reclaimer(exitq::Reclaimer::Inline)
            .build()
    });
    let _g = d.read();
    d.defer(count);
    d.register_exit(count);
}

/// Waits for every exit hook and callback so far; returns how many ran.
#[no_mangle]
pub extern "C" fn exit_dso_settle() -> usize {
    if let Some(d) = DOMAIN.get() {
        d.exit_barrier();
        d.barrier();
    }
    RAN.load(Ordering::Relaxed)
}
