#!/usr/bin/env python3
"""mtc counts the cuda backend's kernel scratch (common/scratch.h) in a plan's
device memory.

`mtc --explain --json` of examples/mixtral-8x7b.mt on h200 at batch 16 x
seq 4096 (untiled): every planned row records scratch_bytes equal to a
count made here from the model's config alone, and its device_peak_bytes
is the arena (rounded up to 256) plus that scratch once (only the compute
engine runs kernels) plus the device copy of the document starts, B x T
int32s (common/scratch.h: plan_doc_starts_bytes). The count: the most of
  moe forward    a chunk of rows' [S, F + C] floats and the route's
                 [3 E + 2 + 2 S] ints, S = rows K, as many rows as fit
                 1 GiB (compiler/emit/cuda/moe.cuh)
  moe backward   the same with [S, 2 F + C] floats, and bf16 [S, 3 F + C]
                 more on the pipelined path (a bf16 plan, C and F
                 multiples of 8: this one)
  attention bwd  lse and delta: 2 fp32 [B, NH, T]
  the load-balancing backward's E doubles, and 256
rounded up to 256; at this batch the MoE chunk (about 1.07 GB) is the
largest. The f64 accumulators of the expression kernels (column sums of
[C]-wide gradients) are far smaller and not counted here.

Then the fit: a copy of h200.target whose device memory is a baseline
row's arena (one with host checkpoints, its smaller choice) plus half that
scratch must refuse that row for device memory, naming the scratch, and one with arena plus the whole scratch and
the document starts must take it.

usage: check_device_scratch.py MTC   (run from the repository root)
"""
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, run  # noqa: E402

MODEL, TARGET, B, T = "examples/mixtral-8x7b.mt", "schedules/h200.target", 16, 4096
MOE_CHUNK_BYTES = 1 << 30


def config(path):
    """The integer constants of a model's config block."""
    text = open(path).read()
    block = text[text.index("config {"):text.index("}", text.index("config {"))]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\s*=\s*(\d+)\s*(?:#.*)?$", block, re.M)}


def moe_scratch(rows, C, E, F, K, bwd, pipelined):
    def size(nr):
        per_slot = (2 if bwd else 1) * F + C + ((3 * F + C) // 2 if bwd and pipelined else 0)
        floats = -(-nr * K * per_slot // 64) * 64
        return 4 * floats + 4 * (3 * E + 2 + 2 * nr * K)
    per_row = size(1) - size(0) + 4
    nr = min(rows, max(1, MOE_CHUNK_BYTES // per_row))
    return size(nr)


def expected_scratch(cfg):
    rows, C, E, F, K, NH = B * T, cfg["C"], cfg["E"], cfg["FFN"], cfg["K"], cfg["NH"]
    pipe = C % 8 == 0 and F % 8 == 0  # the h200 plan trains in bf16
    need = max(256, moe_scratch(rows, C, E, F, K, 0, pipe), moe_scratch(rows, C, E, F, K, 1, pipe), 2 * 4 * B * NH * T, 8 * E)
    return -(-need // 256) * 256


def explain(mtc, target, *extra, fits=True):
    """Each row of mtc --explain --json by name; mtc may exit 1 when no mt row fits (fits False), still printing them."""
    p = run(mtc, MODEL, "--target", target, "--batch", B, "--seq", T, "--tile", "1", "--explain", "--json", *extra)
    if not check(p.returncode in ((0,) if fits else (0, 1)) and p.stdout.startswith("{"), f"mtc --explain {MODEL} on {target}", p):
        return None
    return {r["name"]: r for r in json.loads(p.stdout)["policies"]}


def main():
    mtc = sys.argv[1]
    scratch = expected_scratch(config(MODEL))
    docs = -(-int(B) * int(T) * 4 // 256) * 256  # the (B, T) int32 document starts, rounded up to 256
    print(f"{MODEL} at batch {B} x {T}: kernel scratch {scratch} bytes ({scratch / 1e9:.3f} GB) by this count")
    check(scratch > 10**9, f"the MoE chunk dominates the scratch ({scratch} bytes)")
    rows = explain(mtc, TARGET) or {}
    planned = [r for r in rows.values() if "arena_bytes" in r]
    check(len(planned) >= 6, f"at least 6 planned rows, got {len(planned)}")
    for r in planned:
        arena = -(-r["arena_bytes"] // 256) * 256
        print(f"  {r['name']:14s} arena {r['arena_bytes']:>14d} scratch {r['scratch_bytes']:>12d} "
              f"device {r['device_peak_bytes']:>14d} fits {r['fits']}")
        check(r["scratch_bytes"] == scratch, f"{r['name']}: scratch_bytes {r['scratch_bytes']}, counted {scratch}")
        check(r["device_peak_bytes"] == arena + scratch + docs,
              f"{r['name']}: device_peak_bytes {r['device_peak_bytes']} is not arena {arena} + scratch {scratch} + "
              f"document starts {docs}")
    # a baseline row with its checkpoints in host memory: the smaller of its two arenas, so
    # that with less device memory it has nothing else to choose
    name = next((n for n in ("sequential", "megatrain", "zero3-offload")
                 if "checkpoints=host" in rows.get(n, {}).get("schedule", "")), None)
    if check(name is not None, "a baseline row with host checkpoints"):
        base = open(TARGET).read()
        arena = -(-rows[name]["arena_bytes"] // 256) * 256
        with tempfile.TemporaryDirectory() as tmp:
            for extra, fits in ((scratch // 2, False), (scratch + docs, True)):
                t = os.path.join(tmp, "h200-cut.target")
                with open(t, "w") as f:
                    f.write(re.sub(r"(?m)^device_memory = .*$", f"device_memory = {arena + extra}", base))
                got = (explain(mtc, t, fits=fits) or {}).get(name, {})
                print(f"  device memory arena + {extra}: {name} fits {got.get('fits')} {got.get('reason', '')}")
                check(got.get("fits") is fits, f"device memory arena + {extra}: {name} fits {got.get('fits')}, expected {fits}")
                if fits:
                    check(got.get("arena_bytes") == rows[name]["arena_bytes"], f"{name} keeps its arena: {got}")
                else:
                    want = f"({scratch / 1e9:.4g} GB of it the kernels' scratch)"
                    check("device memory" in got.get("reason", "") and want in got.get("reason", ""),
                          f"the refusal names device memory and {want}: {got}")
    return finish("device scratch checks")


if __name__ == "__main__":
    sys.exit(main())
