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

2 ranks of llama-tiny on h200 (one GPU a node, one node) under --shard auto:
neither layout fits the ranks, and --explain, --batch auto and -o each exit
1 with the same message (-o wrote a sharded plan priced inf); on h200x8 both
plan them.
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

# 2 ranks of llama-tiny on h200 (one GPU) under --shard auto: neither layout fits the ranks. --explain, --batch
# auto and -o refuse them alike (-o wrote a sharded plan priced inf, --explain exited 1)
tiny = os.path.join(src, "examples/llama-tiny.mt")
firsts = {}
for what in (["--explain"], ["--batch", "auto"], ["-o", plan]):
    batch = [] if what[0] == "--batch" else ["--batch", "2"]
    p = run(mtc, tiny, *batch, "--ranks", "2", *what)
    name = f"mtc llama-tiny --ranks 2 {' '.join(what)} for h200"
    check(p.returncode == 1 and "neither fits" in p.stderr, f"{name}: exit {p.returncode}, not 1 (neither fits)", p)
    check(not os.path.exists(plan), f"{name}: a plan was written")
    firsts[" ".join(what)] = [ln for ln in p.stderr.splitlines() if ln.startswith("mtc: error:")][:1]
check(len({str(v) for v in firsts.values()}) == 1, f"--ranks 2 on h200: the front doors refuse differently: {firsts}")
if os.path.exists(plan):
    os.remove(plan)
# and on h200x8 (8 GPUs a node) both plan them
p = run(mtc, tiny, "--batch", "2", "--ranks", "2", "--target", "h200x8", "--explain")
check(p.returncode == 0 and "the plan: " in p.stdout, "mtc llama-tiny --ranks 2 --explain for h200x8: no plan", p)
p = run(mtc, tiny, "--batch", "2", "--ranks", "2", "--target", "h200x8", "-o", plan)
check(p.returncode == 0 and os.path.exists(plan), "mtc llama-tiny --ranks 2 -o for h200x8: no plan written", p)
if os.path.exists(plan):
    os.remove(plan)

# a cpu target runs it: --explain and -o agree that it fits
p = run(mtc, model, "--target", "tiny-2layers", "--batch", "1", "--explain")
check(p.returncode == 0 and " * " in p.stdout, "mtc heads-65-tiny --explain for tiny-2layers: no plan chosen", p)
p = run(mtc, model, "--target", "tiny-2layers", "--batch", "1", "-o", plan)
check(p.returncode == 0 and os.path.exists(plan), "mtc heads-65-tiny -o for tiny-2layers: no plan written", p)
if os.path.exists(plan):
    os.remove(plan)
sys.exit(finish("checks of one fits"))
