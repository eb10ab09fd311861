# Gradient check of attention with sinks (gpt-oss's sink logit per head),
# grouped-query and windowed: the sinks' gradient and q's, k's and v's through
# them against central differences in double precision.
model grad_attention_sinks
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, 2 * C]
  param sinks "sinks" [H]
  q, kv = split(x @ w, 2, axis = -1)
  k, v = split(kv, 2, axis = -1)
  return attention(q, k, v, sinks, heads = H, kv_heads = 1, window = 2)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
