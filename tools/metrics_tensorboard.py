#!/usr/bin/env python3
"""Writes mtrun metrics logs (JSON lines, --log) as TensorBoard event files,
through TensorBoard's own writer (tensorboard.summary.Writer; pip install
tensorboard), one run folder per log under OUTDIR, named by the log's file
name less .metrics.jsonl or .jsonl: every number of a step record under
train/NAME (loss, lr, grad_norm, tokens_per_s, ms, and whatever else a step
logs; a list of numbers as train/NAME/0, /1, ..., a list of lists as
train/NAME/I/J: expert_load as train/expert_load/LAYER/EXPERT), each
validation loss as
val/loss, at the record's step. Then `tensorboard --logdir OUTDIR`.

A torn last line (a killed run) is skipped with a warning; a log that cannot
be read, or holds no record, is an error (exit 1).

With --follow, one log is written live while mtrun appends to it: what it
holds, then each record as it comes (flushed a second after), until the
process --pid names ends (or Ctrl-C); start it beside the run, as
`mtrun PLAN & metrics_tensorboard.py LOG -o OUTDIR --follow --pid $!`.

usage: metrics_tensorboard.py LOG.jsonl [LOG.jsonl ...] -o OUTDIR
       metrics_tensorboard.py LOG.jsonl -o OUTDIR --follow [--pid PID]
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_metrics import records  # noqa: E402  (the one reader of a metrics log)


def numbers(tag, v):
    """(tag, value) of every number in v: itself, or those of a list, nested
    or not, under tag/index (expert_load: tag/layer/expert)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [(tag, v)]
    if isinstance(v, list):
        return [t for i, x in enumerate(v) for t in numbers(f"{tag}/{i}", x)]
    return []


def scalars(r):
    """(tag, value) of every number in a step or validation record."""
    if "val_loss" in r:
        return [("val/loss", r["val_loss"])]
    return [t for k, v in r.items() if k not in ("step", "elapsed_s") for t in numbers(f"train/{k}", v)]


def run_name(path):
    name = os.path.basename(path)
    for ext in (".metrics.jsonl", ".jsonl"):
        if name.endswith(ext) and len(name) > len(ext):
            return name[: -len(ext)]
    return name


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def follow(Writer, path, folder, pid):
    """Writes the log's records into folder's events as mtrun appends them, until process pid ends (or Ctrl-C):
    whole lines only (a line being written waits for its newline)."""
    import time
    w, n, at, done = Writer(folder), 0, 0, False
    try:
        while not done:
            done = pid is not None and not alive(pid)  # (a last read after the run ended)
            with open(path) as f:
                f.seek(at)
                for line in f:
                    if not line.endswith("\n"):
                        break
                    at += len(line.encode())
                    try:
                        r = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    for tag, v in scalars(r) if isinstance(r, dict) and "step" in r else []:
                        if math.isfinite(v):
                            w.add_scalar(tag, v, int(r["step"]))
                            n += 1
            w.flush()
            if not done:
                time.sleep(1)
    except KeyboardInterrupt:
        pass
    w.close()
    print(f"{path}: {n} values followed -> {folder}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("-o", "--out", required=True, help="the folder to write the runs' event files into")
    ap.add_argument("--follow", action="store_true", help="write one log's records live, as mtrun appends them")
    ap.add_argument("--pid", type=int, help="with --follow: stop when this process (the mtrun) ends")
    a = ap.parse_args()
    if a.pid is not None and not a.follow:
        ap.error("--pid goes with --follow")
    if a.follow and len(a.logs) != 1:
        ap.error("--follow follows one log")
    try:
        from tensorboard.summary import Writer
    except ImportError as e:
        print(f"metrics_tensorboard.py: error: TensorBoard is not installed ({e}); pip install tensorboard",
              file=sys.stderr)
        return 1
    if a.follow:
        if not os.path.isfile(a.logs[0]):
            print(f"metrics_tensorboard.py: error: {a.logs[0]}: no such log", file=sys.stderr)
            return 1
        return follow(Writer, a.logs[0], os.path.join(a.out, run_name(a.logs[0])), a.pid)
    names = [run_name(p) for p in a.logs]
    if len(set(names)) != len(names):
        print(f"metrics_tensorboard.py: error: two logs would be one run folder: {names}", file=sys.stderr)
        return 1
    for path, name in zip(a.logs, names):
        try:
            recs = records(path)
        except OSError as e:
            print(f"metrics_tensorboard.py: error: {path}: {e.strerror}", file=sys.stderr)
            return 1
        steps = [r for r in recs if "step" in r]
        if not steps:
            print(f"metrics_tensorboard.py: error: {path}: no step or validation record", file=sys.stderr)
            return 1
        w = Writer(os.path.join(a.out, name))
        n = 0
        for r in steps:
            for tag, v in scalars(r):
                if math.isfinite(v):
                    w.add_scalar(tag, v, int(r["step"]))
                    n += 1
        w.close()
        print(f"{path}: {n} values of {len(steps)} records -> {os.path.join(a.out, name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
