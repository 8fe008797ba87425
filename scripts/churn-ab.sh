#!/usr/bin/env bash
# Two builds of the churn benchmark against each other: the checkout's and
# the one at git revision REV, each run as a whole process, interleaved
# (the order alternating from round to round), and the median of the
# per-round time ratios with its quartiles, plus wall, user and system time
# per thread, peak RSS and minor page faults (each child's own rusage,
# wait4). For a change to exitq: does the whole process get faster, and
# where (user or system time, memory)?
#
#   scripts/churn-ab.sh REV [-n ROUNDS] [--impl IMPL] [--stacks std|recycled] [--peer IMPL]...
#
# -n ROUNDS      interleaved rounds (default 21)
# --impl IMPL    the churn example's program run at both revisions
#                (default exitq; the others: crossbeam seize sdd none held)
# --stacks S     std (std::thread) or recycled (exitq's StackPool), for
#                every program (default recycled)
# --peer IMPL    (repeatable) adds a program from the checkout's build
#                (e.g. crossbeam, or the floors none and held) in the same
#                rounds
# -h, --help     this text
#
# Builds REV in a temporary git worktree with its own target directory
# (target/churn-ab/REV), removed afterwards (also on Ctrl-C). Each pair of
# programs is compared by the median of its per-round time ratios (first /
# second: above 1 the second is faster) with quartiles (the order
# statistics n/4 from each end of the n rounds). A run that fails stops the
# comparison (exit 1, naming the program and what it said): nothing is
# averaged over it. Exit status: 0; 1 a build or a run failed; 2 usage
# error.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
    echo "usage: scripts/churn-ab.sh REV [-n ROUNDS] [--impl IMPL] [--stacks std|recycled] [--peer IMPL]... (--help: what each does)" >&2
    exit 2
}
usage_err() { echo "churn-ab: $*" >&2; usage; }
for a in "$@"; do
    case $a in -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
done
[ $# -ge 1 ] || usage
case $1 in -*) usage_err "the first argument is the revision to compare with, not '$1'" ;; esac
rev=$1
shift
rounds=21 impl=exitq stacks=recycled
peers=()
while [ $# -gt 0 ]; do
    case $1 in
    -n | --impl | --stacks | --peer) [ $# -ge 2 ] && [ -n "$2" ] || usage_err "$1 needs a value" ;;&
    -n) rounds=$2; shift 2 ;;
    --impl) impl=$2; shift 2 ;;
    --stacks) stacks=$2; shift 2 ;;
    --peer) peers+=("$2"); shift 2 ;;
    *) usage_err "unknown argument '$1'" ;;
    esac
done
[[ $rounds =~ ^0*[1-9][0-9]{0,4}$ ]] || usage_err "-n must be a positive count of rounds, not '$rounds'"
rounds=$((10#$rounds))
case $stacks in std | recycled) ;; *) usage_err "--stacks takes std or recycled, not '$stacks'" ;; esac
full=$(git rev-parse --verify --quiet "$rev^{commit}") || { echo "churn-ab: no commit '$rev'" >&2; exit 2; }
short=${full:0:7}
wt=$(mktemp -d)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$wt"' EXIT
git worktree add -q --detach "$wt" "$full"
old_target=$PWD/target/churn-ab/$short
echo "churn-ab: building $short and the checkout" >&2
(cd "$wt" && CARGO_TARGET_DIR=$old_target cargo build -q --release -p benches --example churn)
cargo build -q --release -p benches --example churn
old=$old_target/release/examples/churn
# Where cargo put it: $CARGO_TARGET_DIR when set (./target then held an
# older build, which used to be the one run).
new=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/examples/churn
echo "churn-ab: $rounds rounds, $impl --stacks $stacks, $short against the checkout$([ ${#peers[@]} -gt 0 ] && echo ", ${peers[*]} beside") ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))"
extra=()
for p in "${peers[@]}"; do extra+=("$p" "$new" "$p"); done
python3 - "$rounds" "$stacks" "$short" "$old" "$impl" "checkout" "$new" "$impl" "${extra[@]}" <<'PY'
import os, signal, statistics as st, sys, tempfile, time
# Ctrl-C: exit 130 (the shell's trap cleans up), not a traceback.
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
rounds, stacks = int(sys.argv[1]), sys.argv[2]
a = sys.argv[3:]
progs = [(a[i], a[i + 1], a[i + 2]) for i in range(0, len(a), 3)]
rows = {p[0]: [] for p in progs}
label = lambda name, impl: name if name == impl else f"{name} {impl}"
for r in range(rounds):
    order = progs if r % 2 == 0 else list(reversed(progs))
    for name, binary, impl in order:
        rd, wr = os.pipe()
        errf = tempfile.TemporaryFile()
        t0 = time.perf_counter()
        pid = os.posix_spawn(binary, [binary, impl, "--stacks", stacks], os.environ,
                             file_actions=[(os.POSIX_SPAWN_DUP2, wr, 1), (os.POSIX_SPAWN_DUP2, errf.fileno(), 2),
                                           (os.POSIX_SPAWN_CLOSE, rd)])
        os.close(wr)
        with os.fdopen(rd) as f:
            stdout = f.read()
        _, status, ru = os.wait4(pid, 0)
        t1 = time.perf_counter()
        if os.waitstatus_to_exitcode(status) != 0:
            errf.seek(0)
            sys.exit(f"churn-ab: {name} ({impl}) failed: {errf.read().decode().strip()}")
        threads = int(stdout.split()[1])
        rows[name].append((t1 - t0, ru.ru_utime, ru.ru_stime, threads, ru.ru_maxrss / 1024, ru.ru_minflt))
print(f"{'program':>16} {'wall ms':>9} {'us/thread: wall':>16} {'user':>6} {'sys':>6} {'peak RSS MB':>12} {'minor faults':>13}   (medians)")
for name, _, impl in progs:
    w, u, s, n, rss, flt = (st.median(x[i] for x in rows[name]) for i in range(6))
    print(f"{label(name, impl):>16} {w * 1e3:9.1f} {w / n * 1e6:16.2f} {u / n * 1e6:6.2f} {s / n * 1e6:6.2f} {rss:12.1f} {flt:13.0f}")
for i, (first, _, fimpl) in enumerate(progs):
    for name, _, impl in progs[i + 1:]:
        q = sorted(b[0] / x[0] for b, x in zip(rows[first], rows[name]))
        # Quartiles the same distance from each end (q[(3 * n) // 4] was
        # one above it when 4 divides n: the maximum of 4 rounds).
        print(f"{label(first, fimpl)} time / {label(name, impl)} time, per round: median {st.median(q):.3f} "
              f"(quartiles {q[len(q) // 4]:.3f}-{q[len(q) - 1 - len(q) // 4]:.3f}, {len(q)} rounds)")
PY
