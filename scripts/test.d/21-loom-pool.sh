#!/usr/bin/env bash
# Loom models of exitq::pool's slot protocol (exitq/tests/loom_pool.rs):
# slot reuse under a stale idle-stack pop, the idle-worker/waker hand-shake
# (no lost wake-up) and exactly-one free of a retired slot. One slot, two or
# three threads, LOOM_MAX_PREEMPTIONS=2; well under a minute. Shares
# 20-loom.sh's target dir (same cfg, no second full build).
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "loom: RUSTFLAGS=--cfg exitq_loom LOOM_MAX_PREEMPTIONS=2 cargo test -p exitq --release --test loom_pool" >&2
RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
    cargo test -p exitq --release --test loom_pool --target-dir target/loom
