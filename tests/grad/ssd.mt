# Gradient check of ssd (Mamba-2's state-space scan): four heads in two
# groups of B and C, dt = softplus(dt + dt_bias), A = -exp(A_log) as
# transformers stores them, the skip D x beside it; a sequence longer than
# a chunk of the backward (64 steps). The harness checks every part's
# gradients against central differences in double precision.
model grad_ssd
config { V = 5; C = 8; H = 4; G = 2; P = 2; N = 3 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w_in "in_proj.weight" [H * P + 2 * G * N + H, C]
  param A_log "A_log" [H]
  param dt_bias "dt_bias" [H]
  param D "D" [H]
  param w_o "out_proj.weight" [C, H * P]
  xs, bm, cm, dt = split(x @ transpose(w_in), [H * P, G * N, G * N, H], axis = -1)
  dt = softplus(dt + dt_bias)
  y = ssd(xs, dt, -exp(A_log), bm, cm, heads = H, groups = G)
  y = y + reshape(reshape(xs, [B, T, H, P]) * reshape(D, [H, 1]), [B, T, H * P])
  return x + y @ transpose(w_o)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 66 }
