#!/usr/bin/env bash
# Guest tests: herd inside a qemu guest with many vCPUs (herd/tests/vm/,
# driving scripts/vm-run.sh). CI runs them at HERD_VM_CPUS vCPUs in
# HERD_VM_NUMA nodes (default: see below); the big check, as in the docs:
#
#     HERD_VM_CPUS=512 HERD_VM_NUMA=4 bash scripts/test.d/50-vm.sh
#
# `50-vm.sh --prepare` fetches what the guests need (the guest kernel and,
# for the x2APIC pass, a qemu that emulates it; as root the packages) and
# exits: scripts/test-setup.sh runs it before any test starts, so under the
# test command (HERD_NO_INSTALL=1) nothing is fetched here. Without them,
# the guest tests skip loudly (fail under the test command as root).
# HERD_TEST_QUICK=1 leaves them out. The suite fails if no guest ran.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh

prepare_only=0
[ "${1:-}" = --prepare ] && prepare_only=1
if [ "${HERD_TEST_QUICK:-0}" = 1 ]; then
    echo "SKIPPED: VM guest tests (HERD_TEST_QUICK=1 leaves them out)" >&2
    exit 0
fi
cpus=${HERD_VM_CPUS:-16}
nodes=${HERD_VM_NUMA:-2}
# A guest above 255 vCPUs takes minutes here (docs/guest.md: 264 vCPUs
# ran the guest tests in about 4 minutes), too long for every CI run. The
# x2APIC path is tested at a size that fits: 16 vCPUs, half of them with
# APIC ids from 256 on (vm-run.sh --x2apic-ids: q35, interrupt remapping,
# the fetched qemu), running the shared guest's tests again. It boots 8
# of them and brings the other 8 online after boot (HERD_VM_BOOT_CPUS=8),
# as the guests above 255 vCPUs do: no PIT, HPET, MTRRs or PAT.
x2apic_pass=0
[ "$cpus" -le 255 ] && [ "${HERD_VM_X2APIC:-1}" = 1 ] && x2apic_pass=1

# Kernel and qemu first, so that a missing one is one clear message, never
# a pile of test failures.
if ! kernel=$(bash scripts/vm-run.sh --cpus "$cpus" --numa "$nodes" --prepare) ||
    { [ "$x2apic_pass" = 1 ] && ! bash scripts/vm-run.sh --cpus 16 --x2apic-ids --prepare >/dev/null; }; then
    [ "$prepare_only" = 0 ] || exit 1
    skip "VM guest tests: qemu, busybox, cpio, the guest kernel or the x2APIC qemu are missing (see the message above; scripts/test-setup.sh provides them as root)"
    exit 0
fi
echo "guest kernel: $kernel" >&2
[ "$prepare_only" = 0 ] || exit 0

# Runs the guest tests with the environment given; fails unless guests
# booted (each run prints "guest finished in" through the test log) and
# every test passed.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run_guests() {
    local start booted
    start=$(date +%s)
    env HERD_VM_TEST=1 "$@" cargo test --release -p herd --test vm -- --nocapture 2>&1 | tee "$log"
    booted=$(grep -c 'vm-run.sh: guest finished in' "$log" || true)
    echo "$booted guests booted in $(($(date +%s) - start))s" >&2
    [ "$booted" -gt 0 ] || { echo "FAIL: the guest tests ran no guest" >&2; exit 1; }
}

echo "VM guest tests at $cpus vCPUs in $nodes NUMA nodes (HERD_VM_CPUS, HERD_VM_NUMA)" >&2
run_guests HERD_VM_CPUS="$cpus" HERD_VM_NUMA="$nodes"

if [ "$x2apic_pass" = 1 ]; then
    echo "VM guest tests, x2APIC path: 16 vCPUs in 2 NUMA nodes, 8 with APIC ids from 256, brought online after boot (HERD_VM_X2APIC=0 skips)" >&2
    run_guests HERD_VM_CPUS=16 HERD_VM_NUMA=2 HERD_VM_X2APIC_IDS=1 HERD_VM_SMALL_GUESTS=0 HERD_VM_BOOT_CPUS=8
fi
