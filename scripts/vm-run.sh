#!/usr/bin/env bash
# Run herd inside a qemu guest with many vCPUs (default 128, up to 4096).
#
# The host may have 2 CPUs; a guest kernel can still have 512. Under TCG the
# vCPUs share the host's few CPUs, so guest timings say nothing about real
# contention. What a guest run proves is that every many-CPU code path (CPU
# lists, affinity masks, per-CPU counters, placement, NUMA nodes) works on a
# real kernel with that many CPUs.
#
# How: the herd binary, its shared libraries (ldd) plus libgcc_s.so.1 (glibc
# dlopens it at the first pthread_cancel; ldd does not list it for every
# binary) and busybox are packed into an initramfs (cpio newc, gzip). The
# guest's init (scripts/vm/init.sh) mounts proc, sysfs, devtmpfs, tracefs,
# debugfs and cgroup2, runs
# `herd ARGS...` (or a script), and sends the results back over a second
# serial port that carries nothing else: a tar of /result holding herd's
# stdout, a status file (exit code, byte count, sha256) and any files written
# to $HERD_VM_OUT. The host checks size and checksum, prints the stdout byte
# for byte, and exits with herd's exit status. herd's stderr goes to the guest
# console (first serial port) and is relayed live.
#
# The parts: scripts/vm/options.sh (the command line and its defaults),
# fetch.sh (host tools, qemu, guest kernel), qemu-args.sh (the qemu command
# line), init.sh and online-summary.awk (in the guest); this file puts them
# together, packs the initramfs, boots and checks what comes back.
#
# Above 255 vCPUs: xAPIC ids are 8 bits (255 is the broadcast id), so the
# guest needs x2APIC, which Linux enables only with interrupt remapping. The
# guest is then a q35 machine with an Intel IOMMU (intremap=on, eim=on) and
# x2APIC in the CPU model. qemu's TCG emulates x2APIC from 8.1 on; Debian
# 12's qemu (7.2) refuses, so a newer qemu is fetched from the release's
# backports into the cache (a private sources list and apt state, `apt-get
# download`, `dpkg-deb -x`): the system's package sources and installed
# packages are never changed. docs/guest.md has the measurements behind
# the defaults (TCG threading, memory) and a 512-vCPU run.
#
# Run with --help for options. Exit status: herd's own exit status; 2 usage
# error; 3 the host has too little memory for the guest; 124 the guest did
# not finish within --timeout; 125 the VM could not be set up, produced no
# (or a corrupt) result, or the --out-dir copy failed; 130 interrupted.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The parts, each a file of its own (docs/design.md): the command line, what
# the host needs, the qemu command line; the guest's init and its hot-plug
# summary go into the initramfs.
vm=$repo/scripts/vm
# shellcheck source=scripts/vm/options.sh
. "$vm/options.sh"
# shellcheck source=scripts/vm/fetch.sh
. "$vm/fetch.sh"
# shellcheck source=scripts/vm/qemu-args.sh
. "$vm/qemu-args.sh"

parse_options "$@"
# Ctrl-C from here on, the fetches too: exit 130, said (the fetches, run in
# subshells, remove their scratch directories themselves; scripts/vm/fetch.sh).
# What this script makes itself (the --out-dir probe, the work directory)
# is named in a variable before it is made and removed by the EXIT trap,
# set here, first: bash runs a trap between commands, so a Ctrl-C finds
# the name set whenever the thing may exist (with mktemp, between the
# made name and its assignment, it would not; and the EXIT trap used to
# be set only after mktemp -d).
probe=
work=
qemu_pid=
relay_pid=
keep_log=0
cleanup() {
    set +e
    [ -z "$probe" ] || rm -f "$probe"
    [ -z "$relay_pid" ] || kill "$relay_pid" 2>/dev/null
    [ -z "$qemu_pid" ] || kill -KILL "$qemu_pid" 2>/dev/null
    [ -n "$work" ] || return 0
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

# A name under $1 no file has (this process's pid in it: no other live
# process makes names with it), for what this script then makes there.
fresh_name() {
    local name
    while name="$1.$$.$RANDOM$RANDOM" && [ -e "$name" ]; do :; done
    printf '%s\n' "$name"
}

# --out-dir: made and tried now, not found unwritable after the guest ran
# (minutes at 128 vCPUs, and it used to end in exit 1 with herd's stdout
# never printed).
if [ -n "$out_dir" ] && [ "$prepare" = 0 ]; then
    mkdir -p "$out_dir" 2>/dev/null || usage_error "--out-dir: cannot make '$out_dir'"
    probe=$(fresh_name "$out_dir/.vm-run")
    (set -C && : >"$probe") 2>/dev/null || { probe=; usage_error "--out-dir: cannot write in '$out_dir'"; }
    rm -f "$probe"
    probe=
fi

# Host memory: the guest's RAM plus qemu's own (the translated-code buffer,
# per-vCPU state). Refused up front, not by the OOM killer minutes later.
qemu_overhead_mb=$((256 + 4 * cpus))
avail_mb=$(awk '/^MemAvailable:/ {printf "%d", $2 / 1024; exit}' /proc/meminfo 2>/dev/null)
if [ -n "$avail_mb" ] && [ $((mem_mb + qemu_overhead_mb)) -gt "$avail_mb" ]; then
    say "error: a $cpus-vCPU guest with ${mem_mb}M needs about $((mem_mb + qemu_overhead_mb))M of host memory (qemu's own ${qemu_overhead_mb}M included); the host has ${avail_mb}M available (MemAvailable)"
    exit 3
fi

# ---------------------------------------------------------------- host tools
# The system's qemu also brings the shared libraries a fetched newer qemu
# links (apt resolves against what is installed).
tools=(busybox cpio gzip ldd)
[ -n "$qemu_bin" ] || tools=(qemu-system-x86_64 "${tools[@]}")
ensure_tools "${tools[@]}"

# ---------------------------------------------------------------- qemu
if [ -n "$qemu_bin" ]; then
    # A qemu unpacked into a folder (as fetch_qemu does) brings its data.
    qemu_root=
    case $qemu_bin in
        ?*/usr/bin/qemu-system-x86_64) qemu_root=${qemu_bin%/usr/bin/qemu-system-x86_64}
            [ -d "$qemu_root/usr/share/qemu" ] || qemu_root= ;;
    esac
    use_qemu "$qemu_bin" "$qemu_root"
    if [ "$machine" = q35 ] && ! qemu_can_x2apic; then
        die "--qemu $qemu_bin ($(qemu_version)) cannot run a q35 guest with x2APIC under TCG (needs qemu 8.1 or newer); it said: $probe_err"
    fi
else
    use_qemu qemu-system-x86_64
    if [ "$machine" = q35 ] && ! qemu_can_x2apic; then
        sys_version=$(qemu_version)
        sys_err=$probe_err
        qemu_dir=$(fetch_qemu)
        use_qemu "$qemu_dir/usr/bin/qemu-system-x86_64" "$qemu_dir"
        qemu_can_x2apic ||
            die "neither the system's qemu $sys_version ($sys_err) nor the fetched one in $qemu_dir ($probe_err) can run a q35 guest with x2APIC under TCG"
        [ "$dry_run" = 1 ] || [ "$prepare" = 1 ] ||
            say "the system's qemu $sys_version cannot emulate x2APIC; using qemu $(qemu_version) from $qemu_dir"
    fi
fi

# ---------------------------------------------------------------- kernel
if [ -z "$kernel" ]; then
    if [ "$cpus" -gt 255 ]; then
        kernel=$(fetch_backports_kernel)
    else
        kernel=$(fetch_kernel)
    fi
fi
if [ "$prepare" = 1 ]; then
    [ "$machine" = pc ] || say "qemu for q35: ${qemu_cmd[0]} ($(qemu_version))"
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
# The cleanup (set above) runs every step, whatever the one before did:
# under set -e a kill of a process already gone (the console relay ends on
# the Ctrl-C the terminal sends it too, as qemu does) used to end the
# script there, exit 1 instead of 130, the work directory left.
work=$(fresh_name "${TMPDIR:-/tmp}/herd-vm")
mkdir -m 700 "$work" || { work=; die "cannot make a work directory in ${TMPDIR:-/tmp}"; }

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
# --boot-cpus below --cpus: init brings CPUs boot_cpus..cpus-1 online.
[ "$boot_cpus" -lt "$cpus" ] && printf '%s %s\n' "$boot_cpus" "$cpus" >"$root/vm/late"
[ "$trace_online" = 1 ] && : >"$root/vm/trace-online"
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

cp "$vm/init.sh" "$root/init"
cp "$vm/online-summary.awk" "$root/vm/online-summary.awk"
chmod 755 "$root/init"
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$work/initrd.gz" ||
    die "packing the initramfs failed"

# ---------------------------------------------------------------- boot
# The host's TSC rate, for the guest kernel's lpj= and tsc_early_khz=.
mhz=$(awk -F': *' '/^cpu MHz/ {printf "%d", $2; exit}' /proc/cpuinfo 2>/dev/null)
[ -n "$mhz" ] && [ "$mhz" -gt 0 ] || mhz=2500
console=$work/console.log
result=$work/result.tar
initrd=$work/initrd.gz
: >"$console"
: >"$result"
qemu_args
if [ "$dry_run" = 1 ]; then
    for v in ${qemu_env[@]+"${qemu_env[@]}"}; do printf 'env %s\n' "$v"; done
    printf '%s\n' "${qemu[@]}"
    exit 0
fi

initrd_kb=$(($(stat -c %s "$work/initrd.gz") / 1024))
say "booting $cpus vCPUs ($machine, TCG $tcg-threaded, qemu $(qemu_version)), ${mem_mb}M$([ "$numa" -gt 1 ] && echo ", $numa NUMA nodes"), kernel $(basename "$kernel"), initramfs ${initrd_kb}K; running: $what"
start=$(date +%s)
# The lines of herd's output (between the init's markers) and the init's
# progress lines, as they come. A shell loop, not awk: Debian's awk (mawk)
# fills its input buffer before it reads a line from a pipe, so a quiet
# console would come out only at the end.
relay_output() {
    local line on=0
    while IFS= read -r line; do
        case $line in *"herd-vm: ---- output ends"*) on=0 ;; esac
        if [ "$on" = 1 ] || [[ $line == "herd-vm: online: "* ]]; then printf '%s\n' "$line"; fi
        case $line in *"herd-vm: ---- output begins"*) on=1 ;; esac
    done
}
# A kernel that panics before the init runs is booted again, up to
# HERD_VM_BOOT_RETRIES times: multi-threaded TCG races with the kernel's
# live code patching (text_poke: an int3 byte another vCPU still executes
# after the patch completed, "Oops: int3" in sched_clock code while the
# kernel flips a static key), 2 of 5 boots at 512 vCPUs on 2026-12-02.
# Each retry is said, with the panic's first lines; the console of each
# failed boot is kept in the work directory.
attempt=0
while :; do
attempt=$((attempt + 1))
: >"$console"
: >"$result"
env ${qemu_env[@]+"${qemu_env[@]}"} "${qemu[@]}" </dev/null >"$work/qemu.out" 2>&1 &
qemu_pid=$!

# Relay the console: all of it with --verbose, else only herd's output
# between the init's markers and the progress of --boot-cpus.
if [ "$quiet" = 0 ]; then
    if [ "$verbose" = 1 ]; then
        tail -n +1 -F --pid="$qemu_pid" "$console" >&2 2>/dev/null &
    else
        tail -n +1 -F --pid="$qemu_pid" "$console" 2>/dev/null |
            relay_output >&2 &
    fi
    relay_pid=$!
fi

timed_out=0
# The host's clock at the init's first line and at the command's end
# (from the console), for the split of the wall time reported at the end.
host_up='' host_done=''
while kill -0 "$qemu_pid" 2>/dev/null; do
    if [ -z "$host_up" ] && grep -aq '^herd-vm: guest up in' "$console"; then host_up=$(date +%s); fi
    if [ -z "$host_done" ] && grep -aq '^herd-vm: exit status' "$console"; then host_done=$(date +%s); fi
    if [ $(($(date +%s) - start)) -ge "$timeout_s" ]; then
        timed_out=1
        kill "$qemu_pid" 2>/dev/null || true
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
if [ "$timed_out" = 0 ] && [ ! -s "$result" ] && [ "$attempt" -le "$boot_retries" ] &&
    ! grep -q '^herd-vm: guest up in' "$console" && grep -q 'Kernel panic' "$console"; then
    cp "$console" "$work/console.boot$attempt.log"
    keep_log=1
    say "warning: the guest kernel panicked before the init ran (boot $attempt of at most $((boot_retries + 1)); console kept as $work/console.boot$attempt.log); booting again:"
    grep -m3 -E 'Oops|BUG|RIP:|Kernel panic' "$console" | sed 's/^/  | /' >&2
    continue
fi
break
done
elapsed=$(($(date +%s) - start))
[ "$attempt" -gt 1 ] && phases_boots=", $attempt boots" || phases_boots=

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
    say "error: the guest sent no result (qemu exit status $qemu_rc after ${elapsed}s$phases_boots): it did not boot, or herd's init died"
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
# herd's stdout first: a copy that fails after it loses nothing of it.
cat "$work/out/stdout"
if [ -n "$out_dir" ]; then
    if ! { mkdir -p "$out_dir" && cp -a "$work/out/out/." "$out_dir/"; } 2>"$work/cp.err"; then
        keep=1
        die "copying the guest's files to --out-dir $out_dir failed ($(head -c 300 "$work/cp.err")); they are in $work/out/out (herd's exit status was $rc)"
    fi
fi
if [ "$quiet" = 1 ] && [ "$rc" != 0 ]; then console_tail 30; fi
# Guest-side times (guest uptime at herd's start and end) from the console.
up0=$(sed -n 's/^herd-vm: guest up in \([0-9.]*\)s.*/\1/p' "$console" | head -n1)
up1=$(sed -n 's/^herd-vm: exit status .* after \([0-9.]*\)s of guest uptime.*/\1/p' "$console" | head -n1)
online_s=$(sed -n 's/^herd-vm: online: brought .* CPUs online in \([0-9.]*\)s of guest time.*/\1/p' "$console" | head -n1)
phases=
[ -n "$up0" ] && [ -n "$up1" ] && phases=$(awk -v a="$up0" -v b="$up1" -v o="${online_s:-}" \
    'BEGIN {printf "; guest clock: boot %.1fs%s, command %.1fs", a, (o == "" ? "" : sprintf(" (%.1fs of it bringing CPUs online)", o)), b - a}')
# Host clock: qemu's start to the command's start, the command, and what
# follows it (sending the result, power-off, qemu's exit).
# (Polled every half second: a guest done in less may show neither.)
host=
[ -n "$host_up" ] && host="; host clock: command started at $((host_up - start))s"
[ -n "$host_up" ] && [ -n "$host_done" ] && host+=", ended at $((host_done - start))s, qemu gone at ${elapsed}s"
say "guest finished in ${elapsed}s wall ($cpus vCPUs$phases_boots$phases$host); exit status $rc"
exit "$rc"
