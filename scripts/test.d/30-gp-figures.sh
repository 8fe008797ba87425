#!/usr/bin/env bash
# Smoke test of scripts/gp-figures.sh: tiny runs of every figure it makes
# (2 interleaved runs, 50 ms each); every median docs/results-grace-periods.md quotes must be
# present and the ratio line printed. (The real figures are a benchmark,
# run by hand: see docs/results-grace-periods.md.)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
if ! command -v jq >/dev/null; then
    skip "gp-figures smoke test: jq not installed (apt-get install jq)"
    exit 0
fi
[ -x target/release/herd ] || cargo build --release -q -p herd
out=$(scripts/gp-figures.sh --runs 2 --duration 50ms --gp-duration 30ms 2>/dev/null)
echo "$out" | grep -E '^(ns_per_op|frees_per_gp|calls_per_s|per-op /|idle +(0|10us|expedited) )' || true
fail() { echo "FAIL: gp-figures: $*" >&2; exit 1; }
echo "$out" | grep -Eq '^per-op / deferred = [0-9]+x; per-op / expedited = [0-9.]+x$' || fail "no ratio line"
for m in ns_per_op op_p50_ns frees_per_gp calls_per_s latency_p99_ns break_even_sections_per_call; do
    line=$(echo "$out" | grep -E "^$m " | head -1)
    [ -n "$line" ] || fail "no median line for $m"
    ! echo "$line" | grep -q 'n/a' || fail "$m has no value: $line"
done
[ "$(echo "$out" | grep -cE '^(idle|busy) +(0|10us|100us|1ms|expedited) +[0-9]')" -ge 14 ] \
    || fail "gp tables incomplete"
echo "ok - gp-figures smoke test"

# --- usage: exit 2 naming the option, before anything runs ----------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/a-file"
for bad in "--runs:--runs" "--runs 0:--runs" "--runs x:--runs" "--runs 99999999999999999999:--runs" \
    "--duration bogus:--duration" "--gp-duration 5:--gp-duration" "--out $tmp/a-file:--out" "--frob:--frob"; do
    args=${bad%%:*} name=${bad##*:}
    rc=0
    # shellcheck disable=SC2086 # the options, word-split on purpose
    scripts/gp-figures.sh $args >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" = 2 ] && grep -q -- "$name" "$tmp/err" ||
        { cat "$tmp/err"; fail "'$args': exit $rc (want 2), the message naming $name"; }
    ! grep -q '^== ' "$tmp/out" || fail "'$args' ran something before refusing"
done
scripts/gp-figures.sh --help >"$tmp/out"
for f in --runs --duration --gp-duration --priority --out --help; do
    grep -q -- "$f" "$tmp/out" || fail "--help does not mention $f"
done
! grep -q 'set -euo' "$tmp/out" || fail "--help prints the script's code"
echo "ok - gp-figures: usage errors exit 2 before any run; --help lists every option"

# --- a failing run leaves --out DIR's earlier files as they were ------------
# A bad --gp-duration used to be found by the third step, whose shell
# redirection had emptied DIR/gp.json first.
mkdir -p "$tmp/keep"
echo precious >"$tmp/keep/gp.json"
rc=0
scripts/gp-figures.sh --runs 1 --duration 10ms --gp-duration bogus --out "$tmp/keep" >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] && [ "$(cat "$tmp/keep/gp.json")" = precious ] || fail "--gp-duration bogus: exit $rc, gp.json '$(cat "$tmp/keep/gp.json")'"
# herd gp failing at run time (a herd that fails on gp alone): the steps
# before it write their files, gp.json stays the earlier one, and no
# staging directory is left.
printf '#!/bin/sh\ncase $1 in gp) case " $* " in *" --help "*) ;; *) echo "{\\"cut\\": "; exit 130 ;; esac ;; esac\nexec "%s" "$@"\n' \
    "$PWD/target/release/herd" >"$tmp/gpfails"
chmod +x "$tmp/gpfails"
rc=0
HERD="$tmp/gpfails" scripts/gp-figures.sh --runs 1 --duration 10ms --gp-duration 10ms --out "$tmp/keep" >/dev/null 2>&1 || rc=$?
[ "$rc" = 130 ] || fail "herd gp failing: exit $rc, not its 130"
[ "$(cat "$tmp/keep/gp.json")" = precious ] || fail "a failed herd gp replaced the earlier gp.json"
[ -s "$tmp/keep/unregister.json" ] || fail "the steps before the failure kept their files"
[ -z "$(find "$tmp/keep" -name '.gp-figures.*')" ] || fail "a staging directory was left in --out"
echo "ok - gp-figures: a failing run keeps --out's earlier files, no staging directory left"
