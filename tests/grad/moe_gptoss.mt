# Gradient check of gpt-oss's experts: top 2 of 4 experts, moe's clamped
# SwiGLU (alpha, limit; the limit reached by some rows and not others) and
# its expert biases (gate_bias, up_bias, down_bias); the harness checks
# every part's gradients against central differences in double precision.
model grad_moe_gptoss
config { V = 5; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate[E] "experts.{e}.w1.weight" [F, C]
  param w_up[E] "experts.{e}.w3.weight" [F, C]
  param w_down[E] "experts.{e}.w2.weight" [C, F]
  param b_gate "experts.b_gate" [E, F]
  param b_up "experts.b_up" [E, F]
  param b_down "experts.b_down" [E, C]
  gates = router(x @ transpose(router), top_k = 2, softmax = after)
  return x + moe(x, gates, w_gate, w_up, w_down, alpha = 1.702, limit = 0.05, gate_bias = b_gate, up_bias = b_up,
                 down_bias = b_down)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
