#!/usr/bin/env python3
"""Checks `mtc --dump-kernels` on the tiny examples: a block launches at most
half as many non-GEMM kernels as it has non-GEMM ops, forward and backward
counted separately, and every example's dump is well formed.

An op is a graph node that computes: not an input, parameter, view,
reshape, constant or arange. GEMM ops are matmuls; attention is a non-GEMM
op. A non-GEMM kernel is a launched expression or attention kernel; an
expression kernel that runs as a GEMM's epilogue (on each row block the
GEMM has just written) is part of that GEMM kernel and not counted again.

usage: check_kernels.py MTC EXAMPLES_DIR
"""
import re
import subprocess
import sys

COUNT = re.compile(r"count (\w+) (forward|backward): ops (\d+) gemm_ops (\d+) non_gemm_ops (\d+) kernels (\d+) "
                   r"gemm_kernels (\d+) non_gemm_kernels (\d+) epilogues (\d+)")


def counts(mtc, model):
    out = subprocess.run([mtc, model, "--dump-kernels"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"FAIL: mtc {model} --dump-kernels exited {out.returncode}: {out.stderr}")
    found = {}
    for m in COUNT.finditer(out.stdout):
        part, side = m.group(1), m.group(2)
        ops, gemm_ops, non_gemm_ops, kernels, gemm_kernels, non_gemm_kernels, epilogues = map(int, m.groups()[2:])
        assert ops == gemm_ops + non_gemm_ops and kernels == gemm_kernels + non_gemm_kernels, m.group(0)
        found[(part, side)] = (non_gemm_ops, non_gemm_kernels)
    if len(found) != 6:
        raise SystemExit(f"FAIL: {model}: expected 6 count lines (3 parts x 2 sides), got {len(found)}:\n{out.stdout}")
    return found


def main():
    mtc, examples = sys.argv[1], sys.argv[2]
    failures = 0
    for name in ("llama-tiny.mt", "gpt2-tiny.mt"):
        found = counts(mtc, f"{examples}/{name}")
        for side in ("forward", "backward"):
            ops, kernels = found[("block", side)]
            ok = 2 * kernels <= ops and ops > 0
            print(f"{'ok  ' if ok else 'FAIL'} {name} block {side}: {kernels} non-GEMM kernels for {ops} non-GEMM ops")
            failures += not ok
    for name in ("gpt2.mt", "llama3-8b.mt", "qwen2-7b.mt"):
        counts(mtc, f"{examples}/{name}")  # every example fuses
        print(f"ok   {name} fuses")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
