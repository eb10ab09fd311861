# expect: 11:14: error: no router limits moe's gates: every row would run all 4 experts; gate it with router(logits, top_k = K, ...) (or a product, quotient or where with its gates), or write router(logits, top_k = 4, ...) to run every expert on every row
model m
config { V = 16; C = 8; E = 4; F = 6 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate[E] "experts.{e}.w1.weight" [F, C]
  param w_up[E] "experts.{e}.w3.weight" [F, C]
  param w_down[E] "experts.{e}.w2.weight" [C, F]
  gates = softmax(x @ transpose(router))
  return x + moe(x, gates, w_gate, w_up, w_down)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
