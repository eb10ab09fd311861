# Llama-3.1 8B (meta-llama/Llama-3.1-8B): Llama-3 8B's structure, rope's frequencies scaled
# (rope_scaling: rope_type llama3, values of its config.json). RMSNorm, rotary embeddings,
# grouped-query attention, SwiGLU, untied head.
# Parameter names are those of the Hugging Face checkpoint; torch Linear
# weights are stored [out, in], so they multiply transposed. rope rotates
# the two halves of each head, the Hugging Face convention.
model llama3_1_8b

config {
  V = 128256           # vocabulary
  C = 4096             # width
  L = 32               # layers
  NH = 32              # query heads
  NKV = 8              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  FFN = 14336          # SwiGLU hidden width
  theta = 500000.0     # rope_theta
  rope_factor = 8.0    # rope_scaling (rope_type llama3): factor
  rope_low = 1.0       # low_freq_factor
  rope_high = 4.0      # high_freq_factor
  rope_context = 8192  # original_max_position_embeddings
  eps = 1e-5
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
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta, scaling = llama3, factor = rope_factor,
           low_freq_factor = rope_low, high_freq_factor = rope_high, original_max_position_embeddings = rope_context)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta, scaling = llama3, factor = rope_factor,
           low_freq_factor = rope_low, high_freq_factor = rope_high, original_max_position_embeddings = rope_context)
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
