#!/usr/bin/env python3
"""test_layers.py -- the house rules of docs/ARCHITECTURE.md, checked on the built objects and
the sources.

Who calls whom is read from the objects themselves (nm: the symbols each defines and the ones
it needs), so a call through a declaration in some other header is seen as well as an
#include. Every room is checked against its room header (the table ROOMS below copies each
header's "May call" and "Must not know" lines):
  - no cycle among files: two files never call each other, directly or around a loop;
  - calls and #includes go down the rooms, never up nor sideways: a file calls or includes
    its own room, a room of a lower level, or what its header says it may call;
  - nothing a room's header says it must not know is called or included by the room;
  - tools/ includes only the library's public and utility headers, never its model internals;
  - each room header names every file of its room, and names no file of the room that is gone
    (so the maps cannot drift); docs/ARCHITECTURE.md names every file of src/ and every room;
  - no two source files of the tree (src/, tools/, tests/, fuzz/, bench/) share a base name.

usage: BUILD=build tests/test_layers.py   (make test runs it; prints PASS/FAIL lines)
"""
import collections
import fnmatch
import glob
import os
import re
import subprocess
import sys

BUILD = os.environ.get("BUILD", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the rooms ----------------------------------------------------------------------------

class Room:
    """A folder of the tree, its level (a room calls rooms of lower levels), its header, what it
    may call above or beside it and what it must not know (path prefixes: "src/model." is
    model.c and model.h, "src/encoders/" a whole room)."""

    def __init__(self, prefix, level, header, may=(), must_not=()):
        self.prefix, self.level, self.header = prefix, level, header
        self.may, self.must_not = tuple(may), tuple(must_not)

    def holds(self, path):
        """Whether path is a file of this room (src/ holds only the files directly in it)."""
        if not path.startswith(self.prefix):
            return False
        return self.prefix != "src/" or "/" not in path[len("src/"):]


# From the bottom up. include/plume.h (declarations only) may be included anywhere.
ROOMS = [
    Room("src/kernels/", 0, "src/kernels/kernels.h", may=["src/common."],
         must_not=["src/forward.", "src/model.", "src/pool.", "src/safetensors.", "src/session."]),
    Room("src/chat/", 1, "src/chat/chat.h", may=["src/common."],
         must_not=["src/tokenizer", "src/session.", "src/model.", "src/forward.", "src/sampler."]),
    Room("src/media/", 1, "src/media/media.h", may=["src/common."],
         must_not=["src/encoders/", "src/model.", "src/session.", "src/tokenizer", "src/embd.",
                   "src/encode", "src/chat/"]),
    Room("src/encoders/", 1, "src/encoders/encoders.h",
         may=["src/common.", "src/config.", "src/safetensors.", "src/pool."],
         must_not=["src/media/", "src/model.", "src/forward.", "src/session.", "src/tokenizer",
                   "src/chat/", "src/embd."]),
    Room("src/constrain/", 1, "src/constrain/constrain.h", may=["src/common.", "src/tokenizer."],
         must_not=["src/model.", "src/session.", "src/sampler.", "src/forward.", "tools/"]),
    Room("src/", 2, None, must_not=["tools/"]),
    Room("tools/hub/", 3, "tools/hub/hub.h", must_not=["tools/cli/", "tools/serve/"]),
    Room("tools/serve/", 3, "tools/serve/serve.h", must_not=["tools/cli/", "tools/hub/"]),
    Room("tools/cli/", 4, "tools/cli/cli.h"),
]
# Library headers that tools/ must not include: the model's internals.
PRIVATE = {"model.h", "forward.h", "pool.h", "config.h", "convert.h", "source.h", "quant.h", "safetensors.h", "manifest.h"}

failed = 0


def check(name, ok, why=""):
    global failed
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))
    failed += not ok


def room_of(path):
    for room in ROOMS:
        if room.holds(path):
            return room
    return None


def verdict(src, dst):
    """None when file src may call or include file dst; else why not."""
    if dst.startswith("include/"):
        return None
    a, b = room_of(src), room_of(dst)
    if a is None or b is None:
        return "%s is in no room" % (src if a is None else dst)
    if a is b:
        return None
    if any(dst.startswith(p) for p in a.must_not):
        return "%s must not know %s (%s)" % (a.prefix, dst, a.header or "docs/ARCHITECTURE.md")
    if any(dst.startswith(p) for p in a.may) or b.level < a.level:
        return None
    return "%s (level %d) reaches up or sideways to %s (level %d)" % (src, a.level, dst, b.level)


# ---- the sources and their objects ---------------------------------------------------------

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


def includes(path):
    """(line, the file it names) for each #include "..." of path that resolves in the tree."""
    here = os.path.dirname(path)
    dirs = [here, "include", "src"] + (["tools"] if path.startswith("tools/") else [])
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            for d in dirs:
                p = os.path.normpath(os.path.join(d, m.group(1)))
                if os.path.exists(os.path.join(ROOT, p)):
                    yield n, p
                    break


# ---- the checks ----------------------------------------------------------------------------

def check_calls():
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

    bad = ["%s calls %s: %s" % (s, t, verdict(s, t)) for s in srcs for t in sorted(graph[s]) if verdict(s, t)]
    check("layers_calls_go_down", not bad, "; ".join(bad))


def room_files():
    """Every .c and .h file of the rooms."""
    out = []
    for pattern in ("src/*.[ch]", "src/*/*.[ch]", "tools/*/*.[ch]"):
        out += sorted(glob.glob(os.path.join(ROOT, pattern)))
    return [os.path.relpath(p, ROOT) for p in out]


def check_includes():
    bad = []
    for s in room_files():
        for n, t in includes(s):
            why = verdict(s, t)
            if why:
                bad.append("%s:%d includes %s: %s" % (s, n, t, why))
    check("layers_includes_go_down", not bad, "; ".join(bad))

    private = []
    for s in glob.glob(os.path.join(ROOT, "tools/*/*.[ch]")):
        with open(s, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and os.path.basename(m.group(1)) in PRIVATE and "/" not in m.group(1):
                    private.append("%s:%d includes %s" % (os.path.relpath(s, ROOT), n, m.group(1)))
    check("layers_tools_use_the_public_api", not private, "; ".join(private))


def named_files(text):
    """The file names a comment holds: x.c, x.h, x.[ch] (both), cmd_<name>.c (a pattern)."""
    out = set()
    for m in re.finditer(r"(?<![\w/.<>-])([\w<>]+)\.(\[ch\]|c|h)(?!\w)", text):
        stem, ext = m.group(1), m.group(2)
        for e in (("c", "h") if ext == "[ch]" else (ext,)):
            out.add(re.sub(r"<\w+>", "*", stem) + "." + e)
    return out


def leading_comment(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1) if m else ""


def check_room_maps():
    everything = {os.path.basename(p) for p in room_files()}
    unnamed, stale = [], []
    for room in ROOMS:
        if not room.header:
            continue
        names = named_files(leading_comment(room.header))
        files = [p for p in room_files() if room.holds(p) and p != room.header]
        for p in files:
            base = os.path.basename(p)
            if not any(fnmatch.fnmatchcase(base, n) for n in names):
                unnamed.append(p)
        here = {os.path.basename(p) for p in files} | {os.path.basename(room.header)}
        for n in sorted(names):
            if "*" in n:
                if not any(fnmatch.fnmatchcase(b, n) for b in here):
                    stale.append("%s names %s, which matches no file of %s" % (room.header, n, room.prefix))
            elif n not in here and n not in everything and not os.path.exists(os.path.join(ROOT, "include", n)):
                stale.append("%s names %s, which is no file of the tree" % (room.header, n))
    check("layers_room_headers_name_their_files", not unnamed,
          "not named in their room header: " + " ".join(unnamed))
    check("layers_room_headers_name_no_stale_file", not stale, "; ".join(stale))

    with open(os.path.join(ROOT, "docs", "ARCHITECTURE.md"), encoding="utf-8") as f:
        arch = f.read()
    arch_names = {n for n in named_files(arch)}
    arch_paths = set()
    for m in re.finditer(r"`((?:src|tools)/[\w/]*?)(\w+)\.(\[ch\]|c|h)`", arch):
        for e in (("c", "h") if m.group(3) == "[ch]" else (m.group(3),)):
            arch_paths.add(m.group(1) + m.group(2) + "." + e)
    missing = [p for p in room_files() if room_of(p) and room_of(p).prefix == "src/" and p not in arch_paths]
    missing += [r.prefix for r in ROOMS if "`%s`" % r.prefix not in arch and r.prefix != "src/"]
    check("layers_architecture_names_every_file", not missing and arch_names,
          "docs/ARCHITECTURE.md's file table lacks: " + " ".join(missing))


def check_base_names():
    seen = collections.defaultdict(list)
    skip = ("tests/data/", "tests/vocab/", "tests/clients/node_modules/", "fuzz/corpus/", "fuzz/regressions/")
    for top in ("src", "tools", "tests", "fuzz", "bench"):
        for d, _, fs in os.walk(os.path.join(ROOT, top)):
            rel = os.path.relpath(d, ROOT) + "/"
            if rel.startswith(skip):
                continue
            for f in fs:
                if re.search(r"\.(c|h|py|sh|mjs|js)$", f):
                    seen[f].append(rel + f)
    dup = ["%s (%s)" % (b, ", ".join(sorted(ps))) for b, ps in sorted(seen.items()) if len(ps) > 1]
    check("layers_unique_base_names", not dup and len(seen) > 100, "; ".join(dup))


def main():
    check_calls()
    check_includes()
    check_room_maps()
    check_base_names()


main()
sys.exit(1 if failed else 0)
