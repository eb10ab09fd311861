# Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B): Qwen3's attention (per-head q/k RMSNorm, 32 query
# and 4 key/value heads of 128) and in every layer 8 of 128 SwiGLU experts (768 wide),
# softmax before the selection, the selected renormalised (norm_topk_prob), load-balancing
# loss 0.001 pooled over all layers' tokens (transformers' form). 30,532,122,624 parameters.
# Written by tools/hf_to_mt.py from the checkpoint's config.json; names are the
# checkpoint's, torch Linear weights [out, in] multiply transposed.
model qwen3_30b_a3b

config {
  V = 151936           # vocabulary
  C = 2048             # width
  L = 48               # layers
  NH = 32              # query heads
  NKV = 4              # key/value heads (grouped-query attention)
  HS = 128             # head width (head_dim)
  E = 128              # num_experts
  K = 8                # num_experts_per_tok
  FFN = 768            # moe_intermediate_size
  aux = 0.001          # router_aux_loss_coef
  theta = 1000000.0    # rope_theta
  eps = 1e-06          # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param q_norm "self_attn.q_norm.weight" [HS]
  param k_norm "self_attn.k_norm.weight" [HS]
  param moe_norm "post_attention_layernorm.weight" [C]
  param router "mlp.gate.weight" [E, C]
  param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [FFN, C]
  param w_up[E] "mlp.experts.{e}.up_proj.weight" [FFN, C]
  param w_down[E] "mlp.experts.{e}.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(reshape(rmsnorm(reshape(a @ transpose(wq), [B, T, NH, HS]), q_norm, eps = eps), [B, T, NH * HS]), heads = NH, theta = theta)
  k = rope(reshape(rmsnorm(reshape(a @ transpose(wk), [B, T, NKV, HS]), k_norm, eps = eps), [B, T, NKV * HS]), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV, causal = true) @ transpose(wo)
  m = rmsnorm(x, moe_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, softmax = before, normalize = true)
  x = x + moe(m, gates, w_gate, w_up, w_down)
  return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  dtype = bf16
  batch = 1
  seq = 8192
  optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 2000, min_lr = 0.1)
  clip = 1.0
  steps = 10000
}
