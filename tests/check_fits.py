#!/usr/bin/env python3
"""mtc's front doors agree on whether a model fits a target.

usage: check_fits.py MTC SOURCE_DIR WORK_DIR

tests/models/heads-65-tiny.mt has query and key heads 65 wide and value
heads 64: no CUDA kernel of mt's runs that attention (the fp32 template takes
one head width, the tensor-core one heads of 64, 128, 192 or 256). For h200
(f32 and bf16), --explain, --explain --json, --explore, --batch auto and -o
each exit 1 with the same located message and write nothing (--explain
priced it on the fp32 fallback and said it fits, while -o refused it). For
the cpu target tiny-2layers, which runs it, --explain and -o both plan it.
"""
import os
import sys

from checks import check, finish, run

mtc, src, work = sys.argv[1:4]
model = os.path.join(src, "tests/models/heads-65-tiny.mt")
plan = os.path.join(work, "heads-65.plan")
WHY = "attention with query and key heads 65 wide but value heads 64 has a CUDA kernel only on tensor cores"

for dtype in ("f32", "bf16"):
    firsts = {}
    for what in (["--explain"], ["--explain", "--json"], ["--explore"], ["--batch", "auto"], ["-o", plan]):
        if os.path.exists(plan):
            os.remove(plan)
        p = run(mtc, model, "--target", "h200", "--dtype", dtype, *what)
        name = f"mtc heads-65-tiny --dtype {dtype} {' '.join(what)} for h200"
        check(p.returncode == 1, f"{name}: exit {p.returncode}, not 1 (no CUDA kernel runs its attention)", p)
        check(WHY in p.stderr, f"{name}: the refusal does not say why", p)
        check(not os.path.exists(plan), f"{name}: a plan was written")
        check(p.stdout == "", f"{name}: printed a table for a model it refuses", p)
        firsts[" ".join(what)] = p.stderr.splitlines()[0] if p.stderr else ""
    check(len(set(firsts.values())) == 1, f"--dtype {dtype}: the front doors refuse differently: {firsts}")

# a cpu target runs it: --explain and -o agree that it fits
p = run(mtc, model, "--target", "tiny-2layers", "--batch", "1", "--explain")
check(p.returncode == 0 and " * " in p.stdout, "mtc heads-65-tiny --explain for tiny-2layers: no plan chosen", p)
p = run(mtc, model, "--target", "tiny-2layers", "--batch", "1", "-o", plan)
check(p.returncode == 0 and os.path.exists(plan), "mtc heads-65-tiny -o for tiny-2layers: no plan written", p)
if os.path.exists(plan):
    os.remove(plan)
sys.exit(finish("checks of one fits"))
