# Gradient check of sliding-window attention (each query sees itself and the one before): the block below exercises it; the harness checks
# every part's gradients against central differences in double precision.
model grad_attention_window
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, 3 * C]
  q, k, v = split(x @ w, 3, axis = -1)
  return attention(q, k, v, heads = H, window = 2)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
