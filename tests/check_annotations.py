#!/usr/bin/env python3
"""keep / recompute / offload annotations are hard constraints on the
scheduler (dsl/README.md, Annotations): llama-tiny with each one on its MLP
norm `m` (a tensor its backward reads) plans only schedules that honour it,
the chosen plan's predicted timeline shows it (recompute runs, activations
out and in, or neither), a --remat or --resident that contradicts it is
refused naming the tensor and its line, and the annotated plans train to
the unannotated plan's losses.

usage: check_annotations.py MTC MTRUN
"""
import json
import os
import sys
import tempfile

from checks import check, finish, losses, run


def main():
    mtc, mtrun = sys.argv[1:3]
    text = open("examples/llama-tiny.mt").read()
    line = "  m = rmsnorm(x, mlp_norm, eps = eps)"
    assert line in text
    lineno = text[: text.index(line)].count("\n") + 1
    with tempfile.TemporaryDirectory() as tmp:
        def train(model, *args):
            plan, log = os.path.join(tmp, "p.bin"), os.path.join(tmp, "m.jsonl")
            p = run(mtc, model, "-o", plan, *args)
            if not check(p.returncode == 0, f"mtc {model} {args}", p):
                return []
            p = run(mtrun, plan, "--steps", "3", "--val-batches", "0", "--device", "cpu", "--log", log,
                    "--data", os.path.abspath("examples/data/tinyshakespeare.txt"))
            check(p.returncode == 0, f"mtrun {model}", p)
            return losses(log) if p.returncode == 0 else []

        base = train("examples/llama-tiny.mt")
        check(len(base) == 3, "the unannotated plan trains")
        for annot, remats, shows in (("keep", {"none"}, set()),
                                     ("recompute", {"layer", "selective"}, {"recompute"}),
                                     ("offload", {"offload"}, {"activations out", "activations in"})):
            model = os.path.join(tmp, f"{annot}.mt")
            open(model, "w").write(text.replace(line, f"  {annot} m = rmsnorm(x, mlp_norm, eps = eps)"))
            trace = os.path.join(tmp, f"{annot}.json")
            p = run(mtc, model, "--explain", "--json", "--trace", trace)
            if not check(p.returncode == 0, f"{annot}: mtc --explain", p):
                continue
            rows = {r["name"]: r for r in json.loads(p.stdout)["policies"]}
            chosen = [n for n, r in rows.items() if r.get("chosen")]
            check(len(chosen) == 1 and chosen[0] in remats, f"{annot}: chose {chosen}, not one of {remats}", p)
            for name in ("none", "layer", "selective", "offload"):
                # (keep: every mode honours it with every layer resident, as all are here)
                if name not in remats and annot != "keep":
                    check(not rows[name]["fits"], f"{annot}: remat {name} contradicts the annotation yet fits", p)
            names = {e["name"] for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"}
            for what in ("recompute", "activations out", "activations in"):
                seen = any(what in n for n in names)
                check(seen == (what in shows), f"{annot}: the predicted timeline {'lacks' if not seen else 'has'} "
                      f"'{what}'")
            wrong = ["--remat", "layer", "--resident", "0"] if annot != "recompute" else ["--remat", "none"]
            out = os.path.join(tmp, f"refused-{annot}.bin")
            p = run(mtc, model, *wrong, "-o", out)
            check(p.returncode == 1 and f"'m' (line {lineno})" in p.stderr and annot in p.stderr
                  and not os.path.exists(out), f"{annot}: {wrong} refused", p)
            if annot != "keep":
                p = run(mtc, model, "--remat", sorted(remats)[0], "--resident", "1", "-o", out)
                check(p.returncode == 1 and "resident" in p.stderr and f"line {lineno}" in p.stderr,
                      f"{annot}: --resident 1 refused", p)
            got = train(model)
            check(len(got) == 3 and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(got, base)),
                  f"{annot}: losses {got} against the unannotated {base}")
            p = run(mtc, model, "--policy", "megatrain", "-o", os.path.join(tmp, "mega.bin"))
            check(p.returncode == 0, f"{annot}: the megatrain baseline takes no annotations", p)
    return finish("annotation checks")


if __name__ == "__main__":
    sys.exit(main())
