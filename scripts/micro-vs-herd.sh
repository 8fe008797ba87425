#!/usr/bin/env bash
# Compare herd's pthread backend with the plain C micro (benches/c/storm_micro.c)
# on the same settings, and report the process wall times, their medians,
# the ratio of the medians and the median of the per-round (paired) ratios,
# which is robust to load drifting between rounds, with a bootstrap 95%
# interval and a sign count (target: herd within 5% of C; with --counters
# within 3%).
#
# Usage: scripts/micro-vs-herd.sh [--rounds N] [--waves N] [--per-wave N]
#            [--slots N] [--lag N] [--spin N] [--sleep-ms N] [--counters]
#            [--layouts N]
#   Defaults: the posted micro (1000 100 20 5 1000000 1000), 3 rounds.
#   herd runs `storm --spawn pthread --cancel pthread --reap leak` with the
#   same settings and --no-perf, or with --counters its default perf
#   counters (what a user runs). Both programs are measured the same way:
#   process wall time and user+sys CPU time (getrusage of the child); the C
#   micro prints what it created and how many creations failed, so the work
#   can be checked equal. With --counters each round also runs herd with
#   --no-perf (so herd's cost of counting is told from herd's own) and the
#   C micro under `perf stat` with the same events as herd's defaults (the
#   software counters and the futex, lock-contention, exit and new-task
#   tracepoints: what counting costs when perf itself counts), and the
#   summary gives herd's counter phases (open, enable, disable, read).
#   The programs of a round run in an order rotated from round to round
#   (C herd, herd C, ...), so that neither always runs first.
#   --layouts N: round r runs every program with (r-1) mod N extra
#   mappings made before main (benches/c/extra_maps.c, preloaded), so the
#   process's VMA tree has N shapes in turn. Past the ~32K threads that
#   vm.max_map_count leaves the leak mode (the posted 1000 waves), every
#   further pthread_create fails, and what a failure costs depends on that
#   shape more than on the program (docs/results-herd.md).
#   Every value is a whole number (--rounds, --waves, --per-wave, --slots
#   and --layouts at least 1); a missing or bad one is exit 2 before
#   anything is built. A run that fails stops the comparison: exit 1,
#   naming the command and what it said (nothing is averaged over it).
#   -h, --help: this text.
set -euo pipefail
cd "$(dirname "$0")/.."

usage_err() { echo "micro-vs-herd: $*" >&2; echo "micro-vs-herd: see --help" >&2; exit 2; }
rounds=3 waves=1000 per_wave=100 slots=20 lag=5 spin=1000000 sleep_ms=1000 counters=0 layouts=1
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds | --waves | --per-wave | --slots | --lag | --spin | --sleep-ms | --layouts)
            [ $# -ge 2 ] || usage_err "$1 needs a value" ;;&
        --rounds) rounds=$2; shift 2 ;;
        --waves) waves=$2; shift 2 ;;
        --per-wave) per_wave=$2; shift 2 ;;
        --slots) slots=$2; shift 2 ;;
        --lag) lag=$2; shift 2 ;;
        --spin) spin=$2; shift 2 ;;
        --sleep-ms) sleep_ms=$2; shift 2 ;;
        --counters) counters=1; shift ;;
        --layouts) layouts=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        *) usage_err "unknown argument: $1" ;;
    esac
done

# Whole numbers (at most 9 digits, read as decimal); a bad one used to be a
# Python traceback after the builds (--rounds 0: KeyError).
count() { # FLAG VALUE MIN
    [[ $2 =~ ^[0-9]{1,9}$ ]] && [ "$((10#$2))" -ge "$3" ] || usage_err "$1 must be a whole number >= $3, not '$2'"
}
count --rounds "$rounds" 1
[ "${#rounds}" -le 5 ] || usage_err "--rounds must be at most 99999, not '$rounds'"  # seq lists them first
count --waves "$waves" 1; count --per-wave "$per_wave" 1; count --slots "$slots" 1
count --lag "$lag" 0; count --spin "$spin" 0; count --sleep-ms "$sleep_ms" 0
rounds=$((10#$rounds)) waves=$((10#$waves)) per_wave=$((10#$per_wave)) slots=$((10#$slots))
lag=$((10#$lag)) spin=$((10#$spin)) sleep_ms=$((10#$sleep_ms))
[[ $layouts =~ ^[1-9][0-9]{0,3}$ ]] || usage_err "--layouts wants a count in 1-9999 (got '$layouts')"
command -v gcc >/dev/null || { echo "gcc is needed (apt-get install gcc)" >&2; exit 1; }
mkdir -p target
gcc -O2 -pthread -o target/storm_micro benches/c/storm_micro.c
layout=()
if [ "$layouts" -gt 1 ]; then
    gcc -O2 -shared -fPIC -o target/extra_maps.so benches/c/extra_maps.c
fi
# Past the map-count wall of the leak mode, say what the figures then hold.
max_maps=$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo 0)
if [ $((waves * per_wave)) -gt $((max_maps / 2)) ] && [ "$layouts" = 1 ]; then
    echo "micro-vs-herd: $((waves * per_wave)) threads, but vm.max_map_count = $max_maps leaves the leak mode room for about $((max_maps / 2)): the rest fail, and what a failure costs depends on the shape of the process's VMA tree (--layouts N varies it; docs/results-herd.md)"
fi
cargo build --release -q -p herd
herd=${CARGO_TARGET_DIR:-target}/release/herd  # where cargo put it
micro=(target/storm_micro "$waves" "$per_wave" "$slots" "$lag" "$spin" "$sleep_ms")
storm=("$herd" storm --spawn pthread --cancel pthread --reap leak --json
    --waves "$waves" --per-wave "$per_wave" --slots "$slots" --lag "$lag"
    --spin "$spin" --sleep-ms "$sleep_ms")
events=task-clock,context-switches,cpu-migrations,page-faults,syscalls:sys_enter_futex,syscalls:sys_enter_futex_wait,syscalls:sys_enter_futex_wake,syscalls:sys_enter_futex_waitv,syscalls:sys_enter_futex_requeue,lock:contention_begin,sched:sched_process_exit,task:task_newtask

# The programs of a round: c (the micro), herd (counters as asked), and
# with --counters off (herd --no-perf) and pstat (the micro under perf stat).
arms=(c herd)
if [ "$counters" = 1 ]; then
    arms+=(off)
    if command -v perf >/dev/null && perf stat -e "$events" -x, -o /dev/null -- true 2>/dev/null; then
        arms+=(pstat)
    else
        echo "micro-vs-herd: perf stat cannot count herd's events here; the C-under-perf-stat reference is skipped"
    fi
fi

# Runs a command; prints its stdout to $1, then "wall_s cpu_s" (process
# wall time, and user+sys CPU time of the command and its threads).
measure() {
    local out=$1; shift
    python3 - "$out" "$@" <<'PY'
import resource, signal, subprocess, sys, tempfile, time
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))  # Ctrl-C: no traceback
out, cmd = sys.argv[1], sys.argv[2:]
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.monotonic()
with open(out, "w") as f, tempfile.TemporaryFile() as err:
    p = subprocess.run(cmd, stdout=f, stderr=err)
    if p.returncode != 0:
        # The command and what it said: a failed run is not measured.
        err.seek(0)
        said = err.read().decode(errors="replace").strip().splitlines()[-5:]
        sys.exit(f"micro-vs-herd: {' '.join(cmd)} failed (exit {p.returncode})"
                 + "".join(f"\n  | {l}" for l in said))
t1 = time.monotonic()
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(f"{t1 - t0:.3f} {cpu:.3f}")
PY
}

# "herd created failed" of herd's JSON (threads).
created() {
    python3 -c 'import json,sys; m={x["name"]:x["value"] for x in json.load(open(sys.argv[1]))["metrics"]}; print(int(m["threads_created"]), int(m["threads_failed"]))' "$1"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/runs.tsv"
for r in $(seq 1 "$rounds"); do
    n=${#arms[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${arms[$(((i + r - 1) % n))]}"); done
    declare -A wall=() cpu=()
    if [ "$layouts" -gt 1 ]; then
        layout=(env "LD_PRELOAD=$PWD/target/extra_maps.so" "HERD_EXTRA_MAPS=$(((r - 1) % layouts))")
    fi
    for a in "${order[@]}"; do
        case $a in
            c) cmd=("${micro[@]}") ;;
            herd) if [ "$counters" = 1 ]; then cmd=("${storm[@]}"); else cmd=("${storm[@]}" --no-perf); fi ;;
            off) cmd=("${storm[@]}" --no-perf) ;;
            pstat) # shellcheck disable=SC2054 # -x, is perf stat's CSV separator
                cmd=(perf stat -e "$events" -x, -o "$tmp/perf.csv" -- "${micro[@]}") ;;
        esac
        read -r w c < <(measure "$tmp/$a" ${layout[@]+"${layout[@]}"} "${cmd[@]}")
        wall[$a]=$w cpu[$a]=$c
        printf '%s\t%s\t%s\t%s\n' "$a" "$r" "$w" "$c" >>"$tmp/runs.tsv"
        [ "$a" = herd ] && cp "$tmp/herd" "$tmp/herd.$r.json"
    done
    line=$(printf 'round %d: C %.3f s, cpu %.2f s (%s) | herd %.3f s, cpu %.2f s (created/failed %s)' \
        "$r" "${wall[c]}" "${cpu[c]}" "$(cat "$tmp/c")" "${wall[herd]}" "${cpu[herd]}" "$(created "$tmp/herd")")
    [ -n "${wall[off]:-}" ] && line+=$(printf ' | herd --no-perf %.3f s, cpu %.2f s (created/failed %s)' "${wall[off]}" "${cpu[off]}" "$(created "$tmp/off")")
    [ -n "${wall[pstat]:-}" ] && line+=$(printf ' | C under perf stat %.3f s' "${wall[pstat]}")
    [ "$layouts" -gt 1 ] && line+=" (layout: $(((r - 1) % layouts)) extra mappings)"
    echo "$line (order: ${order[*]})"
    unset wall cpu
done
python3 - "$tmp" "$rounds" <<'PY'
import json, random, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
wall, cpu = {}, {}
for line in open(f"{tmp}/runs.tsv"):
    a, r, w, c = line.split()
    wall.setdefault(a, {})[int(r)] = float(w)
    cpu.setdefault(a, {})[int(r)] = float(c)
med = statistics.median
rs = range(1, rounds + 1)

def paired(num, den, series=wall):
    return [series[num][r] / series[den][r] for r in rs]

def interval(ratios):
    """Percentile bootstrap 95% interval of the median (fixed seed), and
    in how many rounds the ratio was above 1."""
    above = sum(x > 1 for x in ratios)
    if len(ratios) < 5:
        return f"{above} of {len(ratios)} rounds above 1; too few rounds for an interval"
    rng = random.Random(1)
    boots = sorted(med(rng.choices(ratios, k=len(ratios))) for _ in range(10000))
    return (f"bootstrap 95% interval {boots[249]:.3f}-{boots[9749]:.3f}; "
            f"{above} of {len(ratios)} rounds above 1")

c, h = wall["c"], wall["herd"]
print(f"median cpu (user+sys): C {med(cpu['c'].values()):.2f} s, herd {med(cpu['herd'].values()):.2f} s; "
      f"herd/C {med(cpu['herd'].values()) / med(cpu['c'].values()):.3f} "
      f"(median per-round ratio {med(paired('herd', 'c', cpu)):.3f})")
ratios = paired("herd", "c")
print(f"median wall: C {med(c.values()):.3f} s, herd {med(h.values()):.3f} s; "
      f"herd/C {med(h.values()) / med(c.values()):.3f} "
      f"(per-round ratios {', '.join(f'{x:.3f}' for x in ratios)}; "
      f"median per-round ratio {med(ratios):.3f})")
print(f"paired herd/C: {interval(ratios)}")
if "off" in wall:
    on_off, off_c = paired("herd", "off"), paired("off", "c")
    print(f"median wall: herd --no-perf {med(wall['off'].values()):.3f} s; "
          f"herd/herd-no-perf {med(on_off):.3f} ({interval(on_off)}), "
          f"herd-no-perf/C {med(off_c):.3f} (median per-round ratios)")
    phases = [json.load(open(f"{tmp}/herd.{r}.json")).get("perf") or {} for r in rs]
    ms = lambda k: med(p.get(k, 0) for p in phases) / 1000
    print(f"herd's counters (medians): open {ms('open_us'):.2f} ms, enable {ms('enable_us'):.2f} ms, "
          f"disable {ms('disable_us'):.2f} ms, read {ms('read_us'):.2f} ms")
if "pstat" in wall:
    p = wall["pstat"]
    print(f"median wall: C under perf stat {med(p.values()):.3f} s; "
          f"perf-stat/C {med(paired('pstat', 'c')):.3f}, "
          f"herd/perf-stat {med(paired('herd', 'pstat')):.3f} (median per-round ratios)")
PY
