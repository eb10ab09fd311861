# expect: 6:10: error: llama3 scaling needs original_max_position_embeddings > 0
model m
config { V = 16; C = 8; H = 2 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  return rope(x, heads = H, scaling = llama3, factor = 8, low_freq_factor = 1, high_freq_factor = 4)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
