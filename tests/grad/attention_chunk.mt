# Gradient check of chunked attention (Llama 4's: each query sees the keys of
# its own chunk of 2 positions, causal within): the block below exercises it
# across two chunk boundaries; the harness checks every part's gradients
# against central differences in double precision.
model grad_attention_chunk
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, 3 * C]
  q, k, v = split(x @ w, 3, axis = -1)
  return attention(q, k, v, heads = H, chunk = 2)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
