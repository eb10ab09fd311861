#!/usr/bin/env python3
"""Draws mtrun metrics logs (JSON lines, --log) into one PNG with matplotlib:
training loss and validation loss against the step (top), the learning rate
(bottom); one colour per log, labelled by its file name (or its config
record's model and schedule with --label config).

usage: plot_metrics.py LOG.jsonl [LOG.jsonl ...] -o OUT.png [--label file|config] [--title T]
"""
import argparse
import json
import os
import sys


def records(path):
    """The records of the log's last run, in order: mtrun appends each run to
    its log, a new one starting with a config record from step 0 (a resumed
    part goes on with its run). A line that is no JSON record (a torn last
    line of a killed run) is skipped with a warning. metrics_tensorboard.py reads
    logs through it too."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                print(f"{path}:{n}: warning: not a JSON record, skipped", file=sys.stderr)
                continue
            if isinstance(r, dict):
                out.append(r)
    starts = [i for i, r in enumerate(out) if isinstance(r.get("config"), dict) and r["config"].get("from_step") == 0]
    return out[starts[-1]:] if starts else out


def read(path):
    """steps, losses, val steps, val losses, lrs, config of one log; a torn last line (a killed run) is skipped."""
    s, loss, vs, val, lr, config = [], [], [], [], [], {}
    for r in records(path):
        if "config" in r:
            config = r["config"]
        elif "loss" in r:
            s.append(r["step"])
            loss.append(r["loss"])
            lr.append(r.get("lr"))
        elif "val_loss" in r:
            vs.append(r["step"])
            val.append(r["val_loss"])
    return s, loss, vs, val, lr, config


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("-o", "--out", required=True, help="the PNG to write")
    ap.add_argument("--label", choices=["file", "config"], default="file")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    drawn = 0
    for i, path in enumerate(a.logs):
        if not os.path.isfile(path):
            sys.exit(f"{path}: error: no such file")
        s, loss, vs, val, lr, config = read(path)
        if not s and not vs:
            print(f"{path}: warning: no steps logged", file=sys.stderr)
            continue
        name = os.path.basename(path)
        if a.label == "config" and config:
            name = f"{config.get('model', '?')} ({config.get('schedule', '').split(' target=')[0]})"
        c = f"C{i % 10}"
        top.plot(s, loss, color=c, alpha=0.45, linewidth=1, label=f"{name}: loss")
        if vs:
            top.plot(vs, val, color=c, marker="o", markersize=3, linewidth=1.5, label=f"{name}: validation loss")
        if any(x is not None for x in lr):
            bottom.plot(s, lr, color=c, linewidth=1.2)
        drawn += 1
    if not drawn:
        sys.exit("plot_metrics: error: nothing to draw")
    top.set_ylabel("loss (nats per token)")
    top.grid(alpha=0.3)
    top.legend(fontsize=8)
    bottom.set_ylabel("learning rate")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    bottom.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    top.set_title(a.title or "mtrun: " + ", ".join(os.path.basename(p) for p in a.logs))
    fig.tight_layout()
    tmp = a.out + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, a.out)
    print(f"{a.out}: {drawn} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
