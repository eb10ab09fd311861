# expect: 5:12: error: the block's checkpoint prefix must contain {i}, the layer index, once
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}.{i}" (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
