# Gradient check of a Qwen-MoE-style mixture of experts: softmax before the
# top-3 selection of 6 fine-grained experts, not renormalised, beside a
# shared expert; the harness checks every part's gradients against central
# differences in double precision.
model grad_moe_qwen
config { V = 5; C = 8; E = 6; F = 4 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate[E] "experts.{e}.gate_proj.weight" [F, C]
  param w_up[E] "experts.{e}.up_proj.weight" [F, C]
  param w_down[E] "experts.{e}.down_proj.weight" [C, F]
  param shared_gate "shared_expert.gate_proj.weight" [2 * F, C]
  param shared_up "shared_expert.up_proj.weight" [2 * F, C]
  param shared_down "shared_expert.down_proj.weight" [C, 2 * F]
  gates = router(x @ transpose(router), top_k = 3, softmax = before)
  shared = swiglu(x @ transpose(shared_gate), x @ transpose(shared_up)) @ transpose(shared_down)
  return x + moe(x, gates, w_gate, w_up, w_down) + shared
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
