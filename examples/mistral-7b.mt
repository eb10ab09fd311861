# Mistral-7B v0.1: Llama's layer with sliding-window attention (each position
# sees itself and the 4095 before it), grouped-query attention, untied head.
# Parameter names are those of the Hugging Face checkpoint; torch Linear
# weights are stored [out, in], so they multiply transposed. rope rotates
# the two halves of each head, the Hugging Face convention.
model mistral_7b

config {
  V = 32000            # vocabulary
  C = 4096             # width
  L = 32               # layers
  NH = 32              # query heads
  NKV = 8              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  FFN = 14336          # SwiGLU hidden width
  theta = 10000.0
  W = 4096             # sliding_window
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
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV, window = W) @ transpose(wo)
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
