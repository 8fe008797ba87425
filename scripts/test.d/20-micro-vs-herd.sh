#!/usr/bin/env bash
# Smoke test of scripts/micro-vs-herd.sh: tiny interleaved rounds (herd
# with --no-perf, then with its default counters); both
# programs must create the same number of threads, and the order of the
# programs must rotate from round to round. (The real comparison is
# a benchmark, run by hand: see docs/results-herd.md.)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
if ! command -v gcc >/dev/null; then
    skip "micro-vs-herd smoke test: gcc not installed (scripts/test-setup.sh installs it as root)"
    exit 0
fi
out=$(scripts/micro-vs-herd.sh --rounds 2 --waves 20 --per-wave 10 --spin 1000 --sleep-ms 10)
echo "$out"
echo "$out" | grep -q '^round 1: .*(order: c herd)$' || { echo "round 1 did not run C first" >&2; exit 1; }
echo "$out" | grep -q '^round 2: .*(order: herd c)$' || { echo "round 2 did not run herd first" >&2; exit 1; }
echo "$out" | grep -q 'created 200 failed 0' || { echo "C micro did not create 200 threads" >&2; exit 1; }
echo "$out" | grep -q 'created/failed 200 0' || { echo "herd did not create 200 threads" >&2; exit 1; }
echo "$out" | grep -q '^median wall: C' || { echo "no summary line" >&2; exit 1; }
# The same with herd's default counters on (the comparison users make).
out=$(scripts/micro-vs-herd.sh --counters --rounds 1 --waves 20 --per-wave 10 --spin 1000 --sleep-ms 10)
echo "$out"
echo "$out" | grep -q 'created/failed 200 0' || { echo "herd with counters did not create 200 threads" >&2; exit 1; }
echo "$out" | grep -q '^median wall: C' || { echo "no summary line (--counters)" >&2; exit 1; }
# --counters adds herd --no-perf to each round, and herd's counter phases.
echo "$out" | grep -q '| herd --no-perf .*(created/failed 200 0)' || { echo "no herd --no-perf run (--counters)" >&2; exit 1; }
echo "$out" | grep -q '^median wall: herd --no-perf' || { echo "no herd/herd-no-perf line (--counters)" >&2; exit 1; }
echo "$out" | grep -Eq "^herd's counters \(medians\): open [0-9.]+ ms" || { echo "no counter phases (--counters)" >&2; exit 1; }
# The C-under-perf-stat reference: run whenever perf can count herd's events
# (as root with tracefs, which scripts/test.sh sets up); said loudly when not.
if echo "$out" | grep -q 'the C-under-perf-stat reference is skipped'; then
    skip "C under perf stat: perf cannot count herd's events here (needs linux-perf, root and tracefs)"
else
    echo "$out" | grep -q '^median wall: C under perf stat' || { echo "no perf-stat reference line (--counters)" >&2; exit 1; }
fi
# --layouts: round r preloads benches/c/extra_maps.c with (r-1) mod N
# extra mappings, for every program of the round.
out=$(scripts/micro-vs-herd.sh --layouts 2 --rounds 2 --waves 20 --per-wave 10 --spin 1000 --sleep-ms 10)
echo "$out"
echo "$out" | grep -q '^round 1: .*(layout: 0 extra mappings) (order: c herd)$' || { echo "round 1 is not layout 0" >&2; exit 1; }
echo "$out" | grep -q '^round 2: .*(layout: 1 extra mappings) (order: herd c)$' || { echo "round 2 is not layout 1" >&2; exit 1; }
# The preload really adds that many mappings.
maps() { env LD_PRELOAD="$PWD/target/extra_maps.so" HERD_EXTRA_MAPS=$1 cat /proc/self/maps | wc -l; }
m0=$(maps 0) m5=$(maps 5)
[ $((m5 - m0)) = 5 ] || { echo "extra_maps.so with 5 added $((m5 - m0)) mappings" >&2; exit 1; }
# Below the map-count wall of the leak mode no note about it.
out=$(scripts/micro-vs-herd.sh --rounds 1 --waves 2 --per-wave 10 --spin 1000 --sleep-ms 10)
if echo "$out" | grep -q 'vm.max_map_count'; then echo "map-count note shown below the wall" >&2; exit 1; fi
rc=0
scripts/micro-vs-herd.sh --layouts 0 >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || { echo "--layouts 0: exit status $rc, not 2 (usage)" >&2; exit 1; }
# A run that fails (--lag 5 with --slots 1, refused by both programs):
# exit 1 naming the command and what it said, no median; it was a Python
# traceback that hid the program's reason.
err=$(mktemp)
rc=0
scripts/micro-vs-herd.sh --rounds 1 --waves 2 --per-wave 2 --slots 1 --lag 5 --spin 10 --sleep-ms 1 >/dev/null 2>"$err" || rc=$?
if [ "$rc" != 1 ] || grep -q Traceback "$err" || ! grep -q 'failed (exit 2)' "$err" || ! grep -q 'LAG < SLOTS' "$err"; then
    cat "$err" >&2; rm -f "$err"; echo "a failing run: exit $rc, want 1 with the command and its message, no traceback" >&2; exit 1
fi
rm -f "$err"
echo "micro-vs-herd smoke: ok"
