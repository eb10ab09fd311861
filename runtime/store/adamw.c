// adamw.c: the host AdamW step (see adamw.h): a fast elementwise kernel
// split over threads, the deterministic squared gradient norm, and the plain
// double-precision reference the tests hold the kernel to.
#include "runtime/store/adamw.h"

#include "common/bf16.h"
#include "runtime/store/pool.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

// Without -fno-math-errno GCC must keep a scalar sqrtf call (it may set
// errno) and the update runs at about half the memory bandwidth.
#if defined(__GNUC__) && !defined(__NO_MATH_ERRNO__)
#warning "compile adamw.c with -fno-math-errno, or its loops cannot be vectorised"
#endif

enum {
    ADAMW_LINE_FLOATS = 16, // floats in a 64-byte cache line
    // Fewer elements than this a thread, and handing the job to a pool
    // thread costs more than it saves (waking one and waiting for it costs
    // some 10-50 us on a 2-core VM; 128K elements take about 100 us from
    // memory).
    ADAMW_MIN_PER_THREAD = 128 * 1024,
    ADAMW_BLOCK = 256, // elements of one block of the streaming kernel (its bf16 copy stays in L1)
};

AdamWConst adamw_constants(const AdamWStep *s, int decay) {
    double bc1 = 1.0 - pow((double)s->beta1, (double)s->t);
    double bc2 = 1.0 - pow((double)s->beta2, (double)s->t);
    return (AdamWConst){
        .grad_scale = s->grad_scale,
        .beta1 = s->beta1,
        .one_minus_beta1 = (float)(1.0 - (double)s->beta1),
        .beta2 = s->beta2,
        .one_minus_beta2 = (float)(1.0 - (double)s->beta2),
        .eps = s->eps,
        .decay_mul = decay ? (float)(1.0 - (double)s->lr * (double)s->weight_decay) : 1.0f,
        .step = (float)((double)s->lr / bc1),
        .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
    };
}

// One element's new values.
typedef struct AdamWElem {
    float w, m, v;
} AdamWElem;

// One element of the fast kernel, from its old w, m, v and its gradient.
// Every element sees the same float operations in the same order, vector
// lane or scalar tail alike, so the result does not depend on how the loop
// is split. The device kernel (compiler/emit/cuda/prelude.cuh, mt_adamw)
// performs these operations in this order, each rounded on its own: change
// one, change both (tests/emu/adamw_device_check.c holds them together).
static inline __attribute__((always_inline)) AdamWElem adamw_one(float w, float m, float v, float g,
                                                                 const AdamWConst *c) {
    float gg = g * c->grad_scale;
    AdamWElem e;
    e.m = c->beta1 * m + c->one_minus_beta1 * gg;
    e.v = c->beta2 * v + c->one_minus_beta2 * (gg * gg);
    float denom = sqrtf(e.v) * c->inv_sqrt_bc2 + c->eps;
    e.w = w * c->decay_mul - c->step * e.m / denom;
    return e;
}

// The fast kernel on [0, n) of already offset arrays: w, m, v, g, out (n);
// zero: g is zeroed as it is read (the step's gradients consumed); gb not
// NULL: the gradients are gb's bf16 values widened (g unused, nothing
// zeroed: adamw_update_bf16_grads). The main
// loops stop at a multiple of 16 so that GCC vectorises them even at -O2,
// whose cost model takes no loop that would need a scalar epilogue; the
// tail loops do the last n % 16. The vector loops also need sqrtf free of
// errno: compile this file with -fno-math-errno.
static inline __attribute__((always_inline)) void adamw_kernel_body(float *restrict w, float *restrict m,
                                                                    float *restrict v, float *restrict g,
                                                                    const uint16_t *restrict gb, uint16_t *restrict out,
                                                                    int64_t n, AdamWConst c, int zero) {
    int64_t n16 = n & ~(int64_t)15;
#define ADAMW_LOOP(from, to, grad)                                                                                     \
    for (int64_t i = from; i < to; i++) {                                                                              \
        AdamWElem e = adamw_one(w[i], m[i], v[i], grad, &c);                                                           \
        w[i] = e.w, m[i] = e.m, v[i] = e.v;                                                                            \
        if (out) out[i] = bf16_from_f32(e.w);                                                                          \
        if (zero && !gb) g[i] = 0.0f;                                                                                  \
    }
    // one loop per case, so that each vectorises without a branch inside
    if (gb && out) {
        ADAMW_LOOP(0, n16, f32_from_bf16(gb[i])) ADAMW_LOOP(n16, n, f32_from_bf16(gb[i]))
    } else if (gb) {
        ADAMW_LOOP(0, n16, f32_from_bf16(gb[i])) ADAMW_LOOP(n16, n, f32_from_bf16(gb[i]))
    } else if (out && zero) {
        ADAMW_LOOP(0, n16, g[i]) ADAMW_LOOP(n16, n, g[i])
    } else if (out) {
        ADAMW_LOOP(0, n16, g[i]) ADAMW_LOOP(n16, n, g[i])
    } else if (zero) {
        ADAMW_LOOP(0, n16, g[i]) ADAMW_LOOP(n16, n, g[i])
    } else {
        ADAMW_LOOP(0, n16, g[i]) ADAMW_LOOP(n16, n, g[i])
    }
#undef ADAMW_LOOP
}

typedef void (*AdamWKernel)(float *, float *, float *, float *, const uint16_t *, uint16_t *, int64_t, AdamWConst, int);

// The kernel compiled for the baseline ISA (SSE2 on x86-64), and on x86-64
// once more for AVX2, chosen at run time by __builtin_cpu_supports. Neither
// uses fma, so both give the same bits.
static void adamw_kernel_base(float *w, float *m, float *v, float *g, const uint16_t *gb, uint16_t *out, int64_t n,
                              AdamWConst c, int zero) {
    adamw_kernel_body(w, m, v, g, gb, out, n, c, zero);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The AVX2 kernel streams what it only writes: the zeroed gradients and the
// bf16 copy go out with non-temporal stores, which skip reading each line
// before writing it and leave the cache to w, m and v (which are read, so
// their lines are cached anyway: streaming them too measured half the speed
// on a 2-core VM). By blocks of ADAMW_BLOCK elements: the update in place,
// the block's bf16 copy into an L1 buffer, then streamed out. The elements
// before w's first 64-byte line, the last partial block, and arrays whose
// alignment differs from w's take the plain loop. The same adamw_one on
// every element: the same bits as the plain kernel. bf16 gradients (gb) are
// read a block at a time, widened, and never zeroed.
__attribute__((target("avx2"))) static void adamw_kernel_avx2(float *w, float *m, float *v, float *g,
                                                              const uint16_t *gb, uint16_t *out, int64_t n,
                                                              AdamWConst c, int zero) {
    int64_t head = (int64_t)(((64 - ((uintptr_t)w & 63)) & 63) / sizeof(float)), i = head < n ? head : n;
    adamw_kernel_body(w, m, v, g, gb, out, i, c, zero);
    if (gb) zero = 0;
    int aligned = !(((uintptr_t)(m + i) | (uintptr_t)(v + i)) & 31) && (gb || !((uintptr_t)(g + i) & 31)) &&
                  (!out || !((uintptr_t)(out + i) & 15));
    if (aligned && (zero || out)) {
        uint16_t tb[ADAMW_BLOCK] __attribute__((aligned(64))); // (ADAMW_BLOCK) the block's bf16 copy
        const __m256 zeros = _mm256_setzero_ps();
        for (; i + ADAMW_BLOCK <= n; i += ADAMW_BLOCK) {
            { // (the arrays do not overlap: adamw.h)
                float *restrict bw = w + i, *restrict bm = m + i, *restrict bv = v + i;
                if (gb) {
                    const uint16_t *restrict bg = gb + i;
                    for (int k = 0; k < ADAMW_BLOCK; k++) {
                        AdamWElem e = adamw_one(bw[k], bm[k], bv[k], f32_from_bf16(bg[k]), &c);
                        bw[k] = e.w, bm[k] = e.m, bv[k] = e.v;
                    }
                } else {
                    const float *restrict bg = g + i;
                    for (int k = 0; k < ADAMW_BLOCK; k++) {
                        AdamWElem e = adamw_one(bw[k], bm[k], bv[k], bg[k], &c);
                        bw[k] = e.w, bm[k] = e.m, bv[k] = e.v;
                    }
                }
            }
            if (out) {
                for (int k = 0; k < ADAMW_BLOCK; k++) tb[k] = bf16_from_f32(w[i + k]);
                for (int k = 0; k < ADAMW_BLOCK; k += 8)
                    _mm_stream_si128((__m128i *)(out + i + k), _mm_load_si128((const __m128i *)(tb + k)));
            }
            if (zero)
                for (int k = 0; k < ADAMW_BLOCK; k += 8) _mm256_stream_ps(g + i + k, zeros);
        }
        _mm_sfence(); // the streamed lines visible before whoever waits for this job goes on
    }
    adamw_kernel_body(w + i, m + i, v + i, gb ? NULL : g + i, gb ? gb + i : NULL, out ? out + i : NULL, n - i, c, zero);
}
#endif

static AdamWKernel adamw_kernel_pick(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2")) return adamw_kernel_avx2;
#endif
    return adamw_kernel_base;
}

// One thread's share of adamw_update: [lo, hi) of every array.
typedef struct AdamWJob {
    float *w, *m, *v, *g;
    const uint16_t *gb; // not NULL: the gradients as bf16 (g NULL)
    uint16_t *out;      // NULL: no bf16 copy
    int64_t lo, hi;
    AdamWConst c;
    AdamWKernel kernel; // NULL: first touch, every array's range zeroed (adamw_first_touch)
    int zero;           // g zeroed as it is read
} AdamWJob;

static void adamw_job_run(const AdamWJob *j) {
    size_t k = (size_t)(j->hi - j->lo);
    if (!j->kernel) { // first touch: each array's range zeroed by the thread that will update it
        float *a[4] = {j->w, j->m, j->v, j->g};
        for (int i = 0; i < 4; i++)
            if (a[i]) memset(a[i] + j->lo, 0, k * sizeof(float));
        if (j->gb) memset((uint16_t *)j->gb + j->lo, 0, k * sizeof(uint16_t)); // (the store's own array)
        if (j->out) memset(j->out + j->lo, 0, k * sizeof(uint16_t));
        return;
    }
    j->kernel(j->w + j->lo, j->m + j->lo, j->v + j->lo, j->g ? j->g + j->lo : NULL, j->gb ? j->gb + j->lo : NULL,
              j->out ? j->out + j->lo : NULL, j->hi - j->lo, j->c, j->zero);
}

static void *adamw_job_thread(void *arg) {
    adamw_job_run(arg);
    return NULL;
}

// How many threads n elements deserve, at most nthreads, at least 1.
static int adamw_threads_for(int64_t n, int64_t min_per_thread, int nthreads) {
    int64_t most = n / min_per_thread;
    if (most < 1) most = 1;
    return nthreads < 1 ? 1 : nthreads < most ? nthreads : (int)most;
}

// The ranges adamw_update gives its nt threads over n elements of arrays
// laid out like w: range i is [bound(i), bound(i+1)), bound(0) = 0,
// bound(nt) = n, and the others head + i*per, where w + head is the first
// 64-byte boundary of w and per a whole number of cache lines, so threads
// share no cache line.
static void adamw_split(const float *w, int64_t n, int nt, int i, int64_t *lo, int64_t *hi) {
    int64_t head = (int64_t)((64 - ((uintptr_t)w & 63)) & 63) / (int64_t)sizeof(float);
    int64_t per = (n + nt - 1) / nt;
    per = (per + ADAMW_LINE_FLOATS - 1) / ADAMW_LINE_FLOATS * ADAMW_LINE_FLOATS;
    int64_t a = i == 0 ? 0 : head + (int64_t)i * per, b = i == nt - 1 ? n : head + (int64_t)(i + 1) * per;
    *lo = a < n ? a : n;
    *hi = b < n ? (b > *lo ? b : *lo) : n;
}

// adamw_update and adamw_first_touch: `kernel` (NULL: zero) over the ranges of adamw_split.
static void adamw_run(float *w, float *m, float *v, float *g, const uint16_t *gb, uint16_t *out, int64_t n,
                      AdamWConst c, AdamWKernel kernel, int zero, int nthreads) {
    int nt = adamw_threads_for(n, ADAMW_MIN_PER_THREAD, nthreads);
    AdamWJob *jobs = malloc((size_t)nt * sizeof *jobs); // (nt)
    if (nt == 1 || !jobs) {
        free(jobs);
        adamw_job_run(&(AdamWJob){w, m, v, g, gb, out, 0, n, c, kernel, zero});
        return;
    }
    for (int i = 0; i < nt; i++) {
        jobs[i] = (AdamWJob){w, m, v, g, gb, out, 0, 0, c, kernel, zero};
        adamw_split(w, n, nt, i, &jobs[i].lo, &jobs[i].hi);
    }
    pool_run(adamw_job_thread, jobs, sizeof *jobs, nt);
    free(jobs);
}

void adamw_update(float *w, float *m, float *v, float *g, uint16_t *bf16_out, int64_t n, const AdamWStep *s, int flags,
                  int nthreads) {
    if (n <= 0) return;
    adamw_run(w, m, v, g, NULL, bf16_out, n, adamw_constants(s, flags & ADAMW_DECAY), adamw_kernel_pick(),
              (flags & ADAMW_ZERO_GRADS) != 0, nthreads);
}

void adamw_update_bf16_grads(float *w, float *m, float *v, const uint16_t *g, uint16_t *bf16_out, int64_t n,
                             const AdamWStep *s, int flags, int nthreads) {
    if (n <= 0) return;
    adamw_run(w, m, v, NULL, g, bf16_out, n, adamw_constants(s, flags & ADAMW_DECAY), adamw_kernel_pick(), 0, nthreads);
}

// One thread's share of adamw_update_parts: elements [lo, hi) of the parts taken together.
typedef struct PartsJob {
    const AdamWPart *parts;
    int nparts;
    int64_t lo, hi;
    AdamWConst c[2]; // without and with weight decay
    AdamWKernel kernel;
} PartsJob;

static void *adamw_parts_thread(void *arg) {
    const PartsJob *j = arg;
    int64_t at = 0; // the first element of part k, counted over the parts
    for (int k = 0; k < j->nparts && at < j->hi; at += j->parts[k++].n) {
        const AdamWPart *q = &j->parts[k];
        int64_t a = j->lo > at ? j->lo - at : 0, b = j->hi - at < q->n ? j->hi - at : q->n;
        if (b <= a) continue;
        j->kernel(q->w + a, q->m + a, q->v + a, q->gb ? NULL : q->g + a, q->gb ? q->gb + a : NULL,
                  q->out ? q->out + a : NULL, b - a, j->c[(q->flags & ADAMW_DECAY) != 0],
                  !q->gb && (q->flags & ADAMW_ZERO_GRADS));
    }
    return NULL;
}

void adamw_update_parts(const AdamWPart *parts, int nparts, const AdamWStep *s, int nthreads) {
    enum { MAX_THREADS = 256 };
    int64_t total = 0;
    for (int k = 0; k < nparts; k++) total += parts[k].n > 0 ? parts[k].n : 0;
    if (total <= 0) return;
    int nt = adamw_threads_for(total, ADAMW_MIN_PER_THREAD, nthreads < MAX_THREADS ? nthreads : MAX_THREADS);
    PartsJob jobs[MAX_THREADS];
    int64_t per = (total + nt - 1) / nt;
    per = (per + ADAMW_LINE_FLOATS - 1) / ADAMW_LINE_FLOATS * ADAMW_LINE_FLOATS;
    for (int i = 0; i < nt; i++) {
        int64_t lo = (int64_t)i * per, hi = lo + per;
        jobs[i] = (PartsJob){parts,
                             nparts,
                             lo < total ? lo : total,
                             hi < total ? hi : total,
                             {adamw_constants(s, 0), adamw_constants(s, 1)},
                             adamw_kernel_pick()};
    }
    if (nt == 1) adamw_parts_thread(&jobs[0]);
    else pool_run(adamw_parts_thread, jobs, sizeof *jobs, nt);
}

void adamw_first_touch(float *w, float *m, float *v, float *g, uint16_t *gb, uint16_t *bf16_out, int64_t n,
                       int nthreads) {
    if (n <= 0) return;
    adamw_run(w, m, v, g, gb, bf16_out, n, (AdamWConst){0}, NULL, 0, nthreads);
}

// ---- the squared gradient norm

// Sum of squares of g, (n) with n <= ADAMW_NORM_CHUNK, in double. The
// chunk is read as four streams, one per quarter (more reads in flight than
// one stream: 1.5x the speed of a single stream on a 2-core VM), each with
// two running sums, for even and odd i (lanes the compiler may vectorise but
// not reorder). The eight sums are combined in a fixed order, then the tail.
// gb not NULL: the values are gb's bf16 ones widened (g unused), the same
// sums as of an fp32 copy of them.
static inline __attribute__((always_inline)) double chunk_sq_body(const float *restrict g, const uint16_t *restrict gb,
                                                                  int64_t n) {
#define SQ_AT(i) (gb ? (double)f32_from_bf16(gb[i]) * (double)f32_from_bf16(gb[i]) : (double)g[i] * (double)g[i])
    int64_t q = n / 8 * 2; // elements per quarter, even
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (int64_t i = 0; i < q; i += 2) {
        a0 += SQ_AT(i);
        a1 += SQ_AT(i + 1);
        a2 += SQ_AT(q + i);
        a3 += SQ_AT(q + i + 1);
        a4 += SQ_AT(2 * q + i);
        a5 += SQ_AT(2 * q + i + 1);
        a6 += SQ_AT(3 * q + i);
        a7 += SQ_AT(3 * q + i + 1);
    }
    double sum = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    for (int64_t i = 4 * q; i < n; i++) sum += SQ_AT(i);
    return sum;
#undef SQ_AT
}
static double adamw_chunk_sq(const float *g, int64_t n) { return chunk_sq_body(g, NULL, n); }
// The chunk of bf16 values: widened into wide (n floats, a thread's, which
// stays in its cache) by a loop the compiler vectorises, then summed as an
// fp32 chunk, the same additions; without wide, summed as they are (the
// same sums, about half as fast: the widening inside the sums does not
// vectorise).
static double adamw_chunk_sq_bf16(const uint16_t *gb, int64_t n, float *wide) {
    if (!wide) return chunk_sq_body(NULL, gb, n);
    for (int64_t i = 0; i < n; i++) wide[i] = f32_from_bf16(gb[i]);
    return adamw_chunk_sq(wide, n);
}

// One thread's share of adamw_sq_norm: chunks [lo, hi).
typedef struct NormJob {
    const float *g;
    const uint16_t *gb; // not NULL: the values as bf16 (g NULL)
    int64_t n;          // elements of g
    int64_t lo, hi;     // chunk indices
    double *sums;       // (nchunks) the sum of chunk k goes to sums[k]
} NormJob;

static void *adamw_norm_thread(void *arg) {
    const NormJob *j = arg;
    float *wide = j->gb && j->hi > j->lo ? malloc(ADAMW_NORM_CHUNK * sizeof *wide) : NULL; // (ADAMW_NORM_CHUNK)
    for (int64_t k = j->lo; k < j->hi; k++) {
        int64_t start = k * ADAMW_NORM_CHUNK;
        int64_t len = j->n - start < ADAMW_NORM_CHUNK ? j->n - start : ADAMW_NORM_CHUNK;
        j->sums[k] = j->gb ? adamw_chunk_sq_bf16(j->gb + start, len, wide) : adamw_chunk_sq(j->g + start, len);
    }
    free(wide);
    return NULL;
}

// adamw_sq_norm of g, or (gb not NULL) of gb's values.
static double sq_norm(const float *g, const uint16_t *gb, int64_t n, int nthreads) {
    if (n <= 0) return 0.0;
    int64_t nchunks = (n + ADAMW_NORM_CHUNK - 1) / ADAMW_NORM_CHUNK;
    int nt = adamw_threads_for(nchunks, 4, nthreads);                      // at least 4 chunks (1 MiB) a thread
    double *sums = nt > 1 ? malloc((size_t)nchunks * sizeof *sums) : NULL; // (nchunks)
    NormJob *jobs = nt > 1 ? malloc((size_t)nt * sizeof *jobs) : NULL;     // (nt)
    if (nt == 1 || !sums || !jobs) {
        // Inline: the same chunk sums, added in the same order.
        free(sums), free(jobs);
        double total = 0.0;
        float *wide = gb ? malloc((size_t)(n < ADAMW_NORM_CHUNK ? n : ADAMW_NORM_CHUNK) * sizeof *wide) : NULL;
        for (int64_t start = 0; start < n; start += ADAMW_NORM_CHUNK) {
            int64_t len = n - start < ADAMW_NORM_CHUNK ? n - start : ADAMW_NORM_CHUNK;
            total += gb ? adamw_chunk_sq_bf16(gb + start, len, wide) : adamw_chunk_sq(g + start, len);
        }
        free(wide);
        return total;
    }
    int64_t per = (nchunks + nt - 1) / nt;
    for (int i = 0; i < nt; i++) {
        int64_t lo = (int64_t)i * per, hi = lo + per;
        jobs[i] = (NormJob){g, gb, n, lo < nchunks ? lo : nchunks, hi < nchunks ? hi : nchunks, sums};
    }
    pool_run(adamw_norm_thread, jobs, sizeof *jobs, nt);
    double total = 0.0;
    for (int64_t k = 0; k < nchunks; k++) total += sums[k];
    free(sums), free(jobs);
    return total;
}

double adamw_sq_norm(const float *g, int64_t n, int nthreads) { return sq_norm(g, NULL, n, nthreads); }
double adamw_sq_norm_bf16(const uint16_t *g, int64_t n, int nthreads) { return sq_norm(NULL, g, n, nthreads); }

double adamw_sq_norm_ref(const float *g, const uint16_t *gb, int64_t n) {
    double total = 0.0;
    for (int64_t start = 0; start < n; start += ADAMW_NORM_CHUNK) { // the same chunks, each summed in one loop
        double sum = 0.0;
        for (int64_t i = start; i < n && i < start + ADAMW_NORM_CHUNK; i++) {
            double x = gb ? (double)f32_from_bf16(gb[i]) : (double)g[i];
            sum += x * x;
        }
        total += sum;
    }
    return total;
}

// ---- gradients into the host accumulators

void grads_accumulate_ref(float *g, const void *src, int64_t n, int flags) {
    if (flags & GRADS_BF16) {
        const uint16_t *a = src; // (n)
        if (flags & GRADS_SET)
            for (int64_t i = 0; i < n; i++) g[i] = f32_from_bf16(a[i]);
        else
            for (int64_t i = 0; i < n; i++) g[i] += f32_from_bf16(a[i]);
        return;
    }
    const float *a = src; // (n)
    if (flags & GRADS_SET) memcpy(g, a, (size_t)n * sizeof *g);
    else
        for (int64_t i = 0; i < n; i++) g[i] += a[i];
}

typedef struct AccumulateJob {
    float *g;
    const char *src;
    int64_t lo, hi; // elements [lo, hi)
    int flags;
} AccumulateJob;

static void *grads_accumulate_thread(void *arg) {
    const AccumulateJob *j = arg;
    grads_accumulate_ref(j->g + j->lo, j->src + j->lo * (j->flags & GRADS_BF16 ? 2 : 4), j->hi - j->lo, j->flags);
    return NULL;
}

void grads_accumulate(float *g, const void *src, int64_t n, int flags, int nthreads) {
    enum { MAX_THREADS = 16 };
    int nt = adamw_threads_for(n, ADAMW_MIN_PER_THREAD, nthreads < MAX_THREADS ? nthreads : MAX_THREADS);
    AccumulateJob jobs[MAX_THREADS];
    int64_t per = (n + nt - 1) / nt;
    per = (per + ADAMW_LINE_FLOATS - 1) / ADAMW_LINE_FLOATS * ADAMW_LINE_FLOATS; // whole cache lines of g
    for (int i = 0; i < nt; i++) {
        int64_t lo = (int64_t)i * per, hi = lo + per;
        jobs[i] = (AccumulateJob){g, src, lo < n ? lo : n, hi < n ? hi : n, flags};
    }
    pool_run(grads_accumulate_thread, jobs, sizeof *jobs, nt);
}

// ---- the reference

// adamw_update_ref of g, or (gb not NULL) of gb's bf16 values.
static void update_ref(float *w, float *m, float *v, const float *g, const uint16_t *gb, int64_t n, const AdamWStep *s,
                       int decay) {
    double lr = s->lr, b1 = s->beta1, b2 = s->beta2, eps = s->eps, wd = s->weight_decay;
    double bc1 = 1.0 - pow(b1, (double)s->t), bc2 = 1.0 - pow(b2, (double)s->t);
    for (int64_t i = 0; i < n; i++) {
        double gg = (double)(gb ? f32_from_bf16(gb[i]) : g[i]) * s->grad_scale;
        double mi = b1 * m[i] + (1.0 - b1) * gg;
        double vi = b2 * v[i] + (1.0 - b2) * gg * gg;
        double mhat = mi / bc1, vhat = vi / bc2;
        double wi = w[i];
        if (decay) wi -= lr * wd * w[i];
        wi -= lr * mhat / (sqrt(vhat) + eps);
        m[i] = (float)mi;
        v[i] = (float)vi;
        w[i] = (float)wi;
    }
}

void adamw_update_ref(float *w, float *m, float *v, const float *g, int64_t n, const AdamWStep *s, int decay) {
    update_ref(w, m, v, g, NULL, n, s, decay);
}

void adamw_update_bf16_grads_ref(float *w, float *m, float *v, const uint16_t *g, int64_t n, const AdamWStep *s,
                                 int decay) {
    update_ref(w, m, v, NULL, g, n, s, decay);
}
