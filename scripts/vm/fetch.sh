# What scripts/vm-run.sh needs on the host, found or fetched: its tools
# (Debian packages, installed as root when missing), the qemu (the
# system's, or for x2APIC a newer one from the release's backports, in a
# private apt's cache) and the guest kernel (Debian's cloud kernel, fetched
# once into $cache). Sourced by vm-run.sh; functions only.
# shellcheck shell=bash

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
# HERD_NO_INSTALL=1 (scripts/test.sh sets it after its set-up, and the
# tests for every run): nothing is installed or fetched, whatever is
# missing is an error naming it. Otherwise root installs missing packages.
no_install() { [ "${HERD_NO_INSTALL:-0}" = 1 ]; }
no_install_hint="HERD_NO_INSTALL=1: this run installs nothing; scripts/test-setup.sh sets up what the tests need"
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
    if no_install; then
        die "missing ${missing[*]}: install the Debian package(s) ${pkgs[*]} ($no_install_hint)"
    elif [ "$(id -u)" = 0 ]; then
        say "installing ${pkgs[*]} (for ${missing[*]})"
        apt_update
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2 ||
            die "apt-get install ${pkgs[*]} failed"
    else
        die "missing ${missing[*]}: install the Debian package(s) ${pkgs[*]} (as root: apt-get install ${pkgs[*]}), or run this script as root"
    fi
}

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
# scratch_in_cache VAR PREFIX: a new directory $cache/PREFIX.XXXXXX, its
# path in VAR, removed however this shell ends. The fetch functions below
# run in a command substitution (`kernel=$(fetch_kernel)`), a subshell,
# which starts without the caller's traps: the removal is the subshell's
# own EXIT trap, and SIGINT or SIGTERM (a Ctrl-C reaches every process of
# the terminal's group) ends the subshell through it. An interrupted fetch
# used to leave $cache/apt.* or dl.* behind.
scratch_dirs=()
scratch_in_cache() {
    [ "$BASH_SUBSHELL" -gt 0 ] || die "internal: $FUNCNAME outside a subshell would replace vm-run.sh's EXIT trap"
    local d
    d=$(mktemp -d "$cache/$2.XXXXXX") || die "cannot make a directory in $cache"
    chmod 755 "$d"
    scratch_dirs+=("$d")
    trap 'rm -rf -- "${scratch_dirs[@]}"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    printf -v "$1" '%s' "$d"
}
# A private apt for the running Debian release and its updates and
# backports: sets apt (a new directory in $cache, removed on exit)
# and apt_o (apt-get's options using it), codename, and runs apt-get update
# on it. $1 is what is fetched, $2 what the user can do instead.
private_apt() {
    local what=$1 instead=$2 site
    codename=$(. /etc/os-release 2>/dev/null && printf '%s' "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || die "cannot tell the Debian release (no VERSION_CODENAME in /etc/os-release) to fetch $what from its backports; $instead"
    # shellcheck disable=SC2016 # $(SITE) is apt's format, not the shell's
    site=$(apt-get indextargets --format '$(SITE) $(RELEASE)' 2>/dev/null | awk -v r="$codename" '$2 == r {print $1; exit}')
    [ -n "$site" ] || die "the system's apt sources have no $codename archive (run 'apt-get update' as root?); $instead"
    scratch_in_cache apt apt
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
    no_install && die "no qemu that emulates x2APIC in $cache: fetch one with scripts/vm-run.sh --cpus 16 --x2apic-ids --prepare, or pass --qemu PATH ($no_install_hint)"
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
# Prints the newest vmlinuz-* in directory $1 when there is one; otherwise
# returns 1 holding $1/.lock on fd 9, for the fetch that follows (released
# by the caller), so that concurrent runs fetch once.
cached_kernel() {
    local dir=$1 found
    mkdir -p "$dir"
    exec 9>"$dir/.lock"
    flock 9
    found=$(find "$dir" -maxdepth 1 -name 'vmlinuz-*' | sort -V | tail -n1)
    [ -n "$found" ] || return 1
    exec 9>&-
    printf '%s\n' "$found"
}
fetch_backports_kernel() {
    local dir=$cache/backports
    cached_kernel "$dir" && return 0
    no_install && die "no guest kernel for more than 255 vCPUs in $dir: fetch it with scripts/vm-run.sh --cpus $cpus --prepare, or pass --kernel PATH ($no_install_hint)"
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
    cached_kernel "$cache" && return 0
    no_install && die "no guest kernel in $cache: fetch it with scripts/vm-run.sh --prepare, or pass --kernel PATH ($no_install_hint)"
    ensure_tools apt-get dpkg-deb
    local meta=linux-image-cloud-amd64 pkg
    pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
    if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
        apt_update
        pkg=$(apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
    fi
    [ -n "$pkg" ] || die "cannot resolve $meta with apt-cache (run 'apt-get update' as root, or pass --kernel PATH)"
    local dl
    scratch_in_cache dl dl
    say "downloading kernel package $pkg into $cache (once)"
    (cd "$dl" && apt-get download -o APT::Sandbox::User=root "$pkg" >&2) ||
        { rm -rf "$dl"; die "apt-get download $pkg failed (pass --kernel PATH to use another kernel)"; }
    unpack_kernel "$dl" "$dl" "$cache" "$pkg"
    exec 9>&-
}

