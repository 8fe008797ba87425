#!/usr/bin/env bash
# Compare herd's pthread backend with the plain C micro (benches/c/storm_micro.c)
# on the same settings, interleaved C herd C herd ..., and report the process
# wall times, their medians, the ratio of the medians and the median of the
# per-round (paired) ratios, which is robust to load drifting between rounds
# (target: herd within 5% of C).
#
# Usage: scripts/micro-vs-herd.sh [--rounds N] [--waves N] [--per-wave N]
#            [--slots N] [--lag N] [--spin N] [--sleep-ms N] [--counters]
#   Defaults: the posted micro (1000 100 20 5 1000000 1000), 3 rounds.
#   herd runs `storm --spawn pthread --cancel pthread --reap leak` with the
#   same settings and --no-perf, or with --counters its default perf
#   counters (what a user runs). Both programs are measured the same way:
#   process wall time and user+sys CPU time (getrusage of the child); the C
#   micro prints what it created and how many creations failed, so the work
#   can be checked equal. With --counters, each round also runs the C micro
#   under `perf stat` with the same events as herd's defaults (the software
#   counters and the futex, lock-contention, exit and new-task
#   tracepoints): what counting costs the kernel when perf itself counts,
#   so herd's own share of its overhead can be told from the kernel's.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3 waves=1000 per_wave=100 slots=20 lag=5 spin=1000000 sleep_ms=1000 perf=--no-perf
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --waves) waves=$2; shift 2 ;;
        --per-wave) per_wave=$2; shift 2 ;;
        --slots) slots=$2; shift 2 ;;
        --lag) lag=$2; shift 2 ;;
        --spin) spin=$2; shift 2 ;;
        --sleep-ms) sleep_ms=$2; shift 2 ;;
        --counters) perf=; shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

command -v gcc >/dev/null || { echo "gcc is needed (apt-get install gcc)" >&2; exit 1; }
mkdir -p target
gcc -O2 -pthread -o target/storm_micro benches/c/storm_micro.c
cargo build --release -q -p herd
herd=target/release/herd

# Runs a command; prints its stdout to $1, then "wall_s cpu_s" (process
# wall time, and user+sys CPU time of the command and its threads).
measure() {
    local out=$1; shift
    python3 - "$out" "$@" <<'PY'
import resource, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.monotonic()
with open(out, "w") as f:
    subprocess.run(cmd, stdout=f, stderr=subprocess.DEVNULL, check=True)
t1 = time.monotonic()
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(f"{t1 - t0:.3f} {cpu:.3f}")
PY
}

c_walls=() h_walls=() c_cpus=() h_cpus=() p_walls=()
events=task-clock,context-switches,cpu-migrations,page-faults,syscalls:sys_enter_futex,syscalls:sys_enter_futex_wait,syscalls:sys_enter_futex_wake,syscalls:sys_enter_futex_waitv,syscalls:sys_enter_futex_requeue,lock:contention_begin,sched:sched_process_exit,task:task_newtask
with_perf=0
if [ -z "$perf" ]; then
    if command -v perf >/dev/null && perf stat -e "$events" -x, -o /dev/null -- true 2>/dev/null; then
        with_perf=1
    else
        echo "micro-vs-herd: perf stat cannot count herd's events here; the C-under-perf-stat reference is skipped"
    fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
    read -r cw cc < <(measure "$tmp/c" target/storm_micro "$waves" "$per_wave" "$slots" "$lag" "$spin" "$sleep_ms")
    # shellcheck disable=SC2086 # $perf is one flag or none
    read -r hw hc < <(measure "$tmp/h" "$herd" storm --spawn pthread --cancel pthread --reap leak $perf --json \
        --waves "$waves" --per-wave "$per_wave" --slots "$slots" --lag "$lag" \
        --spin "$spin" --sleep-ms "$sleep_ms")
    c_walls+=("$cw") h_walls+=("$hw") c_cpus+=("$cc") h_cpus+=("$hc")
    if [ "$with_perf" = 1 ]; then
        read -r pw _ < <(measure "$tmp/p" perf stat -e "$events" -x, -o "$tmp/perf.csv" -- \
            target/storm_micro "$waves" "$per_wave" "$slots" "$lag" "$spin" "$sleep_ms")
        p_walls+=("$pw")
        printf 'round %d: C under perf stat %.3f s\n' "$r" "$pw"
    fi
    c_out=$(cat "$tmp/c")
    h_created=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); m={x["name"]:x["value"] for x in r["metrics"]}; print(int(m["threads_created"]), int(m["threads_failed"]))' "$tmp/h")
    printf 'round %d: C %.3f s, cpu %.2f s (%s) | herd %.3f s, cpu %.2f s (created/failed %s)\n' \
        "$r" "$cw" "$cc" "$c_out" "$hw" "$hc" "$h_created"
done
python3 - "${c_cpus[*]}" "${h_cpus[*]}" <<'PY'
import statistics, sys
c = [float(x) for x in sys.argv[1].split()]
h = [float(x) for x in sys.argv[2].split()]
print(f"median cpu (user+sys): C {statistics.median(c):.2f} s, herd {statistics.median(h):.2f} s; "
      f"herd/C {statistics.median(h) / statistics.median(c):.3f}")
PY
python3 - "${c_walls[*]}" "${h_walls[*]}" <<'PY'
import statistics, sys
c = [float(x) for x in sys.argv[1].split()]
h = [float(x) for x in sys.argv[2].split()]
mc, mh = statistics.median(c), statistics.median(h)
ratios = [b / a for a, b in zip(c, h)]
print(f"median wall: C {mc:.3f} s, herd {mh:.3f} s; herd/C {mh / mc:.3f} "
      f"(per-round ratios {', '.join(f'{x:.3f}' for x in ratios)}; "
      f"median per-round ratio {statistics.median(ratios):.3f})")
PY
if [ "$with_perf" = 1 ]; then
    python3 - "${c_walls[*]}" "${h_walls[*]}" "${p_walls[*]}" <<'PY'
import statistics, sys
c, h, p = ([float(x) for x in a.split()] for a in sys.argv[1:4])
print(f"median wall: C under perf stat {statistics.median(p):.3f} s; "
      f"perf-stat/C {statistics.median([b / a for a, b in zip(c, p)]):.3f}, "
      f"herd/perf-stat {statistics.median([b / a for a, b in zip(p, h)]):.3f} (median per-round ratios)")
PY
fi
