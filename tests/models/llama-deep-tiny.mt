# llama-tiny (examples/llama-tiny.mt) 32 layers deep: a step of its plan
# under --remat offload on tests/tiny-gpu.target replays about 1,400 train
# instructions, more than the cuda backend's first 1024 trace events, so
# that --trace grows its event array while the engines' threads record
# (mtrun-tsan_cuda_emu_trace_llama-deep-tiny, under ThreadSanitizer).
model llama_deep_tiny

config {
  V = 256              # vocabulary
  C = 32               # width
  L = 32               # layers
  NH = 2               # query heads
  NKV = 1              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  FFN = 64             # SwiGLU hidden width
  theta = 10000.0
  eps = 1e-5
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [NH * HS, C]
  param wk "self_attn.k_proj.weight" [NKV * HS, C]
  param wv "self_attn.v_proj.weight" [NKV * HS, C]
  param wo "self_attn.o_proj.weight" [C, NH * HS] init = normal(std = 0.02 / sqrt(2 * L))
  param mlp_norm "post_attention_layernorm.weight" [C]
  param w_gate "mlp.gate_proj.weight" [FFN, C]
  param w_up "mlp.up_proj.weight" [FFN, C]
  param w_down "mlp.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV, causal = true) @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  batch = 16
  seq = 16
  optimizer = adamw(lr = 3e-3, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 20, min_lr = 0.1)
  clip = 1.0
  steps = 500
  val_every = 50
  data = "../../examples/data/tinyshakespeare.txt"
}
