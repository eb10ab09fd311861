# expect: 13:60: error: moe's w_down is square, so it fits stored or transposed; moe reads [E, out, in] and this one is stored as the call's other expert weights, [E, in, out]: write transpose(down)
model m
config { V = 16; C = 8; F = 8; E = 4; K = 2 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "router.weight" [E, C]
  param gate "experts.gate_proj" [E, C, F]
  param up "experts.up_proj" [E, C, F]
  param down "experts.down_proj" [E, F, C]
  logits = x @ transpose(router)
  gates = router(logits, top_k = K, softmax = after)
  # F = C: all square; gate and up are transposed, so down, stored the same way, needs it too
  return x + moe(x, gates, transpose(gate), transpose(up), down)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
