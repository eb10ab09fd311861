// adamw.h: the host optimizer step, torch.optim.AdamW on fp32 master weights
// and fp32 Adam moments in host memory. It is bound by memory bandwidth: one
// pass reads w, m, v, g and writes w, m, v (28 bytes a parameter, 30 with the
// bf16 copy, 34 when it also zeroes g as the host store does), so the fast
// kernel is a single elementwise loop split into contiguous per-thread
// ranges. bench/adamw_bench.c measures it against a plain memory copy.
//
// Determinism: every element is computed by the same sequence of IEEE float
// operations whatever the thread count, vector width or range split, so the
// result does not depend on nthreads or on the CPU's SIMD level (SSE2 or
// AVX2, chosen at run time). That needs a*b+c not contracted into fma: the
// kernels are compiled for ISAs without fma, and adamw.c is compiled with
// -ffp-contract=off (GCC in ISO C mode does not contract anyway; clang
// would within an expression). The device kernel, mt_adamw in
// compiler/emit/cuda/prelude.cuh, does the same float operations in the
// same order with CUDA's round-to-nearest intrinsics, which are never
// contracted, so an update on the device gives the host's bits. Compile
// adamw.c with -fno-math-errno (it warns otherwise: without it sqrtf cannot
// be vectorised and the update runs at about half speed).
#ifndef MT_ADAMW_H
#define MT_ADAMW_H

#include <stddef.h>
#include <stdint.h>

typedef struct AdamWStep {
    float lr; // learning rate of this step (the schedule is applied by the caller)
    float beta1, beta2, eps;
    float weight_decay; // decoupled, as torch.optim.AdamW: w -= lr * weight_decay * w
    int64_t t;          // 1-based step count, for bias correction
    float grad_scale;   // multiplies every gradient first (global-norm clipping and 1/accumulation)
} AdamWStep;

// Updates n parameters in place, for i in [0, n):
//     gg   = g[i] * grad_scale
//     m[i] = beta1 * m[i] + (1 - beta1) * gg
//     v[i] = beta2 * v[i] + (1 - beta2) * gg * gg
//     w[i] = w[i] - lr * weight_decay * w[i]                      (only if decay)
//                 - lr * (m[i] / (1 - beta1^t)) / (sqrt(v[i] / (1 - beta2^t)) + eps)
//     g[i] = 0                                                    (only if ADAMW_ZERO_GRADS)
// w, m, v: (n) fp32 master weights and Adam moments; g: (n) fp32 gradients,
// read only unless flags has ADAMW_ZERO_GRADS. flags: ADAMW_DECAY, weight
// decay applies to this tensor (none on norms and biases; 0 and 1 are no
// decay and decay); ADAMW_ZERO_GRADS, the gradients are zeroed in the same
// pass (the step consumed them; store_update's zeroing, fused: no second
// pass over g). bf16_out: when not NULL, (n), also receives the updated
// weights rounded to bf16 (round to nearest even; NaN stays a quiet NaN).
// The zeroed gradients and the bf16 copy are written with non-temporal
// stores where the CPU has AVX2 (they are only written; see adamw.c).
// Uses up to nthreads threads of the pool (pool.h; nthreads <= 1 runs
// inline; fewer threads when n is small). Thread ranges start where w is
// 64-byte aligned, so threads share no cache line of w, nor of m, v, g when
// those are laid out like w. The arrays must not overlap.
enum { ADAMW_DECAY = 1, ADAMW_ZERO_GRADS = 2 };

// The per-step constants of the fast kernel, computed once in double and
// rounded to float, so the loop is float multiplies, adds, one sqrt and one
// divide per element. The device kernel takes the same struct (its layout
// is mirrored by MtAdamWConst in compiler/emit/cuda/prelude.cuh): one
// computation of the constants for host and device.
typedef struct AdamWConst {
    float grad_scale;
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float eps;
    float decay_mul;    // 1 - lr * weight_decay, or 1 with no decay
    float step;         // lr / (1 - beta1^t): folds the first bias correction into lr
    float inv_sqrt_bc2; // 1 / sqrt(1 - beta2^t): sqrt(v / bc2) = sqrt(v) * inv_sqrt_bc2
} AdamWConst;
// The constants of step s, for a tensor with (decay) or without weight decay.
AdamWConst adamw_constants(const AdamWStep *s, int decay);
void adamw_update(float *w, float *m, float *v, float *g, uint16_t *bf16_out, int64_t n, const AdamWStep *s, int flags,
                  int nthreads);
// The same update with the gradients g (n) as bf16 (the host store's
// layers' gradients with one micro-batch a step, common/storage.h
// storage_grads_bf16): each widened exactly, so the result is adamw_update's
// on an fp32 copy of g, bit for bit. g is only read: a COPY_OUT sets it
// whole every step, so nothing zeroes it (flags: ADAMW_DECAY only). 28
// bytes a parameter with the bf16 copy (reads w, m, v and 2 of g, writes w,
// m, v and the copy), not 34. Its plain reference: adamw_update_bf16_grads_ref.
void adamw_update_bf16_grads(float *w, float *m, float *v, const uint16_t *g, uint16_t *bf16_out, int64_t n,
                             const AdamWStep *s, int flags, int nthreads);

// One parameter's share of a batched update (adamw_update_parts): its
// arrays and flags as adamw_update takes them, or with g NULL and gb set,
// as adamw_update_bf16_grads takes them (gb never zeroed).
typedef struct AdamWPart {
    float *w, *m, *v, *g;
    const uint16_t *gb;
    uint16_t *out;
    int64_t n;
    int flags; // ADAMW_DECAY, ADAMW_ZERO_GRADS
} AdamWPart;
// The update of every part as one pool job: the parts' elements taken
// together are split into nthreads ranges of whole cache lines, so a
// segment's parameters cost one barrier, not one each (store_update). Each
// element the same float operations as adamw_update: the bits of a call per
// part, whatever nthreads.
void adamw_update_parts(const AdamWPart *parts, int nparts, const AdamWStep *s, int nthreads);

// Zeroes the same arrays (any may be NULL) as adamw_update with the same n
// and nthreads would update them, each range by the pool thread that will
// update it: the host store's first touch, which on a NUMA machine places
// each page on the node of the core that later updates it. gb: bf16
// gradients (adamw_update_bf16_grads).
void adamw_first_touch(float *w, float *m, float *v, float *g, uint16_t *gb, uint16_t *bf16_out, int64_t n,
                       int nthreads);

// Sum of squares of g, (n), in double precision (for the global gradient
// norm), multi-threaded and deterministic: g is cut into fixed chunks of
// ADAMW_NORM_CHUNK elements, each summed in double in a fixed order, then the
// chunk sums are added in order, so the result does not depend on nthreads.
enum { ADAMW_NORM_CHUNK = 1 << 16 };
double adamw_sq_norm(const float *g, int64_t n, int nthreads);
// The same of bf16 values g (n), widened: adamw_sq_norm of an fp32 copy, bit for bit.
double adamw_sq_norm_bf16(const uint16_t *g, int64_t n, int nthreads);
// The plain reference of both: g's values, or (gb not NULL) gb's, squared
// and summed in double in one loop a chunk (another order of additions:
// equal to the fast ones within rounding, not bit for bit).
double adamw_sq_norm_ref(const float *g, const uint16_t *gb, int64_t n);

// g[i] += src[i] for i < n, src fp32 or (flags has GRADS_BF16) bf16: a
// COPY_OUT's gradients added into the host store's accumulators; with
// GRADS_SET, g[i] = src[i] (widened), where g holds zeros (store_grads_out:
// no read of g, 6 bytes an element moved for bf16, not 10). On up to
// nthreads threads (inline when n is small); each element's sum is the same
// whatever nthreads. The plain loop it splits is grads_accumulate_ref.
enum { GRADS_BF16 = 1, GRADS_SET = 2 };
void grads_accumulate(float *g, const void *src, int64_t n, int flags, int nthreads);
void grads_accumulate_ref(float *g, const void *src, int64_t n, int flags);

// The plain reference next to the fast kernel: one loop, double arithmetic,
// no threads. Same arguments as adamw_update, without the bf16 copy.
void adamw_update_ref(float *w, float *m, float *v, const float *g, int64_t n, const AdamWStep *s, int decay);
void adamw_update_bf16_grads_ref(float *w, float *m, float *v, const uint16_t *g, int64_t n, const AdamWStep *s,
                                 int decay);

#endif
