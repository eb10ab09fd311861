#!/usr/bin/env python3
"""attention(q, k, v, chunk = N): Llama 4's chunked attention (a query sees
the keys of its own chunk of N positions, causal within it), against
transformers' own Llama 4 text attention (modeling_llama4.eager_attention_forward
under masking_utils.chunked_causal_mask_function, the mask Llama4TextModel
builds for its chunked layers; float64).

A tiny two-layer model (rmsnorm, grouped-query attention, no rope, untied
head; vocabulary 256), the first layer chunked, the second global (Llama 4
interleaves them), from the same random weights on tokens of a token file,
batch 1, chunk 16 at a sequence of 40 (two chunk boundaries, the last chunk
part-full): mt's f32 plan's first loss equals torch's to 1e-6 relative, and
its gradients of every attention weight (read off one AdamW step with betas
(0, 0), eps 1e6, lr 1e12, no decay or clipping: the update lr g / (|g| +
eps), inverted) equal torch's autograd to 2e-5 of the largest. So that the
check can fail, the same torch model with plain causal attention misses
mt's loss by more than 1e-3. The bf16 plan's loss is within 1e-2 of it.

Then Llama 4's two attentions as transformers' Llama4TextAttention modules
run them (float64): a rope layer (interleaved rope, the query/key norm
without a gain, chunked) and a NoPE layer (no rope, the attention
temperature tuning log(floor((t + 1) / floor_scale) + 1) attn_scale + 1 on
the queries, global), floor_scale 4 so that the temperature changes every
4 positions: loss to 1e-6, gradients to 2e-5 of the largest, bf16 loss to
1e-2; without the temperature the loss misses by more than 1e-4.

And the cost model (mtc --explain --json, attention_s, bf16 on the h200
profile, heads of 128, seq 8192): a chunk of 1024 prices the attention at
its pairs, 1/8 of the causal ones (within 3%: the kernels' launches), and
gpt-oss's sinks at the plain attention's time (to 1e-9).

usage: check_attention_chunked.py MTC MTRUN   (from the project root)
"""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_weights import step_grads, token_file  # noqa: E402
from checks import check, finish, run  # noqa: E402

V, C, L, NH, NKV, HS, T, CHUNK, EPS = 256, 32, 2, 4, 2, 8, 40, 16, 1e-5
MODEL = """model chunked_tiny
config { V = 256; C = 32; L = 2; NH = 4; NKV = 2; HS = 8; CH = 16; eps = 1e-5 }
param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]
block chunked "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS]
  a = rmsnorm(x, attn_norm, eps = eps)
  o = attention(a @ transpose(wq), a @ transpose(wk), a @ transpose(wv), heads = NH, kv_heads = NKV, chunk = CH)
  return x + o @ transpose(wo)
}
block global = chunked with CH = T
block layers[L] = [chunked, global] * (L / 2)
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}
train { optimizer = adamw(betas = (0, 0), weight_decay = 0, eps = 1e6); schedule = constant; clip = 0 }
"""

def weights(rng):
    W = {"model.embed_tokens.weight": rng.standard_normal((V, C)), "model.norm.weight": 1 + 0.2 * rng.standard_normal(C),
         "lm_head.weight": 0.3 * rng.standard_normal((V, C))}
    for i in range(L):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = 1 + 0.2 * rng.standard_normal(C)
        W[p + "self_attn.q_proj.weight"] = 0.5 * rng.standard_normal((NH * HS, C))
        W[p + "self_attn.k_proj.weight"] = 0.5 * rng.standard_normal((NKV * HS, C))
        W[p + "self_attn.v_proj.weight"] = 0.3 * rng.standard_normal((NKV * HS, C))
        W[p + "self_attn.o_proj.weight"] = 0.3 * rng.standard_normal((C, NH * HS))
    return {k: v.astype(np.float32) for k, v in W.items()}


def torch_loss(W, x, y, chunked=True):
    """transformers' Llama 4 eager attention in the same model, float64, layer 0 under the chunked mask."""
    import torch
    from transformers.masking_utils import causal_mask_function, chunked_causal_mask_function
    from transformers.models.llama4.modeling_llama4 import eager_attention_forward
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in W.items()}
    rms = lambda h, g: h * torch.rsqrt((h * h).mean(-1, keepdim=True) + EPS) * g
    zero, none = torch.tensor(0.0, dtype=torch.float64), torch.tensor(-1e300, dtype=torch.float64)

    def mask(fn):
        i = torch.tensor(0)
        see = torch.tensor([[bool(fn(i, i, i + r, i + c)) for c in range(T)] for r in range(T)])
        return torch.where(see, zero, none)[None, None]

    masks = [mask(chunked_causal_mask_function(CHUNK, torch.zeros(1, dtype=torch.long)) if chunked
                  else causal_mask_function), mask(causal_mask_function)]
    h = P["model.embed_tokens.weight"][torch.tensor(x)][None]
    for l in range(L):
        p = f"model.layers.{l}."
        a = rms(h, P[p + "input_layernorm.weight"])
        q = (a @ P[p + "self_attn.q_proj.weight"].T).view(1, T, NH, HS).transpose(1, 2)
        k = (a @ P[p + "self_attn.k_proj.weight"].T).view(1, T, NKV, HS).transpose(1, 2)
        v = (a @ P[p + "self_attn.v_proj.weight"].T).view(1, T, NKV, HS).transpose(1, 2)
        module = torch.nn.Module()
        module.num_key_value_groups, module.training = NH // NKV, False
        o, _ = eager_attention_forward(module, q, k, v, masks[l % 2], HS ** -0.5)
        h = h + o.reshape(1, T, NH * HS) @ P[p + "self_attn.o_proj.weight"].T
    logits = rms(h, P["model.norm.weight"]) @ P["lm_head.weight"].T
    loss = torch.nn.functional.cross_entropy(logits[0], torch.tensor(y))
    loss.backward()
    return float(loss.detach()), {k: t.grad.numpy() for k, t in P.items() if t.grad is not None}


LLAMA4 = """model llama4_attention_tiny
config { V = 256; C = 32; NH = 4; NKV = 2; HS = 8; CH = 16; FS = 4.0; AS = 0.1; eps = 1e-5 }
param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]
block rope_layer "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS]
  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = 500000, interleaved = true)
  k = rope(a @ transpose(wk), heads = NKV, theta = 500000, interleaved = true)
  q = reshape(rmsnorm(reshape(q, [B, T, NH, HS]), full([HS], 1.0), eps = eps), [B, T, NH * HS])
  k = reshape(rmsnorm(reshape(k, [B, T, NKV, HS]), full([HS], 1.0), eps = eps), [B, T, NKV * HS])
  o = attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV, chunk = CH)
  return x + o @ transpose(wo)
}
block nope_layer "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS]
  a = rmsnorm(x, attn_norm, eps = eps)
  temp = reshape(log(floor((arange(T, dtype = f32) + 1) / FS) + 1) * AS + 1, [T, 1])
  o = attention((a @ transpose(wq)) * temp, a @ transpose(wk), a @ transpose(wv), heads = NH, kv_heads = NKV)
  return x + o @ transpose(wo)
}
block layers[2] = [rope_layer, nope_layer]
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}
train { optimizer = adamw(betas = (0, 0), weight_decay = 0, eps = 1e6); schedule = constant; clip = 0 }
"""


def torch_llama4(W, x, y, temperature=True):
    """Llama4TextAttention (transformers, eager, float64): layer 0 with rope, its query/key norm and the
    chunked mask, layer 1 NoPE with the temperature tuning and the causal mask."""
    import torch
    from transformers import Llama4TextConfig
    from transformers.masking_utils import causal_mask_function, chunked_causal_mask_function
    from transformers.models.llama4 import modeling_llama4 as m
    cfg = Llama4TextConfig(hidden_size=C, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HS,
                           num_hidden_layers=L, vocab_size=V, attention_chunk_size=CHUNK, use_qk_norm=True,
                           attn_temperature_tuning=temperature, floor_scale=4, attn_scale=0.1,
                           no_rope_layers=[1, 0], rms_norm_eps=EPS)
    cfg._attn_implementation = "eager"
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in W.items()}
    rms = lambda h, g: h * torch.rsqrt((h * h).mean(-1, keepdim=True) + EPS) * g
    zero, none = torch.tensor(0.0, dtype=torch.float64), torch.tensor(-1e300, dtype=torch.float64)

    def mask(fn):
        i = torch.tensor(0)
        see = torch.tensor([[bool(fn(i, i, i + r, i + c)) for c in range(T)] for r in range(T)])
        return torch.where(see, zero, none)[None, None]

    masks = [mask(chunked_causal_mask_function(CHUNK, torch.zeros(1, dtype=torch.long))), mask(causal_mask_function)]
    h = P["model.embed_tokens.weight"][torch.tensor(x)][None]
    freqs = m.Llama4TextRotaryEmbedding(cfg)(h, torch.arange(T)[None])
    for l in range(L):
        p = f"model.layers.{l}."
        att = m.Llama4TextAttention(cfg, l).double()
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):  # the module's own weights, P's tensors
            del att._modules[name]._parameters["weight"]
            att._modules[name].weight = P[p + f"self_attn.{name}.weight"]
        o, _ = att(rms(h, P[p + "input_layernorm.weight"]), freqs, masks[l])
        h = h + o
    logits = rms(h, P["model.norm.weight"]) @ P["lm_head.weight"].T
    loss = torch.nn.functional.cross_entropy(logits[0], torch.tensor(y))
    loss.backward()
    return float(loss.detach()), {k: t.grad.numpy() for k, t in P.items() if t.grad is not None}


def llama4_check(mtc, mtrun, W, x, y, data, tmp):
    what = f"Llama 4's rope (chunk {CHUNK}, q/k norm) and NoPE (temperature) attentions, T = {T}"
    want, gwant = torch_llama4(W, x, y)
    plain, _ = torch_llama4(W, x, y, temperature=False)
    loss, g = step_grads(mtc, mtrun, LLAMA4, W, data, tmp, T, "f32")
    if loss is not None:
        e = abs(loss - want) / abs(want)
        check(e <= 1e-6, f"{what}: mt's loss {loss!r}, transformers' {want!r} ({e:.2e})")
        check(abs(plain - loss) / abs(want) > 1e-4, f"{what}: without the temperature the loss {plain} is mt's {loss}")
        worst = max(float(np.max(np.abs(g[k] - gwant[k])) / np.max(np.abs(gwant[k]))) for k in gwant)
        check(worst <= 2e-5, f"{what}: gradients within {worst:.2e} of the largest from torch's")
        print(f"ok   {what}: loss {loss:.7f}, transformers' {want:.7f} ({e:.1e}); without the temperature "
              f"{plain:.5f}; gradients within {worst:.1e} of the largest")
    bl, _ = step_grads(mtc, mtrun, LLAMA4, W, data, tmp, T, "bf16")
    if bl is not None and check(abs(bl - want) / want <= 1e-2, f"{what}: bf16 loss {bl}, transformers' {want}"):
        print(f"ok   {what}, bf16: loss {bl:.5f} ({abs(bl - want) / want:.1e} from transformers')")


COST_MODEL = """model cost_tiny
config { V = 1024; C = 1024; NH = 8; HS = 128; L = 2; eps = 1e-5 }
param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]
block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NH * HS, C]
  param wv "self_attn.v_proj.weight" [NH * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS]
SINKS  a = rmsnorm(x, attn_norm, eps = eps)
  o = attention(a @ transpose(wq), a @ transpose(wk), a @ transpose(wv)OPTS)
  return x + o @ transpose(wo)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}
"""


def cost_check(mtc, tmp):
    times = {}
    for name, opts in (("plain", ", heads = NH"), ("chunk", ", heads = NH, chunk = 1024"), ("sinks", ", sinks, heads = NH")):
        model = os.path.join(tmp, f"cost-{name}.mt")
        sinks = '  param sinks "self_attn.sinks" [NH]\n' if name == "sinks" else ""
        with open(model, "w") as f:
            f.write(COST_MODEL.replace("SINKS", sinks).replace("OPTS", opts))
        p = run(mtc, model, "--target", "schedules/h200.target", "--batch", 1, "--seq", 8192, "--dtype", "bf16",
                "--explain", "--json")
        if not check(p.returncode == 0, f"mtc --explain ({name})", p):
            return
        times[name] = json.loads(p.stdout)["policies"][0]["attention_s"]
    r = times["chunk"] / times["plain"]
    check(abs(r - 1 / 8) <= 0.03 / 8, f"attention with a chunk of 1024 of 8192: {r:.4f} of the plain time, want 1/8")
    s = times["sinks"] / times["plain"]
    check(abs(s - 1) <= 1e-9, f"attention with sinks: {s:.6f} of the plain time, want 1")
    print(f"ok   cost model: attention {times['plain']:.4g} s a step, chunk 1024 {times['chunk']:.4g} s ({r:.4f}), "
          f"sinks {times['sinks']:.4g} s ({s:.6f})")


def main():
    mtc, mtrun = sys.argv[1:3]
    rng = np.random.default_rng(5)
    W = weights(rng)
    tokens = rng.integers(0, V, 4096)
    x, y = tokens[:T], tokens[1:T + 1]  # the first batch of batch 1
    what = f"T = {T}, chunk {CHUNK}"
    with tempfile.TemporaryDirectory() as tmp:
        data = token_file(os.path.join(tmp, "tokens.bin"), tokens)
        want, gwant = torch_loss(W, x, y)
        plain, _ = torch_loss(W, x, y, chunked=False)
        loss, g = step_grads(mtc, mtrun, MODEL, W, data, tmp, T, "f32")
        if loss is not None:
            e = abs(loss - want) / abs(want)
            check(e <= 1e-6, f"{what}: mt's loss {loss!r}, transformers' {want!r} ({e:.2e})")
            check(abs(plain - loss) / abs(want) > 1e-3, f"{what}: without the chunks the loss {plain} is mt's {loss}")
            worst = 0.0
            for k in gwant:
                if "self_attn" not in k:
                    continue
                r = float(np.max(np.abs(g[k] - gwant[k])) / np.max(np.abs(gwant[k])))
                worst = max(worst, r)
                check(r <= 2e-5, f"{what}: the gradient of {k} is {r:.2e} of its largest from torch's")
            print(f"ok   {what}: loss {loss:.7f}, transformers' {want:.7f} ({e:.1e}); plain causal {plain:.5f}; "
                  f"attention gradients within {worst:.1e} of the largest")
        bl, _ = step_grads(mtc, mtrun, MODEL, W, data, tmp, T, "bf16")
        if bl is not None and check(abs(bl - want) / want <= 1e-2, f"{what}: bf16 loss {bl}, transformers' {want}"):
            print(f"ok   {what}, bf16: loss {bl:.5f} ({abs(bl - want) / want:.1e} from transformers')")
        llama4_check(mtc, mtrun, W, x, y, data, tmp)
        cost_check(mtc, tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
