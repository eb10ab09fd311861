# Gradient check of conv1d, the causal depthwise convolution in front of
# Gated DeltaNet and Mamba-2 layers, with its checkpoint weight [C, 1, K]
# and the silu after it; the harness checks every part's gradients against
# central differences in double precision.
model grad_conv1d
config { V = 5; C = 6; K = 3 }
param emb "emb" [V, C]
block b[2] "b.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "conv1d.weight" [C, 1, K]
  param bias "conv1d.bias" [C]
  return x + silu(conv1d(x, w) + bias)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = b(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
