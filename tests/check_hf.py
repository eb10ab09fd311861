#!/usr/bin/env python3
"""mt's logits against transformers' own modelling code, one tiny model per
rope frequency rule.

For each case a tiny model is built with transformers from a config (eager
attention, f32, random weights), its weights saved as safetensors and its
config.json written; tools/hf_to_mt.py writes the mt model from that
config.json; tests/ref_forward runs mt's forward (the reference executor,
the plain kernels) on the same weights and tokens and writes its logits.
They must equal transformers' to 1e-5 relative (max |mt - hf| / max |hf|).
So that the check can fail, the same mt model with the case's rule taken
out (rope's scaling, or the window) must miss transformers' logits by more
than 1e-3. Then the plan: mtc compiles the model (f32: the train section
the tool writes says bf16, whose logits are some 5e-3 off), mtrun loads
the same weights (--init), and its first validation batch on the bundled
bytes, from the generated kernels (the cpu backend's JIT), must give
transformers' logits (--logits) and loss on the same tokens to 1e-5
relative.

  llama3     Llama 3.2 style: tied head, rope_type llama3
  gemma3     Gemma 3 text: local layers (window, rope_local_base_freq) and a
             global one (rope_type linear), per-head q/k norms
  yarn       Qwen3 with rope_type yarn
  longrope   Phi-3 with rope_type longrope, at a sequence past
             original_max_position_embeddings (the long factors) and at one
             within it (the short factors)
  phi3       Phi-3 without rope scaling, at transformers' own initialisation:
             the fused qkv_proj split into 4 query heads and 2 key/value
             heads, the fused gate_up_proj, sliding_window 4 at sequence 16
             (checked against the same model without the window)
  gpt2       GPT-2 as transformers' save_pretrained writes its config and names
             its tensors ("transformer.wte.weight", ...), scale_attn_weights =
             false (checked against the same config with it true)
  gptj       GPT-J: interleaved pairs (rotate_every_two) on the first
             rotary_dim features of each head; the model file written here
             (the tool does not map gptj), checked against the same file
             with interleaved = false

usage: check_hf.py REF_FORWARD MTC MTRUN   (from the project root)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file

from checks import check, finish, last_run

sys.path.insert(0, "tools")
import hf_to_mt  # noqa: E402

DATA = "examples/data/tinyshakespeare.txt"
TINY = {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "rms_norm_eps": 1e-6,
        "max_position_embeddings": 64, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": None}

# each case: model_type, config, sequences, the fields its rule is (taken out for
# "without the rule"), the initialisation ("test": wider weights; "own": transformers')
SCALING = ("rope_scaling", "original_max_position_embeddings")
CASES = {
    "llama3": ("llama", dict(TINY, tie_word_embeddings=True, rope_theta=10000.0,
                             rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
               [16], SCALING, "test"),
    "gemma3": ("gemma3_text", dict(TINY, num_hidden_layers=3, hidden_activation="gelu_pytorch_tanh",
                                   query_pre_attn_scalar=16, sliding_window=4, rope_theta=10000.0,
                                   rope_local_base_freq=100.0, rope_scaling={"rope_type": "linear", "factor": 4.0},
                                   layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                                   final_logit_softcapping=None, attn_logit_softcapping=None), [16], SCALING, "test"),
    "yarn": ("qwen3", dict(TINY, tie_word_embeddings=False, rope_theta=10000.0,
                           rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}),
             [16], SCALING, "test"),
    "longrope": ("phi3", dict(TINY, num_key_value_heads=2, tie_word_embeddings=False, rope_theta=10000.0,
                              original_max_position_embeddings=8,
                              rope_scaling={"type": "longrope",
                                            "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.8],
                                            "long_factor": [1.2, 1.9, 2.8, 4.0, 5.5, 7.3, 9.4, 12.0]}),
                 [16, 8], SCALING, "test"),
    "phi3": ("phi3", dict(TINY, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                          rope_theta=10000.0, sliding_window=4), [16], ("sliding_window",), "own"),
    "gpt2": ("gpt2", {"vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": None,
                      "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "attn_pdrop": 0.0,
                      "embd_pdrop": 0.0, "resid_pdrop": 0.0, "scale_attn_weights": False, "add_cross_attention": False,
                      "bos_token_id": 0, "eos_token_id": 1}, [16], ("scale_attn_weights",), "test"),
    "gptj": ("gptj", {"vocab_size": 256, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2, "rotary_dim": 8,
                      "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
                      "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1}, [16], (), "test"),
}

GPTJ = """model gptj_tiny
config { V = 256; C = 32; L = 2; NH = 2; HS = C / NH; ROT = 8; FFN = 4 * C; eps = 1e-5 }
param wte "transformer.wte.weight" [V, C]
param lnf_g "transformer.ln_f.weight" [C]
param lnf_b "transformer.ln_f.bias" [C]
param head_w "lm_head.weight" [V, C]
param head_b "lm_head.bias" [V]
block layers[L] "transformer.h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param ln_g "ln_1.weight" [C]
  param ln_b "ln_1.bias" [C]
  param wq "attn.q_proj.weight" [C, C]
  param wk "attn.k_proj.weight" [C, C]
  param wv "attn.v_proj.weight" [C, C]
  param wo "attn.out_proj.weight" [C, C]
  param w1 "mlp.fc_in.weight" [FFN, C]
  param b1 "mlp.fc_in.bias" [FFN]
  param w2 "mlp.fc_out.weight" [C, FFN]
  param b2 "mlp.fc_out.bias" [C]
  h = layernorm(x, ln_g, ln_b, eps = eps)
  q_rot, q_pass = split(reshape(h @ transpose(wq), [B, T, NH, HS]), [ROT, HS - ROT])
  k_rot, k_pass = split(reshape(h @ transpose(wk), [B, T, NH, HS]), [ROT, HS - ROT])
  q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, interleaved = true), [B, T, NH, ROT])
  k_rot = reshape(rope(reshape(k_rot, [B, T, NH * ROT]), heads = NH, interleaved = true), [B, T, NH, ROT])
  q = reshape(concat(q_rot, q_pass), [B, T, C])
  k = reshape(concat(k_rot, k_pass), [B, T, C])
  a = attention(q, k, h @ transpose(wv), heads = NH) @ transpose(wo)
  m = gelu(h @ transpose(w1) + b1) @ transpose(w2) + b2
  return x + a + m
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(wte, tokens))
  return cross_entropy(layernorm(x, lnf_g, lnf_b, eps = eps) @ transpose(head_w) + head_b, targets)
}
train { batch = 1; seq = 16 }
"""


def model_texts(case, raw, without):
    """The mt model of a case, and the same without its rule (the fields without)."""
    if case == "gptj":
        return GPTJ, GPTJ.replace("interleaved = true", "interleaved = false")
    plain = {k: v for k, v in raw.items() if k not in without}
    return hf_to_mt.convert(raw, f"tiny_{case}"), hf_to_mt.convert(plain, f"tiny_{case}")


def hf_model(model_type, fields, init="test"):
    """transformers' model of the config, f32, eager, with its own random
    weights (init "own") or wider ones, norm gains around their identity."""
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model(model_type, **fields)
    cfg._attn_implementation = "eager"
    torch.manual_seed(7)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    if init == "own":
        return model.eval()
    gemma = model_type.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norm gains: around 1 (Gemma's (1 + w): around 0)
                p.copy_((0.0 if gemma else 1.0) + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3)
    return model.eval()


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def mt_logits(ref_forward, model_path, weights, tokens, targets, work):
    inputs = os.path.join(work, "inputs.i32")
    np.concatenate([tokens, targets]).astype("<i4").tofile(inputs)
    out = os.path.join(work, "logits.f64")
    p = subprocess.run([ref_forward, model_path, weights, inputs, "--batch", "1", "--seq", str(len(tokens)),
                        "--logits", out], capture_output=True, text=True, timeout=120)
    if not check(p.returncode == 0, f"ref_forward {model_path}: exit {p.returncode}", p):
        return None
    return np.fromfile(out, "<f8")


def val_tokens(T):
    """mtrun's first validation batch of T positions (batch 1): the bytes
    after the first 90% of the file (tests/check_weights.py's rule)."""
    raw = open(DATA, "rb").read()
    ntrain = len(raw) - int(len(raw) * 0.1 + 0.5)
    x = np.frombuffer(raw[ntrain: ntrain + T + 1], np.uint8).astype(np.int64)
    return x[:-1], x[1:]


def plan_val(mtc, mtrun, model_path, weights, T, work):
    """mtrun's first validation loss and logits (T, V) of the model's f32 plan, from weights."""
    pl, log, lg = os.path.join(work, "plan.bin"), os.path.join(work, "val.jsonl"), os.path.join(work, "lg")
    p = subprocess.run([mtc, model_path, "-o", pl, "--batch", "1", "--seq", str(T), "--dtype", "f32"],
                       capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, f"mtc {model_path}", p):
        return None
    p = subprocess.run([mtrun, pl, "--steps", "0", "--val-batches", "1", "--data", DATA, "--init", weights,
                        "--log", log, "--logits", lg], capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, f"mtrun {pl}", p):
        return None
    return [r["val_loss"] for r in last_run(log) if "val_loss" in r][0], np.load(lg + ".logits.npy")[0]


def main():
    ref_forward, mtc, mtrun = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        for case, (model_type, fields, seqs, without, init) in CASES.items():
            work = os.path.join(tmp, case)
            os.makedirs(work)
            model = hf_model(model_type, fields, init)
            weights = os.path.join(work, "model.safetensors")
            state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
            if model.config.tie_word_embeddings:
                state.pop("lm_head.weight", None)
            save_file(state, weights)
            raw = dict(fields, model_type=model_type)
            if case == "gpt2":  # the config.json save_pretrained writes (add_cross_attention, summary_type, ...)
                model.config.save_pretrained(work)
                with open(os.path.join(work, "config.json")) as f:
                    raw = json.load(f)
            paths = {}
            for label, text in zip(("scaled", "unscaled"), model_texts(case, raw, without)):
                paths[label] = os.path.join(work, f"{label}.mt")
                with open(paths[label], "w") as f:
                    f.write(text)
            rng = np.random.default_rng(11)
            for T in seqs:
                tokens = rng.integers(0, fields["vocab_size"], T)
                targets = rng.integers(0, fields["vocab_size"], T)
                with torch.no_grad():
                    hf = model(torch.tensor(tokens[None], dtype=torch.long)).logits.double().numpy().reshape(-1)
                mine = mt_logits(ref_forward, paths["scaled"], weights, tokens, targets, work)
                plain = mt_logits(ref_forward, paths["unscaled"], weights, tokens, targets, work)
                if mine is None or plain is None:
                    continue
                if not check(mine.shape == hf.shape, f"{case} T={T}: {mine.shape[0]} logits, transformers {hf.shape[0]}"):
                    continue
                e, e0 = rel_err(mine, hf), rel_err(plain, hf)
                check(e <= 1e-5, f"{case} T={T}: mt's logits miss transformers' by {e:.2e} relative (limit 1e-5)")
                check(e0 > 1e-3, f"{case} T={T}: without the rule mt's logits miss by only {e0:.2e}; "
                                 "the case does not test the rule")
                print(f"{'ok  ' if e <= 1e-5 and e0 > 1e-3 else 'FAIL'} {case} T={T}: logits {e:.2e} relative from "
                      f"transformers' ({hf.shape[0]} values); without the rule (scaling, window or interleaving) "
                      f"{e0:.2e}")
            T = seqs[0]
            tokens, targets = val_tokens(T)
            with torch.no_grad():  # the loss over mt's targets (transformers' labels= would shift them again)
                lg = model(torch.tensor(tokens[None])).logits[0].double()
                want = float(torch.nn.functional.cross_entropy(lg, torch.tensor(targets)))
            got = plan_val(mtc, mtrun, paths["scaled"], weights, T, work)
            if got is not None:
                loss, logits = got
                e = abs(loss - want) / abs(want)
                el = rel_err(logits, lg.numpy()) if logits.shape == tuple(lg.shape) else float("inf")
                if check(e <= 1e-5 and el <= 1e-5, f"{case} T={T}: mtrun's loss {loss} against transformers' {want} "
                                                   f"({e:.2e}), its logits {logits.shape} {el:.2e} relative"):
                    print(f"ok   {case} T={T}: mtrun's plan (JIT kernels) loss {loss:.6f}, transformers' {want:.6f} "
                          f"({e:.1e} relative); logits {el:.2e} relative")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
