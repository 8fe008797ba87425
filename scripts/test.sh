#!/usr/bin/env bash
# The project's one test command (README, and .ci/run calls it too).
#
#   0. scripts/test-setup.sh: what the tests need, once, serially, before
#      any test starts (as root: the Debian packages of
#      scripts/test-packages.txt, tracefs; the nightly miri, inferno, the
#      guest kernel and qemu). Nothing after it installs anything: test.sh
#      exports HERD_NO_INSTALL=1, and a script a test runs fails naming
#      what is missing rather than installing it.
#   1. cargo test --workspace (debug, then the stress tests in release)
#   2. every scripts/test.d/*.sh suite, in name order (loom, torture, miri,
#      the scripts' own tests, shellcheck, the VM guests: see
#      docs/development.md)
#
# As root (CI) it also exports HERD_TEST_STRICT=1: every capability a test
# needs is set up, so a test that would skip for a missing one fails
# instead, naming it. Without root nothing is installed and such tests
# skip loudly with the reason. HERD_TEST_QUICK=1 leaves out the VM guest
# tests and runs the torture test for 10 s instead of 60.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n== %s\n' "$*" >&2; }

# Each part, timed: `== PART` before, `== PART: N s` after, the total last.
# A part that fails ends the command with its status, named on the last
# line (`== FAILED: PART (exit N, after M s)`): the log of a long run used
# to end in the part's own output, its name far above.
part() {
    local what=$1 t0=$SECONDS rc=0
    shift
    say "$what"
    "$@" || rc=$?
    if [ "$rc" != 0 ]; then
        say "FAILED: $what (exit $rc, after $((SECONDS - t0)) s)"
        exit "$rc"
    fi
    say "$what: $((SECONDS - t0)) s"
}

part "scripts/test-setup.sh" bash scripts/test-setup.sh
export HERD_NO_INSTALL=1
if [ "$(id -u)" = 0 ]; then
    export HERD_TEST_STRICT=1
    say "root: HERD_TEST_STRICT=1, a test that cannot run here fails"
fi

part "cargo test --workspace (debug)" cargo test --workspace
part "cargo test --workspace --release (stress sizes)" cargo test --workspace --release

for suite in scripts/test.d/*.sh; do
    [ -e "$suite" ] || continue
    part "$suite" bash "$suite"
done
say "all passed in $((SECONDS / 60)) min $((SECONDS % 60)) s"
