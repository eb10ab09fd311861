#!/usr/bin/env python3
"""mtrun's cache of JIT-compiled kernels (runtime/backend/jit.c, common/cache.c) saves time and nothing else.

usage: check_jit_cache.py MTC MTRUN   (run from the project root)

With MT_CACHE_DIR set to a fresh folder, mtrun trains examples/llama-tiny.mt
for 3 steps and:
- the first run leaves one entry; a second run reads it (not rewritten:
  same inode) and gives the same losses;
- an entry with a flipped byte in its object code, or cut short, is not
  trusted: the losses are the first run's, and the entry is rewritten to
  the first run's bytes;
- another plan of other kernels (gpt2-tiny) gets an entry of its own;
  the f32 and the bf16 plan of one model get one each;
- MT_CACHE_DIR=off creates nothing, and gives the same losses.
"""
import glob
import os
import sys
import tempfile

from checks import check, finish, losses, run


def main():
    mtc, mtrun = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        os.mkdir(cache)

        def plan(model, *extra):
            out = os.path.join(tmp, os.path.basename(model) + "".join(extra) + ".bin")
            p = run(mtc, model, *extra, "-o", out)
            check(p.returncode == 0, f"mtc {model} failed", p)
            return out

        def train(plan_path, cache_dir=cache):
            log = os.path.join(tmp, "log.jsonl")
            env = dict(os.environ, MT_CACHE_DIR=cache_dir)
            p = run(mtrun, plan_path, "--steps", "3", "--val-batches", "0", "--log", log, env=env)
            check(p.returncode == 0, f"mtrun {plan_path} with MT_CACHE_DIR={cache_dir} failed", p)
            return losses(log) if p.returncode == 0 else []

        def entries():
            return sorted(glob.glob(os.path.join(cache, "jit-*.bin")))

        llama = plan("examples/llama-tiny.mt")
        first = train(llama)
        check(len(first) == 3, f"3 losses expected, got {first}")
        check(len(entries()) == 1, f"after one run the cache holds {entries()}")
        if len(entries()) != 1:
            return finish("jit cache checks")
        entry = entries()[0]
        good = open(entry, "rb").read()
        inode = os.stat(entry).st_ino
        check(train(llama) == first, "a run from the cache gives other losses")
        check(os.stat(entry).st_ino == inode, "a hit rewrote its entry")

        # a flipped byte in the object code (past the 24-byte header), then a cut entry
        damaged = bytearray(good)
        damaged[len(good) // 2] ^= 0x5A
        for what, data in (("a flipped byte", bytes(damaged)), ("a cut entry", good[: len(good) // 2])):
            with open(entry, "wb") as f:
                f.write(data)
            check(train(llama) == first, f"after {what} the losses differ")
            check(open(entry, "rb").read() == good, f"{what} was not rewritten to the first run's object")

        gpt2 = plan("examples/gpt2-tiny.mt")
        check(len(train(gpt2)) == 3, "gpt2-tiny did not train")
        check(len(entries()) == 2, f"another plan's kernels should make a second entry: {entries()}")
        bf16 = plan("examples/llama-tiny.mt", "--dtype", "bf16")
        check(len(train(bf16)) == 3, "llama-tiny bf16 did not train")
        check(len(entries()) == 3, f"the bf16 plan should make an entry of its own: {entries()}")

        before = sorted(os.listdir(cache))
        off = train(llama, cache_dir="off")
        check(off == first, f"MT_CACHE_DIR=off gives other losses: {off} against {first}")
        check(sorted(os.listdir(cache)) == before and not os.path.exists("off"), "MT_CACHE_DIR=off wrote something")
    return finish("jit cache checks")


if __name__ == "__main__":
    sys.exit(main())
