# expect: 7:72: error: a chunked attention is causal; drop causal = false
model m
config { V = 16; C = 8; H = 2 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + attention(x, x @ w, x, heads = H, causal = false, chunk = 2)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
