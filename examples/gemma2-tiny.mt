# A tiny Gemma-2 for tests: the structure of gemma2-9b.mt (local and global
# layers alternating, soft-capping, query_pre_attn_scalar, pre- and
# post-norms, GeGLU, tied embedding scaled by sqrt(C)) at widths a CPU trains
# in seconds, on bytes of text (vocabulary 256). Names as in gemma2-9b.mt.
model gemma2_tiny

config {
  V = 256              # bytes
  C = 64               # width
  L = 4                # layers: 2 local, 2 global
  NH = 4               # query heads
  NKV = 2              # key/value heads
  HS = 16              # head width
  FFN = 176            # GeGLU hidden width
  QS = 32              # query_pre_attn_scalar, other than HS so that scale matters
  W = 16               # sliding window, shorter than seq
  ACAP = 50.0
  FCAP = 30.0
  theta = 10000.0
  eps = 1e-6
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C] init = zeros

# Even layers attend within a sliding window, odd layers globally; the two
# kinds differ only in that, so they carry the same checkpoint names.
block local "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C] init = zeros
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param post_attn_norm "post_attention_layernorm.weight" [C] init = zeros
  param ffn_norm "pre_feedforward_layernorm.weight" [C] init = zeros
  param post_ffn_norm "post_feedforward_layernorm.weight" [C] init = zeros
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, 1 + attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  o = attention(q, k, v, heads = NH, kv_heads = NKV, window = W, scale = 1 / sqrt(QS), softcap = ACAP) @ transpose(wo)
  x = x + rmsnorm(o, 1 + post_attn_norm, eps = eps)
  m = rmsnorm(x, 1 + ffn_norm, eps = eps)
  f = (gelu(m @ transpose(w_gate), approximate = tanh) * (m @ transpose(w_up))) @ transpose(w_down)
  return x + rmsnorm(f, 1 + post_ffn_norm, eps = eps)
}

block global "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C] init = zeros
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param post_attn_norm "post_attention_layernorm.weight" [C] init = zeros
  param ffn_norm "pre_feedforward_layernorm.weight" [C] init = zeros
  param post_ffn_norm "post_feedforward_layernorm.weight" [C] init = zeros
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, 1 + attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  o = attention(q, k, v, heads = NH, kv_heads = NKV, scale = 1 / sqrt(QS), softcap = ACAP) @ transpose(wo)
  x = x + rmsnorm(o, 1 + post_attn_norm, eps = eps)
  m = rmsnorm(x, 1 + ffn_norm, eps = eps)
  f = (gelu(m @ transpose(w_gate), approximate = tanh) * (m @ transpose(w_up))) @ transpose(w_down)
  return x + rmsnorm(f, 1 + post_ffn_norm, eps = eps)
}

block layers[L] = [local, global] * (L / 2)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens, padding_idx = 0) * sqrt(C)) # all L layers, streamed by kind; pad token 0 gets no gradient from the lookup
  logits = rmsnorm(x, 1 + norm, eps = eps) @ transpose(tok_emb) # tied LM head
  return cross_entropy(FCAP * tanh(logits / FCAP), targets)     # final soft-capping
}

train {
  batch = 16
  seq = 64
  optimizer = adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 20, min_lr = 0.1)
  clip = 1.0
  steps = 500
  val_every = 50
  data = "data/tinyshakespeare.txt"
}
