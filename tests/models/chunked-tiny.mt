# Llama 4's chunked attention at tiny widths: attention(q, k, v, chunk = CH)
# (a query sees the keys of its own chunk of CH positions, causal within),
# chunked layers and global ones alternating (Llama 4's rope layers and NoPE
# layers; no rope here), the global kind derived from the chunked one (a
# chunk as long as the sequence, and the NoPE layers' attention temperature
# tuning with a floor_scale of 4, floor() of positions in f32), grouped-query heads of 64 (the tensor-core
# kernel under bf16). The cuda backend on the emulation against the cpu
# backend (cuda_emu_train_chunked-tiny), plan against reference
# (train_equal_chunked-tiny). seq 70, chunk 16: query blocks and key tiles
# across chunk boundaries, the last chunk part-full; no power of two.
model chunked_tiny
config {
  V = 256
  C = 64
  L = 2
  NH = 4
  NKV = 2
  HS = 64
  CH = 16              # the chunked layers' chunk
  FS = 1e9             # the temperature's floor_scale: 1e9, none (the rope layers'); 4 in the global kind
  AS = 0.1             # its attn_scale
  FFN = 128
  eps = 1e-5
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block chunked "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
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
  temp = reshape(log(floor((arange(T, dtype = f32) + 1) / FS) + 1) * AS + 1, [T, 1]) # Llama 4's temperature tuning
  o = attention((a @ transpose(wq)) * temp, a @ transpose(wk), a @ transpose(wv), heads = NH, kv_heads = NKV, chunk = CH)
  x = x + o @ transpose(wo)
  m = rmsnorm(x, mlp_norm, eps = eps)
  return x + swiglu(m @ transpose(w_gate), m @ transpose(w_up)) @ transpose(w_down)
}

block global = chunked with CH = T, FS = 4.0

block layers[L] = [chunked, global] * (L / 2)

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens))
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  batch = 2
  seq = 70
  optimizer = adamw(lr = 3e-3)
  steps = 10
  data = "../../examples/data/tinyshakespeare.txt"
}
