#!/usr/bin/env python3
"""Trains the tiny examples with mtc + mtrun and checks what issue 3 promises.

usage: check_train.py MTC MTRUN equal|converge|accumulate MODEL.mt [--orders=A,B]
       check_train.py MTC MTRUN matrix MODEL.mt TARGET|default [short]

equal:    the losses of the first 5 steps through the plan (cpu backend,
          streamed) equal the unstreamed reference executor's to 1e-5
          relative, same seed and data, under every replay order
          (MT_REPLAY_ORDER eager, lazy, random:1: copies and the host
          optimizer as far ahead of compute as the plan's events let them,
          as late as they may, and a seeded mix), with 1 and with 2
          micro-batches a step.
tile:     plans tiled by rows (mtc --tile) equal their reference and the
          untiled reference.
matrix:   the same for the plans of one target profile (a file, or default:
          no --target), every --remat mode x every --policy that mtc knows;
          with a target profile, a configuration mtc refuses as not fitting
          it is skipped, but the defaults (no --remat, no --policy) and the
          most streamed schedules (--remat layer, one slot, nothing resident)
          must fit; with no --target every configuration must. short: the
          default, accumulation and each remat mode streamed through one
          slot with nothing resident, for models whose difference from the
          tiny examples (block orders, layer kinds, experts) is in what
          streams, not in the baselines or the slot counts, which the tiny
          examples' full matrices cover.
accumulate: half the batch with 2 micro-batches a step equals the whole
          batch (the same rows, gradients averaged) to 1e-5.
converge: 500 steps on the bundled byte-level corpus bring the metrics
          file's validation loss from about ln 256 = 5.55 to under 2.5.
Run from the project root (the fixtures name examples/... from there).
"""
import math
import os
import re
import subprocess
import sys
import tempfile

from checks import last_run


def fail(msg, proc=None):
    print("FAIL:", msg)
    if proc is not None:
        print("--- exit status", proc.returncode, "\n--- stdout\n" + proc.stdout[-3000:] + "\n--- stderr\n" + proc.stderr[-3000:])
    sys.exit(1)


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=1200)


def metrics(path):
    return last_run(path)  # (mtrun appends each run to its log)


ORDERS = ("eager", "lazy", "random:1")


def losses_of(mtrun, plan, log, extra=(), order=None):
    env = dict(os.environ)
    env.pop("MT_REPLAY_ORDER", None)
    if order:
        env["MT_REPLAY_ORDER"] = order
    # validation at steps 2, 4 and 5 applies the pending updates early
    p = subprocess.run([mtrun, plan, "--steps", "5", "--seed", "7", "--val-every", "2", "--val-batches", "2",
                        "--log", log, *extra], capture_output=True, text=True, timeout=1200, env=env)
    if p.returncode != 0:
        fail(f"mtrun {plan} {' '.join(extra)} (MT_REPLAY_ORDER={order}) failed", p)
    return [m["loss"] for m in metrics(log) if "loss" in m] + [m["val_loss"] for m in metrics(log) if "val_loss" in m]


def check_equal(mtrun, plan, tmp, what, orders=None):
    """The plan's 5 losses under every order (ORDERS by default) equal the reference's; returns them."""
    orders = orders or ORDERS
    ref = losses_of(mtrun, plan, os.path.join(tmp, "ref.jsonl"), ["--reference"])
    if len(ref) < 5 or not all(math.isfinite(x) for x in ref):
        fail(f"{what}: the reference gave {ref}")
    for order in orders:
        got = losses_of(mtrun, plan, os.path.join(tmp, "plan.jsonl"), order=order)
        if len(got) != len(ref):
            fail(f"{what}, order {order}: expected {len(ref)} losses (5 training, then validation), got {got}")
        for i, (x, y) in enumerate(zip(got, ref)):
            if not (math.isfinite(x) and abs(x - y) <= 1e-5 * abs(y)):
                name = f"step {i + 1}" if i < 5 else f"validation {i - 4}"
                fail(f"{what}, order {order}: {name}: plan loss {x!r}, reference {y!r} (all: {got} vs {ref})")
    print(f"ok: {what}: 5 losses and {len(ref) - 5} validation losses equal the reference's to 1e-5 under "
          f"{', '.join(orders)}: {ref[:5]}")
    return ref[:5]


def source_elsewhere(model):
    """MODEL's text, its relative `data =` made absolute, to be written into another directory
    (mtc takes a relative data path against the model file's directory)."""
    src = open(model).read()
    return re.sub(r'data = "([^"/][^"]*)"',
                  lambda m: 'data = "' + os.path.abspath(os.path.join(os.path.dirname(model), m.group(1))) + '"', src)


def with_accumulate(model, tmp):
    """MODEL with half the batch and 2 micro-batches a step."""
    src = source_elsewhere(model)
    batch = int(src.split("batch = ")[1].split()[0])
    path = os.path.join(tmp, "acc2-" + os.path.basename(model))
    open(path, "w").write(src.replace(f"batch = {batch}", f"batch = {batch // 2}\n  accumulate = 2"))
    return path


def mtc_knows(mtc, flag):
    return flag in run(mtc, "--help").stdout


def matrix(mtc, mtrun, model, target, tmp, short=False):
    # the tiny profiles hold one or two block frames at batch 2 (schedules/tiny-*.target)
    tflags = [] if target == "default" else ["--target", target, "--batch", "2"]
    remats = ["none", "layer", "selective", "offload"] if mtc_knows(mtc, "--remat") else []
    policies = ["sequential", "megatrain", "zero3-offload"] if mtc_knows(mtc, "--policy") else []
    if not remats or not policies:
        fail(f"{mtc} --help names no --remat or no --policy: the matrix would shrink to the defaults")
    checked = skipped = 0
    # the default (policy mt, remat auto), each remat mode of mt, each baseline (which fix their own remat)
    configs = [(model, None, None)] + [(model, None, r) for r in remats] + [(model, p, None) for p in policies]
    configs.append((with_accumulate(model, tmp), None, None))  # 2 micro-batches a step
    # streamed through one slot with nothing resident, so that layer 0 is
    # recomputed, restored or reloaded; checkpoints in both places
    if short:
        configs = [configs[0], configs[-1]]
    if remats:
        configs += [(model, None, f"{r} --slots 1 --resident 0") for r in ["layer", "selective", "offload"]]
    if remats and not short:
        configs += [(model, None, f"layer --slots 1 --resident 0 --checkpoints {c}") for c in ["device", "host"]]
        configs += [(model, None, "layer --slots 2 --resident 0"), (model, None, "layer --slots 1 --resident 1")]
    # the configurations that must fit, and so be checked: the floor on `checked`
    must_fit = [not may_skip(target, policy, remat) for _, policy, remat in configs]
    for (source, policy, remat), must in zip(configs, must_fit):
        flags = tflags + (["--policy", policy] if policy else []) + (["--remat", *remat.split()] if remat else [])
        what = f"{os.path.basename(source)} {' '.join(flags) or '(defaults)'}"
        plan = os.path.join(tmp, "p.bin")
        p = run(mtc, source, *flags, "-o", plan)
        if p.returncode != 0:
            if not must and ("fit" in p.stderr or "needs" in p.stderr):
                print(f"skip: {what}: {p.stderr.strip()}")
                skipped += 1
                continue
            fail(f"mtc {what} failed", p)
        # every order for the defaults and the most streamed schedule; the
        # eager one (copies as early as events allow) for the rest, to keep
        # the suite inside its time
        check_equal(mtrun, plan, tmp, what, ORDERS if not (policy or remat) or most_streamed(remat) else ORDERS[:1])
        checked += 1
    if checked < sum(must_fit):
        fail(f"{checked} plans checked, fewer than the {sum(must_fit)} configurations that must fit")
    print(f"ok: {checked} plans equal the reference under every order ({skipped} configurations do not fit)")


def most_streamed(remat):
    """--remat layer through one slot with nothing resident: every layer recomputed, the least device memory."""
    return bool(remat) and "--slots 1 --resident 0" in remat and remat.startswith("layer")


def may_skip(target, policy, remat):
    """Whether mtc may refuse a configuration as not fitting: only on a target profile (the default machine fits
    them all), and never the defaults or the most streamed schedule, which every test profile is made to hold."""
    return target != "default" and bool(policy or remat) and not most_streamed(remat)


def tile(mtc, mtrun, model, tmp):
    """Row tiling (mtc --tile) changes where rows are computed, not what:
    the tiled plan's losses equal its reference's under every order, and
    the untiled reference's to 1e-5, for several chunk counts and schedules
    (one slot or two, checkpoints on the device or in host memory, the
    tiny-2layers profile, where the head and tail lie over the frames, and
    the other remat modes, which tile only the tail's work)."""
    plan = os.path.join(tmp, "untiled.bin")
    p = run(mtc, model, "--batch", "2", "-o", plan)
    if p.returncode != 0:
        fail("mtc (untiled) failed", p)
    untiled = losses_of(mtrun, plan, os.path.join(tmp, "u.jsonl"), ["--reference"])
    for flags in (["--tile", "2"], ["--tile", "4", "--remat", "layer", "--slots", "1", "--checkpoints", "host"],
                  ["--tile", "8", "--remat", "layer", "--slots", "2", "--checkpoints", "device"],
                  ["--tile", "4", "--target", "tiny-2layers"],
                  ["--tile", "4", "--remat", "offload", "--slots", "1", "--resident", "0"],
                  ["--tile", "4", "--remat", "selective", "--slots", "1", "--resident", "0"],
                  ["--tile", "2", "--remat", "none"]):
        what = f"{os.path.basename(model)} --batch 2 {' '.join(flags)}"
        tiled = os.path.join(tmp, "tiled.bin")
        p = run(mtc, model, "--batch", "2", *flags, "-o", tiled)
        if p.returncode != 0:
            fail(f"mtc {what} failed", p)
        got = check_equal(mtrun, tiled, tmp, what, ORDERS[:2])
        for i, (x, y) in enumerate(zip(got, untiled)):
            if not abs(x - y) <= 1e-5 * abs(y):
                fail(f"{what}: step {i + 1}: tiled loss {x!r}, untiled {y!r} (all: {got} vs {untiled[:5]})")
        print(f"ok: {what}: the same losses as untiled")


def main():
    global ORDERS
    for a in [a for a in sys.argv if a.startswith("--orders=")]:  # other orders (threads:SEED) for equal
        ORDERS = tuple(a[len("--orders="):].split(","))
        sys.argv.remove(a)
    mtc, mtrun, mode, model = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "matrix":
            matrix(mtc, mtrun, model, sys.argv[5], tmp, short=sys.argv[6:7] == ["short"])
            return
        if mode == "tile":
            tile(mtc, mtrun, model, tmp)
            return
        plan = os.path.join(tmp, "p.bin")
        p = run(mtc, model, "-o", plan)
        if p.returncode != 0:
            fail("mtc failed", p)
        if mode == "equal":
            a = check_equal(mtrun, plan, tmp, os.path.basename(model))
            if not a[4] < a[0]:
                fail(f"the loss did not fall over 5 steps: {a}")
            acc = os.path.join(tmp, "acc.bin")
            p = run(mtc, with_accumulate(model, tmp), "-o", acc)
            if p.returncode != 0:
                fail("mtc (accumulate = 2) failed", p)
            check_equal(mtrun, acc, tmp, os.path.basename(model) + " at half the batch, accumulate = 2")
        elif mode == "converge":
            log = os.path.join(tmp, "m.jsonl")
            p = run(mtrun, plan, "--steps", "500", "--log", log)
            if p.returncode != 0:
                fail("mtrun failed", p)
            val = [m["val_loss"] for m in metrics(log) if "val_loss" in m]
            if not val or not 5.0 < val[0] < 6.0:
                fail(f"the first validation loss should be about ln 256 = 5.55: {val[:1]}")
            if not val[-1] < 2.5:
                fail(f"the last validation loss {val[-1]} is not under 2.5 (all: {val})")
            print(f"ok: validation loss {val[0]:.3f} -> {val[-1]:.3f} in 500 steps")
        elif mode == "accumulate":
            # batch B/2 with 2 micro-batches reads the very rows batch B reads,
            # and averages their gradients: the same training, summed in another order
            src = source_elsewhere(model)
            batch = int(src.split("batch = ")[1].split()[0])
            half = os.path.join(tmp, "half.mt")
            open(half, "w").write(src.replace(f"batch = {batch}", f"batch = {batch // 2}\n  accumulate = 2"))
            hplan = os.path.join(tmp, "h.bin")
            p = run(mtc, half, "-o", hplan)
            if p.returncode != 0:
                fail("mtc (accumulate = 2) failed", p)
            losses = {}
            for name, pl in (("whole", plan), ("half", hplan)):
                log = os.path.join(tmp, name + ".jsonl")
                p = run(mtrun, pl, "--steps", "5", "--log", log, "--val-batches", "0")
                if p.returncode != 0:
                    fail(f"mtrun ({name}) failed", p)
                losses[name] = [m["loss"] for m in metrics(log) if "loss" in m]
            a, b = losses["whole"], losses["half"]
            if len(a) != 5 or any(abs(x - y) > 1e-5 * abs(x) for x, y in zip(a, b)):
                fail(f"accumulate = 2 at half the batch differs from the whole batch:\n  {a}\n  {b}")
            print(f"ok: batch {batch} and 2 x {batch // 2} agree to 1e-5 over 5 steps: {a} / {b}")
        else:
            fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
