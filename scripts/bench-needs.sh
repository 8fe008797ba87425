# shellcheck shell=bash
# Sourced by the benchmark scripts (bench-defer-free.sh, bench-churn.sh):
# what they need from the machine, set up when run as root (unless
# HERD_NO_INSTALL=1, as under the test command: then nothing is installed),
# else refused with the command that sets it up (exit 3). Each function takes the
# calling script's name for its messages.

# liburcu's headers and libraries (liburcu-dev), for the C peers.
need_urcu() {
    [[ -e /usr/include/x86_64-linux-gnu/urcu/urcu-memb.h || -e /usr/include/urcu/urcu-memb.h ]] && return 0
    if [[ "$(id -u)" = 0 && "${HERD_NO_INSTALL:-0}" != 1 ]]; then
        echo "$1: installing liburcu-dev" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq liburcu-dev >/dev/null || {
            echo "$1: apt-get install liburcu-dev failed (try apt-get update first)" >&2
            exit 3
        }
    else
        echo "$1: liburcu-dev is not installed (apt-get install liburcu-dev)" >&2
        exit 3
    fi
}

# A mounted tracefs, for perf's syscall and lock tracepoints.
need_tracefs() {
    [[ -e /sys/kernel/tracing/events/syscalls/sys_enter_futex/id ]] && return 0
    if [[ "$(id -u)" = 0 ]] && mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null \
        && [[ -e /sys/kernel/tracing/events/syscalls/sys_enter_futex/id ]]; then
        echo "$1: mounted tracefs on /sys/kernel/tracing" >&2
    else
        echo "$1: tracefs is not mounted (as root: mount -t tracefs nodev /sys/kernel/tracing)" >&2
        exit 3
    fi
}
