#!/usr/bin/env python3
"""Derived block kinds: `block global = local with W = T` (dsl/README.md).

- examples/gemma2-tiny.mt with its global block, a copy of the local one
  but for the window, written as `local with W = T` (a window as long as the
  sequence is full causal attention): the same parameter count and the same
  3 training losses, to the bit, as the example.
- A kind derived with a constant rebound (W = 8) lowers to the same graph
  (mtc --dump-graph, source locations aside) as the same body written out
  with that constant, and to another graph than the base's (the override
  takes effect).

usage: check_derived_kinds.py MTC MTRUN   (from the project root)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import check, finish

EXAMPLE = "examples/gemma2-tiny.mt"
DATA = "examples/data/tinyshakespeare.txt"


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)


def variants(text):
    """The example with its global block derived (W = T), written out with
    window = W2, and derived with W = W2."""
    i0, i1 = text.index('block global "model.layers.{i}."'), text.index("block layers[L]")
    glob = text[i0:i1]
    derived = text[:i0] + "block global = local with W = T\n\n" + text[i1:]
    cfg = text.replace("  W = 16 ", "  W2 = 8\n  W = 16 ")
    i0, i1 = cfg.index('block global "model.layers.{i}."'), cfg.index("block layers[L]")
    written = cfg[:i0] + glob.replace("kv_heads = NKV, scale", "kv_heads = NKV, window = W2, scale") + cfg[i1:]
    derived_w2 = cfg[:i0] + "block global = local with W = W2\n\n" + cfg[i1:]
    derived_same = cfg[:i0] + "block global = local with W = W\n\n" + cfg[i1:]
    return derived, written, derived_w2, derived_same


def losses(mtc, mtrun, model, tmp):
    plan, log = os.path.join(tmp, "p.bin"), os.path.join(tmp, "l.jsonl")
    p = run(mtc, model, "--batch", "2", "--seq", "32", "-o", plan)
    if not check(p.returncode == 0, f"mtc {model}", p):
        return None
    if os.path.exists(log):  # mtrun appends to a log: this run's records alone
        os.remove(log)
    p = run(mtrun, plan, "--steps", "3", "--data", DATA, "--log", log, "--no-save", "--val-batches", "0")
    if not check(p.returncode == 0, f"mtrun {model}", p):
        return None
    return [json.loads(l)["loss"] for l in open(log) if '"loss"' in l and '"step"' in l]


def dump(mtc, model):
    p = run(mtc, model, "--batch", "1", "--seq", "16", "--dump-graph")
    if not check(p.returncode == 0, f"mtc --dump-graph {model}", p):
        return None
    return [re.sub(r"  \([^()]*\)$", "", l) for l in p.stdout.splitlines()]


def params(mtc, model):
    p = run(mtc, model, "--summary", "--json")
    return json.loads(p.stdout)["params_total"] if p.returncode == 0 else None


def main():
    mtc, mtrun = sys.argv[1:3]
    text = open(EXAMPLE).read()
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, t in enumerate(variants(text)):
            paths.append(os.path.join(tmp, f"v{i}.mt"))
            with open(paths[-1], "w") as f:
                f.write(t.replace('data = "data/', f'data = "{os.path.abspath("examples/data")}/'))
        derived, written, derived_w2, derived_same = paths
        n0, n1 = params(mtc, EXAMPLE), params(mtc, derived)
        check(n0 is not None and n0 == n1, f"parameters: the example {n0}, derived {n1}")
        want, got = losses(mtc, mtrun, EXAMPLE, tmp), losses(mtc, mtrun, derived, tmp)
        if check(want and got == want, f"losses: the example {want}, with global = local with W = T {got}"):
            print(f"ok   global = local with W = T: {n1:,} parameters and the example's losses {got}")
        a, b, c = dump(mtc, written), dump(mtc, derived_w2), dump(mtc, derived_same)
        if a and b and c:
            same = a == b
            check(same, "local with W = W2 lowers to another graph than the body written out with window = W2: "
                        + next((f"{x} | {y}" for x, y in zip(a, b) if x != y), "(lengths)"))
            check(b != c, "rebinding W changed nothing in the graph")
            if same and b != c:
                print(f"ok   local with W = W2: the written-out body's graph ({len(a)} dump lines), not the base's")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
