# Gradient check of soft-capped attention with its own scale, grouped-query, in a window: the block below exercises it; the harness checks
# every part's gradients against central differences in double precision.
model grad_attention_softcap
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, 2 * C]
  param wkv "wkv" [C, 8]
  q, u = split(x @ w, 2, axis = -1)
  k, v = split(x @ wkv, 2, axis = -1)
  return attention(q, k * 3.0, v, heads = H, kv_heads = 1, window = 3, scale = 0.7, softcap = 1.5)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
