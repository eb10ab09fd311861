# Gradient check of rope with Llama 3.1's frequency scaling (factors small
# enough that all three bands, kept, smoothed and interpolated, occur at D 16).
model grad_rope_llama3
config { V = 5; C = 32; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  return rope(x, heads = H, theta = 100.0, scaling = llama3, factor = 8, low_freq_factor = 1,
              high_freq_factor = 4, original_max_position_embeddings = 32)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
