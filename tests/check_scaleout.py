#!/usr/bin/env python3
"""The scale-out predictions issues 29 and 39 ask of mtc --ranks N --explain, and
docs/scaleout.md's table of them current:
  - DeepSeek-V3 (671B) and Kimi K2 (1T) each on one h200x8-nvme node of 8
    ranks, fp32 master and moments: the plan is sharded with the NVMe tier
    (Kimi K2's bf16 weights on it too), which alone fits (sharded without it
    fits none of the 4 nodes), a rank's RAM within its share of the node,
    its bytes on NVMe and its tier's time a step under the step; --explain
    says so in words;
  - llama3-70b on one h200x8 node, 8 ranks at batch 1 and 4 a rank (and at
    batch 1 with two GPUs behind each PCIe uplink, h200x8-shared-pcie): sharded is
    the plan and fits, predicts at least 6 times one GPU's tokens/s at the same
    batch a GPU, and more than MegaTrain's way on the same node; replicated
    does not fit (every rank a whole store in an eighth of the node);
  - llama3-405b on h200x8-su: a sharded run fits and says it needs 4 nodes
    (32 GPUs), the fewest whose host memory holds it (so 3 do not);
  - a sharded rank's host memory is within its share of the node, its link
    bytes below one GPU's, MegaTrain's way moves nothing between GPUs;
  - every strategy's predicted step is at or above its bound;
  - on a cpu target where both fit, and on a GPU target (llama3-8b on
    h200x8), the plan is the faster of sharded and replicated (what --shard
    auto takes: scaleout_choose);
  - the plan's own bounds (cost_bounds) include its collectives: with
    llama3-8b sharded over two h200x8-su nodes at seq 256 they are the
    bound, and every mt row's step is at or above the bounds; the same for
    the tiny Llama, sharded and replicated, on a cpu target; and the plan:
    line says the layout --shard on|off gives;
  - more ranks than the profile has GPUs are refused, in valid JSON;
  - without --ranks, --explain --json has no scaleout.
usage: check_scaleout.py MTC (from the source tree)"""
import importlib.util
import json
import os
import subprocess
import sys

import checks

mtc = sys.argv[1]


def ok(cond, what, detail=""):
    """checks.check with what was found when it fails; prints what holds."""
    if cond:
        print("ok:", what)
    return checks.check(cond, what if cond else f"{what}: {detail}")


spec = importlib.util.spec_from_file_location("scaleout_table", os.path.join("bench", "scaleout_table.py"))
table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(table)

# DeepSeek-V3 and Kimi K2 at fp32 master and moments: the fewest nodes of h200x8-nvme a sharded run with the NVMe
# tier fits (without it none of the profile's 4), which the case's ranks are
TIERED = {"deepseek-v3": 1, "kimi-k2": 1}


def check_tiered(what, d, s, nodes):
    """A case whose ranks spill to their node's NVMe: sharded+tier is the plan and fits on `nodes` nodes, the
    fewest; sharded without the tier fits on none; a rank's RAM within its share of the node, its bytes on NVMe
    and its tier's time a step said, the tier under the step; --explain's lines say it in words."""
    so, st, sh = d["scaleout"], s["sharded+tier"], s["sharded"]
    share, tier_share = 2e12 / 8, 30.72e12 / 8
    ok(so["chosen"] == "sharded+tier" and st["fits"] and not sh["fits"],
       f"{what}: the plan is sharded with the NVMe tier, and only it fits",
       f"chosen {so['chosen']!r}, sharded+tier fits {st['fits']} ({st['reason']}), sharded {sh['fits']}")
    ok(so["tier_nodes_needed"] == nodes and so["nodes_needed"] == 0,
       f"{what}: with the tier it needs {nodes} node(s), without it none of the profile's",
       f"{so['tier_nodes_needed']} with, {so['nodes_needed']} without")
    ok(0 < st["host_bytes_per_rank"] <= share and 0 < st["tier_bytes_per_rank"] <= tier_share
       and st["tier_holds"] in ("moments", "master", "grads", "weights"),
       f"{what}: a rank {st['host_bytes_per_rank'] / 1e9:.4g} GB in RAM (its share {share / 1e9:.4g}), "
       f"{st['tier_bytes_per_rank'] / 1e9:.4g} GB on NVMe ({st['tier_holds']})", json.dumps(st)[:400])
    ok(0 < st["tier_s"] <= st["step_s"] and st["step_s"] >= st["bound_s"] > 0,
       f"{what}: the tier {st['tier_s']:.4g} s a step, under the step's {st['step_s']:.4g} s (bound "
       f"{st['bound_s']:.4g} s)", json.dumps(st)[:400])


results = [(case, table.predict(mtc, *case)) for case in table.CASES]
ones = {}
for (model, target, ranks, batch), d in results:
    so = d["scaleout"]
    s = {x["name"]: x for x in so["strategies"]}
    sh, one, mega, rep = s["sharded"], s["one-gpu"], s["megatrain"], s["replicated"]
    ones.setdefault((model, batch), one)  # a shared PCIe uplink is compared with one GPU that has it to itself
    one = ones[(model, batch)]
    what = f"{model} on {target}, {ranks} ranks of batch {batch}"
    if model in TIERED:
        check_tiered(what, d, s, TIERED[model])
        continue
    ok(so["chosen"] == "sharded" and sh["fits"], f"{what}: the plan is sharded and fits",
                 f"chosen {so['chosen']!r}, sharded fits {sh['fits']} ({sh['reason']})")
    share = 2e12 / 8
    ok(sh["host_bytes_per_rank"] <= share and sh["node_host_bytes"] <= 2e12,
                 f"{what}: a sharded rank's host memory within its share of a node",
                 f"{sh['host_bytes_per_rank'] / 1e9:.4g} GB a rank, {share / 1e9:.4g} GB its share")
    ok(not rep["fits"] and "host memory" in rep["reason"], f"{what}: replicated does not fit the node's memory",
                 rep["reason"] or "it fits")
    ok(mega["interconnect_bytes_per_rank"] == 0, f"{what}: MegaTrain's way sums gradients on the host",
                 f"{mega['interconnect_bytes_per_rank']} bytes between GPUs")
    under = [f"{x['name']} {x['step_s']:.6g} s < {x['bound_s']:.6g} s" for x in so["strategies"]
             if not (x["bound_s"] > 0 and x["step_s"] >= x["bound_s"] * (1 - 1e-9))]
    ok(not under, f"{what}: every strategy's step at or above its bound", "; ".join(under))
    if model == "llama3-70b":
        x = sh["tokens_per_s"] / one["tokens_per_s"]
        ok(x >= 6, f"{what}: sharded predicts {x:.2f}x one GPU's tokens/s (at least 6)", f"{x:.2f}x")
        ok(sh["tokens_per_s"] > mega["tokens_per_s"] and mega["fits"],
                     f"{what}: sharded ahead of MegaTrain's way on the node "
                     f"({sh['tokens_per_s'] / mega['tokens_per_s']:.2f}x)",
                     f"sharded {sh['tokens_per_s']:.4g} tokens/s, megatrain {mega['tokens_per_s']:.4g}, fits {mega['fits']}")
        ok(sh["link_bytes_per_rank"] < one["link_bytes_per_rank"],
                     f"{what}: a sharded rank's link moves less than one GPU's", "")
    else:
        ok(so["nodes_needed"] == 4 and so["ranks_needed"] == 32,
                     f"{what}: sharded says it needs 4 nodes (32 GPUs)",
                     f"{so['nodes_needed']} nodes, {so['ranks_needed']} GPUs")
        ok(not mega["fits"] and mega["ranks"] == 8, f"{what}: MegaTrain's way is one node's, which it does not fit",
                     mega["reason"])

# a cpu target, where both fit: the plan is the faster (sharded on a tie within 0.1%), sharded holds less
d = table.predict(mtc, "llama-tiny", "tiny-1layer", 2, 2)
s = {x["name"]: x for x in d["scaleout"]["strategies"]}
sh, rep = s["sharded"], s["replicated"]
faster = "sharded" if sh["step_s"] <= rep["step_s"] * 1.001 else "replicated"
ok(sh["fits"] and rep["fits"] and d["scaleout"]["chosen"] == faster,
   f"llama-tiny on tiny-1layer, 2 ranks: both fit and the plan is the faster, {faster}",
   f"chosen {d['scaleout']['chosen']}, steps sharded {sh['step_s']:.4g} replicated {rep['step_s']:.4g}")
# (sharded+tier is not priced on a profile without a tier: step 0, and why)
unpriced = [x for x in d["scaleout"]["strategies"] if x["step_s"] == 0]
ok([x["name"] for x in unpriced] == ["sharded+tier"] and "no NVMe tier" in unpriced[0]["reason"],
   "llama-tiny on tiny-1layer: sharded+tier not priced, tiny-1layer has no NVMe tier", json.dumps(unpriced)[:300])
under = [x["name"] for x in d["scaleout"]["strategies"]
         if x not in unpriced and not (0 < x["bound_s"] <= x["step_s"] * (1 + 1e-9))]
ok(not under, "llama-tiny, 2 ranks: every strategy's step at or above its bound", ", ".join(under))
# a GPU target where both fit: the plan is the faster there too, as the cuda backend runs a sharded plan's
# collectives (llama3-8b on h200x8, 8 ranks of batch 1: sharded 1.72 s a step, replicated 8.94 s; before, a GPU
# target took replicated wherever it fit)
d = table.predict(mtc, "llama3-8b", "h200x8", 8, 1)
s = {x["name"]: x for x in d["scaleout"]["strategies"]}
sh, rep = s["sharded"], s["replicated"]
ok(sh["fits"] and rep["fits"] and sh["step_s"] < rep["step_s"] and d["scaleout"]["chosen"] == "sharded",
   "llama3-8b on h200x8, 8 ranks: both fit and the plan is the faster, sharded",
   f"chosen {d['scaleout']['chosen']}, steps sharded {sh['step_s']:.4g} replicated {rep['step_s']:.4g}")
ok(sh["host_bytes_per_rank"] < rep["host_bytes_per_rank"] and sh["collective_s"] > 0 and rep["collective_s"] > 0,
   "llama-tiny, 2 ranks: a sharded rank holds less host memory; both run collectives",
   f"host {sh['host_bytes_per_rank']} against {rep['host_bytes_per_rank']}")

# more ranks than a profile has GPUs (h200: one GPU, one node): replicated and sharded say so, nothing is chosen,
# the JSON stays JSON (no infinite step), and mtc exits 1
d = table.predict(mtc, "llama-tiny", "h200", 2, 2, nothing_fits=True)
s = {x["name"]: x for x in d["scaleout"]["strategies"]}
ok(not s["sharded"]["fits"] and "2 nodes" in s["sharded"]["reason"] and not s["replicated"]["fits"]
   and d["scaleout"]["chosen"] == "", "2 ranks on h200: no room for them, said", json.dumps(d["scaleout"])[:400])

# the plan's bounds include its collectives (the comm engine's busy time, cost_bounds): llama3-8b on two
# h200x8-su nodes at seq 256, sharded, where the all-gathers and reduce-scatters over the network bound the step
# (before, the bounds were one process's: the whole model over one rank's link, above the sharded plan's step);
# replicated and sharded llama-tiny on a cpu target: every mt row's step at or above its bounds
for model, target, ranks, shard, extra in (("llama3-8b", "h200x8-su", 16, "on", ["--seq", "256"]),
                                           ("llama-tiny", "tiny-1layer", 2, "on", []),
                                           ("llama-tiny", "tiny-1layer", 2, "off", [])):
    what = f"{model} on {target}, {ranks} ranks, --shard {shard}"
    r = subprocess.run([mtc, f"examples/{model}.mt", "--target", target, "--batch", "1", "--ranks", str(ranks),
                        "--shard", shard, *extra, "--explain", "--json"], capture_output=True, text=True)
    if not ok(r.returncode == 0, f"{what}: mtc --explain --json", r.stderr):
        continue
    d = json.loads(r.stdout)
    b = d["bounds"]
    rows = [x for x in d["policies"] if x["name"] in ("none", "layer", "selective", "offload", "mixed")
            and "predicted_step_s" in x]
    under = [f"{x['name']} {x['predicted_step_s']:.6g} s" for x in rows
             if not x["predicted_step_s"] >= max(b["physical_s"], b["exact_s"]) * (1 - 1e-9)]
    ok(rows and not under, f"{what}: every mt row's step at or above the bounds ({b['physical_s']:.4g} s, of it "
       f"collectives {b.get('comm_s', 0):.4g} s)", f"{'; '.join(under)} below {b}")
    ok(b.get("comm_s", 0) > 0 and b["physical_s"] >= b.get("comm_s", 0), f"{what}: the bounds count the collectives",
       json.dumps(b))
    if model == "llama3-8b":
        ok(b["physical_s"] == b.get("comm_s") and b["in_s"] < b.get("comm_s", 0), f"{what}: the collectives bound the step",
           json.dumps(b))
    # the plan: line says what the plan is, the --shard given, whatever the model would choose
    t = subprocess.run([mtc, f"examples/{model}.mt", "--target", target, "--batch", "1", "--ranks", str(ranks),
                        "--shard", shard, *extra, "--explain"], capture_output=True, text=True)
    said = [ln for ln in t.stdout.splitlines() if "the plan:" in ln]
    plan = "sharded" if shard == "on" else "replicated"
    ok(said and said[0].strip().startswith(f"the plan: {plan}") and d["scaleout"].get("plan") == plan,
       f"{what}: --explain says the plan is {plan}", f"{said} (JSON plan {d['scaleout'].get('plan')!r})")

# --explain's words for a tiered plan: DeepSeek-V3 and Kimi K2 (its bf16 weights on the tier too) on one
# h200x8-nvme node, 8 ranks: the step, RAM and NVMe a rank, the tier's time against the step, and the fewest nodes
# with and without the tier
for model, holds in (("deepseek-v3", "grads"), ("kimi-k2", "weights")):
    r = subprocess.run([mtc, f"examples/{model}.mt", "--target", "h200x8-nvme", "--ranks", "8", "--explain"],
                       capture_output=True, text=True)
    lines = [ln.strip() for ln in r.stdout.splitlines()]
    plan = [ln for ln in lines if ln.startswith("the plan, a rank of 8: ") and " GB in RAM " in ln
            and " GB on NVMe " in ln and f"(the tier holds {holds};" in ln and " s a step against the step's " in ln]
    with_tier = [ln for ln in lines if ln.startswith("sharded with the tier: 1 node (8 GPUs), step ")]
    ok(r.returncode == 0 and plan and with_tier and any(ln.startswith("the plan: sharded+tier") for ln in lines),
       f"{model} on h200x8-nvme, 8 ranks, --explain: {plan[0] if plan else ''}", r.stdout[-1500:] + r.stderr)

# one process: no scale-out in --explain
r = subprocess.run([mtc, "examples/llama-tiny.mt", "--target", "tiny-1layer", "--batch", "2", "--explain", "--json"],
                   capture_output=True, text=True)
ok(r.returncode == 0 and "scaleout" not in json.loads(r.stdout), "--explain without --ranks: no scaleout",
             r.stderr)

# docs/scaleout.md quotes the table as mtc predicts it now
ok(table.check(table.table(results), "docs/scaleout.md") == 0, "docs/scaleout.md quotes the current scale-out table",
             "stale")
sys.exit(checks.finish("scale-out checks"))
