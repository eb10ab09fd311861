#!/usr/bin/env python3
"""mtc's scale-out predictions (mtc --ranks N --explain --json) as the table
docs/scaleout.md quotes: for llama3-70b on one 8xH200 node and
llama3-405b on nodes of it, one GPU alone, replicated, sharded, sharded with
the NVMe tier and MegaTrain's way side by side; DeepSeek-V3 (671B) and Kimi
K2 (1T) on one 8xH200 node, their ranks spilling to the node's NVMe (Kimi
K2's bf16 weights too).

usage: bench/scaleout_table.py [MTC]                 print the table
       bench/scaleout_table.py [MTC] --check FILE    exit 1 unless FILE quotes it as printed
(MTC defaults to build/mtc; run from the source tree.) tests/check_scaleout.py
imports predict() and table()."""
import json
import subprocess
import sys

# (model, target, ranks, batch a rank) of the rows docs/scaleout.md quotes
# (h200x8-shared-pcie: the what-if of two GPUs behind one PCIe uplink; its "x one GPU" is against h200x8's one GPU,
# which has the uplink to itself)
CASES = [("llama3-70b", "h200x8", 8, 1), ("llama3-70b", "h200x8-shared-pcie", 8, 1), ("llama3-70b", "h200x8", 8, 4),
         ("llama3-405b", "h200x8-su", 32, 1), ("deepseek-v3", "h200x8-nvme", 8, 1), ("kimi-k2", "h200x8-nvme", 8, 1)]
SHARED = "-shared-pcie"
BEGIN, END = "<!-- bench/scaleout_table.py -->", "<!-- end of bench/scaleout_table.py -->"
NAMES = {"one-gpu": "one GPU", "replicated": "replicated", "sharded": "sharded", "sharded+tier": "sharded + NVMe tier",
         "megatrain": "MegaTrain's way"}


def predict(mtc, model, target, ranks, batch, nothing_fits=False):
    """mtc's --explain --json of a case: the whole object, its 'scaleout' holding the strategies. With
    nothing_fits, a case neither layout fits: mtc prints the object and exits 1, saying so."""
    r = subprocess.run([mtc, f"examples/{model}.mt", "--target", target, "--batch", str(batch), "--ranks", str(ranks),
                        "--explain", "--json"], capture_output=True, text=True)
    if nothing_fits and not (r.returncode == 1 and "neither fits" in r.stderr):
        sys.exit(f"scaleout_table: mtc on {model} {target} --ranks {ranks} did not exit 1 saying neither layout "
                 f"fits (exit {r.returncode}): {r.stderr.strip()}")
    if not nothing_fits and r.returncode != 0:
        sys.exit(f"scaleout_table: mtc failed on {model} {target} --ranks {ranks}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def table(results):
    """The markdown table of the cases' predictions: [(case, json)] -> lines. A case on a -shared-pcie
    target follows its base target's case and is compared with that one GPU."""
    out = ["| model, target, batch a rank | strategy | ranks | step s | tokens/s | x one GPU | model TFLOP/s a GPU "
           "| link GB a rank | NVLink + network GB a rank | host GB a rank | NVMe GB a rank | tier s a rank | fits |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ones = {}  # (model, target, batch) -> the one-GPU row
    for (model, target, ranks, batch), d in results:
        so = d["scaleout"]
        one = ones.setdefault((model, target, batch), so["strategies"][0])
        if target.endswith(SHARED):  # one GPU alone has the uplink to itself: h200x8's
            one = ones[(model, target[:-len(SHARED)], batch)]
        for s in so["strategies"]:
            if s["name"] == "one-gpu" and target.endswith(SHARED):
                continue
            if s["name"] == "sharded+tier" and s["fits"] and s["tier_bytes_per_rank"] == 0:
                continue  # nothing to spill: the sharded row again
            name = NAMES[s["name"]] + (" (the plan)" if s["name"] == so["chosen"] else "")
            fits = "yes" if s["fits"] else "no: " + s["reason"].replace("|", "/")
            out.append(f"| {model}, {target}, {batch} | {name} | {s['ranks']} | {s['step_s']:.4g} | "
                       f"{s['tokens_per_s']:.4g} | {s['tokens_per_s'] / one['tokens_per_s']:.2f} | "
                       f"{s['model_flops_per_gpu'] / 1e12:.4g} | {s['link_bytes_per_rank'] / 1e9:.4g} | "
                       f"{s['interconnect_bytes_per_rank'] / 1e9:.4g} | {s['host_bytes_per_rank'] / 1e9:.4g} | "
                       f"{s['tier_bytes_per_rank'] / 1e9:.4g} | {s['tier_s']:.4g} | {fits} |")
        for what, nodes, ranks_needed in (("sharded", so["nodes_needed"], so["ranks_needed"]),
                                          ("sharded + NVMe tier", so["tier_nodes_needed"], so["tier_ranks_needed"])):
            out.append(f"| {model}, {target}, {batch} | {what} needs | {ranks_needed} | | | | | | | | | | "
                       f"{nodes} node{'s' if nodes != 1 else ''} |" if nodes else
                       f"| {model}, {target}, {batch} | {what} needs | | | | | | | | | | | none of its nodes |")
    return out


def quoted(path):
    """The lines FILE quotes between the markers."""
    text = open(path).read()
    inner = text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text and END in text else ""
    return [line.strip() for line in inner.splitlines() if line.strip()]


def check(rows, path):
    """0 when path quotes rows between its markers, else 1 (and says so)."""
    if quoted(path) != [r.strip() for r in rows]:
        print(f"{path} quotes stale scale-out predictions; replace the lines between its markers with the output of "
              f"python3 bench/scaleout_table.py:\n" + "\n".join(rows))
        return 1
    print(f"ok: {path} quotes mtc's current scale-out predictions ({len(rows)} rows)")
    return 0


def main():
    args = sys.argv[1:]
    mtc = args.pop(0) if args and not args[0].startswith("--") else "build/mtc"
    path = None
    if args[:1] == ["--check"] and len(args) == 2:
        path = args[1]
    elif args:
        sys.exit(f"scaleout_table: unknown arguments {' '.join(args)}")
    rows = table([(case, predict(mtc, *case)) for case in CASES])
    if path:
        sys.exit(check(rows, path))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
