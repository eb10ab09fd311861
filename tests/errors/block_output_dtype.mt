# expect: 5:39: error: a block returns an f32 tensor, not i32
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> i32[B, T, C] {
  param w "w" [C, C]
  return x + x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
