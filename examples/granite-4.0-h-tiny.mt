# IBM Granite 4.0-H Tiny: 36 Mamba-2 layers and 4 attention layers (without
# position embedding), each followed by 6 of 64 SwiGLU experts (softmax over
# the selected logits) beside a shared SwiGLU MLP. The Mamba-2 layers: one
# projection to the gate, x, B, C and dt; a causal depthwise convolution with
# bias and silu over x, B and C; the SSD scan (dt = softplus(dt + dt_bias),
# A = -exp(A_log)) plus the D skip; the gated RMSNorm (gate first). muP's
# multipliers on the embedding, the residual branches, the attention scores
# and the logits; LM head tied. Written by tools/hf_to_mt.py from a
# config.json with ibm-granite/granite-4.0-h-tiny's values (tests/check_hf_to_mt.py
# lists them); names as in that checkpoint (the experts' fused
# block_sparse_moe.input_linear, gate rows then up rows).
model granite_4_0_h_tiny

config {
  V = 100352           # vocabulary
  C = 1536             # width
  L = 40               # layers
  NH = 12              # query heads
  NKV = 4              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  I = 2 * C            # the Mamba mixer's width: mamba_expand x C
  MH = 48              # mamba_n_heads
  MP = 64              # mamba_d_head
  N = 128              # mamba_d_state
  G = 1                # mamba_n_groups
  KC = 4               # mamba_d_conv
  E = 64               # num_local_experts
  K = 6                # num_experts_per_tok
  FFN = 512            # each expert's SwiGLU width (intermediate_size)
  SFFN = 1024          # shared_intermediate_size
  EMB = 12.0           # embedding_multiplier
  RES = 0.22           # residual_multiplier
  ATT = 0.0078125      # attention_multiplier: scores are q.k x ATT
  LOGS = 6.0           # logits_scaling: logits divided by it
  eps = 1e-05          # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]

block mamba "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param in_proj "mamba.in_proj.weight" [2 * I + 2 * G * N + MH, C]
  param conv_w "mamba.conv1d.weight" [I + 2 * G * N, 1, KC]
  param conv_b "mamba.conv1d.bias" [I + 2 * G * N]
  param dt_bias "mamba.dt_bias" [MH] init = ones
  param A_log "mamba.A_log" [MH] init = zeros
  param D "mamba.D" [MH] init = ones
  param m_norm "mamba.norm.weight" [I]
  param out_proj "mamba.out_proj.weight" [C, I] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "post_attention_layernorm.weight" [C]
  param router "block_sparse_moe.router.layer.weight" [E, C]
  param w_in "block_sparse_moe.input_linear.weight" [E, 2 * FFN, C]
  param w_out "block_sparse_moe.output_linear.weight" [E, C, FFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_in "shared_mlp.input_linear.weight" [2 * SFFN, C]
  param s_out "shared_mlp.output_linear.weight" [C, SFFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  gate, xbc, dt = split(a @ transpose(in_proj), [I, I + 2 * G * N, MH])
  xbc = silu(conv1d(xbc, conv_w) + conv_b)
  xs, bm, cm = split(xbc, [I, G * N, G * N])
  y = ssd(xs, softplus(dt + dt_bias), -exp(A_log), bm, cm, heads = MH, groups = G)
  y = y + reshape(reshape(xs, [B, T, MH, MP]) * reshape(D, [MH, 1]), [B, T, I]) # the D skip
  y = rmsnorm(y * silu(gate), m_norm, eps = eps) # the gated norm: gate first
  x = x + RES * (y @ transpose(out_proj))
  m = rmsnorm(x, mlp_norm, eps = eps)
  s_gate, s_up = split(m @ transpose(s_in), 2)
  y = swiglu(s_gate, s_up) @ transpose(s_out)
  logits = m @ transpose(router)
  w_gate, w_up = split(w_in, 2, axis = 1) # each expert's gate rows, then its up rows
  y = y + moe(m, router(logits, top_k = K, softmax = after), w_gate, w_up, w_out)
  return x + RES * y
}

block attn "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "post_attention_layernorm.weight" [C]
  param router "block_sparse_moe.router.layer.weight" [E, C]
  param w_in "block_sparse_moe.input_linear.weight" [E, 2 * FFN, C]
  param w_out "block_sparse_moe.output_linear.weight" [E, C, FFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_in "shared_mlp.input_linear.weight" [2 * SFFN, C]
  param s_out "shared_mlp.output_linear.weight" [C, SFFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = a @ transpose(wq) # no position embedding (position_embedding_type nope)
  k = a @ transpose(wk)
  o = attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV, scale = ATT)
  x = x + RES * (o @ transpose(wo))
  m = rmsnorm(x, mlp_norm, eps = eps)
  s_gate, s_up = split(m @ transpose(s_in), 2)
  y = swiglu(s_gate, s_up) @ transpose(s_out)
  logits = m @ transpose(router)
  w_gate, w_up = split(w_in, 2, axis = 1) # each expert's gate rows, then its up rows
  y = y + moe(m, router(logits, top_k = K, softmax = after), w_gate, w_up, w_out)
  return x + RES * y
}

block layers[L] = [mamba, mamba, mamba, mamba, mamba, attn, mamba, mamba, mamba, mamba] * (L / 10)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens, padding_idx = 100256) * EMB) # all L layers, streamed by kind
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(tok_emb) / LOGS, targets)
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
