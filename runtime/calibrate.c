// calibrate.c: mtrun --calibrate (calibrate.h). Measures, on the cpu backend,
// in a few seconds:
//
//   1. memory bandwidth: T threads each memcpy their slice of a buffer well
//      beyond the last-level cache, counted as bytes read + bytes written,
//      best of CAL_REPS. The cpu backend's arena is host memory and its copies
//      are memcpy, so this one rate gives hbm_bandwidth,
//      host_memory_bandwidth and (halved: a copy of B bytes moves 2B)
//      h2d_bandwidth and d2h_bandwidth.
//   1b. the host AdamW: what runtime/store.c's store_update does a segment,
//      adamw_update (runtime/adamw.c, with the bf16 copy) on T threads then a
//      memset of the gradient, over arrays of half the copy buffer each;
//      34 bytes a parameter as compiler/cost.c counts them, best of CAL_REPS
//      -> host_adamw_bandwidth.
//   2. sgemm: cblas_sgemm of a square 1024 or 2048 matrix (the larger when
//      the smaller runs fast), best of CAL_REPS -> matrix_flops_f32 (and
//      bf16: the cpu backend has none of its own).
//   3. element-wise: x = x * a + b on one thread over a large array, swept
//      in cache-sized chunks, several passes a chunk, so that arithmetic and
//      not memory bounds it (compiler/cost.c already takes the larger of the
//      FLOP time and the byte time) -> vector_flops.
//   4. per-call overheads: a small sgemm (64 x 64 x 16, an attention head's
//      scores in the tiny examples) called many times, less its FLOPs at the
//      rate of 2 -> gemm_call_s; a generated kernel's call (a function
//      pointer on a few elements, as the executor calls one) ->
//      kernel_launch_s; expf, logf, sinf and cosf over an array in cache, the
//      mean of the four a call -> transcendental_s. Best of CAL_REPS.
//   5. cores (the CPUs this process may run on), RAM (MemTotal, or a smaller
//      cgroup limit).
//   6. with --tier-dir DIR, the NVMe tier: DIR's free space ->
//      tier_capacity; CAL_TIER_MB of CAL_TIER_LAYERS records written, then
//      read, through the tier itself (io_uring, O_DIRECT), best of
//      CAL_TIER_REPS -> tier_write_bandwidth, tier_read_bandwidth.
//
// Then writes the profile through a temporary file, checks it with
// target_load, and renames it into place.
#include "calibrate.h"
#include "../common/io.h"
#include "../common/target.h"
#include "adamw.h"
#include "tier.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
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
    CAL_REPS = 5,                // timed runs of each measurement; the best counts
    CAL_ALIGN = 2 << 20,         // copy buffers start on a 2 MiB boundary, for transparent huge pages
    CAL_FMA_CHUNK = 4096,        // floats of one cache-resident chunk (16 KiB)
    CAL_FMA_PASSES = 32,         // passes over each chunk before the next
    CAL_FMA_N = 4 << 20,         // floats of the element-wise array (16 MiB), a multiple of CAL_FMA_CHUNK
    CAL_TIER_MB = 512,           // the tier measured: 2^20-byte units written and read (536.9 MB)
    CAL_TIER_LAYERS = 16,        // in records of CAL_TIER_MB / CAL_TIER_LAYERS units
    CAL_TIER_REPS = 3,
};

// What was measured, and how, for the profile's comments and the summary.
typedef struct Measured {
    Target t;
    double copy_rate;      // bytes/s, read + written
    size_t copy_bytes;     // of each of the two copy buffers
    int copy_threads;
    int64_t adamw_params;  // the AdamW measured: parameters, on copy_threads threads
    int gemm_n;            // the sgemm's M = N = K
    int blas_threads;      // OpenBLAS's
    double small_gemm_s;   // seconds a call of the small sgemm took
    double meminfo_total;  // bytes, MemTotal
    double cgroup_limit;   // bytes, 0 when none or not below MemTotal
    const char *tier_dir;  // where the tier was measured (NULL: not)
    char date[16];         // YYYY-MM-DD, UTC
    char host[64];         // the host's name, as a word
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

// ---- 1. memory bandwidth

typedef struct CopyJob {
    int fill;                   // 1: first touch (memset) of the slice; 0: copy it
    size_t lo, hi;              // bytes
    unsigned char *src, *dst;   // (copy_bytes) each
} CopyJob;

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

// Runs jobs[0..nt) on nt threads (job 0 on the caller) and waits for them.
// Returns 0, or -1 when a thread cannot start (the jobs that did start are
// waited for, and the rest run on the caller).
static int copy_run(CopyJob *jobs, pthread_t *tids, int nt) {
    int started = 1, rc = 0;
    for (; started < nt; started++)
        if (pthread_create(&tids[started], NULL, copy_thread, &jobs[started])) {
            rc = -1;
            break;
        }
    copy_thread(&jobs[0]);
    for (int i = started; i < nt; i++) copy_thread(&jobs[i]);
    for (int i = 1; i < started; i++) pthread_join(tids[i], NULL);
    return rc;
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
// 256 MiB, so that neither buffer stays cached; at most an eighth of the
// available memory for the two.
static size_t copy_buffer_bytes(double available) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    double llc = l3 > 0 ? (double)l3 : l2 > 0 ? (double)l2 : 0;
    double n = 4 * llc > 256.0 * (1 << 20) ? 4 * llc : 256.0 * (1 << 20);
    if (available > 0 && n > available / 16) n = available / 16;
    if (n < 32.0 * (1 << 20)) n = 32.0 * (1 << 20);
    return (size_t)(n / CAL_ALIGN) * CAL_ALIGN;
}

static int measure_copy(Measured *m, double available, int nt, char *err, size_t errcap) {
    size_t n = copy_buffer_bytes(available);
    unsigned char *src = big_alloc(n), *dst = big_alloc(n); // (n) each
    CopyJob *jobs = calloc((size_t)nt, sizeof *jobs);      // (nt)
    pthread_t *tids = calloc((size_t)nt, sizeof *tids);    // (nt)
    int rc = -1;
    if (!src || !dst || !jobs || !tids) {
        snprintf(err, errcap, "cannot allocate two %.1f MB buffers to measure memory bandwidth", (double)n / 1e6);
        goto done;
    }
    // Slices of whole 4 KiB pages, each first touched by the thread that copies it.
    size_t pages = n / 4096, per = (pages + (size_t)nt - 1) / (size_t)nt;
    for (int i = 0; i < nt; i++) {
        size_t lo = (size_t)i * per, hi = (size_t)(i + 1) * per;
        jobs[i] = (CopyJob){1, (lo < pages ? lo : pages) * 4096, (hi < pages ? hi : pages) * 4096, src, dst};
    }
    if (copy_run(jobs, tids, nt)) {
        cal_fail(err, errcap, "cannot start threads to measure memory bandwidth");
        goto done;
    }
    for (int i = 0; i < nt; i++) jobs[i].fill = 0;
    double best = 1e30;
    for (int r = 0; r <= CAL_REPS; r++) { // run 0 warms up
        double t0 = now_s();
        if (copy_run(jobs, tids, nt)) {
            cal_fail(err, errcap, "cannot start threads to measure memory bandwidth");
            goto done;
        }
        double dt = now_s() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    m->copy_rate = 2.0 * (double)n / best;
    m->copy_bytes = n;
    m->copy_threads = nt;
    rc = 0;
done:
    free(src), free(dst), free(jobs), free(tids);
    return rc;
}

// ---- 1b. the host AdamW

// Bytes a parameter of the AdamW measured, as compiler/cost.c's update_bytes
// counts them under bf16: reads w, m, v, g (16), writes w, m, v (12), the
// bf16 copy (2) and zeroes g (4).
#define CAL_ADAMW_BYTES 34.0

// One update of n parameters as store_update does a segment: w, m, v, g (n)
// fp32, wb (n) bf16. Returns its seconds.
static double adamw_seconds(float *w, float *mo, float *v, float *g, uint16_t *wb, int64_t n, int64_t t, int nt) {
    AdamWStep step = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .t = t,
                      .grad_scale = 1.0f};
    double t0 = now_s();
    adamw_update(w, mo, v, g, wb, n, &step, 1, nt);
    memset(g, 0, (size_t)n * sizeof *g);
    return now_s() - t0;
}

// Over n = copy_bytes / 8 parameters (each fp32 array half a copy buffer,
// well beyond the cache), allocated and zeroed as runtime/store.c does.
static int measure_adamw(Measured *m, int nt, char *err, size_t errcap) {
    int64_t n = (int64_t)(m->copy_bytes / 8);
    float *w = aligned_alloc(64, (size_t)n * 4), *mo = aligned_alloc(64, (size_t)n * 4); // (n) each
    float *v = aligned_alloc(64, (size_t)n * 4), *g = aligned_alloc(64, (size_t)n * 4);  // (n) each
    uint16_t *wb = aligned_alloc(64, (size_t)n * 2);                                      // (n) bf16
    int rc = -1;
    if (!w || !mo || !v || !g || !wb) {
        snprintf(err, errcap, "cannot allocate %.1f MB to measure AdamW", (double)n * 18 / 1e6);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) w[i] = 0.01f * (float)(i % 97), mo[i] = v[i] = 0;
    memset(wb, 0, (size_t)n * 2);
    double best = 1e30;
    for (int r = 0; r <= CAL_REPS; r++) { // run 0 warms up
        for (int64_t i = 0; i < n; i += 1024) g[i] = 1e-3f; // a gradient that is not all zero
        double dt = adamw_seconds(w, mo, v, g, wb, n, r + 1, nt);
        if (r > 0 && dt < best) best = dt;
    }
    m->t.host_adamw_bandwidth = CAL_ADAMW_BYTES * (double)n / best;
    m->adamw_params = n;
    rc = 0;
done:
    free(w), free(mo), free(v), free(g), free(wb);
    return rc;
}

// ---- 2. sgemm

// Seconds of one C = A @ B of n x n matrices, the best of reps.
static double sgemm_seconds(const float *A, const float *B, float *C, int n, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

static int measure_sgemm(Measured *m, char *err, size_t errcap) {
    const int big = 2048;
    float *A = malloc((size_t)big * big * 4), *B = malloc((size_t)big * big * 4); // (big, big) each
    float *C = malloc((size_t)big * big * 4);                                     // (big, big)
    if (!A || !B || !C) {
        free(A), free(B), free(C);
        return cal_fail(err, errcap, "cannot allocate the matrices to measure sgemm");
    }
    for (size_t i = 0; i < (size_t)big * big; i++) A[i] = B[i] = (float)(i % 17) * 0.0625f - 0.5f;
    // A warm-up at 1024 starts OpenBLAS's threads. When it takes under 25 ms
    // the larger size (8 times the work) takes under 0.2 s a run, and its
    // rate is nearer what large GEMMs reach; else 1024 keeps this quick.
    int n = 1024;
    double warm = sgemm_seconds(A, B, C, n, 1);
    if (warm < 0.025) n = big;
    double best = sgemm_seconds(A, B, C, n, CAL_REPS);
    free(A), free(B), free(C);
    m->t.matrix_flops_f32 = 2.0 * n * n * (double)n / best;
    m->gemm_n = n;
    m->blas_threads = openblas_get_num_threads();
    return 0;
}

// ---- 3. element-wise

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

static int measure_vector(Measured *m, char *err, size_t errcap) {
    float *x = malloc((size_t)CAL_FMA_N * 4); // (CAL_FMA_N)
    if (!x) return cal_fail(err, errcap, "cannot allocate the array to measure element-wise work");
    for (int64_t i = 0; i < CAL_FMA_N; i++) x[i] = (float)(i % 101) * 0.01f;
    double best = 1e30;
    for (int r = 0; r <= CAL_REPS; r++) { // run 0 warms up
        double t0 = now_s();
        fma_sweep(x, CAL_FMA_N);
        double dt = now_s() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    // Keep the result observable, so that no sweep can be dropped.
    volatile float sink = 0;
    for (int64_t i = 0; i < CAL_FMA_N; i += 4099) sink += x[i];
    (void)sink;
    free(x);
    m->t.vector_flops = 2.0 * CAL_FMA_N * (double)CAL_FMA_PASSES / best;
    return 0;
}

// ---- 4. per-call overheads

enum { CAL_SMALL_N = 64, CAL_SMALL_K = 16, CAL_SMALL_CALLS = 2000, CAL_KERNEL_CALLS = 1000000, CAL_MATH_N = 1 << 18 };

// What the executor's generated kernels look like to a caller: a pointer to
// a function over rows of its arguments.
typedef void (*CalKernel)(float *x, int64_t rows);
static void cal_kernel(float *x, int64_t rows) {
    for (int64_t i = 0; i < rows; i++) x[i] = x[i] * 0.999f + 0.001f;
}

static int measure_overheads(Measured *m, char *err, size_t errcap) {
    const int n = CAL_SMALL_N, k = CAL_SMALL_K;
    float *A = malloc((size_t)n * k * 4), *B = malloc((size_t)n * k * 4); // (n, k) each
    float *C = malloc((size_t)n * n * 4);                                 // (n, n) = A B^T
    if (!A || !B || !C) {
        free(A), free(B), free(C);
        return cal_fail(err, errcap, "cannot allocate the matrices to measure a small sgemm");
    }
    for (int i = 0; i < n * k; i++) A[i] = B[i] = (float)(i % 13) * 0.0625f - 0.375f;
    double best = 1e30;
    for (int r = 0; r <= CAL_REPS; r++) { // run 0 warms up
        double t0 = now_s();
        for (int c = 0; c < CAL_SMALL_CALLS; c++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, k, 1.0f, A, k, B, k, 0.0f, C, n);
        double dt = (now_s() - t0) / CAL_SMALL_CALLS;
        if (r > 0 && dt < best) best = dt;
    }
    free(A), free(B), free(C);
    double work = 2.0 * n * n * k / m->t.matrix_flops_f32;
    m->small_gemm_s = best;
    m->t.gemm_call_s = best - work > 1e-9 ? best - work : 1e-9; // a profile's figures are positive

    volatile CalKernel fn = cal_kernel; // volatile: every call is made, through the pointer
    float x[4] = {1, 1, 1, 1};
    best = 1e30;
    for (int r = 0; r <= CAL_REPS; r++) {
        double t0 = now_s();
        for (int c = 0; c < CAL_KERNEL_CALLS; c++) fn(x, 4);
        double dt = (now_s() - t0) / CAL_KERNEL_CALLS;
        if (r > 0 && dt < best) best = dt;
    }
    m->t.kernel_launch_s = best > 1e-9 ? best : 1e-9;

    float *y = malloc((size_t)CAL_MATH_N * 4); // (CAL_MATH_N)
    if (!y) return cal_fail(err, errcap, "cannot allocate the array to measure exp, log, sin and cos");
    for (int i = 0; i < CAL_MATH_N; i++) y[i] = 0.5f + (float)(i % 97) * 0.01f;
    best = 1e30;
    volatile float sink = 0;
    for (int r = 0; r <= CAL_REPS; r++) {
        double t0 = now_s();
        float s = 0;
        for (int i = 0; i < CAL_MATH_N; i++) s += expf(y[i]) + logf(y[i]) + sinf(y[i]) + cosf(y[i]);
        sink += s;
        double dt = (now_s() - t0) / (4.0 * CAL_MATH_N);
        if (r > 0 && dt < best) best = dt;
    }
    (void)sink;
    free(y);
    m->t.transcendental_s = best;
    return 0;
}

// ---- 5. cores and memory

// The CPUs this process may run on (a container's or taskset's share),
// else the online CPUs.
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
    if (ok)
        snprintf(out, cap, "%.*s", (int)n, base);
    else
        host_word(out, cap);
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
        return io_fail(err, errcap, path, "exists and was not written by mtrun --calibrate; not overwriting it "
                                          "(remove it or give another --out)");
    return 0;
}

// v in the profile's style: a mantissa under 1000 and a power of ten that is
// a multiple of 3 ("12.34e9"), 4 significant digits.
static const char *fmt_num(char *buf, size_t cap, double v) {
    int e = v > 0 ? (int)floor(log10(v) / 3.0) * 3 : 0;
    double mant = v / pow(10.0, e);
    if (mant >= 999.95) mant /= 1000.0, e += 3; // rounding to 4 digits reached 1000
    if (e == 0)
        snprintf(buf, cap, "%.4g", mant);
    else
        snprintf(buf, cap, "%.4ge%d", mant, e);
    return buf;
}

// Writes the profile to f. Returns ferror(f).
static int write_profile(FILE *f, const Measured *m) {
    const Target *t = &m->t;
    const char *d = m->date;
    char a[32], b[32];
    double gb = 1e9;
    fprintf(f, "%s on %s: the cpu backend on host %s.\n", CALIBRATE_MARKER, d, m->host);
    fprintf(f, "# Run it again to refresh the figures; it overwrites a file that starts with\n"
               "# the line above and refuses any other. Units: bytes, bytes/s, FLOP/s, seconds.\n"
               "# Format: schedules/README.md.\n\n");
    fprintf(f, "# set by mtrun --calibrate on %s: the file's name, by convention, or the host's\n"
               "# when the file's is not a word (the host is %s).\n", d, m->host);
    fprintf(f, "name = %s\n", t->name);
    fprintf(f, "# set by mtrun --calibrate on %s: the cpu backend (the cuda backend is not written yet).\n", d);
    fprintf(f, "arch = cpu\n\n");

    fprintf(f, "# measured by mtrun --calibrate on %s: host_memory below; the cpu backend's\n"
               "# arena lives in host memory.\n", d);
    fprintf(f, "device_memory = %.0f\n", t->device_memory);
    fprintf(f, "# measured by mtrun --calibrate on %s: memcpy of a %.1f MB buffer by %d threads,\n"
               "# each its own slice, bytes read + bytes written, best of %d: %.1f GB/s. The cpu\n"
               "# backend's \"device\" memory is host RAM.\n",
            d, (double)m->copy_bytes / 1e6, m->copy_threads, CAL_REPS, m->copy_rate / gb);
    fprintf(f, "hbm_bandwidth = %s\n\n", fmt_num(a, sizeof a, t->hbm_bandwidth));

    fprintf(f, "# measured by mtrun --calibrate on %s: cblas_sgemm %dx%dx%d (OpenBLAS, %d threads),\n"
               "# best of %d: %.1f GFLOP/s.\n",
            d, m->gemm_n, m->gemm_n, m->gemm_n, m->blas_threads, CAL_REPS, t->matrix_flops_f32 / gb);
    fprintf(f, "matrix_flops_f32 = %s\n", fmt_num(a, sizeof a, t->matrix_flops_f32));
    fprintf(f, "# measured by mtrun --calibrate on %s: the f32 sgemm rate above; the cpu backend has\n"
               "# no bf16 GEMM of its own, so bf16 is not measured.\n", d);
    fprintf(f, "matrix_flops_bf16 = %s\n", fmt_num(a, sizeof a, t->matrix_flops_bf16));
    fprintf(f, "# measured by mtrun --calibrate on %s: x = x * a + b (2 FLOPs an element) on ONE\n"
               "# thread, as the cpu executor runs element-wise kernels, over a %.1f MB array in\n"
               "# %.1f kB chunks, %d passes a chunk so that arithmetic and not memory bounds it\n"
               "# (compiler/cost.c bounds a kernel by hbm_bandwidth separately); plain C at -O2,\n"
               "# as the kernels are built; best of %d: %.2f GFLOP/s.\n",
            d, CAL_FMA_N * 4 / 1e6, CAL_FMA_CHUNK * 4 / 1e3, CAL_FMA_PASSES, CAL_REPS, t->vector_flops / gb);
    fprintf(f, "vector_flops = %s\n\n", fmt_num(a, sizeof a, t->vector_flops));

    fprintf(f, "# measured by mtrun --calibrate on %s: half the memcpy rate above (%.1f GB/s):\n"
               "# the cpu backend's copies in and out are memcpy within host RAM, and copying\n"
               "# B bytes reads B and writes B.\n", d, m->copy_rate / gb);
    fprintf(f, "h2d_bandwidth = %s\n", fmt_num(a, sizeof a, t->h2d_bandwidth));
    fprintf(f, "# measured by mtrun --calibrate on %s: as h2d_bandwidth.\n", d);
    fprintf(f, "d2h_bandwidth = %s\n", fmt_num(a, sizeof a, t->d2h_bandwidth));
    fprintf(f, "# set by mtrun --calibrate on %s: both directions share one memory bus.\n", d);
    fprintf(f, "link_duplex = false\n\n");

    if (m->cgroup_limit > 0)
        fprintf(f, "# measured by mtrun --calibrate on %s: this process's cgroup memory limit, below\n"
                   "# MemTotal of /proc/meminfo (%s bytes).\n", d, fmt_num(b, sizeof b, m->meminfo_total));
    else
        fprintf(f, "# measured by mtrun --calibrate on %s: MemTotal of /proc/meminfo.\n", d);
    fprintf(f, "host_memory = %.0f\n", t->host_memory);
    fprintf(f, "# measured by mtrun --calibrate on %s: the memcpy rate above, bytes read + written\n"
               "# (STREAM counts the same way).\n", d);
    fprintf(f, "host_memory_bandwidth = %s\n", fmt_num(a, sizeof a, t->host_memory_bandwidth));
    fprintf(f, "# measured by mtrun --calibrate on %s: the CPUs this process may run on\n"
               "# (sched_getaffinity).\n", d);
    fprintf(f, "host_cores = %.0f\n", t->host_cores);
    fprintf(f, "# measured by mtrun --calibrate on %s: adamw_update (runtime/adamw.c, with\n"
               "# the bf16 copy) and a memset of the gradient, as runtime/store.c updates a\n"
               "# segment, on %.1f M parameters by %d threads, counted as compiler/cost.c counts\n"
               "# them (%.0f bytes a parameter), best of %d: %.1f GB/s.\n",
            d, (double)m->adamw_params / 1e6, m->copy_threads, CAL_ADAMW_BYTES, CAL_REPS,
            t->host_adamw_bandwidth / gb);
    fprintf(f, "host_adamw_bandwidth = %s\n\n", fmt_num(a, sizeof a, t->host_adamw_bandwidth));

    fprintf(f, "# measured by mtrun --calibrate on %s: a call of a generated kernel (through a\n"
               "# function pointer, on 4 elements), best of %d runs of %d calls.\n", d, CAL_REPS,
            CAL_KERNEL_CALLS);
    fprintf(f, "kernel_launch_s = %s\n", fmt_num(a, sizeof a, t->kernel_launch_s));
    fprintf(f, "# measured by mtrun --calibrate on %s: a %dx%dx%d sgemm took %s s a call (best of\n"
               "# %d runs of %d calls), less its FLOPs at matrix_flops_f32: what the cpu backend's\n"
               "# many small BLAS calls (attention's per head, above all) cost beyond their work.\n",
            d, CAL_SMALL_N, CAL_SMALL_N, CAL_SMALL_K, fmt_num(b, sizeof b, m->small_gemm_s), CAL_REPS,
            CAL_SMALL_CALLS);
    fprintf(f, "gemm_call_s = %s\n", fmt_num(a, sizeof a, t->gemm_call_s));
    fprintf(f, "# measured by mtrun --calibrate on %s: expf, logf, sinf and cosf over %d floats in\n"
               "# cache on one thread, the mean a call, best of %d: what a generated kernel's exp, log,\n"
               "# sqrt, sin, cos or pow costs the cpu backend.\n", d, CAL_MATH_N, CAL_REPS);
    fprintf(f, "transcendental_s = %s\n", fmt_num(a, sizeof a, t->transcendental_s));
    fprintf(f, "# set by mtrun --calibrate on %s: 1, as matrix_flops_f32 is already the rate a\n"
               "# large sgemm reaches here, not a datasheet peak.\n", d);
    fprintf(f, "gemm_efficiency = 1\n");
    if (m->tier_dir) {
        fprintf(f, "\n# measured by mtrun --calibrate on %s: the free space of %s's filesystem.\n", d, m->tier_dir);
        fprintf(f, "tier_capacity = %.0f\n", t->tier_capacity);
        fprintf(f, "# measured by mtrun --calibrate on %s: %.1f MB read through the NVMe tier in %s\n"
                   "# (io_uring, O_DIRECT, %d records), best of %d.\n", d, (double)((int64_t)CAL_TIER_MB << 20) / 1e6,
                m->tier_dir, CAL_TIER_LAYERS,
                CAL_TIER_REPS);
        fprintf(f, "tier_read_bandwidth = %s\n", fmt_num(a, sizeof a, t->tier_read_bandwidth));
        fprintf(f, "# measured by mtrun --calibrate on %s: the same bytes written through it first.\n", d);
        fprintf(f, "tier_write_bandwidth = %s\n", fmt_num(a, sizeof a, t->tier_write_bandwidth));
    }
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
    if (!gmtime_r(&now, &tm) || !strftime(m.date, sizeof m.date, "%Y-%m-%d", &tm)) snprintf(m.date, sizeof m.date, "unknown");
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
    if (measure_copy(&m, available, threads > 0 ? threads : 1, err, errcap) != 0) return -1;
    if (measure_adamw(&m, threads > 0 ? threads : 1, err, errcap) != 0) return -1;
    if (measure_sgemm(&m, err, errcap) != 0) return -1;
    if (measure_vector(&m, err, errcap) != 0) return -1;
    if (measure_overheads(&m, err, errcap) != 0) return -1;
    m.tier_dir = tier_dir;
    if (tier_dir && measure_tier(&m, err, errcap) != 0) return -1;
    m.t.hbm_bandwidth = m.t.host_memory_bandwidth = m.copy_rate;
    m.t.h2d_bandwidth = m.t.d2h_bandwidth = m.copy_rate / 2;
    m.t.link_duplex = 0;
    m.t.matrix_flops_bf16 = m.t.matrix_flops_f32;
    m.t.gemm_efficiency = 1.0;

    if (write_atomically(path, &m, err, errcap) != 0) return -1;
    if (out) {
        fprintf(out, "calibrated %s (cpu backend): %.0f cores, %.1f GB of RAM\n", m.host, m.t.host_cores,
                m.t.host_memory / 1e9);
        fprintf(out, "  memcpy  %8.1f GB/s      read + written, %.1f MB, %d threads (copies in/out: %.1f GB/s)\n",
                m.copy_rate / 1e9, (double)m.copy_bytes / 1e6, m.copy_threads, m.t.h2d_bandwidth / 1e9);
        fprintf(out, "  AdamW   %8.1f GB/s      %.0f bytes a parameter, %.1f M parameters, %d threads\n",
                m.t.host_adamw_bandwidth / 1e9, CAL_ADAMW_BYTES, (double)m.adamw_params / 1e6, m.copy_threads);
        fprintf(out, "  sgemm   %8.1f GFLOP/s   %dx%dx%d, OpenBLAS %d threads\n", m.t.matrix_flops_f32 / 1e9,
                m.gemm_n, m.gemm_n, m.gemm_n, m.blas_threads);
        fprintf(out, "  x*a+b   %8.2f GFLOP/s   one thread, in cache\n", m.t.vector_flops / 1e9);
        fprintf(out, "  calls   %8.2f us        a %dx%dx%d sgemm beyond its FLOPs; %.3f us a kernel call\n",
                m.t.gemm_call_s * 1e6, CAL_SMALL_N, CAL_SMALL_N, CAL_SMALL_K, m.t.kernel_launch_s * 1e6);
        fprintf(out, "  expf..  %8.2f ns        one thread, a call\n", m.t.transcendental_s * 1e9);
        if (tier_dir)
            fprintf(out, "  tier    %8.2f GB/s      read, %.2f GB/s written, %.1f MB in %s; %.1f GB free\n",
                    m.t.tier_read_bandwidth / 1e9, m.t.tier_write_bandwidth / 1e9,
                    (double)((int64_t)CAL_TIER_MB << 20) / 1e6, tier_dir,
                    m.t.tier_capacity / 1e9);
        fprintf(out, "wrote %s in %.1f s\n", path, now_s() - t0);
    }
    return 0;
}
