# Gradient check of GeGLU experts: moe's act = gelu (gelu(g, approximate =
# none), erf's) and act = gelu_tanh (approximate = tanh) on the same
# experts, top 2 of 4, their outputs summed; the harness checks every
# part's gradients against central differences in double precision.
model grad_moe_geglu
config { V = 5; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate[E] "experts.{e}.w1.weight" [F, C]
  param w_up[E] "experts.{e}.w3.weight" [F, C]
  param w_down[E] "experts.{e}.w2.weight" [C, F]
  logits = x @ transpose(router)
  gates = router(logits, top_k = 2, softmax = after)
  erf_form = moe(x, gates, w_gate, w_up, w_down, act = gelu)
  return x + erf_form + moe(x, gates, w_gate, w_up, w_down, act = gelu_tanh)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
