#!/usr/bin/env bash
# Loom models of exitq's lock-free core (exitq/tests/loom.rs): the list, the
# read-side/grace-period protocol, the batch steal handshake and a record's
# life (a leaked record's release racing its guard's drop and a claim); and of
# the cell caches' handshakes (exitq/tests/loom_cache.rs: adoption against the
# check after the grace period, parking against a cache moving on); and of the
# reclaimer's sleep against the threads that wake it (exitq/tests/loom_wake.rs);
# first, that loom sees a thread's write race other threads' loads when the
# thread loaded the word just before (exitq/tests/loom_sees.rs: the workspace
# builds loom with the fix for tokio-rs/loom#166, third_party/loom/PATCHED.md).
# Reduced
# size (2-3 threads, LOOM_MAX_PREEMPTIONS=2), as loom needs; about a minute.
# Own target dir: the cfg changes every crate's build.
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "loom: RUSTFLAGS=--cfg exitq_loom LOOM_MAX_PREEMPTIONS=2 cargo test -p exitq --release --test loom_sees" >&2
RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
    cargo test -p exitq --release --test loom_sees --target-dir target/loom
echo "loom: RUSTFLAGS=--cfg exitq_loom LOOM_MAX_PREEMPTIONS=2 cargo test -p exitq --release --test loom" >&2
RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
    cargo test -p exitq --release --test loom --target-dir target/loom
echo "loom: RUSTFLAGS=--cfg exitq_loom LOOM_MAX_PREEMPTIONS=2 cargo test -p exitq --release --test loom_cache" >&2
RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
    cargo test -p exitq --release --test loom_cache --target-dir target/loom
echo "loom: RUSTFLAGS=--cfg exitq_loom LOOM_MAX_PREEMPTIONS=2 cargo test -p exitq --release --test loom_wake" >&2
RUSTFLAGS="--cfg exitq_loom" LOOM_MAX_PREEMPTIONS=2 \
    cargo test -p exitq --release --test loom_wake --target-dir target/loom
