# expect: 11:12: error: the loss must be an f32 scalar; forward returns f32[2, 4, 16]
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return x @ transpose(emb)
}
train { batch = 2; seq = 4 }
