#!/usr/bin/env python3
"""The cost model's attention rate by head width (schedules/README.md,
"Attention"): attention_tc_wide_fraction prices the tensor-core kernel at
heads wider than 128 (Gemma 2's 256), attention_tc_narrow_fraction
at heads of 64 (Llama 3.2 1B's), attention_tc_fraction the others (Llama
3's 128). With the wide share halved in a copy of the h200 profile,
gemma2-9b's predicted attention time (mtc --explain --json, attention_s)
must double and llama3-8b's stay the same; likewise llama3.2-1b's with the
narrow share halved; left out, the wide share is attention_tc_fraction.

usage: check_attention_wide.py MTC ROOT
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def attention_s(mtc, model, target):
    p = subprocess.run([mtc, model, "--target", target, "--explain", "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL mtc {model} --target {target}: exit {p.returncode}\n{p.stderr}")
    pol = json.loads(p.stdout)["policies"][0]
    if pol["attention_kernel"] != "tensor-core":
        sys.exit(f"FAIL {model}: attention kernel {pol['attention_kernel']}, expected tensor-core")
    return pol["attention_s"]


def main():
    mtc, root = sys.argv[1], sys.argv[2]
    text = open(os.path.join(root, "schedules/h200.target")).read()
    m = re.search(r"^attention_tc_wide_fraction = ([0-9.]+)$", text, re.M)
    if not m:
        sys.exit("FAIL schedules/h200.target has no attention_tc_wide_fraction")
    wide = float(m.group(1))
    fails = 0
    with tempfile.TemporaryDirectory() as d:
        variants = {
            "h200-half": text.replace(m.group(0), f"attention_tc_wide_fraction = {wide / 2}"),
            "h200-none": text.replace(m.group(0), ""),
        }
        paths = {}
        for name, t in variants.items():
            paths[name] = os.path.join(d, name + ".target")
            with open(paths[name], "w") as f:
                f.write(re.sub(r"^name = .*$", f"name = {name}", t, flags=re.M))
        base = os.path.join(root, "schedules/h200.target")
        for model, ratio in (("gemma2-9b", 2.0), ("llama3-8b", 1.0)):
            path = os.path.join(root, "examples", model + ".mt")
            a, b = attention_s(mtc, path, base), attention_s(mtc, path, paths["h200-half"])
            ok = abs(b / a - ratio) < 0.01 * ratio
            print(f"{model}: attention {a:.4g} s, with the wide share halved {b:.4g} s: x{b / a:.3f} "
                  f"(expected x{ratio}) {'ok' if ok else 'FAIL'}")
            fails += not ok
        # attention_tc_narrow_fraction (left out of h200: attention_tc_fraction) prices heads of 64 alone:
        # set to half the share, llama3.2-1b's (64) attention doubles, llama3-8b's (128) stays
        tc = float(re.search(r"^attention_tc_fraction = ([0-9.]+)$", text, re.M).group(1))
        narrow = os.path.join(d, "h200-narrow.target")
        with open(narrow, "w") as f:
            f.write(re.sub(r"^name = .*$", "name = h200-narrow", text, flags=re.M) +
                    f"\nattention_tc_narrow_fraction = {tc / 2}\n")
        for model, ratio in (("llama3.2-1b", 2.0), ("llama3-8b", 1.0)):
            path = os.path.join(root, "examples", model + ".mt")
            a, b = attention_s(mtc, path, base), attention_s(mtc, path, narrow)
            ok = abs(b / a - ratio) < 0.01 * ratio
            print(f"{model}: attention {a:.4g} s, with a narrow share of half {b:.4g} s: x{b / a:.3f} "
                  f"(expected x{ratio}) {'ok' if ok else 'FAIL'}")
            fails += not ok
        path = os.path.join(root, "examples/gemma2-9b.mt")
        # left out: attention_tc_fraction, which h200 sets to the same share as its wide one
        tc = float(re.search(r"^attention_tc_fraction = ([0-9.]+)$", text, re.M).group(1))
        a, c = attention_s(mtc, path, base), attention_s(mtc, path, paths["h200-none"])
        ok = abs(c / a - wide / tc) < 0.01 * wide / tc
        print(f"gemma2-9b without the key: {c:.4g} s against {a:.4g} s (x{c / a:.3f}, expected x{wide / tc:.3f}) "
              f"{'ok' if ok else 'FAIL'}")
        fails += not ok
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
