#!/usr/bin/env bash
# Reproduce the grace-period figures of docs/results-grace-periods.md (herd unregister, gp, membarrier)
# and print the medians and ratios quoted there.
#
# Usage: scripts/gp-figures.sh [--runs N] [--duration D] [--gp-duration D]
#                              [--priority] [--out DIR]
#   --runs N       repetitions per configuration, interleaved (default 5)
#   --duration D   length of each unregister/membarrier run (default 1s)
#   --gp-duration D  length of each herd gp cell (default 500ms)
#   --priority     run herd in its own session at autogroup nice -20 (root):
#                  on a machine shared with other work, keeps the benchmark
#                  from being time-sliced against other sessions
#   --out DIR      where the saved comparisons go (default: a temp dir)
# Needs: a release build (cargo build --release) and jq.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5 duration=1s gp_duration=500ms priority=0 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --gp-duration) gp_duration=$2; shift 2 ;;
        --priority) priority=1; shift ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
command -v jq >/dev/null || { echo "gp-figures: needs jq" >&2; exit 1; }
herd=target/release/herd
[ -x "$herd" ] || { echo "gp-figures: build first: cargo build --release" >&2; exit 1; }
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"

run() {
    if [ "$priority" = 1 ]; then
        setsid bash -c 'echo -20 > /proc/self/autogroup && exec nice -n -20 "$@"' herd "$@"
    else
        "$@"
    fi
}

# median of metric $2 for configuration index $3 in saved comparison $1
median() {
    jq -r --arg m "$2" --argjson c "$3" '
        [.rows[] | select(.name == $m) | .cells[$c].summary.median // empty]
        | if length == 0 then "n/a" else (.[0] * 1000 | round / 1000) end' "$1"
}

echo "== uname: $(uname -r), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== unregister: per-op vs expedited vs deferred ($runs interleaved runs)"
run "$herd" compare --scenario unregister --sync per-op,expedited,deferred -r "$runs" \
    --save "$out/unregister.json" -- --duration "$duration" --no-perf
echo
echo "medians:        per-op    expedited    deferred"
for m in ns_per_op op_p50_ns update_cpu_ns_per_op update_sys_ns_per_op sys_s reader_sections_per_s frees_per_gp; do
    printf '%-22s %12s %12s %12s\n' "$m" \
        "$(median "$out/unregister.json" "$m" 0)" "$(median "$out/unregister.json" "$m" 1)" \
        "$(median "$out/unregister.json" "$m" 2)"
done
p=$(median "$out/unregister.json" ns_per_op 0)
e=$(median "$out/unregister.json" ns_per_op 1)
d=$(median "$out/unregister.json" ns_per_op 2)
echo "per-op / deferred = $(jq -n "$p / $d | floor")x; per-op / expedited = $(jq -n "$p / $e * 100 | round / 100")x"

echo
echo "== unregister over 1, 2, 4 updaters ($runs interleaved runs)"
run "$herd" sweep --scenario unregister --over updaters=1,2,4 --sync per-op,expedited,deferred \
    -r "$runs" --metrics ns_per_op,frees_per_gp,ops_per_s --out "$out/sweep-updaters" \
    -- --duration "$duration" --readers 1 --no-perf

echo
# median of every metric of a RunSet ($1), as "name<TAB>median" lines
medians_of_set() {
    jq -r '[.runs[] | select(.interrupted | not) | .metrics[]] | group_by(.name)[]
        | [.[0].name, (map(.value) | sort
            | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end)]
        | @tsv' "$1"
}

gp_table() { # $1: saved RunSet, $2: loads, $3: delays
    local med="$1.med"
    medians_of_set "$1" > "$med"
    printf '%-6s %-10s %10s %10s %10s %9s %8s\n' load delay p50_us p99_us cpu_us/GP "GP CPU%" upd/GP
    for l in $2; do
        for d in $3; do
            k="{load=$l,delay=$d}"
            g() { awk -F'\t' -v n="$1$k" '$1 == n { printf "%.1f", $2 }' "$med"; }
            printf '%-6s %-10s %10s %10s %10s %9s %8s\n' "$l" "$d" "$(g gp_p50_us)" "$(g gp_p99_us)" \
                "$(g cpu_us_per_gp)" "$(g gp_side_cpu_pct)" "$(g updates_per_gp)"
        done
    done
}

echo "== gp: first-check delay x load, 1us read sections (medians of $runs runs)"
run "$herd" gp --no-perf --delay 0,10us,100us,1ms,expedited --load idle,busy --duration "$gp_duration" \
    -r "$runs" --json > "$out/gp.json"
gp_table "$out/gp.json" "idle busy" "0 10us 100us 1ms expedited"
echo
echo "== gp: the same with 200us read sections"
run "$herd" gp --no-perf --delay 0,10us,100us --load idle,busy --section 200us --duration "$gp_duration" \
    -r "$runs" --json > "$out/gp-200us.json"
gp_table "$out/gp-200us.json" "idle busy" "0 10us 100us"
echo
echo "== gp: 8 updaters share grace periods (idle)"
run "$herd" gp --no-perf --updaters 8 --delay 0,10us,100us,1ms --load idle --duration "$gp_duration" \
    -r "$runs" --json > "$out/gp-8.json"
gp_table "$out/gp-8.json" "idle" "0 10us 100us 1ms"

echo
echo "== membarrier: idle vs one busy reader ($runs interleaved runs)"
run "$herd" compare --scenario membarrier --vary load=idle,busy -r "$runs" \
    --save "$out/membarrier.json" -- --duration "$duration" --no-perf
echo
echo "medians:             idle        busy"
for m in calls_per_s latency_p50_ns latency_p99_ns caller_cpu_ns_per_call read_ns_compiler_fence read_ns_seqcst_fence break_even_sections_per_call reader_slowdown_pct; do
    printf '%-30s %12s %12s\n' "$m" "$(median "$out/membarrier.json" "$m" 0)" "$(median "$out/membarrier.json" "$m" 1)"
done
echo "saved: $out"
