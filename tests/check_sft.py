#!/usr/bin/env python3
"""Data as SFT recipes need it (mtrun --shuffle).

usage: check_sft.py MTC MTRUN MODE     (from the project root)
  shuffle  --shuffle: 12 steps straight, and 5, a stop, and the rest
           resumed, give the same losses bit for bit (the order survives
           the checkpoint); they differ from the unshuffled run's; another
           seed's order differs; a shuffled checkpoint resumed without
           --shuffle (and the other way round) is refused naming the flag
           (tests/test_data.c: every window once an epoch, in new orders)
  packed   a row packing two conversations A and B (X.docs marks where
           each starts, X.mask counts B's targets) gives B's per-token
           losses of the row holding B alone (logits through --logits, to
           1e-5: rope turns the shifted positions into rounding), at the
           start and after 3 steps trained on B (the backward keeps A out
           of B's gradients too); without X.docs they differ; --logits says
           it attends within documents, and --logits-full-rows gives the
           logits of the row without X.docs (a plain forward, to 1e-5)
"""
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, losses, run  # noqa: E402


def shuffle(mtc, mtrun, tmp):
    j = lambda *p: os.path.join(tmp, *p)
    pl = j("l.bin")
    p = run(mtc, "examples/llama-tiny.mt", "--batch", "2", "--seq", "32", "-o", pl)
    check(p.returncode == 0, "mtc llama-tiny", p)
    common = ["--val-every", "4", "--val-batches", "1"]
    p = run(mtrun, pl, "--steps", "12", "--shuffle", "--log", j("straight.jsonl"), *common)
    check(p.returncode == 0 and "windows shuffled every epoch" in p.stdout, "12 shuffled steps", p)
    p = run(mtrun, pl, "--steps", "5", "--shuffle", "--save", j("ck"), "--log", j("part.jsonl"), *common)
    check(p.returncode == 0, "5 shuffled steps, saved", p)
    p = run(mtrun, pl, "--steps", "12", "--shuffle", "--resume", j("ck"), "--save", j("ck"), "--log", j("part.jsonl"),
            *common)
    check(p.returncode == 0, "resumed to 12", p)
    a, b = losses(j("straight.jsonl")), losses(j("part.jsonl"))
    check(len(a) == 12 and a == b, f"shuffled data resumes to the straight run's losses: {a[4:7]} vs {b[4:7]}")
    p = run(mtrun, pl, "--steps", "12", "--log", j("plain.jsonl"), *common)
    c = losses(j("plain.jsonl"))
    check(p.returncode == 0 and len(c) == 12 and c != a, "the unshuffled run's losses differ", p)
    p = run(mtrun, pl, "--steps", "12", "--shuffle", "--seed", "7", "--log", j("seed7.jsonl"), *common)
    p2 = run(mtrun, pl, "--steps", "12", "--seed", "7", "--log", j("seed7p.jsonl"), *common)
    check(losses(j("seed7.jsonl"))[1:] != losses(j("seed7p.jsonl"))[1:], "another seed shuffles too", p)
    p = run(mtrun, pl, "--steps", "12", "--resume", j("ck"), "--log", j("x.jsonl"), *common)
    check(p.returncode == 1 and "--shuffle" in p.stderr, "a shuffled checkpoint resumed without --shuffle is refused", p)
    p = run(mtrun, pl, "--steps", "3", "--save", j("ck2"), "--log", j("y.jsonl"), *common)
    p = run(mtrun, pl, "--steps", "6", "--shuffle", "--resume", j("ck2"), "--log", j("y.jsonl"), *common)
    check(p.returncode == 1 and "--shuffle" in p.stderr, "an unshuffled checkpoint resumed with --shuffle is refused", p)


def write_row(prefix, toks, starts, counted):
    """An llm.c token file with its document starts and loss mask."""
    def put(path, magic, data, dtype):
        h = np.zeros(256, "<i4")
        h[0], h[1], h[2] = magic, 1, len(data)
        open(path, "wb").write(h.tobytes() + np.asarray(data, dtype).tobytes())
    put(prefix + ".bin", 20240520, toks, "<u2")
    put(prefix + ".docs", 20241205, [int(i in starts) for i in range(len(toks))], "u1")
    put(prefix + ".mask", 20240902, [int(i in counted) for i in range(len(toks))], "u1")


def token_losses(prefix):
    tokens, logits = np.load(prefix + ".tokens.npy")[0], np.load(prefix + ".logits.npy")[0].astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return tokens, lse[:-1] - logits[np.arange(len(tokens) - 1), tokens[1:]]  # position t predicts token t+1


def packed(mtc, mtrun, tmp):
    j = lambda *p: os.path.join(tmp, *p)
    pl = j("b1.bin")
    p = run(mtc, "examples/llama-tiny.mt", "--batch", "1", "--seq", "32", "-o", pl)
    check(p.returncode == 0, "mtc llama-tiny, batch 1", p)
    rng = np.random.default_rng(3)
    A, B = list(rng.integers(1, 256, 10)), list(rng.integers(1, 256, 17))
    filler = list(rng.integers(1, 256, 33))
    # the packed row: A, B, then a third document; alone: B, then that filler
    write_row(j("pack"), A + B + filler[:33 - 27], {0, 10, 27}, set(range(11, 27)))
    write_row(j("alone"), B + filler[:33 - 17], {0, 17}, set(range(1, 17)))
    got = {}
    for name in ("pack", "alone"):
        for steps in ("0", "3"):
            p = run(mtrun, pl, "--data", j(name + ".bin"), "--val-data", j(name + ".bin"), "--steps", steps,
                    "--val-batches", "1", "--logits", j(f"{name}{steps}"), "--log", j("l.jsonl"))
            check(p.returncode == 0 and ("3 documents" in p.stdout or "2 documents" in p.stdout),
                  f"{name}, {steps} steps, --logits", p)
            got[name, steps] = token_losses(j(f"{name}{steps}"))[1] if p.returncode == 0 else np.zeros(32)
    for steps in ("0", "3"):
        a, b = got["pack", steps][10:26], got["alone", steps][0:16]  # B's tokens predicting B's next
        err = float(np.abs(a - b).max() / np.abs(b).max())
        check(err <= 1e-5, f"{steps} steps: B's per-token losses packed after A and alone: {err:.2e} relative")
        print(f"{steps} steps: B's 16 per-token losses packed and alone agree to {err:.2e} (e.g. {a[:3]} vs {b[:3]})")
    # the logits say they attend within documents; --logits-full-rows gives a plain forward over the whole row
    p = run(mtrun, pl, "--data", j("pack.bin"), "--val-data", j("pack.bin"), "--steps", "0", "--val-batches", "1",
            "--logits", j("full"), "--logits-full-rows", "--log", j("l.jsonl"))
    full = token_losses(j("full"))[1] if p.returncode == 0 else np.zeros(32)
    check(p.returncode == 0 and "attention over each whole row (--logits-full-rows)" in p.stdout,
          "--logits-full-rows says what it computed", p)
    check("attention within each document of a row (X.docs)" in run(
        mtrun, pl, "--data", j("pack.bin"), "--val-data", j("pack.bin"), "--steps", "0", "--val-batches", "1",
        "--logits", j("docs"), "--log", j("l.jsonl")).stdout, "--logits says it attends within each document")
    shutil.move(j("pack.docs"), j("pack.docs.off"))
    p = run(mtrun, pl, "--data", j("pack.bin"), "--val-data", j("pack.bin"), "--steps", "0", "--val-batches", "1",
            "--logits", j("nodocs"), "--log", j("l.jsonl"))
    c = token_losses(j("nodocs"))[1][10:26] if p.returncode == 0 else np.zeros(16)
    check(p.returncode == 0 and np.abs(c - got["alone", "0"][0:16]).max() > 1e-3,
          "without pack.docs, B attends to A: its losses differ", p)
    err = float(np.abs(full[10:26] - c).max() / np.abs(c).max())
    check(err <= 1e-5, f"--logits-full-rows with pack.docs equals the row without it: {err:.2e} relative")


def main():
    mtc, mtrun, mode = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        {"shuffle": shuffle, "packed": packed}[mode](mtc, mtrun, tmp)
    sys.exit(finish(f"sft {mode} checks"))


if __name__ == "__main__":
    main()
