#!/usr/bin/env python3
"""The NVMe tier (mtrun --tier-dir, runtime/store/tier.c) on the cpu backend, on a
file in a temporary directory:

- llama-tiny, gpt2-tiny (fp32 and bf16), llama-tiny with accumulate = 2 and
  an 8-layer llama-tiny in bf16 planned with the fp32 master on the tier
  too (tests/tiny-tier-master.target, tier=master), and the same in bf16
  and f32 planned with the gradients there too (tests/tiny-tier-grads.target,
  tier=grads, as llama3-405b on h200 plans) train 20 steps with the
  tier to the same losses and the same checkpoint (weights and both Adam
  moments, byte for byte) as without it; the master plan's step 10 resumes
  both ways, --init into it trains as into RAM, and its --export is refused
  up front; the grads plan, killed (SIGKILL) during a tier write after step
  10, resumes to the straight run's step 20;
- a checkpoint resumes into either: RAM -> tier and tier -> RAM, 10 + 10
  steps, equal to 20 straight;
- faults, each leaving the last checkpoint intact and resumable (to the
  straight run's bits) with a clear message: kill -9 during a tier write
  (MT_TIER_KILL_AT_WRITE), a short write (MT_TIER_SHORT_WRITE), the tier file
  truncated behind mtrun's back (the process stopped, the file cut, the
  process continued), a full disk at preallocation (a file size limit,
  RLIMIT_FSIZE, under which fallocate fails as on a full disk), and too
  little free space, refused before fallocate (an 8 KiB tmpfs mounted in a
  private mount namespace with unshare -rm; a note where that is not allowed);
- the tier file is scratch: removed at exit, and one a killed run left is
  never taken for a checkpoint; a missing --tier-dir and one in use are refused.

usage: check_tier.py MTC MTRUN    (from the project root)
"""
import fcntl
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checks import check, finish, losses, run

COMMON = ["--val-every", "1000", "--val-batches", "1", "--threads", "2",
          "--data", os.path.abspath("examples/data/tinyshakespeare.txt")]


def same(a, b):
    return os.path.exists(a) and os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read()


def ckpt(d, step):
    return os.path.join(d, f"step-{step:09d}.ckpt")


def main():
    mtc, mtrun = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as t:
        j = lambda *p: os.path.join(t, *p)
        tier = j("tier")
        os.mkdir(tier)
        acc_src = open("examples/llama-tiny.mt").read().replace("  batch = 16", "  batch = 8\n  accumulate = 2")
        open(j("llama-acc.mt"), "w").write(acc_src)
        # an 8-layer llama-tiny in bf16 that tests/tiny-tier-master.target's host memory plans with the
        # fp32 master on the tier too (tier=master)
        l8 = open("examples/llama-tiny.mt").read().replace("  L = 2                # layers", "  L = 8                # layers")
        open(j("l8.mt"), "w").write(l8)
        plans = {"llama": ["examples/llama-tiny.mt"], "gpt2": ["examples/gpt2-tiny.mt"],
                 "gpt2-bf16": ["examples/gpt2-tiny.mt", "--dtype", "bf16"], "llama-acc": [j("llama-acc.mt")],
                 "l8-master": [j("l8.mt"), "--dtype", "bf16", "--target", "tests/tiny-tier-master.target"],
                 "l8-grads": [j("l8.mt"), "--dtype", "bf16", "--target", "tests/tiny-tier-grads.target"],
                 "l8-grads-f32": [j("l8.mt"), "--target", "tests/tiny-tier-grads.target"]}
        for name, args in plans.items():
            p = run(mtc, *args, "-o", j(name + ".bin"))
            check(p.returncode == 0, f"mtc {name}", p)

        # 20 steps in RAM against 20 steps with the tier
        for name in plans:
            plan, ram, tr = j(name + ".bin"), j(name + "-ram"), j(name + "-tier")
            p = run(mtrun, plan, "--steps", "20", "--save", ram, "--save-every", "10", "--log", ram + ".jsonl", *COMMON)
            check(p.returncode == 0, f"{name}: 20 steps in RAM", p)
            p = run(mtrun, plan, "--steps", "20", "--save", tr, "--save-every", "10", "--log", tr + ".jsonl",
                    "--tier-dir", tier, *COMMON)
            check(p.returncode == 0 and "tier     " + os.path.join(tier, "mtrun.tier") in p.stdout,
                  f"{name}: 20 steps with the tier, named in the banner", p)
            if name == "l8-master":
                check("tier=master" in p.stdout and "Adam moments and fp32 master" in p.stdout,
                      "l8-master: the plan puts the master on the tier, and mtrun keeps it there", p)
            if name.startswith("l8-grads"):
                kept = "Adam moments, fp32 master and gradients" if name == "l8-grads" else "Adam moments and gradients"
                check("tier=grads" in p.stdout and kept in p.stdout,
                      f"{name}: the plan puts the gradients on the tier, and mtrun keeps them there", p)
            la, lb = losses(ram + ".jsonl"), losses(tr + ".jsonl")
            check(len(la) == 20 and la == lb, f"{name}: losses bit for bit:\n    {la}\n    {lb}")
            for s in (10, 20):
                check(same(ckpt(ram, s), ckpt(tr, s)), f"{name}: step {s}'s weights and both moments bit for bit")
            check(os.listdir(tier) == [], f"{name}: the tier file is removed at exit: {os.listdir(tier)}")

        plan, straight = j("llama.bin"), j("llama-ram")

        def from_step10(name):  # a checkpoint directory holding the straight run's step 10 only
            d = j(name)
            os.mkdir(d)
            shutil.copy(ckpt(straight, 10), d)
            return d

        # a checkpoint resumes into either
        d = from_step10("ram-to-tier")
        p = run(mtrun, plan, "--steps", "20", "--resume", d, "--save", d, "--save-every", "10", "--tier-dir", tier,
                "--log", j("x.jsonl"), *COMMON)
        check(p.returncode == 0 and same(ckpt(d, 20), ckpt(straight, 20)), "a RAM checkpoint resumed with the tier", p)
        d = j("tier-to-ram")
        p = run(mtrun, plan, "--steps", "10", "--schedule-steps", "20", "--save", d, "--save-every", "10",
                "--tier-dir", tier, "--log", j("x.jsonl"), *COMMON)  # (the first half of a 20-step run)
        check(p.returncode == 0, "10 steps with the tier", p)
        p = run(mtrun, plan, "--steps", "20", "--resume", d, "--save", d, "--save-every", "10", "--log", j("x.jsonl"), *COMMON)
        check(p.returncode == 0 and same(ckpt(d, 20), ckpt(straight, 20)), "a tier checkpoint resumed in RAM", p)

        # the same both ways with the master on the tier
        for src, dst, tier_first in (("l8-master-ram", "master-ram-to-tier", False), ("l8-master-tier", "master-tier-to-ram", True)):
            d = j(dst)
            os.mkdir(d)
            shutil.copy(ckpt(j(src), 10), d)
            p = run(mtrun, j("l8-master.bin"), "--steps", "20", "--resume", d, "--save", d, "--save-every", "10",
                    "--log", j("x.jsonl"), *([] if tier_first else ["--tier-dir", tier]), *COMMON)
            check(p.returncode == 0 and same(ckpt(d, 20), ckpt(j("l8-master-ram"), 20)),
                  f"{dst}: step 10 resumes to the straight run's step 20", p)
        # the gradients on the tier: killed (SIGKILL) during a tier write after step 10, resumed to the straight
        # run's step 20 (each step writes every layer's record twice: its gradients at the norm, its update)
        d = j("grads-kill")
        os.mkdir(d)
        shutil.copy(ckpt(j("l8-grads-ram"), 10), d)
        env = dict(os.environ, MT_TIER_KILL_AT_WRITE="70")
        p = run(mtrun, j("l8-grads.bin"), "--steps", "20", "--resume", d, "--save", d, "--save-every", "15",
                "--tier-dir", tier, "--log", j("x.jsonl"), *COMMON, env=env)
        check(p.returncode == -signal.SIGKILL and "step     12/20" in p.stdout and "step     15/20" not in p.stdout,
              "l8-grads: killed (SIGKILL) during a tier write in step 12 to 14", p)
        check(sorted(os.listdir(d)) == ["step-000000010.ckpt"], f"l8-grads: step 10 is the last checkpoint: {os.listdir(d)}")
        p = run(mtrun, j("l8-grads.bin"), "--steps", "20", "--resume", d, "--save", d, "--save-every", "10",
                "--tier-dir", tier, "--log", j("x.jsonl"), *COMMON)
        check(p.returncode == 0 and same(ckpt(d, 20), ckpt(j("l8-grads-ram"), 20)),
              "l8-grads: step 10 resumes after the kill to the straight run's step 20 in RAM", p)

        # --init into the master on the tier (a tensor at a time through store_put): the same losses as into RAM
        p = run(mtrun, j("l8-master.bin"), "--steps", "2", "--export", j("w.safetensors"), "--log", j("x.jsonl"), *COMMON)
        check(p.returncode == 0, "l8-master: export in RAM", p)
        for where in ("ram", "tier"):
            p = run(mtrun, j("l8-master.bin"), "--steps", "3", "--init", j("w.safetensors"), "--log", j(f"init-{where}.jsonl"),
                    *(["--tier-dir", tier] if where == "tier" else []), *COMMON)
            check(p.returncode == 0, f"l8-master: --init into {where}", p)
        a, b = losses(j("init-ram.jsonl")), losses(j("init-tier.jsonl"))
        check(len(a) == 3 and a == b, f"l8-master: --init into the tier trains as into RAM: {a} {b}")
        p = run(mtrun, j("l8-master.bin"), "--steps", "1", "--tier-dir", tier, "--export", j("x.safetensors"),
                "--log", j("x.jsonl"), *COMMON)
        check(p.returncode == 1 and "--export with the fp32 master on the NVMe tier" in p.stderr
              and "step " not in p.stdout, "--export with the master on the tier: refused before training", p)

        def resumes(d, what):  # the last checkpoint is step 10 and resumes to the straight run's step 20
            check(sorted(os.listdir(d)) == ["step-000000010.ckpt"], f"{what}: step 10 is the last checkpoint: {os.listdir(d)}")
            p = run(mtrun, plan, "--steps", "20", "--resume", d, "--save", d, "--save-every", "10",
                    "--tier-dir", tier, "--log", j("x.jsonl"), *COMMON)
            check(p.returncode == 0 and same(ckpt(d, 20), ckpt(straight, 20)),
                  f"{what}: step 10 resumes to the straight run's step 20", p)

        # kill -9 during a tier write (resuming writes 4 requests, each step 2: the 11th is in step 14)
        d = from_step10("kill")
        env = dict(os.environ, MT_TIER_KILL_AT_WRITE="11")
        p = run(mtrun, plan, "--steps", "20", "--resume", d, "--save", d, "--save-every", "15", "--tier-dir", tier,
                "--log", j("x.jsonl"), *COMMON, env=env)
        check(p.returncode == -signal.SIGKILL, "killed (SIGKILL) during a tier write", p)
        check(os.listdir(tier) == ["mtrun.tier"], f"the killed run left its tier file: {os.listdir(tier)}")
        p = run(mtrun, plan, "--steps", "20", "--resume", tier, "--log", j("x.jsonl"), *COMMON)
        check(p.returncode == 1 and "no checkpoint" in p.stderr, "a tier file is never taken for a checkpoint", p)
        resumes(d, "kill -9")

        # a short write
        d = from_step10("short")
        env = dict(os.environ, MT_TIER_SHORT_WRITE="9")
        p = run(mtrun, plan, "--steps", "20", "--resume", d, "--save", d, "--save-every", "15", "--tier-dir", tier,
                "--log", j("x.jsonl"), *COMMON, env=env)
        path = os.path.join(tier, "mtrun.tier")
        check(p.returncode == 1 and f"{path}: layer " in p.stderr and "short write" in p.stderr,
              "a short write is refused naming the file and the layer", p)
        resumes(d, "short write")

        # the tier file truncated behind mtrun's back: stop the run, cut the file, continue it
        d = from_step10("truncated")
        q = subprocess.Popen([mtrun, plan, "--steps", "100000", "--resume", d, "--save", d, "--save-every", "100000",
                              "--tier-dir", tier, "--log", j("x.jsonl"), *COMMON],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in q.stdout:
            if line.startswith("step     12/"):
                break
        q.send_signal(signal.SIGSTOP)
        time.sleep(0.5)  # what was in flight lands
        os.truncate(path, 4096)
        q.send_signal(signal.SIGCONT)
        try:
            out, errs = q.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            q.kill()
            out, errs = q.communicate()
        check(q.returncode == 1 and f"{path}: layer " in errs and "truncated or changed behind mtrun's back" in errs,
              f"a truncated tier file is refused at the next I/O naming the file and the layer:\n    exit {q.returncode}\n"
              f"    stderr {errs[-600:]!r}")
        resumes(d, "truncated tier file")

        # a full disk at preallocation: fallocate under a file size limit of 64 KiB
        d = from_step10("full")

        def small_disk():
            resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not the signal

        q = subprocess.run([mtrun, plan, "--steps", "20", "--resume", d, "--save", d, "--tier-dir", tier,
                            "--log", j("x.jsonl"), *COMMON], capture_output=True, text=True, preexec_fn=small_disk)
        check(q.returncode == 1 and f"{path}: cannot preallocate " in q.stderr and " bytes " in q.stderr,
              "a tier that cannot be preallocated is refused up front, naming the bytes and the path", q)
        check(not os.path.exists(path), "the refused tier file is removed")
        resumes(d, "full disk")

        # too little free space, refused by the up-front check before fallocate: --tier-dir on an 8 KiB tmpfs
        # mounted in a private mount namespace (unshare -rm; where that is not allowed, said and not checked)
        small = j("small")
        os.mkdir(small)
        mount = 'mount -t tmpfs -o size=8k mt-small "$1" || exit 99; shift; exec "$@"'
        q = subprocess.run(["unshare", "-rm", "sh", "-c", mount, "sh", small, mtrun, plan, "--steps", "2",
                            "--tier-dir", small, "--log", j("x.jsonl"), *COMMON], capture_output=True, text=True) \
            if shutil.which("unshare") else subprocess.CompletedProcess([], 99, "", "no unshare")
        if q.returncode == 99 or "unshare:" in q.stderr:
            print(f"note: no private tmpfs here (unshare -rm): the free-space refusal is not checked: {q.stderr.strip()}")
        else:
            check(q.returncode == 1 and f"{os.path.join(small, 'mtrun.tier')}: the tier needs " in q.stderr
                  and "its filesystem has 8192 bytes free" in q.stderr,
                  "too little free space is refused up front, naming the bytes and the path", q)

        # refusals
        p = run(mtrun, plan, "--steps", "2", "--tier-dir", j("nowhere"), "--log", j("x.jsonl"), *COMMON)
        check(p.returncode == 1 and "--tier-dir needs an existing directory" in p.stderr, "a missing --tier-dir", p)
        with open(path, "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            p = run(mtrun, plan, "--steps", "2", "--tier-dir", tier, "--log", j("x.jsonl"), *COMMON)
            check(p.returncode == 1 and "in use by another mtrun" in p.stderr, "a tier in use by another run", p)
        check(os.path.exists(path), "another run's tier file is left alone")
    return finish("tier checks")


if __name__ == "__main__":
    sys.exit(main())
