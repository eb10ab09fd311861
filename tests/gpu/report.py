#!/usr/bin/env python3
"""The tables of a GPU session (tests/gpu/run.sh prints them after every
stage and again at the end; tests/gpu/README.md says what each figure is).

usage: report.py WORK
       report.py --gemm-shapes MODEL.mt M TILE,...   (gpu_check's --gemm options: a model's products
                                                      in micro-batches of M tokens, at each --tile)

WORK is run.sh's working folder; every input is optional (a stage that did
not run leaves a dash):

  stages.tsv     NAME, STATUS, SECONDS, NOTE a line (tab-separated)
  card.txt       nvidia-smi's name, driver, clocks and power before the runs,
                 and gpu_check's `device memory: free F total T bytes` line
  gpu_check.log  `bf16 GEMM (cuBLAS, 8192^3): R TFLOP/s`,
                 `attention_time key=value...` lines (kernel, D, T, ms, ...)
                 `gemm_time M= N= K= ms=` lines (the models' shapes) and
                 `moe_time rows= C= E= F= K= fwd_ms= bwd_ms= ref_ms=
                 dense_ms= share= err=` lines (the MoE kernels)
  peers.log      tests/gpu/sdpa_peer.py's attention_time lines and
                 tests/gpu/megatrain_peer.py's `megatrain_step` lines
  calibrate.log  mtrun --calibrate's profile (the grads+ rate)
  runs/MODEL/    one streamed mtrun run: metrics.jsonl, trace.json (mtrun
                 --trace), predicted.json (mtc --trace), explain.txt (mtc
                 --explain), model.mt, mtrun.log (each line after the
                 seconds since launch), smi.csv (nvidia-smi samples every 100
                 ms: SM MHz, memory MHz, W, MiB used, utilization %; the
                 first before mtrun started)

Exit status 0 when the tables were printed, 2 on a usage error.
"""
import json
import os
import re
import statistics
import sys

ENGINES = {1: "compute", 2: "copy-in", 3: "copy-out", 4: "host"}


def fnum(x, fmt="{:.3f}"):
    return "-" if x is None else fmt.format(x)


def ratio(a, b):
    return a / b if a is not None and b else None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def table(head, rows):
    """Rows of strings under their heads, columns as wide as their widest cell."""
    cells = [head] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)).rstrip()
                     for r in cells)


# ---------------------------------------------------------------- inputs

def keyvals(line):
    out = {}
    for k, v in re.findall(r"(\w+)=(\S+)", line):
        try:
            out[k] = float(v) if re.fullmatch(r"[-+0-9.eE]+", v) else v
        except ValueError:
            out[k] = v
    return out


def attention_times(text):
    """Every attention_time line: {kernel, D, T, ms, ...}; in a log with none
    (an older gpu_check), its human lines (tensor-core ... T4096 H32/8 D128
    ...: X ms) instead."""
    rows, older = [], []
    for line in (text or "").splitlines():
        if line.startswith("attention_time "):
            kv = keyvals(line)
            if all(k in kv for k in ("kernel", "D", "T", "ms")):
                rows.append(kv)
        m = re.match(r"tensor-core attention B1 T(\d+) H(\d+)/(\d+) D(\d+) causal fwd\+bwd: ([0-9.]+) ms", line)
        if m:
            older.append({"kernel": "mt_tc", "T": float(m[1]), "H": float(m[2]), "KVH": float(m[3]),
                          "D": float(m[4]), "ms": float(m[5])})
    return rows or older


def gemm_rate(text):
    m = re.search(r"^bf16 GEMM \(cuBLAS, 8192\^3\): ([0-9.]+) TFLOP/s", text or "", re.M)
    return float(m[1]) if m else None


def config_value(text, name):
    m = re.search(rf"^\s*{name}\s*=\s*([0-9]+)", text or "", re.M)
    return int(m[1]) if m else None


def model_gemms(text, M, tile):
    """A Llama-shaped model's matrix products in a micro-batch of M tokens,
    forward-shaped: (count a step's forward, M, N, K). The query, key and
    value projection takes the whole sequence; the output projection, gate
    and up together, down (each once a layer) and the head (once) take
    M / tile rows (mtc --tile: the row-local end of the block and the tail
    in chunks)."""
    c = {k: config_value(text, k) for k in ("C", "NH", "NKV", "FFN", "V", "L")}
    if not all(c.values()):
        return []
    C, hs, m = c["C"], c["C"] // c["NH"], M // tile
    return [(c["L"], M, C + 2 * c["NKV"] * hs, C), (c["L"], m, C, C), (c["L"], m, 2 * c["FFN"], C),
            (c["L"], m, C, c["FFN"]), (1, m, c["V"], C)]


def model_gemm_rate(text, gemm_times, M, tile):
    """TFLOP/s of the model's products as gpu_check timed them (each at the
    timed M nearest its own), weighted by how often a step runs each (None
    unless every shape was timed)."""
    flops = ms = 0.0
    for n, m, N, K in model_gemms(text, M, tile):
        t = [g for g in gemm_times if (int(g["N"]), int(g["K"])) == (N, K)]
        if not t:
            return None
        g = min(t, key=lambda g: abs(g["M"] - m))
        flops, ms = flops + n * 2 * g["M"] * N * K, ms + n * g["ms"]
    return flops / (ms * 1e-3) / 1e12 if ms else None


def explain_chosen(text):
    """mtc --explain's chosen line: per micro-batch seconds, and the accumulation."""
    m = re.search(r"chosen \(\*\): compute ([0-9.e+-]+) s \(GEMMs ([0-9.e+-]+), attention ([0-9.e+-]+) on the "
                  r"([a-z0-9 -]+?) kernel, other ([0-9.e+-]+); recompute ([0-9.e+-]+)\)", text or "")
    a = re.search(r"accumulate (\d+)", text or "")
    if not m:
        return None
    acc = int(a[1]) if a else 1
    return {"compute": float(m[1]) * acc, "gemm": float(m[2]) * acc, "attention": float(m[3]) * acc,
            "kernel": m[4], "other": float(m[5]) * acc}


def profile_value(text, key):
    m = re.search(rf"^{key}\s*=\s*([0-9.eE+-]+)", text or "", re.M)
    return float(m[1]) if m else None


def trace_events(path):
    try:
        with open(path) as f:
            return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError):
        return None


def steps_of(events):
    """The measured trace's events split by step: the k-th time an
    instruction index appears (in time order) it belongs to step k."""
    seen, steps = {}, []
    for e in sorted(events, key=lambda e: e["ts"]):
        k = seen.get(e["args"]["instruction"], 0)
        seen[e["args"]["instruction"]] = k + 1
        while len(steps) <= k:
            steps.append([])
        steps[k].append(e)
    return steps


def compute_idle(events):
    """Seconds the compute track waits, by the engine it waited on: for
    each gap before a compute event, the other engine whose instruction
    ended last inside the gap (none: launch or host overhead)."""
    comp = sorted((e for e in events if e["tid"] == 1), key=lambda e: e["ts"])
    others = sorted((e for e in events if e["tid"] != 1), key=lambda e: e["ts"] + e["dur"])
    start = min(e["ts"] for e in events)
    idle = {name: 0.0 for name in ("copy-in", "copy-out", "host", "none")}
    prev_end = start
    for e in comp:
        gap = e["ts"] - prev_end
        if gap > 0:
            ends = [o for o in others if prev_end < o["ts"] + o["dur"] <= e["ts"] + 1e-3]
            who = ENGINES[max(ends, key=lambda o: o["ts"] + o["dur"])["tid"]] if ends else "none"
            idle[who] += gap * 1e-6
        prev_end = max(prev_end, e["ts"] + e["dur"])
    return idle


def busy(events):
    out = {name: 0.0 for name in ENGINES.values()}
    for e in events:
        out[ENGINES.get(e["tid"], "compute")] += e["dur"] * 1e-6
    return out


def median_dicts(ds):
    return {k: statistics.median(d[k] for d in ds) for k in ds[0]} if ds else None


def smi_samples(path):
    rows = []
    for line in (read(path) or "").splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            rows.append([float(x) for x in f[:5]])
        except ValueError:
            continue
    return rows


def stamped(path):
    """mtrun.log's lines, each after its seconds since launch."""
    out = []
    for line in (read(path) or "").splitlines():
        t, _, rest = line.partition(" ")
        try:
            out.append((float(t), rest))
        except ValueError:
            continue
    return out


# ---------------------------------------------------------------- one run

def one_run(d, gemm_tflops, grads_add_gbs):
    r = {"dir": os.path.basename(d)}
    lines = []
    for line in (read(os.path.join(d, "metrics.jsonl")) or "").splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue
    cfg = next((x["config"] for x in lines if "config" in x), None)
    ms = [x["ms"] for x in lines if "ms" in x]
    if cfg:
        tile = re.search(r"tile=(\d+)", cfg.get("schedule", ""))
        r.update(model=cfg["model"], batch=f"{cfg['batch']}x{cfg['seq']}", pred=cfg["predicted_step_s"],
                 arena=cfg["arena_bytes"] / 1e9, tokens=cfg["tokens_per_step"], M=cfg["batch"] * cfg["seq"],
                 tile=int(tile[1]) if tile else 1)
    if cfg and len(ms) >= 2:
        r["step"] = statistics.median(ms[1:]) / 1e3
        r["tok_s"] = cfg["tokens_per_step"] / r["step"]
        text = read(os.path.join(d, "model.mt"))
        C, L, T, NH = config_value(text, "C"), cfg["layers"], cfg["seq"], config_value(text, "NH")
        r["head"] = C // NH if C and NH else None
        if C:
            flops = 6 * cfg["params"] * cfg["tokens_per_step"] + 6 * L * T * C * cfg["tokens_per_step"]
            r["tflops"] = flops / r["step"] / 1e12
            r["of_gemm"] = ratio(r["tflops"], gemm_tflops)
    ev = trace_events(os.path.join(d, "trace.json"))
    pev = trace_events(os.path.join(d, "predicted.json"))
    if ev:
        steps = steps_of(ev)
        warm = steps[1:] or steps
        r["busy"] = median_dicts([busy(s) for s in warm])
        r["idle"] = median_dicts([compute_idle(s) for s in warm])

        def rate(tid):
            sel = [e for e in ev if e["tid"] == tid and e["args"]["bytes"] > 0]
            t = sum(e["dur"] for e in sel) * 1e-6
            return sum(e["args"]["bytes"] for e in sel) / t / 1e9 if t > 0 else None
        r["h2d"], r["d2h"] = rate(2), rate(3)
        adamw = [sum(e["dur"] for e in s if e["tid"] == 4 and e["name"].startswith("AdamW")) * 1e-6 for s in warm]
        if cfg and statistics.median(adamw) > 0:
            r["adamw"] = 30 * cfg["params"] / statistics.median(adamw) / 1e9
        grads = [e for e in warm[0] if e["tid"] == 3 and "gradient out" in e["name"]]
        r["copyout"] = sum(e["dur"] for e in grads) * 1e-6
        if grads_add_gbs:  # bf16 gradients: 2 bytes on the link, 10 bytes of host traffic in the add
            r["add_est"] = sum(e["args"]["bytes"] for e in grads) / 2 * 10 / (grads_add_gbs * 1e9)
        # the copy-out track after each gradient's DMA until its next instruction: the add and any wait
        out3 = sorted((e for e in warm[0] if e["tid"] == 3), key=lambda e: e["ts"])
        r["add_gap"] = sum(max(0.0, b["ts"] - (a["ts"] + a["dur"])) for a, b in zip(out3, out3[1:])
                           if "gradient out" in a["name"]) * 1e-6
    if pev:
        r["pbusy"], r["pidle"] = busy(pev), compute_idle(pev)
    ex = explain_chosen(read(os.path.join(d, "explain.txt")))
    if ex and r.get("busy"):
        r["explain"] = ex
    log = stamped(os.path.join(d, "mtrun.log"))
    for t, line in log:
        m = re.search(r"pinned \d+ bytes.* in ([0-9.]+) s", line)
        if m:
            r["pin"] = float(m[1])
        m = re.match(r"step\s+1/\d+ .* ([0-9.]+) ms", line)
        if m and "ready" not in r:
            r["ready"] = t - float(m[1]) / 1e3
    smi = smi_samples(os.path.join(d, "smi.csv"))
    if len(smi) > 1:
        r["sm_mhz"] = statistics.median(s[0] for s in smi[1:])
        r["watts"] = max(s[2] for s in smi[1:])
        r["peak"] = (max(s[3] for s in smi) - smi[0][3]) * 2**20 / 1e9
    return r


def scaled_shares(r, profile, gemm_tflops, attn_tflops):
    """Attention's and the GEMMs' seconds in the run's compute: mtc's
    predicted seconds rescaled from the profile's rates to the rates this
    session measured (the GEMMs: matrix_flops_bf16 x gemm_efficiency against
    cuBLAS's 8192^3 rate; attention: attention_tc_fraction x
    matrix_flops_bf16 against gpu_check's mt kernel at the model's head size,
    T 4096, on the 9 units of work it runs), next to the measured compute
    busy time."""
    ex, comp = r.get("explain"), (r.get("busy") or {}).get("compute")
    if not ex or not comp:
        return None
    mf, eff = profile_value(profile, "matrix_flops_bf16"), profile_value(profile, "gemm_efficiency") or 0.8  # common/target.h's default
    frac = profile_value(profile, "attention_tc_fraction")
    gemm = ex["gemm"] * (mf * eff / (gemm_tflops * 1e12)) if mf and gemm_tflops else None
    # gpu_check counts 7 T x T x D units (the standard way), the cost model the 9 the kernels run
    # (common/attention.h's attn_gpu_head_dims): its rate on those is 9 / 7 times the line's
    attn = ex["attention"] * frac * mf / (attn_tflops * 1e12 * 9 / 7) if frac and mf and attn_tflops else None
    return {"gemm": gemm, "attention": attn, "other": comp - (gemm or 0) - (attn or 0)
            if gemm is not None and attn is not None else None, "compute": comp}


# ---------------------------------------------------------------- the tables

def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--gemm-shapes":
        text, M = read(sys.argv[2]), int(sys.argv[3])
        shapes = {x[1:] for t in sys.argv[4].split(",") for x in model_gemms(text, M, int(t))}
        print(" ".join(f"--gemm {M}x{N}x{K}" for M, N, K in sorted(shapes)))
        return 0 if shapes else 1
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    w = sys.argv[1]
    out = []
    stages = [l.split("\t") for l in (read(os.path.join(w, "stages.tsv")) or "").splitlines() if l.strip()]
    out.append("== stages\n" + table(["stage", "status", "s", "note"],
                                     [(s + ["", "", "", ""])[:4] for s in stages]))
    card = read(os.path.join(w, "card.txt")) or ""
    gck = read(os.path.join(w, "gpu_check.log"))
    peers = read(os.path.join(w, "peers.log"))
    gemm = gemm_rate(gck)
    mem = re.search(r"device memory: free (\d+) total (\d+)", (gck or "") + card)
    out.append("== card\n" + "\n".join(l for l in card.splitlines() if not l.startswith("device memory")) +
               f"\ncudaMemGetInfo: free {fnum(int(mem[1]) / 1e9 if mem else None, '{:.2f}')} GB, total "
               f"{fnum(int(mem[2]) / 1e9 if mem else None, '{:.2f}')} GB\nbf16 GEMM (cuBLAS 8192^3): "
               f"{fnum(gemm, '{:.1f}')} TFLOP/s")

    # attention: mt's kernel against SDPA's best backend at each shape
    mt = attention_times(gck)
    sd = attention_times(peers)
    shapes = sorted({(int(a["D"]), int(a["T"])) for a in mt + sd})
    rows, att = [], {}  # att: (D, T) -> (share of the GEMM rate, mt over SDPA's best)
    for D, T in shapes:
        m = [a for a in mt if int(a["D"]) == D and int(a["T"]) == T]
        s = [a for a in sd if int(a["D"]) == D and int(a["T"]) == T]
        best = min(s, key=lambda a: a["ms"]) if s else None
        mms = min(a["ms"] for a in m) if m else None
        flops = 4 * 0.5 * T * T * 32 * D * 3.5  # B 1, H 32, causal, forward + backward as cost.c counts
        att[D, T] = (ratio(flops / 1e9 / gemm, mms) if gemm and mms else None,
                     ratio(mms, best["ms"] if best else None))
        rows.append((D, T, fnum(mms), fnum(ratio(flops / 1e9, mms), "{:.1f}") if mms else "-",
                     fnum(ratio(flops / 1e9 / gemm, mms) if gemm and mms else None),
                     best["kernel"] if best else "-", fnum(best["ms"] if best else None),
                     fnum(ratio(mms, best["ms"] if best else None), "{:.2f}"),
                     " ".join(f"{a['kernel'].replace('sdpa_', '')}={a['ms']:.3f}" for a in s)))
    out.append("== attention, B 1, H 32/8, causal, bf16, forward + backward (ms)\n" +
               table(["D", "T", "mt ms", "TFLOP/s", "/GEMM", "SDPA best", "ms", "mt/SDPA", "each backend"], rows))

    # mixture of experts: the pipelined kernels against a dense cuBLAS GEMM of the same FLOPs, same run
    eff = profile_value(read(os.path.join(w, "profile.target")) or "", "gemm_efficiency") or 0.8
    rows = []
    for m in [keyvals(l) for l in (gck or "").splitlines() if l.startswith("moe_time ")]:
        ms = m["fwd_ms"] + m["bwd_ms"]
        flops = 12 * 2 * m["rows"] * m["K"] * m["C"] * m["F"]  # 3 products forward, 9 backward (compiler/schedule/cost.c)
        rows.append(tuple(str(int(m[k])) for k in ("rows", "E", "K", "C", "F")) + (fnum(m["fwd_ms"]), fnum(m["bwd_ms"]),
                     fnum(flops / (ms * 1e-3) / 1e12, "{:.1f}"), fnum(m["ref_ms"]), fnum(m["dense_ms"], "{:.4f}"),
                     fnum(m["share"]), fnum(m["share"] * eff), f"{m['err']:.1e}"))
    out.append("== mixture of experts, bf16, forward + backward (ms): the pipelined kernels, the 64-row ones, a dense "
               "cuBLAS product of the same shape; moe_gemm_efficiency = share x gemm_efficiency\n" +
               table(["rows", "E", "top", "C", "F", "fwd ms", "bwd ms", "TFLOP/s", "64-row ms", "dense ms", "share",
                      "moe_gemm_eff", "apart"], rows))

    # the streamed runs
    cal = read(os.path.join(w, "calibrate.log"))
    # the host add's rate (adamw_grads_add: its name before grads_accumulate, as in the fixture's log)
    ga = re.search(r"(?:grads_accumulate|adamw_grads_add).*?: ([0-9.]+) GB/s", (cal or "").replace("\n# ", " "),
                   re.S)
    profile = read(os.path.join(w, "profile.target")) or ""
    runs = []
    rd = os.path.join(w, "runs")
    for name in sorted(os.listdir(rd)) if os.path.isdir(rd) else []:
        runs.append(one_run(os.path.join(rd, name), gemm, float(ga[1]) if ga else None))
    mtb = {}  # mt's attention at T 4096 (the runs' length): D -> its best TFLOP/s
    for a in mt:
        if int(a["T"]) == 4096:
            D = int(a["D"])
            mtb[D] = max(mtb.get(D, 0), 4 * 0.5 * 4096 * 4096 * a.get("H", 32) * D * 3.5 / (a["ms"] * 1e-3) / 1e12)
    mega = [keyvals(l) for l in (peers or "").splitlines() if l.startswith("megatrain_step ")]
    gemms = [keyvals(l) for l in (gck or "").splitlines() if l.startswith("gemm_time ")]
    mega_tok = statistics.median(m["tokens_per_s"] for m in mega[1:]) if len(mega) > 1 else None
    mega_peak = max((m.get("peak_gb", 0) for m in mega), default=None)
    rows = []
    for r in runs:
        rows.append((r.get("model", r["dir"]), r.get("batch", "-"), fnum(r.get("step")), fnum(r.get("pred")),
                     fnum(ratio(r.get("step"), r.get("pred")), "{:.2f}"), fnum(r.get("tok_s"), "{:.0f}"),
                     fnum(r.get("tflops"), "{:.1f}"), fnum(r.get("of_gemm"), "{:.2f}"), fnum(r.get("h2d"), "{:.1f}"),
                     fnum(r.get("d2h"), "{:.1f}"), fnum(r.get("adamw"), "{:.1f}"), fnum(r.get("peak"), "{:.2f}"),
                     fnum(r.get("arena"), "{:.2f}"), fnum(ratio(r.get("peak"), r.get("arena")), "{:.2f}")))
    out.append("== streamed runs (median step after the first)\n" + table(
        ["model", "batch", "step s", "pred s", "ratio", "tok/s", "TFLOP/s", "/GEMM", "H2D GB/s", "D2H GB/s",
         "AdamW GB/s", "peak GB", "arena GB", "ratio"], rows))
    rows = []
    for r in runs:
        b, pb, i, pi = r.get("busy") or {}, r.get("pbusy") or {}, r.get("idle") or {}, r.get("pidle") or {}
        for e in ENGINES.values():
            rows.append((r.get("model", r["dir"]), e, fnum(b.get(e)), fnum(pb.get(e)),
                         fnum(ratio(b.get(e), pb.get(e)), "{:.2f}"),
                         fnum(i.get(e if e != "compute" else "none")), fnum(pi.get(e if e != "compute" else "none"))))
    out.append("== engines, seconds a step: busy measured and predicted; compute idle by the engine it waited on "
               "(compute's row: waits with no engine finishing, launch and host overhead)\n" +
               table(["model", "engine", "busy", "pred", "ratio", "idle", "pred idle"], rows))
    rows = []
    for r in runs:
        mg = model_gemm_rate(read(os.path.join(rd, r["dir"], "model.mt")), gemms, r.get("M", 0), r.get("tile", 1))
        sh = scaled_shares(r, profile, mg or gemm, mtb.get(r.get("head")))
        rows.append((r.get("model", r["dir"]), fnum(mg, "{:.0f}"), fnum(sh and sh["compute"]),
                     fnum(sh and ratio(sh["attention"], sh["compute"]), "{:.2f}"),
                     fnum(sh and ratio(sh["gemm"], sh["compute"]), "{:.2f}"),
                     fnum(sh and ratio(sh["other"], sh["compute"]), "{:.2f}"), fnum(r.get("copyout")),
                     fnum(r.get("add_est")), fnum(r.get("add_gap")), fnum(r.get("ready"), "{:.1f}"),
                     fnum(r.get("pin"), "{:.2f}"), fnum(r.get("sm_mhz"), "{:.0f}"), fnum(r.get("watts"), "{:.0f}"),
                     fnum(mega_tok, "{:.0f}") if r.get("model") == "llama3_2_1b" else "-",
                     fnum(ratio(r.get("tok_s"), mega_tok), "{:.2f}") if r.get("model") == "llama3_2_1b" else "-",
                     fnum(mega_peak, "{:.1f}") if r.get("model") == "llama3_2_1b" else "-"))
    out.append("== where the compute went (shares of the measured compute busy time: mtc's counts at this run's "
               "measured rates), copy-out, start-up, card, and MegaTrain's code at the same batch\n" + table(
                   ["model", "GEMM TFLOP/s", "compute s", "attn", "GEMMs", "rest", "grad DMA s", "add s est", "add gap s",
                    "ready s", "pin s", "SM MHz", "max W", "MegaTrain tok/s", "mt/MegaTrain",
                    "its peak GB"], rows))
    out.append("== the targets of issue 36 (recorded, not asserted)\n" + targets(att, runs, mega_tok))
    print("\n\n".join(out))
    return 0


def targets(att, runs, mega_tok):
    """Each figure the issue asks of an H200 beside its target: met, not met, or - (not measured)."""
    by = {r.get("model"): r for r in runs}
    one, three = by.get("llama3_2_1b", {}), by.get("llama3_2_3b", {})
    # issue 36's: 0.55 of the GEMM rate for a Hopper kernel, 0.35 for the mma.sync one (today's)
    rows = [("attention D 128, T 4096: share of the GEMM rate (Hopper kernel)", att.get((128, 4096), (None,))[0], ">=",
             0.55),
            ("attention D 128, T 4096: share of the GEMM rate (mma.sync)", att.get((128, 4096), (None,))[0], ">=", 0.35),
            ("attention D 256, T 4096: share of the GEMM rate", att.get((256, 4096), (None,))[0], ">=", 0.40),
            ("attention D 128, T 4096: mt over SDPA's best", att.get((128, 4096), (None, None))[1], "<=", 1.1),
            ("llama3.2-3b 16x4096: model TFLOP/s over the GEMM rate", three.get("of_gemm"), ">=", 0.45)]
    for name, r in (("llama3.2-1b", one), ("llama3.2-3b", three)):
        rows.append((f"{name}: step over its prediction", ratio(r.get("step"), r.get("pred")), "1 +-", 0.15))
        rows.append((f"{name}: peak device memory over the arena", ratio(r.get("peak"), r.get("arena")), "1 +-", 0.05))
    rows.append(("llama3.2-1b: mt's tokens/s over MegaTrain's", ratio(one.get("tok_s"), mega_tok), ">=", 1.3))
    return table(["target", "measured", "wanted", ""], [
        (what, fnum(v, "{:.3f}"), f"{op} {want}", "-" if v is None else
         "met" if {">=": v >= want, "<=": v <= want, "1 +-": abs(v - 1) <= want}[op] else "NOT met")
        for what, v, op, want in rows])


if __name__ == "__main__":
    sys.exit(main())
