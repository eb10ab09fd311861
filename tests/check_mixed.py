#!/usr/bin/env python3
"""Mixed per-layer plans train exactly as the reference does.

usage: check_mixed.py MTC MTRUN   (run from the project root)

A mixed plan (mtc --remat layer|selective --offload-layers K) offloads K of
the streamed layers that leave the device, spread evenly, and recomputes the
rest; with --remat layer --selective-layers K those K keep their input and
their matmul and attention outputs in host memory and recompute the rest of
their forward (selective) instead. For the tiny examples deepened to 6 layers (so that up to 5 leave the
device), every K with every slot count, resident count and checkpoint place
on the tiny test profiles (remat layer) and on h200 (layer and selective),
at batch 2 (the checkpoint place by turns; K one, and all of the n leaving layers
but one; selective keeping: one, and all n):
- mtc writes the plan (it verifies every plan it writes) or refuses it as
  not fitting the profile;
- mtrun replays it in a seeded random order (MT_REPLAY_ORDER=random:SEED;
  every FREE poisons its buffers with NaN) and its 5 losses equal the
  unstreamed reference executor's to 1e-5 relative;
- at least 50 distinct mixed schedules ran.
"""
import json
import math
import os
import re
import sys
import tempfile

from checks import check, finish, losses, run

LAYERS = 6


def deepened(model, tmp):
    """MODEL with LAYERS layers, its relative data path made absolute."""
    src = open(model).read()
    src = re.sub(r'data = "([^"/][^"]*)"',
                 lambda m: 'data = "' + os.path.abspath(os.path.join(os.path.dirname(model), m.group(1))) + '"', src)
    src, n = re.subn(r"^  L = 2 ", f"  L = {LAYERS} ", src, flags=re.M)
    assert n == 1, f"{model}: no 'L = 2' line to deepen"
    path = os.path.join(tmp, f"{LAYERS}-" + os.path.basename(model))
    open(path, "w").write(src)
    return path


def train(mtrun, plan, log, order=None, reference=False):
    env = dict(os.environ)
    env.pop("MT_REPLAY_ORDER", None)
    if order:
        env["MT_REPLAY_ORDER"] = order
    p = run(mtrun, plan, "--steps", "5", "--seed", "7", "--val-every", "100", "--log", log,
            *(["--reference"] if reference else []), env=env)
    if not check(p.returncode == 0, f"mtrun {plan} (order {order}, reference {reference}) failed", p):
        return None, None
    schedule = json.loads(open(log).readline())["config"]["schedule"]
    return losses(log), schedule


def main():
    mtc, mtrun = sys.argv[1:3]
    seen, refused = set(), 0
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("examples/llama-tiny.mt", "examples/gpt2-tiny.mt"):
            src = deepened(model, tmp)
            plan, log = os.path.join(tmp, "p.bin"), os.path.join(tmp, "m.jsonl")
            configs = [(t, "layer") for t in ("schedules/tiny-1layer.target", "schedules/tiny-2layers.target")]
            configs += [("h200", r) for r in ("layer", "selective")]
            ref = None
            for target, remat in configs:
                for slots in (1, 2, 3):
                    for resident in (0, 1):
                        # checkpoints on either side by turns; one layer offloaded, and all but one
                        ckpt = ("device", "host")[(slots + resident) % 2]
                        n = LAYERS - resident - slots
                        # picked layers offload (one, and all but one), or under remat layer keep their
                        # input and matmul and attention outputs on the host (one, and all)
                        mixes = [("--offload-layers", k, "offloaded") for k in sorted({1, n - 1}) if n >= 2]
                        if remat == "layer":
                            mixes += [("--selective-layers", k, "selective-offloaded") for k in sorted({1, n}) if n >= 1]
                        for flag, k, word in mixes:
                            flags = ["--target", target, "--batch", "2", "--remat", remat, flag,
                                     str(k), "--slots", str(slots), "--resident", str(resident),
                                     "--checkpoints", ckpt]
                            what = f"{os.path.basename(src)} {' '.join(flags)}"
                            p = run(mtc, src, *flags, "-o", plan)
                            if p.returncode != 0:
                                check("does not fit" in p.stderr, f"mtc {what}: refused, but not as not fitting", p)
                                refused += 1
                                continue
                            if ref is None:
                                ref, _ = train(mtrun, plan, log, reference=True)
                                if not check(ref and len(ref) == 5 and all(map(math.isfinite, ref)),
                                             f"{what}: the reference gave {ref}"):
                                    return finish()
                            order = f"random:{len(seen) + 1}"
                            got, schedule = train(mtrun, plan, log, order=order)
                            if got is None:
                                continue
                            check(f" {word}={k}/" in schedule, f"{what}: the plan is not mixed: {schedule}")
                            check(len(got) == 5 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(got, ref)),
                                  f"{what}, order {order}: losses {got}, reference {ref}")
                            seen.add((os.path.basename(src), schedule))
    check(len(seen) >= 50, f"only {len(seen)} distinct mixed plans ran; at least 50 should")
    sel = sum("selective-offloaded=" in s for _, s in seen)
    check(sel >= 20, f"only {sel} distinct plans picked layers to keep selectively on the host; at least 20 should")
    print(f"{len(seen)} distinct mixed plans equal the reference's losses under a random replay order "
          f"({refused} configurations do not fit their profile)")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
