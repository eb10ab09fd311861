# Gradient check of attention whose value heads are narrower than its query
# and key heads (DeepSeek's latent attention: 192 and 128): 2 query heads of
# 6 over 1 key head of 6 and 1 value head of 4, causal; the output is 2
# heads of 4. The harness checks every part's gradients against central
# differences in double precision.
model grad_attention_value_width
config { V = 5; C = 8; H = 2; KVH = 1; D = 6; DV = 4 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param wq "wq" [C, H * D]
  param wk "wk" [C, KVH * D]
  param wv "wv" [C, KVH * DV]
  param wo "wo" [H * DV, C]
  return x + attention(x @ wq, x @ wk, x @ wv, heads = H, kv_heads = KVH) @ wo
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
