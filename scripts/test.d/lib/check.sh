# The checks the shell suites count and fail by, sourced by the suites in
# scripts/test.d/ that test command lines (40-perf-stat.sh,
# 41-bench-scripts.sh). The caller sets `tmp` (a scratch directory) first.
#
# ok WHAT: counts a passed check and says so.
# fail WHY: says why on stderr and ends the suite (exit 1).
# expect_rc CODE DESCRIPTION -- COMMAND...: runs COMMAND, its output in
#   $tmp/out and $tmp/err, and fails unless it exits CODE.
# shellcheck shell=bash
pass=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
fail() { echo "FAIL - $*" >&2; exit 1; }
expect_rc() {
    local want="$1" what="$2"; shift 3
    local rc=0
    "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" = "$want" ] || { cat "$tmp/out" "$tmp/err" >&2; fail "$what: exit $rc, want $want"; }
}
