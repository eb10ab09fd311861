#!/usr/bin/env python3
"""The optimizer's placement in mtc's predictions (mtc --device-optimizer): for
each model on h200 at 1, 2 and --batch auto sequences of 4096, today's plan
(every optimizer on the host) against the plan with the placement the search
picks (--device-optimizer auto) against the compute of that plan (its RUNs
alone). Each step is the chosen plan's predicted step of mtc --explain --json.

usage: bench/devopt_table.py [MTC]                write the table (markdown) to stdout
       bench/devopt_table.py MTC --check FILE     FILE (README.md) holds the table as written now
(run from the source tree; MTC defaults to build/mtc)"""
import json
import subprocess
import sys

MODELS = ("llama3.2-1b", "llama3.2-3b", "llama3-8b", "qwen3-8b", "qwen3-30b-a3b")
BATCHES = ("1", "2", "auto")
BEGIN = "<!-- devopt_table.py: begin -->"
END = "<!-- devopt_table.py: end -->"


def chosen(mtc, model, batch, placement):
    p = subprocess.run([mtc, f"examples/{model}.mt", "--target", "h200", "--seq", "4096", "--batch", batch,
                        "--device-optimizer", placement, "--explain", "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"devopt_table.py: mtc {model} --batch {batch} --device-optimizer {placement}: {p.stderr}")
    d = json.loads(p.stdout)
    c = [r for r in d["policies"] if r.get("chosen")][0]
    placed = [w for w in c["schedule"].split() if w.startswith("devopt=")]
    return d["batch"], c["predicted_step_s"], c["compute_s"], placed[0][len("devopt="):] if placed else "none"


def table(mtc):
    rows = [BEGIN,
            "| model | batch | today: step s | x compute | placed: batch | step s | x compute | layers on the device "
            "| tokens/s gain |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model in MODELS:
        for batch in BATCHES:
            b0, s0, c0, _ = chosen(mtc, model, batch, "none")
            b1, s1, c1, placed = chosen(mtc, model, batch, "auto")
            gain = (b1 / s1) / (b0 / s0)
            rows.append(f"| {model} | {batch} | {s0:.4g} | {s0 / c0:.2f} | {b1} | {s1:.4g} | {s1 / c1:.2f} | "
                        f"{placed} | {gain:.2f} |")
    return "\n".join(rows + [END])


def main():
    mtc = sys.argv[1] if len(sys.argv) > 1 else "build/mtc"
    now = table(mtc)
    if len(sys.argv) > 3 and sys.argv[2] == "--check":
        text = open(sys.argv[3]).read()
        if BEGIN not in text or END not in text:
            sys.exit(f"devopt_table.py: {sys.argv[3]} has no table between {BEGIN} and {END}")
        have = text[text.index(BEGIN):text.index(END) + len(END)]
        if have != now:
            print(f"FAIL: {sys.argv[3]}'s table is not what mtc predicts now (bench/devopt_table.py writes it):")
            print(now)
            sys.exit(1)
        print(f"ok   {sys.argv[3]}'s table of the optimizer's placement is mtc's prediction")
        return
    print(now)


if __name__ == "__main__":
    main()
