#!/usr/bin/env python3
"""Weights in and out, checked against independent code (numpy).

usage: check_weights.py MTC MTRUN MODE
  roundtrip  train llama-tiny 3 steps, --export, --init from it, --export
             again: identical bytes; a bf16 export holds the rounded weights
  fixture    a random llama-tiny written as safetensors here (bf16, fp16 and
             fp32 tensors, sharded with an index) loads with --init: the
             exported values equal the fixture's, and the first validation
             loss equals a numpy forward pass of the same weights
  llmc       a random GPT-2 small in llm.c's checkpoint layout (header, padded
             vocabulary, [out, in] matrices) loads into examples/gpt2.mt: the
             loss equals a numpy GPT-2 forward pass
  window     tests/jit/llama-window.mt (sliding window, scale, softcap):
             its first validation loss equals a numpy forward pass
  gemma2     examples/gemma2-tiny.mt (two block kinds in the order [local,
             global] * 2): random weights in by checkpoint name come back out
             under the same names, and the first validation loss equals a
             numpy forward pass that follows the order (window on even
             layers), which a swapped order or no window moves
  errors     missing, extra and misshapen tensors and wrong checkpoints are
             refused naming the tensor, both shapes and the file
  bf16       the same random llama-tiny compiled with --dtype bf16: its
             first validation loss equals a numpy forward pass that rounds
             to bf16 (by bits) where mt's storage rule does, weights and
             every node's value, to 1e-3 relative; and is further from the
             unrounded pass than that
Run from the project root.
"""
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

from checks import check, finish, last_run, run


DATA = "examples/data/tinyshakespeare.txt"


# ---------------------------------------------------------------- safetensors, by hand

def bf16_bits(a):
    """float32 -> bf16 bits, round to nearest even (finite values)."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype 'F32'|'BF16'|'F16', float array)."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dt, a in tensors:
        if dt == "F32":
            raw = np.asarray(a, "<f4").tobytes()
        elif dt == "F16":
            raw = np.asarray(a, "<f2").tobytes()
        else:
            raw = bf16_bits(a).astype("<u2").tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = blob[8 + n + b: 8 + n + e]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4")
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        out[name] = a.reshape(t["shape"])
    return out


# ---------------------------------------------------------------- numpy forward passes (float64)

def byte_tokens(tmp):
    """DATA's bytes as an llm.c token file, one token a byte (mtrun refuses text for a model whose vocabulary is not
    bytes); the split is the same, the last tenth of the tokens."""
    path = os.path.join(tmp, "bytes.bin")
    if not os.path.exists(path):
        raw = open(DATA, "rb").read()
        with open(path, "wb") as f:
            f.write(np.array([20240520, 1, len(raw)] + [0] * 253, "<i4").tobytes())
            f.write(np.frombuffer(raw, np.uint8).astype("<u2").tobytes())
    return path


def token_file(path, tokens):
    """tokens (integers below 65536) as an llm.c token file at path: 256 int32 of header, then uint16 tokens."""
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(np.asarray(tokens).astype("<u2").tobytes())
    return path


# One step of AdamW with betas (0, 0), eps READ_EPS, lr READ_LR, no decay or clipping, moves each weight by
# lr g / (|g| + eps): update_grads inverts it, so a one-step run reads mt's gradients off its export.
READ_LR, READ_EPS = 1e12, 1e6
READ_TRAIN = "train { optimizer = adamw(betas = (0, 0), weight_decay = 0, eps = 1e6); schedule = constant; clip = 0 }"


def update_grads(W, got, lr=READ_LR, eps=READ_EPS):
    """The gradients of the step that took the weights W to got (both {name: array}), float64."""
    grads = {}
    for k, w in W.items():
        u = w.astype(np.float64) - got[k].astype(np.float64)  # lr g / (|g| + eps)
        grads[k] = u * eps / (lr - np.abs(u))
    return grads


def step_grads(mtc, mtrun, text, W, data, tmp, T, dtype):
    """mt's first loss and gradients (update_grads) for the model text (its train section READ_TRAIN) from the
    f32 weights W, batch 1 of sequence T from the token file data, plan dtype dtype; (None, None) after a failed
    check."""
    model, wf, plan_path, out, log = (os.path.join(tmp, n) for n in ("s.mt", "s.safetensors", "s.bin",
                                                                     "out.safetensors", "s.jsonl"))
    with open(model, "w") as f:
        f.write(text)
    write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
    p = run(mtc, model, "-o", plan_path, "--batch", 1, "--seq", T, "--dtype", dtype)
    if not check(p.returncode == 0, f"mtc ({dtype})", p):
        return None, None
    if os.path.exists(log):  # a log mtrun appends to: this run's records alone
        os.remove(log)
    p = run(mtrun, plan_path, "--steps", 1, "--init", wf, "--export", out, "--no-save", "--val-batches", 0,
            "--dtype", "fp32", "--data", data, "--lr", f"{READ_LR:g}", "--log", log)
    if not check(p.returncode == 0, f"mtrun ({dtype})", p):
        return None, None
    loss = [json.loads(l)["loss"] for l in open(log) if '"step"' in l and '"loss"' in l][0]
    return loss, update_grads(W, read_safetensors(out))


def val_tokens(T):
    raw = open(DATA, "rb").read()
    ntrain = len(raw) - int(len(raw) * 0.1 + 0.5)
    x = np.frombuffer(raw[ntrain: ntrain + T + 1], np.uint8).astype(np.int64)
    return x[:-1], x[1:]


def cross_entropy(logits, targets, mask=None):
    """The mean over positions (those mask marks 1, with a mask) of -log softmax[target]."""
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]
    each = lse - logits[np.arange(len(targets)), targets]
    return float(np.mean(each) if mask is None else np.sum(each * mask) / np.sum(mask))


def attention(q, k, v, nh, nkv, window=0, scale=None, softcap=0, segments=None):
    """Causal; query t sees keys t - window < j <= t when window > 0, and
    none before segments[t] (its document's start in the row) when given;
    scores q.k * scale (default 1/sqrt(D)), then softcap * tanh(s / softcap)."""
    T, D = q.shape[0], q.shape[1] // nh
    t, j = np.arange(T)[:, None], np.arange(T)[None, :]
    hidden = (j > t) | ((t - j >= window) if window else False)
    if segments is not None:
        hidden = hidden | (j < np.asarray(segments)[:, None])
    out = np.zeros_like(q)
    for h in range(nh):
        g = h // (nh // nkv)
        qh, kh, vh = q[:, h * D:(h + 1) * D], k[:, g * D:(g + 1) * D], v[:, g * D:(g + 1) * D]
        s = qh @ kh.T * (scale if scale else 1 / math.sqrt(D))
        if softcap:
            s = softcap * np.tanh(s / softcap)
        s = np.where(hidden, -np.inf, s)
        p = np.exp(s - s.max(-1, keepdims=True))
        out[:, h * D:(h + 1) * D] = (p / p.sum(-1, keepdims=True)) @ vh
    return out


def gpt2_loss(W, L, nh, tokens, targets):
    W = {k: v.astype(np.float64) for k, v in W.items()}

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    x = W["wte.weight"][tokens] + W["wpe.weight"][: len(tokens)]
    for i in range(L):
        p = f"h.{i}."
        qkv = ln(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"]) @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        x = x + attention(q, k, v, nh, nh) @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        m = gelu(ln(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"]) @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    return cross_entropy(ln(x, W["ln_f.weight"], W["ln_f.bias"]) @ W["wte.weight"].T, targets)


def bf16_round(a):
    """a (float64) as mt stores it under bf16: to float32, then to nearest even bf16."""
    return (bf16_bits(np.asarray(a, np.float32)).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def rms_norm(x, g, eps=1e-5):
    """RMSNorm over the last axis, scaled by g."""
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * g


def rope_halves(x, heads, theta):
    """Rotary embedding of [T, heads * D] rows, each head's first half
    rotated against its second (Hugging Face's rotate_half)."""
    T, D = x.shape[0], x.shape[1] // heads
    ang = np.arange(T)[:, None] * theta ** (-2 * np.arange(D // 2) / D)[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    y = x.copy()
    for h in range(heads):
        a, b = x[:, h * D: h * D + D // 2], x[:, h * D + D // 2:(h + 1) * D]
        y[:, h * D: h * D + D // 2] = a * cos - b * sin
        y[:, h * D + D // 2:(h + 1) * D] = b * cos + a * sin
    return y


def llama_loss(W, L, nh, nkv, theta, tokens, targets, r=lambda a: a, mask=None,
               **attn):
    """The Llama loss in float64; r is applied where a graph node ends (the
    storage rule's rounding points: weights, then every op's result); with a
    mask, the mean over the positions it marks 1; attn: attention's window,
    scale and softcap."""
    W = {k: r(v.astype(np.float64)) for k, v in W.items()}

    def rope(x, heads):
        return rope_halves(x, heads, theta)

    x = W["model.embed_tokens.weight"][tokens]
    for i in range(L):
        p = f"model.layers.{i}."
        a = r(rms_norm(x, W[p + "input_layernorm.weight"]))
        q = r(rope(r(a @ W[p + "self_attn.q_proj.weight"].T), nh))
        k = r(rope(r(a @ W[p + "self_attn.k_proj.weight"].T), nkv))
        v = r(a @ W[p + "self_attn.v_proj.weight"].T)
        x = r(x + r(r(attention(q, k, v, nh, nkv, **attn)) @ W[p + "self_attn.o_proj.weight"].T))
        m = r(rms_norm(x, W[p + "post_attention_layernorm.weight"]))
        g, u = r(m @ W[p + "mlp.gate_proj.weight"].T), r(m @ W[p + "mlp.up_proj.weight"].T)
        x = r(x + r(r(g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T))
    return cross_entropy(r(r(rms_norm(x, W["model.norm.weight"])) @ W["lm_head.weight"].T), targets, mask)


def gemma2_loss(W, kinds, nh, nkv, theta, window, qs, acap, fcap, tokens, targets):
    """Gemma-2 in float64: kinds[i] is layer i's ("local": sliding window, or
    "global"); RMSNorm scales by 1 + w; GeGLU with the tanh GELU; the
    embedding, scaled by sqrt(C), is the LM head; logits capped by fcap."""
    W = {k: v.astype(np.float64) for k, v in W.items()}

    def rms(x, g):
        return rms_norm(x, 1 + g, 1e-6)

    def rope(x, heads):
        return rope_halves(x, heads, theta)

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    E = W["model.embed_tokens.weight"]
    x = E[tokens] * math.sqrt(E.shape[1])
    for i, kind in enumerate(kinds):
        p = f"model.layers.{i}."
        a = rms(x, W[p + "input_layernorm.weight"])
        q = rope(a @ W[p + "self_attn.q_proj.weight"].T, nh)
        k = rope(a @ W[p + "self_attn.k_proj.weight"].T, nkv)
        v = a @ W[p + "self_attn.v_proj.weight"].T
        o = attention(q, k, v, nh, nkv, window=window if kind == "local" else 0, scale=1 / math.sqrt(qs),
                      softcap=acap) @ W[p + "self_attn.o_proj.weight"].T
        x = x + rms(o, W[p + "post_attention_layernorm.weight"])
        m = rms(x, W[p + "pre_feedforward_layernorm.weight"])
        f = (gelu(m @ W[p + "mlp.gate_proj.weight"].T) * (m @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
        x = x + rms(f, W[p + "post_feedforward_layernorm.weight"])
    logits = rms(x, W["model.norm.weight"]) @ E.T
    return cross_entropy(fcap * np.tanh(logits / fcap), targets)


# ---------------------------------------------------------------- helpers

def plan(mtc, tmp, model, *extra):
    path = os.path.join(tmp, os.path.basename(model) + ".bin")
    p = run(mtc, model, "-o", path, *extra)
    if not check(p.returncode == 0, f"mtc {model}", p):
        sys.exit(report())
    return path


def first_val_loss(mtrun, planfile, tmp, *extra):
    log = os.path.join(tmp, "val.jsonl")
    p = run(mtrun, planfile, "--steps", "0", "--val-batches", "1", "--data", byte_tokens(tmp), "--log", log, *extra)
    if not check(p.returncode == 0, f"mtrun {' '.join(extra)}", p):
        return None, p
    vals = [r["val_loss"] for r in last_run(log) if "val_loss" in r]  # (mtrun appends each run to the log)
    return vals[0], p


def llama_tiny_weights(mtc, tmp, rng, model="examples/llama-tiny.mt"):
    """Random weights of every tensor of llama-tiny, by the names mtc lists."""
    d = json.loads(run(mtc, model, "--json").stdout)
    return {t["name"]: (rng.standard_normal(t["shape"]) * (0.5 if len(t["shape"]) == 1 else 0.1) +
                        (1.0 if len(t["shape"]) == 1 else 0)).astype(np.float32) for t in d["params"]}


def report():
    return finish()


# ---------------------------------------------------------------- modes

def roundtrip(mtc, mtrun, tmp):
    pl = plan(mtc, tmp, "examples/llama-tiny.mt")
    a, b, h = (os.path.join(tmp, n) for n in ("a.safetensors", "b.safetensors", "h.safetensors"))
    p = run(mtrun, pl, "--steps", "3", "--export", a, "--log", os.path.join(tmp, "l.jsonl"))
    check(p.returncode == 0, "train and export", p)
    p = run(mtrun, pl, "--steps", "0", "--init", a, "--export", b, "--log", os.path.join(tmp, "l.jsonl"))
    check(p.returncode == 0, "init from the export and export again", p)
    check(os.path.exists(a) and os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read(),
          "export -> init -> export gives identical bytes")
    p = run(mtrun, pl, "--steps", "0", "--init", a, "--export", h, "--dtype", "bf16", "--log", os.path.join(tmp, "l.jsonl"))
    check(p.returncode == 0, "bf16 export", p)
    if os.path.exists(h):
        full, half = read_safetensors(a), read_safetensors(h)
        check(full.keys() == half.keys(), "bf16 export has the same tensors")
        for k in full:
            want = (bf16_bits(full[k]).astype(np.uint32) << 16).view(np.float32)
            check(np.array_equal(want, half[k]), f"bf16 export of {k} is the rounded fp32 weight")


def fixture(mtc, mtrun, tmp):
    rng = np.random.default_rng(1)
    W = llama_tiny_weights(mtc, tmp, rng)
    names = list(W)
    # three shards: fp32 embeddings, bf16 matrices, fp16 norms, with an index
    shards = {"model-00001-of-00003.safetensors": [], "model-00002-of-00003.safetensors": [],
              "model-00003-of-00003.safetensors": []}
    stored = {}
    for n in names:
        if n.startswith("model.embed") or n.startswith("lm_head"):
            dt, f = "F32", "model-00001-of-00003.safetensors"
            stored[n] = W[n]
        elif W[n].ndim == 2:
            dt, f = "BF16", "model-00002-of-00003.safetensors"
            stored[n] = (bf16_bits(W[n]).astype(np.uint32) << 16).view(np.float32)
        else:
            dt, f = "F16", "model-00003-of-00003.safetensors"
            stored[n] = W[n].astype(np.float16).astype(np.float32)
        shards[f].append((n, dt, W[n]))
    d = os.path.join(tmp, "hf")
    os.mkdir(d)
    for f, ts in shards.items():
        write_safetensors(os.path.join(d, f), ts)
    json.dump({"metadata": {"total_size": 0}, "weight_map": {n: f for f, ts in shards.items() for n, _, _ in ts}},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    pl = plan(mtc, tmp, "examples/llama-tiny.mt", "--batch", "1", "--seq", "8")
    out = os.path.join(tmp, "out.safetensors")
    loss, p = first_val_loss(mtrun, pl, tmp, "--init", d, "--export", out)
    if loss is None:
        return
    got = read_safetensors(out)
    for n in names:
        check(np.array_equal(got[n], stored[n]), f"{n}: loaded values equal the fixture's")
    tokens, targets = val_tokens(8)
    want = llama_loss(stored, 2, 4, 2, 10000.0, tokens, targets)
    check(abs(loss - want) <= 1e-5 * abs(want), f"llama-tiny loss {loss} vs numpy {want}")
    print(f"fixture: loss {loss:.6f}, numpy {want:.6f}")


def window(mtc, mtrun, tmp):
    """Sliding-window (3 of 16 positions), soft-capped attention at scale 0.5:
    mt's first validation loss from random weights equals numpy's; and the
    window and the cap each change it (they are not ignored)."""
    model = "tests/jit/llama-window.mt"
    W = llama_tiny_weights(mtc, tmp, np.random.default_rng(4), model)
    W = {n: (w * 4 if n.endswith("proj.weight") and ("q_proj" in n or "k_proj" in n) else w) for n, w in W.items()}
    f = os.path.join(tmp, "w.safetensors")
    write_safetensors(f, [(n, "F32", w) for n, w in W.items()])
    pl = plan(mtc, tmp, model, "--batch", "1", "--seq", "16")
    loss, p = first_val_loss(mtrun, pl, tmp, "--init", f)
    if loss is None:
        return
    tokens, targets = val_tokens(16)
    opts = dict(window=3, scale=0.5, softcap=0.8)
    want = llama_loss(W, 2, 4, 2, 10000.0, tokens, targets, **opts)
    check(abs(loss - want) <= 1e-5 * abs(want), f"llama-window loss {loss} vs numpy {want}")
    for drop in ("window", "softcap"):
        other = llama_loss(W, 2, 4, 2, 10000.0, tokens, targets, **{**opts, drop: 0})
        check(abs(other - want) > 1e-3 * abs(want), f"without its {drop} the numpy loss moves ({other} vs {want})")
    print(f"window: loss {loss:.6f}, numpy {want:.6f}")


def gemma2(mtc, mtrun, tmp):
    """gemma2-tiny: layers 0 and 2 are the local kind, 1 and 3 global. The
    weights go in and come out by checkpoint name, so each layer's tensors
    are where the order puts them; numpy's loss follows the same order."""
    model = "examples/gemma2-tiny.mt"
    W = llama_tiny_weights(mtc, tmp, np.random.default_rng(5), model)
    W = {n: (w - 1 if w.ndim == 1 else w) for n, w in W.items()}  # Gemma's norms scale by 1 + w
    W = {n: (w * 4 if "q_proj" in n or "k_proj" in n else w) for n, w in W.items()}
    f = os.path.join(tmp, "w.safetensors")
    write_safetensors(f, [(n, "F32", w) for n, w in W.items()])
    pl = plan(mtc, tmp, model, "--batch", "1", "--seq", "48")
    out = os.path.join(tmp, "out.safetensors")
    loss, p = first_val_loss(mtrun, pl, tmp, "--init", f, "--export", out)
    if loss is None:
        return
    got = read_safetensors(out)
    check(sorted(got) == sorted(W), "the export names the tensors the model lists")
    for n in W:
        check(n in got and np.array_equal(got[n], W[n]), f"{n}: exported as loaded")
    tokens, targets = val_tokens(48)
    args = (4, 2, 10000.0, 16, 32, 50.0, 30.0, tokens, targets)
    want = gemma2_loss(W, ["local", "global"] * 2, *args)
    check(abs(loss - want) <= 1e-5 * abs(want), f"gemma2-tiny loss {loss} vs numpy {want}")
    for other_kinds in (["global", "local"] * 2, ["global"] * 4):
        other = gemma2_loss(W, other_kinds, *args)
        check(abs(other - want) > 1e-4 * abs(want), f"layers {other_kinds} move numpy's loss ({other} vs {want})")
    print(f"gemma2: loss {loss:.6f}, numpy {want:.6f} (relative {abs(loss - want) / abs(want):.1e})")


def llmc(mtc, mtrun, tmp):
    rng = np.random.default_rng(2)
    L, C, NH, V, Vp, maxT = 12, 768, 12, 50257, 50304, 1024
    g = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(np.float32)
    o = lambda *s: (1 + rng.standard_normal(s, dtype=np.float32) * 0.1).astype(np.float32)
    wte, wpe = g(Vp, C), g(maxT, C)
    layers = dict(ln1w=o(L, C), ln1b=g(L, C), qkvw=g(L, 3 * C, C), qkvb=g(L, 3 * C), attprojw=g(L, C, C),
                  attprojb=g(L, C), ln2w=o(L, C), ln2b=g(L, C), fcw=g(L, 4 * C, C), fcb=g(L, 4 * C),
                  fcprojw=g(L, C, 4 * C), fcprojb=g(L, C))
    lnfw, lnfb = o(C), g(C)
    path = os.path.join(tmp, "gpt2_124M.bin")
    with open(path, "wb") as f:
        f.write(np.array([20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248, "<i4").tobytes())
        for a in [wte, wpe] + list(layers.values()) + [lnfw, lnfb]:
            f.write(a.astype("<f4").tobytes())
    # the same weights under Hugging Face names and Conv1D layout, for numpy
    W = {"wte.weight": wte[:V], "wpe.weight": wpe, "ln_f.weight": lnfw, "ln_f.bias": lnfb}
    for i in range(L):
        p = f"h.{i}."
        W.update({p + "ln_1.weight": layers["ln1w"][i], p + "ln_1.bias": layers["ln1b"][i],
                  p + "attn.c_attn.weight": layers["qkvw"][i].T, p + "attn.c_attn.bias": layers["qkvb"][i],
                  p + "attn.c_proj.weight": layers["attprojw"][i].T, p + "attn.c_proj.bias": layers["attprojb"][i],
                  p + "ln_2.weight": layers["ln2w"][i], p + "ln_2.bias": layers["ln2b"][i],
                  p + "mlp.c_fc.weight": layers["fcw"][i].T, p + "mlp.c_fc.bias": layers["fcb"][i],
                  p + "mlp.c_proj.weight": layers["fcprojw"][i].T, p + "mlp.c_proj.bias": layers["fcprojb"][i]})
    pl = plan(mtc, tmp, "examples/gpt2.mt", "--batch", "1", "--seq", "8", "--dtype", "f32")
    loss, p = first_val_loss(mtrun, pl, tmp, "--init", path, "--reference")
    if loss is None:
        return
    tokens, targets = val_tokens(8)
    want = gpt2_loss(W, L, NH, tokens, targets)
    check(abs(loss - want) <= 1e-5 * abs(want), f"GPT-2 loss from the llm.c checkpoint {loss} vs numpy {want}")
    print(f"llmc: loss {loss:.6f}, numpy {want:.6f}")
    # a checkpoint of another depth is refused
    with open(path, "r+b") as f:
        f.seek(16)
        f.write(struct.pack("<i", 2))
    p = run(mtrun, pl, "--steps", "0", "--data", byte_tokens(tmp), "--init", path, "--log", os.path.join(tmp, "e.jsonl"))
    check(p.returncode == 1 and "2 layers in the checkpoint, 12 in model" in p.stderr, "a 2-layer llm.c file is refused", p)


def errors(mtc, mtrun, tmp):
    rng = np.random.default_rng(3)
    W = llama_tiny_weights(mtc, tmp, rng)
    pl = plan(mtc, tmp, "examples/llama-tiny.mt", "--batch", "1", "--seq", "8")
    cases = []
    missing = dict(W)
    del missing["model.layers.1.mlp.up_proj.weight"]
    cases.append(("missing", missing, ['no tensor "model.layers.1.mlp.up_proj.weight"']))
    extra = dict(W)
    extra["model.layers.9.foo.weight"] = np.zeros(3, np.float32)
    cases.append(("extra", extra, ['"model.layers.9.foo.weight" is not a parameter']))
    shaped = dict(W)
    shaped["model.norm.weight"] = np.zeros(65, np.float32)
    cases.append(("shape", shaped, ['"model.norm.weight" is [65] in the file but [64] in the model']))
    for name, ws, phrases in cases:
        f = os.path.join(tmp, name + ".safetensors")
        write_safetensors(f, [(n, "F32", a) for n, a in ws.items()])
        p = run(mtrun, pl, "--steps", "0", "--init", f, "--log", os.path.join(tmp, "e.jsonl"))
        check(p.returncode == 1 and f in p.stderr and all(s in p.stderr for s in phrases), f"{name} tensor refused", p)
    f = os.path.join(tmp, "gpt2.bin")
    open(f, "wb").write(np.array([20240326, 3, 64, 256, 2, 4, 64, 256] + [0] * 248, "<i4").tobytes())
    p = run(mtrun, pl, "--steps", "0", "--init", f, "--log", os.path.join(tmp, "e.jsonl"))
    check(p.returncode == 1 and f in p.stderr, "an llm.c GPT-2 file into a Llama is refused", p)


def bf16(mtc, mtrun, tmp):
    rng = np.random.default_rng(2)
    W = llama_tiny_weights(mtc, tmp, rng)
    f = os.path.join(tmp, "w.safetensors")
    write_safetensors(f, [(n, "F32", w) for n, w in W.items()])
    T = 64
    pl = plan(mtc, tmp, "examples/llama-tiny.mt", "--batch", "1", "--seq", str(T), "--dtype", "bf16")
    loss, p = first_val_loss(mtrun, pl, tmp, "--init", f)
    if loss is None:
        return
    tokens, targets = val_tokens(T)
    want = llama_loss(W, 2, 4, 2, 10000.0, tokens, targets, bf16_round)
    exact = llama_loss(W, 2, 4, 2, 10000.0, tokens, targets)
    print(f"bf16: mt {loss:.6f}, numpy with bf16 rounding {want:.6f} (rel {abs(loss - want) / want:.2e}), "
          f"without {exact:.6f} (rel {abs(loss - exact) / exact:.2e})")
    check(abs(loss - want) <= 1e-3 * abs(want), f"bf16 llama-tiny loss {loss} vs numpy with bf16 rounding {want}")
    check(abs(loss - exact) > abs(loss - want), f"the rounding makes a difference: unrounded {exact}, rounded {want}")


def main():
    mtc, mtrun, mode = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        {"roundtrip": roundtrip, "fixture": fixture, "llmc": llmc, "errors": errors, "bf16": bf16, "window": window,
         "gemma2": gemma2}[mode](mtc, mtrun, tmp)
    sys.exit(report())


if __name__ == "__main__":
    main()
