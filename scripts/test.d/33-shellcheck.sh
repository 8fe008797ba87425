#!/usr/bin/env bash
# Lints every shell script with shellcheck at warning level: the scripts,
# the test suites, vm-run.sh with the parts it sources (scripts/vm/*.sh,
# -x), and the guest's init (scripts/vm/init.sh, busybox's ash, checked
# as dash).
# Needs shellcheck (Debian package, scripts/test-setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
if ! command -v shellcheck >/dev/null 2>&1; then
    skip "shellcheck is not installed (apt-get install shellcheck)"
    exit 0
fi
scripts=(scripts/*.sh scripts/test.d/*.sh)
echo "shellcheck: -x -S warning ${scripts[*]}; -s dash scripts/vm/init.sh" >&2
shellcheck -x -S warning "${scripts[@]}"
shellcheck -s dash -S warning scripts/vm/init.sh
echo "ok - shellcheck: ${#scripts[@]} scripts and the guest init"
