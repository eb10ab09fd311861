#!/usr/bin/env python3
"""An independent numpy forward of the tiny Mixtral (examples/moe/mixtral-tiny.mt)
against mt's reference executor, from the same random weights and tokens.

numpy follows Hugging Face's MixtralSparseMoeBlock: the softmax over all
experts' router logits, the top 2 taken, their weights renormalised to sum
1, each expert run on the tokens that chose it; and the load-balancing
loss of the Switch Transformer, E * sum_e f_e P_e, per layer, times the
coefficient. mt's first loss (ref_forward, float64) must equal numpy's to
1e-5 relative, and the sum of the layers' auxiliary losses likewise. Two
other routings (softmax before the selection without renormalising, and
the top 1) must move numpy's loss, so the check sees the routing.

usage: check_moe.py MTC REF_FORWARD
"""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, run  # noqa: E402
from check_weights import attention, cross_entropy, val_tokens, write_safetensors  # noqa: E402

MODEL = "examples/moe/mixtral-tiny.mt"
L, NH, NKV, E, K, THETA, AUX, T = 2, 4, 2, 4, 2, 10000.0, 0.02, 48


def rms(x, g):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5) * g


def rope(x, heads):
    T, D = x.shape[0], x.shape[1] // heads
    ang = np.arange(T)[:, None] * THETA ** (-2 * np.arange(D // 2) / D)[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    y = x.copy()
    for h in range(heads):
        a, b = x[:, h * D: h * D + D // 2], x[:, h * D + D // 2:(h + 1) * D]
        y[:, h * D: h * D + D // 2] = a * cos - b * sin
        y[:, h * D + D // 2:(h + 1) * D] = b * cos + a * sin
    return y


def mixtral_loss(W, tokens, targets, routing="mixtral", k=K):
    """The loss and the summed auxiliary loss in float64. routing "mixtral":
    softmax over all, top k, renormalised; "before": the top k's
    probabilities as they are."""
    W = {n: w.astype(np.float64) for n, w in W.items()}
    x, aux = W["model.embed_tokens.weight"][tokens], 0.0
    for i in range(L):
        p = f"model.layers.{i}."
        a = rms(x, W[p + "input_layernorm.weight"])
        q = rope(a @ W[p + "self_attn.q_proj.weight"].T, NH)
        kk = rope(a @ W[p + "self_attn.k_proj.weight"].T, NKV)
        v = a @ W[p + "self_attn.v_proj.weight"].T
        x = x + attention(q, kk, v, NH, NKV) @ W[p + "self_attn.o_proj.weight"].T
        m = rms(x, W[p + "post_attention_layernorm.weight"])
        logits = m @ W[p + "block_sparse_moe.gate.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]  # (T, k)
        weights = np.take_along_axis(probs, top, -1)
        if routing == "mixtral":
            weights = weights / weights.sum(-1, keepdims=True)
        out = np.zeros_like(m)
        for e in range(E):
            rows, slot = np.nonzero(top == e)
            if not len(rows):
                continue
            pe = p + f"block_sparse_moe.experts.{e}."
            xe = m[rows]
            h1, h3 = xe @ W[pe + "w1.weight"].T, xe @ W[pe + "w3.weight"].T
            out[rows] += weights[rows, slot][:, None] * ((h1 / (1 + np.exp(-h1)) * h3) @ W[pe + "w2.weight"].T)
        x = x + out
        chosen = np.zeros_like(probs)
        np.put_along_axis(chosen, top, 1.0, -1)
        aux += AUX * E * float(np.sum(chosen.mean(0) * probs.mean(0)))
    return cross_entropy(rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T, targets), aux


def main():
    mtc, ref = sys.argv[1:3]
    d = json.loads(run(mtc, MODEL, "--json").stdout)
    rng = np.random.default_rng(14)
    W = {t["name"]: (rng.standard_normal(t["shape"]) * (0.3 if len(t["shape"]) == 1 else 0.1) +
                     (1.0 if len(t["shape"]) == 1 else 0)).astype(np.float32) for t in d["params"]}
    # routers 10x larger: sharper choices, so a wrong routing shows clearly
    W = {n: (w * 10 if n.endswith("gate.weight") else w) for n, w in W.items()}
    tokens, targets = val_tokens(T)
    with tempfile.TemporaryDirectory() as tmp:
        wf, inf = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "inputs.i32")
        write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
        np.concatenate([tokens, targets]).astype("<i4").tofile(inf)
        p = run(ref, MODEL, wf, inf, "--batch", "1", "--seq", T)
    if not check(p.returncode == 0, "ref_forward runs the tiny Mixtral", p):
        sys.exit(finish())
    got = dict(line.split() for line in p.stdout.splitlines())
    loss, aux = float(got["loss"]), float(got["aux"])
    want, want_aux = mixtral_loss(W, tokens, targets)
    check(abs(loss - want) <= 1e-5 * abs(want), f"mixtral-tiny loss {loss} vs numpy {want}")
    check(abs(aux - want_aux) <= 1e-5 * abs(want_aux), f"mixtral-tiny auxiliary loss {aux} vs numpy {want_aux}")
    for routing, k in (("before", K), ("mixtral", 1)):
        other, _ = mixtral_loss(W, tokens, targets, routing, k)
        check(abs(other - want) > 1e-4 * abs(want), f"routing {routing}, top {k} moves numpy's loss ({other} vs {want})")
    print(f"mixtral-tiny: loss {loss:.9f}, numpy {want:.9f} (relative {abs(loss - want) / abs(want):.1e}); "
          f"auxiliary {aux:.9f}, numpy {want_aux:.9f} (relative {abs(aux - want_aux) / abs(want_aux):.1e})")
    sys.exit(finish())


if __name__ == "__main__":
    main()
