# The one way a suite (or a part of one) says it cannot run here, sourced
# by the suites in scripts/test.d/ (herd's Rust tests have the same rule in
# herd/tests/common/skip.rs, exitq's in exitq/tests/skip_util/).
#
# skip WHY: prints "SKIPPED: WHY" and returns, so the caller goes on (or
# exits 0 for a whole suite). Under the test command as root
# (scripts/test.sh exports HERD_TEST_STRICT=1 after setting up every
# capability the tests need) a skip would be a check passing by not
# running: it prints "FAIL: WHY" and exits 1 instead.
# shellcheck shell=bash
skip() {
    if [ "${HERD_TEST_STRICT:-0}" = 1 ]; then
        echo "FAIL: $*: under the test command as root (HERD_TEST_STRICT=1) every capability is set up, so this must run, not skip" >&2
        exit 1
    fi
    echo "SKIPPED: $*" >&2
}

# need CMD WHY: true if CMD is on the PATH; else `skip "WHY"` and false, so
# a whole suite says `need python3 "the ... check needs python3" || exit 0`.
need() {
    if command -v "$1" >/dev/null 2>&1; then
        return 0
    fi
    skip "$2"
    return 1
}
