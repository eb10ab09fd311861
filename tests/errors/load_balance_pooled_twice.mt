# expect: 12:70: error: a second pooled load_balancing_loss in this block (the first at line 11); a block has at most one
model m
config { V = 16; C = 8; E = 4 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "router" [E, C]
  param w_gate[E] "g.{e}" [C, C]
  param w_up[E] "u.{e}" [C, C]
  param w_down[E] "d.{e}" [C, C]
  logits = x @ transpose(router)
  y = add_loss(x, load_balancing_loss(logits, top_k = 2, pooled = true))
  return add_loss(y, load_balancing_loss(logits, top_k = 1, pooled = true))
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  return cross_entropy(h(embed(emb, tokens)) @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
