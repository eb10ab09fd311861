# DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite, 15.7B): multi-head latent
# attention and a first dense layer before 26 mixture-of-experts layers (6 of
# 64 routed experts, softmax before the selection, not renormalised, and 2
# shared experts as one SwiGLU of twice the width). Written with neither
# zero-padding nor an added zero tensor: attention takes query and key heads
# of 192 (128 without position, 64 rotated) and value heads of 128, and the
# rotated key part, one for all heads, joins each head's own part by
# concat's broadcasting. Names as in the Hugging Face checkpoint.
#
# Its rope is the checkpoint's YaRN (rope_scaling: factor 40 over 4096
# positions, mscale and mscale_all_dim 0.707), and attention's softmax scale
# 1/sqrt(192) times mscale(40, 0.707)^2, as transformers' DeepseekV2
# (yarn_apply_mscale). Kept out of examples/ still: the router's auxiliary
# loss (seq_aux, alpha 0.001) is left out, and the CUDA flash templates take
# one head width, so GPU targets refuse its attention (a cpu target runs it).
# Its parameter count is the checkpoint's, 15,706,484,224, and at tiny widths,
# YaRN included, it gives transformers' DeepseekV2ForCausalLM's loss from the
# same weights (tests/check_deepseek_v2_lite.py).
model deepseek_v2_lite

config {
  V = 102400           # vocabulary
  C = 2048             # width
  L = 27               # layers: the first dense, the rest mixture of experts
  H = 16               # heads
  DN = 128             # qk_nope_head_dim
  DR = 64              # qk_rope_head_dim
  DV = 128             # v_head_dim
  R = 512              # kv_lora_rank (q_lora_rank: none, q is one projection)
  FFN = 10944          # intermediate_size, the dense layer's
  E = 64               # n_routed_experts
  K = 6                # num_experts_per_tok
  EFFN = 1408          # moe_intermediate_size
  SFFN = 2 * EFFN      # n_shared_experts 2, run as one SwiGLU
  theta = 10000.0
  YF = 40              # rope_scaling factor (YaRN) over
  YO = 4096            # original_max_position_embeddings
  YM = 0.707           # mscale = mscale_all_dim
  MS = 0.1 * YM * ln(YF) + 1 # yarn_get_mscale(YF, mscale_all_dim): the softmax scale's factor, squared
  eps = 1e-6
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block dense "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [H * (DN + DR), C]
  param wkva "self_attn.kv_a_proj_with_mqa.weight" [R + DR, C]
  param kv_norm "self_attn.kv_a_layernorm.weight" [R]
  param wkvb "self_attn.kv_b_proj.weight" [H * (DN + DV), R]
  param wo "self_attn.o_proj.weight" [C, H * DV]
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN]

  a = rmsnorm(x, attn_norm, eps = eps)
  q_nope, q_pe = split(reshape(a @ transpose(wq), [B, T, H, DN + DR]), [DN, DR])
  c, k_pe = split(a @ transpose(wkva), [R, DR])
  k_nope, v = split(reshape(rmsnorm(c, kv_norm, eps = eps) @ transpose(wkvb), [B, T, H, DN + DV]), [DN, DV])
  # rope pairs interleave (x0, x1), (x2, x3), ...: gather each pair's halves, then rotate halves
  q_pe = rope(reshape(transpose(reshape(q_pe, [B, T, H, DR / 2, 2])), [B, T, H * DR]), heads = H, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, mscale = YM, mscale_all_dim = YM)
  k_pe = rope(reshape(transpose(reshape(k_pe, [B, T, 1, DR / 2, 2])), [B, T, DR]), heads = 1, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, mscale = YM, mscale_all_dim = YM)
  q = reshape(concat(q_nope, reshape(q_pe, [B, T, H, DR])), [B, T, H * (DN + DR)])
  k = reshape(concat(k_nope, reshape(k_pe, [B, T, 1, DR])), [B, T, H * (DN + DR)]) # k_pe shared by the heads
  x = x + attention(q, k, reshape(v, [B, T, H * DV]), heads = H, scale = MS * MS / sqrt(DN + DR)) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block sparse "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [H * (DN + DR), C]
  param wkva "self_attn.kv_a_proj_with_mqa.weight" [R + DR, C]
  param kv_norm "self_attn.kv_a_layernorm.weight" [R]
  param wkvb "self_attn.kv_b_proj.weight" [H * (DN + DV), R]
  param wo "self_attn.o_proj.weight" [C, H * DV]
  param moe_norm "post_attention_layernorm.weight" [C]
  param router "mlp.gate.weight" [E, C]
  param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [EFFN, C]
  param w_up[E] "mlp.experts.{e}.up_proj.weight" [EFFN, C]
  param w_down[E] "mlp.experts.{e}.down_proj.weight" [C, EFFN]
  param s_gate "mlp.shared_experts.gate_proj.weight" [SFFN, C]
  param s_up "mlp.shared_experts.up_proj.weight" [SFFN, C]
  param s_down "mlp.shared_experts.down_proj.weight" [C, SFFN]

  a = rmsnorm(x, attn_norm, eps = eps)
  q_nope, q_pe = split(reshape(a @ transpose(wq), [B, T, H, DN + DR]), [DN, DR])
  c, k_pe = split(a @ transpose(wkva), [R, DR])
  k_nope, v = split(reshape(rmsnorm(c, kv_norm, eps = eps) @ transpose(wkvb), [B, T, H, DN + DV]), [DN, DV])
  q_pe = rope(reshape(transpose(reshape(q_pe, [B, T, H, DR / 2, 2])), [B, T, H * DR]), heads = H, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, mscale = YM, mscale_all_dim = YM)
  k_pe = rope(reshape(transpose(reshape(k_pe, [B, T, 1, DR / 2, 2])), [B, T, DR]), heads = 1, theta = theta, scaling = yarn, factor = YF,
             original_max_position_embeddings = YO, mscale = YM, mscale_all_dim = YM)
  q = reshape(concat(q_nope, reshape(q_pe, [B, T, H, DR])), [B, T, H * (DN + DR)])
  k = reshape(concat(k_nope, reshape(k_pe, [B, T, 1, DR])), [B, T, H * (DN + DR)])
  x = x + attention(q, k, reshape(v, [B, T, H * DV]), heads = H, scale = MS * MS / sqrt(DN + DR)) @ transpose(wo)
  m = rmsnorm(x, moe_norm, eps = eps)
  gates = router(m @ transpose(router), top_k = K, softmax = before)
  shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)
  return x + moe(m, gates, w_gate, w_up, w_down) + shared
}

block layers[L] = [dense] + [sparse] * (L - 1)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train { batch = 1; seq = 4096; dtype = bf16 }
