#!/usr/bin/env bash
# Tests of scripts/test-setup.sh, the set-up CI depends on, on the shapes a
# fresh machine gives it: apt's lock held by another process (for a while,
# for good), no network, a malformed package list line, dpkg left
# unfinished by an interrupted set-up, a non-root user, cargo missing from
# PATH, rustup missing or with a broken nightly, no apt-get, tracefs not
# mounted or not mountable; and scripts/test.sh around it (the set-up
# first, what it exports after, a failing part named). Nothing is
# installed: the scripts run from a scratch copy with their own package
# list, and apt-get, dpkg, dpkg-query, rustup, cargo, mount, inferno and
# 50-vm.sh are stand-ins that record their calls. Needs root (the
# set-up's root path, and setpriv for the non-root one).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=scripts/test.d/lib/check.sh
. scripts/test.d/lib/check.sh
if [ "$(id -u)" != 0 ]; then
    skip "test-setup.sh's tests need root (its root path; setpriv for the non-root one), uid $(id -u)"
    exit 0
fi
chmod 755 "$tmp"

# The scratch repository: the script under test and a package list.
R=$tmp/repo
mkdir -p "$R/scripts"
cp "$SRC/scripts/test-setup.sh" "$R/scripts/"
printf '# test list\njq          # a comment\n\ngcc   # another\n' >"$R/scripts/test-packages.txt"
# The guest's fetch: a stand-in that records how it was called.
mkdir -p "$R/scripts/test.d"
printf '#!/bin/sh\necho "50-vm.sh $* HERD_NO_INSTALL=${HERD_NO_INSTALL:-}" >>"$CALLS"\n' >"$R/scripts/test.d/50-vm.sh"

# The stand-ins. Each records "NAME ARGS" in $tmp/calls.
B=$tmp/bin
mkdir -p "$B"
stand_in() {
    printf '#!/bin/sh\necho "%s $*" >>"$CALLS"\n%s\n' "$1" "$2" >"$B/$1"
    chmod +x "$B/$1"
}
# dpkg-query: installed unless named in $FAKE_MISSING.
stand_in dpkg-query 'for p; do :; done; case " ${FAKE_MISSING:-} " in *" $p "*) echo "unknown ok not-installed"; exit 0 ;; esac; printf "install ok installed"'
# apt-get: $FAKE_LOCKED times "could not get lock" (counted in $tmp/locked),
# then as $FAKE_APT says: ok; offline (update warns, exit 0, unless
# --error-on=any; install cannot find the package); interrupted (install
# fails as after a cut dpkg until `dpkg --configure -a` ran).
stand_in apt-get '
n=$(cat "$STATE/locked" 2>/dev/null || echo 0)
if [ "$n" -lt "${FAKE_LOCKED:-0}" ]; then
    echo $((n + 1)) >"$STATE/locked"
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4321 (apt-get)" >&2
    echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
    exit 100
fi
case "${FAKE_APT:-ok} $*" in
    offline*update*--error-on=any*) echo "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving" >&2; exit 100 ;;
    offline*update*) echo "W: Some index files failed to download." >&2; exit 0 ;;
    offline*install*) echo "E: Unable to locate package jq" >&2; exit 100 ;;
    interrupted*install*) [ -e "$STATE/configured" ] && exit 0
        echo "E: dpkg was interrupted, you must manually run '"'"'dpkg --configure -a'"'"' to correct the problem." >&2; exit 100 ;;
esac
exit 0'
stand_in dpkg ': >"$STATE/configured"'
# rustup: a nightly with miri and rust-src; FAKE_RUSTUP=broken: its
# component list fails; nonightly: no nightly.
rustup_stand_in() {
    stand_in rustup '
case "${FAKE_RUSTUP:-ok} $*" in
    nonightly*"toolchain list"*) echo "stable-x86_64-unknown-linux-gnu (default)" ;;
    *"toolchain list"*) printf "stable-x86_64-unknown-linux-gnu (default)\nnightly-x86_64-unknown-linux-gnu\n" ;;
    broken*"component list"*) echo "error: toolchain nightly is not installed" >&2; exit 1 ;;
    *"component list"*) printf "miri-x86_64-unknown-linux-gnu\nrust-src\n" ;;
esac'
}
rustup_stand_in
stand_in cargo :
stand_in mount :
stand_in inferno-flamegraph :
stand_in inferno-collapse-perf :
# A PATH of the system's tools (no cargo or rustup: those are in
# ~/.cargo/bin) with the stand-ins first.
PATHS="$B:/usr/sbin:/usr/bin:/sbin:/bin"
mkdir -p "$tmp/home"

# setup [VAR=VALUE...]: the set-up as root, in a fresh state.
setup() {
    rm -rf "$tmp/state" && mkdir -p "$tmp/state" && chmod 777 "$tmp/state"
    : >"$tmp/calls" && chmod 666 "$tmp/calls"
    env -i PATH="$PATHS" HOME="$tmp/home" CALLS="$tmp/calls" STATE="$tmp/state" HERD_TEST_QUICK=1 \
        HERD_SETUP_APT_WAIT=60 FAKE_MISSING="jq gcc" "$@" bash "$R/scripts/test-setup.sh"
}
called() { grep -q "^$1" "$tmp/calls"; }

# --- all in place: nothing run that installs -----------------------------------
expect_rc 0 "all installed" -- setup FAKE_MISSING=
called "apt-get" && { cat "$tmp/calls"; fail "nothing missing, yet apt-get ran"; }
ok "everything in place: exit 0, apt-get never run"

# --- the guest's fetch: run as root, even with HERD_NO_INSTALL=1 about ----------
expect_rc 0 "the guest's fetch" -- setup FAKE_MISSING= HERD_TEST_QUICK=0 HERD_NO_INSTALL=1
grep -q '^50-vm.sh --prepare HERD_NO_INSTALL=$' "$tmp/calls" || { cat "$tmp/calls"; fail "50-vm.sh --prepare ran without HERD_NO_INSTALL"; }
ok "the guest's fetch runs as root (without HERD_NO_INSTALL=1, which is for what runs after the set-up)"

# --- apt's lock held for a while: waited for, said ------------------------------
expect_rc 0 "apt lock held twice" -- setup FAKE_LOCKED=2
grep -q "waiting for apt's lock" "$tmp/err" && grep -q "held by process 4321 (apt-get)" "$tmp/err" ||
    { cat "$tmp/err"; fail "a held apt lock is waited for, naming the process"; }
[ "$(grep -c '^apt-get .*install' "$tmp/calls")" = 1 ] || { cat "$tmp/calls"; fail "the install ran once after the wait"; }
ok "apt's lock held by another process: waited for (said, naming it), then the install"
# ... and for good: a bounded wait, then an error naming the lock.
expect_rc 1 "apt lock held for good" -- setup FAKE_LOCKED=1000 HERD_SETUP_APT_WAIT=3
grep -q "lock still held after 3s" "$tmp/err" && grep -q "held by process 4321" "$tmp/err" ||
    { cat "$tmp/err"; fail "a lock never released ends the wait with an error naming it"; }
ok "apt's lock never released: exit 1 after HERD_SETUP_APT_WAIT, naming the holder"
expect_rc 2 "a bad HERD_SETUP_APT_WAIT" -- setup HERD_SETUP_APT_WAIT=soon
grep -q "HERD_SETUP_APT_WAIT must be a number of seconds, not 'soon'" "$tmp/err" || { cat "$tmp/err"; fail "a bad wait named"; }
ok "HERD_SETUP_APT_WAIT=soon: exit 2 naming it"

# --- no network: the lists fail, the install is not tried ---------------------------
expect_rc 1 "offline" -- setup FAKE_APT=offline
grep -q "package lists could not be fetched" "$tmp/err" || { cat "$tmp/err"; fail "no network said as such"; }
called "apt-get .*install" && { cat "$tmp/calls"; fail "the install ran on lists that were not fetched"; }
ok "no network: exit 1 naming the lists that could not be fetched, no install tried"

# --- not Debian: no apt-get or dpkg-query ---------------------------------------
# (a PATH of the system's tools without them; the stand-ins moved aside)
mkdir -p "$tmp/noapt" "$tmp/aside"
for f in /usr/bin/* /usr/sbin/*; do
    case ${f##*/} in apt-get | dpkg-query) continue ;; esac
    [ -e "$tmp/noapt/${f##*/}" ] || ln -s "$f" "$tmp/noapt/${f##*/}"
done
mv "$B/apt-get" "$B/dpkg-query" "$tmp/aside/"
expect_rc 1 "no apt-get" -- setup PATH="$B:$tmp/noapt"
grep -q "error: no dpkg-query or apt-get: not a Debian system" "$tmp/err" && ! grep -q "could not be fetched" "$tmp/err" ||
    { cat "$tmp/err"; fail "no apt-get named as such, not as a network failure"; }
mv "$tmp/aside/apt-get" "$tmp/aside/dpkg-query" "$B/"
ok "no apt-get or dpkg-query as root: exit 1 naming a system that is not Debian"

# --- an install dpkg left unfinished: finished, then the install again ----------
expect_rc 0 "dpkg interrupted" -- setup FAKE_APT=interrupted
called "dpkg --configure -a" || { cat "$tmp/calls" "$tmp/err"; fail "dpkg --configure -a ran"; }
grep -q "installed jq gcc" "$tmp/err" || { cat "$tmp/err"; fail "the install succeeded after dpkg --configure -a"; }
ok "an interrupted earlier install: dpkg --configure -a, then the install, exit 0"

# --- rustup: missing as root, a broken nightly ----------------------------------
rm "$B/rustup"
expect_rc 1 "rustup missing" -- setup FAKE_MISSING=
grep -q "error: rustup is not installed" "$tmp/err" || { cat "$tmp/err"; fail "rustup missing as root is an error"; }
rustup_stand_in
ok "rustup missing as root: exit 1 naming it (30-miri.sh would fail later)"
# A nightly that cannot list its components: it used to end the set-up
# there, with rustup's status and no word of its own.
expect_rc 1 "broken nightly" -- setup FAKE_MISSING= FAKE_RUSTUP=broken
grep -q "error: rustup +nightly component list failed" "$tmp/err" || { cat "$tmp/err"; fail "a broken nightly named"; }
ok "a nightly that cannot list its components: exit 1 naming it"

# --- cargo missing from PATH ----------------------------------------------------
rm "$B/cargo"
mkdir -p "$tmp/home/.cargo/bin"
printf '#!/bin/sh\n' >"$tmp/home/.cargo/bin/cargo" && chmod +x "$tmp/home/.cargo/bin/cargo"
expect_rc 1 "cargo missing from PATH" -- setup
grep -q "cargo is not on PATH, but $tmp/home/.cargo/bin/cargo exists" "$tmp/err" || { cat "$tmp/err"; fail "cargo off PATH named, with where it is"; }
[ ! -s "$tmp/calls" ] || { cat "$tmp/calls"; fail "cargo missing: nothing else is run"; }
rm -rf "$tmp/home/.cargo"
stand_in cargo :
ok "cargo not on PATH: exit 1 first, naming ~/.cargo/bin"

# --- a malformed package list line: named, exit 2 --------------------------------
cp "$R/scripts/test-packages.txt" "$tmp/list"
for bad in "gcc jq" "jq, # comma" "Python3"; do
    printf '%s\n%s\n' "$(cat "$tmp/list")" "$bad" >"$R/scripts/test-packages.txt"
    expect_rc 2 "list line '$bad'" -- setup
    grep -qF "scripts/test-packages.txt:5: '$bad' is not one Debian package name" "$tmp/err" ||
        { cat "$tmp/err"; fail "the line '$bad' named with its number"; }
    [ ! -s "$tmp/calls" ] || { cat "$tmp/calls"; fail "a malformed list: nothing run (it reached $(head -n1 "$tmp/calls"))"; }
done
cp "$tmp/list" "$R/scripts/test-packages.txt"
ok "a package list line of two words, a comma or a capital: exit 2 naming the line"

# --- tracefs not mounted: mounted (in a mount namespace, tmpfs over it) --------
if unshare -m true 2>/dev/null; then
    hidden='mount -t tmpfs none /sys/kernel/tracing && "$@" && [ -d /sys/kernel/tracing/events ]'
    run=(env -i PATH="$PATHS" HOME="$tmp/home" CALLS="$tmp/calls" STATE="$tmp/state" HERD_TEST_QUICK=1 bash "$R/scripts/test-setup.sh")
    mv "$B/mount" "$tmp/mount.stand-in"
    expect_rc 0 "tracefs hidden, the real mount" -- unshare -m bash -c "$hidden" _ "${run[@]}"
    grep -q "tracefs: mounting at /sys/kernel/tracing" "$tmp/err" || { cat "$tmp/err"; fail "tracefs mounted, said"; }
    ok "tracefs not mounted (a tmpfs over /sys/kernel/tracing): mounted there, said"
    # A kernel without tracefs: mount fails, exit 1 naming the step.
    stand_in mount "echo \"mount: /sys/kernel/tracing: unknown filesystem type 'tracefs'.\" >&2; exit 32"
    expect_rc 1 "tracefs cannot be mounted" -- unshare -m bash -c "${hidden% && \[*}" _ "${run[@]}"
    grep -q "error: could not mount tracefs at /sys/kernel/tracing" "$tmp/err" && grep -q "unknown filesystem type" "$tmp/err" ||
        { cat "$tmp/err"; fail "a failed tracefs mount named, with mount's reason"; }
    mv "$tmp/mount.stand-in" "$B/mount"
    ok "tracefs that cannot be mounted: exit 1 naming it, mount's reason shown"
else
    skip "test-setup.sh's tracefs step: no mount namespace (unshare -m)"
fi

# --- not root: nothing installed, each missing thing named ---------------------------
if command -v setpriv >/dev/null 2>&1; then
    chmod -R a+rX "$tmp"
    expect_rc 0 "not root" -- setup FAKE_RUSTUP=nonightly HERD_TEST_QUICK=0 setpriv --reuid=65534 --regid=65534 --clear-groups
    for tool in apt-get mount "rustup toolchain install" "cargo install" 50-vm.sh; do
        called "$tool" && { cat "$tmp/calls"; fail "not root, yet $tool ran"; }
    done
    grep -q "Debian packages jq gcc .* not root" "$tmp/err" && grep -q "rust: no nightly toolchain .*not root" "$tmp/err" ||
        { cat "$tmp/err"; fail "not root: the missing packages and nightly named"; }
    ok "not root: nothing installed or fetched, the missing packages and nightly named with their commands"
else
    skip "test-setup.sh as a non-root user: no setpriv (util-linux)"
fi
# --- test.sh around the set-up: what it exports, and a failing part named ------------
# A scratch repository with test.sh, a set-up and two suites that record
# the environment they got, the second failing; cargo a stand-in.
T=$tmp/t
mkdir -p "$T/scripts/test.d"
cp "$SRC/scripts/test.sh" "$T/scripts/"
printf '#!/bin/sh\necho "setup HERD_NO_INSTALL=${HERD_NO_INSTALL:-}" >>"$CALLS"\n' >"$T/scripts/test-setup.sh"
printf '#!/bin/sh\necho "10-a NO_INSTALL=$HERD_NO_INSTALL STRICT=$HERD_TEST_STRICT" >>"$CALLS"\n' >"$T/scripts/test.d/10-a.sh"
printf '#!/bin/sh\necho "20-b" >>"$CALLS"\nexit 3\n' >"$T/scripts/test.d/20-b.sh"
printf '#!/bin/sh\necho "30-c" >>"$CALLS"\n' >"$T/scripts/test.d/30-c.sh"
: >"$tmp/calls"
expect_rc 3 "test.sh, a failing suite" -- env -i PATH="$PATHS" CALLS="$tmp/calls" bash "$T/scripts/test.sh"
[ "$(cat "$tmp/calls")" = "setup HERD_NO_INSTALL=
cargo test --workspace
cargo test --workspace --release
10-a NO_INSTALL=1 STRICT=1
20-b" ] || { cat "$tmp/calls"; fail "test.sh: the set-up first (HERD_NO_INSTALL unset), then cargo test, the suites in order with HERD_NO_INSTALL=1 and, as root, HERD_TEST_STRICT=1, none after the failing one"; }
[[ "$(tail -n1 "$tmp/err")" =~ ^"== FAILED: scripts/test.d/20-b.sh (exit 3, after "[0-9]+" s)"$ ]] ||
    { cat "$tmp/err"; fail "test.sh names the failing part on its last line"; }
ok "test.sh: set-up first, then HERD_NO_INSTALL=1 and HERD_TEST_STRICT=1 for the rest; a failing suite ends it with its status, named on the last line"
echo "$pass passed"
