# expect: 10:28: error: moe's w_gate_up is read [E, out, in], [4, 12, 8]; this one is stored [E, in, out]: write transpose(w_gate_up)
model m
config { V = 16; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate_up "experts.gate_up_proj" [E, C, 2 * F]
  param w_down "experts.down_proj" [E, F, C]
  gates = router(x @ transpose(router), top_k = 2)
  return x + moe(x, gates, w_gate_up, transpose(w_down), gate_up = halves)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
