# expect: 11:82: error: a pooled load_balancing_loss pools the layers' rows: it belongs in a block
model m
config { V = 16; C = 8; E = 4 }
param emb "emb" [V, C]
param router "router" [E, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  return x
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  x = add_loss(x, load_balancing_loss(x @ transpose(router), top_k = 2, pooled = true))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
