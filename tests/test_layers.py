#!/usr/bin/env python3
"""test_layers.py -- the house rules of docs/ARCHITECTURE.md, checked on the built objects.

Who calls whom is read from the objects themselves (nm: the symbols each defines and the ones
it needs), so a call through a declaration in some other header is seen as well as an
#include. Rules:
  - no cycle among files: two files never call each other, directly or around a loop;
  - calls go down the rooms, never up: src/kernels/ < src/ < tools/hub/, tools/serve/ < tools/cli/
    (hub and serve never call each other);
  - tools/ includes only the library's public and utility headers, never its model internals.

usage: BUILD=build tests/test_layers.py   (make test runs it; prints PASS/FAIL lines)
"""
import collections
import glob
import os
import re
import subprocess
import sys

BUILD = os.environ.get("BUILD", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Rooms from the bottom up; a file may call its own room and the rooms below it.
ROOMS = [("src/kernels/", 0), ("src/", 1), ("tools/hub/", 2), ("tools/serve/", 2), ("tools/cli/", 3)]
# Library headers that tools/ must not include: the model's internals.
PRIVATE = {"model.h", "forward.h", "pool.h", "config.h", "convert.h", "source.h", "quant.h", "safetensors.h"}

failed = 0


def check(name, ok, why=""):
    global failed
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))
    failed += not ok


def room_of(src):
    for prefix, level in ROOMS:
        if src.startswith(prefix):
            return prefix, level
    return None, None


def sources():
    """The C files of the library and the CLI, as the Makefile builds them."""
    out = []
    for pattern in ("src/*.c", "src/*/*.c", "tools/*/*.c"):
        out += sorted(glob.glob(os.path.join(ROOT, pattern)))
    return [os.path.relpath(p, ROOT) for p in out]


def symbols(obj):
    """(defined, needed) global symbols of an object file."""
    text = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, needed = set(), set()
    for line in text.splitlines():
        part = line.split()
        if len(part) < 2:
            continue
        if part[1] in "TDBRCVW":
            defined.add(part[0])
        elif part[1] == "U":
            needed.add(part[0])
    return defined, needed


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def main():
    srcs = [s for s in sources() if os.path.exists(os.path.join(ROOT, BUILD, s[:-2] + ".o"))]
    if not srcs:
        check("layers_objects", False, "no objects under %s: build first" % BUILD)
        return
    owner, needs = {}, {}
    for s in srcs:
        defined, needed = symbols(os.path.join(ROOT, BUILD, s[:-2] + ".o"))
        needs[s] = needed
        for sym in defined:
            owner.setdefault(sym, s)
    graph = {s: set() for s in srcs}
    for s in srcs:
        for sym in needs[s]:
            t = owner.get(sym)
            if t and t != s:
                graph[s].add(t)

    loops = cycles(graph)
    check("layers_no_cycle", not loops, "; ".join(" <-> ".join(c) for c in loops))

    upward = []
    for s in srcs:
        room, level = room_of(s)
        for t in sorted(graph[s]):
            troom, tlevel = room_of(t)
            if troom != room and (tlevel is None or level is None or tlevel >= level):
                upward.append("%s calls %s" % (s, t))
    check("layers_calls_go_down", not upward, "; ".join(upward))

    private = []
    for s in glob.glob(os.path.join(ROOT, "tools/*/*.[ch]")):
        with open(s, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and os.path.basename(m.group(1)) in PRIVATE and "/" not in m.group(1):
                    private.append("%s:%d includes %s" % (os.path.relpath(s, ROOT), n, m.group(1)))
    check("layers_tools_use_the_public_api", not private, "; ".join(private))


main()
sys.exit(1 if failed else 0)
