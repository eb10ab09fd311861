# A tiny GPT-2 for tests: the structure of gpt2.mt at widths a CPU trains in
# seconds, on bytes of text (vocabulary 256). Names as in gpt2.mt.
model gpt2_tiny

config {
  V = 256              # bytes
  ctx = 64             # context length
  C = 64               # width
  NH = 4               # attention heads
  L = 2                # layers
  eps = 1e-5
}

param wte "wte.weight" [V, C]
param wpe "wpe.weight" [ctx, C] init = normal(std = 0.01)
param lnf_g "ln_f.weight" [C]
param lnf_b "ln_f.bias" [C]

block h[L] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param ln1_g "ln_1.weight" [C]
  param ln1_b "ln_1.bias" [C]
  param attn_w "attn.c_attn.weight" [C, 3 * C]
  param attn_b "attn.c_attn.bias" [3 * C]
  param proj_w "attn.c_proj.weight" [C, C] init = normal(std = 0.02 / sqrt(2 * L))
  param proj_b "attn.c_proj.bias" [C]
  param ln2_g "ln_2.weight" [C]
  param ln2_b "ln_2.bias" [C]
  param fc_w "mlp.c_fc.weight" [C, 4 * C]
  param fc_b "mlp.c_fc.bias" [4 * C]
  param fcp_w "mlp.c_proj.weight" [4 * C, C] init = normal(std = 0.02 / sqrt(2 * L))
  param fcp_b "mlp.c_proj.bias" [C]

  q, k, v = split(layernorm(x, ln1_g, ln1_b, eps = eps) @ attn_w + attn_b, 3, axis = -1)
  x = x + attention(q, k, v, heads = NH, causal = true) @ proj_w + proj_b
  m = gelu(layernorm(x, ln2_g, ln2_b, eps = eps) @ fc_w + fc_b)
  return x + m @ fcp_w + fcp_b
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(wte, tokens) + embed(wpe, arange(T))) # all L layers, streamed
  logits = layernorm(x, lnf_g, lnf_b, eps = eps) @ transpose(wte) # tied LM head
  return cross_entropy(logits, targets)
}

train {
  batch = 16
  seq = 64
  optimizer = adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1, eps = 1e-8)
  schedule = cosine(warmup = 20, min_lr = 0.1)
  clip = 1.0
  steps = 500
  data = "data/tinyshakespeare.txt"
  val_every = 50
}
