// test_scan_docs: the recurrent ops' plain kernels (runtime/backend/kernels_scan.inc)
// with packed documents. A row of T = 11 positions holding two documents,
// [0, 5) and [5, 11) (seg_start, kernels.h), must give what the two
// documents give as rows of their own: conv1d, gated_delta_rule and ssd,
// forward and backward (the packed gradients compared document by
// document; conv1d's weight gradient is the sum of the two). In double
// precision, to 1e-12 of the largest value. So that the test can fail, the
// same row without seg_start must differ from the two documents.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/scan.h"
#include "runtime/backend/kernels.h"

enum { T = 11, SPLIT = 5, C = 3, K = 4, H = 4, HK = 2, DK = 3, DV = 2 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) { // [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

static Shape shape3(int64_t t, int64_t w) { return (Shape){.rank = 3, .dims = {1, t, w}}; }

// The operands' widths per position (time-dependent operands) for op, and how many; conv1d's w is not one.
static int widths(OpKind op, int64_t *w) {
    if (op == OP_CONV1D) return w[0] = C, 1;
    w[0] = HK * DK, w[1] = HK * DK, w[2] = H * DV, w[3] = H, w[4] = H;
    return 5;
}

// Runs forward op (or its backward, dy given) on positions [a, b) of the
// full operands x (each (T, width)), with seg_start seg over those positions,
// into out (the node's output, numel returned).
static int64_t run(OpKind op, int bwd, int64_t a, int64_t b, double *const *x, const double *wconv, const double *dy,
                   const int32_t *seg, double *out) {
    int64_t w[5], n = widths(op, w), t = b - a;
    Node ops[7] = {{0}}, node = {0};
    Node *in[7];
    void *ptr[7];
    int k = 0;
    if (bwd)
        ops[k].shape = shape3(t, op == OP_CONV1D ? C : H * DV), in[k] = &ops[k],
        ptr[k++] = (void *)(dy + a * (op == OP_CONV1D ? C : H * DV));
    for (int i = 0; i < n; i++) ops[k].shape = shape3(t, w[i]), in[k] = &ops[k], ptr[k++] = x[i] + a * w[i];
    if (op == OP_CONV1D) ops[k].shape = (Shape){.rank = 2, .dims = {C, K}}, in[k] = &ops[k], ptr[k++] = (void *)wconv;
    static const OpKind BWD[] =
        {[OP_CONV1D] = OP_CONV1D_BWD, [OP_DELTA_RULE] = OP_DELTA_RULE_BWD, [OP_SSD] = OP_SSD_BWD};
    node.op = bwd ? BWD[op] : op, node.in = in, node.nin = k;
    node.heads = H, node.kv_heads = HK, node.scale = 0.5, node.eps = op == OP_DELTA_RULE ? 1e-6 : 0;
    int64_t numel = op == OP_CONV1D ? t * C + (bwd ? C * K : 0) : bwd ? t * (2 * HK * DK + H * DV + 2 * H) : t * H * DV;
    node.shape = bwd ? (Shape){.rank = 1, .dims = {numel}} : shape3(t, op == OP_CONV1D ? C : H * DV);
    ConvDims cd;
    ScanDims sd;
    if (!CHECK(op == OP_CONV1D ? conv_dims(&node, &cd) : scan_dims(&node, &sd), "%s: shapes refused", op_name(node.op)))
        return 0;
    kernel_run_doc_starts_f64(&node, out, ptr, seg);
    return numel;
}

// The largest difference between positions [a, b) of the whole row's output (or packed gradients) and
// a run over those positions alone, into *err, and the largest value of the latter into *big.
static void compare(OpKind op, int bwd, const double *whole, const double *part, int64_t a, int64_t b, double *err,
                    double *big) {
    int64_t t = b - a, w[5], np = 1;
    if (!bwd || op == OP_CONV1D) w[0] = op == OP_CONV1D ? C : H * DV;
    else np = widths(op, w);
    int64_t off_whole = 0, off_part = 0;
    for (int64_t p = 0; p < np; p++) {
        for (int64_t i = 0; i < t * w[p]; i++) {
            double u = whole[off_whole + a * w[p] + i], v = part[off_part + i];
            if (fabs(u - v) > *err) *err = fabs(u - v);
            if (fabs(v) > *big) *big = fabs(v);
        }
        off_whole += T * w[p], off_part += t * w[p];
    }
}

static void check_op(OpKind op) {
    int64_t w[5], n = widths(op, w);
    double *x[5], wconv[C * K], dy[T * H * DV], whole[T * 64], first[T * 64], second[T * 64], plain[T * 64];
    for (int i = 0; i < n; i++) {
        x[i] = malloc((size_t)(T * w[i]) * sizeof(double));
        for (int64_t j = 0; j < T * w[i]; j++)
            x[i][j] = i == 3 ? -0.5 * fabs(uniform()) : i == 4 ? 0.5 + 0.4 * uniform() : uniform(); // g <= 0, beta
    }
    for (int j = 0; j < C * K; j++) wconv[j] = uniform();
    for (int j = 0; j < T * H * DV; j++) dy[j] = uniform();
    int32_t seg[T], zero[T] = {0};
    for (int t = 0; t < T; t++) seg[t] = t < SPLIT ? 0 : SPLIT;
    for (int bwd = 0; bwd < 2; bwd++) {
        int64_t nw = run(op, bwd, 0, T, x, wconv, dy, seg, whole);
        run(op, bwd, 0, SPLIT, x, wconv, dy, zero, first);
        run(op, bwd, SPLIT, T, x, wconv, dy, zero, second);
        run(op, bwd, 0, T, x, wconv, dy, NULL, plain);
        double err = 0, big = 0, moved = 0, unused = 0;
        compare(op, bwd, whole, first, 0, SPLIT, &err, &big);
        compare(op, bwd, whole, second, SPLIT, T, &err, &big);
        compare(op, bwd, plain, first, 0, SPLIT, &moved, &unused);
        compare(op, bwd, plain, second, SPLIT, T, &moved, &unused);
        if (op == OP_CONV1D && bwd) // dw: the two documents' summed
            for (int j = 0; j < C * K; j++) {
                double u = whole[T * C + j], v = first[SPLIT * C + j] + second[(T - SPLIT) * C + j];
                if (fabs(u - v) > err) err = fabs(u - v);
            }
        const char *name = bwd ? op_name(op == OP_CONV1D ? OP_CONV1D_BWD
                                         : op == OP_SSD  ? OP_SSD_BWD
                                                         : OP_DELTA_RULE_BWD)
                               : op_name(op);
        CHECK(nw > 0 && err <= 1e-12 * big, "%s: the packed row misses its documents by %.2e of %.2e", name, err, big);
        CHECK(moved > 1e-6 * big, "%s: without document starts the second document moves by only %.2e", name, moved);
        printf("%s %s: packed documents equal separate rows to %.1e (largest %.2e); without starts %.2e off\n",
               err <= 1e-12 * big && moved > 1e-6 * big ? "ok  " : "FAIL", name, err, big, moved);
    }
    for (int i = 0; i < n; i++) free(x[i]);
}

int main(void) {
    check_op(OP_CONV1D);
    check_op(OP_DELTA_RULE);
    check_op(OP_SSD);
    return check_summary("test_scan_docs");
}
