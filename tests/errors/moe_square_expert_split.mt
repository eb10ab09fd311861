# expect: 14:28: error: moe's w_gate is square, so it fits stored or transposed; moe reads [E, out, in] and this one is a piece of a weight split along its last axis, [E, in, out] as a fused gate_up_proj stores it: write transpose(w_gate)
model m
config { V = 16; C = 8; F = 8; E = 4; K = 2 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "router.weight" [E, C]
  # Llama 4's and gpt-oss's fused layout: [E, in, out], gate and up side by side on the last axis
  param gate_up "experts.gate_up_proj" [E, C, 2 * F]
  param down "experts.down_proj" [E, F, C]
  logits = x @ transpose(router)
  gates = router(logits, top_k = K, softmax = after)
  w_gate, w_up = split(gate_up, 2)
  # F = C: every expert weight is square, and the split says these need transpose
  return x + moe(x, gates, w_gate, w_up, transpose(down))
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
