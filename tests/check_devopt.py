#!/usr/bin/env python3
"""The optimizer's placement (mtc --device-optimizer, Plan.opt_device) changes no bit.

usage: check_devopt.py MTC MTRUN LIBMT_CUDA_EMU CXX SRC WORK

llama-tiny on tests/tiny-gpu-devopt.target (batch 2, --remat layer, --resident 0: both layers stream
through the weight slots) compiled three ways: every segment's optimizer on the host (none), every one
on the device (all) and the globals and layer 0 on it (1: mixed). On the cuda backend on the CPU
emulation (tests/emu/README.md), 3 steps each, then a checkpoint: its fp32 master and Adam moments
(W, M, V) must be the same bytes under each placement as under none, and the losses the same numbers:
  - f32 all and mixed, bf16 all, accumulate 1 (and --export's file, byte for byte); f32 all at accumulate 2;
  - a run of the all plan killed (SIGKILL) after its step-2 checkpoint, resumed by the mixed plan to
    step 3: the bytes of the run never stopped;
  - the cpu backend (where placement is a no-op) runs the placed plan to the bytes of the host plan
    on the cpu backend.
Refused, by name: a placement too large for the device (mtc, exit 1), --device-optimizer with --ranks
(a rank's slice on its device is not built; mtc, exit 2), a placed plan with --tier-dir (mtrun,
exit 1). Exit status 0 only when every check passed.
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_cuda_emu import build_kernels  # noqa: E402
from check_run import ckpt_arrays, losses, read_steps  # noqa: E402
from checks import check, fail, finish  # noqa: E402

STEPS = 3


def main():
    mtc, mtrun, lib, cxx, src, work = sys.argv[1:7]
    os.makedirs(work, exist_ok=True)
    target = os.path.join(src, "tests", "tiny-gpu-devopt.target")
    model = os.path.join(src, "examples", "llama-tiny.mt")
    base = [mtc, model, "--target", target, "--batch", "2", "--remat", "layer", "--resident", "0"]

    def compile_plan(dtype, placement):
        plan = os.path.join(work, f"{dtype}-{placement}.bin")
        p = subprocess.run(base + ["--dtype", dtype, "--device-optimizer", placement, "-o", plan,
                                   "--emit-cuda", plan + ".cu"], capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"mtc --dtype {dtype} --device-optimizer {placement}: exit {p.returncode}\n{p.stderr}")
        return plan, build_kernels(cxx, src, plan + ".cu", work)

    def env_for(so):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MT_CUDA") and k != "MT_REPLAY_ORDER"}
        if so:
            env.update(MT_CUDA_BACKEND=lib, MT_CUDA_EMU_KERNELS=so, MT_POISON_FREE="1")
        return env

    def args_for(plan, name, so, steps, extra):
        ck, log = os.path.join(work, "ck-" + name), os.path.join(work, name + ".jsonl")
        if "--resume" not in extra:
            subprocess.run(["rm", "-rf", ck])
        if os.path.exists(log):
            os.remove(log)
        return [mtrun, plan, "--steps", str(steps), "--seed", "7", "--val-every", "100", "--save", ck,
                "--save-every", "2" if steps > 2 else "1", "--log", log, "--device", "cuda" if so else "cpu",
                *extra], ck, log

    def train(plan, name, so, steps=STEPS, extra=()):
        """The checkpoint's (W, M, V) after `steps` steps and the run's losses; None when it failed."""
        args, ck, log = args_for(plan, name, so, steps, list(extra))
        p = subprocess.run(args, capture_output=True, text=True, env=env_for(so), timeout=300)
        if p.returncode != 0:
            fail(f"{name}: mtrun exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
            return None, None
        placed = "none" not in os.path.basename(plan)  # the banner says who holds a placed plan's optimizer
        want = "on the device: master" if so else "kept in the host store by this backend"
        check(not placed or want in p.stdout, f"{name}: the banner does not say the optimizer is {want}:\n"
              + p.stdout[:1500])
        return ckpt_arrays(os.path.join(ck, f"step-{steps:09d}.ckpt")), losses(log)

    def same(name, got, want):
        if got[0] is None or want[0] is None:
            return
        for k, what in enumerate("WMV"):
            check(got[0][k] == want[0][k], f"{name}: {what} is the host plan's, byte for byte")
        check(got[1] == want[1], f"{name}: the losses {got[1]} are the host plan's {want[1]}")
        print(f"ok   {name}: W, M and V ({len(got[0][0])} bytes each) and the losses are the host plan's")

    plans, refs = {}, {}
    for dtype, placements in (("f32", ("all", "1")), ("bf16", ("all",))):
        for placement in ("none",) + placements:
            plans[dtype, placement] = compile_plan(dtype, placement)
        export = lambda name: ["--export", os.path.join(work, name + ".safetensors")]  # noqa: E731
        refs[dtype] = train(*plans[dtype, "none"][:1], f"{dtype}-none", plans[dtype, "none"][1],
                            extra=export(f"{dtype}-none"))
        for placement in placements:
            plan, so = plans[dtype, placement]
            same(f"{dtype}, --device-optimizer {placement}",
                 train(plan, f"{dtype}-{placement}", so, extra=export(f"{dtype}-{placement}")), refs[dtype])
            a, b = (open(os.path.join(work, f"{dtype}-{x}.safetensors"), "rb").read() for x in ("none", placement))
            check(a == b, f"{dtype}, --device-optimizer {placement}: --export wrote other bytes than the host plan's")
            print(f"ok   {dtype}, --device-optimizer {placement}: --export's {len(b)} bytes are the host plan's")
    # accumulate 2
    ref = train(plans["f32", "none"][0], "acc-none", plans["f32", "none"][1], extra=["--accumulate", "2"])
    same("f32, accumulate 2, --device-optimizer all",
         train(plans["f32", "all"][0], "acc-all", plans["f32", "all"][1], extra=["--accumulate", "2"]), ref)
    # killed after the step-2 checkpoint, resumed under the other placement
    ref = refs["f32"]
    for first, then in (("all", "1"),):
        (plan_a, so_a), (plan_b, so_b) = plans["f32", first], plans["f32", then]
        name = f"killed-{first}-{then}"
        args, ck, log = args_for(plan_a, name, so_a, STEPS, [])
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(so_a))
        read_steps(proc, 2)
        while not os.path.exists(os.path.join(ck, f"step-{2:09d}.ckpt")) and proc.poll() is None:
            proc.stdout.readline()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = train(plan_b, name, so_b, extra=["--resume", ck])
        if got[0] is not None and ref[0] is not None:
            for k, what in enumerate("WMV"):
                check(got[0][k] == ref[0][k], f"{name}: {what} after the resume is the unstopped run's")
            print(f"ok   f32, --device-optimizer {first} killed after step 2, resumed under {then}: the bytes of "
                  "the run never stopped")
    # the cpu backend: placement is a no-op
    same("the cpu backend, --device-optimizer all", train(plans["f32", "all"][0], "cpu-all", None),
         train(plans["f32", "none"][0], "cpu-none", None))
    # refusals
    p = subprocess.run(base[:3] + [os.path.join(src, "tests", "tiny-gpu.target")] + base[4:] +
                       ["--device-optimizer", "all", "-o", os.path.join(work, "big.bin")], capture_output=True, text=True)
    check(p.returncode == 1 and "needs" in p.stderr and "MB of device memory" in p.stderr and
          "not even the globals fit" in p.stderr, f"too large for tiny-gpu: exit {p.returncode}: {p.stderr}")
    p = subprocess.run(base + ["--ranks", "2", "--device-optimizer", "all"], capture_output=True, text=True)
    check(p.returncode == 2 and "--device-optimizer" in p.stderr and "--ranks" in p.stderr,
          f"--device-optimizer with --ranks 2: exit {p.returncode}: {p.stderr}")
    args, _, _ = args_for(plans["f32", "all"][0], "tier", None, 1, ["--tier-dir", work])
    p = subprocess.run(args, capture_output=True, text=True, env=env_for(None))
    check(p.returncode == 1 and "--tier-dir" in p.stderr and "--device-optimizer none" in p.stderr,
          f"a placed plan with --tier-dir: exit {p.returncode}: {p.stderr}")
    print("ok   refused: too large for the device, with --ranks, with --tier-dir")
    sys.exit(finish("check_devopt"))


if __name__ == "__main__":
    main()
