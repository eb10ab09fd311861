// moe_check: compiler/emit/cuda/moe.cuh's grouped mixture-of-experts kernels on
// the CPU emulation of CUDA (tests/emu/cuda_emu.h), run by the launch
// sequence runtime/backend/backend_cuda.c runs (runtime/backend/moe_launch.h), against
// the cpu backend's plain kernels (runtime/backend/kernels.inc moe and moe_bwd,
// kernel_run_f32) on the same inputs.
//
//   moe_check CXX EMU_DIR WORK_DIR
//
// Cases at odd sizes: rows no multiple of the 64-row tile, widths no multiple
// of the 64-column tile or the 16-deep reduction step; bf16 with C and F
// multiples of 8 on the pipelined path (128-row tiles, 32 deep: several
// tiles of one expert, k past a stage's end) and the others on the 64-row
// one, as with x 2 bytes off 16-byte alignment; an expert no row
// selects, every row on one expert (several tiles of one expert), chunks of
// rows (moe_run's chunking, the weights' gradients summed over chunks), bf16
// storage, top_k = E, rows with fewer gates != 0 than top_k (one, none),
// and a row with more (its outputs must be NaN, the other rows' right).
// Outputs start as NaN, so an element no kernel writes fails. Error:
// max |gpu - cpu| / max |cpu| per output
// (y; dx, dgates, dw_gate, dw_up, dw_down), at most 1e-5 for f32 and 1e-2
// for bf16 storage. Then the same translation unit (prelude and moe.cuh)
// compiled with NVRTC for sm_80 and sm_90, with ptxas's resource report:
// every mt_moe_* entry point there, none spilling registers (their counts
// printed). And the scratch of mixtral-8x7b's and qwen1.5-moe-a2.7b's layers
// at batch 16 x 4096 and 4x that: near MOE_CHUNK_BYTES (1 GiB) at both.
// Exit status 0 only when every check passed.
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/graph.h"
#include "runtime/backend/moe_launch.h"
#include "compiler/emit/cuda/sources.h"
#include "compiler/emit/nvrtc.h"
#include "runtime/backend/kernels.h"
#include "runtime/backend/blas_core.h"
#include "tests/check.h"

typedef int (*LaunchFn)(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, size_t smem,
                        void **args);

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void) { // uniform in [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

// prelude + moe.cuh compiled with CXX for the emulation into WORK_DIR/moe.so, with a table of moe_launch.h's kernels.
static LaunchFn build(const char *cxx, const char *emu_dir, const char *work_dir) {
    char cu[1024], so[1024], cmd[4096];
    snprintf(cu, sizeof cu, "%s/moe.cu", work_dir);
    snprintf(so, sizeof so, "%s/moe.so", work_dir);
    FILE *f = fopen(cu, "w");
    if (!f) {
        printf("FAIL cannot write %s\n", cu);
        return NULL;
    }
    fprintf(f, "#include \"cuda_emu.h\"\n%s\n%s\n%s\nMT_EMU_KERNELS_BEGIN\n", mt_cuda_prelude, mt_cuda_mma,
            mt_cuda_moe);
    for (int k = 0; k < MOE_KERNELS; k++) fprintf(f, "MT_EMU_KERNEL(%s)\n", MOE_KERNEL_NAME[k]);
    fprintf(f, "MT_EMU_KERNELS_END\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s -x c++ -std=c++17 -O1 -fPIC -shared -w -I'%s' '%s' -o '%s'", cxx, emu_dir, cu, so);
    if (system(cmd) != 0) {
        printf("FAIL moe.cuh does not compile for the emulation: %s\n", cmd);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    LaunchFn fn = h ? (LaunchFn)(uintptr_t)dlsym(h, "mt_emu_launch") : NULL;
    if (!fn) printf("FAIL cannot load %s: %s\n", so, dlerror());
    return fn;
}

static int emu_launch(void *ctx, MoeKernel k, unsigned gx, unsigned gy, void **params) {
    int rc = ((LaunchFn)(uintptr_t)ctx)(MOE_KERNEL_NAME[k], gx, gy, 1, MOE_THREADS, 0, params);
    if (rc)
        printf("FAIL launch of %s (%u, %u): %s\n", MOE_KERNEL_NAME[k], gx, gy,
               rc == -2 ? "not in the table" : "bad geometry");
    return rc;
}

typedef struct MoeCase {
    const char *what;
    int rows, C, E, F, K;
    int dead;     // an expert no row selects (-1: none)
    int one;      // every row on this expert (K 1; -1: random routing)
    int chunk;    // rows a chunk (0: all)
    int bf16;     // bf16 storage of every operand and output
    int overfull; // row 1 gets one gate != 0 more than K
    int fewer;    // rows 2 and 3 get K - 1 and no gates != 0
    int misalign; // x 2 bytes past 16-byte alignment: the 64-row kernels, whatever C and F
    float limit;  // gpt-oss's clamped SwiGLU with this limit and alpha 1.702 (0: SwiGLU)
    int layout;   // the weights' Node.moe_form (common/graph.h; 0: each its own [E, out, in])
} MoeCase;

static const MoeCase CASES[] = {
    {"odd sizes, an expert with no rows", 70, 40, 4, 72, 2, 2, -1, 0, 0, 0, 0, 0, 0, 0},
    {"every row on one expert", 130, 24, 3, 100, 1, -1, 1, 0, 0, 0, 0, 0, 0, 0},
    {"chunks of 37 rows", 150, 70, 5, 33, 2, -1, -1, 37, 0, 0, 0, 0, 0, 0},
    {"600 rows: the route's scan, 3 blocks", 600, 20, 6, 24, 2, 5, -1, 0, 0, 0, 0, 0, 0, 0},
    {"top_k = E, one row", 1, 17, 3, 9, 3, -1, -1, 0, 0, 0, 0, 0, 0, 0},
    {"bf16 storage, chunks of 50", 101, 64, 4, 64, 2, 0, -1, 50, 1, 0, 0, 0, 0, 0},
    {"bf16, odd sizes, an expert with no rows", 70, 40, 4, 72, 2, 2, -1, 0, 1, 0, 0, 0, 0, 0},
    {"bf16, every row on one expert", 130, 24, 3, 100, 1, -1, 1, 0, 1, 0, 0, 0, 0, 0},
    {"bf16, top_k = E, one row", 1, 17, 3, 9, 3, -1, -1, 0, 1, 0, 0, 0, 0, 0},
    {"a row with more gates than top_k", 20, 16, 4, 16, 2, -1, -1, 0, 0, 1, 0, 0, 0, 0},
    {"rows with fewer gates than top_k", 30, 16, 4, 20, 2, -1, -1, 0, 0, 0, 1, 0, 0, 0},
    {"bf16, rows with fewer gates than top_k", 30, 16, 4, 20, 3, -1, -1, 0, 1, 0, 1, 0, 0, 0},
    {"bf16 pipelined, every row on one expert", 300, 48, 3, 136, 1, -1, 2, 0, 1, 0, 0, 0, 0, 0},
    {"bf16 pipelined, chunks of 90, no rows for 1", 200, 136, 5, 40, 2, 1, -1, 90, 1, 0, 0, 0, 0, 0},
    {"bf16 pipelined, a row with more gates", 40, 32, 4, 24, 2, -1, -1, 0, 1, 1, 0, 0, 0, 0},
    {"bf16, C and F multiples of 8, x misaligned", 70, 40, 4, 72, 2, -1, -1, 0, 1, 0, 0, 1, 0, 0},
    {"clamped SwiGLU, chunks of 37 rows", 150, 70, 5, 33, 2, -1, -1, 37, 0, 0, 0, 0, 2.0f, 0},
    {"bf16 pipelined, clamped SwiGLU", 200, 136, 5, 40, 2, 1, -1, 90, 1, 0, 0, 0, 0.05f, 0},
    // the weights in the layouts checkpoints store them, read in place (C, F multiples of 8 for bf16: the
    // 64-row kernels all the same, the pipelined ones reading [E, out, in] only)
    {"each weight [E, in, out], chunks of 37", 150, 70, 5, 33, 2, 1, -1, 37, 0, 0, 0, 0, 0, 7},
    {"bf16, each weight [E, in, out]", 200, 136, 5, 40, 2, 1, -1, 90, 1, 0, 0, 0, 0, 7},
    {"w_down alone [E, in, out]", 70, 40, 4, 72, 2, 2, -1, 0, 0, 0, 0, 0, 0, 4},
    {"gate_up [E, 2F, C] halves", 70, 40, 4, 72, 2, 2, -1, 0, 0, 0, 0, 0, 0, 8},
    {"bf16, gate_up [E, 2F, C] halves", 70, 40, 4, 72, 2, 2, -1, 0, 1, 0, 0, 0, 0, 8},
    {"Llama 4: gate_up [E, C, 2F] halves", 130, 24, 3, 100, 1, -1, -1, 50, 0, 0, 0, 0, 0, 8 | 1 | 4},
    {"bf16, Llama 4's layout", 130, 24, 3, 40, 1, -1, -1, 50, 1, 0, 0, 0, 0, 8 | 1 | 4},
    {"gpt-oss: [E, C, 2F] interleaved, clamped", 150, 70, 5, 33, 2, -1, -1, 37, 0, 0, 0, 0, 2.0f, 16 | 1 | 4},
    {"bf16, gpt-oss's layout, clamped", 200, 136, 5, 40, 2, 1, -1, 90, 1, 0, 0, 0, 0.05f, 16 | 1 | 4},
    {"gate_up [E, 2F, C] interleaved", 70, 40, 4, 72, 2, 2, -1, 0, 0, 0, 0, 0, 0, 16},
    // the gates on the experts' input (Llama 4), top 2 and top 1
    {"gates on the input, chunks of 37", 150, 70, 5, 33, 2, 1, -1, 37, 0, 0, 0, 0, 0, 32},
    {"Llama 4's layout, gates on the input", 130, 24, 3, 100, 2, -1, -1, 50, 0, 0, 0, 0, 0, 32 | 8 | 1 | 4},
    {"bf16, gates on the input, top 1", 200, 136, 5, 40, 1, 1, -1, 90, 1, 0, 0, 0, 0, 32 | 8 | 1 | 4},
    {"gates on the input, a row with more", 20, 16, 4, 16, 2, -1, -1, 0, 0, 1, 0, 0, 0, 32},
    // the gate and up biases inside the kernels: separate weights, gpt-oss's interleaved, on the input
    {"gate_up bias, chunks of 37", 150, 70, 5, 33, 2, 1, -1, 37, 0, 0, 0, 0, 0, 64},
    {"gpt-oss: interleaved, bias, clamped", 150, 70, 5, 33, 2, -1, -1, 37, 0, 0, 0, 0, 2.0f, 64 | 16 | 1 | 4},
    {"bf16, gpt-oss's layout, bias, clamped", 200, 136, 5, 40, 2, 1, -1, 90, 1, 0, 0, 0, 0.05f, 64 | 16 | 1 | 4},
    {"Llama 4's layout, bias, gates on the input", 130, 24, 3, 100, 2, -1, -1, 50, 0, 0, 0, 0, 0, 64 | 32 | 8 | 1 | 4},
    // GeGLU experts (moe's act = gelu, gelu_tanh: Node.moe_form's MoeAct at bit 7), f32 and bf16; the bf16 ones
    // have C and F multiples of 8 but run the 64-row kernels (the pipelined path is SwiGLU's only)
    {"act = gelu, chunks of 37", 150, 70, 5, 33, 2, -1, -1, 37, 0, 0, 0, 0, 0, MOE_ACT_GELU << 7},
    {"bf16, act = gelu, chunks of 90", 200, 136, 5, 40, 2, 1, -1, 90, 1, 0, 0, 0, 0, MOE_ACT_GELU << 7},
    {"act = gelu_tanh, odd sizes", 70, 40, 4, 72, 2, 2, -1, 0, 0, 0, 0, 0, 0, MOE_ACT_GELU_TANH << 7},
    {"bf16, act = gelu_tanh, every row on one expert", 130, 24, 3, 100, 1, -1, 1, 0, 1, 0, 0, 0, 0,
     MOE_ACT_GELU_TANH << 7},
    {"gelu_tanh, gpt-oss's layout, bias", 150, 70, 5, 33, 2, -1, -1, 37, 0, 0, 0, 0, 0,
     MOE_ACT_GELU_TANH << 7 | 64 | 16 | 1 | 4},
    {"bf16, gelu, Llama 4's layout, gates on the input", 130, 24, 3, 40, 2, -1, -1, 50, 1, 0, 0, 0, 0,
     MOE_ACT_GELU << 7 | 32 | 8 | 1 | 4},
};

// Weight j's shape as stored (common/graph.h's moe_form): w_gate,
// w_up [E, F, C] (a fused gate_up [E, 2F, C]), w_down [E, C, F], the last
// two axes swapped where its bit is set.
static Shape stored_shape(int layout, int j, long long E, long long C, long long F) {
    long long out = j == 2 ? C : (layout & (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED)) ? 2 * F : F;
    long long in = j == 2 ? F : C;
    return layout >> j & 1 ? (Shape){3, {E, in, out}} : (Shape){3, {E, out, in}};
}

// A host tensor in the case's storage: values (float, rounded to bf16 when bf16) and the device's copy.
typedef struct Buf {
    long long n;
    float *v;  // (n) the values the cpu reads
    void *dev; // (n) float or uint16_t
    void *mem; // what dev lies in (dev itself, or one element before it: misaligned)
} Buf;

static Buf buf_new(long long n, int bf16, int random) {
    Buf b = {n, malloc((size_t)n * 4), malloc((size_t)n * (bf16 ? 2 : 4)), NULL};
    b.mem = b.dev;
    for (long long i = 0; i < n; i++) {
        float x = random ? frand() : (float)NAN;
        if (bf16) ((uint16_t *)b.dev)[i] = bf16_from_f32(x), b.v[i] = bf16_round(x);
        else ((float *)b.dev)[i] = x, b.v[i] = x;
    }
    return b;
}
static float buf_dev(const Buf *b, int bf16, long long i) {
    return bf16 ? f32_from_bf16(((uint16_t *)b->dev)[i]) : ((float *)b->dev)[i];
}
static void buf_zero(Buf *b, int bf16, long long i) {
    if (bf16) ((uint16_t *)b->dev)[i] = 0;
    else ((float *)b->dev)[i] = 0;
}
static void buf_free(Buf *b) { free(b->v), free(b->mem); }
// b's device copy moved one element (2 or 4 bytes) past malloc's alignment.
static void buf_misalign(Buf *b, int bf16) {
    size_t e = bf16 ? 2 : 4;
    char *m = malloc((size_t)(b->n + 1) * e);
    memcpy(m + e, b->dev, (size_t)b->n * e);
    free(b->mem);
    b->mem = m, b->dev = m + e;
}

// max |dev - ref| / max |ref| over [from, from + n) of b; NaN when any is NaN.
static double err_of(const Buf *b, int bf16, const float *ref, long long from, long long n) {
    double d = 0, m = 0;
    for (long long i = from; i < from + n; i++) {
        double e = fabs((double)buf_dev(b, bf16, i) - ref[i]);
        if (!(e <= d) && d == d) d = e; // NaN sticks
        if (!(fabs(ref[i]) <= m) && m == m) m = fabs(ref[i]);
    }
    return d / (m > 0 ? m : 1);
}

static Shape shape2(long long a, long long b) { return (Shape){2, {a, b}}; }

static void check_case(LaunchFn fn, const MoeCase *t) {
    int rows = t->rows, C = t->C, E = t->E, F = t->F, K = t->K, bf = t->bf16;
    Buf x = buf_new((long long)rows * C, bf, 1), dy = buf_new((long long)rows * C, bf, 1);
    int fused = t->layout & (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED); // one gate_up in w_gate's and w_up's places
    Buf wg = buf_new((long long)E * F * C * (fused ? 2 : 1), bf, 1),
        wu = buf_new(fused ? 0 : (long long)E * F * C, bf, 1);
    Buf wd = buf_new((long long)E * C * F, bf, 1), gates = buf_new((long long)rows * E, bf, 1);
    int bias = t->layout & MOE_GATE_UP_BIAS;
    Buf bgu = buf_new(bias ? 2LL * E * F : 0, bf, 1); // the gate_up bias [E, 2F]
    long long nbwd = (long long)rows * C + (long long)rows * E + 3LL * E * F * C + bgu.n;
    Buf y = buf_new((long long)rows * C, bf, 0), out = buf_new(nbwd, bf, 0);
    if (t->misalign) buf_misalign(&x, bf);
    // gates: K distinct experts a row (never `dead`; all `one`), values in [0.1, 1]; the rest 0
    for (int r = 0; r < rows; r++) {
        float g[64] = {0};
        int want = K + (t->overfull && r == 1) - (t->fewer && r == 2) - (t->fewer && r == 3) * K;
        for (int n = 0; n < want;) {
            int e = t->one >= 0 ? t->one : (int)((frand() + 1.0f) * 0.5f * (float)E) % E;
            if (e == t->dead || g[e] != 0) continue;
            g[e] = 0.55f + 0.45f * frand(), n++;
        }
        for (int e = 0; e < E; e++) {
            long long i = (long long)r * E + e;
            if (bf) ((uint16_t *)gates.dev)[i] = bf16_from_f32(g[e]), gates.v[i] = bf16_round(g[e]);
            else ((float *)gates.dev)[i] = g[e], gates.v[i] = g[e];
        }
    }
    // the cpu's kernels; the overfull row with its first K experts only (as
    // the grouped kernels route it: the weights' gradients take those)
    for (int e = 0, n = 0; t->overfull && e < E; e++) n += gates.v[E + e] != 0, gates.v[E + e] *= n <= K;
    Node nx = {.op = OP_INPUT, .shape = shape2(rows, C)}, ng = {.op = OP_INPUT, .shape = shape2(rows, E)};
    Node nwg = {.op = OP_PARAM, .shape = stored_shape(t->layout, 0, E, C, F)};
    Node nwu = {.op = OP_PARAM, .shape = stored_shape(t->layout, 1, E, C, F)};
    Node nwd = {.op = OP_PARAM, .shape = stored_shape(t->layout, 2, E, C, F)};
    Node nb = {.op = OP_PARAM, .shape = shape2(E, 2 * F)};
    Node ndy = nx, *up = fused ? &nwg : &nwu;
    Node *fin[] = {&nx, &ng, &nwg, up, &nwd, &nb}, *bin[] = {&ndy, &nx, &ng, &nwg, up, &nwd, &nb};
    double alpha = t->limit > 0 ? 1.702 : 0;
    Node moe = {.op = OP_MOE,
                .shape = shape2(rows, C),
                .in = fin,
                .nin = 5 + !!bias,
                .scale = alpha,
                .softcap = t->limit,
                .moe_form = t->layout};
    Node moe_bwd = {.op = OP_MOE_BWD,
                    .shape = {1, {nbwd}},
                    .in = bin,
                    .nin = 6 + !!bias,
                    .scale = alpha,
                    .softcap = t->limit,
                    .moe_form = t->layout};
    float *ref_y = malloc((size_t)rows * C * 4), *ref_out = malloc((size_t)nbwd * 4);
    void *wup = fused ? wg.v : wu.v, *wup_dev = fused ? wg.dev : wu.dev;
    void *fa[] = {x.v, gates.v, wg.v, wup, wd.v, bgu.v}, *ba[] = {dy.v, x.v, gates.v, wg.v, wup, wd.v, bgu.v};
    kernel_run_f32(&moe, ref_y, fa);
    kernel_run_f32(&moe_bwd, ref_out, ba);
    // the grouped kernels, chunk by chunk as runtime/backend/backend_cuda.c runs them
    MoeDims d = {rows, C, E, F, K, bf, (float)alpha, t->limit, t->layout};
    int bits = bf ? 0x7f | (bias ? 1 << 15 : 0) : 0; // moe_run's bf16 bits, the bias's 15
    int pipelined = 0;
    for (int bwd = 0; bwd < 2; bwd++) {
        long long chunk = t->chunk ? t->chunk : moe_chunk_rows(d, bwd, MOE_CHUNK_BYTES);
        long long bytes = moe_scratch_bytes(d, bwd, chunk);
        float *ws = malloc((size_t)bytes);
        for (long long i = 0; i < bytes / 4; i++) ws[i] = (float)NAN;
        void *arg[8] = {bwd ? out.dev : y.dev, bwd ? dy.dev : NULL, x.dev, gates.dev, wg.dev, wup_dev, wd.dev,
                        bias ? bgu.dev : NULL};
        pipelined = moe_takes_pipelined(d, bits, arg, ws);
        if (moe_run(d, bwd, chunk, arg, bits, ws, emu_launch, (void *)(uintptr_t)fn) != 0) check_failures++;
        free(ws);
    }
    if (pipelined && (t->layout & MOE_ACT_BITS)) FAIL("%s: a GeGLU node took the pipelined (SwiGLU) path", t->what);
    // the overfull row's outputs are NaN; the rest are compared with it left out
    long long skip = t->overfull ? 1 : -1;
    if (skip >= 0) {
        int nan_ok = 1;
        for (int c = 0; c < C; c++)
            nan_ok &= isnan(buf_dev(&y, bf, skip * C + c)) && isnan(buf_dev(&out, bf, skip * C + c));
        if (!nan_ok) FAIL("%s: row %lld's outputs are not NaN", t->what, skip);
        for (int c = 0; c < C; c++) {
            ref_y[skip * C + c] = 0, ref_out[skip * C + c] = 0;
            buf_zero(&y, bf, skip * C + c), buf_zero(&out, bf, skip * C + c);
        }
        for (int e = 0; e < E; e++)
            buf_zero(&out, bf, (long long)rows * C + skip * E + e), ref_out[(long long)rows * C + skip * E + e] = 0;
    }
    long long dwn = (long long)E * F * C, at[] = {0,
                                                  0,
                                                  (long long)rows * C,
                                                  (long long)rows * (C + E),
                                                  (long long)rows * (C + E) + dwn,
                                                  (long long)rows * (C + E) + 2 * dwn,
                                                  (long long)rows * (C + E) + 3 * dwn};
    long long len[] = {(long long)rows * C,
                       (long long)rows * C,
                       (long long)rows * E,
                       fused ? 2 * dwn : dwn,
                       fused ? 0 : dwn,
                       dwn,
                       bgu.n};
    const char *name[] = {"y",       "dx", "dgates", fused ? "dw_gate_up" : "dw_gate", fused ? "-" : "dw_up",
                          "dw_down", "db"};
    double tol = bf ? 1e-2 : 1e-5;
    printf("%-40s rows %3d C %2d E %d F %3d top_k %d%s%s:", t->what, rows, C, E, F, K, bf ? " bf16" : "",
           pipelined ? " (pipelined)" : "");
    for (int i = 0; i < 7; i++) {
        if (!len[i]) continue; // a fused gate_up's gradient is dw_gate_up's; no bias
        double e = i == 0 ? err_of(&y, bf, ref_y, at[i], len[i]) : err_of(&out, bf, ref_out, at[i], len[i]);
        printf(" %s %.1e", name[i], e);
        if (!(e <= tol)) check_failures++, printf(" (FAIL > %.0e)", tol);
    }
    printf("\n");
    free(ref_y), free(ref_out);
    Buf *all[] = {&x, &dy, &wg, &wu, &wd, &gates, &y, &out, &bgu};
    for (int i = 0; i < 9; i++) buf_free(all[i]);
}

// prelude + moe.cuh with NVRTC for sm_80 and sm_90: every grouped kernel present, none spilling.
static void check_nvrtc(void) {
    size_t cap = mt_cuda_prelude_len + mt_cuda_mma_len + mt_cuda_moe_len + 8;
    char *src = malloc(cap);
    snprintf(src, cap, "%s\n%s\n%s\n", mt_cuda_prelude, mt_cuda_mma, mt_cuda_moe);
    const char *archs[] = {"sm_80", "sm_90"};
    for (int a = 0; a < 2; a++) {
        CudaBinary bin;
        char err[8192], *info = NULL, fn[128] = "?";
        if (nvrtc_compile_report(src, "moe.cu", archs[a], &bin, &info, err, sizeof err) != 0) {
            FAIL("moe.cuh does not compile with NVRTC for %s:\n%s", archs[a], err);
            continue;
        }
        // "ptxas info    : Function properties for NAME", then "N bytes stack
        // frame, N bytes spill stores, N bytes spill loads"; "Used N registers"
        int seen[MOE_KERNELS] = {0}, spilling = 0, at = -1;
        for (const char *p = info; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n')) {
            size_t len = strcspn(p, "\n");
            const char *q = strstr(p, "Function properties for ");
            if (q && q < p + len) {
                snprintf(fn, sizeof fn, "%.*s", (int)(p + len - q - 24), q + 24);
                at = -1;
                for (int k = 0; k < MOE_KERNELS; k++)
                    if (!strcmp(fn, MOE_KERNEL_NAME[k])) at = k;
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
                printf("  %s %-20s %3d registers\n", archs[a], fn, regs);
        }
        int n = 0;
        for (int k = 0; k < MOE_KERNELS; k++) n += seen[k];
        printf("moe.cuh's grouped kernels: NVRTC %s %s, %d of %d entry points, %d spilling (%.1f s)\n", archs[a],
               n == MOE_KERNELS && !spilling ? "ok" : "FAIL", n, MOE_KERNELS, spilling, bin.seconds);
        if (n != MOE_KERNELS || spilling) check_failures++;
        free(info);
        nvrtc_binary_free(&bin);
    }
    free(src);
}

// The scratch moe_launch.h asks of the large examples' layers (their C, E,
// F, K) at batch 16 x 4096 and at 4x that: near MOE_CHUNK_BYTES, whatever
// the batch (runtime/README.md and dsl/README.md quote these figures).
static void check_scratch(void) {
    const struct {
        const char *name;
        MoeDims d;
    } big[] = {{"mixtral-8x7b", {16 * 4096, 4096, 8, 14336, 2, 1, 0, 0, 0}},
               {"qwen1.5-moe-a2.7b", {16 * 4096, 2048, 60, 1408, 4, 1, 0, 0, 0}}};
    for (int m = 0; m < 2; m++)
        for (int x = 1; x <= 4; x *= 4)
            for (int bwd = 0; bwd < 2; bwd++) {
                MoeDims d = big[m].d;
                d.rows *= x;
                long long chunk = moe_chunk_rows(d, bwd, MOE_CHUNK_BYTES), bytes = moe_scratch_bytes(d, bwd, chunk);
                int ok = bytes <= MOE_CHUNK_BYTES + (1 << 20) && bytes >= MOE_CHUNK_BYTES / 2;
                printf("%s %s at %lld rows: chunks of %lld rows, scratch %lld bytes%s\n", big[m].name,
                       bwd ? "moe_bwd" : "moe", d.rows, chunk, bytes, ok ? "" : " (FAIL: not near MOE_CHUNK_BYTES)");
                check_failures += !ok;
            }
}

int main(int argc, char **argv) {
    mt_blas_core_pick(); // OpenBLAS's kernels for this CPU, as mtrun picks them
    if (argc != 4) {
        fprintf(stderr, "usage: moe_check CXX EMU_DIR WORK_DIR\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    LaunchFn fn = build(argv[1], argv[2], argv[3]);
    if (!fn) return 1;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(fn, &CASES[i]);
    check_scratch();
    check_nvrtc();
    printf("%s\n", check_failures ? "FAILED" : "ok");
    return check_summary("moe_check");
}
