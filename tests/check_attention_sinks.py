#!/usr/bin/env python3
"""attention(q, k, v, sinks, ...): gpt-oss's learned sink logit per head,
against transformers' own gpt-oss eager attention
(modeling_gpt_oss.eager_attention_forward, float64).

A tiny two-layer model (rmsnorm, grouped-query attention with sinks, no
rope, untied head; vocabulary 256) from the same random weights (sinks
around 1, as large as the scores) on tokens of a token file, batch 1, at
sequences of any length (13, 70 and 200: no power of two, and 200 more than
a 128-row tile and not a multiple of it), full causal and with sliding
windows (4 at 13, 48 at 200): mt's f32 plan's first loss equals torch's to 1e-6 relative, and
its gradients of the sinks and of every attention weight (read off one
AdamW step with betas (0, 0), eps 1e6, lr 1e12, no decay or clipping: the
update lr g / (|g| + eps), inverted) equal torch's autograd to 2e-5 of the
largest (the f32 floor of that reading). So that the check can fail, the same torch model without the sinks
misses mt's loss by more than 1e-4. The sinks live inside the attention
kernels (the running softmax starts from the sink; y is rounded once), so
the bf16 plan's error is plain bf16 attention's: its loss's distance from
torch's, and its sink and attention gradients' (relative 2-norm over them all), are at most twice
those of the same model without sinks (mt bf16 against torch) plus 2e-4,
and the loss within 1e-2. The sinks add no attention work: the graph holds
one attention, its lse and one attention backward.

usage: check_attention_sinks.py MTC MTRUN   (from the project root)
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_weights import step_grads, token_file  # noqa: E402
from checks import check, finish, run  # noqa: E402

V, C, L, NH, NKV, HS, EPS = 256, 32, 2, 4, 2, 8, 1e-5
CASES = ((13, 0), (13, 4), (70, 0), (200, 0), (200, 48))  # (sequence, window: 0 full causal)
MODEL = """model sinks_tiny
config { V = 256; C = 32; L = 2; NH = 4; NKV = 2; HS = 8; eps = 1e-5 }
param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]
block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS]
  param sinks "self_attn.sinks" [NH]
  a = rmsnorm(x, attn_norm, eps = eps)
  o = attention(a @ transpose(wq), a @ transpose(wk), a @ transpose(wv), sinks, heads = NH, kv_heads = NKV WINDOW)
  return x + o @ transpose(wo)
}
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
        W[p + "self_attn.sinks"] = 1 + rng.standard_normal(NH)
    return {k: v.astype(np.float32) for k, v in W.items()}


def plain_model(text):
    """The same model without sinks (plain attention)."""
    return text.replace('  param sinks "self_attn.sinks" [NH]\n', "").replace("a @ transpose(wv), sinks,", "a @ transpose(wv),")


def torch_loss(W, x, y, window, sinks=True):
    """transformers' gpt-oss eager attention in the same model, float64: the loss and the gradients."""
    T = len(x)
    import torch
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
    P = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in W.items()}
    rms = lambda h, g: h * torch.rsqrt((h * h).mean(-1, keepdim=True) + EPS) * g
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    see = (j <= i) & ((i - j < window) if window else True)
    mask = torch.where(see, torch.tensor(0.0, dtype=torch.float64), torch.tensor(-1e300, dtype=torch.float64))[None, None]
    h = P["model.embed_tokens.weight"][torch.tensor(x)][None]
    for l in range(L):
        p = f"model.layers.{l}."
        a = rms(h, P[p + "input_layernorm.weight"])
        q = (a @ P[p + "self_attn.q_proj.weight"].T).view(1, T, NH, HS).transpose(1, 2)
        k = (a @ P[p + "self_attn.k_proj.weight"].T).view(1, T, NKV, HS).transpose(1, 2)
        v = (a @ P[p + "self_attn.v_proj.weight"].T).view(1, T, NKV, HS).transpose(1, 2)
        module = torch.nn.Module()
        module.sinks = P[p + "self_attn.sinks"] if sinks else torch.full((NH,), -1e30, dtype=torch.float64)
        module.num_key_value_groups, module.training = NH // NKV, False
        o, _ = eager_attention_forward(module, q, k, v, mask, HS ** -0.5)
        h = h + o.reshape(1, T, NH * HS) @ P[p + "self_attn.o_proj.weight"].T
    logits = rms(h, P["model.norm.weight"]) @ P["lm_head.weight"].T
    loss = torch.nn.functional.cross_entropy(logits[0], torch.tensor(y))
    loss.backward()
    return float(loss.detach()), {k: t.grad.numpy() for k, t in P.items() if t.grad is not None}


def mt_step(mtc, mtrun, W, data, tmp, T, window, dtype, sinks=True):
    """mt's first loss and gradients for the model at window (0: none), with its sinks or without them."""
    text = MODEL.replace(" WINDOW", f", window = {window}" if window else "")
    W = {k: w for k, w in W.items() if sinks or "sinks" not in k}
    return step_grads(mtc, mtrun, text if sinks else plain_model(text), W, data, tmp, T, dtype)


def one_attention(mtc, tmp):
    """The sinks cost no attention work: the graph holds one attention, its lse
    and one attention backward (the block's, once for every layer), as
    without them."""
    model = os.path.join(tmp, "g.mt")
    with open(model, "w") as f:
        f.write(MODEL.replace(" WINDOW", ""))
    p = run(mtc, model, "--batch", 1, "--seq", 13, "--dump-graph")
    if not check(p.returncode == 0, "mtc --dump-graph", p):
        return
    ops = [l.split("=", 1)[1].split()[0] for l in p.stdout.splitlines() if " = attention" in l]
    counts = {o: ops.count(o) for o in ("attention_lse", "attention", "attention_bwd")}
    if check(counts == {o: 1 for o in counts}, f"attention nodes with sinks: {counts}, want one of each"):
        print(f"ok   one attention, its lse and one attention backward: {counts}")


def grad_error(g, gwant):
    """The sink and attention gradients' distance from torch's, |g - g_torch| / |g_torch| (2-norms) over them all."""
    keys = [k for k in gwant if "self_attn" in k]
    return float(np.sqrt(sum(np.sum((g[k] - gwant[k]) ** 2) for k in keys) / sum(np.sum(gwant[k] ** 2) for k in keys)))


def check_case(mtc, mtrun, W, x, y, data, tmp, T, window):
    """Sequence T (the first batch of batch 1), window (0: full causal): f32 exact, bf16 at plain bf16's error."""
    what = f"T = {T}, " + (f"window {window}" if window else "full causal")
    want, gwant = torch_loss(W, x, y, window)
    plain, gplain = torch_loss(W, x, y, window, sinks=False)
    loss, g = mt_step(mtc, mtrun, W, data, tmp, T, window, "f32")
    if loss is None:
        return
    e = abs(loss - want) / abs(want)
    ok = check(e <= 1e-6, f"{what}: mt's loss {loss!r}, transformers' {want!r} ({e:.2e})")
    ok &= check(abs(plain - loss) / abs(want) > 1e-4, f"{what}: without the sinks the loss {plain} is mt's {loss}")
    for k in gwant:
        if "self_attn" in k:
            r = float(np.max(np.abs(g[k] - gwant[k])) / np.max(np.abs(gwant[k])))
            ok &= check(r <= 2e-5, f"{what}: the gradient of {k} is {r:.2e} of its largest from torch's")
    if ok:
        print(f"ok   {what}: loss {loss:.7f}, transformers' {want:.7f} ({e:.1e}); without sinks {plain:.5f}; "
              f"sink and attention gradients {grad_error(g, gwant):.1e} from torch's")
    bl, bg = mt_step(mtc, mtrun, W, data, tmp, T, window, "bf16")
    pl, pg = mt_step(mtc, mtrun, W, data, tmp, T, window, "bf16", sinks=False)
    if bl is None or pl is None:
        return
    el, ep = abs(bl - want) / want, abs(pl - plain) / plain
    gl, gp = grad_error(bg, gwant), grad_error(pg, gplain)
    ok = check(el <= 1e-2, f"{what}: bf16 loss {bl}, transformers' {want}")
    ok &= check(el <= 2 * ep + 2e-4, f"{what}: bf16 loss {el:.1e} from torch's, plain bf16 attention's {ep:.1e}")
    ok &= check(gl <= 2 * gp + 2e-4, f"{what}: bf16 gradients {gl:.1e} from torch's, plain bf16 attention's {gp:.1e}")
    if ok:
        print(f"ok   {what}, bf16: loss {el:.1e} and gradients {gl:.1e} from transformers'; "
              f"plain bf16 attention {ep:.1e} and {gp:.1e}")


def main():
    mtc, mtrun = sys.argv[1:3]
    rng = np.random.default_rng(3)
    W = weights(rng)
    tokens = rng.integers(0, V, 4096)
    with tempfile.TemporaryDirectory() as tmp:
        data = token_file(os.path.join(tmp, "tokens.bin"), tokens)
        one_attention(mtc, tmp)
        for T, window in CASES:
            check_case(mtc, mtrun, W, tokens[:T], tokens[1:T + 1], data, tmp, T, window)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
