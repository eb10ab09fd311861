#!/usr/bin/env python3
"""The mixed-plan search is exact to its gap: it finds what building every
pair finds, or a plan at most SEARCH_GAP (0.1%) slower.

usage: check_exact_search.py MTC   (run from the project root)

mtc's mixed search (compiler/schedule/search.c, try_mixed) builds and simulates
only the pairs (K offloaded, S selective on the host) whose floor is below
the fastest plan found, and none that its memory figures say cannot fit.
With MT_SEARCH_EVERY=1 it builds every pair and fails with an internal
error if any floor lies above the step it simulates or any skipped pair
fits. For each case below, on real and tiny models (of one block kind and
of several), GPU profiles and the cpu, tiers, accumulation and host memory
that binds:
- the search with MT_SEARCH_EVERY=1 reports no internal error;
- `--remat mixed --explain --json`'s mixed row fits or not either way, and
  its step, like `--explain`'s chosen row's, is building every pair's or at
  most 0.1% above it (never below: that one is the fastest).
"""
import json
import os
import re
import sys
import tempfile

from checks import check, finish, run


def variant(model, tmp, layers, accumulate=None):
    """MODEL with `layers` layers (and `accumulate`), its relative data path made absolute."""
    src = open(model).read()
    src = re.sub(r'data = "([^"/][^"]*)"',
                 lambda m: 'data = "' + os.path.abspath(os.path.join(os.path.dirname(model), m.group(1))) + '"', src)
    src, n = re.subn(r"^  L = 2 ", f"  L = {layers} ", src, flags=re.M)
    assert n == 1, f"{model}: no 'L = 2' line"
    if accumulate:
        src, n = re.subn(r"^  batch = (\d+)", rf"  batch = \1\n  accumulate = {accumulate}", src, flags=re.M)
        assert n == 1, f"{model}: no batch line"
    path = os.path.join(tmp, f"{layers}-{accumulate or 1}-" + os.path.basename(model))
    open(path, "w").write(src)
    return path


def rows(mtc, model, args, env):
    p = run(mtc, model, *args, "--explain", "--json", env=env)
    if not check("internal error" not in p.stderr, f"mtc {model} {' '.join(args)}: the search is wrong", p):
        return None
    try:
        policies = json.loads(p.stdout)["policies"]
    except (ValueError, KeyError):
        check(False, f"mtc {model} {' '.join(args)}: no JSON", p)
        return None
    mixed = [(r["predicted_step_s"], r["fits"], r["schedule"]) for r in policies if r["name"] == "mixed"]
    chosen = [(r["predicted_step_s"], r["name"]) for r in policies if r.get("chosen")]
    return p.returncode, mixed, chosen


def within_gap(step, exact):
    """step is the exact search's best (exact) or at most SEARCH_GAP above it."""
    return exact * (1 - 1e-12) <= step <= exact * (1 + 1e-3)


def main():
    mtc = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tiny = [variant("examples/llama-tiny.mt", tmp, 12), variant("examples/gpt2-tiny.mt", tmp, 8, accumulate=3),
                variant("examples/llama-tiny.mt", tmp, 10, accumulate=2)]
        cases = [
            ("examples/llama3-8b.mt", "h200", "--batch 4 --seq 4096"),
            ("examples/llama3-8b.mt", "gh200", "--batch 9 --seq 4096"),
            ("examples/llama3-8b.mt", "tests/h200-ram.target", "--batch 16 --seq 4096"),
            ("examples/qwen2-7b.mt", "h100-pcie", "--batch 8 --seq 4096"),
            ("examples/llama3.2-3b.mt", "h200", "--batch 32 --seq 4096"),
            ("examples/llama3-70b.mt", "h200", "--batch 4 --seq 4096 --tile 1"),
            ("examples/llama3-70b.mt", "tests/h200-no-tier.target", "--batch 2 --seq 4096 --tile 1"),
            # host-update bound, its pairs' steps within 5% of each other: the staying layers' gradients out,
            # the frame's wait for them and the duplex link's delay of the backward copies in (chain_in) bind
            ("examples/qwen3-next-80b-a3b.mt", "h200", ""),
            # several block kinds: a pick costs what its layer's kind makes it cost
            ("examples/gemma2-9b.mt", "h200", "--batch 8 --seq 8192 --tile 1"),
            ("examples/gemma2-9b.mt", "tests/h200-ram.target", "--batch 8 --seq 4096 --tile 1"),
            ("tests/orders/deepseek-tiny.mt", "tests/tiny-gpu.target", "--batch 2"),
            ("tests/orders/llama-mixed.mt", "tests/tiny-gpu.target", "--batch 1"),
        ]
        for model in tiny:
            for target in ("tests/tiny-gpu.target", "schedules/tiny-2layers.target"):
                for batch in ("1", "2"):
                    cases.append((model, target, f"--batch {batch}"))
            for target in ("tests/tiny-tier-moments.target", "tests/tiny-tier-grads.target"): # host memory binds
                cases.append((model, target, "--batch 2 --resident 0"))
        mixes = 0
        for model, target, extra in cases:
            args = ["--target", target, *extra.split()]
            for remat in (["--remat", "mixed"], []):
                every = dict(os.environ, MT_SEARCH_EVERY="1")
                got, want = rows(mtc, model, args + remat, None), rows(mtc, model, args + remat, every)
                if got is None or want is None:
                    continue
                what = f"{os.path.basename(model)} {' '.join(args + remat)}"
                check(got[0] == want[0], f"{what}: exit {got[0]}, with every pair built {want[0]}")
                check(len(got[1]) == len(want[1]) and all(g[1] == w[1] and within_gap(g[0], w[0])
                                                          for g, w in zip(got[1], want[1])),
                      f"{what}: the mixed row {got[1]}, with every pair built {want[1]}")
                check(got[2] == want[2] or (len(got[2]) == len(want[2]) == 1 and within_gap(got[2][0][0], want[2][0][0])),
                      f"{what}: chosen {got[2]}, with every pair built {want[2]}")
                mixes += any(("offloaded=" in m[2]) and m[1] for m in got[1]) and bool(remat)
        check(mixes >= 15, f"only {mixes} cases found a fitting mixed plan; the check needs at least 15")
    print(f"{len(cases)} cases, {mixes} with a fitting mixed plan: the search finds what building every pair finds, to 0.1%")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
