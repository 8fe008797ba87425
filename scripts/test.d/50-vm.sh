#!/usr/bin/env bash
# Guest tests: herd inside a qemu guest with many vCPUs (herd/tests/vm.rs,
# driving scripts/vm-run.sh). CI runs them at 16 vCPUs on every run; the
# full check at 128:
#
#     HERD_VM_CPUS=128 bash scripts/test.d/50-vm.sh
#
# As root the packages (qemu-system-x86, busybox-static, cpio) are installed
# and the kernel is fetched when missing; without root and without them the
# tests are skipped loudly. HERD_TEST_QUICK=1 skips them too.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "${HERD_TEST_QUICK:-0}" = 1 ]; then
    echo "SKIPPED: VM guest tests (HERD_TEST_QUICK=1)" >&2
    exit 0
fi
cpus=${HERD_VM_CPUS:-16}
echo "VM guest tests at $cpus vCPUs (HERD_VM_CPUS)" >&2

# Packages and kernel first, so a missing qemu is a clear skip (not root) or
# is installed (root, as in CI), never a pile of test failures.
if ! kernel=$(bash scripts/vm-run.sh --prepare); then
    if [ "$(id -u)" != 0 ]; then
        echo "SKIPPED: VM guest tests: qemu, busybox or the guest kernel are missing and installing them needs root (see the message above)" >&2
        exit 0
    fi
    echo "error: could not prepare the VM (packages or kernel) as root" >&2
    exit 1
fi
echo "guest kernel: $kernel" >&2

start=$(date +%s)
HERD_VM_TEST=1 HERD_VM_CPUS=$cpus cargo test --workspace --release --test vm -- --nocapture
echo "VM guest tests at $cpus vCPUs took $(($(date +%s) - start))s" >&2
