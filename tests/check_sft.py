#!/usr/bin/env python3
"""Data as SFT recipes need it (mtrun --shuffle).

usage: check_sft.py MTC MTRUN MODE     (from the project root)
  shuffle  --shuffle: 12 steps straight, and 5, a stop, and the rest
           resumed, give the same losses bit for bit (the order survives
           the checkpoint); they differ from the unshuffled run's; another
           seed's order differs; a shuffled checkpoint resumed without
           --shuffle (and the other way round) is refused naming the flag
           (tests/test_data.c: every window once an epoch, in new orders)
"""
import os
import sys
import tempfile

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


def main():
    mtc, mtrun, mode = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        {"shuffle": shuffle}[mode](mtc, mtrun, tmp)
    sys.exit(finish(f"sft {mode} checks"))


if __name__ == "__main__":
    main()
