// autodiff.c: appends the backward of each part to it, by per-op rules
// written as graph ops (reverse mode). For each part the gradient flows from
// its seed (d loss / d output) to every parameter node and to the input that
// came from the part before, which is the next part's seed at run time:
// tail -> block (layer L-1 .. 0) -> head.
#include <math.h>
#include <string.h>

#include "common/graph.h"
#include "compiler/front/passes.h"

typedef struct AD {
    Arena *a;
    Diag *d;
    Part *part;
    PartKind pk;
    Node **adj;          // (nfwd) the gradient of each forward node so far, or NULL
    unsigned char *live; // (nfwd) 1 where the node's value depends on something trained (needs_grad)
    Node ***chunk_grads; // (nfwd) of a tiled part's sliced values: each chunk's gradient, (nchunks)
} AD;

static Node *emit(AD *ad, OpKind op, const Shape *shape, Loc loc, int nin, Node **in) {
    return graph_add_node(ad->a, ad->part, ad->pk, op, DT_F32, shape, loc, nin, in);
}

static Node *emit1(AD *ad, OpKind op, const Shape *shape, Loc loc, Node *x) { return emit(ad, op, shape, loc, 1, &x); }

static Node *emit2(AD *ad, OpKind op, const Shape *shape, Loc loc, Node *x, Node *y) {
    Node *in[2] = {x, y};
    return emit(ad, op, shape, loc, 2, in);
}

// A partial sum of a tiled part's parameter gradient (or the gradient of a
// value computed from parameters alone) stays fp32 under bf16
// (common/storage.h), so that the chunks' parts are summed in fp32 and the
// last add rounds once, as the untiled GEMM or column sum does. A norm's
// gain and bias gradients are views of its packed backward, which goes wide
// whole (its dx still rounded: storage_rounded_elems).
static void keep_wide(Node *n) {
    while (n->op == OP_VIEW || n->op == OP_RESHAPE) {
        n = n->in[0];
        if (n->op != OP_LAYERNORM_BWD && n->op != OP_RMSNORM_BWD && n->op != OP_VIEW && n->op != OP_RESHAPE) return;
    }
    if (n->op != OP_PARAM && n->op != OP_CONST && n->op != OP_INPUT) n->wide = 1;
}

// Whether x is computed from parameters and constants alone, as Gemma's
// `1 + w` norm gain: one value that every chunk of a tiled part shares, so
// that its gradient, like a parameter's, is a sum of the chunks' parts.
static int from_params(const Node *x) {
    if (x->op == OP_PARAM || x->op == OP_CONST) return 1;
    if (x->nin == 0) return 0;
    for (int i = 0; i < x->nin; i++)
        if (!from_params(x->in[i])) return 0;
    return 1;
}

// Adds g to the gradient of x. Integer values, constants and what depends
// on nothing trained (a frozen parameter, what only such values make) take none.
static int accumulate(AD *ad, Node *x, Node *g) {
    if (!g) return -1;
    if (x->dtype != DT_F32 || x->op == OP_CONST || !ad->live[x->id]) return 0;
    Node **slot = &ad->adj[x->id];
    if (*slot) {
        if (ad->part->nchunks > 1 && from_params(x)) keep_wide(*slot), keep_wide(g);
        *slot = emit2(ad, OP_ADD, &x->shape, x->loc, *slot, g);
        return *slot ? 0 : -1;
    }
    *slot = g;
    return 0;
}

// The gradient of a broadcast operand: dy summed back to the operand's shape.
static Node *sum_to(AD *ad, Node *dy, const Shape *shape) {
    if (!dy || shape_eq(&dy->shape, shape)) return dy;
    return emit1(ad, OP_SUM_TO, shape, dy->loc, dy);
}

static Node *matmul(AD *ad, Node *x, Node *y, int ta, int tb, Loc loc) {
    if (!x || !y) return NULL;
    Shape s = x->shape;
    int r = s.rank;
    if (ta) s.dims[r - 1] = s.dims[r - 2];
    s.dims[r - 2] = ta ? x->shape.dims[r - 1] : x->shape.dims[r - 2];
    s.dims[r - 1] = tb ? y->shape.dims[y->shape.rank - 2] : y->shape.dims[y->shape.rank - 1];
    Node *n = emit2(ad, OP_MATMUL, &s, loc, x, y);
    if (n) {
        n->trans_a = ta;
        n->trans_b = tb;
    }
    return n;
}

// [..., M, K] -> [(...) * M, K]
static Node *flatten2(AD *ad, Node *x) {
    Shape s = {.rank = 2,
               .dims = {shape_numel(&x->shape) / x->shape.dims[x->shape.rank - 1], x->shape.dims[x->shape.rank - 1]}};
    return emit1(ad, OP_RESHAPE, &s, x->loc, x);
}

// C = op_a(A) @ op_b(B): dA = dC @ op_b(B)^T, dB = op_a(A)^T @ dC, each
// written back in the operand's stored layout.
static int matmul_rule(AD *ad, Node *n, Node *dy) {
    Node *A = n->in[0], *B = n->in[1];
    int ta = n->trans_a, tb = n->trans_b;
    if (ta && A->shape.rank > 2) {
        diag_error(ad->d, n->loc,
                   "gradient of a batched transpose(a) @ b is not supported; transpose the other operand");
        return -1;
    }
    if (ad->live[A->id]) {
        Node *dA = ta ? matmul(ad, B, dy, tb, 1, n->loc) : matmul(ad, dy, B, 0, !tb, n->loc);
        if (accumulate(ad, A, dA) != 0) return -1;
    }
    if (!ad->live[B->id]) return 0; // a frozen weight: no dB GEMM at all
    Node *dB;
    if (B->shape.rank == 2 && A->shape.rank > 2) { // a weight shared across the batch
        Node *A2 = flatten2(ad, A), *dy2 = flatten2(ad, dy);
        dB = tb ? matmul(ad, dy2, A2, 1, 0, n->loc) : matmul(ad, A2, dy2, 1, 0, n->loc);
    } else {
        dB = tb ? matmul(ad, dy, A, 1, ta, n->loc) : matmul(ad, A, dy, !ta, 0, n->loc);
    }
    return accumulate(ad, B, dB);
}

// Reads the parts of a packed backward result back as separate values.
static Node *view(AD *ad, Node *packed, int64_t offset, const Shape *shape) {
    if (!packed) return NULL;
    Node *v = emit1(ad, OP_VIEW, shape, packed->loc, packed);
    if (v) v->offset = offset;
    return v;
}

static Node *packed(AD *ad, OpKind op, int64_t numel, Loc loc, int nin, Node **in) {
    Shape flat = {.rank = 1, .dims = {numel}};
    return emit(ad, op, &flat, loc, nin, in);
}

// A tiled part's chunks slice the rows of a value apart (tile.c); its
// gradient is their gradients joined again, the rows in order, once the
// last chunk (chunk 0: the backward runs them last first) has its own. One
// concat, not a full-size pad and add a chunk.
static int tile_slice_rule(AD *ad, Node *n, Node *dy) {
    int K = ad->part->nchunks, x = n->in[0]->id;
    if (!ad->chunk_grads[x]) {
        ad->chunk_grads[x] = arena_alloc(ad->a, (size_t)K * sizeof(Node *));
        if (!ad->chunk_grads[x]) return -1;
        memset(ad->chunk_grads[x], 0, (size_t)K * sizeof(Node *));
    }
    Node **g = ad->chunk_grads[x];
    g[n->tile - 1] = dy;
    if (n->tile != 1) return 0;
    for (int c = 0; c < K; c++)
        if (!g[c]) { // some chunk takes no gradient: each of the others padded to the whole
            for (int k = 0; k < K; k++) {
                if (!g[k]) continue;
                Node *p = emit1(ad, OP_PAD, &n->in[0]->shape, n->loc, g[k]);
                if (!p) return -1;
                p->axis = n->axis;
                p->offset = (int64_t)k * g[k]->shape.dims[n->axis];
                if (accumulate(ad, n->in[0], p) != 0) return -1;
            }
            return 0;
        }
    Node *joined = emit(ad, OP_CONCAT, &n->in[0]->shape, n->loc, K, g);
    if (!joined) return -1;
    joined->axis = n->axis;
    return accumulate(ad, n->in[0], joined);
}

// x op y, or NULL when either is missing (an earlier emit failed).
static Node *op2(AD *ad, OpKind op, const Shape *s, Loc loc, Node *x, Node *y) {
    return x && y ? emit2(ad, op, s, loc, x, y) : NULL;
}

static Node *constant(AD *ad, double v, Loc loc) {
    Node *c = emit(ad, OP_CONST, NULL, loc, 0, NULL);
    if (c) c->value = v;
    return c;
}

// The derivative of an elementwise function at its operand x (y = f(x), the
// node itself), written with forward ops, which fuse with dy's product.
static Node *maths_derivative(AD *ad, Node *n) {
    const Shape *s = &n->shape;
    Loc loc = n->loc;
    Node *x = n->in[0];
    switch (n->op) {
    case OP_TANH: return op2(ad, OP_SUB, s, loc, constant(ad, 1, loc), op2(ad, OP_MUL, s, loc, n, n));    // 1 - y^2
    case OP_SIGMOID: return op2(ad, OP_MUL, s, loc, n, op2(ad, OP_SUB, s, loc, constant(ad, 1, loc), n)); // y (1 - y)
    case OP_EXP: return n;
    case OP_LOG: return op2(ad, OP_DIV, s, loc, constant(ad, 1, loc), x);
    case OP_ABS: { // sign(x): 0 at 0
        Node *zero = constant(ad, 0, loc);
        return op2(ad, OP_SUB, s, loc, op2(ad, OP_LT, s, loc, zero, x), op2(ad, OP_LT, s, loc, x, zero));
    }
    default: { // OP_ERF: 2 / sqrt(pi) e^(-x^2)
        Node *neg = op2(ad, OP_MUL, s, loc, constant(ad, -1, loc), op2(ad, OP_MUL, s, loc, x, x));
        Node *e = neg ? emit1(ad, OP_EXP, s, loc, neg) : NULL;
        return op2(ad, OP_MUL, s, loc, constant(ad, 1.1283791670955126, loc), e);
    }
    }
}

// where(cond, a, b): dy goes to a where cond holds and to b elsewhere; the
// condition, like the comparisons that make one, takes no gradient.
static int where_rule(AD *ad, Node *n, Node *dy) {
    for (int i = 1; i < 3; i++) {
        if (n->in[i]->op == OP_CONST) continue;
        Node *zero = constant(ad, 0, n->loc);
        Node *args[3] = {n->in[0], i == 1 ? dy : zero, i == 1 ? zero : dy};
        Node *g = zero ? emit(ad, OP_WHERE, &n->shape, n->loc, 3, args) : NULL;
        if (accumulate(ad, n->in[i], sum_to(ad, g, &n->in[i]->shape)) != 0) return -1;
    }
    return 0;
}

// The recurrent ops' gradients (common/scan.h): one packed backward node,
// conv1d's [dx | dw], the recurrences' [dq | dk | dv | dg | dbeta].
static int recurrent_rule(AD *ad, Node *n, Node *dy) {
    Node **in = n->in;
    Loc loc = n->loc;
    if (n->op == OP_CONV1D) {
        int64_t nx = shape_numel(&in[0]->shape);
        Node *args[3] = {dy, in[0], in[1]};
        Node *p = packed(ad, OP_CONV1D_BWD, nx + shape_numel(&in[1]->shape), loc, 3, args);
        return accumulate(ad, in[0], view(ad, p, 0, &in[0]->shape)) ||
               accumulate(ad, in[1], view(ad, p, nx, &in[1]->shape));
    }
    int64_t off[6] = {0};
    for (int i = 0; i < 5; i++) off[i + 1] = off[i] + shape_numel(&in[i]->shape);
    Node *args[6] = {dy, in[0], in[1], in[2], in[3], in[4]};
    Node *p = packed(ad, n->op == OP_SSD ? OP_SSD_BWD : OP_DELTA_RULE_BWD, off[5], loc, 6, args);
    if (p) p->heads = n->heads, p->kv_heads = n->kv_heads, p->scale = n->scale, p->eps = n->eps;
    for (int i = 0; i < 5; i++)
        if (accumulate(ad, in[i], view(ad, p, off[i], &in[i]->shape)) != 0) return -1;
    return 0;
}

// The sink logits' gradient [H]: -sum over rows of exp(s - L) delta, the
// sink's probability times delta = rowsum(dy * y) (y and its lse L include
// the sink), written with fp32 graph ops ([B, T, H] by position): a small
// reduction beside the attention backward, which needs no change for it.
static int sinks_grad(AD *ad, const Node *a, Node *dy, Node *sinks) {
    int64_t B = a->shape.dims[0], T = a->shape.dims[1], H = a->heads, dv = a->shape.dims[2] / H;
    Shape bth = {3, {B, T, H}}, d4 = {4, {B, T, H, 1}}, y4 = {4, {B, T, H, dv}};
    Node *lse = emit1(ad, OP_TRANSPOSE, &bth, a->loc, a->in[3]); // L [B, T, H]
    Node *dy4 = emit1(ad, OP_RESHAPE, &y4, a->loc, dy), *y = emit1(ad, OP_RESHAPE, &y4, a->loc, (Node *)a);
    Node *dyy = dy4 && y ? emit2(ad, OP_MUL, &y4, a->loc, dy4, y) : NULL;
    Node *rows = dyy ? emit1(ad, OP_SUM_TO, &d4, a->loc, dyy) : NULL; // delta [B, T, H, 1]
    Node *delta = rows ? emit1(ad, OP_RESHAPE, &bth, a->loc, rows) : NULL;
    Node *ds = lse ? emit2(ad, OP_SUB, &bth, a->loc, sinks, lse) : NULL;
    Node *ps = ds ? emit1(ad, OP_EXP, &bth, a->loc, ds) : NULL; // the sink's probability
    Node *c = ps && delta ? emit2(ad, OP_MUL, &bth, a->loc, ps, delta) : NULL;
    Node *neg = c ? emit1(ad, OP_NEG, &bth, a->loc, c) : NULL;
    if (!neg) return -1;
    lse->wide = rows->wide = ds->wide = ps->wide = c->wide = neg->wide = 1;
    return accumulate(ad, sinks, sum_to(ad, neg, &sinks->shape));
}

// The attention backward of q, k, v from dy, the forward's output y and
// its lse [B, H, T] (no softmax recomputed), and of the sinks when it has them.
static int attention_grads(AD *ad, const Node *a, Node *dy) {
    Node **in = a->in;
    int si = attention_sinks_operand(a);
    int64_t nq = shape_numel(&in[0]->shape), nk = shape_numel(&in[1]->shape), nv = shape_numel(&in[2]->shape);
    Node *args[7] = {dy, in[0], in[1], in[2], (Node *)a, in[3], si >= 0 ? in[si] : NULL};
    Node *p = packed(ad, OP_ATTENTION_BWD, nq + nk + nv, a->loc, si >= 0 ? 7 : 6, args);
    if (p) {
        p->heads = a->heads, p->kv_heads = a->kv_heads, p->causal = a->causal;
        p->window = a->window, p->chunk = a->chunk, p->scale = a->scale, p->softcap = a->softcap;
    }
    if (accumulate(ad, in[0], view(ad, p, 0, &in[0]->shape)) ||
        accumulate(ad, in[1], view(ad, p, nq, &in[1]->shape)) ||
        accumulate(ad, in[2], view(ad, p, nq + nk, &in[2]->shape)))
        return -1;
    return si >= 0 ? sinks_grad(ad, a, dy, in[si]) : 0;
}

static int node_rule(AD *ad, Node *n, Node *dy) {
    Node **in = n->in;
    const Shape *s = &n->shape;
    Loc loc = n->loc;
    switch (n->op) {
    case OP_INPUT:
    case OP_PARAM:
    case OP_CONST:
    case OP_ARANGE:
    case OP_LT:
    case OP_LE:
    case OP_EQ:
    case OP_FLOOR:
    case OP_TOP_K: return 0;
    case OP_TANH:
    case OP_SIGMOID:
    case OP_ERF:
    case OP_EXP:
    case OP_LOG:
    case OP_ABS: return accumulate(ad, in[0], op2(ad, OP_MUL, s, loc, dy, maths_derivative(ad, n)));
    case OP_WHERE: return where_rule(ad, n, dy);
    case OP_ADD:
        return accumulate(ad, in[0], sum_to(ad, dy, &in[0]->shape)) ||
               accumulate(ad, in[1], sum_to(ad, dy, &in[1]->shape));
    case OP_SUB: {
        if (accumulate(ad, in[0], sum_to(ad, dy, &in[0]->shape)) != 0) return -1;
        if (in[1]->op == OP_CONST) return 0;
        Node *g = sum_to(ad, dy, &in[1]->shape);
        return accumulate(ad, in[1], g ? emit1(ad, OP_NEG, &g->shape, loc, g) : NULL);
    }
    case OP_MUL:
        for (int i = 0; i < 2; i++) {
            if (in[i]->op == OP_CONST) continue;
            if (accumulate(ad, in[i], sum_to(ad, emit2(ad, OP_MUL, s, loc, dy, in[1 - i]), &in[i]->shape)) != 0)
                return -1;
        }
        return 0;
    case OP_DIV: { // d(a/b) = da / b - (a/b) db / b
        Node *t = emit2(ad, OP_DIV, s, loc, dy, in[1]);
        if (accumulate(ad, in[0], sum_to(ad, t, &in[0]->shape)) != 0) return -1;
        if (in[1]->op == OP_CONST) return 0;
        Node *tn = t ? emit2(ad, OP_MUL, s, loc, t, n) : NULL;
        Node *g = sum_to(ad, tn, &in[1]->shape);
        return accumulate(ad, in[1], g ? emit1(ad, OP_NEG, &g->shape, loc, g) : NULL);
    }
    case OP_NEG: return accumulate(ad, in[0], emit1(ad, OP_NEG, s, loc, dy));
    case OP_SUM_TO: { // sum(x, axis): dy broadcast back to x's shape (where(1, dy, x) takes dy's values alone)
        Node *one = graph_add_node(ad->a, ad->part, ad->pk, OP_CONST, DT_F32, NULL, loc, 0, NULL);
        if (!one) return -1;
        one->value = 1;
        Node *args[3] = {one, dy, in[0]};
        return accumulate(ad, in[0], emit(ad, OP_WHERE, &in[0]->shape, loc, 3, args));
    }
    case OP_MATMUL: return matmul_rule(ad, n, dy);
    case OP_EMBED: {                        // every token's row of dy added into its table row, but the padding row's
        if (!ad->live[in[0]->id]) return 0; // a frozen table
        Node *g = emit2(ad, OP_EMBED_BWD, &in[0]->shape, loc, dy, in[1]);
        if (g) g->padding = n->padding;
        return accumulate(ad, in[0], g);
    }
    case OP_LAYERNORM:
    case OP_RMSNORM: {
        int64_t nx = shape_numel(s), c = s->dims[s->rank - 1];
        int layer = n->op == OP_LAYERNORM;
        Node *args[3] = {dy, in[0], in[1]};
        Node *p = packed(ad, layer ? OP_LAYERNORM_BWD : OP_RMSNORM_BWD, nx + (layer ? 2 : 1) * c, loc, 3, args);
        if (p) p->eps = n->eps;
        Shape vec = {.rank = 1, .dims = {c}};
        if (accumulate(ad, in[0], view(ad, p, 0, s)) || accumulate(ad, in[1], view(ad, p, nx, &vec))) return -1;
        return layer ? accumulate(ad, in[2], view(ad, p, nx + c, &vec)) : 0;
    }
    case OP_GELU: return accumulate(ad, in[0], emit2(ad, OP_GELU_BWD, s, loc, dy, in[0]));
    case OP_SILU: return accumulate(ad, in[0], emit2(ad, OP_SILU_BWD, s, loc, dy, in[0]));
    case OP_SWIGLU: { // silu(gate) * up
        Node *sg = emit1(ad, OP_SILU, s, loc, in[0]);
        if (accumulate(ad, in[1], sg ? emit2(ad, OP_MUL, s, loc, dy, sg) : NULL) != 0) return -1;
        Node *du = emit2(ad, OP_MUL, s, loc, dy, in[1]);
        return accumulate(ad, in[0], du ? emit2(ad, OP_SILU_BWD, s, loc, du, in[0]) : NULL);
    }
    case OP_ROPE: { // a rotation; its gradient rotates back
        Node *r = emit1(ad, OP_ROPE, s, loc, dy);
        if (r) {
            r->heads = n->heads, r->theta = n->theta, r->inverse = !n->inverse;
            r->rope_freq = n->rope_freq, r->rope_scale = n->rope_scale, r->rope_interleaved = n->rope_interleaved;
            r->rope_rule = n->rope_rule;
        }
        return accumulate(ad, in[0], r);
    }
    case OP_ATTENTION: return attention_grads(ad, n, dy);
    case OP_SOFTMAX: {
        Node *g = emit2(ad, OP_SOFTMAX_BWD, s, loc, dy, n);
        if (g) g->axis = n->axis;
        return accumulate(ad, in[0], g);
    }
    case OP_CROSS_ENTROPY: {
        Node *args[3] = {dy, in[0], in[1]};
        return accumulate(ad, in[0], emit(ad, OP_CROSS_ENTROPY_BWD, &in[0]->shape, loc, 3, args));
    }
    case OP_RESHAPE: return accumulate(ad, in[0], emit1(ad, OP_RESHAPE, &in[0]->shape, loc, dy));
    case OP_SLICE: {
        if (n->tile) return tile_slice_rule(ad, n, dy);
        Node *g = emit1(ad, OP_PAD, &in[0]->shape, loc, dy);
        if (g) {
            g->axis = n->axis;
            g->offset = n->offset;
        }
        return accumulate(ad, in[0], g);
    }
    case OP_CONCAT: { // each operand's rows of dy, summed over the axes it broadcast along
        int64_t offset = 0;
        for (int i = 0; i < n->nin; i++) {
            Shape part = *s;
            part.dims[n->axis] = in[i]->shape.dims[n->axis];
            Node *g = emit1(ad, OP_SLICE, &part, loc, dy);
            if (g) {
                g->axis = n->axis;
                g->offset = offset;
            }
            offset += in[i]->shape.dims[n->axis];
            if (accumulate(ad, in[i], sum_to(ad, g, &in[i]->shape)) != 0) return -1;
        }
        return 0;
    }
    case OP_TRANSPOSE: return accumulate(ad, in[0], emit1(ad, OP_TRANSPOSE, &in[0]->shape, loc, dy));
    case OP_MOE: {
        int64_t off[7] = {0}; // a fused gate_up's gradient once, in w_gate's place
        for (int i = 0; i < n->nin; i++) off[i + 1] = off[i] + moe_operand_floats(n, i);
        Node *args[7] = {dy, in[0], in[1], in[2], in[3], in[4], n->nin > 5 ? in[5] : NULL};
        Node *p = packed(ad, OP_MOE_BWD, off[n->nin], loc, n->nin + 1, args);
        if (p) p->scale = n->scale, p->softcap = n->softcap, p->moe_form = n->moe_form; // SwiGLU, layouts
        for (int i = 0; i < n->nin; i++)
            if (moe_operand_floats(n, i) && accumulate(ad, in[i], view(ad, p, off[i], &in[i]->shape)) != 0) return -1;
        return 0;
    }
    case OP_LOAD_BALANCE: {
        if (dy->op == OP_CONST)
            dy = op2(ad, OP_MUL, &dy->shape, loc, dy, constant(ad, 1, loc)); // a buffer, for its kernel
        Node *args[3] = {dy, in[0], in[1]}, *d = emit(ad, OP_LOAD_BALANCE_BWD, &in[0]->shape, loc, 3, args);
        if (d) d->pooled = n->pooled;
        return accumulate(ad, in[0], d);
    }
    case OP_ADD_LOSS: return accumulate(ad, in[0], dy) || accumulate(ad, in[1], constant(ad, 1, loc));
    default:
        if (n->op == OP_CONV1D || n->op == OP_DELTA_RULE || n->op == OP_SSD) return recurrent_rule(ad, n, dy);
    }
    diag_error(ad->d, loc, "internal error: no gradient rule for %s", op_name(n->op));
    return -1;
}

static int add_grad(AD *ad, Node *of) {
    Grad *gr = arena_alloc(ad->a, sizeof *gr);
    if (!gr) return -1;
    gr->of = of;
    gr->grad = ad->adj[of->id];
    return ptrvec_push(ad->a, &ad->part->grads, gr);
}

// Marks live[i] where forward node i depends on something trained: a
// parameter that is not frozen, or a value from another part (whose own
// parameters, or an earlier layer's, may be trained). Only these take a
// gradient, so a frozen weight's GEMM and scatter-add never exist.
static void needs_grad(const Graph *g, const Part *part, unsigned char *live) {
    for (int i = 0; i < part->nodes.n; i++) {
        const Node *n = part->nodes.items[i];
        live[i] = n->op == OP_PARAM   ? !((const Param *)g->params.items[n->param])->frozen
                  : n->op == OP_INPUT ? n->src_part >= 0
                                      : 0;
        for (int j = 0; j < n->nin && !live[i]; j++) live[i] = live[n->in[j]->id];
    }
}

static int differentiate_part(Graph *g, PartKind pk, Arena *a, Diag *d) {
    Part *part = &g->parts[pk];
    int nfwd = part->nodes.n;
    AD ad = {.a = a, .d = d, .part = part, .pk = pk};
    ad.adj = arena_alloc(a, (size_t)nfwd * sizeof(Node *));
    ad.chunk_grads = arena_alloc(a, (size_t)nfwd * sizeof(Node **));
    ad.live = arena_alloc(a, (size_t)nfwd + 1);
    if (!ad.adj || !ad.chunk_grads || !ad.live) return -1;
    needs_grad(g, part, ad.live);
    memset(ad.chunk_grads, 0, (size_t)nfwd * sizeof(Node **));
    part->nfwd = nfwd;
    Node *out = part->output;
    if (pk == PART_TAIL) { // d objective / d loss: the loss scale, a model input mtrun feeds (graph.h)
        ModelInput *mi = arena_alloc(a, sizeof *mi);
        if (!mi) return -1;
        *mi = (ModelInput){.name = LOSS_SCALE_INPUT, .dtype = DT_F32, .loc = out->loc}; // f32[]
        if (ptrvec_push(a, &g->inputs, mi) != 0) return -1;
        part->grad_seed = graph_add_node(a, part, pk, OP_INPUT, DT_F32, NULL, out->loc, 0, NULL);
        if (part->grad_seed) part->grad_seed->src_part = SRC_MODEL_INPUT, part->grad_seed->src = g->inputs.n - 1;
    } else {
        part->grad_seed = graph_add_node(a, part, pk, OP_INPUT, DT_F32, &out->shape, out->loc, 0, NULL);
        if (part->grad_seed) part->grad_seed->src_part = SRC_GRAD_SEED;
    }
    if (!part->grad_seed) return -1;
    ad.adj[out->id] = part->grad_seed;
    for (int i = nfwd - 1; i >= 0; i--) {
        Node *n = part->nodes.items[i];
        // a tiled part's chunk c: its backward is what its forward nodes emit
        for (int c = 0; c < part->nchunks; c++) {
            if (i == part->chunk_fwd[2 * c + 1] - 1) part->chunk_bwd[2 * c] = part->nodes.n;
        }
        if (ad.adj[i] && node_rule(&ad, n, ad.adj[i]) != 0) return -1;
        for (int c = 0; c < part->nchunks; c++)
            if (i == part->chunk_fwd[2 * c]) part->chunk_bwd[2 * c + 1] = part->nodes.n;
    }
    for (int i = 0; i < nfwd; i++) {
        Node *n = part->nodes.items[i];
        if (n->op == OP_PARAM && add_grad(&ad, n) != 0) return -1;
    }
    for (int i = 0; i < nfwd; i++) {
        Node *n = part->nodes.items[i];
        if (n->op != OP_INPUT || n->src_part < 0 || n->dtype != DT_F32 || !ad.adj[i]) continue;
        if (!(pk == PART_TAIL && part_is_block(n->src_part)) && !(part_is_block(pk) && n->src_part == PART_HEAD)) {
            diag_error(d, n->loc,
                       "'%s' is used after the block without passing through it; gradients through such "
                       "values are not supported yet",
                       n->name ? n->name : "this value");
            return -1;
        }
        if (add_grad(&ad, n) != 0) return -1;
    }
    return 0;
}

int autodiff(Graph *g, Arena *a, Diag *d) {
    int errors_before = d->nerrors;
    int order[PART_COUNT] = {PART_TAIL}, n = 1; // the tail, every block kind's part, the head
    for (int k = 0; k < g->nkinds; k++) order[n++] = kind_part(k);
    order[n++] = PART_HEAD;
    for (int i = 0; i < n; i++)
        if (differentiate_part(g, (PartKind)order[i], a, d) != 0) {
            if (d->nerrors == errors_before) diag_error(d, (Loc){0, 0}, "out of memory in autodiff");
            return -1;
        }
    return 0;
}
