#!/usr/bin/env bash
# Reproduce the grace-period figures of docs/results-grace-periods.md (herd unregister, gp, membarrier)
# and print the medians and ratios quoted there.
#
# Usage: scripts/gp-figures.sh [--runs N] [--duration D] [--gp-duration D]
#                              [--priority] [--out DIR]
#   --runs N       repetitions per configuration, interleaved (1-10000,
#                  default 5)
#   --duration D   length of each unregister/membarrier run (default 1s)
#   --gp-duration D  length of each herd gp cell (default 500ms)
#   --priority     run herd in its own session at autogroup nice -20 (root):
#                  on a machine shared with other work, keeps the benchmark
#                  from being time-sliced against other sessions
#   --out DIR      where the saved comparisons go (default: a new temp dir,
#                  named at the end); each file is written aside and moved
#                  into DIR when whole, so a run that fails leaves the
#                  files of an earlier run in DIR as they were
#   -h, --help     this text
# Durations are herd's (500ms, 1s, ...), checked by herd before anything
# runs. Needs: a release build (cargo build --release; $HERD names another
# herd binary) and jq. Exit status: 0; 1 a run failed; 2 usage error.
set -euo pipefail
cd "$(dirname "$0")/.."

usage_err() { echo "gp-figures: $*" >&2; echo "gp-figures: see --help" >&2; exit 2; }
runs=5 duration=1s gp_duration=500ms priority=0 out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --runs | --duration | --gp-duration | --out) [ $# -ge 2 ] && [ -n "$2" ] || usage_err "$1 needs a value" ;;&
        --runs) runs=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --gp-duration) gp_duration=$2; shift 2 ;;
        --priority) priority=1; shift ;;
        --out) out=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) usage_err "unknown argument: $1" ;;
    esac
done
[[ $runs =~ ^0*[1-9][0-9]{0,4}$ ]] && [ "$((10#$runs))" -le 10000 ] || usage_err "--runs must be a count in 1-10000, not '$runs'"
runs=$((10#$runs))
command -v jq >/dev/null || { echo "gp-figures: needs jq" >&2; exit 1; }
herd=${HERD:-${CARGO_TARGET_DIR:-target}/release/herd}
[ -x "$herd" ] || { echo "gp-figures: build first: cargo build --release" >&2; exit 1; }
# The durations as herd reads them, before anything runs (herd checks a
# value before it acts on --help): a bad one used to be found by the run
# that uses it, after the ones before it.
check_duration() { # FLAG SUBCOMMAND VALUE
    local err
    err=$("$herd" "$2" --duration "$3" --help 2>&1 >/dev/null) || usage_err "$1: $(grep -m1 error <<<"$err")"
}
check_duration --duration unregister "$duration"
check_duration --duration membarrier "$duration"
check_duration --gp-duration gp "$gp_duration"
[ -n "$out" ] || out=$(mktemp -d)
case $out in -*) out=./$out ;; esac
mkdir -p "$out" 2>/dev/null && stage=$(mktemp -d "$out/.gp-figures.XXXXXX" 2>/dev/null) ||
    usage_err "--out: cannot write in '$out'"
trap 'rm -rf "$stage"' EXIT
# keep FILE...: move finished files from the staging directory into DIR.
keep() {
    local f
    for f in "$@"; do mv -f "$stage/$f" "$out/$f"; done
}

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
    --save "$stage/unregister.json" -- --duration "$duration" --no-perf
keep unregister.json
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
# A / B, whole (floor) or to 2 decimals; n/a when either is missing or B
# is 0 (jq used to fail on "n/a" and leave "= x" on the line).
ratio() {
    awk -v a="$1" -v b="$2" -v how="$3" 'BEGIN {
        num = "^[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$"
        if (a !~ num || b !~ num || b + 0 == 0) { printf "n/a"; exit }
        if (how == "floor") printf "%d", int(a / b); else printf "%.2f", a / b
    }'
}
echo "per-op / deferred = $(ratio "$p" "$d" floor)x; per-op / expedited = $(ratio "$p" "$e" 2)x"

echo
echo "== unregister over 1, 2, 4 updaters ($runs interleaved runs)"
run "$herd" sweep --scenario unregister --over updaters=1,2,4 --sync per-op,expedited,deferred \
    -r "$runs" --metrics ns_per_op,frees_per_gp,ops_per_s --out "$stage/sweep-updaters" \
    -- --duration "$duration" --readers 1 --no-perf
rm -rf "$out/sweep-updaters"
mv "$stage/sweep-updaters" "$out/sweep-updaters"

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
    keep "${1##*/}" "${med##*/}"
    med=$out/${med##*/}
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
    -r "$runs" --json > "$stage/gp.json"
gp_table "$stage/gp.json" "idle busy" "0 10us 100us 1ms expedited"
echo
echo "== gp: the same with 200us read sections"
run "$herd" gp --no-perf --delay 0,10us,100us --load idle,busy --section 200us --duration "$gp_duration" \
    -r "$runs" --json > "$stage/gp-200us.json"
gp_table "$stage/gp-200us.json" "idle busy" "0 10us 100us"
echo
echo "== gp: 8 updaters share grace periods (idle)"
run "$herd" gp --no-perf --updaters 8 --delay 0,10us,100us,1ms --load idle --duration "$gp_duration" \
    -r "$runs" --json > "$stage/gp-8.json"
gp_table "$stage/gp-8.json" "idle" "0 10us 100us 1ms"

echo
echo "== membarrier: idle vs one busy reader ($runs interleaved runs)"
run "$herd" compare --scenario membarrier --vary load=idle,busy -r "$runs" \
    --save "$stage/membarrier.json" -- --duration "$duration" --no-perf
keep membarrier.json
echo
echo "medians:             idle        busy"
for m in calls_per_s latency_p50_ns latency_p99_ns caller_cpu_ns_per_call read_ns_compiler_fence read_ns_seqcst_fence break_even_sections_per_call reader_slowdown_pct; do
    printf '%-30s %12s %12s\n' "$m" "$(median "$out/membarrier.json" "$m" 0)" "$(median "$out/membarrier.json" "$m" 1)"
done
echo "saved: $out"
