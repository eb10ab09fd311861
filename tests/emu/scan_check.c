// scan_check: compiler/emit/cuda/scan.cuh's kernels (conv1d, the gated delta
// rule, the Mamba-2 scan, forward and backward) on the CPU emulation of CUDA
// (tests/emu/cuda_emu.h), launched as runtime/backend/backend_cuda.c's
// run_scan launches them, against the cpu backend's plain kernels
// (runtime/backend/kernels_scan.inc, kernel_run_doc_starts_f32) on the same
// inputs.
//
//   scan_check CXX EMU_DIR WORK_DIR
//
// Cases at odd sizes: T past a chunk of the backward (64 steps) so that it
// recomputes from a kept chunk start, grouped heads (H / Hk of 2 and 3),
// Dk and Dv neither equal nor multiples of the 128 threads, packed documents
// (seg_start) and none. Outputs start as NaN, so an element no kernel writes
// fails. Error: max |gpu - cpu| / max |cpu| per output, at most 1e-5 (f32;
// the plain kernels keep the state in double). Then the same translation unit
// compiled with NVRTC for sm_80 and sm_90, ptxas's resource report: every
// mt_node_* entry point of scan.cuh present and none spilling registers.
// Exit status 0 only when every check passed.
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/graph.h"
#include "common/scan.h"
#include "compiler/emit/cuda/sources.h"
#include "compiler/emit/nvrtc.h"
#include "runtime/backend/kernels.h"
#include "tests/check.h"

typedef int (*LaunchFn)(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                        void **args);

static const char *const KERNELS[] = {"mt_node_conv1d",         "mt_node_conv1d_bwd", "mt_node_delta_rule",
                                      "mt_node_delta_rule_bwd", "mt_node_ssd",        "mt_node_ssd_bwd"};
enum { NKERNELS = 6, THREADS = 128 };

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) { // uniform in [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// The translation unit: the prelude, mma.cuh, moe.cuh (mt_ldv, mt_stv) and scan.cuh, into *out (malloc'd).
static char *source(void) {
    size_t cap = mt_cuda_prelude_len + mt_cuda_mma_len + mt_cuda_moe_len + mt_cuda_scan_len + 8;
    char *src = malloc(cap);
    if (src) snprintf(src, cap, "%s\n%s\n%s\n%s\n", mt_cuda_prelude, mt_cuda_mma, mt_cuda_moe, mt_cuda_scan);
    return src;
}

// The unit compiled with CXX for the emulation into WORK_DIR/scan.so (`extern __shared__` written `extern`, the
// emulation's mt_smem), with a table of scan.cuh's kernels.
static LaunchFn build(const char *cxx, const char *emu_dir, const char *work_dir) {
    char cu[1024], so[1024], cmd[4096], *src = source();
    snprintf(cu, sizeof cu, "%s/scan.cu", work_dir);
    snprintf(so, sizeof so, "%s/scan.so", work_dir);
    FILE *f = src ? fopen(cu, "w") : NULL;
    if (!f) {
        printf("FAIL cannot write %s\n", cu);
        free(src);
        return NULL;
    }
    fprintf(f, "#include \"cuda_emu.h\"\n");
    const char *key = "extern __shared__", *p = src, *hit;
    while ((hit = strstr(p, key))) {
        fwrite(p, 1, (size_t)(hit - p), f);
        fputs("extern", f);
        p = hit + strlen(key);
    }
    fputs(p, f);
    fprintf(f, "\nMT_EMU_KERNELS_BEGIN\n");
    for (int k = 0; k < NKERNELS; k++) fprintf(f, "MT_EMU_KERNEL(%s)\n", KERNELS[k]);
    fprintf(f, "MT_EMU_KERNELS_END\n");
    fclose(f);
    free(src);
    snprintf(cmd, sizeof cmd, "%s -x c++ -std=c++17 -O1 -fPIC -shared -w -I'%s' '%s' -o '%s'", cxx, emu_dir, cu, so);
    if (system(cmd) != 0) {
        printf("FAIL scan.cuh does not compile for the emulation: %s\n", cmd);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    LaunchFn fn = h ? (LaunchFn)(uintptr_t)dlsym(h, "mt_emu_launch") : NULL;
    if (!fn) printf("FAIL cannot load %s: %s\n", so, dlerror());
    return fn;
}

typedef struct Case {
    OpKind op;               // OP_CONV1D, OP_DELTA_RULE or OP_SSD: its forward and backward
    int B, T, H, Hk, Dk, Dv; // conv1d: C = Dk, K = Dv
    int docs;                // packed documents (seg_start) or none
} Case;

static const Case CASES[] = {
    {OP_CONV1D, 2, 13, 0, 0, 7, 4, 0},       {OP_CONV1D, 2, 13, 0, 0, 7, 4, 1}, {OP_DELTA_RULE, 2, 70, 4, 2, 5, 3, 0},
    {OP_DELTA_RULE, 1, 70, 6, 2, 9, 130, 1}, {OP_SSD, 1, 67, 3, 1, 4, 6, 0},    {OP_SSD, 2, 66, 4, 2, 3, 5, 1},
};

static Shape shape3(long long a, long long b, long long c) { return (Shape){3, {a, b, c}}; }

// The node of case t (bwd: its backward) over operand nodes ops, and its operands' sizes into sizes.
static Node make_node(const Case *t, int bwd, Node *ops, Node **in, long long *sizes, int *nops) {
    int n = 0;
    long long BT = (long long)t->B * t->T;
    Node node = {.op = t->op,
                 .heads = t->H,
                 .kv_heads = t->Hk,
                 .scale = t->op == OP_SSD ? 1.0 : 0.37,
                 .eps = t->op == OP_DELTA_RULE ? 1e-6 : 0};
    if (t->op == OP_CONV1D) {
        Shape x = shape3(t->B, t->T, t->Dk);
        if (bwd) ops[n++].shape = x;
        ops[n++].shape = x, ops[n++].shape = (Shape){2, {t->Dk, t->Dv}};
        node.op = bwd ? OP_CONV1D_BWD : OP_CONV1D;
        node.shape = bwd ? (Shape){1, {BT * t->Dk + (long long)t->Dk * t->Dv}} : x;
    } else {
        Shape q = shape3(t->B, t->T, (long long)t->Hk * t->Dk), v = shape3(t->B, t->T, (long long)t->H * t->Dv),
              g = shape3(t->B, t->T, t->H);
        if (bwd) ops[n++].shape = v;
        ops[n++].shape = q, ops[n++].shape = q, ops[n++].shape = v, ops[n++].shape = g, ops[n++].shape = g;
        node.op = bwd ? (t->op == OP_SSD ? OP_SSD_BWD : OP_DELTA_RULE_BWD) : t->op;
        node.shape = bwd ? (Shape){1, {BT * (2LL * t->Hk * t->Dk + (long long)t->H * t->Dv + 2LL * t->H)}} : v;
    }
    for (int i = 0; i < n; i++) in[i] = &ops[i], sizes[i] = shape_numel(&ops[i].shape);
    node.in = in, node.nin = n, *nops = n;
    return node;
}

static void check_case(LaunchFn fn, const Case *t) {
    for (int bwd = 0; bwd < 2; bwd++) {
        Node ops[6] = {{0}}, *in[6];
        long long sizes[6];
        int nops = 0;
        Node node = make_node(t, bwd, ops, in, sizes, &nops);
        ConvDims cd;
        ScanDims sd;
        int conv = t->op == OP_CONV1D;
        if (!CHECK(conv ? conv_dims(&node, &cd) : scan_dims(&node, &sd), "%s: inconsistent case", op_name(node.op)))
            continue;
        float *a[6] = {0};
        for (int i = 0; i < nops; i++) {
            a[i] = malloc((size_t)sizes[i] * sizeof(float));
            int operand = i - bwd; // the forward's operand: g (3) <= 0, beta (4) in (0, 1)
            for (long long j = 0; j < sizes[i]; j++)
                a[i][j] = !conv && operand == 3   ? -0.6f * fabsf(frand())
                          : !conv && operand == 4 ? 0.5f + 0.45f * frand()
                                                  : frand();
        }
        int *seg = malloc((size_t)t->B * t->T * sizeof(int));
        for (int b = 0; b < t->B; b++) // documents of 3, 17, 1, 9, ... positions
            for (int s = 0, start = 0, len = 3; s < t->T; s++) {
                if (s - start == len) start = s, len = (len * 7 + 3) % 19 + 1;
                seg[b * t->T + s] = t->docs ? start : 0;
            }
        long long N = shape_numel(&node.shape);
        float *ref = malloc((size_t)N * sizeof(float)), *gpu = malloc((size_t)N * sizeof(float));
        for (long long j = 0; j < N; j++) gpu[j] = NAN;
        kernel_run_doc_starts_f32(&node, ref, (void *const *)a, t->docs ? seg : NULL);
        int64_t wsb = scan_scratch_bytes(&node);
        float *ws = malloc((size_t)(wsb > 0 ? wsb : 4));
        void *ptr[7] = {gpu, a[0], a[1], a[2], nops > 3 ? a[3] : NULL, nops > 4 ? a[4] : NULL, nops > 5 ? a[5] : NULL};
        void *params[24], *segp = t->docs ? seg : NULL;
        int np = 0, bf = 0;
        for (int i = 0; i <= nops; i++) params[np++] = &ptr[i];
        params[np++] = &bf;
        long long rows = (long long)t->B * t->T;
        int T = t->T, C = t->Dk, K = t->Dv, B = t->B, H = t->H, Hk = t->Hk, Dk = t->Dk, Dv = t->Dv;
        float scale = (float)node.scale, eps = (float)node.eps;
        unsigned grid, smem = 0;
        if (conv) {
            void *more[] = {&rows, &T, &C, &K, &segp};
            for (int i = 0; i < 5; i++) params[np++] = more[i];
            grid = (unsigned)((rows * C + (bwd ? C * K : 0) + THREADS - 1) / THREADS);
        } else {
            void *more[] = {&B, &T, &H, &Hk, &Dk, &Dv, &scale, &eps, &segp, &ws};
            for (int i = 0; i < 10; i++) params[np++] = more[i];
            grid = (unsigned)(bwd ? B * Hk : B * H);
            smem = (unsigned)(4 * (bwd ? 4 * Dk + 3 * Dv + 2 * THREADS + 4 : 2 * Dk + 2));
        }
        int rc = fn(KERNELS[2 * (t->op == OP_CONV1D       ? 0
                                 : t->op == OP_DELTA_RULE ? 1
                                                          : 2) +
                            bwd],
                    grid, 1, 1, THREADS, smem, params);
        double err = 0, big = 0;
        for (long long j = 0; j < N; j++) {
            double d = fabs((double)gpu[j] - ref[j]);
            if (!(d <= err)) err = d; // NaN: unwritten
            if (fabs(ref[j]) > big) big = fabs(ref[j]);
        }
        double rel = err / (big > 0 ? big : 1);
        CHECK(rc == 0 && rel <= 1e-5, "%s B %d T %d H %d Hk %d Dk %d Dv %d%s: error %.2e", op_name(node.op), t->B, t->T,
              t->H, t->Hk, t->Dk, t->Dv, t->docs ? " documents" : "", rel);
        printf("%s %-15s B %d T %3d H %d Hk %d Dk %d Dv %3d%s: max |gpu - cpu| / max |cpu| = %.2e\n",
               rc == 0 && rel <= 1e-5 ? "ok  " : "FAIL", op_name(node.op), t->B, t->T, t->H, t->Hk, t->Dk, t->Dv,
               t->docs ? " documents" : "", rel);
        for (int i = 0; i < nops; i++) free(a[i]);
        free(seg), free(ref), free(gpu), free(ws);
    }
}

// scan.cuh with NVRTC for sm_80 and sm_90: every entry point present, none spilling.
static void check_nvrtc(void) {
    char *src = source();
    const char *archs[] = {"sm_80", "sm_90"};
    for (int a = 0; src && a < 2; a++) {
        CudaBinary bin;
        char err[8192], *info = NULL, fn[128] = "?";
        if (nvrtc_compile_report(src, "scan.cu", archs[a], &bin, &info, err, sizeof err) != 0) {
            FAIL("scan.cuh does not compile with NVRTC for %s:\n%s", archs[a], err);
            continue;
        }
        // "ptxas info    : Function properties for NAME", then "N bytes stack
        // frame, N bytes spill stores, N bytes spill loads"; "Used N registers"
        int seen[NKERNELS] = {0}, spilling = 0, at = -1;
        for (const char *p = info; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n')) {
            size_t len = strcspn(p, "\n");
            const char *q = strstr(p, "Function properties for ");
            if (q && q < p + len) {
                snprintf(fn, sizeof fn, "%.*s", (int)(p + len - q - 24), q + 24);
                at = -1;
                for (int k = 0; k < NKERNELS; k++)
                    if (!strcmp(fn, KERNELS[k])) at = k;
                continue;
            }
            long stack, st, ld;
            int regs;
            if (at >= 0 &&
                sscanf(p + strcspn(p, "0123456789\n"),
                       "%ld bytes stack frame, %ld bytes spill stores, %ld bytes spill loads", &stack, &st, &ld) == 3) {
                seen[at] = 1;
                if (st || ld)
                    printf("FAIL %s %s: %ld bytes spill stores, %ld bytes spill loads\n", archs[a], fn, st, ld);
                spilling += st || ld;
            }
            if (at >= 0 && (q = strstr(p, "Used ")) && q < p + len && sscanf(q, "Used %d registers", &regs) == 1)
                printf("  %s %-24s %3d registers\n", archs[a], fn, regs);
        }
        int n = 0;
        for (int k = 0; k < NKERNELS; k++) n += seen[k];
        printf("scan.cuh: NVRTC %s %s, %d of %d entry points, %d spilling (%.1f s)\n", archs[a],
               n == NKERNELS && !spilling ? "ok" : "FAIL", n, NKERNELS, spilling, bin.seconds);
        if (n != NKERNELS || spilling) check_failures++;
        free(info);
        nvrtc_binary_free(&bin);
    }
    free(src);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: scan_check CXX EMU_DIR WORK_DIR\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    LaunchFn fn = build(argv[1], argv[2], argv[3]);
    if (!fn) return 1;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(fn, &CASES[i]);
    check_nvrtc();
    printf("%s\n", check_failures ? "FAILED" : "ok");
    return check_summary("scan_check");
}
