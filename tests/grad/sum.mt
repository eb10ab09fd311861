# Gradient check of sum(x, axis): over the last axis and over the sequence
# (a middle one), each kept as 1 and broadcast back.
model grad_sum
config { V = 5; C = 8 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  h = x @ w
  return x + tanh(h) * sum(h * h, axis = -1) / C + sum(tanh(h), axis = 1)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
