// test_cuda: every generated CUDA kernel compiles with NVRTC, no GPU needed.
//
//   test_cuda [--emitter] [--bf16 | --bf16-only] MODEL.mt...
//
// 1. (--emitter, on the model's graph, instead of 3) Hand-built kernels of the kernel IR that cover every emitter path
// (a
//    block per row with float4 loops, a warp per row with scalar loops and
//    reductions, a thread per row, f64 accumulation and its finish kernel,
//    a GEMM with a bias epilogue, attention forward and backward) compile
//    for sm_80 and sm_90, in f32 and bf16, and vectorise where they should.
// 2. (--emitter) A kernel made not to compile (the emitter's test hook) fails with the
//    generated line, the kernel and the op with its model location; so does
//    one that only draws an NVRTC warning.
// 3. Every model given, fused as mtc fuses it (batch 1, seq 64), compiles for
//    sm_80 and sm_90 (--bf16: and in bf16 for sm_90; --bf16-only: in bf16 for sm_90 only, for a
//    model whose attention has CUDA kernels in bf16 only) with no error and no warning; the NVRTC
//    time of each is printed.
// Exit status 0 only when all of it holds.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "compiler/emit/emit_cuda.h"
#include "compiler/fuse/fuse.h"
#include "common/graph.h"
#include "compiler/compile.h"
#include "tests/check.h"

// ---------------------------------------------------------------- hand-built kernels

enum { MAXS = 64 };
typedef struct Build {
    KirKernel k;
    KirStmt st[MAXS];
    KirArg args[8];
    int64_t cols[4];
    int32_t nodes[4];
} Build;

static void begin(Build *b, int kind, int64_t rows, int node) {
    memset(b, 0, sizeof *b);
    b->k.kind = (uint8_t)kind;
    b->k.anchor = b->k.first = node;
    b->k.fused_into = -1;
    b->k.rows = rows;
    b->k.stmts = b->st, b->k.args = b->args, b->k.cols = b->cols, b->k.nodes = b->nodes;
    b->nodes[0] = node, b->k.nnodes = 1;
}
static int arg(Build *b, int node, int dtype, int access, int64_t offset, int64_t numel) {
    b->args[b->k.nargs] = (KirArg){.node = node,
                                   .dtype = (uint8_t)dtype,
                                   .access = (uint8_t)access,
                                   .offset = offset,
                                   .numel = numel,
                                   .divisor = 1};
    return b->k.nargs++;
}
static int loop(Build *b, int64_t cols) {
    b->cols[b->k.nloops] = cols;
    return ++b->k.nloops;
}
static int st(Build *b, int op, int type, int lp, int a, int bb, int c, double value, int node) {
    if (b->k.nstmts == MAXS) abort();
    b->st[b->k.nstmts] = (KirStmt){.op = (uint8_t)op,
                                   .type = (uint8_t)type,
                                   .loop = (uint16_t)lp,
                                   .a = a,
                                   .b = bb,
                                   .c = c,
                                   .node = node,
                                   .value = value};
    return b->k.nstmts++;
}
#define K(op, t, l, a, b2) st(b, KOP_##op, KT_##t, l, a, b2, -1, 0, node)
#define CONST(t, l, v) st(b, KOP_CONST, KT_##t, l, -1, -1, -1, v, node)

// A layernorm-like row kernel: mean in f64 over C columns, then y = (x - mean) * g.
static void build_norm(Build *b, int node, int64_t rows, int64_t C) {
    begin(b, KK_EXPR, rows, node);
    int x = arg(b, node - 1, KT_F32, KA_READ, 0, rows * C), g = arg(b, node - 2, KT_F32, KA_READ, 0, C);
    int y = arg(b, node, KT_F32, KA_WRITE | KA_ROWLOCAL, 0, rows * C);
    int row = K(ROW, I64, 0, -1, -1), cc = CONST(I64, 0, (double)C), base = K(MUL, I64, 0, row, cc);
    int l1 = loop(b, C);
    int col = K(COL, I64, l1, -1, -1), i1 = K(ADD, I64, l1, base, col), x1 = K(LOAD, F32, l1, x, i1);
    int x64 = K(CVT, F64, l1, x1, -1), sum = K(RSUM, F64, l1, x64, -1);
    int n = CONST(F64, 0, (double)C), mean64 = K(DIV, F64, 0, sum, n), mean = K(CVT, F32, 0, mean64, -1);
    int l2 = loop(b, C);
    int col2 = K(COL, I64, l2, -1, -1), i2 = K(ADD, I64, l2, base, col2), x2 = K(LOAD, F32, l2, x, i2);
    int gv = K(LOAD, F32, l2, g, col2), d = K(SUB, F32, l2, x2, mean), o = K(MUL, F32, l2, d, gv);
    st(b, KOP_STORE, KT_BOOL, l2, y, i2, o, 0, node);
}

// A loss-like kernel, a warp per row over V (odd) columns: max, log-sum-exp,
// the target's logit read at row level, the mean accumulated in f64.
static void build_loss(Build *b, int node, int64_t rows, int64_t V) {
    begin(b, KK_EXPR, rows, node);
    int lg = arg(b, node - 1, KT_F32, KA_READ, 0, rows * V), tg = arg(b, node - 2, KT_I32, KA_READ, 0, rows);
    int out = arg(b, node, KT_F32, KA_ACC64, 0, 1);
    b->args[out].divisor = (double)rows;
    int row = K(ROW, I64, 0, -1, -1), vv = CONST(I64, 0, (double)V), base = K(MUL, I64, 0, row, vv);
    int l1 = loop(b, V);
    int c1 = K(COL, I64, l1, -1, -1), i1 = K(ADD, I64, l1, base, c1), x1 = K(LOAD, F32, l1, lg, i1);
    int mx = K(RMAX, F32, l1, x1, -1);
    int l2 = loop(b, V);
    int c2 = K(COL, I64, l2, -1, -1), i2 = K(ADD, I64, l2, base, c2), x2 = K(LOAD, F32, l2, lg, i2);
    int e = K(EXP, F32, l2, K(SUB, F32, l2, x2, mx), -1), sum = K(RSUM, F32, l2, e, -1);
    int lse = K(ADD, F32, 0, mx, K(LOG, F32, 0, sum, -1));
    int t = K(CVT, I64, 0, K(LOAD, I32, 0, tg, row), -1), xt = K(LOAD, F32, 0, lg, K(ADD, I64, 0, base, t));
    int zero = CONST(F32, 0, 0.0), neg = K(LT, BOOL, 0, t, CONST(I64, 0, 0));
    int li = st(b, KOP_SELECT, KT_F32, 0, neg, zero, K(SUB, F32, 0, lse, xt), 0, node);
    st(b, KOP_ACC, KT_BOOL, 0, out, CONST(I64, 0, 0), K(CVT, F64, 0, li, -1), 0, node);
}

// Elementwise, a thread per row: y = x * sigmoid(x) with 1/0 special values in constants.
static void build_silu(Build *b, int node, int64_t n) {
    begin(b, KK_EXPR, n, node);
    int x = arg(b, node - 1, KT_F32, KA_READ, 0, n), y = arg(b, node, KT_F32, KA_WRITE, 0, n);
    int row = K(ROW, I64, 0, -1, -1), xv = K(LOAD, F32, 0, x, row);
    int one = CONST(F32, 0, 1.0),
        s = K(DIV, F32, 0, one, K(ADD, F32, 0, one, K(EXP, F32, 0, K(NEG, F32, 0, xv, -1), -1)));
    int inf = CONST(F32, 0, 1.0 / 0.0), v = K(MIN, F32, 0, K(MUL, F32, 0, xv, s), inf);
    st(b, KOP_STORE, KT_BOOL, 0, y, row, v, 0, node);
}

// C[M, N] = A @ B, with a bias epilogue kernel out = C + bias[col].
static void build_gemm(Build *gm, Build *b, int node, int64_t M, int64_t N, int64_t Kd, int epi_index, int gemm_index) {
    begin(gm, KK_GEMM, 1, node);
    arg(gm, node, KT_F32, KA_WRITE, 0, M * N), arg(gm, node - 1, KT_F32, KA_READ, 0, M * Kd);
    arg(gm, node - 2, KT_F32, KA_READ, 0, Kd * N);
    gm->k.gemm = (KirGemm){.M = M, .N = N, .K = Kd, .batch = 1, .lda = Kd, .ldb = N, .ldc = N, .epilogue = epi_index};
    begin(b, KK_EXPR, M, node + 1);
    b->k.anchor = -1, b->k.fused_into = gemm_index;
    int c = arg(b, node, KT_F32, KA_READ | KA_ROWLOCAL, 0, M * N), bias = arg(b, node - 3, KT_F32, KA_READ, 0, N);
    int o = arg(b, node + 1, KT_F32, KA_WRITE | KA_ROWLOCAL, 0, M * N);
    node = node + 1;
    int row = K(ROW, I64, 0, -1, -1), base = K(MUL, I64, 0, row, CONST(I64, 0, (double)N));
    int l = loop(b, N);
    int col = K(COL, I64, l, -1, -1), i = K(ADD, I64, l, base, col);
    int s = K(ADD, F32, l, K(LOAD, F32, l, c, i), K(LOAD, F32, l, bias, col));
    st(b, KOP_STORE, KT_BOOL, l, o, i, s, 0, node);
}

static void build_attn(Build *b, int bwd, int node, int64_t B, int64_t T, int64_t H, int64_t KVH, int64_t D,
                       int causal) {
    begin(b, bwd ? KK_ATTN_BWD : KK_ATTN, 1, node);
    int64_t nq = B * T * H * D, nk = B * T * KVH * D;
    arg(b, node, KT_F32, KA_WRITE, 0, bwd ? nq + 2 * nk : nq);
    if (bwd) arg(b, node - 4, KT_F32, KA_READ, 0, nq);
    arg(b, node - 1, KT_F32, KA_READ, 0, nq), arg(b, node - 2, KT_F32, KA_READ, 0, nk);
    arg(b, node - 3, KT_F32, KA_READ, 0, nk);
    if (bwd) arg(b, node - 1, KT_F32, KA_READ, 0, nq);                // y
    arg(b, node - 1, KT_F32, bwd ? KA_READ : KA_WRITE, 0, B * H * T); // lse, stored fp32
    b->k.attn = (KirAttn){.B = B,
                          .T = T,
                          .H = H,
                          .KVH = KVH,
                          .D = D,
                          .Dv = D,
                          .causal = causal,
                          .scale = 1.0 / sqrt((double)D),
                          .helper = {-1, -1}};
}

static int find_str(const char *hay, const char *needle, const char *what) {
    if (strstr(hay, needle)) return 1;
    FAIL("the %s message lacks \"%s\":\n%s", what, needle, hay);
    return 0;
}

static void check_handmade(const Graph *g, const char *path) {
    enum { NK = 8 };
    static Build b[NK];
    int nb = g->parts[PART_BLOCK].nodes.n;
    int n0 = nb > 12 ? 6 : nb - 1; // node ids only name origins; keep them inside the block
    build_norm(&b[0], n0, 6, 800);
    build_loss(&b[1], n0, 5, 301);
    build_silu(&b[2], n0, 1000);
    build_gemm(&b[3], &b[4], n0 - 1, 64, 96, 32, 4, 3);
    build_attn(&b[5], 0, n0, 2, 40, 4, 2, 16, 1);
    build_attn(&b[6], 1, n0, 2, 40, 4, 2, 64, 0);
    static KirKernel ks[NK];
    for (int i = 0; i < 7; i++) {
        ks[i] = b[i].k;
        char err[512];
        CHECK(kir_check(&ks[i], nb, err, sizeof err) == 0, "hand-built kernel %d: %s", i, err);
    }
    KirProgram prog = {0};
    prog.parts[PART_BLOCK] = (KirSet){ks, 7};

    for (int a = 0; a < 2; a++) { // f32 with exact f64 for sm_80, bf16 with fp32 arithmetic for sm_90
        int bf = a;
        for (int i = 0; bf && i < 7; i++) { // bf16 storage, as the storage rule marks float tensors
            for (int j = 0; j < ks[i].nargs; j++)
                if (ks[i].args[j].dtype == KT_F32 && ks[i].args[j].node >= 0 && !(ks[i].args[j].access & KA_ACC32) &&
                    !((ks[i].kind == KK_ATTN || ks[i].kind == KK_ATTN_BWD) && j == ks[i].nargs - 1)) // (lse)
                    ks[i].args[j].dtype = KT_BF16;
        }
        const char *arch = a ? "sm_90" : "sm_80";
        CudaOptions opt = {.arch = arch, .model_path = path, .exact_f64 = !a};
        CudaBinary bin;
        CudaSource src;
        char err[8192];
        int rc = cuda_build(&prog, g, &opt, &bin, &src, err, sizeof err);
        CHECK(rc == 0, "hand-built kernels, %s, %s: %s", arch, bf ? "bf16" : "f32", err);
        if (rc) {
            cuda_source_free(&src);
            continue;
        }
        CHECK(bin.cubin_len > 0 && bin.ptx_len > 0 && strstr(bin.ptx, ".target sm_") != NULL, "no cubin or PTX");
        CHECK(src.nexpr == 4 && src.nattn == 2, "%d expression kernels, %d attention variants", src.nexpr, src.nattn);
        for (int i = 0; i < src.ninfo; i++) {
            const CudaKernelInfo *in = &src.info[i];
            if (in->index == 0)
                CHECK(in->vectorised && in->block == 256, "the norm kernel: vec %d block %d", in->vectorised,
                      in->block);
            if (in->index == 1) CHECK(!in->vectorised && in->block == 128 && in->finish_grid == 1, "the loss kernel");
            if (in->index == 3)
                CHECK(in->epilogue == CUDA_EPI_BIAS, "the GEMM's epilogue: %s", cuda_epilogue_name(in->epilogue));
            if (in->index == 5)
                CHECK(!strcmp(in->symbol, bf ? "bf16_d16_causal" : "f32_d16_causal"), "attention %s", in->symbol);
        }
        CHECK(strstr(src.text, bf ? "bf16 *a2" : "float *a2") != NULL, "storage type of the norm's output");
        // the norm's second loop reads x from the first loop's registers: one pass over memory
        CHECK(strstr(src.text, "= v5_r[mt_it][3];") != NULL, "the norm kernel reloads x");
        // f64 arithmetic stays double only when asked
        CHECK((strstr(src.text, "double v6_0 = (double)v5_0;") != NULL) == !a, "f64 statements in %s",
              a ? "fp32" : "double");
        cuda_source_free(&src);
        nvrtc_binary_free(&bin);
    }

    // a line that does not compile, and one that only warns: both fail, naming
    // line, kernel and op (without the attention kernels, which take most of NVRTC's time)
    prog.parts[PART_BLOCK].n = 5;
    for (int w = 0; w < 2; w++) {
        CudaOptions opt = {.arch = "sm_90", .model_path = path};
        if (w) opt.inject_warning = 2;
        else opt.inject_error = 2;
        CudaBinary bin;
        char err[8192];
        int rc = cuda_build(&prog, g, &opt, &bin, NULL, err, sizeof err);
        CHECK(rc != 0, "the injected %s compiled", w ? "warning" : "error");
        if (rc == 0) {
            nvrtc_binary_free(&bin);
            continue;
        }
        const Node *n = g->parts[PART_BLOCK].nodes.items[n0];
        char want[256];
        snprintf(want, sizeof want, "in kernel mt_k1_1: op %s (node %d of the block) at %s:%d:%d", op_name(n->op), n0,
                 path, n->loc.line, n->loc.col);
        const char *what = w ? "warning" : "error";
        find_str(err, "mt.cu:", what);
        find_str(err, w ? "int mt_unused_" : "mt_no_such_function(", what);
        find_str(err, want, what);
        if (w) find_str(err, "(warnings are errors)", what);
        else find_str(err, ": error: identifier \"mt_no_such_function\" is undefined", what);
    }
}

// ---------------------------------------------------------------- the examples

int main(int argc, char **argv) {
    int emitter = 0, bf16 = 0, first_run = 0, first = 1;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (!strcmp(argv[first], "--emitter")) emitter = 1;
        else if (!strcmp(argv[first], "--bf16")) bf16 = 1;
        else if (!strcmp(argv[first], "--bf16-only")) bf16 = 1, first_run = 2;
        else break;
    }
    if (first == argc) {
        fprintf(stderr, "usage: test_cuda [--emitter] [--bf16 | --bf16-only] MODEL.mt...\n");
        return 2;
    }
    printf("NVRTC %s\n%-28s %-6s %-5s %8s %8s %9s %9s\n", nvrtc_version_str(), "model", "arch", "dtype", "kernels",
           "attn", "NVRTC s", "cubin KB");
    for (int m = first; m < argc; m++) {
        char *text;
        size_t len;
        if (io_read_file(argv[m], &text, &len) != 0) {
            FAIL("cannot read %s", argv[m]);
            continue;
        }
        Source src = {.path = argv[m], .text = text, .len = len};
        Diag diag = {.src = &src, .sink = stdout};
        Arena arena = {0};
        SemaOptions so = {.batch = 1, .seq = 64};
        Model *model = dsl_parse(&src, &arena, &diag);
        Graph *g = model ? compile_lower(model, &so, 1, NULL, &arena, &diag) : NULL; // (the one compile path)
        KirProgram prog;
        char err[8192];
        if (!g) {
            FAIL("%s does not compile", argv[m]);
        } else {
            prog = *g->kernels;
            if (emitter) check_handmade(g, argv[m]);
            for (int run = first_run; !emitter && run < 2 + bf16; run++) { // sm_80, sm_90, and bf16 for sm_90
                int bf = run == 2, a = run > 0;
                DType want = bf ? DT_BF16 : DT_F32;
                if (g->train.compute != want) { // the kernels of the other storage
                    g->train.compute = want;
                    if (fuse(g, &arena, &prog, err, sizeof err) != 0) {
                        FAIL("%s: fuse (%s): %s", argv[m], bf ? "bf16" : "f32", err);
                        continue;
                    }
                }
                CudaOptions opt = {.arch = a ? "sm_90" : "sm_80", .model_path = argv[m]};
                CudaBinary bin;
                CudaSource cs;
                if (cuda_build(&prog, g, &opt, &bin, &cs, err, sizeof err) != 0) {
                    FAIL("%s, %s, %s:\n%s", argv[m], opt.arch, bf ? "bf16" : "f32", err);
                    continue;
                }
                printf("%-28s %-6s %-5s %8d %8d %9.2f %9.0f\n", argv[m], opt.arch, bf ? "bf16" : "f32", cs.nexpr,
                       cs.nattn, bin.seconds, (double)bin.cubin_len / 1024);
                cuda_source_free(&cs);
                nvrtc_binary_free(&bin);
            }
        }
        arena_free(&arena);
        free(text);
    }
    printf("%s\n", check_failures ? "FAILED" : "ok");
    return check_summary("test_cuda");
}
