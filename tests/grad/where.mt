# Gradient check of where and the comparisons, which take no gradient: the block below exercises it; the harness checks
# every part's gradients against central differences in double precision.
model grad_where
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param s "s" [C]
  y = where(gt(x, 0.0), x, x * 0.1) + where(le(x, s), s, 0.5)
  return y + lt(x, 0.2) * x - ge(x, s) + eq(x, x) - ne(x, 0.0) * x
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
