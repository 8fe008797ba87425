#!/usr/bin/env bash
# Sets this machine up for the tests, once and serially: scripts/test.sh
# runs it before any test starts, and nothing after it installs anything
# (test.sh then exports HERD_NO_INSTALL=1, which vm-run.sh and
# perf-stat.sh obey: they fail naming what is missing instead).
#
# As root (as CI runs it):
#   * the Debian packages listed in scripts/test-packages.txt that are
#     missing (one apt-get update and one apt-get install, each named
#     before it runs), and tracefs mounted at /sys/kernel/tracing;
#   * the nightly toolchain's miri and rust-src (30-miri.sh,
#     31-doc-errors.sh), through rustup;
#   * inferno (perf-stat.sh --record's flame graph), through cargo install;
#   * unless HERD_TEST_QUICK=1: the guest kernel and, for the x2APIC guest,
#     a qemu that emulates it (scripts/test.d/50-vm.sh --prepare).
# Any step that fails stops it, exit 1, naming the step: the test command
# as root runs every test, so each must have what it needs.
#
# Without root nothing is installed, fetched or mounted: each missing
# thing is named with the command that would set it up, and the tests
# that need it skip loudly.
#
# apt: another process holding apt's lock (a fresh machine's apt-daily, a
# second apt-get) is waited for, said, up to HERD_SETUP_APT_WAIT seconds
# (default 600, as long as apt itself waits for dpkg's lock; apt-get update
# does not wait at all); package lists that could not be fetched (no
# network) stop it before the install, naming that. An install that dpkg
# left unfinished (an interrupted set-up) is finished first (dpkg
# --configure -a, as apt asks) and the install tried again.
#
# Exit status: 0 set up (or, without root, said what is missing); 1 a step
# failed as root, or cargo is not on PATH; 2 scripts/test-packages.txt has
# a line that is not one package name (the line is named), or
# HERD_SETUP_APT_WAIT is not a number. Run it alone to
# set a machine up for the tests (what it does is said on stderr,
# "== setup:").
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== setup: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
root=0
[ "$(id -u)" = 0 ] && root=1
# A step that failed: fatal as root (the test command as root runs every
# test, so each must have what it needs); otherwise said, and the tests
# that need it skip loudly.
failed() {
    [ "$root" = 0 ] || die "$*"
    say "warning: $*; the tests that need it will skip"
}
# Without root: what is missing, and the command that would set it up.
not_root() { say "$1: not root, so not setting it up (the tests that need it skip loudly); to do it: $2"; }

# ---------------------------------------------------------------- cargo
# The tests are cargo's: without it on PATH nothing can run (a rustup
# installation's ~/.cargo/bin is often missing from a CI shell's PATH).
if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "${HOME:-/nonexistent}/.cargo/bin/cargo" ]; then
        die "cargo is not on PATH, but $HOME/.cargo/bin/cargo exists: add $HOME/.cargo/bin to PATH (. \"$HOME/.cargo/env\") and run this again"
    fi
    die "cargo is not on PATH: install Rust (rustup, https://rustup.rs) and run this again"
fi

# ---------------------------------------------------------------- packages
# The list: one Debian package name a line, then a comment; blank and
# comment lines aside. Anything else is refused, naming the line: a second
# word used to be dropped without a word, and a stray comma or capital
# reached apt-get as part of a name.
list=scripts/test-packages.txt
wanted=()
n=0
while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    words=${line%%#*}
    read -r -a w <<<"$words" || true
    [ "${#w[@]}" = 0 ] && continue
    if [ "${#w[@]}" != 1 ] || [[ ! ${w[0]} =~ ^[a-z0-9][a-z0-9+.-]+$ ]]; then
        say "error: $list:$n: '$line' is not one Debian package name (one name a line, then '# who needs it')"
        exit 2
    fi
    wanted+=("${w[0]}")
done <"$list"
debian=1
# A system without Debian's package tools: said (as root, an error), not
# taken for a list of missing packages that apt-get, not found, "failed" to
# fetch.
if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    failed "no dpkg-query or apt-get: not a Debian system, so the packages of $list cannot be checked or installed (install them by hand: ${wanted[*]})"
    debian=0
fi
missing=()
for p in ${wanted[@]+"${wanted[@]}"}; do
    [ "$debian" = 1 ] || break
    [ "$(dpkg-query -W -f '${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done

# apt_get ARGS...: apt-get ARGS, stdout dropped, stderr shown as it comes
# (apt's own "Waiting for cache lock" while it waits for dpkg's lock) and
# kept in $apt_err; while it fails because another process holds one of
# apt's locks (apt-get update fails at once then: "Could not get lock ...
# It is held by process N (NAME)"), that is said once and it is tried
# again every 2 s, up to $apt_wait s.
apt_wait=${HERD_SETUP_APT_WAIT:-600}
[[ $apt_wait =~ ^[0-9]{1,6}$ ]] || { say "error: HERD_SETUP_APT_WAIT must be a number of seconds, not '$apt_wait'"; exit 2; }
apt_wait=$((10#$apt_wait))
apt_err=$(mktemp)
apt_rc=$(mktemp)
trap 'rm -f "$apt_err" "$apt_rc"' EXIT
apt_get() {
    local t0=$SECONDS rc lock said=0
    while :; do
        # The lock errors are left out of what is shown: said once below.
        { LC_ALL=C apt-get -o DPkg::Lock::Timeout="$apt_wait" "$@" 2>&1 >/dev/null; echo $? >"$apt_rc"; } |
            tee "$apt_err" | { grep --line-buffered -v -e '^E: Could not get lock' -e '^E: Unable to lock' >&2 || true; }
        rc=$(cat "$apt_rc")
        lock=$(grep -m1 '^E: Could not get lock' "$apt_err" || true)
        [ "$rc" != 0 ] && [ -n "$lock" ] || return "$rc"
        if [ $((SECONDS - t0)) -ge "$apt_wait" ]; then
            say "apt-get $1: apt's lock still held after ${apt_wait}s (HERD_SETUP_APT_WAIT): ${lock#E: }"
            return "$rc"
        fi
        [ "$said" = 1 ] || say "apt-get $1: waiting for apt's lock, up to ${apt_wait}s: ${lock#E: }"
        said=1
        sleep 2
    done
}

if [ "$debian" = 0 ]; then
    :
elif [ "${#missing[@]}" = 0 ]; then
    say "Debian packages: all ${#wanted[@]} of $list are installed"
elif [ "$root" = 1 ]; then
    say "Debian packages: installing ${missing[*]} (missing of $list)"
    # --error-on=any: lists that could not be fetched (no network) are an
    # error, not a warning apt-get update exits 0 with, to be found as
    # "Unable to locate package" by the install.
    if ! apt_get update -qq --error-on=any; then
        grep -q 'Failed to fetch' "$apt_err" &&
            die "apt-get update failed: the package lists could not be fetched (apt's messages above; no network, or a proxy or DNS problem?)"
        die "apt-get update failed (apt's messages above)"
    fi
    install=(install -y -qq --no-install-recommends "${missing[@]}")
    if ! DEBIAN_FRONTEND=noninteractive apt_get "${install[@]}"; then
        grep -q 'dpkg --configure -a' "$apt_err" || die "apt-get install ${missing[*]} failed"
        say "dpkg: an earlier install was interrupted; finishing it (dpkg --configure -a), then the install again"
        DEBIAN_FRONTEND=noninteractive dpkg --configure -a >&2 || die "dpkg --configure -a failed"
        DEBIAN_FRONTEND=noninteractive apt_get "${install[@]}" || die "apt-get install ${missing[*]} failed"
    fi
    say "Debian packages: installed ${missing[*]}"
else
    not_root "Debian packages ${missing[*]} (of $list) are missing" "apt-get install --no-install-recommends ${missing[*]}"
fi

# ---------------------------------------------------------------- tracefs
if [ -d /sys/kernel/tracing/events ]; then
    say "tracefs: mounted"
elif [ "$root" = 1 ]; then
    say "tracefs: mounting at /sys/kernel/tracing"
    mount -t tracefs nodev /sys/kernel/tracing || die "could not mount tracefs at /sys/kernel/tracing (mount said why above)"
else
    not_root "tracefs is not mounted at /sys/kernel/tracing" "mount -t tracefs nodev /sys/kernel/tracing"
fi

# ---------------------------------------------------------------- rust tools
nightly=rustup
command -v rustup >/dev/null 2>&1 || nightly=none
if [ "$nightly" = rustup ]; then
    toolchains=$(rustup toolchain list) || failed "rustup toolchain list failed"
    if grep -q '^nightly' <<<"$toolchains"; then
        # A nightly that cannot list its components (an install cut short)
        # used to end the set-up here without a word (set -e).
        comps=$(rustup +nightly component list --installed) ||
            failed "rustup +nightly component list failed (a broken nightly toolchain? rustup toolchain uninstall nightly, then run this again)"
        need=()
        grep -q '^miri' <<<"${comps:-}" || need+=(miri)
        grep -q '^rust-src' <<<"${comps:-}" || need+=(rust-src)
        nightly=${need[*]:-ok}
    else
        nightly=missing
    fi
fi
case $nightly in
    ok) say "rust: nightly with miri and rust-src" ;;
    none) failed "rustup is not installed, so no nightly toolchain for miri and the doc-error checks (30-miri.sh, 31-doc-errors.sh)" ;;
    missing)
        if [ "$root" = 1 ]; then
            say "rust: installing the nightly toolchain with miri and rust-src (30-miri.sh, 31-doc-errors.sh)"
            rustup toolchain install nightly --profile minimal --component miri,rust-src >&2 ||
                failed "rustup toolchain install nightly failed"
        else
            not_root "rust: no nightly toolchain (30-miri.sh, 31-doc-errors.sh)" "rustup toolchain install nightly --profile minimal --component miri,rust-src"
        fi ;;
    *)
        if [ "$root" = 1 ]; then
            say "rust: adding $nightly to the nightly toolchain (30-miri.sh)"
            # shellcheck disable=SC2086 # the component names, word-split
            rustup +nightly component add $nightly >&2 || failed "rustup component add $nightly failed"
        else
            not_root "rust: the nightly toolchain lacks $nightly (30-miri.sh)" "rustup +nightly component add $nightly"
        fi ;;
esac
if command -v inferno-flamegraph >/dev/null 2>&1 && command -v inferno-collapse-perf >/dev/null 2>&1; then
    say "inferno: installed"
elif [ "$root" = 1 ]; then
    say "inferno: installing (cargo install inferno --locked) for perf-stat.sh --record"
    cargo install -q inferno --locked >&2 || failed "cargo install inferno failed"
else
    not_root "inferno (perf-stat.sh --record) is not installed" "cargo install inferno --locked"
fi

# ---------------------------------------------------------------- guest
if [ "${HERD_TEST_QUICK:-0}" = 1 ]; then
    say "VM guest: not prepared (HERD_TEST_QUICK=1 leaves the guest tests out)"
elif [ "$root" = 1 ]; then
    say "VM guest: kernel and qemu (scripts/test.d/50-vm.sh --prepare)"
    # HERD_NO_INSTALL=1 is test.sh's word to what runs after the set-up;
    # left in the environment of a set-up it used to refuse this fetch
    # alone (the packages above were installed), exit 1.
    env -u HERD_NO_INSTALL bash scripts/test.d/50-vm.sh --prepare || failed "could not prepare the VM guest (kernel, qemu)"
else
    not_root "VM guest: the guest kernel and the x2APIC qemu are not fetched" "bash scripts/test.d/50-vm.sh --prepare"
fi
