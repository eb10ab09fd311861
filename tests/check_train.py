#!/usr/bin/env python3
"""Trains the tiny examples with mtc + mtrun and checks what issue 3 promises.

usage: check_train.py MTC MTRUN equal|converge|accumulate MODEL.mt

equal:    the losses of the first 5 steps through the plan (cpu backend,
          streamed, recomputing each layer) equal the unstreamed reference
          executor's to 1e-5 relative, same seed and data.
accumulate: half the batch with 2 micro-batches a step equals the whole
          batch (the same rows, gradients averaged) to 1e-5.
converge: 500 steps on the bundled byte-level corpus bring the metrics
          file's validation loss from about ln 256 = 5.55 to under 2.5.
Run from the project root (the models name examples/data/... as their data).
"""
import json
import math
import os
import subprocess
import sys
import tempfile


def fail(msg, proc=None):
    print("FAIL:", msg)
    if proc is not None:
        print("--- exit status", proc.returncode, "\n--- stdout\n" + proc.stdout[-3000:] + "\n--- stderr\n" + proc.stderr[-3000:])
    sys.exit(1)


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=1200)


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    mtc, mtrun, mode, model = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "p.bin")
        p = run(mtc, model, "-o", plan)
        if p.returncode != 0:
            fail("mtc failed", p)
        if mode == "equal":
            losses = {}
            for name, extra in (("plan", []), ("reference", ["--reference"])):
                log = os.path.join(tmp, name + ".jsonl")
                p = run(mtrun, plan, "--steps", "5", "--seed", "7", "--log", log, *extra)
                if p.returncode != 0:
                    fail(f"mtrun ({name}) failed", p)
                losses[name] = [m["loss"] for m in metrics(log) if "loss" in m]
            a, b = losses["plan"], losses["reference"]
            if len(a) != 5 or len(b) != 5:
                fail(f"expected 5 losses each, got {a} and {b}")
            for i, (x, y) in enumerate(zip(a, b)):
                if not (math.isfinite(x) and abs(x - y) <= 1e-5 * abs(y)):
                    fail(f"step {i + 1}: plan loss {x!r}, reference {y!r}")
            if not a[4] < a[0]:
                fail(f"the loss did not fall over 5 steps: {a}")
            print(f"ok: 5 losses equal to 1e-5: {a}")
        elif mode == "converge":
            log = os.path.join(tmp, "m.jsonl")
            p = run(mtrun, plan, "--steps", "500", "--log", log)
            if p.returncode != 0:
                fail("mtrun failed", p)
            val = [m["val_loss"] for m in metrics(log) if "val_loss" in m]
            if not val or not 5.0 < val[0] < 6.0:
                fail(f"the first validation loss should be about ln 256 = 5.55: {val[:1]}")
            if not val[-1] < 2.5:
                fail(f"the last validation loss {val[-1]} is not under 2.5 (all: {val})")
            print(f"ok: validation loss {val[0]:.3f} -> {val[-1]:.3f} in 500 steps")
        elif mode == "accumulate":
            # batch B/2 with 2 micro-batches reads the very rows batch B reads,
            # and averages their gradients: the same training, summed in another order
            src = open(model).read()
            batch = int(src.split("batch = ")[1].split()[0])
            half = os.path.join(tmp, "half.mt")
            open(half, "w").write(src.replace(f"batch = {batch}", f"batch = {batch // 2}\n  accumulate = 2"))
            hplan = os.path.join(tmp, "h.bin")
            p = run(mtc, half, "-o", hplan)
            if p.returncode != 0:
                fail("mtc (accumulate = 2) failed", p)
            losses = {}
            for name, pl in (("whole", plan), ("half", hplan)):
                log = os.path.join(tmp, name + ".jsonl")
                p = run(mtrun, pl, "--steps", "5", "--log", log, "--val-batches", "0")
                if p.returncode != 0:
                    fail(f"mtrun ({name}) failed", p)
                losses[name] = [m["loss"] for m in metrics(log) if "loss" in m]
            a, b = losses["whole"], losses["half"]
            if len(a) != 5 or any(abs(x - y) > 1e-5 * abs(x) for x, y in zip(a, b)):
                fail(f"accumulate = 2 at half the batch differs from the whole batch:\n  {a}\n  {b}")
            print(f"ok: batch {batch} and 2 x {batch // 2} agree to 1e-5 over 5 steps: {a} / {b}")
        else:
            fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
