# Mixtral-8x7B v0.1: Mistral's attention (grouped-query, untied head) with a
# sparse mixture of experts for the MLP: a router picks the top 2 of 8
# SwiGLU experts for each token, softmax over the two selected logits
# (Hugging Face computes the softmax over all 8, takes the top 2 and
# renormalises, which is the same). Dropless: each expert runs on its own
# tokens only. The load-balancing loss (router_aux_loss_coef 0.02) joins the
# objective pooled over all layers' tokens, as transformers' Mixtral computes it
# (pooled = true; per layer is the Switch Transformer's form). Parameter names are those of the Hugging Face
# checkpoint; torch Linear weights are stored [out, in], so they multiply
# transposed.
#
# The cuda backend runs its experts as grouped GEMMs over each expert's rows
# (compiler/emit/cuda/moe.cuh); --explain prices only the selected experts' FLOPs
# and streams every expert's weights.
model mixtral_8x7b

config {
  V = 32000            # vocabulary
  C = 4096             # width
  L = 32               # layers
  NH = 32              # query heads
  NKV = 8              # key/value heads (grouped-query attention)
  HS = C / NH          # head width
  E = 8                # num_local_experts
  K = 2                # num_experts_per_tok
  FFN = 14336          # each expert's SwiGLU hidden width
  aux = 0.02           # router_aux_loss_coef
  theta = 1000000.0
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
  param moe_norm "post_attention_layernorm.weight" [C]
  param router "block_sparse_moe.gate.weight" [E, C]
  param w_gate[E] "block_sparse_moe.experts.{e}.w1.weight" [FFN, C]
  param w_up[E] "block_sparse_moe.experts.{e}.w3.weight" [FFN, C]
  param w_down[E] "block_sparse_moe.experts.{e}.w2.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq), heads = NH, theta = theta)
  k = rope(a @ transpose(wk), heads = NKV, theta = theta)
  v = a @ transpose(wv)
  x = x + attention(q, k, v, heads = NH, kv_heads = NKV) @ transpose(wo)
  m = rmsnorm(x, moe_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, softmax = after)
  x = x + moe(m, gates, w_gate, w_up, w_down)
  return add_loss(x, aux * load_balancing_loss(logits, top_k = K, pooled = true))
}

forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(tok_emb, tokens)) # all L layers, streamed
  return cross_entropy(rmsnorm(x, norm, eps = eps) @ transpose(lm_head), targets)
}

train {
  dtype = bf16
  batch = 1
  seq = 4096
  optimizer = adamw(lr = 1e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  schedule = cosine(warmup = 2000, min_lr = 0.1)
  clip = 1.0
  steps = 10000
}
