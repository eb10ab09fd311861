#!/usr/bin/env python3
"""bf16 end to end on the cpu backend (the storage rule of common/storage.h).

usage: check_bf16.py MTC MTRUN equal MODEL.mt
       check_bf16.py MTC MTRUN converge MODEL.mt
       check_bf16.py MTC MTRUN plans EXAMPLES_DIR
       check_bf16.py MTC MTRUN tile MODEL.mt
       check_bf16.py MTC MTRUN tile_gains MODEL.mt

equal:    MODEL compiled with --dtype bf16 on the tiny profiles, under every
          --remat mode (none where it fits, layer, selective, offload), with
          nothing resident and one slot where the mode allows: the first 5
          losses and the validation losses of the streamed replay under the
          eager, lazy and random:1 orders and on one thread per engine
          (threads:1) equal the unstreamed bf16
          reference executor's to 1e-5 relative (check_train.check_equal).
converge: 500 steps of MODEL in bf16 and in f32 from the same seed: the bf16
          validation loss ends under 2.6, within 3% of the f32 run's final
          validation loss, and the f32 run ends under 2.5.
plans:    MODEL is examples/: llama3-8b at batch 1 on h200 streams each
          layer's weights at 2 bytes a parameter (--trace), its bf16 plan
          needs at most 0.55 x the device memory of the f32 plan of the same
          schedule (every layer resident, and the most streamed), and --summary's host bytes, the fit check and
          --explain's host bytes are the same count (18 bytes a global
          parameter, 16 a layer's, whose gradients are bf16 at one micro-batch
          a step, aligned); llama3-70b fits h200's 1.5 TB at every batch --explain
          says it fits, by that count.
tile:     MODEL compiled with --dtype bf16 at --tile 1, 4 and 32: a tiled
          parameter's gradient is summed across the chunks in fp32 and
          rounded once (common/storage.h, Node.wide), so the first 4 losses
          agree to 5e-7 and the first 3 gradient norms to 2e-6 relative
          (summed in bf16 a chunk at a time, the norms moved by 1e-5 to 1e-4
          and the losses by 2e-6 to 5e-6).
tile_gains: MODEL (gemma2-tiny: gains reached through `1 + w`) at --dtype
          bf16, --tile 1 and 4, one step of AdamW with betas 0, eps 1 and no
          clipping or decay, so that each weight moves by lr * g / (|g| + 1):
          every norm gain is the same bits in both (the gradient of `1 + w`
          is summed across the chunks in fp32 and rounded once, as a
          parameter's; summed in bf16 a chunk at a time, 31 to 60% of them
          differed).
Run from the project root.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_train import ORDERS, check_equal, fail, metrics, run  # noqa: E402


def equal(mtc, mtrun, model, tmp):
    checked = 0
    for target in ("tiny-1layer", "tiny-2layers"):
        for remat in ("none", "layer", "selective", "offload"):
            extra = [] if remat == "none" else ["--slots", "1", "--resident", "0"]
            flags = ["--dtype", "bf16", "--target", target, "--batch", "2", "--remat", remat, *extra]
            what = f"{os.path.basename(model)} {' '.join(flags)}"
            plan = os.path.join(tmp, "p.bin")
            p = run(mtc, model, *flags, "-o", plan)
            if p.returncode != 0:
                if "fit" in p.stderr:
                    print(f"skip: {what}: {p.stderr.strip()}")
                    continue
                fail(f"mtc {what} failed", p)
            check_equal(mtrun, plan, tmp, what, ORDERS + ("threads:1",))
            checked += 1
    if checked < 6:
        fail(f"only {checked} bf16 plans fit the tiny profiles")
    print(f"ok: {checked} bf16 plans equal the bf16 reference under {', '.join(ORDERS)} and threads:1")


def converge(mtc, mtrun, model, tmp):
    final = {}
    for dtype in ("f32", "bf16"):
        plan = os.path.join(tmp, dtype + ".bin")
        p = run(mtc, model, "--dtype", dtype, "-o", plan)
        if p.returncode != 0:
            fail(f"mtc --dtype {dtype} failed", p)
        log = os.path.join(tmp, dtype + ".jsonl")
        p = run(mtrun, plan, "--steps", "500", "--log", log)
        if p.returncode != 0:
            fail(f"mtrun ({dtype}) failed", p)
        val = [m["val_loss"] for m in metrics(log) if "val_loss" in m]
        if not val or not 5.0 < val[0] < 6.0:
            fail(f"{dtype}: the first validation loss should be about ln 256 = 5.55: {val[:1]}")
        final[dtype] = val[-1]
        print(f"{dtype}: validation loss {val[0]:.3f} -> {val[-1]:.3f} in 500 steps")
    if not final["f32"] < 2.5:
        fail(f"the f32 run ends at {final['f32']}, not under 2.5")
    if not final["bf16"] < 2.6:
        fail(f"the bf16 run ends at {final['bf16']}, not under 2.6")
    if not abs(final["bf16"] - final["f32"]) <= 0.03 * final["f32"]:
        fail(f"bf16 ends at {final['bf16']}, more than 3% from f32's {final['f32']}")
    print(f"ok: bf16 {final['bf16']:.4f} within {abs(final['bf16'] / final['f32'] - 1) * 100:.2f}% of f32 {final['f32']:.4f}")


def mtc_json(mtc, *args, unfit_ok=False):
    """mtc's JSON; with unfit_ok, --explain's table also when nothing fits (exit 1)."""
    p = run(mtc, *args)
    if p.returncode != 0 and not (unfit_ok and p.returncode == 1 and "no schedule of" in p.stderr):
        fail(f"mtc {' '.join(args)} failed", p)
    return json.loads(p.stdout)


def plans(mtc, mtrun, ex, tmp):
    m8 = f"{ex}/llama3-8b.mt"
    summary = mtc_json(mtc, m8, "--json")
    per_layer = summary["blocks"][0]["params"] // summary["blocks"][0]["layers"]
    if summary["compute_dtype"] != "bf16" or (summary["host_bytes_per_param"], summary["host_bytes_per_global_param"],
                                              summary["host_grads_bf16"]) != (16, 18, True):
        fail(f"llama3-8b.mt: compute {summary['compute_dtype']}, {summary['host_bytes_per_param']} host bytes a layer "
             f"parameter, {summary['host_bytes_per_global_param']} a global one, bf16 gradients "
             f"{summary['host_grads_bf16']}")
    # the weight copy of a streamed layer: 2 bytes a parameter
    trace = os.path.join(tmp, "t.json")
    p = run(mtc, m8, "--target", "h200", "--batch", "1", "--remat", "layer", "--slots", "2", "--resident", "0",
            "--trace", trace)
    if p.returncode != 0:
        fail("mtc --trace failed", p)
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("layer ")
          and "weights in" in e["name"]]
    sizes = {e["args"]["bytes"] for e in ev}
    if not ev or sizes != {2 * per_layer}:
        fail(f"layer weight copies of {sorted(sizes)} bytes; {per_layer} parameters a layer at 2 bytes is {2 * per_layer}")
    print(f"ok: {len(ev)} layer weight copies of {2 * per_layer:,} bytes, 2 bytes for each of {per_layer:,} parameters")
    # device memory of the same schedule, bf16 against f32
    for sched in (["--remat", "none"], ["--remat", "layer", "--slots", "2", "--resident", "0", "--checkpoints", "host"]):
        dev = {}
        for dt in ("bf16", "f32"):
            # untiled both: f32 at remat none does not fit, and --tile auto would offer its nearest tiling
            e = mtc_json(mtc, m8, "--target", "h200", "--batch", "1", "--dtype", dt, "--tile", "1", *sched, "--explain",
                         "--json", unfit_ok=True)  # (its row still has its size)
            dev[dt] = [r for r in e["policies"] if r.get("chosen") or r["name"] == sched[1]][0]["device_peak_bytes"]
        ratio = dev["bf16"] / dev["f32"]
        if not ratio <= 0.55:
            fail(f"{' '.join(sched)}: bf16 needs {dev['bf16']} bytes of device memory, f32 {dev['f32']}: {ratio:.3f} > 0.55")
        print(f"ok: {' '.join(sched)}: bf16 device memory {ratio:.3f} of f32's")
    # one count of host bytes: --summary, the fit check and --explain
    e = mtc_json(mtc, m8, "--target", "h200", "--batch", "1", "--remat", "layer", "--checkpoints", "device", "--explain",
                 "--json")
    row = [r for r in e["policies"] if r["name"] == "layer"][0]
    if row["host_bytes"] - row["host_activation_bytes"] != summary["host_bytes"]:
        fail(f"--explain's host store {row['host_bytes']} - {row['host_activation_bytes']} differs from --summary's "
             f"{summary['host_bytes']}")
    print(f"ok: --summary and --explain count {summary['host_bytes']:,} host store bytes")
    m70 = f"{ex}/llama3-70b.mt"
    s70 = mtc_json(mtc, m70, "--json")
    fitting = 0
    for batch in (1, 2, 4, 8):
        e = mtc_json(mtc, m70, "--target", "h200", "--batch", str(batch), "--explain", "--json")
        for r in e["policies"]:
            if not r["fits"]:
                continue
            fitting += 1
            # RAM holds the store less what h200's NVMe tier holds (tier_bytes), plus the tier's staging
            ram_store = r["host_bytes"] - r["host_activation_bytes"]
            if not s70["host_bytes"] <= ram_store + r["tier_bytes"] and ram_store <= 1.5e12 - r["host_activation_bytes"]:
                fail(f"llama3-70b batch {batch} {r['name']}: fits with {r['host_bytes']} host bytes and {r['tier_bytes']} "
                     f"on the tier; the store alone is {s70['host_bytes']} and h200 has 1.5e12")
    if not fitting:
        fail("no llama3-70b plan fits h200")
    print(f"ok: {fitting} llama3-70b plans that fit h200 hold their {s70['host_bytes'] / 1e12:.3f} TB store "
          f"and activations in 1.5 TB and its NVMe tier")


def tile(mtc, mtrun, model, tmp):
    runs = {}
    for chunks in ("1", "4", "32"):
        plan, log = os.path.join(tmp, f"t{chunks}.bin"), os.path.join(tmp, f"t{chunks}.jsonl")
        p = run(mtc, model, "--dtype", "bf16", "--tile", chunks, "-o", plan)
        if p.returncode != 0:
            fail(f"mtc --dtype bf16 --tile {chunks} failed", p)
        p = run(mtrun, plan, "--steps", "4", "--log", log)
        if p.returncode != 0:
            fail(f"mtrun (--tile {chunks}) failed", p)
        steps = [r for r in metrics(log) if "loss" in r and "step" in r]
        if len(steps) != 4:
            fail(f"--tile {chunks}: {len(steps)} step records, not 4")
        runs[chunks] = ([r["loss"] for r in steps], [r["grad_norm"] for r in steps][:3])
    base = runs["1"]
    for chunks, (loss, norm) in runs.items():
        for what, got, want, tol in (("loss", loss, base[0], 5e-7), ("gradient norm", norm, base[1], 2e-6)):
            for i, (x, y) in enumerate(zip(got, want)):
                if not abs(x - y) <= tol * abs(y):
                    fail(f"--dtype bf16 --tile {chunks}: step {i + 1}: {what} {x!r}, untiled {y!r} (all: {got} vs {want})")
        print(f"ok: --dtype bf16 --tile {chunks}: losses {loss}, gradient norms {norm}")


def tile_gains(mtc, mtrun, model, tmp):
    import re
    import numpy as np
    from safetensors.numpy import load_file
    text = open(model).read()
    text = re.sub(r"optimizer = adamw\([^\n]*\)", "optimizer = adamw(lr = 1e-2, betas = (0.0, 0.0), weight_decay = 0.0, "
                  "eps = 1.0)", text)
    text = re.sub(r"\bclip = [0-9.e-]+", "clip = 0", text)
    text = re.sub(r"schedule = [^\n]*", "", text)
    m = os.path.join(tmp, "gains.mt")
    with open(m, "w") as f:
        f.write(text)
    got = {}
    for chunks in ("1", "4"):
        plan, out = os.path.join(tmp, f"g{chunks}.bin"), os.path.join(tmp, f"g{chunks}.safetensors")
        p = run(mtc, m, "--dtype", "bf16", "--tile", chunks, "-o", plan)
        if p.returncode != 0:
            fail(f"mtc --dtype bf16 --tile {chunks} failed", p)
        p = run(mtrun, plan, "--steps", "1", "--data", "examples/data/tinyshakespeare.txt", "--export", out,
                "--no-save", "--val-batches", "0")
        if p.returncode != 0:
            fail(f"mtrun (--tile {chunks}) failed", p)
        got[chunks] = load_file(out)
    gains = [k for k in got["1"] if "norm" in k]
    if not gains:
        fail("no norm gains among the exported weights")
    moved = sum(int(np.count_nonzero(got["1"][k])) for k in gains)
    if moved == 0:
        fail("no gain moved in the step")
    differ = {k: int(np.count_nonzero(got["1"][k].view(np.uint32) != got["4"][k].view(np.uint32))) for k in gains}
    n = sum(got["1"][k].size for k in gains)
    if any(differ.values()):
        fail(f"--tile 4 moved {sum(differ.values())} of {n} gain elements from --tile 1's bits: "
             f"{ {k: v for k, v in differ.items() if v} }")
    print(f"ok: --dtype bf16 --tile 1 and 4: the {len(gains)} norm gains ({n} elements, {moved} moved) are the same bits")


def main():
    mtc, mtrun, mode, model = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        {"equal": equal, "converge": converge, "plans": plans, "tile": tile, "tile_gains": tile_gains}[mode](mtc, mtrun, model, tmp)


if __name__ == "__main__":
    main()
