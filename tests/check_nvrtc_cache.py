#!/usr/bin/env python3
"""mtc's NVRTC compile cache (compiler/emit/nvrtc.c) saves time and nothing else.

usage: check_nvrtc_cache.py MTC   (run from the project root)

With MT_CACHE_DIR set to a fresh folder, mtc compiles examples/llama-tiny.mt
for h200 and:
- the first run leaves one entry; a second run reads it (the entry is not
  rewritten: same inode) and writes the same plan bytes;
- an entry with a flipped byte, or cut short, is not trusted: the plan is
  the same as the first, and the entry is rewritten whole;
- the cold compile prints its start (what, for which arch) and its time to
  stderr, a hit prints nothing;
- MT_CACHE_DIR=off creates nothing; an unusable folder (a file) is no error;
- past 1 GiB the least recently used entries go until 3/4 of it is left
  (sparse planted entries, so no disk is spent).
"""
import glob
import os
import re
import sys
import tempfile

from checks import check, finish, run


def main():
    mtc = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")

        def compile_plan(name, cache_dir=cache, model="examples/llama-tiny.mt", batch="2"):
            env = dict(os.environ, MT_CACHE_DIR=cache_dir)
            out = os.path.join(tmp, name)
            p = run(mtc, model, "--target", "h200", "--batch", batch, "-o", out, env=env)
            check(p.returncode == 0, f"mtc with MT_CACHE_DIR={cache_dir} failed", p)
            said.append(p.stderr)
            return open(out, "rb").read() if p.returncode == 0 else b""

        said = []  # each compile's stderr

        def entries():
            return sorted(glob.glob(os.path.join(cache, "nvrtc-*.bin")))

        first = compile_plan("a.bin")
        check(len(entries()) == 1, f"after one compile the cache holds {entries()}")
        if len(entries()) != 1:
            return finish()
        entry = entries()[0]
        inode = os.stat(entry).st_ino
        check(compile_plan("b.bin") == first, "the plan from the cache differs from the compiled one")
        check(os.stat(entry).st_ino == inode, "a cache hit rewrote its entry (was it read?)")
        # a cold compile says what it compiles when it starts and its time when done; a hit says nothing
        check(re.search(r"mtc: NVRTC [0-9.]+ compiling mt.cu for sm_90 \([0-9]+ lines of CUDA C, not in the compile "
                        r"cache\)\.\.\.\nmtc: NVRTC compiled mt.cu for sm_90 in [0-9.]+ s\n", said[0]) is not None,
              f"a cold compile says so on stderr: {said[0]!r}")
        check(said[1] == "", f"a cache hit prints nothing: {said[1]!r}")

        size = os.path.getsize(entry)
        # a flipped byte in the middle of the payload, in place (same inode)
        with open(entry, "r+b") as f:
            f.seek(size // 2)
            b = f.read(1)
            f.seek(size // 2)
            f.write(bytes([b[0] ^ 0x40]))
        check(compile_plan("c.bin") == first, "a damaged cache entry changed the plan")
        check(os.stat(entry).st_ino != inode, "a damaged cache entry was not rewritten")
        check(open(entry, "rb").read() != b"" and os.path.getsize(entry) == size, "the rewritten entry is not whole")
        inode = os.stat(entry).st_ino
        os.truncate(entry, size - 100)
        check(compile_plan("d.bin") == first, "a cut cache entry changed the plan")
        check(os.path.getsize(entry) == size and os.stat(entry).st_ino != inode, "a cut cache entry was not rewritten")

        env_before = set(os.listdir(tmp))
        check(compile_plan("e.bin", cache_dir="off") == first, "MT_CACHE_DIR=off changed the plan")
        check(set(os.listdir(tmp)) - env_before == {"e.bin"}, f"MT_CACHE_DIR=off wrote {set(os.listdir(tmp)) - env_before}")
        a_file = os.path.join(tmp, "a.bin")
        check(compile_plan("f.bin", cache_dir=a_file) == first, "a cache folder that is a file changed the plan")

        # eviction: three planted 400 MB entries, oldest first, then a new compile (a miss)
        planted = []
        for i in range(3):
            path = os.path.join(cache, f"nvrtc-planted{i}.bin")
            with open(path, "wb") as f:
                f.truncate(400 << 20)
            os.utime(path, (1000 + i, 1000 + i))
            planted.append(path)
        compile_plan("g.bin", batch="3")
        left = [os.path.exists(p) for p in planted]
        check(left == [False, False, True], f"after the cache passed 1 GiB the planted entries left are {left}; "
                                            "the two least recently used should have gone")
        check(os.path.exists(entry) and len(entries()) == 3, f"the cache after trimming holds {entries()}")
    return finish("NVRTC cache checks")


if __name__ == "__main__":
    sys.exit(main())
