#!/usr/bin/env python3
"""Data parallelism under mpirun on the cpu backend (runtime/dist.c).

usage: check_dist.py MTC MTRUN equal MODEL.mt f32|bf16 [replicated|sharded [RANKS,...]]
       check_dist.py MTC MTRUN refuse MODEL.mt
       check_dist.py MTC MTRUN resume MODEL.mt
       check_dist.py MTC MTRUN kill MODEL.mt
       check_dist.py MTC MTRUN cuda MODEL.mt LIBMT_CUDA_EMU CXX

equal:  MODEL at batch 2 per rank under mpirun -np 2 and -np 4 (mtc --ranks N)
        against one process at the same global batch, 2 rows x accumulate N
        (the ranks' micro-batches are its micro-batches: the same tokens, and
        the same per-micro-batch statistics, the MoE load-balancing loss):
        the first 5 losses, the validation losses (one process's 2N
        validation batches of 2 rows are the ranks' 2 of 2N) and the weights
        after 5 steps (mtrun --export, fp32) equal the single process's to
        1e-6 relative (each tensor's difference against it in the 2-norm;
        the largest element's is printed too) in f32 and bf16 alike (only
        the order of the gradient sums differs: bitwise at 2 ranks); a
        second run under mpirun gives the same bits (log and export byte for
        byte). Replicated plans by default; sharded (mtc --shard on), each
        rank holding its shard of the host store, the weights all-gathered and
        the gradients reduce-scattered in fp32 by the plan's collectives (a
        bf16 gradient widened exactly first), to the same 1e-6, and the banner
        says so; RANKS (default 2,4) the rank counts tried.
refuse: ranks started with a plan for another number of ranks, ranks given
        different plans (another seq; a sharded plan beside a replicated
        one), different mtrun builds (a copy of mtrun with one byte more) or
        different training options (--lr on one rank), and a plan for 2 ranks
        without mpirun are refused at start-up, exit 1, naming the ranks and
        what differs; a plan of one
        process without mpirun runs as before; a store that fits the
        machine's memory (MT_TEST_HOST_AVAILABLE, a test hook) but not each
        of 2 ranks' half of it is refused, one rank runs; a sharded plan's
        ranks each need only their shard of the store (less than a
        replicated rank), said in the refusal, and 2 of them run on twice
        that where 2 replicated ranks are refused; --save with a sharded plan
        is refused (sharded checkpoints are not written yet); --tier-dir with
        2 ranks on one machine is refused (each would need its own tier
        file); mtc --ranks 0 (or -2, two,
        2^31), --shard on without --ranks and --shard maybe are usage errors.
resume: a checkpoint saved by 2 ranks of batch 2 at step 3 resumes on one
        process (batch 2 x accumulate 2) and on 4 ranks of batch 1, and both
        continue the straight run's losses 4 to 6 to 1e-6 relative; SIGTERM to
        rank 1 alone stops both ranks after the same step, exit 0, rank 0
        saving that step.
kill:   kill -9 of one rank of 2 in the middle of a run, replicated and
        sharded: mpirun and the other rank exit non-zero within 60 s (no
        hang).
cuda:   the cuda backend on the CPU emulation of CUDA (tests/emu, as
        check_cuda_emu.py runs it) under mpirun -np 2, on tests/tiny-gpu.target
        (--remat layer, nothing resident: every layer streams): the first 5
        losses and a validation loss equal the cpu backend's 2 ranks' to 1e-5
        relative (check_cuda_emu.py's f32 tolerance). Its gradients reach the
        host's accumulators as the cpu backend's do, so MPI sums them alike.
Open MPI runs as root here only with --allow-run-as-root, and 4 ranks on 2
cores only with --oversubscribe.
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_train import source_elsewhere  # noqa: E402
from checks import check, finish, losses, run  # noqa: E402

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
TRAIN = ["--steps", "5", "--seed", "7", "--val-every", "5", "--val-batches", "2", "--threads", "1", "--device", "cpu"]


def safetensors(path):
    """{name: float32 array} of an fp32 safetensors file."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=np.float32).reshape(t["shape"])
    return out


def val_losses(path):
    return [json.loads(line)["val_loss"] for line in open(path) if '"val_loss"' in line]


def train(mtrun, plan, tmp, tag, ranks, extra=()):
    log, out = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".safetensors")
    cmd = ([*MPIRUN, "-np", str(ranks)] if ranks else []) + [mtrun, plan, *TRAIN, *extra, "--log", log, "--export", out]
    p = run(*cmd, timeout=300)
    if not check(p.returncode == 0, f"{tag}: {' '.join(cmd)} failed", p):
        return None
    return log, out, p.stdout


def rel(a, b):
    """The difference of tensor b from a relative to a, in the 2-norm."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(a)), 1e-30))


def rel_max(a, b):
    """The largest element's difference against the tensor's largest element."""
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-30))


def with_accumulate(model, tmp, n):
    """MODEL with n micro-batches a step."""
    path = os.path.join(tmp, f"acc{n}-" + os.path.basename(model))
    open(path, "w").write(re.sub(r"(\n *batch = \d+)", rf"\1\n  accumulate = {n}", source_elsewhere(model), count=1))
    return path


def equal(mtc, mtrun, model, dtype, tmp, layout="replicated", counts=(2, 4)):
    tol = 1e-6
    for ranks in counts:
        one, per = os.path.join(tmp, f"one{ranks}.bin"), os.path.join(tmp, f"ranks{ranks}.bin")
        for plan, src, flags in ((one, with_accumulate(model, tmp, ranks), ["--batch", "2"]),
                                 (per, model, ["--batch", "2", "--ranks", str(ranks), "--shard",
                                               "on" if layout == "sharded" else "off"])):
            p = run(mtc, src, "--dtype", dtype, *flags, "-o", plan)
            if not check(p.returncode == 0, f"mtc {' '.join(flags)} failed", p):
                return
        # the ranks' 2 validation batches of 2N rows are one process's first 2N of 2 rows
        ref = train(mtrun, one, tmp, f"one{ranks}", 0, ["--val-batches", str(2 * ranks)])
        got = train(mtrun, per, tmp, f"np{ranks}", ranks)
        again = train(mtrun, per, tmp, f"np{ranks}-again", ranks)
        if not (ref and got and again):
            continue
        what = (f"{os.path.basename(model)} {dtype}, {ranks} {layout} ranks of batch 2 against one process of batch 2 "
                f"x accumulate {ranks}")
        said = "(sharded)" if layout == "sharded" else "(replicated)"
        check(said in got[2], f"{what}: the banner does not say {said}", got[2])
        lr, lg = losses(ref[0]), losses(got[0])
        check(len(lr) == 5 and len(lg) == 5, f"{what}: {len(lr)} and {len(lg)} losses logged, not 5")
        worst = max((abs(a - b) / abs(a) for a, b in zip(lr + val_losses(ref[0]), lg + val_losses(got[0]))), default=0)
        check(worst <= tol, f"{what}: losses differ by {worst:.3g} relative (over {tol:.3g}): {lr} against {lg}")
        wr, wg = safetensors(ref[1]), safetensors(got[1])
        check(sorted(wr) == sorted(wg), f"{what}: the exports name other tensors")
        wworst, wname = max(((rel(wr[k], wg[k]), k) for k in wr if k in wg), default=(0, ""))
        check(wworst <= tol, f"{what}: weights after 5 steps differ by {wworst:.3g} relative in {wname} (over {tol:.3g})")
        mworst, mname = max(((rel_max(wr[k], wg[k]), k) for k in wr if k in wg), default=(0, ""))
        print(f"{what}: losses within {worst:.3g}, weights within {wworst:.3g} relative ({wname}; the largest "
              f"element's {mworst:.3g} of its tensor's largest, {mname})")
        same_log = [ln for ln in open(got[0]) if '"loss"' in ln or "val_loss" in ln]
        same_again = [ln for ln in open(again[0]) if '"loss"' in ln or "val_loss" in ln]
        strip = lambda lines: [{k: v for k, v in json.loads(ln).items() if k not in ("ms", "tokens_per_s", "elapsed_s")}
                               for ln in lines]
        check(strip(same_log) == strip(same_again), f"{what}: a second run logs other losses")
        check(open(got[1], "rb").read() == open(again[1], "rb").read(), f"{what}: a second run exports other bits")


def refuse(mtc, mtrun, model, tmp):
    two, four, other, one, shard2 = (os.path.join(tmp, n) for n in ("two.bin", "four.bin", "other.bin", "one.bin",
                                                                     "shard2.bin"))
    for plan, flags in ((two, ["--ranks", "2"]), (four, ["--ranks", "4"]), (other, ["--ranks", "2", "--seq", "32"]),
                        (one, []), (shard2, ["--ranks", "2", "--shard", "on"])):
        p = run(mtc, model, "--batch", "2", *flags, "-o", plan)
        if not check(p.returncode == 0, f"mtc {' '.join(flags)} failed", p):
            return
    rebuilt = os.path.join(tmp, "mtrun") # another build: the same program with a byte more at its end
    with open(rebuilt, "wb") as f:
        f.write(open(mtrun, "rb").read() + b"\0")
    os.chmod(rebuilt, 0o755)
    cases = [
        ([*MPIRUN, "-np", "2", mtrun, four], "the plan was made for 4 ranks (mtc --ranks 4) but 2 were started"),
        ([*MPIRUN, "-np", "2", mtrun, one], "the plan was made for 1 rank (mtc --ranks 1) but 2 were started"),
        ([*MPIRUN, "-np", "1", mtrun, two, ":", "-np", "1", mtrun, other],
         "rank 1 of 2 runs another plan than rank 0"),
        ([mtrun, two], "this plan is one rank of 2 (mtc --ranks 2): start it with mpirun -np 2"),
        ([*MPIRUN, "-np", "1", mtrun, two, ":", "-np", "1", rebuilt, two], "rank 1 of 2 runs another mtrun build"),
        ([*MPIRUN, "-np", "1", mtrun, two, ":", "-np", "1", mtrun, shard2], "rank 1 of 2 runs another plan than rank 0"),
        ([*MPIRUN, "-np", "1", mtrun, two, ":", "-np", "1", mtrun, two, "--lr", "0.001"],
         "rank 1 of 2 was started with other options than rank 0 (lr=0.001 where rank 0 has lr=the plan's)"),
    ]
    for cmd, want in cases:
        cmd = [*cmd, *TRAIN]
        if ":" in cmd: # each app context takes its own arguments: the train flags go to both
            k = cmd.index(":")
            cmd = cmd[:k] + TRAIN + cmd[k:]
        p = run(*cmd, timeout=120)
        check(p.returncode != 0 and want in p.stderr and p.stderr.count(want) == 1,
              f"{' '.join(map(str, cmd))}: not refused once with '{want}'", p)
        check("step      1/5" not in p.stdout, f"{' '.join(map(str, cmd))}: trained before refusing", p)
    # a store that fits the machine but not each of 2 ranks' share of it (MT_TEST_HOST_AVAILABLE: mtrun's test hook)
    p = run(mtrun, one, *TRAIN, env=dict(os.environ, MT_TEST_HOST_AVAILABLE="1000"))
    need = int(re.search(r"needs (\d+) bytes of host memory", p.stderr).group(1)) if "needs" in p.stderr else 0
    if check(need > 0, "a plan over MT_TEST_HOST_AVAILABLE=1000 is not refused with the bytes it needs", p):
        have = need * 3 // 2
        p = run(*MPIRUN, "-x", f"MT_TEST_HOST_AVAILABLE={have}", "-np", "2", mtrun, two, *TRAIN, timeout=120)
        want = (f"each rank needs {need} bytes of host memory (0.0 GB: its own copy of the host store, its cpu arena "
                f"and host activation store) and 2 ranks share this machine's {have} bytes")
        check(p.returncode != 0 and want in p.stderr and "step      1/5" not in p.stdout,
              f"2 ranks on {have} bytes, each needing {need}: not refused with '{want}'", p)
        p = run(*MPIRUN, "-x", f"MT_TEST_HOST_AVAILABLE={have}", "-np", "1", mtrun, one, *TRAIN, timeout=120)
        check(p.returncode == 0, f"one rank on {have} bytes, needing {need}: refused", p)
    # sharded: each rank counts its shard of the store, not a copy of all of it
    needs = {}
    for what, plan in (("its shard", shard2), ("its own copy", two)):
        p = run(*MPIRUN, "-x", "MT_TEST_HOST_AVAILABLE=1000", "-np", "2", mtrun, plan, *TRAIN, timeout=120)
        m = re.search(r"each rank needs (\d+) bytes of host memory \(0.0 GB: " + what + " of the host store", p.stderr)
        if check(p.returncode != 0 and m, f"2 ranks ({what}) on 1000 bytes: not refused with the bytes of {what}", p):
            needs[what] = int(m.group(1))
    if len(needs) == 2:
        have = 2 * needs["its shard"]
        check(needs["its shard"] < needs["its own copy"], f"a sharded rank needs {needs['its shard']} bytes, a "
              f"replicated one {needs['its own copy']}: the shard is not smaller")
        p = run(*MPIRUN, "-x", f"MT_TEST_HOST_AVAILABLE={have}", "-np", "2", mtrun, shard2, *TRAIN, timeout=120)
        check(p.returncode == 0, f"2 sharded ranks on {have} bytes, each needing {needs['its shard']}: refused", p)
        p = run(*MPIRUN, "-x", f"MT_TEST_HOST_AVAILABLE={have}", "-np", "2", mtrun, two, *TRAIN, timeout=120)
        check(p.returncode != 0 and "its own copy of the host store" in p.stderr,
              f"2 replicated ranks on {have} bytes, each needing {needs['its own copy']}: not refused", p)
        print(f"host memory a rank needs: {needs['its shard']} bytes sharded, {needs['its own copy']} replicated")
    # what a sharded run cannot do yet is refused up front, not done wrong
    p = run(*MPIRUN, "-np", "2", mtrun, shard2, *TRAIN, "--save", os.path.join(tmp, "sharded-ck"), timeout=120)
    want = "--save (sharded checkpoints are not written yet) with a sharded plan (mtc --shard on) is not supported yet"
    check(p.returncode != 0 and want in p.stderr and not os.path.exists(os.path.join(tmp, "sharded-ck")),
          f"--save with a sharded plan: not refused with '{want}'", p)
    # the NVMe tier of 2 ranks on one machine: refused up front, not by the second rank's lock
    tier = os.path.join(tmp, "tier")
    os.makedirs(tier)
    p = run(*MPIRUN, "-np", "2", mtrun, two, *TRAIN, "--tier-dir", tier, timeout=120)
    check(p.returncode != 0 and "--tier-dir with 2 ranks on this machine is not supported yet" in p.stderr and
          "locked" not in p.stderr and not os.listdir(tier), "--tier-dir under 2 ranks on one machine: not refused", p)
    for bad in ("0", "-2", "two", "2147483648"):
        p = run(mtc, model, "--ranks", bad, "-o", os.path.join(tmp, "bad.bin"))
        check(p.returncode == 2 and f"--ranks needs a positive number of processes, got '{bad}'" in p.stderr and
              not os.path.exists(os.path.join(tmp, "bad.bin")), f"mtc --ranks {bad}: not a usage error", p)
    for flags, want in ((["--shard", "on"], "--shard on shards the host store over the ranks: give --ranks 2 or more"),
                        (["--ranks", "2", "--shard", "maybe"], "--shard takes on, off or auto, not 'maybe'")):
        p = run(mtc, model, *flags, "-o", os.path.join(tmp, "bad.bin"))
        check(p.returncode == 2 and want in p.stderr and not os.path.exists(os.path.join(tmp, "bad.bin")),
              f"mtc {' '.join(flags)}: not a usage error", p)
    p = run(mtrun, one, *TRAIN, "--log", os.path.join(tmp, "one.jsonl"))
    check(p.returncode == 0 and "ranks" not in p.stdout, "a plan of one process without mpirun: not as before", p)


def ranks_of(job):
    """The pids of the mtrun processes mpirun `job` started (its children)."""
    out = subprocess.run(["pgrep", "-P", str(job.pid), "-x", "mtrun"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def start_long(mtrun, plan, log, extra=()):
    """2 ranks of a long run, once both run and 3 steps are logged: (mpirun, the ranks' pids)."""
    job = subprocess.Popen([*MPIRUN, "-np", "2", mtrun, plan, "--steps", "100000", "--seed", "7", "--val-every",
                            "100000", "--threads", "1", "--device", "cpu", "--log", log, *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, MT_PROGRESS_S="1000"))
    pids, deadline = [], time.time() + 60
    while time.time() < deadline and job.poll() is None:
        pids = ranks_of(job)
        if len(pids) == 2 and os.path.exists(log) and len(losses(log)) >= 3:
            break
        time.sleep(0.2)
    return job, pids


def resume(mtc, mtrun, model, tmp):
    plans = {}
    for name, src, flags in (("two", model, ["--batch", "2", "--ranks", "2"]),
                             ("four", model, ["--batch", "1", "--ranks", "4"]),
                             ("one", with_accumulate(model, tmp, 2), ["--batch", "2"])):
        plans[name] = os.path.join(tmp, name + ".bin")
        p = run(mtc, src, *flags, "-o", plans[name])
        if not check(p.returncode == 0, f"mtc {' '.join(flags)} failed", p):
            return
    steps = ["--steps", "6", "--seed", "7", "--val-every", "100", "--threads", "1", "--device", "cpu"]
    ck, ck3 = os.path.join(tmp, "ck"), os.path.join(tmp, "ck3")
    p = run(*MPIRUN, "-np", "2", mtrun, plans["two"], *steps, "--save", ck, "--save-every", "3", "--log",
            os.path.join(tmp, "straight.jsonl"), timeout=300)
    if not check(p.returncode == 0 and os.path.exists(os.path.join(ck, "step-000000003.ckpt")),
                 "2 ranks saving at step 3 and 6 failed", p):
        return
    straight = losses(os.path.join(tmp, "straight.jsonl"))
    os.makedirs(ck3)
    os.link(os.path.join(ck, "step-000000003.ckpt"), os.path.join(ck3, "step-000000003.ckpt"))
    for what, cmd in (("one process", [mtrun, plans["one"]]), ("4 ranks", [*MPIRUN, "-np", "4", mtrun, plans["four"]])):
        log = os.path.join(tmp, what.replace(" ", "") + ".jsonl")
        p = run(*cmd, *steps, "--resume", ck3, "--log", log, timeout=300)
        if not check(p.returncode == 0 and "resumed from" in p.stdout, f"resuming 2 ranks' step 3 on {what} failed", p):
            continue
        got = losses(log)
        worst = max((abs(a - b) / abs(a) for a, b in zip(straight[3:], got)), default=1)
        check(len(got) == 3 and worst <= 1e-6,
              f"2 ranks' step 3 resumed on {what}: losses {got}, the straight run's {straight[3:]}")
        print(f"2 ranks' checkpoint of step 3 resumed on {what}: steps 4 to 6 within {worst:.3g} of the straight run")
    # SIGTERM to rank 1 alone: both ranks stop after the same step, rank 0 saves it
    sig = os.path.join(tmp, "sig")
    job, pids = start_long(mtrun, plans["two"], os.path.join(tmp, "sig.jsonl"), ["--save", sig])
    if not check(len(pids) == 2 and job.poll() is None, f"the ranks did not start: {pids}"):
        job.kill()
        return
    os.kill(pids[1], signal.SIGTERM)
    try:
        out, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        check(False, "SIGTERM to rank 1: the job still runs 60 s later")
        job.kill()
        job.communicate()
        return
    last = len(losses(os.path.join(tmp, "sig.jsonl")))
    saved = sorted(os.listdir(sig)) if os.path.isdir(sig) else []
    check(job.returncode == 0 and "stopped by a signal" in out and saved == [f"step-{last:09d}.ckpt"],
          f"SIGTERM to rank 1: exit {job.returncode}, {last} steps logged, saved {saved}; stderr {err[-400:]!r}")
    print(f"SIGTERM to rank 1 of 2: both stopped after step {last}, saved {saved}")


def kill(mtc, mtrun, model, tmp):
    for shard in ("off", "on"): # a replicated run, then a sharded one (its ranks meet in the plan's collectives)
        what = "sharded" if shard == "on" else "replicated"
        plan = os.path.join(tmp, f"two-{what}.bin")
        p = run(mtc, model, "--batch", "2", "--ranks", "2", "--shard", shard, "-o", plan)
        if not check(p.returncode == 0, f"mtc --ranks 2 --shard {shard} failed", p):
            return
        log = os.path.join(tmp, f"kill-{what}.jsonl")
        job, pids = start_long(mtrun, plan, log)
        if not check(len(pids) == 2 and job.poll() is None, f"the {what} ranks did not start: {pids}"):
            job.kill()
            return
        os.kill(pids[1], signal.SIGKILL)
        t0 = time.time()
        try:
            out, err = job.communicate(timeout=60)
            took = time.time() - t0
            check(job.returncode != 0, f"mpirun exited {job.returncode} after a {what} rank was killed")
            alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and
                     open(f"/proc/{pid}/stat").read().split()[2] != "Z"]
            check(not alive, f"{what} ranks {alive} still run after mpirun exited")
            print(f"kill -9 of one {what} rank of 2 after {len(losses(log))} steps: mpirun exited {job.returncode} in "
                  f"{took:.1f} s")
        except subprocess.TimeoutExpired:
            check(False, f"mpirun and the other {what} rank still run 60 s after a rank was killed")
            job.kill() # mpirun, which this test started; its ranks go with it
            job.communicate()


def cuda(mtc, mtrun, model, lib, cxx, tmp):
    from check_cuda_emu import build_kernels  # noqa: E402
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    plan, cu = os.path.join(tmp, "gpu.bin"), os.path.join(tmp, "gpu.cu")
    p = run(mtc, model, "--target", os.path.join(src, "tests", "tiny-gpu.target"), "--batch", "2", "--ranks", "2",
            "--remat", "layer", "--resident", "0", "-o", plan, "--emit-cuda", cu)
    if not check(p.returncode == 0, "mtc for tiny-gpu --ranks 2 failed", p):
        return
    kernels = build_kernels(cxx, src, cu, tmp)
    got = {}
    for device in ("cpu", "cuda"):
        log = os.path.join(tmp, device + ".jsonl")
        env = ["-x", f"MT_CUDA_BACKEND={lib}", "-x", f"MT_CUDA_EMU_KERNELS={kernels}"] if device == "cuda" else []
        p = run(*MPIRUN, *env, "-np", "2", mtrun, plan, *TRAIN[:-1], device, "--log", log, timeout=600)
        if not check(p.returncode == 0, f"2 ranks on the {device} backend failed", p):
            return
        if device == "cuda":
            check("device   cuda: CPU emulation of CUDA" in p.stdout, "mtrun did not run the emulated cuda backend", p)
        got[device] = losses(log) + val_losses(log)
    worst = max((abs(a - b) / abs(a) for a, b in zip(got["cpu"], got["cuda"])), default=1)
    check(len(got["cuda"]) == len(got["cpu"]) >= 6 and worst <= 1e-5,
          f"2 ranks: the emulated cuda backend's losses {got['cuda']} against the cpu backend's {got['cpu']}")
    print(f"2 ranks on the emulated cuda backend: losses within {worst:.3g} of the cpu backend's")


def main():
    mtc, mtrun, mode, model = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "equal":
            equal(mtc, mtrun, model, sys.argv[5], tmp, *sys.argv[6:7],
                  *([tuple(int(n) for n in sys.argv[7].split(","))] if len(sys.argv) > 7 else []))
        elif mode == "refuse":
            refuse(mtc, mtrun, model, tmp)
        elif mode == "resume":
            resume(mtc, mtrun, model, tmp)
        elif mode == "cuda":
            cuda(mtc, mtrun, model, sys.argv[5], sys.argv[6], tmp)
        elif mode == "kill":
            kill(mtc, mtrun, model, tmp)
        else:
            sys.exit(f"unknown mode {mode}")
    return finish(f"{mode} checks")


if __name__ == "__main__":
    sys.exit(main())
