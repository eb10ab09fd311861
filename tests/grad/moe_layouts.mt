# Gradient check of moe's expert weights read in the layouts checkpoints
# store them (Node.moe_form), top 2 of 4 experts, F != C: block a reads
# each weight transposed, [E, in, out]; block h a fused gate_up [E, 2F, C]
# as halves (the gate, then the up); block l Llama 4's [E, C, 2F] halves
# and its down [E, F, C]; block g gpt-oss's [E, C, 2F] interleaved (the
# gate at even columns) with its biases and the clamped SwiGLU; block i Llama 4's layout
# with the gates on the experts' input (expert e runs on gate_e x, its
# output not gated), top 2. The harness checks every part's gradients
# against central differences in double precision.
model grad_moe_layouts
config { V = 5; C = 8; E = 4; F = 6; L = 5 }
param emb "emb" [V, C]
block a "a.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate "experts.w1" [E, C, F]
  param w_up "experts.w3" [E, C, F]
  param w_down "experts.w2" [E, F, C]
  gates = router(x @ transpose(router), top_k = 2, softmax = after)
  return x + moe(x, gates, transpose(w_gate), transpose(w_up), transpose(w_down))
}
block h "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate_up "experts.gate_up" [E, 2 * F, C]
  param w_down "experts.down" [E, C, F]
  gates = router(x @ transpose(router), top_k = 2, softmax = after)
  return x + moe(x, gates, w_gate_up, w_down, gate_up = halves)
}
block l "l.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate_up "experts.gate_up_proj" [E, C, 2 * F]
  param w_down "experts.down_proj" [E, F, C]
  gates = router(x @ transpose(router), top_k = 2, softmax = after)
  return x + moe(x, gates, transpose(w_gate_up), transpose(w_down), gate_up = halves)
}
block g "g.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate_up "experts.gate_up_proj" [E, C, 2 * F]
  param w_down "experts.down_proj" [E, F, C]
  param b_gate_up "experts.gate_up_proj_bias" [E, 2 * F]
  param b_down "experts.down_proj_bias" [E, C]
  gates = router(x @ transpose(router), top_k = 2, softmax = after)
  return x + moe(x, gates, transpose(w_gate_up), transpose(w_down), gate_up = interleaved, alpha = 1.702,
                 limit = 0.05, gate_up_bias = b_gate_up, down_bias = b_down)
}
block i "i.{i}." (x: [B, T, C]) -> [B, T, C] {
  param router "gate.weight" [E, C]
  param w_gate_up "experts.gate_up_proj" [E, C, 2 * F]
  param w_down "experts.down_proj" [E, F, C]
  logits = x @ transpose(router)
  gates = where(router(logits, top_k = 2, softmax = after), sigmoid(logits), 0)
  return x + moe(x, gates, transpose(w_gate_up), transpose(w_down), gate_up = halves, gates_on = input)
}
block layers[L] = [a, h, l, g, i]
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 5 }
