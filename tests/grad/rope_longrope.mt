# Gradient check of rope with LongRoPE scaling: a factor per pair (the
# short ones: seq 3 does not pass original_max_position_embeddings), cos
# and sin scaled by the attention factor derived from factor.
model grad_rope_longrope
config { V = 5; C = 16; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  return rope(x, heads = H, theta = 100.0, scaling = longrope, factor = 16, original_max_position_embeddings = 64,
              short_factor = [1.0, 1.5, 2.25, 3.0], long_factor = [2.0, 3.0, 4.0, 5.0])
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
