// doc_starts_check: the fp32 flash attention of compiler/emit/cuda/attention.cuh with
// packed documents (seg_start (B, T): for query t of row b the first
// position of its document; key j visible only when j >= seg_start[b * T +
// t]; runtime/backend/kernels.h) against its plain reference (attention_ref.cuh's
// mt_ref_attn_probs_doc_starts), both on the CPU emulation of CUDA
// (tests/emu/cuda_emu.h): forward y and lse, backward dq, dk, dv (the
// backward recomputing lse, and at odd lengths taking the forward's y and
// lse); f32 storage within 2e-4 relative, bf16 within 3e-2 (emu_check's
// tolerances); causal and not, grouped-query, a window, scale and softcap;
// rows cut into random documents, a row starting inside one (its first
// start 0), documents of one token. Every lse within 1e-3 of a computation
// in double with runtime/backend/kernels.inc's semantics. And the documents matter:
// the same kernels given NULL differ from the reference by more than 1e-2.
//
//   doc_starts_check CXX EMU_DIR WORK_DIR
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/attention.h"
#include "common/bf16.h"
#include "compiler/emit/cuda/sources.h"
#include "tests/check.h"

typedef int (*LaunchFn)(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                        void **args);

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static float frand(void) { return (float)((double)(next() >> 11) / 9007199254740992.0 * 2.0 - 1.0); } // [-1, 1)

// max |a - b| / max(|b|, 0.1) over n values (NaN sticks)
static double max_rel(const float *a, const float *b, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-1);
        if (!(d <= m) && m == m) m = d;
    }
    return m;
}

typedef struct Case {
    int B, T, H, KVH, D, causal, bf16, window;
    double scale, softcap; // 0: 1/sqrt(D), none
} Case;

static const Case CASES[] = {
    {2, 70, 4, 2, 16, 1, 0, 0, 0, 0},      {2, 37, 4, 1, 16, 0, 0, 0, 0, 0},  {1, 100, 4, 1, 64, 1, 1, 0, 0, 0},
    {2, 90, 2, 2, 16, 1, 0, 20, 0.3, 0.5}, {1, 67, 4, 4, 128, 1, 0, 0, 0, 0},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

static double case_scale(const Case *c) { return c->scale > 0 ? c->scale : 1 / sqrt((double)c->D); }

static void launch(LaunchFn fn, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                   void **args) {
    int rc = fn(name, gx, gy, gz, block, smem, args);
    if (rc != 0) { FAIL("launch of %s: %s", name, rc == -2 ? "not in the kernel table" : "bad geometry"); }
}

static void *storage(const float *x, long n, int bf16) { // x as stored: floats, or bf16
    if (!bf16) {
        float *o = malloc(4 * (size_t)n);
        memcpy(o, x, 4 * (size_t)n);
        return o;
    }
    uint16_t *o = malloc(2 * (size_t)n);
    for (long i = 0; i < n; i++) o[i] = bf16_from_f32(x[i]);
    return o;
}
static float *poisoned(size_t bytes) { // NaN: an element no kernel writes shows
    float *p = malloc(bytes + 4);
    memset(p, 0xff, bytes + 4);
    return p;
}
static float *widened(const void *x, long n, int bf16) {
    float *o = malloc(4 * (size_t)n);
    for (long i = 0; i < n; i++) o[i] = bf16 ? f32_from_bf16(((const uint16_t *)x)[i]) : ((const float *)x)[i];
    return o;
}

// The case's flash kernels given seg (or NULL) and the reference given seg:
// the worst relative error of y, dq, dk, dv and (err[4]) of lse against
// double; returns the worst of y .. dv.
static double run_case(LaunchFn fn, const Case *c, const char *name, const int *seg, const int *seg_given,
                       double err[5]) {
    long nq = (long)c->B * c->T * c->H * c->D, nk = (long)c->B * c->T * c->KVH * c->D, nrow = (long)c->B * c->H * c->T;
    size_t es = c->bf16 ? 2 : 4;
    float *q = malloc(4 * (size_t)nq), *k = malloc(4 * (size_t)nk), *v = malloc(4 * (size_t)nk),
          *dy = malloc(4 * (size_t)nq);
    for (long i = 0; i < nq; i++) q[i] = frand(), dy[i] = frand();
    for (long i = 0; i < nk; i++) k[i] = frand(), v[i] = frand();
    if (c->bf16) { // the reference sees what the bf16 kernel reads
        for (long i = 0; i < nq; i++) q[i] = bf16_round(q[i]), dy[i] = bf16_round(dy[i]);
        for (long i = 0; i < nk; i++) k[i] = bf16_round(k[i]), v[i] = bf16_round(v[i]);
    }
    void *Q = storage(q, nq, c->bf16), *K = storage(k, nk, c->bf16), *V = storage(v, nk, c->bf16),
         *DY = storage(dy, nq, c->bf16);
    void *Y = poisoned(es * (size_t)nq), *DQ = poisoned(es * (size_t)nq), *DK = poisoned(es * (size_t)nk),
         *DV = poisoned(es * (size_t)nk);
    float *LSE = poisoned(4 * (size_t)nrow), *WS = poisoned(attn_workspace_bytes(c->B, c->T, c->H));
    float *P = poisoned(4 * (size_t)nrow * c->T), *C = poisoned(4 * (size_t)nrow * c->T),
          *DS = poisoned(4 * (size_t)nrow * c->T);
    float *rY = poisoned(4 * (size_t)nq), *rDQ = poisoned(4 * (size_t)nq), *rDK = poisoned(4 * (size_t)nk),
          *rDV = poisoned(4 * (size_t)nk);
    char sym[3][128];
    snprintf(sym[0], sizeof sym[0], "mt_attn_fwd_%s", name);
    snprintf(sym[1], sizeof sym[1], "mt_attn_bwd_dq_%s", name);
    snprintf(sym[2], sizeof sym[2], "mt_attn_bwd_dkdv_%s", name);
    void *nul = NULL, *S = (void *)seg_given, *RS = (void *)seg;
    int T = c->T, H = c->H, KVH = c->KVH, B = c->B, D = c->D, causal = c->causal, window = c->window;
    double scale = case_scale(c), softcap = c->softcap;
    unsigned gq = (unsigned)((T + ATTN_BQ - 1) / ATTN_BQ), gk = (unsigned)((T + ATTN_BK - 1) / ATTN_BK);
    void **ysaved = T % 2 ? &Y : &nul, **lsaved = T % 2 ? (void **)&LSE : &nul; // odd: the forward's y and lse
    void *a_fwd[] = {&Y, &LSE, &Q, &K, &V, &T, &H, &KVH, &S, &nul}; // no sinks
    void *a_dq[] = {&DQ, &WS, &DY, &Q, &K, &V, ysaved, lsaved, &T, &H, &KVH, &S};
    void *a_dkdv[] = {&DK, &DV, &WS, &DY, &Q, &K, &V, &T, &H, &KVH, &S};
    launch(fn, sym[0], gq, (unsigned)H, (unsigned)B, ATTN_THREADS, attn_smem_fwd(D), a_fwd);
    launch(fn, sym[1], gq, (unsigned)H, (unsigned)B, ATTN_THREADS, attn_smem_dq(D), a_dq);
    launch(fn, sym[2], gk, (unsigned)KVH, (unsigned)B, ATTN_THREADS, attn_smem_dkdv(D), a_dkdv);
    void *r_probs[] = {&P, &C, &q, &k, &RS, &B, &T, &H, &KVH, &D, &causal, &window, &scale, &softcap};
    void *r_fwd[] = {&rY, &P, &v, &B, &T, &H, &KVH, &D};
    void *r_ds[] = {&DS, &P, &C, &dy, &v, &B, &T, &H, &KVH, &D};
    void *r_dq[] = {&rDQ, &DS, &k, &B, &T, &H, &KVH, &D, &scale};
    void *r_dkdv[] = {&rDK, &rDV, &P, &DS, &q, &dy, &B, &T, &H, &KVH, &D, &scale};
    unsigned rb = 128;
    launch(fn, "mt_ref_attn_probs_doc_starts", (unsigned)((nrow + rb - 1) / rb), 1, 1, rb, 0, r_probs);
    launch(fn, "mt_ref_attn_fwd", (unsigned)((nq + rb - 1) / rb), 1, 1, rb, 0, r_fwd);
    launch(fn, "mt_ref_attn_ds", (unsigned)((nrow + rb - 1) / rb), 1, 1, rb, 0, r_ds);
    launch(fn, "mt_ref_attn_dq", (unsigned)((nq + rb - 1) / rb), 1, 1, rb, 0, r_dq);
    launch(fn, "mt_ref_attn_dkdv", (unsigned)((nk + rb - 1) / rb), 1, 1, rb, 0, r_dkdv);
    void *got[4] = {Y, DQ, DK, DV};
    float *want[4] = {rY, rDQ, rDK, rDV};
    long cnt[4] = {nq, nq, nk, nk};
    double worst = 0;
    for (int i = 0; i < 4; i++) {
        float *a = widened(got[i], cnt[i], c->bf16);
        err[i] = max_rel(a, want[i], cnt[i]);
        if (!(err[i] <= worst) && worst == worst) worst = err[i];
        free(a);
    }
    // lse = log sum_j exp(score) over the keys query t sees, in double (runtime/backend/kernels.inc's attn_probs)
    double le = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float *qr = q + ((long)(b * T + t) * H + h) * D;
                int nj = causal ? t + 1 : T, j0 = window && t + 1 > window ? t + 1 - window : 0;
                if (seg && seg[b * T + t] > j0) j0 = seg[b * T + t];
                double mx = -INFINITY, sum = 0, *sc = malloc(8 * (size_t)T);
                for (int j = j0; j < nj; j++) {
                    const float *kr = k + ((long)(b * T + j) * KVH + h / (H / KVH)) * D;
                    double dot = 0;
                    for (int d = 0; d < D; d++) dot += (double)qr[d] * kr[d];
                    sc[j] = dot * scale;
                    if (softcap > 0) sc[j] = softcap * tanh(sc[j] / softcap);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = j0; j < nj; j++) sum += exp(sc[j] - mx);
                double w = mx + log(sum), d = fabs(LSE[((long)b * H + h) * T + t] - w) / fmax(fabs(w), 1e-1);
                if (!(d <= le) && le == le) le = d;
                free(sc);
            }
    err[4] = le;
    void *all[] = {q, k, v, dy, Q, K, V, DY, Y, DQ, DK, DV, LSE, WS, P, C, DS, rY, rDQ, rDK, rDV};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    return worst;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: doc_starts_check CXX EMU_DIR WORK_DIR\n");
        return 2;
    }
    const char *cxx = argv[1], *emu_dir = argv[2], *work = argv[3];
    char names[NCASES][64], cu[1024], so[1024], cmd[4096];
    snprintf(cu, sizeof cu, "%s/docs.cu", work);
    snprintf(so, sizeof so, "%s/docs.so", work);
    FILE *f = fopen(cu, "w");
    if (!f) {
        printf("FAIL cannot write %s\n", cu);
        return 1;
    }
    // one translation unit: prelude, template, reference, each case's variant, the kernel table
    fprintf(f, "#include \"cuda_emu.h\"\n");
    const char *src[] = {mt_cuda_prelude, mt_cuda_attention, mt_cuda_attention_ref};
    for (int s = 0; s < 3; s++) {
        const char *p = src[s], *hit, *key = "extern __shared__";
        while ((hit = strstr(p, key))) { // cuda_emu.h's shared memory is a plain extern
            fwrite(p, 1, (size_t)(hit - p), f);
            fputs("extern", f);
            p = hit + strlen(key);
        }
        fprintf(f, "%s\n", p);
    }
    for (int i = 0; i < NCASES; i++) {
        const Case *c = &CASES[i];
        attn_variant_name(names[i], sizeof names[i], c->bf16, c->D, c->causal, c->window, case_scale(c), c->softcap);
        fprintf(f, "MT_ATTN_INSTANTIATE_OPT(%s, %d, %s, %.9ef, %.9ef, %d, %s)\n", c->bf16 ? "bf16" : "float", c->D,
                c->causal ? "true" : "false", (double)(float)case_scale(c), (double)(float)c->softcap, c->window,
                names[i]);
    }
    fprintf(f, "MT_EMU_KERNELS_BEGIN\n");
    const char *refs[] = {"mt_ref_attn_probs_doc_starts", "mt_ref_attn_fwd", "mt_ref_attn_ds", "mt_ref_attn_dq",
                          "mt_ref_attn_dkdv"};
    for (int i = 0; i < 5; i++) fprintf(f, "MT_EMU_KERNEL(%s)\n", refs[i]);
    for (int i = 0; i < NCASES; i++)
        fprintf(f,
                "MT_EMU_KERNEL(mt_attn_fwd_%s)\nMT_EMU_KERNEL(mt_attn_bwd_dq_%s)\nMT_EMU_KERNEL(mt_attn_bwd_dkdv_%s)\n",
                names[i], names[i], names[i]);
    fprintf(f, "MT_EMU_KERNELS_END\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s -x c++ -std=c++17 -O1 -fPIC -shared -w -I'%s' '%s' -o '%s'", cxx, emu_dir, cu, so);
    if (system(cmd) != 0) {
        printf("FAIL %s does not compile for the emulation: %s\n", cu, cmd);
        return 1;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    LaunchFn fn = h ? (LaunchFn)(uintptr_t)dlsym(h, "mt_emu_launch") : NULL;
    if (!fn) {
        printf("FAIL cannot load %s: %s\n", so, dlerror());
        return 1;
    }
    for (int i = 0; i < NCASES; i++) {
        const Case *c = &CASES[i];
        int *seg = malloc(sizeof(int) * (size_t)(c->B * c->T)); // (B, T) random documents, 1 to 40 tokens
        for (int b = 0; b < c->B; b++)
            for (int t = 0, start = 0, left = 0; t < c->T; t++, left--) {
                if (left <= 0) { // a new document here, of 1 to 40 tokens (the row's first: one started before it)
                    start = t;
                    left = 1 + (int)(next() % 40);
                    if (t > 0 && next() % 5 == 0) left = 1;
                }
                seg[b * c->T + t] = start;
            }
        double err[5], errn[5], tol = c->bf16 ? 3e-2 : 2e-4;
        double worst = run_case(fn, c, names[i], seg, seg, err);
        double without = run_case(fn, c, names[i], seg, NULL, errn); // the kernels not told: must differ
        int ok = worst <= tol && err[4] <= 1e-3 && without > 1e-2;
        printf("%s %s B %d T %d H %d KVH %d: y %.1e dq %.1e dk %.1e dv %.1e lse %.1e (tolerance %.0e); without the "
               "documents %.2f\n",
               ok ? "ok  " : "FAIL", names[i], c->B, c->T, c->H, c->KVH, err[0], err[1], err[2], err[3], err[4], tol,
               without);
        check_failures += !ok;
        free(seg);
    }
    printf("%s\n", check_failures ? "FAILED" : "ok");
    return check_summary("doc_starts_check");
}
