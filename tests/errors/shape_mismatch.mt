# expect: 7:16: error: shape mismatch in matmul: [2, 4, 8] @ [16, 8]; inner dimensions 8 and 16 differ
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [V, C]
  return x + x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
