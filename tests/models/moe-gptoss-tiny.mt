# The tiny Mixtral (examples/mixtral-tiny.mt) with gpt-oss's experts: moe's
# clamped SwiGLU (alpha 1.702, a limit of 0.1 that these activations reach)
# and its expert biases, the experts stored as gpt-oss's checkpoint stores
# them: the fused gate_up_proj [E, C, 2 FFN] (the gate at even columns, the
# up at odd) with its bias, down_proj [E, FFN, C], read in place. For the
# cuda backend's moe kernels with them against the cpu backend's
# (cuda_emu_train_moe-gptoss-tiny).
model moe_gptoss_tiny

config {
  V = 256              # vocabulary
  C = 64               # width
  L = 2                # layers
  NH = 4               # query heads
  NKV = 2              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  E = 8                # num_local_experts
  K = 2                # num_experts_per_tok
  FFN = 64             # each expert's clamped SwiGLU hidden width
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
  param w_gate_up "block_sparse_moe.experts.gate_up_proj" [E, C, 2 * FFN]
  param w_down "block_sparse_moe.experts.down_proj" [E, FFN, C] init = normal(std = 0.02 / sqrt(2 * L))
  param b_gate_up "block_sparse_moe.experts.gate_up_proj_bias" [E, 2 * FFN] init = normal(std = 0.05)
  param b_down "block_sparse_moe.experts.down_proj_bias" [E, C] init = normal(std = 0.05)

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV) @ transpose(wo)
  m = rmsnorm(x, moe_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, softmax = after)
  x = x + moe(m, gates, transpose(w_gate_up), transpose(w_down), gate_up = interleaved, alpha = 1.702, limit = 0.1,
              gate_up_bias = b_gate_up, down_bias = b_down)
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
