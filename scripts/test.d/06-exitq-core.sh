#!/usr/bin/env bash
# exitq's reclamation core alone (`default-features = false`: no `pool`,
# no `stacks`), as a user who wants only the core builds it: lints clean
# (no dead code the optional parts would have used), its docs have no
# link into a part left out, and its tests pass.
# The default-feature build is what the rest of the suite tests.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "exitq core: cargo clippy -p exitq --no-default-features --all-targets -- -D warnings" >&2
cargo clippy -p exitq --no-default-features --all-targets -- -D warnings
echo "exitq core: cargo test -p exitq --no-default-features --release" >&2
cargo test -p exitq --no-default-features --release
echo "exitq core: cargo doc -p exitq --no-default-features (-D warnings)" >&2
RUSTDOCFLAGS="-D warnings" cargo doc -q -p exitq --no-deps --no-default-features --target-dir target/doc-check
