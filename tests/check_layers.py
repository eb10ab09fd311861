#!/usr/bin/env python3
"""The floors of the house: every include and every link points down.

usage: check_layers.py SOURCE_DIR BUILD_DIR

Each source file belongs to the floor of its folder (FLOORS below, the
longest matching prefix). A floor may use only the floors it names and
those they name in turn. Two checks, both against that table:

- includes: every #include "..." of a file under common/, dsl/, compiler/
  or runtime/ names a file of its own floor or of one below it;
- links: every symbol an object file of the project's own libraries and
  programs (BUILD_DIR/CMakeFiles/*.dir, the sanitizer twins aside) leaves
  undefined, where another of those objects defines it, is defined on the
  object's own floor or below it (nm).

It fails on a file no floor claims, so a new folder must be placed in the
table, and on a floor with no file, so the table cannot go stale.
"""
import glob
import os
import re
import subprocess
import sys

# floor: the floors right below it that it may use
FLOORS = {
    "common": [],
    "dsl": ["common"],
    # mtc's stages, in pipeline order; mtc.c drives them all
    "compiler/front": ["dsl"],
    "compiler/fuse": ["common"],
    "compiler/schedule": ["compiler/fuse"],
    "compiler/emit": ["common"],
    "compiler/report": ["compiler/schedule"],
    "compiler": ["compiler/front", "compiler/schedule", "compiler/emit", "compiler/report"],
    # mtrun's parts; the loop, the replay and the plan reader drive them
    "runtime/dist": ["common"],
    "runtime/store": ["runtime/dist"],
    "runtime/backend": ["runtime/store"],
    "runtime/model_io": ["runtime/store"],
    "runtime": ["runtime/backend", "runtime/model_io"],
}
# generated sources, by the object's path under a target's folder
GENERATED = {"dsl/parser.c": "dsl", "dsl/lexer.c": "dsl", "cuda_sources.c": "compiler/emit"}
SOURCE_EXT = (".c", ".h", ".y", ".l", ".cuh", ".inc")


def below(floor):
    """The floors `floor` may use: itself and everything under it."""
    seen, todo = {floor}, list(FLOORS[floor])
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo += FLOORS[f]
    return seen


def floor_of(path):
    best = None
    for f in FLOORS:
        if path.startswith(f + "/") and (best is None or len(f) > len(best)):
            best = f
    return best


def check_includes(src, bad, used):
    for top in ("common", "dsl", "compiler", "runtime"):
        for path in sorted(glob.glob(os.path.join(src, top, "**", "*"), recursive=True)):
            rel = os.path.relpath(path, src)
            if not rel.endswith(SOURCE_EXT):
                continue
            floor = floor_of(rel)
            if floor is None:
                bad.append(f"{rel}: no floor in check_layers.py's FLOORS holds this file")
                continue
            used.add(floor)
            for n, line in enumerate(open(path, errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                to = GENERATED.get(m.group(1)) or floor_of(m.group(1))
                if to is None:
                    bad.append(f"{rel}:{n}: #include \"{m.group(1)}\" names no file of a floor")
                elif to not in below(floor):
                    bad.append(f"{rel}:{n}: {floor} includes {to}, which is not below it: {line.strip()}")


def objects(build):
    """{object file: floor} for the project's own targets, sanitizer twins aside."""
    out = {}
    for d in sorted(glob.glob(os.path.join(build, "CMakeFiles", "*.dir"))):
        if re.search(r"-(asan|tsan)\.dir$", d):
            continue
        for o in glob.glob(os.path.join(d, "**", "*.o"), recursive=True):
            rel = os.path.relpath(o, d)[:-2]  # compiler/schedule/cost.c
            floor = GENERATED.get(rel) or floor_of(rel)
            if floor:
                out[o] = floor
    return out


def nm(args, obj):
    return subprocess.run(["nm", *args, obj], capture_output=True, text=True, check=True).stdout.splitlines()


def check_links(build, bad, used):
    objs = objects(build)
    if not objs:
        bad.append(f"no object files under {build}/CMakeFiles: the link check would pass vacuously")
        return 0
    where = {}  # symbol: floors that define it
    for o, floor in objs.items():
        used.add(floor)
        for line in nm(["--defined-only", "-g"], o):
            parts = line.split()
            if len(parts) == 3:
                where.setdefault(parts[2], set()).add(floor)
    links = 0
    for o, floor in sorted(objs.items()):
        for line in nm(["-u"], o):
            sym = line.split()[-1]
            if sym not in where:
                continue  # the C library, BLAS, LLVM, MPI, ...
            links += 1
            if not where[sym] & below(floor):
                bad.append(f"{os.path.relpath(o, build)} ({floor}) links up: {sym} is defined only in "
                           f"{', '.join(sorted(where[sym]))}")
    return links


def main():
    src, build = sys.argv[1:3]
    bad, used_inc, used_obj = [], set(), set()
    check_includes(src, bad, used_inc)
    links = check_links(build, bad, used_obj)
    for f in FLOORS:
        if f not in used_inc:
            bad.append(f"floor {f} holds no source file: update FLOORS")
    for b in bad:
        print("FAIL:", b)
    print(f"{'FAIL' if bad else 'ok'}: {len(FLOORS)} floors; includes and {links} links between the project's "
          f"objects all point down" if not bad else f"FAIL: {len(bad)} problems")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
