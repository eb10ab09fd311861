#!/usr/bin/env python3
"""mtrun's command line and its refusals: help, version, usage errors (exit
2), a corrupted, truncated or missing plan and missing or unusable data
(exit 1, a message naming the problem), a metrics log on a full disk
(/dev/full: exit 1, named), checkpoints by default beside the log (not
over another run's, not beside /dev/null; resumed there; on SIGINT),
SIGINT with --no-save (exit 0, saying that nothing is saved), and a plan
file left untouched;
steps compared with the plan's prediction only on its target's kind of
machine (GPU or cpu).

usage: check_mtrun_cli.py MTC MTRUN
"""
import hashlib
import os
import signal
import subprocess
import sys
import tempfile

from checks import check, finish, measured_trace_errors, run


def main():
    mtc, mtrun = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "p.bin")
        p = run(mtc, "examples/llama-tiny.mt", "-o", plan)
        check(p.returncode == 0 and os.path.exists(plan), "mtc -o writes the plan", p)
        digest = hashlib.sha256(open(plan, "rb").read()).hexdigest()

        p = run(mtrun, "--help")
        check(p.returncode == 0 and p.stdout.startswith("usage: mtrun PLAN"), "--help", p)
        p = run(mtrun, "--version")
        check(p.returncode == 0 and p.stdout.startswith("mtrun "), "--version", p)
        for args, msg in [((), "no plan given"), ((plan, "--steps", "x"), "--steps needs an integer"),
                          ((plan, "--lr", "-1"), "--lr needs a finite number >= 0"),
                          ((plan, "--lr", "inf"), "--lr needs a finite number >= 0"),
                          ((plan, "--lr", "nan"), "--lr needs a finite number >= 0"), ((plan, "--device", "tpu"), "--device is cpu, cuda or auto"),
                          ((plan, "--bogus"), "unknown option '--bogus'"), ((plan, plan), "one plan at a time")]:
            p = run(mtrun, *args)
            check(p.returncode == 2 and msg in p.stderr, f"usage error {args}", p)

        # --device cuda where no GPU (or no cuda backend) is to be had: one line, exit 2, nothing run
        import ctypes.util
        if not ctypes.util.find_library("cuda"):
            p = run(mtrun, plan, "--device", "cuda", "--steps", "1")
            check(p.returncode == 2 and p.stderr.count("\n") == 1 and p.stderr.startswith("mtrun: --device cuda: ")
                  and "CUDA" in p.stderr and p.stdout == "", "--device cuda with no GPU: one line, exit 2", p)
            p = run(mtrun, plan, "--steps", "1", "--val-batches", "0", "--log", os.path.join(tmp, "a.jsonl"))
            check(p.returncode == 0 and p.stdout.startswith("device: cpu ("), "--device auto says it chose the cpu", p)

        # any finite learning rate >= 0 is taken, however large (the message's bound is the only one)
        p = run(mtrun, plan, "--steps", "1", "--lr", "1000", "--val-batches", "0", "--log", os.path.join(tmp, "lr.jsonl"))
        check(p.returncode == 0 and "lr 1e+03" in p.stdout, "--lr 1000 is taken", p)

        # --trace on the cpu backend: every instruction timed, on mtc --trace's tracks and names
        measured, predicted = os.path.join(tmp, "measured.json"), os.path.join(tmp, "predicted.json")
        p = run(mtc, "examples/llama-tiny.mt", "--trace", predicted)
        check(p.returncode == 0, "mtc --trace", p)
        p = run(mtrun, plan, "--steps", "3", "--device", "cpu", "--val-batches", "0", "--trace", measured,
                "--log", os.path.join(tmp, "t.jsonl"))
        errors = measured_trace_errors(measured, predicted, 3) if p.returncode == 0 else ["mtrun failed"]
        check(not errors, f"mtrun --trace on the cpu: {errors}", p)
        p = run(mtrun, plan, "--reference", "--trace", measured)
        check(p.returncode == 2 and "--reference runs none" in p.stderr, "--trace with --reference: usage error", p)
        p = run(mtrun, plan, "--steps", "1", "--device", "cpu", "--trace", os.path.join(tmp, "no", "dir", "t.json"))
        check(p.returncode == 1 and "cannot write the trace" in p.stderr, "--trace into a missing directory", p)

        # step times are compared with the plan's prediction only on its target's kind of machine:
        # an h200 plan on the cpu backend says it does not compare; a cpu target's plan compares
        p = run(mtrun, plan, "--steps", "2", "--device", "cpu", "--val-batches", "0", "--log", os.path.join(tmp, "c.jsonl"))
        check(p.returncode == 0 and "a GPU: not compared with this cpu backend's steps" in p.stdout
              and "x predicted" not in p.stdout, "a GPU plan's steps on the cpu: not compared with its prediction", p)
        cpu_plan = os.path.join(tmp, "cpu.bin")
        p = run(mtc, "examples/llama-tiny.mt", "--target", "tiny-2layers", "--batch", "1", "-o", cpu_plan)
        check(p.returncode == 0, "mtc for a cpu target", p)
        p = run(mtrun, cpu_plan, "--steps", "2", "--val-batches", "0", "--log", os.path.join(tmp, "d.jsonl"))
        check(p.returncode == 0 and p.stdout.count("x predicted)") == 2 and "not compared" not in p.stdout,
              "a cpu target's plan on the cpu: each step against its prediction", p)

        data = open(plan, "rb").read()
        cases = {"trunc.bin": data[: len(data) // 2], "empty.bin": b""}
        flipped = bytearray(data)
        flipped[len(data) - 10] ^= 0x40  # inside the last section
        cases["flipped.bin"] = bytes(flipped)
        for name, blob in cases.items():
            bad = os.path.join(tmp, name)
            open(bad, "wb").write(blob)
            p = run(mtrun, bad, "--steps", "1")
            check(p.returncode == 1 and bad in p.stderr and "error" in p.stderr, f"refuses {name}", p)
            check("section" in p.stderr or name == "empty.bin", f"{name}: the message names the section", p)
        p = run(mtrun, os.path.join(tmp, "missing.bin"))
        check(p.returncode == 1 and "missing.bin" in p.stderr, "missing plan", p)

        p = run(mtrun, plan, "--steps", "1", "--data", os.path.join(tmp, "no-such-data.txt"))
        check(p.returncode == 1 and "no-such-data.txt" in p.stderr, "missing data", p)
        tiny = os.path.join(tmp, "tiny.txt")
        open(tiny, "w").write("too short")
        p = run(mtrun, plan, "--steps", "1", "--data", tiny)
        check(p.returncode == 1 and "tiny.txt" in p.stderr, "data too small for a batch", p)

        # a metrics log that cannot be written (a full disk: /dev/full takes the open, fails every write) is an
        # error naming it, exit 1, never a log silently lost under "done"
        if os.path.exists("/dev/full"):
            p = run(mtrun, plan, "--steps", "2", "--val-batches", "0", "--log", "/dev/full")
            check(p.returncode == 1 and "/dev/full: cannot write the metrics log: No space left on device" in p.stderr
                  and "done:" not in p.stdout, "a metrics log on a full disk: an error, exit 1", p)

        # SIGINT with --no-save: the step finishes and the run exits 0, saying that nothing is saved
        q = subprocess.Popen([mtrun, plan, "--steps", "100000", "--val-batches", "0", "--no-save",
                              "--log", os.path.join(tmp, "i.jsonl")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in q.stdout:
            if line.startswith("step      2/"):
                break
        q.send_signal(signal.SIGINT)
        out, errs = q.communicate(timeout=120)
        check(q.returncode == 0 and "exiting without a checkpoint: this run saves none" in errs and "saving" not in errs
              and "stopped by a signal" in out and "checkpoints none (--no-save)" in out and not os.path.exists(
                  os.path.join(tmp, "i.ckpt")),
              f"SIGINT with --no-save: exit {q.returncode}, says nothing is saved:\n    stderr {errs!r}\n    {out[-300:]!r}")

        # checkpoints by default beside the log (LOG less .jsonl, with .ckpt): the final step, and on SIGINT
        p = run(mtrun, plan, "--steps", "2", "--val-batches", "0", "--log", os.path.join(tmp, "s.jsonl"))
        ck = os.path.join(tmp, "s.ckpt")
        check(p.returncode == 0 and f"  saves    {ck} every 50 steps" in p.stdout and f"checkpoints {ck}" in p.stdout
              and os.path.isdir(ck) and sorted(os.listdir(ck)) == ["step-000000002.ckpt"],
              "without --save, checkpoints beside the log", p)
        p = run(mtrun, plan, "--steps", "3", "--val-batches", "0", "--log", os.path.join(tmp, "s.jsonl"))
        check(p.returncode == 0 and f"saves    none: {ck} holds an earlier run's checkpoints (--resume {ck}" in p.stdout
              and "checkpoints none (see the banner)" in p.stdout and sorted(os.listdir(ck)) == ["step-000000002.ckpt"],
              "a new run into the same log leaves the earlier run's checkpoints alone and says so", p)
        p = run(mtrun, plan, "--steps", "3", "--val-batches", "0", "--resume", ck, "--log", os.path.join(tmp, "s.jsonl"))
        check(p.returncode == 0 and sorted(os.listdir(ck)) == ["step-000000002.ckpt", "step-000000003.ckpt"],
              "resuming from them goes on saving there", p)
        q = subprocess.Popen([mtrun, plan, "--steps", "100000", "--val-batches", "0", "--log", os.path.join(tmp, "k.jsonl")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in q.stdout:
            if line.startswith("step      2/"):
                break
        q.send_signal(signal.SIGINT)
        out, errs = q.communicate(timeout=120)
        ck = os.path.join(tmp, "k.ckpt")
        check(q.returncode == 0 and "then saving and exiting" in errs and os.path.isdir(ck) and len(os.listdir(ck)) == 1,
              f"SIGINT without --save saves beside the log: exit {q.returncode}\n    stderr {errs!r}\n    {out[-300:]!r}")
        p = run(mtrun, plan, "--steps", "1", "--val-batches", "0", "--log", "/dev/null")
        check(p.returncode == 0 and "saves    none: the log /dev/null is not a file" in p.stdout
              and not os.path.exists("/dev/null.ckpt"), "a log that is no file: nothing saved beside it", p)

        check(hashlib.sha256(open(plan, "rb").read()).hexdigest() == digest, "the plan is never modified")
    sys.exit(finish())


if __name__ == "__main__":
    main()
