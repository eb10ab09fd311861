#!/usr/bin/env python3
"""An independent numpy forward of the tiny Mixtral (examples/mixtral-tiny.mt)
against mt's reference executor, from the same random weights and tokens.

numpy follows Hugging Face's MixtralSparseMoeBlock: the softmax over all
experts' router logits, the top 2 taken, their weights renormalised to sum
1, each expert run on the tokens that chose it; and the load-balancing
loss E * sum_e f_e P_e with f and P pooled over all layers' rows (the
model's pooled = true, transformers' load_balancing_loss_func), times the
coefficient. mt's first loss must equal numpy's to 1e-5 relative: mtrun's
first validation loss with the weights loaded by name (each expert's
tensor by its {e} name; exported again, every tensor comes back as loaded),
and the reference executor's in float64 (ref_forward, which also gives the
sum of the layers' auxiliary losses, held to numpy's likewise). Two
other routings (softmax before the selection without renormalising, and
the top 1) must move numpy's loss, so the check sees the routing.

explain: `mtc --explain` of examples/mixtral-8x7b.mt on h200 prices
the GEMMs and attention of a step (the row without recomputation) within 2%
of a hand count in which each token runs 2 of the 8 experts (forward, and
in the backward again, which moe's backward kernel recomputes, then its
gradients; the experts' GEMMs at the profile's moe_gemm_efficiency, the
rest at cuBLAS's 0.8), and the weights
that cross the link in a step are all 8 experts' (every parameter, in bf16).

plan: `mtc -o` of the tiny Mixtral for a GPU target plans it with CUDA code
and no warning, and --emit-cuda writes the mixture-of-experts kernels of
compiler/emit/cuda/moe.cuh (mt_node_top_k, _load_balance, _load_balance_bwd,
_add_loss, and every grouped mt_moe_* kernel runtime/backend/moe_launch.h
launches) into the translation unit.

stats: what mtrun logs of a mixture of experts on the cpu backend: the
first step's "aux_loss" (the sum over layers of the losses add_loss
joins, its weights as loaded) equals numpy's for the tiny Mixtral and the
reference executor's (ref_forward, float64) for the DeepSeek-style order
(tests/orders/deepseek-tiny.mt, a dense layer then three of experts), to
1e-5 relative, and the step's loss the same references'; its
"expert_load" (per layer, the tokens each expert took) is numpy's count of
the top 2 for the Mixtral, and for each layer of experts sums to tokens x
top_k ([] for the dense layer); the step line shows "aux" with the logged
value. A grouped router (the tiny Mixtral's softmax scores plus a selection
bias within the best 1 of 2 groups of 2, the routers form): its
"expert_load" is numpy's count of the experts its routing takes, each
layer summing to T x top_k (the group limit's own top_k masks rank groups
and are no load).

hf: the pooled load-balancing loss against transformers' own Mixtral
(MixtralForCausalLM, output_router_logits, float64, random weights with
sharp routers, the tiny Mixtral's sizes): mtrun's first step of the f32
plan (the JIT's kernels) from those weights on the data's first T bytes
logs "loss" = transformers' cross-entropy + router_aux_loss_coef x
load_balancing_loss_func (and "ce_loss", "aux_loss" its parts) to 1e-5
relative, and its gradient of every layer's router weight equals
transformers' to 1e-5 relative (max |mt - hf| / max |hf|). mt's gradient
is read off one AdamW step with betas (0, 0), eps 1e6 and lr 1e12, no
decay or clipping: the update lr g / (|g| + eps), inverted exactly. So
that the check can fail, the same model with pooled = false (each layer's
own loss, summed) must miss transformers' router gradients by more than
1e-3.

hf_masked: the same on a token file with a loss mask (X.bin and X.mask,
runtime/data.h) that excludes every third target and the first 12, which
transformers gets as labels -100: the loss (its cross-entropy the mean over
the counted targets, aux as before) and every router's gradient to 1e-5.
The cross-entropy's gradient carries the mask's weight (rows / counted) and
the load-balancing loss's does not: with the weight on the whole gradient
(mtrun before the loss scale, graph.h) the routers missed by 3.7e-2 and
8.7e-2.

routers: the tiny Mixtral's gates rewritten three ways (sigmoid scores
renormalised and scaled by 2.5; softmax scores chosen with a selection
bias buffer, from -0.3 to 0.3, within the best of 2 groups of 2; Llama 4's
sigmoid of the top 1): mtrun's first validation loss of each equals a numpy
forward's to 1e-5 relative, and each numpy routing moves the loss from
Mixtral's by more than 1e-4 (the grouped one also from its own with a zero
bias), so the check sees the routing.

layouts: the tiny Mixtral's experts stored as checkpoints store them, each
layer's experts one tensor: every weight [E, in, out] (transpose(w)); a
fused gate_up [E, 2F, C] as halves; Llama 4's [E, C, 2F] halves and down
[E, F, C]; gpt-oss's [E, C, 2F] interleaved (the gate at even columns)
and down [E, F, C]. For each, `mtc --dump-graph` shows no transpose,
slice, concat or reshape node in the block (the kernels read the weights in
place: the moe line names the form), mtrun's first validation loss equals
numpy's (the per-expert tensors, mixtral_loss) to 1e-5 relative, and the
f32 plan's step-1 gradient of every tensor equals the per-expert model's
(examples/mixtral-tiny.mt, held to transformers by hf) in the stored
layout, to 1e-5 of the tensor's largest. A form read with gate and up
swapped (halves for interleaved) must miss numpy's loss by more than 1e-4.

acts: the tiny Mixtral's experts with moe's act = gelu (GeGLU, the DSL's
gelu(approximate = none), erf's) and act = gelu_tanh: the reference
executor's loss (the plain kernels in float64) equals numpy's to 1e-9
relative and mtrun's first validation loss (the f32 plan) to 1e-5; each
must move numpy's loss from SwiGLU's by more than 1e-4.
usage: check_moe.py numpy MTC REF_FORWARD MTRUN
       check_moe.py acts MTC REF_FORWARD MTRUN
       check_moe.py layouts MTC REF_FORWARD MTRUN
       check_moe.py routers MTC REF_FORWARD MTRUN
       check_moe.py hf MTC REF_FORWARD MTRUN
       check_moe.py hf_masked MTC REF_FORWARD MTRUN
       check_moe.py stats MTC REF_FORWARD MTRUN
       check_moe.py explain MTC
       check_moe.py plan MTC
"""
import json
import math
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, last_run, run  # noqa: E402
from check_weights import (DATA, attention, cross_entropy, first_val_loss, read_safetensors, rms_norm as rms,  # noqa: E402
                           rope_halves, val_tokens, write_safetensors)

MODEL = "examples/mixtral-tiny.mt"
L, NH, NKV, E, K, THETA, AUX, T = 2, 4, 2, 4, 2, 10000.0, 0.02, 48


def rope(x, heads):
    return rope_halves(x, heads, THETA)


def gelu_erf(h):
    """The DSL's gelu(h, approximate = none): 0.5 h (1 + erf(h / sqrt 2))."""
    return 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))


def gelu_tanh(h):
    """The DSL's gelu(h, approximate = tanh)."""
    return 0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))


ACTS = {"silu": lambda h: h / (1 + np.exp(-h)), "gelu": gelu_erf, "gelu_tanh": gelu_tanh}


def mixtral_loss(W, tokens, targets, routing="mixtral", k=K, loads=None, act="silu"):
    """The loss and the summed auxiliary loss in float64. routing "mixtral":
    softmax over all, top k, renormalised; "before": the top k's
    probabilities as they are; a function (logits, layer prefix) -> (top
    (T, k) expert indices, their gates): that routing. loads (a list): each
    layer's tokens per expert appended. act: the experts' ACTS(h1) h3."""
    W = {n: w.astype(np.float64) for n, w in W.items()}
    x, counts, psums = W["model.embed_tokens.weight"][tokens], 0.0, 0.0
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
        chosen = np.zeros_like(probs)  # the load-balancing loss's own top K
        np.put_along_axis(chosen, np.argsort(-probs, axis=-1, kind="stable")[:, :K], 1.0, -1)
        if callable(routing):
            top, weights = routing(logits, p)
        if loads is not None:
            loads.append(np.bincount(top.ravel(), minlength=E).tolist())
        out = np.zeros_like(m)
        for e in range(E):
            rows, slot = np.nonzero(top == e)
            if not len(rows):
                continue
            pe = p + f"block_sparse_moe.experts.{e}."
            xe = m[rows]
            h1, h3 = xe @ W[pe + "w1.weight"].T, xe @ W[pe + "w3.weight"].T
            out[rows] += weights[rows, slot][:, None] * ((ACTS[act](h1) * h3) @ W[pe + "w2.weight"].T)
        x = x + out
        counts, psums = counts + chosen.sum(0), psums + probs.sum(0)
    rows = L * len(tokens)  # pooled over the layers' rows, as transformers' load_balancing_loss_func
    aux = AUX * E * float(np.sum(counts / rows * (psums / rows)))
    return cross_entropy(rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T, targets), aux


def explain(mtc):
    model = "examples/mixtral-8x7b.mt"
    p = run(mtc, model, "--explain", "--json", "--target", "h200")
    if not check(p.returncode == 0, "mtc --explain mixtral-8x7b", p):
        return
    d = json.loads(p.stdout)
    row = next(r for r in d["policies"] if r["name"] == "none")
    check(row["recompute_s"] == 0, f"the 'none' row recomputes nothing: {row}")
    # the hand count, from the published config and targets/h200.target
    N, C, F, V, L, H, KV, D, E, K = d["batch"] * d["seq"], 4096, 14336, 32000, 32, 32, 8, 128, 8, 2
    dense = L * (2 * C * C + 2 * C * KV * D + E * C) + V * C  # multiply-adds a token outside the experts
    experts = L * K * 3 * C * F                               # the K selected experts' three GEMMs
    # forward and backward (2x); moe's backward also recomputes its experts' forward
    T = d["seq"]
    # causal; the backward 3.5x: 7 T x T x D units to the forward's 2, as the GPU kernels run it (saved lse, dq apart)
    attn_flops = L * 4.0 * d["batch"] * (T * T / 2) * H * D * (1 + 3.5)
    h200 = open("schedules/h200.target").read()
    tc = float(re.search(r"^attention_tc_fraction *= *([0-9.e+-]+)", h200, re.M).group(1))
    moe = float(re.search(r"^moe_gemm_efficiency *= *([0-9.e+-]+)", h200, re.M).group(1))  # moe.cuh's kernels
    dense_flops, expert_flops = 2 * N * 3 * dense, 2 * N * 4 * experts
    hand = dense_flops / (989e12 * 0.8) + expert_flops / (989e12 * moe) + attn_flops / (989e12 * tc)
    got = row["gemm_s"] + row["attention_s"]
    check(abs(got - hand) <= 0.02 * hand, f"GEMMs + attention {got:.4f} s vs a hand count of {hand:.4f} s")
    all_experts = json.loads(run(mtc, model, "--json").stdout)["params_total"]
    selected = all_experts - L * (E - K) * 3 * C * F
    check(abs(d["bounds"]["in_s"] - all_experts * 2 / 50e9) <= 1e-3 * d["bounds"]["in_s"],
          f"weights in {d['bounds']['in_s']} s is not {all_experts:,} bf16 parameters at 50 GB/s")
    print(f"mixtral-8x7b on h200: GEMMs + attention {got:.4f} s, hand count (2 of 8 experts) {hand:.4f} s "
          f"(relative {abs(got - hand) / hand:.1e}); weights in {d['bounds']['in_s']:.3f} s = all "
          f"{all_experts:,} parameters (the selected experts' would be {selected:,})")


def plan(mtc):
    model = "examples/mixtral-tiny.mt"
    with tempfile.TemporaryDirectory() as tmp:
        p = run(mtc, model, "-o", os.path.join(tmp, "p.bin"))
        check(p.returncode == 0 and os.path.exists(os.path.join(tmp, "p.bin")), "mtc -o mixtral-tiny for h200", p)
        check("warning" not in p.stderr, "no warning planning mixtral-tiny for h200", p)
        cu = os.path.join(tmp, "m.cu")
        p = run(mtc, model, "--emit-cuda", cu)
        check(p.returncode == 0 and os.path.exists(cu), "--emit-cuda of mixtral-tiny", p)
        text = open(cu).read() if os.path.exists(cu) else ""
        names = [f"mt_node_{k}" for k in ("top_k", "load_balance", "load_balance_bwd", "add_loss")]
        launch = open("runtime/backend/moe_launch.h").read()
        table = re.search(r"MOE_KERNEL_NAME\[MOE_KERNELS\]\s*=\s*\{(.*?)\};", launch, re.S)
        grouped = re.findall(r'"(mt_moe_\w+)"', table.group(1)) if table else []
        check(len(grouped) >= 13, "moe_launch.h names its grouped kernels")
        for k in names + grouped:
            entry = rf'extern "C" __global__ void (?:__launch_bounds__\([\d, ]+\) )?{k}\('
            check(re.search(entry, text) is not None, f"{k} in the translation unit")
    print("mixtral-tiny: a GPU plan with the mixture-of-experts kernels in its CUDA C")


def random_weights(mtc, model, seed):
    d = json.loads(run(mtc, model, "--json").stdout)
    rng = np.random.default_rng(seed)
    W = {t["name"]: (rng.standard_normal(t["shape"]) * (0.3 if len(t["shape"]) == 1 else 0.1) +
                     (1.0 if len(t["shape"]) == 1 else 0)).astype(np.float32) for t in d["params"]}
    # routers 10x larger: sharper choices, so a wrong routing shows clearly
    return {n: (w * 10 if n.endswith("gate.weight") else w) for n, w in W.items()}


def first_step(mtc, mtrun, model, W, tmp, batch, seq, target):
    """mtrun's first step from weights W on the data's first batch: its log line and its printed step line."""
    wf, planfile, log = (os.path.join(tmp, n) for n in ("w.safetensors", "p.bin", "l.jsonl"))
    write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
    q = run(mtc, model, "-o", planfile, "--batch", batch, "--seq", seq, "--target", target)
    if not check(q.returncode == 0, f"mtc -o {model}", q):
        return None, ""
    p = run(mtrun, planfile, "--steps", "1", "--device", "cpu", "--data", DATA, "--init", wf, "--log", log,
            "--no-save", "--val-every", "1000", "--val-batches", "1")
    if not check(p.returncode == 0, f"mtrun {model}", p):
        return None, ""
    steps = [r for r in last_run(log) if "loss" in r]  # (mtrun appends each run to the log)
    return steps[0], next((line for line in p.stdout.splitlines() if line.startswith("step      1/")), "")


def stats(mtc, ref, mtrun):
    T = 48
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        # the tiny Mixtral, batch 1: numpy's loss, auxiliary loss and loads on the first T + 1 bytes
        W = random_weights(mtc, MODEL, 14)
        got, line = first_step(mtc, mtrun, MODEL, W, tmp, 1, T, "tiny-2layers")
        loads = []
        want, want_aux = mixtral_loss(W, raw[:T], raw[1:T + 1], loads=loads)
        if check(got is not None and "aux_loss" in got and "expert_load" in got,
                 f"mixtral-tiny: the step's log line has aux_loss and expert_load: {got}"):
            check(abs(got["ce_loss"] - want) <= 1e-5 * abs(want),
                  f"mixtral-tiny: step 1 ce_loss {got['ce_loss']} vs numpy {want}")
            check(abs(got["loss"] - (want + want_aux)) <= 1e-5 * abs(want + want_aux),
                  f"mixtral-tiny: step 1 loss {got['loss']} vs numpy's cross-entropy + aux {want + want_aux}")
            check(abs(got["aux_loss"] - want_aux) <= 1e-5 * abs(want_aux),
                  f"mixtral-tiny: step 1 aux_loss {got['aux_loss']} vs numpy {want_aux}")
            check(got["expert_load"] == loads, f"mixtral-tiny: expert_load {got['expert_load']} vs numpy's {loads}")
            check(all(sum(x) == T * K for x in got["expert_load"]), "mixtral-tiny: each layer's loads sum to T x top_k")
            check(f" (ce {got['ce_loss']:.6f} + aux {got['aux_loss']:.6f})  " in line,
                  f"mixtral-tiny: the step line shows ce and aux: {line!r}")
            print(f"mixtral-tiny: aux_loss {got['aux_loss']:.9f}, numpy {want_aux:.9f}; expert_load {got['expert_load']}")
        # the DeepSeek-style order, batch 2: the reference executor's loss and auxiliary loss on the first batch
        order, B = "tests/orders/deepseek-tiny.mt", 2
        W = random_weights(mtc, order, 15)
        got, line = first_step(mtc, mtrun, order, W, tmp, B, T, "tiny-1layer")
        wf, inf = os.path.join(tmp, "w.safetensors"), os.path.join(tmp, "inputs.i32")
        rows = [raw[b * T: b * T + T + 1] for b in range(B)]  # row b of the first batch
        np.concatenate([np.concatenate([r[:-1] for r in rows]), np.concatenate([r[1:] for r in rows])]).astype("<i4").tofile(inf)
        p = run(ref, order, wf, inf, "--batch", B, "--seq", T)
        if check(p.returncode == 0, "ref_forward runs the DeepSeek-style order", p) and \
                check(got is not None and "aux_loss" in got and "expert_load" in got,
                      f"deepseek-tiny: the step's log line has aux_loss and expert_load: {got}"):
            r = dict(line.split() for line in p.stdout.splitlines())
            loss, aux = float(r["loss"]), float(r["aux"])
            check(abs(got["ce_loss"] - loss) <= 1e-5 * abs(loss),
                  f"deepseek-tiny: step 1 ce_loss {got['ce_loss']} vs reference {loss}")
            check(abs(got["loss"] - (loss + aux)) <= 1e-5 * abs(loss + aux),
                  f"deepseek-tiny: step 1 loss {got['loss']} vs reference's cross-entropy + aux {loss + aux}")
            check(abs(got["aux_loss"] - aux) <= 1e-5 * abs(aux),
                  f"deepseek-tiny: step 1 aux_loss {got['aux_loss']} vs reference {aux}")
            load = got["expert_load"]
            check(len(load) == 4 and load[0] == [] and all(len(x) == E and sum(x) == B * T * K for x in load[1:]),
                  f"deepseek-tiny: expert_load {load}: [] for the dense layer, {E} experts summing to {B * T * K} "
                  "for each other")
            check(f" (ce {got['ce_loss']:.6f} + aux {got['aux_loss']:.6f})  " in line,
                  f"deepseek-tiny: the step line shows ce and aux: {line!r}")
            print(f"deepseek-tiny: aux_loss {got['aux_loss']:.9f}, reference {aux:.9f}; expert_load {load}")
        grouped_loads(mtc, mtrun, raw, tmp)


def grouped_router(mtc, tmp, seed):
    """The tiny Mixtral routed by softmax scores plus a selection bias within the best 1 of 2 groups of 2 (written
    into tmp) and random weights for it, the biases from -0.3 to 0.3: the model's path and the weights."""
    model = os.path.join(tmp, "grouped.mt")
    with open(model, "w") as f:
        f.write(open(MODEL).read().replace(ROUTER_PARAM, BIAS_PARAM).replace(ROUTER_GATES, GROUPED_GATES))
    return model, with_biases(random_weights(mtc, model, seed))


def grouped_loads(mtc, mtrun, raw, tmp):
    """A grouped router's step: expert_load counts the experts its tokens took (numpy's routing of the same
    weights), not the group limit's own top_k masks, each layer summing to T x top_k."""
    model, W = grouped_router(mtc, tmp, 23)
    got, _ = first_step(mtc, mtrun, model, W, tmp, 1, T, "tiny-2layers")
    loads = []
    mixtral_loss(W, raw[:T], raw[1:T + 1], route_grouped(W), loads=loads)
    if check(got is not None and "expert_load" in got, f"grouped router: the step's log line has expert_load: {got}"):
        load = got["expert_load"]
        check(all(sum(x) == T * K for x in load), f"grouped router: expert_load {load}: a layer's sum is not {T * K}")
        check(load == loads, f"grouped router: expert_load {load} vs numpy's {loads}")
        print(f"grouped router (1 of 2 groups): expert_load {load}, numpy's count of its routing")


def hf_mixtral(seed):
    """transformers' tiny Mixtral (examples/mixtral-tiny.mt's sizes), float64, sharp routers."""
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=L,
                                     num_attention_heads=NH, num_key_value_heads=NKV, num_local_experts=E,
                                     num_experts_per_tok=K, router_aux_loss_coef=AUX, rope_theta=THETA,
                                     rms_norm_eps=1e-5, max_position_embeddings=64, output_router_logits=True,
                                     tie_word_embeddings=False, sliding_window=None)
    cfg._attn_implementation, cfg._experts_implementation = "eager", "eager"  # plain loops, float64
    torch.manual_seed(seed)
    model = transformers.MixtralForCausalLM(cfg).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3 if name.endswith("gate.weight") else 0.1)
    return model


def mt_step_grads(mtc, mtrun, text, W, tmp, T, data=DATA, out_name="o"):
    """mtrun's first step of model text from weights W (batch 1, seq T) on data: its log line and the gradient of
    every tensor, read off an AdamW step of update lr g / (|g| + eps)."""
    lr, eps = 1e12, 1e6
    text = text.replace('data = "data/tinyshakespeare.txt"', "")
    text = text.replace("optimizer = adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1)",
                        f"optimizer = adamw(betas = (0, 0), weight_decay = 0, eps = {eps:g})")
    text = text.replace("schedule = cosine(warmup = 20, min_lr = 0.1)", "schedule = constant").replace("clip = 1.0", "clip = 0")
    if not check("schedule = constant" in text and "eps = " in text and "clip = 0" in text,
                 "the tiny Mixtral's train section still reads as this check rewrites it"):
        return None, None
    model, wf, planfile, log, out = (os.path.join(tmp, n) for n in ("m.mt", "w.safetensors", "p.bin", "l.jsonl", out_name))
    with open(model, "w") as f:
        f.write(text)
    write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
    q = run(mtc, model, "-o", planfile, "--batch", "1", "--seq", T, "--target", "tiny-2layers", "--dtype", "f32")
    if not check(q.returncode == 0, "mtc -o the tiny Mixtral", q):
        return None, None
    p = run(mtrun, planfile, "--steps", "1", "--device", "cpu", "--data", data, "--init", wf, "--log", log, "--lr",
            f"{lr:g}", "--no-save", "--val-batches", "0", "--export", out, "--dtype", "fp32")
    if not check(p.returncode == 0, "mtrun one step of the tiny Mixtral", p):
        return None, None
    got = read_safetensors(out if out.endswith(".safetensors") else
                           next(os.path.join(out, n) for n in os.listdir(out) if n.endswith(".safetensors")))
    grads = {}
    for n, w in W.items():
        u = w.astype(np.float64) - got[n].astype(np.float64)  # lr g / (|g| + eps)
        grads[n] = u * eps / (lr - np.abs(u))
    return [r for r in last_run(log) if "loss" in r][0], grads  # (mtrun appends each run to the log)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def route_sigmoid(logits, _):
    """DeepSeek-V3's gates without its groups: sigmoid scores, the top K renormalised (+1e-20), times 2.5."""
    s = sigmoid(logits)
    top = np.argsort(-s, axis=-1, kind="stable")[:, :K]
    w = np.take_along_axis(s, top, -1)
    return top, 2.5 * w / (w.sum(-1, keepdims=True) + 1e-20)


def route_grouped(W):
    """softmax scores chosen by score + the layer's bias within the best of 2 groups of 2 (ranked by their top-2
    sums), the probabilities as they are."""
    def route(logits, prefix):
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        choice = (probs + W[prefix + "block_sparse_moe.gate.e_score_correction_bias"]).reshape(-1, 2, E // 2)
        best = np.argmax(np.sort(choice, -1)[..., -2:].sum(-1), -1)  # (T,)
        limited = np.where(np.arange(2)[None, :, None] == best[:, None, None], choice, -np.inf).reshape(-1, E)
        top = np.argsort(-limited, axis=-1, kind="stable")[:, :K]
        return top, np.take_along_axis(probs, top, -1)
    return route


def route_top1(logits, _):
    """Llama 4's gate: the top 1 by logit, its sigmoid."""
    top = np.argsort(-logits, axis=-1, kind="stable")[:, :1]
    return top, sigmoid(np.take_along_axis(logits, top, -1))


# The lines of MODEL that routers() and grouped_router() rewrite, and what they write.
ROUTER_GATES = "  gates = router(logits, top_k = K, softmax = after)\n"
ROUTER_PARAM = '  param router "block_sparse_moe.gate.weight" [E, C]\n'
BIAS_PARAM = ROUTER_PARAM + '  param e_bias "block_sparse_moe.gate.e_score_correction_bias" [E] buffer\n'
GROUPED_GATES = "  gates = router(logits, top_k = K, bias = e_bias, groups = 2, top_groups = 1)\n"


def with_biases(W, seed=22):
    """W with every routing bias drawn from -0.3 to 0.3."""
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(-0.3, 0.3, w.shape).astype(np.float32) if n.endswith("e_score_correction_bias") else w
            for n, w in W.items()}


def routers(mtc, mtrun):
    """router's scores, selection bias, groups, scale and normalize in the tiny Mixtral: mtrun's first validation
    loss against numpy's, each routing moving numpy's loss from Mixtral's."""
    gates, param, bias, src = ROUTER_GATES, ROUTER_PARAM, BIAS_PARAM, open(MODEL).read()
    if not check(gates in src and param in src, f"{MODEL} still has the gates and router lines this check rewrites"):
        return
    forms = {
        "sigmoid, normalize, scale 2.5": (
            param, "  gates = router(logits, top_k = K, scores = sigmoid, normalize = true, scale = 2.5)\n",
            lambda W: route_sigmoid),
        "softmax before, bias, 1 of 2 groups": (bias, GROUPED_GATES, route_grouped),
        "sigmoid, top 1": (param, "  gates = router(logits, top_k = 1, scores = sigmoid)\n", lambda W: route_top1),
    }
    tokens, targets = val_tokens(T)
    for what, (decl, line, route) in forms.items():
        with tempfile.TemporaryDirectory() as tmp:
            model, planfile, wf = (os.path.join(tmp, n) for n in ("m.mt", "p.bin", "w.safetensors"))
            with open(model, "w") as f:
                f.write(src.replace(param, decl).replace(gates, line))
            W = with_biases(random_weights(mtc, model, 21))
            write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
            q = run(mtc, model, "-o", planfile, "--batch", "1", "--seq", T, "--target", "tiny-2layers")
            if not check(q.returncode == 0, f"mtc -o ({what})", q):
                continue
            got, _ = first_val_loss(mtrun, planfile, tmp, "--init", wf)
            want, _ = mixtral_loss(W, tokens, targets, route(W))
            plain, _ = mixtral_loss(W, tokens, targets)
            rel = abs(got - want) / abs(want) if got is not None else float("inf")
            check(rel <= 1e-5, f"{what}: mtrun's loss {got} against numpy's {want} ({rel:.1e}; 1e-5 allowed)")
            check(abs(plain - want) > 1e-4 * abs(want), f"{what}: numpy's loss {want} is Mixtral routing's {plain}")
            if decl == bias:  # the bias must matter too
                W0 = {n: np.zeros_like(w) if n.endswith("correction_bias") else w for n, w in W.items()}
                unbiased, _ = mixtral_loss(W0, tokens, targets, route(W0))
                check(abs(unbiased - want) > 1e-4 * abs(want), f"{what}: the bias does not move numpy's loss")
            print(f"{what}: mtrun {got:.9f}, numpy {want:.9f} ({rel:.1e} relative; Mixtral's routing {plain:.9f})")


def masked_data(raw, tmp):
    """The bytes as an llm.c token file X.bin with a loss mask X.mask (runtime/data.h) that excludes the first 12
    tokens and every third: its path and the mask."""
    mask = np.ones(len(raw), np.uint8)
    mask[:12], mask[::3] = 0, 0
    path = os.path.join(tmp, "masked.bin")
    for name, magic, body in ((path, 20240520, raw.astype("<u2")), (path[:-4] + ".mask", 20240902, mask)):
        head = np.zeros(256, "<i4")
        head[:3] = magic, 1, len(raw)
        with open(name, "wb") as f:
            f.write(head.tobytes() + body.tobytes())
    return path, mask


def hf(mtc, mtrun, masked=False):
    import torch
    T = 32
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    tokens, targets = raw[:T], raw[1:T + 1]  # the first training batch of batch 1 (no --shuffle)
    tmp_data = tempfile.TemporaryDirectory()
    data, mask = masked_data(raw, tmp_data.name) if masked else (DATA, None)
    labels = np.where(mask[1:T + 1] == 1, targets, -100) if masked else targets  # a target counts if its token does
    what = "mixtral-tiny pooled" + (f", {int((labels >= 0).sum())} of {T} targets counted" if masked else "")
    model = hf_mixtral(3)
    W = {}
    for name, t in model.state_dict().items():  # mt's names: transformers 5 fuses the experts
        a, name = t.detach().numpy().astype(np.float32), name.replace(".mlp.", ".block_sparse_moe.")
        if name.endswith("experts.gate_up_proj"):
            pre = name[: -len("gate_up_proj")]
            for e in range(E):
                W[f"{pre}{e}.w1.weight"], W[f"{pre}{e}.w3.weight"] = a[e, :a.shape[1] // 2], a[e, a.shape[1] // 2:]
        elif name.endswith("experts.down_proj"):
            for e in range(E):
                W[f"{name[: -len('down_proj')]}{e}.w2.weight"] = a[e]
        else:
            W[name] = a
    with torch.no_grad():  # the weights mt reads, in float64
        for name, p in model.named_parameters():
            p.copy_(p.float().double())
    out = model(torch.tensor(tokens[None]))
    ce = torch.nn.functional.cross_entropy(out.logits[0], torch.tensor(labels), ignore_index=-100)
    want = ce + AUX * out.aux_loss
    want.backward()
    routers = {n: p.grad.numpy() for n, p in model.named_parameters() if n.endswith("gate.weight")}
    text = open(MODEL).read()
    if not check("pooled = true" in text, f"{MODEL} pools its load-balancing loss"):
        return
    with tempfile.TemporaryDirectory() as tmp, tmp_data:
        got, grads = mt_step_grads(mtc, mtrun, text, W, tmp, T, data)
        per_layer = grads if masked else mt_step_grads(mtc, mtrun, text.replace("pooled = true", "pooled = false"),
                                                       W, tmp, T)[1]
    if got is None or per_layer is None:
        return
    want = float(want.detach())
    e = abs(got["loss"] - want) / want
    check(e <= 1e-5, f"{what}: step 1 loss {got['loss']} vs transformers' {want} ({e:.1e})")
    aux = float(out.aux_loss.detach())
    e_aux = abs(got["aux_loss"] - AUX * aux) / (AUX * aux)
    check(e_aux <= 1e-5, f"aux_loss {got['aux_loss']} vs transformers' {AUX * aux} ({e_aux:.1e})")
    print(f"{what}: loss {got['loss']:.9f} (ce {got['ce_loss']:.9f} + aux {got['aux_loss']:.9f}), "
          f"transformers' {want:.9f} (ce {float(ce):.9f} + {AUX} x {aux:.9f}): {e:.1e} relative, "
          f"aux {e_aux:.1e}")
    for n, g in routers.items():
        mine = grads[n.replace(".mlp.", ".block_sparse_moe.")]
        err = float(np.max(np.abs(mine - g)) / np.max(np.abs(g)))
        err0 = float(np.max(np.abs(per_layer[n.replace(".mlp.", ".block_sparse_moe.")] - g)) / np.max(np.abs(g)))
        check(err <= 1e-5, f"{what}: {n}: mt's gradient misses transformers' by {err:.2e} relative (limit 1e-5)")
        check(masked or err0 > 1e-3, f"{n}: per layer (pooled = false) the gradient misses by only {err0:.2e}")
        print(f"{'ok  ' if err <= 1e-5 and (masked or err0 > 1e-3) else 'FAIL'} {what}: {n}: gradient {err:.2e} "
              f"relative from transformers'" + ("" if masked else f"; per layer {err0:.2e}"))


# The stored forms: params (name, checkpoint name, shape), the moe call, and
# each tensor from one layer's per-expert w1 (gate), w3 (up) [E, F, C], w2 (down) [E, C, F].
LAYOUTS = {
    "[E, in, out]": (['w_gate "block_sparse_moe.experts.w1" [E, C, FFN]', 'w_up "block_sparse_moe.experts.w3" [E, C, FFN]',
                      'w_down "block_sparse_moe.experts.w2" [E, FFN, C]'],
                     "moe(m, gates, transpose(w_gate), transpose(w_up), transpose(w_down))",
                     lambda g, u, d: {"w1": g.transpose(0, 2, 1), "w3": u.transpose(0, 2, 1), "w2": d.transpose(0, 2, 1)},
                     "w_gate=[E,in,out] w_up=[E,in,out] w_down=[E,in,out]"),
    "halves [E, 2F, C]": (['w_gate_up "block_sparse_moe.experts.gate_up" [E, 2 * FFN, C]',
                           'w_down "block_sparse_moe.experts.down" [E, C, FFN]'],
                          "moe(m, gates, w_gate_up, w_down, gate_up = halves)",
                          lambda g, u, d: {"gate_up": np.concatenate([g, u], 1), "down": d}, "gate_up=halves"),
    "Llama 4": (['w_gate_up "block_sparse_moe.experts.gate_up_proj" [E, C, 2 * FFN]',
                 'w_down "block_sparse_moe.experts.down_proj" [E, FFN, C]'],
                "moe(m, gates, transpose(w_gate_up), transpose(w_down), gate_up = halves)",
                lambda g, u, d: {"gate_up_proj": np.concatenate([g, u], 1).transpose(0, 2, 1),
                                 "down_proj": d.transpose(0, 2, 1)},
                "gate_up=halves w_gate_up=[E,in,out] w_down=[E,in,out]"),
    "gpt-oss": (['w_gate_up "block_sparse_moe.experts.gate_up_proj" [E, C, 2 * FFN]',
                 'w_down "block_sparse_moe.experts.down_proj" [E, FFN, C]'],
                "moe(m, gates, transpose(w_gate_up), transpose(w_down), gate_up = interleaved)",
                lambda g, u, d: {"gate_up_proj": np.stack([g, u], 2).reshape(g.shape[0], -1, g.shape[2])
                                 .transpose(0, 2, 1), "down_proj": d.transpose(0, 2, 1)},
                "gate_up=interleaved w_gate_up=[E,in,out] w_down=[E,in,out]"),
}


def acts(mtc, ref, mtrun):
    """moe's act = gelu, gelu_tanh in the tiny Mixtral: the reference executor's loss (the plain kernels, float64)
    and mtrun's first validation loss (the f32 plan) against numpy's GeGLU, each moving numpy's loss from SwiGLU's."""
    call, src = "moe(m, gates, w_gate, w_up, w_down)", open(MODEL).read()
    if not check(call in src, f"{MODEL} still has the moe call this check rewrites"):
        return
    W = random_weights(mtc, MODEL, 14)
    tokens, targets = val_tokens(T)
    swiglu, _ = mixtral_loss(W, tokens, targets)
    for act in ("gelu", "gelu_tanh"):
        with tempfile.TemporaryDirectory() as tmp:
            model, planfile, wf, inf = (os.path.join(tmp, n) for n in ("m.mt", "p.bin", "w.safetensors", "in.i32"))
            with open(model, "w") as f:
                f.write(src.replace(call, call[:-1] + f", act = {act})"))
            write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
            np.concatenate([tokens, targets]).astype("<i4").tofile(inf)
            p = run(ref, model, wf, inf, "--batch", "1", "--seq", T)
            q = run(mtc, model, "-o", planfile, "--batch", "1", "--seq", T, "--target", "tiny-2layers")
            if not check(p.returncode == 0 and q.returncode == 0, f"ref_forward and mtc -o ({act})", p if p.returncode else q):
                continue
            got, _ = first_val_loss(mtrun, planfile, tmp, "--init", wf)
        plain = float(dict(line.split() for line in p.stdout.splitlines())["loss"])
        want, _ = mixtral_loss(W, tokens, targets, act=act)
        rel = abs(got - want) / abs(want) if got is not None else float("inf")
        check(abs(plain - want) <= 1e-9 * abs(want), f"act = {act}: reference executor's loss {plain} vs numpy {want}")
        check(rel <= 1e-5, f"act = {act}: mtrun's loss {got} against numpy's {want} ({rel:.1e}; 1e-5 allowed)")
        check(abs(swiglu - want) > 1e-4 * abs(want), f"act = {act}: numpy's loss {want} is SwiGLU's {swiglu}")
        print(f"act = {act}: reference executor {plain:.12f}, mtrun {got:.9f}, numpy {want:.12f} "
              f"({rel:.1e} relative; SwiGLU's {swiglu:.9f})")


def layout_model(params, call):
    """examples/mixtral-tiny.mt with its experts' params and moe call replaced."""
    text = open(MODEL).read()
    lines = [ln for ln in text.splitlines() if "block_sparse_moe.experts.{e}" not in ln]
    at = next(i for i, ln in enumerate(lines) if "block_sparse_moe.gate.weight" in ln) + 1
    lines[at:at] = ["  param " + p for p in params]
    text = "\n".join(lines) + "\n"
    check("moe(m, gates, w_gate, w_up, w_down)" in text, "the tiny Mixtral's moe call still reads as this check rewrites it")
    return text.replace("moe(m, gates, w_gate, w_up, w_down)", call)


def layout_weights(W, make):
    """W with each layer's per-expert tensors replaced by `make`'s stored ones."""
    out = {n: w for n, w in W.items() if ".experts." not in n}
    for i in range(L):
        p = f"model.layers.{i}.block_sparse_moe.experts."
        g, u, d = (np.stack([W[f"{p}{e}.{k}.weight"] for e in range(E)]) for k in ("w1", "w3", "w2"))
        out.update({p + k: np.ascontiguousarray(t) for k, t in make(g, u, d).items()})
    return out


def layouts(mtc, mtrun):
    W = random_weights(mtc, MODEL, 14)
    tokens, targets = val_tokens(T)
    want, _ = mixtral_loss(W, tokens, targets)
    with tempfile.TemporaryDirectory() as tmp:
        _, base = mt_step_grads(mtc, mtrun, open(MODEL).read(), W, tmp, T)
        for name, (params, call, make, form) in LAYOUTS.items():
            text, Wl = layout_model(params, call), layout_weights(W, make)
            model, wf, planfile = (os.path.join(tmp, n) for n in ("l.mt", "l.safetensors", "l.bin"))
            with open(model, "w") as f:
                f.write(text)
            dump = run(mtc, model, "--dump-graph").stdout
            block = dump[dump.index("block"):dump.index("tail")] if "tail" in dump else dump
            ids = re.findall(r"(%\d+) = param w_(?:gate|up|gate_up|down) ", block)  # the experts' weights
            readers = [ln.strip() for ln in block.splitlines() if " = moe" not in ln and
                       any(re.search(rf"[ ,]{i}(?!\d)", ln.split("=", 1)[-1]) for i in ids)]
            check(len(ids) == len(params) and not readers,
                  f"{name}: only moe reads the experts' weights {ids} (no transpose, slice or copy): {readers[:3]}")
            check(sum(f" {form} " in ln for ln in block.splitlines() if " = moe " in ln) == 1,
                  f"{name}: the block's moe reads {form}")
            write_safetensors(wf, [(n, "F32", w) for n, w in Wl.items()])
            q = run(mtc, model, "-o", planfile, "--batch", "1", "--seq", T, "--target", "tiny-2layers")
            if not check(q.returncode == 0, f"mtc -o the tiny Mixtral, {name}", q):
                continue
            got, _ = first_val_loss(mtrun, planfile, tmp, "--init", wf)
            check(got is not None and abs(got - want) <= 1e-5 * abs(want),
                  f"{name}: first validation loss {got} vs numpy {want}")
            _, grads = mt_step_grads(mtc, mtrun, text, Wl, tmp, T, out_name="o.safetensors")
            ref = layout_weights(base, make) if base else {}
            worst = max((float(np.max(np.abs(grads[n] - ref[n])) / np.max(np.abs(ref[n]))), n) for n in ref) \
                if grads and ref else (float("nan"), "?")
            check(worst[0] <= 1e-5, f"{name}: step-1 gradients vs the per-expert model's: worst {worst[0]:.1e} ({worst[1]})")
            print(f"mixtral-tiny, experts {name}: loss {got} (numpy {want:.9f}); gradients within {worst[0]:.1e} "
                  f"of the per-expert model's")
        swapped = LAYOUTS["gpt-oss"][1].replace("interleaved", "halves")  # so the check can fail
        text, Wl = layout_model(LAYOUTS["gpt-oss"][0], swapped), layout_weights(W, LAYOUTS["gpt-oss"][2])
        with open(model, "w") as f:
            f.write(text)
        write_safetensors(wf, [(n, "F32", w) for n, w in Wl.items()])
        q = run(mtc, model, "-o", planfile, "--batch", "1", "--seq", T, "--target", "tiny-2layers")
        other, _ = first_val_loss(mtrun, planfile, tmp, "--init", wf) if q.returncode == 0 else (None, None)
        check(other is not None and abs(other - want) > 1e-4 * abs(want),
              f"gpt-oss's tensors read as halves move the loss ({other} vs {want})")


def main():
    mode = sys.argv[1]
    if mode == "explain":
        explain(sys.argv[2])
        sys.exit(finish())
    if mode == "plan":
        plan(sys.argv[2])
        sys.exit(finish())
    mtc, ref, mtrun = sys.argv[2:5]
    if mode == "stats":
        stats(mtc, ref, mtrun)
        sys.exit(finish())
    if mode == "routers":
        routers(mtc, mtrun)
        sys.exit(finish())
    if mode == "layouts":
        layouts(mtc, mtrun)
        sys.exit(finish())
    if mode == "acts":
        acts(mtc, ref, mtrun)
        sys.exit(finish())
    if mode in ("hf", "hf_masked"):
        hf(mtc, mtrun, mode == "hf_masked")
        sys.exit(finish())
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
        planfile, out = os.path.join(tmp, "p.bin"), os.path.join(tmp, "out.safetensors")
        q = run(mtc, MODEL, "-o", planfile, "--batch", "1", "--seq", T, "--target", "tiny-2layers")
        check(q.returncode == 0, "mtc -o mixtral-tiny", q)
        plan_loss, q = first_val_loss(mtrun, planfile, tmp, "--init", wf, "--export", out)
        got_w = read_safetensors(out) if plan_loss is not None else {}
    check(sorted(got_w) == sorted(W), "the export names the tensors the model lists")
    for n in W:
        check(n in got_w and np.array_equal(got_w[n], W[n]), f"{n}: exported as loaded")
    if not check(p.returncode == 0, "ref_forward runs the tiny Mixtral", p):
        sys.exit(finish())
    got = dict(line.split() for line in p.stdout.splitlines())
    loss, aux = float(got["loss"]), float(got["aux"])
    want, want_aux = mixtral_loss(W, tokens, targets)
    check(abs(loss - want) <= 1e-5 * abs(want), f"mixtral-tiny loss {loss} vs numpy {want}")
    check(plan_loss is not None and abs(plan_loss - want) <= 1e-5 * abs(want),
          f"mixtral-tiny's plan: first validation loss {plan_loss} vs numpy {want}")
    check(abs(aux - want_aux) <= 1e-5 * abs(want_aux), f"mixtral-tiny auxiliary loss {aux} vs numpy {want_aux}")
    for routing, k in (("before", K), ("mixtral", 1)):
        other, _ = mixtral_loss(W, tokens, targets, routing, k)
        check(abs(other - want) > 1e-4 * abs(want), f"routing {routing}, top {k} moves numpy's loss ({other} vs {want})")
    print(f"mixtral-tiny: mtrun {plan_loss}, numpy {want:.9f} (relative {abs(plan_loss - want) / abs(want):.1e}); "
          f"reference executor {loss:.9f} (relative {abs(loss - want) / abs(want):.1e}); "
          f"auxiliary {aux:.9f}, numpy {want_aux:.9f} (relative {abs(aux - want_aux) / abs(want_aux):.1e})")
    sys.exit(finish())


if __name__ == "__main__":
    main()
