#!/usr/bin/env python3
"""DeepSeek-V3's auxiliary-loss-free bias update (router(..., bias_update =
gamma), Param.balance_mask): after each step's optimizer every routing
bias element i moves by gamma x sign(mean load - load_i), load_i the
tokens that chose expert i over the step (every micro-batch, every rank).

- oracle: tools/hf_to_mt.py --bias-update 0.01 writes the tiny
  DeepseekV3ForCausalLM of check_hybrid_hf.py (a dense layer, two MoE layers
  of 8 experts, 2 a token, 2 of 4 groups eligible, a nonzero bias); its 5
  AdamW steps (lr 1e-3, betas (0.9, 0.95), eps 1e-8, no decay or clipping,
  fp32) against torch.optim.AdamW's run of transformers' model followed,
  after each optimizer step, by the rule in torch (fp32; the loads counted
  from the gate's own top-k indices, a forward hook): the 5 losses to 1e-5
  relative, the biases after 5 steps equal bit for bit, every weight to
  5e-5 of its tensor's largest (1e-5 measured; Adam's near-zero gradients
  can move an element by up to lr where the two runs' tiny gradients differ),
  and the biases moved
  (the rule is seen: transformers without it keeps them);
- gamma 0: bias_update = 0 gives the bits of the model without the rule
  (the log's losses and the export byte for byte);
- examples/deepseek-v3.mt at tiny widths (its own rule, gamma 0.001):
  schedules: the plan streamed through one layer (tiny-1layer), under each
  --remat (none, layer, selective, offload), exports the bits of the plan
  streamed through two (tiny-2layers), and tiled (--tile 2)
  its biases bit for bit (the tiled loss moves the weights by an ulp);
  ranks: mpirun -np 2 (batch 2 each) exports one process's bits (batch 2 x
  accumulate 2: the loads of the same micro-batches), replicated, sharded,
  and sharded with --tier-dir (the buffer the rule moves is no frozen
  tensor to the store, so a sharded plan keeps its tier);
  resume: 3 steps saved, resumed to 6, the straight 6 steps' export byte for
  byte; mtrun --reference (the reference executor, counting the loads from
  its own masks) gives the plan's biases bit for bit.

usage: check_bias_update.py MTC MTRUN
Run from the project root.
"""
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_dist  # noqa: E402  (its MPIRUN)
from check_deepseek_v3 import tiny_text  # noqa: E402
from check_hybrid_hf import CONFIGS, LR, STEPS, T, TRAIN, hf_loss, hf_model, mt_run, mt_weights  # noqa: E402
from checks import check, finish, run  # noqa: E402
from check_weights import DATA, read_safetensors  # noqa: E402

GAMMA = 0.01


def counting(model):
    """Forward hooks on every MoE layer's gate: {layer: its last forward's top-k indices}."""
    seen = {}
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "e_score_correction_bias"):
            gate.register_forward_hook(lambda m, a, out, i=i: seen.__setitem__(i, out[2].detach().clone()))
    return seen


def oracle(batches, gamma):
    """transformers' 5 AdamW steps, each followed by the rule at gamma: the losses and the final state dict."""
    import torch
    model = hf_model("deepseek_v3", 7)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    seen, out = counting(model), []
    for x, y in batches:
        opt.zero_grad()
        loss = hf_loss(model, x, y)
        loss.backward()
        opt.step()
        with torch.no_grad():
            for i, idx in seen.items():
                gate = model.model.layers[i].mlp.gate
                E = gate.e_score_correction_bias.shape[0]
                load = torch.bincount(idx.flatten(), minlength=E).float()
                gate.e_score_correction_bias.add_(torch.sign(load.mean() - load) * gamma)
        out.append(float(loss.detach()))
    return out, mt_weights("deepseek_v3", model)


def against_transformers(mtc, mtrun):
    import hf_to_mt
    text = hf_to_mt.convert(dict(CONFIGS["deepseek_v3"]), "deepseek_v3_tiny", bias_update=GAMMA)
    text = re.sub(r"train \{.*\}\s*$", "", text, flags=re.S)
    check(f"bias_update = {GAMMA!r})" in text, "hf_to_mt.py --bias-update wrote no rule")
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    batches = [(raw[s * T: s * T + T], raw[s * T + 1: s * T + T + 1]) for s in range(STEPS)]
    W = mt_weights("deepseek_v3", hf_model("deepseek_v3", 7))
    theirs, want = oracle(batches, GAMMA)
    train = TRAIN.format(T=T, lr=LR, b=0.9, b2=0.95, eps="1e-8", steps=STEPS)
    with tempfile.TemporaryDirectory() as tmp:
        lines, got = mt_run(mtc, mtrun, text + train, W, tmp, STEPS, LR, True)
    if lines is None:
        return
    mine = [r["loss"] for r in lines]
    errs = [abs(a - b) / abs(b) for a, b in zip(mine, theirs)]
    check(len(mine) == STEPS and max(errs) <= 1e-5, f"{STEPS} steps: mt's losses {mine}, the oracle's {theirs}")
    biases = [n for n in W if n.endswith("e_score_correction_bias")]
    moved = [n for n in biases if not np.array_equal(want[n], W[n])]
    check(biases and len(moved) == len(biases), f"the oracle moved {moved} of the biases {biases}")
    for n in biases:
        check(np.array_equal(got[n], want[n]), f"{n} after {STEPS} steps: mt {got[n]}, the oracle {want[n]}")
    worst = max((float(np.max(np.abs(got[n] - want[n])) / max(float(np.max(np.abs(want[n]))), 1e-30)), n)
                for n in W)
    check(worst[0] <= 5e-5, f"{worst[1]} after {STEPS} steps misses the oracle's by {worst[0]:.2e} of its largest")
    print(f"deepseek_v3 tiny, bias_update = {GAMMA}: {STEPS} losses within {max(errs):.1e} relative of the oracle's, "
          f"{len(biases)} biases equal bit for bit, every weight within {worst[0]:.1e} of its largest ({worst[1]})")
    gamma_zero(mtc, mtrun, text + train, W)


def gamma_zero(mtc, mtrun, text, W):
    """bias_update = 0 against no rule: the same log and export bytes."""
    zero = text.replace(f"bias_update = {GAMMA!r})", "bias_update = 0)")
    none = text.replace(f", bias_update = {GAMMA!r})", ")")
    outs = []
    for tag, t in (("zero", zero), ("none", none)):
        with tempfile.TemporaryDirectory() as tmp:
            lines, _ = mt_run(mtc, mtrun, t, W, tmp, STEPS, LR, True)
            outs.append(([r["loss"] for r in lines or []], open(os.path.join(tmp, "o.safetensors"), "rb").read()
                         if lines else None))
    check(outs[0][0] and outs[0] == outs[1], "bias_update = 0 does not give the bits of the model without the rule")
    print("bias_update = 0: the losses and export of the model without the rule, byte for byte")


def tiny_example(tmp):
    """examples/deepseek-v3.mt at check_deepseek_v3's tiny widths, its rule kept, a constant schedule."""
    train = (f'train {{\n  batch = 1\n  seq = 16\n  steps = 6\n  schedule = constant\n'
             f'  data = "{os.path.abspath(DATA)}"\n}}')
    path = os.path.join(tmp, "v3.mt")
    text = tiny_text("examples/deepseek-v3.mt", train)
    check("bias_update = 0.001)" in text, "examples/deepseek-v3.mt has no rule")
    open(path, "w").write(text)
    return path


def export(mtc, mtrun, model, tmp, tag, mtc_flags, run_flags, ranks=0):
    """The bytes mtrun --export writes after the run of model's plan (mtc_flags) with run_flags; None if either
    failed. ranks: under mpirun -np ranks."""
    plan, out = os.path.join(tmp, tag + ".bin"), os.path.join(tmp, tag + ".safetensors")
    p = run(mtc, model, "--dtype", "f32", "--target", "tiny-2layers", *mtc_flags, "-o", plan)
    if not check(p.returncode == 0, f"mtc {' '.join(mtc_flags)}", p):
        return None
    mpi = [*check_dist.MPIRUN, "-np", str(ranks)] if ranks else []
    p = run(*mpi, mtrun, plan, "--device", "cpu", "--val-batches", "0", "--export", out, "--dtype", "fp32",
            "--log", os.path.join(tmp, tag + ".jsonl"), "--threads", "1", *run_flags, timeout=300)
    return open(out, "rb").read() if check(p.returncode == 0, f"mtrun {tag}", p) else None


def biases_of(path):
    return {n: a for n, a in read_safetensors(path).items() if n.endswith("e_score_correction_bias")}


def schedules(mtc, mtrun, model, tmp, steps):
    """Streamed through one layer, each remat mode: the bits of tiny-2layers' plan; tiled: its biases bit for bit
    (the tiled loss, a mean of the chunks' means, moves the weights by an ulp)."""
    ref = export(mtc, mtrun, model, tmp, "two", [], steps)
    tiled = export(mtc, mtrun, model, tmp, "tiled", ["--tile", "2"], steps)
    if ref is None or tiled is None:
        return None
    for remat in ("none", "layer", "selective", "offload"):
        streamed = export(mtc, mtrun, model, tmp, "streamed", ["--target", "tiny-1layer", "--remat", remat], steps)
        check(streamed == ref, f"streamed through one layer (tiny-1layer, --remat {remat}): another export than "
              "tiny-2layers'")
    b, bt = (biases_of(os.path.join(tmp, t + ".safetensors")) for t in ("two", "tiled"))
    check(b and all(np.any(a != 0) for a in b.values()), f"the biases did not move from 0: {b}")
    check(sorted(b) == sorted(bt) and all(np.array_equal(b[n], bt[n]) for n in b), "tiled: other biases")
    print(f"tiny deepseek-v3.mt: streamed under each --remat, its export byte for byte, and tiled, its biases "
          f"{list(b)} bit for bit")
    return ref


def schedules_ranks_resume(mtc, mtrun):
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_example(tmp)
        steps = ["--steps", "6", "--no-save"]
        ref = schedules(mtc, mtrun, model, tmp, steps)
        if ref is None:
            return
        ref_exec = export(mtc, mtrun, model, tmp, "reference", [], steps + ["--reference"])
        b, br = (biases_of(os.path.join(tmp, t + ".safetensors")) for t in ("two", "reference"))
        check(ref_exec and sorted(b) == sorted(br) and all(np.array_equal(b[n], br[n]) for n in b),
              "mtrun --reference: other biases than the plan's")
        print("tiny deepseek-v3.mt: the reference executor's biases the plan's, bit for bit")
        ck = os.path.join(tmp, "ck")
        half = export(mtc, mtrun, model, tmp, "half", [], ["--steps", "3", "--save", ck, "--save-every", "3"])
        more = export(mtc, mtrun, model, tmp, "resumed", [], ["--steps", "6", "--resume", ck, "--no-save"])
        check(half and more == ref and half != ref, "resumed at step 3 to 6: another export than the straight run's")
        print("tiny deepseek-v3.mt: saved at step 3 and resumed, the straight 6 steps' export byte for byte")
        acc = os.path.join(tmp, "acc.mt")
        open(acc, "w").write(open(model).read().replace("batch = 1\n", "batch = 1\n  accumulate = 2\n"))
        one = export(mtc, mtrun, acc, tmp, "one", ["--batch", "2"], steps)
        tier = ["--tier-dir", os.path.join(tmp, "tier")]  # (each rank's file in tier/rank-R-of-2)
        os.makedirs(tier[1])
        for shard, more in (("off", []), ("on", []), ("on", tier)):
            got = export(mtc, mtrun, model, tmp, f"np2-{shard}", ["--batch", "2", "--ranks", "2", "--shard", shard],
                         steps + more, ranks=2)
            check(one and got == one, f"mpirun -np 2 (--shard {shard} {' '.join(more)}): another export than one "
                  "process's of batch 2 x accumulate 2")
        print("tiny deepseek-v3.mt: 2 ranks of batch 2, replicated, sharded and sharded with the NVMe tier, export one process's bits (batch 2 x accumulate 2)")


def main():
    mtc, mtrun = sys.argv[1:3]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, "tools")
    against_transformers(mtc, mtrun)
    schedules_ranks_resume(mtc, mtrun)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
