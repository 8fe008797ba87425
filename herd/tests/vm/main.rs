//! herd in a qemu guest with many vCPUs (scripts/vm-run.sh).
//!
//! The host has 2 CPUs; the guest kernel has `HERD_VM_CPUS` (CI: the value
//! scripts/test.d/50-vm.sh sets; 264 crosses the 255 of xAPIC, 512 in 4
//! NUMA nodes is the big check). The guest tests boot qemu, so they run
//! only when `HERD_VM_TEST=1` (50-vm.sh sets it, and CI runs that file on
//! every run); otherwise each prints `SKIPPED:` with the reason, the one
//! skip the test command as root allows (50-vm.sh fails if no guest
//! booted; a missing capability in a guest test fails it there). The
//! script's own options and command lines are tested without a guest in
//! `vm_script.rs`.
//!
//!     HERD_VM_TEST=1 cargo test --release -p herd --test vm -- --nocapture
//!     HERD_VM_CPUS=512 HERD_VM_NUMA=4 bash scripts/test.d/50-vm.sh
//!
//! One guest boot (shared by the tests through a `OnceLock`) runs a script
//! of several herd commands; each test checks one of their results.
//!
//! Layout: `runner.rs` tests vm-run.sh itself on small guests (output,
//! exit status, time-out, console, packed libraries); `guest.rs` boots the
//! shared guest and reads its outputs; `topology.rs` checks the CPUs,
//! APIC ids, NUMA nodes and herd's placement there; `perf.rs` herd's perf
//! counters there.

#[path = "../vm_support/mod.rs"]
mod vm_support;

mod guest;
mod perf;
mod runner;
mod topology;

use vm_support::not_in_this_pass;

/// vCPUs of the shared guest.
pub(crate) fn guest_cpus() -> usize {
    env_count("HERD_VM_CPUS", 16)
}

/// NUMA nodes of the shared guest (at least 2: the per-node checks).
pub(crate) fn guest_nodes() -> usize {
    env_count("HERD_VM_NUMA", 2)
}

fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Whether the shared guest gives half its vCPUs APIC ids from 256 on
/// (`vm-run.sh --x2apic-ids`): the x2APIC path at a small size.
pub(crate) fn guest_x2apic_ids() -> bool {
    std::env::var("HERD_VM_X2APIC_IDS").as_deref() == Ok("1")
}

/// Whether the small guests' tests (not the shared guest's) run: 50-vm.sh
/// sets HERD_VM_SMALL_GUESTS=0 for its second pass, where they already ran
/// in the first.
pub(crate) fn small_guests_enabled(test: &str) -> bool {
    if !guests_enabled(test) {
        return false;
    }
    if std::env::var("HERD_VM_SMALL_GUESTS").as_deref() == Ok("0") {
        not_in_this_pass(&format!(
            "{test}: HERD_VM_SMALL_GUESTS=0 (scripts/test.d/50-vm.sh ran it in its first pass)"
        ));
        return false;
    }
    true
}

/// Whether guest tests run; prints the loud skip otherwise.
pub(crate) fn guests_enabled(test: &str) -> bool {
    if std::env::var("HERD_VM_TEST").as_deref() == Ok("1") {
        return true;
    }
    not_in_this_pass(&format!(
        "{test}: boots a qemu guest; runs with HERD_VM_TEST=1 \
         (scripts/test.d/50-vm.sh, which CI runs)"
    ));
    false
}
