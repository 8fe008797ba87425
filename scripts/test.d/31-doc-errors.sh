#!/usr/bin/env bash
# exitq's compile_fail doctests with their error codes checked: stable
# rustdoc only checks that such an example fails to compile, nightly's also
# that it fails with the error named (`compile_fail,E0597`: the reference
# outlives its guard; E0505: the guard or cell is dropped while borrowed;
# E0499: a second section of one `Reader`; E0277/E0599: `Send`/`Sync`
# bounds), so a typo cannot pass for the borrow checker's refusal. Skips
# LOUDLY without a nightly toolchain.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
if ! command -v rustup >/dev/null 2>&1 || ! rustup toolchain list | grep -q '^nightly'; then
    skip "checking compile_fail error codes needs a nightly toolchain"
    exit 0
fi
echo "doc-errors: cargo +nightly test -p exitq --doc" >&2
cargo +nightly test -p exitq --doc --target-dir target/nightly
