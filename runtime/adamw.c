// adamw.c: the host AdamW step (see adamw.h): a fast elementwise kernel
// split over threads, the deterministic squared gradient norm, and the plain
// double-precision reference the tests hold the kernel to.
#include "adamw.h"

#include "../common/bf16.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Without -fno-math-errno GCC must keep a scalar sqrtf call (it may set
// errno) and the update runs at about half the memory bandwidth.
#if defined(__GNUC__) && !defined(__NO_MATH_ERRNO__)
#warning "compile adamw.c with -fno-math-errno, or its loops cannot be vectorised"
#endif

enum {
    ADAMW_LINE_FLOATS = 16,           // floats in a 64-byte cache line
    // Fewer elements than this a thread, and starting the thread costs more
    // than it saves (starting and joining one costs 50-100 us on a 2-core VM,
    // about what 128K elements take from memory).
    ADAMW_MIN_PER_THREAD = 128 * 1024,
};

// The per-step constants of the fast kernel, computed once in double and
// rounded to float, so the loop is float multiplies, adds, one sqrt and one
// divide per element.
typedef struct AdamWConst {
    float grad_scale;
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float eps;
    float decay_mul;    // 1 - lr * weight_decay, or 1 with no decay
    float step;         // lr / (1 - beta1^t): folds the first bias correction into lr
    float inv_sqrt_bc2; // 1 / sqrt(1 - beta2^t): sqrt(v / bc2) = sqrt(v) * inv_sqrt_bc2
} AdamWConst;

static AdamWConst adamw_const(const AdamWStep *s, int decay) {
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
// is split.
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

// The fast kernel on [0, n) of already offset arrays: w, m, v, g, out (n).
// The main loops stop at a multiple of 16 so that GCC vectorises them even
// at -O2, whose cost model takes no loop that would need a scalar epilogue;
// the tail loops do the last n % 16. The vector loops also need sqrtf free
// of errno: compile this file with -fno-math-errno.
static inline __attribute__((always_inline)) void
adamw_kernel_body(float *restrict w, float *restrict m, float *restrict v, const float *restrict g,
                  uint16_t *restrict out, int64_t n, AdamWConst c) {
    int64_t n16 = n & ~(int64_t)15;
    if (out) {
        for (int64_t i = 0; i < n16; i++) {
            AdamWElem e = adamw_one(w[i], m[i], v[i], g[i], &c);
            w[i] = e.w, m[i] = e.m, v[i] = e.v, out[i] = bf16_from_f32(e.w);
        }
        for (int64_t i = n16; i < n; i++) {
            AdamWElem e = adamw_one(w[i], m[i], v[i], g[i], &c);
            w[i] = e.w, m[i] = e.m, v[i] = e.v, out[i] = bf16_from_f32(e.w);
        }
    } else {
        for (int64_t i = 0; i < n16; i++) {
            AdamWElem e = adamw_one(w[i], m[i], v[i], g[i], &c);
            w[i] = e.w, m[i] = e.m, v[i] = e.v;
        }
        for (int64_t i = n16; i < n; i++) {
            AdamWElem e = adamw_one(w[i], m[i], v[i], g[i], &c);
            w[i] = e.w, m[i] = e.m, v[i] = e.v;
        }
    }
}

typedef void (*AdamWKernel)(float *, float *, float *, const float *, uint16_t *, int64_t, AdamWConst);

// The kernel compiled for the baseline ISA (SSE2 on x86-64), and on x86-64
// once more for AVX2, chosen at run time by __builtin_cpu_supports. Neither
// uses fma, so both give the same bits.
static void adamw_kernel_base(float *w, float *m, float *v, const float *g, uint16_t *out, int64_t n,
                              AdamWConst c) {
    adamw_kernel_body(w, m, v, g, out, n, c);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static void adamw_kernel_avx2(float *w, float *m, float *v, const float *g,
                                                              uint16_t *out, int64_t n, AdamWConst c) {
    adamw_kernel_body(w, m, v, g, out, n, c);
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
    float *w, *m, *v;
    const float *g;
    uint16_t *out; // NULL: no bf16 copy
    int64_t lo, hi;
    AdamWConst c;
    AdamWKernel kernel;
} AdamWJob;

static void adamw_job_run(const AdamWJob *j) {
    j->kernel(j->w + j->lo, j->m + j->lo, j->v + j->lo, j->g + j->lo, j->out ? j->out + j->lo : NULL,
              j->hi - j->lo, j->c);
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

int run_jobs(void *(*fn)(void *), void *jobs, size_t size, int nt) {
    pthread_t *tids = nt > 1 ? malloc((size_t)nt * sizeof *tids) : NULL; // (nt)
    char *started = nt > 1 ? calloc((size_t)nt, 1) : NULL;               // (nt) 1 where tids[i] runs
    for (int i = 1; i < nt && tids && started; i++)
        started[i] = pthread_create(&tids[i], NULL, fn, (char *)jobs + (size_t)i * size) == 0;
    fn(jobs);
    int here = 0;
    for (int i = 1; i < nt; i++) {
        if (started && started[i]) pthread_join(tids[i], NULL);
        else fn((char *)jobs + (size_t)i * size), here++;
    }
    free(tids), free(started);
    return here;
}

void adamw_update(float *w, float *m, float *v, const float *g, uint16_t *bf16_out, int64_t n,
                  const AdamWStep *s, int decay, int nthreads) {
    if (n <= 0) return;
    AdamWConst c = adamw_const(s, decay);
    AdamWKernel kernel = adamw_kernel_pick();
    int nt = adamw_threads_for(n, ADAMW_MIN_PER_THREAD, nthreads);
    if (nt == 1) {
        kernel(w, m, v, g, bf16_out, n, c);
        return;
    }

    // Range i is [bound(i), bound(i+1)): bound(0) = 0, bound(nt) = n, and
    // the others are head + i*per, where w + head is the first 64-byte
    // boundary of w and per a whole number of cache lines.
    int64_t head = (int64_t)((64 - ((uintptr_t)w & 63)) & 63) / (int64_t)sizeof(float);
    int64_t per = (n + nt - 1) / nt;
    per = (per + ADAMW_LINE_FLOATS - 1) / ADAMW_LINE_FLOATS * ADAMW_LINE_FLOATS;

    AdamWJob *jobs = malloc((size_t)nt * sizeof *jobs); // (nt)
    if (!jobs) {
        kernel(w, m, v, g, bf16_out, n, c);
        return;
    }
    for (int i = 0; i < nt; i++) {
        int64_t lo = i == 0 ? 0 : head + (int64_t)i * per;
        int64_t hi = i == nt - 1 ? n : head + (int64_t)(i + 1) * per;
        lo = lo < n ? lo : n;
        hi = hi < n ? hi : n;
        jobs[i] = (AdamWJob){w, m, v, g, bf16_out, lo, hi > lo ? hi : lo, c, kernel};
    }
    run_jobs(adamw_job_thread, jobs, sizeof *jobs, nt);
    free(jobs);
}

// ---- the squared gradient norm

// Sum of squares of g, (n) with n <= ADAMW_NORM_CHUNK, in double. The
// chunk is read as four streams, one per quarter (more reads in flight than
// one stream: 1.5x the speed of a single stream on a 2-core VM), each with
// two running sums, for even and odd i (lanes the compiler may vectorise but
// not reorder). The eight sums are combined in a fixed order, then the tail.
static double adamw_chunk_sq(const float *restrict g, int64_t n) {
    int64_t q = n / 8 * 2; // elements per quarter, even
    const float *g0 = g, *g1 = g + q, *g2 = g + 2 * q, *g3 = g + 3 * q;
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (int64_t i = 0; i < q; i += 2) {
        a0 += (double)g0[i] * (double)g0[i];
        a1 += (double)g0[i + 1] * (double)g0[i + 1];
        a2 += (double)g1[i] * (double)g1[i];
        a3 += (double)g1[i + 1] * (double)g1[i + 1];
        a4 += (double)g2[i] * (double)g2[i];
        a5 += (double)g2[i + 1] * (double)g2[i + 1];
        a6 += (double)g3[i] * (double)g3[i];
        a7 += (double)g3[i + 1] * (double)g3[i + 1];
    }
    double sum = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    for (int64_t i = 4 * q; i < n; i++) sum += (double)g[i] * (double)g[i];
    return sum;
}

// One thread's share of adamw_sq_norm: chunks [lo, hi).
typedef struct NormJob {
    const float *g;
    int64_t n;      // elements of g
    int64_t lo, hi; // chunk indices
    double *sums;   // (nchunks) the sum of chunk k goes to sums[k]
} NormJob;

static void *adamw_norm_thread(void *arg) {
    const NormJob *j = arg;
    for (int64_t k = j->lo; k < j->hi; k++) {
        int64_t start = k * ADAMW_NORM_CHUNK;
        int64_t len = j->n - start < ADAMW_NORM_CHUNK ? j->n - start : ADAMW_NORM_CHUNK;
        j->sums[k] = adamw_chunk_sq(j->g + start, len);
    }
    return NULL;
}

double adamw_sq_norm(const float *g, int64_t n, int nthreads) {
    if (n <= 0) return 0.0;
    int64_t nchunks = (n + ADAMW_NORM_CHUNK - 1) / ADAMW_NORM_CHUNK;
    int nt = adamw_threads_for(nchunks, 4, nthreads); // at least 4 chunks (1 MiB) a thread
    double *sums = nt > 1 ? malloc((size_t)nchunks * sizeof *sums) : NULL;          // (nchunks)
    NormJob *jobs = nt > 1 ? malloc((size_t)nt * sizeof *jobs) : NULL;              // (nt)
    if (nt == 1 || !sums || !jobs) {
        // Inline: the same chunk sums, added in the same order.
        free(sums), free(jobs);
        double total = 0.0;
        for (int64_t start = 0; start < n; start += ADAMW_NORM_CHUNK)
            total += adamw_chunk_sq(g + start, n - start < ADAMW_NORM_CHUNK ? n - start : ADAMW_NORM_CHUNK);
        return total;
    }
    int64_t per = (nchunks + nt - 1) / nt;
    for (int i = 0; i < nt; i++) {
        int64_t lo = (int64_t)i * per, hi = lo + per;
        jobs[i] = (NormJob){g, n, lo < nchunks ? lo : nchunks, hi < nchunks ? hi : nchunks, sums};
    }
    run_jobs(adamw_norm_thread, jobs, sizeof *jobs, nt);
    double total = 0.0;
    for (int64_t k = 0; k < nchunks; k++) total += sums[k];
    free(sums), free(jobs);
    return total;
}

// ---- gradients into the host accumulators

void adamw_grads_add_ref(float *g, const void *src, int64_t n, int bf16) {
    if (bf16) {
        const uint16_t *a = src; // (n)
        for (int64_t i = 0; i < n; i++) g[i] += f32_from_bf16(a[i]);
        return;
    }
    const float *a = src; // (n)
    for (int64_t i = 0; i < n; i++) g[i] += a[i];
}

typedef struct AddJob {
    float *g;
    const char *src;
    int64_t lo, hi; // elements [lo, hi)
    int bf16;
} AddJob;

static void *grads_add_thread(void *arg) {
    const AddJob *j = arg;
    adamw_grads_add_ref(j->g + j->lo, j->src + j->lo * (j->bf16 ? 2 : 4), j->hi - j->lo, j->bf16);
    return NULL;
}

void adamw_grads_add(float *g, const void *src, int64_t n, int bf16, int nthreads) {
    enum { MAX_THREADS = 16 };
    int nt = adamw_threads_for(n, ADAMW_MIN_PER_THREAD, nthreads < MAX_THREADS ? nthreads : MAX_THREADS);
    AddJob jobs[MAX_THREADS];
    int64_t per = (n + nt - 1) / nt;
    per = (per + ADAMW_LINE_FLOATS - 1) / ADAMW_LINE_FLOATS * ADAMW_LINE_FLOATS; // whole cache lines of g
    for (int i = 0; i < nt; i++) {
        int64_t lo = (int64_t)i * per, hi = lo + per;
        jobs[i] = (AddJob){g, src, lo < n ? lo : n, hi < n ? hi : n, bf16};
    }
    run_jobs(grads_add_thread, jobs, sizeof *jobs, nt);
}

// ---- the reference

void adamw_update_ref(float *w, float *m, float *v, const float *g, int64_t n, const AdamWStep *s, int decay) {
    double lr = s->lr, b1 = s->beta1, b2 = s->beta2, eps = s->eps, wd = s->weight_decay;
    double bc1 = 1.0 - pow(b1, (double)s->t), bc2 = 1.0 - pow(b2, (double)s->t);
    for (int64_t i = 0; i < n; i++) {
        double gg = (double)g[i] * s->grad_scale;
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
