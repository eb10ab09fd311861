// test_jit_moe: the JIT's generated node kernels (KK_NODE: top_k, moe,
// moe_bwd, load_balance and its backward, add_loss; compiler/emit/emit_llvm_node.c)
// against the plain kernels (runtime/backend/kernels.inc) they replace, for each
// model given, with f32 and with bf16 storage.
//
// Each node kernel of every part runs on fresh random operands in [-1, 1)
// (bf16 storage: those values rounded to bf16), with sparse gates: moe and
// moe_bwd see about a quarter of each row's gates set and expert 0 selected
// by no row (dropless: nothing is computed for it, its weight gradients are
// 0); load_balance's mask is 0 or 1. The output buffer is poisoned with NaN
// first: every element must be written. The reference is kernel_run_f32 on
// the operands widened to f32, its output rounded to the storage type:
//
//   error = max |jit - ref| / max |ref|   over the output
//
// exactly 0 where the JIT's exp is libm's, as the plain kernels' (bf16
// plans, and f32 ones under MT_JIT_LIBMVEC=0): the same f32 and f64
// operations in the same order, the same library GEMMs. At most 1e-6 on f32
// plans otherwise, whose vectorised expf (libmvec) may differ from libm's in
// the last bit. Exit 0 only when every kernel passes and a moe and a moe_bwd
// were compared. Each line also gives the kernel's time, the best of 5
// runs, next to the plain kernel's on the same operands (the bf16 plan's
// includes widening its operands to f32 and rounding its output).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bf16.h"
#include "common/io.h"
#include "common/storage.h"
#include "compiler/emit/emit_llvm.h"
#include "compiler/compile.h"
#include "runtime/backend/blas_core.h"
#include "runtime/backend/jit.h"
#include "runtime/backend/kernels.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double uniform(void) { // [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static float get(const char *p, int bf, int64_t i) {
    return bf ? f32_from_bf16(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static void put(char *p, int bf, int64_t i, float v) {
    if (bf) ((uint16_t *)p)[i] = bf16_from_f32(v);
    else ((float *)p)[i] = v;
}

// Random operand j of node n into buffer p (bf: bf16 storage).
static void fill_operand(const Node *n, int j, char *p, int bf) {
    const Node *in = n->in[j];
    int64_t N = shape_numel(&in->shape), E = in->shape.dims[in->shape.rank - 1];
    int gates = (n->op == OP_MOE && j == 1) || (n->op == OP_MOE_BWD && j == 2);
    int mask = (n->op == OP_LOAD_BALANCE && j == 1) || (n->op == OP_LOAD_BALANCE_BWD && j == 2);
    for (int64_t i = 0; i < N; i++) {
        float v = (float)uniform();
        if (gates && (i % E == 0 || uniform() < 0.5)) v = 0; // expert 0 unselected, about half the rest zero
        if (mask) v = uniform() < 0 ? 0.0f : 1.0f;
        put(p, bf, i, v);
    }
}

// Checks node kernel i of part p; counts moe kinds seen. Returns failures.
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int libm; // MT_JIT_LIBMVEC=0: the JIT's exp is libm's, as the plain kernels'

static int check_kernel(Jit *j, const Graph *g, int p, int i, int bf, const char *path, int *seen,
                        LoadBalancePool *pool) {
    const KirKernel *k = &jit_program(j)->parts[p].k[i];
    const Node *n = g->parts[p].nodes.items[k->anchor];
    int64_t *off = calloc((size_t)g->parts[p].nodes.n, sizeof *off), total = 0;
    for (int a = 0; a < k->nargs; a++) {
        off[k->args[a].node] = total;
        total += (k->args[a].numel * 4 + 63) & ~(int64_t)63;
    }
    char *A = aligned_alloc(64, (size_t)total + 64); // (total) bytes: the kernel's arguments, in storage type
    float *ref = malloc((size_t)k->args[0].numel * sizeof(float)); // (output numel) the plain kernel's output
    void *in[8] = {0};
    int first[8] = {0}; // (nargs) the first argument of the same node (a fused gate_up is moe's operand twice)
    for (int a = 1; a < k->nargs; a++) {
        first[a] = a;
        for (int b = 1; b < a; b++)
            if (k->args[b].node == k->args[a].node && first[a] == a) first[a] = b;
        if (first[a] != a) {
            in[a - 1] = in[first[a] - 1];
            continue;
        }
        char *buf = A + off[k->args[a].node];
        int abf = k->args[a].dtype == KT_BF16;
        fill_operand(n, a - 1, buf, abf);
        float *w = aligned_alloc(64, ((size_t)k->args[a].numel * sizeof(float) + 63) &
                                         ~(size_t)63); // (operand numel) widened
        for (int64_t e = 0; e < k->args[a].numel; e++) w[e] = get(buf, abf, e);
        in[a - 1] = w;
    }
    char *out = A + off[k->args[0].node];
    int obf = k->args[0].dtype == KT_BF16;                                // a loss stays f32
    for (int64_t e = 0; e < k->args[0].numel; e++) put(out, obf, e, NAN); // poison
    in[n->nin] = pool; // a load-balancing loss's, after its operands (not freed below)
    kernel_run_f32(n, ref, in);
    jit_run_kernel(j, p, i, 0, A, off);
    double t_jit = 1e30, t_plain = 1e30;      // the best of 5 runs each, after the checked ones
    char *again = malloc((size_t)total + 64); // (total) bytes: the arguments, for timing runs that overwrite
    float *ref2 = malloc((size_t)k->args[0].numel * sizeof(float)); // (output numel)
    memcpy(again, A, (size_t)total);
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        kernel_run_f32(n, ref2, in);
        double t1 = now_s();
        jit_run_kernel(j, p, i, 0, again, off);
        double t2 = now_s();
        if (t1 - t0 < t_plain) t_plain = t1 - t0;
        if (t2 - t1 < t_jit) t_jit = t2 - t1;
    }
    free(again), free(ref2);
    double diff = 0, mag = 0;
    for (int64_t e = 0; e < k->args[0].numel; e++) {
        double want = obf ? bf16_round(ref[e]) : ref[e], d = fabs((double)get(out, obf, e) - want);
        if (!(d <= diff)) diff = d;                // NaN wins
        if (d > 0 && getenv("TEST_JIT_MOE_DEBUG")) // every differing element
            fprintf(stderr, "  element %lld: jit %.9g ref %.9g\n", (long long)e, get(out, obf, e), want);
        if (fabs(want) > mag) mag = fabs(want);
    }
    double err = diff / (mag > 1e-30 ? mag : 1e-30), tol = obf || libm ? 0 : 1e-6;
    int ok = err <= tol;
    printf("%s %s %s %s k%d %s: error %.3g (tolerance %g) over %lld elements; %.3f ms (plain kernel %.3f ms)\n",
           ok ? "ok  " : "FAIL", path, bf ? "bf16" : "f32", part_name(p), i, op_name(n->op), err, tol,
           (long long)k->args[0].numel, 1e3 * t_jit, 1e3 * t_plain);
    seen[0] += n->op == OP_MOE, seen[1] += n->op == OP_MOE_BWD;
    for (int a = 0; a < n->nin; a++)
        if (first[a + 1] == a + 1) free(in[a]);
    free(ref), free(A), free(off);
    return !ok;
}

static int check_model(const char *path, int bf, int *seen) {
    char *text, err[2048];
    size_t len;
    if (io_read_file(path, &text, &len) != 0) return fprintf(stderr, "%s: cannot read\n", path), 1;
    Source src = {.path = path, .text = text, .len = len};
    Diag diag = {.src = &src, .sink = stderr};
    Arena arena = {0};
    Model *m = dsl_parse(&src, &arena, &diag);
    SemaOptions opt = {.compute = bf ? 2 : 1};
    Graph *g = m ? compile_lower(m, &opt, 1, NULL, &arena, &diag) : NULL; // (the one compile path: fused once)
    uint8_t *kir = NULL, *bc = NULL;
    size_t kir_len = 0, bc_len = 0;
    Jit *j = NULL;
    int failed = 1;
    if (g) {
        if (kir_write(g->kernels, &kir, &kir_len) != 0 ||
            emit_llvm(g->kernels, g, &bc, &bc_len, err, sizeof err) != 0 ||
            !(j = jit_create(g, kir, kir_len, bc, bc_len, err, sizeof err)))
            fprintf(stderr, "%s: %s\n", path, err);
        else failed = 0;
    }
    // a pooled load-balancing loss's sums of every layer (small integers), the last layer running
    int64_t pooled_layers = 0, pooled_rows = 0,
            pooled_E = j ? graph_pooled_experts(g, &pooled_layers, &pooled_rows) : 0;
    LoadBalancePool pool = {calloc((size_t)(j ? g->layers * 2 * pooled_E : 0) + 1, sizeof(double)),
                            j ? g->layers - 1 : 0, j ? g->layers : 0, (double)(pooled_layers * pooled_rows)};
    for (int64_t e = 0; j && e < g->layers * 2 * pooled_E; e++) pool.sums[e] = (double)((e * 7919) % 97);
    if (j) jit_set_pool(j, &pool);
    for (int p = 0; j && p < PART_COUNT; p++)
        for (int i = 0; i < jit_program(j)->parts[p].n; i++)
            if (jit_program(j)->parts[p].k[i].kind == KK_NODE)
                failed += check_kernel(j, g, p, i, bf, path, seen, &pool);
    jit_destroy(j);
    free(pool.sums);
    free(kir), free(bc), free(text);
    arena_free(&arena);
    return failed;
}

int main(int argc, char **argv) {
    mt_blas_core_pick();
    libm = getenv("MT_JIT_LIBMVEC") && !strcmp(getenv("MT_JIT_LIBMVEC"), "0");
    int failed = 0, seen[2] = {0, 0}; // moe and moe_bwd kernels compared
    for (int a = 1; a < argc; a++)
        for (int bf = 0; bf < 2; bf++) failed += check_model(argv[a], bf, seen);
    if (!seen[0] || !seen[1]) printf("FAIL: no moe or no moe_bwd kernel compared\n"), failed++;
    printf("%s\n", failed ? "FAILED" : "all node kernels match the plain kernels");
    return failed != 0 || argc < 2;
}
