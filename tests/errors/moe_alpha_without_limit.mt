# expect: 11:14: error: moe's clamped SwiGLU needs both alpha and limit (gpt-oss's swiglu_alpha, swiglu_limit); usage: moe(x, gates, w_gate, w_up, w_down, gates_on=output|input, act=silu|gelu|gelu_tanh, alpha=A, limit=L, gate_bias=b, up_bias=b, down_bias=b), or moe(x, gates, w_gate_up, w_down, gate_up=halves|interleaved, gate_up_bias=b, ...)
model m
config { V = 16; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate[E] "experts.{e}.w1.weight" [F, C]
  param w_up[E] "experts.{e}.w3.weight" [F, C]
  param w_down[E] "experts.{e}.w2.weight" [C, F]
  gates = router(x @ transpose(router), top_k = 2)
  return x + moe(x, gates, w_gate, w_up, w_down, alpha = 1.702)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
