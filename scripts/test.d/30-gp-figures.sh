#!/usr/bin/env bash
# Smoke test of scripts/gp-figures.sh: tiny runs of every figure it makes
# (2 interleaved runs, 50 ms each); every median docs/results-grace-periods.md quotes must be
# present and the ratio line printed. (The real figures are a benchmark,
# run by hand: see docs/results-grace-periods.md.)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
if ! command -v jq >/dev/null; then
    skip "gp-figures smoke test: jq not installed (apt-get install jq)"
    exit 0
fi
[ -x target/release/herd ] || cargo build --release -q -p herd
out=$(scripts/gp-figures.sh --runs 2 --duration 50ms --gp-duration 30ms 2>/dev/null)
echo "$out" | grep -E '^(ns_per_op|frees_per_gp|calls_per_s|per-op /|idle +(0|10us|expedited) )' || true
fail() { echo "FAIL: gp-figures: $*" >&2; exit 1; }
echo "$out" | grep -Eq '^per-op / deferred = [0-9]+x; per-op / expedited = [0-9.]+x$' || fail "no ratio line"
for m in ns_per_op op_p50_ns frees_per_gp calls_per_s latency_p99_ns break_even_sections_per_call; do
    line=$(echo "$out" | grep -E "^$m " | head -1)
    [ -n "$line" ] || fail "no median line for $m"
    ! echo "$line" | grep -q 'n/a' || fail "$m has no value: $line"
done
[ "$(echo "$out" | grep -cE '^(idle|busy) +(0|10us|100us|1ms|expedited) +[0-9]')" -ge 14 ] \
    || fail "gp tables incomplete"
echo "ok - gp-figures smoke test"
