#!/usr/bin/env bash
# What herd's perf counters cost a whole process, as the user times it:
# `herd storm --waves 1 --per-wave 1` (almost no work, so the wall time is
# herd's fixed cost) with default counters against --no-perf, interleaved
# A B A B ..., the process wall time of each run, medians and the median of
# the per-round differences.
#
# Usage: scripts/perf-fixed-cost.sh [--rounds N] [--gap-s S] [-- STORM FLAGS]
#   --rounds N  rounds of A B (default 15)
#   --gap-s S   pause before each run (default 0.5 s). Back-to-back runs
#               (--gap-s 0) show a different figure: a run that starts
#               while the previous run's perf closer is still unregistering
#               its tracepoints waits for it (see docs/perf.md).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=15 gap=0.5
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --gap-s) gap=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
cargo build --release -q -p herd
python3 - "$rounds" "$gap" "${CARGO_TARGET_DIR:-target}/release/herd" "$@" <<'PY'
import statistics, subprocess, sys, time
rounds, gap, herd, extra = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
base = [herd, "storm", "--waves", "1", "--per-wave", "1", "--json"] + extra
def run(flags):
    time.sleep(gap)
    t0 = time.monotonic()
    subprocess.run(base + flags, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.monotonic() - t0) * 1e3
on, off = [], []
for r in range(rounds):
    on.append(run([]))
    off.append(run(["--no-perf"]))
    print(f"round {r + 1}: counters {on[-1]:.1f} ms, --no-perf {off[-1]:.1f} ms")
diff = [a - b for a, b in zip(on, off)]
print(f"median wall: counters {statistics.median(on):.1f} ms, --no-perf {statistics.median(off):.1f} ms; "
      f"median per-round difference {statistics.median(diff):.1f} ms")
PY
