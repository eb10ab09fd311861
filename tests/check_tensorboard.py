#!/usr/bin/env python3
"""tools/metrics_tensorboard.py: an mtrun metrics log as TensorBoard events,
read back with TensorBoard's own reader (EventAccumulator):

- llama-tiny trained 4 steps, validated every 2: train/loss, train/lr,
  train/grad_norm at steps 1..4 and val/loss at 0, 2, 4, each the log's
  value as float32;
- a step record's list of numbers (as a per-expert load would be) becomes
  one series per index; a torn last line is skipped with a warning;
- --follow --pid: the events of a run written while it runs (read back
  before it ends), and all its steps once it has;
- a missing log and a log without records are errors (exit 1).

usage: check_tensorboard.py MTC MTRUN    (from the project root)
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from checks import check, finish, run

TOOL = "tools/metrics_tensorboard.py"


def series(folder):
    """{tag: [(step, value)]} of a run folder's scalar events."""
    ea = EventAccumulator(folder, size_guidance={"tensors": 0})  # (0: every event, not a sample of 10)
    ea.Reload()
    return {t: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in ea.Tensors(t)]
            for t in ea.Tags()["tensors"]}


def check_follow(mtrun, j):
    """--follow --pid: events written while mtrun runs (read back before it ends), all of them once it has."""
    log = j("live.metrics.jsonl")
    q = subprocess.Popen([mtrun, j("p.bin"), "--steps", "100000", "--val-every", "100000", "--val-batches", "0",
                          "--no-save", "--log", log], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(log) and q.poll() is None:
        time.sleep(0.1)
    tool = subprocess.Popen([sys.executable, TOOL, log, "-o", j("tb"), "--follow", "--pid", str(q.pid)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    live, t0 = [], time.time()
    while len(live) < 3 and time.time() - t0 < 120 and q.poll() is None:
        time.sleep(1)
        live = series(j("tb", "live")).get("train/loss", []) if os.path.isdir(j("tb", "live")) else []
    running = q.poll() is None
    q.send_signal(signal.SIGINT)
    q.wait(timeout=120)
    out, err = tool.communicate(timeout=120)
    steps = [json.loads(line)["step"] for line in open(log) if '"loss"' in line]
    got = [s for s, _ in series(j("tb", "live")).get("train/loss", [])]
    check(running and len(live) >= 3 and tool.returncode == 0 and got == steps and len(steps) > len(live),
          f"--follow: {len(live)} losses read while mtrun ran ({running}), then all {len(got)} of {len(steps)}: "
          f"{out!r} {err[-300:]!r}")


def main():
    mtc, mtrun = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as t:
        j = lambda *p: os.path.join(t, *p)
        check(run(mtc, "examples/llama-tiny.mt", "--target", "tiny-2layers", "--batch", "2", "-o", j("p.bin")).returncode == 0,
              "mtc llama-tiny")
        p = run(mtrun, j("p.bin"), "--steps", "4", "--val-every", "2", "--val-batches", "1", "--no-save",
                "--log", j("run.metrics.jsonl"))
        check(p.returncode == 0, "4 steps", p)
        recs = [json.loads(line) for line in open(j("run.metrics.jsonl"))] if p.returncode == 0 else []
        p = run(sys.executable, TOOL, j("run.metrics.jsonl"), "-o", j("tb"))
        check(p.returncode == 0 and os.path.isdir(j("tb", "run")), "the tool writes a run folder named by the log", p)
        got = series(j("tb", "run")) if p.returncode == 0 else {}
        f32 = lambda x: float(np.float32(x))
        for key in ("loss", "lr", "grad_norm"):
            want = [(r["step"], f32(r[key])) for r in recs if key in r]
            check(len(want) == 4 and got.get(f"train/{key}") == want, f"train/{key}: {got.get(f'train/{key}')} vs {want}")
        want = [(r["step"], f32(r["val_loss"])) for r in recs if "val_loss" in r]
        check([s for s, _ in want] == [0, 2, 4] and got.get("val/loss") == want, f"val/loss: {got.get('val/loss')} vs {want}")

        # a list of numbers per step, and a torn last line
        with open(j("moe.jsonl"), "w") as f:
            f.write('{"config": {"model": "m"}}\n')
            f.write('{"step": 1, "loss": 2.5, "expert_load": [0.25, 0.75]}\n')
            f.write('{"step": 2, "loss": 2.0, "expert_load": [0.5, 0.5]}\n{"step": 3, "lo')
        p = run(sys.executable, TOOL, j("moe.jsonl"), "-o", j("tb"))
        got = series(j("tb", "moe")) if p.returncode == 0 else {}
        check(p.returncode == 0 and "moe.jsonl:4: warning: not a JSON record, skipped" in p.stderr
              and got.get("train/expert_load/1") == [(1, 0.75), (2, 0.5)] and got.get("train/loss") == [(1, 2.5), (2, 2.0)],
              f"a list per step, one series per index; a torn line skipped: {got}", p)

        check_follow(mtrun, j)

        p = run(sys.executable, TOOL, j("missing.jsonl"), "-o", j("tb"))
        check(p.returncode == 1 and "missing.jsonl" in p.stderr, "a missing log is an error", p)
        open(j("empty.jsonl"), "w").write('{"config": {}}\n')
        p = run(sys.executable, TOOL, j("empty.jsonl"), "-o", j("tb"))
        check(p.returncode == 1 and "no step or validation record" in p.stderr, "a log without records is an error", p)
    return finish("TensorBoard checks")


if __name__ == "__main__":
    sys.exit(main())
