#!/usr/bin/env python3
"""Two mtrun builds training the same plans, alternated in one run.

usage: bench/train_ab.py OLD_MTRUN NEW_MTRUN [--steps N] [--reps R] [--env K=V ...] [MODEL.mt ...]

Compiles each model (default: the tiny examples llama-tiny, gpt2-tiny,
gemma2-tiny, mixtral-tiny) with the NEW build's mtc (the mtc next to
NEW_MTRUN) into one plan, then runs `mtrun PLAN --steps N` (default 60) with
OLD and NEW in turn, R times each (default 3), so that a machine shared with
other jobs slows both alike. Per model it prints the median wall seconds and
the median CPU seconds (user + system, every thread: an OpenBLAS worker
spinning while it waits counts) of each build and their ratios new/old, and
checks that both builds printed the same final validation loss to 1e-5
relative (a faster step that computes something else is no result).
--env K=V sets a variable for NEW only (to compare a setting against the
default, give the same build twice).
The first 5 training losses of both must agree to 1e-5 relative (a faster
step that computes something else is no result); the final validation
losses are printed, not compared: over hundreds of steps a difference in
the last bits (another GEMM kernel's blocking, vector maths) grows.
"""
import os
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def run_once(mtrun, plan, steps, log, env):
    if os.path.exists(log):  # (mtrun appends each run to its log: this run's alone)
        os.remove(log)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([mtrun, plan, "--steps", str(steps), "--val-every", str(steps), "--log", log],
                       capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{mtrun} {plan} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    m = re.search(r"final val_loss ([0-9.eE+-]+)", p.stdout)
    if not m:
        sys.exit(f"{mtrun}: no final val_loss in\n{p.stdout[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    first = [json.loads(line)["loss"] for line in open(log) if '"loss"' in line][:5]
    return wall, cpu, float(m.group(1)), first


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    old, new = args[0], args[1]
    steps, reps, extra, models = 60, 3, {}, []
    i = 2
    while i < len(args):
        if args[i] == "--steps":
            steps, i = int(args[i + 1]), i + 2
        elif args[i] == "--reps":
            reps, i = int(args[i + 1]), i + 2
        elif args[i] == "--env":
            k, v = args[i + 1].split("=", 1)
            extra[k], i = v, i + 2
        else:
            models.append(args[i])
            i += 1
    if not models:
        models = [f"examples/{m}.mt" for m in ("llama-tiny", "gpt2-tiny", "gemma2-tiny", "mixtral-tiny")]
    mtc = os.path.join(os.path.dirname(new), "mtc")
    env_old = dict(os.environ)
    env_new = dict(os.environ, **extra)
    print(f"old {old}, new {new}{' with ' + str(extra) if extra else ''}; {steps} steps, {reps} runs each, alternated")
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            plan = os.path.join(tmp, "plan.bin")
            p = subprocess.run([mtc, model, "-o", plan], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"mtc {model} failed:\n{p.stderr[-2000:]}")
            res = {"old": [], "new": []}
            for _ in range(reps):
                res["old"].append(run_once(old, plan, steps, os.path.join(tmp, "old.jsonl"), env_old))
                res["new"].append(run_once(new, plan, steps, os.path.join(tmp, "new.jsonl"), env_new))
            wall = {k: statistics.median(r[0] for r in v) for k, v in res.items()}
            cpu = {k: statistics.median(r[1] for r in v) for k, v in res.items()}
            lo, ln = res["old"][0][2], res["new"][0][2]
            fo, fn = res["old"][0][3], res["new"][0][3]
            same = len(fo) == len(fn) and all(abs(a - b) <= 1e-5 * max(abs(a), 1e-30) for a, b in zip(fo, fn))
            print(f"{os.path.basename(model):18s} wall old {wall['old']:6.2f} s new {wall['new']:6.2f} s "
                  f"new/old {wall['new'] / wall['old']:.2f}   cpu old {cpu['old']:6.2f} s new {cpu['new']:6.2f} s "
                  f"new/old {cpu['new'] / cpu['old']:.2f}   final val_loss {lo:.4f} / {ln:.4f}"
                  f"{'' if same else f'  FIRST LOSSES DIFFER: {fo} / {fn}'}")
            if not same:
                sys.exit(1)


if __name__ == "__main__":
    main()
