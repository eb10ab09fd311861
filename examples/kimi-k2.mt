# Kimi K2 (moonshotai/Kimi-K2, the 1T-class mixture of experts): DeepSeek-V3's
# design (see examples/deepseek-v3.mt) with 384 routed experts, 64 heads, one
# dense first layer and a vocabulary of 163840: 61 layers of width 7168, 8 of
# 384 routed SwiGLU experts of 2048 and 1 shared expert, multi-head latent
# attention (q rank 1536, kv rank 512, heads of 128 + 64 rotated, values of
# 128). Values of its config.json; names as in the checkpoint, torch Linear
# weights [out, in] multiply transposed.
#
# Rope: YaRN, factor 32 over 4096 positions, beta_fast 1, beta_slow 1,
# mscale and mscale_all_dim 1, theta 50000; softmax scale 1/sqrt(192) times
# mscale(32, 1)^2. Routing: sigmoid scores, the top 8 renormalised and
# scaled by routed_scaling_factor 2.827; one group (n_group 1, topk_group 1),
# so no group limit. Left out: the routing bias
# (mlp.gate.e_score_correction_bias, [384] in each of the 60 MoE layers,
# 23,040 values: a buffer, not a parameter, moved by the auxiliary-loss-free
# balancing rule, whose speed its config does not give); this file chooses
# by the scores alone, as the bias at zero (its value in a new model) does.
# examples/deepseek-v3.mt writes both (bias = e_bias, bias_update = 0.001).
#
# 1,026,408,209,408 parameters, transformers' DeepseekV3ForCausalLM's count
# for this config (the bias buffer apart). fp32 master and both Adam
# moments: 16 bytes a parameter, 16.4 TB.
model kimi_k2

config {
  V = 163840           # vocab_size
  C = 7168             # hidden_size
  L = 61               # num_hidden_layers
  DENSE = 1            # first_k_dense_replace
  H = 64               # num_attention_heads
  QR = 1536            # q_lora_rank
  R = 512              # kv_lora_rank
  DN = 128             # qk_nope_head_dim
  DR = 64              # qk_rope_head_dim
  DV = 128             # v_head_dim
  FFN = 18432          # intermediate_size, the dense layer's
  E = 384              # n_routed_experts
  K = 8                # num_experts_per_tok
  EFFN = 2048          # moe_intermediate_size
  SFFN = EFFN          # n_shared_experts 1
  RSF = 2.827          # routed_scaling_factor
  theta = 50000.0      # rope_theta
  YF = 32              # rope_scaling factor (YaRN) over
  YO = 4096            # original_max_position_embeddings
  YBF = 1              # beta_fast
  YBS = 1              # beta_slow
  YM = 1.0             # mscale = mscale_all_dim
  MS = 0.1 * YM * ln(YF) + 1 # yarn_get_mscale(YF, mscale_all_dim): the softmax scale's factor, squared
  eps = 1e-6           # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block dense "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wqa "self_attn.q_a_proj.weight" [QR, C]
  param q_norm "self_attn.q_a_layernorm.weight" [QR]
  param wqb "self_attn.q_b_proj.weight" [H * (DN + DR), QR]
  param wkva "self_attn.kv_a_proj_with_mqa.weight" [R + DR, C]
  param kv_norm "self_attn.kv_a_layernorm.weight" [R]
  param wkvb "self_attn.kv_b_proj.weight" [H * (DN + DV), R]
  param wo "self_attn.o_proj.weight" [C, H * DV] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q_nope, q_pe = split(reshape(rmsnorm(a @ transpose(wqa), q_norm, eps = eps) @ transpose(wqb), [B, T, H, DN + DR]), [DN, DR])
  c, k_pe = split(a @ transpose(wkva), [R, DR])
  k_nope, v = split(reshape(rmsnorm(c, kv_norm, eps = eps) @ transpose(wkvb), [B, T, H, DN + DV]), [DN, DV])
  # rope pairs interleave (x0, x1), (x2, x3), ...: gather each pair's halves, then rotate halves
  q_pe = rope(reshape(transpose(reshape(q_pe, [B, T, H, DR / 2, 2])), [B, T, H * DR]), heads = H, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, beta_fast = YBF, beta_slow = YBS, mscale = YM, mscale_all_dim = YM)
  k_pe = rope(reshape(transpose(reshape(k_pe, [B, T, 1, DR / 2, 2])), [B, T, DR]), heads = 1, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, beta_fast = YBF, beta_slow = YBS, mscale = YM, mscale_all_dim = YM)
  q = reshape(concat(q_nope, reshape(q_pe, [B, T, H, DR])), [B, T, H * (DN + DR)])
  k = reshape(concat(k_nope, reshape(k_pe, [B, T, 1, DR])), [B, T, H * (DN + DR)]) # k_pe shared by the heads
  x = x + attention(q, k, reshape(v, [B, T, H * DV]), heads = H, scale = MS * MS / sqrt(DN + DR)) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block sparse "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wqa "self_attn.q_a_proj.weight" [QR, C]
  param q_norm "self_attn.q_a_layernorm.weight" [QR]
  param wqb "self_attn.q_b_proj.weight" [H * (DN + DR), QR]
  param wkva "self_attn.kv_a_proj_with_mqa.weight" [R + DR, C]
  param kv_norm "self_attn.kv_a_layernorm.weight" [R]
  param wkvb "self_attn.kv_b_proj.weight" [H * (DN + DV), R]
  param wo "self_attn.o_proj.weight" [C, H * DV] init = normal(std = 0.02 / sqrt(2 * L))
  param moe_norm "post_attention_layernorm.weight" [C]
  param router "mlp.gate.weight" [E, C]
  param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [EFFN, C]
  param w_up[E] "mlp.experts.{e}.up_proj.weight" [EFFN, C]
  param w_down[E] "mlp.experts.{e}.down_proj.weight" [C, EFFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_gate "mlp.shared_experts.gate_proj.weight" [SFFN, C]
  param s_up "mlp.shared_experts.up_proj.weight" [SFFN, C]
  param s_down "mlp.shared_experts.down_proj.weight" [C, SFFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q_nope, q_pe = split(reshape(rmsnorm(a @ transpose(wqa), q_norm, eps = eps) @ transpose(wqb), [B, T, H, DN + DR]), [DN, DR])
  c, k_pe = split(a @ transpose(wkva), [R, DR])
  k_nope, v = split(reshape(rmsnorm(c, kv_norm, eps = eps) @ transpose(wkvb), [B, T, H, DN + DV]), [DN, DV])
  q_pe = rope(reshape(transpose(reshape(q_pe, [B, T, H, DR / 2, 2])), [B, T, H * DR]), heads = H, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, beta_fast = YBF, beta_slow = YBS, mscale = YM, mscale_all_dim = YM)
  k_pe = rope(reshape(transpose(reshape(k_pe, [B, T, 1, DR / 2, 2])), [B, T, DR]), heads = 1, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, beta_fast = YBF, beta_slow = YBS, mscale = YM, mscale_all_dim = YM)
  q = reshape(concat(q_nope, reshape(q_pe, [B, T, H, DR])), [B, T, H * (DN + DR)])
  k = reshape(concat(k_nope, reshape(k_pe, [B, T, 1, DR])), [B, T, H * (DN + DR)])
  x = x + attention(q, k, reshape(v, [B, T, H * DV]), heads = H, scale = MS * MS / sqrt(DN + DR)) @ transpose(wo)
  m = rmsnorm(x, moe_norm, eps = eps)
  # sigmoid scores, the top K renormalised and scaled (one group: no group limit)
  gates = router(m @ transpose(router), top_k = K, scores = sigmoid, normalize = true, scale = RSF)
  shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)
  return x + moe(m, gates, w_gate, w_up, w_down) + shared
}

block layers[L] = [dense] * DENSE + [sparse] * (L - DENSE)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  dtype = bf16
  batch = 1
  seq = 4096
  optimizer = adamw(lr = 2.2e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 2000, min_lr = 0.1)
  clip = 1.0
  steps = 10000
}
