#!/usr/bin/env python3
"""The cuda backend (runtime/backend/backend_cuda.c) on the CPU emulation of CUDA.

usage: check_cuda_emu.py train MTC MTRUN LIBMT_CUDA_EMU CXX SRC WORK MODEL [TARGET] [--remats=A,B] [--dtypes=A,B]
       check_cuda_emu.py waits MTC MTRUN LIBMT_CUDA_EMU CXX SRC WORK MODEL
       check_cuda_emu.py pin MTC MTRUN LIBMT_CUDA_EMU CXX SRC WORK MODEL
       check_cuda_emu.py tile MTC MTRUN LIBMT_CUDA_EMU CXX SRC WORK MODEL
       check_cuda_emu.py grads MTC MTRUN LIBMT_CUDA_EMU CXX SRC WORK MODEL
       check_cuda_emu.py gpu MTC MTRUN - - SRC WORK MODEL
       check_cuda_emu.py docs MTC MTRUN LIBMT_CUDA_EMU CXX SRC WORK MODEL

Plans are compiled for TARGET, by default tests/tiny-gpu.target (sm_90, 3.1 MB of device
memory, --batch 2, --resident 0 but under --remat none: every layer
streams through the weight slots). Each plan's translation unit (mtc --emit-cuda, the CUDA C that NVRTC
compiled into the plan) is built for the host with tests/emu/cuda_emu.h and
its kernel table into a shared object; mtrun --device cuda then loads
LIBMT_CUDA_EMU (MT_CUDA_BACKEND: the backend linked against
tests/emu/cuda_api_emu.c), which serves cuModuleLoadData from that object
(MT_CUDA_EMU_KERNELS).

train: f32 and bf16 (or --dtypes), every --remat mode (or --remats): the first 5 losses and a
  validation loss at step 5 of the cuda backend equal the cpu backend's, f32 within
  1e-5 and bf16 within 1e-3 relative. The first run (f32, remat none) also
  writes mtrun --trace, checked against mtc --trace's prediction: the same
  tracks and names, every predicted instruction timed each step, no overlap
  on a track (checks.measured_trace_errors). The backend allocates the kernel
  scratch the plan records (common/scratch.h); that plan with 256 bytes less
  recorded must be refused naming both figures (exit 1).
tile: bf16, --remat layer, untiled and --tile 4: the tiled plan's GEMMs that
  write a tiled parameter gradient's fp32 part from bf16 operands (cuBLASLt's
  C layout f32 under bf16 A and B) run on the emulation, whose losses and
  gradient norms equal the cpu backend's within 1e-3 (train's bf16
  tolerance) and the untiled plan's on the emulation within 1e-5.
grads: (--remat layer, 3 steps) f32 and bf16, accumulate 1 and 2, on the cpu
  backend and the emulation: COPY_OUT's gradients set where the store holds
  zeros (store_grads_out; on the emulation through ring slots of 1000 bytes,
  MT_RING_SLOT_BYTES, so every gradient goes in pieces), and under bf16 with
  accumulate 1 a layer's copied into the store's bf16 gradients that the
  norm and AdamW read directly (storage_grads_bf16), against every one
  added into fp32 accumulators (MT_GRADS_ADD_ONLY=1, the path before; whole
  gradients a slot): the same losses, every bit, and the same checkpoint
  (weights, Adam moments) byte for byte. And the host store's bytes: mtc
  --summary's host_bytes and what mtrun's store allocates (its banner) are
  18 (bf16) or 16 (f32) a padded parameter, 2 less a layer's for bf16 at
  accumulate 1, and 18 or 16 for all of them under MT_GRADS_ADD_ONLY=1.
gpu: train's comparison with the cuda backend on the GPU (tests/gpu/run.sh),
  remat layer and offload only.
waits: (f32, --remat layer, 3 steps) the train stream's WAITs dropped one at a time (MT_TEST_DROP_WAIT,
  mtrun's test hook, after the plan verifier, which also holds back the work the
  WAIT waited for, 50 ms on its engine's thread, so that the consumer runs
  first): at least 10 of them must make the run fail, by a loss or gradient
  norm (the host's norm reads copied-out gradients) off the cpu backend's by more than 1e-5 relative (the
  train check's f32 tolerance) or by a reported error or hang, in one of SEEDS
  runs with other random pauses. The hook also says which WAITs the verifier
  finds implied by others (no run can catch those).
docs: packed documents (X.docs) through the fp32 flash kernels' seg_start
  (check_doc_starts says what is held).
pin: (f32, --remat layer, 2 steps) the host ranges pinned in chunks: with the
  emulated driver refusing a cudaHostRegister over PIN_MAX bytes (as r580
  refuses 512 GiB) and MT_PIN_CHUNK_BYTES set below it, the run pins each
  range in chunks of at most that size, contiguous, no page in two, each
  unregistered at the end, prints the pinning time, and its losses equal the
  cpu backend's within 1e-5; with the default chunk (64 GiB) the same limit
  refuses the run up front, naming what could not be pinned (exit 1).
  A LoRA plan (bf16) pins no page of the frozen base's gradients: it pins at most
  the host store's bytes (mtc --summary's host_bytes), and trains as the cpu
  backend does within 1e-3.
"""
import hashlib
import json
import math
import os
import re
import subprocess
import sys

import numpy as np

from checks import fail, measured_trace_errors

REMATS = ("none", "layer", "selective", "offload")
DTYPES = ("f32", "bf16")
SEEDS = 1  # runs per dropped WAIT in the waits check (the held producer makes one enough)


def run(args, env=None, timeout=1200):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def kernel_table(text):
    """The names of every entry point of a translation unit: expression and
    finish kernels, and the three of each attention instantiation."""
    names = re.findall(r'^extern "C" __global__ void (?:__launch_bounds__\([\d, ]+\) )?(\w+)\(', text, re.M)
    for m in re.finditer(r'^MT_ATTN_(TC_)?INSTANTIATE(?:_OPT|_CHUNK)?\((.*)\)\s*$', text, re.M):
        name, pre = m.group(2).split(",")[-1].strip(), "mt_attn_tc" if m.group(1) else "mt_attn"
        names += [f"{pre}_fwd_{name}", f"{pre}_bwd_dq_{name}", f"{pre}_bwd_dkdv_{name}"]
    return names


def build_kernels(cxx, src, cu, work):
    """The plan's CUDA C for the emulation, one shared object per distinct text."""
    text = open(cu).read()
    key = hashlib.sha1(text.encode()).hexdigest()[:16]
    so = os.path.join(work, f"kernels-{key}.so")
    if os.path.exists(so):
        return so
    names = kernel_table(text)
    if not names:
        fail(f"{cu}: no kernels found")
    emu = os.path.join(work, f"kernels-{key}.cu")
    with open(emu, "w") as f:
        f.write('#include "cuda_emu.h"\n' + text.replace("extern __shared__", "extern") + "\nMT_EMU_KERNELS_BEGIN\n")
        f.write("".join(f"MT_EMU_KERNEL({n})\n" for n in names) + "MT_EMU_KERNELS_END\n")
    p = run([cxx, "-x", "c++", "-std=c++17", "-O1", "-fPIC", "-shared", "-w", "-I", os.path.join(src, "tests", "emu"),
             emu, "-o", so + ".tmp"])
    if p.returncode != 0:
        fail(f"{emu} does not compile for the emulation", p)
    os.replace(so + ".tmp", so)
    return so


TARGET = "tests/tiny-gpu.target"  # relative to SRC; the optional last argument


def compile_args(mtc, src, model, dtype, remat):
    resident = [] if remat == "none" else ["--resident", "0"]  # none keeps every layer resident
    return [mtc, os.path.join(src, model), "--target", os.path.join(src, TARGET), "--batch", "2",
            *resident, "--dtype", dtype, "--remat", remat]


def compile_plan(mtc, src, work, model, dtype, remat):
    base = os.path.join(work, f"{dtype}-{remat}")
    p = run(compile_args(mtc, src, model, dtype, remat) + ["-o", base + ".bin", "--emit-cuda", base + ".cu"])
    if p.returncode != 0:
        fail(f"mtc {model} --dtype {dtype} --remat {remat} for {TARGET}", p)
    return base + ".bin", base + ".cu"


def losses(mtrun, plan, log, cuda=None, extra_env=None, expect_ok=True, steps=5, norms=False, extra_args=()):
    """`steps` steps' losses and a validation loss at the last (and with norms, each step's gradient norm);
    None when the run failed (expect_ok False)."""
    env = dict(os.environ)
    for k in ("MT_REPLAY_ORDER", "MT_TEST_DROP_WAIT", "MT_CUDA_BACKEND", "MT_CUDA_EMU_KERNELS"):
        env.pop(k, None)
    args = [mtrun, plan, "--steps", str(steps), "--seed", "7", "--val-every", str(max(steps, 1)), "--val-batches", "1", "--log", log,
            *extra_args, "--device", "cpu"]
    if cuda:
        if cuda is not True:  # the emulation; True: the GPU
            env["MT_CUDA_BACKEND"], env["MT_CUDA_EMU_KERNELS"] = cuda
        env["MT_POISON_FREE"] = "1"  # freed regions NaN, so a wrong schedule shows (off in production)
        args[-1] = "cuda"
    env.update(extra_env or {})
    if os.path.exists(log):
        os.remove(log)
    p = run(args, env=env, timeout=300)
    if p.returncode != 0:
        if expect_ok:
            fail(f"mtrun {plan} --device {args[-1]} failed (exit {p.returncode})", p)
        return None, p
    if cuda and ("device   cuda: " not in p.stdout or (cuda is True) == ("CPU emulation of CUDA" in p.stdout)):
        fail("mtrun --device cuda did not run on the " + ("GPU" if cuda is True else "emulated cuda backend"), p)
    with open(log) as f:
        ms = [json.loads(line) for line in f]
    got = [m["loss"] for m in ms if "loss" in m] + [m["val_loss"] for m in ms if "val_loss" in m]
    if norms:
        got += [m["grad_norm"] for m in ms if "grad_norm" in m]
    return got, p


def with_scratch(plan, out, delta):
    """A copy of plan whose ARENA section records `delta` bytes more kernel scratch (its crc redone);
    returns the scratch plan records."""
    import struct
    import zlib
    d = bytearray(open(plan, "rb").read())
    count = struct.unpack_from("<I", d, 16)[0]
    for i in range(count):
        entry = 24 + 24 * i
        sid, _, off, size = struct.unpack_from("<IIQQ", d, entry)
        if sid == 5:  # ARENA: i64 arena_bytes, i64 scratch_bytes, ...
            recorded = struct.unpack_from("<q", d, off + 8)[0]
            struct.pack_into("<q", d, off + 8, recorded + delta)
            struct.pack_into("<I", d, entry + 4, zlib.crc32(bytes(d[off:off + size])))
    open(out, "wb").write(d)
    return recorded


def check_scratch_refused(mtrun, plan, work, cuda):
    """The backend refuses a plan recording less kernel scratch than its kernels need, by name, no crash."""
    short = os.path.join(work, "short-scratch.bin")
    recorded = with_scratch(plan, short, -256)  # the plan records its kernels' need exactly (a multiple of 256)
    got, p = losses(mtrun, short, os.path.join(work, "short.jsonl"), cuda, expect_ok=False)
    want = f"the plan records {recorded - 256} bytes of kernel scratch per engine but its kernels need {recorded}"
    if got is not None or p.returncode != 1 or want not in p.stderr:
        fail(f"a plan recording {recorded - 256} bytes of kernel scratch: want exit 1 and '{want}'", p)
    print(f"{plan}: kernel scratch {recorded} bytes a kernel-running engine as recorded; {recorded - 256} refused")


def check_doc_starts(mtc, mtrun, lib, cxx, src, work):
    """Packed documents (X.docs) on the cuda backend: the fp32 flash kernels take seg_start. tests/check_sft.py's
    packed row (conversations A and B, then filler) gives B's per-token losses of the row holding B alone, read
    through --logits (the plan's own forward on the backend), f32 to 1e-5, at the start and after 3 steps trained
    on B (the backward keeps A out of B's gradients); the logits equal the cpu backend's (f32 1e-5, bf16 1e-2);
    --sample-every's greedy text is the cpu backend's; a bf16 plan whose attention runs the tensor-core kernels
    (head size 64), which take no seg_start yet, is refused naming the file and why."""
    from check_sft import token_losses, write_row
    rng = np.random.default_rng(3)
    A, B = list(rng.integers(1, 256, 10)), list(rng.integers(1, 256, 17))
    filler = list(rng.integers(1, 256, 33))
    j = lambda *p: os.path.join(work, *p)
    write_row(j("pack"), A + B + filler[:33 - 27], {0, 10, 27}, set(range(11, 27)))
    write_row(j("alone"), B + filler[:33 - 17], {0, 17}, set(range(1, 17)))
    for name in ("pack", "alone"):  # bytes, for --sample-every
        json.dump({"tokens": [bytes([i]).hex() for i in range(256)], "bos_token_id": None, "eos_token_id": None},
                  open(j(name + ".vocab.json"), "w"))
    base = [mtc, os.path.join(src, "examples/llama-tiny.mt"), "--target", os.path.join(src, TARGET), "--batch", "1",
            "--seq", "32", "--resident", "0", "--remat", "layer"]

    def logits(plan, cuda, name, steps, extra=()):
        got, p = losses(mtrun, plan, j("docs.jsonl"), cuda, steps=steps, extra_args=(
            "--data", j(name + ".bin"), "--val-data", j(name + ".bin"), "--logits", j("lg"), *extra))
        return np.load(j("lg.logits.npy")), p

    for dtype, tol in (("f32", 1e-5), ("bf16", 1e-2)):
        plan = j(f"docs-{dtype}.bin")
        p = run(base + ["--dtype", dtype, "-o", plan, "--emit-cuda", plan + ".cu"])
        if p.returncode != 0:
            fail(f"mtc llama-tiny --dtype {dtype} --batch 1 --seq 32 for {TARGET}", p)
        cuda = (lib, build_kernels(cxx, src, plan + ".cu", work))
        got = {}
        for name in ("pack", "alone"):
            for steps in (0, 3):
                extra = ("--sample-every", "3") if (name, steps) == ("pack", 3) else ()
                lg, p = logits(plan, cuda, name, steps, extra)
                if "documents" not in p.stdout:
                    fail(f"{dtype} {name}: the run does not say it keeps attention within documents", p)
                ref, q = logits(plan, None, name, steps, extra)
                e = float(np.abs(lg - ref).max() / np.abs(ref).max())
                print(f"{dtype} {name} {steps} steps: --logits on the emulated cuda backend against the cpu's {e:.2e}")
                if not e <= tol:
                    fail(f"{dtype} {name} {steps} steps: the cuda backend's logits off the cpu's by {e:.2e}")
                if extra:
                    greedy = lambda out: [l for l in out.splitlines() if " greedy: " in l]
                    if not greedy(p.stdout) or greedy(p.stdout) != greedy(q.stdout):
                        fail(f"{dtype}: --sample-every's greedy text on cuda {greedy(p.stdout)} vs cpu {greedy(q.stdout)}")
                np.save(j("t.logits.npy"), lg)
                os.replace(j("lg.tokens.npy"), j("t.tokens.npy"))
                got[name, steps] = token_losses(j("t"))[1]
        for steps in (0, 3):
            a, b = got["pack", steps][10:26], got["alone", steps][0:16]  # B's tokens predicting B's next
            e = float(np.abs(a - b).max() / np.abs(b).max())
            print(f"{dtype} {steps} steps on the emulated cuda backend: B's 16 per-token losses packed after A and "
                  f"alone agree to {e:.2e}")
            if dtype == "f32" and not e <= 1e-5:
                fail(f"{steps} steps: B packed after A and alone differ by {e:.2e} on the cuda backend")
    # the tensor-core kernels (bf16, head size 64: one head of llama-tiny's 64) take seg_start too: the run with
    # document starts gives the cpu backend's losses within bf16's storage rule, and differs from one without them
    model = j("llama-tiny-d64.mt")
    text = open(os.path.join(src, "examples/llama-tiny.mt")).read()
    open(model, "w").write(text.replace("NH = 4 ", "NH = 1 ").replace("NKV = 2 ", "NKV = 1 "))
    plan = j("docs-tc.bin")
    p = run(base[:1] + [model] + base[2:] + ["--dtype", "bf16", "-o", plan, "--emit-cuda", plan + ".cu"])
    if p.returncode != 0:
        fail("mtc llama-tiny at head size 64, bf16", p)
    if "MT_ATTN_TC_INSTANTIATE" not in open(plan + ".cu").read():
        fail("llama-tiny at head size 64, bf16, does not run the tensor-core attention kernels")
    data = ("--data", j("pack.bin"), "--val-data", j("pack.bin"))
    kern = (lib, build_kernels(cxx, src, plan + ".cu", work))
    got, _ = losses(mtrun, plan, j("tc.jsonl"), kern, extra_args=data)
    want, _ = losses(mtrun, plan, j("tc-cpu.jsonl"), extra_args=data)
    os.rename(j("pack.docs"), j("pack.docs.away"))
    across, _ = losses(mtrun, plan, j("tc-across.jsonl"), kern, extra_args=data)
    os.rename(j("pack.docs.away"), j("pack.docs"))
    e = worst_rel(got or [], want or [])
    if not (got and want and e <= 1e-2 and across and worst_rel(across, got) > 1e-3):
        fail(f"a bf16 plan on the tensor-core attention kernels with document starts: losses {got}, the cpu "
             f"backend's {want}, without the documents {across}")
    print(f"bf16 on the tensor-core attention kernels with document starts: the cpu backend's losses to {e:.2e}, "
          f"{worst_rel(across or [], got or []):.2e} from a run attending across documents")
    print("ok")


def worst_rel(a, b):
    if len(a) != len(b) or not a:
        return math.inf
    return max(abs(x - y) / max(abs(y), 1e-6) if math.isfinite(x) else math.inf for x, y in zip(a, b))


def check_train(mtc, mtrun, lib, cxx, src, work, model):
    for dtype, tol in [(d, t) for d, t in (("f32", 1e-5), ("bf16", 1e-3)) if d in DTYPES]:
        for remat in REMATS:
            plan, cu = compile_plan(mtc, src, work, model, dtype, remat)
            cuda = True if lib == "-" else (lib, build_kernels(cxx, src, cu, work))
            ref, _ = losses(mtrun, plan, os.path.join(work, "cpu.jsonl"))
            # the first run also writes the measured trace, checked against mtc --trace's
            trace = os.path.join(work, "measured.json") if (dtype, remat) == (DTYPES[0], REMATS[0]) else None
            got, p = losses(mtrun, plan, os.path.join(work, "cuda.jsonl"), cuda,
                            extra_args=("--trace", trace) if trace else ())
            if trace:
                check_scratch_refused(mtrun, plan, work, cuda)
            if trace:
                predicted = os.path.join(work, "predicted.json")
                q = run(compile_args(mtc, src, model, dtype, REMATS[0]) + ["--trace", predicted])
                errors = ["mtc --trace failed"] if q.returncode else measured_trace_errors(trace, predicted, 5)
                print(f"{model}: mtrun --trace on the cuda backend{'' if cuda is True else ' (emulated)'}: "
                      f"{'as mtc --trace predicts its tracks and names' if not errors else errors}")
                if errors:
                    fail(f"{model}: the measured trace: {errors}")
            sched = re.search(r"plan +\S+: (.*)", p.stdout)
            e = worst_rel(got, ref)
            print(f"{model} {dtype} remat {remat} ({sched.group(1) if sched else '?'}): cuda{'' if cuda is True else ' on the emulation'} "
                  f"{' '.join(f'{x:.6f}' for x in got)}; worst relative difference from the cpu backend {e:.2e} "
                  f"(tolerance {tol:.0e})")
            if not e <= tol:
                fail(f"{model} {dtype} remat {remat}: cuda {got} against cpu {ref}")
    print("ok")


def check_waits(mtc, mtrun, lib, cxx, src, work, model):
    plan, cu = compile_plan(mtc, src, work, model, "f32", "layer")
    so = build_kernels(cxx, src, cu, work)
    ref, _ = losses(mtrun, plan, os.path.join(work, "cpu.jsonl"), steps=3, norms=True)
    got, p = losses(mtrun, plan, os.path.join(work, "cuda.jsonl"), (lib, so), steps=3, norms=True)
    if not worst_rel(got, ref) <= 1e-5:
        fail(f"the undisturbed run differs: cuda {got} against cpu {ref}")
    m = re.search(r"MT_TEST_DROP_WAIT: the train stream has (\d+) WAITs",
                  run([mtrun, plan, "--steps", "0", "--device", "cpu"],
                      env=dict(os.environ, MT_TEST_DROP_WAIT="-1")).stderr)
    if not m:
        fail("mtrun does not count the plan's WAITs under MT_TEST_DROP_WAIT=-1")
    nwaits, caught, implied = int(m.group(1)), 0, 0
    for k in range(nwaits):
        # the verifier's judgement first (no steps, on the cpu): a WAIT other WAITs imply needs no run
        q = run([mtrun, plan, "--steps", "0", "--device", "cpu"], env=dict(os.environ, MT_TEST_DROP_WAIT=str(k)))
        if "verifier accepts the plan without it" in q.stderr:
            what = re.search(r"MT_TEST_DROP_WAIT: train stream (instruction \d+ \(WAIT [^)]*\))", q.stderr)
            implied += 1
            print(f"WAIT {k}, {what.group(1) if what else '?'}: other WAITs imply it, so nothing can catch it (not run)")
            continue
        for seed in range(SEEDS):  # another seed draws other pauses per stream
            got, p = losses(mtrun, plan, os.path.join(work, "drop.jsonl"), (lib, so),
                            {"MT_TEST_DROP_WAIT": str(k), "MT_CUDA_EMU_SEED": str(SEEDS * k + seed)}, expect_ok=False,
                            steps=3, norms=True)
            what = re.search(r"MT_TEST_DROP_WAIT: train stream (instruction \d+ \(WAIT [^)]*\))", p.stderr)
            what = what.group(1) if what else "?"
            if got is None:
                why = (p.stderr.strip().splitlines() or ["?"])[-1][:160]
                verdict = f"caught: the run failed: {why}"
            elif not worst_rel(got, ref) <= 1e-5:
                verdict = f"caught: losses and norms {' '.join(f'{x:.6f}' for x in got)}, {worst_rel(got, ref):.1e} off"
            else:
                continue
            caught += 1
            break
        else:
            verdict = f"not caught in {SEEDS} runs (the losses stay within 1e-5)"
        print(f"WAIT {k}, {what}: {verdict}")
    print(f"{caught} of {nwaits} WAITs of the train stream caught when dropped ({implied} implied by others; "
          "at least 10 needed)")
    if caught < 10:
        fail("fewer than 10 dropped WAITs caught")
    print("ok")


def check_pin(mtc, mtrun, lib, cxx, src, work, model):
    plan, cu = compile_plan(mtc, src, work, model, "f32", "layer")
    so = build_kernels(cxx, src, cu, work)
    ref, _ = losses(mtrun, plan, os.path.join(work, "cpu.jsonl"), steps=2)
    log, chunk, limit = os.path.join(work, "pins.log"), 64 << 10, 96 << 10
    if os.path.exists(log):
        os.remove(log)
    got, p = losses(mtrun, plan, os.path.join(work, "cuda.jsonl"), (lib, so), steps=2,
                    extra_env={"MT_CUDA_EMU_PIN_MAX": str(limit), "MT_PIN_CHUNK_BYTES": str(chunk),
                               "MT_CUDA_EMU_PIN_LOG": log})
    if not worst_rel(got, ref) <= 1e-5:
        fail(f"pinned in chunks: cuda {got} against cpu {ref}")
    pinned = re.search(r"cuda: pinned (\d+) bytes of host memory \((\d+) cudaHostRegister calls of at most "
                       r"(\d+) bytes\) in [\d.]+ s", p.stdout)
    if not pinned:
        fail("the pinning and its time are not printed", p)
    with open(log) as f:
        lines = [l.split() for l in f]
    regs = sorted((int(l[1]), int(l[2])) for l in lines if l[0] == "register")
    unregs = sorted(int(l[1]) for l in lines if l[0] == "unregister")
    groups, end = 0, None  # runs of contiguous chunks: one per range
    for at, n in regs:
        if n > chunk:
            fail(f"a cudaHostRegister of {n} bytes, over the chunk of {chunk}")
        groups += at != end
        end = at + n
    total = sum(n for _, n in regs)
    if unregs != [at for at, _ in regs]:
        fail(f"registered {len(regs)} chunks, unregistered {len(unregs)}, not the same")
    if len(regs) != int(pinned.group(2)) or total != int(pinned.group(1)) or int(pinned.group(3)) != chunk or len(regs) < 3:
        fail(f"{len(regs)} chunks of {total} bytes logged against '{pinned.group(0)}'")
    print(f"{pinned.group(0)}: {len(regs)} chunks of at most {chunk} bytes in {groups} contiguous ranges, "
          f"all unregistered; losses {' '.join(f'{x:.6f}' for x in got)} as the cpu backend's")
    got, p = losses(mtrun, plan, os.path.join(work, "cuda.jsonl"), (lib, so), steps=2, expect_ok=False,
                    extra_env={"MT_CUDA_EMU_PIN_MAX": str(limit)})
    if got is not None or p.returncode != 1 or "cannot pin" not in p.stderr or "cudaHostRegister" not in p.stderr:
        fail("a range the driver will not pin in one 64 GiB chunk is not refused up front", p)
    print(f"refused up front: {p.stderr.strip().splitlines()[-1][:200]}")
    # LoRA (bf16): the frozen base's gradients are never written, so none of their pages is pinned (a
    # cudaHostRegister would allocate them): everything pinned lies in what the host store holds (mtc's host_bytes)
    base, lora = os.path.join(work, "lora"), ["--lora", "rank=4,alpha=8,targets=q_proj,v_proj"]
    p = run(compile_args(mtc, src, model, "bf16", "layer") + lora + ["--summary", "--json"])
    if p.returncode != 0:
        fail("mtc --lora --summary --json", p)
    held = json.loads(p.stdout)["host_bytes"]
    p = run(compile_args(mtc, src, model, "bf16", "layer") + lora + ["-o", base + ".bin", "--emit-cuda", base + ".cu"])
    if p.returncode != 0:
        fail("mtc --lora for the emulation", p)
    ref, _ = losses(mtrun, base + ".bin", os.path.join(work, "lora-cpu.jsonl"), steps=2)
    got, p = losses(mtrun, base + ".bin", os.path.join(work, "lora-cuda.jsonl"),
                    (lib, build_kernels(cxx, src, base + ".cu", work)), steps=2)
    pinned = re.search(r"cuda: pinned (\d+) bytes", p.stdout)
    if not worst_rel(got, ref) <= 1e-3 or not pinned or int(pinned.group(1)) > held:
        fail(f"LoRA: cuda {got} against cpu {ref}; {pinned and pinned.group(0)} against the host store's "
             f"{held} bytes", p)
    print(f"LoRA: {pinned.group(0)} of the host store's {held}; losses as the cpu backend's")
def check_tile(mtc, mtrun, lib, cxx, src, work, model):
    runs = {}
    for tile in ("1", "4"):
        base = os.path.join(work, f"bf16-tile{tile}")
        p = run(compile_args(mtc, src, model, "bf16", "layer") + ["--tile", tile, "-o", base + ".bin",
                                                                 "--emit-cuda", base + ".cu"])
        if p.returncode != 0:
            fail(f"mtc {model} --dtype bf16 --tile {tile} for {TARGET}", p)
        so = build_kernels(cxx, src, base + ".cu", work)
        ref, _ = losses(mtrun, base + ".bin", os.path.join(work, "cpu.jsonl"), norms=True)
        got, _ = losses(mtrun, base + ".bin", os.path.join(work, "cuda.jsonl"), (lib, so), norms=True)
        e = worst_rel(got, ref)
        print(f"{model} bf16 --tile {tile}: cuda on the emulation {' '.join(f'{x:.6f}' for x in got)}; "
              f"worst relative difference from the cpu backend {e:.2e} (tolerance 1e-03)")
        if not e <= 1e-3:
            fail(f"--tile {tile}: cuda {got} against cpu {ref}")
        runs[tile] = got
    e = worst_rel(runs["4"], runs["1"])
    print(f"--tile 4 against untiled on the emulation: worst relative difference {e:.2e} (tolerance 1e-05)")
    if not e <= 1e-5:
        fail(f"--tile 4 {runs['4']} against untiled {runs['1']} on the emulation")
    print("ok")


def accumulate_copy(src, model, work, acc):
    """A copy of the model file with accumulate = acc in its train block."""
    text = open(os.path.join(src, model)).read()
    text, n = re.subn(r"^train \{\n", f"train {{\n  accumulate = {acc}\n", text, count=1, flags=re.M)
    if n != 1:
        fail(f"{model} has no train block to set accumulate in")
    out = os.path.join(work, f"acc{acc}-" + os.path.basename(model))
    with open(out, "w") as f:
        f.write(text)
    return out


def padded_elems(summary):
    """The host store's elements of the globals and of the layers (each tensor padded to 16), from mtc
    --summary --json's checkpoint names: a layer's by the block prefix."""
    head, tail = summary["blocks"][0]["prefix"].split("{i}")
    elems = [0, 0]
    for prm in summary["params"]:
        n = 1
        for d in prm["shape"]:
            n *= d
        elems[bool(re.match(re.escape(head) + r"\d+" + re.escape(tail), prm["name"]))] += (n + 15) // 16 * 16
    return elems


def allocated(p):
    """The bytes mtrun's host store allocated, from its banner."""
    m = re.search(r"host store [\d.]+ MB \((\d+) bytes allocated", p.stdout)
    if not m:
        fail("mtrun's banner does not say the bytes its host store allocated", p)
    return int(m.group(1))


def check_grads(mtc, mtrun, lib, cxx, src, work, model):
    """The gradients set where they hold zeros (store_grads_out) against every
    COPY_OUT added (MT_GRADS_ADD_ONLY=1, the path before): the same losses
    (%.9g: every bit of a float) and the same checkpoint (weights and Adam
    moments) byte for byte, on the cpu backend and the emulation."""
    data = os.path.join(src, "examples", "data", "tinyshakespeare.txt")  # the model's, which its copy would not find
    for acc in (1, 2):
        mfile = accumulate_copy(src, model, work, acc)
        for dtype in ("f32", "bf16"):
            base = os.path.join(work, f"grads-{dtype}-acc{acc}")
            args = compile_args(mtc, src, model, dtype, "layer")
            args[1] = mfile
            p = run(args + ["-o", base + ".bin", "--emit-cuda", base + ".cu"])
            if p.returncode != 0:
                fail(f"mtc {mfile} --dtype {dtype}", p)
            so = build_kernels(cxx, src, base + ".cu", work)
            p = run([mtc, mfile, "--dtype", dtype, "--summary", "--json"])
            if p.returncode != 0:
                fail(f"mtc {mfile} --dtype {dtype} --summary --json", p)
            summary = json.loads(p.stdout)
            glob, layers = padded_elems(summary)
            per = 18 if dtype == "bf16" else 16
            per_layer = per - 2 if dtype == "bf16" and acc == 1 else per
            want = {"set": glob * per + layers * per_layer, "add": (glob + layers) * per}
            if summary["host_bytes"] != want["set"] or summary["host_bytes_per_param"] != per_layer:
                fail(f"{dtype} accumulate {acc}: mtc --summary says {summary['host_bytes']} host bytes, "
                     f"{summary['host_bytes_per_param']} a layer parameter; want {want['set']}: {per} x {glob} global "
                     f"and {per_layer} x {layers} layer elements")
            for device, cuda in (("cpu", None), ("cuda", (lib, so))):
                got = {}
                # set: on the emulation through ring slots of 1000 bytes, every gradient in pieces
                for mode, env in (("set", {"MT_RING_SLOT_BYTES": "1000"}), ("add", {"MT_GRADS_ADD_ONLY": "1"})):
                    ck = os.path.join(work, f"ck-{dtype}-acc{acc}-{device}-{mode}")
                    if os.path.isdir(ck):
                        for f in os.listdir(ck):
                            os.remove(os.path.join(ck, f))
                    log = os.path.join(work, f"grads-{device}-{mode}.jsonl")
                    ls, p = losses(mtrun, base + ".bin", log, cuda, extra_env=env, steps=3,
                                   extra_args=("--save", ck, "--data", data))
                    if allocated(p) != want[mode]:
                        fail(f"{dtype} accumulate {acc} on {device}, {mode}: the host store allocated {allocated(p)} "
                             f"bytes, not {want[mode]}", p)
                    with open(os.path.join(ck, "step-000000003.ckpt"), "rb") as f:
                        got[mode] = (ls, f.read())
                if got["set"][0] != got["add"][0] or got["set"][1] != got["add"][1]:
                    fail(f"{dtype} accumulate {acc} on {device}: set {got['set'][0]} against added {got['add'][0]}, "
                         f"checkpoints {'equal' if got['set'][1] == got['add'][1] else 'differ'}")
                print(f"{dtype} accumulate {acc} on {device}: losses {' '.join(f'{x:.9g}' for x in got['set'][0])} and "
                      f"the {len(got['set'][1])}-byte checkpoint the same whether gradients are set or added; host "
                      f"store {want['set']} bytes planned and allocated ({want['add']} with fp32 gradients added: "
                      f"{want['add'] - want['set']} less, {(want['add'] - want['set']) / layers:g} a layer element)")
    print("ok")


def main():
    global TARGET, REMATS, DTYPES
    for a in [a for a in sys.argv if a.startswith("--remats=")]:  # a subset of the modes
        REMATS = tuple(a[len("--remats="):].split(","))
        sys.argv.remove(a)
    for a in [a for a in sys.argv if a.startswith("--dtypes=")]:  # a subset of f32, bf16
        DTYPES = tuple(a[len("--dtypes="):].split(","))
        sys.argv.remove(a)
    what, mtc, mtrun, lib, cxx, src, work, model = sys.argv[1:9]
    if what == "gpu":  # the emulation covers every mode; a GPU's minutes go to one that streams and one that offloads
        REMATS = ("layer", "offload")
    if len(sys.argv) > 9:
        TARGET = sys.argv[9]
    os.makedirs(work, exist_ok=True)
    if what == "docs":
        check_doc_starts(mtc, mtrun, lib, cxx, src, work)
        return
    {"train": check_train, "gpu": check_train, "waits": check_waits, "pin": check_pin, "tile": check_tile,
     "grads": check_grads}[what](mtc, mtrun, lib, cxx, src, work, model)


if __name__ == "__main__":
    main()
