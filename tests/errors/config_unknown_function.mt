# expect: 3:22: error: 'round(...)' is not a constant; expected a number (the functions of constants are sqrt, ln, log, exp, pow, min, max, floor, ceil and abs)
model m
config { V = 16; C = round(8.2) }
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
