#!/usr/bin/env python3
"""test_exports.py -- libplume.so exports exactly the API of include/plume.h.

The library is compiled with -fvisibility=hidden and every declaration of plume.h carries
PLUME_API (visibility "default"), so the shared library's dynamic symbol table must hold the
names plume.h declares and nothing else: an internal function that leaks (a missing static, a
header of src/ that forgot the marker does not matter: they are hidden) or a declaration whose
definition is missing (or misspelt) both fail here. Checks:
  - every function declaration of plume.h is marked PLUME_API;
  - libplume.so (libplume.dylib on macOS) defines every name plume.h declares;
  - it exports no other name (the linker's own _init, _fini, _edata, _end, __bss_start aside).

usage: BUILD=build tests/test_exports.py   (make test runs it; prints PASS/FAIL lines)
"""
import os
import re
import subprocess
import sys

BUILD = os.environ.get("BUILD", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINKER = {"_init", "_fini", "_edata", "_end", "__bss_start"}

failed = 0


def check(name, ok, why=""):
    global failed
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + why))
    failed += not ok


def header_names():
    """(names declared with PLUME_API, top-level declarations without it) in plume.h."""
    with open(os.path.join(ROOT, "include", "plume.h"), encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # comments hold example calls
    marked, unmarked = set(), []
    for line in text.splitlines():
        m = re.match(r"PLUME_API\s[^(;]*?\b(plume_\w+)\s*\(", line)
        if m:
            marked.add(m.group(1))
        elif re.match(r"(?!typedef|struct|enum|extern|#)[a-z_][\w \*]*\bplume_\w+\s*\(", line):
            unmarked.append(line.strip())
    return marked, unmarked


def library_names(lib):
    """The names lib's dynamic symbol table defines."""
    darwin = lib.endswith(".dylib")
    cmd = ["nm", "-gU", lib] if darwin else ["nm", "-D", "--defined-only", lib]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        part = line.split()
        if len(part) < 2 or part[-2] in ("A", "U", "w"):
            continue
        name = part[-1]
        if darwin and name.startswith("_"):
            name = name[1:]
        names.add(name.split("@")[0])
    return names - LINKER


def main():
    marked, unmarked = header_names()
    check("exports_header_marked", not unmarked and len(marked) > 50,
          "%d marked; declarations without PLUME_API: %s" % (len(marked), "; ".join(unmarked)))
    lib = next((os.path.join(ROOT, BUILD, "libplume." + ext) for ext in ("so", "dylib")
                if os.path.exists(os.path.join(ROOT, BUILD, "libplume." + ext))), None)
    if not lib:
        check("exports_library", False, "no libplume.so under %s: build first" % BUILD)
        return
    names = library_names(lib)
    missing = sorted(marked - names)
    extra = sorted(names - marked)
    check("exports_every_api_name", not missing, "plume.h declares but %s does not export: %s"
          % (os.path.basename(lib), " ".join(missing)))
    check("exports_only_the_api", not extra, "%s exports %d names plume.h does not declare: %s"
          % (os.path.basename(lib), len(extra), " ".join(extra[:40])))


main()
sys.exit(1 if failed else 0)
