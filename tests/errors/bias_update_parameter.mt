# expect: 11:99: error: bias_update = 0.001: the bias is a trained parameter: declare it a buffer (param b "..." [E] buffer), which only this rule moves
model m
config { V = 16; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param e_bias "gate.bias" [E]
  param w_gate[E] "experts.{e}.w1.weight" [F, C]
  param w_up[E] "experts.{e}.w3.weight" [F, C]
  param w_down[E] "experts.{e}.w2.weight" [C, F]
  gates = router(x @ transpose(router), top_k = 2, scores = sigmoid, bias = e_bias, bias_update = 0.001)
  return x + moe(x, gates, w_gate, w_up, w_down)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
