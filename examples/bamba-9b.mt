# Bamba-9B (IBM and partners' Mamba-2 hybrid, v1): 29 Mamba-2 layers and 3
# attention layers (at 9, 18 and 27; rope on the first half of each head,
# grouped-query), each followed by a SwiGLU MLP. The Mamba-2 layers: one
# projection to the gate, x, B, C and dt; a causal depthwise convolution with
# bias and silu; the SSD scan (dt = softplus(dt + dt_bias), A = -exp(A_log))
# plus the D skip; the gated RMSNorm. Untied head. Written by
# tools/hf_to_mt.py from a config.json with ibm-ai-platform/Bamba-9B's values
# (tests/check_hf_to_mt.py lists them); names as in that checkpoint.
model bamba_9b

config {
  V = 128256           # vocabulary
  C = 4096             # width
  L = 32               # layers
  NH = 32              # query heads
  NKV = 8              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  ROT = HS / 2         # rotary width: partial_rotary_factor 0.5
  I = 2 * C            # the Mamba mixer's width: mamba_expand x C
  MH = 128             # mamba_n_heads
  MP = 64              # mamba_d_head
  N = 128              # mamba_d_state
  G = 1                # mamba_n_groups
  KC = 4               # mamba_d_conv
  FFN = 14336          # SwiGLU hidden width
  theta = 10000.0      # rope_theta
  eps = 1e-05          # rms_norm_eps
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.final_layernorm.weight" [C]
param lm_head "lm_head.weight" [V, C]

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
  param mlp_norm "pre_ff_layernorm.weight" [C]
  param w_gate "feed_forward.gate_proj.weight" [FFN, C]
  param w_up "feed_forward.up_proj.weight" [FFN, C]
  param w_down "feed_forward.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  gate, xbc, dt = split(a @ transpose(in_proj), [I, I + 2 * G * N, MH])
  xbc = silu(conv1d(xbc, conv_w) + conv_b)
  xs, bm, cm = split(xbc, [I, G * N, G * N])
  y = ssd(xs, softplus(dt + dt_bias), -exp(A_log), bm, cm, heads = MH, groups = G)
  y = y + reshape(reshape(xs, [B, T, MH, MP]) * reshape(D, [MH, 1]), [B, T, I]) # the D skip
  y = rmsnorm(y * silu(gate), m_norm, eps = eps) # the gated norm: gate first
  x = x + (y @ transpose(out_proj))
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block attn "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "pre_ff_layernorm.weight" [C]
  param w_gate "feed_forward.gate_proj.weight" [FFN, C]
  param w_up "feed_forward.up_proj.weight" [FFN, C]
  param w_down "feed_forward.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  # rotate the first ROT features of each head, pass the rest through
  q_rot, q_pass = split(reshape(a @ transpose(wq), [B, T, NH, HS]), [ROT, HS - ROT])
  k_rot, k_pass = split(reshape(a @ transpose(wk), [B, T, NKV, HS]), [ROT, HS - ROT])
  q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, theta = theta), [B, T, NH, ROT])
  k_rot = reshape(rope(reshape(k_rot, [B, T, NKV * ROT]), heads = NKV, theta = theta), [B, T, NKV, ROT])
  q = reshape(concat(q_rot, q_pass), [B, T, NH * HS])
  k = reshape(concat(k_rot, k_pass), [B, T, NKV * HS])
  x = x + attention(q, k, a @ transpose(wv), heads = NH, kv_heads = NKV) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block layers[L] = [mamba, mamba, mamba, mamba, mamba, mamba, mamba, mamba, mamba, attn, mamba, mamba, mamba, mamba, mamba, mamba, mamba, mamba, attn, mamba, mamba, mamba, mamba, mamba, mamba, mamba, mamba, attn, mamba, mamba, mamba, mamba]

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens, padding_idx = 0)) # all L layers, streamed by kind
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
