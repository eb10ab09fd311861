#!/usr/bin/env python3
"""Sharded ranks with the NVMe tier (mtrun --tier-dir under mpirun, each rank's
tier file in DIR/rank-R-of-N), on the cpu backend: a tiny MoE, an 8-layer
mixtral-tiny, planned sharded on tests/tiny-tier-ranks.target, whose 7 MB
nodes of 2 GPUs make every rank spill part of its slice (tier=moments at 2
ranks; at 4, nodes of 4 MB):

- 2 and 4 ranks with the tier give one process's losses and weights
  without it (batch B x accumulate N), to 1e-6 relative (the weights in
  the 2-norm);

- 2 ranks with the tier give the same losses, to the bit, and the same
  checkpoint shards of step 6 (master and both moments), byte for byte, as 2
  ranks without it (which equal one process: tests/check_dist.py sharded);
  each rank's tier file is its own and is removed at exit;
- the tiered run's checkpoint of step 3 resumes on one process without it
  (batch 2 x accumulate 2), continuing the straight run's losses to 1e-6,
  and on 4 ranks with the tier (batch 1), giving what one process of batch
  1 x accumulate 4 resumed from it gives, to 1e-6;
- kill -9 of rank 1 in the middle of a tier write (MT_TIER_KILL_AT_WRITE)
  ends the job; it resumes from its last manifest, with the tier, to the
  straight run's losses;
- a failing tier device on rank 1 (a short write, MT_TIER_SHORT_WRITE) and
  a full one (a file size limit on rank 1 alone: fallocate fails as on a
  full disk) end every rank, exit non-zero, rank 1 naming its tier file.

With `weights` (test dist_tier_weights), the same model in bf16 on nodes of 4 MB (2 ranks) and 2 MB (4
ranks), whose ranks keep the bf16 weights on the tier too (tier=weights: DIR/rank-R-of-N/mtrun.weights,
mapped):

- 2 ranks with the tier give 2 ranks' losses without it to the bit, and the same checkpoint shards of step 6;
  2 and 4 ranks with it give one process's losses and weights without it (batch B x accumulate N) to 1e-6;
- their step 3 resumes on one process without the tier to the straight run's losses, to 1e-6;
- kill -9 of rank 1 in the middle of a tier write ends the job; it resumes with the tier to the straight run's
  losses;
- rank 1's weights file that cannot be made (a directory in its place) ends every rank, naming it; so does its
  weights file cut to nothing under the running job (through /proc/PID/fd: SIGBUS at its next access), whose
  newest checkpoint then resumes to the straight run's losses;
- at 4 ranks, kill -9 of rank 3 mid tier write resumes to the straight run's losses, and a full device on rank 3
  alone (a file size limit) ends every rank, naming its tier file;
- one process with tier=weights (one GPU's plan on a node of 4 MB) gives the losses and the final checkpoint of
  the same plan without the tier, to the bit.

usage: check_dist_tier.py MTC MTRUN [weights]   (from the project root)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_dist import MPIRUN, newest_manifest, rel, safetensors, saved_files, with_accumulate  # noqa: E402
from checks import check, finish, losses, run  # noqa: E402

TARGET = "tests/tiny-tier-ranks.target"
DATA = ["--data", os.path.abspath("examples/data/tinyshakespeare.txt")]
STEPS = ["--steps", "6", "--seed", "7", "--val-every", "100", "--threads", "1", "--device", "cpu", *DATA]


def plan(mtc, model, tmp, name, flags, target=TARGET):
    path = os.path.join(tmp, name + ".bin")
    p = run(mtc, model, "--target", target, *flags, "-o", path)
    return path if check(p.returncode == 0, f"mtc {' '.join(flags)} failed", p) else None


def mpi(mtrun, ranks, plan_path, *args, env=()):
    return run(*MPIRUN, *env, "-np", str(ranks), mtrun, plan_path, *args, timeout=300)




def small_target(tmp, memory):
    path = os.path.join(tmp, f"node-{memory}.target")
    with open(path, "w") as f:
        f.write(open(TARGET).read().replace("host_memory = 7e6", f"host_memory = {memory}"))
    return path


def agree(n, j):
    """The n tiered ranks' log and export (tier{n}.jsonl, tier{n}.safetensors under j) against one process's
    without the tier (one{n}.*): 6 losses and every weight to 1e-6 relative."""
    a, b = j(f"tier{n}.safetensors"), j(f"one{n}.safetensors")
    got, want = losses(j(f"tier{n}.jsonl")), losses(j(f"one{n}.jsonl"))
    wa, wb = safetensors(a), safetensors(b)
    worst = max(rel(wb[k], wa[k]) for k in wb) if wa.keys() == wb.keys() else 1
    lw = max((abs(x - y) / abs(y) for x, y in zip(got, want)), default=1)
    check(len(got) == 6 and lw <= 1e-6 and worst <= 1e-6,
          f"{n} ranks with the tier against one process without it: losses {got} and {want} ({lw:.3g}), "
          f"weights {worst:.3g} apart")
    print(f"{n} sharded ranks, each spilling to its tier, against one process without the tier: losses "
          f"within {lw:.3g}, weights within {worst:.3g} relative (2-norm)")


def straight(mtrun, n, pl, ref, tmp, tier):
    """n ranks of pl with the tier against one process of ref without it: losses and weights to 1e-6 (the
    ranks' weights exported by one process from their last checkpoint: --export refuses the master on a tier)."""
    j = lambda *p: os.path.join(tmp, *p)
    a, b = j(f"tier{n}.safetensors"), j(f"one{n}.safetensors")
    p = mpi(mtrun, n, pl, *STEPS, "--save", j(f"ck{n}"), "--log", j(f"tier{n}.jsonl"), "--tier-dir", tier)
    q = run(mtrun, ref, *STEPS, "--no-save", "--log", j(f"one{n}.jsonl"), "--export", b, timeout=300)
    if not (check(p.returncode == 0, f"{n} tiered ranks failed", p) and
            check(q.returncode == 0, "one process failed", q)):
        return
    e = run(mtrun, ref, *DATA, "--seed", "7", "--device", "cpu", "--resume", j(f"ck{n}"), "--steps", "0", "--no-save", "--export", a,
            timeout=300)
    if not check(e.returncode == 0, f"exporting the {n} ranks' checkpoint failed", e):
        return
    agree(n, j)


def cut_short(path):
    """Cuts to nothing the removed file path that a process holds open ('PATH (deleted)' in /proc/PID/fd), through
    that link; whether one did."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == path + " (deleted)":
                    os.truncate(f"/proc/{pid}/fd/{fd}", 0)
                    return True
        except OSError:  # a process gone, or not ours to read
            continue
    return False


def weights_fail(mtrun, two, tmp, tier, straight_losses):
    """A tier device failing under rank 1's mapped weights: its file, removed once mapped, cut to nothing through
    /proc/PID/fd as soon as it is there, so that the rank's next access to its weights raises SIGBUS. The 2 ranks
    resume from the straight run's step 3 and save every step: every rank ends, non-zero, rank 1 naming its file;
    the newest checkpoint resumes to the straight run's losses."""
    j = lambda *p: os.path.join(tmp, *p)
    ck = j("sigbus")
    os.mkdir(ck)
    for n in saved_files(3, 2):
        shutil.copy(j("nvme", n), ck)
    named = os.path.join(tier, "rank-1-of-2", "mtrun.weights")
    args = [*STEPS, "--resume", ck, "--save", ck, "--save-every", "1", "--log", j("sigbus.jsonl"), "--tier-dir", tier]
    job = subprocess.Popen([*MPIRUN, "-np", "2", mtrun, two, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    cut, start = False, time.time()
    while not cut and job.poll() is None and time.time() < start + 60:
        cut = cut_short(named)
        time.sleep(0.002)
    try:
        out, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
    p = subprocess.CompletedProcess(job.args, job.returncode, out, err)
    said = [ln for ln in err.splitlines() if "rank 1 of 2: error" in ln and named in ln]
    if not (check(cut, f"rank 1's weights file was not found open to cut short (the run: exit {job.returncode})", p)
            and check(job.returncode != 0 and said, f"rank 1's weights cut short: exit {job.returncode}, not ended "
                      f"naming {named}", p)):
        return
    step = newest_manifest(ck)
    q = mpi(mtrun, 2, two, *STEPS, "--resume", ck, "--no-save", "--log", j("after-sigbus.jsonl"), "--tier-dir", tier)
    got = losses(j("after-sigbus.jsonl"))
    check(3 <= step < 6 and q.returncode == 0 and got == straight_losses[step:],
          f"resumed after the cut from step {step}: {got}, the straight run's {straight_losses[step:]}", q)
    print(f"rank 1's weights cut short under it: every rank ended, exit {job.returncode}: {said[0]}; its newest "
          f"checkpoint (step {step}) resumed to the straight run's losses")


def weights(mtc, mtrun, model, tmp):
    """The bf16 weights on the tier too (tier=weights), at 2 and 4 ranks."""
    j = lambda *p: os.path.join(tmp, *p)
    # host memory a node of 2 GPUs: what the ranks' weights level needs, less than the gradients level's
    two = plan(mtc, model, tmp, "two", ["--batch", "2", "--ranks", "2", "--shard", "on"], small_target(tmp, "4e6"))
    four = plan(mtc, model, tmp, "four", ["--batch", "1", "--ranks", "4", "--shard", "on"], small_target(tmp, "2e6"))
    one = plan(mtc, with_accumulate(model, tmp, 2), tmp, "one", ["--batch", "2"])
    one4 = plan(mtc, with_accumulate(model, tmp, 4), tmp, "one4", ["--batch", "1"])
    if not (two and four and one and one4):
        return
    for pl, n in ((two, 2), (four, 4)):
        check(b" tier=weights" in open(pl, "rb").read(), f"the {n}-rank plan does not put its weights on the tier")
    tier = j("tier")
    os.mkdir(tier)
    for pl, n, ref in ((two, 2, one), (four, 4, one4)):
        straight(mtrun, n, pl, ref, tmp, tier)
    p = mpi(mtrun, 2, two, *STEPS, "--save", j("ram"), "--save-every", "3", "--log", j("ram.jsonl"))
    q = mpi(mtrun, 2, two, *STEPS, "--save", j("nvme"), "--save-every", "3", "--log", j("nvme.jsonl"),
            "--tier-dir", tier)
    if not (check(p.returncode == 0, "2 ranks without the tier failed", p) and
            check(q.returncode == 0 and "rank-0-of-2/mtrun.weights: the bf16 weights" in q.stdout,
                  "2 ranks with the weights on the tier failed (or the banner does not name its file)", q)):
        return
    ram, nvme = losses(j("ram.jsonl")), losses(j("nvme.jsonl"))
    check(len(ram) == 6 and ram == nvme, f"2 ranks: losses with the weights on the tier {nvme}, without {ram}")
    shards = [n for n in saved_files(6, 2) if ".shard-" in n]
    differ = [n for n in shards if open(j("ram", n), "rb").read() != open(j("nvme", n), "rb").read()]
    check(not differ, f"2 ranks: the checkpoint shards {differ} of step 6 differ with the weights on the tier")
    files = {d: os.listdir(j("tier", d)) for d in os.listdir(tier)}
    check(not any(files.values()), f"the tier files removed at exit: {files}")
    print(f"2 sharded ranks with the weights on the tier: the losses {nvme} and step 6's shards as without it")
    ck3 = j("ck3")
    os.mkdir(ck3)
    for n in saved_files(3, 2):
        shutil.copy(j("nvme", n), ck3)
    log = j("resumed.jsonl")
    p = run(mtrun, one, *STEPS, "--resume", ck3, "--no-save", "--log", log, timeout=300)
    got = losses(log)
    worst = max((abs(a - b) / abs(a) for a, b in zip(nvme[3:], got)), default=1)
    check(p.returncode == 0 and len(got) == 3 and worst <= 1e-6, f"step 3 on one process: {got}, {nvme[3:]}", p)
    print(f"their step 3 resumed on one process without the tier: steps 4 to 6 within {worst:.3g}")
    weights_fail(mtrun, two, tmp, tier, nvme)
    ck = j("killed")
    args = [*STEPS, "--save", ck, "--save-every", "2", "--log", j("killed.jsonl"), "--tier-dir", tier]
    # (16 writes a step: each layer's record after its update, its gradients at the norm)
    p = run(*MPIRUN, "-np", "1", mtrun, two, *args, ":", "-np", "1", "-x", "MT_TIER_KILL_AT_WRITE=70", mtrun, two,
            *args, timeout=120)
    step = newest_manifest(ck)
    if check(p.returncode != 0 and 2 <= step < 6, f"kill -9 of rank 1: exit {p.returncode}, newest {step}", p):
        q = mpi(mtrun, 2, two, *STEPS, "--resume", ck, "--no-save", "--log", j("after.jsonl"), "--tier-dir", tier)
        got = losses(j("after.jsonl"))
        check(q.returncode == 0 and got == nvme[step:], f"resumed after the kill from {step}: {got}", q)
        print(f"kill -9 of rank 1 mid tier write: exit {p.returncode}; resumed from step {step} to the same losses")
    # 4 ranks: kill -9 of rank 3 mid tier write resumes to the straight run's losses; a full device on rank 3 alone
    # (a file size limit: its tier file is refused up front) ends every rank naming it
    straight4 = losses(j("tier4.jsonl"))
    ck = j("killed4")
    args = [*STEPS, "--save", ck, "--save-every", "2", "--log", j("killed4.jsonl"), "--tier-dir", tier]
    p = run(*MPIRUN, "-np", "3", mtrun, four, *args, ":", "-np", "1", "-x", "MT_TIER_KILL_AT_WRITE=70", mtrun, four,
            *args, timeout=120)
    step = newest_manifest(ck)
    if check(p.returncode != 0 and 2 <= step < 6, f"kill -9 of rank 3 of 4: exit {p.returncode}, newest {step}", p):
        q = mpi(mtrun, 4, four, *STEPS, "--resume", ck, "--no-save", "--log", j("after4.jsonl"), "--tier-dir", tier)
        got = losses(j("after4.jsonl"))
        check(q.returncode == 0 and got == straight4[step:], f"4 ranks resumed after the kill from {step}: {got}, "
              f"the straight run's {straight4[step:]}", q)
        print(f"kill -9 of rank 3 of 4 mid tier write: exit {p.returncode}; resumed from step {step} to the same "
              "losses")
    args = [*STEPS, "--no-save", "--log", j("full4.jsonl"), "--tier-dir", tier]
    p = run(*MPIRUN, "-np", "3", mtrun, four, *args, ":", "-np", "1", "sh", "-c",
            "trap '' XFSZ; ulimit -f 64; exec \"$0\" \"$@\"", mtrun, four, *args, timeout=120)
    named = os.path.join(tier, "rank-3-of-4", "mtrun.tier")
    check(p.returncode != 0 and "rank 3 of 4: error" in p.stderr and named in p.stderr,
          f"a full device on rank 3 of 4: exit {p.returncode}, not ended naming {named}", p)
    print(f"a full tier device on rank 3 of 4: every rank ended, exit {p.returncode}")
    # one process with its weights on the tier (one GPU's plan on a node of 4 MB): the same bits as without it
    alone = plan(mtc, model, tmp, "alone", ["--batch", "2"], small_target(tmp, "4e6"))
    if alone and check(b" tier=weights" in open(alone, "rb").read(), "one process's plan does not say tier=weights"):
        for name, extra in (("alone-ram", []), ("alone-nvme", ["--tier-dir", tier])):
            p = run(mtrun, alone, *STEPS, "--save", j(name), "--log", j(name + ".jsonl"), *extra, timeout=300)
            check(p.returncode == 0, f"one process ({name}) failed", p)
        final = sorted(os.listdir(j("alone-ram")))[-1:] if os.path.isdir(j("alone-ram")) else []
        same = final and all(open(j("alone-ram", n), "rb").read() == open(j("alone-nvme", n), "rb").read()
                             for n in final)
        got, want = losses(j("alone-nvme.jsonl")), losses(j("alone-ram.jsonl"))
        check(len(got) == 6 and got == want and same, f"one process, weights on the tier: {got}, without {want}, "
              f"its checkpoint {final} the same: {same}")
        print(f"one process with its weights on the tier: the losses and the checkpoint {final} as without it")
    named = os.path.join(tier, "rank-1-of-2", "mtrun.weights")
    os.makedirs(named, exist_ok=True)
    p = mpi(mtrun, 2, two, *STEPS, "--no-save", "--log", j("fault.jsonl"), "--tier-dir", tier)
    check(p.returncode != 0 and "rank 1 of 2: error" in p.stderr and named in p.stderr,
          f"rank 1's weights file that cannot be made: exit {p.returncode}, not ended naming {named}", p)
    print(f"rank 1's weights file that cannot be made: every rank ended, exit {p.returncode}")


def main():
    mtc, mtrun = sys.argv[1:3]
    if sys.argv[3:] == ["weights"]:
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "l8.mt")
            with open(model, "w") as f:
                f.write(open("examples/mixtral-tiny.mt").read().replace("  L = 2                # layers", "  L = 8")
                        .replace("  batch = 16\n", "  batch = 16\n  dtype = bf16\n"))
            weights(mtc, mtrun, model, tmp)
        return finish("tier weights checks")
    with tempfile.TemporaryDirectory() as tmp:
        j = lambda *p: os.path.join(tmp, *p)
        model = j("l8.mt")
        with open(model, "w") as f:
            f.write(open("examples/mixtral-tiny.mt").read().replace("  L = 2                # layers", "  L = 8"))
        two = plan(mtc, model, tmp, "two", ["--batch", "2", "--ranks", "2", "--shard", "on"])
        four = plan(mtc, model, tmp, "four", ["--batch", "1", "--ranks", "4", "--shard", "on"])
        one = plan(mtc, with_accumulate(model, tmp, 2), tmp, "one", ["--batch", "2"])
        # 4 ranks on nodes of 4 MB, so that they spill too (their slices are half as large)
        small = j("small.target")
        with open(small, "w") as f:
            f.write(open(TARGET).read().replace("host_memory = 7e6", "host_memory = 4e6"))
        four_spills = plan(mtc, model, tmp, "four-spills", ["--batch", "1", "--ranks", "4", "--shard", "on"], small)
        one4 = plan(mtc, with_accumulate(model, tmp, 4), tmp, "one4", ["--batch", "1"])
        if not (two and four and one and four_spills and one4):
            return finish("tier checks")
        for pl, n in ((two, 2), (four_spills, 4)):
            check(b" tier=moments" in open(pl, "rb").read(), f"the {n}-rank plan does not spill (tier=moments)")
        tier = j("tier")
        os.mkdir(tier)
        # N ranks with the tier against one process without it (batch B x accumulate N): losses and weights
        for pl, n, ref in ((two, 2, one), (four_spills, 4, one4)):
            a, b = j(f"tier{n}.safetensors"), j(f"one{n}.safetensors")
            p = mpi(mtrun, n, pl, *STEPS, "--no-save", "--log", j(f"tier{n}.jsonl"), "--export", a, "--tier-dir", tier)
            q = run(mtrun, ref, *STEPS, "--no-save", "--log", j(f"one{n}.jsonl"), "--export", b, timeout=300)
            if not (check(p.returncode == 0, f"{n} tiered ranks failed", p) and
                    check(q.returncode == 0, "one process failed", q)):
                continue
            agree(n, j)
        # 2 ranks without and with the tier
        p = mpi(mtrun, 2, two, *STEPS, "--save", j("ram"), "--save-every", "3", "--log", j("ram.jsonl"))
        q = mpi(mtrun, 2, two, *STEPS, "--save", j("nvme"), "--save-every", "3", "--log", j("nvme.jsonl"),
                "--tier-dir", tier)
        if not (check(p.returncode == 0, "2 ranks without the tier failed", p) and
                check(q.returncode == 0, "2 ranks with the tier failed", q)):
            return finish("tier checks")
        ram, nvme = losses(j("ram.jsonl")), losses(j("nvme.jsonl"))
        check(len(ram) == 6 and ram == nvme, f"2 ranks: losses with the tier {nvme}, without {ram}")
        shards = [n for n in saved_files(6, 2) if ".shard-" in n]
        differ = [n for n in shards if open(j("ram", n), "rb").read() != open(j("nvme", n), "rb").read()]
        check(not differ, f"2 ranks: the checkpoint shards {differ} of step 6 differ with the tier")
        files = {d: os.listdir(j("tier", d)) for d in os.listdir(tier)}
        check({"rank-0-of-2", "rank-1-of-2", "rank-3-of-4"} <= set(files) and not any(files.values()) and
              "rank-0-of-2/mtrun.tier" in q.stdout,
              f"each rank's tier file its own (rank 0's named in the banner), removed at exit: {files}", q)
        print(f"2 sharded ranks with the tier: the losses {nvme} and step 6's shards as without it, to the bit")
        # step 3 resumed on one process without the tier (the 2 ranks' micro-batches: their straight run's losses),
        # and on 4 ranks with it (micro-batches of 1 row, whose load-balancing loss differs: one process of batch 1 x
        # accumulate 4 resumed from the same step is theirs)
        ck3 = j("ck3")
        os.mkdir(ck3)
        for n in saved_files(3, 2):
            shutil.copy(j("nvme", n), ck3)
        got = {}
        for what, ranks, pl, extra in (("one process", 0, one, []), ("4 ranks with the tier", 4, four,
                                                                      ["--tier-dir", tier]), ("one4", 0, one4, [])):
            log = j("resumed-" + what.replace(" ", "") + ".jsonl")
            args = [*STEPS, "--resume", ck3, "--no-save", "--log", log, *extra]
            p = mpi(mtrun, ranks, pl, *args) if ranks else run(mtrun, pl, *args, timeout=300)
            if check(p.returncode == 0 and "resumed from" in p.stdout, f"step 3 resumed on {what} failed", p):
                got[what] = losses(log)
        for what, ref, of in (("one process", nvme[3:], "the straight run's"),
                              ("4 ranks with the tier", got.get("one4"), "one process's at batch 1 x accumulate 4")):
            if what in got and ref:
                worst = max((abs(a - b) / abs(a) for a, b in zip(ref, got[what])), default=1)
                check(len(got[what]) == 3 and worst <= 1e-6, f"step 3 on {what}: losses {got[what]}, {of} {ref}")
                print(f"the tiered 2 ranks' step 3 resumed on {what}: steps 4 to 6 within {worst:.3g} of {of}")
        # kill -9 of rank 1 during a tier write of step 5 (8 layer records a step: its 36th write)
        ck = j("killed")
        args = [*STEPS, "--save", ck, "--save-every", "2", "--log", j("killed.jsonl"), "--tier-dir", tier]
        p = run(*MPIRUN, "-np", "1", mtrun, two, *args, ":", "-np", "1", "-x", "MT_TIER_KILL_AT_WRITE=36", mtrun, two,
                *args, timeout=120)
        step = newest_manifest(ck)
        if check(p.returncode != 0 and 2 <= step < 6, f"kill -9 of rank 1 in a tier write: exit {p.returncode}, "
                                                      f"newest manifest {step}", p):
            log = j("after-kill.jsonl")
            q = mpi(mtrun, 2, two, *STEPS, "--resume", ck, "--no-save", "--log", log, "--tier-dir", tier)
            got = losses(log)
            check(q.returncode == 0 and got == nvme[step:], f"resumed after the kill from step {step}: {got}, "
                  f"the straight run's {nvme[step:]}", q)
            print(f"kill -9 of rank 1 mid tier write: the job exit {p.returncode}; resumed from step {step} to the "
                  "straight run's losses")
        # a failing and a full tier device on rank 1 alone
        for what, pre, env in (("a short write", [], ["-x", "MT_TIER_SHORT_WRITE=3"]),
                               ("a full device", ["sh", "-c", "trap '' XFSZ; ulimit -f 64; exec \"$0\" \"$@\""], [])):
            ck = j("fault" + str(len(what)))
            args = [*STEPS, "--save", ck, "--save-every", "2", "--log", j("fault.jsonl"), "--tier-dir", tier]
            p = run(*MPIRUN, "-np", "1", mtrun, two, *args, ":", "-np", "1", *env, *pre, mtrun, two, *args,
                    timeout=120)
            named = os.path.join(tier, "rank-1-of-2", "mtrun.tier")
            check(p.returncode != 0 and "rank 1 of 2: error" in p.stderr and named in p.stderr,
                  f"{what} on rank 1's tier: exit {p.returncode}, not ended naming {named}", p)
            said = [ln for ln in p.stderr.splitlines() if "rank 1 of 2: error" in ln]
            print(f"{what} on rank 1's tier: every rank ended, exit {p.returncode}: {said[:1]}")
    return finish("tier checks")


if __name__ == "__main__":
    sys.exit(main())
