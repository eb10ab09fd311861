// emu_check: mtc's generated CUDA C run on the CPU emulation of CUDA
// (tests/emu/cuda_emu.h), checked as tests/gpu/gpu_check checks it on a GPU,
// with the same tolerances. No GPU; NVRTC only to compile the tensor-core
// wrappers.
//
//   emu_check CXX EMU_DIR WORK_DIR            (0 and 1 below)
//   emu_check CXX EMU_DIR WORK_DIR [--seq N] [--vocab N] MODEL.mt...  (2 below)
//
// 0. The tensor-core and cp.async wrappers of compiler/emit/cuda/mma.cuh, over
//    every lane's fragment (tests/emu/mma_test.cuh), against a plain matrix
//    product and the PTX ISA's layouts; the same kernels compile with NVRTC
//    for sm_80 and sm_90.
// 1. Flash attention (compiler/emit/cuda/attention.cuh) against its plain
//    reference (attention_ref.cuh), both run on the emulation: forward y,
//    backward dq, dk, dv on random inputs; causal and not, grouped-query,
//    head sizes 16, 64, 128, lengths no multiple of the tiles, f32 (relative
//    error 2e-4) and bf16 storage (3e-2), the backward recomputing lse and
//    taking the forward's. Then the tensor-core version (attention_tc.cuh:
//    bf16; D 64, 128 and 256, value heads of their own width, documents;
//    GQA 1, 4, 8): the same, judged as FlashAttention's tests judge a bf16
//    kernel (attention_host.h: at most 2 times plain bf16 attention's error
//    against attention in double; host_attention, in double, also the
//    reference where attention_ref.cuh has no such option). Both also with
//    window, scale and softcap, and with sinks (gpt-oss's, against
//    host_attention; the backward given the forward's y and lse); every lse
//    within 1e-3 of a computation in double.
// 2. Each model's translation unit as cuda_emit writes it (the model's own
//    batch and seq, or batch 1 at --seq N with the vocabulary capped at
//    --vocab N; its own storage, f32 or bf16; f64 arithmetic kept in
//    double): every fused expression kernel launched with random inputs and
//    compared with the kernel IR interpreter (tests/kir_eval.c; relative
//    error 1e-4 for f32 outputs, 1e-2 for bf16 ones).
// Each translation unit is compiled with CXX into WORK_DIR/NAME.so and loaded
// with dlopen. Exit status 0 only when every check passed.
//
//   emu_check CXX EMU_DIR WORK_DIR --plans MODEL.mt...   (3: check_plans)
//   emu_check --nvrtc [DIR]
//
// compiles the tensor-core attention (compiler/emit/cuda/attention_tc.cuh), every
// variant a plan can instantiate, with NVRTC for sm_80 and sm_90 instead,
// and fails on any register spill ptxas reports; with DIR, writes the sm_90
// cubin of every attention kernel a plan can run for bench/sass_table.py.
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bf16.h"
#include "common/io.h"
#include "common/attention.h"
#include "compiler/emit/cuda/sources.h"
#include "compiler/emit/emit_cuda.h"
#include "common/graph.h"
#include "compiler/emit/nvrtc.h"
#include "compiler/compile.h"
#include "tests/kir_eval.h"
#include "tests/emu/attention_host.h"
#include "tests/check.h"

typedef int (*LaunchFn)(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                        void **args);

static const char *cxx, *emu_dir, *work_dir;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { // uniform in [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
// max |a - b| / max(|b|, floor) over n values
static double max_rel(const float *a, const float *b, size_t n, double floor) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), floor);
        if (!(d <= m) && m == m) m = d; // NaN sticks
    }
    return m;
}
// The same over the first `width` elements of each of n / stride rows.
static double max_rel_rows(const float *a, const float *b, size_t n, size_t stride, size_t width, double floor) {
    double m = 0;
    for (size_t r = 0; r + stride <= n; r += stride) {
        double d = max_rel(a + r, b + r, width, floor);
        if (!(d <= m) && m == m) m = d; // NaN sticks
    }
    return m;
}
static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Compiles the translation unit `text` for the emulation, with a kernel
// table of `names`, into WORK_DIR/NAME.so; returns its mt_emu_launch, or NULL
// after a message. The one rewrite: `extern __shared__` becomes `extern`
// (cuda_emu.h's mt_smem).
static LaunchFn build(const char *name, const char *text, char (*names)[96], int nnames) {
    char cu[1024], so[1024], cmd[4096];
    snprintf(cu, sizeof cu, "%s/%s.cu", work_dir, name);
    snprintf(so, sizeof so, "%s/%s.so", work_dir, name);
    FILE *f = fopen(cu, "w");
    if (!f) {
        printf("FAIL cannot write %s\n", cu);
        return NULL;
    }
    fprintf(f, "#include \"cuda_emu.h\"\n");
    const char *key = "extern __shared__", *p = text, *hit;
    while ((hit = strstr(p, key))) {
        fwrite(p, 1, (size_t)(hit - p), f);
        fputs("extern", f);
        p = hit + strlen(key);
    }
    fputs(p, f);
    fprintf(f, "\nMT_EMU_KERNELS_BEGIN\n");
    for (int i = 0; i < nnames; i++) fprintf(f, "MT_EMU_KERNEL(%s)\n", names[i]);
    fprintf(f, "MT_EMU_KERNELS_END\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s -x c++ -std=c++17 -O1 -fPIC -shared -w -I'%s' '%s' -o '%s'", cxx, emu_dir, cu, so);
    double t0 = seconds();
    if (system(cmd) != 0) {
        printf("FAIL %s does not compile for the emulation: %s\n", name, cmd);
        return NULL;
    }
    printf("%s: compiled for the emulation in %.1f s\n", name, seconds() - t0);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    LaunchFn fn = h ? (LaunchFn)(uintptr_t)dlsym(h, "mt_emu_launch") : NULL;
    if (!fn) printf("FAIL cannot load %s: %s\n", so, dlerror());
    return fn;
}

static void launch(LaunchFn fn, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                   void **args) {
    int rc = fn(name, gx, gy, gz, block, smem, args);
    if (rc != 0) { FAIL("launch of %s: %s", name, rc == -2 ? "not in the kernel table" : "bad geometry"); }
}

// ---------------------------------------------------------------- 1. attention

typedef struct AttnCase {
    int B, T, H, KVH, D, causal, bf16;
    int tc;             // attention_tc.cuh (bf16, D 64, 128, 192, 256) instead of attention.cuh
    int window;         // 0: none
    double scale;       // 0: 1/sqrt(D)
    double softcap;     // 0: none
    int group_only;     // run and compare the first kv head's group only (a plan's many heads)
    const char *symbol; // the entry points' NAME (a plan's CudaKernelInfo.symbol); NULL: attn_variant_name
    int Dv;             // tensor cores: the value heads' width; 0: D
    int doc_len;        // tensor cores: documents of lengths doc_len, doc_len + 7, doc_len + 14, ... (seg); 0: none
    int chunk;          // chunked attention (MT_ATTN_*INSTANTIATE_CHUNK), against host_attention with documents
                        // of chunk positions, which it equals when causal; 0: none
    int sinks;          // a sink logit a head (gpt-oss's, in [-1, 3): as large as the scores and larger), against
                        // host_attention; the backward takes the forward's y and lse, which include it; 0: none
} AttnCase;

// attention.cuh: f32 and bf16, head sizes 16, 64, 128
static const AttnCase CASES[] = {
    {1, 1, 1, 1, 16, 1, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {2, 37, 4, 2, 16, 1, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {2, 37, 4, 2, 16, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 100, 8, 2, 64, 1, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 70, 4, 4, 64, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 67, 4, 1, 128, 1, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 40, 2, 2, 128, 0, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 77, 4, 2, 64, 1, 1, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 50, 4, 2, 128, 1, 1, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    // the options: windows shorter and longer than a tile (32 keys), an own
    // scale, soft-capping (a cap near the scores' size, so tanh bends them)
    {1, 100, 4, 2, 16, 1, 0, 0, 9, 0, 0, 0, NULL, 0, 0, 0, 0},
    {2, 90, 4, 1, 64, 1, 0, 0, 40, 0.3, 0.5, 0, NULL, 0, 0, 0, 0},
    {1, 70, 2, 2, 16, 0, 0, 0, 0, 0.2, 0.4, 0, NULL, 0, 0, 0, 0},
    {1, 77, 4, 2, 64, 1, 1, 0, 20, 0, 0.6, 0, NULL, 0, 0, 0, 0},
    // chunks (Llama 4's) of 48 (no multiple of a tile) and 16 (under one)
    {1, 100, 4, 2, 64, 1, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 48, 0},
    {2, 77, 4, 1, 16, 1, 1, 0, 0, 0, 0, 0, NULL, 0, 0, 16, 0},
    // sinks (gpt-oss's) at 13, 70 and 200 positions (over a 128-key block and no multiple of one), f32 and bf16,
    // full, causal and with a window
    {1, 13, 4, 2, 64, 1, 0, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 1},
    {1, 70, 4, 2, 64, 0, 1, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 1},
    {1, 200, 4, 1, 16, 1, 0, 0, 48, 0, 0, 0, NULL, 0, 0, 0, 1},
};
// attention_tc.cuh: GQA 1, 4, 8; D 64, 128; causal and not; lengths no
// multiple of 16 or 64; then the options, windows shorter and longer than a
// tile (64 keys) and softcaps that bend the scores
static const AttnCase TC_CASES[] = {
    {1, 77, 4, 4, 64, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {2, 50, 4, 1, 64, 0, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 70, 8, 1, 64, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 45, 8, 2, 128, 0, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 35, 8, 1, 128, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 66, 4, 4, 128, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 1, 4, 1, 64, 0, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 200, 4, 1, 64, 1, 1, 1, 30, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 150, 4, 2, 128, 1, 1, 1, 100, 0.15, 0.5, 0, NULL, 0, 0, 0, 0},
    {1, 90, 4, 4, 64, 0, 1, 1, 0, 0.2, 0.3, 0, NULL, 0, 0, 0, 0},
    {1, 130, 4, 1, 128, 1, 1, 1, 70, 0, 0.7, 0, NULL, 0, 0, 0, 0},
    // head size 256, value heads of their own width (DeepSeek's 192/128, and
    // wider than the keys), documents (packed rows: seg), against the host's
    // reference in double (host_attention)
    {1, 77, 4, 2, 256, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 0},
    {1, 45, 2, 1, 256, 0, 1, 1, 0, 0.05, 0.6, 0, NULL, 0, 0, 0, 0},
    {1, 70, 4, 1, 192, 1, 1, 1, 0, 0, 0, 0, NULL, 128, 0, 0, 0},
    {1, 40, 2, 2, 64, 0, 1, 1, 0, 0, 0, 0, NULL, 128, 0, 0, 0},
    {2, 150, 4, 2, 64, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 20, 0, 0},
    {1, 100, 4, 4, 128, 0, 1, 1, 0, 0, 0, 0, NULL, 0, 30, 0, 0},
    {1, 130, 4, 1, 64, 1, 1, 1, 40, 0, 0.5, 0, NULL, 0, 9, 0, 0},
    // chunks (Llama 4's): 48 (no multiple of the 64-key tile), 16 (a quarter of one), 40 with a window of 30
    {1, 200, 4, 1, 64, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 48, 0},
    {2, 90, 4, 2, 128, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 16, 0},
    {1, 150, 4, 4, 64, 1, 1, 1, 30, 0, 0, 0, NULL, 0, 0, 40, 0},
    // every head size with each option (issue 36: FlashAttention's test for every kernel a plan can run):
    // D 128 and 256 with window, soft-cap and documents; 256 full with documents; 192/128 full, and causal
    // with all three
    {2, 100, 8, 2, 128, 1, 1, 1, 40, 0, 0.5, 0, NULL, 0, 12, 0, 0},
    {1, 150, 4, 2, 256, 1, 1, 1, 70, 0, 0.5, 0, NULL, 0, 25, 0, 0},
    {1, 90, 4, 1, 256, 0, 1, 1, 0, 0, 0, 0, NULL, 0, 20, 0, 0},
    {1, 100, 4, 2, 192, 0, 1, 1, 0, 0, 0, 0, NULL, 128, 0, 0, 0},
    {1, 130, 4, 4, 192, 1, 1, 1, 50, 0, 0.6, 0, NULL, 128, 15, 0, 0},
    // sinks (gpt-oss's: D 64, windows) at 13, 70 and 200 positions, full and causal, a window, documents
    {1, 13, 4, 2, 64, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 1},
    {1, 70, 8, 1, 64, 0, 1, 1, 0, 0, 0, 0, NULL, 0, 0, 0, 1},
    {1, 200, 4, 2, 64, 1, 1, 1, 48, 0, 0, 0, NULL, 0, 0, 0, 1},
    {1, 200, 4, 1, 128, 1, 1, 1, 0, 0, 0, 0, NULL, 0, 30, 0, 1},
};
enum { NCASES = sizeof CASES / sizeof CASES[0], NTC = sizeof TC_CASES / sizeof TC_CASES[0] };

static double case_scale(const AttnCase *c) { return c->scale > 0 ? c->scale : 1 / sqrt((double)c->D); }
static char *case_name(char *buf, size_t cap, const AttnCase *c) {
    if (c->symbol) {
        snprintf(buf, cap, "%s", c->symbol);
        return buf;
    }
    return attn_variant_name_chunk(buf, cap, c->bf16, c->D, c->Dv ? c->Dv : c->D, c->causal, c->window, c->chunk,
                                   case_scale(c), c->softcap);
}
// The instantiation of case c's variant, appended at src + n; returns the new length.
static int case_instantiate(char *src, size_t cap, int n, const AttnCase *c) {
    char name[64];
    case_name(name, sizeof name, c);
    if (c->tc)
        return n + snprintf(src + n, cap - (size_t)n,
                            "MT_ATTN_TC_INSTANTIATE_CHUNK(%d, %d, %s, %.9ef, %.9ef, %d, %d, %s)\n", c->D,
                            c->Dv ? c->Dv : c->D, c->causal ? "true" : "false", (double)(float)case_scale(c),
                            (double)(float)c->softcap, c->window, c->chunk, name);
    return n + snprintf(src + n, cap - (size_t)n, "MT_ATTN_INSTANTIATE_CHUNK(%s, %d, %s, %.9ef, %.9ef, %d, %d, %s)\n",
                        c->bf16 ? "bf16" : "float", c->D, c->causal ? "true" : "false", (double)(float)case_scale(c),
                        (double)(float)c->softcap, c->window, c->chunk, name);
}

// The storage-typed copy of n floats: themselves, or bf16.
static void *storage(const float *x, long n, int bf16) {
    if (!bf16) {
        float *o = malloc(4 * (size_t)n + 4);
        memcpy(o, x, 4 * (size_t)n);
        return o;
    }
    uint16_t *o = malloc(2 * (size_t)n + 2);
    for (long i = 0; i < n; i++) o[i] = bf16_from_f32(x[i]);
    return o;
}
static float *poisoned(size_t bytes) { // NaN everywhere: an element nobody writes shows
    float *p = malloc(bytes + 4);
    memset(p, 0xff, bytes + 4);
    return p;
}

// Flash forward and backward (case c's template) and the plain reference on
// random inputs: the worst relative error of y, dq, dk, dv, each in
// err[0..3], and in err[4] that of lse against a host computation in double;
// returns the worst of err[0..3]. Cases with value heads of their own width
// or documents take host_attention as the reference.
static double attn_case(LaunchFn fn, const AttnCase *c, double err[10]) {
    const int Dv = c->Dv ? c->Dv : c->D, host = c->Dv || c->doc_len || c->chunk || c->sinks;
    long nq = (long)c->B * c->T * c->H * c->D, nk = (long)c->B * c->T * c->KVH * c->D;
    long ny = (long)c->B * c->T * c->H * Dv, nv = (long)c->B * c->T * c->KVH * Dv;
    long nrow = (long)c->B * c->H * c->T;
    size_t es = c->bf16 ? 2 : 4;
    float *q = malloc(4 * (size_t)nq), *k = malloc(4 * (size_t)nk), *v = malloc(4 * (size_t)nv),
          *dy = malloc(4 * (size_t)ny);
    for (long i = 0; i < nq; i++) q[i] = frand();
    for (long i = 0; i < ny; i++) dy[i] = frand();
    for (long i = 0; i < nk; i++) k[i] = frand();
    for (long i = 0; i < nv; i++) v[i] = frand();
    float *sk = NULL; // (H) sinks
    if (c->sinks) {
        sk = malloc(4 * (size_t)c->H);
        for (int h = 0; h < c->H; h++) sk[h] = bf16_round(1 + 2 * frand()); // what a bf16 kernel reads, f32 too
    }
    if (c->bf16) { // the reference sees exactly what the bf16 kernel reads
        for (long i = 0; i < nq; i++) q[i] = bf16_round(q[i]);
        for (long i = 0; i < ny; i++) dy[i] = bf16_round(dy[i]);
        for (long i = 0; i < nk; i++) k[i] = bf16_round(k[i]);
        for (long i = 0; i < nv; i++) v[i] = bf16_round(v[i]);
    }
    // documents: row b's lengths doc_len + 7 (b + i) for i = 0, 1, ...
    int *seg = NULL;
    if (c->doc_len) {
        seg = malloc(4 * (size_t)c->B * (size_t)c->T);
        for (int b = 0; b < c->B; b++)
            for (int t = 0, start = 0, i = 0; t < c->T; t++) {
                if (t - start == c->doc_len + 7 * (b + i)) start = t, i++;
                seg[b * c->T + t] = start;
            }
    }
    if (c->chunk) { // the reference's documents: each position's chunk (the kernel takes none)
        seg = malloc(4 * (size_t)c->B * (size_t)c->T);
        for (int i = 0; i < c->B * c->T; i++) seg[i] = i % c->T / c->chunk * c->chunk;
    }
    void *Q = storage(q, nq, c->bf16), *K = storage(k, nk, c->bf16), *V = storage(v, nv, c->bf16),
         *DY = storage(dy, ny, c->bf16), *SEG = c->chunk ? NULL : seg, *SK = sk ? storage(sk, c->H, c->bf16) : NULL;
    void *Y = poisoned(es * (size_t)ny), *DQ = poisoned(es * (size_t)nq), *DK = poisoned(es * (size_t)nk),
         *DV = poisoned(es * (size_t)nv);
    float *LSE = poisoned(4 * (size_t)nrow), *WS = poisoned(attn_workspace_bytes(c->B, c->T, c->H));
    float *P = poisoned(4 * (size_t)nrow * c->T), *C = poisoned(4 * (size_t)nrow * c->T),
          *DS = poisoned(4 * (size_t)nrow * c->T), *hL = poisoned(4 * (size_t)nrow);
    float *rY = poisoned(4 * (size_t)ny), *rDQ = poisoned(4 * (size_t)nq), *rDK = poisoned(4 * (size_t)nk),
          *rDV = poisoned(4 * (size_t)nv);

    char name[64], sym[3][96];
    case_name(name, sizeof name, c);
    const char *pre = c->tc ? "mt_attn_tc" : "mt_attn";
    snprintf(sym[0], sizeof sym[0], "%s_fwd_%s", pre, name);
    snprintf(sym[1], sizeof sym[1], "%s_bwd_dq_%s", pre, name);
    snprintf(sym[2], sizeof sym[2], "%s_bwd_dkdv_%s", pre, name);
    void *nul = NULL;
    int T = c->T, H = c->H, KVH = c->KVH, B = c->B, D = c->D, causal = c->causal, window = c->window;
    double scale = case_scale(c), softcap = c->softcap;
    int bq = c->tc ? ATTN_TC_BQ : ATTN_BQ, bk = c->tc ? attn_tc_bk_dkdv(D, Dv) : ATTN_BK;
    unsigned gq = (unsigned)((T + bq - 1) / bq), gk = (unsigned)((T + bk - 1) / bk);
    unsigned threads = c->tc ? ATTN_TC_THREADS : ATTN_THREADS;
    // group_only: query heads 0 .. H/KVH - 1 and kv head 0 (dkdv reads dq's workspace of the whole group)
    const int hq = c->group_only ? H / KVH : H, hk = c->group_only ? 1 : KVH;
    // odd lengths and sinks: the backward takes the forward's y and lse instead of recomputing them
    void **ysaved = T % 2 || sk ? &Y : &nul, **lsaved = T % 2 || sk ? (void **)&LSE : &nul;
    void *a_fwd[] = {&Y, &LSE, &Q, &K, &V, &T, &H, &KVH, &nul, &SK}, // sinks last (NULL: none)
         *a_fwd_tc[] = {&Y, &LSE, &Q, &K, &V, &SEG, &T, &H, &KVH, &SK};
    void *a_dq[] = {&DQ, &WS, &DY, &Q, &K, &V, ysaved, lsaved, &T, &H, &KVH, &nul};
    void *a_dq_tc[] = {&DQ, &WS, &DY, &Q, &K, &V, ysaved, lsaved, &SEG, &T, &H, &KVH};
    void *a_dkdv[] = {&DK, &DV, &WS, &DY, &Q, &K, &V, &T, &H, &KVH, &nul};
    void *a_dkdv_tc[] = {&DK, &DV, &WS, &DY, &Q, &K, &V, &SEG, &T, &H, &KVH};
    launch(fn, sym[0], gq, (unsigned)hq, (unsigned)B, threads, c->tc ? attn_tc_smem_fwd(D, Dv) : attn_smem_fwd(D),
           c->tc ? a_fwd_tc : a_fwd);
    launch(fn, sym[1], gq, (unsigned)hq, (unsigned)B, threads, c->tc ? attn_tc_smem_dq(D, Dv) : attn_smem_dq(D),
           c->tc ? a_dq_tc : a_dq);
    launch(fn, sym[2], gk, (unsigned)hk, (unsigned)B, threads, c->tc ? attn_tc_smem_dkdv(D, Dv) : attn_smem_dkdv(D),
           c->tc ? a_dkdv_tc : a_dkdv);
    if (host)
        host_attention(rY, hL, rDQ, rDK, rDV, q, k, v, dy, seg, sk, B, T, H, KVH, D, Dv, causal, window, scale, softcap,
                       0);
    else {
        void *r_probs[] = {&P, &C, &q, &k, &B, &T, &H, &KVH, &D, &causal, &window, &scale, &softcap};
        void *r_fwd[] = {&rY, &P, &v, &B, &T, &H, &KVH, &D};
        void *r_ds[] = {&DS, &P, &C, &dy, &v, &B, &T, &H, &KVH, &D};
        void *r_dq[] = {&rDQ, &DS, &k, &B, &T, &H, &KVH, &D, &scale};
        void *r_dkdv[] = {&rDK, &rDV, &P, &DS, &q, &dy, &B, &T, &H, &KVH, &D, &scale};
        unsigned rb = 128;
        launch(fn, "mt_ref_attn_probs", (unsigned)((nrow + rb - 1) / rb), 1, 1, rb, 0, r_probs);
        launch(fn, "mt_ref_attn_fwd", (unsigned)((nq + rb - 1) / rb), 1, 1, rb, 0, r_fwd);
        launch(fn, "mt_ref_attn_ds", (unsigned)((nrow + rb - 1) / rb), 1, 1, rb, 0, r_ds);
        launch(fn, "mt_ref_attn_dq", (unsigned)((nq + rb - 1) / rb), 1, 1, rb, 0, r_dq);
        launch(fn, "mt_ref_attn_dkdv", (unsigned)((nk + rb - 1) / rb), 1, 1, rb, 0, r_dkdv);
    }

    // compare in fp32 (bf16 outputs widened)
    double worst = 0;
    void *got[4] = {Y, DQ, DK, DV};
    float *want[4] = {rY, rDQ, rDK, rDV}, *a = malloc(4 * (size_t)(nq > ny ? nq : ny));
    long cnt[4] = {ny, nq, nk, nv};
    int width_of[4] = {Dv, D, D, Dv};
    for (int i = 0; i < 4; i++) {
        if (c->bf16)
            for (long j = 0; j < cnt[i]; j++) a[j] = f32_from_bf16(((uint16_t *)got[i])[j]);
        else memcpy(a, got[i], 4 * (size_t)cnt[i]);
        size_t stride = (size_t)(i < 2 ? H : KVH) * (size_t)width_of[i],
               width = (size_t)(i < 2 ? hq : hk) * (size_t)width_of[i];
        err[i] = max_rel_rows(a, want[i], (size_t)cnt[i], stride, width, 1e-1);
        if (!(err[i] <= worst) && worst == worst) worst = err[i];
    }
    // lse = log sum_j exp(score(q, k_j)) over the visible keys, as runtime/backend/kernels.inc
    double le = 0;
    double *sc = malloc(8 * (size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < hq; h++)
            for (int t = 0; t < T; t++) {
                const float *qr = q + ((long)(b * T + t) * H + h) * D;
                double mx = -INFINITY, sum = 0;
                int nj = causal ? t + 1 : T, j0 = window && t + 1 > window ? t + 1 - window : 0;
                for (int j = j0; j < nj && !host; j++) {
                    const float *kr = k + ((long)(b * T + j) * KVH + h / (H / KVH)) * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
                    sc[j] = dot * scale;
                    if (softcap > 0) sc[j] = softcap * tanh(sc[j] / softcap);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = j0; j < nj && !host; j++) sum += exp(sc[j] - mx);
                double want_l = host ? hL[((long)b * H + h) * T + t] : mx + log(sum),
                       got_l = LSE[((long)b * H + h) * T + t];
                double d = fabs(got_l - want_l) / fmax(fabs(want_l), 1e-1);
                if (!(d <= le) && le == le) le = d;
            }
    err[4] = le;
    // tensor cores, as FlashAttention's tests judge a kernel (attention_host.h): err[5..8] each output's
    // largest error against the reference in double over plain bf16 attention's; err[9] plain bf16's
    // own elementwise error of dv (the measure above)
    for (int i = 5; i < 10; i++) err[i] = 0;
    if (c->tc) {
        const float *outs[4];
        float *wide = malloc(4 * (size_t)(ny + nq + nk + nv));
        long off = 0;
        for (int i = 0; i < 4; i++) {
            for (long j = 0; j < cnt[i]; j++) wide[off + j] = f32_from_bf16(((uint16_t *)got[i])[j]);
            outs[i] = wide + off, off += cnt[i];
        }
        AttnHostCase hc = {B, T, H, KVH, D, Dv, causal, window, scale, softcap, seg, hq, hk, sk};
        attn_fair_ratios(&hc, outs, q, k, v, dy, err + 5, &err[9]);
        free(wide);
    }
    void *all[] = {sc, a, q, k, v, dy, Q, K, V, DY, Y, DQ, DK, DV, LSE, WS, P, C, DS, hL, rY, rDQ, rDK, rDV, seg, sk, SK};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    return worst;
}

// Whether a case passes: lse within 1e-3 always; the fp32 kernel's outputs
// within 2e-4 (f32) or 3e-2 (bf16) of the reference elementwise (|a - b| /
// max(|b|, 0.1)); the tensor-core kernel's, as FlashAttention's tests judge
// theirs (attn_fair_ratios), at most 2 times plain bf16 attention's error.
// Plain bf16 P^T for dv fails the elementwise measure (plain bf16 attention
// itself does, by as much: err[9]): the values near 0 it divides by 0.1.
static int attn_case_ok(const AttnCase *c, double e, const double err[10]) {
    if (!(err[4] <= 1e-3)) return 0;
    if (!c->tc) return e <= (c->bf16 ? 3e-2 : 2e-4);
    for (int i = 5; i < 9; i++)
        if (!(err[i] <= 2.0)) return 0;
    return 1;
}

static void check_attention(void) {
    // one translation unit: prelude, templates, reference, every variant used here
    size_t cap = mt_cuda_prelude_len + mt_cuda_attention_len + mt_cuda_attention_ref_len + mt_cuda_mma_len +
                 mt_cuda_attention_tc_len + 16384;
    char *src = malloc(cap);
    int n = snprintf(src, cap, "%s\n%s\n%s\n%s\n%s\n", mt_cuda_prelude, mt_cuda_attention, mt_cuda_attention_ref,
                     mt_cuda_mma, mt_cuda_attention_tc);
    char names[3 * (NCASES + NTC) + 5][96], seen[NCASES + NTC][80];
    int nnames = 0, nseen = 0;
    const char *refs[] = {"mt_ref_attn_probs", "mt_ref_attn_fwd", "mt_ref_attn_ds", "mt_ref_attn_dq",
                          "mt_ref_attn_dkdv"};
    for (int i = 0; i < 5; i++) snprintf(names[nnames++], 96, "%s", refs[i]);
    // MT_EMU_ATTN_FROM=N (while iterating on a kernel): only cases N and later
    const int from = getenv("MT_EMU_ATTN_FROM") ? atoi(getenv("MT_EMU_ATTN_FROM")) : 0;
    for (int i = from; i < NCASES + NTC; i++) {
        const AttnCase *c = i < NCASES ? &CASES[i] : &TC_CASES[i - NCASES];
        char name[64], key[80];
        case_name(name, sizeof name, c);
        snprintf(key, sizeof key, "%s%s", c->tc ? "tc_" : "", name);
        int dup = 0;
        for (int j = 0; j < nseen; j++) dup |= !strcmp(seen[j], key);
        if (dup) continue;
        snprintf(seen[nseen++], 80, "%s", key);
        n = case_instantiate(src, cap, n, c);
        const char *pre = c->tc ? "mt_attn_tc" : "mt_attn";
        snprintf(names[nnames++], 96, "%s_fwd_%s", pre, name);
        snprintf(names[nnames++], 96, "%s_bwd_dq_%s", pre, name);
        snprintf(names[nnames++], 96, "%s_bwd_dkdv_%s", pre, name);
    }
    LaunchFn fn = build("flash-attention", src, names, nnames);
    free(src);
    if (!fn) {
        check_failures++;
        return;
    }
    for (int i = from; i < NCASES + NTC; i++) {
        const AttnCase *c = i < NCASES ? &CASES[i] : &TC_CASES[i - NCASES];
        double err[10], t0 = seconds(), e = attn_case(fn, c, err);
        char what[128], opts[64] = "";
        if (c->window || c->scale > 0 || c->softcap > 0)
            snprintf(opts, sizeof opts, " window %d scale %g softcap %g", c->window, case_scale(c), c->softcap);
        if (c->Dv || c->doc_len)
            snprintf(opts + strlen(opts), sizeof opts - strlen(opts), " Dv %d documents from %d", c->Dv ? c->Dv : c->D,
                     c->doc_len);
        if (c->chunk) snprintf(opts + strlen(opts), sizeof opts - strlen(opts), " chunk %d", c->chunk);
        if (c->sinks) snprintf(opts + strlen(opts), sizeof opts - strlen(opts), " sinks");
        snprintf(what, sizeof what, "%sattention B%d T%d H%d/%d D%d %s %s%s", c->tc ? "tensor-core " : "", c->B, c->T,
                 c->H, c->KVH, c->D, c->causal ? "causal" : "full", c->bf16 ? "bf16" : "f32", opts);
        int ok = attn_case_ok(c, e, err);
        printf("%-60s max rel err %.2e (y %.1e dq %.1e dk %.1e dv %.1e lse %.1e) %s (%.1f s)\n", what, e, err[0],
               err[1], err[2], err[3], err[4], ok ? "ok" : "FAIL", seconds() - t0);
        if (c->tc)
            printf("%-60s max abs err / plain bf16's: y %.2f dq %.2f dk %.2f dv %.2f (plain bf16's dv %.1e)\n", "",
                   err[5], err[6], err[7], err[8], err[9]);
        if (!ok) check_failures++;
    }
}

// ---------------------------------------------------------------- 0. tensor-core wrappers

enum { MMA_WARPS = 6 }; // three blocks of two warps

// compiler/emit/cuda/mma.cuh's wrappers driven over every lane by
// tests/emu/mma_test.cuh: mma against a plain product in double (relative
// error 1e-6: one fp32 rounding), ldmatrix (after cp.async) bit for bit
// against the PTX ISA's layouts. The same translation unit must compile with
// NVRTC for sm_80 and sm_90, warnings included.
// cvt.rn.bf16x2.f32 as emulated (mt_cvt_bf16x2) against common/bf16.h's
// round to nearest even, bit for bit: random values, exact ties (the low 16
// bits 0x8000 over even and odd bf16), values that round up into the next
// binade and to infinity, zeros, infinities, subnormals.
static void check_cvt(LaunchFn fn) {
    enum { N = 4096 };
    uint32_t bits[N];
    const uint32_t fixed[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3f7fffffu, 0x7f7fffffu,
                              0x7f7f8000u, 0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x00008000u,
                              0x00018000u, 0x0000ffffu, 0x3f80ffffu, 0x3f807fffu};
    const int nfixed = (int)(sizeof fixed / sizeof fixed[0]);
    for (int i = 0; i < N; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        bits[i] = i < nfixed ? fixed[i] : (uint32_t)(rng >> 16);
        if (i >= nfixed && (bits[i] & 0x7f800000u) == 0x7f800000u)
            bits[i] &= 0xbfffffffu;                                                 // no NaN: bf16.h keeps payloads
        if (i >= nfixed && i % 4 == 0) bits[i] = (bits[i] & 0xffff0000u) | 0x8000u; // ties
    }
    float *x = malloc(4 * N);
    memcpy(x, bits, 4 * N);
    uint32_t *out = (uint32_t *)poisoned(4 * N / 2);
    int n = N;
    void *a[] = {&out, &x, &n};
    launch(fn, "mt_test_cvt", N / 2 / 64, 1, 1, 64, 0, a);
    int bad = 0;
    for (int i = 0; i < N / 2; i++)
        bad += out[i] != ((uint32_t)bf16_from_f32(x[2 * i]) | (uint32_t)bf16_from_f32(x[2 * i + 1]) << 16);
    printf("cvt.rn.bf16x2.f32, %d values (ties, overflow, subnormals): %d pairs off round-to-nearest-even %s\n", N, bad,
           bad ? "FAIL" : "ok");
    check_failures += bad != 0;
    free(x), free(out);
}

static void check_mma(void) {
    char path[1024], *test;
    size_t tlen;
    snprintf(path, sizeof path, "%s/mma_test.cuh", emu_dir);
    if (io_read_file(path, &test, &tlen) != 0) {
        FAIL("cannot read %s", path);
        return;
    }
    size_t cap = mt_cuda_prelude_len + mt_cuda_mma_len + tlen + 16;
    char *src = malloc(cap);
    snprintf(src, cap, "%s\n%s\n%s\n", mt_cuda_prelude, mt_cuda_mma, test);
    free(test);
    const char *archs[] = {"sm_80", "sm_90"};
    for (int i = 0; i < 2; i++) {
        CudaBinary bin;
        char err[8192];
        if (nvrtc_compile(src, "mma_test.cu", archs[i], NULL, 0, &bin, err, sizeof err) != 0) {
            FAIL("the tensor-core wrappers do not compile with NVRTC for %s:\n%s", archs[i], err);
        } else {
            printf("tensor-core wrappers: NVRTC %s ok (%.1f s)\n", archs[i], bin.seconds);
            nvrtc_binary_free(&bin);
        }
    }
    char names[3][96] = {"mt_test_mma", "mt_test_ldmatrix", "mt_test_cvt"};
    LaunchFn fn = build("mma-test", src, names, 3);
    free(src);
    if (!fn) {
        check_failures++;
        return;
    }
    // mma: A (w, 16, 16), B (w, 16, 8) bf16; C, D (w, 16, 8) fp32
    uint16_t *A = malloc(2 * 256 * MMA_WARPS), *B = malloc(2 * 128 * MMA_WARPS);
    float *C = malloc(4 * 128 * MMA_WARPS), *D = poisoned(4 * 128 * MMA_WARPS);
    for (int i = 0; i < 256 * MMA_WARPS; i++) A[i] = bf16_from_f32(frand());
    for (int i = 0; i < 128 * MMA_WARPS; i++) B[i] = bf16_from_f32(frand()), C[i] = frand();
    void *a_mma[] = {&D, &A, &B, &C};
    launch(fn, "mt_test_mma", MMA_WARPS / 2, 1, 1, 64, 0, a_mma);
    double worst = 0;
    for (int w = 0; w < MMA_WARPS; w++)
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++) {
                double want = C[w * 128 + r * 8 + c];
                for (int k = 0; k < 16; k++)
                    want += (double)f32_from_bf16(A[w * 256 + r * 16 + k]) * f32_from_bf16(B[w * 128 + k * 8 + c]);
                double e = fabs(D[w * 128 + r * 8 + c] - want) / fmax(fabs(want), 1e-3);
                if (!(e <= worst) && worst == worst) worst = e;
            }
    printf("mma.m16n8k16 bf16 against a plain product, %d warps: max rel err %.2e %s\n", MMA_WARPS, worst,
           worst <= 1e-6 ? "ok" : "FAIL");
    if (!(worst <= 1e-6)) check_failures++;

    // ldmatrix: M (w, 4, 8, 8) bf16 -> out (w, 32, 8) registers
    uint16_t *M = malloc(2 * 256 * MMA_WARPS);
    uint32_t *out = (uint32_t *)poisoned(4 * 256 * MMA_WARPS);
    for (int i = 0; i < 256 * MMA_WARPS; i++) M[i] = (uint16_t)(i * 2654435761u >> 7);
    void *a_ld[] = {&out, &M};
    launch(fn, "mt_test_ldmatrix", MMA_WARPS / 2, 1, 1, 64, 0, a_ld);
    int bad = 0;
    for (int w = 0; w < MMA_WARPS; w++)
        for (int l = 0; l < 32; l++)
            for (int j = 0; j < 4; j++) {
                const uint16_t *m = M + w * 256 + j * 64;
                int g = l / 4, t = l % 4;
                uint32_t plain = m[g * 8 + 2 * t] | (uint32_t)m[g * 8 + 2 * t + 1] << 16;
                uint32_t trans = m[2 * t * 8 + g] | (uint32_t)m[(2 * t + 1) * 8 + g] << 16;
                bad += out[(w * 32 + l) * 8 + j] != plain;
                bad += out[(w * 32 + l) * 8 + 4 + j] != trans;
            }
    printf("ldmatrix.x4 and .x4.trans after cp.async, %d warps: %d registers wrong %s\n", MMA_WARPS, bad,
           bad ? "FAIL" : "ok");
    check_failures += bad != 0;
    free(A), free(B), free(C), free(D), free(M), free(out);
    check_cvt(fn);
}

// The tensor-core attention kernels for the GPU: every variant a plan can
// instantiate (head sizes 64, 128, 256 and 192/128, causal and not, without options and
// with all of window, scale and softcap) compiles with NVRTC for sm_80 and
// sm_90, warnings included, and ptxas reports no spills for any of their
// entry points, forward or backward (emu_check --nvrtc; a test of its own,
// as NVRTC takes its time over them).
enum { NVRTC_TC_VARIANTS = 16, NVRTC_FALLBACK_VARIANTS = 6 };
// The tensor-core variants of check_attention_tc_nvrtc (head sizes 64, 128,
// 256 and 192/128, causal and full, with and without options), then the
// fp32 template's a plan falls back to (f32 and bf16 storage, D 64, 128,
// 256, causal, no options).
static AttnCase nvrtc_variant(int i) {
    const int heads[][2] = {{64, 64}, {128, 128}, {256, 256}, {192, 128}}; // (D, Dv)
    if (i >= NVRTC_TC_VARIANTS) {
        const int f = i - NVRTC_TC_VARIANTS;
        return (AttnCase){1, 1, 1, 1, heads[f % 3][0], 1, f / 3, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0};
    }
    const int hs = i / 4, causal = i / 2 % 2, opts = i % 2, D = heads[hs][0], Dv = heads[hs][1] != D ? heads[hs][1] : 0;
    return (AttnCase){1,
                      1,
                      1,
                      1,
                      D,
                      causal,
                      1,
                      1,
                      opts ? 4096 : 0,
                      opts ? 0.0625 : 0,
                      opts ? 50 : 0,
                      0,
                      NULL,
                      Dv,
                      0,
                      opts ? 8192 : 0,
                      0};
}

// emu_check --nvrtc DIR: the sm_90 cubin of every attention variant in
// nvrtc_variant (nvrtc_compile, as mtc calls it, through its compile cache)
// into DIR/attention_sm_90.cubin, and
// DIR/kernels.tsv: a row an entry point (symbol, template, kernel, D, Dv,
// causal, options, storage, threads, dynamic shared memory bytes), the NVRTC
// version first. bench/sass_table.py reads them.
static int write_attention_cubin(const char *dir) {
    size_t cap = mt_cuda_prelude_len + mt_cuda_attention_len + mt_cuda_mma_len + mt_cuda_attention_tc_len + 8192;
    char *src = malloc(cap), path[4096], err[8192];
    int n = snprintf(src, cap, "%s\n%s\n%s\n%s\n", mt_cuda_prelude, mt_cuda_attention, mt_cuda_mma,
                     mt_cuda_attention_tc);
    snprintf(path, sizeof path, "%s/kernels.tsv", dir);
    FILE *tsv = fopen(path, "w");
    if (!tsv) {
        fprintf(stderr, "emu_check: %s: cannot write\n", path);
        free(src);
        return 1;
    }
    fprintf(tsv, "nvrtc\t%s\n", nvrtc_version_str());
    const char *kinds[3] = {"fwd", "bwd_dq", "bwd_dkdv"};
    for (int i = 0; i < NVRTC_TC_VARIANTS + NVRTC_FALLBACK_VARIANTS; i++) {
        AttnCase c = nvrtc_variant(i);
        const int Dv = c.Dv ? c.Dv : c.D;
        char name[64];
        case_name(name, sizeof name, &c);
        n = case_instantiate(src, cap, n, &c);
        size_t smem[3] = {c.tc ? attn_tc_smem_fwd(c.D, Dv) : attn_smem_fwd(c.D),
                          c.tc ? attn_tc_smem_dq(c.D, Dv) : attn_smem_dq(c.D),
                          c.tc ? attn_tc_smem_dkdv(c.D, Dv) : attn_smem_dkdv(c.D)};
        for (int k = 0; k < 3; k++)
            fprintf(tsv, "%s_%s_%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%zu\n", c.tc ? "mt_attn_tc" : "mt_attn", kinds[k],
                    name, c.tc ? "attention_tc.cuh" : "attention.cuh", kinds[k], c.D, Dv, c.causal, c.window != 0,
                    c.bf16 ? "bf16" : "f32", c.tc ? ATTN_TC_THREADS : ATTN_THREADS, smem[k]);
    }
    CudaBinary bin;
    int rc = 0;
    if (nvrtc_compile(src, "attention.cu", "sm_90", NULL, 0, &bin, err, sizeof err) != 0) { // as mtc, cached
        fprintf(stderr, "emu_check: the attention kernels do not compile with NVRTC for sm_90:\n%s\n", err);
        rc = 1;
    } else {
        snprintf(path, sizeof path, "%s/attention_sm_90.cubin", dir);
        FILE *f = fopen(path, "wb");
        rc = !f || fwrite(bin.cubin, 1, bin.cubin_len, f) != bin.cubin_len;
        if (f && fclose(f) != 0) rc = 1;
        if (rc) fprintf(stderr, "emu_check: %s: cannot write\n", path);
        nvrtc_binary_free(&bin);
    }
    if (fclose(tsv) != 0) rc = 1;
    free(src);
    return rc;
}

static void check_attention_tc_nvrtc(void) {
    size_t cap = mt_cuda_prelude_len + mt_cuda_attention_len + mt_cuda_mma_len + mt_cuda_attention_tc_len + 4096;
    char *src = malloc(cap);
    int n = snprintf(src, cap, "%s\n%s\n%s\n%s\n", mt_cuda_prelude, mt_cuda_attention, mt_cuda_mma,
                     mt_cuda_attention_tc);
    int nvariants = 0;
    for (int i = 0; i < NVRTC_TC_VARIANTS; i++) {
        AttnCase c = nvrtc_variant(i);
        n = case_instantiate(src, cap, n, &c);
        nvariants++;
    }
    const char *archs[] = {"sm_80", "sm_90"};
    for (int i = 0; i < 2; i++) {
        CudaBinary bin;
        char err[8192], *info = NULL;
        if (nvrtc_compile_report(src, "attention_tc.cu", archs[i], &bin, &info, err, sizeof err) != 0) {
            FAIL("the tensor-core attention does not compile with NVRTC for %s:\n%s", archs[i], err);
            continue;
        }
        // "ptxas info    : Function properties for NAME" then "N bytes stack
        // frame, N bytes spill stores, N bytes spill loads"; "Used N registers"
        int entries = 0, spilling = 0;
        char fn[128] = "?";
        for (const char *p = info; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n')) {
            const char *q = strstr(p, "Function properties for ");
            size_t len = strcspn(p, "\n");
            if (q && q < p + len) {
                snprintf(fn, sizeof fn, "%.*s", (int)(p + len - q - 24), q + 24);
                continue;
            }
            long stack, st, ld;
            if (sscanf(p + strcspn(p, "0123456789\n"),
                       "%ld bytes stack frame, %ld bytes spill stores, %ld bytes spill loads", &stack, &st, &ld) == 3) {
                if (strncmp(fn, "mt_attn_tc_", 11) != 0) continue;
                entries++;
                if (st || ld)
                    printf("FAIL %s %s: %ld bytes spill stores, %ld bytes spill loads\n", archs[i], fn, st, ld);
                spilling += st || ld;
            }
            int regs;
            if ((q = strstr(p, "Used ")) && q < p + len && sscanf(q, "Used %d registers", &regs) == 1 &&
                !strncmp(fn, "mt_attn_tc_", 11))
                printf("  %s %-60s %3d registers\n", archs[i], fn, regs);
        }
        int ok = entries == 3 * nvariants && !spilling;
        printf("tensor-core attention, %d variants (D 64, 128, 256 and 192/128, causal and full, with and without "
               "options): NVRTC %s "
               "%s, %d entry points, %d spilling (%.1f s)\n",
               nvariants, archs[i], ok ? "ok" : "FAIL", entries, spilling, bin.seconds);
        if (!ok) check_failures++;
        free(info);
        nvrtc_binary_free(&bin);
    }
    free(src);
}

// ---------------------------------------------------------------- 3. the attention of plans

// Each model's attention as a plan instantiates it (cuda_emit with bf16
// storage, as the plan's kernels for a GPU: the tensor-core template at head
// sizes 64 and 128, the fp32 one otherwise, the model's window, scale and
// softcap baked in), at batch 1 and seq PLAN_T, run on the emulation
// against the plain reference: the first kv head's group, each variant once.
enum { PLAN_T = 70, MAX_PLAN_CASES = 64 };
static void check_plans(char **paths, int npaths) {
    AttnCase cases[MAX_PLAN_CASES];
    char syms[MAX_PLAN_CASES][64], *lines = calloc(1, 1 << 16);
    const char *from[MAX_PLAN_CASES];
    int ncases = 0;
    size_t nlines = 0;
    for (int m = 0; m < npaths; m++) {
        const char *path = paths[m];
        char *text;
        size_t len;
        if (io_read_file(path, &text, &len) != 0) {
            FAIL("cannot read %s", path);
            continue;
        }
        Source src = {.path = path, .text = text, .len = len};
        Diag diag = {.src = &src, .sink = stdout};
        Arena arena = {0};
        SemaOptions so = {.batch = 1, .seq = PLAN_T, .compute = 2};
        Model *model = dsl_parse(&src, &arena, &diag);
        FILE *quiet = tmpfile(); // a model whose tables stop short of PLAN_T: its own seq
        Diag dq = {.src = &src, .sink = quiet ? quiet : stdout};
        Graph *g = model ? compile_lower(model, &so, 1, NULL, &arena, &dq) : NULL; // (the one compile path)
        if (quiet) fclose(quiet);
        if (model && !g) so.seq = 0, g = compile_lower(model, &so, 1, NULL, &arena, &diag);
        KirProgram prog;
        char err[8192] = "";
        CudaOptions opt = {.arch = "sm_90", .model_path = path};
        CudaSource cs = {0};
        if (g) prog = *g->kernels;
        if (!g || cuda_emit(&prog, g, &opt, &cs, err, sizeof err) != 0) {
            FAIL("%s does not build: %s", path, err);
            arena_free(&arena);
            free(text);
            continue;
        }
        int nattn = 0;
        for (int i = 0; i < cs.ninfo; i++) {
            const CudaKernelInfo *in = &cs.info[i];
            if (in->kind != KK_ATTN) continue;
            nattn++;
            const KirAttn *at = &prog.parts[in->part].k[in->index].attn;
            int j = 0; // a variant seen before: keep the model with the smaller group (fewer heads to emulate)
            while (j < ncases && strcmp(syms[j], in->symbol)) j++;
            if (j == MAX_PLAN_CASES || (j < ncases && cases[j].H / cases[j].KVH <= at->H / at->KVH)) continue;
            snprintf(syms[j], sizeof syms[j], "%s", in->symbol);
            from[j] = path;
            cases[j] = (AttnCase){1,
                                  (int)at->T,
                                  (int)at->H,
                                  (int)at->KVH,
                                  (int)at->D,
                                  at->causal,
                                  1,
                                  in->attn_tc,
                                  (int)at->window,
                                  at->scale,
                                  at->softcap,
                                  1,
                                  syms[j],
                                  at->Dv != at->D ? (int)at->Dv : 0,
                                  0,
                                  (int)at->chunk,
                                  0};
            if (j == ncases) ncases++;
        }
        // the plan's instantiation lines, each once
        for (const char *p = cs.text; (p = strstr(p, "\nMT_ATTN_")); p++) {
            size_t l = strcspn(p + 1, "\n");
            char line[512];
            snprintf(line, sizeof line, "%.*s\n", (int)l, p + 1);
            if (!strstr(lines, line) && nlines + strlen(line) + 1 < (1 << 16))
                memcpy(lines + nlines, line, strlen(line) + 1), nlines += strlen(line);
        }
        if (nattn == 0) FAIL("%s: no attention kernel in its plan", path);
        cuda_source_free(&cs);
        arena_free(&arena);
        free(text);
    }
    size_t cap = mt_cuda_prelude_len + mt_cuda_attention_len + mt_cuda_attention_ref_len + mt_cuda_mma_len +
                 mt_cuda_attention_tc_len + nlines + 64;
    char *src = malloc(cap), (*names)[96] = calloc(3 * (size_t)ncases + 5, sizeof *names);
    snprintf(src, cap, "%s\n%s\n%s\n%s\n%s\n%s", mt_cuda_prelude, mt_cuda_attention, mt_cuda_attention_ref, mt_cuda_mma,
             mt_cuda_attention_tc, lines);
    int nnames = 0;
    const char *refs[] = {"mt_ref_attn_probs", "mt_ref_attn_fwd", "mt_ref_attn_ds", "mt_ref_attn_dq",
                          "mt_ref_attn_dkdv"};
    for (int i = 0; i < 5; i++) snprintf(names[nnames++], 96, "%s", refs[i]);
    for (int i = 0; i < ncases; i++) {
        const char *pre = cases[i].tc ? "mt_attn_tc" : "mt_attn";
        snprintf(names[nnames++], 96, "%s_fwd_%.63s", pre, syms[i]);
        snprintf(names[nnames++], 96, "%s_bwd_dq_%.63s", pre, syms[i]);
        snprintf(names[nnames++], 96, "%s_bwd_dkdv_%.63s", pre, syms[i]);
    }
    printf("%s", lines);
    LaunchFn fn = build("plans-attention", src, names, nnames);
    free(src), free(names), free(lines);
    if (!fn) {
        check_failures++;
        return;
    }
    for (int i = 0; i < ncases; i++) {
        const AttnCase *c = &cases[i];
        double err[10], t0 = seconds(), e = attn_case(fn, c, err);
        int ok = attn_case_ok(c, e, err);
        printf("%s: %s %s T%d H%d/%d (heads 0..%d) max rel err %.2e (y %.1e dq %.1e dk %.1e dv %.1e lse %.1e) %s "
               "(%.1f s)\n",
               from[i], c->tc ? "mt_attn_tc_*" : "mt_attn_* (fp32 fallback)", c->symbol, c->T, c->H, c->KVH,
               c->H / c->KVH - 1, e, err[0], err[1], err[2], err[3], err[4], ok ? "ok" : "FAIL", seconds() - t0);
        if (c->tc)
            printf("    max abs err / plain bf16's: y %.2f dq %.2f dk %.2f dv %.2f\n", err[5], err[6], err[7], err[8]);
        if (!ok) check_failures++;
    }
}

// ---------------------------------------------------------------- 2. fused kernels

// The examples at the widths that shape their kernels, with fewer tokens:
// --seq N runs batch 1 at seq N, and --vocab N caps the config's V (a copy
// of the text rewritten), so that tables of V x C fit in memory here.
static int64_t opt_seq, opt_vocab;

static void check_model(const char *path) {
    char *text;
    size_t len;
    if (io_read_file(path, &text, &len) != 0) {
        FAIL("cannot read %s", path);
        return;
    }
    int capped = kir_cap_vocab(text, opt_vocab);
    Source src = {.path = path, .text = text, .len = len};
    Diag diag = {.src = &src, .sink = stdout};
    Arena arena = {0};
    SemaOptions so = {.batch = opt_seq ? 1 : 0, .seq = opt_seq}; // 0: the model's own batch and seq
    Model *model = dsl_parse(&src, &arena, &diag);
    Graph *g = model ? compile_lower(model, &so, 1, NULL, &arena, &diag) : NULL; // (the one compile path)
    KirProgram prog;
    char err[8192] = "";
    // exact_f64: the kernel IR's f64 arithmetic in double, as kir_eval does it.
    // Plans emit fp32 there, which the interpreter does not model: RoPE's
    // angles then differ by 1e-4 relative already at llama-tiny's 64 positions.
    CudaOptions opt = {.arch = "sm_90", .model_path = path, .exact_f64 = 1};
    CudaSource cs = {0};
    if (g) prog = *g->kernels;
    if (!g || cuda_emit(&prog, g, &opt, &cs, err, sizeof err) != 0) {
        FAIL("%s does not build: %s", path, err);
        arena_free(&arena);
        free(text);
        return;
    }
    // the kernel table: every expression kernel and its finish kernel
    char(*names)[96] = calloc(2 * (size_t)cs.ninfo + 1, sizeof *names);
    int nnames = 0;
    for (int i = 0; i < cs.ninfo; i++) {
        const CudaKernelInfo *in = &cs.info[i];
        if (in->kind != KK_EXPR || !in->symbol[0]) continue;
        snprintf(names[nnames++], 96, "%s", in->symbol);
        if (in->finish_grid) snprintf(names[nnames++], 96, "%s_finish", in->symbol);
    }
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char soname[128]; // unique: dlopen hands back a path it has loaded before
    static int nmodels;
    snprintf(soname, sizeof soname, "model%d-%.*s", ++nmodels, (int)strcspn(base, "."), base);
    LaunchFn fn = build(soname, cs.text, names, nnames);
    free(names);
    double worst[2] = {0, 0}, t0 = seconds(); // max rel err of f32 and of bf16 outputs
    int nk = 0;
    for (int ii = 0; fn && ii < cs.ninfo; ii++) {
        const CudaKernelInfo *in = &cs.info[ii];
        if (in->kind != KK_EXPR || !in->symbol[0]) continue;
        const KirKernel *k = &prog.parts[in->part].k[in->index];
        HostArg *h = calloc((size_t)k->nargs, sizeof *h);
        kir_fill_args(k, h, frand);
        // the emulation's copies: the data itself (bf16 bits for bf16),
        // scratch zeroed, float outputs that are not read NaN (an element no
        // thread writes shows)
        void **d = calloc((size_t)k->nargs, sizeof *d), **params = calloc((size_t)k->nargs, sizeof *params);
        for (int i = 0; i < k->nargs; i++) {
            const KirArg *a = &k->args[i];
            d[i] = malloc(kir_arg_bytes(a) + 8);
            kir_arg_pack(a, &h[i], d[i]);
            if (a->dtype != KT_I32 && (a->access & KA_WRITE) && !(a->access & (KA_READ | KA_ACC32 | KA_ACC64)))
                memset(d[i], 0xff, kir_arg_bytes(a));
            params[i] = &d[i];
        }
        // the finish kernel's (dst, scratch) pairs; dst in the argument's storage
        void *dst[8], *fparams[16];
        int nf = 0;
        for (int i = 0; i < k->nargs && nf < 8; i++)
            if (k->args[i].access & KA_ACC64) {
                dst[nf] = poisoned(4 * (size_t)k->args[i].numel);
                fparams[2 * nf] = &dst[nf], fparams[2 * nf + 1] = &d[i], nf++;
            }
        launch(fn, in->symbol, (unsigned)in->grid, 1, 1, (unsigned)in->block, (size_t)in->smem, params);
        if (in->finish_grid) {
            char finname[96];
            snprintf(finname, sizeof finname, "%s_finish", in->symbol);
            launch(fn, finname, (unsigned)in->finish_grid, 1, 1, 256, 0, fparams);
        }
        kir_eval(k, h);
        int j = 0;
        for (int i = 0; i < k->nargs; i++) {
            const KirArg *a = &k->args[i];
            if (!(a->access & (KA_WRITE | KA_ACC32 | KA_ACC64))) continue;
            double e = kir_arg_error(a, a->access & KA_ACC64 ? dst[j++] : d[i], &h[i]);
            if (!(e <= kir_arg_tolerance(a))) {
                FAIL("%s %s argument %d (%s): max rel err %.2e against the kernel IR", path, in->symbol, i,
                     a->dtype == KT_BF16  ? "bf16"
                     : a->dtype == KT_I32 ? "i32"
                                          : "f32",
                     e);
            }
            double *w = &worst[a->dtype == KT_BF16];
            if (!(e <= *w) && *w == *w) *w = e;
        }
        nk++;
        for (int i = 0; i < k->nargs; i++) free(d[i]);
        for (int i = 0; i < nf; i++) free(dst[i]);
        kir_free_args(k, h);
        free(h), free(d), free(params);
    }
    if (fn && nk == 0) FAIL("%s: no fused kernels", path);
    if (!fn) check_failures++;
    printf("%d fused kernels of %s", nk, path);
    if (opt_seq) printf(" (batch 1, seq %lld%s)", (long long)opt_seq, capped ? ", V capped" : "");
    printf(" on the emulation: max rel err f32 %.2e, bf16 %.2e (%.1f s)\n", worst[0], worst[1], seconds() - t0);
    cuda_source_free(&cs);
    arena_free(&arena);
    free(text);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--nvrtc")) return write_attention_cubin(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "--nvrtc")) {
        check_attention_tc_nvrtc();
        printf("%s\n", check_failures ? "FAILED" : "ok");
        return check_summary("emu_check");
    }
    if (argc < 4) {
        fprintf(stderr, "usage: emu_check CXX EMU_DIR WORK_DIR [MODEL.mt...]\n       emu_check CXX EMU_DIR WORK_DIR "
                        "--plans MODEL.mt...\n       emu_check CXX EMU_DIR WORK_DIR [--seq N] [--vocab N] MODEL.mt...\n"
                        "       emu_check --nvrtc [DIR]\n");
        return 2;
    }
    cxx = argv[1], emu_dir = argv[2], work_dir = argv[3];
    int first = 4;
    for (; first + 1 < argc; first += 2)
        if (!strcmp(argv[first], "--seq")) opt_seq = atoll(argv[first + 1]);
        else if (!strcmp(argv[first], "--vocab")) opt_vocab = atoll(argv[first + 1]);
        else break;
    if (argc > first && !strcmp(argv[first], "--plans")) check_plans(argv + first + 1, argc - first - 1);
    else if (argc == 4) check_mma(), check_attention();
    else
        for (int i = first; i < argc; i++) check_model(argv[i]);
    printf("%s\n", check_failures ? "FAILED" : "ok");
    return check_summary("emu_check");
}
