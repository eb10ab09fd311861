#!/usr/bin/env python3
"""The scheduler's headline table: for each model, target and sequence
length, mt's plan at --batch auto (its tokens a second and its step over the
exact-semantics bound) against the best tokens a second of the megatrain and
zero3-offload baselines over every batch that fits (from --explore).

usage: bench/auto_table.py [MTC]   (MTC defaults to build/mtc; run from the source tree)"""
import json
import subprocess
import sys
import time

mtc = sys.argv[1] if len(sys.argv) > 1 else "build/mtc"
print(f"{'model':10} {'target':7} {'seq':>5} {'batch':>5} {'tokens/s':>9} {'/exact':>7} {'megatrain':>9} "
      f"{'x':>5} {'zero3':>9} {'x':>5} {'auto s':>6}")
for model in ("llama3-8b", "qwen2-7b", "llama3-70b"):
    for target in ("h200", "gh200"):
        for seq in (4096, 8192):
            t0 = time.time()
            a = subprocess.run([mtc, f"examples/{model}.mt", "--target", target, "--seq", str(seq), "--batch", "auto",
                                "--explain", "--json"], capture_output=True, text=True)
            took = time.time() - t0
            if a.returncode != 0:
                print(f"{model:10} {target:7} {seq:5}  does not fit: {a.stderr.strip()[:90]}")
                continue
            d = json.loads(a.stdout)
            c = [r for r in d["policies"] if r.get("chosen")][0]
            e = json.loads(subprocess.run([mtc, f"examples/{model}.mt", "--target", target, "--seq", str(seq),
                                           "--explore", "--json"], capture_output=True, text=True).stdout)
            best = {p: max((t for _, t in e["policies"][p]), default=0) for p in ("megatrain", "zero3-offload")}
            mt = c["tokens_per_s"]
            print(f"{model:10} {target:7} {seq:5} {d['batch']:5} {mt:9.0f} {c['ratio_exact']:7.3f} "
                  f"{best['megatrain']:9.0f} {mt / best['megatrain'] if best['megatrain'] else 0:5.2f} "
                  f"{best['zero3-offload']:9.0f} {mt / best['zero3-offload'] if best['zero3-offload'] else 0:5.2f} "
                  f"{took:6.1f}")
