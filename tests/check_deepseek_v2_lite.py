#!/usr/bin/env python3
"""tests/models/deepseek-v2-lite.mt: DeepSeek-V2-Lite written with neither
zero-padding nor an added zero tensor (attention's value heads narrower than
its query and key heads, the shared rope key broadcast by concat, the order
[dense] + [sparse] * (L - 1)).

- mtc --summary --json: 15,706,484,224 parameters, the checkpoint's count,
  and its tensors' names and shapes as the checkpoint stores them.
- Its structure at tiny widths (the config's values replaced; vocabulary
  256, bytes) trains 3 steps on the cpu target tiny-1layer, streamed, with
  the unstreamed reference executor's losses to 1e-5, and its gradient
  norm is finite.
- transformers: that tiny variant (its YaRN rope, factor 40 over 4096
  positions, mscale and mscale_all_dim 0.707, and the softmax scale that
  folds mscale in; no aux loss) as a DeepseekV2ForCausalLM (its own
  modelling code, eager attention, fp32) from the same random weights (mt's
  per-expert tensors stacked into its fused gate_up_proj and down_proj): the
  loss on the first validation batch (batch 1, 16 positions) equals
  mtc/mtrun's to 1e-5 relative, its logits mtrun's (--logits, the plan's
  forward) to 1e-5 of the largest, and transformers' loss without the YaRN
  scaling differs from it by more than 1e-3 (so the check sees YaRN).

usage: check_deepseek_v2_lite.py MTC MTRUN
Run from the project root.
"""
import json
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import fail, last_run, run  # noqa: E402

MODEL = "tests/models/deepseek-v2-lite.mt"
TINY = {"V": "256", "C": "32", "L": "3", "H": "2", "DN": "8", "DR": "4", "DV": "6", "R": "16", "FFN": "48",
        "E": "4", "K": "2", "EFFN": "16"}


def main():
    mtc, mtrun = sys.argv[1:3]
    p = run(mtc, MODEL, "--summary", "--json")
    if p.returncode != 0:
        fail("mtc --summary --json failed", p)
    d = json.loads(p.stdout)
    if d["params_total"] != 15_706_484_224:
        fail(f"params_total {d['params_total']:,}, DeepSeek-V2-Lite has 15,706,484,224")
    shapes = {q["name"]: q["shape"] for q in d["params"]}
    want = {"model.layers.0.self_attn.q_proj.weight": [3072, 2048],
            "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": [576, 2048],
            "model.layers.5.self_attn.kv_a_layernorm.weight": [512],
            "model.layers.26.self_attn.kv_b_proj.weight": [4096, 512],
            "model.layers.0.mlp.down_proj.weight": [2048, 10944],
            "model.layers.1.mlp.gate.weight": [64, 2048],
            "model.layers.26.mlp.experts.63.down_proj.weight": [2048, 1408],
            "model.layers.3.mlp.shared_experts.up_proj.weight": [2816, 2048]}
    for name, shape in want.items():
        if shapes.get(name) != shape:
            fail(f"{name}: {shapes.get(name)}, the checkpoint's {shape}")
    if "model.layers.0.mlp.gate.weight" in shapes:
        fail("layer 0 is dense in the checkpoint, but has a router here")
    print(f"ok: {d['params_total']:,} parameters, names and shapes as the checkpoint's")

    text = open(MODEL).read()
    for k, v in TINY.items():
        text, n = re.subn(rf"^(  {k} = )[^#\n]*", rf"\g<1>{v} ", text, count=1, flags=re.M)
        if n != 1:
            fail(f"no config entry {k} to shrink")
    text = text.replace("train { batch = 1; seq = 4096; dtype = bf16 }",
                        f'train {{ batch = 2; seq = 16; data = "{os.path.abspath("examples/data/tinyshakespeare.txt")}" }}')
    with tempfile.TemporaryDirectory() as tmp:
        model, plan = os.path.join(tmp, "tiny.mt"), os.path.join(tmp, "p.bin")
        with open(model, "w") as f:
            f.write(text)
        p = run(mtc, model, "--target", "tiny-1layer", "-o", plan)
        if p.returncode != 0:
            fail("mtc (tiny) failed", p)
        got = []
        for extra in ([], ["--reference"]):
            log = os.path.join(tmp, "l.jsonl")
            p = run(mtrun, plan, "--steps", "3", "--log", log, *extra)
            if p.returncode != 0:
                fail(f"mtrun {' '.join(extra)} failed", p)
            steps = last_run(log)  # (mtrun appends each run to its log)
            got.append([r["loss"] for r in steps if "loss" in r and "step" in r]
                       + [r["grad_norm"] for r in steps if "grad_norm" in r])
        if len(got[0]) != 6 or not all(math.isfinite(x) for x in got[0]):
            fail(f"the tiny model's losses and norms {got[0]}")
        for x, y in zip(*got):
            if not abs(x - y) <= 1e-5 * abs(y):
                fail(f"streamed {got[0]} against the reference {got[1]}")
        print(f"ok: the tiny variant trains streamed on tiny-1layer with the reference's losses and norms {got[0]}")
        against_transformers(mtc, mtrun, model, tmp)


def against_transformers(mtc, mtrun, model, tmp):
    import numpy as np
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from check_weights import val_tokens, write_safetensors
    T = 16
    p = run(mtc, model, "--batch", "1", "--seq", T, "--json")
    if p.returncode != 0:
        fail("mtc --json (tiny) failed", p)
    rng = np.random.default_rng(3)
    W = {q["name"]: (rng.standard_normal(q["shape"]) * 0.2).astype(np.float32) for q in json.loads(p.stdout)["params"]}
    for n in W:
        if n.endswith("norm.weight"):
            W[n] = (1 + 0.1 * rng.standard_normal(W[n].shape)).astype(np.float32)
    st, plan, log = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "t.bin"), os.path.join(tmp, "v.jsonl")
    write_safetensors(st, [(n, "F32", a) for n, a in W.items()])
    p = run(mtc, model, "--batch", "1", "--seq", T, "--target", "tiny-1layer", "-o", plan)
    if p.returncode != 0:
        fail("mtc (tiny, batch 1) failed", p)
    p = run(mtrun, plan, "--steps", "0", "--val-batches", "1", "--init", st, "--log", log, "--logits",
            os.path.join(tmp, "lg"))
    if p.returncode != 0:
        fail("mtrun --init failed", p)
    mt_loss = [r["val_loss"] for r in last_run(log) if "val_loss" in r][0]
    t = {k: int(v) for k, v in TINY.items()}
    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
            "mscale": 0.707, "mscale_all_dim": 0.707}
    hf_loss, hf_logits = hf_deepseek_loss(DeepseekV2Config, DeepseekV2ForCausalLM, t, W, T, yarn)
    plain, _ = hf_deepseek_loss(DeepseekV2Config, DeepseekV2ForCausalLM, t, W, T,
                                {"rope_type": "default", "rope_theta": 10000.0})
    rel = abs(mt_loss - hf_loss) / abs(hf_loss)
    # the logits of the same batch (mtrun --logits: the plan's forward), relative to the largest
    x, _ = val_tokens(T)
    mt_tokens, mt_logits = np.load(os.path.join(tmp, "lg.tokens.npy")), np.load(os.path.join(tmp, "lg.logits.npy"))
    if mt_tokens.shape != (1, T) or not (mt_tokens[0] == x).all() or mt_logits.shape != (1, T, t["V"]):
        fail(f"mtrun --logits wrote tokens {mt_tokens.shape} and logits {mt_logits.shape}, not the batch's (1, {T})")
    lrel = float(np.abs(mt_logits[0] - hf_logits).max() / np.abs(hf_logits).max())
    print(f"transformers' logits and mt's: largest difference {lrel:.2e} of the largest logit")
    if not lrel <= 1e-5:
        fail(f"mt's logits differ from transformers' by {lrel:.2e} of the largest logit (more than 1e-5)")
    print(f"transformers DeepseekV2ForCausalLM (eager, fp32, YaRN) loss {hf_loss:.9g}, mt {mt_loss:.9g}: relative "
          f"{rel:.2e}; without YaRN transformers gives {plain:.9g} ({abs(plain - hf_loss) / abs(hf_loss):.2e} off)")
    if not rel <= 1e-5:
        fail(f"mt's loss {mt_loss!r} is not transformers' {hf_loss!r} (relative {rel:.2e})")
    if not abs(plain - hf_loss) > 1e-3 * abs(hf_loss):
        fail(f"without YaRN transformers' loss {plain!r} is within 1e-3 of {hf_loss!r}: the check does not see YaRN")


def hf_deepseek_loss(DeepseekV2Config, DeepseekV2ForCausalLM, t, W, T, rope, **config):
    """transformers' loss and logits (T, V) of the tiny variant from weights W on the first validation batch, rope
    its rope_parameters, config what differs from DeepSeek-V2-Lite's config (DeepSeek-V3's routing bias buffer, in
    the state dict, is W's where W has it, else zeros)."""
    import numpy as np
    import torch
    from check_weights import val_tokens
    fields = dict(vocab_size=t["V"], hidden_size=t["C"], intermediate_size=t["FFN"], moe_intermediate_size=t["EFFN"],
                  num_hidden_layers=t["L"], num_attention_heads=t["H"], num_key_value_heads=t["H"], n_shared_experts=2,
                  n_routed_experts=t["E"], num_experts_per_tok=t["K"], first_k_dense_replace=1, kv_lora_rank=t["R"],
                  q_lora_rank=None, qk_nope_head_dim=t["DN"], qk_rope_head_dim=t["DR"], v_head_dim=t["DV"],
                  norm_topk_prob=False, routed_scaling_factor=1.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  max_position_embeddings=163840, attn_implementation="eager", rope_parameters=rope)
    cfg = DeepseekV2Config(**{**fields, **config})
    hf = DeepseekV2ForCausalLM(cfg).float().eval()
    sd = {}
    for name in hf.state_dict():
        m = re.match(r"(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$", name)
        if m:
            e = range(t["E"])
            if m.group(2) == "gate_up_proj":
                sd[name] = np.stack([np.concatenate([W[f"{m.group(1)}.{i}.gate_proj.weight"],
                                                     W[f"{m.group(1)}.{i}.up_proj.weight"]]) for i in e])
            else:
                sd[name] = np.stack([W[f"{m.group(1)}.{i}.down_proj.weight"] for i in e])
        elif name.endswith("mlp.gate.e_score_correction_bias"):
            sd[name] = W.get(name, np.zeros(t["E"], np.float32))
        else:
            sd[name] = W[name]
    hf.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=True)
    x, y = val_tokens(T)
    with torch.no_grad():
        out = hf(torch.from_numpy(x)[None], labels=None)
        logits = out.logits[0].double()
        return float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(y))), logits.numpy()


if __name__ == "__main__":
    main()
