# expect: 11:27: error: 'window' is not a config constant; `with` rebinds config constants
model m
config { V = 16; C = 16; NH = 4; W = 2 }
param emb "emb" [V, C]
block full "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param wq "wq" [C, C]
  q = x @ wq
  return x + attention(q, q, q, heads = NH, window = W)
}
# a keyword of a call is not rebound: the block names the constant it reads
block sliding = full with window = 2
block h[2] = [full, sliding]
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
