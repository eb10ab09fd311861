#!/usr/bin/env python3
"""A training run a person can watch, stop and resume, through mtc and mtrun:

- a model's relative `data =` is taken against the model file, whatever the
  current directories of mtc and mtrun;
- llm.c Llama-3 token files (uint32) train; --val-data validates on a
  separate file; the banner, each step's elapsed time and ETA, and the
  closing summary line are printed;
- the metrics log starts with a config record and is flushed every line:
  killed with SIGKILL after N printed steps, it holds those N steps;
- --save always saves the final step; SIGINT finishes the step, saves and
  exits 0, and resuming from that checkpoint gives the losses of a run that
  never stopped, to the bit; --resume with nothing left to do exits 1;
- a checkpoint resumes under another plan of the same model (--batch,
  --remat, --target, --tile): same batch, the same losses after it; another
  batch, the run says what changed;
- flags that do nothing where they are given are usage errors (exit 2);
- bytes are spoken of in one unit family (decimal: MB, GB) everywhere.

usage: check_run.py MTC MTRUN    (from the project root)
"""
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile

from checks import check, finish, last_run, run


def records(path):
    return last_run(path)  # (mtrun appends each run to its log)


def losses(path):
    return [r["loss"] for r in records(path) if "loss" in r]


def ckpt_arrays(path):
    """A checkpoint's W, M and V sections (runtime/store/checkpoint.c: a 24-byte
    header, then 4 table entries of u32 id, u32 crc, u64 offset, u64 size)."""
    b = open(path, "rb").read()
    check(b[:8] == b"MTCKPT\0\0", f"{path} is a checkpoint")
    out = {}
    for k in range(4):
        sid, _, off, size = struct.unpack_from("<IIQQ", b, 24 + 24 * k)
        out[sid] = b[off:off + size]
    return out[2], out[3], out[4]


def started(mtrun, plan, *args):
    return subprocess.Popen([mtrun, plan, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_steps(proc, n):
    """Reads proc's stdout until n step lines were printed; returns the lines read."""
    lines = []
    while sum(1 for l in lines if l.startswith("step") and "/" in l.split()[1]) < n:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    return lines


def main():
    mtc, mtrun = (os.path.abspath(a) for a in sys.argv[1:3])
    root = os.getcwd()
    text = open(os.path.join(root, "examples/data/tinyshakespeare.txt"), "rb").read()
    with tempfile.TemporaryDirectory() as t:
        j = lambda *p: os.path.join(t, *p)

        # 1. data = "corpus.txt" next to the model; mtc and mtrun run elsewhere
        os.makedirs(j("proj", "m"))
        os.makedirs(j("elsewhere"))
        src = open(os.path.join(root, "examples/llama-tiny.mt")).read()
        check('data = "data/tinyshakespeare.txt"' in src, "llama-tiny.mt names its data relative to itself")
        open(j("proj", "m", "tiny.mt"), "w").write(src.replace('"data/tinyshakespeare.txt"', '"corpus.txt"'))
        open(j("proj", "m", "corpus.txt"), "wb").write(text[:200000])
        p = run(mtc, "m/tiny.mt", "-o", j("plan.bin"), cwd=j("proj"))
        check(p.returncode == 0, "mtc from the model's parent directory", p)
        p = run(mtrun, j("plan.bin"), "--steps", "2", "--val-every", "1000", "--val-batches", "1", cwd=j("elsewhere"))
        check(p.returncode == 0 and j("proj", "m", "corpus.txt") in p.stdout,
              "a relative data path is found against the model file from another directory", p)
        plan = j("plan.bin")

        # 2. a Llama-3 token file and a separate validation file; banner, ETA, summary
        def llama3(path, toks):
            open(path, "wb").write(struct.pack("<256i", 20240801, 7, len(toks), *([0] * 253)) +
                                   struct.pack(f"<{len(toks)}I", *toks))
        llama3(j("train.bin"), list(text[:60000]))
        llama3(j("val.bin"), list(text[-20000:]))
        p = run(mtrun, plan, "--steps", "3", "--data", j("train.bin"), "--val-data", j("val.bin"), "--val-every", "3",
                "--log", j("l3.jsonl"))
        if check(p.returncode == 0, "trains on a Llama-3 token file with --val-data", p):
            out = p.stdout
            check("llm.c Llama-3 uint32 tokens" in out and "val data " + j("val.bin") in out and "60000 tokens" in out,
                  "the banner names the data files, their format and tokens", p)
            for word in ("mtrun: model llama_tiny", "parameters", "plan ", "device ", "log ", "tokens (batch"):
                check(word in out, f"the banner says {word!r}", p)
            check(all(("elapsed" in l and "eta" in l) for l in out.splitlines() if re.match(r"step +[0-9]+/", l)),
                  "each step's line has elapsed time and ETA", p)
            last = out.strip().splitlines()[-1]
            check(last.startswith("done: 3 steps") and "tokens in" in last and "final val_loss" in last and
                  j("l3.jsonl") in last and "checkpoints " + j("l3.ckpt") in last, f"the summary line: {last!r}", p)
            recs = records(j("l3.jsonl"))
            check("config" in recs[0] and recs[0]["config"]["val_data"] == j("val.bin") and
                  recs[0]["config"]["tokens_per_step"] == 1024, f"the log's first record is the config: {recs[0]}")

        # 2b. progress within a step: layer passes done of the step's total (every 0 s here, not 10 s)
        open(j("proj", "m", "acc.mt"), "w").write(src.replace('"data/tinyshakespeare.txt"', '"corpus.txt"')
                                                  .replace("  batch = 16", "  batch = 8\n  accumulate = 2"))
        p = run(mtc, "m/acc.mt", "-o", j("acc.bin"), cwd=j("proj"))
        check(p.returncode == 0, "mtc: accumulate = 2", p)
        p = subprocess.run([mtrun, j("acc.bin"), "--steps", "2", "--val-every", "1000", "--log", j("prog.jsonl")],
                           capture_output=True, text=True, env={**os.environ, "MT_PROGRESS_S": "0"})
        notes = [re.match(r"  step (\d+): (\d+) of (\d+) layer passes", l) for l in p.stdout.splitlines()]
        notes = [(int(m[1]), int(m[2]), int(m[3])) for m in notes if m]
        if check(p.returncode == 0 and notes, "progress lines are printed within a step", p):
            # 2 layers: forward head, 0, 1, tail; backward 1, 0, head: 7 passes a micro-batch
            # (the head and the tail are layer -1, the tail's forward and backward one pass)
            totals = {t for _, _, t in notes}
            done = [d for s, d, _ in notes if s == 2]
            check(totals == {2 * 7} and sorted(set(done)) == list(range(1, 15)) and done == sorted(done),
                  f"2 micro-batches of a 2-layer model: the passes of step 2 count 1..14 of 14: {notes}")

        # 3. SIGKILL after N printed steps: the log holds them
        proc = started(mtrun, plan, "--steps", "400", "--val-every", "1000", "--log", j("kill.jsonl"))
        read_steps(proc, 4)
        proc.kill()
        proc.wait()
        n = len(losses(j("kill.jsonl")))
        check(n in (4, 5), f"killed after 4 printed steps, the log holds {n} steps (4, or 5 if one more ended)")
        check("config" in records(j("kill.jsonl"))[0], "and starts with the config record")

        # 4. the final step is saved
        p = run(mtrun, plan, "--steps", "7", "--save-every", "5", "--save", j("fin"), "--val-every", "1000",
                "--log", j("fin.jsonl"))
        check(p.returncode == 0 and sorted(os.listdir(j("fin"))) == ["step-000000005.ckpt", "step-000000007.ckpt"],
              f"--steps 7 --save-every 5 saves steps 5 and 7: {os.listdir(j('fin')) if os.path.isdir(j('fin')) else None}", p)
        p = run(mtrun, plan, "--steps", "7", "--resume", j("fin"), "--log", j("fin.jsonl"))
        check(p.returncode == 1 and "nothing to do" in p.stderr and "step 7" in p.stderr,
              "--resume with nothing left to do exits 1 and says so", p)

        # 5. SIGINT mid-run: the step ends, is saved, exit 0; resuming gives the straight run's losses
        common = ["--val-every", "1000", "--val-batches", "1"]
        p = run(mtrun, plan, "--steps", "12", "--log", j("straight.jsonl"), *common)
        check(p.returncode == 0, "12 steps straight", p)
        proc = started(mtrun, plan, "--steps", "12", "--save", j("int"), "--save-every", "1000",
                       "--log", j("int.jsonl"), *common)
        read_steps(proc, 3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
        saved = sorted(os.listdir(j("int"))) if os.path.isdir(j("int")) else []
        done = len(losses(j("int.jsonl")))
        check(proc.returncode == 0 and saved == [f"step-{done:09d}.ckpt"] and 3 <= done < 12,
              f"SIGINT: exit {proc.returncode}, {done} steps logged, checkpoints {saved}\n    {err[-400:]!r}")
        check("stopped by a signal" in out, f"the summary says the run was stopped: {out[-300:]!r}")
        p = run(mtrun, plan, "--steps", "12", "--resume", j("int"), "--save", j("int"), "--log", j("int.jsonl"), *common)
        check(p.returncode == 0, "resume after SIGINT", p)
        la, lb = losses(j("straight.jsonl")), losses(j("int.jsonl"))
        check(la == lb and len(la) == 12, f"the stopped and resumed run's losses equal the straight run's:\n    {la}\n    {lb}")

        # 5b. a second signal ends the run at once; the checkpoint before it stays and resumes
        proc = started(mtrun, plan, "--steps", "12", "--save", j("sig2"), "--save-every", "2",
                       "--log", j("sig2.jsonl"), *common)
        read_steps(proc, 3)
        proc.send_signal(signal.SIGINT)
        proc.stderr.readline()  # (a blank line, then the first signal's note: the handler ran)
        note = proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=300)
        check("a second signal exits at once" in note, f"the first signal's note: {note!r}")
        saved = sorted(f for f in os.listdir(j("sig2")) if f.endswith(".ckpt"))
        check(proc.returncode == -signal.SIGINT and saved and saved[0] == "step-000000002.ckpt",
              f"two SIGINTs: killed by the second ({proc.returncode}), checkpoints {saved}")
        if saved:
            k = int(saved[-1][5:14])
            p = run(mtrun, plan, "--steps", "12", "--resume", j("sig2"), "--log", j("sig2r.jsonl"), *common)
            check(p.returncode == 0 and losses(j("sig2r.jsonl")) == losses(j("straight.jsonl"))[k:],
                  f"resuming after two signals (from step {k}) gives the straight run's losses", p)

        # 6. another plan of the same model resumes the checkpoint
        base = ["--steps", "7", "--log", j("x.jsonl"), *common]
        p = run(mtrun, plan, "--resume", j("fin5"), *base)  # (no such directory: refused)
        check(p.returncode == 1, "resume from a missing directory", p)
        os.makedirs(j("fin5"))
        os.link(j("fin", "step-000000005.ckpt"), j("fin5", "step-000000005.ckpt"))
        p = run(mtrun, plan, "--resume", j("fin5"), *base[:2], "--log", j("same.jsonl"), "--save", j("same7"), *common)
        check(p.returncode == 0, "the same plan resumes step 5", p)
        # another target and remat mode do the same arithmetic on the cpu backend: if the weights
        # and both moments carried over exactly, step 7's arrays are the same bits
        p = run(mtc, "m/tiny.mt", "--remat", "layer", "--target", "a100-80g", "-o", j("layer.bin"), cwd=j("proj"))
        check(p.returncode == 0, "mtc: the same model with --remat layer --target a100-80g", p)
        p = run(mtrun, j("layer.bin"), "--resume", j("fin5"), *base[:2], "--log", j("layer.jsonl"),
                "--save", j("layer7"), *common)
        if check(p.returncode == 0 and "another plan of this model" in p.stdout, "--remat layer resumes it", p):
            a = ckpt_arrays(j("same7", "step-000000007.ckpt"))
            b = ckpt_arrays(j("layer7", "step-000000007.ckpt"))
            check(all(len(x) > 0 and x == y for x, y in zip(a, b)),
                  "steps 6 and 7 from the checkpoint under either plan: weights, m and v the same bits")
        other = j("other.bin")
        p = run(mtc, "m/tiny.mt", "--remat", "layer", "--target", "a100-80g", "--tile", "2", "-o", other,
                cwd=j("proj"))
        check(p.returncode == 0, "mtc: the same model with --remat layer --target a100-80g --tile 2", p)
        p = run(mtrun, other, "--resume", j("fin5"), *base[:2], "--log", j("other.jsonl"), "--save", j("other7"),
                *common)  # (a resume saves into its folder unless told: fin5 stays at step 5 for the next)
        if check(p.returncode == 0 and "another plan of this model" in p.stdout and "schedule" in p.stdout,
                 "another plan resumes it and says what changed", p):
            a, b = losses(j("same.jsonl")), losses(j("other.jsonl"))
            check(len(a) == 2 and len(b) == 2 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)),
                  f"steps 6 and 7 under either plan: the weights and both moments carried over:\n    {a}\n    {b}")
        half = j("half.bin")
        p = run(mtc, "m/tiny.mt", "--batch", "8", "-o", half, cwd=j("proj"))
        check(p.returncode == 0, "mtc --batch 8", p)
        p = run(mtrun, half, "--resume", j("fin5"), *base[:2], "--log", j("half.jsonl"), *common)
        check(p.returncode == 0 and "batch 16 x seq 64 x accumulate 1 -> 8 x 64 x 1" in p.stdout,
              "a checkpoint resumes under another batch and says so", p)

        # 7. flags that do nothing where they are
        for args, what in ((["--dtype", "bf16"], "--dtype"), (["--shard-bytes", "9"], "--shard-bytes"),
                           (["--save-every", "3", "--no-save"], "--save-every"), (["--keep", "2", "--no-save"], "--keep"),
                           (["--save", j("nowhere"), "--no-save"], "--no-save"),
                           (["--init", "x.safetensors", "--resume", j("fin")], "--init")):
            p = run(mtrun, plan, "--steps", "1", *args)
            check(p.returncode == 2 and what in p.stderr, f"{what} where it does nothing is a usage error", p)
        p = run(mtrun, "--calibrate", "--steps", "3")
        check(p.returncode == 2 and "--steps" in p.stderr, "--calibrate with a training flag is a usage error", p)

        # 8. one unit for bytes in every output: decimal (B, kB, MB, GB), as --explain and the profiles
        p = run(mtc, "examples/llama3-8b.mt", "--summary")
        q = run(mtc, "examples/llama3-8b.mt", "--explain")
        check(p.returncode == 0 and q.returncode == 0 and " GB" in p.stdout and " GB" in q.stdout, "--summary and --explain", q)
        printed = p.stdout + q.stdout + open(j("fin.jsonl")).read()
        for d in ("compiler", "runtime"):  # and every message or file the code writes
            for f in sorted(os.listdir(os.path.join(root, d))):
                if f.endswith(".c"):
                    printed += "".join(l for l in open(os.path.join(root, d, f)) if "printf" in l or l.lstrip().startswith('"'))
        binary = sorted({u for u in ("KiB", "MiB", "GiB", "TiB") if u in printed})
        check(not binary, f"binary byte units in outputs: {binary}")

    sys.exit(finish())


if __name__ == "__main__":
    main()
