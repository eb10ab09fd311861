# Qwen1.5-MoE-A2.7B (Qwen/Qwen1.5-MoE-A2.7B, config.json): 24 layers of
# attention with q/k/v biases and a mixture of 60 fine-grained SwiGLU
# experts (width 1408), 4 chosen per token with the softmax taken over all
# 60 before the selection and not renormalised (norm_topk_prob false), plus
# a shared expert (width 5632) that every token runs, scaled by
# sigmoid(shared_expert_gate(x)). Load-balancing loss coefficient 0.001, the loss pooled over
# all layers' tokens as transformers computes it (pooled = true).
# Parameter names are those of the Hugging Face checkpoint; torch Linear
# weights are stored [out, in], so they multiply transposed.
#
# The cuda backend runs its experts as grouped GEMMs over each expert's rows
# (compiler/emit/cuda/moe.cuh); --explain prices only the selected experts' FLOPs
# and streams every expert's weights.
model qwen1_5_moe_a2_7b

config {
  V = 151936           # vocabulary
  C = 2048             # width
  L = 24               # layers
  NH = 16              # heads (no grouped-query attention)
  HS = C / NH          # head width
  E = 60               # num_experts
  K = 4                # num_experts_per_tok
  FFN = 1408           # moe_intermediate_size
  SFFN = 5632          # shared_expert_intermediate_size
  aux = 0.001          # router_aux_loss_coef
  theta = 1000000.0
  eps = 1e-6
}

param tok_emb "model.embed_tokens.weight" [V, C]
param norm "model.norm.weight" [C]
param lm_head "lm_head.weight" [V, C]

block layers[L] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param attn_norm "input_layernorm.weight" [C]
  param wq "self_attn.q_proj.weight" [C, C]
  param bq "self_attn.q_proj.bias" [C]
  param wk "self_attn.k_proj.weight" [C, C]
  param bk "self_attn.k_proj.bias" [C]
  param wv "self_attn.v_proj.weight" [C, C]
  param bv "self_attn.v_proj.bias" [C]
  param wo "self_attn.o_proj.weight" [C, C] init = normal(std = 0.02 / sqrt(2 * L))
  param moe_norm "post_attention_layernorm.weight" [C]
  param router "mlp.gate.weight" [E, C]
  param w_gate[E] "mlp.experts.{e}.gate_proj.weight" [FFN, C]
  param w_up[E] "mlp.experts.{e}.up_proj.weight" [FFN, C]
  param w_down[E] "mlp.experts.{e}.down_proj.weight" [C, FFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_gate "mlp.shared_expert.gate_proj.weight" [SFFN, C]
  param s_up "mlp.shared_expert.up_proj.weight" [SFFN, C]
  param s_down "mlp.shared_expert.down_proj.weight" [C, SFFN] init = normal(std = 0.02 / sqrt(2 * L))
  param s_scale "mlp.shared_expert_gate.weight" [1, C]

  a = rmsnorm(x, attn_norm, eps = eps)
  q = rope(a @ transpose(wq) + bq, heads = NH, theta = theta)
  k = rope(a @ transpose(wk) + bk, heads = NH, theta = theta)
  v = a @ transpose(wv) + bv
  x = x + attention(q, k, v, heads = NH) @ transpose(wo)
  m = rmsnorm(x, moe_norm, eps = eps)
  logits = m @ transpose(router)
  gates = router(logits, top_k = K, softmax = before)
  shared = swiglu(m @ transpose(s_gate), m @ transpose(s_up)) @ transpose(s_down)
  x = x + moe(m, gates, w_gate, w_up, w_down) + sigmoid(m @ transpose(s_scale)) * shared
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
