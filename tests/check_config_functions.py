#!/usr/bin/env python3
"""The functions of constants (dsl/README.md, "config"): sqrt, ln, log, exp,
pow, min, max, floor, ceil and abs, in the config and in a tensor
expression. A model sizes its params with them: mtc --json must give the
shapes Python computes from the same expressions, and --dump-graph the
constants a tensor expression folds exp(s) and abs(-m) into (exp and abs of
a tensor stay ops). Their errors are in tests/errors (config_*.mt).

usage: check_config_functions.py MTC
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

MODEL = """model functions
config {
  V = 16
  C = 8 * max(2, 3, 1)                       # 24
  F = floor(8.0 * C / 3 / 16 + 0.999) * 16   # Llama's multiple_of rounding: 64
  G = ceil(C / 5.0)                          # 5
  H = pow(2, 3) + min(4, abs(-7))            # 12
  K = floor(exp(ln(10.0)) + 0.5)             # 10
  s = sqrt(2.0) * log(4.0) / pow(2.0, 0.5)   # ln 4
  m = min(1, 2.5)                            # 1
}
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w1 "w1" [F, C]
  param w2 "w2" [C, F]
  param w3 "w3" [H * K + G, C]
  param w4 "w4" [C, H * K + G]
  x = x + (gelu(x @ transpose(w1)) @ transpose(w2)) * exp(s)
  return x + abs(gelu(x @ transpose(w3))) @ transpose(w4) * abs(-m)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
"""


def main():
    mtc = sys.argv[1]
    C = 8 * max(2, 3, 1)
    F = math.floor(8.0 * C / 3 / 16 + 0.999) * 16
    G, H, K = math.ceil(C / 5.0), 2 ** 3 + min(4, abs(-7)), math.floor(math.exp(math.log(10.0)) + 0.5)
    s = math.sqrt(2.0) * math.log(4.0) / 2.0 ** 0.5
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.mt")
        with open(path, "w") as f:
            f.write(MODEL)
        p = subprocess.run([mtc, path, "--json"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            sys.exit(f"FAIL: mtc --json failed:\n{p.stderr}")
        shapes = {q["name"]: q["shape"] for q in json.loads(p.stdout)["params"]}
        want = {"emb": [16, C], "h.0.w1": [F, C], "h.0.w2": [C, F], "h.1.w3": [H * K + G, C]}
        for name, shape in want.items():
            if shapes.get(name) != shape:
                sys.exit(f"FAIL: {name}: mtc {shapes.get(name)}, Python {shape}")
        p = subprocess.run([mtc, path, "--dump-graph"], capture_output=True, text=True, timeout=60)
        consts = [float(v) for v in re.findall(r"= const (\S+) : f32\[\]", p.stdout.split("tail:")[0])]
        for v in (math.exp(s), 1.0):
            if not any(abs(c - v) <= 1e-6 * v for c in consts):
                sys.exit(f"FAIL: no constant {v} in the block's graph (constants {consts})")
        if "= abs " not in p.stdout or "= exp " in p.stdout:
            sys.exit("FAIL: abs of a tensor is not an op, or exp of constants is one:\n" + p.stdout)
    print(f"ok: C {C}, F {F}, G {G}, H {H}, K {K} as Python computes them; exp(s) = {math.exp(s):.9g} a constant")


if __name__ == "__main__":
    main()
