#!/usr/bin/env python3
"""bf16 end to end on the cpu backend (the storage rule of common/storage.h).

usage: check_bf16.py MTC MTRUN equal MODEL.mt
       check_bf16.py MTC MTRUN converge MODEL.mt

equal:    MODEL compiled with --dtype bf16 on the tiny profiles, under every
          --remat mode (none where it fits, layer, selective, offload), with
          nothing resident and one slot where the mode allows: the first 5
          losses and the validation losses of the streamed replay under the
          eager, lazy and random:1 orders equal the unstreamed bf16
          reference executor's to 1e-5 relative (check_train.check_equal).
converge: 500 steps of MODEL in bf16 and in f32 from the same seed: the bf16
          validation loss ends under 2.6, within 3% of the f32 run's final
          validation loss, and the f32 run ends under 2.5.
Run from the project root.
"""
import os
import subprocess
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
            check_equal(mtrun, plan, tmp, what, ORDERS)
            checked += 1
    if checked < 6:
        fail(f"only {checked} bf16 plans fit the tiny profiles")
    print(f"ok: {checked} bf16 plans equal the bf16 reference under {', '.join(ORDERS)}")


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


def main():
    mtc, mtrun, mode, model = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        {"equal": equal, "converge": converge}[mode](mtc, mtrun, model, tmp)


if __name__ == "__main__":
    main()
