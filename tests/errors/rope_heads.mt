# expect: 10:7: error: rope splits the keys into 4 heads of 2, but the attention it feeds (line 11) reads 2 heads of 4; write heads = 2
model m
config { V = 16; C = 16; NH = 4; NKV = 2; HS = C / NH }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param wq "wq" [C, C]
  param wk "wk" [C, NKV * HS]
  param wv "wv" [C, NKV * HS]
  q = rope(x @ wq, heads = NH)
  k = rope(x @ wk, heads = NH)
  return x + attention(q, k, x @ wv, heads = NH, kv_heads = NKV)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
