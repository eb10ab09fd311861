# A tiny DeepSeek-style model: a dense first layer, then mixture-of-experts
# layers (top 2 of 4 SwiGLU experts, softmax after the selection,
# load-balancing loss 0.02), in lists joined with +: [dense] + [sparse] *
# (L - 1), the layers [dense, sparse, sparse, sparse]. Each layer streams by itself with its kind's
# weights; a device weight slot holds the largest kind's (sparse).
model deepseek_tiny

config {
  V = 256
  C = 64
  L = 4
  NH = 4
  NKV = 2
  HS = C / NH
  DENSE = 128          # the dense layer's SwiGLU width
  E = 4                # experts
  K = 2                # experts a token takes
  FFN = 64             # each expert's SwiGLU width
  aux = 0.02
  theta = 10000.0
  eps = 1e-5
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block dense "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [DENSE, C]
  param w_up "mlp.up_proj.weight" [DENSE, C]
  param w_down "mlp.down_proj.weight" [C, DENSE] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV, causal = true) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block sparse "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "post_attention_layernorm.weight" [C]
  param router "mlp.gate.weight" [E, C]
  param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [FFN, C]
  param w_up[E] "mlp.experts.{e}.up_proj.weight" [FFN, C]
  param w_down[E] "mlp.experts.{e}.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV, causal = true) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, softmax = after)
  x = x + moe(m, gates, w_gate, w_up, w_down)
  return add_loss(x, aux * load_balancing_loss(logits, top_k = K))
}

block layers[L] = [dense] + [sparse] * (L - 1)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  batch = 16
  seq = 64
  optimizer = adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 20, min_lr = 0.1)
  clip = 1.0
  steps = 500
  val_every = 50
  data = "../../examples/data/tinyshakespeare.txt"
}
