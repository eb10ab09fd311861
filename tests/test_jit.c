// test_jit: every JIT kernel of every part (head, block, tail; forward and
// backward) of each model given, against the reference kernels
// (runtime/backend/kernels.inc through exec_run), on fresh random inputs.
//
// For each launched kernel (an expression kernel, a GEMM with its
// epilogue, an attention kernel, a node kernel): every node of the part gets a buffer in
// two arenas filled with the same random values (f32 in [-1, 1), i32 in
// [0, min(8, smallest vocabulary)), valid token ids); the JIT runs the kernel in
// one, exec_run runs the kernel's nodes in the other, and every buffer the
// kernel writes or accumulates is compared:
//
//   error = max |jit - ref| / max |ref|   over the whole buffer
//
// which must be at most 1e-6 (fp32; the reference sums in double, as the
// generated kernels do). Exit status 0 only when every kernel passes and at
// least one was compared.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "common/plan.h"
#include "compiler/emit/emit_llvm.h"
#include "common/graph.h"
#include "runtime/backend/blas_core.h"
#include "runtime/backend/exec.h"
#include "runtime/backend/jit.h"
#include "compiler/compile.h"

static const double TOL = 1e-6;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static int is_alias(const Node *n) { return n->op == OP_VIEW || n->op == OP_RESHAPE; }

// Runs the reference for kernel k: its nodes (and its epilogue's) in order.
static void run_reference(PartState *ps, const KirSet *s, const KirKernel *k) {
    for (int i = 0; i < k->nnodes; i++) exec_run(ps, k->nodes[i], k->nodes[i] + 1);
    if (k->kind == KK_GEMM && k->gemm.epilogue >= 0) run_reference(ps, s, &s->k[k->gemm.epilogue]);
}

// Compares every written argument of k (and its epilogue's); returns the worst error.
static double compare(const KirSet *s, const KirKernel *k, const char *jit, const char *ref, const int64_t *off,
                      const Part *part, char *worst, size_t cap) {
    double w = 0;
    for (int a = 0; a < k->nargs; a++) {
        const KirArg *g = &k->args[a];
        if (g->node < 0 || !(g->access & (KA_WRITE | KA_ACC32 | KA_ACC64))) continue;
        const float *x = (const float *)(jit + off[g->node]) + g->offset,
                    *y = (const float *)(ref + off[g->node]) + g->offset;
        double diff = 0, mag = 0;
        for (int64_t i = 0; i < g->numel; i++) {
            double d = fabs((double)x[i] - (double)y[i]);
            if (!(d <= diff)) diff = d; // NaN wins
            if (fabs(y[i]) > mag) mag = fabs(y[i]);
        }
        double e = diff / (mag > 1e-30 ? mag : 1e-30);
        if (getenv("TEST_JIT_DEBUG") && e > TOL)
            for (int64_t i = 0; i < g->numel; i++)
                if (fabs((double)x[i] - (double)y[i]) > TOL * mag) {
                    fprintf(stderr, "  first bad element %lld of %lld: jit %g ref %g\n", (long long)i,
                            (long long)g->numel, x[i], y[i]);
                    break;
                }
        if (!(e <= w)) {
            w = e;
            const Node *n = part->nodes.items[g->node];
            snprintf(worst, cap, "%%%d %s [+%lld, %lld elements]", n->id, op_name(n->op), (long long)g->offset,
                     (long long)g->numel);
        }
    }
    if (k->kind == KK_GEMM && k->gemm.epilogue >= 0) {
        char w2[256];
        double e = compare(s, &s->k[k->gemm.epilogue], jit, ref, off, part, w2, sizeof w2);
        if (!(e <= w)) w = e, snprintf(worst, cap, "%s", w2);
    }
    return w;
}

static int check_model(const char *path, int *compared) {
    char *text;
    size_t len;
    if (io_read_file(path, &text, &len) != 0) {
        fprintf(stderr, "%s: cannot read\n", path);
        return 1;
    }
    Source src = {.path = path, .text = text, .len = len};
    Diag diag = {.src = &src, .sink = stderr};
    Arena arena = {0};
    Model *m = dsl_parse(&src, &arena, &diag);
    Graph *g = m ? compile_lower(m, NULL, 1, NULL, &arena, &diag) : NULL; // (the one compile path: fused once)
    int failed = 0;
    char err[2048];
    KirProgram kp = {0}; // g's, which the checks below damage and mend
    uint8_t *kir = NULL, *bc = NULL;
    size_t kir_len = 0, bc_len = 0;
    Jit *j = NULL;
    if (g) kp = *g->kernels;
    if (!g) {
        failed = 1;
    } else if (kir_write(&kp, &kir, &kir_len) != 0 || emit_llvm(&kp, g, &bc, &bc_len, err, sizeof err) != 0 ||
               !(j = jit_create(g, kir, kir_len, bc, bc_len, err, sizeof err))) {
        fprintf(stderr, "%s: %s\n", path, err);
        failed = 1;
    }
    // a pooled load-balancing loss's sums of every layer (nonnegative), the last layer running
    int64_t pooled_layers = 0, pooled_rows = 0,
            pooled_E = g ? graph_pooled_experts(g, &pooled_layers, &pooled_rows) : 0;
    LoadBalancePool pool = {calloc((size_t)(g ? g->layers * 2 * pooled_E : 0) + 1, sizeof(double)),
                            g ? g->layers - 1 : 0, g ? g->layers : 0, (double)(pooled_layers * pooled_rows)};
    for (int64_t e = 0; g && e < g->layers * 2 * pooled_E; e++) pool.sums[e] = (double)(next_u32() % 1000);
    if (j) jit_set_pool(j, &pool);
    // token ids below every vocabulary the model indexes with them
    int64_t ids = 8;
    for (int p = 0; g && p < PART_COUNT; p++)
        for (int i = 0; i < g->parts[p].nodes.n; i++) {
            const Node *n = g->parts[p].nodes.items[i];
            int64_t v = n->op == OP_EMBED               ? n->in[0]->shape.dims[0]
                        : n->op == OP_EMBED_BWD         ? n->shape.dims[0]
                        : n->op == OP_CROSS_ENTROPY     ? n->in[0]->shape.dims[n->in[0]->shape.rank - 1]
                        : n->op == OP_CROSS_ENTROPY_BWD ? n->shape.dims[n->shape.rank - 1]
                                                        : ids;
            if (v < ids) ids = v;
        }
    // an emitter failure names the kernel and the op its statement came from
    for (int i = 0; j && i < kp.parts[PART_BLOCK].n; i++) {
        KirKernel *k = &kp.parts[PART_BLOCK].k[i];
        if (k->kind != KK_EXPR || k->nstmts < 2) continue;
        uint8_t *bad = NULL;
        size_t bad_len = 0;
        int last = k->nstmts - 1, op = k->stmts[last].op;
        k->stmts[last].op = KOP_COUNT;
        char want[64], what[96];
        snprintf(want, sizeof want, "kernel %s", kir_symbol(what, sizeof what, PART_BLOCK, i));
        const Node *n = g->parts[PART_BLOCK].nodes.items[k->stmts[last].node];
        int refused = emit_llvm(&kp, g, &bad, &bad_len, err, sizeof err) != 0;
        int named = refused && strstr(err, want) && strstr(err, op_name(n->op));
        printf("%s %s: a bad statement is refused naming its kernel and op: %s\n", named ? "ok  " : "FAIL", path,
               refused ? err : "accepted");
        failed += !named;
        k->stmts[last].op = (uint8_t)op;
        free(bad);
        break;
    }
    // a node kernel (KK_NODE) whose arguments are not its node's is refused at load
    for (int i = 0; j && i < kp.parts[PART_BLOCK].n; i++) {
        KirKernel *k = &kp.parts[PART_BLOCK].k[i];
        if (k->kind != KK_NODE) continue;
        uint8_t *bad = NULL;
        size_t bad_len = 0;
        k->args[1].numel--;
        Jit *bj = kir_write(&kp, &bad, &bad_len) == 0 ? jit_create(g, bad, bad_len, bc, bc_len, err, sizeof err) : NULL;
        int named = !bj && strstr(err, "a node kernel whose arguments are not its node's");
        printf("%s %s: a node kernel with a shortened operand is refused: %s\n", named ? "ok  " : "FAIL", path,
               bj ? "accepted" : err);
        failed += !named;
        k->args[1].numel++;
        jit_destroy(bj);
        free(bad);
        break;
    }
    for (int p = 0; j && p < PART_COUNT; p++) {
        const Part *part = &g->parts[p];
        const KirSet *s = &jit_program(j)->parts[p];
        int64_t *off = calloc((size_t)part->nodes.n + 1, sizeof *off), total = 0;
        for (int i = 0; i < part->nodes.n; i++) {
            const Node *n = part->nodes.items[i];
            off[i] = -1;
            if (is_alias(n)) continue;
            off[i] = total;
            total += (shape_numel(&n->shape) * 4 + 63) & ~(int64_t)63;
        }
        char *is_target = calloc((size_t)part->nodes.n + 1, 1); // (nodes.n) the loss's targets, some ignored
        for (int i = 0; i < part->nodes.n; i++) {
            const Node *n = part->nodes.items[i];
            if (n->op != OP_CROSS_ENTROPY && n->op != OP_CROSS_ENTROPY_BWD) continue;
            for (int q = 0; q < part->nodes.n; q++) is_target[q] |= part->nodes.items[q] == n->in[n->nin - 1];
        }
        char *A = aligned_alloc(64, (size_t)total + 64); // (total) bytes: every node, the JIT's side
        char *R = aligned_alloc(64, (size_t)total + 64); // (total) bytes: the same, the reference's side
        for (int i = 0; i < s->n; i++) {
            const KirKernel *k = &s->k[i];
            if (!kir_is_launched(k)) continue;
            for (int n = 0; n < part->nodes.n; n++) { // fresh random inputs for every kernel
                const Node *nd = part->nodes.items[n];
                if (off[n] < 0) continue;
                for (int64_t e = 0; e < shape_numel(&nd->shape); e++) {
                    if (is_target[n] && e % 3 == 1) ((int32_t *)(A + off[n]))[e] = GRAPH_IGNORE_TARGET; // masked rows
                    else if (nd->dtype == DT_I32) ((int32_t *)(A + off[n]))[e] = (int32_t)(next_u32() % (uint32_t)ids);
                    else ((float *)(A + off[n]))[e] = (float)((double)next_u32() / 2147483648.0 - 1.0);
                }
            }
            memcpy(R, A, (size_t)total);
            PartState ps;
            if (exec_init_at(&ps, part, PREC_F32, R, off) != 0) abort();
            ps.pool = pool;
            for (int n = 0; n < part->nodes.n; n++) { // what the kernels inline, the reference reads from memory
                const Node *nd = part->nodes.items[n];
                if (nd->op == OP_CONST || nd->op == OP_ARANGE) exec_run(&ps, n, n + 1);
            }
            run_reference(&ps, s, k);
            exec_free(&ps);
            jit_run_kernel(j, p, i, 0, A, off);
            char worst[256] = "nothing written";
            double e = compare(s, k, A, R, off, part, worst, sizeof worst);
            int ok = e <= TOL;
            printf("%s %s %s k%d %s (%d nodes, anchor %%%d): error %.3g at %s\n", ok ? "ok  " : "FAIL", path,
                   part_name(p), i, kir_kind_name(k->kind), k->nnodes, k->anchor, e, worst);
            failed += !ok;
            (*compared)++;
        }
        free(A);
        free(R);
        free(off);
        free(is_target);
    }
    jit_destroy(j);
    free(pool.sums);
    free(kir);
    free(bc);
    arena_free(&arena);
    free(text);
    return failed;
}

int main(int argc, char **argv) {
    mt_blas_core_pick(); // OpenBLAS's kernels for this CPU, as mtrun picks them
    int failed = 0, compared = 0;
    for (int a = 1; a < argc; a++) failed += check_model(argv[a], &compared);
    printf("%d kernels compared, %d failed (tolerance %g, max |jit - ref| / max |ref| per buffer)\n", compared, failed,
           TOL);
    return failed || !compared;
}
