#!/usr/bin/env python3
"""Checks mtc's command line: help, version, exit statuses of usage errors,
flag overrides, -o refusing without writing, and --dump-graph's structure.

usage: check_cli.py MTC EXAMPLES_DIR
"""
import json
import os
import re
import sys
import tempfile

from checks import check, finish, run


def main():
    mtc, ex = sys.argv[1], sys.argv[2]
    tiny = f"{ex}/gpt2-tiny.mt"

    p = run(mtc, "--help")
    check(p.returncode == 0 and p.stdout.startswith("usage: mtc MODEL.mt"), "--help", p)
    p = run(mtc, "--version")
    check(p.returncode == 0 and re.match(r"mtc \d+\.\d+\.\d+\n$", p.stdout), "--version", p)

    # usage errors: exit 2, a message naming the problem, nothing on stdout
    for args, msg in [((), "no model file given"), (("--frobnicate", tiny), "unknown option '--frobnicate'"),
                      ((tiny, "--batch", "x"), "--batch needs a positive integer"),
                      ((tiny, "--seq", "0"), "--seq needs a positive integer"),
                      ((tiny, "--batch"), "option '--batch' needs a value"),
                      ((tiny, tiny), "one model file at a time")]:
        p = run(mtc, *args)
        check(p.returncode == 2 and msg in p.stderr and not p.stdout, f"usage error {args}", p)

    # a clean model checks silently
    p = run(mtc, tiny)
    check(p.returncode == 0 and not p.stdout and not p.stderr, "a good model prints nothing", p)

    # --batch and --seq override the train section
    p = run(mtc, tiny, "--json", "--batch", "3", "--seq", "16")
    d = json.loads(p.stdout) if p.returncode == 0 else {}
    check(d.get("batch") == 3 and d.get("seq") == 16, "--batch/--seq override", p)
    # seq beyond the position table is a model error, exit 1
    p = run(mtc, tiny, "--seq", "65")
    check(p.returncode == 1 and "index past the 64 rows" in p.stderr, "--seq 65 on a 64-position table", p)

    # -o writes a plan silently; into a missing directory it fails and leaves nothing
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "p.bin")
        p = run(mtc, tiny, "-o", out)
        check(p.returncode == 0 and not p.stdout and os.path.getsize(out) > 1000 and
              open(out, "rb").read(8) == b"MTPLAN\0\0", "-o writes a plan", p)
        check(sorted(os.listdir(tmp)) == ["p.bin"], "no temporary file is left next to the plan")
        out = os.path.join(tmp, "no-such-dir", "p.bin")
        p = run(mtc, tiny, "-o", out)
        check(p.returncode == 1 and "no-such-dir" in p.stderr and not os.path.exists(out), "-o into a missing directory", p)

    # --target needs a readable, valid profile; h200 is the default
    p = run(mtc, tiny, "--target", "no-such-machine")
    check(p.returncode == 1 and "no-such-machine" in p.stderr, "--target missing", p)
    p = run(mtc, tiny, "--explain", "--json")
    check(p.returncode == 0 and json.loads(p.stdout or "{}").get("target") == "h200", "--explain defaults to h200", p)

    # the scheduler's flags refuse what they do not know, with exit status 2
    for bad in [["--remat", "some"], ["--policy", "fast"], ["--slots", "4"], ["--slots", "0"], ["--resident", "-1"],
                ["--checkpoints", "disk"], ["--batch", "many"], ["--policy", "megatrain", "--remat", "layer"],
                ["--policy", "sequential", "--slots", "2"], ["--tile", "0"], ["--tile", "x"],
                ["--selective-layers", "0"], ["--selective-layers", "x"], ["--offload-layers", "0"],
                ["--offload-layers", "1", "--offload-layers", "2"], ["--selective-layers", "1", "--selective-layers", "1"],
                ["--selective-layers", "1", "--remat", "offload"], ["--policy", "megatrain", "--selective-layers", "1"]]:
        p = run(mtc, tiny, *bad, "--explain")
        check(p.returncode == 2 and "Try 'mtc --help'" in p.stderr and not p.stdout, f"mtc {' '.join(bad)} refused", p)
    p = run(mtc, tiny, "--resident", "9", "--explain")
    check(p.returncode == 1 and "resident" in p.stderr and "has 2" in p.stderr, "--resident above the layers", p)

    # --explain --json: one row per remat mode and baseline; no prediction
    # beats its lower bound; the baselines cross the link 2 and 3 times; the
    # chosen schedule fits and is ahead of megatrain; 405B does not fit the
    # h200 without its NVMe tier (1.5 TB of host memory) and every row says why
    names = ["none", "layer", "selective", "offload", "mixed", "sequential", "megatrain", "zero3-offload"]
    no_tier = os.path.join(os.path.dirname(os.path.abspath(ex)), "tests", "h200-no-tier.target")
    for model, target, fit in [("llama3-8b", "h200", True), ("qwen2-7b", "gh200", True), ("llama3-70b", "h200", True),
                               ("llama3-405b", "h200-no-tier", False)]:
        p = run(mtc, f"{ex}/{model}.mt", "--target", no_tier if target == "h200-no-tier" else target, "--explain", "--json")
        # the table either way; exit 1 with the reason on stderr when nothing fits
        d = json.loads(p.stdout) if p.returncode == (0 if fit else 1) else {}
        check(fit or "no schedule of" in p.stderr, f"--explain {model} on {target}: nothing fits, said on stderr", p)
        rows = {r.get("name"): r for r in d.get("policies", [])}
        chosen = [r for r in d.get("policies", []) if r.get("chosen")]
        keys = {"name", "predicted_step_s", "tokens_per_s", "ratio_physical", "ratio_exact", "device_peak_bytes",
                "host_bytes", "link_bytes_per_step", "weight_crossings", "chosen", "fits"}
        b = d.get("bounds", {})
        ok = (d.get("target") == target and list(rows) == names and d.get("batch", 0) >= 1 and
              all(keys <= set(r) for r in rows.values()) and
              0 < b.get("physical_s", 0) <= b.get("exact_s", 0) and
              b["exact_s"] >= b["in_s"] + b["out_s"] and b["physical_s"] >= max(b["compute_s"], b["host_s"]) and
              0 < b["update_s"] < b["host_s"] and 0 < b["backward_s"] < b["compute_s"] and
              b["exact_s"] >= (b["update_s"] + b["backward_s"]) * (1 - 1e-5) and  # printed to 6 digits
              0 < b["turn_s"] and b["exact_s"] >= (b["compute_s"] + b["turn_s"]) * (1 - 1e-5) and
              all(1 <= r["ratio_exact"] <= r["ratio_physical"] for r in rows.values()) and
              all(r["fits"] or "reason" in r for r in rows.values()) and
              rows["sequential"]["weight_crossings"] == 2 and rows["megatrain"]["weight_crossings"] == 3)
        if fit:
            ok = ok and len(chosen) == 1 and chosen[0]["fits"] and \
                chosen[0]["predicted_step_s"] < rows["megatrain"]["predicted_step_s"]
        else:
            ok = ok and not chosen and not any(r["fits"] for r in rows.values()) and \
                all("host memory" in r["reason"] for r in rows.values())
        check(ok, f"--explain --json {model} on {target}", p)
    # MegaTrain's long-context headline: llama3-8b at sequence 524288, batch 1,
    # fits the 96 GB GH200 once mtc tiles the rows (--tile auto, the default)
    p = run(mtc, f"{ex}/llama3-8b.mt", "--target", "gh200", "--seq", "524288", "--batch", "1", "--explain", "--json")
    d = json.loads(p.stdout) if p.returncode == 0 else {}
    chosen = [r for r in d.get("policies", []) if r.get("chosen")]
    check(d.get("seq") == 524288 and len(chosen) == 1 and chosen[0]["fits"] and "tile=" in chosen[0]["schedule"] and
          "tile=1 " not in chosen[0]["schedule"] + " " and chosen[0]["device_peak_bytes"] <= 96e9,
          "llama3-8b at seq 524288 fits gh200, tiled", p)
    p = run(mtc, f"{ex}/llama3-8b.mt", "--target", "gh200", "--seq", "524288", "--batch", "1", "--tile", "1",
            "--explain", "--json")
    d = json.loads(p.stdout) if p.returncode == 1 else {}
    check(d.get("policies") and not any(r.get("chosen") for r in d["policies"]), "untiled, it does not fit (exit 1)", p)
    # --trace when nothing fits: exit 1, the reason, no file (it exited 0 and wrote nothing)
    with tempfile.TemporaryDirectory() as tt:
        trace = os.path.join(tt, "t.json")
        p = run(mtc, f"{ex}/llama3-405b.mt", "--target", no_tier, "--trace", trace)
        check(p.returncode == 1 and "no schedule of" in p.stderr and "no trace written" in p.stderr and
              not os.path.exists(trace), "--trace with nothing that fits exits 1 and writes nothing", p)

    # without --json: a table with the chosen row marked
    p = run(mtc, f"{ex}/llama3-8b.mt", "--target", "h200", "--explain")
    check(p.returncode == 0 and re.search(r"^  \w+ \* ", p.stdout, re.M) and "megatrain" in p.stdout,
          "--explain table marks the chosen policy", p)

    # --batch max: the largest batch that fits, so one more does not
    def chosen_at(*flags):
        p = run(mtc, f"{ex}/llama3-8b.mt", "--target", "h200", *flags, "--explain", "--json", timeout=600)
        d = json.loads(p.stdout) if p.returncode == 0 else {}
        rows = [r for r in d.get("policies", []) if r.get("chosen")]
        return d.get("batch", 0), rows[0] if rows else None, p
    most, row, p = chosen_at("--batch", "max")
    check(most >= 1 and row, "--batch max fits", p)
    _, row, p = chosen_at("--batch", str(most + 1))
    check(most >= 1 and not row, "--batch max is the largest", p)
    # --batch auto: no batch tried here predicts more tokens a second (1% slack)
    auto, arow, p = chosen_at("--batch", "auto")
    check(auto >= 1 and arow, "--batch auto fits", p)
    # (the sweep is for the plain build: under the sanitizers one auto and one max run are enough)
    for b in [] if mtc.endswith("-asan") else sorted({1, 2, 3, 4, 6, 8, 16, max(1, auto - 1), auto + 1, most}):
        _, row, p = chosen_at("--batch", str(b))
        check(not row or not arow or row["tokens_per_s"] <= arow["tokens_per_s"] * 1.01,
              f"--batch auto ({auto}, {arow and arow['tokens_per_s']:.0f} tokens/s) beats batch {b} "
              f"({row and row['tokens_per_s']:.0f})", p)

    # --dump-graph: three parts; the tied LM head folds transpose(wte) into
    # the GEMM, so the tail has no transpose node and one trans_b matmul
    p = run(mtc, tiny, "--dump-graph")
    check(p.returncode == 0, "--dump-graph runs", p)
    parts = re.split(r"^(head:|block h x2 \"h\.\{i\}\.\":|tail:)$", p.stdout, flags=re.M)
    check(len(parts) == 7, "--dump-graph has head, block and tail sections", p)
    if len(parts) == 7:
        head, block, tail = parts[2], parts[4], parts[6]
        check("transpose" not in tail and len(re.findall(r"= matmul .*trans_b", tail)) == 1, "tied head folds transpose", p)
        check(len(re.findall(r"= attention ", block)) == 1, "one attention node per block (no duplicated lowering)", p)
        check(len(re.findall(r"= slice ", block)) == 3, "split into q, k, v makes three slices", p)
        check("= input head.%" in block and "= input block.%" in tail, "parts are joined by inputs", p)
        check(len(re.findall(r"= embed ", head)) == 2, "token and position embeddings in the head", p)
        for line in p.stdout.splitlines():
            m = re.match(r"\s+%\d+ = \w+.*\((.*):(\d+):(\d+)\)$", line)
            if m:
                check(m.group(1) == tiny and int(m.group(2)) > 0, f"node location: {line}")

    # --trace: Chrome trace events, one named track per engine, no overlap on
    # a track, and the engines overlapping one another
    with tempfile.TemporaryDirectory() as tmp:
        tr = os.path.join(tmp, "t.json")
        p = run(mtc, f"{ex}/llama3-8b.mt", "--target", "h200", "--trace", tr)
        ev = json.load(open(tr))["traceEvents"] if p.returncode == 0 and os.path.exists(tr) else []
        names = {e["args"]["name"] for e in ev if e.get("ph") == "M"}
        tracks = {}
        for e in ev:
            if e.get("ph") == "X":
                tracks.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
        # times are printed to the nanosecond, so neighbours may touch by 1 ns
        alone = all(a[1] <= b[0] + 0.002 for t in tracks.values() for a, b in zip(sorted(t), sorted(t)[1:]))
        spans = sorted(s for t in tracks.values() for s in t)
        overlap = any(a[1] > b[0] + 1 for a, b in zip(spans, spans[1:]))
        check(names == {"copy-in (host to device)", "compute", "copy-out (device to host)", "host optimizer",
                        "collectives (comm)"} and
              len(tracks) == 4 and len(spans) > 32 * 4 and alone and overlap,
              "--trace writes one track per engine, each in order, overlapping each other", p)
        check(any(e.get("name") == "layer 31 backward" for e in ev), "--trace names layers and passes", p)
        # without --explain, the trace only (it printed the whole explain table)
        check(p.returncode == 0 and not p.stdout, "--trace alone prints nothing", p)

    # --explain --ranks N under --shard auto: where neither layout fits the ranks, the table and exit 1; one that
    # fits, exit 0
    p = run(mtc, tiny, "--target", "h200", "--ranks", "8", "--explain")
    check(p.returncode == 1 and "the plan: neither fits" in p.stdout and
          "8 ranks of gpt2_tiny on h200: neither fits: sharded: 8 ranks need 8 nodes" in p.stderr,
          "--explain --ranks 8 on one GPU: neither layout fits, exit 1", p)
    p = run(mtc, tiny, "--target", "h200x8", "--ranks", "8", "--explain")
    check(p.returncode == 0 and "the plan: replicated" in p.stdout, "--explain --ranks 8 on h200x8 fits, exit 0", p)

    # the human summary
    p = run(mtc, f"{ex}/gpt2.mt", "--summary")
    check(p.returncode == 0 and "124,439,808" in p.stdout and "tied" in p.stdout, "gpt2 --summary", p)

    sys.exit(finish())


if __name__ == "__main__":
    main()
