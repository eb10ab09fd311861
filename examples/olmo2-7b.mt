# OLMo-2 7B (allenai/OLMo-2-1124-7B): norms after attention and MLP, not before
# (post_attention_layernorm, post_feedforward_layernorm on the branch outputs), RMSNorm
# on the whole query and key projections (q_norm, k_norm) before rope, untied head.
# 7,298,617,344 parameters.
# Written by tools/hf_to_mt.py from the checkpoint's config.json; names are the
# checkpoint's, torch Linear weights [out, in] multiply transposed.
model olmo2_7b

config {
  V = 100352           # vocabulary
  C = 4096             # width
  L = 32               # layers
  NH = 32              # query heads
  NKV = 32             # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  FFN = 11008          # SwiGLU hidden width
  theta = 500000.0     # rope_theta
  eps = 1e-06          # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param q_norm "self_attn.q_norm.weight" [NH * HS]
  param k_norm "self_attn.k_norm.weight" [NKV * HS]
  param post_attn_norm "post_attention_layernorm.weight" [C]
  param post_ffn_norm "post_feedforward_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  q = rope(rmsnorm(x @ transpose(wq), q_norm, eps = eps), heads = NH, theta = theta)
  k = rope(rmsnorm(x @ transpose(wk), k_norm, eps = eps), heads = NKV, theta = theta)
  v = x @ transpose(wv)
  x = x + rmsnorm(attention(q, k, v, heads = NH, kv_heads = NKV, causal = true) @ transpose(wo), post_attn_norm, eps = eps)
  return x + rmsnorm(swiglu(x @ transpose(w_gate), x @ transpose(w_up)) @ transpose(w_down), post_ffn_norm, eps = eps)
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens, padding_idx = 100277)) # all L layers, streamed; OLMo-2's pad token gets no gradient from the lookup
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  dtype = bf16
  batch = 1
  seq = 4096
  optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 2000, min_lr = 0.1)
  clip = 1.0
  steps = 10000
}
