#!/usr/bin/env python3
"""Mixed per-layer plans train exactly as the reference does.

usage: check_mixed.py MTC MTRUN   (run from the project root)

A mixed plan (mtc --remat layer|selective --offload-layers K
--selective-layers S) picks K + S of the streamed layers that leave the
device, spread evenly: K offload everything, S keep their input and their
matmul and attention outputs in host memory and recompute the rest of their
forward (selective on the host); the rest recompute as --remat says. For the
tiny examples deepened to 6 layers (so that up to 5 leave the device), with
every slot count, resident count and checkpoint place on the tiny test
profiles (remat layer) and on h200 (layer and selective), at batch 2 (the
checkpoint place by turns): K one and all n leaving layers but one; S one
and all n; and K and S together (one offloaded, the others selective on
the host):
- mtc writes the plan (it verifies every plan it writes) or refuses it as
  not fitting the profile;
- mtrun replays it in a seeded random order (MT_REPLAY_ORDER=random:SEED;
  every FREE poisons its buffers with NaN) and its 5 losses equal the
  unstreamed reference executor's to 1e-5 relative;
- at least 50 distinct mixed schedules ran.
"""
import math
import os
import re
import sys
import tempfile

from checks import check, finish, last_run, losses, run

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
    schedule = last_run(log)[0]["config"]["schedule"]  # (mtrun appends each run to its log)
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
                        mixes = [(k, 0) for k in sorted({1, n - 1}) if n >= 2]
                        mixes += [(0, s) for s in sorted({1, n}) if n >= 1]
                        mixes += [(1, n - 1)] if n >= 2 else []
                        for k, s in mixes:
                            picks = (["--offload-layers", str(k)] if k else []) + (["--selective-layers", str(s)] if s else [])
                            flags = ["--target", target, "--batch", "2", "--remat", remat, *picks,
                                     "--slots", str(slots), "--resident", str(resident), "--checkpoints", ckpt]
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
                            words = ([f" offloaded={k}/"] if k else []) + ([f" selective-offloaded={s}/"] if s else [])
                            check(all(w in schedule for w in words), f"{what}: the plan is not mixed so: {schedule}")
                            check(len(got) == 5 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(got, ref)),
                                  f"{what}, order {order}: losses {got}, reference {ref}")
                            seen.add((os.path.basename(src), schedule))
    check(len(seen) >= 50, f"only {len(seen)} distinct mixed plans ran; at least 50 should")
    sel = sum("selective-offloaded=" in s for _, s in seen)
    check(sel >= 20, f"only {sel} distinct plans picked layers to keep selectively on the host; at least 20 should")
    both = sum(" offloaded=" in s and "selective-offloaded=" in s for _, s in seen)
    check(both >= 10, f"only {both} distinct plans picked layers of both kinds; at least 10 should")
    selbase = sum("remat=selective" in s and "selective-offloaded=" in s for _, s in seen)
    check(selbase >= 5, f"only {selbase} distinct plans kept selectively on the device and the host; at least 5 should")
    print(f"{len(seen)} distinct mixed plans equal the reference's losses under a random replay order "
          f"({refused} configurations do not fit their profile)")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
