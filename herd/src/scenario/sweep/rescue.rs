//! Keeping a sweep's measurements when `DIR/data.json` cannot be written.
//!
//! A sweep can run for hours, and its only copy of every run is in memory
//! until `data.json` is written. [`crate::export::write_file`] leaves the
//! old file whole when a write fails (past `RLIMIT_FSIZE`, a full disk, a
//! read-only or unwritable directory), but the new measurements would be
//! lost with the process. So the document goes elsewhere, first place
//! that takes it:
//!
//! 1. a new file in the temporary directory (`$TMPDIR`, else `/tmp`):
//!    `herd-sweep-PID-SECS.json` (another file system, often: a full or
//!    read-only `DIR` does not stop it);
//! 2. standard output, the document alone (the table is not printed), as
//!    `--json` prints it: a pipe or a terminal has no file-size limit.
//!
//! Either way the sweep ends with an error (exit 1) that names the path
//! that failed, its error and where the measurements are.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::export::run::print_out;

/// Saves `json` (the sweep document) elsewhere after its write to
/// `failed` failed with `err`; returns the error to end the sweep with,
/// saying where the measurements went.
pub(super) fn keep(json: &str, failed: &Path, err: &anyhow::Error) -> anyhow::Error {
    let lost = format!("cannot write {}: {:#}", failed.display(), err.root_cause());
    let spare = spare_path();
    match write_new(&spare, json) {
        Ok(()) => anyhow::anyhow!(
            "{lost}; the measurements are saved in {} instead (the old files are kept)",
            spare.display()
        ),
        Err(e2) => match print_out(&format!("{json}\n")) {
            Ok(()) => anyhow::anyhow!(
                "{lost}; nor could they be saved in {} ({e2}): the measurements (data.json) \
                 are printed on standard output instead",
                spare.display()
            ),
            Err(e3) => anyhow::anyhow!(
                "{lost}; nor in {} ({e2}), nor on standard output ({e3}): the measurements \
                 are lost",
                spare.display()
            ),
        },
    }
}

/// `$TMPDIR/herd-sweep-PID-SECS.json`.
fn spare_path() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::env::temp_dir().join(format!("herd-sweep-{}-{secs}.json", std::process::id()))
}

/// Writes `text` to a file that must not exist yet, whole or not at all
/// (a partial file is removed).
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    // Created here: a failure from now on removes it.
    let r = f
        .write_all(text.as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .and_then(|()| f.sync_all());
    if r.is_err() {
        let _ = std::fs::remove_file(path);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_file_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        std::fs::write(&p, "old").unwrap();
        assert!(write_new(&p, "{}").is_err());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        let q = dir.path().join("y.json");
        write_new(&q, "{}").unwrap();
        assert_eq!(std::fs::read_to_string(&q).unwrap(), "{}\n");
    }
}
