#!/usr/bin/env python3
"""Writes an mt model file from a Hugging Face config.json.

usage: hf_to_mt.py CONFIG [-o MODEL.mt] [--name NAME] [--finetune] [--no-dropout] [--bias-update GAMMA]

CONFIG is a checkpoint folder or its config.json. transformers' own config
class reads it (so its defaults and its rope_scaling / rope_parameters
conventions apply), and the model is written as the family's example in
examples/ is: the same statements, parameter names (the checkpoint's), init
and train section, so that `mtc --dump-graph` of the two is the same graph.

Families: llama (Llama 2, 3, 3.1, 3.2, 3.3: rope scaling llama3), mistral,
qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, olmo2, gemma2, gemma3_text (and
gemma3's text_config), gpt2, gpt_neox (Pythia), phi3, qwen3_next (Gated DeltaNet
and gated attention layers, dsl/README.md's gated_delta_rule), granitemoehybrid (Granite
4.0-H: Mamba-2 layers, dsl/README.md's ssd, and attention layers; Granite 4.0 Micro),
bamba, smollm3, granite (Granite 3), deepseek_v3, glm4_moe, llama4_text (and llama4's
text_config), gpt_oss: dsl/README.md's section 8 says how each is written. Rope scaling: linear,
llama3, yarn, longrope. What the tool cannot map is refused, naming the
field: an unknown model_type, a config field it does not know for the
family, or a value it cannot express (an attention bias on Llama, a
sequential residual on GPT-NeoX, ...). Fields that change nothing mt
computes are ignored by name (BENIGN); fields that change the function are
honoured (GPT-2's scale_attn_weights, Qwen-MoE's qkv_bias, the MoE families'
output_router_logits: without it, cross entropy alone, as transformers trains)
or refused by name: a dropout above 0 (mt has no dropout, so that a step is
the same bits on every schedule; --no-dropout writes the model without it and
says so in its first line), router_jitter_noise, add_cross_attention,
scale_attn_by_inverse_layer_idx. GPT-2's tensors are named as a saved
GPT2LMHeadModel has them ("transformer.wte.weight"), or without the prefix
where the folder's model.safetensors has them so (the hub's GPT-2).

The model file starts with a comment naming the folder it came from (mtrun
warns when such a model trains from random weights, without --init).
--finetune writes a fine-tuning schedule in place of the pretraining one
and says what it wrote. --bias-update GAMMA (deepseek_v3, glm4_moe: the
families whose router chooses by e_score_correction_bias) writes
DeepSeek-V3's auxiliary-loss-free rule that moves that bias after each step
by GAMMA x sign(mean load - load) (router(..., bias_update = GAMMA);
DeepSeek-V3 trained with 0.001); without it the bias stays as loaded, as
transformers trains it. Exit status 0, or 1 with the reason.
"""
import argparse
import json
import math
import os
import sys

# Fields that never change the function computed (metadata, generation,
# initialisation, the cache, the heads a causal LM does not have), for every
# family. Each is named: a field not here, not in FUNCTION and not mapped by
# its family is refused.
BENIGN = set("""
architectures auto_map bos_token_id eos_token_id pad_token_id torch_dtype dtype transformers_version use_cache
initializer_range model_type max_position_embeddings summary_activation summary_first_dropout summary_proj_to_labels
summary_type summary_use_proj task_specific_params n_ctx classifier_dropout _name_or_path
cache_implementation max_window_layers sliding_window_pattern _sliding_window_pattern use_sliding_window
tokenizer_class reorder_and_upcast_attn id2label label2id bias_dropout_add is_decoder
final_logit_softcapping attn_logit_softcapping rope_scaling rope_theta rope_parameters rope_local_base_freq
partial_rotary_factor rotary_pct rotary_emb_base head_dim pretraining_tp tie_word_embeddings
original_max_position_embeddings sliding_window layer_types use_bidirectional_attention
""".split())
# (reorder_and_upcast_attn: GPT-2's scores in f32, which mt computes them in
# anyway; pretraining_tp: transformers 5 reads it nowhere, and older versions
# split the same matmuls into that many slices, the same function (SmolLM3 says 2); is_decoder: save_pretrained writes false for GPT-NeoX, whose causal
# LM is causal either way; sliding_window_pattern: layer_types says it.)

# Fields that change the function, checked for every family by
# function_fields(): honoured or refused, never dropped.
DROPOUTS = ("attn_pdrop", "embd_pdrop", "resid_pdrop", "attention_dropout", "hidden_dropout")
FUNCTION = set(DROPOUTS) | {"router_jitter_noise", "add_cross_attention"}


def function_fields(raw, no_dropout):
    """Refuses the fields of raw that would change the function in a way mt does
    not compute: a dropout above 0 (mt has no dropout: its steps are the same
    bits on every schedule; --no-dropout trains without it), router jitter and
    cross-attention. Returns the model file's first lines saying what
    --no-dropout left out."""
    dropped = []
    for f in DROPOUTS:
        v = raw.get(f)
        if v:
            need(no_dropout, f, v, f"mt has no dropout; set {f} to 0.0 in config.json, or pass --no-dropout to train "
                                   "without it")
            dropped.append(f"{f} = {v}")
    v = raw.get("router_jitter_noise")
    need(not v, "router_jitter_noise", v, "mt's routers take no random noise; set router_jitter_noise to 0.0")
    v = raw.get("add_cross_attention")
    need(not v, "add_cross_attention", v, "mt writes a decoder-only model, without cross-attention")
    if not dropped:
        return ""
    return f"# hf_to_mt.py --no-dropout: trained without config.json's {', '.join(dropped)}\n"


# The fields each family maps (beside BENIGN ones it checks itself).
# DeepSeek-V3's and GLM-4.5's experts; output_router_logits: transformers adds no auxiliary loss for either;
# aux_loss_alpha and seq_aux (DeepSeek's own code's sequence-wise loss) and ep_size: transformers reads none;
# num_nextn_predict_layers: the multi-token prediction layer, which transformers does not build.
ROUTED = "first_k_dense_replace n_routed_experts n_shared_experts num_experts_per_tok moe_intermediate_size n_group " \
         "topk_group norm_topk_prob routed_scaling_factor output_router_logits scoring_func topk_method moe_layer_freq " \
         "aux_loss_alpha seq_aux ep_size num_nextn_predict_layers quantization_config router_aux_loss_coef"
DECODER = "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads " \
          "rms_norm_eps hidden_act attention_bias mlp_bias"
FIELDS = {
    "llama": DECODER,
    "mistral": DECODER,
    "qwen2": DECODER,
    "qwen3": DECODER,
    "olmo2": DECODER,
    "phi3": DECODER,
    "smollm3": DECODER + " no_rope_layers no_rope_layer_interval",
    "granite": DECODER + " embedding_multiplier residual_multiplier attention_multiplier logits_scaling",
    "mixtral": DECODER + " num_local_experts num_experts_per_tok router_aux_loss_coef output_router_logits",
    "qwen2_moe": DECODER + " num_experts num_experts_per_tok router_aux_loss_coef moe_intermediate_size "
                           "shared_expert_intermediate_size norm_topk_prob decoder_sparse_step mlp_only_layers qkv_bias output_router_logits",
    "qwen3_moe": DECODER + " num_experts num_local_experts num_experts_per_tok router_aux_loss_coef "
                           "moe_intermediate_size norm_topk_prob decoder_sparse_step mlp_only_layers "
                           "output_router_logits",
    "gemma2": DECODER + " hidden_activation query_pre_attn_scalar",
    "gemma3_text": DECODER + " hidden_activation query_pre_attn_scalar",
    "gpt2": "vocab_size n_positions n_embd n_layer n_head n_inner activation_function layer_norm_epsilon "
            "scale_attn_weights scale_attn_by_inverse_layer_idx",
    "gpt_neox": "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads hidden_act "
                "layer_norm_eps use_parallel_residual attention_bias",
    "qwen3_next": DECODER + " num_experts num_experts_per_tok router_aux_loss_coef moe_intermediate_size "
                            "shared_expert_intermediate_size norm_topk_prob decoder_sparse_step mlp_only_layers "
                            "linear_conv_kernel_dim linear_key_head_dim linear_value_head_dim linear_num_key_heads "
                            "linear_num_value_heads full_attention_interval output_router_logits",
    "granitemoehybrid": DECODER + " num_local_experts num_experts_per_tok router_aux_loss_coef "
                                  "shared_intermediate_size embedding_multiplier logits_scaling residual_multiplier "
                                  "attention_multiplier position_embedding_type mamba_n_heads mamba_n_groups "
                                  "mamba_d_state mamba_d_head mamba_d_conv mamba_expand mamba_chunk_size "
                                  "mamba_conv_bias mamba_proj_bias time_step_limit normalization_function init_method "
                                  "output_router_logits",
    "deepseek_v3": "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
                   "rms_norm_eps hidden_act attention_bias q_lora_rank kv_lora_rank qk_nope_head_dim qk_rope_head_dim "
                   "v_head_dim qk_head_dim rope_interleave " + ROUTED,
    "glm4_moe": DECODER + " use_qk_norm " + ROUTED,
    # Llama 4: router_aux_loss_coef and output_router_logits: transformers adds no auxiliary loss for it;
    # for_llm_compressor: a flag of Meta's quantization tooling, read by no model code
    "llama4_text": DECODER + " for_llm_compressor num_local_experts num_experts_per_tok intermediate_size_mlp moe_layers "
                             "interleave_moe_layer_step use_qk_norm no_rope_layers no_rope_layer_interval "
                             "attention_chunk_size attn_temperature_tuning floor_scale attn_scale "
                             "router_aux_loss_coef output_router_logits",
    # gpt-oss: experts_per_token (num_experts_per_tok's copy) and initial_context_length (yarn's original context,
    # which rope_scaling says) are read by no transformers code
    "gpt_oss": DECODER + " num_local_experts num_experts_per_tok router_aux_loss_coef output_router_logits "
                         "swiglu_alpha swiglu_limit quantization_config experts_per_token initial_context_length",
    "bamba": DECODER + " attn_layer_indices mamba_n_heads mamba_n_groups mamba_d_state mamba_d_head mamba_d_conv "
                       "mamba_expand mamba_chunk_size mamba_conv_bias mamba_proj_bias time_step_limit z_loss_coefficient "
                       "num_logits_to_keep",
}


class Refused(Exception):
    pass


def num(v):
    """A config value as the language writes it."""
    if isinstance(v, bool):
        raise Refused(f"a boolean {v} where a number belongs")
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


class Writer:
    def __init__(self, name, comment):
        self.name, self.comment = name, comment
        self.config = []  # (name, value text, comment)

    def const(self, name, value, comment=""):
        self.config.append((name, value, comment))

    def config_text(self):
        out = ["config {"]
        for n, v, c in self.config:
            line = f"  {n} = {v}"
            out.append(f"{line:<22} # {c}" if c else line)
        out.append("}")
        return "\n".join(out)


def train(seq):
    """The train section: bf16, a sequence of the checkpoint's context up to 8192."""
    return TRAIN.replace("seq = 8192", f"seq = {min(8192, seq or 8192)}")


TRAIN = """train {
  dtype = bf16
  batch = 1
  seq = 8192
  optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 2000, min_lr = 0.1)
  clip = 1.0
  steps = 10000
}"""


def get(cfg, raw, field, default=None):
    v = getattr(cfg, field, None)
    return default if v is None else v


def need(cond, field, value, why):
    if not cond:
        raise Refused(f"field {field} = {json.dumps(value)}: {why}")


# ---------------------------------------------------------------- rope

def rope_rule(w, rp, prefix, head_width, max_positions=None):
    """The config constants and the rope keyword text of one rope_parameters dict
    (max_positions: the config's max_position_embeddings, which yarn and
    longrope take as factor * original_max_position_embeddings when factor is unset)."""
    kind = rp.get("rope_type", rp.get("type", "default"))
    theta = rp.get("rope_theta", 10000.0)
    tname = "theta" if not prefix else f"{prefix}_theta"
    w.const(tname, num(float(theta)), "rope_theta")
    kw = f"theta = {tname}"
    known = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    p = (prefix + "_") if prefix else ""
    if kind == "default":
        pass
    elif kind == "linear":
        w.const(f"{p}rope_factor", num(float(rp["factor"])), "rope_scaling (rope_type linear): factor")
        kw += f", scaling = linear, factor = {p}rope_factor"
        known |= {"factor"}
    elif kind == "llama3":
        w.const(f"{p}rope_factor", num(float(rp["factor"])), "rope_scaling (rope_type llama3): factor")
        w.const(f"{p}rope_low", num(float(rp["low_freq_factor"])), "low_freq_factor")
        w.const(f"{p}rope_high", num(float(rp["high_freq_factor"])), "high_freq_factor")
        w.const(f"{p}rope_context", num(rp["original_max_position_embeddings"]), "original_max_position_embeddings")
        kw += (f", scaling = llama3, factor = {p}rope_factor,\n           low_freq_factor = {p}rope_low, "
               f"high_freq_factor = {p}rope_high, original_max_position_embeddings = {p}rope_context")
        known |= {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
    elif kind == "yarn":
        kw += ", scaling = yarn"
        for f in ["factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                  "attention_factor"]:
            if rp.get(f) is not None:
                kw += f", {f} = {num(rp[f])}"
        if rp.get("factor") is None and max_positions:
            kw += f", max_position_embeddings = {num(max_positions)}"
        if rp.get("truncate") is False:
            kw += ", truncate = false"
        known |= {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                  "attention_factor", "truncate"}
    elif kind == "longrope":
        kw += ", scaling = longrope"
        for f in ["factor", "original_max_position_embeddings", "attention_factor"]:
            if rp.get(f) is not None:
                kw += f", {f} = {num(rp[f])}"
        if rp.get("factor") is None and max_positions:
            kw += f", max_position_embeddings = {num(max_positions)}"
        for f in ["short_factor", "long_factor"]:
            need(len(rp[f]) == head_width // 2, f"rope_scaling.{f}", f"{len(rp[f])} factors",
                 f"needs one per rotated pair ({head_width // 2})")
            kw += f",\n           {f} = [" + ", ".join(num(float(x)) for x in rp[f]) + "]"
        known |= {"factor", "original_max_position_embeddings", "attention_factor", "short_factor", "long_factor",
                  "max_position_embeddings"}
    else:
        raise Refused(f"field rope_scaling.rope_type = {json.dumps(kind)}: mt's rope has linear, llama3, yarn and "
                      "longrope scaling")
    for f, v in rp.items():
        need(f in known or v is None, f"rope_scaling.{f}", v, f"not a field of rope_type {kind} that mt maps")
    return kw


# ---------------------------------------------------------------- families

def check_fields(mt, raw, extra=()):
    allowed = set(FIELDS[mt].split()) | BENIGN | FUNCTION | set(extra)
    for f, v in raw.items():
        need(f in allowed, f, v, f"not a field hf_to_mt.py maps for model_type {mt}")


def act(cfg, field, want, words):
    v = getattr(cfg, field, None)
    need(v in want, field, v, f"mt writes {words}")


def decoder_sizes(w, cfg, heads_kv=True):
    C, NH = cfg.hidden_size, cfg.num_attention_heads
    NKV = cfg.num_key_value_heads or NH
    HS = getattr(cfg, "head_dim", None) or C // NH
    w.const("V", cfg.vocab_size, "vocabulary")
    w.const("C", C, "width")
    w.const("L", cfg.num_hidden_layers, "layers")
    w.const("NH", NH, "query heads")
    if heads_kv:
        w.const("NKV", NKV, "key/value heads (grouped-query attention)")
    w.const("HS", "C / NH" if HS * NH == C else HS, "head width" if HS * NH == C else "head width (head_dim)")
    return C, NH, NKV, HS


RESID = "init = normal(std = 0.02 / sqrt(2 * L))"


def padding(cfg):
    """embed's padding_idx: transformers' decoders build their embedding with
    padding_idx = config.pad_token_id (its class's default where config.json
    has none: 0 for Gemma), so that row gets no gradient from the lookup."""
    pad = getattr(cfg, "pad_token_id", None)
    return f", padding_idx = {pad}" if isinstance(pad, int) and pad >= 0 else ""


def attention_params(P, qd, kd, bias=False, head_norms=False, gain=""):
    """A decoder layer's attention weights as the checkpoints name them: q, k, v (and their biases), o, and
    Qwen3's and Gemma 3's per-head q/k norm gains (gain: their init, Gemma's zeros)."""
    for x, d in (("q", qd), ("k", kd), ("v", kd)):
        P(f'param w{x} "self_attn.{x}_proj.weight" [{d}, C]')
        if bias:
            P(f'param b{x} "self_attn.{x}_proj.bias" [{d}]')
    P(f'param wo "self_attn.o_proj.weight" [C, {qd}] {RESID}')
    if head_norms:
        P(f'param q_norm "self_attn.q_norm.weight" [HS]{gain}')
        P(f'param k_norm "self_attn.k_norm.weight" [HS]{gain}')


def mlp_params(P):
    """A decoder layer's gated MLP weights (SwiGLU, GeGLU)."""
    P('param w_gate "mlp.gate_proj.weight" [FFN, C]')
    P('param w_up "mlp.up_proj.weight" [FFN, C]')
    P(f'param w_down "mlp.down_proj.weight" [C, FFN] {RESID}')


def head_norm(x, heads, gain):
    """x [B, T, heads * HS] with each head's HS features normalised (rmsnorm with gain)."""
    return f"reshape(rmsnorm(reshape({x}, [B, T, {heads}, HS]), {gain}, eps = eps), [B, T, {heads} * HS])"


def llama_like(mt, cfg, raw, name):
    """llama, mistral, qwen2, qwen3, olmo2, phi3, smollm3 (NoPE layers: a second block kind without rope), granite
    (Granite 3: muP's multipliers), and the MoE ones (mixtral, qwen2_moe, qwen3_moe)."""
    check_fields(mt, raw)
    act(cfg, "hidden_act", ("silu",), "SwiGLU (hidden_act silu)")
    need(not getattr(cfg, "mlp_bias", False), "mlp_bias", True, "mt writes bias-free MLPs for this family")
    bias = mt == "qwen2" or (mt == "qwen2_moe" and cfg.qkv_bias) or bool(getattr(cfg, "attention_bias", False))
    need(not (bias and mt in ("llama", "mistral", "olmo2", "phi3", "mixtral", "qwen3", "qwen3_moe", "smollm3",
                              "granite")),
         "attention_bias", True, "not mapped for this family")
    moe = mt in ("mixtral", "qwen2_moe", "qwen3_moe")
    if mt in ("qwen2_moe", "qwen3_moe"):
        need(getattr(cfg, "decoder_sparse_step", 1) == 1, "decoder_sparse_step", cfg.decoder_sparse_step,
             "mt writes every layer sparse")
        need(not getattr(cfg, "mlp_only_layers", []), "mlp_only_layers", cfg.mlp_only_layers, "mt writes every layer sparse")
    window = None
    if mt in ("mistral", "mixtral", "phi3"):
        window = getattr(cfg, "sliding_window", None)
    if mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "smollm3") and getattr(cfg, "use_sliding_window", False):
        raise Refused(f"field use_sliding_window = true: the window on only some layers (max_window_layers) is not mapped")
    # SmolLM3's no_rope_layers: 1 = the layer ropes its queries and keys, 0 = it does not (NoPE)
    ropes = [bool(r) for r in cfg.no_rope_layers] if mt == "smollm3" else [True] * cfg.num_hidden_layers
    need(len(ropes) == cfg.num_hidden_layers, "no_rope_layers", getattr(cfg, "no_rope_layers", None),
         f"needs one entry a layer ({cfg.num_hidden_layers})")
    w = Writer(name, "")
    # Qwen-MoE's example writes plain multi-head attention when the key/value heads are the query heads
    gqa = not (mt == "qwen2_moe" and cfg.num_key_value_heads in (None, cfg.num_attention_heads))
    C, NH, NKV, HS = decoder_sizes(w, cfg, heads_kv=gqa)
    if moe:
        if mt == "mixtral":
            w.const("E", cfg.num_local_experts, "num_local_experts")
        else:
            w.const("E", cfg.num_experts, "num_experts")
        w.const("K", cfg.num_experts_per_tok, "num_experts_per_tok")
        if mt == "mixtral":
            w.const("FFN", cfg.intermediate_size, "each expert's SwiGLU hidden width")
        else:
            w.const("FFN", cfg.moe_intermediate_size, "moe_intermediate_size")
        if mt == "qwen2_moe":
            w.const("SFFN", cfg.shared_expert_intermediate_size, "shared_expert_intermediate_size")
        if router_loss(cfg):
            w.const("aux", num(float(cfg.router_aux_loss_coef)), "router_aux_loss_coef")
    else:
        w.const("FFN", cfg.intermediate_size, "SwiGLU hidden width")
    if mt == "granite":
        mup_consts(w, cfg)
    rp = dict(cfg.rope_parameters or {})
    prf = rp.get("partial_rotary_factor", 1.0)
    need(prf in (1, 1.0, None), "partial_rotary_factor", prf, "not mapped for this family")
    rope_kw = rope_rule(w, rp, "", HS, getattr(cfg, "max_position_embeddings", None))
    if window:
        w.const("W", window, "sliding_window")
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    tied = bool(cfg.tie_word_embeddings)
    L = []
    L.append(f"model {name}\n")
    L.append(w.config_text() + "\n")
    L.append('param tok_emb "model.embed_tokens.weight" [V, C]')
    L.append('param norm "model.norm.weight" [C]')
    if not tied:
        L.append('param lm_head "lm_head.weight" [V, C]')
    L.append("")
    spec = dict(mt=mt, cfg=cfg, gqa=gqa, bias=bias, moe=moe, window=window, rope_kw=rope_kw, HS=HS, NH=NH, C=C)
    if all(ropes):
        llama_block(L, 'layers[L] "model.layers.{i}."', True, **spec)
    else:
        llama_block(L, 'roped "model.layers.{i}."', True, **spec)
        llama_block(L, 'unroped "model.layers.{i}."', False, **spec)
        kinds = ["roped" if r else "unroped" for r in ropes]
        L.append(f"block layers[L] = {layer_order(kinds, 'no_rope_layers', cfg.no_rope_layers)}\n")
    P = lambda s: L.append("  " + s)
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    emb, logs = (" * EMB", " / LOGS") if mt == "granite" else ("", "")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)}){emb}) # all L layers, streamed")
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}){logs}, "
      "targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


def mup_consts(w, cfg):
    """Granite's muP multipliers as config constants."""
    w.const("EMB", num(float(cfg.embedding_multiplier)), "embedding_multiplier")
    w.const("RES", num(float(cfg.residual_multiplier)), "residual_multiplier")
    w.const("ATT", num(float(cfg.attention_multiplier)), "attention_multiplier: scores are q.k x ATT")
    w.const("LOGS", num(float(cfg.logits_scaling)), "logits_scaling: logits divided by it")


def llama_block(L, header, use_rope, mt, cfg, gqa, bias, moe, window, rope_kw, HS, NH, C):
    """One block of llama_like's families (use_rope false: SmolLM3's NoPE layers), appended to L."""
    qk_head_norm = mt in ("qwen3", "qwen3_moe")
    qk_full_norm = mt == "olmo2"
    kvh = "NKV" if gqa else "NH"
    L.append(f"block {header} (x: [B, T, C]) -> [B, T, C] {{")
    P = lambda s: L.append("  " + s)
    if mt != "olmo2":
        P('param attn_norm "input_layernorm.weight" [C]')
    qd, kd = ("NH * HS", f"{kvh} * HS") if (gqa or HS * NH != C) else ("C", "C")
    if mt == "phi3":
        P('param wqkv "self_attn.qkv_proj.weight" [(NH + 2 * NKV) * HS, C]')
        P(f'param wo "self_attn.o_proj.weight" [C, {qd}] {RESID}')
    else:
        attention_params(P, qd, kd, bias, qk_head_norm)
    if qk_full_norm:
        P('param q_norm "self_attn.q_norm.weight" [NH * HS]')
        P('param k_norm "self_attn.k_norm.weight" [NKV * HS]')
    if mt == "olmo2":
        P('param post_attn_norm "post_attention_layernorm.weight" [C]')
        P('param post_ffn_norm "post_feedforward_layernorm.weight" [C]')
    elif moe:
        P('param moe_norm "post_attention_layernorm.weight" [C]')
    else:
        P('param mlp_norm "post_attention_layernorm.weight" [C]')
    if mt == "mixtral":
        P('param router "block_sparse_moe.gate.weight" [E, C]')
        P('param w_gate[E] "block_sparse_moe.experts.{e}.w1.weight" [FFN, C]')
        P('param w_up[E] "block_sparse_moe.experts.{e}.w3.weight" [FFN, C]')
        P(f'param w_down[E] "block_sparse_moe.experts.{{e}}.w2.weight" [C, FFN] {RESID}')
    elif moe:
        P('param router "mlp.gate.weight" [E, C]')
        P('param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [FFN, C]')
        P('param w_up[E] "mlp.experts.{e}.up_proj.weight" [FFN, C]')
        P(f'param w_down[E] "mlp.experts.{{e}}.down_proj.weight" [C, FFN] {RESID}')
        if mt == "qwen2_moe":
            P('param s_gate "mlp.shared_expert.gate_proj.weight" [SFFN, C]')
            P('param s_up "mlp.shared_expert.up_proj.weight" [SFFN, C]')
            P(f'param s_down "mlp.shared_expert.down_proj.weight" [C, SFFN] {RESID}')
            P('param s_scale "mlp.shared_expert_gate.weight" [1, C]')
    elif mt == "phi3":
        P('param w_gate_up "mlp.gate_up_proj.weight" [2 * FFN, C]')
        P(f'param w_down "mlp.down_proj.weight" [C, FFN] {RESID}')
    else:
        mlp_params(P)
    L.append("")
    h = "x" if mt == "olmo2" else "a"
    if mt != "olmo2":
        P("a = rmsnorm(x, attn_norm, eps = eps)")
    b = lambda s: f" + b{s}" if bias else ""
    if mt == "phi3":
        P(f"q, k, v = split({h} @ transpose(wqkv), [NH * HS, NKV * HS, NKV * HS])")
        qx, kx = "q", "k"
    else:
        qx, kx = f"{h} @ transpose(wq){b('q')}", f"{h} @ transpose(wk){b('k')}"
    if qk_head_norm:
        qx, kx = head_norm(qx, "NH", "q_norm"), head_norm(kx, kvh, "k_norm")
    if qk_full_norm:
        qx, kx = f"rmsnorm({qx}, q_norm, eps = eps)", f"rmsnorm({kx}, k_norm, eps = eps)"
    if use_rope:
        P(f"q = rope({qx}, heads = NH, {rope_kw})")
        P(f"k = rope({kx}, heads = {kvh}, {rope_kw})")
    else:
        P(f"q = {qx} # no rope in this layer (no_rope_layers: 0)")
        P(f"k = {kx}")
    if mt != "phi3":
        P(f"v = {h} @ transpose(wv){b('v')}")
    att = f"attention(q, k, v, heads = NH" + (f", kv_heads = {kvh}" if gqa else "") + ", causal = true" + \
          (", window = W" if window else "") + (", scale = ATT" if mt == "granite" else "") + ")"
    res = (lambda e: f"RES * ({e})") if mt == "granite" else (lambda e: e)
    if mt == "olmo2":
        P(f"x = x + rmsnorm({att} @ transpose(wo), post_attn_norm, eps = eps)")
        P("return x + rmsnorm(swiglu(x @ transpose(w_gate), x @ transpose(w_up)) @ transpose(w_down), post_ffn_norm, "
          "eps = eps)")
    else:
        P(f"x = x + {res(f'{att} @ transpose(wo)')}")
        if moe:
            P("m = rmsnorm(x, moe_norm, eps = eps)")
            P("logits = m @ transpose(router)")
            if mt == "mixtral":
                P("gates = router(logits, top_k = K, softmax = after)")
            elif getattr(cfg, "norm_topk_prob", False):
                P("gates = router(logits, top_k = K, softmax = before, normalize = true)")
            else:
                P("gates = router(logits, top_k = K, softmax = before)")
            if mt == "qwen2_moe":
                P("shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)")
                P("x = x + moe(m, gates, w_gate, w_up, w_down) + sigmoid(m @ transpose(s_scale)) * shared")
            else:
                P("x = x + moe(m, gates, w_gate, w_up, w_down)")
            if router_loss(cfg):
                P("return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))")
            else:  # transformers trains on cross entropy alone then
                P("return x # output_router_logits = false: no load-balancing loss, as transformers trains")
        else:
            P("m = rmsnorm(x, mlp_norm, eps = eps)")
            if mt == "phi3":
                P("gate, up = split(m @ transpose(w_gate_up), 2)")
                P("return x + swiglu(gate, up) @ transpose(w_down)")
            else:
                P(f"return x + {res('swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)')}")
    L.append("}\n")


def router_loss(cfg):
    """Whether the model adds the router's load-balancing loss: transformers adds
    router_aux_loss_coef times it to the loss only when output_router_logits is
    set (and the coefficient is not 0)."""
    return bool(getattr(cfg, "output_router_logits", False)) and bool(cfg.router_aux_loss_coef)


def gemma(mt, cfg, raw, name):
    """gemma2 and gemma3_text: local (sliding) and global layers as two block kinds."""
    check_fields(mt, raw)
    act(cfg, "hidden_activation", ("gelu_pytorch_tanh",), "GeGLU with the tanh GELU (gelu_pytorch_tanh)")
    need(not getattr(cfg, "attention_bias", False), "attention_bias", True, "not mapped for Gemma")
    need(not getattr(cfg, "use_bidirectional_attention", False), "use_bidirectional_attention", True,
         "mt's Gemma is causal")
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    w.const("FFN", cfg.intermediate_size, "GeGLU hidden width")
    w.const("QS", cfg.query_pre_attn_scalar, "query_pre_attn_scalar: scores are q.k / sqrt(QS)")
    w.const("W", cfg.sliding_window, "sliding_window of the local layers")
    acap, fcap = getattr(cfg, "attn_logit_softcapping", None), getattr(cfg, "final_logit_softcapping", None)
    if acap:
        w.const("ACAP", num(float(acap)), "attn_logit_softcapping")
    if fcap:
        w.const("FCAP", num(float(fcap)), "final_logit_softcapping")
    types = list(cfg.layer_types)
    rp = cfg.rope_parameters or {}
    if mt == "gemma3_text":
        local_kw = rope_rule(w, dict(rp["sliding_attention"]), "local", HS)
        global_kw = rope_rule(w, dict(rp["full_attention"]), "", HS)
    else:
        local_kw = global_kw = rope_rule(w, dict(rp), "", HS)
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    need(bool(cfg.tie_word_embeddings), "tie_word_embeddings", False, "mt's Gemma ties its LM head")
    L = [f"model {name}\n", w.config_text() + "\n", 'param tok_emb "model.embed_tokens.weight" [V, C]',
         'param norm "model.norm.weight" [C] init = zeros', ""]
    for kind, kw in (("local", local_kw), ("global", global_kw)):
        L.append(f'block {kind} "model.layers.{{i}}." (x: [B, T, C]) -> [B, T, C] {{')
        P = lambda s: L.append("  " + s)
        P('param attn_norm "input_layernorm.weight" [C] init = zeros')
        attention_params(P, "NH * HS", "NKV * HS", head_norms=mt == "gemma3_text", gain=" init = zeros")
        P('param post_attn_norm "post_attention_layernorm.weight" [C] init = zeros')
        P('param ffn_norm "pre_feedforward_layernorm.weight" [C] init = zeros')
        P('param post_ffn_norm "post_feedforward_layernorm.weight" [C] init = zeros')
        mlp_params(P)
        L.append("")
        P("a = rmsnorm(x, 1 + attn_norm, eps = eps)")
        qx, kx = "a @ transpose(wq)", "a @ transpose(wk)"
        if mt == "gemma3_text":
            qx, kx = head_norm(qx, "NH", "1 + q_norm"), head_norm(kx, "NKV", "1 + k_norm")
        P(f"q = rope({qx}, heads = NH, {kw})")
        P(f"k = rope({kx}, heads = NKV, {kw})")
        P("v = a @ transpose(wv)")
        opts = (", window = W" if kind == "local" else "") + ", scale = 1 / sqrt(QS)" + (", softcap = ACAP" if acap else "")
        P(f"o = attention(q, k, v, heads = NH, kv_heads = NKV{opts}) @ transpose(wo)")
        P("x = x + rmsnorm(o, 1 + post_attn_norm, eps = eps)")
        P("m = rmsnorm(x, 1 + ffn_norm, eps = eps)")
        P("f = (gelu(m @ transpose(w_gate), approximate = tanh) * (m @ transpose(w_up))) @ transpose(w_down)")
        P("return x + rmsnorm(f, 1 + post_ffn_norm, eps = eps)")
        L.append("}\n")
    kinds = ["local" if t == "sliding_attention" else "global" for t in types]
    for t in types:
        need(t in ("sliding_attention", "full_attention"), "layer_types", t, "mt maps sliding_attention and full_attention")
    L.append(f"block layers[L] = {layer_order(kinds, 'layer_types', types)}\n")
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P = lambda s: L.append("  " + s)
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)}) * sqrt(C)) # all L layers, streamed by kind")
    if fcap:
        P("logits = rmsnorm(x, 1 + norm, eps = eps) @ transpose(tok_emb) # tied LM head")
        P("return cross_entropy(FCAP * tanh(logits / FCAP), targets)     # final soft-capping")
    else:
        P("return cross_entropy(rmsnorm(x, 1 + norm, eps = eps) @ transpose(tok_emb), targets) # tied LM head")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


def gpt2_prefix(folder):
    """The prefix of GPT-2's tensor names: "transformer." as a saved
    GPT2LMHeadModel names them, or none where the checkpoint beside the config
    (folder's model.safetensors) names them without it, as the hub's
    openai-community/gpt2 does."""
    try:
        with open(os.path.join(folder or "", "model.safetensors"), "rb") as f:
            names = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    except (OSError, ValueError, TypeError):
        return "transformer."
    return "" if "wte.weight" in names else "transformer."


def gpt2(mt, cfg, raw, name, folder=None):
    check_fields(mt, raw)
    act(cfg, "activation_function", ("gelu_new",), "GPT-2's tanh GELU (gelu_new)")
    need(not cfg.scale_attn_by_inverse_layer_idx, "scale_attn_by_inverse_layer_idx", True,
         "mt's layers share one attention scale (no per-layer 1 / (layer + 1))")
    scale = "" if cfg.scale_attn_weights else ", scale = 1" # scale_attn_weights = false: q.k unscaled
    pre = gpt2_prefix(folder)
    need(cfg.n_inner in (None, 4 * cfg.n_embd), "n_inner", cfg.n_inner, "mt writes the MLP 4 C wide")
    need(bool(cfg.tie_word_embeddings), "tie_word_embeddings", False, "mt's GPT-2 ties its LM head")
    w = Writer(name, "")
    w.const("V", cfg.vocab_size, "vocabulary")
    w.const("ctx", cfg.n_positions, "context length (rows of the position table)")
    w.const("C", cfg.n_embd, "width")
    w.const("NH", cfg.n_head, "attention heads")
    w.const("L", cfg.n_layer, "layers")
    w.const("eps", num(float(cfg.layer_norm_epsilon)), "layer_norm_epsilon")
    body = f"""model {name}

{w.config_text()}

param wte "{pre}wte.weight" [V, C]
param wpe "{pre}wpe.weight" [ctx, C] init = normal(std = 0.01)
param lnf_g "{pre}ln_f.weight" [C]
param lnf_b "{pre}ln_f.bias" [C]

block h[L] "{pre}h.{{i}}." (x: [B, T, C]) -> [B, T, C] {{
  param ln1_g "ln_1.weight" [C]
  param ln1_b "ln_1.bias" [C]
  param attn_w "attn.c_attn.weight" [C, 3 * C]
  param attn_b "attn.c_attn.bias" [3 * C]
  param proj_w "attn.c_proj.weight" [C, C] {RESID}
  param proj_b "attn.c_proj.bias" [C]
  param ln2_g "ln_2.weight" [C]
  param ln2_b "ln_2.bias" [C]
  param fc_w "mlp.c_fc.weight" [C, 4 * C]
  param fc_b "mlp.c_fc.bias" [4 * C]
  param fcp_w "mlp.c_proj.weight" [4 * C, C] {RESID}
  param fcp_b "mlp.c_proj.bias" [C]

  q, k, v = split(layernorm(x, ln1_g, ln1_b, eps = eps) @ attn_w + attn_b, 3, axis = -1)
  x = x + attention(q, k, v, heads = NH, causal = true{scale}) @ proj_w + proj_b
  m = gelu(layernorm(x, ln2_g, ln2_b, eps = eps) @ fc_w + fc_b)
  return x + m @ fcp_w + fcp_b
}}

forward(tokens: i32[B, T], targets: i32[B, T]) {{
  x = h(embed(wte, tokens) + embed(wpe, arange(T))) # all L layers, streamed
  logits = layernorm(x, lnf_g, lnf_b, eps = eps) @ transpose(wte) # tied LM head
  return cross_entropy(logits, targets)
}}

{train(cfg.n_positions)}
"""
    return body


def gpt_neox(mt, cfg, raw, name):
    check_fields(mt, raw)
    act(cfg, "hidden_act", ("gelu",), "the exact GELU (hidden_act gelu)")
    need(bool(cfg.use_parallel_residual), "use_parallel_residual", False, "mt writes GPT-NeoX's parallel residual")
    need(getattr(cfg, "attention_bias", True), "attention_bias", False, "mt writes GPT-NeoX with q/k/v biases")
    need(not cfg.tie_word_embeddings, "tie_word_embeddings", True, "mt writes GPT-NeoX's LM head untied")
    rp = dict(cfg.rope_parameters or {})
    pct = rp.pop("partial_rotary_factor", 1.0)
    w = Writer(name, "")
    C, NH = cfg.hidden_size, cfg.num_attention_heads
    HS = C // NH
    rot = int(HS * pct)
    w.const("V", cfg.vocab_size, "vocabulary")
    w.const("C", C, "width")
    w.const("L", cfg.num_hidden_layers, "layers")
    w.const("NH", NH, "heads")
    w.const("HS", "C / NH", "head width")
    frac = HS // rot if rot and HS % rot == 0 else None
    w.const("ROT", f"HS / {frac}" if frac else rot, f"rotary width: rotary_pct {pct}")
    w.const("FFN", "4 * C" if cfg.intermediate_size == 4 * C else cfg.intermediate_size, "MLP hidden width")
    rope_kw = rope_rule(w, rp, "", rot)
    w.const("eps", num(float(cfg.layer_norm_eps)), "layer_norm_eps")
    return f"""model {name}

{w.config_text()}

param tok_emb "gpt_neox.embed_in.weight" [V, C]
param lnf_g "gpt_neox.final_layer_norm.weight" [C]
param lnf_b "gpt_neox.final_layer_norm.bias" [C]
param head_w "embed_out.weight" [V, C]

block layers[L] "gpt_neox.layers.{{i}}." (x: [B, T, C]) -> [B, T, C] {{
  param ln1_g "input_layernorm.weight" [C]
  param ln1_b "input_layernorm.bias" [C]
  param ln2_g "post_attention_layernorm.weight" [C]
  param ln2_b "post_attention_layernorm.bias" [C]
  param wqkv "attention.query_key_value.weight" [3 * C, C]
  param bqkv "attention.query_key_value.bias" [3 * C]
  param wo "attention.dense.weight" [C, C] {RESID}
  param bo "attention.dense.bias" [C]
  param w1 "mlp.dense_h_to_4h.weight" [FFN, C]
  param b1 "mlp.dense_h_to_4h.bias" [FFN]
  param w2 "mlp.dense_4h_to_h.weight" [C, FFN] {RESID}
  param b2 "mlp.dense_4h_to_h.bias" [C]

  h = layernorm(x, ln1_g, ln1_b, eps = eps)
  # [q_h | k_h | v_h] per head
  q, k, v = split(reshape(h @ transpose(wqkv) + bqkv, [B, T, NH, 3 * HS]), 3, axis = -1)
  # rotate the first ROT features of each head, pass the rest through
  q_rot, q_pass = split(q, [ROT, HS - ROT])
  k_rot, k_pass = split(k, [ROT, HS - ROT])
  q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, {rope_kw}), [B, T, NH, ROT])
  k_rot = reshape(rope(reshape(k_rot, [B, T, NH * ROT]), heads = NH, {rope_kw}), [B, T, NH, ROT])
  q = reshape(concat(q_rot, q_pass), [B, T, C])
  k = reshape(concat(k_rot, k_pass), [B, T, C])
  a = attention(q, k, reshape(v, [B, T, C]), heads = NH) @ transpose(wo) + bo
  m = gelu(layernorm(x, ln2_g, ln2_b, eps = eps) @ transpose(w1) + b1, approximate = none) @ transpose(w2) + b2
  return x + a + m
}}

forward(tokens: i32[B, T], targets: i32[B, T]) {{
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
  return cross_entropy(layernorm(x, lnf_g, lnf_b, eps = eps) @ transpose(head_w), targets)
}}

{train(cfg.max_position_embeddings)}
"""


def layer_order(kinds, field, value):
    """kinds_order of a family written with exactly two kinds of layer."""
    need(len(set(kinds)) == 2, field, value, "mt writes this family with both kinds of layer")
    return kinds_order(kinds)


def qwen_next_moe(P, cfg):
    """Qwen3-Next's sparse MLP: softmax router, top K renormalised, a shared expert with a sigmoid gate, the pooled
    load-balancing loss (where router_loss says transformers adds it)."""
    P('param router "mlp.gate.weight" [E, C]')
    P('param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [FFN, C]')
    P('param w_up[E] "mlp.experts.{e}.up_proj.weight" [FFN, C]')
    P(f'param w_down[E] "mlp.experts.{{e}}.down_proj.weight" [C, FFN] {RESID}')
    P('param s_gate "mlp.shared_expert.gate_proj.weight" [SFFN, C]')
    P('param s_up "mlp.shared_expert.up_proj.weight" [SFFN, C]')
    P(f'param s_down "mlp.shared_expert.down_proj.weight" [C, SFFN] {RESID}')
    P('param s_scale "mlp.shared_expert_gate.weight" [1, C]')
    return ["m = rmsnorm(x, 1 + moe_norm, eps = eps)",
            "logits = m @ transpose(router)",
            "gates = router(logits, top_k = K, softmax = before{})",
            "shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)",
            "x = x + moe(m, gates, w_gate, w_up, w_down) + sigmoid(m @ transpose(s_scale)) * shared",
            "return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))" if router_loss(cfg) else
            "return x # output_router_logits = false: no load-balancing loss, as transformers trains"]


def qwen3_next(mt, cfg, raw, name):
    """Qwen3-Next: Gated DeltaNet layers (linear) and gated attention layers (full), each with the sparse MLP."""
    check_fields(mt, raw)
    act(cfg, "hidden_act", ("silu",), "SwiGLU and the convolution's silu (hidden_act silu)")
    need(not getattr(cfg, "attention_bias", False), "attention_bias", True, "not mapped for Qwen3-Next")
    need(getattr(cfg, "decoder_sparse_step", 1) == 1, "decoder_sparse_step", cfg.decoder_sparse_step,
         "mt writes every layer sparse")
    need(not cfg.mlp_only_layers, "mlp_only_layers", cfg.mlp_only_layers, "mt writes every layer sparse")
    need(cfg.num_experts > 0, "num_experts", cfg.num_experts, "mt writes every layer sparse")
    need(not cfg.tie_word_embeddings, "tie_word_embeddings", True, "mt writes Qwen3-Next's LM head untied")
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    rp = dict(cfg.rope_parameters or {})
    pct = rp.pop("partial_rotary_factor", 1.0)
    rot = int(HS * pct)
    frac = HS // rot if rot and HS % rot == 0 else None
    w.const("ROT", f"HS / {frac}" if frac else rot, f"rotary width: partial_rotary_factor {pct}")
    KH, VH = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    need(VH % KH == 0, "linear_num_value_heads", VH, f"not a multiple of linear_num_key_heads {KH}")
    w.const("KH", KH, "linear_num_key_heads")
    w.const("VH", VH, "linear_num_value_heads")
    w.const("KD", cfg.linear_key_head_dim, "linear_key_head_dim")
    w.const("VD", cfg.linear_value_head_dim, "linear_value_head_dim")
    w.const("R", "VH / KH", "value heads a key head serves")
    w.const("KC", cfg.linear_conv_kernel_dim, "linear_conv_kernel_dim")
    w.const("E", cfg.num_experts, "num_experts")
    w.const("K", cfg.num_experts_per_tok, "num_experts_per_tok")
    w.const("FFN", cfg.moe_intermediate_size, "moe_intermediate_size")
    w.const("SFFN", cfg.shared_expert_intermediate_size, "shared_expert_intermediate_size")
    if router_loss(cfg):
        w.const("aux", num(float(cfg.router_aux_loss_coef)), "router_aux_loss_coef")
    rope_kw = rope_rule(w, rp, "", rot)
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    norm = ", normalize = true" if cfg.norm_topk_prob else ""
    L = [f"model {name}\n", w.config_text() + "\n", 'param tok_emb "model.embed_tokens.weight" [V, C]',
         'param norm "model.norm.weight" [C] init = zeros', 'param lm_head "lm_head.weight" [V, C]', ""]
    P = lambda s: L.append("  " + s)
    L.append('block linear "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
    P('param attn_norm "input_layernorm.weight" [C] init = zeros')
    P('param moe_norm "post_attention_layernorm.weight" [C] init = zeros')
    P('param w_qkvz "linear_attn.in_proj_qkvz.weight" [2 * KH * KD + 2 * VH * VD, C]')
    P('param w_ba "linear_attn.in_proj_ba.weight" [2 * VH, C]')
    P('param conv_w "linear_attn.conv1d.weight" [2 * KH * KD + VH * VD, 1, KC]')
    P('param dt_bias "linear_attn.dt_bias" [VH] init = ones')
    P('param A_log "linear_attn.A_log" [VH] init = zeros')
    P('param g_norm "linear_attn.norm.weight" [VD] init = ones')
    P(f'param w_out "linear_attn.out_proj.weight" [C, VH * VD] {RESID}')
    moe = qwen_next_moe(P, cfg)
    L.append("")
    P("a = rmsnorm(x, 1 + attn_norm, eps = eps)")
    P("# per key head: its query, key, R value heads and R output gates; then its R b and R a")
    P("q, k, v, z = split(reshape(a @ transpose(w_qkvz), [B, T, KH, 2 * KD + 2 * R * VD]), [KD, KD, R * VD, R * VD])")
    P("b, dt = split(reshape(a @ transpose(w_ba), [B, T, KH, 2 * R]), 2)")
    P("qkv = concat(reshape(q, [B, T, KH * KD]), reshape(k, [B, T, KH * KD]), reshape(v, [B, T, VH * VD]))")
    P("q, k, v = split(silu(conv1d(qkv, conv_w)), [KH * KD, KH * KD, VH * VD])")
    P("g = -exp(A_log) * softplus(reshape(dt, [B, T, VH]) + dt_bias)")
    P("o = gated_delta_rule(q, k, v, g, sigmoid(reshape(b, [B, T, VH])), heads = VH, kv_heads = KH)")
    P("o = rmsnorm(reshape(o, [B, T, VH, VD]), g_norm, eps = eps) * silu(reshape(z, [B, T, VH, VD]))")
    P("x = x + reshape(o, [B, T, VH * VD]) @ transpose(w_out)")
    for s in moe:
        P(s.format(norm) if "{}" in s else s)
    L.append("}\n")
    L.append('block full "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
    P('param attn_norm "input_layernorm.weight" [C] init = zeros')
    P('param moe_norm "post_attention_layernorm.weight" [C] init = zeros')
    P('param wq "self_attn.q_proj.weight" [2 * NH * HS, C]')
    P('param wk "self_attn.k_proj.weight" [NKV * HS, C]')
    P('param wv "self_attn.v_proj.weight" [NKV * HS, C]')
    P(f'param wo "self_attn.o_proj.weight" [C, NH * HS] {RESID}')
    P('param q_norm "self_attn.q_norm.weight" [HS] init = zeros')
    P('param k_norm "self_attn.k_norm.weight" [HS] init = zeros')
    qwen_next_moe(P, cfg)
    L.append("")
    P("a = rmsnorm(x, 1 + attn_norm, eps = eps)")
    P("q, gate = split(reshape(a @ transpose(wq), [B, T, NH, 2 * HS]), 2) # per head: its query, its output gate")
    P("q = rmsnorm(q, 1 + q_norm, eps = eps)")
    P("k = rmsnorm(reshape(a @ transpose(wk), [B, T, NKV, HS]), 1 + k_norm, eps = eps)")
    P("# rotate the first ROT features of each head, pass the rest through")
    P("q_rot, q_pass = split(q, [ROT, HS - ROT])")
    P("k_rot, k_pass = split(k, [ROT, HS - ROT])")
    P(f"q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, {rope_kw}), [B, T, NH, ROT])")
    P(f"k_rot = reshape(rope(reshape(k_rot, [B, T, NKV * ROT]), heads = NKV, {rope_kw}), [B, T, NKV, ROT])")
    P("q = reshape(concat(q_rot, q_pass), [B, T, NH * HS])")
    P("k = reshape(concat(k_rot, k_pass), [B, T, NKV * HS])")
    P("o = attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV) * sigmoid(reshape(gate, [B, T, NH * HS]))")
    P("x = x + o @ transpose(wo)")
    for s in moe:
        P(s.format(norm) if "{}" in s else s)
    L.append("}\n")
    types = list(cfg.layer_types)
    for t in types:
        need(t in ("linear_attention", "full_attention"), "layer_types", t, "mt maps linear_attention and full_attention")
    kinds = ["linear" if t == "linear_attention" else "full" for t in types]
    L.append(f"block layers[L] = {layer_order(kinds, 'layer_types', types)}\n")
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)})) # all L layers, streamed by kind")
    P("return cross_entropy(rmsnorm(x, 1 + norm, eps = eps) @ transpose(lm_head), targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


def granite_mlp(P, cfg):
    """Granite 4.0-H's MLP: the experts' fused input_linear (gate rows then up rows) and output_linear, the router's
    softmax over its top K logits, the shared SwiGLU beside them; all scaled by RES into the residual."""
    P('param mlp_norm "post_attention_layernorm.weight" [C]')
    moe = cfg.num_local_experts > 0
    if moe:
        P('param router "block_sparse_moe.router.layer.weight" [E, C]')
        P('param w_in "block_sparse_moe.input_linear.weight" [E, 2 * FFN, C]')
        P(f'param w_out "block_sparse_moe.output_linear.weight" [E, C, FFN] {RESID}')
    P('param s_in "shared_mlp.input_linear.weight" [2 * SFFN, C]')
    P(f'param s_out "shared_mlp.output_linear.weight" [C, SFFN] {RESID}')
    out = ["m = rmsnorm(x, mlp_norm, eps = eps)",
           "s_gate, s_up = split(m @ transpose(s_in), 2)",
           "y = swiglu(s_gate, s_up) @ transpose(s_out)"]
    if moe:
        out += ["logits = m @ transpose(router)",
                "w_gate, w_up = split(w_in, 2, axis = 1) # each expert's gate rows, then its up rows",
                "y = y + moe(m, router(logits, top_k = K, softmax = after), w_gate, w_up, w_out)"]
        if router_loss(cfg):
            out.append("return add_loss(x + RES * y, aux * load_balancing_loss(logits, top_k = K, pooled = true))")
            return out
    out.append("return x + RES * y")
    return out


def mamba_checks(cfg):
    """What mt's Mamba-2 mixer (mamba_mixer) assumes of a config."""
    need(not getattr(cfg, "mamba_proj_bias", False), "mamba_proj_bias", True, "mt writes the projections bias-free")
    need(cfg.mamba_n_groups == 1, "mamba_n_groups", cfg.mamba_n_groups,
         "mt writes the gated RMSNorm over the whole mixer (one group)")
    lim = tuple(cfg.time_step_limit or (0.0, float("inf")))
    need(lim == (0.0, float("inf")), "time_step_limit", list(lim), "mt writes dt unclamped, (0, inf)")


def mamba_consts(w, cfg, C):
    I = cfg.mamba_expand * C
    w.const("I", f"{cfg.mamba_expand} * C", "the Mamba mixer's width: mamba_expand x C")
    w.const("MH", cfg.mamba_n_heads, "mamba_n_heads")
    w.const("MP", cfg.mamba_d_head, "mamba_d_head")
    w.const("N", cfg.mamba_d_state, "mamba_d_state")
    w.const("G", cfg.mamba_n_groups, "mamba_n_groups")
    w.const("KC", cfg.mamba_d_conv, "mamba_d_conv")
    need(cfg.mamba_d_head * cfg.mamba_n_heads == I, "mamba_d_head", cfg.mamba_d_head, f"heads x width must be {I}")


def mamba_mixer(P, cfg, res):
    """A Mamba-2 mixer's parameters (transformers' Mamba2Mixer names under "mamba."), and its statements from
    x to x + res (its output): the projection to the gate, x, B, C and dt; the convolution and silu; ssd and the D
    skip; the gated RMSNorm (gate first, norm_before_gate false)."""
    P('param in_proj "mamba.in_proj.weight" [2 * I + 2 * G * N + MH, C]')
    P('param conv_w "mamba.conv1d.weight" [I + 2 * G * N, 1, KC]')
    if cfg.mamba_conv_bias:
        P('param conv_b "mamba.conv1d.bias" [I + 2 * G * N]')
    P('param dt_bias "mamba.dt_bias" [MH] init = ones')
    P('param A_log "mamba.A_log" [MH] init = zeros')
    P('param D "mamba.D" [MH] init = ones')
    P('param m_norm "mamba.norm.weight" [I]')
    P(f'param out_proj "mamba.out_proj.weight" [C, I] {RESID}')
    return ["a = rmsnorm(x, attn_norm, eps = eps)",
            "gate, xbc, dt = split(a @ transpose(in_proj), [I, I + 2 * G * N, MH])",
            "xbc = silu(conv1d(xbc, conv_w)" + (" + conv_b)" if cfg.mamba_conv_bias else ")"),
            "xs, bm, cm = split(xbc, [I, G * N, G * N])",
            "y = ssd(xs, softplus(dt + dt_bias), -exp(A_log), bm, cm, heads = MH, groups = G)",
            "y = y + reshape(reshape(xs, [B, T, MH, MP]) * reshape(D, [MH, 1]), [B, T, I]) # the D skip",
            "y = rmsnorm(y * silu(gate), m_norm, eps = eps) # the gated norm: gate first",
            f"x = x + {res}(y @ transpose(out_proj))"]


def bamba(mt, cfg, raw, name):
    """Bamba: Mamba-2 layers and attention layers (rope on the first half of each head) at attn_layer_indices, each
    followed by a SwiGLU MLP."""
    check_fields(mt, raw)
    act(cfg, "hidden_act", ("silu",), "SwiGLU and the convolution's silu (hidden_act silu)")
    need(not getattr(cfg, "attention_bias", False), "attention_bias", True, "not mapped for Bamba")
    need(not getattr(cfg, "mlp_bias", False), "mlp_bias", True, "not mapped for Bamba")
    need(not getattr(cfg, "z_loss_coefficient", 0.0), "z_loss_coefficient", cfg.z_loss_coefficient,
         "mt writes no z-loss")
    mamba_checks(cfg)
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    rp = dict(cfg.rope_parameters or {})
    pct = rp.pop("partial_rotary_factor", 1.0)
    rot = int(HS * pct)
    frac = HS // rot if rot and HS % rot == 0 else None
    w.const("ROT", f"HS / {frac}" if frac else rot, f"rotary width: partial_rotary_factor {pct}")
    mamba_consts(w, cfg, C)
    w.const("FFN", cfg.intermediate_size, "SwiGLU hidden width")
    rope_kw = rope_rule(w, rp, "", rot)
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    tied = bool(cfg.tie_word_embeddings)
    L = [f"model {name}\n", w.config_text() + "\n", 'param tok_emb "model.embed_tokens.weight" [V, C]',
         'param norm "model.final_layernorm.weight" [C]'] + ([] if tied else ['param lm_head "lm_head.weight" [V, C]'])
    L.append("")
    P = lambda s: L.append("  " + s)
    mlp = ["m = rmsnorm(x, mlp_norm, eps = eps)",
           "return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)"]

    def mlp_params():
        P('param mlp_norm "pre_ff_layernorm.weight" [C]')
        P('param w_gate "feed_forward.gate_proj.weight" [FFN, C]')
        P('param w_up "feed_forward.up_proj.weight" [FFN, C]')
        P(f'param w_down "feed_forward.down_proj.weight" [C, FFN] {RESID}')
    L.append('block mamba "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
    P('param attn_norm "input_layernorm.weight" [C]')
    mixer = mamba_mixer(P, cfg, "")
    mlp_params()
    L.append("")
    for s in mixer + mlp:
        P(s)
    L.append("}\n")
    L.append('block attn "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
    P('param attn_norm "input_layernorm.weight" [C]')
    attention_params(P, "NH * HS", "NKV * HS")
    mlp_params()
    L.append("")
    P("a = rmsnorm(x, attn_norm, eps = eps)")
    P("# rotate the first ROT features of each head, pass the rest through")
    P("q_rot, q_pass = split(reshape(a @ transpose(wq), [B, T, NH, HS]), [ROT, HS - ROT])")
    P("k_rot, k_pass = split(reshape(a @ transpose(wk), [B, T, NKV, HS]), [ROT, HS - ROT])")
    P(f"q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, {rope_kw}), [B, T, NH, ROT])")
    P(f"k_rot = reshape(rope(reshape(k_rot, [B, T, NKV * ROT]), heads = NKV, {rope_kw}), [B, T, NKV, ROT])")
    P("q = reshape(concat(q_rot, q_pass), [B, T, NH * HS])")
    P("k = reshape(concat(k_rot, k_pass), [B, T, NKV * HS])")
    P("x = x + attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV) @ transpose(wo)")
    for s in mlp:
        P(s)
    L.append("}\n")
    kinds = ["mamba" if t == "linear_attention" else "attn" for t in cfg.layers_block_type]
    L.append(f"block layers[L] = {layer_order(kinds, 'attn_layer_indices', cfg.attn_layer_indices)}\n")
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)})) # all L layers, streamed by kind")
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}), targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


def granitemoehybrid(mt, cfg, raw, name):
    """Granite 4.0-H: Mamba-2 layers and attention layers (two block kinds in the order of layer_types), each
    followed by the experts and a shared MLP; muP's multipliers on the embedding, the residual branches, the
    attention scores and the logits."""
    check_fields(mt, raw)
    act(cfg, "hidden_act", ("silu",), "SwiGLU and the convolution's silu (hidden_act silu)")
    need(not getattr(cfg, "attention_bias", False), "attention_bias", True, "not mapped for Granite 4.0-H")
    types = list(cfg.layer_types)
    for t in types:
        need(t in ("linear_attention", "full_attention", "attention", "mamba"), "layer_types", t,
             "mt maps mamba and attention")
    kinds = ["mamba" if t in ("linear_attention", "mamba") else "attn" for t in types]
    hybrid = "mamba" in kinds  # Granite 4.0 Micro: attention layers only, no Mamba fields read
    if hybrid:
        mamba_checks(cfg)
    pe = getattr(cfg, "position_embedding_type", None)
    need(pe in (None, "nope", "rope"), "position_embedding_type", pe, "mt maps nope and rope")
    nf = raw.get("normalization_function", "rmsnorm")
    need(nf == "rmsnorm", "normalization_function", nf, "mt maps rmsnorm")
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    if hybrid:
        mamba_consts(w, cfg, C)
    moe = cfg.num_local_experts > 0
    if moe:
        w.const("E", cfg.num_local_experts, "num_local_experts")
        w.const("K", cfg.num_experts_per_tok, "num_experts_per_tok")
        w.const("FFN", cfg.intermediate_size, "each expert's SwiGLU width (intermediate_size)")
        if router_loss(cfg):
            w.const("aux", num(float(cfg.router_aux_loss_coef)), "router_aux_loss_coef")
    w.const("SFFN", cfg.shared_intermediate_size, "shared_intermediate_size")
    mup_consts(w, cfg)
    rope_kw = rope_rule(w, dict(cfg.rope_parameters or {}), "", HS) if pe == "rope" else None
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    tied = bool(cfg.tie_word_embeddings)
    L = [f"model {name}\n", w.config_text() + "\n", f'param tok_emb "model.embed_tokens.weight" [V, C]',
         'param norm "model.norm.weight" [C]'] + ([] if tied else ['param lm_head "lm_head.weight" [V, C]']) + [""]
    P = lambda s: L.append("  " + s)
    if hybrid:
        L.append('block mamba "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
        P('param attn_norm "input_layernorm.weight" [C]')
        mixer = mamba_mixer(P, cfg, "RES * ")
        mlp = granite_mlp(P, cfg)
        L.append("")
        for s in mixer + mlp:
            P(s)
        L.append("}\n")
    L.append(f'block {"attn" if hybrid else "layers[L]"} "model.layers.{{i}}." (x: [B, T, C]) -> [B, T, C] {{')
    P('param attn_norm "input_layernorm.weight" [C]')
    attention_params(P, "NH * HS", "NKV * HS")
    mlp = granite_mlp(P, cfg)
    L.append("")
    P("a = rmsnorm(x, attn_norm, eps = eps)")
    if rope_kw:
        P(f"q = rope(a @ transpose(wq), heads = NH, {rope_kw})")
        P(f"k = rope(a @ transpose(wk), heads = NKV, {rope_kw})")
    else:
        P("q = a @ transpose(wq) # no position embedding (position_embedding_type nope)")
        P("k = a @ transpose(wk)")
    P("o = attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV, scale = ATT)")
    P("x = x + RES * (o @ transpose(wo))")
    for s in mlp:
        P(s)
    L.append("}\n")
    if hybrid:
        L.append(f"block layers[L] = {layer_order(kinds, 'layer_types', types)}\n")
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)}) * EMB) # all L layers, streamed by kind")
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}) / LOGS, "
      "targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


def sigmoid_router(P, cfg):
    """DeepSeek-V3's and GLM-4.5's router (transformers' TopkRouter), the DSL's router with sigmoid scores: the
    choice adds the selection bias (e_score_correction_bias, a buffer, as transformers trains it: no gradient, no
    update); with n_group groups, only the topk_group groups whose two largest choices
    sum highest are eligible; the top K choices' scores, renormalised (norm_topk_prob), times
    routed_scaling_factor. The router's parameters declared with P; returns the statements from m to the gates."""
    G, TG = cfg.n_group or 1, cfg.topk_group or 1
    need(cfg.n_routed_experts % G == 0, "n_group", G, f"does not divide n_routed_experts {cfg.n_routed_experts}")
    need(1 <= TG <= G, "topk_group", TG, f"needs 1 to n_group ({G}) groups")
    P('param router "mlp.gate.weight" [E, C]')
    P('param sel_bias "mlp.gate.e_score_correction_bias" [E] buffer # used for choosing only')
    kw = ", normalize = true" if cfg.norm_topk_prob else ""
    kw += ", groups = G, top_groups = TG" if TG < G else ""
    return ["logits = m @ transpose(router)",
            f"gates = router(logits, top_k = K, scores = sigmoid{kw}, scale = RSF, bias = sel_bias)"]


def routed_consts(w, cfg):
    """The MoE constants of deepseek_v3 and glm4_moe."""
    w.const("DENSE", cfg.first_k_dense_replace, "first_k_dense_replace: the dense layers before the MoE ones")
    w.const("FFN", cfg.intermediate_size, "intermediate_size, the dense layers'")
    w.const("E", cfg.n_routed_experts, "n_routed_experts")
    w.const("K", cfg.num_experts_per_tok, "num_experts_per_tok")
    w.const("EFFN", cfg.moe_intermediate_size, "moe_intermediate_size")
    w.const("SFFN", f"{cfg.n_shared_experts} * EFFN" if cfg.n_shared_experts != 1 else "EFFN",
            f"n_shared_experts {cfg.n_shared_experts}, run as one SwiGLU")
    G, TG = cfg.n_group or 1, cfg.topk_group or 1
    if TG < G:
        w.const("G", G, "n_group")
        w.const("TG", TG, "topk_group")
    w.const("RSF", num(float(cfg.routed_scaling_factor)), "routed_scaling_factor")


def routed_checks(cfg, raw):
    """Fields of DeepSeek-V3's and GLM-4.5's config.json that must hold for the function mt writes."""
    need(cfg.n_shared_experts >= 1, "n_shared_experts", cfg.n_shared_experts, "mt writes the shared experts")
    need(cfg.n_routed_experts > 0, "n_routed_experts", cfg.n_routed_experts, "mt writes the routed experts")
    need(raw.get("scoring_func", "sigmoid") == "sigmoid", "scoring_func", raw.get("scoring_func"),
         "mt writes DeepSeek-V3's sigmoid scores")
    need(raw.get("topk_method", "noaux_tc") == "noaux_tc", "topk_method", raw.get("topk_method"),
         "mt writes DeepSeek-V3's noaux_tc selection")
    need(raw.get("moe_layer_freq", 1) == 1, "moe_layer_freq", raw.get("moe_layer_freq"),
         "mt writes every layer after first_k_dense_replace sparse")
    need("quantization_config" not in raw, "quantization_config", raw.get("quantization_config"),
         "mt loads bf16 or f32 weights: dequantize the checkpoint (DeepSeek's fp8_cast_bf16.py) and drop "
         "quantization_config")
    act(cfg, "hidden_act", ("silu",), "SwiGLU (hidden_act silu)")


def routed_mlps(P, cfg, sparse):
    """The dense layer's SwiGLU, or the sparse layer's router, experts and shared experts: params declared with
    P, the statements from x to the block's return."""
    if not sparse:
        P('param mlp_norm "post_attention_layernorm.weight" [C]')
        P('param w_gate "mlp.gate_proj.weight" [FFN, C]')
        P('param w_up "mlp.up_proj.weight" [FFN, C]')
        P(f'param w_down "mlp.down_proj.weight" [C, FFN] {RESID}')
        return ["m = rmsnorm(x, mlp_norm, eps = eps)",
                "return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)"]
    P('param moe_norm "post_attention_layernorm.weight" [C]')
    route = sigmoid_router(P, cfg)
    P('param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [EFFN, C]')
    P('param w_up[E] "mlp.experts.{e}.up_proj.weight" [EFFN, C]')
    P(f'param w_down[E] "mlp.experts.{{e}}.down_proj.weight" [C, EFFN] {RESID}')
    P('param s_gate "mlp.shared_experts.gate_proj.weight" [SFFN, C]')
    P('param s_up "mlp.shared_experts.up_proj.weight" [SFFN, C]')
    P(f'param s_down "mlp.shared_experts.down_proj.weight" [C, SFFN] {RESID}')
    return ["m = rmsnorm(x, moe_norm, eps = eps)"] + route + [
        "shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)",
        "return x + moe(m, gates, w_gate, w_up, w_down) + shared # no auxiliary loss, as transformers trains"]


def routed_model(L, w, cfg, name, attention):
    """deepseek_v3's and glm4_moe's model text: the dense and sparse kinds (attention(P) declares a kind's
    attention params and returns its statements from x to x + attention), their order, forward and train."""
    P = lambda s: L.append("  " + s)
    dense, nl = cfg.first_k_dense_replace, cfg.num_hidden_layers
    need(0 <= dense <= nl, "first_k_dense_replace", dense, f"needs 0 to num_hidden_layers ({nl})")
    kinds = [k for k, n in (("dense", dense), ("sparse", nl - dense)) if n]
    for kind in kinds:
        header = "layers[L]" if len(kinds) == 1 else kind
        L.append(f'block {header} "model.layers.{{i}}." (x: [B, T, C]) -> [B, T, C] {{')
        P('param attn_norm "input_layernorm.weight" [C]')
        att = attention(P)
        mlp = routed_mlps(P, cfg, kind == "sparse")
        L.append("")
        for s in ["a = rmsnorm(x, attn_norm, eps = eps)"] + att + mlp:
            P(s)
        L.append("}\n")
    if len(kinds) == 2:
        L.append("block layers[L] = [dense] * DENSE + [sparse] * (L - DENSE)\n")
    tied = bool(cfg.tie_word_embeddings)
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)})) # all L layers, streamed by kind")
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}), targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


def head_params(w, cfg, name, norm="model.norm.weight"):
    """A model's first lines: its name, config, the embedding, the final norm and an untied LM head."""
    L = [f"model {name}\n", w.config_text() + "\n", 'param tok_emb "model.embed_tokens.weight" [V, C]',
         f'param norm "{norm}" [C]']
    if not cfg.tie_word_embeddings:
        L.append('param lm_head "lm_head.weight" [V, C]')
    return L + [""]


def deepseek_v3(mt, cfg, raw, name):
    """DeepSeek-V3 (without its multi-token prediction layer, which transformers does not build): multi-head
    latent attention (q through a low-rank bottleneck or one projection, keys and values through a latent, a
    rotated key part shared by the heads), first_k_dense_replace dense layers, then sigmoid-routed experts."""
    check_fields(mt, raw)
    routed_checks(cfg, raw)
    need(not cfg.attention_bias, "attention_bias", True, "mt writes DeepSeek-V3's projections bias-free")
    w = Writer(name, "")
    w.const("V", cfg.vocab_size, "vocabulary")
    w.const("C", cfg.hidden_size, "width")
    w.const("L", cfg.num_hidden_layers, "layers")
    w.const("H", cfg.num_attention_heads, "heads")
    if cfg.q_lora_rank:
        w.const("QR", cfg.q_lora_rank, "q_lora_rank")
    w.const("R", cfg.kv_lora_rank, "kv_lora_rank")
    w.const("DN", cfg.qk_nope_head_dim, "qk_nope_head_dim")
    w.const("DR", cfg.qk_rope_head_dim, "qk_rope_head_dim")
    w.const("DV", cfg.v_head_dim, "v_head_dim")
    routed_consts(w, cfg)
    rp = dict(cfg.rope_parameters or {})
    rope_kw = rope_rule(w, rp, "", cfg.qk_rope_head_dim, getattr(cfg, "max_position_embeddings", None))
    if cfg.rope_interleave:
        rope_kw += ", interleaved = true"
    ms = 1.0
    if rp.get("rope_type", "default") != "default" and rp.get("mscale_all_dim") and float(rp["factor"]) > 1:
        w.const("MS", f"0.1 * {num(float(rp['mscale_all_dim']))} * ln({num(rp['factor'])}) + 1",
                "yarn_get_mscale(factor, mscale_all_dim): the softmax scale's factor, squared")
        ms = None
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    L = head_params(w, cfg, name)

    def attention(P):
        if cfg.q_lora_rank:
            P('param wqa "self_attn.q_a_proj.weight" [QR, C]')
            P('param q_norm "self_attn.q_a_layernorm.weight" [QR]')
            P('param wqb "self_attn.q_b_proj.weight" [H * (DN + DR), QR]')
            q = "rmsnorm(a @ transpose(wqa), q_norm, eps = eps) @ transpose(wqb)"
        else:
            P('param wq "self_attn.q_proj.weight" [H * (DN + DR), C]')
            q = "a @ transpose(wq)"
        P('param wkva "self_attn.kv_a_proj_with_mqa.weight" [R + DR, C]')
        P('param kv_norm "self_attn.kv_a_layernorm.weight" [R]')
        P('param wkvb "self_attn.kv_b_proj.weight" [H * (DN + DV), R]')
        P(f'param wo "self_attn.o_proj.weight" [C, H * DV] {RESID}')
        scale = "1 / sqrt(DN + DR)" if ms else "MS * MS / sqrt(DN + DR)"
        return [f"q_nope, q_pe = split(reshape({q}, [B, T, H, DN + DR]), [DN, DR])",
                "c, k_pe = split(a @ transpose(wkva), [R, DR])",
                "k_nope, v = split(reshape(rmsnorm(c, kv_norm, eps = eps) @ transpose(wkvb), [B, T, H, DN + DV]), "
                "[DN, DV])",
                f"q_pe = rope(reshape(q_pe, [B, T, H * DR]), heads = H, {rope_kw})",
                f"k_pe = rope(k_pe, heads = 1, {rope_kw}) # one rotated key part for all heads",
                "q = reshape(concat(q_nope, reshape(q_pe, [B, T, H, DR])), [B, T, H * (DN + DR)])",
                "k = reshape(concat(k_nope, reshape(k_pe, [B, T, 1, DR])), [B, T, H * (DN + DR)])",
                f"x = x + attention(q, k, reshape(v, [B, T, H * DV]), heads = H, scale = {scale}) @ transpose(wo)"]
    return routed_model(L, w, cfg, name, attention)


def glm4_moe(mt, cfg, raw, name):
    """GLM-4.5 and GLM-4.5-Air: grouped-query attention with q/k/v biases (attention_bias), rope on the first
    partial_rotary_factor of each head, optional per-head q/k norms (use_qk_norm); first_k_dense_replace dense
    layers, then sigmoid-routed experts as DeepSeek-V3's."""
    check_fields(mt, raw)
    routed_checks(cfg, raw)
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    rp = dict(cfg.rope_parameters or {})
    pct = rp.pop("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0) or 1.0)
    rot = int(HS * pct)
    need(rot > 0 and rot % 2 == 0, "partial_rotary_factor", pct, f"rotates {rot} of each head's {HS} features; "
                                                                    "rope needs an even number")
    frac = HS // rot if HS % rot == 0 else None
    w.const("ROT", f"HS / {frac}" if frac else rot, f"rotary width: partial_rotary_factor {pct}")
    routed_consts(w, cfg)
    rope_kw = rope_rule(w, rp, "", rot, getattr(cfg, "max_position_embeddings", None))
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    L = head_params(w, cfg, name)
    bias, qk_norm = bool(cfg.attention_bias), bool(cfg.use_qk_norm)

    def attention(P):
        attention_params(P, "NH * HS", "NKV * HS", bias, qk_norm)
        b = (lambda s: f" + b{s}") if bias else (lambda s: "")
        q, k = f"reshape(a @ transpose(wq){b('q')}, [B, T, NH, HS])", f"reshape(a @ transpose(wk){b('k')}, [B, T, NKV, HS])"
        if qk_norm:
            q, k = f"rmsnorm({q}, q_norm, eps = eps)", f"rmsnorm({k}, k_norm, eps = eps)"
        return ["# rotate the first ROT features of each head, pass the rest through",
                f"q_rot, q_pass = split({q}, [ROT, HS - ROT])",
                f"k_rot, k_pass = split({k}, [ROT, HS - ROT])",
                f"q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, {rope_kw}), [B, T, NH, ROT])",
                f"k_rot = reshape(rope(reshape(k_rot, [B, T, NKV * ROT]), heads = NKV, {rope_kw}), [B, T, NKV, ROT])",
                "q = reshape(concat(q_rot, q_pass), [B, T, NH * HS])",
                "k = reshape(concat(k_rot, k_pass), [B, T, NKV * HS])",
                f"o = attention(q, k, a @ transpose(wv){b('v')}, heads = NH, kv_heads = NKV)",
                "x = x + o @ transpose(wo)"]
    return routed_model(L, w, cfg, name, attention)


def llama4_text(mt, cfg, raw, name, pre=""):
    """Llama 4's text model (Scout, Maverick): rope layers (interleaved pairs, a weightless q/k RMSNorm after rope
    when use_qk_norm, chunked attention) and NoPE layers (no_rope_layers 0: full attention, the queries scaled by
    the temperature log(floor((t + 1) / floor_scale) + 1) attn_scale + 1 when attn_temperature_tuning), each with
    its experts (moe_layers: the sigmoid of each of the top-k logits scaling its expert's input, moe's gates_on =
    input; the fused gate_up_proj [E, in, 2 FFN] and down_proj read in place; a shared expert beside) or a
    dense SwiGLU (intermediate_size_mlp); the kinds in the order of the layers. pre: the checkpoint's prefix of
    every name ("language_model." in the multimodal Llama4ForConditionalGeneration's)."""
    check_fields(mt, raw)
    act(cfg, "hidden_act", ("silu",), "SwiGLU (hidden_act silu)")
    need(not cfg.attention_bias, "attention_bias", True, "mt writes Llama 4's projections bias-free")
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    nl = cfg.num_hidden_layers
    moe = [i in set(cfg.moe_layers) for i in range(nl)]
    ropes = [bool(r) for r in cfg.no_rope_layers]
    types = list(cfg.layer_types)
    need(len(ropes) == nl and len(types) == nl, "no_rope_layers", cfg.no_rope_layers, f"needs one entry a layer ({nl})")
    for t in types:
        need(t in ("chunked_attention", "full_attention"), "layer_types", t, "mt maps chunked_attention and "
                                                                              "full_attention")
    if any(moe):
        w.const("E", cfg.num_local_experts, "num_local_experts")
        w.const("K", cfg.num_experts_per_tok, "num_experts_per_tok")
        w.const("FFN", cfg.intermediate_size, "intermediate_size: each expert's and the shared expert's width")
    if not all(moe):
        w.const("DFFN", cfg.intermediate_size_mlp, "intermediate_size_mlp: the dense layers' width")
    chunked = "chunked_attention" in types
    if chunked:
        w.const("CH", cfg.attention_chunk_size, "attention_chunk_size")
    tune = cfg.attn_temperature_tuning and not all(ropes)
    if tune:
        w.const("FS", cfg.floor_scale, "floor_scale")
        w.const("ATTS", num(float(cfg.attn_scale)), "attn_scale: the NoPE layers' temperature slope")
    rope_kw = rope_rule(w, dict(cfg.rope_parameters or {}), "", HS, getattr(cfg, "max_position_embeddings", None))
    rope_kw += ", interleaved = true" # transformers' Llama 4 ropes (x0, x1), (x2, x3), ... as complex numbers
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    L = [f"model {name}\n", w.config_text() + "\n", f'param tok_emb "{pre}model.embed_tokens.weight" [V, C]',
         f'param norm "{pre}model.norm.weight" [C]']
    tied = bool(cfg.tie_word_embeddings)
    if not tied:
        L.append(f'param lm_head "{pre}lm_head.weight" [V, C]')
    L.append("")
    kind = lambda i: ("rope" if ropes[i] else "nope") + ("_chunked" if types[i] == "chunked_attention" else "") + \
        ("_moe" if moe[i] else "_dense")
    kinds = [kind(i) for i in range(nl)]
    for k in sorted(set(kinds), key=kinds.index):
        i = kinds.index(k)
        llama4_block(L, k if len(set(kinds)) > 1 else "layers[L]", pre, ropes[i], types[i] == "chunked_attention",
                     moe[i], tune, bool(cfg.use_qk_norm), rope_kw)
    if len(set(kinds)) > 1:
        L.append(f"block layers[L] = {kinds_order(kinds)}\n")
    P = lambda s: L.append("  " + s)
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)})) # all L layers, streamed by kind")
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}), targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


def kinds_order(kinds):
    """An order of the layers' kinds: the shortest period repeated, `[a, b] * (L / n)`, or listed."""
    n = len(kinds)
    period = next(p for p in range(1, n + 1) if n % p == 0 and kinds == kinds[:p] * (n // p))
    return f"[{', '.join(kinds[:period])}] * (L / {period})" if period < n else f"[{', '.join(kinds)}]"


def llama4_block(L, header, pre, use_rope, chunked, moe, tune, qk_norm, rope_kw):
    """One kind of Llama 4's layers, appended to L."""
    P = lambda s: L.append("  " + s)
    L.append(f'block {header} "{pre}model.layers.{{i}}." (x: [B, T, C]) -> [B, T, C] {{')
    P('param attn_norm "input_layernorm.weight" [C]')
    attention_params(P, "NH * HS", "NKV * HS")
    P('param mlp_norm "post_attention_layernorm.weight" [C]')
    if moe:
        P('param router "feed_forward.router.weight" [E, C]')
        P('param w_gate_up "feed_forward.experts.gate_up_proj" [E, C, 2 * FFN] # [E, in, out]: gate, then up')
        P(f'param w_down "feed_forward.experts.down_proj" [E, FFN, C] {RESID}')
        P('param s_gate "feed_forward.shared_expert.gate_proj.weight" [FFN, C]')
        P('param s_up "feed_forward.shared_expert.up_proj.weight" [FFN, C]')
        P(f'param s_down "feed_forward.shared_expert.down_proj.weight" [C, FFN] {RESID}')
    else:
        P('param w_gate "feed_forward.gate_proj.weight" [DFFN, C]')
        P('param w_up "feed_forward.up_proj.weight" [DFFN, C]')
        P(f'param w_down "feed_forward.down_proj.weight" [C, DFFN] {RESID}')
    L.append("")
    P("a = rmsnorm(x, attn_norm, eps = eps)")
    if use_rope:
        P(f"q = rope(a @ transpose(wq), heads = NH, {rope_kw})")
        P(f"k = rope(a @ transpose(wk), heads = NKV, {rope_kw})")
        if qk_norm:
            P("# use_qk_norm: each head's RMSNorm without a gain, after rope")
            P("q = reshape(rmsnorm(reshape(q, [B, T, NH, HS]), full([HS], 1.0), eps = eps), [B, T, NH * HS])")
            P("k = reshape(rmsnorm(reshape(k, [B, T, NKV, HS]), full([HS], 1.0), eps = eps), [B, T, NKV * HS])")
    else:
        P("q = a @ transpose(wq) # no rope in this layer (no_rope_layers: 0)")
        P("k = a @ transpose(wk)")
        if tune:
            P("# attn_temperature_tuning: the queries at position t times log(floor((t + 1) / FS) + 1) ATTS + 1")
            P("temp = log(floor((arange(T, dtype = f32) + 1) / FS) + 1) * ATTS + 1 # [T]")
            P("q = reshape(reshape(q, [B, T, NH, HS]) * reshape(temp, [T, 1, 1]), [B, T, NH * HS])")
    P("x = x + attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV" + (", chunk = CH" if chunked else "")
      + ") @ transpose(wo)")
    P("m = rmsnorm(x, mlp_norm, eps = eps)")
    if moe:
        P("# the top K: each chosen expert runs on its input scaled by the sigmoid of its logit, its output not gated")
        P("logits = m @ transpose(router)")
        P("gates = where(router(logits, top_k = K, softmax = after), sigmoid(logits), 0) # [B, T, E]")
        P("# the checkpoint's experts read in place: gate_up [E, in, 2 FFN], the gate then the up; down [E, in, out]")
        P("y = moe(m, gates, transpose(w_gate_up), transpose(w_down), gate_up = halves, gates_on = input)")
        P("return x + y + swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)")
    else:
        P("return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)")
    L.append("}\n")


def gpt_oss(mt, cfg, raw, name):
    """gpt-oss: sliding and full attention layers (layer_types; full as the sliding kind with W = T) with q/k/v/o
    biases and a learned sink logit a head, yarn rope; every layer's experts behind a biased softmax-after router,
    with biases and the clamped SwiGLU ((min(up, limit) clamped below at -limit + 1) * g sigmoid(alpha g), g =
    min(gate, limit); gate and up interleaved in the fused [E, in, 2 FFN] gate_up_proj and its bias, read in place
    by moe's gate_up = interleaved): moe's alpha, limit and expert bias options, K experts a row."""
    check_fields(mt, raw)
    need("quantization_config" not in raw, "quantization_config", raw.get("quantization_config"),
         "mt loads bf16 or f32 weights: dequantize the checkpoint (MXFP4 experts) and drop quantization_config")
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    w.const("E", cfg.num_local_experts, "num_local_experts")
    w.const("K", cfg.num_experts_per_tok, "num_experts_per_tok")
    w.const("FFN", cfg.intermediate_size, "each expert's width (intermediate_size)")
    w.const("ALPHA", num(float(cfg.swiglu_alpha)), "swiglu_alpha")
    w.const("LIMIT", num(float(cfg.swiglu_limit)), "swiglu_limit")
    if router_loss(cfg):
        w.const("aux", num(float(cfg.router_aux_loss_coef)), "router_aux_loss_coef")
    types = list(cfg.layer_types)
    for t in types:
        need(t in ("sliding_attention", "full_attention"), "layer_types", t, "mt maps sliding_attention and "
                                                                              "full_attention")
    if "sliding_attention" in types:
        w.const("W", cfg.sliding_window, "sliding_window of the sliding layers")
    rope_kw = rope_rule(w, dict(cfg.rope_parameters or {}), "", HS, getattr(cfg, "max_position_embeddings", None))
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    L = head_params(w, cfg, name)
    kinds = ["sliding" if t == "sliding_attention" else "full" for t in types]
    one = len(set(kinds)) == 1
    L.append(f'block {"layers[L]" if one else "sliding"} "model.layers.{{i}}." (x: [B, T, C]) -> [B, T, C] {{')
    P = lambda s: L.append("  " + s)
    P('param attn_norm "input_layernorm.weight" [C]')
    bias = bool(cfg.attention_bias)
    attention_params(P, "NH * HS", "NKV * HS", bias)
    if bias:
        P('param bo "self_attn.o_proj.bias" [C]')
    P('param sinks "self_attn.sinks" [NH]')
    P('param mlp_norm "post_attention_layernorm.weight" [C]')
    P('param router "mlp.router.weight" [E, C]')
    P('param router_b "mlp.router.bias" [E]')
    P('param w_gate_up "mlp.experts.gate_up_proj" [E, C, 2 * FFN] # [E, in, out], gate and up columns interleaved')
    P('param b_gate_up "mlp.experts.gate_up_proj_bias" [E, 2 * FFN]')
    P(f'param w_down "mlp.experts.down_proj" [E, FFN, C] {RESID}')
    P('param b_down "mlp.experts.down_proj_bias" [E, C]')
    L.append("")
    b = (lambda s: f" + b{s}") if bias else (lambda s: "")
    window = "" if one and kinds[0] == "full" else ", window = W"
    for st in ["a = rmsnorm(x, attn_norm, eps = eps)",
               f"q = rope(a @ transpose(wq){b('q')}, heads = NH, {rope_kw})",
               f"k = rope(a @ transpose(wk){b('k')}, heads = NKV, {rope_kw})",
               f"o = attention(q, k, a @ transpose(wv){b('v')}, sinks, heads = NH, kv_heads = NKV{window})",
               f"x = x + o @ transpose(wo){b('o')}",
               "m = rmsnorm(x, mlp_norm, eps = eps)",
               "logits = m @ transpose(router) + router_b",
               "gates = router(logits, top_k = K, softmax = after) # [B, T, E]: K of them not 0",
               "# the checkpoint's experts read in place: gate_up [E, in, 2 FFN] and its bias, the gate at even columns",
               "x = x + moe(m, gates, transpose(w_gate_up), transpose(w_down), gate_up = interleaved, alpha = ALPHA, "
               "limit = LIMIT, gate_up_bias = b_gate_up, down_bias = b_down)"]:
        P(st)
    if router_loss(cfg):
        P("return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))")
    else:
        P("return x # output_router_logits = false: no load-balancing loss, as transformers trains")
    L.append("}\n")
    if not one:
        L.append("block full = sliding with W = T # a window as long as the sequence\n")
        L.append(f"block layers[L] = {kinds_order(kinds)}\n")
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)})) # all L layers, streamed by kind")
    tied = bool(cfg.tie_word_embeddings)
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}), targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


WRITERS = {
    "llama": llama_like, "mistral": llama_like, "qwen2": llama_like, "qwen3": llama_like, "olmo2": llama_like,
    "phi3": llama_like, "smollm3": llama_like, "granite": llama_like, "mixtral": llama_like, "qwen2_moe": llama_like, "qwen3_moe": llama_like,
    "gemma2": gemma, "gemma3_text": gemma, "gpt2": gpt2, "gpt_neox": gpt_neox, "qwen3_next": qwen3_next,
    "granitemoehybrid": granitemoehybrid, "bamba": bamba, "deepseek_v3": deepseek_v3, "glm4_moe": glm4_moe,
    "llama4_text": llama4_text, "gpt_oss": gpt_oss,
}


def import_transformers():
    """transformers, or Refused naming the command that installs it."""
    try:
        import transformers
    except ImportError:
        raise Refused("transformers is not installed; hf_to_mt.py reads config.json with its config classes: "
                      "python3 -m pip install transformers (the README's second command installs the versions the "
                      "tests use)") from None
    return transformers


FINETUNE = {"lr": 2e-5, "weight_decay": 0.0, "warmup": 10, "min_lr": 0.1, "steps": 1000}


def finetune_train(text):
    """The model file's train section made a fine-tuning schedule (FINETUNE: a
    fine-tuning learning rate, a short warmup, no weight decay), and a line
    that says what it wrote."""
    f = FINETUNE
    for old, new in [("lr = 3e-4", f"lr = {f['lr']}"), ("weight_decay = 0.1", f"weight_decay = {f['weight_decay']}"),
                     ("warmup = 2000", f"warmup = {f['warmup']}"), ("steps = 10000", f"steps = {f['steps']}")]:
        if old not in text:
            raise Refused(f"--finetune: the train section has no '{old}' to replace")
        text = text.replace(old, new)
    said = (f"a fine-tuning schedule: peak lr {f['lr']:g} after {f['warmup']} warmup steps, cosine to "
            f"{f['min_lr']:g} of it over {f['steps']} steps, weight decay {f['weight_decay']:g} (mtrun's --lr, "
            "--warmup, --lr-schedule, --min-lr and --steps override it)")
    return text, said


def with_bias_update(text, mt, gamma):
    """The model text with its routers' selection bias moved by DeepSeek-V3's auxiliary-loss-free rule at speed
    gamma (--bias-update); refused for a family whose router has no such bias."""
    call = "bias = sel_bias)"
    if call not in text:
        raise Refused(f"--bias-update {gamma:g} moves a router's e_score_correction_bias, which {mt} has not "
                      "(deepseek_v3 and glm4_moe have one): leave the flag out")
    if not gamma >= 0:
        raise Refused(f"--bias-update {gamma:g}: the bias update speed is a number >= 0 (DeepSeek-V3 used 0.001)")
    return text.replace(call, f"bias = sel_bias, bias_update = {gamma!r})")


def convert(raw, name=None, no_dropout=False, folder=None, bias_update=None):
    """The model file for a config.json's contents (a dict); raises Refused.
    no_dropout: write the model without the config's dropouts (mt has none);
    folder: the checkpoint's folder, whose tensor names GPT-2's prefix follows;
    bias_update: the routers' bias update speed (with_bias_update), None: no update, as transformers."""
    text = convert_plain(raw, name, no_dropout, folder)
    return text if bias_update is None else with_bias_update(text, raw.get("model_type"), bias_update)


def convert_plain(raw, name, no_dropout, folder):
    """convert without the bias update."""
    mt = raw.get("model_type")
    if mt == "gemma3":  # the multimodal wrapper: its language model
        need("text_config" in raw, "text_config", None, "gemma3 needs its text_config")
        raw = dict(raw["text_config"], model_type="gemma3_text")
        mt = "gemma3_text"
    pre = ""
    if mt == "llama4":  # the multimodal wrapper (Llama4ForConditionalGeneration): its language model
        need("text_config" in raw, "text_config", None, "llama4 needs its text_config")
        raw, mt, pre = dict(raw["text_config"], model_type="llama4_text"), "llama4_text", "language_model."
    if mt not in WRITERS:
        raise Refused(f"model_type {json.dumps(mt)} is not one hf_to_mt.py maps (it maps {', '.join(sorted(WRITERS))})")
    import logging
    transformers = import_transformers()
    transformers.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    fields = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        cfg = transformers.AutoConfig.for_model(mt, **fields)
    except Exception as e:  # noqa: BLE001  (the config class's own checks: a ValueError, an IndexError, ...)
        raise Refused(f"transformers' {mt} config class refuses it: {type(e).__name__}: {e}") from None
    name = name or "model"
    head = function_fields(raw, no_dropout)
    if mt == "gpt2":
        return head + gpt2(mt, cfg, raw, name, folder)
    if mt == "llama4_text":
        return head + llama4_text(mt, cfg, raw, name, pre)
    return head + WRITERS[mt](mt, cfg, raw, name)


def main():
    ap = argparse.ArgumentParser(description="Writes an mt model file from a Hugging Face config.json.")
    ap.add_argument("config", help="a checkpoint folder or its config.json")
    ap.add_argument("-o", "--output", help="the model file to write (default: standard output)")
    ap.add_argument("--name", help="the model's name (default: from the folder's name)")
    ap.add_argument("--finetune", action="store_true",
                    help="write a fine-tuning schedule (lr 2e-5, warmup 10, no weight decay, 1000 steps) in "
                         "place of the pretraining one (lr 3e-4, warmup 2000, 10000 steps)")
    ap.add_argument("--no-dropout", action="store_true",
                    help="write the model without the config's dropouts (mt has no dropout; refused without this)")
    ap.add_argument("--bias-update", type=float, metavar="GAMMA",
                    help="deepseek_v3, glm4_moe: move the routers' e_score_correction_bias after each step by GAMMA x "
                         "sign(mean load - load), DeepSeek-V3's auxiliary-loss-free rule (it used 0.001); "
                         "default: no update, as transformers")
    a = ap.parse_args()
    path = os.path.join(a.config, "config.json") if os.path.isdir(a.config) else a.config
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        print(f"hf_to_mt.py: {path}: {e}", file=sys.stderr)
        return 1
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    name = a.name or "".join(c if c.isalnum() else "_" for c in folder.lower()).strip("_") or "model"
    if name[0].isdigit():
        name = "m_" + name
    try:
        text = convert(raw, name, a.no_dropout, os.path.dirname(os.path.abspath(path)), a.bias_update)
    except Refused as e:
        print(f"hf_to_mt.py: {path}: {e}", file=sys.stderr)
        return 1
    text = f"# written by tools/hf_to_mt.py from {os.path.dirname(os.path.abspath(path))}\n" + text
    if a.finetune:
        try:
            text, said = finetune_train(text)
        except Refused as e:
            print(f"hf_to_mt.py: {path}: {e}", file=sys.stderr)
            return 1
        print(f"hf_to_mt.py: {said}", file=sys.stderr)
    if a.output:
        tmp = a.output + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, a.output)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
