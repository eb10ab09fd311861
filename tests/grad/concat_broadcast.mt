# Gradient check of concat broadcasting its size-1 axes: a key shared by the
# heads (DeepSeek's rope key, [B, T, 1, R]) joined to each head's own part
# along the last axis, and a [B, T, 1, 1] column joined along the heads' axis;
# the harness checks every part's gradients against central differences in
# double precision.
model grad_concat_broadcast
config { V = 5; C = 8; H = 2; N = 3; R = 2 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param wn "wn" [C, H * N]
  param wr "wr" [C, R]
  param wc "wc" [C, 1]
  param wo "wo" [H * (N + R), C]
  param wp "wp" [(H + 1) * (N + R), C]
  k = concat(reshape(x @ wn, [B, T, H, N]), reshape(x @ wr, [B, T, 1, R]))
  c = concat(k, reshape(x @ wc, [B, T, 1, 1]), axis = 2)
  return x + reshape(k, [B, T, H * (N + R)]) @ wo + reshape(c, [B, T, (H + 1) * (N + R)]) @ wp
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 3 }
