# expect: 7:29: error: unknown argument 'epsilon' to layernorm; expected eps
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return layernorm(x, w, w, epsilon = 1)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
