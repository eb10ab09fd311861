// attention.h: the launch geometry of compiler/emit/cuda/attention.cuh's and attention_tc.cuh's kernels, for host code
// (the cuda backend, tests/gpu) and for cuda_build's checks. Plain C; the
// numbers must match the MT_ATTN_* macros of attention.cuh.
#ifndef MT_CUDA_ATTENTION_H
#define MT_CUDA_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum {
    ATTN_THREADS = 128, // threads per block, every attention kernel
    ATTN_BQ = 16,       // query rows per block: fwd and bwd_dq grids are (ceil(T/16), H, B)
    ATTN_BK = 32,       // keys per block of bwd_dkdv: its grid is (ceil(T/32), KVH, B)
};

// Dynamic shared memory, bytes, per kernel and head size D.
static inline size_t attn_smem_fwd(int D) { return 4 * (size_t)(ATTN_BQ * D + ATTN_BK * (D + 1) + ATTN_BK * D); }
static inline size_t attn_smem_dq(int D) { return 4 * (size_t)(2 * ATTN_BQ * D + 2 * ATTN_BK * (D + 1)); }
static inline size_t attn_smem_dkdv(int D) {
    return 4 * (size_t)(2 * ATTN_BK * (D + 1) + 2 * ATTN_BQ * D + 2 * ATTN_BQ * ATTN_BK + 2 * ATTN_BQ);
}
static inline size_t attn_smem_max(int D) {
    size_t a = attn_smem_fwd(D), b = attn_smem_dq(D), c = attn_smem_dkdv(D);
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}
// The tensor-core kernels of attention_tc.cuh (bf16 storage; query/key
// head size D and value head size Dv each 64, 128, 192 or 256): grids of
// ceil(T/64) blocks by H (fwd, bwd_dq) or ceil(T/attn_tc_bk_dkdv) by KVH
// (bwd_dkdv) by B, 128 threads. In shared memory, rows of D + 8 and Dv + 8
// bf16: fwd and bwd_dq a 64-row query block and two stages of
// attn_tc_bk_fit keys (each kernel at most 99 KiB); bwd_dkdv its keys and two stages of 16 queries
// (with their lse, delta and document starts) and, when split, the warp
// pairs' exchange of partial scores. Mirrors MtAttnTcGeo.
enum { ATTN_TC_THREADS = 128, ATTN_TC_BQ = 64, ATTN_TC_BQ_DKDV = 16, ATTN_TC_SMEM_CAP = 99 * 1024 };
static inline size_t attn_tc_fwd_bytes(int D, int Dv, int bk) {
    return 2 * (size_t)(ATTN_TC_BQ * (D + 8) + 2 * bk * (D + 8 + Dv + 8));
}
static inline size_t attn_tc_dq_bytes(int D, int Dv, int bk) {
    return 2 * (size_t)((ATTN_TC_BQ + 2 * bk) * (D + 8 + Dv + 8));
}
// Keys per tile of fwd and bwd_dq: 64, 32 at heads over 128, halved while over 99 KiB (sm_86, sm_89).
static inline int attn_tc_bk_fit(size_t (*bytes)(int, int, int), int D, int Dv) {
    int bk = D > 128 || Dv > 128 ? 32 : 64;
    return bytes(D, Dv, bk) <= ATTN_TC_SMEM_CAP ? bk : bytes(D, Dv, bk / 2) <= ATTN_TC_SMEM_CAP ? bk / 2 : bk / 4;
}
static inline int attn_tc_split(int D, int Dv) { return D + Dv > 256 ? 2 : 1; }
static inline int attn_tc_bk_dkdv(int D, int Dv) { return 64 / attn_tc_split(D, Dv); }
static inline size_t attn_tc_smem_fwd(int D, int Dv) {
    return attn_tc_fwd_bytes(D, Dv, attn_tc_bk_fit(attn_tc_fwd_bytes, D, Dv));
}
static inline size_t attn_tc_smem_dq(int D, int Dv) {
    return attn_tc_dq_bytes(D, Dv, attn_tc_bk_fit(attn_tc_dq_bytes, D, Dv));
}
static inline size_t attn_tc_smem_dkdv(int D, int Dv) {
    return 2 * (size_t)((attn_tc_bk_dkdv(D, Dv) + 2 * ATTN_TC_BQ_DKDV) * (D + 8 + Dv + 8)) +
           3 * 4 * 2 * (size_t)ATTN_TC_BQ_DKDV + (attn_tc_split(D, Dv) > 1 ? 4 * 4 * 32 * 16 : 0);
}
static inline int attn_tc_head_ok(int D) { return D == 64 || D == 128 || D == 192 || D == 256; }
// Whether a plan runs these (else attention.cuh's fp32 kernels, the fallback).
static inline int attn_tc_ok(int bf16, int D, int Dv) { return bf16 && attn_tc_head_ok(D) && attn_tc_head_ok(Dv); }
static inline size_t attn_tc_smem_max(int D, int Dv) {
    size_t a = attn_tc_smem_fwd(D, Dv), b = attn_tc_smem_dq(D, Dv), c = attn_tc_smem_dkdv(D, Dv);
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

// The matrix work the GPU kernels (attention_tc.cuh and attention.cuh
// alike) run, in head dimensions per (query, key) pair (2 FLOPs each), the
// query/key heads D and the value heads Dv wide: the forward Q K^T, P V; the
// backward, given the forward's lse and y, bwd_dq Q K^T, dY V^T, dS K and
// bwd_dkdv Q K^T, dY V^T, P^T dY, dS^T Q (deterministic dq: 9 units of
// T x T x D forward + backward at D = Dv, against the 7 FlashAttention-2
// counts with dq by atomics). compiler/schedule/cost.c prices it.
static inline double attn_gpu_head_dims(int bwd, double D, double Dv) { return bwd ? 4 * D + 3 * Dv : D + Dv; }

// The backward's fp32 workspace: lse then delta, each [B, H, T].
static inline size_t attn_workspace_bytes(long B, long T, long H) { return 2 * 4 * (size_t)(B * H * T); }

// Whether scale is the default 1/sqrt(D) (instantiated as such).
static inline int attn_default_scale(int D, double scale) { return fabs(scale * sqrt((double)D) - 1) <= 1e-12; }

// The suffix of the three entry points: "f32_d64_causal", "bf16_d128_full",
// "bf16_d192_v128_causal" (value heads of their own width, tensor cores
// only); the options, when set, follow: "_w4096" (window), "_s3e000000"
// (scale, the bits of the float), "_c42480000" (softcap, likewise).
static inline char *attn_variant_name_dv(char *buf, size_t cap, int bf16, int D, int Dv, int causal, long long window,
                                         double scale, double softcap) {
    int n = snprintf(buf, cap, "%s_d%d", bf16 ? "bf16" : "f32", D);
    if (Dv != D && n > 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "_v%d", Dv);
    if (n > 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "_%s", causal ? "causal" : "full");
    union {
        float f;
        unsigned u;
    } s = {(float)scale}, c = {(float)softcap};
    if (window > 0 && n > 0 && (size_t)n < cap) n += snprintf(buf + n, cap - (size_t)n, "_w%lld", window);
    if (!attn_default_scale(D, scale) && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, "_s%08x", s.u);
    if (softcap > 0 && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "_c%08x", c.u);
    return buf;
}
static inline char *attn_variant_name(char *buf, size_t cap, int bf16, int D, int causal, long long window,
                                      double scale, double softcap) {
    return attn_variant_name_dv(buf, cap, bf16, D, D, causal, window, scale, softcap);
}
// The same with a chunk (Llama 4's chunked attention; 0: none) after the
// other options: "_k8192".
static inline char *attn_variant_name_chunk(char *buf, size_t cap, int bf16, int D, int Dv, int causal,
                                            long long window, long long chunk, double scale, double softcap) {
    attn_variant_name_dv(buf, cap, bf16, D, Dv, causal, window, scale, softcap);
    size_t n = strlen(buf);
    if (chunk > 0 && n < cap) snprintf(buf + n, cap - n, "_k%lld", chunk);
    return buf;
}
// The same with the default options.
static inline char *attn_kernel_name(char *buf, size_t cap, int bf16, int D, int causal) {
    return attn_variant_name(buf, cap, bf16, D, causal, 0, 1 / sqrt((double)D), 0);
}

#endif
