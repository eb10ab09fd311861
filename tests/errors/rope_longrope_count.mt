# expect: 6:102: error: short_factor has 3 factors; the rotated heads, 4 wide, have 2 pairs
model m
config { V = 16; C = 8; H = 2 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  return rope(x, heads = H, scaling = longrope, original_max_position_embeddings = 8, short_factor = [1, 2, 3], long_factor = [1, 2])
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
