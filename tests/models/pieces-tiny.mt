# The small pieces of the language in a model: sum(x, axis) in a query norm
# without a learned gain (Llama 4's L2 norm of each head, written as
# x / sqrt(mean(x * x) + eps), the mean a sum over each head's features), the
# same norm of the keys as rmsnorm with a constant gain (full([HS], 1.0)), and
# positions as f32 (arange(T, dtype = f32)) in a temperature on the queries
# that grows with the position (Llama 4's attention temperature tuning, in a
# simpler form). The plan (fused kernels) against the reference executor
# (train_equal_pieces-tiny).
model pieces_tiny

config {
  V = 256
  C = 32
  L = 2
  NH = 4
  HS = C / NH
  FFN = 64
  eps = 1e-6
}

param tok_emb "tok_emb" [V, C]
param norm "norm" [C]

block layers[L] "layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "attn_norm" [C]
  param wq "wq" [C, C]
  param wk "wk" [C, C]
  param wv "wv" [C, C]
  param wo "wo" [C, C] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "mlp_norm" [C]
  param w_gate "w_gate" [FFN, C]
  param w_up "w_up" [FFN, C]
  param w_down "w_down" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = reshape(a @ transpose(wq), [B, T, NH, HS])
  k = reshape(a @ transpose(wk), [B, T, NH, HS])
  q = reshape(q * exp(-0.5 * log(sum(q * q, axis = -1) / HS + eps)), [B, T, C])
  q = q * reshape(1 + 0.1 * log(arange(T, dtype = f32) + 1), [T, 1]) # a temperature by position
  k = reshape(rmsnorm(k, full([HS], 1.0), eps = eps), [B, T, C]) # the same norm, its gain a constant tensor
  x = x + attention(rope(q, heads = NH), rope(k, heads = NH), a @ transpose(wv), heads = NH) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(tok_emb), targets)
}

train {
  batch = 4
  seq = 32
  optimizer = adamw(lr = 3e-3)
  steps = 10
  data = "../../examples/data/tinyshakespeare.txt"
}
