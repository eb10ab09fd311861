#!/usr/bin/env python3
"""mtc and mtrun built without the CUDA toolkit (cmake -DMT_CUDA=OFF, or no
toolkit found): registered only in such a tree (tests/CMakeLists.txt).

- a cpu target's plan (schedules/tiny-2layers.target) is written and trains
  3 steps on the cpu backend, its loss finite and falling from ln 256;
- a GPU target (the default h200) is refused, exit 1, saying that this mtc
  has no NVRTC and what to do, and no plan is written;
- --emit-cuda still writes the CUDA C (it needs no toolkit);
- mtrun --device cuda finds no cuda backend: exit 2, one line.

usage: check_cpu_only.py MTC MTRUN    (from the project root)
"""
import math
import os
import sys
import tempfile

from checks import check, finish, losses, run


def main():
    mtc, mtrun = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as t:
        plan = os.path.join(t, "cpu.bin")
        p = run(mtc, "examples/llama-tiny.mt", "--target", "tiny-2layers", "--batch", "1", "-o", plan)
        check(p.returncode == 0 and os.path.exists(plan), "a cpu target's plan without the CUDA toolkit", p)
        log = os.path.join(t, "cpu.jsonl")
        p = run(mtrun, plan, "--steps", "3", "--val-batches", "0", "--log", log)
        ls = losses(log) if p.returncode == 0 else []
        check(p.returncode == 0 and len(ls) == 3 and all(math.isfinite(x) for x in ls) and ls[0] < math.log(256) + 0.5,
              f"it trains on the cpu backend: {ls}", p)

        gpu = os.path.join(t, "gpu.bin")
        p = run(mtc, "examples/llama-tiny.mt", "-o", gpu)
        check(p.returncode == 1 and "built without the CUDA toolkit" in p.stderr and "(sm_90)" in p.stderr
              and "--target local" in p.stderr and not os.path.exists(gpu),
              "a GPU target is refused, saying why and what to do", p)

        cu = os.path.join(t, "k.cu")
        p = run(mtc, "examples/llama-tiny.mt", "--emit-cuda", cu)
        check(p.returncode == 0 and "__global__" in (open(cu).read() if os.path.exists(cu) else ""),
              "--emit-cuda needs no toolkit", p)

        p = run(mtrun, plan, "--device", "cuda", "--steps", "1")
        check(p.returncode == 2 and p.stderr.startswith("mtrun: --device cuda: ") and p.stderr.count("\n") == 1,
              "--device cuda: no cuda backend, one line, exit 2", p)
    return finish("cpu-only build checks")


if __name__ == "__main__":
    sys.exit(main())
