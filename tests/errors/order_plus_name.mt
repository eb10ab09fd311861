# expect: 13:29: error: the order of layers 'layers' is a list of block kinds, as [local, global] * (L / 2), or lists joined with +, as [dense] + [moe] * (L - 1)
model m
config { V = 16; C = 8; H = 2; L = 4 }
param emb "emb" [V, C]
block local "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + attention(x, x @ w, x, heads = H, window = 2)
}
block global "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  return x + attention(x, x @ w, x, heads = H)
}
block layers[L] = [local] + global * 3
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = layers(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
