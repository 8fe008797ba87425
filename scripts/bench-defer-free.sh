#!/usr/bin/env bash
# The realistic deferred callback, timed as whole processes: exitq against
# sdd (its Owned, and its closure API), seize (batches of 256 and of 1024,
# the better one counted: the sizes that suit this host, see
# --seize-batches), crossbeam-epoch (a registered
# LocalHandle), liburcu (urcu-memb and urcu-qsbr, each with call_rcu on
# the global call_rcu thread and on per-CPU call_rcu threads, and with
# defer_rcu; qsbr's producers report a quiescent state at every
# operation and, apart, every 256: the best of the nine counted) and the
# immediate-free floor, at 1, 2 and 4 threads.
#
#   scripts/bench-defer-free.sh [-n ROUNDS] [--ops N] [--threads "1 2 4"]
#       [--seize-batches "32 256 ..."] [--qsbr-periods "1 64 256 ..."]
#
# Defaults: 5 rounds (-n), 4000000 operations per run (--ops), at 1, 2
# and 4 threads (--threads: positive counts). --seize-batches runs seize
# alone at each batch size (to find the size that suits the host) instead
# of the comparison; --qsbr-periods runs liburcu's qsbr variants alone at
# each quiescent-state period (operations between two
# rcu_quiescent_state() calls; defer_rcu with each call offline, which
# does not depend on it, once) instead of the comparison, or beside
# --seize-batches. -h, --help: this text. A bad value is exit 2 before
# anything is built; a program that fails stops it (exit 1): no median is
# taken over a failed run.
#
# Each operation: a read section, a node allocated by the producer, a
# deferred callback that frees it and drops a clone of a shared Arc (see
# benches/examples/defer_free.rs and benches/c/urcu_defer_free.c, whose
# head says how defer_rcu is used under qsbr without deadlocking). Every
# callback is checked to have run before a process exits 0.
#
# Rounds interleave the programs (the order rotates from round to round);
# each process's wall time is measured here, from exec to exit. Ratios are
# computed within a round and the median over rounds is reported, with the
# spread: on a shared machine, compare within a round.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
ops=4000000
threads="1 2 4"
seize_batches=""
qsbr_periods=""
cmp_qsbr_periods="1 256"  # the comparison's (docs/results-exitq.md, "The three jobs of issue 26")
while [[ $# -gt 0 ]]; do
    case "$1" in
        -n) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]{0,4}$ ]] || { echo "bench-defer-free: -n needs a count of rounds in 1-99999" >&2; exit 2; }
            rounds=$2; shift 2 ;;
        --ops) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]{0,11}$ ]] || { echo "bench-defer-free: --ops needs a positive count (at most 12 digits)" >&2; exit 2; }
            ops=$2; shift 2 ;;
        --threads) [[ $# -ge 2 && "$2" =~ ^\ *[1-9][0-9]*(\ +[1-9][0-9]*)*\ *$ ]] || { echo "bench-defer-free: --threads needs counts like \"1 2 4\"" >&2; exit 2; }
            threads=$2; shift 2 ;;
        --seize-batches) [[ $# -ge 2 && "$2" =~ ^\ *[1-9][0-9]*(\ +[1-9][0-9]*)*\ *$ ]] || { echo "bench-defer-free: --seize-batches needs sizes like \"32 256\"" >&2; exit 2; }
            seize_batches=$2; shift 2 ;;
        --qsbr-periods) [[ $# -ge 2 && "$2" =~ ^\ *[1-9][0-9]{0,6}(\ +[1-9][0-9]{0,6})*\ *$ ]] || { echo "bench-defer-free: --qsbr-periods needs periods like \"1 64 256\" (each at most 1048576)" >&2; exit 2; }
            for p in $2; do
                [[ $p -le 1048576 ]] || { echo "bench-defer-free: --qsbr-periods: $p is above 1048576" >&2; exit 2; }
            done
            qsbr_periods=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) echo "bench-defer-free: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done
source scripts/bench-needs.sh
need_urcu bench-defer-free
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build -q --release -p benches --example defer_free
gcc -O2 -pthread -o "$out/urcu_defer_free" benches/c/urcu_defer_free.c -lurcu-memb
gcc -O2 -pthread -DURCU_QSBR -o "$out/urcu_qsbr_defer_free" benches/c/urcu_defer_free.c -lurcu-qsbr
qsbr=$out/urcu_qsbr_defer_free
rust=${CARGO_TARGET_DIR:-target}/release/examples/defer_free  # where cargo put it
if [[ -n "$seize_batches$qsbr_periods" ]]; then
    progs=()
    names=()
    for b in $seize_batches; do
        progs+=("env SEIZE_BATCH=$b $rust seize")
        names+=("seize-$b")
    done
    for p in $qsbr_periods; do
        for m in global percpu defer; do
            progs+=("env URCU_QS_PERIOD=$p $qsbr $m")
            names+=("urcu-qsbr-$m-$p")
        done
    done
    if [[ -n "$qsbr_periods" ]]; then
        progs+=("$qsbr defer-offline")
        names+=(urcu-qsbr-defer-offline)
    fi
else
    progs=("$rust exitq" "$rust sdd" "$rust sdd-closure" "env SEIZE_BATCH=256 $rust seize" "env SEIZE_BATCH=1024 $rust seize" "$rust crossbeam" "$rust floor" "$out/urcu_defer_free global" "$out/urcu_defer_free percpu" "$out/urcu_defer_free defer" "$rust exitq-offload")
    names=(exitq sdd sdd-closure seize-256 seize-1024 crossbeam floor urcu-global urcu-percpu urcu-defer exitq-offload)
    for p in $cmp_qsbr_periods; do
        for m in global percpu defer; do
            progs+=("env URCU_QS_PERIOD=$p $qsbr $m")
            names+=("urcu-qsbr-$m-$p")
        done
    done
fi
echo "bench-defer-free: $rounds rounds, $ops operations per run, threads: $threads ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))" >&2
: >"$out/times"
for round in $(seq "$rounds"); do
    for t in $threads; do
        n=${#progs[@]}
        for k in $(seq 0 $((n - 1))); do
            i=$(( (k + round) % n ))
            start=$(date +%s%N)
            ${progs[$i]} "$t" "$ops" >/dev/null || { echo "bench-defer-free: ${names[$i]} failed" >&2; exit 1; }
            end=$(date +%s%N)
            echo "$round $t ${names[$i]} $((end - start))" >>"$out/times"
        done
    done
    echo "bench-defer-free: round $round/$rounds done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
python3 - "$out/times" "$ops" "${names[@]}" <<'PY'
import statistics, sys
from collections import defaultdict
path, ops, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
t = defaultdict(dict)  # (round, threads) -> name -> ns
for line in open(path):
    r, th, name, ns = line.split()
    t[(int(r), int(th))][name] = int(ns)
threads = sorted({th for _, th in t})
def med(xs):
    return statistics.median(xs)
def spread(xs):
    return f"{min(xs):.2f}-{max(xs):.2f}"
print(f"{'threads':>7} {'impl':>23} {'ns/op (median)':>15}")
for th in threads:
    rounds = [v for (r, x), v in sorted(t.items()) if x == th]
    for name in names:
        print(f"{th:>7} {name:>23} {med([v[name] / ops for v in rounds]):>15.1f}")
if "exitq" not in names:
    sys.exit(0)
urcu_memb = ["urcu-global", "urcu-percpu", "urcu-defer"]
urcu_qsbr = [n for n in names if n.startswith("urcu-qsbr-")]
urcu = urcu_memb + urcu_qsbr
print()
print(f"{'threads':>7} {'ratio (per round, median)':44} {'median':>7} {'range':>12}  target")
for th in threads:
    rounds = [v for (r, x), v in sorted(t.items()) if x == th]
    rows = [
        ("sdd (Owned) time / exitq time", [v["sdd"] / v["exitq"] for v in rounds], ">= 1.2"),
        ("sdd (closure) time / exitq time", [v["sdd-closure"] / v["exitq"] for v in rounds], ""),
        ("seize best time / exitq time", [min(v["seize-256"], v["seize-1024"]) / v["exitq"] for v in rounds], ""),
        ("crossbeam-epoch time / exitq time", [v["crossbeam"] / v["exitq"] for v in rounds], ">= 1.5"),
        ("liburcu best time / exitq time", [min(v[u] for u in urcu) / v["exitq"] for v in rounds], ">= 2"),
        ("liburcu qsbr best / memb best (time)", [min(v[u] for u in urcu_qsbr) / min(v[u] for u in urcu_memb) for v in rounds], ""),
        ("exitq throughput / floor throughput", [v["floor"] / v["exitq"] for v in rounds], ">= 0.6"),
        ("offload time / exitq time", [v["exitq-offload"] / v["exitq"] for v in rounds], ""),
    ]
    for label, xs, target in rows:
        print(f"{th:>7} {label:44} {med(xs):>7.2f} {spread(xs):>12}  {target}")
print()
print("liburcu's fastest variant, rounds won:")
for th in threads:
    rounds = [v for (r, x), v in sorted(t.items()) if x == th]
    wins = defaultdict(int)
    for v in rounds:
        wins[min(urcu, key=lambda u: v[u])] += 1
    print(f"{th:>7} " + ", ".join(f"{u} {n}" for u, n in sorted(wins.items(), key=lambda w: -w[1])))
PY
