# Gradient check through floor(x), which takes none (as the comparisons): Llama
# 4's attention temperature, a per-position scale of the rows made with it,
# against central differences in double precision (the positions' floor is
# piecewise constant, its difference quotient 0 away from the steps).
model grad_floor
config { V = 5; C = 8 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x @ w * reshape(log(floor((arange(T, dtype = f32) + 1) / 2.0) + 1) * 0.5 + 1, [T, 1])
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
