// bf16.h: bfloat16 bits to and from float, the one rounding every part of
// mt uses (the host optimizer's streaming copy, exports, the cpu backend's
// stores, the reference executor). The kernel emitters generate the same
// operations (compiler/emit/emit_llvm.c, compiler/emit/emit_cuda.c).
#ifndef MT_BF16_H
#define MT_BF16_H

#include <stdint.h>
#include <string.h>

// x rounded to bf16 bits, to nearest even; a NaN stays a NaN (quieted, its
// sign kept, so a payload only in the low bits cannot become an infinity).
// Branch-free, so loops around it vectorise.
static inline uint16_t bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

// The float a bf16 holds (exact).
static inline float f32_from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// x rounded to the nearest bf16 value, kept as a float.
static inline float bf16_round(float x) { return f32_from_bf16(bf16_from_f32(x)); }

#endif
