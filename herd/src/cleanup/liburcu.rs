//! liburcu (userspace RCU), urcu-memb flavour, loaded at run time.
//!
//! liburcu is a C library that is often not installed. herd must build and
//! run without it, so it is not linked: the first use `dlopen`s
//! `liburcu-memb.so.8` (the Debian package liburcu8, RPM userspace-rcu;
//! liburcu-dev brings the headers) and looks up the six functions herd
//! uses with `dlsym`. Where it is missing, `--cleanup urcu` is refused with
//! exit 2 and the packages to install (a build-time probe would instead
//! make the binary depend on the build machine, and a missing library
//! would stop every herd command from starting).
//!
//! `HERD_LIBURCU` names another file to load instead (a path, or a
//! soname searched the usual way): the tests point it at a file that does
//! not exist to check the refusal.
//!
//! The functions are liburcu's exported ones (`urcu_memb_*`, the names the
//! `rcu_*` macros of `<urcu/urcu-memb.h>` map to without `_LGPL_SOURCE`):
//! a read-side lock is a call here, not the header's inline code, which
//! costs a few nanoseconds per monitor walk and nothing on the exit path.

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

/// The soname herd loads (liburcu 0.10 and later).
pub const SONAME: &str = "liburcu-memb.so.8";

/// What to install when the library is missing.
pub const PACKAGES: &str =
    "install liburcu8 (Debian/Ubuntu: apt-get install liburcu8, or liburcu-dev) \
     or userspace-rcu (Fedora/RHEL: dnf install userspace-rcu)";

/// `struct rcu_head` of `<urcu/call-rcu.h>`: a `cds_wfcq_node` (one
/// pointer) and the callback. Embedded first in a `#[repr(C)]` object, so
/// the callback can recover the object from the head.
#[repr(C)]
#[derive(Debug)]
pub struct RcuHead {
    next: *mut c_void,
    func: Option<unsafe extern "C" fn(*mut RcuHead)>,
}

impl RcuHead {
    /// An unqueued head (liburcu fills both fields in `call_rcu`).
    pub const fn new() -> RcuHead {
        RcuHead {
            next: std::ptr::null_mut(),
            func: None,
        }
    }
}

impl Default for RcuHead {
    fn default() -> Self {
        RcuHead::new()
    }
}

/// The liburcu functions herd calls.
#[derive(Debug, Clone, Copy)]
pub struct Liburcu {
    /// `urcu_memb_register_thread`: adds the caller to the reader registry
    /// (under liburcu's registry mutex).
    pub register_thread: unsafe extern "C" fn(),
    /// `urcu_memb_unregister_thread`: removes it (same mutex).
    pub unregister_thread: unsafe extern "C" fn(),
    /// `urcu_memb_read_lock`.
    pub read_lock: unsafe extern "C" fn(),
    /// `urcu_memb_read_unlock`.
    pub read_unlock: unsafe extern "C" fn(),
    /// `urcu_memb_call_rcu`: queue a callback for after a grace period, on
    /// the call_rcu worker thread.
    pub call_rcu: unsafe extern "C" fn(*mut RcuHead, unsafe extern "C" fn(*mut RcuHead)),
    /// `urcu_memb_barrier`: wait until every queued callback has run.
    pub barrier: unsafe extern "C" fn(),
}

static LIB: OnceLock<Result<Liburcu, String>> = OnceLock::new();

/// The library, loaded once per process; the error says what is missing
/// and what to install.
pub fn load() -> Result<&'static Liburcu, String> {
    LIB.get_or_init(|| {
        let name = std::env::var("HERD_LIBURCU").unwrap_or_else(|_| SONAME.to_string());
        open(&name)
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until
    // the next dl* call on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: as above, non-null and NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn open(name: &str) -> Result<Liburcu, String> {
    let missing = |why: String| {
        format!("--cleanup urcu needs liburcu ({name}), which cannot be loaded: {why}; {PACKAGES}")
    };
    let cname = CString::new(name).map_err(|_| missing("the name has a NUL byte".into()))?;
    // SAFETY: a valid C string; RTLD_NOW resolves everything now, so a
    // broken library fails here and not at the first call. The handle is
    // never closed: the functions are used for the rest of the process
    // (and liburcu's call_rcu thread runs inside it).
    let h = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(missing(dl_error()));
    }
    let sym = |s: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: `h` is a live handle and `s` a C string.
        let p = unsafe { libc::dlsym(h, s.as_ptr() as *const c_char) };
        if p.is_null() {
            Err(missing(format!(
                "{} not found in it (liburcu older than 0.10?)",
                s.to_string_lossy()
            )))
        } else {
            Ok(p)
        }
    };
    type Void = unsafe extern "C" fn();
    type CallRcu = unsafe extern "C" fn(*mut RcuHead, unsafe extern "C" fn(*mut RcuHead));
    let void = |s: &CStr| -> Result<Void, String> {
        // SAFETY: every symbol looked up through `void` is a liburcu
        // function taking and returning nothing (<urcu/urcu-memb.h>).
        sym(s).map(|p| unsafe { std::mem::transmute::<*mut c_void, Void>(p) })
    };
    let call_rcu = sym(c"urcu_memb_call_rcu")?;
    Ok(Liburcu {
        register_thread: void(c"urcu_memb_register_thread")?,
        unregister_thread: void(c"urcu_memb_unregister_thread")?,
        read_lock: void(c"urcu_memb_read_lock")?,
        read_unlock: void(c"urcu_memb_read_unlock")?,
        // SAFETY: `urcu_memb_call_rcu(struct rcu_head *, void (*)(struct
        // rcu_head *))` in <urcu/call-rcu.h>: exactly `CallRcu`.
        call_rcu: unsafe { std::mem::transmute::<*mut c_void, CallRcu>(call_rcu) },
        barrier: void(c"urcu_memb_barrier")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_the_packages() {
        let e = open("/nonexistent/liburcu-memb.so.8").unwrap_err();
        assert!(e.contains("liburcu8") && e.contains("userspace-rcu"), "{e}");
        assert!(e.contains("/nonexistent/liburcu-memb.so.8"), "{e}");
    }

    #[test]
    fn the_installed_library_has_every_symbol() {
        match open(SONAME) {
            Ok(l) => {
                // SAFETY: the functions are liburcu's; a registered thread
                // may read-lock, synchronize (outside the read section)
                // and unregister.
                unsafe {
                    (l.register_thread)();
                    (l.read_lock)();
                    (l.read_unlock)();
                    (l.barrier)();
                    (l.unregister_thread)();
                }
            }
            // Root runs the test command, which installs liburcu-dev
            // (scripts/test-packages.txt): a missing library there is a
            // failure, not a skip; so under HERD_TEST_STRICT=1.
            Err(e) if super::super::must_have_liburcu() => panic!("{e}"),
            Err(e) => eprintln!("SKIPPED: liburcu is not installed (not root): {e}"),
        }
    }
}
