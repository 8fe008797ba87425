#!/usr/bin/env bash
# The project's one test command (README, and .ci/run calls it too).
#
# Sets up what the tests need when it can (as root: Debian packages such as
# linux-perf, a mounted tracefs), then runs every test suite:
#   1. cargo test --workspace (debug, then the stress tests in release)
#   2. loom models of exitq's lock-free core (reduced size, see exitq/tests)
#   3. miri on exitq's lock-free list (nightly, reduced size)
#   4. the shell scripts' own tests
# Without root nothing is installed; tests that need perf or tracefs then
# skip loudly with the reason. HERD_TEST_QUICK=1 skips loom, miri and the VM.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*" >&2; }

setup_root() {
    [ "$(id -u)" = 0 ] || { say "not root: not installing packages or mounting tracefs (perf tests will skip loudly)"; return 0; }
    local need=()
    command -v perf >/dev/null 2>&1 || need+=(linux-perf)
    command -v gcc >/dev/null 2>&1 || need+=(gcc)
    if [ "${#need[@]}" -gt 0 ]; then
        say "installing ${need[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    fi
    if [ ! -e /sys/kernel/tracing/events ] || [ -z "$(ls -A /sys/kernel/tracing 2>/dev/null)" ]; then
        say "mounting tracefs at /sys/kernel/tracing"
        mount -t tracefs nodev /sys/kernel/tracing || say "could not mount tracefs"
    fi
}

setup_root

say "cargo test --workspace (debug)"
cargo test --workspace

say "cargo test --workspace --release (stress sizes)"
cargo test --workspace --release

# Further suites, one file each (loom, miri, perf script, VM guest, ...),
# run in name order. Each prints what it runs and skips loudly with a reason.
for part in scripts/test.d/*.sh; do
    [ -e "$part" ] || continue
    say "$part"
    bash "$part"
done
