#!/usr/bin/env python3
"""No prediction of mtc implies a resource faster than its target profile.

usage: check_resources.py MTC EXAMPLES_DIR SCHEDULES_DIR

For llama3-8b and qwen2-7b (bf16) on h200 and gh200 at a few batches, the
chosen plan's predicted timeline (--trace) and step (--explain --json):
- on each engine's track no two instructions overlap;
- every copy moves its bytes no faster than its direction of the link, and
  each direction's bytes over the step take no more than the step;
- the bytes host memory serves in a step (every copy's, and the optimizer's:
  its time at host memory bandwidth) take no more than the predicted step
  at the profile's host memory bandwidth (gh200's LPDDR5X feeds both the
  C2C link and the optimizer);
- the step is at least the physical and the exact-semantics bounds.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import check, finish


def profile(path):
    vals = {}
    for line in open(path):
        line = line.split("#")[0].strip()
        if "=" in line:
            k, v = (x.strip() for x in line.split("=", 1))
            vals[k] = v
    return {k: float(v) for k, v in vals.items() if re.match(r"^[0-9.eE+-]+$", v)}


def main():
    mtc, ex, sched = sys.argv[1:4]
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for target in ("h200", "gh200"):
            prof = profile(os.path.join(sched, target + ".target"))
            h2d, d2h, host = prof["h2d_bandwidth"], prof["d2h_bandwidth"], prof["host_memory_bandwidth"]
            # (short sequences: the optimizer and the link, not compute, bound the step)
            for model, seq in (("llama3-8b", "4096"), ("qwen2-7b", "4096"), ("qwen2-7b", "256")):
                for batch in ("1", "4"):
                    what = f"{model} on {target} at batch {batch}, seq {seq}"
                    trace = os.path.join(tmp, "t.json")
                    p = subprocess.run([mtc, f"{ex}/{model}.mt", "--target", target, "--batch", batch, "--seq", seq,
                                        "--explain", "--json", "--trace", trace], capture_output=True, text=True)
                    if not check(p.returncode == 0, f"{what}: mtc failed: {p.stderr}"):
                        continue
                    d = json.loads(p.stdout)
                    chosen = [r for r in d["policies"] if r.get("chosen")]
                    if not check(chosen, f"{what}: nothing fits"):
                        continue
                    step = chosen[0]["predicted_step_s"]
                    b = d["bounds"]
                    check(step >= b["physical_s"] * (1 - 1e-9) and step >= b["exact_s"] * (1 - 1e-9),
                          f"{what}: step {step} below a bound {b}")
                    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
                    by_track = {}
                    for e in ev:
                        by_track.setdefault(e["tid"], []).append(e)
                    for tid, es in by_track.items():
                        es.sort(key=lambda e: e["ts"])
                        for x, y in zip(es, es[1:]):
                            check(y["ts"] >= x["ts"] + x["dur"] - 1e-3, f"{what}: track {tid}: {x['name']} and "
                                  f"{y['name']} overlap")
                    moved = {2: 0.0, 3: 0.0}
                    for tid, bw in ((2, h2d), (3, d2h)):
                        for e in by_track.get(tid, []):
                            if e["args"]["bytes"] and e["dur"] > 0:
                                check(e["args"]["bytes"] / (e["dur"] * 1e-6) <= bw * 1.0001,
                                      f"{what}: {e['name']} moves {e['args']['bytes']} bytes in {e['dur']} us")
                                moved[tid] += e["args"]["bytes"]
                        check(moved[tid] / bw <= step * 1.0001, f"{what}: track {tid} moves {moved[tid]} bytes, "
                              f"more than the step allows")
                    optimizer_s = sum(e["dur"] for e in by_track.get(4, [])) * 1e-6
                    host_s = (moved[2] + moved[3]) / host + optimizer_s
                    check(host_s <= step * 1.0001, f"{what}: host memory busy {host_s:.4g} s in a {step:.4g} s step")
                    checked += 1
    sys.exit(finish(f"checks; {checked} predicted steps within their profiles' resources"))


if __name__ == "__main__":
    main()
