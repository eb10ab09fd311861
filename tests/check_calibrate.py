#!/usr/bin/env python3
"""mtrun --calibrate: it writes a profile that mtc --target accepts, every
figure positive and plausible, each with a "measured by"/"set by" comment;
with --tier-dir DIR it measures the NVMe tier there (tier_capacity and
both bandwidths, the tier file removed after); it overwrites its own output
but refuses, with exit 1 and the file
untouched, a file it did not write; it leaves no temporary file; it takes no
plan and --out only goes with it; without --out it writes local.target in
the current directory, where mtc --target local looks first. mtc prices a
bf16 plan's attention on it at attention_plain_flops (the plain kernel the
cpu backend runs; its exps at transcendental_f64_s apart), and at
vector_flops where the profile lacks that key; bf16 plans' double maths at
transcendental_f64_s; GEMMs under MT_BLAS_THREADED_MACS multiply-adds at
gemm_one_thread_flops, and only those; bf16 plans' conversions at
bf16_convert_s, and only bf16 plans'.

usage: check_calibrate.py MTC MTRUN    (from the project root)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from checks import check, finish, run


MARKER = "# written by mtrun --calibrate"

# key: (lowest, highest) plausible value, in the profile's base units
PLAUSIBLE = {
    "device_memory": (1e8, 1e14),
    "hbm_bandwidth": (0.1e9, 10000e9),            # memcpy, bytes read + written
    "host_memory_bandwidth": (0.1e9, 10000e9),
    "host_adamw_bandwidth": (0.1e9, 10000e9),     # runtime/store/adamw.c, 34 bytes a parameter
    "host_grads_add_bandwidth": (0.1e9, 10000e9), # grads_accumulate of bf16, 10 bytes a parameter
    "h2d_bandwidth": (0.05e9, 5000e9),            # half the memcpy rate
    "d2h_bandwidth": (0.05e9, 5000e9),
    "matrix_flops_f32": (0.1e9, 100000e9),        # sgemm
    "matrix_flops_bf16": (0.1e9, 100000e9),
    "vector_flops": (0.05e9, 10000e9),            # one thread
    "host_memory": (1e8, 1e14),
    "host_cores": (1, 100000),
    "kernel_launch_s": (1e-9, 1e-2),
    "gemm_call_s": (0, 1e-2),
    "transcendental_s": (1e-10, 1e-5),
    "transcendental_f64_s": (1e-10, 1e-5),        # scalar double libm
    "attention_plain_flops": (0.01e9, 10000e9),   # one thread, double sums, exps apart
    "gemm_one_thread_flops": (0.1e9, 100000e9),   # sgemm on one thread, a tiny model's shape
    "bf16_convert_s": (1e-12, 1e-6),              # an element widened or rounded
    "gemm_efficiency": (1e-3, 1.0),
}


def parse(path):
    """key -> value, and key -> the comment lines just above it."""
    values, comments, pending = {}, {}, []
    for line in open(path):
        line = line.strip()
        if line.startswith("#"):
            pending.append(line)
        elif "=" in line:
            k, v = (s.strip() for s in line.split("#")[0].split("=", 1))
            values[k], comments[k], pending = v, " ".join(pending), []
        elif not line:
            pending = []
    return values, comments


def main():
    mtc, mtrun = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, "local.target")
        t0 = time.monotonic()
        p = run(mtrun, "--calibrate", "--out", out)
        if not check(p.returncode == 0 and os.path.exists(out), "mtrun --calibrate writes a profile", p):
            return
        check(time.monotonic() - t0 < 60, f"--calibrate takes seconds, not {time.monotonic() - t0:.0f}")
        check("memcpy" in p.stdout and "AdamW" in p.stdout and "sgemm" in p.stdout and out in p.stdout, "a summary on stdout", p)
        text = open(out).read()
        check(text.startswith(MARKER), f"the first line is the marker: {text.splitlines()[0]!r}")

        p = run(mtc, "examples/gpt2-tiny.mt", "--target", out, "--explain", "--json")
        if check(p.returncode == 0, "mtc accepts the calibrated profile", p):
            try:
                j = json.loads(p.stdout)
                check(isinstance(j.get("policies"), list) and j["policies"], f"--explain --json lists policies: {p.stdout[:300]!r}")
            except json.JSONDecodeError as e:
                check(False, f"--explain --json is JSON: {e}: {p.stdout[:300]!r}")

        values, comments = parse(out)
        check(values.get("arch") == "cpu", f"arch = cpu, not {values.get('arch')!r}")
        check(values.get("name") == "local", f"name = local, the file's name, not {values.get('name')!r}")
        check(values.get("link_duplex") == "false", f"link_duplex = false, not {values.get('link_duplex')!r}")
        for k, (lo, hi) in PLAUSIBLE.items():
            if not check(k in values, f"{k} is written"):
                continue
            v = float(values[k])
            check(lo <= v <= hi, f"{k} = {v:g} is within [{lo:g}, {hi:g}]")
        for k in values:
            check(re.search(r"(measured|set) by mtrun --calibrate on \d{4}-\d\d-\d\d", comments[k]) is not None,
                  f"{k} has a comment saying how and when: {comments[k]!r}")
        if all(k in values for k in ("hbm_bandwidth", "host_memory_bandwidth", "h2d_bandwidth", "d2h_bandwidth",
                                     "host_memory", "device_memory", "matrix_flops_f32", "matrix_flops_bf16")):
            check(values["hbm_bandwidth"] == values["host_memory_bandwidth"], "hbm_bandwidth = host_memory_bandwidth (one RAM)")
            check(values["h2d_bandwidth"] == values["d2h_bandwidth"], "h2d_bandwidth = d2h_bandwidth (both memcpy)")
            check(values["device_memory"] == values["host_memory"], "device_memory = host_memory (the arena is host memory)")
            check(values["matrix_flops_bf16"] == values["matrix_flops_f32"], "bf16 rate = f32 rate (no bf16 on cpu)")
        if "host_adamw_bandwidth" in values and "host_memory_bandwidth" in values:
            # the update is no copy: it streams 7 arrays where memcpy streams 2; far above memcpy is a miscount
            adamw, copy = float(values["host_adamw_bandwidth"]), float(values["host_memory_bandwidth"])
            check(adamw < 3 * copy, f"host_adamw_bandwidth {adamw:g} is not far above the memcpy rate {copy:g}")

        check(not any(k.startswith("tier_") for k in values), "no tier keys without --tier-dir")

        def variant(name, change):
            """out with its keys' lines changed: change(key, line) -> the new line, or None to drop it."""
            path = os.path.join(t, name + ".target")
            with open(path, "w") as f:
                for ln in open(out):
                    k = ln.split("=")[0].strip() if "=" in ln and not ln.startswith("#") else None
                    new = change(k, ln) if k else ln
                    f.write(new if new is not None else "")
            return path

        def step_s(model, dtype, path, what="predicted_step_s"):
            q = run(mtc, f"examples/{model}.mt", "--target", path, "--dtype", dtype, "--batch", "4", "--seq", "64",
                    "--remat", "none", "--explain", "--json")
            if not check(q.returncode == 0, f"mtc --explain {model} {dtype} on {os.path.basename(path)}", q):
                return 0
            return next(p[what] for p in json.loads(q.stdout)["policies"] if p.get("chosen"))

        if all(k in values for k in ("attention_plain_flops", "vector_flops")):
            # bf16 attention at the plain kernel's measured rate; the same profile less that key: at vector_flops
            # (both with its exps and conversions all but free, so that its FLOPs alone tell the two apart)
            tiny = {"transcendental_f64_s": "1e-15", "bf16_convert_s": "1e-15"}
            withk = variant("with", lambda k, ln: f"{k} = {tiny[k]}\n" if k in tiny else ln)
            old = variant("old", lambda k, ln: None if k == "attention_plain_flops" else
                          f"{k} = {tiny[k]}\n" if k in tiny else ln)
            att = {}
            for name, path in (("with", withk), ("without", old)):
                q = run(mtc, "examples/llama-tiny.mt", "--target", path, "--dtype", "bf16", "--batch", "4", "--seq", "64",
                        "--explain", "--json")
                if check(q.returncode == 0, f"mtc --explain on the profile {name} attention_plain_flops", q):
                    att[name] = next(p["attention_s"] for p in json.loads(q.stdout)["policies"] if p.get("chosen"))
            want = float(values["vector_flops"]) / float(values["attention_plain_flops"])
            got = att["with"] / att["without"] if len(att) == 2 and att["without"] > 0 else 0
            check(abs(got - want) <= 0.05 * want, f"bf16 attention priced {got:.3g}x by attention_plain_flops, not "
                  f"vector_flops / attention_plain_flops = {want:.3g}x")
            os.remove(old)
            os.remove(withk)

        for key, bump, moves in (("gemm_one_thread_flops", 0.5, ("llama-tiny", "f32")),
                                 ("bf16_convert_s", 2.0, ("llama-tiny", "bf16"))):
            # a tiny model's GEMMs run on one thread: halving that rate slows its predicted step (f32 and bf16
            # alike), and GPT-2 small's MLP GEMMs, threaded, are not priced by it (its step moves less than a
            # tenth as much, relatively); the bf16 conversions move bf16 plans only
            if key not in values:
                continue
            changed = variant(key, lambda k, ln: f"{k} = {float(values[k]) * bump}\n" if k == key else ln)
            rel = {}
            for model, dtype in (("llama-tiny", "f32"), ("llama-tiny", "bf16"), ("gpt2", "f32")):
                a, b = step_s(model, dtype, out), step_s(model, dtype, changed)
                rel[model, dtype] = b / a - 1 if a > 0 else 0
            os.remove(changed)
            if key == "gemm_one_thread_flops":
                check(rel["llama-tiny", "f32"] > 0.02 and rel["llama-tiny", "bf16"] > 0.01 and
                      0 <= rel["gpt2", "f32"] < 0.1 * rel["llama-tiny", "f32"],
                      f"{key} x {bump} moves llama-tiny f32 by {rel['llama-tiny', 'f32']:+.1%}, bf16 by "
                      f"{rel['llama-tiny', 'bf16']:+.1%}, GPT-2 small f32 by {rel['gpt2', 'f32']:+.2%}")
            else:
                check(rel["llama-tiny", "bf16"] > 0.005 and rel["llama-tiny", "f32"] == 0 and rel["gpt2", "f32"] == 0,
                      f"{key} x {bump} moves llama-tiny bf16 by {rel['llama-tiny', 'bf16']:+.2%}, f32 plans by "
                      f"{rel['llama-tiny', 'f32']:+.2%} and {rel['gpt2', 'f32']:+.2%}")

        if "transcendental_f64_s" in values:
            # bf16 plans' double maths (llama-tiny's rope above all) at the scalar double rate: a profile whose
            # transcendental_f64_s is 1 us more predicts a bf16 step slower by its calls x 1 us; an f32 plan's is
            # not moved; gpt2-tiny's (no rope) by its attention's exps alone, one a scored (query, key) pair:
            # B x H x T^2 / 2 = 32,768 a run, a forward and a backward a layer (--remat none), 2 layers
            dear = os.path.join(t, "dear.target")
            with open(dear, "w") as f:
                f.write("".join(ln if not ln.startswith("transcendental_f64_s") else
                                f"transcendental_f64_s = {float(values['transcendental_f64_s']) + 1e-6}\n"
                                for ln in open(out)))
            step = {}
            for model in ("llama-tiny", "gpt2-tiny"):
                for dtype in ("bf16", "f32"):
                    for name, path in (("measured", out), ("dear", dear)):
                        q = run(mtc, f"examples/{model}.mt", "--target", path, "--dtype", dtype, "--batch", "4", "--seq",
                                "64", "--remat", "none", "--explain", "--json")
                        if check(q.returncode == 0, f"mtc --explain {model} {dtype} on the {name} profile", q):
                            step[model, dtype, name] = next(p["predicted_step_s"] for p in json.loads(q.stdout)["policies"]
                                                            if p.get("chosen"))
            d = {k: step.get((*k, "dear"), 0) - step.get((*k, "measured"), 1) for k in
                 (("llama-tiny", "bf16"), ("llama-tiny", "f32"), ("gpt2-tiny", "bf16"))}
            # rope of q and k: B*T*(H+KVH)*D elements (12,288 at batch 4, seq 64), pow, sin and cos each, forward
            # and backward and the recomputation: some 300,000 calls, 0.3 s at 1 us
            os.remove(dear)
            pairs = 4 * 4 * 64 * 64 / 2 * 4
            check(0.03 < d["llama-tiny", "bf16"] - d["gpt2-tiny", "bf16"] < 3.0 and abs(d["llama-tiny", "f32"]) < 1e-9
                  and abs(d["gpt2-tiny", "bf16"] - pairs * 1e-6) < 0.01 * pairs * 1e-6,
                  f"transcendental_f64_s prices bf16 plans' double maths: +1 us a call moves llama-tiny bf16 by "
                  f"{d['llama-tiny', 'bf16'] * 1e3:.2f} ms, f32 by {d['llama-tiny', 'f32']:.2g} s, gpt2-tiny bf16 by "
                  f"{d['gpt2-tiny', 'bf16']:.2g} s")
            print(f"transcendental_f64_s + 1 us: gpt2-tiny bf16 {d['gpt2-tiny', 'bf16'] * 1e3:.2f} ms slower "
                  f"({pairs:.0f} attention exps), f32 plans not moved")
            print(f"transcendental_f64_s + 1 us: llama-tiny bf16 predicted {d['llama-tiny', 'bf16'] * 1e3:.2f} ms slower")

        # its own output: overwritten; with --tier-dir, the NVMe tier measured there
        tier = os.path.join(t, "tier")
        os.mkdir(tier)
        p = run(mtrun, "--calibrate", "--out", out, "--tier-dir", tier)
        check(p.returncode == 0 and open(out).read().startswith(MARKER) and "tier " in p.stdout,
              "a second --calibrate, with --tier-dir, overwrites its own output", p)
        values, comments = parse(out)
        for k, (lo, hi) in {"tier_capacity": (1e6, 1e16), "tier_read_bandwidth": (1e6, 1e12),
                            "tier_write_bandwidth": (1e6, 1e12)}.items():
            check(k in values and lo <= float(values[k]) <= hi and "measured by mtrun --calibrate" in comments[k],
                  f"{k} = {values.get(k)} measured, within [{lo:g}, {hi:g}]")
        check(os.listdir(tier) == [], f"the tier file measured is removed: {os.listdir(tier)}")
        os.rmdir(tier)
        p = run(mtc, "examples/gpt2-tiny.mt", "--target", out, "--explain")
        check(p.returncode == 0, "mtc accepts the calibrated profile with its tier", p)

        # anyone else's file: refused, untouched
        theirs = os.path.join(t, "theirs.target")
        original = open("schedules/tiny-1layer.target").read()
        with open(theirs, "w") as f:
            f.write(original)
        p = run(mtrun, "--calibrate", "--out", theirs)
        check(p.returncode == 1 and "not written by mtrun --calibrate" in p.stderr and theirs in p.stderr,
              "--calibrate refuses a file it did not write, naming it", p)
        check(open(theirs).read() == original, "the refused file is untouched")
        with open(theirs, "w") as f:  # a file that merely mentions the marker later on
            f.write("name = x\n" + MARKER + "\n")
        p = run(mtrun, "--calibrate", "--out", theirs)
        check(p.returncode == 1 and open(theirs).read() == "name = x\n" + MARKER + "\n",
              "the marker counts only on the first line", p)

        # a directory that does not exist: exit 1, nothing written
        p = run(mtrun, "--calibrate", "--out", os.path.join(t, "no-such-dir", "x.target"))
        check(p.returncode == 1 and "no-such-dir" in p.stderr, "an unwritable --out is exit 1 with the path", p)

        check(sorted(os.listdir(t)) == ["local.target", "theirs.target"], f"no temporary file left: {os.listdir(t)}")

        # no --out, outside the source tree (no schedules/ here): local.target in the
        # current directory, and mtc --target local finds it there
        cwd = os.path.join(t, "project")
        os.makedirs(cwd)
        p = subprocess.run([os.path.abspath(mtrun), "--calibrate"], capture_output=True, text=True, timeout=300, cwd=cwd)
        check(p.returncode == 0 and os.listdir(cwd) == ["local.target"], "no --out writes ./local.target", p)
        model = os.path.abspath("examples/gpt2-tiny.mt")
        p = subprocess.run([os.path.abspath(mtc), model, "--target", "local", "--explain"], capture_output=True,
                           text=True, timeout=300, cwd=cwd)
        check(p.returncode == 0 and "local" in p.stdout, "mtc --target local reads ./local.target", p)

        # usage errors: a plan with --calibrate, --out without it
        p = run(mtrun, "--calibrate", "plan.bin")
        check(p.returncode == 2, "--calibrate with a plan is a usage error", p)
        p = run(mtrun, "--out", out)
        check(p.returncode == 2, "--out without --calibrate is a usage error", p)


if __name__ == "__main__":
    main()
    sys.exit(finish())
