# Gradient check of a Mixtral-style mixture of experts: top 2 of 4 experts,
# softmax after the selection, dropless dispatch, the load-balancing loss
# joined to the objective; the harness checks every part's gradients
# against central differences in double precision.
model grad_moe_mixtral
config { V = 5; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate[E] "experts.{e}.w1.weight" [F, C]
  param w_up[E] "experts.{e}.w3.weight" [F, C]
  param w_down[E] "experts.{e}.w2.weight" [C, F]
  logits = x @ transpose(router)
  gates = router(logits, top_k = 2, softmax = after)
  y = x + moe(x, gates, w_gate, w_up, w_down)
  return add_loss(y, 0.3 * load_balancing_loss(logits, top_k = 2))
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
