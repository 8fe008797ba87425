#!/usr/bin/env bash
# Sets this machine up for the tests, once and serially: scripts/test.sh
# runs it before any test starts, and nothing after it installs anything
# (test.sh then exports HERD_NO_INSTALL=1, which vm-run.sh and
# perf-stat.sh obey: they fail naming what is missing instead).
#
#   * as root: the Debian packages listed in scripts/test-packages.txt that
#     are missing (one apt-get update and one apt-get install, each named
#     before it runs), and tracefs mounted at /sys/kernel/tracing;
#   * the nightly toolchain's miri and rust-src (30-miri.sh,
#     31-doc-errors.sh), through rustup;
#   * inferno (perf-stat.sh --record's flame graph), through cargo install;
#   * unless HERD_TEST_QUICK=1: the guest kernel and, for the x2APIC guest,
#     a qemu that emulates it (scripts/test.d/50-vm.sh --prepare).
#
# Without root no package is installed and tracefs is not mounted: what is
# missing is listed, and the tests that need it skip loudly. Exit status 1
# when something could not be set up as root. Run it alone to set a
# machine up for the tests (what it does is said on stderr, "== setup:").
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

# ---------------------------------------------------------------- packages
# The list: the first word of each line, comments and blank lines aside.
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/test-packages.txt | awk '{print $1}')
missing=()
for p in "${wanted[@]}"; do
    [ "$(dpkg-query -W -f '${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ "${#missing[@]}" = 0 ]; then
    say "Debian packages: all ${#wanted[@]} of scripts/test-packages.txt are installed"
elif [ "$root" = 1 ]; then
    say "Debian packages: installing ${missing[*]} (missing of scripts/test-packages.txt)"
    # apt waits for a dpkg lock another apt holds rather than failing.
    apt_o=(-o DPkg::Lock::Timeout=600)
    apt-get "${apt_o[@]}" update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get "${apt_o[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        die "apt-get install ${missing[*]} failed"
    say "Debian packages: installed ${missing[*]}"
else
    say "Debian packages: ${missing[*]} missing; not root, so not installing them (the tests that need them skip loudly)"
fi

# ---------------------------------------------------------------- tracefs
if [ -d /sys/kernel/tracing/events ]; then
    say "tracefs: mounted"
elif [ "$root" = 1 ]; then
    say "tracefs: mounting at /sys/kernel/tracing"
    mount -t tracefs nodev /sys/kernel/tracing || die "could not mount tracefs"
else
    say "tracefs: not mounted; not root, so not mounting it (the perf tests skip loudly)"
fi

# ---------------------------------------------------------------- rust tools
if ! command -v rustup >/dev/null 2>&1; then
    say "rustup: not installed, so no nightly toolchain for miri and the doc-error checks (they skip loudly)"
elif ! rustup toolchain list | grep -q '^nightly'; then
    say "rust: installing the nightly toolchain with miri and rust-src (30-miri.sh, 31-doc-errors.sh)"
    rustup toolchain install nightly --profile minimal --component miri,rust-src >&2 ||
        failed "rustup toolchain install nightly failed"
else
    comps=$(rustup +nightly component list --installed)
    need=()
    grep -q '^miri' <<<"$comps" || need+=(miri)
    grep -q '^rust-src' <<<"$comps" || need+=(rust-src)
    if [ "${#need[@]}" -gt 0 ]; then
        say "rust: adding ${need[*]} to the nightly toolchain (30-miri.sh)"
        rustup +nightly component add "${need[@]}" >&2 || failed "rustup component add ${need[*]} failed"
    else
        say "rust: nightly with miri and rust-src"
    fi
fi
if command -v inferno-flamegraph >/dev/null 2>&1 && command -v inferno-collapse-perf >/dev/null 2>&1; then
    say "inferno: installed"
else
    say "inferno: installing (cargo install inferno --locked) for perf-stat.sh --record"
    cargo install -q inferno --locked >&2 || failed "cargo install inferno failed"
fi

# ---------------------------------------------------------------- guest
if [ "${HERD_TEST_QUICK:-0}" = 1 ]; then
    say "VM guest: not prepared (HERD_TEST_QUICK=1 leaves the guest tests out)"
elif [ "$root" = 1 ] || { command -v qemu-system-x86_64 && command -v busybox && command -v cpio; } >/dev/null 2>&1; then
    say "VM guest: kernel and qemu (scripts/test.d/50-vm.sh --prepare)"
    bash scripts/test.d/50-vm.sh --prepare || failed "could not prepare the VM guest (kernel, qemu)"
else
    say "VM guest: qemu, busybox or cpio missing; not root, so not preparing the guest (50-vm.sh skips loudly)"
fi
