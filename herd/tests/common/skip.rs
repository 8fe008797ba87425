//! The one way a test says it cannot run here (shared by `common` and
//! `vm_support`).
//!
//! Under the test command as root (`scripts/test.sh`, as CI runs it),
//! every capability a test needs is set up first (packages, tracefs,
//! root itself), and test.sh exports `HERD_TEST_STRICT=1`: a test that
//! finds one missing then fails, naming it, instead of passing by not
//! running. Elsewhere (`cargo test` by hand, not root) it prints
//! `SKIPPED: <why>` straight to the process's stderr (libtest captures
//! `eprintln!` of passing tests, and a skip must be seen) and the caller
//! returns.

use std::io::Write;

/// Whether skips fail (`HERD_TEST_STRICT=1`, set by scripts/test.sh as
/// root).
fn strict() -> bool {
    std::env::var("HERD_TEST_STRICT").as_deref() == Ok("1")
}

/// The test cannot run here because `why` (a missing capability, named
/// so that a reader knows what to provide): prints `SKIPPED: why`, or
/// under [`strict`] panics with it.
pub fn skip(why: &str) {
    if strict() {
        panic!(
            "{why}: under the test command as root (HERD_TEST_STRICT=1) every \
             capability is set up, so this test must run, not skip"
        );
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}

/// The test does not run in this pass by design (not for a missing
/// capability): says so, strict or not. For the guest tests, which
/// scripts/test.d/50-vm.sh runs (and fails if it runs none).
pub fn not_in_this_pass(why: &str) {
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}
