# Gemma-2-9B: layers alternating sliding-window (4096) and global attention,
# attention logits soft-capped at 50 and the final logits at 30, scores
# scaled by query_pre_attn_scalar (256) rather than the head width, RMSNorm
# before and after both attention and the MLP (Gemma's norm scales by 1 + w,
# so its weights start at zero), GeGLU with the tanh GELU, and the embedding,
# tied to the LM head, scaled by sqrt(C). Parameter names are those of the
# Hugging Face checkpoint; torch Linear weights are stored [out, in], so they
# multiply transposed. rope rotates the two halves of each head. The
# embedding has padding_idx = 0 (pad_token_id), as nn.Embedding there: the pad
# row takes no gradient from the lookup (the tied head still reaches it).
model gemma2_9b

config {
  V = 256000           # vocabulary
  C = 3584             # width
  L = 42               # layers: 21 local, 21 global
  NH = 16              # query heads
  NKV = 8              # key/value heads (grouped-query attention)
  HS = 256             # head width (head_dim; NH * HS is not C)
  FFN = 14336          # GeGLU hidden width
  QS = 256             # query_pre_attn_scalar: scores are q.k / sqrt(QS)
  W = 4096             # sliding_window of the local layers
  ACAP = 50.0          # attn_logit_softcapping
  FCAP = 30.0          # final_logit_softcapping
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
  dtype = bf16
  batch = 1
  seq = 8192
  optimizer = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 2000, min_lr = 0.1)
  clip = 1.0
  steps = 10000
}
