# Pythia-160M (GPT-NeoX): LayerNorm, attention and MLP in parallel from the
# same input (use_parallel_residual), rotary embedding on the first quarter
# of each head (rotary_pct 0.25, frequencies over those 16 dims), q, k and v
# interleaved per head in one projection, exact GELU, untied head. Names as
# in the Hugging Face checkpoint EleutherAI/pythia-160m.
model pythia_160m

config {
  V = 50304            # vocabulary (padded)
  C = 768              # width
  L = 12               # layers
  NH = 12              # heads
  HS = C / NH          # head width, 64
  ROT = HS / 4         # rotary width: rotary_pct 0.25
  FFN = 4 * C          # MLP hidden width
  theta = 10000.0      # rotary_emb_base
  eps = 1e-5
}

param tok_emb "gpt_neox.embed_in.weight" [V, C]
param lnf_g "gpt_neox.final_layer_norm.weight" [C]
param lnf_b "gpt_neox.final_layer_norm.bias" [C]
param head_w "embed_out.weight" [V, C]

block layers[L] "gpt_neox.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param ln1_g "input_layernorm.weight" [C]
  param ln1_b "input_layernorm.bias" [C]
  param ln2_g "post_attention_layernorm.weight" [C]
  param ln2_b "post_attention_layernorm.bias" [C]
  param wqkv "attention.query_key_value.weight" [3 * C, C]
  param bqkv "attention.query_key_value.bias" [3 * C]
  param wo "attention.dense.weight" [C, C] init = normal(std = 0.02 / sqrt(2 * L))
  param bo "attention.dense.bias" [C]
  param w1 "mlp.dense_h_to_4h.weight" [FFN, C]
  param b1 "mlp.dense_h_to_4h.bias" [FFN]
  param w2 "mlp.dense_4h_to_h.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))
  param b2 "mlp.dense_4h_to_h.bias" [C]

  h = layernorm(x, ln1_g, ln1_b, eps = eps)
  # [q_h | k_h | v_h] per head
  q, k, v = split(reshape(h @ transpose(wqkv) + bqkv, [B, T, NH, 3 * HS]), 3, axis = -1)
  # rotate the first ROT features of each head, pass the rest through
  q_rot, q_pass = split(q, [ROT, HS - ROT])
  k_rot, k_pass = split(k, [ROT, HS - ROT])
  q_rot = reshape(rope(reshape(q_rot, [B, T, NH * ROT]), heads = NH, theta = theta), [B, T, NH, ROT])
  k_rot = reshape(rope(reshape(k_rot, [B, T, NH * ROT]), heads = NH, theta = theta), [B, T, NH, ROT])
  q = reshape(concat(q_rot, q_pass), [B, T, C])
  k = reshape(concat(k_rot, k_pass), [B, T, C])
  a = attention(q, k, reshape(v, [B, T, C]), heads = NH) @ transpose(wo) + bo
  m = gelu(layernorm(x, ln2_g, ln2_b, eps = eps) @ transpose(w1) + b1, approximate = none) @ transpose(w2) + b2
  return x + a + m
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
  return cross_entropy(layernorm(x, lnf_g, lnf_b, eps = eps) @ transpose(head_w), targets)
}

train {
  dtype = bf16
  batch = 8
  seq = 2048
  optimizer = adamw(lr = 6e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 1430, min_lr = 0.1)
  clip = 1.0
  steps = 143000
}
