#!/usr/bin/env python3
"""Prints mtc's predictions for the big examples on the big targets: for each
model, target and batch size, the chosen schedule's predicted step time, the
lower bound and their ratio, the megatrain baseline's predicted time and how
far ahead the chosen schedule is, and how long mtc took to decide.

usage: bench/explain_table.py [MTC] [--seq N] [--batches 1,2,4,...]
       bench/explain_table.py [MTC] --readme        the few rows bench/README.md quotes
       bench/explain_table.py [MTC] --check FILE    exit 1 unless FILE quotes them as --readme prints them
(MTC defaults to build/mtc; run from the source tree.)"""
import json
import re
import subprocess
import sys
import time

args = sys.argv[1:]
mtc = args.pop(0) if args and not args[0].startswith("--") else "build/mtc"
seq, batches, readme, check = 8192, [1, 2, 4, 8, 16], False, None
while args:
    flag = args.pop(0)
    if flag == "--seq":
        seq = int(args.pop(0))
    elif flag == "--batches":
        batches = [int(b) for b in args.pop(0).split(",")]
    elif flag == "--readme":
        readme = True
    elif flag == "--check" and args:
        check = args.pop(0)
    else:
        sys.exit(f"explain_table: unknown option {flag}")

# (model, target, seq, batch) of the rows bench/README.md quotes
README_ROWS = [("llama3-8b", "h200", 8192, 1), ("llama3-8b", "h200", 8192, 16), ("llama3-70b", "h200", 8192, 1),
               ("llama3-70b", "h200", 8192, 4), ("qwen2-7b", "gh200", 8192, 4), ("llama3-405b", "h200", 8192, 1),
               ("llama3-8b", "gh200", 524288, 1)]
BEGIN, END = "<!-- bench/explain_table.py --readme -->", "<!-- end of bench/explain_table.py --readme -->"


def readme_row(model, target, seq, batch):
    r = subprocess.run([mtc, f"examples/{model}.mt", "--target", target, "--batch", str(batch), "--seq", str(seq),
                        "--explain", "--json"], capture_output=True, text=True)
    head = f"{model:11} {target:5} seq {seq:6} batch {batch:2}:"
    if r.returncode == 1 and "no schedule of" in r.stderr:
        why = re.search(r"\([^:()]+: (.*)\)", r.stderr.strip().splitlines()[-1])
        return f"{head} does not fit: {why.group(1) if why else r.stderr.strip()}"
    if r.returncode != 0:
        sys.exit(f"explain_table: mtc failed on {model} {target}: {r.stderr.strip()}")
    d = json.loads(r.stdout)
    c = [p for p in d["policies"] if p["chosen"]][0]
    mega = {p["name"]: p for p in d["policies"]}["megatrain"]
    vs = f"megatrain {mega['predicted_step_s']:.4g} ({mega['predicted_step_s'] / c['predicted_step_s']:.2f}x)" \
        if mega["fits"] else "megatrain does not fit"
    return (f"{head} {c['name']} {c['predicted_step_s']:.4g} s, exact bound {d['bounds']['exact_s']:.4g} "
            f"({c['ratio_exact']:.3f}), {vs}")


if readme or check:
    rows = [readme_row(*row) for row in README_ROWS]
    if readme:
        print("\n".join(rows))
        sys.exit(0)
    text = open(check).read()
    quoted = text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text and END in text else ""
    quoted = [line.strip() for line in quoted.splitlines() if line.strip() and not line.startswith("```")]
    if quoted != [row.strip() for row in rows]:
        print(f"{check} quotes stale predictions; replace the lines between its markers with the output of "
              f"python3 bench/explain_table.py --readme:\n" + "\n".join(rows))
        sys.exit(1)
    print(f"ok: {check} quotes mtc's current predictions ({len(rows)} rows)")
    sys.exit(0)

models = ["llama3-8b", "llama3-70b", "llama3-405b", "qwen2-7b"]
targets = ["h200", "gh200", "rtx4090"]
print(f"seq {seq}; times are predicted seconds per step; 'vs megatrain' is megatrain's time over the chosen one")
print(f"{'model':12} {'target':8} {'batch':>5} {'chosen':10} {'step s':>9} {'bound s':>9} {'ratio':>6} "
      f"{'megatrain s':>11} {'vs megatrain':>12} {'mtc s':>6}  notes")
worst_ratio, slowest = 0.0, 0.0
for model in models:
    for target in targets:
        for batch in batches:
            t0 = time.time()
            r = subprocess.run([mtc, f"examples/{model}.mt", "--target", target, "--batch", str(batch), "--seq",
                                str(seq), "--explain", "--json"], capture_output=True, text=True)
            took = time.time() - t0
            slowest = max(slowest, took)
            if r.returncode != 0 and not (r.returncode == 1 and "no schedule of" in r.stderr):  # 1: nothing fits
                print(f"{model:12} {target:8} {batch:5} mtc failed: {r.stderr.strip()}")
                continue
            d = json.loads(r.stdout)
            rows = {p["name"]: p for p in d["policies"]}
            chosen = [p for p in d["policies"] if p["chosen"]]
            mega = rows["megatrain"]
            if not chosen:
                reason = min((p for p in d["policies"]), key=lambda p: p["device_peak_bytes"])["reason"]
                print(f"{model:12} {target:8} {batch:5} {'-':10} {'':>9} {'':>9} {'':>6} {'':>11} {'':>12} "
                      f"{took:6.2f}  does not fit: {reason}")
                continue
            c = chosen[0]
            bound = d["bounds"]["exact_s"]
            ratio = c["ratio_exact"]
            worst_ratio = max(worst_ratio, ratio)
            ahead = mega["predicted_step_s"] / c["predicted_step_s"]
            note = "" if mega["fits"] else "(megatrain does not fit)"
            print(f"{model:12} {target:8} {batch:5} {c['name']:10} {c['predicted_step_s']:9.4g} "
                  f"{bound:9.4g} {ratio:6.3f} {mega['predicted_step_s']:11.4g} {ahead:12.3f} "
                  f"{took:6.2f}  {note}")
print(f"worst ratio to the bound {worst_ratio:.3f}; slowest mtc {slowest:.2f} s")
