#!/usr/bin/env python3
"""Every JSON mt writes parses with a strict parser: no inf, no nan.

usage: check_json.py MTC MTRUN SOURCE_DIR WORK_DIR

Python's json takes Infinity, -Infinity and NaN (and, through float, inf
and nan) that JSON has not; here every such constant fails. Each output is
run on cases that used to write inf: llama-tiny as 2 ranks of h200 sharded
(one GPU: the ranks have no path between them, so the step is priced inf)
and a model that fits nowhere. A number written null must come with a
why_null that names it. The outputs: --summary --json, --explain --json
(one GPU, --ranks 2 under --shard on, off and auto), --explore --json,
--trace, mtrun's metrics log (of a plan for one process: dist_refuse parses
the log of 2 ranks of the plan priced inf).
"""
import json
import os
import sys

from checks import check, finish, run

mtc, mtrun, src, work = sys.argv[1:5]
tiny = os.path.join(src, "examples/llama-tiny.mt")
gpt2 = os.path.join(src, "examples/gpt2-tiny.mt")


def no_constant(c):
    raise ValueError(f"{c} is not JSON")


def nulls_explained(obj, where):
    """Every object with a null number has a why_null naming each such field."""
    if isinstance(obj, list):
        for x in obj:
            nulls_explained(x, where)
    elif isinstance(obj, dict):
        nulls = [k for k, v in obj.items() if v is None]
        why = obj.get("why_null") or (obj.get("args") or {}).get("why_null") or ""
        for k in nulls:
            check(k in why, f"{where}: {k} is null and no why_null names it ({obj})")
        for v in obj.values():
            nulls_explained(v, where)


def strict(text, where, explained=True):
    """text as one JSON document, strictly; with explained, each null (mtc writes null only for a number)
    named by a why_null."""
    try:
        doc = json.loads(text, parse_constant=no_constant)
    except ValueError as e:
        check(False, f"{where}: not JSON: {e}")
        return None
    if explained:
        nulls_explained(doc, where)
    return doc


def mtc_json(args, want_rc, where):
    p = run(mtc, *args)
    check(p.returncode == want_rc, f"{where}: exit {p.returncode}, not {want_rc}", p)
    return strict(p.stdout, where) if p.stdout else check(False, f"{where}: no JSON printed", p)


mtc_json([tiny, "--summary", "--json"], 0, "--summary --json")
mtc_json([tiny, "--explain", "--json"], 0, "--explain --json")
doc = mtc_json([tiny, "--ranks", "2", "--shard", "on", "--explain", "--json"], 0, "--ranks 2 --shard on --explain --json")
if doc:  # the case that wrote inf: a step priced without end, null with why
    steps = [r.get("predicted_step_s") for r in doc["policies"] if "predicted_step_s" in r]
    check(None in steps, "--ranks 2 --shard on for h200 is no longer priced inf: pick another case for null")
mtc_json([tiny, "--ranks", "2", "--shard", "off", "--explain", "--json"], 0, "--ranks 2 --shard off --explain --json")
mtc_json([tiny, "--ranks", "2", "--explain", "--json"], 1, "--ranks 2 --explain --json (neither layout fits)")
mtc_json([tiny, "--ranks", "2", "--target", "h200x8", "--explain", "--json"], 0, "--ranks 2 --explain --json on h200x8")
# a model that fits nowhere: gpt2-tiny on tiny-1layer at its batch
mtc_json([gpt2, "--target", "tiny-1layer", "--explain", "--json"], 1, "--explain --json of a model that fits nowhere")
mtc_json([gpt2, "--target", "tiny-1layer", "--explore", "--json"], 0, "--explore --json")

trace = os.path.join(work, "json-inf.trace.json")
p = run(mtc, tiny, "--ranks", "2", "--shard", "on", "--trace", trace)
if check(p.returncode == 0 and os.path.exists(trace), "--trace of a plan priced inf: no trace", p):
    strict(open(trace).read(), "--trace of a plan priced inf")

# mtrun's metrics log (dist_refuse trains a plan mtc priced inf on 2 ranks and parses its log alike); its
# null strings say "none" (mask, val_data, ...), so only its numbers are checked for null here
for name, flags in (("cpu", ["--target", "tiny-2layers", "--batch", "1"]),):
    plan, log = os.path.join(work, f"json-{name}.plan"), os.path.join(work, f"json-{name}.jsonl")
    p = run(mtc, tiny, *flags, "-o", plan)
    if not check(p.returncode == 0, f"mtc {' '.join(flags)} -o", p):
        continue
    p = run(mtrun, plan, "--steps", "2", "--log", log)
    if check(p.returncode == 0 and os.path.exists(log), f"mtrun of the {name} plan", p):
        for i, line in enumerate(open(log)):
            strict(line, f"mtrun's metrics log of the {name} plan, line {i + 1}", explained=False)
    for f in (plan, log):
        if os.path.exists(f):
            os.remove(f)
sys.exit(finish("strict JSON checks"))
