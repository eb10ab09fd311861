# gpt-oss's attention at tiny widths: a learned sink logit per head
# (attention(q, k, v, sinks, ...)), sliding-window layers and full ones
# alternating, the full kind derived from the sliding one (a window as long
# as the sequence), grouped-query heads of 64 (the tensor-core kernel under
# bf16). The cuda backend on the emulation against the cpu backend
# (cuda_emu_train_sinks-tiny). seq 70: query blocks and key tiles past the
# first, one part-full; no power of two.
model sinks_tiny

config {
  V = 256
  C = 64
  L = 2
  NH = 4
  NKV = 2
  HS = 64
  W = 16               # the sliding layers' window
  FFN = 128
  eps = 1e-5
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block sliding "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param sinks "self_attn.sinks" [NH]
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  o = attention(a @ transpose(wq), a @ transpose(wk), a @ transpose(wv), sinks, heads = NH, kv_heads = NKV, window = W)
  x = x + o @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block full = sliding with W = T

block layers[L] = [sliding, full] * (L / 2)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  batch = 2
  seq = 70
  optimizer = adamw(lr = 3e-3)
  steps = 10
  data = "../../examples/data/tinyshakespeare.txt"
}
