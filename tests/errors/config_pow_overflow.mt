# expect: 3:29: error: pow(3, 40) overflows a 64-bit integer (pow(3.0, 40) is a number)
model m
config { V = 16; C = 8; s = pow(3, 40) }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + x @ w
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
