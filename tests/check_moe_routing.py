#!/usr/bin/env python3
"""MoE routing is recognised from the data flow, not from how the gate
expression is written (common/graph.c, graph_routed_experts).

examples/mixtral-8x7b.mt (8 experts, 2 a token) is written three ways, its
gates scaled by a factor and divided by a norm (DeepSeek's
routed_scaling_factor and renormalisation, both 1 here):

- router: `router(logits, top_k = K, softmax = before) * RSF / NORM`;
- written out: the same numbers, the softmax taken apart and the top-k
  selection applied with where: `picked = gt(router(..., softmax = after) *
  RSF / NORM, 0)`, `where(picked, softmax(logits) * RSF / NORM, 0)` (the
  router further up the graph than the 16 nodes the compiler once
  searched, which then priced every expert on every row, silently);
- sigmoid grouped: DeepSeek-V3's routing, `router(logits, top_k = K, scores
  = sigmoid, normalize = true, scale = RSF, groups = 4, top_groups = 2) /
  NORM` (its selection through two more top-k masks and a sum);
- every expert: `router(logits, top_k = E, softmax = before) * RSF / NORM`,
  the same numbers as `softmax(logits) * RSF / NORM`, every expert on every
  row, said so;
- unrouted: `softmax(logits) * RSF / NORM`, no router at all.

`mtc --explain --json` on h200 must give the first three the same compute
bound (one forward and backward, the experts' GEMMs most of it) to 0.1%,
without a warning; every expert at least 2x that (all 8 experts priced on
every row, against 2), without a warning; the unrouted one is an error at
its moe that names the experts and the fix (it was a warning, priced as
every expert).

usage: check_moe_routing.py MTC
"""
import json
import os
import subprocess
import sys
import tempfile

GATES = "  gates = router(logits, top_k = K, softmax = after)\n"
FORMS = {
    "router": "  gates = router(logits, top_k = K, softmax = before) * RSF / NORM\n",
    "written out": "  picked = gt(router(logits, top_k = K, softmax = after) * RSF / NORM, 0)\n"
                   "  gates = where(picked, softmax(logits) * RSF / NORM, 0)\n",
    "sigmoid grouped": "  gates = router(logits, top_k = K, scores = sigmoid, normalize = true, scale = RSF, groups = 4,\n"
                       "                 top_groups = 2) / NORM\n",
    "every expert": "  gates = router(logits, top_k = E, softmax = before) * RSF / NORM\n",
    "unrouted": "  gates = softmax(logits) * RSF / NORM\n",
}


def compute(mtc, path):
    """The compute bound of mtc --explain --json on h200 and mtc's stderr; None for the bound if mtc refused it."""
    r = subprocess.run([mtc, path, "--target", "h200", "--explain", "--json"], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        return None, r.stderr
    return json.loads(r.stdout)["bounds"]["compute_s"], r.stderr


def main():
    mtc = sys.argv[1]
    src = open("examples/mixtral-8x7b.mt").read()
    if GATES not in src or "config {\n" not in src:
        sys.exit("FAIL: examples/mixtral-8x7b.mt no longer has the gates line this test rewrites")
    src = src.replace("config {\n", "config {\n  RSF = 1.0\n  NORM = 1.0\n", 1)
    got = {}
    with tempfile.TemporaryDirectory() as d:
        for name, gates in FORMS.items():
            path = os.path.join(d, name.replace(" ", "_") + ".mt")
            open(path, "w").write(src.replace(GATES, gates))
            got[name] = compute(mtc, path)
    fails = []
    routed, _ = got["router"]
    for name, (s, err) in got.items():
        print(f"{name:15s} " + (f"compute {s:.6g} s" if s is not None else "refused") +
              ("  (warned)" if "warning" in err else ""))
        if name != "unrouted" and (s is None or "warning" in err):
            fails.append(f"{name}: a routed gate warned or was refused: {err.strip()}")
    if fails:
        for f in fails:
            print("FAIL:", f)
        sys.exit(1)
    for name in ("written out", "sigmoid grouped"):
        other, _ = got[name]
        if abs(other - routed) > 1e-3 * routed:
            fails.append(f"{name}: compute {other:.6g} s against the router form's {routed:.6g} s")
    dense, _ = got["every expert"]
    if dense < 2 * routed:
        fails.append(f"every expert: compute {dense:.6g} s, not priced dense (router form {routed:.6g} s)")
    s, err = got["unrouted"]
    if s is not None or "error" not in err or "no router limits" not in err or "8 experts" not in err or \
            "top_k = 8" not in err:
        fails.append(f"unrouted: not refused with an error naming the experts and router(logits, top_k = 8): "
                     f"{err.strip()!r}")
    for f in fails:
        print("FAIL:", f)
    if fails:
        sys.exit(1)
    print("ok: the routing recognised in every form, every expert priced dense, the unrouted gates refused")


if __name__ == "__main__":
    main()
