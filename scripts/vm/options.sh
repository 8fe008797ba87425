# scripts/vm-run.sh's command line: the messages, --help, the options'
# defaults, and parse_options, which parses, checks and resolves them
# (auto values, default sizes) into the variables the other parts read.
# Sourced by vm-run.sh (and by the tests of the qemu command line,
# herd/tests/vm_script.rs). It reads nothing but its arguments, the HERD_VM_*
# environment and whether the files they name exist; it exits 2 on a usage
# error.
# shellcheck shell=bash

prog=vm-run.sh

say() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { say "error: $*"; exit 125; }
usage_error() {
    say "error: $*"
    say "try '$prog --help'"
    exit 2
}
is_uint() { [[ $1 =~ ^[0-9]+$ ]] && [ "${#1}" -le 9 ]; }

# ---------------------------------------------------------------- defaults
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
                     (also herd's working directory) to DIR on the host;
                     DIR is made and tried before the boot (exit 2 when it
                     cannot be written)
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
Packages needed (installed when missing if run as root, unless
HERD_NO_INSTALL=1): qemu-system-x86, busybox-static, cpio, and apt for
the kernel. With HERD_NO_INSTALL=1 (the test command sets it after its
set-up) nothing is installed or fetched: a missing package, kernel or
qemu is an error naming it (exit 125): run --prepare without it first.

Environment: HERD_VM_CPUS, HERD_VM_MEM, HERD_VM_TIMEOUT, HERD_VM_KERNEL,
HERD_VM_QEMU, HERD_VM_BOOT_CPUS (defaults of the options above),
HERD_VM_BOOT_RETRIES (boots again a guest kernel that panicked before
the init ran, this many times, default 2: multi-threaded TCG races with
the kernel's code patching now and then), HERD_VM_CACHE (kernel and
qemu cache directory), HERD_VM_OMIT_LIBGCC=1 (tests only: leave
libgcc_s.so.1 out to show why it is needed).

Counts are decimal (a leading 0 is not octal); a path may begin with a
dash.

Exit status: herd's exit status; 2 usage error; 3 too little host memory
for the guest; 124 timeout; 125 VM setup failed, no valid result came
back, or the --out-dir copy failed (after herd's stdout); 130 interrupted.
EOF
}

# ---------------------------------------------------------------- parsing
# Parses vm-run.sh's arguments into the variables above (herd's own in
# herd_args), checks each, and resolves the automatic ones: machine, tcg,
# boot_cpus, timeout_s, mem_mb (the guest's memory in MiB, a multiple of
# the nodes). Exits 2 naming the option on a usage error.
need_arg() { [ "$#" -ge 2 ] || usage_error "$1 needs a value"; }
parse_options() {
    local n='' kv
    mem_mb=
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
    # Counts are decimal as written: bash's arithmetic reads a leading 0 as
    # octal (--cpus 08 was a bash error, 010 eight vCPUs to some parts and
    # ten to others), test(1) as decimal.
    local v
    for v in cpus numa boot_cpus timeout_s; do
        if is_uint "${!v}"; then printf -v "$v" '%d' "$((10#${!v}))"; fi
    done
    # A path that begins with a dash is still a path (cp, ldd, basename).
    for v in herd_bin kernel script out_dir; do
        case ${!v} in -*) printf -v "$v" './%s' "${!v}" ;; esac
    done
    case $qemu_bin in -*/*) qemu_bin=./$qemu_bin ;; esac

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
    is_uint "$boot_retries" && boot_retries=$((10#$boot_retries)) || usage_error "HERD_VM_BOOT_RETRIES must be a count, 0 for no retry (got '$boot_retries')"
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
            *[0-9]G | *[0-9]g) n=${mem%?}; is_uint "$n" && mem_mb=$((10#$n * 1024)) ;;
            *[0-9]M | *[0-9]m) n=${mem%?}; is_uint "$n" && mem_mb=$((10#$n)) ;;
            *) is_uint "$mem" && mem_mb=$((10#$mem)) ;;
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
}
