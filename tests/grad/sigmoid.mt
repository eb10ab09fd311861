# Gradient check of sigmoid: the block below exercises it; the harness checks
# every part's gradients against central differences in double precision.
model grad_sigmoid
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  return sigmoid(x * 2.0) * x
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
