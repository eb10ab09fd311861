#!/usr/bin/env python3
"""mtc --explore and --plot: the Pareto frontier of the searched schedules.

usage: check_explore.py MTC EXAMPLES_DIR DOCS_DIR

- llama-tiny on h200: --explore --json lists each batch's frontier, no point
  of which another point of its batch dominates (at least the tokens/s,
  at most the device and host memory, better in one); mt's best at each
  batch is at least every baseline's; --plot writes an SVG that parses,
  with both panels' axis labels and units.
- --plot without --explore, and --explore with --batch, are usage errors
  (exit 2) and write nothing.
- nothing fits at batch 1 (mistral-large-2 on h200 without its tier): exit
  1, a message that says why, and no plot written.
- docs/explore-llama3-8b-h200.svg (docs/scheduler.md's picture) is what
  `mtc examples/llama3-8b.mt --target h200 --explore --plot` draws today.
"""
import json
import os
import sys
import tempfile
import xml.etree.ElementTree as ET

from checks import check, finish, run


def main():
    mtc, ex, docs = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        svg = os.path.join(tmp, "f.svg")
        p = run(mtc, f"{ex}/llama-tiny.mt", "--target", "h200", "--explore", "--json", "--plot", svg)
        d = json.loads(p.stdout) if check(p.returncode == 0, "--explore --json runs", p) else {}
        batches = d.get("batches", [])
        check(len(batches) >= 3, f"several batches explored: {[b['batch'] for b in batches]}")
        for b in batches:
            fr = b["frontier"]
            for i, x in enumerate(fr):
                for j, y in enumerate(fr):
                    if i != j and y["tokens_per_s"] >= x["tokens_per_s"] and y["device_bytes"] <= x["device_bytes"] \
                            and y["host_bytes"] <= x["host_bytes"] and y != x:
                        check(False, f"batch {b['batch']}: {y} dominates {x} on the frontier")
        pol = d.get("policies", {})
        check(set(pol) == {"mt", "sequential", "megatrain", "zero3-offload"}, f"policies {sorted(pol)}")
        for k, (batch, t) in enumerate(pol.get("mt", [])):
            for name in ("sequential", "megatrain", "zero3-offload"):
                other = pol[name][k][1]
                check(t >= other * 0.9999, f"batch {batch}: mt {t} tokens/s below {name}'s {other}")
        try:
            root = ET.parse(svg).getroot()
            text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
            check(root.tag == "{http://www.w3.org/2000/svg}svg", "the plot is SVG")
            for label in ("device memory (GB)", "tokens/s", "batch"):
                check(label in text, f"the plot labels '{label}'")
            check(len(list(root.iter("{http://www.w3.org/2000/svg}polyline"))) >= 4, "the plot has its lines")
        except (ET.ParseError, OSError) as e:
            check(False, f"the plot does not parse: {e}")
        for flags in (["--plot", svg + "2"], ["--explore", "--batch", "2"]):
            p = run(mtc, f"{ex}/llama-tiny.mt", *flags)
            check(p.returncode == 2 and not os.path.exists(svg + "2") and p.stderr.startswith("mtc: "),
                  f"{' '.join(flags)} is a usage error", p)
        none = os.path.join(tmp, "none.svg")
        p = run(mtc, f"{ex}/mistral-large-2.mt", "--target", os.path.join(ex, "..", "tests", "h200-no-tier.target"),
                "--explore", "--plot", none)
        check(p.returncode == 1 and "does not fit h200-no-tier at any batch" in p.stderr and "host memory" in p.stderr
              and p.stdout == "" and not os.path.exists(none), "--explore where nothing fits: exit 1, why, no plot", p)
        fresh = os.path.join(tmp, "readme.svg")
        p = run(mtc, f"{ex}/llama3-8b.mt", "--target", "h200", "--explore", "--plot", fresh)
        if check(p.returncode == 0, "docs/scheduler.md's exploration runs", p):
            check(open(fresh, "rb").read() == open(os.path.join(docs, "explore-llama3-8b-h200.svg"), "rb").read(),
                  "docs/explore-llama3-8b-h200.svg is stale: regenerate it with "
                  "mtc examples/llama3-8b.mt --target h200 --explore --plot docs/explore-llama3-8b-h200.svg")
    sys.exit(finish())


if __name__ == "__main__":
    main()
