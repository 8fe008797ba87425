#!/usr/bin/env bash
# perf-stat.sh: run a herd command (or any command) under `perf stat` with
# herd's own event set, and print a summary with per-exit figures.
#
# The event set is the one herd opens itself (herd/src/perf/events.rs; a
# unit test checks that every event there appears in this file):
#   syscalls:sys_enter_futex, and where the kernel has them (6.7+)
#   syscalls:sys_enter_futex_wait syscalls:sys_enter_futex_wake
#   syscalls:sys_enter_futex_waitv syscalls:sys_enter_futex_requeue
#   herd:do_futex (a kprobe event herd defines where kprobes exist)
#   lock:contention_begin  sched:sched_process_exit  task:task_newtask
#   context-switches  cpu-migrations  page-faults  task-clock (cpu-clock with -a)
#   cycles  instructions  (hardware: "<not supported>" in a VM without a PMU)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HERD_SUBCOMMANDS=" storm env compare diff sweep unregister gp membarrier agent report "

usage() {
    cat <<'EOF'
Usage: scripts/perf-stat.sh [options] [--] <herd subcommand | command> [args...]

Runs the command under `perf stat` with herd's event set (futex syscalls,
lock:contention_begin, thread exits and creations, context switches,
migrations, page faults, task-clock, cycles, instructions) and prints a
summary: each count, its share of time counted (multiplexing) and the count
per thread exit; with -r N the counts are means and a last column gives
their variation (perf's standard deviation of the mean, in percent). The
"futex syscalls (all)" line sums the futex system calls; where herd's
kprobe event herd:do_futex exists it is listed, not summed, and "exit futex
wakes" is do_futex minus futex(2), as herd reports it. A first word that is
a herd subcommand (storm, compare, ...) runs herd itself
(target/release/herd, or under $CARGO_TARGET_DIR, built if needed; or
$HERD).

Options:
  -a, --system        count on every CPU (perf stat -a), like --perf-scope system
  -r, --repeat N      run N times (1-10000), perf stat reports mean and variation
                      (the summary's last column)
  -o, --output DIR    where to write files (default: perf-out/, created);
                      perf-stat.csv (and herd.json with --cross-check,
                      overhead.json with --overhead). Each file is written
                      aside and moved into DIR only when whole: a run that
                      fails or is interrupted leaves DIR's files as they were
      --record        also `perf record -g` the command and write
                      DIR/perf.data, DIR/stacks.folded and DIR/flamegraph.svg
                      (an earlier DIR/perf.data becomes DIR/perf.data.old, as
                      perf record does; inferno-collapse-perf +
                      inferno-flamegraph; installed
                      with `cargo install inferno` when missing, unless
                      HERD_NO_INSTALL=1, as under the test command)
  -F, --freq HZ       sampling frequency for --record (default 999)
      --cross-check   run `herd storm --json [args]` under perf stat and check
                      herd's own counts against perf's (see below); one run,
                      no -r
      --tolerance PCT allowed difference for --cross-check (default 5)
      --overhead      what herd's own counters cost: `herd compare` of the
                      same storm with --no-perf, --perf-scope process and
                      --perf-scope system, interleaved (-r N rounds, default
                      10), printed as ratios of medians against --no-perf
                      (configuration / --no-perf: above 1 costs more); no
                      perf stat, so no -a or --record
  -h, --help          this text
An option that would be ignored (-F without --record, --tolerance without
--cross-check) is a usage error; given twice, the last value counts.

Cross-check: herd counts only the storm's measured phase, perf stat the
whole process (start-up, pre-flight, shutdown; with -a the whole system,
every other process's events too, and the table says so), so herd's count
must not exceed perf's and must be within PCT percent of it, plus a slack
of 64 events for the fixed start-up and shutdown work (a few threads, a few
dozen futex calls). Checked: all futex syscalls, thread exits, thread
creations. Use a storm big enough for the phase to dominate (the default
is); with -a, a quiet system.

Exit status: the command's own (perf stat passes it on; the counts are
still written); with --cross-check 0 agree, 1 disagree; 1 perf missing, not
permitted, or a step failed; 2 usage error (also a DIR that cannot be
written).

Examples:
  scripts/perf-stat.sh storm --cleanup exitq
  scripts/perf-stat.sh -a -r 5 storm
  scripts/perf-stat.sh --record -o /tmp/fg storm
  scripts/perf-stat.sh -- ./my-benchmark --threads 64
  scripts/perf-stat.sh --cross-check -- --cleanup locked
  scripts/perf-stat.sh --overhead -r 12 -- --waves 300
EOF
}

die() { echo "perf-stat.sh: $*" >&2; exit 1; }
usage_err() { echo "perf-stat.sh: $*" >&2; echo "Try 'scripts/perf-stat.sh --help'." >&2; exit 2; }

system=0 repeat=1 outdir="perf-out" record=0 freq=999 cross=0 tolerance=5 overhead=0 repeat_set=0
freq_set=0 tolerance_set=0
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        -a|--system) system=1 ;;
        -r|--repeat) [ $# -ge 2 ] || usage_err "$1 needs a value"; repeat="$2"; repeat_set=1; shift ;;
        -o|--output) [ $# -ge 2 ] || usage_err "$1 needs a value"; outdir="$2"; shift ;;
        --record) record=1 ;;
        -F|--freq) [ $# -ge 2 ] || usage_err "$1 needs a value"; freq="$2"; freq_set=1; shift ;;
        --cross-check) cross=1 ;;
        --overhead) overhead=1 ;;
        --tolerance) [ $# -ge 2 ] || usage_err "$1 needs a value"; tolerance="$2"; tolerance_set=1; shift ;;
        --) shift; break ;;
        -*) usage_err "unknown option $1" ;;
        *) break ;;
    esac
    shift
done
# Counts in 1-10000 (as herd's -r), read as decimal: a number bash's test
# cannot hold used to drop -r without a word, and 010 would be octal.
[[ "$repeat" =~ ^0*[1-9][0-9]{0,4}$ ]] && [ "$((10#$repeat))" -le 10000 ] ||
    usage_err "--repeat must be an integer in 1-10000, not '$repeat'"
repeat=$((10#$repeat))
[[ "$freq" =~ ^0*[1-9][0-9]{0,8}$ ]] || usage_err "--freq must be a positive integer (Hz), not '$freq'"
freq=$((10#$freq))
[[ "$tolerance" =~ ^[0-9]+([.][0-9]+)?$ ]] || usage_err "--tolerance must be a number (percent), not '$tolerance'"
if [ "$cross" = 0 ] && [ "$overhead" = 0 ] && [ $# -eq 0 ]; then usage_err "no command given"; fi
[ "$cross" = 1 ] && [ "$overhead" = 1 ] && usage_err "--cross-check and --overhead are separate runs"
# Options that would be silently ignored are refused.
[ "$cross" = 1 ] && [ "$repeat" -gt 1 ] &&
    usage_err "--cross-check compares one run of herd with perf stat's count of it: no -r"
[ "$overhead" = 1 ] && [ "$record" = 1 ] && usage_err "--overhead runs herd compare, not under perf: no --record"
[ "$overhead" = 1 ] && [ "$system" = 1 ] &&
    usage_err "--overhead compares herd's own scopes (--no-perf, process, system): no -a"
[ "$freq_set" = 1 ] && [ "$record" = 0 ] && usage_err "--freq is the sampling frequency of --record, which was not given"
[ "$tolerance_set" = 1 ] && [ "$cross" = 0 ] && usage_err "--tolerance is the allowed difference of --cross-check, which was not given"
[ -n "$outdir" ] || usage_err "--output needs a directory, not ''"
# A directory named like an option is still a directory (mkdir, perf -o).
case $outdir in -*) outdir=./$outdir ;; esac

# Every file is written into a new directory inside DIR and moved into DIR
# only when it is whole: a run that fails (or is interrupted) leaves what
# DIR held from an earlier run as it was.
mkdir -p "$outdir" 2>/dev/null && stage="$(mktemp -d "$outdir/.perf-stat.XXXXXX" 2>/dev/null)" ||
    usage_err "--output: cannot write in '$outdir'"
trap 'rm -rf "$stage"' EXIT
# install FILE...: move FILEs from the staging directory into DIR.
install_out() {
    local f
    for f in "$@"; do mv -f "$stage/$f" "$outdir/$f" || die "cannot move $f into $outdir"; done
}

# --- overhead: herd's counters off vs on, interleaved -------------------------
herd_bin() {
    if [ -n "${HERD:-}" ]; then echo "$HERD"; return; fi
    (cd "$ROOT" && cargo build --release -q -p herd) >&2 || die "cannot build herd (cargo build --release -p herd)"
    # Where cargo put it: $CARGO_TARGET_DIR when set (relative: to ROOT).
    (cd "$ROOT" && cd "${CARGO_TARGET_DIR:-target}" && echo "$PWD/release/herd")
}
if [ "$overhead" = 1 ]; then
    [ "$repeat_set" = 1 ] || repeat=10
    [ "$repeat" -ge 2 ] || usage_err "--overhead needs -r 2 or more"
    command -v python3 >/dev/null 2>&1 || die "--overhead needs python3"
    herd="$(herd_bin)"
    echo "perf-stat.sh: $herd compare -r $repeat --warmup 1 --config --no-perf --config '--perf-scope process' --config '--perf-scope system' --metrics wall_s,sys_s,user_s --json -- $*" >&2
    rc=0
    "$herd" compare -r "$repeat" --warmup 1 --config "--no-perf" --config "--perf-scope process" \
        --config "--perf-scope system" --metrics wall_s,sys_s,user_s --json -- "$@" \
        >"$stage/overhead.json" 2>"$stage/overhead.stderr" || rc=$?
    if [ "$rc" != 0 ]; then
        echo "perf-stat.sh: herd compare failed (exit $rc); it said (last lines):" >&2
        tail -n 20 "$stage/overhead.stderr" | sed 's/^/  | /' >&2
        die "nothing written to $outdir"
    fi
    python3 - "$stage/overhead.json" <<'PY'
import json, statistics as st, sys
d = json.load(open(sys.argv[1]))
sets = d["sets"]
def col(s, m):
    return [next(x["value"] for x in r["metrics"] if x["name"] == m) for r in s["runs"]]
base = sets[0]
print(f"\nherd's perf counters: cost against {base['label']} ({len(base['runs'])} interleaved rounds)")
print(f"{'configuration':<22} {'metric':<7} {'median':>9} {'ratio of medians':>17} {'median paired ratio':>20} {'ratio of minima':>16}")
def ratio(num, den):
    # A short run's user or sys time can be 0 (rusage is tick-sampled):
    # no ratio then, said as such.
    return f"{num / den:.3f}" if den > 0 else "n/a (0)"
for s in sets:
    for m in ("wall_s", "sys_s", "user_s"):
        a, b = col(base, m), col(s, m)
        n = min(len(a), len(b))
        paired = [y / x for x, y in zip(a[:n], b[:n]) if x > 0]
        med_paired = f"{st.median(paired):.3f}" if paired else "n/a (0)"
        print(f"{s['label']:<22} {m:<7} {st.median(b):>9.3f} {ratio(st.median(b), st.median(a)):>17} "
              f"{med_paired:>20} {ratio(min(b), min(a)):>16}")
PY
    install_out overhead.json overhead.stderr
    exit 0
fi

# --- perf present and permitted? -----------------------------------------
command -v perf >/dev/null 2>&1 || die "perf is not installed.
  Debian/Ubuntu: apt-get install linux-perf   (Ubuntu: linux-tools-\$(uname -r))
  Fedora/RHEL:   dnf install perf"
paranoid="$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo '?')"
tracefs=""
for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    if [ -d "$d/events" ]; then tracefs="$d"; break; fi
done

probe_err="$(perf stat -x, -e task-clock -- true 2>&1 >/dev/null)" || {
    if grep -qiE "not supported|No such file|unknown" <<<"$probe_err"; then
        die "perf does not run on this kernel:
$probe_err"
    fi
    die "perf is not permitted here (kernel.perf_event_paranoid=$paranoid):
$(sed 's/^/  | /' <<<"$probe_err")
  fix: run as root, or: sudo sysctl kernel.perf_event_paranoid=-1"
}
[ -n "$tracefs" ] || die "tracefs is not mounted: tracepoints (futex, exits, lock contention) cannot be counted.
  fix (as root): mount -t tracefs nodev /sys/kernel/tracing"

# --- the event set -----------------------------------------------------
events=(syscalls:sys_enter_futex)
for ev in sys_enter_futex_wait sys_enter_futex_wake sys_enter_futex_waitv sys_enter_futex_requeue; do
    [ -e "$tracefs/events/syscalls/$ev/id" ] && events+=("syscalls:$ev")
done
[ -e "$tracefs/events/herd/do_futex/id" ] && events+=(herd:do_futex)
events+=(lock:contention_begin sched:sched_process_exit task:task_newtask
         context-switches cpu-migrations page-faults)
if [ "$system" = 1 ]; then events+=(cpu-clock); else events+=(task-clock); fi
events+=(cycles instructions)
for ev in lock:contention_begin sched:sched_process_exit task:task_newtask; do
    [ -e "$tracefs/events/${ev%%:*}/${ev#*:}/id" ] || die "tracepoint $ev is missing from $tracefs/events (kernel without CONFIG_LOCK_EVENTS/ftrace?)"
done
evlist="$(IFS=,; echo "${events[*]}")"

# --- the command -------------------------------------------------------
if [ "$cross" = 1 ]; then
    cmd=("$(herd_bin)" storm --json "$@")
elif [[ "$HERD_SUBCOMMANDS" == *" $1 "* ]]; then
    cmd=("$(herd_bin)" "$@")
else
    cmd=("$@")
fi
statfile="$stage/perf-stat.csv"
# shellcheck disable=SC2054 # -x, is perf stat's CSV separator
stat_args=(-x, --no-big-num -e "$evlist" -o "$statfile")
[ "$system" = 1 ] && stat_args+=(-a)
[ "$repeat" -gt 1 ] && stat_args+=(-r "$repeat")

echo "perf-stat.sh: perf stat ${stat_args[*]} -- ${cmd[*]}" >&2
rc=0
if [ "$cross" = 1 ]; then
    perf stat "${stat_args[@]}" -- "${cmd[@]}" >"$stage/herd.json" || rc=$?
else
    perf stat "${stat_args[@]}" -- "${cmd[@]}" || rc=$?
fi
# A command that could not start (perf: "Workload failed") leaves a file
# with perf's header and no count: nothing to summarize, nothing written.
awk -F, '!/^#/ && NF >= 3 { found = 1 } END { exit !found }' "$statfile" 2>/dev/null ||
    die "perf stat counted nothing (exit $rc); nothing written to $outdir"

# --- summary -------------------------------------------------------------
# perf stat -x, lines: value,unit,event,run_time,pct_running,metric,metric_unit;
# with -r N a variation field ("1.23%", the standard deviation of the mean
# in percent of it) comes after the event: value,unit,event,variation,
# run_time,pct_running,...
summary() {
    awk -F, -v repeat="$repeat" '
        /^#/ || NF < 3 { next }
        {
            varied = ($4 ~ /%$/)
            val[$3] = $1; unit[$3] = $2; order[n++] = $3
            pct[$3] = varied ? $6 : $5; var[$3] = varied ? $4 : ""
        }
        END {
            exits = val["sched:sched_process_exit"] + 0
            printf "\n%-34s %16s %-5s %8s %14s", "event", "count", "", "running", "per exit"
            if (repeat > 1) printf " %10s", "+- (runs)"
            printf "\n"
            for (i = 0; i < n; i++) {
                e = order[i]; v = val[e]
                if (v ~ /^</) { printf "%-34s %16s\n", e, v; continue }
                per = (exits > 0) ? sprintf("%14.2f", v / exits) : sprintf("%14s", "-")
                printf "%-34s %16s %-5s %7s%% %s", e, v, unit[e], pct[e], per
                if (repeat > 1) printf " %10s", var[e]
                printf "\n"
                # The futex system calls only: herd:do_futex counts do_futex()
                # calls, futex(2)s included (herd reports it apart, as here).
                if (e ~ /^syscalls:sys_enter_futex/) futex += v
            }
            printf "%-34s %16d %-5s %8s", "futex syscalls (all)", futex, "", ""
            if (exits > 0) printf " %14.2f", futex / exits
            printf "\n"
            # do_futex() calls not entered from futex(2): the clear-tid wakes
            # of exiting threads (docs/perf.md), as herd computes them.
            if (("herd:do_futex" in val) && ("syscalls:sys_enter_futex" in val) &&
                val["herd:do_futex"] !~ /^</ && val["syscalls:sys_enter_futex"] !~ /^</) {
                wakes = val["herd:do_futex"] - val["syscalls:sys_enter_futex"]
                if (wakes < 0) wakes = 0
                printf "%-34s %16d %-5s %8s", "exit futex wakes (do_futex-futex)", wakes, "", ""
                if (exits > 0) printf " %14.2f", wakes / exits
                printf "\n"
            }
            if (repeat > 1) printf "(means over %d runs; +-: the standard deviation of the mean, in percent of it, as perf stat gives it)\n", repeat
        }' "$statfile"
}
summary
# The counts are whole (a failing command's too: its exit status is
# passed on); under --cross-check only a storm that succeeded is kept.
if [ "$cross" = 0 ]; then
    install_out perf-stat.csv
elif [ "$rc" = 0 ]; then
    install_out perf-stat.csv herd.json
fi

# --- record: call graphs, folded stacks, flame graph ------------------------
if [ "$record" = 1 ]; then
    if ! command -v inferno-collapse-perf >/dev/null 2>&1 || ! command -v inferno-flamegraph >/dev/null 2>&1; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v inferno-flamegraph >/dev/null 2>&1; then
        [ "${HERD_NO_INSTALL:-0}" != 1 ] ||
            die "--record needs inferno (inferno-collapse-perf, inferno-flamegraph): cargo install inferno --locked (HERD_NO_INSTALL=1: this run installs nothing; scripts/test-setup.sh sets up what the tests need)"
        command -v cargo >/dev/null 2>&1 || die "--record needs inferno (inferno-collapse-perf, inferno-flamegraph): install Rust and run: cargo install inferno"
        echo "perf-stat.sh: installing inferno (cargo install inferno --locked), once" >&2
        cargo install inferno --locked >&2 || die "cargo install inferno failed"
    fi
    rec_args=(-g -F "$freq" -o "$stage/perf.data")
    [ "$system" = 1 ] && rec_args+=(-a)
    echo "perf-stat.sh: perf record ${rec_args[*]} -- ${cmd[*]}" >&2
    perf record "${rec_args[@]}" -- "${cmd[@]}" >/dev/null || die "perf record failed"
    perf script -i "$stage/perf.data" 2>/dev/null | inferno-collapse-perf >"$stage/stacks.folded" \
        || die "collapsing stacks failed"
    [ -s "$stage/stacks.folded" ] || die "no samples recorded (command too short? raise --freq)"
    inferno-flamegraph --title "perf record -g: ${cmd[*]##*/}" <"$stage/stacks.folded" >"$stage/flamegraph.svg" \
        || die "inferno-flamegraph failed"
    nstacks=$(wc -l <"$stage/stacks.folded")
    # As perf record itself does with an existing (non-empty) output file:
    # the earlier perf.data is kept as perf.data.old, not written over.
    if [ -s "$outdir/perf.data" ]; then
        mv -f "$outdir/perf.data" "$outdir/perf.data.old" || die "cannot keep the earlier $outdir/perf.data as perf.data.old"
    fi
    install_out perf.data stacks.folded flamegraph.svg
    echo "perf-stat.sh: wrote $outdir/perf.data, $outdir/stacks.folded ($nstacks stacks), $outdir/flamegraph.svg" >&2
fi

# --- cross-check ---------------------------------------------------------
if [ "$cross" = 1 ]; then
    [ "$rc" = 0 ] || die "herd storm failed under perf stat (exit $rc); nothing written to $outdir"
    command -v python3 >/dev/null 2>&1 || die "--cross-check needs python3 to read herd's JSON"
    # What perf stat counted: the process, or with -a every CPU's events.
    scope="whole process"
    [ "$system" = 1 ] && scope="whole system, -a"
    python3 - "$outdir/herd.json" "$outdir/perf-stat.csv" "$tolerance" "$scope" <<'PY'
import csv, json, sys
herd_json, stat_csv, tol, scope = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
SLACK = 64
doc = json.load(open(herd_json))
runs = doc.get("runs", [doc])
perf = runs[0].get("perf") or {}
ours = {c["event"]: c.get("raw") for c in perf.get("counters", [])}
if not ours:
    sys.exit("cross-check: herd's JSON has no perf counters (run without --no-perf)")
theirs = {}
for row in csv.reader(l for l in open(stat_csv) if l.strip() and not l.startswith("#")):
    if len(row) >= 3:
        try:
            theirs[row[2]] = float(row[0])
        except ValueError:
            pass
def total(d, pred):
    vals = [v for k, v in d.items() if pred(k) and v is not None]
    return sum(vals) if vals else None
checks = [
    ("futex syscalls (all)", lambda k: k.startswith("syscalls:sys_enter_futex")),
    ("sched:sched_process_exit", lambda k: k == "sched:sched_process_exit"),
    ("task:task_newtask", lambda k: k == "task:task_newtask"),
]
bad = 0
print(f"\ncross-check: herd (measured phase) vs perf stat ({scope}), tolerance {tol:g}% + {SLACK}")
print(f"{'counter':<28} {'herd':>12} {'perf stat':>12} {'diff':>8}  verdict")
for name, pred in checks:
    h, p = total(ours, pred), total(theirs, pred)
    if h is None or p is None:
        print(f"{name:<28} {'-' if h is None else int(h):>12} {'-' if p is None else int(p):>12}          MISSING")
        bad += 1
        continue
    diff = (p - h) / p * 100 if p else 0.0
    ok = h <= p and (p - h) <= p * tol / 100 + SLACK
    bad += not ok
    print(f"{name:<28} {int(h):>12} {int(p):>12} {diff:>7.2f}%  {'ok' if ok else 'DISAGREE'}")
sys.exit(1 if bad else 0)
PY
fi
exit "$rc"
