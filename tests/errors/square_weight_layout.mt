# expect: 11:42: error: 'wo' is square, so @ wo and @ transpose(wo) both fit; every other weight of this model multiplies transposed (torch Linear's [out, in] layout): write @ transpose(wo)
model m
config { V = 16; C = 8; NH = 2; F = 24 }
param emb "model.embed_tokens.weight" [V, C]
block h[2] "model.layers.{i}." (x: [B, T, C]) -> [B, T, C] {
  param wqkv "self_attn.qkv_proj.weight" [3 * C, C]
  param wo "self_attn.o_proj.weight" [C, C]
  param w1 "mlp.up_proj.weight" [F, C]
  param w2 "mlp.down_proj.weight" [C, F]
  q, k, v = split(x @ transpose(wqkv), 3)
  x = x + attention(q, k, v, heads = NH) @ wo
  return x + gelu(x @ transpose(w1)) @ transpose(w2)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
