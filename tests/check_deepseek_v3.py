#!/usr/bin/env python3
"""examples/deepseek-v3.mt and examples/kimi-k2.mt at tiny widths against
transformers' DeepseekV3ForCausalLM (its own modelling code, eager attention,
fp32) from the same random weights (the routing bias buffer zeros): each
example's config values replaced (vocabulary 256, bytes; 4 experts, 2 a
token; its own dense layers, YaRN rope, routed_scaling_factor and
rope_theta kept), the loss on the first validation batch (batch 1, 16
positions) equals mtc/mtrun's to 1e-5 relative and the logits to 1e-5 of
the largest. transformers runs with one expert group (n_group 1,
topk_group 1): DeepSeek-V3's group limit is not expressed (see its file);
Kimi K2 has one group. The parameter counts are tests/check_examples.py's.

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
from check_weights import val_tokens, write_safetensors  # noqa: E402

TINY = {"V": "256", "C": "32", "L": "4", "H": "2", "QR": "12", "DN": "8", "DR": "4", "DV": "6", "R": "16",
        "FFN": "48", "E": "4", "K": "2", "EFFN": "16"}


def config_value(text, name):
    m = re.search(rf"^  {name} = ([^#\n]*)", text, flags=re.M)
    if not m:
        fail(f"no config entry {name}")
    return float(m.group(1))


def check(mtc, mtrun, example, tmp):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
    text = open(example).read()
    kept = {k: config_value(text, k) for k in ("DENSE", "RSF", "theta", "YF", "YO", "YBF", "YBS", "YM")}
    for k, v in TINY.items():
        text, n = re.subn(rf"^(  {k} = )[^#\n]*", rf"\g<1>{v} ", text, count=1, flags=re.M)
        if n != 1:
            fail(f"{example}: no config entry {k} to shrink")
    text, n = re.subn(r"\ntrain \{.*?\n\}", f'\ntrain {{ batch = 1; seq = 16; data = '
                      f'"{os.path.abspath("examples/data/tinyshakespeare.txt")}" }}', text, flags=re.S)
    if n != 1:
        fail(f"{example}: no train block to replace")
    model, plan = os.path.join(tmp, "tiny.mt"), os.path.join(tmp, "t.bin")
    with open(model, "w") as f:
        f.write(text)
    T = 16
    p = run(mtc, model, "--json")
    if p.returncode != 0:
        fail(f"mtc --json ({example}, tiny) failed", p)
    rng = np.random.default_rng(5)
    W = {q["name"]: (rng.standard_normal(q["shape"]) * 0.2).astype(np.float32) for q in json.loads(p.stdout)["params"]}
    for n in W:
        if n.endswith("norm.weight"):
            W[n] = (1 + 0.1 * rng.standard_normal(W[n].shape)).astype(np.float32)
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
    t = {k: int(v) for k, v in TINY.items()}
    yarn = {"rope_type": "yarn", "rope_theta": kept["theta"], "factor": kept["YF"],
            "original_max_position_embeddings": int(kept["YO"]), "beta_fast": kept["YBF"], "beta_slow": kept["YBS"],
            "mscale": kept["YM"], "mscale_all_dim": kept["YM"]}
    hf_loss, hf_logits = hf_deepseek_loss(
        DeepseekV3Config, DeepseekV3ForCausalLM, t, W, T, yarn, q_lora_rank=t["QR"], n_shared_experts=1,
        first_k_dense_replace=int(kept["DENSE"]), norm_topk_prob=True, routed_scaling_factor=kept["RSF"], n_group=1,
        topk_group=1)
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


def main():
    mtc, mtrun = sys.argv[1:3]
    for example in ("examples/deepseek-v3.mt", "examples/kimi-k2.mt"):
        with tempfile.TemporaryDirectory() as tmp:
            check(mtc, mtrun, example, tmp)


if __name__ == "__main__":
    main()
