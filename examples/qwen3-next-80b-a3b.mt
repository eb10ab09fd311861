# Qwen3-Next-80B-A3B: three Gated DeltaNet layers to one gated attention
# layer, each followed by a sparse MLP of 512 experts (10 routed a token,
# renormalised) beside a shared expert with a sigmoid gate. The DeltaNet
# layers: one projection to each key head's query, key, value and output
# gate heads, a causal depthwise convolution with silu, the gated delta rule
# (q and k l2-normalised; decay -exp(A_log) softplus(a + dt_bias), write
# strength sigmoid(b)), a gated RMSNorm per value head. The attention layers:
# an output gate per head, zero-centred q and k norms, rotary embedding on the
# first quarter of each head. Zero-centred RMSNorms (1 + w) throughout.
# Written by tools/hf_to_mt.py from the checkpoint's config.json
# (Qwen/Qwen3-Next-80B-A3B-Instruct); names as in that checkpoint, whose
# multi-token-prediction layers (mtp.*) transformers does not load either.
model qwen3_next_80b_a3b

config {
  V = 151936           # vocabulary
  C = 2048             # width
  L = 48               # layers
  NH = 16              # query heads
  NKV = 2              # key/value heads (grouped-query attention)
  HS = 256             # head width (head_dim)
  ROT = HS / 4         # rotary width: partial_rotary_factor 0.25
  KH = 16              # linear_num_key_heads
  VH = 32              # linear_num_value_heads
  KD = 128             # linear_key_head_dim
  VD = 128             # linear_value_head_dim
  R = VH / KH          # value heads a key head serves
  KC = 4               # linear_conv_kernel_dim
  E = 512              # num_experts
  K = 10               # num_experts_per_tok
  FFN = 512            # moe_intermediate_size
  SFFN = 512           # shared_expert_intermediate_size
  aux = 0.001          # router_aux_loss_coef
  theta = 10000000.0   # rope_theta
  eps = 1e-06          # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C] init = zeros
param lm_head "lm_head.weight" [V, C]

block linear "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C] init = zeros
  param moe_norm "post_attention_layernorm.weight" [C] init = zeros
  param w_qkvz "linear_attn.in_proj_qkvz.weight" [2 * KH * KD + 2 * VH * VD, C]
  param w_ba "linear_attn.in_proj_ba.weight" [2 * VH, C]
  param conv_w "linear_attn.conv1d.weight" [2 * KH * KD + VH * VD, 1, KC]
  param dt_bias "linear_attn.dt_bias" [VH] init = ones
  param A_log "linear_attn.A_log" [VH] init = zeros
  param g_norm "linear_attn.norm.weight" [VD] init = ones
  param w_out "linear_attn.out_proj.weight" [C, VH * VD] init = normal(std = 0.02 / sqrt(2 * L))
  param router "mlp.gate.weight" [E, C]
  param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [FFN, C]
  param w_up[E] "mlp.experts.{e}.up_proj.weight" [FFN, C]
  param w_down[E] "mlp.experts.{e}.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_gate "mlp.shared_expert.gate_proj.weight" [SFFN, C]
  param s_up "mlp.shared_expert.up_proj.weight" [SFFN, C]
  param s_down "mlp.shared_expert.down_proj.weight" [C, SFFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_scale "mlp.shared_expert_gate.weight" [1, C]

  a = rmsnorm(x, 1 + attn_norm, eps = eps)
  # per key head: its query, key, R value heads and R output gates; then its R b and R a
  q, k, v, z = split(reshape(a @ transpose(w_qkvz), [B, T, KH, 2 * KD + 2 * R * VD]), [KD, KD, R * VD, R * VD])
  b, dt = split(reshape(a @ transpose(w_ba), [B, T, KH, 2 * R]), 2)
  qkv = concat(reshape(q, [B, T, KH * KD]), reshape(k, [B, T, KH * KD]), reshape(v, [B, T, VH * VD]))
  q, k, v = split(silu(conv1d(qkv, conv_w)), [KH * KD, KH * KD, VH * VD])
  g = -exp(A_log) * softplus(reshape(dt, [B, T, VH]) + dt_bias)
  o = gated_delta_rule(q, k, v, g, sigmoid(reshape(b, [B, T, VH])), heads = VH, kv_heads = KH)
  o = rmsnorm(reshape(o, [B, T, VH, VD]), g_norm, eps = eps) * silu(reshape(z, [B, T, VH, VD]))
  x = x + reshape(o, [B, T, VH * VD]) @ transpose(w_out)
  m = rmsnorm(x, 1 + moe_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, softmax = before, normalize = true)
  shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)
  x = x + moe(m, gates, w_gate, w_up, w_down) + sigmoid(m @ transpose(s_scale)) * shared
  return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))
}

block full "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C] init = zeros
  param moe_norm "post_attention_layernorm.weight" [C] init = zeros
  param wq "self_attn.q_proj.weight" [2 * NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param q_norm "self_attn.q_norm.weight" [HS] init = zeros
  param k_norm "self_attn.k_norm.weight" [HS] init = zeros
  param router "mlp.gate.weight" [E, C]
  param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [FFN, C]
  param w_up[E] "mlp.experts.{e}.up_proj.weight" [FFN, C]
  param w_down[E] "mlp.experts.{e}.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_gate "mlp.shared_expert.gate_proj.weight" [SFFN, C]
  param s_up "mlp.shared_expert.up_proj.weight" [SFFN, C]
  param s_down "mlp.shared_expert.down_proj.weight" [C, SFFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_scale "mlp.shared_expert_gate.weight" [1, C]

  a = rmsnorm(x, 1 + attn_norm, eps = eps)
  q, gate = split(reshape(a @ transpose(wq), [B, T, NH, 2 * HS]), 2) # per head: its query, its output gate
  q = rmsnorm(q, 1 + q_norm, eps = eps)
  k = rmsnorm(reshape(a @ transpose(wk), [B, T, NKV, HS]), 1 + k_norm, eps = eps)
  # rotate the first ROT features of each head, pass the rest through
  q_rot, q_pass = split(q, [ROT, HS - ROT])
  k_rot, k_pass = split(k, [ROT, HS - ROT])
  q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, theta = theta), [B, T, NH, ROT])
  k_rot = reshape(rope(reshape(k_rot, [B, T, NKV * ROT]), heads = NKV, theta = theta), [B, T, NKV, ROT])
  q = reshape(concat(q_rot, q_pass), [B, T, NH * HS])
  k = reshape(concat(k_rot, k_pass), [B, T, NKV * HS])
  o = attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV) * sigmoid(reshape(gate, [B, T, NH * HS]))
  x = x + o @ transpose(wo)
  m = rmsnorm(x, 1 + moe_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, softmax = before, normalize = true)
  shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)
  x = x + moe(m, gates, w_gate, w_up, w_down) + sigmoid(m @ transpose(s_scale)) * shared
  return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))
}

block layers[L] = [linear, linear, linear, full] * (L / 4)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed by kind
  return cross_entropy(rmsnorm(x, 1 + norm, eps = eps) @ transpose(lm_head), targets)
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
