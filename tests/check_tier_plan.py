#!/usr/bin/env python3
"""The scheduler's NVMe tier (compiler/schedule/cost.c, cost_place): placement, cost,
--explain and the plan's tier word:

- mistral-large-2 (122.6B, bf16 with one micro-batch a step: 16 bytes a
  layer parameter, its gradients bf16, common/storage.h) on h200 (1.5 TB of
  RAM plus the tier) plans with its Adam moments on the tier (8 bytes a
  layer parameter in RAM, 8 on NVMe; at batch 32, where the host activation
  store takes RAM too, the fp32 master joins them: 4 and 12), and at that
  compute-bound batch its predicted tokens/s is within 15% of the same model
  on tests/h200-ram.target (3 TB of RAM, no tier); on h200 with the tier's
  keys taken out it does not fit;
- llama3-405b plans on h200 with the moments, the master and the gradients
  on the tier (2 bytes a layer parameter in RAM, 16 on NVMe); --explain says
  so and gives the tier's time against the step;
- an 8-layer llama-tiny on tests/tiny-tier-moments.target is written with
  tier=moments and trains with --tier-dir; in bf16 on
  tests/tiny-tier-master.target with tier=master, and trains; on
  tests/tiny-tier-grads.target with tier=grads, and trains (its bits against
  RAM: tests/check_tier.py).

usage: check_tier_plan.py MTC MTRUN    (from the project root)
"""
import json
import os
import sys
import tempfile

from checks import check, finish, run


def explain(mtc, *args):
    p = run(mtc, *args, "--explain", "--json")
    if not check(p.returncode == 0, f"mtc {' '.join(args)} --explain --json", p):
        return None
    d = json.loads(p.stdout)
    chosen = [r for r in d["policies"] if r.get("chosen")]
    return chosen[0] if chosen else None


def main():
    mtc, mtrun = sys.argv[1:3]
    tokens = {}
    for target in ("h200", "tests/h200-ram.target"):
        r = explain(mtc, "examples/mistral-large-2.mt", "--target", target, "--batch", "32")
        if check(r is not None and r["fits"], f"mistral-large-2 on {target} at batch 32: a chosen plan that fits"):
            tokens[target] = r["tokens_per_s"]
            # bf16, one micro-batch a step: 16 bytes a layer parameter (bf16 gradients); at this batch the
            # host activation store takes RAM too, so the master may join the moments on the tier
            want = [("moments", 8, 8), ("master", 4, 12)] if target == "h200" else [("ram", 16, 0)]
            got = (r["tier"], r["ram_bytes_per_param"], r["tier_bytes_per_param"])
            check(got in want, f"mistral-large-2 on {target}: (tier, RAM, NVMe bytes a parameter) {got}, expected one of {want}")
    if len(tokens) == 2:
        ratio = tokens["h200"] / tokens["tests/h200-ram.target"]
        check(ratio >= 0.85, f"mistral-large-2 at batch 32: h200 with the tier predicts {tokens['h200']:.1f} tokens/s, "
                             f"{ratio:.3f} of the {tokens['tests/h200-ram.target']:.1f} with enough RAM (at least 0.85)")

    p = run(mtc, "examples/mistral-large-2.mt", "--target", "h200", "--explain")  # batch 1: the moments alone
    check(p.returncode == 0 and "host store: 8 bytes a layer parameter in RAM, 8 on the NVMe tier (the Adam moments)"
          in p.stdout and "against the step's" in p.stdout, "--explain: bytes a parameter in each tier, the tier's time", p)

    with tempfile.TemporaryDirectory() as t:
        j = lambda *p: os.path.join(t, *p)
        # h200 without its tier: 1.5 TB is not enough (2207 GB with fp32 gradients, 1963 with bf16)
        p = run(mtc, "examples/mistral-large-2.mt", "--target", "tests/h200-no-tier.target", "--explain")
        check(p.returncode != 0 and "needs 1963 GB of host memory" in p.stdout + p.stderr,
              "mistral-large-2 does not fit h200 without the tier", p)

        r = explain(mtc, "examples/llama3-405b.mt", "--target", "h200")
        check(r is not None and r["fits"] and (r["tier"], r["ram_bytes_per_param"], r["tier_bytes_per_param"]) ==
              ("grads", 2, 16), f"llama3-405b plans on h200 with 16 bytes a parameter on the tier: {r}")
        p = run(mtc, "examples/llama3-405b.mt", "--target", "h200", "--explain")
        check(p.returncode == 0 and "host store: 2 bytes a layer parameter in RAM, 16 on the NVMe tier" in p.stdout,
              "llama3-405b --explain", p)

        # a plan's tier word, and mtrun's reading of it
        src = open("examples/llama-tiny.mt").read().replace("  L = 2                # layers", "  L = 8                # layers")
        open(j("l8.mt"), "w").write(src)
        os.mkdir(j("tier"))
        data = os.path.abspath("examples/data/tinyshakespeare.txt")
        for level in ("moments", "master", "grads"):
            plan = j(level + ".bin")
            dtype = ["--dtype", "bf16"] if level == "master" else []  # f32 streams the master: it stays in RAM
            p = run(mtc, j("l8.mt"), "--target", f"tests/tiny-tier-{level}.target", *dtype, "-o", plan)
            check(p.returncode == 0, f"mtc on tiny-tier-{level}", p)
            p = run(mtrun, plan, "--steps", "3", "--data", data, "--val-every", "1000", "--val-batches", "1",
                    "--tier-dir", j("tier"), "--log", j("x.jsonl"))
            check(p.returncode == 0 and f"tier={level}" in p.stdout and "step      3/3" in p.stdout,
                  f"a tier={level} plan trains with --tier-dir", p)
    return finish("tier plan checks")


if __name__ == "__main__":
    sys.exit(main())
