# Gradient check of the load-balancing loss alone, joined to the objective
# by add_loss with a large coefficient (and of add_loss passing x through);
# the harness checks every part's gradients against central differences in
# double precision.
model grad_load_balance
config { V = 5; C = 8; E = 4 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w "w" [C, C]
  return add_loss(x @ transpose(w), 2.0 * load_balancing_loss(x @ transpose(router), top_k = 1))
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
