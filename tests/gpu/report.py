#!/usr/bin/env python3
"""The table tests/gpu/run.sh prints last: for each streamed training run on
the GPU, what it measured against what mtc predicted.

usage: report.py GEMM_TFLOPS RUN_DIR...

Each RUN_DIR holds one mtrun run: metrics.jsonl (mtrun --log), trace.json
(mtrun --trace), model.mt (the model, for its width and layers) and
memory.txt (nvidia-smi's memory.used in MiB, sampled through the run, the
first line before mtrun started). Columns:

- step s: the median measured step after the first, and mtc's prediction
  (the plan's predicted_step_s) and their ratio;
- model TFLOP/s: 6 N tokens plus causal attention (6 L T C tokens; the
  recompute is not counted) over the measured step, and that over the bf16
  GEMM rate gpu_check measured in the same run (GEMM_TFLOPS);
- link GB/s: the copy-in and copy-out tracks' bytes over their busy time
  (the rate while copying, not an average over the step);
- AdamW GB/s: 30 bytes a parameter (reads w, m, v, g; writes w, m, v and
  the bf16 copy; bench/adamw_bench counts the same) over the host track's
  AdamW time;
- peak GB: the driver's memory.used at its highest less before mtrun
  started, against the plan's arena (arena_bytes) and their ratio.

Exit status 1 when a run directory lacks what it needs.
"""
import json
import os
import re
import statistics
import sys


def config_value(text, name):
    m = re.search(rf"^\s*{name}\s*=\s*([0-9]+)", text, re.M)
    return int(m.group(1)) if m else None


def one_run(d, gemm_tflops):
    lines = [json.loads(line) for line in open(os.path.join(d, "metrics.jsonl"))]
    cfg = next(x["config"] for x in lines if "config" in x)
    ms = [x["ms"] for x in lines if "ms" in x]
    if len(ms) < 2:
        raise ValueError(f"{d}: fewer than 2 steps measured")
    step = statistics.median(ms[1:]) / 1e3
    text = open(os.path.join(d, "model.mt")).read()
    C, L = config_value(text, "C"), cfg["layers"]
    tokens, T = cfg["tokens_per_step"], cfg["seq"]
    flops = 6 * cfg["params"] * tokens + 6 * L * T * C * tokens
    ev = [e for e in json.load(open(os.path.join(d, "trace.json")))["traceEvents"] if e.get("ph") == "X"]

    def rate(tid):
        busy = sum(e["dur"] for e in ev if e["tid"] == tid and e["args"]["bytes"] > 0) * 1e-6
        moved = sum(e["args"]["bytes"] for e in ev if e["tid"] == tid)
        return moved / busy / 1e9 if busy > 0 else float("nan")

    adamw_s = sum(e["dur"] for e in ev if e["tid"] == 4 and e["name"].startswith("AdamW")) * 1e-6
    adamw = 30 * cfg["params"] * len(ms) / adamw_s / 1e9 if adamw_s > 0 else float("nan")
    mem = [int(x) for x in re.findall(r"\d+", open(os.path.join(d, "memory.txt")).read())]
    peak = (max(mem) - mem[0]) * 2**20 / 1e9 if len(mem) > 1 else float("nan")
    arena = cfg["arena_bytes"] / 1e9
    tflops = flops / step / 1e12
    return (f"{cfg['model']:<14} {cfg['batch']:>3}x{T:<5} {step:8.3f} {cfg['predicted_step_s']:8.3f} "
            f"{step / cfg['predicted_step_s']:6.2f} {tflops:8.1f} {tflops / gemm_tflops:6.2f} {rate(2):7.1f} "
            f"{rate(3):7.1f} {adamw:7.1f} {peak:7.2f} {arena:7.2f} {peak / arena:6.2f}")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    gemm = float(sys.argv[1])
    print(f"{'model':<14} {'batch':>9} {'step s':>8} {'pred s':>8} {'ratio':>6} {'TFLOP/s':>8} {'/GEMM':>6} "
          f"{'H2D GB/s':>7} {'D2H GB/s':>7} {'AdamW GB/s':>7} {'peak GB':>7} {'arena':>7} {'ratio':>6}")
    rc = 0
    for d in sys.argv[2:]:
        try:
            print(one_run(d, gemm))
        except (OSError, ValueError, KeyError, StopIteration) as e:
            print(f"{os.path.basename(d):<14} no figures: {e}")
            rc = 1
    print(f"(bf16 GEMM measured in this run: {gemm:.0f} TFLOP/s; targets, recorded not asserted: TFLOP/s/GEMM >= 0.5 "
          "for llama3.2-3b, step within 15% of predicted, peak within 5% of the arena)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
