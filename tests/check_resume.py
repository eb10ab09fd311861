#!/usr/bin/env python3
"""Checkpoints through mtrun: 10 steps straight and 5 + resume + 5 give
bit-identical weights and losses; --init's source is in the banner and the
log; without --save-every a checkpoint every
--val-every steps; the learning-rate schedule's length is the run's: a
resume with more steps keeps it (and says so) unless --schedule-steps says
otherwise, 25 + 5 steps of a 30-step schedule are the straight run, and a
version 2 checkpoint (no schedule length) still resumes; a checkpoint of another plan is refused; a
crash in the middle of a save (MT_CKPT_ABORT_AFTER_BYTES) leaves the previous
checkpoint intact and resumable; a corrupted checkpoint is refused naming the
file and the section; a plan that will not fit in host memory is refused
before anything is allocated.

usage: check_resume.py MTC MTRUN    (from the project root)
"""
import glob
import json
import os
import struct
import sys
import zlib
import tempfile

from checks import check, finish, losses, run


def main():
    mtc, mtrun = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as t:
        j = lambda *p: os.path.join(t, *p)
        plan, other = j("p.bin"), j("other.bin")
        check(run(mtc, "examples/llama-tiny.mt", "-o", plan).returncode == 0, "mtc llama-tiny")
        check(run(mtc, "examples/gpt2-tiny.mt", "-o", other).returncode == 0, "mtc gpt2-tiny")
        common = ["--val-every", "1000", "--val-batches", "1"]

        p = run(mtrun, plan, "--steps", "10", "--save", j("a"), "--save-every", "5", "--export", j("a.safetensors"),
                "--log", j("a.jsonl"), *common)
        check(p.returncode == 0, "10 steps straight", p)
        p = run(mtrun, plan, "--steps", "5", "--save", j("b"), "--save-every", "5", "--log", j("b1.jsonl"), *common)
        check(p.returncode == 0, "5 steps", p)
        p = run(mtrun, plan, "--steps", "10", "--resume", j("b"), "--save", j("b"), "--save-every", "5",
                "--export", j("b.safetensors"), "--log", j("b1.jsonl"), *common)
        check(p.returncode == 0 and "resumed from" in p.stdout, "resume and 5 more", p)
        if os.path.exists(j("b.safetensors")):
            check(open(j("a.safetensors"), "rb").read() == open(j("b.safetensors"), "rb").read(),
                  "weights after 10 steps equal bit for bit")
            la, lb = losses(j("a.jsonl")), losses(j("b1.jsonl"))  # the resumed run appends to its log
            check(la == lb and len(la) == 10, f"losses equal bit for bit:\n    {la}\n    {lb}")
        check(sorted(os.path.basename(f) for f in glob.glob(j("a", "*"))) ==
              ["step-000000005.ckpt", "step-000000010.ckpt"], f"checkpoints kept: {os.listdir(j('a'))}")

        # the --init source is in the banner and the log's config record (null without)
        p = run(mtrun, plan, "--steps", "1", "--init", j("a.safetensors"), "--log", j("init.jsonl"), *common)
        cfg = json.loads(open(j("init.jsonl")).readline())["config"] if p.returncode == 0 else {}
        check(p.returncode == 0 and f"  init     {j('a.safetensors')}\n" in p.stdout and cfg.get("init") == j("a.safetensors"),
              f"--init named in the banner and the log: {cfg.get('init')}", p)
        cfg = json.loads(open(j("a.jsonl")).readline())["config"]
        check("init" in cfg and cfg["init"] is None, f"no --init: the log says null: {cfg}")

        # without --save-every, a checkpoint every validation: --val-every's, not the model's (its 50)
        p = run(mtrun, plan, "--steps", "7", "--save", j("v"), "--keep", "5", "--val-every", "3", "--val-batches", "1",
                "--log", j("x.jsonl"))
        check(p.returncode == 0 and sorted(os.listdir(j("v"))) ==
              ["step-000000003.ckpt", "step-000000006.ckpt", "step-000000007.ckpt"] and "every 3 steps" in p.stdout,
              f"--save follows --val-every: {os.listdir(j('v')) if os.path.isdir(j('v')) else None}", p)

        before = sorted(os.listdir(j("a")))
        p = run(mtrun, plan, "--steps", "10", "--save", j("a"), *common, "--log", j("x.jsonl"))
        check(p.returncode == 1 and "already holds checkpoints" in p.stderr and sorted(os.listdir(j("a"))) == before,
              "a new run does not save over another run's checkpoints", p)
        p = run(mtrun, other, "--steps", "10", "--resume", j("a"), *common, "--log", j("x.jsonl"))
        check(p.returncode == 1 and "belongs to model 'llama_tiny'" in p.stderr and "this plan's model is 'gpt2_tiny'" in p.stderr,
              "another model's checkpoint is refused naming both", p)
        # the same model with its host store laid out otherwise (two global params declared the other way round)
        src = open("examples/llama-tiny.mt").read()
        swapped = src.replace('param norm "model.norm.weight" [C]\nparam lm_head "lm_head.weight" [V, C]',
                              'param lm_head "lm_head.weight" [V, C]\nparam norm "model.norm.weight" [C]')
        check(swapped != src, "examples/llama-tiny.mt no longer declares norm then lm_head")
        open(j("swapped.mt"), "w").write(swapped.replace('data = "', 'data = "' + os.path.abspath("examples") + "/"))
        check(run(mtc, j("swapped.mt"), "-o", j("swapped.bin")).returncode == 0, "mtc swapped llama-tiny")
        p = run(mtrun, j("swapped.bin"), "--steps", "10", "--resume", j("a"), *common, "--log", j("x.jsonl"))
        check(p.returncode == 1 and "laid out as it was" in p.stderr and "--export" in p.stderr,
              "the same model laid out otherwise is refused, saying how its weights can move", p)

        # the learning-rate schedule is part of the run (llama-tiny: warmup 20, then cosine to 0.1 of the peak):
        # 25 steps resumed to 30 keep the 25-step schedule (its final lr past step 25) and say so; with
        # --schedule-steps 30 from the start, 25 + 5 is the straight 30-step run to the bit
        p = run(mtrun, plan, "--steps", "30", "--log", j("s30.jsonl"), *common)
        check(p.returncode == 0, "30 steps straight", p)
        lrs = lambda path: [json.loads(line)["lr"] for line in open(path) if '"loss"' in line]
        p = run(mtrun, plan, "--steps", "25", "--save", j("s25"), "--log", j("s25.jsonl"), *common)
        check(p.returncode == 0, "25 steps", p)
        p = run(mtrun, plan, "--steps", "30", "--resume", j("s25"), "--save", j("s25r"), "--log", j("s25.jsonl"),
                *common)  # (saved elsewhere: s25 stays at step 25 for the resumes below)
        lr = lrs(j("s25.jsonl")) if p.returncode == 0 else []
        check(p.returncode == 0 and "lr schedule: over the checkpoint's run's 25 steps, kept, its final lr past them"
              in p.stdout and len(lr) == 30 and lr[24:] == [lr[24]] * 6 and abs(lr[24] - 0.1 * lr[19]) < 1e-9 * lr[19],
              f"a resume with more steps keeps the run's schedule and says so: lr {lr[18:]}", p)
        p = run(mtrun, plan, "--steps", "25", "--schedule-steps", "30", "--save", j("s25b"), "--log", j("s25b.jsonl"),
                *common)
        check(p.returncode == 0 and "lr schedule over 30 steps" in p.stdout, "25 steps of a 30-step schedule", p)
        p = run(mtrun, plan, "--steps", "30", "--resume", j("s25b"), "--log", j("s25b.jsonl"), *common)
        check(p.returncode == 0 and "lr schedule:" not in p.stdout and losses(j("s25b.jsonl")) == losses(j("s30.jsonl"))
              and lrs(j("s25b.jsonl")) == lrs(j("s30.jsonl")), "25 + 5 of a 30-step schedule is the straight run", p)
        p = run(mtrun, plan, "--steps", "30", "--resume", j("s25"), "--schedule-steps", "30", "--log", j("x.jsonl"), *common)
        check(p.returncode == 0 and "lr schedule: over 30 steps (--schedule-steps), the checkpoint's run's was 25" in p.stdout,
              "--schedule-steps on resume stretches the schedule and says what the lr becomes", p)
        # a version 2 checkpoint (META without the schedule's length) resumes over this run's steps, said
        v3 = open(j("s25", "step-000000025.ckpt"), "rb").read()
        check(v3[8:12] == struct.pack("<I", 3), "checkpoints are written as version 3")
        ents = [list(struct.unpack_from("<IIQQ", v3, 24 + 24 * k)) for k in range(4)]
        meta = v3[ents[0][2]:ents[0][2] + 336]
        body = bytearray(v3[:24 + 96]) + meta + v3[ents[0][2] + 344:]
        body[8:12] = struct.pack("<I", 2)
        body[20:24] = struct.pack("<I", zlib.crc32(bytes(body[:20])))
        ents[0][1], ents[0][3] = zlib.crc32(meta), 336
        for k in range(1, 4):
            ents[k][2] -= 8
        for k in range(4):
            struct.pack_into("<IIQQ", body, 24 + 24 * k, *ents[k])
        os.makedirs(j("v2"))
        open(j("v2", "step-000000025.ckpt"), "wb").write(bytes(body))
        p = run(mtrun, plan, "--steps", "27", "--resume", j("v2"), "--log", j("x.jsonl"), *common)
        check(p.returncode == 0 and "resumed from" in p.stdout and "does not record its run's; over this run's 27 steps"
              in p.stdout, "a version 2 checkpoint resumes, its schedule's length said to be unknown", p)

        # a crash while saving step 10 over a directory holding step 5
        for cut in ("100", "5000", "400000"):
            d = j("crash" + cut)
            p = run(mtrun, plan, "--steps", "5", "--save", d, "--save-every", "5", *common, "--log", j("c.jsonl"))
            check(p.returncode == 0, "save step 5", p)
            env = dict(os.environ, MT_CKPT_ABORT_AFTER_BYTES=cut)
            p = run(mtrun, plan, "--steps", "10", "--resume", d, "--save", d, "--save-every", "5", *common,
                    "--log", j("c.jsonl"), env=env)
            check(p.returncode != 0, f"the save of step 10 is killed after {cut} bytes", p)
            check(not os.path.exists(os.path.join(d, "step-000000010.ckpt")), "no step-10 checkpoint after the crash")
            p = run(mtrun, plan, "--steps", "10", "--resume", d, "--export", j("crash.safetensors"), *common,
                    "--log", j("c.jsonl"))
            check(p.returncode == 0 and "step 5" in p.stdout, f"resumes from step 5 after a crash at {cut} bytes", p)
            if os.path.exists(j("crash.safetensors")):
                check(open(j("crash.safetensors"), "rb").read() == open(j("a.safetensors"), "rb").read(),
                      "and ends with the same weights")

        # a corrupted checkpoint names the file and the section
        ck = j("a", "step-000000010.ckpt")
        blob = bytearray(open(ck, "rb").read())
        blob[len(blob) // 2] ^= 0x10
        open(ck, "wb").write(bytes(blob))
        p = run(mtrun, plan, "--steps", "12", "--resume", j("a"), *common, "--log", j("x.jsonl"))
        check(p.returncode == 1 and ck in p.stderr and "section" in p.stderr and "corrupted" in p.stderr,
              "a corrupted checkpoint is refused", p)

        # a model far larger than this machine's memory
        # (planned for a machine with the memory for it, not this one)
        roomy = j("roomy.target")
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "schedules", "h200.target")) as src, \
                open(roomy, "w") as dst:
            dst.write(src.read().replace("host_memory = 1.5e12", "host_memory = 20e12"))
        big = j("405b.bin")
        p = run(mtc, "examples/llama3-405b.mt", "--batch", "1", "--seq", "16", "--target", roomy, "-o", big)
        check(p.returncode == 0, "mtc llama3-405b", p)
        p = run(mtrun, big, "--steps", "1", "--data", "examples/data/tinyshakespeare.txt", "--log", j("x.jsonl"))
        check(p.returncode == 1 and "bytes of host memory" in p.stderr and "available" in p.stderr,
              "a 405B plan is refused with the memory it needs and the memory there is", p)
    sys.exit(finish())


if __name__ == "__main__":
    main()
