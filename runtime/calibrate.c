// calibrate.c: mtrun --calibrate (calibrate.h). Measures, on the cpu backend,
// in several seconds:
//
//   1. memory bandwidth: T threads each memcpy their slice of a buffer well
//      beyond the last-level cache, counted as bytes read + bytes written.
//      The cpu backend's arena is host memory and its copies are memcpy, so
//      this one rate gives hbm_bandwidth, host_memory_bandwidth and (halved:
//      a copy of B bytes moves 2B) h2d_bandwidth and d2h_bandwidth.
//   2. the host AdamW: what runtime/store/store.c's store_update does a segment,
//      adamw_update (runtime/store/adamw.c, with the bf16 copy and the gradient
//      zeroed in the same pass) on T threads, over arrays of a quarter of the
//      copy buffer each; 34 bytes a parameter as compiler/schedule/cost.c counts them ->
//      host_adamw_bandwidth. And what a GPU's COPY_OUT does on the host after
//      its copy: grads_accumulate of bf16 gradients into the fp32
//      accumulators (runtime/backend/backend_cuda.c) on T threads, 10 bytes a
//      parameter (read 2 and 4, write 4) -> host_grads_add_bandwidth.
//   3. sgemm: the three GEMMs of a training step's MLP matmul at GPT-2
//      small's width and 256 tokens (forward, and the backward's two), with
//      the threads the cpu backend gives a GEMM of that size
//      (mt_blas_threads_for) -> matrix_flops_f32 (and bf16: the cpu backend
//      has none of its own).
//   4. element-wise: x = x * a + b on one thread over a large array, swept
//      in cache-sized chunks, several passes a chunk, so that arithmetic and
//      not memory bounds it (compiler/schedule/cost.c already takes the larger of the
//      FLOP time and the byte time) -> vector_flops.
//   4b. bf16 attention: the plain kernel (runtime/backend/kernels.inc: double sums,
//      one thread) that the cpu backend runs a bf16 plan's attention with,
//      causal, 256 tokens, 4 heads of 64, its FLOPs counted as
//      compiler/schedule/cost.c counts attention's, over its time less its exps (one
//      a scored pair) at 5's transcendental_f64_s, which cost.c prices
//      apart -> attention_plain_flops.
//   4c. one-thread sgemm: the three GEMMs of a tiny model's MLP matmul
//      (llama-tiny's: 256 tokens, width 64, MLP width 176) on one thread, as
//      the cpu backend runs every GEMM under MT_BLAS_THREADED_MACS
//      multiply-adds -> gemm_one_thread_flops.
//   4d. bf16 conversions: runtime/backend/jit.c's own loops (jit_widen, jit_narrow)
//      over a tiny model's activation (256 x 256) in cache, the mean an
//      element of the two -> bf16_convert_s.
//   5. per-call overheads: a small sgemm (64 x 64 x 16, an attention head's
//      scores in the tiny examples, on one thread as the cpu backend runs
//      it) called many times, less its FLOPs at the rate of 4c ->
//      gemm_call_s; a generated kernel's call (a function pointer on a few
//      elements, as the executor calls one) -> kernel_launch_s; expf, logf,
//      sinf and cosf over an array in cache, the mean of the four a call ->
//      transcendental_s.
//   6. cores (the CPUs this process may run on), RAM (MemTotal, or a smaller
//      cgroup limit).
//   7. with --tier-dir DIR, the NVMe tier: DIR's free space ->
//      tier_capacity; CAL_TIER_MB of CAL_TIER_LAYERS records written, then
//      read, through the tier itself (io_uring, O_DIRECT), best of
//      CAL_TIER_REPS -> tier_write_bandwidth, tier_read_bandwidth.
//
// 1 to 5 run in CAL_ROUNDS rounds, each round every measurement once, after
// a round that warms up. Other work on a shared machine comes and goes:
// interleaved rounds spread each figure's samples over the whole
// calibration. The rates of 1 to 3, which the long steps of large models
// spend their time at, are the medians of their rounds: such a step shares
// the machine as a typical round does, and one slow or lucky round does
// not decide them. The one-thread figures of 4 and 5, which the short steps
// of small models spend theirs at, are the best of their rounds: their
// medians on a busy machine priced those steps 1.3 to 2.3 times what they
// measured, their best rounds within 25% (bench/README.md).
//
// Then writes the profile through a temporary file, checks it with
// target_load, and renames it into place.
#include "runtime/calibrate.h"
#include "common/io.h"
#include "common/target.h"
#include "runtime/store/adamw.h"
#include "runtime/store/pool.h"
#include "runtime/backend/blas_core.h"
#include "runtime/backend/jit.h"
#include "runtime/backend/kernels.h"
#include "runtime/store/tier.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

enum {
    CAL_ROUNDS = 7,       // timed rounds of measurements 1 to 5; each figure is the median of its rounds
    CAL_ALIGN = 2 << 20,  // copy buffers start on a 2 MiB boundary, for transparent huge pages
    CAL_GEMM_T = 256,     // the sgemm: tokens,
    CAL_GEMM_C = 768,     // width,
    CAL_GEMM_F = 3072,    // and MLP width (GPT-2 small's)
    CAL_FMA_CHUNK = 4096, // floats of one cache-resident chunk (16 KiB)
    CAL_FMA_PASSES = 32,  // passes over each chunk before the next
    CAL_FMA_N = 4 << 20,  // floats of the element-wise array (16 MiB), a multiple of CAL_FMA_CHUNK
    CAL_SMALL_N = 64,     // the small sgemm: n x n x k
    CAL_SMALL_K = 16,
    // The per-call measurements' rounds take 10 to 20 ms each, a few of a
    // scheduler's time slices, so that a round sees the machine's share
    // as a step of the tiny examples does.
    CAL_SMALL_CALLS = 8000,     // the small sgemm's calls a round
    CAL_KERNEL_CALLS = 4000000, // generated-kernel calls a round
    CAL_MATH_N = 1 << 18,       // floats expf, logf, sinf and cosf each take, CAL_MATH_PASSES times a round
    CAL_MATH_PASSES = 4,
    CAL_GEMM1_T = 256,         // the one-thread sgemm: tokens,
    CAL_GEMM1_C = 64,          // width,
    CAL_GEMM1_F = 176,         // and MLP width (llama-tiny's)
    CAL_GEMM1_REPS = 64,       // its three GEMMs' repeats a round
    CAL_CONVERT_N = 256 * 256, // elements widened and rounded (a tiny model's activation, in cache)
    CAL_CONVERT_REPS = 64,     // a round
    CAL_TIER_MB = 512,         // the tier measured: 2^20-byte units written and read (536.9 MB)
    CAL_TIER_LAYERS = 16,      // in records of CAL_TIER_MB / CAL_TIER_LAYERS units
    CAL_TIER_REPS = 3,
};

// Bytes a parameter of the AdamW measured, as compiler/schedule/cost.c's update_bytes
// counts them under bf16: reads w, m, v, g (16), writes w, m, v (12), the
// bf16 copy (2) and zeroes g (4).
#define CAL_ADAMW_BYTES 34.0
// Bytes a parameter of the gradient add: reads the bf16 gradient (2) and its
// fp32 accumulator (4), writes the accumulator (4).
#define CAL_GRADS_ADD_BYTES 10.0

// One figure's rounds, and their median.
typedef struct Figure {
    double v[CAL_ROUNDS];
    double median, lo, hi; // of v
} Figure;

// What was measured, and how, for the profile's comments and the summary.
typedef struct Measured {
    Target t;
    Figure copy;          // bytes/s, read + written
    Figure adamw;         // bytes/s, CAL_ADAMW_BYTES a parameter
    Figure grads_add;     // bytes/s, CAL_GRADS_ADD_BYTES a parameter
    Figure gemm;          // FLOP/s
    Figure vector;        // FLOP/s, one thread
    Figure small_gemm;    // seconds a call of the small sgemm
    Figure kernel_call;   // seconds a generated kernel's call
    Figure math;          // seconds an expf, logf, sinf or cosf
    Figure math64;        // seconds a scalar double pow, sin, cos or exp
    Figure attention;     // seconds of the plain attention kernel, one thread
    Figure gemm1;         // FLOP/s of the tiny sgemm, one thread
    Figure convert;       // seconds a bf16 element widened or rounded, one thread
    size_t copy_bytes;    // of each of the two copy buffers
    int threads;          // of the copy and AdamW
    int64_t adamw_params; // the AdamW measured: parameters
    int blas_threads;     // OpenBLAS's, for the sgemm
    double meminfo_total; // bytes, MemTotal
    double cgroup_limit;  // bytes, 0 when none or not below MemTotal
    const char *tier_dir; // where the tier was measured (NULL: not)
    char date[16];        // YYYY-MM-DD, UTC
    char host[64];        // the host's name, as a word
} Measured;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// "MESSAGE" into err and -1, for errors no file is at fault for.
static int cal_fail(char *err, size_t errcap, const char *msg) {
    if (err && errcap) snprintf(err, errcap, "%s", msg);
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// f's median, lowest and highest of its CAL_ROUNDS rounds.
static void figure_settle(Figure *f) {
    double s[CAL_ROUNDS];
    memcpy(s, f->v, sizeof s);
    qsort(s, CAL_ROUNDS, sizeof s[0], cmp_double);
    f->median = CAL_ROUNDS % 2 ? s[CAL_ROUNDS / 2] : 0.5 * (s[CAL_ROUNDS / 2 - 1] + s[CAL_ROUNDS / 2]);
    f->lo = s[0], f->hi = s[CAL_ROUNDS - 1];
}

// ---- the buffers every round measures with

typedef struct CopyJob {
    int fill;                 // 1: first touch (memset) of the slice; 0: copy it
    size_t lo, hi;            // bytes
    unsigned char *src, *dst; // (copy_bytes) each
} CopyJob;

typedef struct Bench {
    int nt; // threads of the copy and AdamW
    size_t copy_bytes;
    unsigned char *src, *dst;    // (copy_bytes) each
    CopyJob *jobs;               // (nt)
    int64_t n;                   // AdamW's parameters
    float *w, *m, *v, *g;        // (n) each, fp32
    uint16_t *wb;                // (n) bf16
    int64_t step;                // AdamW's step count
    float *x, *wt, *y, *dx, *dw; // sgemm: x (T, C), wt (C, F), y (T, F), dx (T, C), dw (C, F)
    float *fma;                  // (CAL_FMA_N)
    float *sa, *sb, *sc;         // the small sgemm: sa, sb (SMALL_N, SMALL_K), sc (SMALL_N, SMALL_N)
    float *math;                 // (CAL_MATH_N)
    float *cf;                   // (CAL_CONVERT_N) the conversions' f32 side
    uint16_t *cb;                // (CAL_CONVERT_N) and bf16 side
} Bench;

static void *copy_thread(void *arg) {
    const CopyJob *j = arg;
    if (j->fill) {
        memset(j->src + j->lo, 1, j->hi - j->lo);
        memset(j->dst + j->lo, 2, j->hi - j->lo);
    } else {
        memcpy(j->dst + j->lo, j->src + j->lo, j->hi - j->lo);
    }
    return NULL;
}

// n bytes on a huge-page boundary, with transparent huge pages asked for.
static void *big_alloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, CAL_ALIGN, (n + CAL_ALIGN - 1) / CAL_ALIGN * CAL_ALIGN)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, (n + CAL_ALIGN - 1) / CAL_ALIGN * CAL_ALIGN, MADV_HUGEPAGE);
#endif
    return p;
}

// The bytes of one copy buffer: four times the last-level cache, at least
// 256 MiB, so that neither buffer stays cached; at most a sixteenth of the
// available memory.
static size_t copy_buffer_bytes(double available) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    double llc = l3 > 0 ? (double)l3 : l2 > 0 ? (double)l2 : 0;
    double n = 4 * llc > 256.0 * (1 << 20) ? 4 * llc : 256.0 * (1 << 20);
    if (available > 0 && n > available / 16) n = available / 16;
    if (n < 32.0 * (1 << 20)) n = 32.0 * (1 << 20);
    return (size_t)(n / CAL_ALIGN) * CAL_ALIGN;
}

static void bench_free(Bench *b) {
    free(b->src), free(b->dst), free(b->jobs);
    free(b->w), free(b->m), free(b->v), free(b->g), free(b->wb);
    free(b->x), free(b->wt), free(b->y), free(b->dx), free(b->dw);
    free(b->fma), free(b->sa), free(b->sb), free(b->sc), free(b->math);
    free(b->cf), free(b->cb);
    *b = (Bench){0};
}

// Allocates and fills every buffer: the copy buffers first touched by the
// threads that copy them; AdamW's arrays first touched as runtime/store/store.c
// touches its own (adamw_first_touch), on huge pages where the kernel has them.
static int bench_alloc(Bench *b, double available, int nt, char *err, size_t errcap) {
    const size_t T = CAL_GEMM_T, C = CAL_GEMM_C, F = CAL_GEMM_F;
    *b = (Bench){.nt = nt, .copy_bytes = copy_buffer_bytes(available)};
    size_t n = b->copy_bytes;
    b->n = (int64_t)(n / 16);
    b->src = big_alloc(n), b->dst = big_alloc(n);
    b->jobs = calloc((size_t)nt, sizeof *b->jobs);
    b->w = big_alloc(n / 4), b->m = big_alloc(n / 4), b->v = big_alloc(n / 4), b->g = big_alloc(n / 4);
    b->wb = big_alloc(n / 8);
    b->x = malloc(T * C * 4), b->wt = malloc(C * F * 4), b->y = malloc(T * F * 4);
    b->dx = malloc(T * C * 4), b->dw = malloc(C * F * 4);
    b->fma = malloc((size_t)CAL_FMA_N * 4), b->math = malloc((size_t)CAL_MATH_N * 4);
    b->sa = malloc(CAL_SMALL_N * CAL_SMALL_K * 4), b->sb = malloc(CAL_SMALL_N * CAL_SMALL_K * 4);
    b->sc = malloc(CAL_SMALL_N * CAL_SMALL_N * 4);
    b->cf = malloc((size_t)CAL_CONVERT_N * 4), b->cb = malloc((size_t)CAL_CONVERT_N * 2);
    if (!b->src || !b->dst || !b->jobs || !b->w || !b->m || !b->v || !b->g || !b->wb || !b->x || !b->wt || !b->y ||
        !b->dx || !b->dw || !b->fma || !b->math || !b->sa || !b->sb || !b->sc || !b->cf || !b->cb) {
        snprintf(err, errcap, "cannot allocate %.1f MB to measure this machine", (double)n * 3.1 / 1e6);
        bench_free(b);
        return -1;
    }
    // Slices of whole 4 KiB pages, each first touched by the thread that copies it.
    size_t pages = n / 4096, per = (pages + (size_t)nt - 1) / (size_t)nt;
    for (int i = 0; i < nt; i++) {
        size_t lo = (size_t)i * per, hi = (size_t)(i + 1) * per;
        b->jobs[i] = (CopyJob){1, (lo < pages ? lo : pages) * 4096, (hi < pages ? hi : pages) * 4096, b->src, b->dst};
    }
    if (pool_run(copy_thread, b->jobs, sizeof *b->jobs, nt)) { // (each slice first touched by its own thread)
        bench_free(b);
        return cal_fail(err, errcap, "cannot start threads to measure memory bandwidth");
    }
    for (int i = 0; i < nt; i++) b->jobs[i].fill = 0;
    adamw_first_touch(b->w, b->m, b->v, b->g, NULL, b->wb, b->n, nt); // as runtime/store/store.c touches its arrays
    for (int64_t i = 0; i < b->n; i++) b->w[i] = 0.01f * (float)(i % 97);
    for (size_t i = 0; i < T * C; i++) b->x[i] = (float)(i % 17) * 0.0625f - 0.5f;
    for (size_t i = 0; i < C * F; i++) b->wt[i] = (float)(i % 13) * 0.0625f - 0.375f;
    for (size_t i = 0; i < T * F; i++) b->y[i] = (float)(i % 11) * 0.0625f - 0.3f;
    for (int64_t i = 0; i < CAL_FMA_N; i++) b->fma[i] = (float)(i % 101) * 0.01f;
    for (int i = 0; i < CAL_SMALL_N * CAL_SMALL_K; i++) b->sa[i] = b->sb[i] = (float)(i % 13) * 0.0625f - 0.375f;
    for (int i = 0; i < CAL_MATH_N; i++) b->math[i] = 0.5f + (float)(i % 97) * 0.01f;
    for (int i = 0; i < CAL_CONVERT_N; i++) b->cf[i] = (float)(i % 89) * 0.0137f - 0.6f;
    return 0;
}

// ---- 1. memory bandwidth: bytes/s of one copy, read + written

static double round_copy(Bench *b) {
    double t0 = now_s();
    pool_run(copy_thread, b->jobs, sizeof *b->jobs, b->nt); // (a thread that cannot start: its job runs here)
    return 2.0 * (double)b->copy_bytes / (now_s() - t0);
}

// ---- 2. the host AdamW: bytes/s of one update as store_update does a segment

static double round_adamw(Bench *b) {
    AdamWStep step = {.lr = 1e-4f,
                      .beta1 = 0.9f,
                      .beta2 = 0.95f,
                      .eps = 1e-8f,
                      .weight_decay = 0.1f,
                      .t = ++b->step,
                      .grad_scale = 1.0f};
    for (int64_t i = 0; i < b->n; i += 1024) b->g[i] = 1e-3f; // a gradient that is not all zero
    double t0 = now_s();
    adamw_update(b->w, b->m, b->v, b->g, b->wb, b->n, &step, ADAMW_DECAY | ADAMW_ZERO_GRADS, b->nt);
    return CAL_ADAMW_BYTES * (double)b->n / (now_s() - t0);
}

// The gradient add a GPU's COPY_OUT runs after its copy: bf16 gradients (the
// bf16 copy's array stands in) added into the fp32 accumulators.
static double round_grads_add(Bench *b) {
    double t0 = now_s();
    grads_accumulate(b->g, b->wb, b->n, 1, b->nt);
    return CAL_GRADS_ADD_BYTES * (double)b->n / (now_s() - t0);
}

// ---- 3. sgemm: FLOP/s of the MLP matmul's forward and backward

static double round_gemm(Bench *b) {
    const int T = CAL_GEMM_T, C = CAL_GEMM_C, F = CAL_GEMM_F;
    mt_blas_threads_for((long long)T * C * F); // as the cpu backend calls a GEMM of this size
    double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, F, C, 1.0f, b->x, C, b->wt, F, 0.0f, b->y, F);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, C, F, 1.0f, b->y, F, b->wt, F, 0.0f, b->dx, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, F, T, 1.0f, b->x, C, b->y, F, 0.0f, b->dw, F);
    return 3.0 * 2.0 * T * C * (double)F / (now_s() - t0);
}

// ---- 4. element-wise: FLOP/s of x = x * a + b on one thread, in cache

// x = x * 0.999 + 0.001 on each element of x (n floats, a multiple of
// CAL_FMA_CHUNK), CAL_FMA_PASSES times a chunk. The constant trip count lets
// the compiler vectorise the inner loop as it does the executor's kernels
// (the same -O2, no -march); the values tend to 1 and stay normal.
static void fma_sweep(float *x, int64_t n) {
    for (int64_t c = 0; c < n; c += CAL_FMA_CHUNK) {
        float *y = x + c;
        for (int p = 0; p < CAL_FMA_PASSES; p++)
            for (int i = 0; i < CAL_FMA_CHUNK; i++) y[i] = y[i] * 0.999f + 0.001f;
    }
}

static double round_vector(Bench *b) {
    double t0 = now_s();
    fma_sweep(b->fma, CAL_FMA_N);
    double dt = now_s() - t0;
    volatile float sink = b->fma[CAL_FMA_N / 2]; // the result observable, so that no sweep can be dropped
    (void)sink;
    return 2.0 * CAL_FMA_N * (double)CAL_FMA_PASSES / dt;
}

// ---- 4b. bf16 attention: FLOP/s of the plain kernel, one thread

enum { CAL_ATTN_T = 256, CAL_ATTN_H = 4, CAL_ATTN_D = 64 };

static double round_attention(Bench *b) {
    (void)b;
    const int64_t T = CAL_ATTN_T, C = CAL_ATTN_H * CAL_ATTN_D;
    Node qkv = {.op = OP_INPUT,
                .dtype = DT_F32,
                .shape = {.rank = 3, .dims = {1, T, C}}}; // the kernel reads D and Dv off q and v
    Node *ins[3] = {&qkv, &qkv, &qkv};
    Node n = {.op = OP_ATTENTION,
              .dtype = DT_F32,
              .nin = 3,
              .in = ins,
              .heads = CAL_ATTN_H,
              .kv_heads = CAL_ATTN_H,
              .causal = 1,
              .shape = {.rank = 3, .dims = {1, T, C}}};
    float *qkvy = malloc((size_t)(4 * T * C) * sizeof(float)); // q, k, v, y: (T, C) each
    if (!qkvy) return 0;                                       // not measured
    for (int64_t i = 0; i < 3 * T * C; i++) qkvy[i] = (float)(i % 19) * 0.0625f - 0.5f;
    void *in[3] = {qkvy, qkvy + T * C, qkvy + 2 * T * C};
    double t0 = now_s();
    kernel_run_f32(&n, qkvy + 3 * T * C, in);
    double dt = now_s() - t0;
    free(qkvy);
    return dt;
}

// The plain kernel's FLOP/s as compiler/schedule/cost.c prices it from the best
// round's seconds: cost.c's count (causal pairs x 4 x H x D) over the time
// left when its exps (one a pair, libm's scalar double exp) are taken at
// exp64_s each; at least the rate with them in.
static double attention_rate(double seconds, double exp64_s) {
    double pairs = 0.5 * (double)CAL_ATTN_T * (double)CAL_ATTN_T, flops = 4.0 * pairs * CAL_ATTN_H * CAL_ATTN_D;
    double arith = seconds - pairs * CAL_ATTN_H * exp64_s;
    return flops / (arith > 0.5 * seconds ? arith : seconds);
}

// ---- 4c. one-thread sgemm: FLOP/s of a tiny model's MLP matmul and its backward

static double round_gemm_one_thread(Bench *b) {
    const int T = CAL_GEMM1_T, C = CAL_GEMM1_C, F = CAL_GEMM1_F; // in the large sgemm's buffers, packed
    mt_blas_threads_for((long long)T * C * F);                   // one thread, as the cpu backend runs it
    double t0 = now_s();
    for (int r = 0; r < CAL_GEMM1_REPS; r++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, F, C, 1.0f, b->x, C, b->wt, F, 0.0f, b->y, F);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, C, F, 1.0f, b->y, F, b->wt, F, 0.0f, b->dx, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, F, T, 1.0f, b->x, C, b->y, F, 0.0f, b->dw, F);
    }
    return CAL_GEMM1_REPS * 3.0 * 2.0 * T * C * (double)F / (now_s() - t0);
}

// ---- 4d. bf16 conversions: seconds an element, widened or rounded

static double round_convert(Bench *b) {
    double t0 = now_s();
    for (int r = 0; r < CAL_CONVERT_REPS; r++) {
        jit_narrow(b->cb, b->cf, CAL_CONVERT_N);
        jit_widen(b->cf, b->cb, CAL_CONVERT_N); // (the values settle on bf16 ones: no NaN, no overflow)
    }
    return (now_s() - t0) / (2.0 * CAL_CONVERT_REPS * CAL_CONVERT_N);
}

// ---- 5. per-call overheads: seconds a call

static double round_small_gemm(Bench *b) {
    const int n = CAL_SMALL_N, k = CAL_SMALL_K;
    mt_blas_threads_for((long long)n * n * k); // one thread, as the cpu backend runs it
    double t0 = now_s();
    for (int c = 0; c < CAL_SMALL_CALLS; c++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, k, 1.0f, b->sa, k, b->sb, k, 0.0f, b->sc, n);
    return (now_s() - t0) / CAL_SMALL_CALLS;
}

// What the executor's generated kernels look like to a caller: a pointer to
// a function over rows of its arguments.
typedef void (*CalKernel)(float *x, int64_t rows);
static void cal_kernel(float *x, int64_t rows) {
    for (int64_t i = 0; i < rows; i++) x[i] = x[i] * 0.999f + 0.001f;
}

static double round_kernel_call(Bench *b) {
    (void)b;
    volatile CalKernel fn = cal_kernel; // volatile: every call is made, through the pointer
    float x[4] = {1, 1, 1, 1};
    double t0 = now_s();
    for (int c = 0; c < CAL_KERNEL_CALLS; c++) fn(x, 4);
    return (now_s() - t0) / CAL_KERNEL_CALLS;
}

// Scalar double libm as a bf16 plan's generated kernels call it (the JIT
// offers glibc's vector maths to f32 plans only): rope's pow(theta, -2i/D),
// and sin and cos of angles t * freq up to a few thousand, and exp; the
// calls made through volatile pointers, so none is vectorised or folded.
static double round_math64(Bench *b) {
    const float *y = b->math;
    double (*volatile p2)(double, double) = pow, (*volatile s1)(double) = sin, (*volatile c1)(double) = cos,
                                  (*volatile e1)(double) = exp;
    double t0 = now_s(), s = 0;
    for (int i = 0; i < CAL_MATH_N; i++) {
        double x = (double)y[i], angle = x * 2000.0;
        s += p2(10000.0, -x) + s1(angle) + c1(angle) + e1(x);
    }
    double dt = now_s() - t0;
    volatile double sink = s;
    (void)sink;
    return dt / (4.0 * CAL_MATH_N);
}

static double round_math(Bench *b) {
    const float *y = b->math;
    double t0 = now_s();
    float s = 0;
    for (int p = 0; p < CAL_MATH_PASSES; p++)
        for (int i = 0; i < CAL_MATH_N; i++) s += expf(y[i]) + logf(y[i]) + sinf(y[i]) + cosf(y[i]);
    double dt = now_s() - t0;
    volatile float sink = s;
    (void)sink;
    return dt / (4.0 * CAL_MATH_PASSES * CAL_MATH_N);
}

// Measures 1 to 5: a round that warms up, then CAL_ROUNDS rounds of each in
// turn, the one-thread measurements last in a round (they would share a core
// with OpenBLAS's spinning worker right after the sgemm); sets every
// figure's median and the profile's keys from them.
static int measure_rounds(Measured *m, double available, int nt, char *err, size_t errcap) {
    Bench b;
    if (bench_alloc(&b, available, nt, err, errcap) != 0) return -1;
    struct {
        Figure *f;
        double (*round)(Bench *);
    } what[] = {{&m->gemm, round_gemm},
                {&m->copy, round_copy},
                {&m->adamw, round_adamw},
                {&m->grads_add, round_grads_add},
                {&m->vector, round_vector},
                {&m->small_gemm, round_small_gemm},
                {&m->kernel_call, round_kernel_call},
                {&m->math, round_math},
                {&m->math64, round_math64},
                {&m->attention, round_attention},
                {&m->gemm1, round_gemm_one_thread},
                {&m->convert, round_convert}};
    const int nwhat = (int)(sizeof what / sizeof what[0]);
    for (int r = -1; r < CAL_ROUNDS; r++) // round -1 warms up
        for (int i = 0; i < nwhat; i++) {
            double v = what[i].round(&b);
            if (r >= 0) what[i].f->v[r] = v;
        }
    for (int i = 0; i < nwhat; i++) figure_settle(what[i].f);
    m->copy_bytes = b.copy_bytes, m->threads = nt, m->adamw_params = b.n;
    mt_blas_threads_for((long long)CAL_GEMM_T * CAL_GEMM_C * CAL_GEMM_F);
    m->blas_threads = openblas_get_num_threads();
    bench_free(&b);

    Target *t = &m->t;
    t->hbm_bandwidth = t->host_memory_bandwidth = m->copy.median;
    t->h2d_bandwidth = t->d2h_bandwidth = m->copy.median / 2;
    t->host_adamw_bandwidth = m->adamw.median;
    t->host_grads_add_bandwidth = m->grads_add.median;
    t->matrix_flops_f32 = t->matrix_flops_bf16 = m->gemm.median;
    t->vector_flops = m->vector.hi; // the one-thread figures: the best round
    t->gemm_one_thread_flops = m->gemm1.hi;
    t->bf16_convert_s = m->convert.lo;
    double work = 2.0 * CAL_SMALL_N * CAL_SMALL_N * CAL_SMALL_K / t->gemm_one_thread_flops; // (on one thread too)
    t->gemm_call_s = m->small_gemm.lo - work > 1e-9 ? m->small_gemm.lo - work : 1e-9;       // figures are positive
    t->kernel_launch_s = m->kernel_call.lo > 1e-9 ? m->kernel_call.lo : 1e-9;
    t->transcendental_s = m->math.lo;
    t->transcendental_f64_s = m->math64.lo;
    t->attention_plain_flops = attention_rate(m->attention.lo, t->transcendental_f64_s);
    return 0;
}

// ---- 7. the NVMe tier

// The NVMe tier on m->tier_dir's filesystem: its free space, then
// CAL_TIER_MB through a tier of CAL_TIER_LAYERS records, written then read,
// best of CAL_TIER_REPS each.
static int measure_tier(Measured *m, char *err, size_t errcap) {
    struct statvfs vs;
    if (statvfs(m->tier_dir, &vs) != 0) return io_fail(err, errcap, m->tier_dir, "cannot stat it: %s", strerror(errno));
    m->t.tier_capacity = (double)vs.f_bavail * (double)vs.f_frsize;
    int64_t floats = ((int64_t)CAL_TIER_MB << 20) / CAL_TIER_LAYERS / 4; // one array a record
    Tier *t = tier_open(m->tier_dir, CAL_TIER_LAYERS, floats, 1, err, errcap);
    if (!t) return -1;
    double bytes = (double)tier_bytes(t), best_w = 0, best_r = 0;
    for (int k = 0; k < CAL_TIER_REPS; k++) {
        double t0 = now_s();
        for (int64_t l = 0; l < CAL_TIER_LAYERS; l++) {
            float *rec = tier_acquire_new(t, l, err, errcap);
            if (!rec) goto fail;
            memset(rec, 0, (size_t)tier_stride(t) * 4);
            if (tier_release(t, l, 1, err, errcap) != 0) goto fail;
        }
        if (tier_drain(t, err, errcap) != 0) goto fail;
        double w = now_s() - t0;
        t0 = now_s();
        for (int64_t l = 0; l < CAL_TIER_LAYERS; l++)
            if (!tier_acquire(t, l, err, errcap) || tier_release(t, l, 0, err, errcap) != 0) goto fail;
        if (tier_drain(t, err, errcap) != 0) goto fail;
        double r = now_s() - t0;
        if (bytes / w > best_w) best_w = bytes / w;
        if (bytes / r > best_r) best_r = bytes / r;
    }
    tier_close(t);
    m->t.tier_write_bandwidth = best_w, m->t.tier_read_bandwidth = best_r;
    return 0;
fail:
    tier_close(t);
    return -1;
}

// ---- 6. cores and memory

// The CPUs this process may run on (a container's or taskset's share),
// else the online CPUs.
static int count_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

// The value in bytes of a "Key: N kB" line of /proc/meminfo, or 0.
static double meminfo(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    double v = 0;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, k) && line[k] == ':') {
            v = strtod(line + k + 1, NULL) * 1024.0;
            break;
        }
    fclose(f);
    return v;
}

// A cgroup's memory limit in bytes (v2, else v1), or 0 when there is none.
static double cgroup_memory_limit(void) {
    static const char *const FILES[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++) {
        FILE *f = fopen(FILES[i], "r");
        if (!f) continue;
        char line[64];
        double v = 0;
        if (fgets(line, sizeof line, f) && line[0] >= '0' && line[0] <= '9') v = strtod(line, NULL); // "max": none
        fclose(f);
        if (v > 0) return v;
    }
    return 0;
}

static int is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == '+';
}

// The host's name as a profile word (anything but letters, digits, '_', '-',
// '.', '+' becomes '-'), or "local".
static void host_word(char *out, size_t cap) {
    char h[256] = "";
    if (gethostname(h, sizeof h - 1) != 0) h[0] = 0;
    size_t n = 0;
    for (const char *c = h; *c && n + 1 < cap; c++, n++) out[n] = is_word_char(*c) ? *c : '-';
    out[n] = 0;
    if (n == 0) snprintf(out, cap, "local");
}

// The profile's name: by convention its file's (schedules/README.md, and
// tests/test_target.c checks it of every profile in schedules/), so
// "local.target" is named local; the host's name when the file's
// is not a word.
static void profile_name(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t n = strlen(base), suffix = strlen(".target");
    if (n > suffix && !strcmp(base + n - suffix, ".target")) n -= suffix;
    int ok = n > 0 && n < cap;
    for (size_t i = 0; ok && i < n; i++) ok = is_word_char(base[i]);
    if (ok) snprintf(out, cap, "%.*s", (int)n, base);
    else host_word(out, cap);
}

// ---- the file

// 0 when path does not exist or starts with CALIBRATE_MARKER; else -1 with
// the reason in err.
static int may_overwrite(const char *path, char *err, size_t errcap) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        return io_fail(err, errcap, path, "cannot read it to see whether it may be overwritten: %s", strerror(errno));
    }
    char line[128];
    int ours = fgets(line, sizeof line, f) && !strncmp(line, CALIBRATE_MARKER, strlen(CALIBRATE_MARKER));
    fclose(f);
    if (!ours)
        return io_fail(err, errcap, path,
                       "exists and was not written by mtrun --calibrate; not overwriting it "
                       "(remove it or give another --out)");
    return 0;
}

// v in the profile's style: a mantissa under 1000 and a power of ten that is
// a multiple of 3 ("12.34e9"), 4 significant digits.
static const char *fmt_num(char *buf, size_t cap, double v) {
    int e = v > 0 ? (int)floor(log10(v) / 3.0) * 3 : 0;
    double mant = v / pow(10.0, e);
    if (mant >= 999.95) mant /= 1000.0, e += 3; // rounding to 4 digits reached 1000
    if (e == 0) snprintf(buf, cap, "%.4g", mant);
    else snprintf(buf, cap, "%.4ge%d", mant, e);
    return buf;
}

// Writes the profile to f. Returns ferror(f).
// The device: memory, memory bandwidth.
static void write_device(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    char a[32];
    double gb = 1e9;
    fprintf(f,
            "# measured by mtrun --calibrate on %s: host_memory below; the cpu backend's\n"
            "# arena lives in host memory.\n",
            d);
    fprintf(f, "device_memory = %.0f\n", t->device_memory);
    fprintf(f,
            "# measured by mtrun --calibrate on %s: memcpy of a %.1f MB buffer by %d threads,\n"
            "# each its own slice, bytes read + bytes written, the median of %d rounds\n"
            "# (%.1f to %.1f GB/s): %.1f GB/s. The cpu backend's \"device\" memory is host RAM.\n",
            d, (double)m->copy_bytes / 1e6, m->threads, CAL_ROUNDS, m->copy.lo / gb, m->copy.hi / gb,
            m->copy.median / gb);
    fprintf(f, "hbm_bandwidth = %s\n\n", fmt_num(a, sizeof a, t->hbm_bandwidth));
}

// The compute rates: GEMMs, element-wise, attention, small GEMMs, bf16 conversions.
static void write_rates(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    char a[32];
    double gb = 1e9;
    fprintf(f,
            "# measured by mtrun --calibrate on %s: cblas_sgemm (OpenBLAS, %d threads) of a\n"
            "# training step's MLP matmul, %d tokens by %d by %d, forward and the backward's\n"
            "# two, the median of %d rounds (%.1f to %.1f GFLOP/s): %.1f GFLOP/s.\n",
            d, m->blas_threads, CAL_GEMM_T, CAL_GEMM_C, CAL_GEMM_F, CAL_ROUNDS, m->gemm.lo / gb, m->gemm.hi / gb,
            t->matrix_flops_f32 / gb);
    fprintf(f, "matrix_flops_f32 = %s\n", fmt_num(a, sizeof a, t->matrix_flops_f32));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: the f32 sgemm rate above; the cpu backend has\n"
            "# no bf16 GEMM of its own, so bf16 is not measured.\n",
            d);
    fprintf(f, "matrix_flops_bf16 = %s\n", fmt_num(a, sizeof a, t->matrix_flops_bf16));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: x = x * a + b (2 FLOPs an element) on ONE\n"
            "# thread, as the cpu executor runs element-wise kernels, over a %.1f MB array in\n"
            "# %.1f kB chunks, %d passes a chunk so that arithmetic and not memory bounds it\n"
            "# (compiler/schedule/cost.c bounds a kernel by hbm_bandwidth separately); plain C at -O2,\n"
            "# as the kernels are built; the best of %d rounds: %.2f GFLOP/s.\n",
            d, CAL_FMA_N * 4 / 1e6, CAL_FMA_CHUNK * 4 / 1e3, CAL_FMA_PASSES, CAL_ROUNDS, t->vector_flops / gb);
    fprintf(f, "vector_flops = %s\n", fmt_num(a, sizeof a, t->vector_flops));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: the plain attention kernel (double sums) on\n"
            "# ONE thread, as the cpu backend runs a bf16 plan's attention, causal, %d tokens,\n"
            "# %d heads of %d, FLOPs counted as compiler/schedule/cost.c counts attention's, the time less\n"
            "# its exps (one a scored pair) at transcendental_f64_s, which cost.c adds apart; the\n"
            "# best of %d rounds: %.2f GFLOP/s.\n",
            d, CAL_ATTN_T, CAL_ATTN_H, CAL_ATTN_D, CAL_ROUNDS, t->attention_plain_flops / gb);
    fprintf(f, "attention_plain_flops = %s\n", fmt_num(a, sizeof a, t->attention_plain_flops));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: cblas_sgemm on ONE thread, as the cpu backend\n"
            "# runs every GEMM under %lld multiply-adds, of a tiny model's MLP matmul, %d tokens by\n"
            "# %d by %d, forward and the backward's two; the best of %d rounds: %.1f GFLOP/s.\n",
            d, MT_BLAS_THREADED_MACS, CAL_GEMM1_T, CAL_GEMM1_C, CAL_GEMM1_F, CAL_ROUNDS, t->gemm_one_thread_flops / gb);
    fprintf(f, "gemm_one_thread_flops = %s\n", fmt_num(a, sizeof a, t->gemm_one_thread_flops));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: runtime/backend/jit.c's loops that widen a bf16 plan's\n"
            "# GEMM, attention and node operands to f32 and round their results back, over %d\n"
            "# elements in cache on ONE thread, the mean an element; the best of %d rounds.\n",
            d, CAL_CONVERT_N, CAL_ROUNDS);
    fprintf(f, "bf16_convert_s = %s\n\n", fmt_num(a, sizeof a, t->bf16_convert_s));
}

// The link: the cpu backend's copies are memcpy within host RAM.
static void write_link(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    char a[32];
    double gb = 1e9;
    fprintf(f,
            "# measured by mtrun --calibrate on %s: half the memcpy rate above (%.1f GB/s):\n"
            "# the cpu backend's copies in and out are memcpy within host RAM, and copying\n"
            "# B bytes reads B and writes B.\n",
            d, m->copy.median / gb);
    fprintf(f, "h2d_bandwidth = %s\n", fmt_num(a, sizeof a, t->h2d_bandwidth));
    fprintf(f, "# measured by mtrun --calibrate on %s: as h2d_bandwidth.\n", d);
    fprintf(f, "d2h_bandwidth = %s\n", fmt_num(a, sizeof a, t->d2h_bandwidth));
    fprintf(f, "# set by mtrun --calibrate on %s: both directions share one memory bus.\n", d);
    fprintf(f, "link_duplex = false\n\n");
}

// The host: memory, its bandwidth, cores, AdamW and the gradients' accumulation.
static void write_host(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    char a[32], b[32];
    double gb = 1e9;
    if (m->cgroup_limit > 0)
        fprintf(f,
                "# measured by mtrun --calibrate on %s: this process's cgroup memory limit, below\n"
                "# MemTotal of /proc/meminfo (%s bytes).\n",
                d, fmt_num(b, sizeof b, m->meminfo_total));
    else fprintf(f, "# measured by mtrun --calibrate on %s: MemTotal of /proc/meminfo.\n", d);
    fprintf(f, "host_memory = %.0f\n", t->host_memory);
    fprintf(f,
            "# measured by mtrun --calibrate on %s: the memcpy rate above, bytes read + written\n"
            "# (STREAM counts the same way).\n",
            d);
    fprintf(f, "host_memory_bandwidth = %s\n", fmt_num(a, sizeof a, t->host_memory_bandwidth));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: the CPUs this process may run on\n"
            "# (sched_getaffinity).\n",
            d);
    fprintf(f, "host_cores = %.0f\n", t->host_cores);
    fprintf(f,
            "# measured by mtrun --calibrate on %s: adamw_update (runtime/store/adamw.c, with\n"
            "# the bf16 copy, zeroing the gradient), as runtime/store/store.c updates a segment,\n"
            "# on %.1f M parameters by %d threads, counted as compiler/schedule/cost.c counts\n"
            "# them (%.0f bytes a parameter), the median of %d rounds (%.1f to %.1f GB/s):\n"
            "# %.1f GB/s.\n",
            d, (double)m->adamw_params / 1e6, m->threads, CAL_ADAMW_BYTES, CAL_ROUNDS, m->adamw.lo / gb,
            m->adamw.hi / gb, t->host_adamw_bandwidth / gb);
    fprintf(f, "host_adamw_bandwidth = %s\n\n", fmt_num(a, sizeof a, t->host_adamw_bandwidth));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: grads_accumulate (runtime/store/adamw.c) of\n"
            "# bf16 gradients into fp32 accumulators, what a GPU's COPY_OUT does on the\n"
            "# host after its copy (compiler/schedule/cost.c prices it on GPU targets only), by %d\n"
            "# threads, %.0f bytes a parameter, the median of %d rounds (%.1f to %.1f GB/s):\n"
            "# %.1f GB/s.\n",
            d, m->threads, CAL_GRADS_ADD_BYTES, CAL_ROUNDS, m->grads_add.lo / gb, m->grads_add.hi / gb,
            m->grads_add.median / gb);
    fprintf(f, "host_grads_add_bandwidth = %s\n\n", fmt_num(a, sizeof a, t->host_grads_add_bandwidth));
}

// What each call costs beyond its work: launches, small GEMMs, maths.
static void write_costs(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    char a[32], b[32];
    fprintf(f,
            "# measured by mtrun --calibrate on %s: a call of a generated kernel (through a\n"
            "# function pointer, on 4 elements), the best of %d rounds of %d calls.\n",
            d, CAL_ROUNDS, CAL_KERNEL_CALLS);
    fprintf(f, "kernel_launch_s = %s\n", fmt_num(a, sizeof a, t->kernel_launch_s));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: a %dx%dx%d sgemm on one thread took %s s\n"
            "# a call (the best of %d rounds of %d calls), less its FLOPs at gemm_one_thread_flops:\n"
            "# what the cpu backend's many small BLAS calls (attention's per head, above all)\n"
            "# cost beyond their work.\n",
            d, CAL_SMALL_N, CAL_SMALL_N, CAL_SMALL_K, fmt_num(b, sizeof b, m->small_gemm.lo), CAL_ROUNDS,
            CAL_SMALL_CALLS);
    fprintf(f, "gemm_call_s = %s\n", fmt_num(a, sizeof a, t->gemm_call_s));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: expf, logf, sinf and cosf over %d floats in\n"
            "# cache (%d passes) on one thread, the mean a call, the best of %d rounds: what a\n"
            "# generated kernel's exp, log, sqrt, sin, cos or pow costs the cpu backend.\n",
            d, CAL_MATH_N, CAL_MATH_PASSES, CAL_ROUNDS);
    fprintf(f, "transcendental_s = %s\n", fmt_num(a, sizeof a, t->transcendental_s));
    fprintf(f,
            "# measured by mtrun --calibrate on %s: libm's scalar double pow, sin and cos (of\n"
            "# angles up to 3000) and exp over %d values on one thread, the mean a call, the best\n"
            "# of %d rounds: what a bf16 plan's f64 maths (rope's angles) costs the cpu backend,\n"
            "# which keeps libm's scalar calls there.\n",
            d, CAL_MATH_N, CAL_ROUNDS);
    fprintf(f, "transcendental_f64_s = %s\n", fmt_num(a, sizeof a, t->transcendental_f64_s));
    fprintf(f,
            "# set by mtrun --calibrate on %s: 1, as matrix_flops_f32 is already the rate a\n"
            "# training step's sgemm reaches here, not a datasheet peak.\n",
            d);
    fprintf(f, "gemm_efficiency = 1\n");
}

// The NVMe tier, where one was measured.
static void write_tier(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    char a[32];
    if (m->tier_dir) {
        fprintf(f, "\n# measured by mtrun --calibrate on %s: the free space of %s's filesystem.\n", d, m->tier_dir);
        fprintf(f, "tier_capacity = %.0f\n", t->tier_capacity);
        fprintf(f,
                "# measured by mtrun --calibrate on %s: %.1f MB read through the NVMe tier in %s\n"
                "# (io_uring, O_DIRECT, %d records), best of %d.\n",
                d, (double)((int64_t)CAL_TIER_MB << 20) / 1e6, m->tier_dir, CAL_TIER_LAYERS, CAL_TIER_REPS);
        fprintf(f, "tier_read_bandwidth = %s\n", fmt_num(a, sizeof a, t->tier_read_bandwidth));
        fprintf(f, "# measured by mtrun --calibrate on %s: the same bytes written through it first.\n", d);
        fprintf(f, "tier_write_bandwidth = %s\n", fmt_num(a, sizeof a, t->tier_write_bandwidth));
    }
}

static int write_profile(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    fprintf(f, "%s on %s: the cpu backend on host %s.\n", CALIBRATE_MARKER, d, m->host);
    fprintf(f, "# Run it again to refresh the figures; it overwrites a file that starts with\n"
               "# the line above and refuses any other. Units: bytes, bytes/s, FLOP/s, seconds.\n"
               "# Format: schedules/README.md.\n\n");
    fprintf(f,
            "# set by mtrun --calibrate on %s: the file's name, by convention, or the host's\n"
            "# when the file's is not a word (the host is %s).\n",
            d, m->host);
    fprintf(f, "name = %s\n", t->name);
    fprintf(f, "# set by mtrun --calibrate on %s: the cpu backend (the cuda backend is not written yet).\n", d);
    fprintf(f, "arch = cpu\n\n");
    write_device(f, m);
    write_rates(f, m);
    write_link(f, m);
    write_host(f, m);
    write_costs(f, m);
    write_tier(f, m);
    return ferror(f);
}

// Writes the profile to a temporary file beside path, fsyncs it, checks that
// target_load reads it back, and renames it over path. On failure path is
// untouched and no temporary file is left.
static int write_atomically(const char *path, const Measured *m, char *err, size_t errcap) {
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) return cal_fail(err, errcap, "out of memory");
    snprintf(tmp, n, "%s.%ld.tmp", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        io_fail(err, errcap, tmp, "cannot create it: %s", strerror(errno));
        free(tmp);
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        io_fail(err, errcap, tmp, "cannot write it: %s", strerror(errno));
        close(fd);
        goto fail;
    }
    int e = 0;
    errno = 0;
    if (write_profile(f, m) || fflush(f) != 0) e = errno ? errno : EIO;
    if (!e && fsync(fd) != 0) e = errno;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (e) {
        io_fail(err, errcap, tmp, "cannot write it: %s", strerror(e));
        goto fail;
    }
    Target check;
    char why[512];
    if (target_load(tmp, &check, why, sizeof why) != 0) {
        snprintf(err, errcap, "internal error: the profile written does not load: %s", why);
        goto fail;
    }
    if (may_overwrite(path, err, errcap) != 0) goto fail; // again: it may have appeared while we measured
    if (rename(tmp, path) != 0) {
        io_fail(err, errcap, path, "cannot rename %s to it: %s", tmp, strerror(errno));
        goto fail;
    }
    io_sync_parent_dir(path);
    free(tmp);
    return 0;
fail:
    unlink(tmp);
    free(tmp);
    return -1;
}

int calibrate_run(const char *path, int threads, const char *tier_dir, FILE *out, char *err, size_t errcap) {
    if (may_overwrite(path, err, errcap) != 0) return -1; // before spending the seconds
    double t0 = now_s();
    Measured m = {0};
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || !strftime(m.date, sizeof m.date, "%Y-%m-%d", &tm))
        snprintf(m.date, sizeof m.date, "unknown");
    host_word(m.host, sizeof m.host);
    profile_name(path, m.t.name, sizeof m.t.name);
    snprintf(m.t.arch, sizeof m.t.arch, "cpu");

    m.meminfo_total = meminfo("MemTotal");
    if (!(m.meminfo_total > 0)) return cal_fail(err, errcap, "/proc/meminfo: no MemTotal line");
    double limit = cgroup_memory_limit();
    m.cgroup_limit = limit > 0 && limit < m.meminfo_total ? limit : 0;
    m.t.host_memory = m.cgroup_limit > 0 ? m.cgroup_limit : m.meminfo_total;
    m.t.device_memory = m.t.host_memory;
    m.t.host_cores = count_cores();

    double available = meminfo("MemAvailable");
    if (!(available > 0) || available > m.t.host_memory) available = m.t.host_memory;
    if (measure_rounds(&m, available, threads > 0 ? threads : 1, err, errcap) != 0) return -1;
    m.tier_dir = tier_dir;
    if (tier_dir && measure_tier(&m, err, errcap) != 0) return -1;
    m.t.link_duplex = 0;
    m.t.gemm_efficiency = 1.0;

    if (write_atomically(path, &m, err, errcap) != 0) return -1;
    if (out) {
        fprintf(out, "calibrated %s (cpu backend): %.0f cores, %.1f GB of RAM\n", m.host, m.t.host_cores,
                m.t.host_memory / 1e9);
        fprintf(out, "%d rounds: medians (lowest to highest), the one-thread figures' best:\n", CAL_ROUNDS);
        fprintf(out, "  memcpy  %8.1f GB/s      (%.1f to %.1f) read + written, %.1f MB, %d threads\n",
                m.copy.median / 1e9, m.copy.lo / 1e9, m.copy.hi / 1e9, (double)m.copy_bytes / 1e6, m.threads);
        fprintf(out, "  AdamW   %8.1f GB/s      (%.1f to %.1f) %.0f bytes a parameter, %.1f M parameters, %d threads\n",
                m.adamw.median / 1e9, m.adamw.lo / 1e9, m.adamw.hi / 1e9, CAL_ADAMW_BYTES, (double)m.adamw_params / 1e6,
                m.threads);
        fprintf(out,
                "  grads+  %8.1f GB/s      (%.1f to %.1f) bf16 gradients added, %.0f bytes a parameter, %d threads\n",
                m.grads_add.median / 1e9, m.grads_add.lo / 1e9, m.grads_add.hi / 1e9, CAL_GRADS_ADD_BYTES, m.threads);
        fprintf(out, "  sgemm   %8.1f GFLOP/s   (%.1f to %.1f) %dx%dx%d and its backward, OpenBLAS %d threads\n",
                m.gemm.median / 1e9, m.gemm.lo / 1e9, m.gemm.hi / 1e9, CAL_GEMM_T, CAL_GEMM_C, CAL_GEMM_F,
                m.blas_threads);
        fprintf(out, "  x*a+b   %8.2f GFLOP/s   (median %.2f) one thread, in cache\n", m.t.vector_flops / 1e9,
                m.vector.median / 1e9);
        fprintf(out, "  calls   %8.2f us        a %dx%dx%d sgemm beyond its FLOPs; %.3f us a kernel call\n",
                m.t.gemm_call_s * 1e6, CAL_SMALL_N, CAL_SMALL_N, CAL_SMALL_K, m.t.kernel_launch_s * 1e6);
        fprintf(out, "  expf..  %8.2f ns        (median %.2f) one thread, a call\n", m.t.transcendental_s * 1e9,
                m.math.median * 1e9);
        fprintf(out, "  pow..   %8.2f ns        (median %.2f) one thread, a scalar double call\n",
                m.t.transcendental_f64_s * 1e9, m.math64.median * 1e9);
        fprintf(out,
                "  attn    %8.2f GFLOP/s   (median %.2f) bf16's plain attention kernel, one thread, its exps apart\n",
                m.t.attention_plain_flops / 1e9, attention_rate(m.attention.median, m.t.transcendental_f64_s) / 1e9);
        fprintf(out, "  sgemm1  %8.1f GFLOP/s   (median %.1f) %dx%dx%d and its backward, one thread\n",
                m.t.gemm_one_thread_flops / 1e9, m.gemm1.median / 1e9, CAL_GEMM1_T, CAL_GEMM1_C, CAL_GEMM1_F);
        fprintf(out, "  bf16<>  %8.3f ns        (median %.3f) an element widened or rounded, one thread\n",
                m.t.bf16_convert_s * 1e9, m.convert.median * 1e9);
        if (tier_dir)
            fprintf(out, "  tier    %8.2f GB/s      read, %.2f GB/s written, %.1f MB in %s; %.1f GB free\n",
                    m.t.tier_read_bandwidth / 1e9, m.t.tier_write_bandwidth / 1e9,
                    (double)((int64_t)CAL_TIER_MB << 20) / 1e6, tier_dir, m.t.tier_capacity / 1e9);
        fprintf(out, "wrote %s in %.1f s\n", path, now_s() - t0);
    }
    return 0;
}
