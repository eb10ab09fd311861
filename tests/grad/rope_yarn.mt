# Gradient check of rope with YaRN scaling (a ramp between the kept and the
# interpolated pairs, cos and sin scaled by the attention factor) on
# interleaved pairs (GPT-J, DeepSeek).
model grad_rope_yarn
config { V = 5; C = 32; H = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  return rope(x, heads = H, theta = 100.0, scaling = yarn, factor = 4, original_max_position_embeddings = 64,
              beta_fast = 8, beta_slow = 1, interleaved = true)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
