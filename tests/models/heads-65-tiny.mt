# Attention whose query and key heads are 65 wide (64 and one extra key
# feature) and whose value heads are 64: f32 or bf16, no CUDA kernel of mt's
# runs it (the fp32 template takes one head width, the tensor-core one heads
# of 64, 128, 192 or 256), so every front door of mtc (--explain, --explore,
# --batch auto, -o) refuses it for a GPU target alike, and plans it for a cpu
# target (check_fits.py).
model heads_65_tiny

config {
  V = 256
  C = 64
  L = 2
  NH = 4
  NKV = 2
  D = 65
  DV = 64
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
