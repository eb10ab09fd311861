#!/usr/bin/env python3
"""tools/hf_to_mt.py against the shipped examples.

For every example of a published checkpoint, the checkpoint's config.json
(its values written out below, as published on the Hugging Face hub; the
four newest examples were written by the tool from theirs) goes
through the tool; the model it writes must lower to the same graph as the
example (`mtc --dump-graph` at batch 1, seq 16, f32, equal but for the
model's name and the source locations) and count the checkpoint's
parameters (`mtc --summary --json`); the three MoE configs say
output_router_logits = true (published: false), as their examples train
the load-balancing loss; GPT-2's is written with --no-dropout, against a
model.safetensors named as the hub's (no "transformer." prefix). The tool
must refuse an unknown model_type by name, a field it does not map by name,
and a value it cannot express; accept every family's config.json as
transformers' save_pretrained writes it (GPT-2's dropouts refused by name
unless --no-dropout); honour the fields that change the function
(qkv_bias, output_router_logits, scale_attn_weights, Llama 4's rope with
equal low and high frequency factors) and refuse the ones it cannot
(router_jitter_noise, dropouts, add_cross_attention,
scale_attn_by_inverse_layer_idx). --bias-update 0.001 writes DeepSeek-V3's
and GLM-4.5-Air's routing-bias rule (bias_update = 0.001, which mtc marks on
each buffer), without it none; a family without that bias refuses the flag.

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
                         "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": True,
                         "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
                         "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                         "use_cache": True, "vocab_size": 32000}, 46_702_792_704),
    "qwen1.5-moe-a2.7b.mt": ({"architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
                              "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151643,
                              "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
                              "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
                              "model_type": "qwen2_moe", "moe_intermediate_size": 1408, "norm_topk_prob": False,
                              "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4,
                              "num_hidden_layers": 24, "num_key_value_heads": 16, "output_router_logits": True,
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
    "qwen3-30b-a3b.mt": ({'architectures': ['Qwen3MoeForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'bos_token_id': 151643, 'decoder_sparse_step': 1, 'eos_token_id': 151645, 'head_dim': 128, 'hidden_act': 'silu', 'hidden_size': 2048, 'initializer_range': 0.02, 'intermediate_size': 6144, 'max_position_embeddings': 40960, 'max_window_layers': 48, 'mlp_only_layers': [], 'model_type': 'qwen3_moe', 'moe_intermediate_size': 768, 'norm_topk_prob': True, 'num_attention_heads': 32, 'num_experts': 128, 'num_experts_per_tok': 8, 'num_hidden_layers': 48, 'num_key_value_heads': 4, 'output_router_logits': True, 'rms_norm_eps': 1e-06, 'rope_scaling': None, 'rope_theta': 1000000.0, 'router_aux_loss_coef': 0.001, 'sliding_window': None, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'use_cache': True, 'use_sliding_window': False, 'vocab_size': 151936}, 30_532_122_624),
    "olmo2-7b.mt": ({'architectures': ['Olmo2ForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'eos_token_id': 100257, 'hidden_act': 'silu', 'hidden_size': 4096, 'initializer_range': 0.02, 'intermediate_size': 11008, 'max_position_embeddings': 4096, 'model_type': 'olmo2', 'num_attention_heads': 32, 'num_hidden_layers': 32, 'num_key_value_heads': 32, 'pad_token_id': 100277, 'rms_norm_eps': 1e-06, 'rope_scaling': None, 'rope_theta': 500000, 'tie_word_embeddings': False, 'torch_dtype': 'float32', 'use_cache': True, 'vocab_size': 100352}, 7_298_617_344),
    "gemma3-4b.mt": ({'architectures': ['Gemma3ForConditionalGeneration'], 'boi_token_index': 255999, 'eoi_token_index': 256000, 'eos_token_id': [1, 106], 'image_token_index': 262144, 'initializer_range': 0.02, 'mm_tokens_per_image': 256, 'model_type': 'gemma3', 'text_config': {'hidden_size': 2560, 'intermediate_size': 10240, 'model_type': 'gemma3_text', 'num_hidden_layers': 34, 'rope_scaling': {'factor': 8.0, 'rope_type': 'linear'}, 'sliding_window': 1024}, 'torch_dtype': 'bfloat16', 'transformers_version': '4.50.0.dev0', 'vision_config': {'hidden_size': 1152, 'image_size': 896, 'intermediate_size': 4304, 'model_type': 'siglip_vision_model', 'num_attention_heads': 16, 'num_hidden_layers': 27, 'patch_size': 14, 'vision_use_head': False}}, 3_880_263_168),
    "qwen3-next-80b-a3b.mt": ({"architectures": ["Qwen3NextForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": True, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}, 79_674_391_296),
    "granite-4.0-h-tiny.mt": ({'architectures': ['GraniteMoeHybridForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'attention_multiplier': 0.0078125, 'bos_token_id': 100257, 'embedding_multiplier': 12, 'eos_token_id': 100257, 'hidden_act': 'silu', 'hidden_size': 1536, 'init_method': 'mup', 'initializer_range': 0.1, 'intermediate_size': 512, 'layer_types': ['mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'mamba', 'attention', 'mamba', 'mamba', 'mamba', 'mamba'], 'logits_scaling': 6, 'mamba_chunk_size': 256, 'mamba_conv_bias': True, 'mamba_d_conv': 4, 'mamba_d_head': 64, 'mamba_d_state': 128, 'mamba_expand': 2, 'mamba_n_groups': 1, 'mamba_n_heads': 48, 'mamba_proj_bias': False, 'max_position_embeddings': 131072, 'model_type': 'granitemoehybrid', 'normalization_function': 'rmsnorm', 'num_attention_heads': 12, 'num_experts_per_tok': 6, 'num_hidden_layers': 40, 'num_key_value_heads': 4, 'num_local_experts': 64, 'output_router_logits': True, 'pad_token_id': 100256, 'position_embedding_type': 'nope', 'residual_multiplier': 0.22, 'rms_norm_eps': 1e-05, 'rope_scaling': None, 'rope_theta': 10000, 'router_aux_loss_coef': 0.0, 'shared_intermediate_size': 1024, 'tie_word_embeddings': True, 'torch_dtype': 'bfloat16', 'vocab_size': 100352}, 6_939_037_248),
    "bamba-9b.mt": ({'architectures': ['BambaForCausalLM'], 'attention_bias': False, 'attention_dropout': 0.0, 'attn_layer_indices': [9, 18, 27], 'bos_token_id': 128000, 'eos_token_id': 128001, 'hidden_act': 'silu', 'hidden_size': 4096, 'initializer_range': 0.02, 'intermediate_size': 14336, 'mamba_chunk_size': 256, 'mamba_conv_bias': True, 'mamba_d_conv': 4, 'mamba_d_head': 64, 'mamba_d_state': 128, 'mamba_expand': 2, 'mamba_n_groups': 1, 'mamba_n_heads': 128, 'mamba_proj_bias': False, 'max_position_embeddings': 262144, 'mlp_bias': False, 'model_type': 'bamba', 'num_attention_heads': 32, 'num_hidden_layers': 32, 'num_key_value_heads': 8, 'num_logits_to_keep': 1, 'pad_token_id': 0, 'rms_norm_eps': 1e-05, 'rope_theta': 10000.0, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'use_cache': True, 'vocab_size': 128256, 'z_loss_coefficient': 0.0}, 9_780_235_392),
}

# The newer families' published config.json values (HuggingFaceTB/SmolLM3-3B, ibm-granite/granite-3.1-8b-base,
# ibm-granite/granite-4.0-micro less its Mamba fields, which no layer reads, deepseek-ai/DeepSeek-V3 less its
# quantization_config (fp8 weights: refused by name below), zai-org/GLM-4.5-Air, meta-llama/Llama-4-Scout-17B-16E
# (its text_config in full; the wrapper's vision fields abridged: the tool reads the language model), and
# openai/gpt-oss-20b less its quantization_config), with no example to compare graphs with: the tool's model must
# count transformers' parameters (AutoModelForCausalLM.from_config on the meta device: 3.08B, 8.17B, 3.40B, 671B,
# 106B, 108B, 20.9B) and name the routing bias buffers (e_score_correction_bias, one [E] a
# MoE layer) apart, as buffers (mtc --json's buffers_total).
SMOLLM3 = {"architectures": ["SmolLM3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
        "eos_token_id": 128012, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "intermediate_size": 11008, "max_position_embeddings": 65536, "max_window_layers": 28, "mlp_bias": False,
        "model_type": "smollm3", "no_rope_layer_interval": 4,
        "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(36)], "num_attention_heads": 16,
        "num_hidden_layers": 36, "num_key_value_heads": 4, "pad_token_id": 128004, "pretraining_tp": 2,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 5000000.0, "sliding_window": None,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.54.0.dev0",
        "use_cache": False, "use_sliding_window": False, "vocab_size": 128256}

GRANITE31 = {"architectures": ["GraniteForCausalLM"], "attention_bias": False, "attention_dropout": 0.1,
           "attention_multiplier": 0.0078125, "bos_token_id": 0, "embedding_multiplier": 12.0, "eos_token_id": 0,
           "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12800,
           "logits_scaling": 16.0, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "granite",
           "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "pad_token_id": 0,
           "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000000.0,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.47.0",
           "use_cache": True, "vocab_size": 49155}

GRANITE4_MICRO = {"architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
         "attention_multiplier": 0.0078125, "bos_token_id": 100257, "embedding_multiplier": 12, "eos_token_id": 100257,
         "hidden_act": "silu", "hidden_size": 2560, "init_method": "mup", "initializer_range": 0.1,
         "intermediate_size": 8192, "layer_types": ["attention"] * 40, "logits_scaling": 10,
         "max_position_embeddings": 131072, "model_type": "granitemoehybrid", "normalization_function": "rmsnorm",
         "num_attention_heads": 40, "num_experts_per_tok": 0, "num_hidden_layers": 40, "num_key_value_heads": 8,
         "num_local_experts": 0, "output_router_logits": False, "pad_token_id": 100256,
         "position_embedding_type": "rope", "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None,
         "rope_theta": 10000000, "router_aux_loss_coef": 0.01, "shared_intermediate_size": 8192,
         "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 100352}

DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
      "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
      "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
      "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
      "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
      "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
      "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "pretraining_tp": 1,
      "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
      "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 4096, "type": "yarn"},
      "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True,
      "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
      "transformers_version": "4.33.1", "use_cache": True, "v_head_dim": 128, "vocab_size": 129280}

GLM45_AIR = {"architectures": ["Glm4MoeForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
       "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128, "hidden_act": "silu",
       "hidden_size": 4096, "partial_rotary_factor": 0.5, "initializer_range": 0.02, "intermediate_size": 10944,
       "max_position_embeddings": 131072, "model_type": "glm4_moe", "moe_intermediate_size": 1408,
       "norm_topk_prob": True, "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
       "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
       "num_hidden_layers": 46, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": None,
       "rope_theta": 1000000, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
       "torch_dtype": "bfloat16", "transformers_version": "4.54.0", "use_cache": True, "use_qk_norm": False,
       "vocab_size": 151552}

SCOUT_TEXT = {"attention_bias": False, "attention_chunk_size": 8192, "attention_dropout": 0.0, "attn_scale": 0.1,
              "attn_temperature_tuning": True, "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008],
              "floor_scale": 8192, "for_llm_compressor": False, "head_dim": 128, "hidden_act": "silu",
              "hidden_size": 5120, "initializer_range": 0.02, "interleave_moe_layer_step": 1,
              "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
              "model_type": "llama4_text", "moe_layers": list(range(48)),
              "no_rope_layers": [int((i + 1) % 4 != 0) for i in range(48)], "num_attention_heads": 40,
              "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
              "output_router_logits": False, "pad_token_id": 200018, "rms_norm_eps": 1e-05,
              "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                               "original_max_position_embeddings": 8192, "rope_type": "llama3"},
              "rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
              "torch_dtype": "bfloat16", "use_cache": True, "use_qk_norm": True, "vocab_size": 202048}
GPT_OSS_20B = {  # its quantization_config (MXFP4 experts) apart: refused by name below
   "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
               "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
               "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
               "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
               "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
               "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
               "output_router_logits": False, "pad_token_id": 199999,
               "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                  "model.embed_tokens", "lm_head"],
                                       "quant_method": "mxfp4"},
               "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                                        "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                                        "truncate": False},
               "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
               "tie_word_embeddings": False, "transformers_version": "4.55.0.dev0", "use_cache": True,
               "vocab_size": 201088}
LLAMA4_SCOUT = {"architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080,
                "eoi_token_index": 200081, "image_token_index": 200092, "model_type": "llama4",
                "text_config": SCOUT_TEXT, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                "transformers_version": "4.51.0.dev0",
                "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408, "num_hidden_layers": 34}}
# name -> (config.json, transformers' parameter count, its buffer elements mt counts apart (buffers_total), --no-dropout)
PUBLISHED = {
    "SmolLM3-3B": (SMOLLM3, 3_075_098_624, 0, False),
    "Granite 3.1 8B": (GRANITE31, 8_170_848_256, 0, True),  # attention_dropout 0.1
    "Granite 4.0 Micro": (GRANITE4_MICRO, 3_402_836_480, 0, False),
    "DeepSeek-V3": (DEEPSEEK_V3, 671_026_404_352, 58 * 256, False),
    "GLM-4.5-Air": (GLM45_AIR, 106_852_245_504, 45 * 128, False),
    "Llama 4 Scout (text)": (LLAMA4_SCOUT, 107_769_861_120, 0, False),  # the language model of the 109B
    "gpt-oss-20b": ({k: v for k, v in GPT_OSS_20B.items() if k != "quantization_config"}, 20_914_757_184, 0, False),
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


def tool(config, out, no_dropout=False, folder=None):
    """Writes the tool's model for config to out; returns (ok, message)."""
    try:
        text = hf_to_mt.convert(json.loads(json.dumps(config)), "m", no_dropout, folder)
    except hf_to_mt.Refused as e:
        return False, str(e)
    with open(out, "w") as f:
        f.write(text)
    return True, ""


def published(mtc, tmp):
    """The newer families' published configs: transformers' parameter count, the routing bias apart."""
    for what, (config, count, buffers, no_dropout) in PUBLISHED.items():
        out = os.path.join(tmp, "published.mt")
        if no_dropout:
            ok, msg = tool(config, out)
            check(not ok and "field attention_dropout = 0.1" in msg, f"{what}: its dropout not refused: {msg!r}")
        ok, msg = tool(config, out, no_dropout=no_dropout)
        if not check(ok, f"{what}: hf_to_mt.py refused it: {msg}"):
            continue
        s = subprocess.run([mtc, out, "--summary", "--json"], capture_output=True, text=True, timeout=300)
        if not check(s.returncode == 0 and "warning" not in s.stderr, f"{what}: mtc: {s.stderr[-400:]}"):
            continue
        j = json.loads(s.stdout)
        total, held = j["params_total"], j.get("buffers_total", 0)
        if check(total == count and held == buffers, f"{what}: the tool's model counts {total:,} parameters and "
                                                    f"{held:,} buffer elements; transformers {count:,} and {buffers:,}"):
            print(f"ok   {what}: {total:,} parameters, transformers' count" +
                  (f", and {held:,} routing bias buffer elements apart" if held else ""))


def routed_work(mtc, tmp):
    """gpt-oss-20b runs 4 of its 32 experts a token, as --explain says ("experts: 4 of 32"): mtc --explain --json
    prices the experts' GEMMs by the routed work. The tool's model and the same with top_k = 32 differ in GEMM time by 28 experts' hand count (3 GEMMs of
    C x F a token, 4 passes: forward, the backward's recompute and its 2), to 1e-4: the expert biases are added
    inside the kernels (a column of ones in the GEMMs, as before, made it (C + 1) x F, 3.5e-4 more)."""
    text = hf_to_mt.convert(json.loads(json.dumps(PUBLISHED["gpt-oss-20b"][0])), "m")
    gemm = {}
    for k in (4, 32):
        out = os.path.join(tmp, f"oss{k}.mt")
        with open(out, "w") as f:
            f.write(re.sub(r"(?m)^(\s*K = )4\b", rf"\g<1>{k}", text))
        p = subprocess.run([mtc, out, "--explain", "--json", "--target", "h200"], capture_output=True, text=True,
                           timeout=300)
        if not check(p.returncode == 0, f"gpt-oss-20b top_k {k}: mtc --explain: {p.stderr[-400:]}"):
            return
        d = json.loads(p.stdout)
        gemm[k] = next(r for r in d["policies"] if r["name"] == "none")["gemm_s"]
        q = subprocess.run([mtc, out, "--explain", "--target", "h200"], capture_output=True, text=True, timeout=300)
        check(f"  experts: {k} of 32 a token" in q.stdout, f"gpt-oss-20b top_k {k}: --explain says {k} of 32 experts")
    N, L, C, F = d["batch"] * d["seq"], 24, 2880, 2880
    eff = float(re.search(r"^moe_gemm_efficiency *= *([0-9.e+-]+)", open("schedules/h200.target").read(), re.M)[1])
    one = 2 * N * 4 * L * 3 * C * F / (989e12 * eff)  # seconds of one expert a token, every layer
    got = (gemm[32] - gemm[4]) / 28
    if check(abs(got - one) <= 1e-4 * one and gemm[4] > 4 * one,
             f"gpt-oss-20b: GEMMs {gemm[4]} s at top_k 4, {gemm[32]} s at 32; an expert a token {got:.6f} s, the "
             f"hand count {one:.6f} s"):
        print(f"ok   gpt-oss-20b: 4 of 32 experts priced: GEMMs {gemm[4]:.4f} s (the experts' {4 * one:.4f} s), "
              f"{gemm[32]:.4f} s with all 32")


def check_finetune(mtc, tmp, config):
    """--finetune: a fine-tuning schedule, said on stderr, that mtc reads; the model file's first line names the
    folder (mtrun warns when it trains from random weights); without transformers, the pip command."""
    d = os.path.join(tmp, "ft")
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    out = os.path.join(d, "ft.mt")
    p = subprocess.run([sys.executable, "tools/hf_to_mt.py", d, "--finetune", "-o", out], capture_output=True,
                       text=True, timeout=120)
    text = open(out).read() if p.returncode == 0 else ""
    check(p.returncode == 0 and text.startswith(f"# written by tools/hf_to_mt.py from {os.path.abspath(d)}\n")
          and "lr = 2e-05" in text and "warmup = 10," in text and "weight_decay = 0.0" in text
          and "steps = 1000" in text and "hf_to_mt.py: a fine-tuning schedule: peak lr 2e-05 after 10 warmup steps"
          in p.stderr, f"--finetune writes a fine-tuning schedule and says so: {p.stderr!r}", p)
    s = subprocess.run([mtc, out, "--summary", "--json"], capture_output=True, text=True, timeout=300)
    check(s.returncode == 0, f"mtc reads the --finetune model: {s.stderr[-300:]}")
    shadow = os.path.join(tmp, "no-transformers")  # a transformers that is not there
    os.makedirs(shadow)
    with open(os.path.join(shadow, "transformers.py"), "w") as f:
        f.write("raise ImportError(\"No module named 'transformers'\")\n")
    p = subprocess.run([sys.executable, "tools/hf_to_mt.py", d], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=shadow))
    check(p.returncode == 1 and "Traceback" not in p.stderr and "python3 -m pip install transformers" in p.stderr,
          f"without transformers: exit 1 with the pip command, no traceback: {p.stderr!r}", p)


def hub_safetensors(folder, names):
    """A model.safetensors in folder whose header names names (one float each)."""
    head = json.dumps({n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
                       for i, n in enumerate(names)}).encode()
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head + bytes(4 * len(names)))


FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "olmo2", "phi3", "mixtral", "qwen2_moe", "qwen3_moe", "gemma2",
            "gemma3_text", "gpt2", "gpt_neox", "smollm3", "granite", "deepseek_v3", "glm4_moe", "llama4_text",
            "gpt_oss"]


def saved_configs(mtc, tmp):
    """Every family's config.json as transformers' save_pretrained writes it
    (its defaults, at a tiny size): the tool writes it and mtc compiles it;
    GPT-2's dropouts (0.1) are refused by name, and written without under
    --no-dropout, which the model's first line says."""
    import transformers
    tiny = {"gpt2": dict(n_embd=32, n_layer=2, n_head=2, vocab_size=256, n_positions=64),
            "gpt_neox": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, vocab_size=256,
                             intermediate_size=128),
            "glm4_moe": dict(head_dim=128)}  # its default head (4096 / 96 = 42) would rotate an odd 21
    for mt in FAMILIES:
        d = os.path.join(tmp, "saved_" + mt)
        cfg = transformers.AutoConfig.for_model(mt, **tiny.get(mt, {}))
        cfg.save_pretrained(d)
        with open(os.path.join(d, "config.json")) as f:
            raw = json.load(f)
        out = os.path.join(d, "model.mt")
        ok, msg = tool(raw, out)
        if mt == "gpt2":
            check(not ok and "field attn_pdrop = 0.1" in msg and "--no-dropout" in msg,
                  f"saved gpt2 config: expected attn_pdrop refused by name, got {msg!r}")
            ok, msg = tool(raw, out, no_dropout=True)
            ok = ok and check(open(out).readline().startswith("# hf_to_mt.py --no-dropout: trained without "
                                                              "config.json's attn_pdrop = 0.1"),
                              "saved gpt2 config: --no-dropout's model does not say what it left out")
        if not check(ok, f"saved {mt} config ({len(raw)} fields): hf_to_mt.py refused it: {msg}"):
            continue
        p = subprocess.run([mtc, out, "--batch", "1", "--seq", "16", "--dtype", "f32", "--summary"],
                           capture_output=True, text=True, timeout=300)
        if check(p.returncode == 0, f"saved {mt} config: mtc refused the tool's model: {p.stderr}"):
            print(f"ok   saved {mt} config.json ({len(raw)} fields): written and compiled")


def model_text(config, **kw):
    """The tool's model text for config (a Refused message prefixed with '!')."""
    try:
        return hf_to_mt.convert(json.loads(json.dumps(config)), "m", **kw)
    except hf_to_mt.Refused as e:
        return "!" + str(e)


def function_fields(mtc, tmp):
    """Fields that change the function: honoured in the model written."""
    qmoe = CASES["qwen1.5-moe-a2.7b.mt"][0]
    gpt2 = dict(CASES["gpt2.mt"][0], attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    llama4_rope = {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192}
    for what, config, has, lacks in [
        ("qkv_bias = false", dict(qmoe, qkv_bias=False), "self_attn.q_proj.weight", "self_attn.q_proj.bias"),
        ("qkv_bias = true", qmoe, "self_attn.q_proj.bias", "!"),
        ("output_router_logits = false", dict(qmoe, output_router_logits=False), "no load-balancing loss",
         "load_balancing_loss("),
        ("output_router_logits = true", qmoe, "load_balancing_loss(", "no load-balancing loss"),
        ("scale_attn_weights = false", dict(gpt2, scale_attn_weights=False), "causal = true, scale = 1)", "!"),
        ("scale_attn_weights = true", gpt2, "causal = true)", "scale = 1"),
        ("GPT-2's names", gpt2, '"transformer.h.{i}."', '"h.{i}."'),
        ("Llama 4's rope (low = high)", dict(CASES["llama3-8b.mt"][0], rope_scaling=llama4_rope),
         "high_freq_factor = rope_high", "!"),
    ]:
        text = model_text(config)
        if not check(has in text and lacks not in text, f"{what}: the model should have {has!r} and not {lacks!r}:"
                                                        f"\n{text}"):
            continue
        out = os.path.join(tmp, "function.mt")
        with open(out, "w") as f:
            f.write(text)
        p = subprocess.run([mtc, out, "--batch", "1", "--seq", "16", "--dtype", "f32", "--summary"],
                           capture_output=True, text=True, timeout=300)
        if check(p.returncode == 0, f"{what}: mtc refused the tool's model: {p.stderr}"):
            print(f"ok   honours {what}")
    bias_update(mtc, tmp)


def bias_update(mtc, tmp):
    """--bias-update GAMMA: the routers' e_score_correction_bias moved by DeepSeek-V3's rule (bias_update = GAMMA),
    written for deepseek_v3 and glm4_moe only with the flag (transformers does not move it), refused for a family
    without that bias."""
    for what, config in (("DeepSeek-V3", DEEPSEEK_V3), ("GLM-4.5-Air", GLM45_AIR)):
        plain, moved = model_text(config), model_text(config, bias_update=0.001)
        if not check("bias = sel_bias)" in plain and "bias_update" not in plain and
                     "bias = sel_bias, bias_update = 0.001)" in moved, f"{what}: --bias-update 0.001 not written"):
            continue
        out = os.path.join(tmp, "moved.mt")
        with open(out, "w") as f:
            f.write(moved)
        p = subprocess.run([mtc, out, "--summary", "--json"], capture_output=True, text=True, timeout=300)
        rates = [q.get("bias_update") for q in json.loads(p.stdout)["params"] if q.get("buffer")] \
            if p.returncode == 0 else []
        if check(rates and all(r == 0.001 for r in rates), f"{what}: mtc sees no rule on its buffers: {p.stderr}"):
            print(f"ok   {what} --bias-update 0.001: each of its {len(rates)} routing biases moved at 0.001")
    refused = model_text(CASES["llama3-8b.mt"][0], bias_update=0.001)
    check(refused.startswith("!--bias-update 0.001") and "e_score_correction_bias" in refused,
          f"--bias-update for llama: not refused, naming the flag: {refused[:200]}")


def main():
    mtc = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        for ex, (config, count) in CASES.items():
            d = os.path.join(tmp, ex[:-3])
            os.makedirs(d)
            out = os.path.join(d, "model.mt")
            if ex == "gpt2.mt":  # the hub's checkpoint names its tensors without "transformer."
                hub_safetensors(d, ["wte.weight", "wpe.weight", "h.0.ln_1.weight"])
            ok, msg = tool(config, out, no_dropout=ex == "gpt2.mt", folder=d)
            if not check(ok, f"{ex}: hf_to_mt.py refused it: {msg}"):
                continue
            if ex == "gpt2.mt" and not check('"h.{i}."' in open(out).read(),
                                             "gpt2.mt: the hub's names (no transformer. prefix) not followed"):
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
            ("a dropout", dict(base, attention_dropout=0.1), "field attention_dropout = 0.1: mt has no dropout; set "
                                                             "attention_dropout to 0.0"),
            ("GPT-NeoX's hidden dropout", dict(CASES["pythia-160m.mt"][0], hidden_dropout=0.1),
             "field hidden_dropout = 0.1"),
            ("router jitter", dict(CASES["mixtral-8x7b.mt"][0], router_jitter_noise=0.01),
             "field router_jitter_noise = 0.01"),
            ("cross-attention", dict(CASES["gpt2.mt"][0], attn_pdrop=0, embd_pdrop=0, resid_pdrop=0,
                                     add_cross_attention=True), "field add_cross_attention = true"),
            ("per-layer attention scale", dict(CASES["gpt2.mt"][0], attn_pdrop=0, embd_pdrop=0, resid_pdrop=0,
                                               scale_attn_by_inverse_layer_idx=True),
             "field scale_attn_by_inverse_layer_idx = true"),
            ("SmolLM3's sliding layers", dict(SMOLLM3, use_sliding_window=True, sliding_window=4096),
             "field use_sliding_window = true"),
            ("fp8 weights", dict(DEEPSEEK_V3, quantization_config={"quant_method": "fp8", "fmt": "e4m3"}),
             "field quantization_config"),
            ("MXFP4 weights", GPT_OSS_20B, 'field quantization_config = {"modules_to_not_convert"'),
            ("softmax scores on DeepSeek-V3", dict(DEEPSEEK_V3, scoring_func="softmax"),
             'field scoring_func = "softmax"'),
            ("greedy top-k on DeepSeek-V3", dict(DEEPSEEK_V3, topk_method="greedy"), 'field topk_method = "greedy"'),
            ("an odd rotary width", dict(GLM45_AIR, head_dim=42), "field partial_rotary_factor = 0.5: rotates 21"),
            ("a NoPE list of the wrong length", dict(SMOLLM3, no_rope_layers=[1, 1, 0]),
             "transformers' smollm3 config class refuses it: IndexError"),
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
        published(mtc, tmp)
        routed_work(mtc, tmp)
        check_finetune(mtc, tmp, CASES["llama3.2-1b.mt"][0])
        saved_configs(mtc, tmp)
        function_fields(mtc, tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
