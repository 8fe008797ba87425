#!/usr/bin/env bash
# exitq's performance targets as ratios against their baselines, measured in
# the same run and repeated: criterion's `defer` (exitq and crossbeam-epoch
# at 1, 2 and 4 threads, interleaved per thread count) and `read_guard`
# (the relaxed load+store baseline, `Domain::read`, `Reader::read`; the
# typed pointer `RcuCell::load` under a `Reader` guard against the same
# guard with a plain Acquire load, and crossbeam-epoch's `Atomic::load`)
# groups, run N times (default 3). Prints each run's medians and ratios, then the
# median ratio over the runs. Timing is noisy on a shared machine: quote the
# median ratio, and the spread.
#
#   scripts/bench-ratios.sh [-n RUNS] [--quick] [--read]
#
# -n RUNS: how many times (default 3). --quick: shorter criterion runs
# (1 s warm-up, 2 s measurement). --read: the read_guard group only.
# -h, --help: this text.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -n) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]{0,4}$ ]] || { echo "bench-ratios: -n needs a count of runs in 1-99999" >&2; exit 2; }
            runs=$2; shift 2 ;;
        --quick) extra=(--warm-up-time 1 --measurement-time 2); shift ;;
        --read) read_only=1; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "bench-ratios: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
read_only=${read_only:-0}
reads='read_guard/(relaxed-load-store|exitq-membarrier|exitq-reader|exitq-reader-acquire|exitq-reader-cell|exitq-read-cell|crossbeam-epoch-atomic)$'
filter="^(defer/(exitq|crossbeam-epoch)/|$reads)"
[ "$read_only" = 1 ] && filter="^($reads)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq "$runs"); do
    echo "bench-ratios: run $i/$runs ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))" >&2
    cargo bench -q -p benches --bench bench_main -- "$filter" --noplot "${extra[@]}" >"$out/run$i.txt" 2>&1 \
        || { cat "$out/run$i.txt" >&2; exit 1; }
done
python3 - "$out" "$runs" <<'PY'
import re, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
scale = {"ps": 1e-3, "ns": 1.0, "µs": 1e3, "us": 1e3, "ms": 1e6}
def medians(path):
    name, got = None, {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^(\S+/\S+)", line)
        if m and not line.startswith(" "):
            name = m.group(1)
        t = re.search(r"time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", line)
        if t and name:
            got[name] = float(t.group(1)) * scale[t.group(2)]
            name = None
    return got
rows = {}
for i in range(1, runs + 1):
    m = medians(f"{out}/run{i}.txt")
    for t in (1, 2, 4):
        e, c = m.get(f"defer/exitq/{t}"), m.get(f"defer/crossbeam-epoch/{t}")
        if e and c:
            rows.setdefault(f"defer, {t} thread(s): crossbeam / exitq (target >= 2)", []).append((c / e, f"{e:.2f} vs {c:.2f} ns"))
    base = m.get("read_guard/relaxed-load-store")
    for k, label in (("exitq-membarrier", "Domain::read"), ("exitq-reader", "Reader::read")):
        g = m.get(f"read_guard/{k}")
        if g and base:
            rows.setdefault(f"read guard, {label} / load+store (target <= 2)", []).append((g / base, f"{g:.3f} vs {base:.3f} ns"))
    acq = m.get("read_guard/exitq-reader-acquire")
    for k, label, target in (("exitq-reader-cell", "Reader + RcuCell::load", " (target <= 1.2)"),
                             ("exitq-read-cell", "Domain::read + RcuCell::load", ""),
                             ("crossbeam-epoch-atomic", "crossbeam pin + Atomic::load", "")):
        g = m.get(f"read_guard/{k}")
        if g and acq:
            rows.setdefault(f"{label} / Reader + Acquire load{target}", []).append((g / acq, f"{g:.3f} vs {acq:.3f} ns"))
if not rows:
    sys.exit("bench-ratios: no criterion results parsed")
print(f"{'ratio':58} {'median':>7}   per run (ratio: exitq vs baseline)")
for k, v in rows.items():
    med = statistics.median(r for r, _ in v)
    print(f"{k:58} {med:7.2f}   " + "; ".join(f"{r:.2f} ({s})" for r, s in v))
PY
