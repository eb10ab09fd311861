// adamw_bench.c: adamw_update's memory throughput over a plain copy's, both
// measured in the same run with the same threads.
//
//     adamw_bench [--n N] [--threads T] [--reps R] [--bf16] [--zero | --grads-bf16]
//
// The update's counted bytes: it reads w, m, v, g and writes w, m, v, 28 bytes
// a parameter (30 with --bf16, which also writes the bf16 copy; 4 more with
// --zero, which zeroes g in the same pass: --bf16 --zero is what the host
// store's update does, 34 bytes as compiler/schedule/cost.c counts them). With
// --grads-bf16 the gradients are bf16 and only read (adamw_update_bf16_grads,
// the host store's layers' with one micro-batch a step): 26 bytes, 28 with
// --bf16, as compiler/schedule/cost.c counts them. The copy: T threads each memcpy
// their slice of a buffer as large as the update's four arrays (16 bytes a
// parameter, 14 with --grads-bf16), counted as the bytes read plus the bytes
// written. A copy's stores must first read each destination line (read for
// ownership) unless memcpy streams them, while the update writes only lines it
// has just read, so a good update moves its counted bytes at least as fast as
// a copy does: the printed ratio should be 1.0 or more. The runs alternate,
// update then copy; each rate printed is the best of R, the ratio the median
// over the R pairs. A second line gives adamw_sq_norm's read rate over g
// (adamw_sq_norm_bf16's with --grads-bf16).
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "runtime/store/adamw.h"

enum { BENCH_ALIGN = 2 << 20 }; // buffers start on a 2 MiB boundary, for transparent huge pages

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// bytes of zero-filled-on-touch memory on a huge-page boundary, with
// transparent huge pages asked for; exits when out of memory.
static void *bench_alloc(size_t bytes) {
    size_t rounded = (bytes + BENCH_ALIGN - 1) / BENCH_ALIGN * BENCH_ALIGN;
    void *p = NULL;
    if (posix_memalign(&p, BENCH_ALIGN, rounded)) {
        fprintf(stderr, "adamw_bench: cannot allocate %zu bytes\n", rounded);
        exit(1);
    }
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

// Element range [lo, hi) of thread i of nt over n elements, in whole 64-byte
// lines: the split adamw_update makes of 64-byte-aligned arrays, so each
// thread first touches the pages it will update.
static void bench_range(int64_t n, int nt, int i, int64_t *lo, int64_t *hi) {
    int64_t per = (n + nt - 1) / nt;
    per = (per + 15) / 16 * 16;
    *lo = (int64_t)i * per < n ? (int64_t)i * per : n;
    *hi = i == nt - 1 ? n : ((int64_t)(i + 1) * per < n ? (int64_t)(i + 1) * per : n);
}

// What one bench thread does: fill its slice of the optimizer state, or fill
// its slice of the copy buffers, or copy its slice.
typedef enum { JOB_FILL_STATE, JOB_FILL_COPY, JOB_COPY } JobKind;

typedef struct BenchJob {
    JobKind kind;
    int64_t lo, hi;       // elements for JOB_FILL_STATE, bytes otherwise
    float *w, *m, *v, *g; // (n) each; g NULL with bf16 gradients
    uint16_t *gb;         // (n) the bf16 gradients, or NULL
    unsigned char *src;   // (copy_bytes)
    unsigned char *dst;   // (copy_bytes)
} BenchJob;

static void *bench_thread(void *arg) {
    const BenchJob *j = arg;
    switch (j->kind) {
    case JOB_FILL_STATE:
        for (int64_t i = j->lo; i < j->hi; i++) {
            // moderate values that stay normal over many steps
            j->w[i] = 0.5f + (float)(i % 1021) * 1e-3f;
            if (j->g) j->g[i] = (float)(i % 7 - 3) * 1e-2f + 1e-3f;
            if (j->gb) j->gb[i] = (uint16_t)(0x3c00u + (uint16_t)(i % 7)); // about 0.0078, never zero
            j->m[i] = 0.0f;
            j->v[i] = 0.0f;
        }
        break;
    case JOB_FILL_COPY:
        memset(j->src + j->lo, 1, (size_t)(j->hi - j->lo));
        memset(j->dst + j->lo, 2, (size_t)(j->hi - j->lo));
        break;
    case JOB_COPY: memcpy(j->dst + j->lo, j->src + j->lo, (size_t)(j->hi - j->lo)); break;
    }
    return NULL;
}

// Runs jobs[0..nt) on nt threads (job 0 on the caller) and waits for them.
static void bench_run(BenchJob *jobs, int nt) {
    pthread_t *tids = malloc((size_t)nt * sizeof *tids); // (nt)
    if (!tids) exit(1);
    for (int i = 1; i < nt; i++)
        if (pthread_create(&tids[i], NULL, bench_thread, &jobs[i])) {
            fprintf(stderr, "adamw_bench: cannot start a thread\n");
            exit(1);
        }
    bench_thread(&jobs[0]);
    for (int i = 1; i < nt; i++) pthread_join(tids[i], NULL);
    free(tids);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    fprintf(stderr, "usage: adamw_bench [--n PARAMS] [--threads T] [--reps R] [--bf16] [--zero | --grads-bf16]\n"
                    "  --n        parameters to update (default 67108864: 1 GiB of state)\n"
                    "  --threads  threads for the update and the copy (default: online CPUs)\n"
                    "  --reps     timed runs of each, alternating (default 7)\n"
                    "  --bf16     also write the bf16 copy of the weights (counted: 30 bytes a parameter)\n"
                    "  --zero     also zero the gradients in the pass, as the host store does (4 bytes more)\n"
                    "  --grads-bf16  bf16 gradients, only read (2 bytes, not 4), as the host store's layers' with\n"
                    "             one micro-batch a step\n");
    exit(2);
}

// A positive integer command-line value, or usage().
static long long parse_count(const char *s) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 0);
    if (errno || end == s || *end || x < 1) usage();
    return x;
}

int main(int argc, char **argv) {
    int64_t n = 64LL << 20;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = ncpu > 0 ? (int)ncpu : 1;
    int reps = 7, with_bf16 = 0, grads_bf16 = 0, flags = ADAMW_DECAY;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = parse_count(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nt = (int)parse_count(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = (int)parse_count(argv[++i]);
        else if (!strcmp(argv[i], "--bf16")) with_bf16 = 1;
        else if (!strcmp(argv[i], "--zero")) flags |= ADAMW_ZERO_GRADS;
        else if (!strcmp(argv[i], "--grads-bf16")) grads_bf16 = 1;
        else usage();
    }
    if (grads_bf16 && (flags & ADAMW_ZERO_GRADS)) usage(); // (bf16 gradients are never zeroed)

    float *w = bench_alloc((size_t)n * 4), *m = bench_alloc((size_t)n * 4);                     // (n) each
    float *v = bench_alloc((size_t)n * 4), *g = grads_bf16 ? NULL : bench_alloc((size_t)n * 4); // (n) each
    uint16_t *gb = grads_bf16 ? bench_alloc((size_t)n * 2) : NULL;                              // (n)
    uint16_t *bf = with_bf16 ? bench_alloc((size_t)n * 2) : NULL;                               // (n)
    int64_t copy_bytes = (grads_bf16 ? 14 : 16) * n; // the update's four arrays
    unsigned char *src = bench_alloc((size_t)copy_bytes), *dst = bench_alloc((size_t)copy_bytes);

    // First touch by the threads that will use each page.
    BenchJob *jobs = calloc((size_t)nt, sizeof *jobs); // (nt)
    if (!jobs) exit(1);
    for (int i = 0; i < nt; i++) {
        jobs[i] = (BenchJob){JOB_FILL_STATE, 0, 0, w, m, v, g, gb, src, dst};
        bench_range(n, nt, i, &jobs[i].lo, &jobs[i].hi);
    }
    bench_run(jobs, nt);
    if (bf) memset(bf, 0, (size_t)n * 2);
    for (int i = 0; i < nt; i++) {
        jobs[i].kind = JOB_FILL_COPY;
        bench_range(copy_bytes / 4, nt, i, &jobs[i].lo, &jobs[i].hi);
        jobs[i].lo *= 4, jobs[i].hi *= 4;
    }
    bench_run(jobs, nt);
    for (int i = 0; i < nt; i++) jobs[i].kind = JOB_COPY;

    AdamWStep step =
        {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .t = 1, .grad_scale = 1.0f};
    double update_bytes = (double)n * ((with_bf16 ? 30.0 : 28.0) + (flags & ADAMW_ZERO_GRADS ? 4.0 : 0.0) -
                                       (grads_bf16 ? 2.0 : 0.0));
    double copied_bytes = 2.0 * (double)copy_bytes;
    double *t_update = malloc((size_t)reps * sizeof *t_update); // (reps) seconds
    double *t_copy = malloc((size_t)reps * sizeof *t_copy);     // (reps) seconds
    double *t_norm = malloc((size_t)reps * sizeof *t_norm);     // (reps) seconds
    double *ratios = malloc((size_t)reps * sizeof *ratios);     // (reps) rate ratio of each pair
    if (!t_update || !t_copy || !t_norm || !ratios) exit(1);

    // One untimed run of each, then reps alternating pairs.
    if (gb) adamw_update_bf16_grads(w, m, v, gb, bf, n, &step, flags, nt);
    else adamw_update(w, m, v, g, bf, n, &step, flags, nt);
    bench_run(jobs, nt);
    for (int r = 0; r < reps; r++) {
        step.t = r + 2;
        double t0 = now_s();
        if (gb) adamw_update_bf16_grads(w, m, v, gb, bf, n, &step, flags, nt);
        else adamw_update(w, m, v, g, bf, n, &step, flags, nt);
        double t1 = now_s();
        bench_run(jobs, nt);
        double t2 = now_s();
        volatile double norm = gb ? adamw_sq_norm_bf16(gb, n, nt) : adamw_sq_norm(g, n, nt);
        (void)norm;
        t_update[r] = t1 - t0;
        t_copy[r] = t2 - t1;
        t_norm[r] = now_s() - t2;
        ratios[r] = (update_bytes / t_update[r]) / (copied_bytes / t_copy[r]);
    }
    qsort(t_update, (size_t)reps, sizeof *t_update, cmp_double);
    qsort(t_copy, (size_t)reps, sizeof *t_copy, cmp_double);
    qsort(t_norm, (size_t)reps, sizeof *t_norm, cmp_double);
    qsort(ratios, (size_t)reps, sizeof *ratios, cmp_double);
    double update_gbs = update_bytes / t_update[0] / 1e9, copy_gbs = copied_bytes / t_copy[0] / 1e9;

    // Keep the result observable, so no part of the update can be skipped.
    double check = 0.0;
    for (int64_t i = 0; i < n; i += 4099) check += w[i];
    // The rates are the best of each; the ratio is the median over the
    // back-to-back pairs, which holds when the machine's bandwidth shifts
    // during the run (shared hosts do) and a best-of-each ratio would not.
    printf("adamw: %.1f GB/s  copy: %.1f GB/s  ratio %.2f  (median of %d pairs; best rates give %.2f; n=%lld, "
           "threads=%d%s%s%s; checksum %.6g)\n",
           update_gbs, copy_gbs, ratios[reps / 2], reps, update_gbs / copy_gbs, (long long)n, nt,
           with_bf16 ? ", with bf16 copy" : "", flags & ADAMW_ZERO_GRADS ? ", zeroing g" : "",
           grads_bf16 ? ", bf16 gradients" : "", check);
    printf("sq_norm: %.1f GB/s  (reads g, %d bytes a parameter; best of %d)\n",
           (grads_bf16 ? 2.0 : 4.0) * (double)n / t_norm[0] / 1e9, grads_bf16 ? 2 : 4, reps);

    free(t_update), free(t_copy), free(t_norm), free(ratios), free(jobs);
    free(w), free(m), free(v), free(g), free(gb), free(bf), free(src), free(dst);
    return 0;
}
