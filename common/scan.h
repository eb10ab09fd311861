// scan.h: the geometry of the recurrent ops of hybrid models (dsl/README.md):
// the causal depthwise convolution (OP_CONV1D) and the two linear
// recurrences, the gated delta rule (OP_DELTA_RULE, Qwen3-Next's Gated
// DeltaNet) and the Mamba-2 state-space scan (OP_SSD), forward and
// backward. One place that reads their sizes from a node and says whether
// its operands agree, for the front end, the plan reader, the kernels and
// the cost model.
//
// Both recurrences keep per batch row and head a state S[Dk, Dv] along the
// sequence, reset to 0 at each row's start and at each document's start
// (packed data):
//
//   S = exp(g_t) S                                     (g_t <= 0: the decay)
//   u = beta_t (v_t - S^T k_t)   (delta rule)     u = beta_t v_t   (ssd)
//   S = S + k_t u^T,   o_t = S^T q_t
//
// The delta rule first normalises q_t and k_t to unit length per head
// (x / sqrt(|x|^2 + eps), transformers' use_qk_l2norm_in_kernel) and scales
// q_t by `scale`; the ssd is Mamba-2's with k = B, v = x, q = C,
// beta = dt and g = A dt.
#ifndef MT_SCAN_H
#define MT_SCAN_H

#include <stdint.h>

#include "common/graph.h"

// Steps of the backward's chunks: it keeps the state at each chunk's start
// and recomputes the chunk's states from it.
enum { SCAN_CHUNK = 64 };

// Operands q[B, T, Hk*Dk], k[B, T, Hk*Dk], v[B, T, H*Dv], g[B, T, H],
// beta[B, T, H]; head h reads key head h / (H / Hk) (grouped, as
// transformers' repeat_interleave).
typedef struct ScanDims {
    int64_t B, T, H, Hk, Dk, Dv;
} ScanDims;

static inline int scan_is_op(OpKind op) {
    return op == OP_DELTA_RULE || op == OP_DELTA_RULE_BWD || op == OP_SSD || op == OP_SSD_BWD;
}
static inline int scan_is_delta(OpKind op) { return op == OP_DELTA_RULE || op == OP_DELTA_RULE_BWD; }

// The sizes of scan node n (forward or backward: its forward operands
// follow dy), 0 when its operands and attributes do not agree.
static inline int scan_dims(const Node *n, ScanDims *d) {
    int bwd = n->op == OP_DELTA_RULE_BWD || n->op == OP_SSD_BWD;
    if (n->nin != 5 + bwd || n->heads < 1 || n->kv_heads < 1 || n->heads % n->kv_heads) return 0;
    Node *const *in = n->in + bwd;
    const Shape *q = &in[0]->shape, *k = &in[1]->shape, *v = &in[2]->shape, *g = &in[3]->shape, *b = &in[4]->shape;
    if (q->rank != 3 || k->rank != 3 || v->rank != 3 || g->rank != 3 || b->rank != 3) return 0;
    *d = (ScanDims){q->dims[0], q->dims[1], n->heads, n->kv_heads, q->dims[2] / n->kv_heads, v->dims[2] / n->heads};
    for (int i = 0; i < 2; i++)
        if (k->dims[i] != q->dims[i] || v->dims[i] != q->dims[i] || g->dims[i] != q->dims[i] ||
            b->dims[i] != q->dims[i])
            return 0;
    if (d->Dk < 1 || d->Dv < 1 || d->Dk * d->Hk != q->dims[2] || k->dims[2] != q->dims[2] ||
        d->Dv * d->H != v->dims[2] || g->dims[2] != d->H || b->dims[2] != d->H)
        return 0;
    int64_t BT = d->B * d->T, packed = BT * (2 * d->Hk * d->Dk + d->H * d->Dv + 2 * d->H);
    if (bwd) return shape_eq(&n->in[0]->shape, v) && shape_numel(&n->shape) == packed;
    return n->shape.rank == 3 && shape_eq(&n->shape, v);
}

// The causal depthwise convolution: x[B, T, C], w[C, K] -> [B, T, C],
// y[b, t, c] = sum_j w[c, j] x[b, t - K + 1 + j, c] over the positions of
// t's document (PyTorch's Conv1d(groups = C, padding = K - 1), its first T
// outputs); its backward dy, x, w -> packed [dx | dw].
typedef struct ConvDims {
    int64_t B, T, C, K;
} ConvDims;

static inline int conv_dims(const Node *n, ConvDims *d) {
    int bwd = n->op == OP_CONV1D_BWD;
    if (n->nin != 2 + bwd) return 0;
    const Shape *x = &n->in[bwd]->shape, *w = &n->in[bwd + 1]->shape;
    if (x->rank != 3 || w->rank != 2 || w->dims[0] != x->dims[2] || w->dims[1] < 1) return 0;
    *d = (ConvDims){x->dims[0], x->dims[1], x->dims[2], w->dims[1]};
    if (bwd) return shape_eq(&n->in[0]->shape, x) && shape_numel(&n->shape) == shape_numel(x) + d->C * d->K;
    return shape_eq(&n->shape, x);
}

// The GPU kernels' workspace (compiler/emit/cuda/scan.cuh), bytes of fp32:
// the forward the state of each batch row and head (B H Dk Dv); the backward,
// per batch row and key head, the state entering each chunk, the chunk's
// states and the state's gradient ((chunks + SCAN_CHUNK + 2) Dk Dv); conv1d none.
static inline int64_t scan_scratch_bytes(const Node *n) {
    ScanDims d;
    if (!scan_is_op(n->op) || !scan_dims(n, &d)) return 0;
    int64_t S = d.Dk * d.Dv, chunks = (d.T + SCAN_CHUNK - 1) / SCAN_CHUNK;
    if (n->op == OP_DELTA_RULE || n->op == OP_SSD) return 4 * d.B * d.H * S;
    return 4 * d.B * d.Hk * (chunks + SCAN_CHUNK + 2) * S;
}

#endif
