# expect: 2:7: error: the batch size is not set; add 'batch = N' to the train section or pass --batch N
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { seq = 4 }
