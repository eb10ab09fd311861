# Qwen3-8B (Qwen/Qwen3-8B): Llama's layer with an RMSNorm on each query and key head
# (q_norm, k_norm over head_dim 128) before rope, grouped-query attention (32 query, 8
# key/value heads), untied head. 8,190,735,360 parameters.
# Written by tools/hf_to_mt.py from the checkpoint's config.json; names are the
# checkpoint's, torch Linear weights [out, in] multiply transposed.
model qwen3_8b

config {
  V = 151936           # vocabulary
  C = 4096             # width
  L = 36               # layers
  NH = 32              # query heads
  NKV = 8              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  FFN = 12288          # SwiGLU hidden width
  theta = 1000000.0    # rope_theta
  eps = 1e-06          # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param q_norm "self_attn.q_norm.weight" [HS]
  param k_norm "self_attn.k_norm.weight" [HS]
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(reshape(rmsnorm(reshape(a @ transpose(wq), [B, T, NH, HS]), q_norm, eps = eps), [B, T, NH * HS]), heads = NH, theta = theta)
  k = rope(reshape(rmsnorm(reshape(a @ transpose(wk), [B, T, NKV, HS]), k_norm, eps = eps), [B, T, NKV * HS]), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV, causal = true) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
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
