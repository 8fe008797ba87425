#!/usr/bin/env bash
# Tests of the benchmark drivers (scripts/bench-*.sh, rev-ab.sh, env-ab.sh,
# churn-ab.sh, micro-vs-herd.sh, perf-fixed-cost.sh, reclaimers.sh)
# without their benchmarks: usage errors (exit 2, naming the option, before
# anything is built), --help listing every option, and the A/B drivers run
# in a scratch git repository whose `benches` package has stand-in
# examples printing known rates or sleeping known times, so that their
# medians and quartiles can be checked against the values they must give.
# Needs git, cargo and python3 (no network: the stand-ins have no
# dependencies).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
# shellcheck source=scripts/test.d/lib/check.sh
. scripts/test.d/lib/check.sh

# --- the A/B drivers on stand-in examples -------------------------------------
# fake_repo DIR: a git repository with a `benches` package of stand-in
# examples and the A/B drivers under test, in two commits: the first's
# examples say OLD (the REV of the tests), the second's (HEAD, the
# checkout) not.
fake_repo() {
    local r=$1
    mkdir -p "$r/scripts" "$r/benches/src" "$r/benches/examples"
    cp "$SRC"/scripts/rev-ab.sh "$SRC"/scripts/env-ab.sh "$SRC"/scripts/churn-ab.sh "$r/scripts/"
    printf '[workspace]\nmembers = ["benches"]\nresolver = "2"\n' >"$r/Cargo.toml"
    printf '[package]\nname = "benches"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n' >"$r/benches/Cargo.toml"
    cat >"$r/benches/src/lib.rs" <<'EOF'
/// True in the first commit (the tests' REV), false in the checkout.
pub const OLD: bool = true;
/// The next of the space-separated values of the environment variable
/// LIST, one per call, counted in the file $FAKE_DIR/COUNTER.
pub fn next(counter: &str, list: &str) -> String {
    let dir = std::env::var("FAKE_DIR").expect("FAKE_DIR");
    let path = std::path::Path::new(&dir).join(counter);
    let k: usize = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    std::fs::write(&path, (k + 1).to_string()).unwrap();
    let vals = std::env::var(list).unwrap_or_else(|_| panic!("{list} unset"));
    let vals: Vec<&str> = vals.split_whitespace().collect();
    vals[k % vals.len()].to_string()
}
pub fn sleep_ms(ms: &str) {
    std::thread::sleep(std::time::Duration::from_millis(ms.parse().unwrap()));
}
EOF
    # rev-ab --rate 2: the REV's build always 1, the checkout's the next of FAKE_RATES.
    cat >"$r/benches/examples/rate.rs" <<'EOF'
fn main() {
    if !benches::OLD && std::env::var_os("FAKE_FAIL").is_some() {
        eprintln!("rate: failing as asked");
        std::process::exit(3);
    }
    let r = if benches::OLD { "1".to_string() } else { benches::next("rate", "FAKE_RATES") };
    println!("rate {r}");
}
EOF
    # env-ab: sleeps the next of FAKE_MS_<FAKE_ID> milliseconds.
    cat >"$r/benches/examples/sleepy.rs" <<'EOF'
fn main() {
    let id = std::env::var("FAKE_ID").expect("FAKE_ID");
    benches::sleep_ms(&benches::next(&id, &format!("FAKE_MS_{id}")));
}
EOF
    # churn-ab: churn's output line; sleeps the next of FAKE_MS_old or FAKE_MS_new.
    cat >"$r/benches/examples/churn.rs" <<'EOF'
fn main() {
    let id = if benches::OLD { "old" } else { "new" };
    benches::sleep_ms(&benches::next(id, &format!("FAKE_MS_{id}")));
    println!("{} 100 0 0", std::env::args().nth(1).unwrap());
}
EOF
    printf 'target/\nCargo.lock\n' >"$r/.gitignore"
    git -C "$r" init -q
    git -C "$r" add -A
    git -C "$r" -c user.name=t -c user.email=t@t commit -q -m old
    sed -i 's/^pub const OLD: bool = true;/pub const OLD: bool = false;/' "$r/benches/src/lib.rs"
    git -C "$r" -c user.name=t -c user.email=t@t commit -q -am new
}
fake_repo "$tmp/repo"
R=$tmp/repo
export FAKE_DIR=$tmp/count
mkdir -p "$FAKE_DIR"
# upper QUARTILES-LINE: the upper quartile of "quartiles A-B"; range_max: B of "range A-B".
upper() { sed -n 's/.*quartiles [0-9.]*-\([0-9.]*\).*/\1/p' <<<"$1"; }

# rev-ab --rate: the REV's build 1, the checkout's 1 2 3 4 in rounds 1-4:
# per-round ratios 1 2 3 4, median 2.5, quartiles the 2nd and 3rd
# (it printed the 4th, the maximum, as the upper one).
rm -f "$FAKE_DIR"/*
FAKE_RATES="1 2 3 4" expect_rc 0 "rev-ab -n 4" -- bash "$R/scripts/rev-ab.sh" HEAD~1 -n 4 --rate 2 -- rate
grep -q 'all: median 2.500 (quartiles 2.000-3.000, range 1.000-4.000, 4 cells)' "$tmp/out" ||
    { cat "$tmp/out"; fail "rev-ab -n 4: median 2.5, quartiles 2-3"; }
[ "$(git -C "$R" worktree list | wc -l)" = 1 ] || fail "rev-ab left its worktree"
# 5 rounds (ratios 1 2 3 4 1): quartiles the 2nd and 4th of the sorted 1 1 2 3 4.
rm -f "$FAKE_DIR"/*
FAKE_RATES="1 2 3 4 1" expect_rc 0 "rev-ab -n 5" -- bash "$R/scripts/rev-ab.sh" HEAD~1 -n 5 --rate 2 -- rate
grep -q 'all: median 2.000 (quartiles 1.000-3.000, range 1.000-4.000, 5 cells)' "$tmp/out" ||
    { cat "$tmp/out"; fail "rev-ab -n 5: median 2, quartiles 1-3"; }
ok "rev-ab: median and quartiles of known ratios (4 and 5 rounds), worktree removed"
# A failing run stops the comparison, naming what failed.
FAKE_FAIL=1 FAKE_RATES=1 expect_rc 1 "rev-ab, a failing run" -- bash "$R/scripts/rev-ab.sh" HEAD~1 -n 2 --rate 2 -- rate
grep -q "failed (3): rate: failing as asked" "$tmp/err" && ! grep -q "median" "$tmp/out" ||
    { cat "$tmp/out" "$tmp/err"; fail "rev-ab, a failing run: exit 1 with the program's message, no summary"; }
ok "rev-ab: a failing run stops it (exit 1, the program's message, no median)"

# env-ab: setting a sleeps 100 ms, b 100 200 300 400 ms in rounds 1-4:
# b's speed / a's about 1, 1/2, 1/3, 1/4; the upper quartile is the 1/2,
# well below the maximum (it was the maximum).
rm -f "$FAKE_DIR"/*
FAKE_MS_a=100 FAKE_MS_b="100 200 300 400" expect_rc 0 "env-ab -n 4" -- \
    bash "$R/scripts/env-ab.sh" -n 4 --env FAKE_ID=a --env FAKE_ID=b -- sleepy
line=$(grep "'FAKE_ID=b' / 'FAKE_ID=a'" "$tmp/out") || { cat "$tmp/out"; fail "env-ab: no ratio line"; }
u=$(upper "$line")
awk -v u="$u" 'BEGIN { exit !(u > 0.4 && u < 0.6) }' || fail "env-ab -n 4: upper quartile $u, want the 2nd largest (about 0.5): $line"
ok "env-ab: the upper quartile of 4 rounds is the 2nd largest ratio ($line)"

# churn-ab: the REV's build sleeps 100 ms, the checkout's 100 200 300 400:
# REV time / checkout time about 1, 1/2, 1/3, 1/4.
rm -f "$FAKE_DIR"/*
FAKE_MS_old=100 FAKE_MS_new="100 200 300 400" expect_rc 0 "churn-ab -n 4" -- \
    bash "$R/scripts/churn-ab.sh" HEAD~1 -n 4 --stacks std
line=$(grep "time / checkout exitq time, per round" "$tmp/out") || { cat "$tmp/out"; fail "churn-ab: no ratio line"; }
u=$(upper "$line")
awk -v u="$u" 'BEGIN { exit !(u > 0.4 && u < 0.6) }' || fail "churn-ab -n 4: upper quartile $u, want about 0.5: $line"
[ "$(git -C "$R" worktree list | wc -l)" = 1 ] || fail "churn-ab left its worktree"
ok "churn-ab: the upper quartile of 4 rounds is the 2nd largest ratio, worktree removed"

# Ctrl-C in the middle of the rounds (SIGINT to the process group, as a
# terminal sends it): exit 130, the worktree and the temporary directory
# removed, no program left running, and no Python traceback (there was).
# Job control gives the driver a process group of its own and SIGINT as a
# terminal leaves it (a background job of a script ignores it otherwise).
for s in churn-ab rev-ab; do
    rm -f "$FAKE_DIR"/*
    rm -rf "$tmp/t"
    mkdir -p "$tmp/t"
    set -m
    if [ "$s" = churn-ab ]; then
        FAKE_MS_old=20000 FAKE_MS_new=20000 TMPDIR=$tmp/t bash "$R/scripts/churn-ab.sh" HEAD~1 -n 4 --stacks std \
            >"$tmp/out" 2>"$tmp/err" &
    else
        FAKE_ID=x FAKE_MS_x=20000 TMPDIR=$tmp/t bash "$R/scripts/rev-ab.sh" HEAD~1 -n 4 -- sleepy \
            >"$tmp/out" 2>"$tmp/err" &
    fi
    pid=$!
    set +m
    for _ in $(seq 300); do [ -z "$(ls -A "$FAKE_DIR")" ] || break; sleep 0.1; done
    [ -n "$(ls -A "$FAKE_DIR")" ] || { kill -KILL -- -"$pid"; cat "$tmp/err"; fail "$s: no program started"; }
    sleep 0.3
    kill -INT -- -"$pid"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" = 130 ] || { cat "$tmp/err"; fail "$s, Ctrl-C: exit $rc, want 130"; }
    ! grep -q Traceback "$tmp/err" || { cat "$tmp/err"; fail "$s, Ctrl-C: a Python traceback"; }
    [ "$(git -C "$R" worktree list | wc -l)" = 1 ] || fail "$s, Ctrl-C: the worktree was left"
    [ -z "$(ls -A "$tmp/t")" ] || fail "$s, Ctrl-C: left in TMPDIR: $(ls -A "$tmp/t")"
    ! pgrep -f "$R/target/" >/dev/null || fail "$s, Ctrl-C: a program still runs"
done
ok "churn-ab, rev-ab: Ctrl-C exits 130, worktree and temporary directory removed, no traceback"

# A CARGO_TARGET_DIR of the user's: the program run is the one just built
# there. It was the one in ./target, here an older build of the checkout
# (as after building before setting the variable): a silent comparison of
# old code. Only the new build of the stand-ins writes ran-new.
(cd "$R" && cargo build -q --release -p benches --examples)
sed -i 's|^fn main() {$|fn main() { std::fs::write(format!("{}/ran-new", std::env::var("FAKE_DIR").unwrap()), "").unwrap();|' \
    "$R/benches/examples/sleepy.rs" "$R/benches/examples/churn.rs"
rm -f "$FAKE_DIR"/*
FAKE_MS_a=1 FAKE_MS_b=1 CARGO_TARGET_DIR=$tmp/ctd expect_rc 0 "env-ab, CARGO_TARGET_DIR" -- \
    bash "$R/scripts/env-ab.sh" -n 2 --env FAKE_ID=a --env FAKE_ID=b -- sleepy
[ -e "$FAKE_DIR/ran-new" ] || fail "env-ab with CARGO_TARGET_DIR ran ./target's older build"
rm -f "$FAKE_DIR"/*
FAKE_MS_old=1 FAKE_MS_new=1 CARGO_TARGET_DIR=$tmp/ctd expect_rc 0 "churn-ab, CARGO_TARGET_DIR" -- \
    bash "$R/scripts/churn-ab.sh" HEAD~1 -n 2 --stacks std
[ -e "$FAKE_DIR/ran-new" ] || fail "churn-ab with CARGO_TARGET_DIR ran ./target's older build of the checkout"
git -C "$R" checkout -q -- benches
ok "env-ab, churn-ab: with CARGO_TARGET_DIR set they run the build they just made there"

# --- usage ------------------------------------------------------------------
# usage SCRIPT NAME ARGS...: exit 2, the message naming NAME, nothing built
# (the checks come before any build: each of these runs in well under a
# second).
usage() {
    local s=$1 name=$2
    shift 2
    local t0=$SECONDS
    expect_rc 2 "$s $*" -- bash "scripts/$s" "$@"
    grep -q -- "$name" "$tmp/err" || { cat "$tmp/err"; fail "$s $*: the message does not name $name"; }
    [ $((SECONDS - t0)) -le 5 ] || fail "$s $*: took $((SECONDS - t0)) s to refuse (did it build first?)"
}
usage churn-ab.sh -n HEAD -n
usage churn-ab.sh -n HEAD -n 0
usage churn-ab.sh -n HEAD -n x
usage churn-ab.sh --stacks HEAD --stacks big
usage churn-ab.sh --peer HEAD --peer
usage churn-ab.sh revision -n 3
usage rev-ab.sh -n HEAD -n
usage rev-ab.sh --layouts HEAD --layouts 3 -- defer_free
usage env-ab.sh "two --env" --env A=1 -- defer_free
ok "the A/B drivers: usage errors exit 2 naming the option, before any build"

# --help: exit 0, every option of the parser named, no line of code.
help_lists() { # SCRIPT ARGS...: the options of its parser's case patterns
    local s=$1
    shift
    expect_rc 0 "$s --help" -- bash "scripts/$s" "$@"
    local f
    for f in $(grep -oE '^ +(-[a-zA-Z-]+( *\| *-[a-zA-Z-]+)*)\)' "scripts/$s" | tr -d ' )' | tr '|' '\n' | grep -v '^--$' | sort -u); do
        grep -q -- "$f" "$tmp/out" || { cat "$tmp/out"; fail "$s --help does not name $f"; }
    done
    ! grep -qE '^(set -euo|cd "\$\(dirname)' "$tmp/out" || fail "$s --help prints the script's code"
}
help_lists churn-ab.sh --help
help_lists churn-ab.sh HEAD -n 3 --help
help_lists rev-ab.sh HEAD -n 3 --help
help_lists env-ab.sh -n 3 --help
ok "the A/B drivers: --help anywhere before --, every option named"

# --- reclaimers.sh: DIR's earlier files kept when a comparison fails ---------
usage reclaimers.sh -r -r
usage reclaimers.sh -r -r 0
usage reclaimers.sh -r --runs x
usage reclaimers.sh --waves --waves 0
usage reclaimers.sh -o -o
: >"$tmp/a-file"
usage reclaimers.sh -o -o "$tmp/a-file"
# A stand-in herd: `compare ... --save PATH ... -- ... --cleanup-work W`
# writes PATH and a table, and fails for W = $FAIL_WORK.
cat >"$tmp/fakeherd" <<'EOF'
#!/bin/sh
save= work=
while [ $# -gt 0 ]; do
    case $1 in --save) save=$2; shift ;; --cleanup-work) work=$2; shift ;; esac
    shift
done
[ "$work" != "${FAIL_WORK:-}" ] || { echo "herd: error: failing as asked" >&2; exit 3; }
echo "{\"work\": $work}" >"$save"
echo "| table | $work |"
EOF
chmod +x "$tmp/fakeherd"
mkdir -p "$tmp/rc"
for f in context.txt default.json default.md heavy.json heavy.md; do echo precious >"$tmp/rc/$f"; done
FAIL_WORK=1024 HERD=$tmp/fakeherd expect_rc 3 "reclaimers.sh, the heavy comparison failing" -- \
    bash scripts/reclaimers.sh -r 2 --waves 1 -o "$tmp/rc"
for f in context.txt default.json default.md heavy.json heavy.md; do
    [ "$(cat "$tmp/rc/$f")" = precious ] || fail "a failed reclaimers.sh run changed $f: $(cat "$tmp/rc/$f")"
done
HERD=$tmp/fakeherd expect_rc 0 "reclaimers.sh" -- bash scripts/reclaimers.sh -r 2 --waves 1 -o "$tmp/rc"
grep -q '"work": 1024' "$tmp/rc/heavy.json" && grep -q '| table | 256 |' "$tmp/rc/default.md" &&
    grep -q '^runs: 2 per configuration, waves: 1$' "$tmp/rc/context.txt" || fail "reclaimers.sh wrote its five files"
[ -z "$(find "$tmp/rc" -name '.reclaimers.*')" ] || fail "reclaimers.sh left its staging directory"
ok "reclaimers.sh: usage errors exit 2; a failing comparison leaves DIR's files as they were, a good one replaces all five"

# --- micro-vs-herd.sh, perf-fixed-cost.sh: usage -------------------------------
usage micro-vs-herd.sh --rounds --rounds
usage micro-vs-herd.sh --rounds --rounds 0
usage micro-vs-herd.sh --rounds --rounds 999999999
usage micro-vs-herd.sh --waves --waves x
usage micro-vs-herd.sh --lag --lag -1
usage micro-vs-herd.sh --layouts --layouts 0
usage perf-fixed-cost.sh --rounds --rounds
usage perf-fixed-cost.sh --rounds --rounds 0
usage perf-fixed-cost.sh --gap-s --gap-s x
usage perf-fixed-cost.sh --gap-s --gap-s -1
help_lists micro-vs-herd.sh --help
help_lists perf-fixed-cost.sh --help
help_lists reclaimers.sh --help
ok "micro-vs-herd.sh, perf-fixed-cost.sh: usage errors exit 2 naming the option, before any build; --help"

# --- the bench-*.sh comparisons: usage ---------------------------------------
usage bench-defer-free.sh -n -n
usage bench-defer-free.sh -n -n 0
usage bench-defer-free.sh --ops --ops x
usage bench-defer-free.sh --threads --threads "1 0"
usage bench-defer-free.sh --qsbr-periods --qsbr-periods "1 0"
usage bench-defer-free.sh --qsbr-periods --qsbr-periods 64x
usage bench-defer-free.sh --qsbr-periods --qsbr-periods "1 1048577"
usage bench-churn.sh -n -n
usage bench-churn.sh --waves --waves 0
usage bench-churn.sh --stacks --stacks big
usage bench-read-mostly.sh --seconds --seconds 0
usage bench-read-mostly.sh --readers --readers "2 0"
usage bench-read-mostly.sh --layouts --layouts 3
usage bench-ratios.sh -n -n 0
usage bench-ratios.sh --frob --frob
# A count no run can reach: refused (seq built the list of 10^20 rounds
# first: a hang, then the memory).
for s in bench-defer-free.sh bench-churn.sh bench-read-mostly.sh bench-ratios.sh env-ab.sh; do
    usage "$s" -n -n 99999999999999999999
done
usage rev-ab.sh -n HEAD -n 99999999999999999999
usage churn-ab.sh -n HEAD -n 99999999999999999999
usage bench-churn.sh --per-wave --per-wave 99999999999999999999
for s in bench-defer-free.sh bench-churn.sh bench-read-mostly.sh bench-ratios.sh; do help_lists "$s" --help; done
ok "bench-*.sh: usage errors exit 2 naming the option, before any build; --help names every option, no code"

# --- bench-needs.sh under the test command ------------------------------------
# With HERD_NO_INSTALL=1 (the test command's), a missing liburcu-dev is
# refused (exit 3), never installed: liburcu's headers are hidden in a
# mount namespace and apt-get is a stand-in that records being called.
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    mkdir -p "$tmp/bin"
    printf '#!/bin/sh\necho "$*" >> %s/apt-called\n' "$tmp" > "$tmp/bin/apt-get"
    chmod +x "$tmp/bin/apt-get"
    hide='for d in /usr/include/x86_64-linux-gnu/urcu /usr/include/urcu; do
              if [ -d "$d" ]; then mount -t tmpfs none "$d" || exit 99; fi; done'
    expect_rc 3 "bench-needs.sh: liburcu-dev missing under HERD_NO_INSTALL=1" -- \
        unshare -m bash -c "$hide"'
            PATH="$1:$PATH" HERD_NO_INSTALL=1 bash -c ". scripts/bench-needs.sh; need_urcu bench-test"' _ "$tmp/bin"
    [ ! -e "$tmp/apt-called" ] || fail "bench-needs.sh ran apt-get under HERD_NO_INSTALL=1: $(cat "$tmp/apt-called")"
    grep -q "liburcu-dev is not installed" "$tmp/err" || fail "bench-needs.sh: no reason given: $(cat "$tmp/err")"
    # Without it, as root, it installs (the stand-in is called).
    expect_rc 0 "bench-needs.sh: liburcu-dev missing, root, installing allowed" -- \
        unshare -m bash -c "$hide"'
            PATH="$1:$PATH" HERD_NO_INSTALL=0 bash -c ". scripts/bench-needs.sh; need_urcu bench-test"' _ "$tmp/bin"
    [ -e "$tmp/apt-called" ] || fail "bench-needs.sh did not install as root without HERD_NO_INSTALL"
    ok "bench-needs.sh: HERD_NO_INSTALL=1 refuses a missing liburcu-dev (exit 3) without installing it"
else
    skip "bench-needs.sh's install check needs root and unshare -m (a mount namespace hides liburcu's headers)"
fi

echo "$pass passed"
