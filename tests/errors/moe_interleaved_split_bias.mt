# expect: 11:14: error: moe's interleaved gate_up takes its biases as gate_up_bias = b [4, 12], interleaved as the weight
model m
config { V = 16; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate_up "experts.gate_up_proj" [E, C, 2 * F]
  param w_down "experts.down_proj" [E, F, C]
  param b "experts.gate_bias" [E, F]
  gates = router(x @ transpose(router), top_k = 2)
  return x + moe(x, gates, transpose(w_gate_up), transpose(w_down), gate_up = interleaved, gate_bias = b)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
