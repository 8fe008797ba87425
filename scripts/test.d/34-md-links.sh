#!/usr/bin/env bash
# Every relative link of the tracked Markdown files (third_party/ left
# out) resolves: the file exists and the anchor is one of the target's
# headings by GitHub's slug rules; and every `docs/<name>.md#anchor` in the
# tracked *.rs, *.sh and *.py files too (scripts/check-md-links.py).
# Moving a section between docs/*.md files used to leave links to it
# pointing at the old file. Needs python3 (3.11, standard library only).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/test.d/lib/skip.sh
. scripts/test.d/lib/skip.sh
need python3 "the Markdown link check needs python3" || exit 0
echo "md-links: scripts/check-md-links.py (relative links and anchors of the tracked *.md, docs/*.md#anchor in code)" >&2
python3 scripts/check-md-links.py
