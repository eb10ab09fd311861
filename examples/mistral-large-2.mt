# Mistral Large 2 (Mistral-Large-Instruct-2407, 123B class): Llama's layer
# (grouped-query attention, no sliding window, SwiGLU), untied head, as its
# published config.json: hidden 12288, 88 layers, 96 heads of 128, 8
# key/value heads, intermediate 28672, vocabulary 32768, rope_theta 1e6,
# rms_norm_eps 1e-5. 122,610,069,504 parameters:
#   per layer 2 * 12288^2 (q, o) + 2 * 1024 * 12288 (k, v)
#             + 3 * 28672 * 12288 (gate, up, down) + 2 * 12288 (norms) = 1,384,144,896
#   88 layers, two 32768 x 12288 embeddings (untied) and the final norm.
# Its fp32 master and both Adam moments take 1.96 TB at 16 bytes a
# parameter: past the 1.5 TB of host memory of schedules/h200.target, which
# plans it with the Adam moments on the NVMe tier (mtrun --tier-dir).
# Parameter names are those of the Hugging Face checkpoint; torch Linear
# weights are stored [out, in], so they multiply transposed. rope rotates
# the two halves of each head, the Hugging Face convention.
model mistral_large_2

config {
  V = 32768            # vocabulary
  C = 12288            # width
  L = 88               # layers
  NH = 96              # query heads
  NKV = 8              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  FFN = 28672          # SwiGLU hidden width
  theta = 1000000.0
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
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
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
