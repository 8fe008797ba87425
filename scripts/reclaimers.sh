#!/usr/bin/env bash
# reclaimers.sh: the comparison of docs/results-reclaimers.md, in one
# command: exitq against a mutex and the reclamation libraries a runtime
# author would pick (crossbeam-epoch, sdd, seize, liburcu's call_rcu), on
# the thread-exit storm, with the contention profile.
#
#   scripts/reclaimers.sh [-r RUNS] [-o DIR] [--waves N]
#
# Two `herd compare` runs, each interleaved and rotated (A B C ..., B C ...
# A, ...): the storm's default shape cut to --waves waves (300) with the
# default cleanup size (256 words), then a cleanup-heavy one (1024 words).
# Writes DIR/default.{json,md} and DIR/heavy.{json,md} (default
# reclaimers-out/) and DIR/context.txt (date, commit, load average before
# and after each comparison, CPUs, kernel, liburcu version): what the
# results page quotes. Needs root for the perf counters and the
# contention profile (tracefs is mounted if it is not), and liburcu
# (apt-get install liburcu8).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNS=5
OUT=reclaimers-out
WAVES=300
while [ $# -gt 0 ]; do
    case "$1" in
        -r|--runs) RUNS="$2"; shift 2 ;;
        -o|--output) OUT="$2"; shift 2 ;;
        --waves) WAVES="$2"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "reclaimers.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$RUNS$WAVES" in *[!0-9]*) echo "reclaimers.sh: -r and --waves take numbers" >&2; exit 2 ;; esac

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
mkdir -p "$OUT"
STRATEGIES=locked,exitq,crossbeam-epoch,sdd,seize,urcu
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpus: $(nproc), kernel $(uname -r)"
    echo "liburcu: $(dpkg-query -W -f='${Version}' liburcu8 2>/dev/null || echo '?')"
    echo "runs: $RUNS per configuration, waves: $WAVES"
} > "$OUT/context.txt"
for what in default heavy; do
    work=256
    [ "$what" = heavy ] && work=1024
    echo "load before $what: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/context.txt"
    "$HERD" compare -r "$RUNS" --cleanup "$STRATEGIES" --save "$OUT/$what.json" --markdown \
        -- --waves "$WAVES" --cleanup-work "$work" --contention > "$OUT/$what.md"
    echo "load after $what: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/context.txt"
done
cat "$OUT/context.txt"
echo "tables: $OUT/default.md $OUT/heavy.md (JSON beside them, for herd diff)"
