//! The one way an exitq test says it cannot run here (herd's tests have
//! the same rule in `herd/tests/common/skip.rs`).
//!
//! Under the test command as root (`scripts/test.sh`, as CI runs it),
//! every capability the tests need is set up first (root, tracefs) and
//! test.sh exports `HERD_TEST_STRICT=1`: a test that finds one missing
//! fails, naming it, instead of passing by not running. Elsewhere it
//! prints `SKIPPED: <why>` straight to the process's stderr (libtest
//! captures `eprintln!` of passing tests, and a skip must be seen).

use std::io::Write;

/// The test (or this part of it) cannot run here because `why`: prints
/// `SKIPPED: why`, or under `HERD_TEST_STRICT=1` panics with it.
pub fn skip(why: &str) {
    if std::env::var("HERD_TEST_STRICT").as_deref() == Ok("1") {
        panic!(
            "{why}: under the test command as root (HERD_TEST_STRICT=1) every \
             capability is set up, so this test must run, not skip"
        );
    }
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {why}");
}
