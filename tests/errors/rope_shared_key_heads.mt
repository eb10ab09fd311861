# expect: 12:10: error: rope splits its input into 2 heads of 2, but concat (line 14) joins it as heads of 4; write heads = 1
model m
config { V = 16; C = 16; H = 2; DN = 4; DR = 4 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param wq "wq" [C, H * (DN + DR)]
  param wk "wk" [C, H * DN]
  param wr "wr" [C, DR]
  param wv "wv" [C, C]
  # DeepSeek's rope key: one head of DR that every head shares; heads = H splits it wrongly
  q = rope(x @ wq, heads = H)
  k_pe = rope(x @ wr, heads = H)
  k_nope = reshape(x @ wk, [B, T, H, DN])
  k = reshape(concat(k_nope, reshape(k_pe, [B, T, 1, DR])), [B, T, H * (DN + DR)])
  return x + attention(q, k, x @ wv, heads = H)
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
