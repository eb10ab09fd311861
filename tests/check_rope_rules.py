#!/usr/bin/env python3
"""common/rope.c's frequency rules against transformers' own
(modeling_rope_utils.ROPE_INIT_FUNCTIONS): for each rule, over the fields
the published checkpoints use (Llama 3.1, 3.2 and 4, Gemma 3, Qwen's and
DeepSeek's yarn with mscale and mscale_all_dim, an explicit
attention_factor and truncate = false, Phi-3's longrope short and long),
the inverse frequencies and the cos/sin scale agree to 1e-6 relative
(transformers computes them in f32, mt in double).

usage: check_rope_rules.py ROPE_FREQS
"""
import subprocess
import sys

import numpy as np
import torch

from checks import check, finish

RNG = np.random.default_rng(5)
PHI_SHORT = [round(float(x), 4) for x in 1 + RNG.random(48) * 0.5]
PHI_LONG = [round(float(x), 4) for x in 1 + RNG.random(48) * 60]

# (label, dim, rope_parameters, max_position_embeddings, seq_len transformers is given, longrope's list in use)
CASES = [
    ("default", 16, {"rope_type": "default", "rope_theta": 100.0}, 64, None, None),
    ("linear (Gemma 3 global)", 256, {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0}, 131072, None, None),
    ("llama3 (Llama 3.1)", 128, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072, None, None),
    ("llama3 (Llama 3.2)", 64, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072, None, None),
    ("llama3 (Llama 4, low = high)", 128, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                                            "original_max_position_embeddings": 8192}, 10485760, None, None),
    ("yarn (Qwen)", 128, {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                          "original_max_position_embeddings": 32768}, 131072, None, None),
    ("yarn (DeepSeek-V2)", 64, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32,
                                "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707,
                                "original_max_position_embeddings": 4096}, 163840, None, None),
    ("yarn (mscale 1, mscale_all_dim 0.707)", 64, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                                   "mscale": 1.0, "mscale_all_dim": 0.707,
                                                   "original_max_position_embeddings": 4096}, 163840, None, None),
    ("yarn (attention_factor, truncate false)", 64, {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                                     "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": 1.5,
                                                     "truncate": False, "original_max_position_embeddings": 4096},
     131072, None, None),
    ("longrope (Phi-3, short)", 96, {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": PHI_SHORT,
                                     "long_factor": PHI_LONG, "original_max_position_embeddings": 4096},
     131072, None, PHI_SHORT),
    ("longrope (Phi-3, long)", 96, {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": PHI_SHORT,
                                    "long_factor": PHI_LONG, "original_max_position_embeddings": 4096},
     131072, 4097, PHI_LONG),
]

FIELDS = ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "beta_fast",
          "beta_slow", "mscale", "mscale_all_dim", "attention_factor"]


def transformers_rule(dim, rp, max_pos, seq_len):
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model("llama", hidden_size=dim * 2, num_attention_heads=2, head_dim=dim,
                                            max_position_embeddings=max_pos, rope_parameters=dict(rp))
    cfg.rope_parameters = dict(rp)
    kind = rp["rope_type"]
    if kind == "default":
        base = rp["rope_theta"]
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv.double().numpy(), 1.0
    inv, scale = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu", seq_len=seq_len)
    return inv.double().numpy(), float(scale)


def main():
    rope_freqs = sys.argv[1]
    for label, dim, rp, max_pos, seq_len, factors in CASES:
        args = [rope_freqs, rp["rope_type"], str(dim), repr(rp["rope_theta"])]
        args += [f"{f}={float(rp[f])!r}" for f in FIELDS if rp.get(f) is not None]
        if rp.get("truncate") is False:
            args.append("truncate=0")
        if rp["rope_type"] == "longrope":
            args += [f"max_position_embeddings={max_pos}", "factors=" + ",".join(map(repr, factors))]
        p = subprocess.run(args, capture_output=True, text=True)
        if not check(p.returncode == 0, f"{label}: rope_freqs exit {p.returncode}", p):
            continue
        lines = p.stdout.split()
        scale, mine = float(lines[1]), np.array([float(x) for x in lines[2:]])
        theirs, their_scale = transformers_rule(dim, rp, max_pos, seq_len)
        e = float(np.max(np.abs(mine - theirs) / theirs))
        es = abs(scale - their_scale) / their_scale
        ok = check(mine.shape == theirs.shape and e <= 1e-6 and es <= 1e-6,
                   f"{label}: frequencies {e:.2e}, scale {scale} against {their_scale} ({es:.2e}) relative")
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {dim // 2} frequencies within {e:.1e}, scale {scale:.9g}")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
