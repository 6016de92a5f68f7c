#!/usr/bin/env python3
"""The source tree's layering, from its #include lines: the data flows one
way through the folders (docs/architecture.md, "Layers").

Each folder of the product has a rank; a file may include headers of its
own folder or of a folder of lower rank, nothing else. Folders of equal
rank (cpuset/ and memory/; one driver and another) are independent, but
for the exceptions named in ALLOWED. No file includes itself through a
cycle. A folder with no rank fails the test until it is given one.

Run by make check; also by hand: tests/cli/layers.py [SRCDIR]."""
import os
import re
import subprocess
import sys

# Lower ranks are lower layers. nrm/base is the floor under everything.
RANKS = {
    "nrm/base": 0,
    "proto": 0,
    "topology": 1,
    "cpuset": 2,
    "memory": 2,
    "driver": 3,
    "driver/k8s": 4,
    "driver/kubelet": 5,
    "driver/cpu": 6,
    "driver/memory": 6,
    "driver/pci": 6,
    "driver/example": 6,
    "driver/nvidia": 7,
    "nrm": 8,
}
# Vendor plugins are built on the PCI driver's public helpers (docs/pci.md).
ALLOWED = {("driver/nvidia", "driver/pci")}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(srcdir):
    try:
        out = subprocess.run(["git", "-C", srcdir, "ls-files", "*.c", "*.h"], capture_output=True,
                             text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = []
    if not out:  # a tarball's tree (make distcheck), or no git
        for root, dirs, files in os.walk(srcdir):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_build", "build"))]
            out += [os.path.relpath(os.path.join(root, f), srcdir) for f in files if f.endswith((".c", ".h"))]
    return sorted(f for f in out if not f.startswith(("tests/", "build")) and ".pb-c." not in f)


def resolve(srcdir, src, inc):
    """The tree path of an #include "inc" in src, or None for one outside the tree."""
    for cand in (os.path.normpath(os.path.join(os.path.dirname(src), inc)), os.path.normpath(inc)):
        if os.path.exists(os.path.join(srcdir, cand)):
            return cand
    return None


def cycles(graph):
    """Every strongly connected set of more than one node (or a self-loop), by Tarjan."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    srcdir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("NRM_SRCDIR", ".")
    files = sources(srcdir)
    if not files:
        print("no sources found under", srcdir)
        return 1
    bad, edges, folders = [], {}, {}
    for f in files:
        with open(os.path.join(srcdir, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        here = os.path.dirname(f)
        if here not in RANKS:
            bad.append(f"{f}: folder {here}/ has no rank in tests/cli/layers.py")
            continue
        for inc in INCLUDE.findall(text):
            target = resolve(srcdir, f, inc)
            # config.h is configure's output at the top of the build tree.
            if target is None or target.startswith("tests/") or "/" not in target:
                continue
            edges.setdefault(f, set()).add(target)
            there = os.path.dirname(target)
            if there == here:
                continue
            folders.setdefault(here, set()).add(there)
            if there not in RANKS:
                bad.append(f"{f} includes {inc}: folder {there}/ has no rank")
            elif (here, there) in ALLOWED:
                continue
            elif RANKS[there] == RANKS[here]:
                bad.append(f"{f} includes {inc}: {here}/ and {there}/ are independent")
            elif RANKS[there] > RANKS[here]:
                bad.append(f"{f} includes {inc}: upward, from {here}/ to {there}/")
    for comp in cycles(edges):
        bad.append("include cycle between files: " + " ".join(comp))
    for comp in cycles(folders):
        bad.append("include cycle between folders: " + " ".join(comp))
    print(f"{len(files)} files, {sum(len(v) for v in edges.values())} includes inside the tree, "
          f"{sum(len(v) for v in folders.values())} folder edges")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print("PASS: every include goes to the own folder or a lower layer; no cycle")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
