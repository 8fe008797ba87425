#!/usr/bin/env bash
# exitq's torture test (exitq/examples/torture/): many threads mixing
# every API at random on seven domains (thread exits raced with steals too:
# the hand-off waves), every guarantee checked, for about a
# minute (EXITQ_TORTURE_SECONDS, default 60; HERD_TEST_QUICK=1: 10 s). It
# prints its seed; a failure is rerun with
#
#     cargo run --release -p exitq --example torture -- --seconds 60 --seed SEED
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${EXITQ_TORTURE_SECONDS:-60}
if [ "${HERD_TEST_QUICK:-0}" = 1 ]; then
    secs=10
fi
echo "torture: cargo run --release -p exitq --example torture -- --seconds $secs" >&2
cargo run -q --release -p exitq --example torture -- --seconds "$secs"
