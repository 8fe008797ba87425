#!/usr/bin/env bash
# Tests of the benchmark programs themselves, which scripts/bench-*.sh run
# (benches/examples/{defer_free,churn}.rs, benches/c/urcu_{defer_free,
# churn}.c, urcu_defer_free.c built for urcu-memb and for urcu-qsbr): a
# tiny run of every IMPL and MODE exits 0 with every callback counted
# (the qsbr build at quiescent-state periods 1, 3 and 64, each
# producer's defer_rcu queue filled twice over: a deadlock there is a
# timeout); bad input is exit 2 naming the argument, never a panic or a
# crash; a thread that cannot be created (RLIMIT_AS too small
# for its stack) is exit 3 naming the limits; and a tiny run of
# scripts/bench-defer-free.sh over them reports every liburcu variant.
# Needs cargo, gcc and liburcu-dev (scripts/test-packages.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
# shellcheck source=scripts/test.d/lib/check.sh
. scripts/test.d/lib/check.sh

cargo build -q --release -p benches --example defer_free --example churn
ex=${CARGO_TARGET_DIR:-target}/release/examples
c_ok=1
if ! command -v gcc >/dev/null; then
    skip "the C benchmark programs: gcc is not installed (scripts/test-setup.sh installs it as root)"
    c_ok=0
elif ! gcc -O2 -pthread -o "$tmp/urcu_defer_free" benches/c/urcu_defer_free.c -lurcu-memb 2>"$tmp/gcc" ||
    ! gcc -O2 -pthread -DURCU_QSBR -o "$tmp/urcu_qsbr_defer_free" benches/c/urcu_defer_free.c -lurcu-qsbr 2>>"$tmp/gcc" ||
    ! gcc -O2 -pthread -o "$tmp/urcu_churn" benches/c/urcu_churn.c -lurcu-memb 2>>"$tmp/gcc"; then
    skip "the C benchmark programs: they do not build (liburcu-dev missing?): $(head -3 "$tmp/gcc")"
    c_ok=0
fi

# --- every IMPL runs every callback ------------------------------------------
for impl in exitq exitq-offload crossbeam sdd sdd-closure seize floor; do
    expect_rc 0 "defer_free $impl" -- "$ex/defer_free" "$impl" 2 20000
    grep -q "^$impl 2 20000 " "$tmp/out" || fail "defer_free $impl: no result line: $(cat "$tmp/out")"
done
for impl in exitq crossbeam seize sdd none held; do
    expect_rc 0 "churn $impl" -- "$ex/churn" "$impl" 3 10 1
    grep -q "^$impl 30 " "$tmp/out" || fail "churn $impl: no result line: $(cat "$tmp/out")"
done
if [ $c_ok = 1 ]; then
    for mode in global percpu defer; do
        expect_rc 0 "urcu_defer_free $mode" -- "$tmp/urcu_defer_free" "$mode" 2 20000
        grep -q "^urcu-$mode 2 20000 " "$tmp/out" || fail "urcu_defer_free $mode: no result line: $(cat "$tmp/out")"
    done
    # 10,000 operations a producer: defer_rcu's queue (4,096 slots) would
    # fill twice; the program empties it itself, offline, every 4,000.
    for period in 1 3 64; do
        for mode in global percpu defer defer-offline; do
            expect_rc 0 "urcu_qsbr_defer_free $mode (URCU_QS_PERIOD=$period)" -- \
                env URCU_QS_PERIOD=$period timeout 120 "$tmp/urcu_qsbr_defer_free" "$mode" 2 20000
            grep -q "^urcu-qsbr-$mode 2 20000 " "$tmp/out" || fail "urcu_qsbr_defer_free $mode: no result line: $(cat "$tmp/out")"
        done
    done
    expect_rc 0 "urcu_qsbr_defer_free defer, 4 threads, the default period" -- \
        timeout 120 "$tmp/urcu_qsbr_defer_free" defer 4 40000
    for mode in urcu none; do
        expect_rc 0 "urcu_churn $mode" -- "$tmp/urcu_churn" "$mode" 3 10 1
    done
fi
ok "every benchmark program runs and counts every callback (exit 0)"

# --- bad input: exit 2 naming the argument -------------------------------------
# bad NAME EXPECTED-WORD -- COMMAND...: exit 2, the message names the word,
# no panic.
bad() {
    local word=$2
    shift 3
    expect_rc 2 "$*" -- "$@"
    grep -q -- "$word" "$tmp/err" || { cat "$tmp/err"; fail "$*: the message does not name $word"; }
    ! grep -q "panicked" "$tmp/err" || { cat "$tmp/err"; fail "$*: a panic"; }
}
max=18446744073709551615
bad churn LAG -- "$ex/churn" none 1 1 "$max"
# WAVES x PER_WAVE x 16 wrapped: 2^64 - 1 waves, a run without end.
bad churn WAVES -- timeout 10 "$ex/churn" none "$max" 1 1
bad churn PER_WAVE -- "$ex/churn" none 1 20001
bad defer_free OPS -- timeout 10 "$ex/defer_free" floor 1 "$max"
bad defer_free THREADS -- "$ex/defer_free" floor 4097 10
bad defer_free "'extra'" -- "$ex/defer_free" floor 1 10 extra
bad defer_free EXITQ_BATCH -- env EXITQ_BATCH=0 "$ex/defer_free" exitq 1 10
bad defer_free EXITQ_BATCH -- env EXITQ_BATCH=x "$ex/defer_free" exitq 1 10
bad defer_free EXITQ_FIRST_CHECK_DELAY_US -- env EXITQ_FIRST_CHECK_DELAY_US=-5 "$ex/defer_free" exitq 1 10
bad defer_free SEIZE_BATCH -- env SEIZE_BATCH="$max" "$ex/defer_free" seize 1 10
if [ $c_ok = 1 ]; then
    # LAG = 2^64 - 1 made lag + 1 zero: a division by zero (SIGFPE).
    bad urcu_churn LAG -- "$tmp/urcu_churn" urcu 1 1 "$max"
    # strtoul took "-1" as 2^64 - 1 waves, ops: runs without end.
    bad urcu_churn WAVES -- "$tmp/urcu_churn" urcu -1
    bad urcu_churn PER_WAVE -- "$tmp/urcu_churn" urcu 1 " 5"
    bad urcu_defer_free OPS -- timeout 10 "$tmp/urcu_defer_free" global 1 -1
    bad urcu_defer_free THREADS -- "$tmp/urcu_defer_free" global 4097 1
    bad urcu_defer_free usage -- "$tmp/urcu_defer_free" defer-offline 1 1
    # The quiescent-state period is the qsbr build's: the memb build
    # refuses it rather than measure without it.
    bad urcu_defer_free URCU_QS_PERIOD -- env URCU_QS_PERIOD=64 "$tmp/urcu_defer_free" global 1 10
    bad urcu_qsbr_defer_free URCU_QS_PERIOD -- env URCU_QS_PERIOD=0 "$tmp/urcu_qsbr_defer_free" global 1 10
    bad urcu_qsbr_defer_free URCU_QS_PERIOD -- env URCU_QS_PERIOD=x "$tmp/urcu_qsbr_defer_free" global 1 10
    bad urcu_qsbr_defer_free URCU_QS_PERIOD -- env URCU_QS_PERIOD=1048577 "$tmp/urcu_qsbr_defer_free" global 1 10
    bad urcu_qsbr_defer_free OPS -- timeout 10 "$tmp/urcu_qsbr_defer_free" defer 1 -1
    bad urcu_qsbr_defer_free THREADS -- "$tmp/urcu_qsbr_defer_free" percpu 4097 1
    bad urcu_qsbr_defer_free usage -- "$tmp/urcu_qsbr_defer_free" qsbr 1 1
fi
ok "bad input to the benchmark programs: exit 2 naming the argument, no panic, no crash"

# --- a thread that cannot be created: exit 3 with the limits -------------------
# RLIMIT_AS well below what 200 thread stacks map (root is not exempt
# from it, unlike RLIMIT_NPROC).
# refused ULIMIT_FLAG KB LIMIT_NAME PROGRAM ARGS...: exit 3 under the
# limit, naming it, without a panic.
refused() {
    local flag=$1 kb=$2 name=$3
    shift 3
    expect_rc 3 "$*" -- bash -c 'ulimit "$0" "$1" && exec "${@:2}"' "$flag" "$kb" "$@"
    grep -q "$name" "$tmp/err" || { cat "$tmp/err"; fail "$*: $name is not named"; }
    ! grep -q "panicked" "$tmp/err" || { cat "$tmp/err"; fail "$*: a panic"; }
}
nolimit() { refused -v 300000 RLIMIT_AS "$@"; }
nolimit "$ex/defer_free" floor 200 1000
nolimit "$ex/churn" none 2 200 1
if [ $c_ok = 1 ]; then
    nolimit "$tmp/urcu_defer_free" global 200 1000
    nolimit "$tmp/urcu_qsbr_defer_free" global 200 1000
    nolimit "$tmp/urcu_churn" urcu 2 200 1
fi
# RLIMIT_DATA well below what 200 thread stacks take (thread stacks count
# as data since Linux 4.7): the limit is named too.
nodata() { refused -d 200000 RLIMIT_DATA "$@"; }
nodata "$ex/defer_free" floor 200 1000
if [ $c_ok = 1 ]; then
    nodata "$tmp/urcu_defer_free" global 200 1000
fi
ok "a thread the benchmark programs cannot create: exit 3 naming the limits"

# --- scripts/bench-defer-free.sh over them: every liburcu variant reported --
# A tiny run (one round, 2 threads): the report names each of liburcu's
# nine variants (memb's three, qsbr's three at periods 1 and 256), counts
# them in "liburcu best" and says which won; the --qsbr-periods scan too.
if [ $c_ok = 1 ]; then
    expect_rc 0 "bench-defer-free.sh, a tiny run" -- bash scripts/bench-defer-free.sh -n 1 --ops 20000 --threads 2
    for name in urcu-global urcu-percpu urcu-defer urcu-qsbr-{global,percpu,defer}-{1,256}; do
        grep -qE "^ +2 +$name +[0-9.]+$" "$tmp/out" || { cat "$tmp/out"; fail "bench-defer-free.sh: no ns/op for $name"; }
    done
    for row in "liburcu best time / exitq time" "liburcu qsbr best / memb best" "liburcu's fastest variant"; do
        grep -qF "$row" "$tmp/out" || { cat "$tmp/out"; fail "bench-defer-free.sh: no '$row' in the report"; }
    done
    expect_rc 0 "bench-defer-free.sh --qsbr-periods, a tiny run" -- \
        bash scripts/bench-defer-free.sh -n 1 --ops 20000 --threads 2 --qsbr-periods "1 7"
    for name in urcu-qsbr-{global,percpu,defer}-{1,7} urcu-qsbr-defer-offline; do
        grep -qE "^ +2 +$name +[0-9.]+$" "$tmp/out" || { cat "$tmp/out"; fail "bench-defer-free.sh --qsbr-periods: no ns/op for $name"; }
    done
    ok "bench-defer-free.sh reports every liburcu variant, memb and qsbr, and counts them in liburcu's best"
fi
echo "bench programs: $pass checks passed"
