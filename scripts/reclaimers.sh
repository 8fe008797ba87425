#!/usr/bin/env bash
# reclaimers.sh: the comparison of docs/results-reclaimers.md, in one
# command: exitq against a mutex and the reclamation libraries a runtime
# author would pick (crossbeam-epoch, sdd, seize, liburcu's call_rcu), on
# the thread-exit storm, with the contention profile.
#
#   scripts/reclaimers.sh [-r RUNS] [-o DIR] [--waves N]
#
#   -r, --runs N      interleaved runs per configuration (1-10000, default 5)
#   -o, --output DIR  where the results go (default reclaimers-out/)
#   --waves N         the storm's waves (default 300)
#   -h, --help        this text
#
# Two `herd compare` runs, each interleaved and rotated (A B C ..., B C ...
# A, ...): the storm's default shape cut to --waves waves (300) with the
# default cleanup size (256 words), then a cleanup-heavy one (1024 words).
# Writes DIR/default.{json,md} and DIR/heavy.{json,md} (default
# reclaimers-out/) and DIR/context.txt (date, commit, load average before
# and after each comparison, CPUs, kernel, liburcu version): what the
# results page quotes. The five files are written aside and moved into DIR
# together when both comparisons succeeded: a run that fails or is
# interrupted leaves DIR's files of an earlier run as they were. Needs root
# for the perf counters and the contention profile (tracefs is mounted if
# it is not), and liburcu (apt-get install liburcu8). $HERD names the herd
# binary (default: target/release/herd, or under $CARGO_TARGET_DIR, built
# first unless HERD_NO_BUILD=1). Exit status: 0; herd's when a comparison
# fails; 2 usage error (also a DIR that cannot be written).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage_err() { echo "reclaimers.sh: $*" >&2; echo "reclaimers.sh: see --help" >&2; exit 2; }
RUNS=5
OUT=reclaimers-out
WAVES=300
while [ $# -gt 0 ]; do
    case "$1" in
        -r | --runs | -o | --output | --waves) [ $# -ge 2 ] && [ -n "$2" ] || usage_err "$1 needs a value" ;;&
        -r|--runs) RUNS="$2"; shift 2 ;;
        -o|--output) OUT="$2"; shift 2 ;;
        --waves) WAVES="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) usage_err "unknown argument $1" ;;
    esac
done
[[ $RUNS =~ ^0*[1-9][0-9]{0,4}$ ]] && [ "$((10#$RUNS))" -le 10000 ] || usage_err "-r must be a count in 1-10000, not '$RUNS'"
[[ $WAVES =~ ^0*[1-9][0-9]{0,8}$ ]] || usage_err "--waves must be a positive count, not '$WAVES'"
RUNS=$((10#$RUNS)) WAVES=$((10#$WAVES))
case $OUT in -*) OUT=./$OUT ;; esac
# Everything is written into a new directory inside DIR, and moved into DIR
# when both comparisons are done: a failing one used to leave DIR with its
# .md emptied (the shell's redirection) beside the .json of the run before.
mkdir -p "$OUT" 2>/dev/null && STAGE=$(mktemp -d "$OUT/.reclaimers.XXXXXX" 2>/dev/null) ||
    usage_err "-o: cannot write in '$OUT'"
trap 'rm -rf "$STAGE"' EXIT

if [ -z "${HERD:-}" ]; then
    if [ -z "${HERD_NO_BUILD:-}" ]; then
        (cd "$ROOT" && cargo build --release -q -p herd)
    fi
    # Where cargo put it: $CARGO_TARGET_DIR when set (relative: to ROOT).
    HERD=$(cd "$ROOT" && cd "${CARGO_TARGET_DIR:-target}" && echo "$PWD/release/herd")
fi
if ! mountpoint -q /sys/kernel/tracing 2>/dev/null; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
STRATEGIES=locked,exitq,crossbeam-epoch,sdd,seize,urcu
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpus: $(nproc), kernel $(uname -r)"
    echo "liburcu: $(dpkg-query -W -f='${Version}' liburcu8 2>/dev/null || echo '?')"
    echo "runs: $RUNS per configuration, waves: $WAVES"
} > "$STAGE/context.txt"
for what in default heavy; do
    work=256
    [ "$what" = heavy ] && work=1024
    echo "load before $what: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$STAGE/context.txt"
    "$HERD" compare -r "$RUNS" --cleanup "$STRATEGIES" --save "$STAGE/$what.json" --markdown \
        -- --waves "$WAVES" --cleanup-work "$work" --contention > "$STAGE/$what.md"
    echo "load after $what: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$STAGE/context.txt"
done
for f in context.txt default.json default.md heavy.json heavy.md; do
    mv -f "$STAGE/$f" "$OUT/$f"
done
cat "$OUT/context.txt"
echo "tables: $OUT/default.md $OUT/heavy.md (JSON beside them, for herd diff)"
