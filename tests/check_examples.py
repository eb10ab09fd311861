#!/usr/bin/env python3
"""Checks `mtc --summary --json` on every bundled example: exact parameter
counts, checkpoint names and shapes as the original frameworks write them,
each block kind's layers and parameters a layer against the checkpoint
names, and the host memory arithmetic; with README, that the README's table of
examples gives each one's parameter count as mtc computes it (so the
README cannot go stale); with CLI_DOC (docs/cli.md), that its --tile row says
what mtc --help says.

usage: check_examples.py MTC EXAMPLES_DIR [README [CLI_DOC]]
"""
import json
import re
import subprocess
import sys

# name -> (params_total, {checkpoint name: shape} that must appear, number of tensors)
EXPECTED = {
    "gpt2.mt": (124_439_808, {
        "wte.weight": [50257, 768], "wpe.weight": [1024, 768],
        "h.0.attn.c_attn.weight": [768, 2304], "h.11.mlp.c_proj.weight": [3072, 768],
        "h.5.ln_2.bias": [768], "ln_f.weight": [768]}, 2 + 12 * 12 + 2),
    "llama3-8b.mt": (8_030_261_248, {
        "model.embed_tokens.weight": [128256, 4096], "model.layers.3.self_attn.q_proj.weight": [4096, 4096],
        "model.layers.31.self_attn.k_proj.weight": [1024, 4096], "model.layers.0.mlp.down_proj.weight": [4096, 14336],
        "model.layers.7.post_attention_layernorm.weight": [4096], "model.norm.weight": [4096],
        "lm_head.weight": [128256, 4096]}, 32 * 9 + 3),
    "llama3.1-8b.mt": (8_030_261_248, {
        "model.embed_tokens.weight": [128256, 4096], "model.layers.31.self_attn.k_proj.weight": [1024, 4096],
        "lm_head.weight": [128256, 4096]}, 32 * 9 + 3),
    "qwen3-8b.mt": (8_190_735_360, {
        "model.layers.35.self_attn.q_norm.weight": [128], "model.layers.0.self_attn.k_proj.weight": [1024, 4096],
        "model.layers.0.mlp.down_proj.weight": [4096, 12288], "lm_head.weight": [151936, 4096]}, 36 * 11 + 3),
    "qwen3-30b-a3b.mt": (30_532_122_624, {
        "model.layers.47.mlp.experts.127.down_proj.weight": [2048, 768], "model.layers.0.mlp.gate.weight": [128, 2048],
        "model.layers.0.self_attn.q_proj.weight": [4096, 2048], "model.layers.3.self_attn.k_norm.weight": [128]},
        48 * (4 + 2 + 2 + 1 + 3 * 128) + 3),
    "olmo2-7b.mt": (7_298_617_344, {
        "model.embed_tokens.weight": [100352, 4096], "model.layers.31.self_attn.q_norm.weight": [4096],
        "model.layers.0.post_feedforward_layernorm.weight": [4096], "lm_head.weight": [100352, 4096]}, 32 * 11 + 3),
    "gemma3-4b.mt": (3_880_263_168, {
        "model.embed_tokens.weight": [262208, 2560], "model.layers.5.self_attn.q_proj.weight": [2048, 2560],
        "model.layers.33.self_attn.k_norm.weight": [256], "model.layers.0.mlp.down_proj.weight": [2560, 10240]},
        34 * 13 + 2),
    "llama3-70b.mt": (70_553_706_496, {
        "model.layers.79.mlp.gate_proj.weight": [28672, 8192], "model.layers.0.self_attn.v_proj.weight": [1024, 8192]},
        80 * 9 + 3),
    "llama3-405b.mt": (405_853_388_800, {
        "model.layers.125.mlp.up_proj.weight": [53248, 16384], "model.layers.0.self_attn.o_proj.weight": [16384, 16384]},
        126 * 9 + 3),
    "mistral-large-2.mt": (122_610_069_504, {  # Mistral-Large-Instruct-2407's config.json
        "model.embed_tokens.weight": [32768, 12288], "model.layers.87.self_attn.q_proj.weight": [12288, 12288],
        "model.layers.0.self_attn.k_proj.weight": [1024, 12288], "model.layers.5.mlp.down_proj.weight": [12288, 28672],
        "lm_head.weight": [32768, 12288]}, 88 * 9 + 3),
    "qwen2-7b.mt": (7_615_616_512, {
        "model.layers.27.self_attn.q_proj.bias": [3584], "model.layers.0.self_attn.k_proj.bias": [512],
        "model.layers.0.self_attn.o_proj.weight": [3584, 3584], "lm_head.weight": [152064, 3584]}, 28 * 12 + 3),
    "llama3.2-1b.mt": (1_235_814_400, {
        "model.embed_tokens.weight": [128256, 2048], "model.layers.15.self_attn.k_proj.weight": [512, 2048],
        "model.layers.0.mlp.gate_proj.weight": [8192, 2048], "model.norm.weight": [2048]}, 16 * 9 + 2),
    "llama3.2-3b.mt": (3_212_749_824, {
        "model.embed_tokens.weight": [128256, 3072], "model.layers.27.self_attn.q_proj.weight": [3072, 3072],
        "model.layers.0.self_attn.v_proj.weight": [1024, 3072], "model.layers.3.mlp.down_proj.weight": [3072, 8192]},
        28 * 9 + 2),
    "mistral-7b.mt": (7_241_732_096, {
        "model.embed_tokens.weight": [32000, 4096], "model.layers.31.self_attn.k_proj.weight": [1024, 4096],
        "model.layers.0.mlp.gate_proj.weight": [14336, 4096], "lm_head.weight": [32000, 4096]}, 32 * 9 + 3),
    "pythia-160m.mt": (162_322_944, {
        "gpt_neox.embed_in.weight": [50304, 768], "gpt_neox.layers.11.attention.query_key_value.weight": [2304, 768],
        "gpt_neox.layers.0.attention.query_key_value.bias": [2304], "gpt_neox.layers.5.mlp.dense_4h_to_h.weight": [768, 3072],
        "gpt_neox.layers.3.post_attention_layernorm.bias": [768], "gpt_neox.final_layer_norm.weight": [768],
        "embed_out.weight": [50304, 768]}, 12 * 12 + 4),
    "gemma2-9b.mt": (9_241_705_984, {
        "model.embed_tokens.weight": [256000, 3584], "model.layers.0.self_attn.q_proj.weight": [4096, 3584],
        "model.layers.41.self_attn.k_proj.weight": [2048, 3584], "model.layers.40.mlp.down_proj.weight": [3584, 14336],
        "model.layers.1.pre_feedforward_layernorm.weight": [3584],
        "model.layers.41.post_feedforward_layernorm.weight": [3584], "model.norm.weight": [3584]}, 42 * 11 + 2),
    # mixture of experts
    "mixtral-8x7b.mt": (46_702_792_704, {
        "model.layers.0.block_sparse_moe.gate.weight": [8, 4096],
        "model.layers.0.block_sparse_moe.experts.0.w1.weight": [14336, 4096],
        "model.layers.31.block_sparse_moe.experts.7.w2.weight": [4096, 14336],
        "model.layers.5.block_sparse_moe.experts.3.w3.weight": [14336, 4096],
        "model.layers.31.self_attn.k_proj.weight": [1024, 4096], "lm_head.weight": [32000, 4096]},
        32 * (6 + 1 + 3 * 8) + 3),
    "qwen1.5-moe-a2.7b.mt": (14_315_784_192, {
        "model.layers.0.mlp.gate.weight": [60, 2048], "model.layers.23.mlp.experts.59.down_proj.weight": [2048, 1408],
        "model.layers.0.mlp.experts.0.gate_proj.weight": [1408, 2048],
        "model.layers.7.mlp.shared_expert.up_proj.weight": [5632, 2048],
        "model.layers.7.mlp.shared_expert_gate.weight": [1, 2048], "model.layers.3.self_attn.q_proj.bias": [2048],
        "model.embed_tokens.weight": [151936, 2048]}, 24 * (2 + 7 + 1 + 3 * 60 + 3 + 1) + 3),
    # DeepSeek-V3's design: transformers' DeepseekV3ForCausalLM's parameter counts on the meta device (the
    # routing bias, mlp.gate.e_score_correction_bias, is a buffer and not among them: 58 * 256 and 60 * 384;
    # the examples leave it out)
    "deepseek-v3.mt": (671_026_404_352, {
        "model.embed_tokens.weight": [129280, 7168], "model.layers.0.self_attn.q_a_proj.weight": [1536, 7168],
        "model.layers.0.self_attn.q_a_layernorm.weight": [1536], "model.layers.0.self_attn.q_b_proj.weight": [24576, 1536],
        "model.layers.2.self_attn.kv_a_proj_with_mqa.weight": [576, 7168],
        "model.layers.60.self_attn.kv_b_proj.weight": [32768, 512], "model.layers.0.self_attn.o_proj.weight": [7168, 16384],
        "model.layers.2.mlp.down_proj.weight": [7168, 18432], "model.layers.3.mlp.gate.weight": [256, 7168],
        "model.layers.60.mlp.experts.255.down_proj.weight": [7168, 2048],
        "model.layers.3.mlp.shared_experts.up_proj.weight": [2048, 7168], "lm_head.weight": [129280, 7168]},
        3 + 3 * 12 + 58 * (13 + 3 * 256)),
    "kimi-k2.mt": (1_026_408_209_408, {
        "model.embed_tokens.weight": [163840, 7168], "model.layers.0.self_attn.q_b_proj.weight": [12288, 1536],
        "model.layers.0.mlp.gate_proj.weight": [18432, 7168], "model.layers.1.mlp.gate.weight": [384, 7168],
        "model.layers.60.self_attn.o_proj.weight": [7168, 8192],
        "model.layers.60.mlp.experts.383.gate_proj.weight": [2048, 7168], "lm_head.weight": [163840, 7168]},
        3 + 12 + 60 * (13 + 3 * 384)),
    "mixtral-tiny.mt": (None, {"model.layers.1.block_sparse_moe.experts.3.w2.weight": [64, 64],
                                   "model.layers.0.block_sparse_moe.gate.weight": [4, 64]}, 2 * (6 + 1 + 3 * 4) + 3),
    "gemma2-tiny.mt": (None, {"model.embed_tokens.weight": [256, 64], "model.layers.3.self_attn.k_proj.weight": [32, 64],
                              "model.layers.2.post_attention_layernorm.weight": [64]}, 4 * 11 + 2),
    "qwen3-next-80b-a3b.mt": (79_674_391_296, {  # transformers' Qwen3NextForCausalLM of its config.json
        "model.layers.0.linear_attn.in_proj_qkvz.weight": [12288, 2048],
        "model.layers.0.linear_attn.in_proj_ba.weight": [64, 2048],
        "model.layers.2.linear_attn.conv1d.weight": [8192, 1, 4], "model.layers.1.linear_attn.A_log": [32],
        "model.layers.0.linear_attn.dt_bias": [32], "model.layers.0.linear_attn.norm.weight": [128],
        "model.layers.0.linear_attn.out_proj.weight": [2048, 4096],
        "model.layers.3.self_attn.q_proj.weight": [8192, 2048], "model.layers.47.self_attn.k_norm.weight": [256],
        "model.layers.3.mlp.experts.511.down_proj.weight": [2048, 512],
        "model.layers.46.mlp.shared_expert_gate.weight": [1, 2048], "lm_head.weight": [151936, 2048]},
        36 * (9 + 1 + 3 * 512 + 4) + 12 * (8 + 1 + 3 * 512 + 4) + 3),
    "granite-4.0-h-tiny.mt": (6_939_037_248, {  # transformers' GraniteMoeHybridForCausalLM of its config.json
        "model.layers.0.mamba.in_proj.weight": [6448, 1536], "model.layers.0.mamba.conv1d.weight": [3328, 1, 4],
        "model.layers.0.mamba.conv1d.bias": [3328], "model.layers.4.mamba.A_log": [48], "model.layers.4.mamba.D": [48],
        "model.layers.0.mamba.norm.weight": [3072], "model.layers.0.mamba.out_proj.weight": [1536, 3072],
        "model.layers.5.self_attn.k_proj.weight": [512, 1536], "model.layers.35.self_attn.o_proj.weight": [1536, 1536],
        "model.layers.5.block_sparse_moe.input_linear.weight": [64, 1024, 1536],
        "model.layers.39.block_sparse_moe.output_linear.weight": [64, 1536, 512],
        "model.layers.0.block_sparse_moe.router.layer.weight": [64, 1536],
        "model.layers.0.shared_mlp.input_linear.weight": [2048, 1536]}, 36 * 15 + 4 * 11 + 2),
    "bamba-9b.mt": (9_780_235_392, {  # transformers' BambaForCausalLM of its config.json
        "model.layers.0.mamba.in_proj.weight": [16768, 4096], "model.layers.0.mamba.conv1d.weight": [8448, 1, 4],
        "model.layers.31.mamba.A_log": [128], "model.layers.9.self_attn.k_proj.weight": [1024, 4096],
        "model.layers.27.feed_forward.down_proj.weight": [4096, 14336], "model.final_layernorm.weight": [4096],
        "model.layers.5.pre_ff_layernorm.weight": [4096], "lm_head.weight": [128256, 4096]}, 29 * 13 + 3 * 9 + 3),
    "gpt2-tiny.mt": (None, {"wte.weight": [256, 64], "h.1.mlp.c_fc.weight": [64, 256]}, 2 + 2 * 12 + 2),
    "llama-tiny.mt": (None, {"model.embed_tokens.weight": [256, 64], "model.layers.1.self_attn.k_proj.weight": [32, 64]},
                      2 * 9 + 3),
}


# Buffers (DSL `buffer`, not parameters) an example declares, in elements: DeepSeek-V3's routing bias, [256] in
# each of its 58 MoE layers (moved by its balance rule, bias_update)
BUFFERS = {"deepseek-v3.mt": 58 * 256}


def readme_counts(path):
    """{example file name: parameter count} from the README's rows "| `examples/X.mt` | ... | 1,234 |"."""
    out = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\|\s*`examples/([\w./-]+\.mt)`\s*\|.*\|\s*([\d,]+)\s*\|\s*$", line)
        if m:
            out[m.group(1)] = int(m.group(2).replace(",", ""))
    return out


def main():
    mtc, examples = sys.argv[1], sys.argv[2]
    readme = readme_counts(sys.argv[3]) if len(sys.argv) > 3 else None
    bad = 0
    if readme is not None:
        missing = sorted(set(EXPECTED) - set(readme))
        if missing:
            print(f"FAIL README: no row with a parameter count for {missing}")
            bad += 1
    if len(sys.argv) > 4:
        text = open(sys.argv[4], encoding="utf-8").read()
        tile = [l for l in text.splitlines() if l.startswith("| `--tile")]
        helptext = subprocess.run([mtc, "--help"], capture_output=True, text=True).stdout
        if not tile or "the fastest" not in tile[0] or "the fastest" not in helptext:
            print(f"FAIL {sys.argv[4]}: the --tile row and mtc --help do not both say auto is the fastest that fits: "
                  f"{tile}")
            bad += 1
    for name, (total, names, ntensors) in EXPECTED.items():
        path = f"{examples}/{name}"
        proc = subprocess.run([mtc, path, "--summary", "--json"], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            print(f"FAIL {name}: exit status {proc.returncode}\n{proc.stderr}")
            bad += 1
            continue
        d = json.loads(proc.stdout)
        params = {p["name"]: p["shape"] for p in d["params"] if not p.get("buffer")}
        buffers = {p["name"]: p["shape"] for p in d["params"] if p.get("buffer")}  # (not parameters: apart)
        errors = []
        if len(params) + len(buffers) != len(d["params"]):
            errors.append("duplicate checkpoint names")
        if sum(eval("*".join(map(str, s))) for s in buffers.values()) != d["buffers_total"]:
            errors.append(f"the buffers {sorted(buffers)} do not sum to buffers_total {d['buffers_total']}")
        if d["buffers_total"] != BUFFERS.get(name, 0):
            errors.append(f"buffers_total {d['buffers_total']}, expected {BUFFERS.get(name, 0)}")
        counted = sum(eval("*".join(map(str, s))) for s in params.values())
        if counted != d["params_total"]:
            errors.append(f"params list sums to {counted}, params_total says {d['params_total']}")
        if total is not None and d["params_total"] != total:
            errors.append(f"params_total {d['params_total']}, expected {total}")
        if d["params_head"] + d["blocks"][0]["params"] + d["params_tail"] != d["params_total"]:
            errors.append("parts do not add up to the total")
        # each block kind's layers and parameters a layer (by_kind) against the
        # checkpoint names: layer i's tensors, by the block prefix, sum to its kind's count
        blk = d["blocks"][0]
        kinds = blk.get("by_kind", [])
        if sum(k["layers"] for k in kinds) != blk["layers"] or \
                sum(k["layers"] * k["params_per_layer"] for k in kinds) != blk["params"]:
            errors.append(f"by_kind {kinds} does not add up to {blk['layers']} layers, {blk['params']} parameters")
        head, tail = blk["prefix"].split("{i}")
        per_layer = {}
        for n, shape in params.items():
            m = re.match(re.escape(head) + r"(\d+)" + re.escape(tail), n)
            if m:
                per_layer[int(m.group(1))] = per_layer.get(int(m.group(1)), 0) + eval("*".join(map(str, shape)))
        want = sorted(k["params_per_layer"] for k in kinds for _ in range(k["layers"]))
        if sorted(per_layer.values()) != want:
            errors.append(f"the layers' tensors sum to {sorted(set(per_layer.values()))} a layer; by_kind says {kinds}")
        if len(params) != ntensors:
            errors.append(f"{len(params)} parameter tensors, expected {ntensors}")
        for n, shape in names.items():
            if params.get(n) != shape:
                errors.append(f"{n}: {params.get(n)}, expected {shape}")
        # fp32 master, m, v, gradients (16) + the bf16 copy that streams (2),
        # each tensor's elements padded to a multiple of 16 in the host store;
        # a layer's gradients bf16 (2 bytes less) where host_grads_bf16 says
        # (bf16 compute, one micro-batch a step: common/storage.h)
        per = 4 + 8 + 4 + (2 if d["compute_dtype"] == "bf16" else 0)
        per_layer = per - (2 if d["host_grads_bf16"] else 0)
        if d["host_grads_bf16"] and d["compute_dtype"] != "bf16":
            errors.append("bf16 gradients in the host store of an f32 plan")
        padded = {False: 0, True: 0}  # global, layer
        for n, shape in params.items():
            padded[bool(re.match(re.escape(head) + r"\d+" + re.escape(tail), n))] += (eval("*".join(map(str, shape))) + 15) // 16 * 16
        # a buffer is frozen: its storage dtype's bytes only; one a balance rule moves (bias_update) is held as a
        # layer's parameter
        moved = {p["name"] for p in d["params"] if "bias_update" in p}
        for n in moved:
            padded[True] += (eval("*".join(map(str, buffers[n]))) + 15) // 16 * 16
        frozen = sum((eval("*".join(map(str, s))) + 15) // 16 * 16 for n, s in buffers.items() if n not in moved)
        frozen_bytes = frozen * (2 if d["compute_dtype"] == "bf16" else 4)
        if d["host_bytes"] != padded[False] * per + padded[True] * per_layer + frozen_bytes or \
                d["host_bytes_per_param"] != per_layer:
            errors.append(f"host_bytes {d['host_bytes']} is not {per} x {padded[False]} global and {per_layer} x "
                          f"{padded[True]} layer padded parameters")
        if readme is not None and name in readme and readme[name] != d["params_total"]:
            errors.append(f"the README says {readme[name]:,} parameters, mtc counts {d['params_total']:,}")
        print(("FAIL " if errors else "ok   ") + f"{name}: {d['params_total']:,} parameters")
        for e in errors:
            print("     ", e)
        bad += bool(errors)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
