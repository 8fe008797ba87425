#!/usr/bin/env bash
# Tests of scripts/perf-stat.sh: usage, clear errors when perf is missing
# or not permitted (faked), a real `perf stat` run whose counts must match
# the workload, --record (folded stacks + flame graph) and --cross-check
# against herd storm's own counters. The real runs need root, linux-perf
# and tracefs (scripts/test-setup.sh installs and mounts them as root);
# otherwise those parts skip loudly (fail under the test command as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
S=scripts/perf-stat.sh
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/test.d/lib/check.sh
. scripts/test.d/lib/check.sh

# --- usage ---------------------------------------------------------------
expect_rc 0 "--help" -- bash "$S" --help
grep -q -- "--cross-check" "$tmp/out" && grep -q -- "--record" "$tmp/out" || fail "--help lists the options"
ok "--help exits 0 and documents --record and --cross-check"
expect_rc 2 "unknown option" -- bash "$S" --frobnicate ls
grep -q "unknown option --frobnicate" "$tmp/err" || fail "unknown option named"
expect_rc 2 "bad --repeat" -- bash "$S" -r zero ls
expect_rc 2 "no command" -- bash "$S"
ok "usage errors exit 2 with a message"
# Values the script used to take and then misuse: a count bash's test
# cannot hold (-r was dropped without a word: one run), -r with
# --cross-check (herd's JSON of N runs in one file: a Python traceback),
# options the mode ignores, a DIR that cannot be written.
for bad in "-r 99999999999999999999:--repeat" "-r 0:--repeat" "-r 10001:--repeat" \
    "--cross-check -r 2:--cross-check" "-F 99:--freq" "--tolerance 3:--tolerance" \
    "--overhead --record:--overhead" "--overhead -a:--overhead" "-o /proc/no/such/dir:--output"; do
    args=${bad%%:*} name=${bad##*:}
    # shellcheck disable=SC2086 # the options, word-split on purpose
    HERD=/bin/false expect_rc 2 "$args" -- bash "$S" $args -- true
    grep -q -- "$name" "$tmp/err" || { cat "$tmp/err"; fail "$args: the message names $name"; }
done
ok "a huge, zero or 10001 -r, --cross-check -r, -F or --tolerance alone, --overhead with -a or --record, an unwritable -o: exit 2 naming the option"

# --overhead when herd compare fails: exit 1 with what herd said, and the
# overhead.json of an earlier run left as it was (it used to be emptied).
mkdir -p "$tmp/keep-over"
echo precious >"$tmp/keep-over/overhead.json"
printf '#!/bin/sh\necho "herd: error: something went wrong" >&2\nexit 3\n' >"$tmp/failherd"
chmod +x "$tmp/failherd"
HERD="$tmp/failherd" expect_rc 1 "--overhead, herd failing" -- bash "$S" --overhead -r 2 -o "$tmp/keep-over" -- --waves 1
[ "$(cat "$tmp/keep-over/overhead.json")" = precious ] || fail "a failed --overhead emptied the earlier overhead.json"
grep -q "something went wrong" "$tmp/err" || { cat "$tmp/err"; fail "a failed --overhead shows what herd said"; }
ok "--overhead, herd failing: exit 1 with herd's message, the earlier overhead.json kept"

# path_without DIR PATTERN: DIR gets a link to every tool of the system's
# PATH whose name does not match PATTERN (a host without that package).
path_without() {
    local dir=$1 pattern=$2 d f b
    mkdir -p "$dir"
    for d in /usr/local/bin /usr/bin /bin; do
        for f in "$d"/*; do
            b="${f##*/}"
            # shellcheck disable=SC2053 # the pattern is a glob on purpose
            [[ $b == $pattern ]] || [ -e "$dir/$b" ] || ln -s "$f" "$dir/$b" 2>/dev/null || true
        done
    done
}

# --- perf missing: a PATH with every tool but perf --------------------------
path_without "$tmp/noperf" perf
expect_rc 1 "perf missing" -- env PATH="$tmp/noperf" bash "$S" -- true
grep -q "perf is not installed" "$tmp/err" && grep -q "apt-get install linux-perf" "$tmp/err" \
    || { cat "$tmp/err"; fail "missing perf explained with the install command"; }
ok "missing perf: exit 1 with the install command"

# --- perf not permitted: a fake perf answering like the kernel does ----------
mkdir -p "$tmp/denied"
cat >"$tmp/denied/perf" <<'EOF'
#!/bin/sh
echo "Error:" >&2
echo "Access to performance monitoring and observability operations is limited." >&2
echo "Consider adjusting /proc/sys/kernel/perf_event_paranoid setting" >&2
exit 255
EOF
chmod +x "$tmp/denied/perf"
expect_rc 1 "perf denied" -- env PATH="$tmp/denied:$PATH" bash "$S" -- true
grep -q "not permitted" "$tmp/err" && grep -q "sysctl kernel.perf_event_paranoid=-1" "$tmp/err" \
    && grep -q "perf_event_paranoid=" "$tmp/err" \
    || { cat "$tmp/err"; fail "denied perf explained with paranoid and the fix"; }
ok "perf not permitted: exit 1 with the paranoid level and the fix"

# --- the summary, from a fake perf's CSV ----------------------------------------
# A stand-in perf: `perf stat ... -o FILE` copies $FAKE_PERF_CSV to FILE
# (and with FAKE_PERF_RUN=1 runs the command, its stdout passed on), or
# without it writes perf's header alone and fails, as perf does when the
# command cannot start ("Workload failed"). The script still checks the
# real tracefs for the tracepoints it counts.
mkdir -p "$tmp/fakeperf"
cat >"$tmp/fakeperf/perf" <<'EOF'
#!/bin/sh
[ "$1" = stat ] || exit 0
out=
while [ $# -gt 0 ]; do
    case $1 in -o) out=$2; shift ;; --) shift; break ;; esac
    shift
done
[ -n "$out" ] || exit 0
if [ -n "${FAKE_PERF_CSV:-}" ]; then
    cp "$FAKE_PERF_CSV" "$out"
    [ "${FAKE_PERF_RUN:-0}" = 1 ] || exit 0
    exec "$@"
fi
printf '# started on today\n\n' >"$out"
echo "Workload failed: No such file or directory" >&2
exit 255
EOF
chmod +x "$tmp/fakeperf/perf"
if [ -d /sys/kernel/tracing/events/lock/contention_begin ] || [ -d /sys/kernel/debug/tracing/events/lock/contention_begin ]; then
    # perf stat -r 2's CSV: a variation field after the event name, then
    # run time and percentage running; herd's kprobe event beside futex(2).
    cat >"$tmp/r2.csv" <<'EOF'
# started on today

10,,syscalls:sys_enter_futex,1.50%,1000,100.00,,
30,,herd:do_futex,2.00%,1000,100.00,,
0,,lock:contention_begin,0.00%,1000,100.00,,
20,,sched:sched_process_exit,0.00%,1000,100.00,,
20,,task:task_newtask,0.00%,1000,80.00,,
EOF
    FAKE_PERF_CSV="$tmp/r2.csv" expect_rc 0 "summary of -r 2" -- env PATH="$tmp/fakeperf:$PATH" bash "$S" -r 2 -o "$tmp/fake" -- true
    cat "$tmp/out"
    # The running share is perf's percentage, not its run time (1000).
    grep -Eq '^task:task_newtask +20 +80\.00% +1\.00 +0\.00%$' "$tmp/out" ||
        fail "-r 2: the running column is the 6th field (80.00%), the variation the 4th"
    grep -Eq '^syscalls:sys_enter_futex +10 +100\.00% +0\.50 +1\.50%$' "$tmp/out" || fail "-r 2: the variation column"
    # herd:do_futex is listed, not added to the futex syscalls (which
    # were 40 here: 10 + 30); the exit wakes are 30 - 10.
    grep -Eq '^futex syscalls \(all\) +10 +0\.50$' "$tmp/out" || fail "futex syscalls (all) leaves herd:do_futex out"
    grep -Eq '^exit futex wakes \(do_futex-futex\) +20 +1\.00$' "$tmp/out" || fail "exit futex wakes = do_futex - futex(2)"
    ok "summary: -r's variation column read as such, futex syscalls without herd:do_futex, exit futex wakes"
    # A command that cannot start: perf's header and no count. Exit 1,
    # and the perf-stat.csv of the run before left as it was.
    cp "$tmp/fake/perf-stat.csv" "$tmp/before.csv"
    expect_rc 1 "a command that cannot start" -- env PATH="$tmp/fakeperf:$PATH" bash "$S" -o "$tmp/fake" -- /nonexistent/cmd
    grep -q "perf stat counted nothing" "$tmp/err" || { cat "$tmp/err"; fail "no count said as such"; }
    cmp -s "$tmp/before.csv" "$tmp/fake/perf-stat.csv" || fail "a failed run replaced the earlier perf-stat.csv"
    [ -z "$(find "$tmp/fake" -name '.perf-stat.*')" ] || fail "the staging directory was left in DIR"
    ok "a command that cannot start: exit 1, the earlier perf-stat.csv kept, no staging directory left"
    # A DIR named like an option is a directory (it used to be mkdir's option).
    FAKE_PERF_CSV="$tmp/r2.csv" expect_rc 0 "-o -dash" -- env PATH="$tmp/fakeperf:$PATH" \
        bash -c 'cd "$1" && bash "$2" -o -dash -- true' _ "$tmp" "$PWD/$S"
    [ -s "$tmp/-dash/perf-stat.csv" ] || { cat "$tmp/err"; fail "-o -dash wrote ./-dash/perf-stat.csv"; }
    ok "-o -dash: a directory, not an option"
    # --cross-check labels perf's side by what it counted: with -a every
    # CPU, the whole system (it said "whole process" there too). A stand-in
    # herd prints a storm's JSON with the counts of $tmp/r2.csv.
    printf '#!/bin/sh\necho %s\n' "'{\"perf\": {\"counters\": [{\"event\": \"syscalls:sys_enter_futex\", \"raw\": 10}, {\"event\": \"sched:sched_process_exit\", \"raw\": 20}, {\"event\": \"task:task_newtask\", \"raw\": 20}]}}'" >"$tmp/crossherd"
    chmod +x "$tmp/crossherd"
    for a in "" -a; do
        want="whole process" not="whole system"
        [ -z "$a" ] || { want="whole system, -a"; not="whole process"; }
        # shellcheck disable=SC2086 # no word, or -a
        HERD="$tmp/crossherd" FAKE_PERF_CSV="$tmp/r2.csv" FAKE_PERF_RUN=1 expect_rc 0 "--cross-check $a" -- \
            env PATH="$tmp/fakeperf:$PATH" bash "$S" --cross-check $a -o "$tmp/cross$a" -- --waves 1
        grep -qF "vs perf stat ($want)" "$tmp/out" && ! grep -qF "$not" "$tmp/out" ||
            { cat "$tmp/out"; fail "--cross-check $a: perf's count labelled '$want'"; }
    done
    ok "--cross-check: perf's count labelled whole process, with -a whole system"
else
    skip "the perf-stat.sh summary from a fake perf: no lock:contention_begin in tracefs (mount -t tracefs nodev /sys/kernel/tracing)"
fi

# --- real runs ---------------------------------------------------------------
real_runs() {
    [ "$(id -u)" = 0 ] || { skip "real perf stat / record / cross-check runs need root here (uid $(id -u))"; return 1; }
    command -v perf >/dev/null 2>&1 || { skip "real perf stat / record / cross-check runs: perf is not installed (linux-perf)"; return 1; }
    [ -d /sys/kernel/tracing/events ] || [ -d /sys/kernel/debug/tracing/events ] ||
        { skip "real perf stat / record / cross-check runs: tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)"; return 1; }
}
if ! real_runs; then
    echo "$pass passed (real runs skipped)"
    exit 0
fi

# 20 processes created and exited: perf must count at least those.
expect_rc 0 "perf stat run" -- bash "$S" -o "$tmp/stat" -- bash -c 'for i in $(seq 20); do (true) & done; wait'
exits="$(awk '$1 == "sched:sched_process_exit" {print $2}' "$tmp/out")"
created="$(awk '$1 == "task:task_newtask" {print $2}' "$tmp/out")"
[ -n "$exits" ] && [ "$exits" -ge 20 ] || { cat "$tmp/out"; fail "exits counted ($exits)"; }
[ -n "$created" ] && [ "$created" -ge 20 ] || { cat "$tmp/out"; fail "creations counted ($created)"; }
grep -q "futex syscalls (all)" "$tmp/out" || fail "summary has the futex total"
grep -q "per exit" "$tmp/out" || fail "summary has per-exit figures"
ok "perf stat summary: $exits exits, $created creations (>= 20 each), per-exit column"

# --record: perf.data, folded stacks and an SVG flame graph.
expect_rc 0 "--record" -- bash "$S" --record -F 2999 -o "$tmp/rec" -- \
    bash -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'
[ -s "$tmp/rec/perf.data" ] || fail "perf.data written"
[ -s "$tmp/rec/stacks.folded" ] || fail "stacks.folded written"
grep -qE ' [0-9]+$' "$tmp/rec/stacks.folded" || fail "folded lines end in a count"
grep -q "<svg" "$tmp/rec/flamegraph.svg" || fail "flamegraph.svg is an SVG"
ok "--record wrote perf.data, $(wc -l <"$tmp/rec/stacks.folded") folded stacks and flamegraph.svg"
# Again into the same DIR: the earlier perf.data becomes perf.data.old, as
# perf record itself does (the staging directory had lost it: written over).
cp "$tmp/rec/perf.data" "$tmp/first.data"
expect_rc 0 "--record again" -- bash "$S" --record -F 2999 -o "$tmp/rec" -- \
    bash -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'
cmp -s "$tmp/first.data" "$tmp/rec/perf.data.old" || fail "a second --record keeps the first perf.data as perf.data.old"
[ -s "$tmp/rec/perf.data" ] && ! cmp -s "$tmp/first.data" "$tmp/rec/perf.data" || fail "the second --record wrote a new perf.data"
ok "--record into a DIR with a perf.data: the earlier one kept as perf.data.old, as perf record does"
# Without inferno under the test command (HERD_NO_INSTALL=1): named, not
# installed (a HOME without ~/.cargo/bin, a PATH without inferno-*).
path_without "$tmp/noinferno" 'inferno-*'
mkdir -p "$tmp/home"
expect_rc 1 "--record without inferno" -- env PATH="$tmp/noinferno" HOME="$tmp/home" HERD_NO_INSTALL=1 \
    bash "$S" --record -o "$tmp/rec2" -- true
grep -q "cargo install inferno --locked (HERD_NO_INSTALL=1" "$tmp/err" && ! grep -q "installing" "$tmp/err" ||
    { cat "$tmp/err"; fail "--record without inferno under HERD_NO_INSTALL=1 names the install, does none"; }
ok "--record without inferno under HERD_NO_INSTALL=1: exit 1 naming cargo install inferno"

# --cross-check: herd's own counters against perf stat's.
cargo build --release -q -p herd
expect_rc 0 "--cross-check" -- bash "$S" --cross-check -o "$tmp/cross" -- --waves 200 --per-wave 50 --sleep-ms 20
cat "$tmp/out"
grep -q "sched:sched_process_exit" "$tmp/out" || fail "cross-check table"
ok "--cross-check: herd and perf stat agree within the stated tolerance"

# --overhead: a tiny interleaved comparison; checks the shape, not the figure.
expect_rc 0 "--overhead" -- bash "$S" --overhead -r 2 -o "$tmp/over" -- --waves 10 --per-wave 20 --sleep-ms 5
rows="$(grep -cE '^--(no-perf|perf-scope) .* (wall_s|sys_s|user_s) ' "$tmp/out" || true)"
[ "$rows" = 9 ] || { cat "$tmp/out" "$tmp/err"; fail "--overhead prints 3 configurations x 3 metrics ($rows rows)"; }
grep -qE '^--no-perf +wall_s +[0-9.]+ +1\.000' "$tmp/out" || fail "--overhead base ratio is 1.000"
ok "--overhead: interleaved --no-perf / process / system, ratios of medians"
expect_rc 2 "--overhead -r 1" -- bash "$S" --overhead -r 1
# A run too short for rusage to see: user_s 0 in every run (faked herd).
# No ratio to a zero base, said as such; it used to divide by zero.
cat >"$tmp/fakeherd" <<'FAKE'
#!/bin/sh
run='{"metrics": [{"name": "wall_s", "value": 0.01}, {"name": "sys_s", "value": 0.004}, {"name": "user_s", "value": 0.0}]}'
printf '{"sets": ['
for l in --no-perf "--perf-scope process" "--perf-scope system"; do
[ "$l" = --no-perf ] || printf ', '
printf '{"label": "%s", "runs": [%s, %s]}' "$l" "$run" "$run"
done
printf ']}\n'
FAKE
chmod +x "$tmp/fakeherd"
HERD="$tmp/fakeherd" expect_rc 0 "--overhead, user time 0" -- bash "$S" --overhead -r 2 -o "$tmp/over0" -- --waves 1
grep -qE '^--perf-scope system +user_s +0\.000 +n/a \(0\) +n/a \(0\) +n/a \(0\)$' "$tmp/out" ||
    { cat "$tmp/out" "$tmp/err"; fail "--overhead with a zero base prints n/a (0)"; }
ok "--overhead: a metric that is 0 in the base runs gets no ratio, and no crash"
echo "$pass passed"
