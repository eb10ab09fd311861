// test_cost_cpu: what compiler/schedule/cost.c prices a cpu target's GEMM and
// attention kernels at, against the cpu backend's way of running them
// (runtime/backend/jit.c), on a fixed profile written here (no timing):
//
// - a GEMM whose BLAS calls each take fewer than MT_BLAS_THREADED_MACS
//   multiply-adds runs on one thread: its FLOPs at gemm_one_thread_flops
//   (every GEMM of llama-tiny at batch 4, seq 64); a larger one at the
//   matrix rate (GPT-2 small's MLP GEMMs);
// - a bf16 plan's GEMM and attention widen every bf16 input and round a
//   bf16 output: bf16_convert_s an element; an f32 plan's convert nothing;
// - bf16 attention (the plain kernel) costs its FLOPs at
//   attention_plain_flops plus a scalar double exp (transcendental_f64_s)
//   for each scored (query, key) pair, forward and backward.
//
// Before these were priced, llama-tiny's bf16 step on the cpu measured 1.32
// times its prediction (bench/README.md).
//
// usage: test_cost_cpu (from the project root: reads examples/)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io.h"
#include "compiler/schedule/cost.h"
#include "compiler/compile.h"
#include "tests/check.h"

static int checked; // kernel prices compared

// The profile every price below is computed from.
static const char *const PROFILE =
    "name = cpu-priced\narch = cpu\ndevice_memory = 8e9\nhbm_bandwidth = 40e9\n"
    "matrix_flops_f32 = 200e9\nmatrix_flops_bf16 = 200e9\nvector_flops = 20e9\n"
    "h2d_bandwidth = 20e9\nd2h_bandwidth = 20e9\nlink_duplex = false\nhost_memory = 8e9\n"
    "host_memory_bandwidth = 40e9\nhost_cores = 2\nkernel_launch_s = 10e-9\ngemm_call_s = 1e-6\n"
    "transcendental_s = 2e-9\ntranscendental_f64_s = 6e-9\nattention_plain_flops = 4e9\n"
    "gemm_one_thread_flops = 100e9\nbf16_convert_s = 0.25e-9\ngemm_efficiency = 1\n";
#define HBM 40e9
#define MATRIX 200e9
#define ONE_THREAD 100e9
#define LAUNCH 10e-9
#define CALL 1e-6
#define EXP64 6e-9
#define PLAIN 4e9
#define CONVERT 0.25e-9

static void expect(double got, double want, const char *what, int part, int i) {
    checked++;
    CHECK(fabs(got - want) <= 1e-9 * fabs(want), "%s: part %d kernel %d priced %.6g s, not %.6g s", what, part, i, got,
          want);
}

// Bytes and bf16 elements of k's arguments, as the cost model and the backend count them.
static void args_of(const KirKernel *k, double *bytes, double *bf16) {
    *bytes = *bf16 = 0;
    for (int a = 0; a < k->nargs; a++) {
        double e = (double)k->args[a].numel;
        *bytes += e * (k->args[a].dtype == KT_BF16 ? 2.0 : 4.0) * (k->args[a].access & KA_ACC32 ? 2.0 : 1.0);
        if (k->args[a].dtype == KT_BF16) *bf16 += e;
    }
}

static double longer(double a, double b) { return a > b ? a : b; }

// model at batch 4, seq 64, compute 1 (f32) or 2 (bf16): checks its GEMMs
// without an epilogue and its attention kernels; returns how many of its
// GEMMs ran on every thread (MT_BLAS_THREADED_MACS multiply-adds or more).
static int check_model(const char *path, int compute, const Target *t) {
    char *text;
    size_t len;
    if (io_read_file(path, &text, &len) != 0) {
        FAIL("cannot read %s", path);
        return 0;
    }
    Source src = {.path = path, .text = text, .len = len};
    Diag d = {.src = &src, .sink = stderr};
    Arena a = {0};
    SemaOptions opt = {.batch = 4, .seq = 64, .compute = compute};
    Model *m = dsl_parse(&src, &a, &d);
    Graph *g = m ? compile_lower(m, &opt, 1, NULL, &a, &d) : NULL; // (the one compile path: fused once)
    int threaded = 0;
    if (!g) {
        FAIL("%s: cannot compile it", path);
        goto out;
    }
    for (int p = 0; p < graph_nparts(g); p++) {
        const KirSet *s = &g->kernels->parts[p];
        for (int i = 0; i < s->n; i++) {
            const KirKernel *k = &s->k[i];
            if (!kir_is_launched(k)) continue;
            double bytes, bf16, got = cost_kernel_s(g, p, s, i, t);
            args_of(k, &bytes, &bf16);
            if (compute == 1 && bf16 > 0) { FAIL("%s f32: kernel %d of part %d has bf16 arguments", path, i, p); }
            if (k->kind == KK_GEMM && k->gemm.epilogue < 0) {
                const KirGemm *gm = &k->gemm;
                double macs = (double)gm->M * (double)gm->N * (double)gm->K, rate = ONE_THREAD;
                if (macs >= (double)MT_BLAS_THREADED_MACS) rate = MATRIX, threaded++;
                double want = longer(2.0 * macs * (double)gm->batch / rate, bytes / HBM) + (double)gm->batch * CALL +
                              bf16 * CONVERT + LAUNCH;
                expect(got, want, compute == 2 ? "a bf16 GEMM" : "an f32 GEMM", p, i);
            } else if ((k->kind == KK_ATTN || k->kind == KK_ATTN_BWD) && compute == 2) {
                const KirAttn *at = &k->attn;
                double pairs = 0.5 * (double)at->T * (double)at->T; // (causal, no window in these models)
                double flops = 4.0 * (double)at->B * pairs * (double)at->H * 0.5 * (double)(at->D + at->Dv) *
                               (k->kind == KK_ATTN ? 1.0 : 2.5);
                double want = longer(flops / PLAIN + (double)at->B * (double)at->H * pairs * EXP64, bytes / HBM) +
                              bf16 * CONVERT + LAUNCH;
                expect(got, want, k->kind == KK_ATTN ? "bf16 attention" : "bf16 attention's backward", p, i);
            }
        }
    }
out:
    arena_free(&a);
    free(text);
    return threaded;
}

int main(void) {
    char dir[] = "/tmp/test_cost_cpu.XXXXXX", path[64], err[1024];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/cpu-priced.target", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(PROFILE, f) < 0 || fclose(f) != 0) return 1;
    Target t;
    int rc = target_load(path, &t, err, sizeof err);
    unlink(path);
    rmdir(dir);
    if (rc != 0) {
        fprintf(stderr, "FAIL: the test's profile is refused: %s\n", err);
        return 1;
    }
    int threaded = check_model("examples/llama-tiny.mt", 2, &t) + check_model("examples/llama-tiny.mt", 1, &t) +
                   check_model("examples/gpt2-tiny.mt", 2, &t);
    if (threaded != 0) { FAIL("%d tiny-model GEMMs were priced as threaded", threaded); }
    if (check_model("examples/gpt2.mt", 1, &t) == 0) {
        FAIL("GPT-2 small has no GEMM of %lld multiply-adds or more without an epilogue", MT_BLAS_THREADED_MACS);
    }
    CHECK(checked > 0, "no kernel price was compared");
    printf("test_cost_cpu: %d kernel prices checked\n", checked);
    return check_summary("test_cost_cpu");
}
