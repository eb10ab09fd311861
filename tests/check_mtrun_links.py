#!/usr/bin/env python3
"""mtrun is the minimal runtime: it links nothing of mtc's stages.

usage: check_mtrun_links.py MTC MTRUN BUILD_DIR [LIBRARY...]

The stages are found, not listed: every global symbol that an object file
of dsl/ or compiler/ defines (BUILD_DIR/CMakeFiles/*.dir, the sanitizer
twins aside), grouped by the stage's folder (the parser, front/, fuse/,
schedule/, emit/, report/). Each must be absent from mtrun and from
each LIBRARY mtrun loads (the cuda backend, libmt_cuda.so). So that the
check cannot pass vacuously, every stage must define symbols and some of
each stage's must be in mtc. (Includes: tests/check_layers.py.)
"""
import os
import subprocess
import sys

from check_layers import objects  # {object file: its floor}, the sanitizer twins aside

# (compiler/mtc.c, the driver, defines only main)
STAGES = ["dsl", "compiler/front", "compiler/fuse", "compiler/schedule", "compiler/emit", "compiler/report"]


def defined(path):
    out = subprocess.run(["nm", "--defined-only", "-g", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) >= 3}


def stage_symbols(build):
    """{stage: symbols its object files define}"""
    syms = {s: set() for s in STAGES}
    for o, floor in objects(build).items():
        if floor in syms:
            syms[floor] |= defined(o) - {"main"}  # every program has one
    return syms


def main():
    mtc, mtrun, build = sys.argv[1:4]
    in_mtc, in_mtrun = defined(mtc), defined(mtrun)
    libs = {os.path.basename(lib): defined(lib) for lib in sys.argv[4:]}
    bad, total = [], 0
    for stage, syms in stage_symbols(build).items():
        total += len(syms)
        if not syms & in_mtc:
            bad.append(f"{stage}: none of its {len(syms)} symbols is in mtc: the check would pass vacuously")
        for name, have in [("mtrun", in_mtrun), *libs.items()]:
            for sym in sorted(syms & have):
                bad.append(f"{name} links {stage}: {sym} is defined in it")
    for b in bad:
        print("FAIL:", b)
    print(f"ok: mtrun ({len(in_mtrun)} symbols){''.join(' and ' + n for n in libs)} define none of the "
          f"{total} symbols of {len(STAGES)} compiler stages" if not bad else f"FAIL: {len(bad)} problems")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
