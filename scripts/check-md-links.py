#!/usr/bin/env python3
"""Checks the repository's relative Markdown links and their anchors.

For every tracked *.md file (`git ls-files '*.md'`, third_party/ left out),
each relative link -- inline `[text](path)`, `[text](path#anchor)`,
`[text](#anchor)`, images, and reference definitions `[x]: path#anchor` --
must name a file or directory that exists, and an anchor must be one the
target Markdown file has: a heading's slug by GitHub's rules (lowercased;
punctuation other than `-` and `_` dropped; each space a `-`; a repeated
slug gets `-1`, `-2`, ...), or an HTML `id`/`name`. Headings in fenced code
blocks make no anchor; links in fenced code blocks and in inline code
spans are not links. A `#L12` or `#L12-L20` anchor on a non-Markdown
file is accepted as GitHub's line anchor. http(s), mailto and other
URLs with a scheme are not checked.

The tracked *.rs, *.sh and *.py files are searched too, for mentions of
a Markdown file under docs/ (`docs/` then a name ending in `.md`, with an
optional `#anchor`; the path is relative to the repository's root), in
comments and in strings alike: the file must exist and the anchor must be
one of its headings.

Prints each broken link as `file:line: target: reason` on stdout, a
one-line summary on stderr, and exits 1 if any link is broken, else 0.
Python 3.11, standard library only.

Usage: scripts/check-md-links.py [REPO_ROOT]   (default: this checkout)
"""

import html
import os
import re
import subprocess
import sys
import unicodedata
import urllib.parse

FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ID = re.compile(r"""<[A-Za-z][^>]*?\s(?:id|name)\s*=\s*["']([^"']+)["']""")
# An inline link or image: [text](target "title"). The text may hold one
# level of nested brackets and run over lines.
INLINE = re.compile(
    r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\(\s*(<[^<>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"""(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?\s*\)"""
)
REFDEF = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*(<[^<>\n]*>|\S+)", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINE_ANCHOR = re.compile(r"^L\d+(?:C\d+)?(?:-L\d+(?:C\d+)?)?$")
PARAGRAPH_END = re.compile(r"\n[ \t]*\n")
# A mention of a docs page (with or without its anchor) in a code file, not
# inside a longer path.
CODE_MENTION = re.compile(
    r"(?<![A-Za-z0-9_./-])docs/[A-Za-z0-9_./-]*?[A-Za-z0-9_-]\.md(?:#[A-Za-z0-9_-]+)?"
)


def strip_fences(lines):
    """The lines with fenced code blocks' lines blanked (fences included)."""
    out = []
    fence = None
    for line in lines:
        if fence is None:
            m = FENCE_OPEN.match(line)
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = m.group(1)
                out.append("")
                continue
            out.append(line)
        else:
            s = line.strip()
            if s and s[0] == fence[0] and set(s) == {fence[0]} and len(s) >= len(fence):
                fence = None
            out.append("")
    return out


def heading_text(raw):
    """What GitHub renders for a heading's Markdown, as plain text."""
    t = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", raw)  # links
    t = re.sub(r"<[^>]+>", "", t)  # inline HTML
    t = re.sub(r"\\(.)", r"\1", t)  # backslash escapes
    t = t.replace("`", "")  # code spans keep their text
    return html.unescape(t)


def slug(text):
    """GitHub's slug of a heading's text (github-slugger, before dedup)."""
    kept = []
    for c in text.lower():
        if c in " -_" or unicodedata.category(c)[0] in "LNM":
            kept.append(c)
    return "".join(kept).replace(" ", "-")


class Slugger:
    def __init__(self):
        self.seen = {}

    def add(self, text):
        base = slug(text)
        result = base
        while result in self.seen:
            self.seen[base] += 1
            result = f"{base}-{self.seen[base]}"
        self.seen[result] = 0
        return result


_anchor_cache = {}


def anchors(path):
    """The anchors a Markdown file has: its headings' slugs and HTML ids."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        lines = strip_fences(f.read().split("\n"))
    found = set()
    slugger = Slugger()
    for i, line in enumerate(lines):
        m = ATX.match(line)
        if m:
            found.add(slugger.add(heading_text(m.group(2) or "")))
        elif (
            i > 0
            and SETEXT.match(line)
            and lines[i - 1].strip()
            and not ATX.match(lines[i - 1])
            and not lines[i - 1].lstrip().startswith(("|", "-", "*", "+", ">"))
            and not (line.strip().startswith("-") and "|" in lines[i - 1])
        ):
            found.add(slugger.add(heading_text(lines[i - 1].strip())))
        for hm in HTML_ID.finditer(line):
            found.add(hm.group(1))
    _anchor_cache[path] = found
    return found


def resolve(root, src, target):
    """None if a link from the file src to target resolves, else why not."""
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None
    path, _, anchor = target.partition("#")
    path = urllib.parse.unquote(path)
    anchor = urllib.parse.unquote(anchor)
    if not path:
        full = src
    elif path.startswith("/"):
        full = os.path.normpath(os.path.join(root, path.lstrip("/")))
    else:
        full = os.path.normpath(os.path.join(os.path.dirname(src), path))
    if os.path.relpath(full, root).startswith(".."):
        return "outside the repository"
    if not os.path.exists(full):
        return "no such file"
    if not anchor or os.path.isdir(full):
        return None
    if not full.endswith(".md"):
        if LINE_ANCHOR.match(anchor):
            return None
        return f"anchor #{anchor} on a file that is not Markdown"
    if anchor not in anchors(full):
        return f"no heading or id for #{anchor} in {os.path.relpath(full, root)}"
    return None


def code_free(body):
    """The text with inline code spans, HTML comments and backslash escapes
    blanked (newlines kept), scanning left to right as CommonMark does: a
    run of n backticks opens a span that the next run of exactly n closes,
    within its paragraph; a run that is never closed is literal text."""
    out = list(body)
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == "\\" and i + 1 < n and body[i + 1] in "\\`[]()!<>*_#":
            out[i] = out[i + 1] = " "
            i += 2
        elif c == "<" and body.startswith("<!--", i):
            end = body.find("-->", i + 4)
            end = n if end < 0 else end + 3
            for k in range(i, end):
                if out[k] != "\n":
                    out[k] = " "
            i = end
        elif c == "`":
            j = i
            while j < n and body[j] == "`":
                j += 1
            run = j - i
            para_end = PARAGRAPH_END.search(body, j)
            limit = para_end.start() if para_end else n
            close = None
            for m in re.finditer(r"`+", body[j:limit]):
                if len(m.group(0)) == run:
                    close = j + m.end()
                    break
            if close is None:
                i = j  # literal backticks
                continue
            for k in range(i, close):
                if out[k] != "\n":
                    out[k] = " "
            i = close
        else:
            i += 1
    return "".join(out)


def markdown_links(text):
    """(line, target) of each link outside fenced code and code spans."""
    lines = strip_fences(text.split("\n"))
    body = code_free("\n".join(lines))
    found = []
    for m in INLINE.finditer(body):
        line = body.count("\n", 0, m.start(2)) + 1
        found.append((line, m.group(2)))
    for m in REFDEF.finditer(body):
        line = body.count("\n", 0, m.start(2)) + 1
        found.append((line, m.group(2)))
    found.sort()
    return found


def tracked(root, *patterns):
    out = subprocess.run(
        ["git", "-C", root, "ls-files", "-z", "--", *patterns],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [p for p in out.split("\0") if p and not p.startswith("third_party/")]


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    if len(argv) == 2:
        root = argv[1]
    else:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.path.abspath(
        subprocess.run(
            ["git", "-C", root, "rev-parse", "--show-toplevel"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    broken = 0
    checked = 0
    md_files = tracked(root, "*.md")
    for rel in md_files:
        src = os.path.join(root, rel)
        if not os.path.exists(src):
            continue  # deleted in the work tree, not yet in the index
        with open(src, encoding="utf-8") as f:
            text = f.read()
        for line, target in markdown_links(text):
            checked += 1
            reason = resolve(root, src, target)
            if reason:
                broken += 1
                print(f"{rel}:{line}: {target}: {reason}")
    code_files = tracked(root, "*.rs", "*.sh", "*.py")
    for rel in code_files:
        src = os.path.join(root, rel)
        if not os.path.exists(src):
            continue
        with open(src, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                for m in CODE_MENTION.finditer(line):
                    target = m.group(0)
                    checked += 1
                    reason = resolve(root, src, "/" + target)  # from the root
                    if reason:
                        broken += 1
                        print(f"{rel}:{n}: {target}: {reason}")
    print(
        f"check-md-links: {checked} links in {len(md_files)} Markdown files and "
        f"{len(code_files)} code files, {broken} broken",
        file=sys.stderr,
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
