#!/usr/bin/env python3
"""Mutated copies of the examples each get an answer from `mtc --summary`
at once: exit 0, or exit 1 with an error message; never a crash, a hang or
another exit status.

From a fixed seed, COUNT copies (default 300) of examples/*.mt, each with
one mutation: a tensor renamed (one occurrence of a name that is assigned
or declared gets another name), a dimension changed (a number in a config,
param or reshape line becomes 0, 1, 3, 7, 4096, 1e6, 1e12, -1 or itself
times 10), or a line dropped. Each must finish within 2 s of CPU
(user + system, so a loaded machine does not fail it; a wall clock of 30 s
catches a hang), exit 0 or 1, and on exit 1 say "error:" on stderr. A
failing copy is kept in the work folder, named in the output.

usage: check_mutations.py MTC SOURCE_DIR WORK_DIR [COUNT] [SEED]
"""
import glob
import os
import random
import re
import resource
import shutil
import subprocess
import sys

CPU_LIMIT_S = 2.0
WALL_LIMIT_S = 30
NUMBERS = ["0", "1", "3", "7", "4096", "1000000", "1000000000000", "-1"]
NAME = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\b")
ASSIGNED = re.compile(r"^\s*(?:param\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:=|\"|\[)", re.M)
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])(\d+)(?![A-Za-z0-9_.])")


def rename(rng, text):
    names = sorted(set(ASSIGNED.findall(text)))
    if not names:
        return None
    name = rng.choice(names)
    spots = [m.start(1) for m in NAME.finditer(text) if m.group(1) == name]
    at = rng.choice(spots)
    return text[:at] + name + "_renamed" + text[at + len(name):], f"renamed one '{name}'"


def change_dim(rng, text):
    spots = []
    for m in NUMBER.finditer(text):
        line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.start())]
        if "#" in line and line.index("#") < m.start() - text.rfind("\n", 0, m.start()) - 1:
            continue  # in a comment
        spots.append(m)
    if not spots:
        return None
    m = rng.choice(spots)
    new = rng.choice(NUMBERS + [m.group(1) + "0"])
    return text[:m.start()] + new + text[m.end():], f"{m.group(1)} -> {new} at offset {m.start()}"


def drop_line(rng, text):
    lines = text.split("\n")
    real = [i for i, l in enumerate(lines) if l.strip() and not l.strip().startswith("#")]
    i = rng.choice(real)
    return "\n".join(lines[:i] + lines[i + 1:]), f"dropped line {i + 1}"


def run(mtc, path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        r = subprocess.run([mtc, path, "--summary"], capture_output=True, text=True, timeout=WALL_LIMIT_S)
    except subprocess.TimeoutExpired:
        return None, "", WALL_LIMIT_S
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r.returncode, r.stderr, cpu


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    mtc, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 300
    rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 35)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    examples = sorted(glob.glob(os.path.join(src, "examples", "*.mt")))
    if not examples:
        sys.exit(f"FAIL: no examples under {src}/examples")
    fails, exits, slowest = [], {0: 0, 1: 0}, (0.0, "")
    for i in range(count):
        example = rng.choice(examples)
        text = open(example).read()
        done = None
        while done is None:
            done = rng.choice([rename, change_dim, drop_line])(rng, text)
        mutant, what = done
        path = os.path.join(work, f"m{i:03d}-{os.path.basename(example)}")
        open(path, "w").write(mutant)
        rc, err, cpu = run(mtc, path)
        slowest = max(slowest, (cpu, path))
        why = None
        if rc is None:
            why = f"no answer in {WALL_LIMIT_S} s (a hang)"
        elif rc < 0:
            why = f"killed by signal {-rc}"
        elif rc not in (0, 1):
            why = f"exit {rc}"
        elif rc == 1 and "error:" not in err:
            why = f"exit 1 without an error message: {err.strip()[:200]!r}"
        elif cpu > CPU_LIMIT_S:
            why = f"{cpu:.2f} s of CPU, over {CPU_LIMIT_S} s"
        if why:
            fails.append(f"{path} ({os.path.basename(example)}, {what}): {why}")
        else:
            exits[rc] += 1
            os.remove(path)
    print(f"{count} mutants: {exits[0]} compiled, {exits[1]} refused with an error, {len(fails)} failed; "
          f"the slowest {slowest[0]:.2f} s of CPU ({os.path.basename(slowest[1])})")
    for f in fails:
        print("FAIL:", f)
    if fails:
        sys.exit(1)
    if exits[0] == 0 or exits[1] == 0:  # the mutations must reach both answers, else they test nothing
        sys.exit(f"FAIL: the mutants all {'compiled' if exits[1] == 0 else 'failed'}")


if __name__ == "__main__":
    main()
