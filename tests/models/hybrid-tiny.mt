# A tiny hybrid of the three layer kinds hybrid models mix: a Gated DeltaNet
# layer (Qwen3-Next's: conv1d, gated_delta_rule with grouped value heads, the
# gated RMSNorm), a Mamba-2 layer (Granite 4.0-H's and Bamba's: conv1d with
# bias, ssd with the D skip, the gated norm) and an attention layer, each
# with a SwiGLU MLP, in the order [deltanet, mamba, attn]. For the
# backends' tests (the cuda backend on the emulation against the cpu's).
model hybrid_tiny

config {
  V = 256
  C = 32
  L = 3
  NH = 4           # attention heads
  HS = C / NH
  KH = 2           # DeltaNet key heads
  VH = 4           # DeltaNet value heads
  KD = 8
  VD = 6
  MH = 4           # Mamba-2 heads
  MP = 16          # their width
  N = 8            # the state's size
  KC = 4           # convolution width
  FFN = 64
  eps = 1e-6
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block deltanet "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_qkvz "linear_attn.in_proj_qkvz.weight" [2 * KH * KD + 2 * VH * VD, C]
  param w_ba "linear_attn.in_proj_ba.weight" [2 * VH, C]
  param conv_w "linear_attn.conv1d.weight" [2 * KH * KD + VH * VD, 1, KC]
  param dt_bias "linear_attn.dt_bias" [VH] init = ones
  param A_log "linear_attn.A_log" [VH] init = zeros
  param g_norm "linear_attn.norm.weight" [VD]
  param w_out "linear_attn.out_proj.weight" [C, VH * VD]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN]

  a = rmsnorm(x, attn_norm, eps = eps)
  q, k, v, z = split(a @ transpose(w_qkvz), [KH * KD, KH * KD, VH * VD, VH * VD])
  b, dt = split(a @ transpose(w_ba), 2)
  q, k, v = split(silu(conv1d(concat(q, k, v), conv_w)), [KH * KD, KH * KD, VH * VD])
  g = -exp(A_log) * softplus(dt + dt_bias)
  o = gated_delta_rule(q, k, v, g, sigmoid(b), heads = VH, kv_heads = KH)
  o = rmsnorm(reshape(o, [B, T, VH, VD]), g_norm, eps = eps) * silu(reshape(z, [B, T, VH, VD]))
  x = x + reshape(o, [B, T, VH * VD]) @ transpose(w_out)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block mamba "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param mlp_norm "post_attention_layernorm.weight" [C]
  param in_proj "mamba.in_proj.weight" [2 * MH * MP + 2 * N + MH, C]
  param conv_w "mamba.conv1d.weight" [MH * MP + 2 * N, 1, KC]
  param conv_b "mamba.conv1d.bias" [MH * MP + 2 * N]
  param dt_bias "mamba.dt_bias" [MH] init = ones
  param A_log "mamba.A_log" [MH] init = zeros
  param D "mamba.D" [MH] init = ones
  param m_norm "mamba.norm.weight" [MH * MP]
  param out_proj "mamba.out_proj.weight" [C, MH * MP]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN]

  a = rmsnorm(x, attn_norm, eps = eps)
  gate, xbc, dt = split(a @ transpose(in_proj), [MH * MP, MH * MP + 2 * N, MH])
  xs, bm, cm = split(silu(conv1d(xbc, conv_w) + conv_b), [MH * MP, N, N])
  y = ssd(xs, softplus(dt + dt_bias), -exp(A_log), bm, cm, heads = MH)
  y = y + reshape(reshape(xs, [B, T, MH, MP]) * reshape(D, [MH, 1]), [B, T, MH * MP])
  x = x + rmsnorm(y * silu(gate), m_norm, eps = eps) @ transpose(out_proj)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block attn "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param mlp_norm "post_attention_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [C, C]
  param wk "self_attn.k_proj.weight" [C, C]
  param wv "self_attn.v_proj.weight" [C, C]
  param wo "self_attn.o_proj.weight" [C, C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN]

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH)
  k = rope(a @ transpose(wk), heads = NH)
  x = x + attention(q, k, a @ transpose(wv), heads = NH) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block layers[L] = [deltanet, mamba, attn] * (L / 3)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  batch = 2
  seq = 32
  optimizer = adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 20, min_lr = 0.1)
  clip = 1.0
  steps = 100
  data = "../../examples/data/tinyshakespeare.txt"
}
