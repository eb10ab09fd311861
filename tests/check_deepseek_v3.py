#!/usr/bin/env python3
"""examples/deepseek-v3.mt and examples/kimi-k2.mt at tiny widths against
transformers' DeepseekV3ForCausalLM (its own modelling code, eager attention,
fp32) from the same random weights (DeepSeek-V3's routing bias buffer
positive, from 0 to 0.3): each
example's config values replaced (vocabulary 256, bytes; 8 experts, 2 a
token; DeepSeek-V3's in 4 groups of which 2 are eligible, Kimi K2's one
group; its own dense layers, YaRN rope, routed_scaling_factor and
rope_theta kept), the loss on the first validation batch (batch 1, 16
positions) equals mtc/mtrun's to 1e-5 relative and the logits to 1e-5 of
the largest.

Then DeepSeek-V3's router (sigmoid scores, chosen by score + bias within
the group limit, renormalised, scaled) trained: mtrun's first step of the f32 plan on the data's first 16
bytes gives transformers' loss (float64) to 1e-5 relative and every
tensor's gradient to 2e-5 of its largest, the routers' to 1e-5 (read off
one AdamW step of update lr g / (|g| + eps), as tests/check_moe.py), and the same weights without
the group limit (n_group 1), or with a zero bias, must move transformers'
loss by more than 1e-4, so the check sees both; without the example's
balance rule (bias_update, which transformers does not have; its check is
tests/check_bias_update.py) the bias buffers come back from the step
unchanged, and `mtc --json` counts them apart from the
parameters ("buffers_total", each marked "buffer"). The parameter counts are
tests/check_examples.py's.

usage: check_deepseek_v3.py MTC MTRUN
Run from the project root.
"""
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import fail, run  # noqa: E402
from check_deepseek_v2_lite import hf_deepseek_loss  # noqa: E402
from check_weights import DATA, read_safetensors, val_tokens, write_safetensors  # noqa: E402

TINY = {"V": "256", "C": "32", "L": "4", "H": "2", "QR": "12", "DN": "8", "DR": "4", "DV": "6", "R": "16",
        "FFN": "48", "E": "8", "K": "2", "EFFN": "16"}
GROUPS = {"examples/deepseek-v3.mt": {"NG": "4", "TG": "2"}, "examples/kimi-k2.mt": {}}
STEP_TRAIN = """train {
  batch = 1
  seq = 16
  optimizer = adamw(betas = (0, 0), weight_decay = 0, eps = 1e6)
  schedule = constant
  clip = 0
}"""


def config_value(text, name):
    m = re.search(rf"^  {name} = ([^#\n]*)", text, flags=re.M)
    if not m:
        fail(f"no config entry {name}")
    return float(m.group(1))


def tiny_text(example, train):
    """The example at TINY widths (and its group limit's GROUPS), its train section replaced by train."""
    text = open(example).read()
    for k, v in {**TINY, **GROUPS[example]}.items():
        text, n = re.subn(rf"^(  {k} = )[^#\n]*", rf"\g<1>{v} ", text, count=1, flags=re.M)
        if n != 1:
            fail(f"{example}: no config entry {k} to shrink")
    text, n = re.subn(r"\ntrain \{.*?\n\}", "\n" + train, text, flags=re.S)
    if n != 1:
        fail(f"{example}: no train block to replace")
    return text


def hf_config(example):
    """transformers' DeepseekV3Config fields of the tiny example beyond hf_deepseek_loss's."""
    text = open(example).read()
    kept = {k: config_value(text, k) for k in ("DENSE", "RSF", "theta", "YF", "YO", "YBF", "YBS", "YM")}
    t = {k: int(v) for k, v in TINY.items()}
    g = {k: int(v) for k, v in GROUPS[example].items()}
    yarn = {"rope_type": "yarn", "rope_theta": kept["theta"], "factor": kept["YF"],
            "original_max_position_embeddings": int(kept["YO"]), "beta_fast": kept["YBF"], "beta_slow": kept["YBS"],
            "mscale": kept["YM"], "mscale_all_dim": kept["YM"]}
    return t, yarn, dict(q_lora_rank=t["QR"], n_shared_experts=1, first_k_dense_replace=int(kept["DENSE"]),
                         norm_topk_prob=True, routed_scaling_factor=kept["RSF"], n_group=g.get("NG", 1),
                         topk_group=g.get("TG", 1))


def random_weights(mtc, model):
    p = run(mtc, model, "--json")
    if p.returncode != 0:
        fail(f"mtc --json ({model}) failed", p)
    rng = np.random.default_rng(5)
    W = {q["name"]: (rng.standard_normal(q["shape"]) * 0.2).astype(np.float32) for q in json.loads(p.stdout)["params"]}
    for n in W:
        if n.endswith("norm.weight"):
            W[n] = (1 + 0.1 * rng.standard_normal(W[n].shape)).astype(np.float32)
        if n.endswith("e_score_correction_bias"):  # positive, so that a group's excluded experts are never chosen
            W[n] = rng.uniform(0, 0.3, W[n].shape).astype(np.float32)
    return W


def without_update(text):
    """The example without its routing bias's balance rule (bias_update): transformers does not move the bias."""
    rule = ", bias_update = 0.001)"
    if text.count(rule) != 1:
        fail("examples/deepseek-v3.mt: no router(..., bias_update = 0.001) to take the rule off")
    return text.replace(rule, ")")


def check(mtc, mtrun, example, tmp):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    T = 16
    text = tiny_text(example, f'train {{ batch = 1; seq = {T}; data = "{os.path.abspath(DATA)}" }}')
    model, plan = os.path.join(tmp, "tiny.mt"), os.path.join(tmp, "t.bin")
    with open(model, "w") as f:
        f.write(text)
    W = random_weights(mtc, model)
    st, log = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "v.jsonl")
    write_safetensors(st, [(n, "F32", a) for n, a in W.items()])
    p = run(mtc, model, "--target", "tiny-1layer", "-o", plan)
    if p.returncode != 0:
        fail(f"mtc ({example}, tiny) failed", p)
    p = run(mtrun, plan, "--steps", "0", "--val-batches", "1", "--init", st, "--log", log, "--logits",
            os.path.join(tmp, "lg"))
    if p.returncode != 0:
        fail(f"mtrun --init ({example}, tiny) failed", p)
    mt_loss = [json.loads(l)["val_loss"] for l in open(log) if "val_loss" in l][0]
    t, yarn, cfg = hf_config(example)
    hf_loss, hf_logits = hf_deepseek_loss(DeepseekV3Config, DeepseekV3ForCausalLM, t, W, T, yarn, **cfg)
    x, _ = val_tokens(T)
    mt_tokens, mt_logits = np.load(os.path.join(tmp, "lg.tokens.npy")), np.load(os.path.join(tmp, "lg.logits.npy"))
    if mt_tokens.shape != (1, T) or not (mt_tokens[0] == x).all() or mt_logits.shape != (1, T, t["V"]):
        fail(f"mtrun --logits wrote tokens {mt_tokens.shape} and logits {mt_logits.shape}, not the batch's (1, {T})")
    lrel = float(np.abs(mt_logits[0] - hf_logits).max() / np.abs(hf_logits).max())
    rel = abs(mt_loss - hf_loss) / abs(hf_loss)
    print(f"{example}: transformers DeepseekV3ForCausalLM loss {hf_loss:.9g}, mt {mt_loss:.9g} (relative {rel:.2e}); "
          f"logits {lrel:.2e} of the largest apart")
    if not rel <= 1e-5 or not lrel <= 1e-5:
        fail(f"{example}: mt's loss {mt_loss!r} or logits differ from transformers' ({rel:.2e}, {lrel:.2e}; 1e-5 allowed)")


def hf_step(W, T, bias=True, **over):
    """transformers' float64 loss of the tiny DeepSeek-V3 on the data's first T bytes and its gradients under mt's
    names (the fused experts split back)."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    t, yarn, cfg = hf_config("examples/deepseek-v3.mt")
    cfg.update(over)
    fields = dict(vocab_size=t["V"], hidden_size=t["C"], intermediate_size=t["FFN"], moe_intermediate_size=t["EFFN"],
                  num_hidden_layers=t["L"], num_attention_heads=t["H"], num_key_value_heads=t["H"],
                  n_routed_experts=t["E"], num_experts_per_tok=t["K"], kv_lora_rank=t["R"], qk_nope_head_dim=t["DN"],
                  qk_rope_head_dim=t["DR"], v_head_dim=t["DV"], rms_norm_eps=1e-6, tie_word_embeddings=False,
                  max_position_embeddings=163840, attn_implementation="eager", rope_parameters=yarn)
    config = DeepseekV3Config(**{**fields, **cfg})
    config._attn_implementation, config._experts_implementation = "eager", "eager"  # plain loops, float64
    hf = DeepseekV3ForCausalLM(config).double()
    sd, E = {}, t["E"]
    for name in hf.state_dict():
        m = re.match(r"(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)$", name)
        if m and m.group(2) == "gate_up_proj":
            sd[name] = np.stack([np.concatenate([W[f"{m.group(1)}.{i}.gate_proj.weight"],
                                                 W[f"{m.group(1)}.{i}.up_proj.weight"]]) for i in range(E)])
        elif m:
            sd[name] = np.stack([W[f"{m.group(1)}.{i}.down_proj.weight"] for i in range(E)])
        elif name.endswith("mlp.gate.e_score_correction_bias"):
            sd[name] = W[name] if bias else np.zeros(E)
        else:
            sd[name] = W[name]
    hf.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v, np.float64)) for k, v in sd.items()}, strict=True)
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    out = hf(torch.from_numpy(raw[:T])[None])
    loss = torch.nn.functional.cross_entropy(out.logits[0], torch.from_numpy(raw[1:T + 1]))
    loss.backward()
    grads = {}
    for name, q in hf.named_parameters():
        g = q.grad.numpy()
        if name.endswith("experts.gate_up_proj"):
            for i in range(E):
                pre = f"{name[: -len('gate_up_proj')]}{i}."
                grads[pre + "gate_proj.weight"], grads[pre + "up_proj.weight"] = np.split(g[i], 2)
        elif name.endswith("experts.down_proj"):
            for i in range(E):
                grads[f"{name[: -len('down_proj')]}{i}.down_proj.weight"] = g[i]
        else:
            grads[name] = g
    return float(loss.detach()), grads


def check_step(mtc, mtrun, tmp):
    """One training step of the tiny DeepSeek-V3 against transformers: the loss and every gradient."""
    T, lr, eps = 16, 1e12, 1e6
    model, plan, st, log, out = (os.path.join(tmp, n) for n in ("s.mt", "s.bin", "s.safetensors", "s.jsonl",
                                                                         "o.safetensors"))
    with open(model, "w") as f:
        f.write(without_update(tiny_text("examples/deepseek-v3.mt", STEP_TRAIN)))
    W = random_weights(mtc, model)
    write_safetensors(st, [(n, "F32", a) for n, a in W.items()])
    summary = json.loads(run(mtc, model, "--json").stdout)
    marked = [q["name"] for q in summary["params"] if q.get("buffer")]
    t = {k: int(v) for k, v in TINY.items()}
    want = [f"model.layers.{i}.mlp.gate.e_score_correction_bias" for i in range(int(config_value(open(model).read(),
                                                                                                "DENSE")), t["L"])]
    if marked != want or summary["buffers_total"] != t["E"] * len(want):
        fail(f"mtc --json marks {marked} as buffers, {summary['buffers_total']} elements; want {want}")
    p = run(mtc, model, "-o", plan, "--target", "tiny-1layer", "--dtype", "f32")
    if p.returncode != 0:
        fail("mtc (deepseek-v3 tiny, f32) failed", p)
    p = run(mtrun, plan, "--steps", "1", "--device", "cpu", "--data", DATA, "--init", st, "--log", log, "--lr",
            f"{lr:g}", "--no-save", "--val-batches", "0", "--export", out, "--dtype", "fp32")
    if p.returncode != 0:
        fail("mtrun one step of the tiny DeepSeek-V3 failed", p)
    got = read_safetensors(out)
    mt_loss = [json.loads(l)["loss"] for l in open(log) if '"loss"' in l][0]
    hf_loss, hf_grads = hf_step(W, T)
    ungrouped, _ = hf_step(W, T, n_group=1, topk_group=1)
    unbiased, _ = hf_step(W, T, bias=False)
    rel = abs(mt_loss - hf_loss) / hf_loss
    print(f"deepseek-v3 step 1: loss mt {mt_loss:.9g}, transformers {hf_loss:.9g} ({rel:.1e} relative); "
          f"without the group limit transformers gives {ungrouped:.9g}, without the bias {unbiased:.9g}")
    if not rel <= 1e-5:
        fail(f"step 1 loss {mt_loss!r} against transformers' {hf_loss!r} ({rel:.1e}; 1e-5 allowed)")
    if not abs(ungrouped - hf_loss) > 1e-4 * hf_loss or not abs(unbiased - hf_loss) > 1e-4 * hf_loss:
        fail(f"the group limit or the bias does not change transformers' loss here ({ungrouped!r}, {unbiased!r}): "
             "the check would not see it")
    biases = [n for n in W if n.endswith("e_score_correction_bias")]
    if not biases or any(not np.array_equal(got[n], W[n]) for n in biases):
        fail(f"the routing bias buffers {biases} are missing or moved by the step: a buffer is not trained")
    errs = {}
    for n, g in hf_grads.items():
        u = W[n].astype(np.float64) - got[n].astype(np.float64)  # lr g / (|g| + eps)
        mine = u * eps / (lr - np.abs(u))
        errs[n] = float(np.abs(mine - g).max() / max(np.abs(g).max(), 1e-30))
    routers = max((e, n) for n, e in errs.items() if n.endswith("mlp.gate.weight"))
    worst = max((e, n) for n, e in errs.items())
    print(f"deepseek-v3 step 1: {len(errs)} gradients, the worst {worst[0]:.1e} of its largest ({worst[1]}); "
          f"the routers' worst {routers[0]:.1e} ({routers[1]})")
    if not worst[0] <= 2e-5 or not routers[0] <= 1e-5:
        fail(f"{worst[1]} or {routers[1]}: mt's gradient misses transformers' by {worst[0]:.1e} or {routers[0]:.1e} "
             "of its largest (2e-5 allowed, 1e-5 for the routers)")


def main():
    mtc, mtrun = sys.argv[1:3]
    for example in ("examples/deepseek-v3.mt", "examples/kimi-k2.mt"):
        with tempfile.TemporaryDirectory() as tmp:
            check(mtc, mtrun, example, tmp)
    with tempfile.TemporaryDirectory() as tmp:
        check_step(mtc, mtrun, tmp)


if __name__ == "__main__":
    main()
