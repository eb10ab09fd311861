#!/usr/bin/env python3
"""Writes an mt model file from a Hugging Face config.json.

usage: hf_to_mt.py CONFIG [-o MODEL.mt] [--name NAME]

CONFIG is a checkpoint folder or its config.json. transformers' own config
class reads it (so its defaults and its rope_scaling / rope_parameters
conventions apply), and the model is written as the family's example in
examples/ is: the same statements, parameter names (the checkpoint's), init
and train section, so that `mtc --dump-graph` of the two is the same graph.

Families: llama (Llama 2, 3, 3.1, 3.2, 3.3: rope scaling llama3), mistral,
qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, olmo2, gemma2, gemma3_text (and
gemma3's text_config), gpt2, gpt_neox (Pythia), phi3, qwen3_next (Gated DeltaNet
and gated attention layers, dsl/README.md's gated_delta_rule), granitemoehybrid (Granite
4.0-H: Mamba-2 layers, dsl/README.md's ssd, and attention layers), bamba. Rope scaling: linear,
llama3, yarn, longrope. What the tool cannot map is refused, naming the
field: an unknown model_type, a config field it does not know for the
family, or a value it cannot express (an attention bias on Llama, a
sequential residual on GPT-NeoX, ...). Exit status 0, or 1 with the reason.
"""
import argparse
import json
import math
import os
import sys

# Fields that never change the function computed (metadata, generation,
# initialisation, the cache), for every family.
BENIGN = set("""
architectures auto_map bos_token_id eos_token_id pad_token_id torch_dtype dtype transformers_version use_cache
initializer_range model_type max_position_embeddings attention_dropout hidden_dropout embd_pdrop resid_pdrop
attn_pdrop summary_activation summary_first_dropout summary_proj_to_labels summary_type summary_use_proj
task_specific_params n_ctx classifier_dropout _name_or_path output_router_logits router_jitter_noise
cache_implementation max_window_layers sliding_window_pattern use_sliding_window tokenizer_class
scale_attn_weights reorder_and_upcast_attn scale_attn_by_inverse_layer_idx id2label label2id bias_dropout_add
final_logit_softcapping attn_logit_softcapping rope_scaling rope_theta rope_parameters rope_local_base_freq
partial_rotary_factor rotary_pct rotary_emb_base head_dim pretraining_tp tie_word_embeddings
original_max_position_embeddings sliding_window layer_types use_bidirectional_attention
""".split())

# The fields each family maps (beside BENIGN ones it checks itself).
DECODER = "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads " \
          "rms_norm_eps hidden_act attention_bias mlp_bias"
FIELDS = {
    "llama": DECODER,
    "mistral": DECODER,
    "qwen2": DECODER,
    "qwen3": DECODER,
    "olmo2": DECODER,
    "phi3": DECODER,
    "mixtral": DECODER + " num_local_experts num_experts_per_tok router_aux_loss_coef",
    "qwen2_moe": DECODER + " num_experts num_experts_per_tok router_aux_loss_coef moe_intermediate_size "
                           "shared_expert_intermediate_size norm_topk_prob decoder_sparse_step mlp_only_layers qkv_bias",
    "qwen3_moe": DECODER + " num_experts num_experts_per_tok router_aux_loss_coef moe_intermediate_size "
                           "norm_topk_prob decoder_sparse_step mlp_only_layers",
    "gemma2": DECODER + " hidden_activation query_pre_attn_scalar",
    "gemma3_text": DECODER + " hidden_activation query_pre_attn_scalar",
    "gpt2": "vocab_size n_positions n_embd n_layer n_head n_inner activation_function layer_norm_epsilon",
    "gpt_neox": "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads hidden_act "
                "layer_norm_eps use_parallel_residual attention_bias",
    "qwen3_next": DECODER + " num_experts num_experts_per_tok router_aux_loss_coef moe_intermediate_size "
                            "shared_expert_intermediate_size norm_topk_prob decoder_sparse_step mlp_only_layers "
                            "linear_conv_kernel_dim linear_key_head_dim linear_value_head_dim linear_num_key_heads "
                            "linear_num_value_heads full_attention_interval",
    "granitemoehybrid": DECODER + " num_local_experts num_experts_per_tok router_aux_loss_coef "
                                  "shared_intermediate_size embedding_multiplier logits_scaling residual_multiplier "
                                  "attention_multiplier position_embedding_type mamba_n_heads mamba_n_groups "
                                  "mamba_d_state mamba_d_head mamba_d_conv mamba_expand mamba_chunk_size "
                                  "mamba_conv_bias mamba_proj_bias time_step_limit normalization_function init_method",
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
    allowed = set(FIELDS[mt].split()) | BENIGN | set(extra)
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
    """llama, mistral, qwen2, qwen3, olmo2, phi3, and the MoE ones (mixtral, qwen2_moe, qwen3_moe)."""
    check_fields(mt, raw)
    act(cfg, "hidden_act", ("silu",), "SwiGLU (hidden_act silu)")
    need(not getattr(cfg, "mlp_bias", False), "mlp_bias", True, "mt writes bias-free MLPs for this family")
    tp = getattr(cfg, "pretraining_tp", 1)
    need(tp in (1, None), "pretraining_tp", tp, "only 1 computes the same function")
    bias = mt in ("qwen2", "qwen2_moe") or bool(getattr(cfg, "attention_bias", False))
    need(not (bias and mt in ("llama", "mistral", "olmo2", "phi3", "mixtral", "qwen3", "qwen3_moe")),
         "attention_bias", True, "not mapped for this family")
    qk_head_norm = mt in ("qwen3", "qwen3_moe")
    qk_full_norm = mt == "olmo2"
    moe = mt in ("mixtral", "qwen2_moe", "qwen3_moe")
    if mt in ("qwen2_moe", "qwen3_moe"):
        need(getattr(cfg, "decoder_sparse_step", 1) == 1, "decoder_sparse_step", cfg.decoder_sparse_step,
             "mt writes every layer sparse")
        need(not getattr(cfg, "mlp_only_layers", []), "mlp_only_layers", cfg.mlp_only_layers, "mt writes every layer sparse")
    window = None
    if mt in ("mistral", "mixtral", "phi3"):
        window = getattr(cfg, "sliding_window", None)
    if mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and getattr(cfg, "use_sliding_window", False):
        raise Refused(f"field use_sliding_window = true: the window on only some layers (max_window_layers) is not mapped")
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
        w.const("aux", num(float(cfg.router_aux_loss_coef)), "router_aux_loss_coef")
    else:
        w.const("FFN", cfg.intermediate_size, "SwiGLU hidden width")
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
    kvh = "NKV" if gqa else "NH"
    L.append('block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
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
    P(f"q = rope({qx}, heads = NH, {rope_kw})")
    P(f"k = rope({kx}, heads = {kvh}, {rope_kw})")
    if mt != "phi3":
        P(f"v = {h} @ transpose(wv){b('v')}")
    att = f"attention(q, k, v, heads = NH" + (f", kv_heads = {kvh}" if gqa else "") + ", causal = true" + \
          (", window = W" if window else "") + ")"
    if mt == "olmo2":
        P(f"x = x + rmsnorm({att} @ transpose(wo), post_attn_norm, eps = eps)")
        P("return x + rmsnorm(swiglu(x @ transpose(w_gate), x @ transpose(w_up)) @ transpose(w_down), post_ffn_norm, "
          "eps = eps)")
    else:
        P(f"x = x + {att} @ transpose(wo)")
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
            P("return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))")
        else:
            P("m = rmsnorm(x, mlp_norm, eps = eps)")
            if mt == "phi3":
                P("gate, up = split(m @ transpose(w_gate_up), 2)")
                P("return x + swiglu(gate, up) @ transpose(w_down)")
            else:
                P("return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)")
    L.append("}\n")
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)})) # all L layers, streamed")
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}), targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


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
    period = next(p for p in range(1, len(kinds) + 1) if len(kinds) % p == 0 and kinds == kinds[:p] * (len(kinds) // p))
    if period < len(kinds) and len(set(kinds[:period])) == 2:
        n = len(kinds) // period
        rep = "(L / 2)" if period == 2 else f"(L / {period})"
        L.append(f"block layers[L] = [{', '.join(kinds[:period])}] * {rep}\n")
    else:
        need(len(set(kinds)) == 2, "layer_types", types, "mt writes Gemma with both local and global layers")
        L.append(f"block layers[L] = [{', '.join(kinds)}]\n")
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


def gpt2(mt, cfg, raw, name):
    check_fields(mt, raw)
    act(cfg, "activation_function", ("gelu_new",), "GPT-2's tanh GELU (gelu_new)")
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

param wte "wte.weight" [V, C]
param wpe "wpe.weight" [ctx, C] init = normal(std = 0.01)
param lnf_g "ln_f.weight" [C]
param lnf_b "ln_f.bias" [C]

block h[L] "h.{{i}}." (x: [B, T, C]) -> [B, T, C] {{
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
  x = x + attention(q, k, v, heads = NH, causal = true) @ proj_w + proj_b
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
    """A block order of the layers' kinds: the shortest period repeated, as `[a, b] * (L / n)`, or listed."""
    period = next(p for p in range(1, len(kinds) + 1) if len(kinds) % p == 0 and kinds == kinds[:p] * (len(kinds) // p))
    need(len(set(kinds)) == 2, field, value, "mt writes this family with both kinds of layer")
    if period < len(kinds):
        return f"[{', '.join(kinds[:period])}] * (L / {period})"
    return f"[{', '.join(kinds)}]"


def qwen_next_moe(P):
    """Qwen3-Next's sparse MLP: softmax router, top K renormalised, a shared expert with a sigmoid gate, the pooled
    load-balancing loss."""
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
            "return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))"]


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
    moe = qwen_next_moe(P)
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
    qwen_next_moe(P)
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
        if cfg.router_aux_loss_coef:
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
    mamba_checks(cfg)
    pe = getattr(cfg, "position_embedding_type", None)
    need(pe in (None, "nope", "rope"), "position_embedding_type", pe, "mt maps nope and rope")
    nf = raw.get("normalization_function", "rmsnorm")
    need(nf == "rmsnorm", "normalization_function", nf, "mt maps rmsnorm")
    w = Writer(name, "")
    C, NH, NKV, HS = decoder_sizes(w, cfg)
    mamba_consts(w, cfg, C)
    moe = cfg.num_local_experts > 0
    if moe:
        w.const("E", cfg.num_local_experts, "num_local_experts")
        w.const("K", cfg.num_experts_per_tok, "num_experts_per_tok")
        w.const("FFN", cfg.intermediate_size, "each expert's SwiGLU width (intermediate_size)")
        if cfg.router_aux_loss_coef:
            w.const("aux", num(float(cfg.router_aux_loss_coef)), "router_aux_loss_coef")
    w.const("SFFN", cfg.shared_intermediate_size, "shared_intermediate_size")
    w.const("EMB", num(float(cfg.embedding_multiplier)), "embedding_multiplier")
    w.const("RES", num(float(cfg.residual_multiplier)), "residual_multiplier")
    w.const("ATT", num(float(cfg.attention_multiplier)), "attention_multiplier: scores are q.k x ATT")
    w.const("LOGS", num(float(cfg.logits_scaling)), "logits_scaling: logits divided by it")
    rope_kw = rope_rule(w, dict(cfg.rope_parameters or {}), "", HS) if pe == "rope" else None
    w.const("eps", num(float(cfg.rms_norm_eps)), "rms_norm_eps")
    tied = bool(cfg.tie_word_embeddings)
    L = [f"model {name}\n", w.config_text() + "\n", f'param tok_emb "model.embed_tokens.weight" [V, C]',
         'param norm "model.norm.weight" [C]'] + ([] if tied else ['param lm_head "lm_head.weight" [V, C]']) + [""]
    P = lambda s: L.append("  " + s)
    L.append('block mamba "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
    P('param attn_norm "input_layernorm.weight" [C]')
    mixer = mamba_mixer(P, cfg, "RES * ")
    mlp = granite_mlp(P, cfg)
    L.append("")
    for s in mixer + mlp:
        P(s)
    L.append("}\n")
    L.append('block attn "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {')
    P('param attn_norm "input_layernorm.weight" [C]')
    attention_params(P, "NH * HS", "NKV * HS")
    granite_mlp(P, cfg)
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
    types = list(cfg.layer_types)
    for t in types:
        need(t in ("linear_attention", "full_attention", "attention"), "layer_types", t, "mt maps mamba and attention")
    kinds = ["mamba" if t == "linear_attention" else "attn" for t in types]
    L.append(f"block layers[L] = {layer_order(kinds, 'layer_types', types)}\n")
    L.append("forward(tokens: i32[B, T], targets: i32[B, T]) {")
    P(f"x = layers(embed(tok_emb, tokens{padding(cfg)}) * EMB) # all L layers, streamed by kind")
    P(f"return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose({'tok_emb' if tied else 'lm_head'}) / LOGS, "
      "targets)")
    L.append("}\n")
    L.append(train(getattr(cfg, "max_position_embeddings", None)))
    return "\n".join(L) + "\n"


WRITERS = {
    "llama": llama_like, "mistral": llama_like, "qwen2": llama_like, "qwen3": llama_like, "olmo2": llama_like,
    "phi3": llama_like, "mixtral": llama_like, "qwen2_moe": llama_like, "qwen3_moe": llama_like,
    "gemma2": gemma, "gemma3_text": gemma, "gpt2": gpt2, "gpt_neox": gpt_neox, "qwen3_next": qwen3_next,
    "granitemoehybrid": granitemoehybrid, "bamba": bamba,
}


def convert(raw, name=None):
    """The model file for a config.json's contents (a dict); raises Refused."""
    mt = raw.get("model_type")
    if mt == "gemma3":  # the multimodal wrapper: its language model
        need("text_config" in raw, "text_config", None, "gemma3 needs its text_config")
        raw = dict(raw["text_config"], model_type="gemma3_text")
        mt = "gemma3_text"
    if mt not in WRITERS:
        raise Refused(f"model_type {json.dumps(mt)} is not one hf_to_mt.py maps (it maps {', '.join(sorted(WRITERS))})")
    import logging
    import transformers
    transformers.logging.set_verbosity_error()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    fields = {k: v for k, v in raw.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(mt, **fields)
    name = name or "model"
    return WRITERS[mt](mt, cfg, raw, name)


def main():
    ap = argparse.ArgumentParser(description="Writes an mt model file from a Hugging Face config.json.")
    ap.add_argument("config", help="a checkpoint folder or its config.json")
    ap.add_argument("-o", "--output", help="the model file to write (default: standard output)")
    ap.add_argument("--name", help="the model's name (default: from the folder's name)")
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
        text = convert(raw, name)
    except Refused as e:
        print(f"hf_to_mt.py: {path}: {e}", file=sys.stderr)
        return 1
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
