# expect: 10:42: error: padding_idx 16 is not a row of the 16-row table
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens, padding_idx = V))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
