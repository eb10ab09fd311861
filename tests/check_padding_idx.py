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

usage: check_padding_idx.py MTC MTRUN
Run from the project root.
"""
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_weights import read_safetensors  # noqa: E402
from checks import run  # noqa: E402


def fail(msg, p=None):
    print("FAIL:", msg)
    if p is not None:
        print(p.stdout[-3000:], p.stderr[-3000:])
    sys.exit(1)


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


if __name__ == "__main__":
    main()
