#!/usr/bin/env bash
# Thread churn as whole processes (benches/examples/churn.rs and
# benches/c/urcu_churn.c): waves of threads that each enter a read
# section, retire 16 fresh 32-byte objects with a callback that frees and
# counts them, and exit; wave i-LAG joined after wave i starts; every
# callback counted before the process exits. exitq against crossbeam-epoch
# (registered LocalHandle), seize (SEIZE_BATCH, default 256), sdd (Owned),
# liburcu's call_rcu (urcu-memb) and no reclamation at all (Rust's and C's
# floors): each timed as a plain process, and counted in a second run
# under `perf stat` (the kernel's syscalls:sys_enter_futex and
# lock:contention_begin events of all its threads). `held` is a second
# floor: no reclamation, but each thread holds its 16 objects until it
# has made them all and frees them itself, the allocations every retiring
# scheme makes; every scheme is compared with it too (its deferral alone).
#
#   scripts/bench-churn.sh [-n ROUNDS] [--waves N] [--per-wave N] [--lag N] [--only "exitq none ..."] [--stacks std|recycled|both]
#
# Defaults: 3 rounds (-n) of 200 waves (--waves) x 100 threads
# (--per-wave), lag 2 (--lag), every program (--only: some of exitq
# crossbeam seize sdd none held urcu c-none), std::threads (--stacks).
# -h, --help: this text. A bad value is exit 2 before anything is built; a
# program that fails stops it (exit 1): no median over a failed run. --stacks recycled starts every Rust program's threads on
# 2 MiB stacks of an exitq StackPool (mapped once, reused after the join)
# instead of glibc's: the kernel's stack mapping, most of the time with
# std threads, is then gone and the reclaimers' own costs show; liburcu's
# C programs keep glibc's stacks and are left out (said so). --stacks both
# runs every Rust program both ways (NAME and NAME@pool, the C ones on
# glibc's stacks) in the same rounds, and compares exitq on pooled stacks
# with each peer on std::threads too.
#
# Rounds interleave the programs, the order rotating from round to round;
# each round times every program as a plain process, from exec to exit,
# then counts it in a second run under perf stat. Ratios are taken within a
# round and the median over rounds is reported with the spread. Needs
# perf and a mounted tracefs (mounted here when run as root), liburcu-dev
# (installed here when run as root), gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
waves=200
per_wave=100
lag=2
only=""
stacks=std
# A positive count: -n at most 99999 rounds, the others at most 6 digits
# (waves x per-wave is taken in bash's arithmetic).
num() {
    local max=6
    [ "$1" = -n ] && max=5
    [[ "$2" =~ ^[1-9][0-9]*$ && ${#2} -le $max ]] || { echo "bench-churn: $1 needs a positive count of at most $max digits" >&2; exit 2; }
}
while [[ $# -gt 0 ]]; do
    case "$1" in
        -n) [[ $# -ge 2 ]] || { echo "bench-churn: -n needs a count" >&2; exit 2; }; num -n "$2"; rounds=$2; shift 2 ;;
        --waves) [[ $# -ge 2 ]] || { echo "bench-churn: --waves needs a count" >&2; exit 2; }; num --waves "$2"; waves=$2; shift 2 ;;
        --per-wave) [[ $# -ge 2 ]] || { echo "bench-churn: --per-wave needs a count" >&2; exit 2; }; num --per-wave "$2"; per_wave=$2; shift 2 ;;
        --lag) [[ $# -ge 2 ]] || { echo "bench-churn: --lag needs a count" >&2; exit 2; }; num --lag "$2"; lag=$2; shift 2 ;;
        --only) [[ $# -ge 2 && -n "$2" ]] || { echo "bench-churn: --only needs program names" >&2; exit 2; }; only=$2; shift 2 ;;
        --stacks) [[ $# -ge 2 && ( "$2" == std || "$2" == recycled || "$2" == both ) ]] || { echo "bench-churn: --stacks needs 'std', 'recycled' or 'both'" >&2; exit 2; }
            stacks=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "bench-churn: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "bench-churn: perf is not installed (apt-get install linux-perf)" >&2; exit 3; }
source scripts/bench-needs.sh
need_tracefs bench-churn
need_urcu bench-churn
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build -q --release -p benches --example churn
gcc -O2 -pthread -o "$out/urcu_churn" benches/c/urcu_churn.c -lurcu-memb
rust=${CARGO_TARGET_DIR:-target}/release/examples/churn  # where cargo put it
all_names=(exitq crossbeam seize sdd none held urcu c-none)
all_progs=("$rust exitq" "$rust crossbeam" "$rust seize" "$rust sdd" "$rust none" "$rust held" "$out/urcu_churn urcu" "$out/urcu_churn none")
names=()
progs=()
for w in $only; do
    [[ " ${all_names[*]} " == *" $w "* ]] || { echo "bench-churn: unknown program '$w' (${all_names[*]})" >&2; exit 2; }
    if [[ $stacks == recycled && ( $w == urcu || $w == c-none ) ]]; then
        echo "bench-churn: '$w' is a C program on glibc's stacks; it has no --stacks recycled" >&2; exit 2
    fi
done
for i in "${!all_names[@]}"; do
    [[ -z "$only" || " $only " == *" ${all_names[$i]} "* ]] || continue
    if [[ ${all_progs[$i]} != "$rust "* ]]; then
        if [[ $stacks == recycled ]]; then
            echo "bench-churn: leaving out ${all_names[$i]} (a C program on glibc's stacks) with --stacks recycled" >&2
            continue
        fi
        names+=("${all_names[$i]}")
        progs+=("${all_progs[$i]}")
        continue
    fi
    if [[ $stacks != recycled ]]; then
        names+=("${all_names[$i]}")
        progs+=("${all_progs[$i]}")
    fi
    if [[ $stacks != std ]]; then
        if [[ $stacks == both ]]; then names+=("${all_names[$i]}@pool"); else names+=("${all_names[$i]}"); fi
        progs+=("${all_progs[$i]} --stacks recycled")
    fi
done
threads=$((waves * per_wave))
echo "bench-churn: $rounds rounds of $waves waves x $per_wave threads (lag $lag, $stacks stacks): ${names[*]} ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))" >&2
: >"$out/rows"
n=${#progs[@]}
for round in $(seq "$rounds"); do
    # Timed pass: plain processes, as a user runs them (perf's inherited
    # counters cost every thread's creation and exit, about 15 us here,
    # which would hide the differences).
    for k in $(seq 0 $((n - 1))); do
        i=$(( (k + round) % n ))
        start=$(date +%s%N)
        ${progs[$i]} "$waves" "$per_wave" "$lag" >/dev/null \
            || { echo "bench-churn: ${names[$i]} failed" >&2; exit 1; }
        end=$(date +%s%N)
        echo "$((end - start))" >"$out/ns-$i"
    done
    # Counting pass: the same processes under perf stat.
    for k in $(seq 0 $((n - 1))); do
        i=$(( (k + round) % n ))
        perf stat -x, -e syscalls:sys_enter_futex,lock:contention_begin -o "$out/perf" -- \
            ${progs[$i]} "$waves" "$per_wave" "$lag" >/dev/null \
            || { echo "bench-churn: ${names[$i]} failed under perf" >&2; exit 1; }
        futex=$(awk -F, '$3 ~ /sys_enter_futex/ {print $1}' "$out/perf")
        locks=$(awk -F, '$3 ~ /contention_begin/ {print $1}' "$out/perf")
        [[ "$futex" =~ ^[0-9]+$ && "$locks" =~ ^[0-9]+$ ]] \
            || { echo "bench-churn: perf counted nothing for ${names[$i]}:" >&2; cat "$out/perf" >&2; exit 1; }
        echo "$round ${names[$i]} $(cat "$out/ns-$i") $futex $locks" >>"$out/rows"
    done
    echo "bench-churn: round $round/$rounds done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
python3 - "$out/rows" "$threads" <<'PY'
import statistics, sys
from collections import defaultdict
path, threads = sys.argv[1], int(sys.argv[2])
t = defaultdict(dict)  # round -> name -> (ns, futex, locks)
for line in open(path):
    r, name, ns, fx, lk = line.split()
    t[int(r)][name] = (int(ns), int(fx), int(lk))
rounds = [t[r] for r in sorted(t)]
names = list(rounds[0])
base_order = ["exitq", "crossbeam", "seize", "sdd", "urcu", "none", "held", "c-none"]
order = [n for b in base_order for n in (b, b + "@pool") if n in names]
floors = ("none", "c-none", "none@pool", "held", "held@pool")
med = statistics.median
def spread(xs):
    return f"{min(xs):.2f}-{max(xs):.2f}"
print(f"{threads} threads per process, {len(rounds)} rounds (medians; per-round ranges)")
print(f"{'program':>14} {'us/thread':>10} {'futex/thread':>13} {'lock contentions/thread':>24}")
for n in order:
    us = [v[n][0] / threads / 1000 for v in rounds]
    fx = [v[n][1] / threads for v in rounds]
    lk = [v[n][2] / threads for v in rounds]
    print(f"{n:>14} {med(us):>10.1f} {med(fx):>13.3f} {med(lk):>24.2f}   ({spread(fx)} futex, {spread(lk)} locks)")
print()
def floor_of(n):
    return "c-none" if n == "urcu" else ("none@pool" if n.endswith("@pool") else "none")
def pooled(n):
    return n.endswith("@pool")
def ratio(a, b, target=""):
    xs = [v[b][0] / v[a][0] for v in rounds]
    print(f"{a + ' throughput / ' + b + ' throughput':56} {med(xs):>7.2f} {spread(xs):>12}  {target}")
print(f"{'ratio (per round, median)':56} {'median':>7} {'range':>12}  target")
for n in order:
    f = floor_of(n)
    if n in floors or f not in names:
        continue
    target = ">= 0.95" if n == "exitq" else ""
    ratio(n, f, target)
    d = [(v[n][1] - v[f][1]) / threads for v in rounds]
    target = "<= 0.01" if n == "exitq" else ""
    print(f"{n + ' futex/thread - ' + f + ' futex/thread':56} {med(d):>7.3f} {min(d):.3f}-{max(d):.3f}  {target}")
for n in order:
    h = "held@pool" if pooled(n) else "held"
    if n in floors or h not in names or n == "urcu":
        continue
    ratio(n, h)
for e in ("exitq", "exitq@pool"):
    if e not in names:
        continue
    for n in order:
        if n in floors or n.startswith("exitq") or pooled(n) != pooled(e):
            continue
        ratio(e, n, ">= 1.15" if e == "exitq" else "")
        if n == "urcu" and "none" in names and "c-none" in names:
            xs = [(v["none"][0] / v["exitq"][0]) / (v["c-none"][0] / v["urcu"][0]) for v in rounds]
            print(f"{'  the same, each of its own floor':56} {med(xs):>7.2f} {spread(xs):>12}")
if "exitq@pool" in names:
    print("exitq on pooled stacks against the others on std::threads (not the reclaimer comparison):")
    for n in order:
        if n.startswith("exitq") or pooled(n):
            continue
        ratio("exitq@pool", n)
PY
