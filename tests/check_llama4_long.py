#!/usr/bin/env python3
"""Llama 4 past 8192 positions: a tiny llama4_text model, as tools/hf_to_mt.py
writes it from its config, against transformers' Llama4ForCausalLM at
8192 + 64 positions.

The config keeps what changes at position 8192 as Scout's has it:
attention_chunk_size 8192 (layer 0, with rope and the weightless q/k norm:
queries from 8192 on see only the keys of the second chunk) and the NoPE
layer's temperature tuning with floor_scale 8192 (layer 1: the queries from
position 8191 on are scaled by log(floor((t + 1) / 8192) + 1) attn_scale +
1, 7.93 at attn_scale 10 (Scout's 0.1 gives 1.069, too little to see in
a loss over 8256 positions); 1 before). Tiny widths (hidden 16, 2 heads of 8
sharing one key/value head, dense SwiGLU layers), one batch row; transformers
runs its sdpa attention under its own chunked mask, fp32, random weights.

mt's f32 plan (the cpu backend) at the same 8256 positions: its first loss
equals transformers' to 1e-6 relative, and the gradient of every tensor to
2e-5 of the tensor's largest (read off one AdamW step of betas (0, 0), eps
1e6, lr 1e12, as check_hybrid_hf.py reads them). So that the check can
fail, each of the two features changed alone in transformers' model (a chunk
of 16384, which the sequence never crosses; no temperature tuning) moves its
loss by more than 10 times the loss's tolerance and a gradient by more than
10 times the gradients'.

usage: check_llama4_long.py MTC MTRUN   (from the project root)
"""
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_hybrid_hf as hf  # noqa: E402
from checks import check, finish, run  # noqa: E402
from check_weights import DATA, read_safetensors, update_grads, write_safetensors  # noqa: E402

T = 8192 + 64
CONFIG = {"model_type": "llama4_text", "vocab_size": 256, "hidden_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "intermediate_size": 16,
          "intermediate_size_mlp": 24, "num_local_experts": 1, "num_experts_per_tok": 1, "moe_layers": [],
          "no_rope_layers": [1, 0], "attention_chunk_size": 8192, "attn_temperature_tuning": True,
          "floor_scale": 8192, "attn_scale": 10.0, "use_qk_norm": True, "rope_theta": 500000.0,
          "rms_norm_eps": 1e-5, "max_position_embeddings": 16384, "tie_word_embeddings": False,
          "hidden_act": "silu"}
CHANGES = {"a chunk of 16384": {"attention_chunk_size": 16384},
           "no temperature tuning": {"attn_temperature_tuning": False}}
LOSS_TOL, GRAD_TOL = 1e-6, 2e-5


def hf_model(changes=None):
    """transformers' Llama4ForCausalLM from CONFIG (with changes), sdpa attention, fp32, seeded random weights."""
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    raw = {k: v for k, v in dict(CONFIG, **(changes or {})).items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model("llama4_text", **raw)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(11)
    model = transformers.Llama4ForCausalLM(cfg).float()
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3)
    return model


def hf_loss(model, x, y):
    import torch
    return torch.nn.functional.cross_entropy(model(torch.tensor(x[None])).logits[0], torch.tensor(y))


def mt_step(mtc, mtrun, text, W, tmp, lr):
    """One step of the model on the cpu backend (mtc's default target): its log's records and exported weights."""
    model, wf, plan, log, out = (os.path.join(tmp, n) for n in ("m.mt", "w.safetensors", "p.bin", "l.jsonl",
                                                                "o.safetensors"))
    with open(model, "w") as f:
        f.write(text)
    write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
    q = run(mtc, model, "-o", plan, "--dtype", "f32")
    if not check(q.returncode == 0, "mtc -o the tiny model", q):
        return None, None
    p = run(mtrun, plan, "--steps", 1, "--device", "cpu", "--data", DATA, "--init", wf, "--log", log, "--lr",
            f"{lr:g}", "--no-save", "--val-batches", 0, "--export", out, "--dtype", "fp32", timeout=600)
    if not check(p.returncode == 0, "mtrun the tiny model", p):
        return None, None
    return [json.loads(line) for line in open(log) if '"loss"' in line and '"step"' in line], read_safetensors(out)


def main():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    mtc, mtrun = sys.argv[1:3]
    sys.path.insert(0, "tools")
    import hf_to_mt
    text = hf_to_mt.convert(dict(CONFIG), "llama4_long_tiny")
    text, n = re.subn(r"train \{.*\}\s*$", "", text, flags=re.S)
    if not check(n == 1 and "chunk = CH" in text and "floor(" in text,
                 "the tool's model: chunked attention, the temperature's floor, a train section at its end"):
        return finish()
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    x, y = raw[:T], raw[1:T + 1]  # the data's first batch of batch 1

    model = hf_model()
    loss = hf_loss(model, x, y)
    loss.backward()
    want = float(loss.detach())
    grad = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    hf.CONFIGS["llama4_long"] = CONFIG  # for check_hybrid_hf's readers of the tensors
    W = hf.mt_weights("llama4_long", model)
    for what, changes in CHANGES.items():  # the check sees both features
        other_model = hf_model(changes)
        other = hf_loss(other_model, x, y)
        other.backward()
        moved = abs(float(other.detach()) - want) / want
        gmoved = max(float(np.max(np.abs(p.grad.numpy() - grad[n])) / np.max(np.abs(grad[n])))
                     for n, p in other_model.named_parameters())
        if check(moved > 10 * LOSS_TOL and gmoved > 10 * GRAD_TOL,
                 f"{what}: transformers' loss moves by only {moved:.1e} relative, its gradients by {gmoved:.1e}"):
            print(f"ok   {what}: transformers' loss {float(other.detach()):.7f} (from {want:.7f}, {moved:.1e} relative), "
                  f"a gradient by {gmoved:.1e} of its largest")

    lr, eps = 1e12, 1e6
    with tempfile.TemporaryDirectory() as tmp:
        train = hf.TRAIN.format(T=T, lr=lr, b=0, b2=0, eps=f"{eps:g}", steps=1)
        lines, got = mt_step(mtc, mtrun, text + train, W, tmp, lr)
    if lines is None:
        return finish()
    e = abs(lines[0]["loss"] - want) / want
    ok = check(e <= LOSS_TOL, f"T = {T}: mt's loss {lines[0]['loss']!r}, transformers' {want!r} ({e:.1e} relative)")
    worst, where = 0.0, None
    mine = update_grads(W, got, lr, eps)
    for name in W:
        err = float(np.max(np.abs(mine[name] - grad[name])) / max(np.max(np.abs(grad[name])), 1e-30))
        if err > worst:
            worst, where = err, name
    if check(worst <= GRAD_TOL, f"T = {T}: the gradient of {where} misses transformers' by {worst:.2e} of its largest") \
            and ok:
        print(f"ok   T = {T}: mt's loss {lines[0]['loss']:.7f}, transformers' {want:.7f} ({e:.1e} relative); "
              f"gradients of {len(W)} tensors within {worst:.1e} of the largest ({where})")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
