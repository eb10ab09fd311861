# The tiny Mixtral (examples/mixtral-tiny.mt) routed as DeepSeek-V3 routes:
# sigmoid scores chosen with a selection bias buffer
# (mlp.gate.e_score_correction_bias, not trained by AdamW: moved after each
# step by the auxiliary-loss-free rule, bias_update = 0.01) within the best
# 2 of 4 groups of 2 experts, the top 2 renormalised and scaled by 2.5. For
# the cuda backend's run of the routing (reshape to groups, the group sums,
# the exclusion, top-k masks, the loads the rule counts) against the cpu
# backend's (cuda_emu_train_moe-router-tiny).
model moe_router_tiny

config {
  V = 256              # vocabulary
  C = 64               # width
  L = 2                # layers
  NH = 4               # query heads
  NKV = 2              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  E = 8                # num_local_experts
  K = 2                # num_experts_per_tok
  FFN = 64             # each expert's SwiGLU hidden width
  aux = 0.02           # router_aux_loss_coef
  theta = 10000.0
  eps = 1e-5
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
  param moe_norm "post_attention_layernorm.weight" [C]
  param router "block_sparse_moe.gate.weight" [E, C]
  param e_bias "block_sparse_moe.gate.e_score_correction_bias" [E] init = normal(std = 0.1) buffer
  param w_gate[E] "block_sparse_moe.experts.{e}.w1.weight" [FFN, C]
  param w_up[E] "block_sparse_moe.experts.{e}.w3.weight" [FFN, C]
  param w_down[E] "block_sparse_moe.experts.{e}.w2.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV) @ transpose(wo)
  m = rmsnorm(x, moe_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, scores = sigmoid, normalize = true, scale = 2.5, groups = 4, top_groups = 2,
                 bias = e_bias, bias_update = 0.01)
  x = x + moe(m, gates, w_gate, w_up, w_down)
  return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
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
