#!/usr/bin/env python3
"""embed(table, idx, padding_idx = P): the padding row takes no gradient from
the lookup (Hugging Face's nn.Embedding(padding_idx), Gemma's pad token 0).

llama-tiny (its LM head untied, so the lookup is the table's only use) with
padding_idx = 0 and no weight decay trains 3 steps on tokens a fifth of
which are 0: row 0 of the exported table equals the initial one, bit for bit,
and every other row that the data holds has moved; on the cpu backend (the
fused kernels, f32 and bf16) and on the reference executor (the plain
kernels). Without padding_idx, the same run moves row 0 (so the data does
reach it).

Gemma (examples/gemma2-tiny.mt, padding_idx = 0 as Gemma declares, its LM
head tied to the table): there the pad row does get a gradient, the head's,
in transformers too; the lookup adds nothing to it. mt's f32 plan takes one
step from random weights on tokens a quarter of which are 0, batch 1; its
gradient of the table (read off an AdamW step with betas (0, 0), eps 1e6,
lr 1e12, no decay or clipping: the update lr g / (|g| + eps), inverted)
must equal transformers' Gemma2ForCausalLM's (the same weights through mt's
--export folder, float64, eager, nn.Embedding(padding_idx = 0)) to 1e-5
relative over the whole table and over row 0 alone; the row-0 gradient
transformers gives without padding_idx (the lookup's part added) must miss
mt's by more than 1e-3, so the check sees the padding. The same Gemma with
its own untied LM head: row 0 takes exactly no update.

usage: check_padding_idx.py MTC MTRUN
Run from the project root.
"""
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_weights import read_safetensors, write_safetensors  # noqa: E402
from checks import fail, run  # noqa: E402


def main():
    mtc, mtrun = sys.argv[1:3]
    src = open("examples/llama-tiny.mt").read()
    if "embed(tok_emb, tokens)" not in src:
        fail("examples/llama-tiny.mt no longer looks up embed(tok_emb, tokens)")
    src = src.replace('data = "data/tinyshakespeare.txt"', "").replace("weight_decay = 0.1", "weight_decay = 0")
    rng = np.random.default_rng(5)
    tokens = rng.integers(1, 256, 20000)
    tokens[rng.random(tokens.size) < 0.2] = 0
    seen = np.unique(tokens[: 3 * 16 * 64 + 1])
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.bin")
        with open(data, "wb") as f:  # llm.c's token file: 256 int32 of header, then uint16 tokens
            f.write(struct.pack("<256i", 20240520, 1, tokens.size, *([0] * 253)))
            f.write(tokens.astype("<u2").tobytes())
        for padded in (True, False):
            model = os.path.join(tmp, "m.mt")
            with open(model, "w") as f:
                f.write(src.replace("embed(tok_emb, tokens)", "embed(tok_emb, tokens, padding_idx = 0)") if padded else src)
            for dtype, extra in (("f32", []), ("bf16", []), ("f32", ["--reference"])):
                if not padded and (dtype, extra) != ("f32", []):
                    continue
                what = f"padding_idx {'0' if padded else 'none'} --dtype {dtype} {' '.join(extra)}"
                plan = os.path.join(tmp, "p.bin")
                p = run(mtc, model, "--dtype", dtype, "-o", plan)
                if p.returncode != 0:
                    fail(f"mtc ({what}) failed", p)
                tables = []
                for steps in (0, 3):
                    out = os.path.join(tmp, f"w{steps}.safetensors")
                    p = run(mtrun, plan, "--steps", steps, "--data", data, "--val-data", data, "--export", out,
                            "--log", os.path.join(tmp, "l.jsonl"), *extra)
                    if p.returncode != 0:
                        fail(f"mtrun ({what}, {steps} steps) failed", p)
                    tables.append(read_safetensors(out)["model.embed_tokens.weight"])
                moved = np.any(tables[0] != tables[1], axis=1)
                if padded and moved[0]:
                    fail(f"{what}: row 0 moved by {np.abs(tables[1][0] - tables[0][0]).max():.3g}")
                if not padded and not moved[0]:
                    fail(f"{what}: row 0 did not move without padding_idx; the test's data does not reach it")
                if not moved[seen[seen != 0]].all():
                    fail(f"{what}: rows {np.flatnonzero(~moved[seen])} of the data did not move")
                print(f"ok: {what}: row 0 {'unchanged' if padded else 'moved'}, the other {len(seen) - 1} rows "
                      f"of the data moved")


def gemma_step(mtc, mtrun, text, W, data, tmp, T, export_init=None):
    """One step of the Gemma text from weights W on the token file data (batch 1, seq T): the table's gradient,
    read off the AdamW update; export_init: also --export the initial weights there (config.json with them)."""
    lr, eps = 1e12, 1e6
    text = text.replace('data = "data/tinyshakespeare.txt"', "")
    text = text.replace("optimizer = adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1)",
                        f"optimizer = adamw(betas = (0, 0), weight_decay = 0, eps = {eps:g})")
    text = text.replace("schedule = cosine(warmup = 20, min_lr = 0.1)", "schedule = constant").replace("clip = 1.0", "clip = 0")
    if "schedule = constant" not in text or "clip = 0" not in text or "eps = " not in text:
        fail("examples/gemma2-tiny.mt's train section no longer reads as this check rewrites it")
    model, wf, plan, out = (os.path.join(tmp, n) for n in ("g.mt", "g.safetensors", "g.bin", "g-out"))
    with open(model, "w") as f:
        f.write(text)
    write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
    p = run(mtc, model, "-o", plan, "--batch", 1, "--seq", T, "--target", "tiny-2layers", "--dtype", "f32")
    if p.returncode != 0:
        fail("mtc of the tiny Gemma failed", p)
    if export_init:
        p = run(mtrun, plan, "--steps", 0, "--init", wf, "--export", export_init, "--no-save", "--val-batches", 0,
                "--dtype", "fp32", "--data", data, "--log", os.path.join(tmp, "g0.jsonl"))
        if p.returncode != 0:
            fail("mtrun --export of the tiny Gemma's initial weights failed", p)
    p = run(mtrun, plan, "--steps", 1, "--init", wf, "--export", out, "--no-save", "--val-batches", 0, "--dtype",
            "fp32", "--data", data, "--lr", f"{lr:g}", "--log", os.path.join(tmp, "g1.jsonl"))
    if p.returncode != 0:
        fail("mtrun: one step of the tiny Gemma failed", p)
    got = read_safetensors(next(os.path.join(out, n) for n in sorted(os.listdir(out)) if n.endswith(".safetensors")))
    name = "model.embed_tokens.weight"
    u = W[name].astype(np.float64) - got[name].astype(np.float64)  # lr g / (|g| + eps)
    return u * eps / (lr - np.abs(u)), got[name]


def gemma(mtc, mtrun):
    import torch
    from transformers import AutoModelForCausalLM
    T = 32
    src = open("examples/gemma2-tiny.mt").read()
    if "embed(tok_emb, tokens, padding_idx = 0)" not in src or "@ transpose(tok_emb) # tied LM head" not in src:
        fail("examples/gemma2-tiny.mt no longer looks up embed(tok_emb, tokens, padding_idx = 0) with a tied head")
    d = json.loads(run(mtc, "examples/gemma2-tiny.mt", "--json").stdout)
    rng = np.random.default_rng(9)
    W = {t["name"]: (rng.standard_normal(t["shape"]) * (0.2 if len(t["shape"]) == 1 else 0.1)).astype(np.float32)
         for t in d["params"]}
    tokens = rng.integers(1, 256, 4096)
    tokens[rng.random(tokens.size) < 0.25] = 0
    x, y = tokens[:T], tokens[1:T + 1]  # the first batch of batch 1
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "tokens.bin")
        with open(data, "wb") as f:  # llm.c's token file: 256 int32 of header, then uint16 tokens
            f.write(struct.pack("<256i", 20240520, 1, tokens.size, *([0] * 253)))
            f.write(tokens.astype("<u2").tobytes())
        folder = os.path.join(tmp, "hf")
        g_mt, _ = gemma_step(mtc, mtrun, src, W, data, tmp, T, export_init=folder)
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        want = {}
        for padding in (0, None):
            m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, local_files_only=True,
                                                     attn_implementation="eager")
            emb = m.get_input_embeddings()
            if padding == 0 and emb.padding_idx != 0:
                fail(f"transformers' {type(m).__name__} from mt's export has padding_idx {emb.padding_idx}, not 0")
            emb.padding_idx = padding
            if m.get_output_embeddings().weight is not emb.weight:
                fail("transformers' Gemma from mt's export does not tie its head")
            logits = m(torch.tensor(x[None])).logits[0]
            torch.nn.functional.cross_entropy(logits, torch.tensor(y)).backward()
            want[padding] = emb.weight.grad.numpy()
        rel = lambda a, b: float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
        e, e0, miss = rel(g_mt, want[0]), rel(g_mt[0], want[0][0]), rel(g_mt[0], want[None][0])
        ok = e <= 1e-5 and e0 <= 1e-5 and miss > 1e-3
        print(f"{'ok' if ok else 'FAIL'}: gemma2-tiny (tied, padding_idx 0): the table's gradient {e:.2e} relative "
              f"from transformers', row 0 (the head's part only) {e0:.2e}; transformers without padding_idx "
              f"misses row 0 by {miss:.2e}")
        if not ok:
            sys.exit(1)
        untied = src.replace("@ transpose(tok_emb) # tied LM head", "@ transpose(lm_head)").replace(
            'param norm "model.norm.weight" [C] init = zeros',
            'param norm "model.norm.weight" [C] init = zeros\nparam lm_head "lm_head.weight" [V, C]')
        W["lm_head.weight"] = (rng.standard_normal(W["model.embed_tokens.weight"].shape) * 0.1).astype(np.float32)
        g, table = gemma_step(mtc, mtrun, untied, W, data, tmp, T)
        seen = np.unique(x[x != 0])
        if not np.array_equal(table[0], W["model.embed_tokens.weight"][0]) or not np.all(g[seen] != 0):
            fail(f"gemma2-tiny untied: row 0 moved ({np.abs(g[0]).max():.3g}) or a row of the data did not")
        print(f"ok: gemma2-tiny untied: row 0 takes no update, bit for bit; the {len(seen)} other rows of the "
              "batch's tokens moved")


if __name__ == "__main__":
    main()
    gemma(sys.argv[1], sys.argv[2])
