# expect: 6:39: error: scaling must be none, linear, llama3, yarn or longrope
model m
config { V = 16; C = 8; H = 2 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  return rope(x, heads = H, scaling = ntk, factor = 8)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
