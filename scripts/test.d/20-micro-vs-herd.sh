#!/usr/bin/env bash
# Smoke test of scripts/micro-vs-herd.sh: one tiny interleaved round (herd
# with --no-perf, then with its default counters); both
# programs must create the same number of threads. (The real comparison is
# a benchmark, run by hand: see docs/results-herd.md.)
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v gcc >/dev/null; then
    echo "SKIPPED: micro-vs-herd smoke test: gcc not installed (scripts/test.sh installs it as root)"
    exit 0
fi
out=$(scripts/micro-vs-herd.sh --rounds 1 --waves 20 --per-wave 10 --spin 1000 --sleep-ms 10)
echo "$out"
echo "$out" | grep -q 'created 200 failed 0' || { echo "C micro did not create 200 threads" >&2; exit 1; }
echo "$out" | grep -q 'created/failed 200 0' || { echo "herd did not create 200 threads" >&2; exit 1; }
echo "$out" | grep -q '^median wall: C' || { echo "no summary line" >&2; exit 1; }
# The same with herd's default counters on (the comparison users make).
out=$(scripts/micro-vs-herd.sh --counters --rounds 1 --waves 20 --per-wave 10 --spin 1000 --sleep-ms 10)
echo "$out"
echo "$out" | grep -q 'created/failed 200 0' || { echo "herd with counters did not create 200 threads" >&2; exit 1; }
echo "$out" | grep -q '^median wall: C' || { echo "no summary line (--counters)" >&2; exit 1; }
# The C-under-perf-stat reference: run whenever perf can count herd's events
# (as root with tracefs, which scripts/test.sh sets up); said loudly when not.
if echo "$out" | grep -q 'the C-under-perf-stat reference is skipped'; then
    echo "SKIPPED: C under perf stat: perf cannot count herd's events here"
else
    echo "$out" | grep -q '^median wall: C under perf stat' || { echo "no perf-stat reference line (--counters)" >&2; exit 1; }
fi
