#!/usr/bin/env python3
"""How long mtc takes to answer, by model size: a table from one run.

For each model (1B to 1T parameters, dense and mixture of experts), each
command: `--summary`; `--explain` for one GPU (h200); `--ranks 8 --explain`
for one node of eight (h200x8); for a few sizes (SOME) also `--batch auto
--explain` and `--explore` on h200. Each row: the model, its parameters (mtc's
own count, `--summary --json`), dense or MoE, the command, mtc's exit
status, the CPU seconds it took (user + system: what the machine's other
work changes least) and the wall seconds, each the median of 3 runs (1
when the first takes over 10 s of CPU). Above the table: the commit, the
machine's cores (os.cpu_count) and its load average (/proc/loadavg, as
uptime prints it) before and after the run, and whether mtc was pinned to
one core (taskset -c 1, when taskset exists).

The issue's goals (one quiet core): --summary at most 0.5 s, --explain at
most 2 s, --batch auto at most 5 s, --ranks N --explain at most 5 s,
--explore at most 15 s.

Below the table, the sweep: every example (examples/*.mt) on every
single-GPU target (schedules/*.target without gpus_per_node) with
`--explain`, and on every multi-GPU target with `--ranks` its GPU count
and `--explain`, one run each, pinned the same way: how many runs, how
many over their goal (2 s and 5 s of CPU), and the slowest SWEEP_ROWS of
each.

usage: compile_times.py [--mtc MTC] [--models a.mt,b.mt,...] [--no-sweep] [--out FILE]
       compile_times.py --check FILE      (FILE's rows are this script's format)
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

MODELS = [
    "examples/llama3.2-1b.mt", "examples/llama3.2-3b.mt", "examples/llama3-8b.mt", "examples/qwen3-30b-a3b.mt",
    "examples/mixtral-8x7b.mt", "examples/qwen3-next-80b-a3b.mt", "examples/llama3-70b.mt",
    "examples/mistral-large-2.mt", "examples/llama3-405b.mt",
    "examples/deepseek-v3.mt", "examples/kimi-k2.mt",
]
COMMANDS = [
    ("--summary", ["--summary"]),
    ("--explain h200", ["--target", "h200", "--explain"]),
    ("--ranks 8 --explain h200x8", ["--target", "h200x8", "--ranks", "8", "--explain"]),
]
# for a few sizes only (SOME): the batch the most tokens a second fits, and every batch's schedules
SOME = ["examples/llama3.2-1b.mt", "examples/llama3-8b.mt", "examples/mixtral-8x7b.mt", "examples/qwen3-next-80b-a3b.mt",
        "examples/llama3-70b.mt"]
SOME_COMMANDS = [
    ("--batch auto --explain h200", ["--target", "h200", "--batch", "auto", "--explain"]),
    ("--explore h200", ["--target", "h200", "--explore"]),
]
HEADER = "| model | parameters | kind | command | exit | CPU s | wall s |"
RULE = "| --- | ---: | --- | --- | ---: | ---: | ---: |"
ROW = re.compile(r"^\| (?P<model>[a-z0-9.\-]+) \| (?P<params>[0-9,]+) \| (?P<kind>dense|MoE) \| "
                 r"(?P<command>" + "|".join(re.escape(c) for c, _ in COMMANDS + SOME_COMMANDS) + r") \| "
                 r"(?P<exit>-?\d+|timeout) \| (?P<cpu>\d+\.\d\d) \| (?P<wall>\d+\.\d\d) \|$")
MACHINE = re.compile(r"^Machine: \d+ cores; load average (\d+\.\d\d) before, (\d+\.\d\d) after; "
                     r"mtc (pinned to one core|unpinned); commit [0-9a-f]+\.$", re.M)
TIMEOUT_S = 600
SWEEP_ROWS = 8  # the sweep's slowest runs shown, of each kind
SWEEP_HEADER = "| example | target | command | exit | CPU s |"
SWEEP_RULE = "| --- | --- | --- | ---: | ---: |"
SWEEP_ROW = re.compile(r"^\| [a-z0-9.\-]+ \| [a-z0-9.\-]+ \| (--ranks \d+ )?--explain \| (-?\d+|timeout) \| \d+\.\d\d \|$")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def timed(cmd):
    """mtc's exit status, its own CPU seconds (os.wait4's rusage of that process) and wall seconds."""
    t0 = os.times().elapsed
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        pid, status, use = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if os.times().elapsed - t0 > TIMEOUT_S:  # a hang: killed, reported as timeout
            p.kill()
        time.sleep(0.005)
    wall = os.times().elapsed - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    rc = "timeout" if wall > TIMEOUT_S else p.returncode
    return rc, use.ru_utime + use.ru_stime, wall


def model_facts(mtc, path):
    r = subprocess.run([mtc, path, "--summary", "--json"], capture_output=True, text=True, timeout=TIMEOUT_S)
    if r.returncode != 0:
        sys.exit(f"compile_times: mtc --summary --json {path} failed: {r.stderr}")
    s = json.loads(r.stdout)
    moe = "moe(" in re.sub(r"#.*", "", open(path).read())
    return s["params_total"], "MoE" if moe else "dense"


def table(mtc, models, sweeping=True):
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") else []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    load0, rows = loadavg(), []
    for path in models:
        params, kind = model_facts(mtc, path)
        name = os.path.basename(path)[:-3]
        for label, args in COMMANDS + (SOME_COMMANDS if path in SOME else []):
            runs = [timed(pin + [mtc, path] + args)]
            if runs[0][1] <= 10:
                runs += [timed(pin + [mtc, path] + args) for _ in range(2)]
            rc = runs[0][0]
            cpu, wall = sorted(r[1] for r in runs)[len(runs) // 2], sorted(r[2] for r in runs)[len(runs) // 2]
            rows.append(f"| {name} | {params:,} | {kind} | {label} | {rc} | {cpu:.2f} | {wall:.2f} |")
            print(rows[-1], file=sys.stderr, flush=True)
    swept = sweep(mtc, pin) if sweeping else []
    load1 = loadavg()
    head = (f"Machine: {os.cpu_count()} cores; load average {load0:.2f} before, {load1:.2f} after; "
            f"mtc {'pinned to one core' if pin else 'unpinned'}; commit {commit or '0'}.")
    return "\n".join([head, "", HEADER, RULE] + rows + swept) + "\n"


def gpus(target):
    """The number of GPUs a target profile declares (1 when it says none)."""
    with open(target) as f:
        m = re.search(r"^\s*gpus_per_node\s*=\s*(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else 1


def sweep(mtc, pin):
    """Every example on every shipped target, --explain (multi-GPU: --ranks its GPUs): the lines below the table."""
    runs = {1: [], 2: []}  # one GPU; several
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for ex in sorted(glob.glob(os.path.join(root, "examples", "*.mt"))):
        for target in sorted(glob.glob(os.path.join(root, "schedules", "*.target"))):
            n, name = gpus(target), os.path.basename(target)[:-len(".target")]
            args = ["--target", target, "--explain"] + (["--ranks", str(n)] if n > 1 else [])
            rc, cpu, _ = timed(pin + [mtc, ex] + args)
            command = f"--ranks {n} --explain" if n > 1 else "--explain"
            runs[1 if n == 1 else 2].append((cpu, os.path.basename(ex)[:-3], name, command, rc))
    out = []
    for kind, goal, what in ((1, 2.0, "every single-GPU target, `--explain`"),
                             (2, 5.0, "every multi-GPU target, `--ranks N --explain`")):
        rows = sorted(runs[kind], reverse=True)
        over = sum(r[0] > goal for r in rows)
        out += ["", f"Sweep, every example on {what}: {len(rows)} runs, {over} over {goal:g} s of CPU; "
                    f"the slowest {SWEEP_ROWS}:", "", SWEEP_HEADER, SWEEP_RULE]
        out += [f"| {ex} | {t} | {c} | {rc} | {cpu:.2f} |" for cpu, ex, t, c, rc in rows[:SWEEP_ROWS]]
    return out


def check(path):
    text = open(path).read()
    fails = []
    if not MACHINE.search(text):
        fails.append("no 'Machine: N cores; load average ...' line as the script writes it")
    lines = text.split("\n")
    if HEADER not in lines:
        fails.append(f"no header line {HEADER!r}")
    else:
        i = lines.index(HEADER)
        rows = []
        for line in lines[i + 2:]:
            if not line.startswith("|"):
                break
            m = ROW.match(line)
            if not m:
                fails.append(f"not a row of the script's format: {line!r}")
            else:
                rows.append(m)
        if lines[i + 1] != RULE:
            fails.append("the header is not followed by the script's rule line")
        if not rows:
            fails.append("no rows")
        seen = {(m["model"], m["command"]) for m in rows}
        for model in {m["model"] for m in rows}:
            for label, _ in COMMANDS:
                if (model, label) not in seen:
                    fails.append(f"{model}: no row for {label}")
    for i, line in enumerate(lines):  # the sweep's tables, when there
        if line.startswith("Sweep, ") and (lines[i + 2:i + 4] != [SWEEP_HEADER, SWEEP_RULE] or
                                            not SWEEP_ROW.match(lines[i + 4] if i + 4 < len(lines) else "")):
            fails.append(f"the sweep's table after {line!r} is not in the script's format")
    for f in fails:
        print(f"FAIL: {path}: {f}")
    return not fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mtc", default="build/mtc")
    ap.add_argument("--models", help="comma-separated .mt files (default: 1B to 1T)")
    ap.add_argument("--out", help="write the table here (default: stdout)")
    ap.add_argument("--check", help="check that FILE's table is of this script's format")
    ap.add_argument("--no-sweep", action="store_true", help="the table alone, without the sweep below it")
    a = ap.parse_args()
    if a.check:
        sys.exit(0 if check(a.check) else 1)
    text = table(a.mtc, a.models.split(",") if a.models else MODELS, not a.no_sweep)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
