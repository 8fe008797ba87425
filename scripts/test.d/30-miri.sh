#!/usr/bin/env bash
# Miri on exitq's lock-free list (exitq/src/llist/tests.rs), reduced size under
# cfg(miri) (3 threads x 50 nodes), and on the packed batch encoding of
# `defer` (exitq/src/batch.rs unit tests: closures of every size, panics),
# and on the domain's core (exitq/tests/miri_core.rs: batches sealed,
# drained a few callbacks at a time, stolen by a barrier, pushed at thread
# exit, orphaned at shutdown), and on the typed RCU pointers and the owned
# reader (exitq/tests/miri_cell.rs: loads under both kinds of guard and an
# online QSBR reader while writers store, swap, CAS, update and replace; a
# reader in a thread-local released at thread exit; the cell caches' parked
# values when a drop panics, exitq/src/cell/keep/tests.rs; and four of
# exitq/tests/red_cache.rs: zero-sized values' own allocations, panicking
# drops at a cell's drop, one look per run's key and its overflow; and
# exitq/tests/exit_walk.rs: exit hooks that use a domain during the exit
# walk, whose old code miri caught reading a freed value; and
# exitq/src/handoff_tests.rs: a thread's exit handed off to a barrier that
# holds its record, the batches, hooks and record passed between them;
# exitq/tests/miri_pool.rs: a pool's workers retiring and replaced, whose
# exit walk miri caught reading a record a new worker had claimed; the
# shared domain's reclaimer outlives main, hence -Zmiri-ignore-leaks): checks
# data races, use-after-free,
# provenance, aliasing and leaks in the raw-pointer code. Needs the nightly
# toolchain with miri and rust-src (scripts/test-setup.sh adds them); skips
# LOUDLY without them (fails under the test command as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
if ! command -v rustup >/dev/null 2>&1 || ! rustup toolchain list | grep -q '^nightly'; then
    skip "miri needs a nightly toolchain (rustup toolchain install nightly --component miri,rust-src)"
    exit 0
fi
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    skip "miri: the nightly toolchain has no miri (rustup +nightly component add miri rust-src)"
    exit 0
fi
echo "miri: cargo +nightly miri test -p exitq --lib llist::tests" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --lib --target-dir target/miri -- llist::tests
echo "miri: cargo +nightly miri test -p exitq --lib batch::tests" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --lib --target-dir target/miri -- batch::tests
echo "miri: cargo +nightly miri test -p exitq --lib cell::keep::tests" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --lib --target-dir target/miri -- cell::keep::tests
echo "miri: cargo +nightly miri test -p exitq --lib handoff_tests" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --lib --target-dir target/miri -- handoff_tests
echo "miri: cargo +nightly miri test -p exitq --test miri_core" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --test miri_core --target-dir target/miri
echo "miri: cargo +nightly miri test -p exitq --test exit_walk" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --test exit_walk --target-dir target/miri
echo "miri: cargo +nightly miri test -p exitq --test miri_pool" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance -Zmiri-ignore-leaks" \
    cargo +nightly miri test -p exitq --test miri_pool --target-dir target/miri
echo "miri: cargo +nightly miri test -p exitq --test miri_cell" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --test miri_cell --target-dir target/miri
echo "miri: cargo +nightly miri test -p exitq --test red_cache (four deterministic tests)" >&2
MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance" \
    cargo +nightly miri test -p exitq --test red_cache --target-dir target/miri -- \
    zero_sized_values_are_dropped a_panicking_drop_at_the_cells_drop one_run_two_cells a_look_that_overflows
