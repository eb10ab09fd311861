# Gradient check through full([dims], v): a constant tensor as a norm's gain
# (a gainless head norm) and as an addend; it takes no gradient itself.
model grad_full
config { V = 5; C = 8; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  h = reshape(rmsnorm(reshape(x @ w, [B, T, H, C / H]), full([C / H], 1.0)), [B, T, C])
  return x + h * full([T, C], 0.5) + full([C], 0.25)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
