#!/bin/busybox sh
# herd-vm guest init (scripts/vm-run.sh packs it as the initramfs's /init):
# mount, bring the CPUs not booted online, run /vm/cmd, send /result over
# ttyS1, power off. busybox's sh and tools only.
#
# What vm-run.sh puts beside it:
#   /vm/cmd        the command (`herd ARGS` quoted, or `sh /vm/script`)
#   /vm/env        `export NAME=VALUE` lines (--env)
#   /vm/late       "FIRST TOTAL" with --boot-cpus below --cpus: bring CPUs
#                  FIRST..TOTAL-1 online through sysfs
#   /vm/trace-online  present with --trace-online: trace the cpuhp states
#                  meanwhile, summed up by /vm/online-summary.awk
# What it sends back, a tar on ttyS1 (a serial port carrying nothing else):
#   /result/stdout the command's stdout; /result/status rc=, bytes= and
#   sha256= of it; /result/out/ the files written to $HERD_VM_OUT.
# Its progress lines on the console start with "herd-vm: ": vm-run.sh
# relays "herd-vm: online: " ones and the command's stderr between the
# "---- output begins/ends" markers, and reads the times of "guest up in"
# and "exit status ... after".
# shellcheck shell=dash
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tracefs tracefs /sys/kernel/tracing || echo "herd-vm: warning: could not mount tracefs"
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
# cgroup v2 as on a systemd host, with a controller enabled in the root as
# systemd does: herd's process-scope counters count through a cgroup of
# their own, and the 6.1 kernel gives new cgroups no perf_event state (perf
# returns ENOENT) until some controller was enabled once.
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "herd-vm: warning: could not mount cgroup2"
echo +pids >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
    echo "herd-vm: warning: could not enable the pids controller"
mkdir -p /dev/shm /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t devpts devpts /dev/pts
hostname herd-vm
ip link set lo up 2>/dev/null
ulimit -c 0
# shellcheck source=/dev/null # written by vm-run.sh
. /vm/env
export HERD_VM_OUT=/result/out HOME=/root TMPDIR=/tmp
mkdir -p /root
cd "$HERD_VM_OUT" || echo "herd-vm: error: cannot enter $HERD_VM_OUT"
# --boot-cpus: the kernel booted the first of the vCPUs (maxcpus=); bring
# the others online one by one (the kernel serializes CPU bring-up).
if [ -r /vm/late ]; then
    read -r first total </vm/late
    read -r t0 _ </proc/uptime
    echo "herd-vm: online: $(grep -c ^processor /proc/cpuinfo) CPUs up at boot (maxcpus=$first); bringing CPUs $first-$((total - 1)) online through sysfs"
    if [ -r /vm/trace-online ]; then
        # --trace-online: the cpuhp tracepoints, on the global trace clock
        # (the states of one CPU run on the CPU bringing it up and on the
        # CPU itself), read as they come so no buffer overflows.
        tr=/sys/kernel/tracing
        echo global >"$tr"/trace_clock && echo 512 >"$tr"/buffer_size_kb &&
            echo 1 >"$tr"/events/cpuhp/enable ||
            echo "herd-vm: online: warning: could not enable the cpuhp tracepoints"
        cat "$tr"/trace_pipe >"$HERD_VM_OUT/online-trace.txt" &
        trace_pid=$!
    fi
    n=0
    failed=0
    for c in $(seq "$first" $((total - 1))); do
        f=/sys/devices/system/cpu/cpu$c/online
        # Shell builtins only: this runs per CPU, and at 512 vCPUs under
        # TCG the two forks of a `$(cat "$f")` cost about 0.6 s per CPU
        # (docs/guest.md).
        state=
        [ -e "$f" ] && read -r state <"$f"
        if [ "$state" = 0 ] && echo 1 >"$f"; then
            n=$((n + 1))
            if [ $((n % 64)) = 0 ]; then
                read -r t _ </proc/uptime
                echo "herd-vm: online: $n CPUs brought online after $(awk -v a="$t0" -v b="$t" 'BEGIN {printf "%.1f", b - a}')s"
            fi
        else
            failed=$((failed + 1))
            echo "herd-vm: online: warning: could not bring CPU $c online"
        fi
    done
    read -r t1 _ </proc/uptime
    echo "herd-vm: online: brought $n CPUs online in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')s of guest time ($failed failed); online: $(cat /sys/devices/system/cpu/online)"
fi
if [ -n "${trace_pid:-}" ]; then
    echo 0 >"$tr"/events/cpuhp/enable
    sleep 1
    kill "$trace_pid"
    wait "$trace_pid" 2>/dev/null
    grep -v '^#' "$tr"/trace >>"$HERD_VM_OUT/online-trace.txt"
    lost=$(cat "$tr"/per_cpu/cpu*/stats 2>/dev/null | awk '/^overrun:/ {s += $2} END {print s + 0}')
    # The summary (scripts/vm/online-summary.awk): per hotplug state, its
    # callback's time summed over the CPUs, and its mean for the first and
    # the last CPUs brought online.
    awk -v lost="$lost" -f /vm/online-summary.awk "$HERD_VM_OUT/online-trace.txt"
fi
read -r up _ </proc/uptime
nodes=0
for d in /sys/devices/system/node/node[0-9]*; do [ -d "$d" ] && nodes=$((nodes + 1)); done
echo "herd-vm: guest up in ${up}s with $(grep -c ^processor /proc/cpuinfo) CPUs in $nodes NUMA node(s); running: $(cat /vm/cmd)"
echo "herd-vm: ---- output begins"
sh /vm/cmd </dev/null >/result/stdout
rc=$?
echo "herd-vm: ---- output ends"
read -r up _ </proc/uptime
echo "herd-vm: exit status $rc after ${up}s of guest uptime"
bytes=$(wc -c </result/stdout)
sum=$(sha256sum </result/stdout)
printf 'rc=%s\nbytes=%s\nsha256=%s\n' "$rc" "$bytes" "${sum%% *}" >/result/status
stty -F /dev/ttyS1 raw -echo 2>/dev/null
tar -cf /dev/ttyS1 -C /result . || echo "herd-vm: error: could not send the result over ttyS1"
sync
poweroff -f
# Not reached; if poweroff fails the kernel panics on init's exit (panic=-1).
