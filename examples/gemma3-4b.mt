# Gemma 3 4B, its language model (google/gemma-3-4b-pt's text_config): five local
# layers (window 1024, rope_local_base_freq 10000) to one global (rope_theta 1e6 with
# linear scaling, factor 8), 34 layers written as an explicit order (34 is not a multiple
# of the period 6); per-head q/k RMSNorm with Gemma's (1 + w) gain, pre- and post-norms,
# GeGLU, scores scaled by query_pre_attn_scalar, tied embedding scaled by sqrt(C).
# 3,880,263,168 parameters (the vision tower is not part of it).
# Written by tools/hf_to_mt.py from the checkpoint's config.json; names are the
# checkpoint's, torch Linear weights [out, in] multiply transposed.
# The multimodal checkpoint keeps the text model's tensors under a language-model
# prefix; these names are Gemma3ForCausalLM's.
model gemma3_4b

config {
  V = 262208           # vocabulary
  C = 2560             # width
  L = 34               # layers
  NH = 8               # query heads
  NKV = 4              # key/value heads (grouped-query attention)
  HS = 256             # head width (head_dim)
  FFN = 10240          # GeGLU hidden width
  QS = 256             # query_pre_attn_scalar: scores are q.k / sqrt(QS)
  W = 1024             # sliding_window of the local layers
  local_theta = 10000.0 # rope_theta
  theta = 1000000.0    # rope_theta
  rope_factor = 8.0    # rope_scaling (rope_type linear): factor
  eps = 1e-06          # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C] init = zeros

block local "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C] init = zeros
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param q_norm "self_attn.q_norm.weight" [HS] init = zeros
  param k_norm "self_attn.k_norm.weight" [HS] init = zeros
  param post_attn_norm "post_attention_layernorm.weight" [C] init = zeros
  param ffn_norm "pre_feedforward_layernorm.weight" [C] init = zeros
  param post_ffn_norm "post_feedforward_layernorm.weight" [C] init = zeros
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, 1 + attn_norm, eps = eps)
  q = rope(reshape(rmsnorm(reshape(a @ transpose(wq), [B, T, NH, HS]), 1 + q_norm, eps = eps), [B, T, NH * HS]), heads = NH, theta = local_theta)
  k = rope(reshape(rmsnorm(reshape(a @ transpose(wk), [B, T, NKV, HS]), 1 + k_norm, eps = eps), [B, T, NKV * HS]), heads = NKV, theta = local_theta)
  v = a @ transpose(wv)
  o = attention(q, k, v, heads = NH, kv_heads = NKV, window = W, scale = 1 / sqrt(QS)) @ transpose(wo)
  x = x + rmsnorm(o, 1 + post_attn_norm, eps = eps)
  m = rmsnorm(x, 1 + ffn_norm, eps = eps)
  f = (gelu(m @ transpose(w_gate), approximate = tanh) * (m @ transpose(w_up))) @ transpose(w_down)
  return x + rmsnorm(f, 1 + post_ffn_norm, eps = eps)
}

block global "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C] init = zeros
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param q_norm "self_attn.q_norm.weight" [HS] init = zeros
  param k_norm "self_attn.k_norm.weight" [HS] init = zeros
  param post_attn_norm "post_attention_layernorm.weight" [C] init = zeros
  param ffn_norm "pre_feedforward_layernorm.weight" [C] init = zeros
  param post_ffn_norm "post_feedforward_layernorm.weight" [C] init = zeros
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, 1 + attn_norm, eps = eps)
  q = rope(reshape(rmsnorm(reshape(a @ transpose(wq), [B, T, NH, HS]), 1 + q_norm, eps = eps), [B, T, NH * HS]), heads = NH, theta = theta, scaling = linear, factor = rope_factor)
  k = rope(reshape(rmsnorm(reshape(a @ transpose(wk), [B, T, NKV, HS]), 1 + k_norm, eps = eps), [B, T, NKV * HS]), heads = NKV, theta = theta, scaling = linear, factor = rope_factor)
  v = a @ transpose(wv)
  o = attention(q, k, v, heads = NH, kv_heads = NKV, scale = 1 / sqrt(QS)) @ transpose(wo)
  x = x + rmsnorm(o, 1 + post_attn_norm, eps = eps)
  m = rmsnorm(x, 1 + ffn_norm, eps = eps)
  f = (gelu(m @ transpose(w_gate), approximate = tanh) * (m @ transpose(w_up))) @ transpose(w_down)
  return x + rmsnorm(f, 1 + post_ffn_norm, eps = eps)
}

block layers[L] = [local, local, local, local, local, global, local, local, local, local, local, global, local, local, local, local, local, global, local, local, local, local, local, global, local, local, local, local, local, global, local, local, local, local]

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens, padding_idx = 0) * sqrt(C)) # all L layers, streamed by kind; pad token 0 gets no gradient from the lookup
  return cross_entropy(rmsnorm(x, 1 + norm, eps = eps) @ transpose(tok_emb), targets) # tied LM head
}

train {
  dtype = bf16
  batch = 1
  seq = 8192
  optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 2000, min_lr = 0.1)
  clip = 1.0
  steps = 10000
}
