# Attention with heads wider than 128 and value heads of their own width
# (DeepSeek's latent attention: 192 wide for queries and keys, 128 for
# values), grouped-query, at tiny widths otherwise: the tensor-core flash
# attention's D 192 / Dv 128 variant (compiler/emit/cuda/attention_tc.cuh) run
# by the cuda backend on the emulation (cuda_emu_train_wide-heads-tiny,
# bf16 only: f32 storage has no CUDA kernel for value heads of their own
# width). seq 70: query blocks and key tiles past the first, one part-full.
model wide_heads_tiny

config {
  V = 256
  C = 64
  L = 2
  NH = 4
  NKV = 2
  D = 192
  DV = 128
  FFN = 128
  eps = 1e-5
}

param tok_emb "tok_emb" [V, C]
param norm "norm" [C]
param lm_head "lm_head" [V, C]

block layers[L] "layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "attn_norm" [C]
  param wq "wq" [NH * D, C]
  param wk "wk" [NKV * D, C]
  param wv "wv" [NKV * DV, C]
  param wo "wo" [C, NH * DV] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "mlp_norm" [C]
  param w_gate "w_gate" [FFN, C]
  param w_up "w_up" [FFN, C]
  param w_down "w_down" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  v = a @ transpose(wv)
  x = x + attention(a @ transpose(wq), a @ transpose(wk), v, heads = NH, kv_heads = NKV, causal = true) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  batch = 2
  seq = 70
  optimizer = adamw(lr = 3e-3)
  steps = 10
  data = "../../examples/data/tinyshakespeare.txt"
}
