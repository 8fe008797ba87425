#!/usr/bin/env bash
# The declared rust-version of each package against what its locked
# dependencies need (scripts/msrv-check.py); the package's own code is
# checked against it by clippy's incompatible_msrv lint in .ci/run.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
need python3 "the rust-version check needs python3" || exit 0
echo "msrv: scripts/msrv-check.py" >&2
python3 scripts/msrv-check.py
