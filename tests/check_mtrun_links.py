#!/usr/bin/env python3
"""mtrun is the minimal runtime: it links nothing of mtc's parser, sema,
autodiff, row tiling, fusion, scheduler, cost model or emitters, and no file
of runtime/ includes a header of compiler/ or dsl/.

usage: check_mtrun_links.py MTC MTRUN SOURCE_DIR [LIBRARY...]

The symbols are looked up with nm in both binaries: each must be defined in
mtc (so a renamed function cannot make the check pass vacuously) and absent
from mtrun, and from each LIBRARY mtrun loads (the cuda backend,
libmt_cuda.so).
"""
import glob
import os
import re
import subprocess
import sys

# one entry point (or central function) of each stage mtrun must not carry
STAGES = {
    "parser": "dsl_parse", "sema": "sema_lower", "op shape rules": "lower_op_call", "row tiling": "tile_rows",
    "autodiff": "autodiff", "fusion": "fuse", "scheduler": "schedule_search", "cost model": "cost_plan",
    "plan writer": "plan_write", "LLVM emitter": "emit_llvm", "CUDA emitter": "cuda_emit", "NVRTC": "cuda_build",
    "--explain": "explain_print", "--explore": "explore_print",
}


def defined(binary):
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) >= 3}


def main():
    mtc, mtrun, src = sys.argv[1:4]
    in_mtc, in_mtrun = defined(mtc), defined(mtrun)
    libs = {os.path.basename(lib): defined(lib) for lib in sys.argv[4:]}
    bad = []
    for stage, sym in STAGES.items():
        if sym not in in_mtc:
            bad.append(f"{sym} ({stage}) is not defined in mtc: the check would pass vacuously; update STAGES")
        if sym in in_mtrun:
            bad.append(f"mtrun links {stage}: {sym} is defined in it")
        for name, syms in libs.items():
            if sym in syms:
                bad.append(f"{name} links {stage}: {sym} is defined in it")
    runtime = os.path.join(src, "runtime", "**")
    for path in sorted(glob.glob(os.path.join(runtime, "*.[ch]"), recursive=True) + glob.glob(os.path.join(runtime, "*.inc"), recursive=True)):
        for n, line in enumerate(open(path), 1):
            if re.match(r'\s*#\s*include\s+"(\.\./)*(compiler|dsl)/', line):
                bad.append(f"{os.path.relpath(path, src)}:{n}: {line.strip()}")
    for b in bad:
        print("FAIL:", b)
    print(f"{'FAIL' if bad else 'ok'}: mtrun ({len(in_mtrun)} symbols){''.join(' and ' + n for n in libs)} link none of {len(STAGES)} compiler stages; "
          f"runtime/ includes nothing of compiler/ or dsl/" if not bad else f"FAIL: {len(bad)} problems")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
