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
#   -h, --help  this text
# A missing or bad value is exit 2 before anything is built; a herd run
# that fails stops it (exit 1, with what herd said): no median over it.
set -euo pipefail
cd "$(dirname "$0")/.."
usage_err() { echo "perf-fixed-cost: $*" >&2; echo "perf-fixed-cost: see --help" >&2; exit 2; }
rounds=15 gap=0.5
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds | --gap-s) [ $# -ge 2 ] || usage_err "$1 needs a value" ;;&
        --rounds) rounds=$2; shift 2 ;;
        --gap-s) gap=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) usage_err "unknown argument: $1" ;;
    esac
done
# (--rounds 0 was a Python traceback, "no median for empty data"; --gap-s x
# one of float().)
[[ $rounds =~ ^0*[1-9][0-9]{0,5}$ ]] || usage_err "--rounds must be a positive count, not '$rounds'"
[[ $gap =~ ^[0-9]{1,4}([.][0-9]+)?$ ]] || usage_err "--gap-s must be seconds, 0 or more (like 0.5), not '$gap'"
cargo build --release -q -p herd
python3 - "$rounds" "$gap" "${CARGO_TARGET_DIR:-target}/release/herd" "$@" <<'PY'
import signal, statistics, subprocess, sys, time
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))  # Ctrl-C: no traceback
rounds, gap, herd, extra = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
base = [herd, "storm", "--waves", "1", "--per-wave", "1", "--json"] + extra
def run(flags):
    time.sleep(gap)
    t0 = time.monotonic()
    p = subprocess.run(base + flags, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        said = "".join(f"\n  | {l}" for l in p.stderr.strip().splitlines()[-5:])
        sys.exit(f"perf-fixed-cost: {' '.join(base + flags)} failed (exit {p.returncode}){said}")
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
