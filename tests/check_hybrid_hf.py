#!/usr/bin/env python3
"""Tiny models of the newer families tools/hf_to_mt.py writes, from their configs, against transformers' own.

qwen3_next: transformers builds Qwen3NextForCausalLM from a tiny config
(three Gated DeltaNet layers and one gated attention layer, grouped value
heads, partial rotary, the sparse MLP with a shared expert and the pooled
load-balancing loss). granite: GraniteMoeHybridForCausalLM (Granite 4.0-H:
Mamba-2 layers and an attention layer without position embedding, the
experts' fused input_linear, a shared MLP, muP's multipliers, the tied
head). bamba: BambaForCausalLM (Mamba-2 layers and an attention layer with
rope on half of each head, SwiGLU MLPs, the padding row's embedding).
smollm3: SmolLM3ForCausalLM (the 4th layer without rope, no_rope_layers).
granite3: GraniteForCausalLM (Granite 3's muP multipliers). granite_micro:
GraniteMoeHybridForCausalLM with attention layers only and no experts
(Granite 4.0 Micro). deepseek_v3: DeepseekV3ForCausalLM (latent attention,
YaRN, interleaved rope pairs, a dense layer, sigmoid routing with a nonzero
selection bias, 2 of 4 groups eligible, renormalised and scaled, a shared
expert; the bias is a buffer in transformers and in mt, so it must come
back from the step unchanged). glm4_moe: Glm4MoeForCausalLM
(q/k/v biases, rope on half of each head, per-head q/k norms, the same
routing). llama4: Llama4ForCausalLM (Scout's text model: rope layers with
chunked attention and the weightless q/k norm, a NoPE layer with the
temperature tuning, interleaved rope pairs, top-2 experts each scaled at
its input (moe's gates_on = input) with the fused [E, in, out] weights read
in place, a shared expert, a dense layer).
gpt_oss: GptOssForCausalLM (sliding and full layers with sinks and
attention biases, yarn rope, a biased router, expert biases, the clamped
SwiGLU with its limit reached). The MoE families' objective is the one
transformers trains: DeepSeek-V3, GLM-4.5 and Llama 4 add no auxiliary
loss; gpt-oss adds the pooled load-balancing loss (output_router_logits).
Their
plain PyTorch paths (eager attention, the chunked torch scans,
the convolution by F.conv1d; fp32, no downloads), random weights.
tools/hf_to_mt.py writes the mt model from the same config; mtc plans it on
a cpu target that streams it (tiny-2layers, f32) and mtrun loads the
weights with --init, under the checkpoints' names.

- step 1: mtrun's loss (cross-entropy + router_aux_loss_coef x the pooled
  load-balancing loss) equals transformers' to 1e-5 relative, and the
  gradient of every tensor to 1e-4 of the tensor's largest (max |mt - hf| /
  max |hf|; mt's gradient read off one AdamW step of betas (0, 0), eps 1e6,
  lr 1e12, no decay or clipping, whose update lr g / (|g| + eps) inverts
  exactly, as check_moe.py does);
- 5 steps of AdamW (lr 1e-3, betas (0.9, 0.95), eps 1e-8, no decay, no
  clipping, constant schedule) on the data's first 5 batches: each step's
  loss equals torch.optim.AdamW's run of transformers' model to 1e-5
  relative;
- streamed: the same model trains 3 steps (batch 2) on tiny-1layer, its
  layers streamed through one layer's device memory, in f32 and in bf16,
  with the unstreamed reference executor's losses and gradient norms to
  1e-5 relative (bf16: under the storage rule, docs/numerics.md);
- so that the check can fail, the same weights with A_log's sign flipped
  (a faster decay) move transformers' loss by more than 1e-3; for the
  families without A_log, the config change of PERTURB (rope on every
  layer, another logits scaling, every group eligible, another routed
  scaling) does.

The families the tool wrote before (llama, mistral, qwen2, qwen3, olmo2,
phi3, gemma2, gemma3_text, gpt2, gpt_neox, mixtral, qwen2_moe, qwen3_moe)
run several to a process, each without the streamed runs: the same loss,
gradient and 5-step checks from transformers' AutoModelForCausalLM, with
transformers 5's fused expert tensors split and named as the checkpoints
name them (Mixtral's block_sparse_moe.experts.{e}.w1, GPT-NeoX's embed_out).

usage: check_hybrid_hf.py FAMILY[,FAMILY...] MTC MTRUN   (from the project root; FAMILY a key of CONFIGS)
"""
import json
import os
import re
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, finish, run  # noqa: E402
from check_weights import DATA, read_safetensors, write_safetensors  # noqa: E402

T, STEPS, LR, AUX = 32, 5, 1e-3, 0.01
CONFIGS = {
    "qwen3_next": {"model_type": "qwen3_next", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 4,
                   "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "partial_rotary_factor": 0.25,
                   "rope_theta": 10000.0, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
                   "linear_key_head_dim": 8, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 4, "num_experts": 4,
                   "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
                   "intermediate_size": 64, "norm_topk_prob": True, "router_aux_loss_coef": AUX,
                   "output_router_logits": True, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
                   "full_attention_interval": 4, "tie_word_embeddings": False, "hidden_act": "silu",
                   "decoder_sparse_step": 1, "mlp_only_layers": []},
    "granite": {"model_type": "granitemoehybrid", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 4,
                "layer_types": ["mamba", "attention", "mamba", "mamba"], "num_attention_heads": 4,
                "num_key_value_heads": 2, "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 8,
                "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_conv_bias": True,
                "num_local_experts": 4, "num_experts_per_tok": 2, "intermediate_size": 16,
                "shared_intermediate_size": 24, "embedding_multiplier": 3.0, "residual_multiplier": 0.5,
                "attention_multiplier": 0.2, "logits_scaling": 2.0, "position_embedding_type": "nope",
                "router_aux_loss_coef": AUX, "output_router_logits": True, "rms_norm_eps": 1e-5,
                "max_position_embeddings": 64, "tie_word_embeddings": True, "hidden_act": "silu"},
    "bamba": {"model_type": "bamba", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 4,
              "attn_layer_indices": [1], "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
              "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 1, "mamba_d_conv": 4,
              "mamba_expand": 2, "mamba_conv_bias": True, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
              "tie_word_embeddings": False, "hidden_act": "silu", "pad_token_id": 0},
    # SmolLM3: every 4th layer without rope (no_rope_layers), tied head, the padding row
    "smollm3": {"model_type": "smollm3", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
                "no_rope_layers": [1, 1, 1, 0], "no_rope_layer_interval": 4, "rope_theta": 10000.0,
                "rms_norm_eps": 1e-6, "max_position_embeddings": 64, "tie_word_embeddings": True,
                "hidden_act": "silu", "pad_token_id": 0, "use_sliding_window": False},
    # Granite 3 (model_type granite): muP's embedding, residual, attention and logits multipliers
    "granite3": {"model_type": "granite", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
                 "embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2,
                 "logits_scaling": 2.0, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
                 "tie_word_embeddings": True, "hidden_act": "silu"},
    # Granite 4.0 Micro: granitemoehybrid with attention layers only (rope), no experts, the shared MLP
    "granite_micro": {"model_type": "granitemoehybrid", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
                      "layer_types": ["attention", "attention"], "num_attention_heads": 4, "num_key_value_heads": 2,
                      "num_local_experts": 0, "num_experts_per_tok": 0, "shared_intermediate_size": 48,
                      "mamba_n_heads": 4, "mamba_d_head": 16,  # read by nothing, but checked by transformers
                      "intermediate_size": 48, "embedding_multiplier": 3.0, "residual_multiplier": 0.5,
                      "attention_multiplier": 0.2, "logits_scaling": 2.0, "position_embedding_type": "rope",
                      "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
                      "tie_word_embeddings": True, "hidden_act": "silu", "output_router_logits": False},
    # DeepSeek-V3: latent attention (q through a rank, YaRN with mscale_all_dim, interleaved rope pairs), a dense
    # layer, then sigmoid routing with the selection bias, 4 groups of which 2 are eligible, renormalised, scaled
    "deepseek_v3": {"model_type": "deepseek_v3", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 3,
                    "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
                    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                    "v_head_dim": 8, "intermediate_size": 48, "n_routed_experts": 8, "n_group": 4, "topk_group": 2,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 16, "n_shared_experts": 1,
                    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "rope_interleave": True,
                    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
                    "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
                    "tie_word_embeddings": False, "hidden_act": "silu"},
    # GLM-4.5(-Air): q/k/v biases, rope on half of each head, per-head q/k norms, a dense layer, then the same routing
    "glm4_moe": {"model_type": "glm4_moe", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 3,
                 "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                 "partial_rotary_factor": 0.5, "attention_bias": True, "use_qk_norm": True, "intermediate_size": 48,
                 "n_routed_experts": 8, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 2,
                 "moe_intermediate_size": 16, "n_shared_experts": 1, "routed_scaling_factor": 1.5,
                 "norm_topk_prob": True, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
                 "tie_word_embeddings": False, "hidden_act": "silu"},
    # Llama 4 (Scout's text model): rope layers with chunked attention (chunk 8 of 32 positions) and the weightless
    # q/k norm, a NoPE layer with full attention and the temperature (floor_scale 8: the floor steps 4 times),
    # interleaved rope pairs, llama3 rope with equal low and high factors, top-2 experts scaled at their input,
    # fused [E, in, out] expert weights read in place, a shared expert, a dense layer (moe_layers)
    "llama4": {"model_type": "llama4_text", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 16,
               "intermediate_size_mlp": 48, "num_local_experts": 4, "num_experts_per_tok": 2, "moe_layers": [0, 1, 3],
               "no_rope_layers": [1, 1, 1, 0], "attention_chunk_size": 8, "attn_temperature_tuning": True,
               "floor_scale": 8, "attn_scale": 0.1, "use_qk_norm": True, "rope_theta": 10000.0,
               "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 1.0, "original_max_position_embeddings": 16},
               "rms_norm_eps": 1e-5, "max_position_embeddings": 64, "tie_word_embeddings": False,
               "hidden_act": "silu", "output_router_logits": False},
    # gpt-oss: sliding (window 8) and full layers with sinks and attention biases, yarn rope, 2 of 4 experts behind
    # a biased router, expert biases, the clamped SwiGLU (limit 1.5, reached at these weights), the pooled
    # load-balancing loss (output_router_logits)
    "gpt_oss": {"model_type": "gpt_oss", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 16,
                "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8,
                "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 1.5, "attention_bias": True,
                "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                                 "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False},
                "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
                "tie_word_embeddings": False, "output_router_logits": True, "router_aux_loss_coef": AUX},
}
# the families the tool wrote before, at tiny sizes (one test for the dense ones, one for the MoE ones)
_DENSE = {"vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "intermediate_size": 48, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
          "max_position_embeddings": 64, "hidden_act": "silu", "tie_word_embeddings": False}
_MOE = dict(_DENSE, output_router_logits=True, router_aux_loss_coef=AUX, num_experts_per_tok=2)
CONFIGS.update({
    "llama": dict(_DENSE, model_type="llama", rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                                             "high_freq_factor": 4.0,
                                                             "original_max_position_embeddings": 16}),
    "mistral": dict(_DENSE, model_type="mistral", sliding_window=8),
    "qwen2": dict(_DENSE, model_type="qwen2"),
    "qwen3": dict(_DENSE, model_type="qwen3", head_dim=8, tie_word_embeddings=True),
    "olmo2": dict(_DENSE, model_type="olmo2"),
    "phi3": dict(_DENSE, model_type="phi3", sliding_window=8, pad_token_id=0),
    "gemma2": dict(_DENSE, model_type="gemma2", head_dim=8, query_pre_attn_scalar=8, sliding_window=8,
                   hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True),
    "gemma3_text": dict(_DENSE, model_type="gemma3_text", head_dim=8, query_pre_attn_scalar=8, sliding_window=8,
                        layer_types=["sliding_attention", "full_attention"], hidden_activation="gelu_pytorch_tanh",
                        tie_word_embeddings=True),
    "gpt2": {"model_type": "gpt2", "vocab_size": 256, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
             "attn_pdrop": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0, "tie_word_embeddings": True},
    "gpt_neox": {"model_type": "gpt_neox", "vocab_size": 256, "hidden_size": 32, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 128, "rotary_pct": 0.25, "max_position_embeddings": 64,
                 "tie_word_embeddings": False},
    "mixtral": dict(_MOE, model_type="mixtral", num_local_experts=4, intermediate_size=16),
    "qwen2_moe": dict(_MOE, model_type="qwen2_moe", num_experts=4, moe_intermediate_size=16,
                      shared_expert_intermediate_size=24, norm_topk_prob=False),
    "qwen3_moe": dict(_MOE, model_type="qwen3_moe", num_experts=4, moe_intermediate_size=16, head_dim=8,
                      norm_topk_prob=True),
})
# what the last check changes in transformers' model to show that the comparison sees each family's own feature:
# a config change (transformers' loss from the same weights must move by more than 1e-3)
PERTURB = {"smollm3": {"no_rope_layers": [1, 1, 1, 1]}, "granite3": {"logits_scaling": 1.0},
           "granite_micro": {"logits_scaling": 1.0}, "deepseek_v3": {"topk_group": 4},
           "glm4_moe": {"routed_scaling_factor": 6.0}, "llama4": {"attention_chunk_size": 32},
           "gpt_oss": {"swiglu_limit": 100.0}, "llama": {"rms_norm_eps": 0.5}, "mistral": {"sliding_window": 4},
           "qwen2": {"rms_norm_eps": 0.5}, "qwen3": {"rope_theta": 100.0}, "olmo2": {"rms_norm_eps": 0.5},
           "phi3": {"sliding_window": 4}, "gemma2": {"sliding_window": 4}, "gemma3_text": {"sliding_window": 4},
           "gpt2": {"scale_attn_weights": False}, "gpt_neox": {"layer_norm_eps": 4.0}, "mixtral": {"num_experts_per_tok": 1},
           "qwen2_moe": {"rms_norm_eps": 0.5}, "qwen3_moe": {"num_experts_per_tok": 1}}
CLASSES = {"qwen3_next": "Qwen3NextForCausalLM", "granite": "GraniteMoeHybridForCausalLM", "bamba": "BambaForCausalLM",
           "smollm3": "SmolLM3ForCausalLM", "granite3": "GraniteForCausalLM",
           "granite_micro": "GraniteMoeHybridForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
           "glm4_moe": "Glm4MoeForCausalLM", "llama4": "Llama4ForCausalLM", "gpt_oss": "GptOssForCausalLM",
           **{f: "AutoModelForCausalLM" for f in ("llama", "mistral", "qwen2", "qwen3", "olmo2", "phi3", "gemma2",
                                                   "gemma3_text", "gpt2", "gpt_neox", "mixtral", "qwen2_moe",
                                                   "qwen3_moe")}}
# transformers 5's names of the experts and router -> the checkpoints' (GraniteMoe's conversion_mapping)
GRANITE_NAMES = [(".block_sparse_moe.experts.gate_up_proj", ".block_sparse_moe.input_linear.weight"),
                 (".block_sparse_moe.experts.down_proj", ".block_sparse_moe.output_linear.weight"),
                 (".block_sparse_moe.router.weight", ".block_sparse_moe.router.layer.weight")]
TRAIN = """train {{
  batch = 1
  seq = {T}
  optimizer = adamw(lr = {lr}, betas = ({b}, {b2}), weight_decay = 0, eps = {eps})
  schedule = constant
  clip = 0
  steps = {steps}
}}
"""


def hf_model(family, seed, changes=None):
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    raw = {k: v for k, v in dict(CONFIGS[family], **(changes or {})).items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(CONFIGS[family]["model_type"], **raw)
    cfg._attn_implementation, cfg._experts_implementation = "eager", "eager"
    torch.manual_seed(seed)
    cls = getattr(transformers, CLASSES[family])
    model = (cls.from_config(cfg) if CLASSES[family].startswith("Auto") else cls(cfg)).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(0.5, 4)))
            elif name.endswith(("dt_bias", ".D", "conv1d.bias")):
                p.copy_(0.5 * torch.randn_like(p))
            elif p.dim() == 1 and family == "qwen3_next" and not name.endswith("linear_attn.norm.weight"):
                p.copy_(0.3 * torch.randn_like(p))  # the zero-centred norms (1 + w)
            elif p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.3 if name.endswith(("gate.weight", "router.weight")) else 0.15)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # the selection bias: a buffer, here away from 0
                b.copy_(0.2 * torch.randn_like(b))
    return model


# transformers 5's tensor names -> the checkpoints' (the tool's), after the experts' split into per-expert tensors
RENAMES = {"mixtral": [(".mlp.experts.", ".block_sparse_moe.experts."), (".gate_proj.weight", ".w1.weight"),
                       (".up_proj.weight", ".w3.weight"), (".down_proj.weight", ".w2.weight"),
                       (".mlp.gate.weight", ".block_sparse_moe.gate.weight")],
           "gpt_neox": [("lm_head.weight", "embed_out.weight")]}


def rename(name, family, back=False):
    for theirs, ours in RENAMES.get(family, []):
        name = name.replace(ours, theirs) if back else name.replace(theirs, ours)
    return name


def mt_weights(family, model):
    """transformers' tensors under the checkpoint's names (Qwen3-Next's experts one tensor each; Granite's fused,
    as its checkpoints keep them)."""
    W = {}
    for name, t in model.state_dict().items():
        a = t.detach().numpy().astype(np.float32)
        if name == "lm_head.weight" and CONFIGS[family]["tie_word_embeddings"]:
            continue  # the embedding's
        if "rotary_emb" in name:
            continue  # rope's frequency buffers: mt computes them
        if family == "granite":
            for theirs, ours in GRANITE_NAMES:
                name = name.replace(theirs, ours)
            W[name] = a
        elif name.endswith("experts.gate_up_proj") and family not in ("llama4", "gpt_oss"):  # Llama 4's checkpoints keep them fused
            pre, F = name[: -len("gate_up_proj")], a.shape[1] // 2
            for e in range(a.shape[0]):
                W[f"{pre}{e}.gate_proj.weight"], W[f"{pre}{e}.up_proj.weight"] = a[e, :F], a[e, F:]
        elif name.endswith("experts.down_proj") and family not in ("llama4", "gpt_oss"):
            for e in range(a.shape[0]):
                W[f"{name[: -len('down_proj')]}{e}.down_proj.weight"] = a[e]
        else:
            W[name] = a
    return {rename(n, family): a for n, a in W.items()}


def hf_grads(grad, name, family):
    """transformers' gradient of tensor `name` in mt's naming (grad: transformers' name -> array)."""
    name = rename(name, family, back=True)
    if family == "granite":
        for theirs, ours in GRANITE_NAMES:
            name = name.replace(ours, theirs)
        return grad[name]
    m = re.match(r"(.*\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", name)
    if not m:
        return grad[name]
    e = int(m.group(2))
    if m.group(3) == "down_proj":
        return grad[m.group(1) + "down_proj"][e]
    g = grad[m.group(1) + "gate_up_proj"][e]
    return g[: g.shape[0] // 2] if m.group(3) == "gate_proj" else g[g.shape[0] // 2:]


def hf_loss(model, tokens, targets):
    import torch
    out = model(torch.tensor(tokens[None]))
    ce = torch.nn.functional.cross_entropy(out.logits[0], torch.tensor(targets))
    return ce if getattr(out, "aux_loss", None) is None else ce + AUX * out.aux_loss


def mt_run(mtc, mtrun, text, W, tmp, steps, lr, export):
    model, wf, plan, log, out = (os.path.join(tmp, n) for n in ("m.mt", "w.safetensors", "p.bin", "l.jsonl", "o"))
    with open(model, "w") as f:
        f.write(text)
    write_safetensors(wf, [(n, "F32", w) for n, w in W.items()])
    q = run(mtc, model, "-o", plan, "--target", "tiny-2layers", "--dtype", "f32")
    if not check(q.returncode == 0, "mtc -o the tiny model", q):
        return None, None
    args = ["--steps", steps, "--device", "cpu", "--data", DATA, "--init", wf, "--log", log, "--lr", f"{lr:g}",
            "--no-save", "--val-batches", "0"] + (["--export", out + ".safetensors", "--dtype", "fp32"] if export else [])
    if os.path.exists(log):  # mtrun appends to a log: this run's records alone
        os.remove(log)
    p = run(mtrun, plan, *args)
    if not check(p.returncode == 0, "mtrun the tiny model", p):
        return None, None
    lines = [json.loads(line) for line in open(log) if '"loss"' in line and '"step"' in line]
    got = None
    if export:
        got = read_safetensors(out + ".safetensors")
    return lines, got


def streamed(mtc, mtrun, text):
    """The tool's model, streamed through one layer's device memory (tiny-1layer) in f32 and bf16, against the
    unstreamed reference executor: 3 steps' losses and gradient norms to 1e-5 relative."""
    model = text + TRAIN.format(T=T, lr=LR, b=0.9, b2=0.95, eps="1e-8", steps=3).replace("batch = 1", "batch = 2")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.mt")
        with open(path, "w") as f:
            f.write(model)
        for dtype in ("f32", "bf16"):
            plan = os.path.join(tmp, f"{dtype}.bin")
            q = run(mtc, path, "-o", plan, "--target", "tiny-1layer", "--dtype", dtype)
            if not check(q.returncode == 0, f"mtc -o --dtype {dtype} on tiny-1layer", q):
                continue
            got = []
            for extra in ([], ["--reference"]):
                log = os.path.join(tmp, "s.jsonl")
                if os.path.exists(log):  # mtrun appends to a log: this run's records alone
                    os.remove(log)
                p = run(mtrun, plan, "--steps", 3, "--data", DATA, "--log", log, "--no-save", "--val-batches", 0,
                        *extra)
                if not check(p.returncode == 0, f"mtrun {dtype} {' '.join(extra)}", p):
                    break
                rows = [json.loads(line) for line in open(log) if '"step"' in line and '"loss"' in line]
                got.append([r["loss"] for r in rows] + [r["grad_norm"] for r in rows])
            if len(got) == 2:
                err = max(abs(a - b) / abs(b) for a, b in zip(*got)) if len(got[0]) == 6 else float("inf")
                check(err <= 1e-5, f"{dtype} streamed on tiny-1layer: {got[0]}, the reference executor {got[1]}")
                print(f"{dtype} streamed on tiny-1layer: losses and norms {[f'{v:.6f}' for v in got[0]]}, "
                      f"the reference executor's to {err:.1e}")


def main():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    families, mtc, mtrun = sys.argv[1:4]
    sys.path.insert(0, "tools")
    families = families.split(",")
    for family in families:  # several: each without the streamed runs (held by the families' own tests)
        one(family, mtc, mtrun, len(families) == 1)
    return finish()


def one(family, mtc, mtrun, stream):
    """The checks of one family."""
    import torch
    import hf_to_mt
    text = hf_to_mt.convert(dict(CONFIGS[family]), f"{family}_tiny")
    text, n = re.subn(r"train \{.*\}\s*$", "", text, flags=re.S)
    if not check(n == 1, "the tool's model ends with its train section"):
        return
    raw = np.frombuffer(open(DATA, "rb").read(), np.uint8).astype(np.int64)
    batches = [(raw[s * T: s * T + T], raw[s * T + 1: s * T + T + 1]) for s in range(STEPS)]
    model = hf_model(family, 7)
    W = mt_weights(family, model)

    # step 1: loss and gradients
    loss = hf_loss(model, *batches[0])
    loss.backward()
    grad = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    want = float(loss.detach())
    with tempfile.TemporaryDirectory() as tmp:
        lr, eps = 1e12, 1e6
        lines, got = mt_run(mtc, mtrun, text + TRAIN.format(T=T, lr=lr, b=0, b2=0, eps=f"{eps:g}", steps=1), W, tmp,
                            1, lr, True)
    if lines is None:
        return
    e = abs(lines[0]["loss"] - want) / want
    check(e <= 1e-5, f"step 1: mt's loss {lines[0]['loss']!r}, transformers' {want!r} ({e:.1e} relative)")
    print(f"{family} step 1 loss: mt {lines[0]['loss']:.9f}, transformers {want:.9f} ({e:.1e} relative)")
    worst, where = 0.0, None
    for name, w in W.items():
        if name.endswith("e_score_correction_bias"):  # a buffer in both: neither trains it
            check(np.array_equal(w, got[name]), f"the selection bias buffer {name} moved")
            continue
        u = w.astype(np.float64) - got[name].astype(np.float64)  # lr g / (|g| + eps)
        mine, theirs = u * eps / (lr - np.abs(u)), hf_grads(grad, name, family)
        err = float(np.max(np.abs(mine - theirs)) / max(np.max(np.abs(theirs)), 1e-30))
        if err > worst:
            worst, where = err, name
    check(worst <= 1e-4, f"step 1: the gradient of {where} misses transformers' by {worst:.2e} of its largest")
    print(f"{family} step 1 gradients of {len(W)} tensors: worst {worst:.2e} of the tensor's largest ({where})")

    # 5 steps of AdamW
    model = hf_model(family, 7)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    theirs = []
    for x, y in batches:
        opt.zero_grad()
        loss = hf_loss(model, x, y)
        loss.backward()
        opt.step()
        theirs.append(float(loss.detach()))
    with tempfile.TemporaryDirectory() as tmp:
        lines, _ = mt_run(mtc, mtrun, text + TRAIN.format(T=T, lr=LR, b=0.9, b2=0.95, eps="1e-8", steps=STEPS), W,
                          tmp, STEPS, LR, False)
    if lines is None:
        return
    mine = [r["loss"] for r in lines]
    errs = [abs(a - b) / abs(b) for a, b in zip(mine, theirs)]
    check(len(mine) == STEPS and max(errs) <= 1e-5, f"{STEPS} steps: mt's losses {mine}, transformers' {theirs}")
    print(f"{family} {STEPS} AdamW steps: mt {[f'{v:.7f}' for v in mine]}, transformers {[f'{v:.7f}' for v in theirs]}, "
          f"worst {max(errs):.1e} relative")

    if stream:
        streamed(mtc, mtrun, text)

    # the check sees the decay (the family's own feature)
    model = hf_model(family, 7, PERTURB.get(family))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.neg_()
        other = float(hf_loss(model, *batches[0]).detach())
    what = f"with {PERTURB[family]}" if family in PERTURB else "A_log negated"
    check(abs(other - want) > 1e-3 * want, f"{what}, transformers' loss moves by only {abs(other - want):.1e}")
    print(f"{family}: {what}, transformers' loss {other:.6f} (from {want:.6f})")


if __name__ == "__main__":
    sys.exit(main())
