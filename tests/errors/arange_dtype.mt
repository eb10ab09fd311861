# expect: 8:27: error: arange's dtype is i32 or f32
model m
config { V = 16; C = 8 }
param emb "emb" [V, C]
block h[2] "h.{i}." (x: [B, T, C]) -> [B, T, C] {
  param w "w" [C, C]
  # positions as numbers are f32 (there is no f64 storage)
  pos = arange(T, dtype = f64)
  return x @ w * reshape(pos, [T, 1])
}
forward(tokens: i32[B, T], targets: i32[B, T]) {
  x = h(embed(emb, tokens))
  return cross_entropy(x @ transpose(emb), targets)
}
train { batch = 2; seq = 4 }
