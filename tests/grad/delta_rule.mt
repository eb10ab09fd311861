# Gradient check of gated_delta_rule (Qwen3-Next's Gated DeltaNet): two
# value heads reading one key head, q and k l2-normalised inside, the decay
# g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) as transformers
# computes them; a sequence longer than a chunk of the backward (64 steps)
# so that its chunk starts are exercised. The harness checks every part's
# gradients against central differences in double precision.
model grad_delta_rule
config { V = 5; C = 8; H = 2; HK = 1; DK = 4; DV = 3 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w_qkv "in_proj_qkv.weight" [2 * HK * DK + H * DV, C]
  param w_ba "in_proj_ba.weight" [2 * H, C]
  param A_log "A_log" [H]
  param dt_bias "dt_bias" [H]
  param w_o "out_proj.weight" [C, H * DV]
  q, k, v = split(x @ transpose(w_qkv), [HK * DK, HK * DK, H * DV], axis = -1)
  bb, a = split(x @ transpose(w_ba), 2, axis = -1)
  g = -exp(A_log) * softplus(a + dt_bias)
  o = gated_delta_rule(q, k, v, g, sigmoid(bb), heads = H, kv_heads = HK)
  return x + o @ transpose(w_o)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 67 }
