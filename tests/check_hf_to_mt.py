#!/usr/bin/env python3
"""tools/hf_to_mt.py against the shipped examples.

For every example of a published checkpoint, the checkpoint's config.json
(its values written out below, as published on the Hugging Face hub; the
four newest examples were written by the tool from theirs) goes
through the tool; the model it writes must lower to the same graph as the
example (`mtc --dump-graph` at batch 1, seq 16, f32, equal but for the
model's name and the source locations) and count the checkpoint's
parameters (`mtc --summary --json`). The tool must refuse an unknown
model_type by name, a field it does not map by name, and a value it cannot
express.

usage: check_hf_to_mt.py MTC   (from the project root)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import check, finish

LLAMA = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
         "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "initializer_range": 0.02,
         "mlp_bias": False, "model_type": "llama", "pretraining_tp": 1, "rms_norm_eps": 1e-05,
         "rope_theta": 500000.0, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 128256}
LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}
LLAMA32_ROPE = dict(LLAMA31_ROPE, factor=32.0)

# example -> (config.json, the checkpoint's parameter count)
CASES = {
    "llama3-8b.mt": (dict(LLAMA, hidden_size=4096, intermediate_size=14336, max_position_embeddings=8192,
                          num_attention_heads=32, num_hidden_layers=32, num_key_value_heads=8, rope_scaling=None,
                          tie_word_embeddings=False), 8_030_261_248),
    "llama3.1-8b.mt": (dict(LLAMA, hidden_size=4096, intermediate_size=14336, max_position_embeddings=131072,
                            num_attention_heads=32, num_hidden_layers=32, num_key_value_heads=8,
                            rope_scaling=LLAMA31_ROPE, tie_word_embeddings=False), 8_030_261_248),
    "llama3-70b.mt": (dict(LLAMA, hidden_size=8192, intermediate_size=28672, max_position_embeddings=8192,
                           num_attention_heads=64, num_hidden_layers=80, num_key_value_heads=8, rope_scaling=None,
                           tie_word_embeddings=False), 70_553_706_496),
    "llama3-405b.mt": (dict(LLAMA, hidden_size=16384, intermediate_size=53248, max_position_embeddings=131072,
                            num_attention_heads=128, num_hidden_layers=126, num_key_value_heads=8,
                            rope_scaling=LLAMA31_ROPE, tie_word_embeddings=False), 405_853_388_800),
    "llama3.2-1b.mt": (dict(LLAMA, head_dim=64, hidden_size=2048, intermediate_size=8192,
                            max_position_embeddings=131072, num_attention_heads=32, num_hidden_layers=16,
                            num_key_value_heads=8, rope_scaling=LLAMA32_ROPE, tie_word_embeddings=True),
                       1_235_814_400),
    "llama3.2-3b.mt": (dict(LLAMA, head_dim=128, hidden_size=3072, intermediate_size=8192,
                            max_position_embeddings=131072, num_attention_heads=24, num_hidden_layers=28,
                            num_key_value_heads=8, rope_scaling=LLAMA32_ROPE, tie_word_embeddings=True),
                       3_212_749_824),
    "qwen2-7b.mt": ({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
                     "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
                     "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
                     "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
                     "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                     "sliding_window": 131072, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                     "use_cache": True, "use_sliding_window": False, "vocab_size": 152064}, 7_615_616_512),
    "mistral-7b.mt": ({"architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
                       "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
                       "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
                       "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                       "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
                       "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
                       "vocab_size": 32000}, 7_241_732_096),
    "mistral-large-2.mt": ({"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
                            "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 12288, "initializer_range": 0.02,
                            "intermediate_size": 28672, "max_position_embeddings": 131072, "model_type": "mistral",
                            "num_attention_heads": 96, "num_hidden_layers": 88, "num_key_value_heads": 8,
                            "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
                            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
                            "vocab_size": 32768}, 122_610_069_504),
    "mixtral-8x7b.mt": ({"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
                         "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
                         "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
                         "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
                         "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": False,
                         "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
                         "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                         "use_cache": True, "vocab_size": 32000}, 46_702_792_704),
    "qwen1.5-moe-a2.7b.mt": ({"architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
                              "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151643,
                              "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
                              "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
                              "model_type": "qwen2_moe", "moe_intermediate_size": 1408, "norm_topk_prob": False,
                              "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
                              "num_hidden_layers": 24, "num_key_value_heads": 16, "output_router_logits": False,
                              "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
                              "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
                              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
                              "use_sliding_window": False, "vocab_size": 151936}, 14_315_784_192),
    "gemma2-9b.mt": ({"architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
                      "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
                      "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
                      "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
                      "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 14336,
                      "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
                      "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
                      "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
                      "sliding_window": 4096, "torch_dtype": "float32", "use_cache": True, "vocab_size": 256000},
                     9_241_705_984),
    "gpt2.mt": ({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
                 "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
                 "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
                 "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
                 "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
                 "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True,
                                                                                        "max_length": 50}},
                 "vocab_size": 50257}, 124_439_808),
    "pythia-160m.mt": ({"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
                        "hidden_act": "gelu", "hidden_size": 768, "initializer_range": 0.02,
                        "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
                        "model_type": "gpt_neox", "num_attention_heads": 12, "num_hidden_layers": 12,
                        "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
                        "torch_dtype": "float16", "use_cache": True, "use_parallel_residual": True,
                        "vocab_size": 50304}, 162_322_944),
    "qwen3-8b.mt": ({'architectures': ['Qwen3ForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'bos_token_id': 151643, 'eos_token_id': 151645, 'head_dim': 128, 'hidden_act': 'silu', 'hidden_size': 4096, 'initializer_range': 0.02, 'intermediate_size': 12288, 'max_position_embeddings': 40960, 'max_window_layers': 36, 'model_type': 'qwen3', 'num_attention_heads': 32, 'num_hidden_layers': 36, 'num_key_value_heads': 8, 'rms_norm_eps': 1e-06, 'rope_scaling': None, 'rope_theta': 1000000, 'sliding_window': None, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'use_cache': True, 'use_sliding_window': False, 'vocab_size': 151936}, 8_190_735_360),
    "qwen3-30b-a3b.mt": ({'architectures': ['Qwen3MoeForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'bos_token_id': 151643, 'decoder_sparse_step': 1, 'eos_token_id': 151645, 'head_dim': 128, 'hidden_act': 'silu', 'hidden_size': 2048, 'initializer_range': 0.02, 'intermediate_size': 6144, 'max_position_embeddings': 40960, 'max_window_layers': 48, 'mlp_only_layers': [], 'model_type': 'qwen3_moe', 'moe_intermediate_size': 768, 'norm_topk_prob': True, 'num_attention_heads': 32, 'num_experts': 128, 'num_experts_per_tok': 8, 'num_hidden_layers': 48, 'num_key_value_heads': 4, 'output_router_logits': False, 'rms_norm_eps': 1e-06, 'rope_scaling': None, 'rope_theta': 1000000.0, 'router_aux_loss_coef': 0.001, 'sliding_window': None, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'use_cache': True, 'use_sliding_window': False, 'vocab_size': 151936}, 30_532_122_624),
    "olmo2-7b.mt": ({'architectures': ['Olmo2ForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'eos_token_id': 100257, 'hidden_act': 'silu', 'hidden_size': 4096, 'initializer_range': 0.02, 'intermediate_size': 11008, 'max_position_embeddings': 4096, 'model_type': 'olmo2', 'num_attention_heads': 32, 'num_hidden_layers': 32, 'num_key_value_heads': 32, 'pad_token_id': 100277, 'rms_norm_eps': 1e-06, 'rope_scaling': None, 'rope_theta': 500000, 'tie_word_embeddings': False, 'torch_dtype': 'float32', 'use_cache': True, 'vocab_size': 100352}, 7_298_617_344),
    "gemma3-4b.mt": ({'architectures': ['Gemma3ForConditionalGeneration'], 'boi_token_index': 255999, 'eoi_token_index': 256000, 'eos_token_id': [1, 106], 'image_token_index': 262144, 'initializer_range': 0.02, 'mm_tokens_per_image': 256, 'model_type': 'gemma3', 'text_config': {'hidden_size': 2560, 'intermediate_size': 10240, 'model_type': 'gemma3_text', 'num_hidden_layers': 34, 'rope_scaling': {'factor': 8.0, 'rope_type': 'linear'}, 'sliding_window': 1024}, 'torch_dtype': 'bfloat16', 'transformers_version': '4.50.0.dev0', 'vision_config': {'hidden_size': 1152, 'image_size': 896, 'intermediate_size': 4304, 'model_type': 'siglip_vision_model', 'num_attention_heads': 16, 'num_hidden_layers': 27, 'patch_size': 14, 'vision_use_head': False}}, 3_880_263_168),
    "qwen3-next-80b-a3b.mt": ({"architectures": ["Qwen3NextForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": False, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}, 79_674_391_296),
    "granite-4.0-h-tiny.mt": ({'architectures': ['GraniteMoeHybridForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'attention_multiplier': 0.0078125, 'bos_token_id': 100257, 'embedding_multiplier': 12, 'eos_token_id': 100257, 'hidden_act': 'silu', 'hidden_size': 1536, 'init_method': 'mup', 'initializer_range': 0.1, 'intermediate_size': 512, 'layer_types': ['mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba'], 'logits_scaling': 6, 'mamba_chunk_size': 256, 'mamba_conv_bias': True, 'mamba_d_conv': 4, 'mamba_d_head': 64, 'mamba_d_state': 128, 'mamba_expand': 2, 'mamba_n_groups': 1, 'mamba_n_heads': 48, 'mamba_proj_bias': False, 'max_position_embeddings': 131072, 'model_type': 'granitemoehybrid', 'normalization_function': 'rmsnorm', 'num_attention_heads': 12, 'num_experts_per_tok': 6, 'num_hidden_layers': 40, 'num_key_value_heads': 4, 'num_local_experts': 64, 'output_router_logits': False, 'pad_token_id': 100256, 'position_embedding_type': 'nope', 'residual_multiplier': 0.22, 'rms_norm_eps': 1e-05, 'rope_scaling': None, 'rope_theta': 10000, 'router_aux_loss_coef': 0.0, 'shared_intermediate_size': 1024, 'tie_word_embeddings': True, 'torch_dtype': 'bfloat16', 'vocab_size': 100352}, 6_939_037_248),
    "bamba-9b.mt": ({'architectures': ['BambaForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'attn_layer_indices': [9, 18, 27], 'bos_token_id': 128000, 'eos_token_id': 128001, 'hidden_act': 'silu', 'hidden_size': 4096, 'initializer_range': 0.02, 'intermediate_size': 14336, 'mamba_chunk_size': 256, 'mamba_conv_bias': True, 'mamba_d_conv': 4, 'mamba_d_head': 64, 'mamba_d_state': 128, 'mamba_expand': 2, 'mamba_n_groups': 1, 'mamba_n_heads': 128, 'mamba_proj_bias': False, 'max_position_embeddings': 262144, 'mlp_bias': False, 'model_type': 'bamba', 'num_attention_heads': 32, 'num_hidden_layers': 32, 'num_key_value_heads': 8, 'num_logits_to_keep': 1, 'pad_token_id': 0, 'rms_norm_eps': 1e-05, 'rope_theta': 10000.0, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'use_cache': True, 'vocab_size': 128256, 'z_loss_coefficient': 0.0}, 9_780_235_392),
}


def dump(mtc, path):
    p = subprocess.run([mtc, path, "--batch", "1", "--seq", "16", "--dtype", "f32", "--dump-graph"],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return None, p.stderr
    lines = [re.sub(r"  \([^()]*\)$", "", l) for l in p.stdout.splitlines() if not l.startswith("model ")]
    return lines, ""


sys.path.insert(0, "tools")
import hf_to_mt  # noqa: E402  (transformers loads once, not once a case)


def tool(config, out):
    """Writes the tool's model for config to out; returns (ok, message)."""
    try:
        text = hf_to_mt.convert(json.loads(json.dumps(config)), "m")
    except hf_to_mt.Refused as e:
        return False, str(e)
    with open(out, "w") as f:
        f.write(text)
    return True, ""


def main():
    mtc = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for ex, (config, count) in CASES.items():
            d = os.path.join(tmp, ex[:-3])
            os.makedirs(d)
            out = os.path.join(d, "model.mt")
            ok, msg = tool(config, out)
            if not check(ok, f"{ex}: hf_to_mt.py refused it: {msg}"):
                continue
            mine, err = dump(mtc, out)
            theirs, err2 = dump(mtc, f"examples/{ex}")
            if not check(mine is not None and theirs is not None, f"{ex}: mtc failed: {err}{err2}"):
                continue
            diff = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
            if diff is None and len(mine) != len(theirs):
                diff = min(len(mine), len(theirs))
            check(diff is None, f"{ex}: the tool's graph differs from the example's at dump line {diff}: "
                                f"{mine[diff] if diff is not None and diff < len(mine) else '(end)'} | "
                                f"{theirs[diff] if diff is not None and diff < len(theirs) else '(end)'}")
            s = subprocess.run([mtc, out, "--summary", "--json"], capture_output=True, text=True, timeout=300)
            total = json.loads(s.stdout)["params_total"] if s.returncode == 0 else None
            if check(total == count, f"{ex}: the tool's model counts {total} parameters, the checkpoint {count:,}") \
                    and diff is None:
                print(f"ok   {ex}: same graph ({len(mine)} dump lines), {total:,} parameters")
        # refusals, each naming what it refuses; the command line's exit
        # status and no file left behind
        d = os.path.join(tmp, "refuse")
        os.makedirs(d)
        base = CASES["llama3-8b.mt"][0]
        for what, config, want in [
            ("unknown model_type", dict(base, model_type="mamba"), 'model_type "mamba" is not one'),
            ("unknown field", dict(base, fancy_new_norm=True), "field fancy_new_norm = true"),
            ("attention bias on llama", dict(base, attention_bias=True), "field attention_bias = true"),
            ("rope type", dict(base, rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
             'rope_scaling.rope_type = "dynamic"'),
            ("sequential residual", dict(CASES["pythia-160m.mt"][0], use_parallel_residual=False),
             "field use_parallel_residual = false"),
        ]:
            ok, msg = tool(config, os.path.join(d, "model.mt"))
            if check(not ok and want in msg, f"{what}: expected a refusal with {want!r}, got {msg!r}"):
                print(f"ok   refuses {what}: {msg}")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(base, model_type="mamba"), f)
        out = os.path.join(d, "cli.mt")
        p = subprocess.run([sys.executable, "tools/hf_to_mt.py", d, "-o", out], capture_output=True, text=True,
                           timeout=120)
        check(p.returncode == 1 and 'model_type "mamba"' in p.stderr and not os.path.exists(out),
              f"the command line on an unknown model_type: exit {p.returncode}, {p.stderr.strip()!r}", p)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
