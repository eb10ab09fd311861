# expect: 7:12: error: block 'h' returns [2, 4, 16] but its input is [2, 4, 8]; a block must return its input's shape
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, V]
  return x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
