# Gradient check of concat: the block below exercises it; the harness checks
# every part's gradients against central differences in double precision.
model grad_concat
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  first, others = split(x, [1, T - 1], axis = 1)
  return concat(others * 0.5, first, axis = 1)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
