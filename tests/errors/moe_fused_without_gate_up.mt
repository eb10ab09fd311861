# expect: 10:14: error: moe takes 5 positional arguments (x, gates, w_gate, w_up, w_down), or 4 with a fused w_gate_up and gate_up = halves|interleaved; got 4
model m
config { V = 16; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate_up "experts.gate_up_proj" [E, C, 2 * F]
  param w_down "experts.down_proj" [E, F, C]
  gates = router(x @ transpose(router), top_k = 2)
  return x + moe(x, gates, transpose(w_gate_up), transpose(w_down))
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
