#!/usr/bin/env bash
# One benchmark program of `benches`, built once at the checkout, run as
# whole processes under several environment settings, interleaved (the
# order rotated and reversed from round to round): what does a setting the
# program reads (EXITQ_IDLE, EXITQ_FENCES, ...) cost, measured as its user
# times it?
#
#   scripts/env-ab.sh [-n ROUNDS] --env SETTING --env SETTING... -- EXAMPLE ARGS...
#
# SETTING is "" (the environment as is) or space-separated VAR=VALUE
# pairs. Speed is 1 / the whole process's wall time. Prints, for each
# setting after the first, the median of the per-round ratios of its speed
# to the first setting's, with quartiles (the order statistics n/4 from
# each end of the n rounds); > 1 means faster than the first. A run that
# fails stops the comparison (exit 1, naming the setting and what the
# program said): nothing is averaged over it.
#
# -n ROUNDS  rounds (default 21); --env SETTING (at least two): above;
# -h, --help this text. Exit status: 0; 1 the build or a run failed; 2
# usage error.
#
# Example (an idle registered thread, online and offline, docs/results-exitq.md):
#   scripts/env-ab.sh -n 61 --env "" --env EXITQ_IDLE=1 --env EXITQ_IDLE=offline -- defer_free exitq 2 4000000
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
    echo "usage: scripts/env-ab.sh [-n ROUNDS] --env SETTING --env SETTING... -- EXAMPLE ARGS..." >&2
    exit 2
}
# --help anywhere before the example's own arguments.
for a in "$@"; do
    case $a in
    --) break ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    esac
done
rounds=21 envs=()
while [ $# -gt 0 ]; do
    case $1 in
    -n) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]{0,4}$ ]] || { echo "env-ab: -n needs a count of rounds in 1-99999" >&2; exit 2; }
        rounds=$2; shift 2 ;;
    --env) [ $# -ge 2 ] || { echo "env-ab: --env needs a setting (\"\" for none)" >&2; exit 2; }
        for kv in $2; do
            [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*=.*$ ]] || { echo "env-ab: '$kv' is not VAR=VALUE" >&2; exit 2; }
        done
        envs+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) usage ;;
    esac
done
[ ${#envs[@]} -ge 2 ] || { echo "env-ab: give at least two --env settings" >&2; usage; }
[ $# -ge 1 ] || { echo "env-ab: name the example to run after --" >&2; usage; }
example=$1
shift
[ -f "benches/examples/$example.rs" ] || { echo "env-ab: no example benches/examples/$example.rs" >&2; exit 2; }
cargo build -q --release -p benches --example "$example"
# Where cargo put it: $CARGO_TARGET_DIR when set (./target then held an
# older build, which used to be the one run).
binary=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/examples/$example
echo "env-ab: $rounds rounds of '$example $*' at $(git rev-parse --short HEAD) under ${#envs[@]} settings ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))"
python3 - "$rounds" "$binary" "${#envs[@]}" "${envs[@]}" "$@" <<'PY'
import os, signal, statistics as st, subprocess, sys, time
# Ctrl-C: exit 130 (the shell's trap cleans up), not a traceback.
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
rounds, binary, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
settings, args = sys.argv[4:4 + n], sys.argv[4 + n:]

def speed(setting):
    env = dict(os.environ)
    env.update(kv.split("=", 1) for kv in setting.split())
    t0 = time.perf_counter()
    p = subprocess.run([binary, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"env-ab: {binary} under '{setting}' failed ({p.returncode}): {p.stderr.strip()}")
    return 1.0 / wall

ratios = [[] for _ in settings]
for r in range(rounds):
    order = list(range(n))
    order = order[r % n:] + order[:r % n]
    if r % 2:
        order.reverse()
    got = {i: speed(settings[i]) for i in order}
    for i in range(n):
        ratios[i].append(got[i] / got[0])
for i in range(1, n):
    q = sorted(ratios[i])
    print(f"'{settings[i]}' / '{settings[0]}': median {st.median(q):.3f} "
          f"(quartiles {q[len(q) // 4]:.3f}-{q[len(q) - 1 - len(q) // 4]:.3f}, range {q[0]:.3f}-{q[-1]:.3f}, {rounds} rounds)")
PY
