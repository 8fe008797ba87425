#!/usr/bin/env bash
# One benchmark program of `benches` built at git revision REV and at the
# checkout, run against each other as whole processes, interleaved (the
# order alternating from round to round), optionally once per code layout:
# for a change to exitq, is the program faster, measured as its user
# times it, independently of where the compiler happened to put the loops?
#
#   scripts/rev-ab.sh REV [-n ROUNDS] [--layouts "0 16 32 64"] [--rate FIELD] -- EXAMPLE ARGS...
#
# Speed is 1 / the whole process's wall time (a fixed amount of work, as
# defer_free and churn do), or with --rate FIELD the FIELDth number
# (1-based) of the program's last output line, a rate where more is better
# (read_mostly's reads per second is field 4). Prints the median of the
# per-round (and per-layout) ratios checkout / REV with quartiles (the
# order statistics n/4 from each end, n the number of ratios: the same
# distance from the median on both sides), per layout and over all; > 1
# means the checkout is faster. A run that fails stops the comparison
# (exit 1, naming the binary and what it said): nothing is averaged over
# it.
#
# -n ROUNDS  rounds (default 9); --layouts: below; --rate FIELD: above;
# -h, --help this text. Exit status: 0; 1 a build or a run failed; 2
# usage error.
#
# --layouts builds each side once per loop alignment (bytes; 0: the
# compiler's default, -C llvm-args=-align-loops=N otherwise) in its own
# target directory (target/rev-ab/SHA-layout-N): a loop of 20 instructions
# moves 15-30% with its placement alone (docs/results-exitq.md). REV is built in a
# temporary git worktree, removed afterwards.
#
# Example (the reclaimer's looks, docs/results-exitq.md):
#   scripts/rev-ab.sh ef5ea74 -n 9 --layouts "0 32" --rate 4 -- read_mostly exitq-qsbr 2 1 10
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
    echo "usage: scripts/rev-ab.sh REV [-n ROUNDS] [--layouts \"0 16 32 64\"] [--rate FIELD] -- EXAMPLE ARGS..." >&2
    exit 2
}
[ $# -ge 1 ] || usage
# --help anywhere before the example's own arguments.
for a in "$@"; do
    case $a in
    --) break ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    esac
done
rev=$1
shift
rounds=9 layouts=0 rate=0
while [ $# -gt 0 ]; do
    case $1 in
    -n) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]{0,4}$ ]] || { echo "rev-ab: -n needs a count of rounds in 1-99999" >&2; exit 2; }
        rounds=$2; shift 2 ;;
    --layouts) [[ $# -ge 2 && $2 =~ ^[0-9][0-9\ ]*$ ]] || { echo "rev-ab: --layouts needs loop alignments in bytes like \"0 32 64\"" >&2; exit 2; }
        layouts=$2; shift 2 ;;
    --rate) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]{0,3}$ ]] || { echo "rev-ab: --rate needs a field number (1-based)" >&2; exit 2; }
        rate=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
    esac
done
[ $# -ge 1 ] || { echo "rev-ab: name the example to run after --" >&2; usage; }
example=$1
shift
[ -f "benches/examples/$example.rs" ] || { echo "rev-ab: no example benches/examples/$example.rs" >&2; exit 2; }
read -ra wanted <<<"$layouts"
layouts=$(printf '%s\n' "${wanted[@]}" | sort -un | xargs)
for l in $layouts; do
    [[ $l =~ ^(0|1|2|4|8|16|32|64|128|256)$ ]] || { echo "rev-ab: --layouts: a loop alignment is 0 (the default) or a power of two up to 256 (got $l)" >&2; exit 2; }
done
full=$(git rev-parse --verify --quiet "$rev^{commit}") || { echo "rev-ab: no commit '$rev'" >&2; exit 2; }
short=${full:0:7}
wt=$(mktemp -d)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$wt"' EXIT
git worktree add -q --detach "$wt" "$full"
build() { # DIR NAME LAYOUT -> the binary's path on stdout
    local dir=$1 name=$2 l=$3 flags=${RUSTFLAGS:-}
    [ "$l" = 0 ] || flags="$flags -C llvm-args=-align-loops=$l"
    local target=$PWD/target/rev-ab/$name-layout-$l
    echo "rev-ab: building $example at $name, loops aligned to $l bytes ($target)" >&2
    (cd "$dir" && RUSTFLAGS=$flags CARGO_TARGET_DIR=$target cargo build -q --release -p benches --example "$example") >&2
    echo "$target/release/examples/$example"
}
progs=()
for l in $layouts; do
    progs+=("$l" "$(build "$wt" "$short" "$l")" "$(build . checkout "$l")")
done
echo "rev-ab: $rounds rounds of '$example $*', $short against the checkout, loop alignments: $layouts ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))"
python3 - "$rounds" "$rate" "$short" "$#" "$@" "${progs[@]}" <<'PY'
import os, signal, statistics as st, subprocess, sys, time
# Ctrl-C: exit 130 (the shell's trap cleans up), not a traceback.
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
rounds, rate, short, nargs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
args, rest = sys.argv[5:5 + nargs], sys.argv[5 + nargs:]
cells = [(int(rest[i]), rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]

def speed(binary):
    t0 = time.perf_counter()
    p = subprocess.run([binary, *args], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"rev-ab: {binary} failed ({p.returncode}): {p.stderr.strip()}")
    if rate == 0:
        return 1.0 / wall
    lines = p.stdout.strip().splitlines()
    fields = lines[-1].split() if lines else []
    try:
        return float(fields[rate - 1])
    except (IndexError, ValueError):
        sys.exit(f"rev-ab: field {rate} of the last line is not a number: {lines[-1:] or 'no output'}")

ratios = {l: [] for l, _, _ in cells}
for r in range(rounds):
    for l, old, new in cells:
        pair = [(old, "old"), (new, "new")]
        got = {k: speed(b) for b, k in (pair if r % 2 == 0 else pair[::-1])}
        ratios[l].append(got["new"] / got["old"])
    print(f"round {r + 1}: " + " ".join(f"{ratios[l][-1]:.3f}" for l, _, _ in cells), file=sys.stderr)

def line(label, q):
    q = sorted(q)
    # The quartiles as order statistics the same distance from each end
    # (q[(3 * n) // 4] was one above the symmetric one when 4 divides n:
    # the maximum of 4).
    print(f"{label:>14}: median {st.median(q):.3f} (quartiles {q[len(q) // 4]:.3f}-{q[len(q) - 1 - len(q) // 4]:.3f}, "
          f"range {q[0]:.3f}-{q[-1]:.3f}, {len(q)} cells)")

what = f"field {rate} of the output" if rate else "1 / wall time"
print(f"checkout / {short}, {what}:")
if len(cells) > 1:
    for l, _, _ in cells:
        line(f"layout {l}", ratios[l])
line("all", [x for l, _, _ in cells for x in ratios[l]])
PY
