# DeepSeek-V3 (deepseek-ai/DeepSeek-V3, 671B) without its multi-token
# prediction layer: 61 layers, the first 3 dense (SwiGLU of 18432), the rest
# mixture of experts (8 of 256 routed SwiGLU experts of 2048 and 1 shared
# expert), multi-head latent attention (128 heads; q through a rank-1536
# bottleneck, keys and values through a rank-512 latent; query and key heads
# of 192 = 128 without position + 64 rotated, value heads of 128, the rotated
# key part one for all heads). Values of the checkpoint's config.json; names
# as in the checkpoint, torch Linear weights [out, in] multiply transposed.
#
# Rope is the checkpoint's YaRN (factor 40 over 4096 positions, beta_fast
# 32, beta_slow 1, mscale and mscale_all_dim 1), attention's softmax scale
# 1/sqrt(192) times mscale(40, 1)^2, as transformers' DeepseekV3.
# Routing: sigmoid scores, the experts in 8 groups of 32 and only the 4
# groups with the largest two-score sums eligible (n_group 8, topk_group 4),
# the top 8 renormalised to sum 1 (norm_topk_prob) and scaled by
# routed_scaling_factor 2.5. The routing bias
# (mlp.gate.e_score_correction_bias, [256] in each of the 58 MoE layers,
# 14,848 values) is a buffer, not a parameter (zero in a new model), used
# only for choosing, and moved after each step by DeepSeek-V3's
# auxiliary-loss-free rule (bias_update = 0.001, the paper's gamma for most
# of V3's training): b_i += 0.001 x sign(mean load - load_i), load_i the
# tokens that chose expert i in the step, every micro-batch and rank. No
# auxiliary loss, as transformers' DeepseekV3 (which does not move the bias:
# tools/hf_to_mt.py writes the rule only with --bias-update).
#
# 671,026,404,352 parameters, transformers' DeepseekV3ForCausalLM's count,
# and the 14,848 bias values apart: together the checkpoint's tensors less
# its MTP layer. fp32 master and both Adam moments: 16 bytes a parameter,
# 10.7 TB.
model deepseek_v3

config {
  V = 129280           # vocab_size
  C = 7168             # hidden_size
  L = 61               # num_hidden_layers
  DENSE = 3            # first_k_dense_replace
  H = 128              # num_attention_heads
  QR = 1536            # q_lora_rank
  R = 512              # kv_lora_rank
  DN = 128             # qk_nope_head_dim
  DR = 64              # qk_rope_head_dim
  DV = 128             # v_head_dim
  FFN = 18432          # intermediate_size, the dense layers'
  E = 256              # n_routed_experts
  K = 8                # num_experts_per_tok
  NG = 8               # n_group
  TG = 4               # topk_group
  EFFN = 2048          # moe_intermediate_size
  SFFN = EFFN          # n_shared_experts 1
  RSF = 2.5            # routed_scaling_factor
  theta = 10000.0      # rope_theta
  YF = 40              # rope_scaling factor (YaRN) over
  YO = 4096            # original_max_position_embeddings
  YBF = 32             # beta_fast
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
  param e_bias "mlp.gate.e_score_correction_bias" [E] buffer
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
  # sigmoid scores, the top K of score + e_bias within the TG best of NG groups, renormalised and scaled;
  # e_bias moved by the experts' loads after each step
  gates = router(m @ transpose(router), top_k = K, scores = sigmoid, normalize = true, scale = RSF, groups = NG,
                 top_groups = TG, bias = e_bias, bias_update = 0.001)
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
