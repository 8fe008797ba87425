#!/usr/bin/env python3
"""Checks each workspace package's declared rust-version against what its
locked dependencies declare: every package reached through normal and
build dependencies (Cargo.lock, as `cargo metadata` resolves it) must
declare a rust-version no newer than the package's own. Dev-dependencies
(tests, examples, benches) are listed but not held to it: a library's
minimum is what its users build.

The package's own code is held to its rust-version by clippy's
`incompatible_msrv` lint (denied in the workspace lints; .ci/run runs
clippy): std APIs stabilised later are refused. Language features are not
checked by any tool here (there is no second toolchain); docs/development.md
says how they were reviewed.

    scripts/msrv-check.py        # exit 1 if a dependency needs a newer Rust
"""
import json
import subprocess
import sys


def ver(s):
    return tuple(int(x) for x in (s or "0").split("."))


def main():
    # The crates build for Linux only: dependencies of other targets (wasm
    # bindings, Windows APIs) are never compiled here.
    host = next(line.split()[1] for line in subprocess.run(
        ["rustc", "-vV"], check=True, capture_output=True, text=True).stdout.splitlines()
        if line.startswith("host:"))
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", host],
        check=True, capture_output=True, text=True).stdout)
    pkgs = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])

    def closure(root, with_dev):
        seen, stack = set(), [root]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            for d in nodes[i]["deps"]:
                kinds = [k["kind"] for k in d["dep_kinds"]
                         # cfg(exitq_loom) only: loom's model-checking build.
                         if "exitq_loom" not in (k.get("target") or "")]
                allowed = (None, "build", "dev") if (with_dev and i == root) else (None, "build")
                if any(k in allowed for k in kinds):
                    stack.append(d["pkg"])
        return seen - {root}

    failed = False
    for m in sorted(members, key=lambda i: pkgs[i]["name"]):
        p = pkgs[m]
        declared = p.get("rust_version")
        if not declared:
            print(f"{p['name']}: no rust-version declared")
            failed = True
            continue

        def newest(ids):
            return max(((ver(pkgs[i].get("rust_version")), pkgs[i]["name"], pkgs[i]["version"])
                        for i in ids), default=((0,), "-", "-"))

        deps = closure(m, False)
        top = newest(deps)
        too_new = sorted((pkgs[i]["name"], pkgs[i]["version"], pkgs[i]["rust_version"])
                         for i in deps if ver(pkgs[i].get("rust_version")) > ver(declared))
        dev_top = newest(closure(m, True) - deps)
        print(f"{p['name']}: rust-version {declared}; newest dependency "
              f"{top[1]} {top[2]} needs {'.'.join(map(str, top[0]))}; "
              f"tests need {'.'.join(map(str, dev_top[0]))} ({dev_top[1]} {dev_top[2]})")
        for name, v, rv in too_new:
            print(f"  {name} {v} needs Rust {rv}, above {p['name']}'s {declared}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
