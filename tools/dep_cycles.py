#!/usr/bin/env python3
# Usage: tools/dep_cycles.py [--edges DIR] [BUILDDIR]  (after make; prints the cycles between the library's files, exit 1 if any)
"""File-level dependency cycles between colossal's library sources.

Every object file under BUILDDIR/{libcore,memtier,models} is read with `nm`: the global symbols it
defines (T, D, B, R, ...) belong to its source file, and each undefined symbol is an edge to the file
that defines it. The strongly connected components of that graph with more than one file are the
cycles; for each, the script prints the files and the edges inside it with the symbols they use.
--edges DIR also lists every edge between two files under DIR (e.g. --edges models/lm).
"""
import os
import subprocess
import sys
from collections import defaultdict

DIRS = ("libcore", "memtier", "models")
SRCDIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the sources, for out-of-tree builds
SOURCE_EXTS = (".c", ".cu", ".cc", ".cpp")


def source_of(obj, builddir):
    """libcore/text/libtext_a-tokenizer.o -> libcore/text/tokenizer.c (relative to BUILDDIR), or None."""
    rel = os.path.relpath(obj, builddir)
    folder, base = os.path.split(rel)
    stem = base[:-2]
    if "-" in stem:  # automake names per-target objects TARGET-FILE.o
        stem = stem.split("-", 1)[1]
    for ext in SOURCE_EXTS:
        if any(os.path.exists(os.path.join(top, folder, stem + ext)) for top in (builddir, SRCDIR)):
            return os.path.join(folder, stem + ext)
    return None


def read_symbols(obj):
    """(defined, undefined) global symbol names of one object file."""
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind in ("U", "w", "v"):  # undefined (lower case w/v: weak and undefined)
            undefined.add(name)
        elif kind.isupper() or kind == "u":  # lower case is local to the file, but u (unique global)
            defined.add(name)
    return defined, undefined


def demangle(names):
    """C++ names as written in the source (c++filt), the others unchanged."""
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return list(names)
    return [line.split("(")[0] for line in out.splitlines()]


def strongly_connected(nodes, edges):
    """Tarjan's algorithm, iterative; returns the components in discovery order."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                comps.append(sorted(comp))
    return comps


def main():
    args = sys.argv[1:]
    show = None
    if len(args) >= 2 and args[0] == "--edges":
        show = args[1].rstrip("/") + "/"
        args = args[2:]
    builddir = args[0] if args else "."
    objects = []
    for top in DIRS:
        for root, _, files in os.walk(os.path.join(builddir, top)):
            objects += [os.path.join(root, f) for f in files if f.endswith(".o")]
    if not objects:
        print(f"no object files under {builddir}/{{{','.join(DIRS)}}}: build first", file=sys.stderr)
        return 2
    definers = defaultdict(set)
    uses = {}
    for obj in sorted(objects):
        src = source_of(obj, builddir)
        if src is None:
            print(f"skipping {obj}: no source beside it (a stale object?)", file=sys.stderr)
            continue
        defined, undefined = read_symbols(obj)
        for name in defined:
            definers[name].add(src)
        uses.setdefault(src, set()).update(undefined)
    edges = defaultdict(set)
    via = defaultdict(set)
    for src, undefined in uses.items():
        for name in undefined:
            owners = definers.get(name, set())
            if len(owners) != 1:  # outside the library, or a weak symbol several files emit
                continue
            dst = next(iter(owners))
            if dst != src:
                edges[src].add(dst)
                via[(src, dst)].add(name)
    if show:
        for src in sorted(uses):
            for dst in sorted(edges[src]):
                if src.startswith(show) and dst.startswith(show):
                    print(f"{src} -> {dst}: {' '.join(sorted(demangle(sorted(via[(src, dst)]))))}")
        print()
    cycles = [c for c in strongly_connected(set(uses), edges) if len(c) > 1]
    print(f"{len(uses)} files, {sum(len(v) for v in edges.values())} file-to-file edges, {len(cycles)} cycle(s)")
    for n, comp in enumerate(cycles, 1):
        print(f"\ncycle {n}: {' '.join(comp)}")
        members = set(comp)
        for src in comp:
            for dst in sorted(edges[src] & members):
                print(f"  {src} -> {dst}: {' '.join(sorted(demangle(sorted(via[(src, dst)]))))}")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
