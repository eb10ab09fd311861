// bf16_gemm_bench.c: the ways the cpu backend could run a GEMM of bf16
// operands with fp32 accumulation and a bf16 result, measured in the same
// run on the same data, at GPT-2 small's MLP shapes (rows = batch 4 x seq
// 64) and its LM head's:
//   sgemm   cblas_sgemm on the same values already in fp32 (no bf16 at all)
//   widen   A and B widened to fp32 in scratch, cblas_sgemm, C rounded to bf16
//           (what runtime/backend/jit.c does)
//   sbgemm  OpenBLAS's cblas_sbgemm (bf16 A and B, fp32 C), C rounded to bf16,
//           when the OpenBLAS loaded exports it (looked up at run time:
//           Debian's 0.3.21 declares it in cblas.h but is built without it)
//
//     bf16_gemm_bench [--reps R]
//
// Prints each way's best GFLOP/s and the time ratios widen/sgemm and
// sbgemm/widen; checks that the ways give the same C to a relative 1e-2
// (bf16 rounding of sums in another order), exiting 1 otherwise.
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bf16.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// C (M, N) = A (M, K) @ B (K, N), bf16 storage; w: (M*K + K*N + M*N) fp32 scratch.
static void gemm_widen(int M, int N, int K, const uint16_t *A, const uint16_t *B, uint16_t *C, float *w) {
    float *a = w, *b = a + (size_t)M * K, *c = b + (size_t)K * N;
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = f32_from_bf16(A[i]);
    for (size_t i = 0; i < (size_t)K * N; i++) b[i] = f32_from_bf16(B[i]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    for (size_t i = 0; i < (size_t)M * N; i++) C[i] = bf16_from_f32(c[i]);
}

typedef void (*SbgemmFn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                         const uint16_t *, blasint, const uint16_t *, blasint, float, float *, blasint);
static SbgemmFn sbgemm;

static void gemm_sbgemm(int M, int N, int K, const uint16_t *A, const uint16_t *B, uint16_t *C, float *c) {
    sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, c, N);
    for (size_t i = 0; i < (size_t)M * N; i++) C[i] = bf16_from_f32(c[i]);
}

int main(int argc, char **argv) {
    int reps = 5, bad = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    sbgemm = (SbgemmFn)(uintptr_t)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    if (!sbgemm) printf("cblas_sbgemm: not exported by the OpenBLAS loaded here; the widening path is the only one\n");
    static const int SHAPES[][3] = {{256, 3072, 768}, {256, 768, 3072}, {256, 50257, 768}};
    printf("%-18s %10s %10s %10s %13s %13s\n", "M x N x K", "sgemm", "widen", "sbgemm", "widen/sgemm", "sbgemm/widen");
    for (int s = 0; s < 3; s++) {
        int M = SHAPES[s][0], N = SHAPES[s][1], K = SHAPES[s][2];
        uint16_t *A = malloc((size_t)M * K * 2), *B = malloc((size_t)K * N * 2), *C1 = malloc((size_t)M * N * 2),
                 *C2 = malloc((size_t)M * N * 2);
        float *w = malloc(((size_t)M * K + (size_t)K * N + (size_t)M * N) * 4), // widen's scratch
            *f = malloc(((size_t)M * K + (size_t)K * N + (size_t)M * N) * 4);   // sgemm's fp32 A, B, C
        if (!A || !B || !C1 || !C2 || !w || !f) return fprintf(stderr, "bf16_gemm_bench: out of memory\n"), 1;
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = bf16_from_f32((float)((i * 7919) % 1000) / 1000.0f - 0.5f);
        for (size_t i = 0; i < (size_t)K * N; i++) B[i] = bf16_from_f32((float)((i * 104729) % 997) / 997.0f - 0.5f);
        float *fa = f, *fb = fa + (size_t)M * K, *fc = fb + (size_t)K * N;
        for (size_t i = 0; i < (size_t)M * K; i++) fa[i] = f32_from_bf16(A[i]);
        for (size_t i = 0; i < (size_t)K * N; i++) fb[i] = f32_from_bf16(B[i]);
        double best_f = 1e30, best_w = 1e30, best_s = 1e30;
        for (int r = 0; r < reps; r++) { // in turn, so that a noisy machine slows all alike
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, fa, K, fb, N, 0.0f, fc, N);
            double t1 = now_s();
            gemm_widen(M, N, K, A, B, C1, w);
            double t2 = now_s();
            if (sbgemm) gemm_sbgemm(M, N, K, A, B, C2, w);
            double t3 = now_s();
            best_f = t1 - t0 < best_f ? t1 - t0 : best_f;
            best_w = t2 - t1 < best_w ? t2 - t1 : best_w;
            best_s = t3 - t2 < best_s ? t3 - t2 : best_s;
        }
        double scale = 0, diff = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            double x = f32_from_bf16(C1[i]), y = sbgemm ? f32_from_bf16(C2[i]) : fc[i];
            scale = fmax(scale, fabs(x));
            diff = fmax(diff, fabs(x - y));
        }
        double flops = 2.0 * M * N * K;
        char shape[32], sb[32] = "-", ratio[32] = "-";
        snprintf(shape, sizeof shape, "%dx%dx%d", M, N, K);
        if (sbgemm) {
            snprintf(sb, sizeof sb, "%.1f GF", flops / best_s / 1e9);
            snprintf(ratio, sizeof ratio, "%.2f", best_s / best_w);
        }
        printf("%-18s %7.1f GF %7.1f GF %10s %13.2f %13s   max|diff|/max|C| %.1e\n", shape, flops / best_f / 1e9,
               flops / best_w / 1e9, sb, best_w / best_f, ratio, diff / scale);
        if (!(diff <= 1e-2 * scale)) bad = 1;
        free(A), free(B), free(C1), free(C2), free(w), free(f);
    }
    if (bad) printf("FAIL: the two ways disagree beyond bf16 rounding\n");
    return bad;
}
