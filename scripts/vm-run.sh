#!/usr/bin/env bash
# Run herd inside a qemu guest with many vCPUs (default 128).
#
# The host may have 2 CPUs; a guest kernel can still have 128. Under
# single-threaded TCG all vCPUs share one host thread, so guest timings say
# nothing about real contention. What a guest run proves is that every
# many-CPU code path (CPU lists, affinity masks, per-CPU counters, placement)
# works on a real kernel with that many CPUs.
#
# How: the herd binary, its shared libraries (ldd) plus libgcc_s.so.1 (glibc
# dlopens it at the first pthread_cancel; ldd does not list it for every
# binary) and busybox are packed into an initramfs (cpio newc, gzip). The
# guest's init mounts proc, sysfs, devtmpfs, tracefs, debugfs and cgroup2, runs
# `herd ARGS...` (or a script), and sends the results back over a second
# serial port that carries nothing else: a tar of /result holding herd's
# stdout, a status file (exit code, byte count, sha256) and any files written
# to $HERD_VM_OUT. The host checks size and checksum, prints the stdout byte
# for byte, and exits with herd's exit code. herd's stderr goes to the guest
# console (first serial port) and is relayed live.
#
# Run with --help for options. Exit status: herd's own exit status; 2 usage
# error; 124 the guest did not finish within --timeout; 125 the VM could not
# be set up or produced no (or a corrupt) result; 130 interrupted.
set -euo pipefail

prog=vm-run.sh
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    cat <<EOF
Usage: scripts/$prog [OPTIONS] [--] [HERD_ARGS...]

Boot a qemu guest with N vCPUs and run \`herd HERD_ARGS...\` inside it. herd's
stdout (including --json) comes back intact on this script's stdout, herd's
stderr is shown live, and the script exits with herd's exit status.

Options:
  --cpus N           guest vCPUs, 1-255 (default: \$HERD_VM_CPUS or 128)
  --mem SIZE         guest memory in qemu syntax, e.g. 2G or 1536M
                     (default: \$HERD_VM_MEM or 512M + 8M per vCPU, >= 1G)
  --numa NODES       spread vCPUs and memory evenly over NODES NUMA nodes
                     (default 1)
  --timeout SECS     give up after SECS seconds of wall time, print the guest
                     console's tail and exit 124 (default: \$HERD_VM_TIMEOUT
                     or 900)
  --kernel PATH      kernel image to boot (default: \$HERD_VM_KERNEL, else
                     Debian's cloud kernel, fetched once with apt-get download
                     into \$HERD_VM_CACHE, default ~/.cache/herd-vm)
  --herd PATH        binary to run as \`herd\` (default: cargo build --release
                     and target/release/herd)
  --script FILE      run FILE with the guest's sh instead of \`herd ARGS\`;
                     \`herd\` is on PATH, the working directory is
                     \$HERD_VM_OUT, and the script's stdout comes back
  --out-dir DIR      copy the files written to \$HERD_VM_OUT in the guest
                     (also herd's working directory) to DIR on the host
  -e, --env NAME=VALUE
                     set an environment variable for herd in the guest
                     (repeatable)
  --qemu-arg ARG     extra qemu argument (repeatable)
  -v, --verbose      show the whole guest console live (kernel messages too)
  -q, --quiet        do not relay herd's stderr live (still shown on failure)
  --keep             keep the work directory (initramfs, console log); on
                     failure the console log is always kept
  --prepare          only install the packages and fetch the kernel, print
                     the kernel's path and exit (no boot)
  -h, --help         this help

Examples:
  scripts/$prog -- storm --waves 10 --per-wave 128 --pin round-robin
  scripts/$prog --cpus 16 -- env --json > env.json
  HERD_VM_CPUS=128 bash scripts/test.d/50-vm.sh    # the guest tests at 128

The kernel is booted with -accel tcg,thread=single: nested KVM is not
available here and multi-threaded TCG with 128 vCPUs is far slower on a
2-CPU host. Packages needed (installed automatically when run as root):
qemu-system-x86, busybox-static, cpio, and apt for the kernel.

Environment: HERD_VM_CPUS, HERD_VM_MEM, HERD_VM_TIMEOUT, HERD_VM_KERNEL
(defaults of the options above), HERD_VM_CACHE (kernel cache directory),
HERD_VM_OMIT_LIBGCC=1 (tests only: leave libgcc_s.so.1 out to show why it
is needed).

Exit status: herd's exit status; 2 usage error; 124 timeout; 125 VM setup
failed or no valid result came back; 130 interrupted.
EOF
}

say() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { say "error: $*"; exit 125; }
usage_error() {
    say "error: $*"
    say "try '$prog --help'"
    exit 2
}

# ---------------------------------------------------------------- options
cpus=${HERD_VM_CPUS:-128}
mem=${HERD_VM_MEM:-}
numa=1
timeout_s=${HERD_VM_TIMEOUT:-900}
kernel=${HERD_VM_KERNEL:-}
herd_bin=
script=
out_dir=
verbose=0
quiet=0
keep=0
prepare=0
envs=()
qemu_extra=()
home=${HOME:-$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6)}
cache=${HERD_VM_CACHE:-${XDG_CACHE_HOME:-${home:-/tmp}/.cache}/herd-vm}

need_arg() { [ "$#" -ge 2 ] || usage_error "$1 needs a value"; }
while [ "$#" -gt 0 ]; do
    case $1 in
        --cpus) need_arg "$@"; cpus=$2; shift 2 ;;
        --cpus=*) cpus=${1#*=}; shift ;;
        --mem) need_arg "$@"; mem=$2; shift 2 ;;
        --mem=*) mem=${1#*=}; shift ;;
        --numa) need_arg "$@"; numa=$2; shift 2 ;;
        --numa=*) numa=${1#*=}; shift ;;
        --timeout) need_arg "$@"; timeout_s=$2; shift 2 ;;
        --timeout=*) timeout_s=${1#*=}; shift ;;
        --kernel) need_arg "$@"; kernel=$2; shift 2 ;;
        --kernel=*) kernel=${1#*=}; shift ;;
        --herd) need_arg "$@"; herd_bin=$2; shift 2 ;;
        --herd=*) herd_bin=${1#*=}; shift ;;
        --script) need_arg "$@"; script=$2; shift 2 ;;
        --script=*) script=${1#*=}; shift ;;
        --out-dir) need_arg "$@"; out_dir=$2; shift 2 ;;
        --out-dir=*) out_dir=${1#*=}; shift ;;
        -e | --env) need_arg "$@"; envs+=("$2"); shift 2 ;;
        --env=*) envs+=("${1#*=}"); shift ;;
        --qemu-arg) need_arg "$@"; qemu_extra+=("$2"); shift 2 ;;
        --qemu-arg=*) qemu_extra+=("${1#*=}"); shift ;;
        -v | --verbose) verbose=1; shift ;;
        -q | --quiet) quiet=1; shift ;;
        --keep) keep=1; shift ;;
        --prepare) prepare=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) usage_error "unknown option '$1' (herd's own flags go after --)" ;;
        *) break ;;
    esac
done
herd_args=("$@")

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_uint "$cpus" && [ "$cpus" -ge 1 ] && [ "$cpus" -le 255 ] ||
    usage_error "--cpus must be an integer in 1-255 (got '$cpus'; qemu's pc machine has xAPIC ids below 255)"
is_uint "$numa" && [ "$numa" -ge 1 ] && [ "$numa" -le "$cpus" ] ||
    usage_error "--numa must be an integer in 1-$cpus (got '$numa')"
is_uint "$timeout_s" && [ "$timeout_s" -ge 1 ] ||
    usage_error "--timeout must be a positive number of seconds (got '$timeout_s')"
if [ -z "$mem" ]; then
    mem_mb=$((512 + 8 * cpus))
    [ "$mem_mb" -ge 1024 ] || mem_mb=1024
else
    case $mem in
        *[0-9]G | *[0-9]g) n=${mem%?}; is_uint "$n" && mem_mb=$((n * 1024)) ;;
        *[0-9]M | *[0-9]m) n=${mem%?}; is_uint "$n" && mem_mb=$n ;;
        *) is_uint "$mem" && mem_mb=$mem ;;
    esac
    [ -n "${mem_mb:-}" ] && [ "$mem_mb" -ge 128 ] ||
        usage_error "--mem must be a size like 2G or 1536M, at least 128M (got '$mem')"
fi
[ "$((mem_mb % numa))" = 0 ] || mem_mb=$((mem_mb - mem_mb % numa))
if [ -n "$script" ]; then
    [ -f "$script" ] && [ -r "$script" ] || usage_error "--script: cannot read '$script'"
    [ "${#herd_args[@]}" = 0 ] || usage_error "--script and herd arguments exclude each other (put the herd commands in the script)"
fi
for kv in ${envs[@]+"${envs[@]}"}; do
    [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || usage_error "--env wants NAME=VALUE (got '$kv')"
done
[ -z "$kernel" ] || [ -r "$kernel" ] || usage_error "--kernel: cannot read '$kernel'"
[ -z "$herd_bin" ] || [ -x "$herd_bin" ] || usage_error "--herd: '$herd_bin' is not an executable file"

# ---------------------------------------------------------------- host tools
# command -> Debian package
declare -A pkg_of=(
    [qemu-system-x86_64]=qemu-system-x86
    [busybox]=busybox-static
    [cpio]=cpio
    [gzip]=gzip
    [ldd]=libc-bin
    [dpkg-deb]=dpkg
    [apt-get]=apt
)
apt_updated=0
apt_update() {
    [ "$apt_updated" = 1 ] && return 0
    say "apt-get update"
    apt-get update -qq >&2 || die "apt-get update failed"
    apt_updated=1
}
ensure_tools() {
    local missing=() pkgs=() t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || { missing+=("$t"); pkgs+=("${pkg_of[$t]}"); }
    done
    [ "${#missing[@]}" = 0 ] && return 0
    if [ "$(id -u)" = 0 ]; then
        say "installing ${pkgs[*]} (for ${missing[*]})"
        apt_update
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2 ||
            die "apt-get install ${pkgs[*]} failed"
    else
        die "missing ${missing[*]}: install the Debian package(s) ${pkgs[*]} (as root: apt-get install ${pkgs[*]}), or run this script as root"
    fi
}
ensure_tools qemu-system-x86_64 busybox cpio gzip ldd

# ---------------------------------------------------------------- kernel
# Debian's cloud kernel has what an initramfs-only boot needs built in: the
# 8250 serial console, devtmpfs, gzip initrd, tracefs, perf events, and the
# lock:contention_begin/end tracepoints.
fetch_kernel() {
    ensure_tools apt-get dpkg-deb
    mkdir -p "$cache"
    exec 9>"$cache/.lock"
    flock 9
    local found
    found=$(find "$cache" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
    if [ -n "$found" ]; then
        exec 9>&-
        printf '%s\n' "$found"
        return 0
    fi
    local meta=linux-image-cloud-amd64 pkg
    pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
    if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
        apt_update
        pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
    fi
    [ -n "$pkg" ] || die "cannot resolve $meta with apt-cache (run 'apt-get update' as root, or pass --kernel PATH)"
    local dl
    dl=$(mktemp -d "$cache/dl.XXXXXX")
    chmod 755 "$dl"
    say "downloading kernel package $pkg into $cache (once)"
    (cd "$dl" && apt-get download -o APT::Sandbox::User=root "$pkg" >&2) ||
        { rm -rf "$dl"; die "apt-get download $pkg failed (pass --kernel PATH to use another kernel)"; }
    dpkg-deb -x "$dl"/*.deb "$dl/x" || { rm -rf "$dl"; die "dpkg-deb -x failed on $pkg"; }
    local img
    img=$(find "$dl/x/boot" -name 'vmlinuz-*' | head -n1)
    [ -n "$img" ] || { rm -rf "$dl"; die "$pkg holds no /boot/vmlinuz-*"; }
    cp "$dl"/x/boot/config-* "$cache/" 2>/dev/null || true
    mv "$img" "$cache/"
    rm -rf "$dl"
    exec 9>&-
    printf '%s/%s\n' "$cache" "$(basename "$img")"
}
if [ -z "$kernel" ]; then
    kernel=$(fetch_kernel)
fi
if [ "$prepare" = 1 ]; then
    printf '%s\n' "$kernel"
    exit 0
fi

# ---------------------------------------------------------------- herd
if [ -z "$herd_bin" ]; then
    say "cargo build --release -p herd"
    (cd "$repo" && cargo build --release -q -p herd --bin herd >&2) || die "cargo build failed"
    herd_bin=${CARGO_TARGET_DIR:-$repo/target}/release/herd
    [ -x "$herd_bin" ] || die "built, but $herd_bin is missing"
fi

# ---------------------------------------------------------------- initramfs
work=$(mktemp -d "${TMPDIR:-/tmp}/herd-vm.XXXXXX")
qemu_pid=
relay_pid=
keep_log=0
cleanup() {
    [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null
    [ -n "$qemu_pid" ] && kill -KILL "$qemu_pid" 2>/dev/null
    if [ "$keep" = 1 ]; then
        say "work directory kept: $work"
    elif [ "$keep_log" = 1 ]; then
        rm -rf "$work/root" "$work/initrd.gz"
        say "guest console log kept: $work/console.log"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp,etc,vm,result/out,lib/x86_64-linux-gnu,lib64,usr/lib,usr/bin}
ln -s ../lib/x86_64-linux-gnu "$root/usr/lib/x86_64-linux-gnu"

# Copy a file to the same path inside the initramfs, following symlinks.
add_file() {
    local src=$1 dst=$root$1
    [ -e "$dst" ] && return 0
    mkdir -p "$(dirname "$dst")"
    cp -L "$src" "$dst"
}
# Add the shared libraries that ldd lists for a binary (none for static ones).
add_libs() {
    local bin=$1 line path
    if ! ldd_out=$(ldd "$bin" 2>&1); then
        case $ldd_out in
            *"not a dynamic executable"* | *"statically linked"*) return 0 ;;
            *) die "ldd $bin: $ldd_out" ;;
        esac
    fi
    while IFS= read -r line; do
        case $line in
            *"=> not found"*) die "ldd $bin: ${line# } (library missing on the host)" ;;
            *"=> /"*) path=${line#*=> }; path=${path%% (*} ;;
            [[:space:]]/*) path=${line#"${line%%[![:space:]]*}"}; path=${path%% (*} ;;
            *) continue ;;
        esac
        add_file "$path"
    done <<<"$ldd_out"
}
# glibc dlopens libgcc_s.so.1 for the unwinder at the first pthread_cancel
# (or pthread_exit); without it the process aborts ("libgcc_s.so.1 must be
# installed for pthread_cancel to work", SIGABRT). ldd lists it only when
# the binary links it directly (Rust binaries do; a C program using
# pthread_cancel does not), so it is always added here. HERD_VM_OMIT_LIBGCC=1
# leaves it out: the tests use it to show the failure this prevents.
find_libgcc() {
    local p
    p=$(ldconfig -p 2>/dev/null | awk '/libgcc_s\.so\.1 .*x86-64/ {print $NF; exit}')
    [ -n "$p" ] && [ -e "$p" ] && { printf '%s\n' "$p"; return 0; }
    for p in /lib/x86_64-linux-gnu/libgcc_s.so.1 /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 /lib64/libgcc_s.so.1 /usr/lib64/libgcc_s.so.1; do
        [ -e "$p" ] && { printf '%s\n' "$p"; return 0; }
    done
    return 1
}

busybox=$(command -v busybox)
cp -L "$busybox" "$root/bin/busybox"
add_libs "$busybox"
cp -L "$herd_bin" "$root/bin/herd"
# Debug info only makes the initramfs bigger and slower to unpack.
command -v strip >/dev/null 2>&1 && strip --strip-debug "$root/bin/herd" 2>/dev/null || true
add_libs "$herd_bin"
if [ "${HERD_VM_OMIT_LIBGCC:-0}" = 1 ]; then
    say "HERD_VM_OMIT_LIBGCC=1: leaving libgcc_s.so.1 out of the guest (a test of the failure it prevents)"
    rm -f "$root"/lib/x86_64-linux-gnu/libgcc_s.so.1 "$root"/lib64/libgcc_s.so.1
else
    libgcc=$(find_libgcc) || die "libgcc_s.so.1 not found on the host (Debian package libgcc-s1); glibc needs it for pthread_cancel"
    mkdir -p "$root/lib/x86_64-linux-gnu"
    cp -L "$libgcc" "$root/lib/x86_64-linux-gnu/libgcc_s.so.1"
    add_libs "$libgcc"
fi

# Shell-quote one word for the guest's sh.
q() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }
{
    for kv in ${envs[@]+"${envs[@]}"}; do
        printf 'export %s=%s\n' "${kv%%=*}" "$(q "${kv#*=}")"
    done
} >"$root/vm/env"
if [ -n "$script" ]; then
    cp "$script" "$root/vm/script"
    printf 'sh /vm/script\n' >"$root/vm/cmd"
    what="script $(basename "$script")"
else
    {
        printf 'herd'
        for a in ${herd_args[@]+"${herd_args[@]}"}; do printf ' %s' "$(q "$a")"; done
        printf '\n'
    } >"$root/vm/cmd"
    what="herd ${herd_args[*]:-}"
fi

cat >"$root/init" <<'EOF'
#!/bin/busybox sh
# herd-vm guest init: mount, run /vm/cmd, send /result over ttyS1, power off.
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
. /vm/env
export HERD_VM_OUT=/result/out HOME=/root TMPDIR=/tmp
mkdir -p /root
cd "$HERD_VM_OUT"
read -r up _ </proc/uptime
echo "herd-vm: guest up in ${up}s with $(grep -c ^processor /proc/cpuinfo) CPUs; running: $(cat /vm/cmd)"
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
EOF
chmod 755 "$root/init"
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$work/initrd.gz" ||
    die "packing the initramfs failed"

# ---------------------------------------------------------------- boot
# quiet: the console carries herd's stderr, kernel errors only. The watchdogs
# are off because one host thread runs all vCPUs: a busy host easily starves
# a vCPU for longer than the soft-lockup and RCU-stall thresholds.
# lpj: every vCPU otherwise calibrates its delay loop at bring-up, which
# fails under TCG and falls back to a slow loop (24 s of a 128-vCPU boot;
# 5 s with lpj). tsc=reliable skips the TSC sync check per CPU. The value
# assumes HZ=250 (Debian); the kernel's udelay uses the TSC anyway.
mhz=$(awk -F': *' '/^cpu MHz/ {printf "%d", $2; exit}' /proc/cpuinfo 2>/dev/null)
[ -n "$mhz" ] && [ "$mhz" -gt 0 ] || mhz=2500
append="console=ttyS0 quiet loglevel=3 panic=-1 nowatchdog nosoftlockup rcupdate.rcu_cpu_stall_suppress=1 tsc=reliable lpj=$((mhz * 4000)) mitigations=off"
[ "$verbose" = 1 ] && append=${append/ quiet loglevel=3/ loglevel=7}
numa_args=()
if [ "$numa" -gt 1 ]; then
    node_mb=$((mem_mb / numa))
    for ((n = 0; n < numa; n++)); do
        first=$((n * cpus / numa))
        last=$(((n + 1) * cpus / numa - 1))
        numa_args+=(-object "memory-backend-ram,id=m$n,size=${node_mb}M"
            -numa "node,nodeid=$n,cpus=$first-$last,memdev=m$n")
    done
fi
console=$work/console.log
result=$work/result.tar
: >"$console"
: >"$result"
# shellcheck disable=SC2054 # the commas are qemu's option syntax
qemu=(qemu-system-x86_64 -nodefaults -no-user-config -machine pc
    -accel tcg,thread=single -smp "$cpus" -m "${mem_mb}M" ${numa_args[@]+"${numa_args[@]}"}
    -kernel "$kernel" -initrd "$work/initrd.gz" -append "$append"
    -display none -monitor none
    -serial "file:$console"
    -chardev "file,id=result,path=$result" -serial chardev:result
    -no-reboot ${qemu_extra[@]+"${qemu_extra[@]}"})

initrd_kb=$(($(stat -c %s "$work/initrd.gz") / 1024))
say "booting $cpus vCPUs, ${mem_mb}M$([ "$numa" -gt 1 ] && echo ", $numa NUMA nodes"), kernel $(basename "$kernel"), initramfs ${initrd_kb}K; running: $what"
start=$(date +%s)
"${qemu[@]}" </dev/null >"$work/qemu.out" 2>&1 &
qemu_pid=$!

# Relay the console: all of it with --verbose, else only herd's output
# between the init's markers.
if [ "$quiet" = 0 ]; then
    if [ "$verbose" = 1 ]; then
        tail -n +1 -F --pid="$qemu_pid" "$console" 2>/dev/null >&2 &
    else
        tail -n +1 -F --pid="$qemu_pid" "$console" 2>/dev/null |
            awk '/herd-vm: ---- output ends/ {on = 0} on {print; fflush()} /herd-vm: ---- output begins/ {on = 1}' >&2 &
    fi
    relay_pid=$!
fi

timed_out=0
while kill -0 "$qemu_pid" 2>/dev/null; do
    if [ $(($(date +%s) - start)) -ge "$timeout_s" ]; then
        timed_out=1
        kill "$qemu_pid" 2>/dev/null
        sleep 1
        kill -KILL "$qemu_pid" 2>/dev/null || true
        break
    fi
    sleep 0.5
done
qemu_rc=0
wait "$qemu_pid" 2>/dev/null || qemu_rc=$?
qemu_pid=
if [ -n "$relay_pid" ]; then
    # tail --pid notices qemu's exit within a second; do not wait longer.
    for _ in 1 2 3 4; do kill -0 "$relay_pid" 2>/dev/null || break; sleep 0.5; done
    kill "$relay_pid" 2>/dev/null || true
    wait "$relay_pid" 2>/dev/null || true
    relay_pid=
fi
elapsed=$(($(date +%s) - start))

console_tail() {
    say "last lines of the guest console ($console):"
    tail -n "${1:-40}" "$console" | sed 's/^/  | /' >&2
    if [ -s "$work/qemu.out" ]; then
        say "qemu said:"
        sed 's/^/  | /' "$work/qemu.out" >&2
    fi
}
if [ "$timed_out" = 1 ]; then
    say "error: the guest did not finish within --timeout ${timeout_s}s ($cpus vCPUs, running: $what)"
    console_tail 40
    keep_log=1
    exit 124
fi
if [ ! -s "$result" ]; then
    say "error: the guest sent no result (qemu exit status $qemu_rc after ${elapsed}s): it did not boot, or herd's init died"
    console_tail 40
    keep_log=1
    exit 125
fi
mkdir -p "$work/out"
if ! tar -xf "$result" -C "$work/out" 2>"$work/tar.err" || [ ! -f "$work/out/status" ]; then
    say "error: the result from the guest is truncated or corrupt ($(stat -c %s "$result") bytes): $(head -c 300 "$work/tar.err")"
    console_tail 20
    keep_log=1
    exit 125
fi
rc=$(sed -n 's/^rc=//p' "$work/out/status")
bytes=$(sed -n 's/^bytes=//p' "$work/out/status")
sum=$(sed -n 's/^sha256=//p' "$work/out/status")
got_bytes=$(stat -c %s "$work/out/stdout")
got_sum=$(sha256sum <"$work/out/stdout")
got_sum=${got_sum%% *}
if [ "$got_bytes" != "$bytes" ] || [ "$got_sum" != "$sum" ]; then
    say "error: herd's stdout did not come back intact (guest: $bytes bytes sha256 $sum; host: $got_bytes bytes sha256 $got_sum)"
    keep_log=1
    exit 125
fi
is_uint "$rc" || die "the guest reported a bad exit status '$rc'"
if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir"
    cp -a "$work/out/out/." "$out_dir/"
fi
cat "$work/out/stdout"
if [ "$quiet" = 1 ] && [ "$rc" != 0 ]; then console_tail 30; fi
# Guest-side times (guest uptime at herd's start and end) from the console.
up0=$(sed -n 's/^herd-vm: guest up in \([0-9.]*\)s.*/\1/p' "$console" | head -n1)
up1=$(sed -n 's/^herd-vm: exit status .* after \([0-9.]*\)s of guest uptime.*/\1/p' "$console" | head -n1)
phases=
[ -n "$up0" ] && [ -n "$up1" ] && phases=$(awk -v a="$up0" -v b="$up1" 'BEGIN {printf "; guest clock: boot %.1fs, command %.1fs", a, b - a}')
say "guest finished in ${elapsed}s wall ($cpus vCPUs$phases); exit status $rc"
exit "$rc"
