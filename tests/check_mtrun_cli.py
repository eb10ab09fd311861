#!/usr/bin/env python3
"""mtrun's command line and its refusals: help, version, usage errors (exit
2), a corrupted, truncated or missing plan and missing or unusable data
(exit 1, a message naming the problem), a metrics log on a full disk
(/dev/full: exit 1, named), checkpoints by default beside the log (not
over another run's, not beside /dev/null; resumed there; on SIGINT),
SIGINT with --no-save (exit 0, saying that nothing is saved), and a plan
file left untouched;
steps compared with the plan's prediction only on its target's kind of
machine (GPU or cpu); --warmup, --lr-schedule and --min-lr and the banner's
lr line and warnings (a warmup longer than the run, random weights for a
model hf_to_mt.py converted); an unwritable --save refused before the first
step, --resume DIR saving into DIR, a second run appending to a log (never
truncating it), JSONL data refused.

usage: check_mtrun_cli.py MTC MTRUN
"""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

from checks import check, finish, measured_trace_errors, run


def config_and_lrs(log):
    recs = [json.loads(line) for line in open(log)]
    return [r["config"] for r in recs if "config" in r], [r["lr"] for r in recs if "lr" in r and "step" in r]


def check_schedule_flags(mtc, mtrun, plan, tmp):
    """--warmup, --lr-schedule and --min-lr over the plan's schedule (cosine, warmup 20), the banner's lr line, its
    warning where the warmup outlasts the run, and where the weights came from."""
    for args, msg in [(("--warmup", "-1"), "--warmup needs an integer >= 0"),
                      (("--lr-schedule", "step"), "--lr-schedule is cosine, linear or constant"),
                      (("--min-lr", "x"), "--min-lr needs a finite number >= 0")]:
        p = run(mtrun, plan, *args)
        check(p.returncode == 2 and msg in p.stderr, f"usage error {args}", p)
    log = os.path.join(tmp, "sched.jsonl")
    p = run(mtrun, plan, "--steps", "4", "--lr", "1e-3", "--warmup", "2", "--lr-schedule", "linear", "--min-lr", "1e-5",
            "--val-batches", "0", "--no-save", "--log", log)
    configs, lrs = config_and_lrs(log) if p.returncode == 0 else ([{}], [])
    want = [5e-4, 1e-3, 1e-3 - (1e-3 - 1e-5) * 0.5, 1e-5]
    check(len(lrs) == 4 and all(abs(a - b) <= 1e-6 * b for a, b in zip(lrs, want)) and configs[-1].get("warmup") == 2
          and configs[-1].get("lr_schedule") == "linear" and abs(configs[-1].get("min_lr", 0) - 1e-5) < 1e-12
          and "  lr       peak 0.001 after 2 warmup steps, then linear to 1e-05 at step 4 (the flags)" in p.stdout
          and "WARNING" not in p.stdout, f"--warmup 2 --lr-schedule linear --min-lr 1e-5: lrs {lrs}", p)
    log = os.path.join(tmp, "const.jsonl")
    p = run(mtrun, plan, "--steps", "3", "--warmup", "0", "--lr-schedule", "constant", "--val-batches", "0",
            "--no-save", "--log", log)
    lrs = config_and_lrs(log)[1] if p.returncode == 0 else []
    check(len(lrs) == 3 and len(set(lrs)) == 1 and lrs[0] == 3e-3, f"--warmup 0 --lr-schedule constant: lrs {lrs}", p)
    # --epochs (the steps that pass over the training split that often), --log-every, and the train section's weight
    # decay, clip and accumulation from the command line (the log records what ran)
    log = os.path.join(tmp, "epochs.jsonl")
    p = run(mtrun, plan, "--epochs", "0.01", "--log-every", "5", "--weight-decay", "0", "--clip", "0.5", "--accumulate",
            "2", "--val-batches", "0", "--no-save", "--log", log)
    configs, lrs = config_and_lrs(log) if p.returncode == 0 else ([{}], [])
    c = configs[-1]
    printed = [line.split()[1] for line in p.stdout.splitlines() if line.startswith("step ")]
    check(len(lrs) == 5 and printed == ["1/5", "5/5"] and (c.get("weight_decay"), c.get("clip"), c.get("accumulate"))
          == (0, 0.5, 2) and "0.0102 epochs of the training split (--epochs)" in p.stdout,
          f"--epochs 0.01 --log-every 5 --weight-decay 0 --clip 0.5 --accumulate 2: {len(lrs)} steps, printed "
          f"{printed}, config {[c.get(k) for k in ('weight_decay', 'clip', 'accumulate')]}", p)
    for args, msg in [(("--epochs", "0"), "--epochs needs a finite number > 0"),
                      (("--epochs", "1", "--steps", "2"), "--epochs and --steps both set the run's length"),
                      (("--clip", "-1"), "--clip needs a finite number >= 0"),
                      (("--accumulate", "0"), "--accumulate needs an integer from 1"),
                      (("--log-every", "0"), "--log-every needs an integer >= 1")]:
        p = run(mtrun, plan, *args)
        check(p.returncode == 2 and msg in p.stderr, f"usage error {args}", p)
    # a resume that runs another schedule than the run it resumes (a checkpoint keeps no --lr or --warmup): said
    ck, log = os.path.join(tmp, "lrck"), os.path.join(tmp, "lrck.jsonl")
    p = run(mtrun, plan, "--steps", "2", "--lr", "1e-3", "--warmup", "1", "--val-batches", "0", "--save", ck, "--log", log)
    check(p.returncode == 0, "2 steps at lr 1e-3, warmup 1", p)
    p = run(mtrun, plan, "--steps", "3", "--resume", ck, "--lr", "1e-3", "--warmup", "1", "--val-batches", "0",
            "--no-save", "--log", log)
    check(p.returncode == 0 and "WARNING" not in p.stdout, "a resume with them: no warning", p)
    p = run(mtrun, plan, "--steps", "3", "--resume", ck, "--val-batches", "0", "--no-save", "--log", log)
    check(p.returncode == 0 and "WARNING: the run this resumes ran lr 0.001, warmup 1, cosine to 0.0001 (its log "
          f"{log}); this part runs lr 0.003, warmup 20, cosine to 0.0003" in p.stdout,
          "a resume without the run's --lr and --warmup: a warning naming both", p)
    # the model's warmup (20) outlasts a 4-step run: the banner says so (the lr never passed 6e-4, silently, before)
    p = run(mtrun, plan, "--steps", "4", "--val-batches", "0", "--no-save", "--log", os.path.join(tmp, "w.jsonl"))
    check(p.returncode == 0 and "WARNING: the warmup (20 steps) outlasts the run's schedule (4 steps): the lr never "
          "passes 0.0006; --warmup N shortens it" in p.stdout
          and "  init     random weights (seed 1337): no --init" in p.stdout, "the banner warns of a warmup too long", p)
    # a model tools/hf_to_mt.py wrote from a checkpoint's config, trained without --init: said loudly
    src = os.path.join(tmp, "from_hf.mt")
    open(src, "w").write("# written by tools/hf_to_mt.py from /models/tiny-llama\n" + open("examples/llama-tiny.mt").read())
    hf_plan = os.path.join(tmp, "from_hf.bin")
    p = run(mtc, src, "-o", hf_plan)
    check(p.returncode == 0, "mtc of a model file with hf_to_mt.py's first line", p)
    p = run(mtrun, hf_plan, "--steps", "1", "--val-batches", "0", "--no-save", "--data",
            "examples/data/tinyshakespeare.txt", "--log", os.path.join(tmp, "hf.jsonl"))
    warn = (f"WARNING: this run trains random weights, not a checkpoint's: the model file {src} was written by "
            "tools/hf_to_mt.py from /models/tiny-llama, but no --init was given (--init /models/tiny-llama starts "
            "from its weights)")
    check(p.returncode == 0 and warn in p.stdout and warn in p.stderr, "random weights of a converted model: a warning", p)


def check_protection(mtrun, plan, tmp):
    """What a run must not lose: an unwritable save folder refused before the first step, a resume saving where it
    resumed from, a metrics log appended to (never truncated) with the run numbered, JSONL data refused."""
    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").write("not a folder")
    p = run(mtrun, plan, "--steps", "2", "--val-batches", "0", "--save", os.path.join(blocker, "ckpt"),
            "--log", os.path.join(tmp, "u.jsonl"))
    check(p.returncode == 1 and "cannot create the checkpoint directory" in p.stderr and "step      1/" not in p.stdout,
          "an unwritable --save folder is refused before the first step", p)
    p = run(mtrun, plan, "--steps", "0", "--val-batches", "0", "--save", os.path.join(tmp, "unused"),
            "--log", os.path.join(tmp, "u.jsonl"))
    check(p.returncode == 0 and not os.path.exists(os.path.join(tmp, "unused")),
          "the check leaves no folder where nothing was saved", p)
    mine = os.path.join(tmp, "mine.ckpt")
    p = run(mtrun, plan, "--steps", "2", "--val-batches", "0", "--save", mine, "--log", os.path.join(tmp, "r1.jsonl"))
    check(p.returncode == 0 and os.listdir(mine) == ["step-000000002.ckpt"], "--save DIR", p)
    p = run(mtrun, plan, "--steps", "3", "--val-batches", "0", "--resume", mine, "--log", os.path.join(tmp, "r2.jsonl"))
    check(p.returncode == 0 and sorted(os.listdir(mine)) == ["step-000000002.ckpt", "step-000000003.ckpt"]
          and not os.path.exists(os.path.join(tmp, "r2.ckpt")), "--resume DIR saves into DIR", p)
    log = os.path.join(tmp, "twice.jsonl")
    for steps in ("3", "2"):
        p = run(mtrun, plan, "--steps", steps, "--val-batches", "0", "--no-save", "--log", log)
        check(p.returncode == 0, f"a run of {steps} steps into {log}", p)
    configs = [json.loads(line)["config"] for line in open(log) if line.startswith('{"config"')]
    steps = [json.loads(line)["step"] for line in open(log) if '"loss"' in line]
    check([c.get("run") for c in configs] == [1, 2] and steps == [1, 2, 3, 1, 2]
          and f"log      {log} (run 2 of the log: appended after the earlier runs' records, which stay)" in p.stdout,
          f"a second run appends to the first's log, numbered: runs {[c.get('run') for c in configs]}, steps {steps}", p)
    sys.path.insert(0, "tools")
    from plot_metrics import records  # the tools' reader: the log's last run
    check([r["step"] for r in records(log) if "loss" in r] == [1, 2], "plot_metrics.records reads the last run")
    jsonl = os.path.join(tmp, "sft.jsonl")
    with open(jsonl, "w") as f:
        for i in range(300):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"question {i}"}]}) + "\n")
    p = run(mtrun, plan, "--steps", "1", "--data", jsonl, "--no-save", "--log", os.path.join(tmp, "j.jsonl"))
    check(p.returncode == 1 and "is JSON (lines), not tokens" in p.stderr and "tools/prepare_data.py" in p.stderr,
          "JSONL given to --data is refused, naming tools/prepare_data.py", p)


def check_samples(mtrun, plan, tmp):
    """--sample-prompt: the user's token ids as the samples' prompt, a line when sampling starts, its cost in the
    banner, the step's checkpoint saved before the samples (a kill -9 while they run loses none); generation from a
    checkpoint with --steps 0; bad ids refused."""
    prompt = os.path.join(tmp, "prompt.ids")
    open(prompt, "w").write(" ".join(str(b) for b in b"ROMEO:") + "\n")
    ck = os.path.join(tmp, "samples.ckpt")
    q = subprocess.Popen([mtrun, plan, "--steps", "6", "--val-batches", "1", "--sample-every", "2", "--save-every", "2",
                          "--sample-prompt", prompt, "--save", ck, "--log", os.path.join(tmp, "smp.jsonl")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner, started = "", ""
    for line in q.stdout:
        banner += line
        if line.startswith("sampling step 2: "):
            started = line
            break
    q.kill()  # kill -9 while the samples of step 2 run
    q.communicate(timeout=120)
    saved = sorted(os.listdir(ck)) if os.path.isdir(ck) else []
    check(started.startswith(f"sampling step 2: a greedy and 2 temperature-1 continuations of {prompt} (6 tokens), up to 58")
          and "  samples  every 2 steps and the last: up to 58 new tokens" in banner
          and saved == ["step-000000002.ckpt"], f"samples of the user's prompt, said, after the checkpoint: {saved}\n"
          f"    {started!r}\n    {banner[-600:]!r}")
    p = run(mtrun, plan, "--resume", ck, "--steps", "0", "--sample-prompt", prompt, "--log", os.path.join(tmp, "g.jsonl"))
    check(p.returncode == 0 and 'sample 2 greedy: "ROMEO:" -> "' in p.stdout and p.stdout.count('sample 2 temp 1: "ROMEO:"') == 2
          and "done: nothing trained" in p.stdout and os.listdir(ck) == ["step-000000002.ckpt"],
          "generation from a checkpoint: --resume DIR --steps 0 --sample-prompt", p)
    # a resume without --steps runs to the end of the checkpoint's run (6 steps), not the model file's 500
    p = run(mtrun, plan, "--resume", ck, "--val-batches", "0", "--no-save", "--log", os.path.join(tmp, "end.jsonl"))
    check(p.returncode == 0 and "to the end of the checkpoint's run, step 6" in p.stdout and "step      6/6" in p.stdout,
          "a resume without --steps ends where the checkpoint's run would have", p)
    # the ETA prices the rounds of samples left: at step 3 of 4 one round (step 4's) is left
    p = run(mtrun, plan, "--steps", "4", "--val-batches", "1", "--sample-every", "2", "--sample-prompt", prompt,
            "--no-save", "--log", os.path.join(tmp, "eta.jsonl"))
    eta = re.search(r"^step +3/4 .* eta ([0-9.]+)s$", p.stdout, re.M)
    took = re.search(r"^sampling step 2: done in ([0-9.]+) s$", p.stdout, re.M)
    check(p.returncode == 0 and eta and took and float(eta.group(1)) >= 0.8 * float(took.group(1)),
          f"the ETA at step 3 ({eta and eta.group(1)} s) holds the round of samples left ({took and took.group(1)} s)", p)
    for text, why in (("1 2 999", "a token id out of range"), ("hello", "not token ids"), ("", "no token ids")):
        open(prompt, "w").write(text)
        p = run(mtrun, plan, "--steps", "1", "--sample-prompt", prompt, "--no-save", "--log", os.path.join(tmp, "b.jsonl"))
        check(p.returncode == 1 and why in p.stderr and "tools/prompt_tokens.py" in p.stderr, f"--sample-prompt {text!r}", p)


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
        own = os.path.join(tmp, "s.run2.ckpt")  # the second run of the log saves into its own folder beside it
        check(p.returncode == 0 and f"saves    {own} every 50 steps" in p.stdout
              and f"this run's own folder: {ck} holds an earlier run's checkpoints (--resume {ck}" in p.stdout
              and f"checkpoints {own}" in p.stdout and sorted(os.listdir(ck)) == ["step-000000002.ckpt"]
              and sorted(os.listdir(own)) == ["step-000000003.ckpt"],
              "a new run into the same log leaves the earlier run's checkpoints alone, saves its own beside, says so", p)
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

        check_schedule_flags(mtc, mtrun, plan, tmp)
        check_protection(mtrun, plan, tmp)
        check_samples(mtrun, plan, tmp)
        check(hashlib.sha256(open(plan, "rb").read()).hexdigest() == digest, "the plan is never modified")
    sys.exit(finish())


if __name__ == "__main__":
    main()
