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
# guest's init mounts proc, sysfs, devtmpfs, tracefs, debugfs and cgroup2, runs
# `herd ARGS...` (or a script), and sends the results back over a second
# serial port that carries nothing else: a tar of /result holding herd's
# stdout, a status file (exit code, byte count, sha256) and any files written
# to $HERD_VM_OUT. The host checks size and checksum, prints the stdout byte
# for byte, and exits with herd's exit status. herd's stderr goes to the guest
# console (first serial port) and is relayed live.
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
# not finish within --timeout; 125 the VM could not be set up or produced no
# (or a corrupt) result; 130 interrupted.
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
  --cpus N           guest vCPUs, 1-4096 (default: \$HERD_VM_CPUS or 128);
                     above 255 the guest is a q35 machine with x2APIC (see
                     --machine) and needs qemu 8.1 or newer (see --qemu)
  --numa K           split the vCPUs and the memory evenly into K NUMA nodes,
                     one socket each when the vCPUs divide evenly (default 1)
  --mem SIZE         guest memory in qemu syntax, e.g. 2G or 1536M (default:
                     \$HERD_VM_MEM or 512M + 8M per vCPU, at least 1G)
  --machine M        auto, pc or q35 (default auto: pc up to 255 vCPUs, q35
                     above). q35 comes with an Intel IOMMU doing interrupt
                     remapping (intremap=on, eim=on) and x2APIC in the CPU
                     model, which Linux needs for APIC ids above 255
  --boot-cpus K      vCPUs the kernel brings up at boot (maxcpus=K); the
                     guest's init brings the others online through sysfs
                     before running herd (default: \$HERD_VM_BOOT_CPUS, else
                     $boot_cpus_doc). With K below --cpus the
                     guest has no PIT, HPET, MTRRs or PAT (see below)
  --trace-online     trace the kernel's CPU hotplug states (the cpuhp
                     tracepoints) while init brings CPUs online: the
                     console gets the states that cost most, for the first
                     and the last CPUs brought online, and
                     \$HERD_VM_OUT/online-trace.txt the raw trace (see
                     --out-dir); needs --boot-cpus below --cpus
  --x2apic-ids       give the second half of the vCPUs APIC ids from 256 on
                     (a second socket, and NUMA node with --numa 2), so a
                     small guest takes the x2APIC path of one above 255
                     vCPUs; implies --machine q35; even --cpus up to 258
  --tcg T            auto, single or multi: one host thread for all vCPUs, or
                     one per vCPU (default auto:
                     $tcg_auto_doc)
  --qemu PATH        qemu-system-x86_64 to use (default: \$HERD_VM_QEMU, else
                     the system's, else for q35 when the system's qemu cannot
                     emulate x2APIC (Debian 12's 7.2), a newer one fetched
                     once from the release's backports into \$HERD_VM_CACHE)
  --timeout SECS     give up after SECS seconds of wall time, print the guest
                     console's tail and exit 124 (default: \$HERD_VM_TIMEOUT
                     or 900, plus 3 s per vCPU above 255)
  --kernel PATH      kernel image to boot (default: \$HERD_VM_KERNEL, else
                     Debian's cloud kernel, fetched once with apt-get download
                     into \$HERD_VM_CACHE, default ~/.cache/herd-vm; above 255
                     vCPUs the one from the release's backports, fetched
                     with a private apt as the qemu is)
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
  --append ARGS      extra guest kernel command line, after vm-run.sh's own
                     (repeatable; e.g. "maxcpus=64" boots 64 vCPUs and leaves
                     the others for the script to bring online through sysfs)
  -v, --verbose      show the whole guest console live (kernel messages too)
  -q, --quiet        do not relay herd's stderr live (still shown on failure)
  --keep             keep the work directory (initramfs, console log); on
                     failure the console log is always kept
  --prepare          only install the packages, fetch the kernel (and for
                     q35 the qemu), print the kernel's path and exit
  --dry-run          do everything but boot: print the qemu command line,
                     one argument per line, and exit 0
  -h, --help         this help

Examples:
  scripts/$prog -- storm --waves 10 --per-wave 128 --pin round-robin
  scripts/$prog --cpus 16 -- env --json > env.json
  scripts/$prog --cpus 512 --numa 4 -- storm --waves 2 --per-wave 512 --pin round-robin
  HERD_VM_CPUS=264 bash scripts/test.d/50-vm.sh    # the guest tests at 264

Under TCG (nested KVM is not available here) every vCPU is emulated; on
this 2-CPU host one thread for all vCPUs boots small guests faster and one
thread per vCPU big ones (docs/guest.md has the figures). The guest
kernel's watchdogs are off, as a busy host starves vCPUs for long.
Until late in its boot the kernel cannot stop an idle CPU's tick, so a
guest booting all of hundreds of vCPUs spends the host on ticks; hence
--boot-cpus. A CPU brought online after boot costs a stop_machine over
every online CPU where the kernel keeps MTRRs or PAT in step, and every
update of the legacy timer interrupt visits every vCPU in qemu, so such
a guest runs without MTRRs, PAT (nopat), PIT and HPET, and is told the
TSC's rate (the host's), which it would otherwise calibrate against the
ACPI PM timer, 10% off under TCG.
Packages needed (installed automatically when run as root):
qemu-system-x86, busybox-static, cpio, and apt for the kernel.

Environment: HERD_VM_CPUS, HERD_VM_MEM, HERD_VM_TIMEOUT, HERD_VM_KERNEL,
HERD_VM_QEMU, HERD_VM_BOOT_CPUS (defaults of the options above),
HERD_VM_BOOT_RETRIES (boots again a guest kernel that panicked before
the init ran, this many times, default 2: multi-threaded TCG races with
the kernel's code patching now and then), HERD_VM_CACHE (kernel and
qemu cache directory), HERD_VM_OMIT_LIBGCC=1 (tests only: leave
libgcc_s.so.1 out to show why it is needed).

Exit status: herd's exit status; 2 usage error; 3 too little host memory
for the guest; 124 timeout; 125 VM setup failed or no valid result came
back; 130 interrupted.
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
# --tcg auto: one thread per vCPU from this many vCPUs on (measured on this
# 2-CPU host, docs/guest.md).
tcg_multi_from=64
tcg_auto_doc="single below $tcg_multi_from vCPUs, multi from $tcg_multi_from on"
# --boot-cpus default: every vCPU up to this many, else this many at boot
# and the rest through sysfs (measured on this host, docs/guest.md).
boot_all_upto=255
boot_late_cpus=64
boot_cpus_doc="all up to $boot_all_upto vCPUs, $boot_late_cpus above"
max_cpus=4096
cpus=${HERD_VM_CPUS:-128}
mem=${HERD_VM_MEM:-}
numa=1
boot_cpus=${HERD_VM_BOOT_CPUS:-}
machine=auto
x2apic_ids=0
trace_online=0
tcg=auto
timeout_s=${HERD_VM_TIMEOUT:-}
kernel=${HERD_VM_KERNEL:-}
qemu_bin=${HERD_VM_QEMU:-}
herd_bin=
script=
out_dir=
verbose=0
quiet=0
keep=0
prepare=0
dry_run=0
envs=()
qemu_extra=()
append_extra=()
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
        --machine) need_arg "$@"; machine=$2; shift 2 ;;
        --machine=*) machine=${1#*=}; shift ;;
        --boot-cpus) need_arg "$@"; boot_cpus=$2; shift 2 ;;
        --boot-cpus=*) boot_cpus=${1#*=}; shift ;;
        --x2apic-ids) x2apic_ids=1; shift ;;
        --trace-online) trace_online=1; shift ;;
        --tcg) need_arg "$@"; tcg=$2; shift 2 ;;
        --tcg=*) tcg=${1#*=}; shift ;;
        --qemu) need_arg "$@"; qemu_bin=$2; shift 2 ;;
        --qemu=*) qemu_bin=${1#*=}; shift ;;
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
        --append) need_arg "$@"; append_extra+=("$2"); shift 2 ;;
        --append=*) append_extra+=("${1#*=}"); shift ;;
        -v | --verbose) verbose=1; shift ;;
        -q | --quiet) quiet=1; shift ;;
        --keep) keep=1; shift ;;
        --prepare) prepare=1; shift ;;
        --dry-run) dry_run=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) usage_error "unknown option '$1' (herd's own flags go after --)" ;;
        *) break ;;
    esac
done
herd_args=("$@")

is_uint() { [[ $1 =~ ^[0-9]+$ ]] && [ "${#1}" -le 9 ]; }
is_uint "$cpus" && [ "$cpus" -ge 1 ] && [ "$cpus" -le "$max_cpus" ] ||
    usage_error "--cpus must be an integer in 1-$max_cpus (got '$cpus'; $max_cpus is qemu's q35 limit)"
is_uint "$numa" && [ "$numa" -ge 1 ] && [ "$numa" -le "$cpus" ] ||
    usage_error "--numa must be an integer in 1-$cpus, at most one node per vCPU (got '$numa')"
if [ -z "$boot_cpus" ]; then
    boot_cpus=$cpus
    [ "$cpus" -le "$boot_all_upto" ] || boot_cpus=$boot_late_cpus
fi
is_uint "$boot_cpus" && [ "$boot_cpus" -ge 1 ] && [ "$boot_cpus" -le "$cpus" ] ||
    usage_error "--boot-cpus must be an integer in 1-$cpus, at most --cpus (got '$boot_cpus')"
boot_retries=${HERD_VM_BOOT_RETRIES:-2}
is_uint "$boot_retries" || usage_error "HERD_VM_BOOT_RETRIES must be a count, 0 for no retry (got '$boot_retries')"
[ "$trace_online" = 0 ] || [ "$boot_cpus" -lt "$cpus" ] ||
    usage_error "--trace-online traces the CPUs init brings online, and with --boot-cpus $boot_cpus of --cpus $cpus there are none: give --boot-cpus below --cpus"
if [ "$x2apic_ids" = 1 ]; then
    [ "$machine" != pc ] || usage_error "--x2apic-ids needs x2APIC, which --machine pc has not"
    machine=q35
    [ "$((cpus % 2))" = 0 ] && [ "$cpus" -le 258 ] ||
        usage_error "--x2apic-ids wants an even --cpus of at most 258 (got $cpus): half the vCPUs in each of two sockets"
    [ "$numa" -le 2 ] || usage_error "--x2apic-ids takes --numa 1 or 2 (got $numa): a node per socket"
fi
case $machine in
    auto) if [ "$cpus" -gt 255 ]; then machine=q35; else machine=pc; fi ;;
    pc) [ "$cpus" -le 255 ] ||
        usage_error "--machine pc takes at most 255 vCPUs (got --cpus $cpus): xAPIC ids are 8 bits; use --machine q35 (x2APIC)" ;;
    q35) ;;
    *) usage_error "--machine must be auto, pc or q35 (got '$machine')" ;;
esac
case $tcg in
    auto) if [ "$cpus" -ge "$tcg_multi_from" ]; then tcg=multi; else tcg=single; fi ;;
    single | multi) ;;
    *) usage_error "--tcg must be auto, single or multi (got '$tcg')" ;;
esac
if [ -z "$timeout_s" ]; then
    timeout_s=900
    [ "$cpus" -le 255 ] || timeout_s=$((900 + 3 * (cpus - 255)))
fi
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
[ "$((mem_mb / numa))" -ge 64 ] ||
    usage_error "--mem ${mem_mb}M gives each of the $numa NUMA nodes less than 64M"
if [ -n "$script" ]; then
    [ -f "$script" ] && [ -r "$script" ] || usage_error "--script: cannot read '$script'"
    [ "${#herd_args[@]}" = 0 ] || usage_error "--script and herd arguments exclude each other (put the herd commands in the script)"
fi
for kv in ${envs[@]+"${envs[@]}"}; do
    [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || usage_error "--env wants NAME=VALUE (got '$kv')"
done
[ -z "$kernel" ] || [ -r "$kernel" ] || usage_error "--kernel: cannot read '$kernel'"
[ -z "$herd_bin" ] || [ -x "$herd_bin" ] || usage_error "--herd: '$herd_bin' is not an executable file"
if [ -n "$qemu_bin" ]; then
    case $qemu_bin in
        */*) [ -x "$qemu_bin" ] || usage_error "--qemu: '$qemu_bin' is not an executable file" ;;
        *) command -v "$qemu_bin" >/dev/null 2>&1 || usage_error "--qemu: '$qemu_bin' is not on PATH" ;;
    esac
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
# The system's qemu also brings the shared libraries a fetched newer qemu
# links (apt resolves against what is installed).
tools=(busybox cpio gzip ldd)
[ -n "$qemu_bin" ] || tools=(qemu-system-x86_64 "${tools[@]}")
ensure_tools "${tools[@]}"

# ---------------------------------------------------------------- qemu
# qemu_cmd is the qemu binary and the arguments that make it find its own
# data (firmware) and modules; qemu_env the environment it runs with.
qemu_cmd=()
qemu_env=()
use_qemu() {
    local bin=$1 dir=${2:-}
    qemu_cmd=("$bin")
    qemu_env=()
    if [ -n "$dir" ]; then
        qemu_cmd+=(-L "$dir/usr/share/qemu" -L "$dir/usr/share/seabios")
        qemu_env=("QEMU_MODULE_DIR=$dir/usr/lib/x86_64-linux-gnu/qemu"
            "LD_LIBRARY_PATH=$dir/usr/lib/x86_64-linux-gnu:$dir/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
    fi
}
qemu_version() {
    env ${qemu_env[@]+"${qemu_env[@]}"} "${qemu_cmd[@]}" --version 2>/dev/null |
        sed -n '1s/.*version \([0-9][0-9.]*\).*/\1/p'
}
# x86 CPU model and machine options of the q35 path; the probe checks the
# qemu accepts exactly these (7.2: "eim=on requires accel=kvm").
q35_cpu=qemu64,x2apic=on
q35_iommu=intel-iommu,intremap=on,eim=on
# Whether the qemu in qemu_cmd can run a q35 guest with x2APIC under TCG:
# ask it to set such a machine up (256 possible vCPUs, 1 present, paused)
# and quit over QMP. Takes a fraction of a second; qemu's error is kept in
# probe_err.
probe_err=
qemu_can_x2apic() {
    probe_err=$(printf '%s\n' '{"execute":"qmp_capabilities"}' '{"execute":"quit"}' |
        timeout 120 env ${qemu_env[@]+"${qemu_env[@]}"} "${qemu_cmd[@]}" -nodefaults -no-user-config \
            -display none -S -qmp stdio -machine q35 -accel tcg,thread=single -cpu "$q35_cpu" \
            -device "$q35_iommu" -smp 1,maxcpus=256 -m 128M 2>&1 >/dev/null)
}
# A private apt for the running Debian release and its updates and
# backports: sets apt (a new directory in $cache, which the caller removes)
# and apt_o (apt-get's options using it), codename, and runs apt-get update
# on it. $1 is what is fetched, $2 what the user can do instead.
private_apt() {
    local what=$1 instead=$2 site
    codename=$(. /etc/os-release 2>/dev/null && printf '%s' "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || die "cannot tell the Debian release (no VERSION_CODENAME in /etc/os-release) to fetch $what from its backports; $instead"
    # shellcheck disable=SC2016 # $(SITE) is apt's format, not the shell's
    site=$(apt-get indextargets --format '$(SITE) $(RELEASE)' 2>/dev/null | awk -v r="$codename" '$2 == r {print $1; exit}')
    [ -n "$site" ] || die "the system's apt sources have no $codename archive (run 'apt-get update' as root?); $instead"
    apt=$(mktemp -d "$cache/apt.XXXXXX")
    chmod 755 "$apt"
    mkdir -p "$apt"/{lists/partial,cache/archives/partial,state,deb,empty.d}
    : >"$apt/preferences"
    local opt= suite
    [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] && opt="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    for suite in "$codename" "$codename-updates" "$codename-backports"; do
        printf 'deb %s%s %s main\n' "$opt" "$site" "$suite"
    done >"$apt/sources.list"
    apt_o=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/empty.d"
        -o "Dir::Etc::Preferences=$apt/preferences" -o "Dir::Etc::PreferencesParts=$apt/empty.d"
        -o "Dir::State=$apt/state" -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache"
        -o Dir::State::status=/var/lib/dpkg/status -o Debug::NoLocking=1)
    [ "$(id -u)" = 0 ] && apt_o+=(-o APT::Sandbox::User=root)
    say "fetching $what from $codename-backports into $cache (once; private apt lists, the system's sources untouched)"
    apt-get "${apt_o[@]}" -qq update >&2 || { rm -rf "$apt"; die "apt-get update of the private $codename-backports lists failed"; }
}
# Fetch qemu-system-x86 from the running Debian release's backports into
# $cache/qemu-VERSION/, with a private sources list, apt state and package
# cache: nothing of the system's apt configuration or installed packages
# changes. The mirror is the one the system's sources use for the release.
fetch_qemu() {
    ensure_tools apt-get dpkg-deb
    mkdir -p "$cache"
    exec 8>"$cache/.qemu.lock"
    flock 8
    local found
    found=$(find "$cache" -mindepth 4 -maxdepth 4 -path "$cache/qemu-*/usr/bin/qemu-system-x86_64" 2>/dev/null | sort -V | tail -n1)
    if [ -n "$found" ]; then
        exec 8>&-
        printf '%s\n' "${found%/usr/bin/qemu-system-x86_64}"
        return 0
    fi
    private_apt "qemu" "install qemu 8.1 or newer and pass --qemu PATH"
    local o=("${apt_o[@]}")
    # What the backports qemu needs beyond what is installed (the system's
    # qemu brought the shared libraries): usually qemu-system-x86,
    # -common, -data and seabios. Lines: 'URI' NAME_VERSION_ARCH.deb SIZE HASH.
    local uris specs=() file name ver
    uris=$(apt-get "${o[@]}" -qq install --print-uris --no-install-recommends -t "$codename-backports" qemu-system-x86 2>&1) ||
        { rm -rf "$apt"; die "apt cannot resolve qemu-system-x86 from $codename-backports: $uris"; }
    while read -r _ file _; do
        [[ $file == *.deb ]] || continue
        name=${file%%_*}
        ver=${file#*_}
        ver=${ver%_*}
        specs+=("$name=${ver//%3a/:}")
    done <<<"$uris"
    [ "${#specs[@]}" -gt 0 ] || { rm -rf "$apt"; die "apt lists nothing to fetch for qemu-system-x86 from $codename-backports (is the installed qemu already the backports one?)"; }
    (cd "$apt/deb" && apt-get "${o[@]}" -qq download "${specs[@]}" >&2) ||
        { rm -rf "$apt"; die "apt-get download ${specs[*]} failed"; }
    local deb
    for deb in "$apt"/deb/*.deb; do
        dpkg-deb -x "$deb" "$apt/x" || { rm -rf "$apt"; die "dpkg-deb -x $deb failed"; }
    done
    [ -x "$apt/x/usr/bin/qemu-system-x86_64" ] || { rm -rf "$apt"; die "the fetched packages hold no usr/bin/qemu-system-x86_64"; }
    use_qemu "$apt/x/usr/bin/qemu-system-x86_64" "$apt/x"
    local v
    v=$(qemu_version)
    [ -n "$v" ] || { rm -rf "$apt"; die "the fetched qemu does not run: $(env "${qemu_env[@]}" "${qemu_cmd[0]}" --version 2>&1 | head -n3)"; }
    mv "$apt/x" "$cache/qemu-$v"
    rm -rf "$apt"
    exec 8>&-
    say "qemu $v fetched into $cache/qemu-$v (${specs[*]})"
    printf '%s\n' "$cache/qemu-$v"
}
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
# Debian's cloud kernel has what an initramfs-only boot needs built in: the
# 8250 serial console, devtmpfs, gzip initrd, tracefs, perf events, and the
# lock:contention_begin/end tracepoints. Above 255 vCPUs the one from the
# release's backports (6.12 on bookworm), fetched with a private apt into
# $cache/backports/: at 512 vCPUs 6.1 took 1.5 times as long to bring the
# CPUs online and did not finish a 4-wave round-robin storm in 9 minutes,
# which 6.12 ran in 2 (docs/guest.md).
# Unpacks the kernel package in DEBDIR (under the scratch directory WORK,
# removed after) and moves its vmlinuz and config into DEST; prints the
# vmlinuz's path. $4 is the package's name, for the errors.
unpack_kernel() {
    local debdir=$1 work=$2 dest=$3 pkg=$4 img
    dpkg-deb -x "$debdir"/*.deb "$work/x" || { rm -rf "$work"; die "dpkg-deb -x failed on $pkg"; }
    img=$(find "$work/x/boot" -name 'vmlinuz-*' | head -n1)
    [ -n "$img" ] || { rm -rf "$work"; die "$pkg holds no /boot/vmlinuz-*"; }
    cp "$work"/x/boot/config-* "$dest/" 2>/dev/null || true
    mv "$img" "$dest/"
    rm -rf "$work"
    printf '%s/%s\n' "$dest" "$(basename "$img")"
}
fetch_backports_kernel() {
    local dir=$cache/backports found
    mkdir -p "$dir"
    exec 9>"$dir/.lock"
    flock 9
    found=$(find "$dir" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
    if [ -n "$found" ]; then
        exec 9>&-
        printf '%s\n' "$found"
        return 0
    fi
    ensure_tools apt-get dpkg-deb
    private_apt "the guest kernel" "pass --kernel PATH"
    local pkg
    pkg=$(apt-cache "${apt_o[@]}" -o "APT::Default-Release=$codename-backports" depends linux-image-cloud-amd64 2>/dev/null |
        awk '/Depends: linux-image-/ {print $2; exit}')
    [ -n "$pkg" ] || { rm -rf "$apt"; die "cannot resolve linux-image-cloud-amd64 in $codename-backports (pass --kernel PATH)"; }
    (cd "$apt/deb" && apt-get "${apt_o[@]}" -qq download "$pkg" >&2) ||
        { rm -rf "$apt"; die "apt-get download $pkg failed (pass --kernel PATH)"; }
    unpack_kernel "$apt/deb" "$apt" "$dir" "$pkg"
    exec 9>&-
    say "kernel $pkg fetched into $dir"
}
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
    unpack_kernel "$dl" "$dl" "$cache" "$pkg"
    exec 9>&-
}
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
        echo global >$tr/trace_clock && echo 512 >$tr/buffer_size_kb &&
            echo 1 >$tr/events/cpuhp/enable ||
            echo "herd-vm: online: warning: could not enable the cpuhp tracepoints"
        cat $tr/trace_pipe >"$HERD_VM_OUT/online-trace.txt" &
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
    echo 0 >$tr/events/cpuhp/enable
    sleep 1
    kill "$trace_pid"
    wait "$trace_pid" 2>/dev/null
    grep -v '^#' $tr/trace >>"$HERD_VM_OUT/online-trace.txt"
    lost=$(cat $tr/per_cpu/cpu*/stats 2>/dev/null | awk '/^overrun:/ {s += $2} END {print s + 0}')
    # Per hotplug state: its callback's time summed over the CPUs, and its
    # mean for the first and the last 32 CPUs brought online (in the
    # order they came); a state whose cost grows with the CPUs online
    # shows a last mean above its first.
    awk -v lost="$lost" '
        {
            ev = ""
            for (i = 2; i <= NF; i++)
                if ($i ~ /^cpuhp_(enter|multi_enter|exit):$/) { ev = $i; ts = $(i - 1); break }
            if (ev == "") next
            sub(/:$/, "", ts)
            cpu = ""; step = ""
            # cpu: 0064 is decimal (busybox awk reads a leading 0 as octal).
            for (j = i + 1; j < NF; j++) {
                v = $(j + 1); sub(/^0+/, "", v)
                if ($j == "cpu:") cpu = v + 0
                if ($j == "step:") step = v + 0
            }
            if (!(cpu in order)) { order[cpu] = ++ncpu; first_ts[cpu] = ts }
            last_ts[cpu] = ts
            k = cpu SUBSEP step
            if (ev == "cpuhp_exit:") {
                if (!(k in start)) next
                d = ts - start[k]; f = fn[k]; delete start[k]
                total[f] += d
                rank[f, order[cpu]] += d
                seen[f] = 1
            } else {
                start[k] = ts
                f = $NF; gsub(/[()]/, "", f); fn[k] = f
            }
        }
        END {
            m = ncpu < 64 ? int(ncpu / 2) : 32
            if (m < 1) { print "herd-vm: online: trace: no hotplug events traced"; exit }
            span1 = 0; span2 = 0
            for (c in order) {
                if (order[c] <= m) span1 += last_ts[c] - first_ts[c]
                if (order[c] > ncpu - m) span2 += last_ts[c] - first_ts[c]
            }
            printf "herd-vm: online: trace: %d CPUs traced (%d events lost); first hotplug event to last per CPU: %.0f ms for the first %d, %.0f ms for the last %d\n", ncpu, lost, span1 / m * 1000, m, span2 / m * 1000, m
            for (shown = 0; shown < 12; shown++) {
                best = ""
                for (f in seen) if (best == "" || total[f] > total[best]) best = f
                if (best == "") break
                a = 0; b = 0
                for (r = 1; r <= m; r++) { a += rank[best, r]; b += rank[best, ncpu - m + r] }
                printf "herd-vm: online: trace: %-36s %8.2f s in all, %7.1f ms per CPU first, %7.1f ms last\n", best, total[best], a / m * 1000, b / m * 1000
                delete seen[best]
            }
        }' "$HERD_VM_OUT/online-trace.txt"
fi
read -r up _ </proc/uptime
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
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
EOF
chmod 755 "$root/init"
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$work/initrd.gz" ||
    die "packing the initramfs failed"

# ---------------------------------------------------------------- boot
# quiet: the console carries herd's stderr, kernel errors only. The watchdogs
# are off because the host's few CPUs run all vCPUs: a busy host easily
# starves a vCPU for longer than the soft-lockup and RCU-stall thresholds.
# lpj: every vCPU otherwise calibrates its delay loop at bring-up, which
# fails under TCG and falls back to a slow loop (24 s of a 128-vCPU boot;
# 5 s with lpj). tsc=reliable skips the TSC sync check per CPU. The value
# assumes HZ=250 (Debian); the kernel's udelay uses the TSC anyway.
mhz=$(awk -F': *' '/^cpu MHz/ {printf "%d", $2; exit}' /proc/cpuinfo 2>/dev/null)
[ -n "$mhz" ] && [ "$mhz" -gt 0 ] || mhz=2500
append="console=ttyS0 quiet loglevel=3 panic=-1 nowatchdog nosoftlockup rcupdate.rcu_cpu_stall_suppress=1 tsc=reliable lpj=$((mhz * 4000)) mitigations=off"
[ "$verbose" = 1 ] && append=${append/ quiet loglevel=3/ loglevel=7}
# Fewer vCPUs at boot (--boot-cpus): the guest's init brings the others
# online. Until fs_initcall the kernel's clocksource is jiffies, with which
# no CPU can stop its tick, and under TCG every tick of every vCPU costs
# host time (about 3% of a host CPU per idle vCPU here): 512 ticking vCPUs
# leave nothing for the one bringing up the next. After boot an idle CPU
# is tickless. What a CPU brought online after boot costs:
# - nopat and no MTRRs in the CPU model (below): where the kernel keeps
#   MTRRs or PAT in step, each CPU brought online after boot is a
#   stop_machine over every online CPU (cache_ap_online), seconds each
#   under TCG;
# - no PIT or HPET (below): each update of the legacy timer interrupt
#   (IRQ 0, which the HPET drives in legacy mode) loops over every vCPU
#   in qemu's pic_irq_request, on qemu's main thread. Without them the
#   kernel's timer check must be skipped (else: "IO-APIC + timer doesn't
#   work"), and the kernel calibrates the TSC and the APIC timer against
#   the ACPI PM timer instead, which under TCG put the TSC at 2358 MHz on
#   this 2596 MHz host (a guest clock 10% fast): tsc_early_khz gives it
#   the host's rate, which a TCG guest's TSC runs at.
late_online=0
if [ "$boot_cpus" -lt "$cpus" ]; then
    late_online=1
    append+=" maxcpus=$boot_cpus nopat no_timer_check tsc_early_khz=$((mhz * 1000))"
fi
for a in ${append_extra[@]+"${append_extra[@]}"}; do append+=" $a"; done

# Topology: one socket per NUMA node, as on a multi-socket server, when the
# vCPUs divide evenly. qemu numbers APIC ids by socket, core and thread
# with a power of two of ids per socket, so on pc (ids 0-254) the split is
# used only while the highest id fits.
smp=$cpus
if [ "$numa" -gt 1 ] && [ "$((cpus % numa))" = 0 ]; then
    cores=$((cpus / numa))
    core_ids=1
    while [ "$core_ids" -lt "$cores" ]; do core_ids=$((core_ids * 2)); done
    if [ "$machine" = q35 ] || [ $(((numa - 1) * core_ids + cores - 1)) -le 254 ]; then
        smp=$cpus,sockets=$numa,cores=$cores,threads=1
    fi
fi
numa_args=()
cpu_devices=()
if [ "$x2apic_ids" = 1 ]; then
    # 129 cores per socket need 8 bits of core id: socket 1's ids start at
    # 256. Socket 0's half are the boot vCPUs; socket 1's are added as CPU
    # devices before the guest starts (present at boot, not hot-plugged).
    half=$((cpus / 2))
    smp=$half,maxcpus=258,sockets=2,cores=129,threads=1
    for ((c = 0; c < half; c++)); do
        cpu_devices+=(-device "qemu64-x86_64-cpu,socket-id=1,core-id=$c,thread-id=0")
    done
    if [ "$numa" = 2 ]; then
        node_mb=$((mem_mb / 2))
        for n in 0 1; do
            numa_args+=(-object "memory-backend-ram,id=m$n,size=${node_mb}M"
                -numa "node,nodeid=$n,memdev=m$n" -numa "cpu,node-id=$n,socket-id=$n")
        done
    fi
elif [ "$numa" -gt 1 ]; then
    node_mb=$((mem_mb / numa))
    for ((n = 0; n < numa; n++)); do
        first=$((n * cpus / numa))
        last=$(((n + 1) * cpus / numa - 1))
        numa_args+=(-object "memory-backend-ram,id=m$n,size=${node_mb}M"
            -numa "node,nodeid=$n,cpus=$first-$last,memdev=m$n")
    done
fi
# Above 255 vCPUs (or with --machine q35): x2APIC, which Linux turns on
# only with interrupt remapping, hence the IOMMU (eim: extended interrupt
# mode, 32-bit destination ids).
machine_args=(-machine pc)
# shellcheck disable=SC2054 # the commas are qemu's option syntax
[ "$machine" = q35 ] && machine_args=(-machine q35 -cpu "$q35_cpu" -device "$q35_iommu")
if [ "$late_online" = 1 ]; then
    # No PIT, HPET or MTRRs for a guest bringing CPUs online after boot
    # (see the kernel command line above).
    # shellcheck disable=SC2054 # the commas are qemu's option syntax
    case $machine in
        q35) machine_args=(-machine q35,pit=off,hpet=off -cpu "$q35_cpu,mtrr=off" -device "$q35_iommu") ;;
        pc) machine_args=(-machine pc,pit=off,hpet=off -cpu qemu64,mtrr=off) ;;
    esac
fi
console=$work/console.log
result=$work/result.tar
: >"$console"
: >"$result"
# shellcheck disable=SC2054 # the commas are qemu's option syntax
qemu=("${qemu_cmd[@]}" -nodefaults -no-user-config "${machine_args[@]}"
    -accel "tcg,thread=$tcg" -smp "$smp" ${cpu_devices[@]+"${cpu_devices[@]}"}
    -m "${mem_mb}M" ${numa_args[@]+"${numa_args[@]}"}
    -kernel "$kernel" -initrd "$work/initrd.gz" -append "$append"
    -display none -monitor none
    -serial "file:$console"
    -chardev "file,id=result,path=$result" -serial chardev:result
    -no-reboot ${qemu_extra[@]+"${qemu_extra[@]}"})
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
host_up= host_done=
while kill -0 "$qemu_pid" 2>/dev/null; do
    if [ -z "$host_up" ] && grep -aq '^herd-vm: guest up in' "$console"; then host_up=$(date +%s); fi
    if [ -z "$host_done" ] && grep -aq '^herd-vm: exit status' "$console"; then host_done=$(date +%s); fi
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
if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir"
    cp -a "$work/out/out/." "$out_dir/"
fi
cat "$work/out/stdout"
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
