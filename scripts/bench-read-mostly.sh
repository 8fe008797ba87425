#!/usr/bin/env bash
# The read-mostly pointer as whole processes (benches/examples/read_mostly.rs):
# one writer replacing an 80-byte configuration as fast as it can, readers
# validating every word of the current one, for a fixed time. exitq
# (RcuCell read through a Reader, through a QsbrReader announcing a
# quiescent state per read, and through a CellCache) against arc-swap (load,
# and with its Cache),
# crossbeam-epoch (registered LocalHandle) and seize.
#
#   scripts/bench-read-mostly.sh [-n ROUNDS] [--seconds S] [--readers "1 2"] [--write-gap US] [--layouts "0 32 64 f64"]
#
# Defaults: 5 rounds (-n) of 2 s per process (--seconds, above 0 and at
# most 3600), 1 and 2 readers (--readers: positive counts), the writer as
# fast as it can; -h, --help: this text; --write-gap paces it to one write per US microseconds,
# the same rate of change for every implementation. Rounds interleave
# the implementations, the order rotating from round to round; ratios are
# taken within a round, the median over rounds is reported with the spread.
# Each process is timed whole: besides the rates over the timed phase,
# "whole" rates divide the process's reads by its wall time (start-up,
# thread creation and teardown included).
# --layouts builds the benchmark once per code layout, each in its own target
# directory: N aligns loops to N bytes (0: the compiler's default; -C
# llvm-args=-align-loops=N), fN aligns every function to N bytes instead
# (-align-all-functions). A read loop of ~20 instructions moves by 15-35%
# with where its code lands alone (on an AMD EPYC, a loop whose first
# 64-byte line is full of its instructions runs slower), and loop alignment
# puts every aligned loop at the same offset in a line while function
# alignment keeps each loop's offset in its function: a ratio from one build
# is one draw of that; ratios are taken within a round and a layout, and
# reported per layout and over all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
secs=2
readers="1 2"
gap=0
layouts=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        -n) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]{0,4}$ ]] || { echo "bench-read-mostly: -n needs a count of rounds in 1-99999" >&2; exit 2; }
            rounds=$2; shift 2 ;;
        --seconds) [[ $# -ge 2 && "$2" =~ ^[0-9]{1,4}(\.[0-9]+)?$ ]] && awk -v s="$2" 'BEGIN { exit !(s > 0 && s <= 3600) }' ||
                { echo "bench-read-mostly: --seconds needs a duration in seconds, above 0 and at most 3600" >&2; exit 2; }
            secs=$2; shift 2 ;;
        --readers) [[ $# -ge 2 && "$2" =~ ^\ *[1-9][0-9]*(\ +[1-9][0-9]*)*\ *$ ]] || { echo "bench-read-mostly: --readers needs counts like \"1 2\"" >&2; exit 2; }
            readers=$2; shift 2 ;;
        --write-gap) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || { echo "bench-read-mostly: --write-gap needs microseconds" >&2; exit 2; }
            gap=$2; shift 2 ;;
        --layouts) [[ $# -ge 2 && "$2" =~ ^f?[0-9][0-9f\ ]*$ ]] || { echo "bench-read-mostly: --layouts needs code layouts like \"0 32 64 f64\" (N: loops aligned to N bytes, 0 the default; fN: functions aligned to N bytes)" >&2; exit 2; }
            layouts=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "bench-read-mostly: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
read -ra wanted <<<"$layouts"
layouts=$(printf '%s\n' "${wanted[@]}" | sort -u | xargs)
for l in $layouts; do
    [[ $l =~ ^(0|1|2|4|8|16|32|64|128|256|f32|f64|f128|f256|f512|f1024|f2048|f4096)$ ]] || { echo "bench-read-mostly: --layouts: a layout is 0 (the default), a loop alignment (a power of two up to 256) or fN, a function alignment (a power of two from 32 to 4096) (got $l)" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A bins
for l in $layouts; do
    if [[ $l == 0 ]]; then
        cargo build -q --release -p benches --example read_mostly
        bins[$l]=${CARGO_TARGET_DIR:-target}/release/examples/read_mostly  # where cargo put it
    else
        if [[ $l == f* ]]; then
            n=${l#f} log=0
            while (( (1 << log) < n )); do log=$((log + 1)); done
            flag="-C llvm-args=-align-all-functions=$log"
            echo "bench-read-mostly: building with functions aligned to $n bytes (target/layout-$l)" >&2
        else
            flag="-C llvm-args=-align-loops=$l"
            echo "bench-read-mostly: building with loops aligned to $l bytes (target/layout-$l)" >&2
        fi
        RUSTFLAGS="${RUSTFLAGS:-} $flag" CARGO_TARGET_DIR=target/layout-$l \
            cargo build -q --release -p benches --example read_mostly
        bins[$l]=target/layout-$l/release/examples/read_mostly
    fi
done
names=(exitq exitq-qsbr exitq-cache arc-swap-cache arc-swap crossbeam seize)
echo "bench-read-mostly: $rounds rounds of ${secs} s, readers: $readers, write gap ${gap} us, layouts: $layouts ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))" >&2
: >"$out/rows"
n=${#names[@]}
for round in $(seq "$rounds"); do
    for r in $readers; do
        for l in $layouts; do
            for k in $(seq 0 $((n - 1))); do
                i=$(( (k + round) % n ))
                t0=$(date +%s.%N)
                line=$("${bins[$l]}" "${names[$i]}" "$r" "$secs" "$gap") || { echo "bench-read-mostly: ${names[$i]} failed" >&2; exit 1; }
                t1=$(date +%s.%N)
                echo "$round $l $line $t0 $t1" >>"$out/rows"
            done
        done
    done
    echo "bench-read-mostly: round $round/$rounds done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
python3 - "$out/rows" <<'PY'
import statistics, sys
from collections import defaultdict
t = defaultdict(dict)  # (round, readers, layout) -> name -> (reads/s, writes/s, whole-process reads/s)
for line in open(sys.argv[1]):
    rnd, layout, name, readers, secs, reads, writes, n_reads, _, t0, t1 = line.split()
    wall = float(t1) - float(t0)
    t[(int(rnd), int(readers), layout)][name] = (float(reads), float(writes), float(n_reads) / wall)
med = statistics.median
readers = sorted({r for _, r, _ in t})
layouts = sorted({l for _, _, l in t}, key=lambda l: (l.startswith("f"), int(l.lstrip("f"))))
names = ["exitq", "exitq-qsbr", "exitq-cache", "arc-swap-cache", "arc-swap", "crossbeam", "seize"]
ours = ["exitq", "exitq-qsbr", "exitq-cache"]
def cells(r, l=None):
    return [v for (_, x, y), v in sorted(t.items()) if x == r and l in (None, y)]
print(f"{'readers':>7} {'impl':>15} {'reads M/s':>10} {'whole M/s':>10} {'writes M/s':>11}  (medians)")
for r in readers:
    rows = cells(r)
    for n in names:
        print(f"{r:>7} {n:>15} {med([v[n][0] for v in rows]) / 1e6:>10.1f} "
              f"{med([v[n][2] for v in rows]) / 1e6:>10.1f} {med([v[n][1] for v in rows]) / 1e6:>11.2f}")
print()
scope = "per round" if len(layouts) == 1 else "per round and layout"
print(f"{'readers':>7} {'ratio (' + scope + ', median)':46} {'median':>7} {'range':>12}  target")
def ratio(r, rows, a, b, k, what, target):
    xs = [v[a][k] / v[b][k] for v in rows]
    print(f"{r:>7} {a + ' ' + what + ' / ' + b:46} {med(xs):>7.2f} {min(xs):.2f}-{max(xs):.2f}  {target}")
for r in readers:
    rows = cells(r)
    for a in ours:
        for b in names[len(ours):]:
            ratio(r, rows, a, b, 0, "reads", ">= 1" if b == "arc-swap-cache" else "")
        ratio(r, rows, a, "arc-swap-cache", 2, "whole", ">= 1")
    for a in ours:
        for b in names[len(ours):]:
            ratio(r, rows, a, b, 1, "writes", ">= 1" if b == "crossbeam" else "")
if len(layouts) > 1:
    print()
    print(f"{'readers':>7} {'layout':>6} {'reads / arc-swap-cache (per round, median)':46} {'median':>7} {'range':>12}")
    for r in readers:
        for l in layouts:
            rows = cells(r, l)
            for a in ours + ["arc-swap-cache"]:
                xs = [v[a][0] / v["arc-swap-cache"][0] for v in rows]
                label = f"{a} ({med([v[a][0] for v in rows]) / 1e6:.0f} M/s)"
                print(f"{r:>7} {l if l != '0' else 'dflt':>6} {label:46} {med(xs):>7.2f} {min(xs):.2f}-{max(xs):.2f}")
PY
