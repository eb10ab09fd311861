#!/usr/bin/env python3
"""Data parallelism under mpirun on the cpu backend (runtime/dist/dist.c).

usage: check_dist.py MTC MTRUN equal MODEL.mt f32|bf16 [replicated|sharded [RANKS,...]]
       check_dist.py MTC MTRUN refuse MODEL.mt
       check_dist.py MTC MTRUN resume MODEL.mt
       check_dist.py MTC MTRUN kill MODEL.mt
       check_dist.py MTC MTRUN cuda MODEL.mt LIBMT_CUDA_EMU CXX [f32|bf16 [replicated|sharded]]
       check_dist.py MTC MTRUN tied examples/gpt2-tiny.mt

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
        byte). --export gathers each tensor from the ranks' slices
        (dist_shard): the first run's ranks have NaN outside their own slices
        when they export (MT_TEST_EXPORT_POISON), and its export equals the
        second run's byte for byte, and at 2 ranks the one process's.
        Sharded at 2 ranks, --init of the one process's export (each rank
        taking its slices of every tensor) continues as the one process does
        from it, to the same 1e-6, and --logits (rank 0's rows) and
        --sample-every's text (every rank running the forwards) are the one
        process's. In f32,
        for a model without statistics over a micro-batch's rows (no moe():
        the MoE load-balancing loss is a rank's, as transformers and
        DeepSpeed compute it per forward), also against one process at batch
        2N, accumulate 1 (the global batch as one micro-batch): the same
        losses (its 2 validation batches of 2N rows are the ranks' 2 of 2)
        and weights to the same 1e-6. Replicated plans by default; sharded (mtc --shard on), each
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
        that where 2 replicated ranks are refused; --reference with a sharded
        plan is refused (the host executor reads the whole store); --tier-dir with
        2 ranks on one machine is refused (each would need its own tier
        file); mtc --ranks 0 (or -2, two,
        2^31), --shard on without --ranks and --shard maybe are usage errors.
resume: a checkpoint saved by 2 ranks of batch 2 at step 3 (sharded: a
        manifest and each rank's shard) resumes on one process (batch 2 x
        accumulate 2) and on 4 ranks of batch 1, and one saved by that one
        process (a single file) on 2 ranks: all continue the straight run's
        losses 4 to 6 to 1e-6 relative; SIGTERM to rank 1 alone stops both
        ranks after the same step, exit 0, the ranks saving that step (its
        manifest and 2 shards, nothing else).
kill:   kill -9 of one rank of 2 in the middle of a run saving every 2
        steps, replicated and sharded: mpirun and the other rank exit
        non-zero within 60 s (no hang), and the run resumed from the newest
        manifest gives an uninterrupted run's next 2 losses to 1e-6 (a
        sharded run's ranks reading only their slices of it); a rank of the
        replicated run that dies 200 bytes into its shard of step 4
        (MT_CKPT_ABORT_*) ends the job non-zero with step 2 the newest
        committed, the run resumes from step 2 with the dead run's losses of
        steps 3 and 4, and its commits clear the leftovers. A sharded run's
        collective that fails on rank 1 (MT_TEST_COMM_FAIL, a test hook)
        ends the job within 60 s, exit non-zero, naming it; no step logged.
cuda:   the cuda backend on the CPU emulation of CUDA (tests/emu, as
        check_cuda_emu.py runs it) under mpirun -np 2, on tests/tiny-gpu.target
        (--remat layer, nothing resident: every layer streams), the emulation
        pretending 2 devices (MT_CUDA_EMU_DEVICES): each rank runs on the
        device of its local rank, as the banner says, and opens the ranks'
        collectives (runtime/dist/comm.c: MPI through host copies, checked by a
        start-up all-reduce); the first 5 losses and a validation loss equal
        the cpu backend's 2 ranks' to check_cuda_emu.py's tolerances (f32
        1e-5, bf16 1e-3 relative), f32 (default) or bf16, replicated
        (default: its gradients reach the host's accumulators as the cpu
        backend's do, so MPI sums them alike) or sharded (the plan's
        all-gathers and reduce-scatters on the cuda backend's comm stream,
        bf16 gradients widened on the device first; FREE poisons its region).
tied:   why gpt2-tiny's 2 ranks are not `equal` to one process at accumulate
        2 (f32), and that nothing else differs. Its tied wte gets two
        gradients a micro-batch, the LM head's (the tail, first) and the
        lookup's (the head): one process sums ((t0 + h0) + t1) + h1, the ranks
        (t0 + h0) + (t1 + h1), so after 1 step wte differs in a few elements
        by an ulp (within 1e-7 of its largest) and every other tensor is the
        same bits. Those carry into every tensor's later steps within 1e-6,
        except the key third of each attn.c_attn.bias: its exact gradient is
        0 (a key bias adds q . b to every score of a query, which the softmax
        ignores), so what it gets is rounding noise, far below AdamW's eps
        (1e-8), whose update is then lr g / eps: the noise's differences
        times lr / eps, some 10^4. After 5 steps the key third is under 1e-3
        of the query third's size (a real gradient would move it as far),
        and apart from it the tensor is within 1e-6. An ulp apart in the tied sum is therefore
        all there is, and it cannot be made exact without holding the LM
        head's wte gradient on the device until the lookup's is added (a V x C
        fp32 buffer across the whole backward).
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
from checks import check, finish, last_run, losses, run  # noqa: E402

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
    return [r["val_loss"] for r in last_run(path) if "val_loss" in r]  # (mtrun appends each run to the log)


def train(mtrun, plan, tmp, tag, ranks, extra=(), mpi_env=()):
    log, out = os.path.join(tmp, tag + ".jsonl"), os.path.join(tmp, tag + ".safetensors")
    cmd = ([*MPIRUN, *mpi_env, "-np", str(ranks)] if ranks else []) + [mtrun, plan, *TRAIN, *extra, "--log", log,
                                                                        "--export", out]
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


def same_as(what, ref, got, tol):
    """The first 5 losses, the validation losses and the exported weights of run got against run ref
    (train()'s results), to tol relative."""
    lr, lg = losses(ref[0]), losses(got[0])
    check(len(lr) == 5 and len(lg) == 5, f"{what}: {len(lr)} and {len(lg)} losses logged, not 5")
    vr, vg = val_losses(ref[0]), val_losses(got[0])
    check(len(vr) == len(vg) >= 1, f"{what}: {len(vr)} and {len(vg)} validation losses logged")
    worst = max((abs(a - b) / abs(a) for a, b in zip(lr + vr, lg + vg)), default=0)
    check(worst <= tol, f"{what}: losses differ by {worst:.3g} relative (over {tol:.3g}): {lr} against {lg}")
    wr, wg = safetensors(ref[1]), safetensors(got[1])
    check(sorted(wr) == sorted(wg), f"{what}: the exports name other tensors")
    wworst, wname = max(((rel(wr[k], wg[k]), k) for k in wr if k in wg), default=(0, ""))
    check(wworst <= tol, f"{what}: weights after 5 steps differ by {wworst:.3g} relative in {wname} (over {tol:.3g})")
    mworst, mname = max(((rel_max(wr[k], wg[k]), k) for k in wr if k in wg), default=(0, ""))
    print(f"{what}: losses within {worst:.3g}, weights within {wworst:.3g} relative ({wname}; the largest "
          f"element's {mworst:.3g} of its tensor's largest, {mname})")


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
        # --export gathers each tensor from the ranks' slices: each rank's master outside its own slices is NaN
        # here (MT_TEST_EXPORT_POISON, a test hook), as a sharded store would not hold it
        got = train(mtrun, per, tmp, f"np{ranks}", ranks, mpi_env=["-x", "MT_TEST_EXPORT_POISON=1"])
        again = train(mtrun, per, tmp, f"np{ranks}-again", ranks)
        if not (ref and got and again):
            continue
        what = (f"{os.path.basename(model)} {dtype}, {ranks} {layout} ranks of batch 2 against one process of batch 2 "
                f"x accumulate {ranks}")
        said = "(sharded)" if layout == "sharded" else "(replicated)"
        check(said in got[2], f"{what}: the banner does not say {said}", got[2])
        same_as(what, ref, got, tol)
        same_log = [ln for ln in open(got[0]) if '"loss"' in ln or "val_loss" in ln]
        same_again = [ln for ln in open(again[0]) if '"loss"' in ln or "val_loss" in ln]
        strip = lambda lines: [{k: v for k, v in json.loads(ln).items() if k not in ("ms", "tokens_per_s", "elapsed_s")}
                               for ln in lines]
        check(strip(same_log) == strip(same_again), f"{what}: a second run logs other losses")
        check(open(got[1], "rb").read() == open(again[1], "rb").read(),
              f"{what}: a second run (its master whole on every rank) exports other bits")
        if ranks == 2:
            check(open(got[1], "rb").read() == open(ref[1], "rb").read(),
                  f"{what}: the export gathered from 2 ranks' slices differs from one process's")
        if layout == "sharded" and ranks == 2:
            # --init: each rank takes its slices of the file's tensors; from the one process's export, 5 more
            # steps as the one process takes them from it
            # (and --logits and --sample-every: every rank runs the forwards, rank 0 writes and prints)
            lg = [os.path.join(tmp, f"{n}-logits") for n in ("one", "np")]
            more = ["--init", ref[1], "--sample-every", "5", "--logits"]
            ref2 = train(mtrun, one, tmp, f"one{ranks}-init", 0, ["--val-batches", str(2 * ranks), *more, lg[0]])
            got2 = train(mtrun, per, tmp, f"np{ranks}-init", ranks, [*more, lg[1]])
            if ref2 and got2:
                check(losses(ref2[0])[0] != losses(ref[0])[0], f"{what}: --init {ref[1]} changed no loss")
                same_as(f"{what}, both from --init", ref2, got2, tol)
                a, b = (np.load(x + ".logits.npy") for x in lg)
                check(a.shape == b.shape and rel(a, b) <= tol and
                      (np.load(lg[0] + ".tokens.npy") == np.load(lg[1] + ".tokens.npy")).all(),
                      f"{what}: --logits differ from one process's by {rel(a, b) if a.shape == b.shape else a.shape}")
                said = [[ln for ln in x[2].splitlines() if ln.startswith("sample ")] for x in (ref2, got2)]
                check(len(said[0]) == 2 and said[0] == said[1], f"{what}: --sample-every prints {said[1]}, one "
                      f"process {said[0]}")
                print(f"{what}: --logits within {rel(a, b):.3g} of one process's, the same samples")
        if dtype == "f32" and "moe(" not in open(model).read():
            whole = os.path.join(tmp, f"whole{ranks}.bin")
            p = run(mtc, model, "--dtype", dtype, "--batch", str(2 * ranks), "-o", whole)
            if not check(p.returncode == 0, f"mtc --batch {2 * ranks} failed", p):
                continue
            big = train(mtrun, whole, tmp, f"whole{ranks}", 0)
            if big:
                same_as(f"{os.path.basename(model)} {dtype}, {ranks} {layout} ranks of batch 2 against one process "
                        f"of batch {2 * ranks}, accumulate 1", big, got, tol)


def refuse(mtc, mtrun, model, tmp):
    two, four, other, one, shard2 = (os.path.join(tmp, n) for n in ("two.bin", "four.bin", "other.bin", "one.bin",
                                                                     "shard2.bin"))
    for plan, flags in ((two, ["--ranks", "2", "--shard", "off"]), (four, ["--ranks", "4", "--shard", "off"]),
                        (other, ["--ranks", "2", "--shard", "off", "--seq", "32"]),
                        (one, []), (shard2, ["--ranks", "2", "--shard", "on"])):
        p = run(mtc, model, "--batch", "2", *flags, "-o", plan)
        if not check(p.returncode == 0, f"mtc {' '.join(flags)} failed", p):
            return
    # a two-rank plan for h200 (one GPU) under --shard on is priced inf (no path between the ranks): its metrics
    # log is still JSON (null). (Under --shard auto mtc refuses it, as --explain --ranks 2 does: check_fits.py.)
    inf = os.path.join(tmp, "inf.bin")
    p = run(mtc, model, "--batch", "2", "--ranks", "2", "--shard", "on", "-o", inf)
    if check(p.returncode == 0, "mtc --ranks 2 --shard on -o for h200", p) and \
            b"predicted_step_s=inf" in open(inf, "rb").read():
        got = train(mtrun, inf, tmp, "inf", 2)
        if got:
            def no_constant(c):
                raise ValueError(f"{c} is not JSON")
            try:
                records = [json.loads(line, parse_constant=no_constant) for line in open(got[0])]
                config = records[0]["config"]
                check(config["predicted_step_s"] is None and any("loss" in r for r in records),
                      f"a plan priced inf: the log's predicted_step_s is {config['predicted_step_s']}")
            except ValueError as e:
                check(False, f"a plan priced inf: its metrics log is not JSON: {e}")
    elif p.returncode == 0:
        check(False, "the two-rank plan for h200 is no longer priced inf: pick another case for the log's null")
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
    p = run(*MPIRUN, "-np", "2", mtrun, shard2, *TRAIN, "--reference", timeout=120)
    want = "--reference (the host executor reads the whole store) with a sharded plan (mtc --shard on) is not supported yet"
    check(p.returncode != 0 and want in p.stderr, f"--reference with a sharded plan: not refused with '{want}'", p)
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


def saved_files(step, ranks):
    """The files of a sharded checkpoint of step by ranks: its manifest and each rank's shard, sorted."""
    return sorted([f"step-{step:09d}.manifest"] + [f"step-{step:09d}.shard-{r:05d}-of-{ranks:05d}" for r in range(ranks)])


def resume(mtc, mtrun, model, tmp):
    plans = {}
    for name, src, flags in (("two", model, ["--batch", "2", "--ranks", "2", "--shard", "off"]),
                             ("four", model, ["--batch", "1", "--ranks", "4", "--shard", "off"]),
                             ("one", with_accumulate(model, tmp, 2), ["--batch", "2"])):
        plans[name] = os.path.join(tmp, name + ".bin")
        p = run(mtc, src, *flags, "-o", plans[name])
        if not check(p.returncode == 0, f"mtc {' '.join(flags)} failed", p):
            return
    steps = ["--steps", "6", "--seed", "7", "--val-every", "100", "--threads", "1", "--device", "cpu"]
    ck, ck3 = os.path.join(tmp, "ck"), os.path.join(tmp, "ck3")
    p = run(*MPIRUN, "-np", "2", mtrun, plans["two"], *steps, "--save", ck, "--save-every", "3", "--log",
            os.path.join(tmp, "straight.jsonl"), timeout=300)
    if not check(p.returncode == 0 and sorted(os.listdir(ck)) == saved_files(3, 2) + saved_files(6, 2),
                 f"2 ranks saving at step 3 and 6 failed: {sorted(os.listdir(ck)) if os.path.isdir(ck) else None}", p):
        return
    straight = losses(os.path.join(tmp, "straight.jsonl"))
    os.makedirs(ck3)
    for name in saved_files(3, 2):
        os.link(os.path.join(ck, name), os.path.join(ck3, name))
    for what, cmd in (("one process", [mtrun, plans["one"]]), ("4 ranks", [*MPIRUN, "-np", "4", mtrun, plans["four"]])):
        log = os.path.join(tmp, what.replace(" ", "") + ".jsonl")
        p = run(*cmd, *steps, "--resume", ck3, "--no-save", "--log", log, timeout=300)  # (ck3 stays at step 3)
        if not check(p.returncode == 0 and "resumed from" in p.stdout, f"resuming 2 ranks' step 3 on {what} failed", p):
            continue
        got = losses(log)
        worst = max((abs(a - b) / abs(a) for a, b in zip(straight[3:], got)), default=1)
        check(len(got) == 3 and worst <= 1e-6,
              f"2 ranks' step 3 resumed on {what}: losses {got}, the straight run's {straight[3:]}")
        print(f"2 ranks' checkpoint of step 3 resumed on {what}: steps 4 to 6 within {worst:.3g} of the straight run")
    # a single process's checkpoint (one file) resumed on 2 ranks
    ck1 = os.path.join(tmp, "ck1")
    p = run(mtrun, plans["one"], *steps, "--save", ck1, "--save-every", "3", "--log",
            os.path.join(tmp, "single.jsonl"), timeout=300)
    if check(p.returncode == 0 and os.path.exists(os.path.join(ck1, "step-000000003.ckpt")),
             "one process saving at step 3 failed", p):
        os.remove(os.path.join(ck1, "step-000000006.ckpt"))
        log = os.path.join(tmp, "onetotwo.jsonl")
        p = run(*MPIRUN, "-np", "2", mtrun, plans["two"], *steps, "--resume", ck1, "--log", log, timeout=300)
        if check(p.returncode == 0 and "resumed from" in p.stdout, "resuming one process's step 3 on 2 ranks failed", p):
            got = losses(log)
            worst = max((abs(a - b) / abs(a) for a, b in zip(straight[3:], got)), default=1)
            check(len(got) == 3 and worst <= 1e-6,
                  f"one process's step 3 resumed on 2 ranks: losses {got}, the straight run's {straight[3:]}")
            print(f"one process's checkpoint of step 3 resumed on 2 ranks: steps 4 to 6 within {worst:.3g} of the "
                  "straight run")
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
    check(job.returncode == 0 and "stopped by a signal" in out and saved == saved_files(last, 2),
          f"SIGTERM to rank 1: exit {job.returncode}, {last} steps logged, saved {saved}; stderr {err[-400:]!r}")
    print(f"SIGTERM to rank 1 of 2: both stopped after step {last}, saved {saved}")


def newest_manifest(ck):
    """The step of the newest manifest in ck (0: none)."""
    steps = [int(n[5:14]) for n in os.listdir(ck) if n.endswith(".manifest")] if os.path.isdir(ck) else []
    return max(steps, default=0)


def resumes_alike(mtrun, plan, ck, tmp, tag, step, ref, first, flags):
    """2 ranks resumed from ck: 'resumed from' its step-STEP.manifest, and their losses from step first on
    equal ref's (a list of losses from step first) to 1e-6 relative."""
    log = os.path.join(tmp, tag + ".jsonl")
    p = run(*MPIRUN, "-np", "2", mtrun, plan, *flags, "--resume", ck, "--log", log, timeout=300)
    want = f"resumed from {os.path.join(ck, f'step-{step:09d}.manifest')} at step {step}"
    if not check(p.returncode == 0 and want in p.stdout, f"{tag}: the resumed run did not say '{want}'", p):
        return
    got = losses(log)[first - step - 1:]
    worst = max((abs(a - b) / abs(a) for a, b in zip(ref, got)), default=1)
    check(len(got) >= len(ref) > 0 and worst <= 1e-6, f"{tag}: losses from step {first} {got}, want {ref}")
    print(f"{tag}: resumed from step {step}, steps {first} to {first + len(ref) - 1} within {worst:.3g} of the "
          "uninterrupted run's")


def kill(mtc, mtrun, model, tmp):
    for shard in ("off", "on"): # a replicated run, then a sharded one (its ranks meet in the plan's collectives)
        kill_one(mtc, mtrun, model, tmp, shard)
    failed_collective(mtc, mtrun, model, tmp)


def failed_collective(mtc, mtrun, model, tmp):
    """A collective of the plan that fails on rank 1 (MT_TEST_COMM_FAIL=5: its 5th, in step 1) ends the job within
    60 s, exit non-zero, rank 1 naming the collective and why; no step is logged."""
    plan, log = os.path.join(tmp, "fail-sharded.bin"), os.path.join(tmp, "fail.jsonl")
    p = run(mtc, model, "--batch", "2", "--ranks", "2", "--shard", "on", "-o", plan)
    if not check(p.returncode == 0, "mtc --ranks 2 --shard on failed", p):
        return
    args = [plan, "--steps", "3", "--seed", "7", "--threads", "1", "--device", "cpu", "--no-save", "--log", log]
    t0 = time.time()
    p = run(*MPIRUN, "-np", "1", mtrun, *args, ":", "-np", "1", "-x", "MT_TEST_COMM_FAIL=5", mtrun, *args, timeout=60)
    want = "comm: collective 5 failed (MT_TEST_COMM_FAIL, a test hook)"
    check(p.returncode != 0 and " of segment " in p.stderr and f"on the comm engine: {want}" in p.stderr and
          not (os.path.exists(log) and losses(log)),
          f"a failed collective on rank 1: exit {p.returncode}, not ended with '{want}' before a step", p)
    print(f"a collective failed on rank 1 of 2 (sharded): the job exited {p.returncode} in {time.time() - t0:.1f} s")


def kill_one(mtc, mtrun, model, tmp, shard):
    what = "sharded" if shard == "on" else "replicated"
    plan = os.path.join(tmp, f"two-{what}.bin")
    p = run(mtc, model, "--batch", "2", "--ranks", "2", "--shard", shard, "-o", plan)
    if not check(p.returncode == 0, f"mtc --ranks 2 --shard {shard} failed", p):
        return
    log, ck = os.path.join(tmp, f"kill-{what}.jsonl"), os.path.join(tmp, f"ck-{what}")
    job, pids = start_long(mtrun, plan, log, ["--save", ck, "--save-every", "2"])
    if not check(len(pids) == 2 and job.poll() is None, f"the ranks did not start: {pids}"):
        job.kill()
        return
    os.kill(pids[1], signal.SIGKILL)
    t0 = time.time()
    try:
        out, err = job.communicate(timeout=60)
        took = time.time() - t0
        check(job.returncode != 0, f"mpirun exited {job.returncode} after a rank was killed")
        # every rank gone within the 60 s too (one may take a moment to die in the middle of an fsync of its shard)
        while True:
            alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and
                     open(f"/proc/{pid}/stat").read().split()[2] != "Z"]
            if not alive or time.time() > t0 + 60:
                break
            time.sleep(0.05)
        check(not alive, f"ranks {alive} still run 60 s after the kill")
        print(f"kill -9 of one {what} rank of 2 after {len(losses(log))} steps: mpirun exited {job.returncode} in {took:.1f} s, "
              f"the ranks gone in {time.time() - t0:.1f} s")
    except subprocess.TimeoutExpired:
        check(False, "mpirun and the other rank still run 60 s after a rank was killed")
        job.kill() # mpirun, which this test started; its ranks go with it
        job.communicate()
        return
    # the run resumes from its last committed step and continues as an uninterrupted run of the same schedule
    step = newest_manifest(ck)
    if not check(step >= 2, f"no checkpoint committed before the kill: {os.listdir(ck) if os.path.isdir(ck) else None}"):
        return
    flags = ["--steps", str(step + 2), "--schedule-steps", "100000", "--seed", "7", "--val-every", "100000",
             "--threads", "1", "--device", "cpu"]
    straight = os.path.join(tmp, f"straight-{what}.jsonl")
    p = run(*MPIRUN, "-np", "2", mtrun, plan, *flags, "--no-save", "--log", straight, timeout=300)
    if check(p.returncode == 0, "the uninterrupted run failed", p):
        resumes_alike(mtrun, plan, ck, tmp, f"kill -9 ({what})", step, losses(straight)[step:], step + 1, flags)
    if shard == "on":
        return
    # a rank dying mid-save (MT_CKPT_ABORT_*: rank 1 aborts 200 bytes into its shard of step 4): the job ends
    # non-zero, step 4 is never committed, and the run resumes from step 2
    ps, plog = os.path.join(tmp, "ps"), os.path.join(tmp, "partial.jsonl")
    args = [plan, "--steps", "6", "--seed", "7", "--val-every", "100000", "--threads", "1", "--device", "cpu",
            "--save", ps, "--save-every", "2", "--log", plog]
    p = run(*MPIRUN, "-np", "1", mtrun, *args, ":", "-np", "1", "-x", "MT_CKPT_ABORT_STEP=4", "-x",
            "MT_CKPT_ABORT_AFTER_BYTES=200", mtrun, *args, timeout=120)
    left = sorted(os.listdir(ps)) if os.path.isdir(ps) else []
    if check(p.returncode != 0 and newest_manifest(ps) == 2 and "step-000000004.shard-00001-of-00002" not in left,
             f"rank 1 dying in its shard of step 4: exit {p.returncode}, left {left}", p):
        print(f"rank 1 of 2 dying mid-save of step 4: exit {p.returncode}, left {left}")
        done = losses(plog)
        # (--save ps kept, saving only the final step 6: the step-4 leftovers go at its commit)
        resumes_alike(mtrun, plan, ps, tmp, "a rank dead mid-save", 2, done[2:4], 3, args[1:-4])
        left = sorted(os.listdir(ps))
        check(left == saved_files(2, 2) + saved_files(6, 2), f"after the resumed run's commit {ps} holds {left}")


def cuda(mtc, mtrun, model, lib, cxx, tmp, dtype="f32", layout="replicated"):
    from check_cuda_emu import build_kernels  # noqa: E402
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    plan, cu = os.path.join(tmp, "gpu.bin"), os.path.join(tmp, "gpu.cu")
    shard = "on" if layout == "sharded" else "off"
    p = run(mtc, model, "--target", os.path.join(src, "tests", "tiny-gpu.target"), "--batch", "2", "--ranks", "2",
            "--shard", shard, "--dtype", dtype, "--remat", "layer", "--resident", "0", "-o", plan, "--emit-cuda", cu)
    if not check(p.returncode == 0, f"mtc for tiny-gpu --ranks 2 --shard {shard} --dtype {dtype} failed", p):
        return
    kernels = build_kernels(cxx, src, cu, tmp)
    got = {}
    for device in ("cpu", "cuda"):
        log = os.path.join(tmp, device + ".jsonl")
        env = ["-x", f"MT_CUDA_BACKEND={lib}", "-x", f"MT_CUDA_EMU_KERNELS={kernels}",
               "-x", "MT_CUDA_EMU_DEVICES=2", "-x", "MT_POISON_FREE=1"] if device == "cuda" else []
        p = run(*MPIRUN, *env, "-np", "2", mtrun, plan, *TRAIN[:-1], device, "--log", log, timeout=600)
        if not check(p.returncode == 0, f"2 ranks on the {device} backend failed", p):
            return
        check(f"({layout})" in p.stdout, f"the {device} backend's banner does not say ({layout})", p)
        if device == "cuda":
            # each rank on its own of the 2 emulated devices (its local rank modulo 2), the banner saying which,
            # and the ranks' collectives opened (MPI through host copies: the emulation has no NCCL)
            for r in (0, 1):
                want = (f"rank {r}: cuda: CPU emulation of CUDA (device {r} of 2, sm_90, the plan's sm_90 cubin), "
                        "collectives by MPI through host copies")
                check(want in p.stdout, f"the banner does not say '{want}'", p)
        got[device] = losses(log) + val_losses(log)
    tol = 1e-5 if dtype == "f32" else 1e-3  # check_cuda_emu.py's tolerances against the cpu backend
    worst = max((abs(a - b) / abs(a) for a, b in zip(got["cpu"], got["cuda"])), default=1)
    check(len(got["cuda"]) == len(got["cpu"]) >= 6 and worst <= tol,
          f"2 {layout} {dtype} ranks: the emulated cuda backend's losses {got['cuda']} against the cpu backend's "
          f"{got['cpu']} (over {tol:g})")
    print(f"2 {layout} {dtype} ranks on the emulated cuda backend: losses within {worst:.3g} of the cpu backend's "
          f"(tolerance {tol:g})")


def tied(mtc, mtrun, model, tmp):
    """gpt2-tiny at 2 ranks against one process at accumulate 2 (the module docstring's tied: says why)."""
    one, per = os.path.join(tmp, "one.bin"), os.path.join(tmp, "ranks.bin")
    for plan, src, flags in ((one, with_accumulate(model, tmp, 2), []), (per, model, ["--ranks", "2", "--shard", "off"])):
        p = run(mtc, src, "--dtype", "f32", "--batch", "2", *flags, "-o", plan)
        if not check(p.returncode == 0, f"mtc {' '.join(flags)} failed", p):
            return
    for steps in ("1", "5"):
        extra = ["--steps", steps, "--val-every", steps]
        ref, got = train(mtrun, one, tmp, "one" + steps, 0, extra), train(mtrun, per, tmp, "np" + steps, 2, extra)
        if not (ref and got):
            return
        wr, wg = safetensors(ref[1]), safetensors(got[1])
        C = wr["wte.weight"].shape[1]
        for name in sorted(wr):
            a, b = wr[name], wg[name]
            if steps == "1":
                tol = 1e-7 if name == "wte.weight" else 0.0
                e = rel_max(a, b)
                check(e <= tol, f"{model} 1 step: {name} differs by {e:.3g} of its largest element (allowed {tol:g})")
                continue
            if name.endswith("attn.c_attn.bias"):  # [q | k | v]: the key third apart
                q, k = a[:C], a[C:2 * C]
                size = float(np.linalg.norm(k)) / float(np.linalg.norm(q))
                check(size <= 1e-3, f"{name}: its key third is {size:.3g} of the query third's size, not noise")
                a, b = np.concatenate([a[:C], a[2 * C:]]), np.concatenate([b[:C], b[2 * C:]])
            e = rel(a, b)
            check(e <= 1e-6, f"{model} 5 steps: {name} differs by {e:.3g} relative (over 1e-6)")
        diff = {n: rel_max(wr[n], wg[n]) for n in wr}
        print(f"{model} f32, 2 ranks against accumulate 2, {steps} step(s): tensors differing "
              f"{sorted(n for n, e in diff.items() if e > 0) if steps == '1' else len([e for e in diff.values() if e])}"
              f"; largest {max(diff.values()):.3g} of a tensor's largest ({max(diff, key=diff.get)})")


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
            cuda(mtc, mtrun, model, sys.argv[5], sys.argv[6], tmp, *sys.argv[7:9])
        elif mode == "kill":
            kill(mtc, mtrun, model, tmp)
        elif mode == "tied":
            tied(mtc, mtrun, model, tmp)
        else:
            sys.exit(f"unknown mode {mode}")
    return finish(f"{mode} checks")


if __name__ == "__main__":
    sys.exit(main())
