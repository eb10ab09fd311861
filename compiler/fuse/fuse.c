// fuse.c: the fusion pass (fuse.h). Three numbered passes per part:
//
//   1. group: walk the nodes in order; an elementwise or row-reduction node
//      joins the group of one of its operands when it iterates the same
//      rows, reads that operand at the same row, is on the same side of
//      forward/backward, and no node outside the group reads the group
//      before this node runs; otherwise it starts a group.
//   2. lower: each group becomes one expression kernel: the row statistics
//      its reductions need (one column loop each), then one column loop per
//      distinct width storing what is read outside the group and
//      accumulating column sums. Values are recomputed from loads in each
//      loop rather than kept, which is what a hand-written kernel does.
//      Matmuls become GEMM kernels, attention nodes attention kernels with
//      their cpu helper kernels.
//   3. epilogues: an expression kernel that runs right after a GEMM and
//      reads its output only at the row it computes becomes that GEMM's
//      epilogue, run on each row block while it is in cache.
//
// Every lowering mirrors the precision of the reference kernel in
// runtime/backend/kernels.inc: f32 elementwise math, f64 row statistics and
// accumulators, in the same order of operations.
#include "compiler/fuse/fuse.h"

#include "common/storage.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- node classes

enum { C_ALIAS, C_BOUND, C_INLINE, C_HEAVY, C_FUSE };

static int node_class(const Node *n) {
    switch (n->op) {
    case OP_VIEW:
    case OP_RESHAPE: return C_ALIAS;
    case OP_INPUT:
    case OP_PARAM: return C_BOUND;
    case OP_CONST:
    case OP_ARANGE: return C_INLINE;
    case OP_MATMUL:
    case OP_ATTENTION:
    case OP_ATTENTION_BWD:
    case OP_ATTENTION_LSE: return C_HEAVY;
    default: return kir_is_plain_op(n->op) ? C_HEAVY : C_FUSE; // a kernel of its own, as the heavy ones
    }
}

static int64_t last_dim(const Shape *s) { return s->rank ? s->dims[s->rank - 1] : 1; }
static int64_t numel(const Node *n) { return shape_numel(&n->shape); }
static int last_axis(const Node *n) { return n->axis == n->shape.rank - 1; }

static void around_axis(const Shape *s, int axis, int64_t *outer, int64_t *dim, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= s->dims[i];
    *dim = s->dims[axis];
    for (int i = axis + 1; i < s->rank; i++) *inner *= s->dims[i];
}

// Softmax along an axis that is not the last: its own kernel, rows being
// (outer, inner) pairs and columns the axis.
static int is_axis_softmax(const Node *n) { return (n->op == OP_SOFTMAX || n->op == OP_SOFTMAX_BWD) && !last_axis(n); }

// Nodes whose result is accumulated across rows: only complete once their
// kernel is done, so nothing in the same kernel may read them.
static int is_acc(const Node *n) { return n->op == OP_SUM_TO || n->op == OP_EMBED_BWD || n->op == OP_CROSS_ENTROPY; }

// The rows x cols a node's kernel iterates.
static void iter_space(const Node *n, int64_t *rows, int64_t *cols) {
    const Node *src = n;
    if (n->op == OP_SUM_TO || n->op == OP_EMBED_BWD || n->op == OP_CROSS_ENTROPY) src = n->in[0];
    if (n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD) src = n->in[1];
    if (is_axis_softmax(n)) {
        int64_t o, d, i;
        around_axis(&n->shape, n->axis, &o, &d, &i);
        *rows = o * i;
        *cols = d;
        return;
    }
    *cols = last_dim(&src->shape);
    *rows = *cols ? shape_numel(&src->shape) / *cols : 0;
}

// Whether node n reads operand j at the row it computes, at a column map the
// lowering can express for an operand computed in the same kernel.
static int operand_rowlocal(const Node *n, int j) {
    const Shape *so = &n->in[j]->shape;
    int same = shape_numel(so) == numel(n) && last_dim(so) == last_dim(&n->shape);
    switch (n->op) {
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV:
    case OP_NEG:
    case OP_GELU:
    case OP_SILU:
    case OP_SWIGLU:
    case OP_GELU_BWD:
    case OP_SILU_BWD:
    case OP_TANH:
    case OP_SIGMOID:
    case OP_ERF:
    case OP_EXP:
    case OP_LOG:
    case OP_FLOOR:
    case OP_ABS:
    case OP_LT:
    case OP_LE:
    case OP_EQ:
    case OP_WHERE: return same;
    case OP_LAYERNORM:
    case OP_RMSNORM:
    case OP_ROPE:
    case OP_CROSS_ENTROPY:
    case OP_SUM_TO:
    case OP_EMBED_BWD: return j == 0;
    case OP_SOFTMAX: return j == 0 && last_axis(n);
    case OP_SOFTMAX_BWD: return j < 2 && last_axis(n);
    case OP_CROSS_ENTROPY_BWD: return j == 1;
    case OP_LAYERNORM_BWD:
    case OP_RMSNORM_BWD: return j < 2;
    case OP_SLICE:
    case OP_PAD: return last_axis(n);
    case OP_CONCAT: { // an operand broadcast along another axis is read away from the row
        Shape whole = n->shape;
        whole.dims[n->axis] = so->dims[n->axis];
        return last_axis(n) && shape_eq(&whole, so);
    }
    default: return 0;
    }
}

// ---------------------------------------------------------------- pass state

typedef struct Group {
    int *nodes; // (n) in increasing id
    int n, cap;
    int64_t rows;
    int seg, single; // seg: run_segment(); single: takes no other node (axis softmax, materialised constants)
} Group;

typedef struct F {
    const Part *part;
    DType compute; // the storage rule's compute dtype: which values are stored (and rounded) as bf16
    Arena *a;
    int n;
    int *root;     // (n) node after following views and reshapes
    int64_t *roff; // (n) element offset into root
    int *group;    // (n) group of a computing node, or -1
    int **cons;    // (n) consumers of each root, through aliases
    int *ncons;    // (n)
    uint8_t *keep; // (n) read outside the part
    Group *groups; // (ngroups)
    int ngroups, capgroups;
    char *err;
    size_t errcap;
    int failed;
} F;

static void ffail(F *f, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ffail(F *f, const Node *n, const char *fmt, ...) {
    if (f->failed) return;
    f->failed = 1;
    int k = snprintf(f->err, f->errcap, "fuse: node %%%d (%s) at %d:%d: ", n ? n->id : -1, n ? op_name(n->op) : "-",
                     n ? n->loc.line : 0, n ? n->loc.col : 0);
    if (k < 0 || (size_t)k >= f->errcap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err + k, f->errcap - (size_t)k, fmt, ap);
    va_end(ap);
}

static void *grow(F *f, void *p, int *cap, int need, size_t size) {
    if (need <= *cap) return p;
    int c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(p, (size_t)c * size);
    if (!q) {
        ffail(f, NULL, "out of memory");
        return p;
    }
    *cap = c;
    return q;
}

static const Node *node_at(const F *f, int i) { return f->part->nodes.items[i]; }

static int setup(F *f) {
    int n = f->n;
    f->root = calloc((size_t)n + 1, sizeof *f->root);
    f->roff = calloc((size_t)n + 1, sizeof *f->roff);
    f->group = calloc((size_t)n + 1, sizeof *f->group);
    f->cons = calloc((size_t)n + 1, sizeof *f->cons);
    f->ncons = calloc((size_t)n + 1, sizeof *f->ncons);
    f->keep = calloc((size_t)n + 1, 1);
    if (!f->root || !f->roff || !f->group || !f->cons || !f->ncons || !f->keep) return -1;
    int *cap = calloc((size_t)n + 1, sizeof *cap);
    if (!cap) return -1;
    for (int i = 0; i < n; i++) {
        const Node *nd = node_at(f, i);
        f->group[i] = -1;
        f->root[i] = i;
        if (node_class(nd) == C_ALIAS) {
            int r = nd->in[0]->id;
            f->root[i] = f->root[r];
            f->roff[i] = f->roff[r] + (nd->op == OP_VIEW ? nd->offset : 0);
            continue;
        }
        for (int j = 0; j < nd->nin; j++) {
            int r = f->root[nd->in[j]->id];
            f->cons[r] = grow(f, f->cons[r], &cap[r], f->ncons[r] + 1, sizeof(int));
            if (f->failed) break;
            f->cons[r][f->ncons[r]++] = i;
        }
    }
    free(cap);
    if (f->part->output) f->keep[f->root[f->part->output->id]] = 1;
    for (int i = 0; i < f->part->grads.n; i++) {
        const Grad *g = f->part->grads.items[i];
        if (g->grad) f->keep[f->root[g->grad->id]] = 1;
    }
    return f->failed ? -1 : 0;
}

static void teardown(F *f) {
    for (int i = 0; i < f->n && f->cons; i++) free(f->cons[i]);
    for (int i = 0; i < f->ngroups; i++) free(f->groups[i].nodes);
    free(f->root), free(f->roff), free(f->group), free(f->cons), free(f->ncons), free(f->keep), free(f->groups);
}

// ---------------------------------------------------------------- 1. group

// Which stretch of the part node i lies in, of those the schedule runs
// separately: the forward and the backward; for a part tiled by rows
// (tile.c), also each chunk's forward and backward and what comes before
// and after them. No kernel crosses from one to another.
static int run_segment(const Part *part, int i) {
    int bwd = i >= part->nfwd, K = part->nchunks;
    const int *r = bwd ? part->chunk_bwd : part->chunk_fwd;
    int seg = 0;
    for (int c = 0; c < K; c++) {
        int lo = r[2 * c] < r[2 * c + 1] ? r[2 * c] : r[2 * c + 1],
            hi = r[2 * c] < r[2 * c + 1] ? r[2 * c + 1] : r[2 * c];
        if (i >= lo && i < hi) seg = 1 + c;
        else if (i >= hi && (bwd ? c == 0 : c == K - 1)) seg = K + 1; // after the chunks
    }
    return bwd * (K + 2) + seg;
}

static int group_new(F *f, int i, int single) {
    f->groups = grow(f, f->groups, &f->capgroups, f->ngroups + 1, sizeof *f->groups);
    if (f->failed) return -1;
    Group *g = &f->groups[f->ngroups];
    *g = (Group){.seg = run_segment(f->part, i), .single = single};
    int64_t cols;
    iter_space(node_at(f, i), &g->rows, &cols);
    return f->ngroups++;
}

static void group_add(F *f, int gi, int i) {
    Group *g = &f->groups[gi];
    g->nodes = grow(f, g->nodes, &g->cap, g->n + 1, sizeof(int));
    if (f->failed) return;
    g->nodes[g->n++] = i;
    f->group[i] = gi;
}

// Whether operand j of node n, whose root is in n's group, reads values the
// group computes at the row and in the layout n needs.
static int internal_ok(const F *f, const Node *n, int j) {
    const Node *o = n->in[j];
    int r = f->root[o->id];
    const Node *rn = node_at(f, r);
    if (is_acc(rn) || is_axis_softmax(rn) || node_class(rn) != C_FUSE || !operand_rowlocal(n, j)) return 0;
    int64_t rows, cols;
    iter_space(rn, &rows, &cols);
    return f->roff[o->id] == 0 && shape_numel(&o->shape) == rows * cols && last_dim(&o->shape) == cols;
}

static int can_join(const F *f, int i, int gi) {
    const Node *n = node_at(f, i);
    const Group *g = &f->groups[gi];
    int64_t rows, cols;
    iter_space(n, &rows, &cols);
    if (g->single || is_axis_softmax(n) || g->seg != run_segment(f->part, i) || rows != g->rows) return 0;
    for (int j = 0; j < n->nin; j++)
        if (f->group[f->root[n->in[j]->id]] == gi && !internal_ok(f, n, j)) return 0;
    // no other kernel's node between: a kernel's span holds no other kernel
    for (int m = g->nodes[g->n - 1] + 1; m < i; m++) {
        int c = node_class(node_at(f, m));
        if (c == C_FUSE || c == C_HEAVY || (c == C_INLINE && f->group[m] >= 0)) return 0;
    }
    // nothing outside the group may read it before node i, where it will run
    for (int k = 0; k < g->n; k++) {
        int m = g->nodes[k];
        for (int c = 0; c < f->ncons[m]; c++) {
            int u = f->cons[m][c];
            if (u < i && f->group[u] != gi) return 0;
        }
    }
    return 1;
}

static void pass_group(F *f) {
    for (int i = 0; i < f->n && !f->failed; i++) {
        const Node *n = node_at(f, i);
        int cls = node_class(n);
        if (cls == C_INLINE) { // materialised only when something other than a fused kernel reads it
            int need = f->keep[i];
            for (int c = 0; c < f->ncons[i]; c++) need |= node_class(node_at(f, f->cons[i][c])) != C_FUSE;
            if (need) group_add(f, group_new(f, i, 1), i);
            continue;
        }
        if (cls != C_FUSE) continue;
        int best = -1;
        for (int j = 0; j < n->nin; j++) { // the latest operand group that takes it
            int gi = f->group[f->root[n->in[j]->id]];
            if (gi > best && can_join(f, i, gi)) best = gi;
        }
        // or, reading none of it, the group just before (q, k and v's gradients side by side)
        int prev = -1;
        for (int m = i - 1; m >= 0 && prev < 0; m--)
            if (node_class(node_at(f, m)) == C_FUSE || node_class(node_at(f, m)) == C_HEAVY) prev = m;
        if (best < 0 && prev >= 0 && f->group[prev] >= 0 && can_join(f, i, f->group[prev])) best = f->group[prev];
        if (best < 0) best = group_new(f, i, is_axis_softmax(n));
        if (best >= 0) group_add(f, best, i);
    }
}

// ---------------------------------------------------------------- 2. lower

typedef struct Memo {
    int node, col, loop, stmt;
} Memo;

typedef struct KB {
    F *f;
    int gi; // the group lowered, -1 for helpers
    int64_t rows;
    KirStmt *st;
    int nst, capst;
    KirArg *args;
    int nargs, capargs;
    uint8_t *rl; // (nargs) every access so far is row-local
    int caprl;
    int64_t *cols;
    int nloops, caploops;
    Memo *memo;
    int nmemo, capmemo;
    int (*stat)[4]; // (f->n) row statistics of reduction nodes
    int loop, row, col, node;
    const Node *axis_map; // an axis softmax: its (row, col) -> flat element map
} KB;

static int emit(KB *b, int op, int type, int x, int y, int z, double v) {
    b->st = grow(b->f, b->st, &b->capst, b->nst + 1, sizeof *b->st);
    if (b->f->failed) return 0;
    b->st[b->nst] = (KirStmt){.op = (uint8_t)op,
                              .type = (uint8_t)type,
                              .loop = (uint16_t)b->loop,
                              .a = x,
                              .b = y,
                              .c = z,
                              .node = b->node,
                              .value = v};
    return b->nst++;
}
static int cst(KB *b, int type, double v) { return emit(b, KOP_CONST, type, 0, 0, 0, v); }
static int ci(KB *b, int64_t v) { return cst(b, KT_I64, (double)v); }
static int ty(KB *b, int s) { return b->st[s].type; }
static int un(KB *b, int op, int x) { return emit(b, op, ty(b, x), x, 0, 0, 0); }
static int bin(KB *b, int op, int x, int y) { return emit(b, op, ty(b, x), x, y, 0, 0); }
static int cmp(KB *b, int op, int x, int y) { return emit(b, op, KT_BOOL, x, y, 0, 0); }
static int sel(KB *b, int c, int x, int y) { return emit(b, KOP_SELECT, ty(b, x), c, x, y, 0); }
// vals[idx] for an i64 statement idx in [lo, hi), as a balanced tree of
// selects over f64 constants (the IR has no constant tables).
static int f64_table(KB *b, int idx, const double *vals, int64_t lo, int64_t hi) {
    if (hi - lo == 1) return cst(b, KT_F64, vals[lo]);
    int64_t mid = lo + (hi - lo) / 2;
    return sel(b, cmp(b, KOP_LT, idx, ci(b, mid)), f64_table(b, idx, vals, lo, mid), f64_table(b, idx, vals, mid, hi));
}
static int cvt(KB *b, int type, int x) { return ty(b, x) == type ? x : emit(b, KOP_CVT, type, x, 0, 0, 0); }
static int clampi(KB *b, int x, int64_t lo, int64_t hi) {
    return bin(b, KOP_MIN, bin(b, KOP_MAX, x, ci(b, lo)), ci(b, hi));
}

static void open_loop(KB *b, int64_t cols) {
    b->cols = grow(b->f, b->cols, &b->caploops, b->nloops + 1, sizeof *b->cols);
    if (b->f->failed) return;
    b->cols[b->nloops++] = cols;
    b->loop = b->nloops;
    b->col = emit(b, KOP_COL, KT_I64, 0, 0, 0, 0);
}
static void close_loop(KB *b) { b->loop = 0; }

// The argument for elements [off, off + count) of node `node`, adding access.
static int arg_of(KB *b, int node, int64_t off, int64_t count, int dtype, int access) {
    for (int i = 0; i < b->nargs; i++) {
        KirArg *g = &b->args[i];
        if (g->node == node && g->offset == off && g->dtype == dtype) {
            g->access |= (uint8_t)access;
            if (count > g->numel) g->numel = count;
            return i;
        }
    }
    b->args = grow(b->f, b->args, &b->capargs, b->nargs + 1, sizeof *b->args);
    b->rl = grow(b->f, b->rl, &b->caprl, b->nargs + 1, 1);
    if (b->f->failed) return 0;
    b->args[b->nargs] = (KirArg){.node = node,
                                 .dtype = (uint8_t)dtype,
                                 .access = (uint8_t)access,
                                 .offset = off,
                                 .numel = count,
                                 .row_stride = -1,
                                 .divisor = 1};
    b->rl[b->nargs] = 1;
    return b->nargs++;
}

// Records one access: row-local with `stride` elements per row, or not.
static void note(KB *b, int arg, int rowlocal, int64_t stride) {
    KirArg *g = &b->args[arg];
    if (!rowlocal || (g->row_stride >= 0 && g->row_stride != stride)) b->rl[arg] = 0;
    g->row_stride = stride;
}

static int dtype_of(const Node *n) { return n->dtype == DT_I32 ? KT_I32 : KT_F32; }

// How node n's buffer stores its elements (common/storage.h).
static int store_type(const F *f, const Node *n) { return kir_storage_type(storage_dtype(f->compute, n)); }

// Whether node n's value is rounded to bf16 where it ends: it is stored as
// bf16, and it is not an op that only moves values already stored as bf16.
static int rounds_bf16(const F *f, const Node *n) {
    if (storage_rounded_elems(f->compute, n) && n->wide) return 1; // a wide norm backward's dx
    if (store_type(f, n) != KT_BF16) return 0;
    switch (n->op) {
    case OP_SLICE:
    case OP_PAD:
    case OP_CONCAT:
    case OP_TRANSPOSE:
    case OP_EMBED:
        for (int j = 0; j < n->nin; j++)
            if (n->in[j]->dtype == DT_F32 && store_type(f, n->in[j]) != KT_BF16) return 1;
        return 0;
    default: return 1;
    }
}

// Element `idx` (flat, in o's shape) of a value read from memory.
static int load_flat(KB *b, const Node *o, int idx, int rowlocal, int64_t stride) {
    F *f = b->f;
    int r = f->root[o->id];
    const Node *rn = node_at(f, r);
    if (rn->op == OP_CONST) return cst(b, dtype_of(rn), rn->value);
    if (rn->op == OP_ARANGE) return cvt(b, dtype_of(rn), bin(b, KOP_ADD, idx, ci(b, f->roff[o->id])));
    int a = arg_of(b, r, f->roff[o->id], shape_numel(&o->shape), store_type(f, o), KA_READ);
    note(b, a, rowlocal, stride);
    return emit(b, KOP_LOAD, dtype_of(o), a, idx, 0, 0);
}

// The flat element of (row, col) in the kernel's layout of a node of `cols` columns.
static int flat_index(KB *b, int64_t cols, int col) {
    if (b->axis_map) {
        int64_t o, d, in;
        around_axis(&b->axis_map->shape, b->axis_map->axis, &o, &d, &in);
        int base = bin(b, KOP_MUL, bin(b, KOP_DIV, b->row, ci(b, in)), ci(b, d * in));
        return bin(b, KOP_ADD, bin(b, KOP_ADD, base, bin(b, KOP_MUL, col, ci(b, in))),
                   bin(b, KOP_REM, b->row, ci(b, in)));
    }
    return bin(b, KOP_ADD, bin(b, KOP_MUL, b->row, ci(b, cols)), col);
}

static int node_val(KB *b, int i, int col);

// Value of operand node o at (row, col) of its row-major layout.
static int val(KB *b, const Node *o, int col) {
    int r = b->f->root[o->id];
    if (b->gi >= 0 && b->f->group[r] == b->gi) return node_val(b, r, col);
    int64_t cols = last_dim(&o->shape);
    return load_flat(b, o, flat_index(b, cols, col), !b->axis_map, cols);
}

// Index into operand shape `in` of element `flat` of shape `out` under
// numpy broadcasting.
static int broadcast_index(KB *b, const Shape *out, const Shape *in, int flat, int col) {
    int64_t nin = shape_numel(in), cols = last_dim(out);
    if (nin == 1) return ci(b, 0);
    int suffix = in->rank <= out->rank;
    for (int i = 0; suffix && i < in->rank; i++) suffix = in->dims[in->rank - 1 - i] == out->dims[out->rank - 1 - i];
    if (suffix && nin == cols) return col;
    if (suffix) return bin(b, KOP_REM, flat, ci(b, nin));
    int off = ci(b, 0);
    int64_t stride = 1, div = 1;
    for (int d = out->rank - 1, e = in->rank - 1; d >= 0; d--, e--) {
        if (e >= 0 && in->dims[e] != 1) {
            int idx = bin(b, KOP_REM, bin(b, KOP_DIV, flat, ci(b, div)), ci(b, out->dims[d]));
            off = bin(b, KOP_ADD, off, bin(b, KOP_MUL, idx, ci(b, stride)));
        }
        if (e >= 0) stride *= in->dims[e];
        div *= out->dims[d];
    }
    return off;
}

// Operand j of elementwise node n at (row, col), broadcasting when its shape differs.
static int elem_operand(KB *b, const Node *n, int j, int col) {
    const Node *o = n->in[j];
    if (shape_numel(&o->shape) == numel(n) && last_dim(&o->shape) == last_dim(&n->shape)) return val(b, o, col);
    int flat = flat_index(b, last_dim(&n->shape), col);
    return load_flat(b, o, broadcast_index(b, &n->shape, &o->shape, flat, col), 0, 0);
}

static int f64(KB *b, int x) { return cvt(b, KT_F64, x); }

// Pair ii's frequency rope_freq[ii] (of D/2). A geometric table (the plain
// rule and linear scaling: rope_freq[0] * theta^(-2ii/D), to 1e-14) is
// computed so, one pow an element as before the rules; any other (llama3,
// yarn, longrope) is read through the select tree of its constants.
static int rope_freq_of(KB *b, const Node *n, int ii, int64_t D) {
    double f0 = n->rope_freq[0];
    int geometric = 1;
    for (int64_t i = 0; i < D / 2 && geometric; i++)
        geometric = fabs(f0 * pow(n->theta, -2.0 * (double)i / (double)D) - n->rope_freq[i]) <= 1e-14 * n->rope_freq[i];
    if (!geometric) return f64_table(b, ii, n->rope_freq, 0, D / 2);
    int expo = bin(b, KOP_DIV, bin(b, KOP_MUL, cst(b, KT_F64, -2.0), f64(b, ii)), cst(b, KT_F64, (double)D));
    int f = bin(b, KOP_POW, cst(b, KT_F64, n->theta), expo);
    return f0 == 1 ? f : bin(b, KOP_MUL, cst(b, KT_F64, f0), f);
}
static int f32(KB *b, int x) { return cvt(b, KT_F32, x); }

// tanh(u) = 1 - 2 / (1 + e^2u), as the reference computes GELU.
static int tanh_by_exp(KB *b, int u) {
    int one = cst(b, KT_F32, 1), two = cst(b, KT_F32, 2);
    return bin(b, KOP_SUB, one, bin(b, KOP_DIV, two, bin(b, KOP_ADD, one, un(b, KOP_EXP, bin(b, KOP_MUL, two, u)))));
}

static const double GELU_S = 0.7978845608028654; // sqrt(2 / pi)

// Horner's rule: c[0] + u * (c[1] + u * (... c[n-1])), in u's type.
static int poly(KB *b, int u, const double *c, int n) {
    int acc = cst(b, ty(b, u), c[n - 1]);
    for (int k = n - 2; k >= 0; k--) acc = bin(b, KOP_ADD, cst(b, ty(b, u), c[k]), bin(b, KOP_MUL, u, acc));
    return acc;
}

// erf(x) of an f64 x from exp alone, which the kernel IR has: its Taylor
// series for |x| < 0.5 (terms to x^15, error below 1e-9 relative), and
// 1 - erfc(|x|) beyond, erfc by the Chebyshev fit of Numerical Recipes'
// erfcc (fractional error below 1.2e-7), the sign put back. Within f32's
// rounding of the C library's erf, which the reference kernel calls.
static int erf_by_exp(KB *b, int x) {
    static const double TAYLOR[] = {1.0,       -1.0 / 3,    1.0 / 10,   -1.0 / 42,
                                    1.0 / 216, -1.0 / 1320, 1.0 / 9360, -1.0 / 75600};
    static const double ERFC[] = {-1.26551223, 1.00002368,  0.37409196, 0.09678418,  -0.18628806,
                                  0.27886807,  -1.13520398, 1.48851587, -0.82215223, 0.17087277};
    int one = cst(b, KT_F64, 1), x2 = bin(b, KOP_MUL, x, x);
    int series = bin(b, KOP_MUL, bin(b, KOP_MUL, cst(b, KT_F64, 1.1283791670955126), x), poly(b, x2, TAYLOR, 8));
    int ax = bin(b, KOP_MAX, x, un(b, KOP_NEG, x));
    int t = bin(b, KOP_DIV, one, bin(b, KOP_ADD, one, bin(b, KOP_MUL, cst(b, KT_F64, 0.5), ax)));
    int erfc = bin(b, KOP_MUL, t, un(b, KOP_EXP, bin(b, KOP_SUB, poly(b, t, ERFC, 10), x2)));
    int tail = bin(b, KOP_SUB, one, erfc);
    int signed_tail = sel(b, cmp(b, KOP_LT, x, cst(b, KT_F64, 0)), un(b, KOP_NEG, tail), tail);
    return sel(b, cmp(b, KOP_LT, ax, cst(b, KT_F64, 0.5)), series, signed_tail);
}

// 1.0 where the comparison holds, 0.0 elsewhere, in f32.
static int indicator(KB *b, int c) { return sel(b, c, cst(b, KT_F32, 1), cst(b, KT_F32, 0)); }

// The target index of row r of a cross-entropy, clamped into [0, V).
static int target_of(KB *b, const Node *t, int64_t V) {
    return clampi(b, cvt(b, KT_I64, load_flat(b, t, b->row, 0, 0)), 0, V - 1);
}

// Whether the row's target is GRAPH_IGNORE_TARGET: the row does not count.
static int target_ignored(KB *b, const Node *t) {
    return cmp(b, KOP_EQ, cvt(b, KT_I64, load_flat(b, t, b->row, 0, 0)), ci(b, GRAPH_IGNORE_TARGET));
}

// Emits the column loops computing node i's row statistics into b->stat[i].
static void prepare_stats(KB *b, int i) {
    const Node *n = node_at(b->f, i);
    int *s = b->stat[i];
    int64_t rows, C;
    iter_space(n, &rows, &C);
    b->node = i;
    switch (n->op) {
    case OP_LAYERNORM:
    case OP_RMSNORM:
    case OP_LAYERNORM_BWD:
    case OP_RMSNORM_BWD: {
        int bwd = n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD;
        int rms = n->op == OP_RMSNORM || n->op == OP_RMSNORM_BWD;
        const Node *x = n->in[bwd ? 1 : 0];
        int mean = cst(b, KT_F64, 0);
        if (!rms) {
            open_loop(b, C);
            int sum = emit(b, KOP_RSUM, KT_F64, f64(b, val(b, x, b->col)), 0, 0, 0);
            close_loop(b);
            mean = bin(b, KOP_DIV, sum, cst(b, KT_F64, (double)C));
        }
        open_loop(b, C);
        int d = bin(b, KOP_SUB, f64(b, val(b, x, b->col)), mean);
        int var = emit(b, KOP_RSUM, KT_F64, bin(b, KOP_MUL, d, d), 0, 0, 0);
        close_loop(b);
        int rstd = bin(b, KOP_DIV, cst(b, KT_F64, 1),
                       un(b, KOP_SQRT,
                          bin(b, KOP_ADD, bin(b, KOP_DIV, var, cst(b, KT_F64, (double)C)), cst(b, KT_F64, n->eps))));
        s[0] = mean, s[1] = rstd;
        if (!bwd) return;
        open_loop(b, C);
        int xhat = bin(b, KOP_MUL, bin(b, KOP_SUB, f64(b, val(b, x, b->col)), mean), rstd);
        int g = load_flat(b, n->in[2], b->col, 0, 0);
        int dxhat = bin(b, KOP_MUL, f64(b, val(b, n->in[0], b->col)), f64(b, g));
        int m1 = emit(b, KOP_RSUM, KT_F64, dxhat, 0, 0, 0);
        int m2 = emit(b, KOP_RSUM, KT_F64, bin(b, KOP_MUL, dxhat, xhat), 0, 0, 0);
        close_loop(b);
        s[2] = rms ? cst(b, KT_F64, 0) : bin(b, KOP_DIV, m1, cst(b, KT_F64, (double)C));
        s[3] = bin(b, KOP_DIV, m2, cst(b, KT_F64, (double)C));
        return;
    }
    case OP_SOFTMAX: { // max and sum in f64, as the reference
        open_loop(b, C);
        int mx = emit(b, KOP_RMAX, KT_F64, f64(b, val(b, n->in[0], b->col)), 0, 0, 0);
        close_loop(b);
        open_loop(b, C);
        int sum = emit(b, KOP_RSUM, KT_F64, un(b, KOP_EXP, bin(b, KOP_SUB, f64(b, val(b, n->in[0], b->col)), mx)), 0, 0,
                       0);
        close_loop(b);
        s[0] = mx, s[1] = sum;
        return;
    }
    case OP_SOFTMAX_BWD: {
        open_loop(b, C);
        int dot = emit(b, KOP_RSUM, KT_F64,
                       bin(b, KOP_MUL, f64(b, val(b, n->in[0], b->col)), f64(b, val(b, n->in[1], b->col))), 0, 0, 0);
        close_loop(b);
        s[0] = dot;
        return;
    }
    case OP_CROSS_ENTROPY:
    case OP_CROSS_ENTROPY_BWD: { // max in f32, sum of f32 exps in f64, as the reference
        const Node *l = n->in[n->op == OP_CROSS_ENTROPY ? 0 : 1];
        open_loop(b, C);
        int mx = emit(b, KOP_RMAX, KT_F32, val(b, l, b->col), 0, 0, 0);
        close_loop(b);
        open_loop(b, C);
        int sum = emit(b, KOP_RSUM, KT_F64, f64(b, un(b, KOP_EXP, bin(b, KOP_SUB, val(b, l, b->col), mx))), 0, 0, 0);
        close_loop(b);
        int lse = bin(b, KOP_ADD, f64(b, mx), un(b, KOP_LOG, sum));
        s[0] = lse;
        if (n->op == OP_CROSS_ENTROPY) { // the row's loss into the mean, at row level
            int t = target_of(b, n->in[1], C);
            int lt = f64(b, val(b, l, t));
            int a = arg_of(b, i, 0, 1, store_type(b->f, n), KA_ACC64);
            b->args[a].divisor = (double)rows;
            note(b, a, 0, 0);
            int loss = sel(b, target_ignored(b, n->in[1]), cst(b, KT_F64, 0), bin(b, KOP_SUB, lse, lt));
            emit(b, KOP_ACC, KT_F64, a, ci(b, 0), loss, 0);
            return;
        }
        int scale = bin(b, KOP_DIV, f64(b, load_flat(b, n->in[0], ci(b, 0), 0, 0)), cst(b, KT_F64, (double)rows));
        s[1] = f32(b, lse);                                                           // shift
        s[2] = sel(b, target_ignored(b, n->in[2]), cst(b, KT_F32, 0), f32(b, scale)); // sc, and the target's subtrahend
        s[3] = target_of(b, n->in[2], C);
        return;
    }
    default: return;
    }
}

// Value of group node i at (row, col).
static int node_val(KB *b, int i, int col) {
    for (int k = b->nmemo - 1; k >= 0; k--)
        if (b->memo[k].node == i && b->memo[k].col == col && b->memo[k].loop == b->loop) return b->memo[k].stmt;
    const Node *n = node_at(b->f, i);
    int saved = b->node, v = 0;
    b->node = i;
    int *s = b->stat[i];
    switch (n->op) {
    case OP_CONST: v = cst(b, dtype_of(n), n->value); break;
    case OP_ARANGE: v = cvt(b, dtype_of(n), flat_index(b, last_dim(&n->shape), col)); break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_DIV: {
        static const int OPS[] = {[OP_ADD] = KOP_ADD, [OP_SUB] = KOP_SUB, [OP_MUL] = KOP_MUL, [OP_DIV] = KOP_DIV};
        v = bin(b, OPS[n->op], elem_operand(b, n, 0, col), elem_operand(b, n, 1, col));
        break;
    }
    case OP_NEG: v = un(b, KOP_NEG, val(b, n->in[0], col)); break;
    case OP_TANH: { // in f64, where 1 - 2 / (1 + e^2x) loses nothing near 0 that f32 keeps
        int x = f64(b, val(b, n->in[0], col)), one = cst(b, KT_F64, 1), two = cst(b, KT_F64, 2);
        v = f32(b, bin(b, KOP_SUB, one,
                       bin(b, KOP_DIV, two, bin(b, KOP_ADD, one, un(b, KOP_EXP, bin(b, KOP_MUL, two, x))))));
        break;
    }
    case OP_SIGMOID: {
        int x = f64(b, val(b, n->in[0], col)), one = cst(b, KT_F64, 1);
        v = f32(b, bin(b, KOP_DIV, one, bin(b, KOP_ADD, one, un(b, KOP_EXP, un(b, KOP_NEG, x)))));
        break;
    }
    case OP_ERF: v = f32(b, erf_by_exp(b, f64(b, val(b, n->in[0], col)))); break;
    case OP_EXP: v = un(b, KOP_EXP, val(b, n->in[0], col)); break;
    case OP_LOG: v = un(b, KOP_LOG, val(b, n->in[0], col)); break;
    case OP_FLOOR: { // the integer conversion truncates: one less where that rose above x
        int x = f64(b, val(b, n->in[0], col)),
            r = emit(b, KOP_CVT, KT_F64, emit(b, KOP_CVT, KT_I64, x, 0, 0, 0), 0, 0, 0);
        v = f32(b, sel(b, cmp(b, KOP_LT, x, r), bin(b, KOP_SUB, r, cst(b, KT_F64, 1)), r));
        break;
    }
    case OP_ABS: {
        int x = val(b, n->in[0], col);
        v = bin(b, KOP_MAX, x, un(b, KOP_NEG, x));
        break;
    }
    case OP_LT:
    case OP_LE:
    case OP_EQ: {
        static const int OPS[] = {[OP_LT] = KOP_LT, [OP_LE] = KOP_LE, [OP_EQ] = KOP_EQ};
        v = indicator(b, cmp(b, OPS[n->op], elem_operand(b, n, 0, col), elem_operand(b, n, 1, col)));
        break;
    }
    case OP_WHERE: {
        int c = cmp(b, KOP_EQ, elem_operand(b, n, 0, col), cst(b, KT_F32, 0));
        v = sel(b, c, elem_operand(b, n, 2, col), elem_operand(b, n, 1, col));
        break;
    }
    case OP_GELU: {
        int x = val(b, n->in[0], col);
        int inner = bin(b, KOP_ADD, x,
                        bin(b, KOP_MUL, bin(b, KOP_MUL, bin(b, KOP_MUL, cst(b, KT_F32, (float)0.044715), x), x), x));
        int t = tanh_by_exp(b, bin(b, KOP_MUL, cst(b, KT_F32, (float)GELU_S), inner));
        v = bin(b, KOP_MUL, bin(b, KOP_MUL, cst(b, KT_F32, 0.5), x), bin(b, KOP_ADD, cst(b, KT_F32, 1), t));
        break;
    }
    case OP_SILU:
    case OP_SWIGLU: {
        int x = val(b, n->in[0], col);
        v = bin(b, KOP_DIV, x, bin(b, KOP_ADD, cst(b, KT_F32, 1), un(b, KOP_EXP, un(b, KOP_NEG, x))));
        if (n->op == OP_SWIGLU) v = bin(b, KOP_MUL, v, val(b, n->in[1], col));
        break;
    }
    case OP_GELU_BWD: {
        int dy = val(b, n->in[0], col), x = val(b, n->in[1], col);
        int sc = cst(b, KT_F32, (float)GELU_S), c = cst(b, KT_F32, (float)0.044715), half = cst(b, KT_F32, 0.5),
            one = cst(b, KT_F32, 1);
        int t = tanh_by_exp(b, bin(b, KOP_MUL, sc,
                                   bin(b, KOP_ADD, x, bin(b, KOP_MUL, bin(b, KOP_MUL, bin(b, KOP_MUL, c, x), x), x))));
        int d1 = bin(b, KOP_MUL, half, bin(b, KOP_ADD, one, t));
        int d2 = bin(b, KOP_MUL, bin(b, KOP_MUL, bin(b, KOP_MUL, half, x), bin(b, KOP_SUB, one, bin(b, KOP_MUL, t, t))),
                     sc);
        int d3 = bin(b, KOP_ADD, one, bin(b, KOP_MUL, bin(b, KOP_MUL, bin(b, KOP_MUL, cst(b, KT_F32, 3), c), x), x));
        v = bin(b, KOP_MUL, dy, bin(b, KOP_ADD, d1, bin(b, KOP_MUL, d2, d3)));
        break;
    }
    case OP_SILU_BWD: {
        int dy = val(b, n->in[0], col), x = val(b, n->in[1], col), one = cst(b, KT_F32, 1);
        int sg = bin(b, KOP_DIV, one, bin(b, KOP_ADD, one, un(b, KOP_EXP, un(b, KOP_NEG, x))));
        v = bin(b, KOP_MUL, dy,
                bin(b, KOP_MUL, sg, bin(b, KOP_ADD, one, bin(b, KOP_MUL, x, bin(b, KOP_SUB, one, sg)))));
        break;
    }
    case OP_LAYERNORM:
    case OP_RMSNORM: {
        int x = f64(b, val(b, n->in[0], col));
        int y = bin(b, KOP_MUL, bin(b, KOP_MUL, bin(b, KOP_SUB, x, s[0]), s[1]),
                    f64(b, load_flat(b, n->in[1], col, 0, 0)));
        if (n->op == OP_LAYERNORM) y = bin(b, KOP_ADD, y, f64(b, load_flat(b, n->in[2], col, 0, 0)));
        v = f32(b, y);
        break;
    }
    case OP_LAYERNORM_BWD:
    case OP_RMSNORM_BWD: { // dx; dg and db are accumulated by store_node
        int xhat = bin(b, KOP_MUL, bin(b, KOP_SUB, f64(b, val(b, n->in[1], col)), s[0]), s[1]);
        int dxhat = bin(b, KOP_MUL, f64(b, val(b, n->in[0], col)), f64(b, load_flat(b, n->in[2], col, 0, 0)));
        v = f32(b, bin(b, KOP_MUL, s[1], bin(b, KOP_SUB, bin(b, KOP_SUB, dxhat, s[2]), bin(b, KOP_MUL, xhat, s[3]))));
        break;
    }
    case OP_SOFTMAX:
        v = f32(b, bin(b, KOP_DIV, un(b, KOP_EXP, bin(b, KOP_SUB, f64(b, val(b, n->in[0], col)), s[0])), s[1]));
        break;
    case OP_SOFTMAX_BWD:
        v = f32(b,
                bin(b, KOP_MUL, f64(b, val(b, n->in[1], col)), bin(b, KOP_SUB, f64(b, val(b, n->in[0], col)), s[0])));
        break;
    case OP_CROSS_ENTROPY_BWD: {
        int o = bin(b, KOP_MUL, s[2], un(b, KOP_EXP, bin(b, KOP_SUB, val(b, n->in[1], col), s[1])));
        v = sel(b, cmp(b, KOP_EQ, col, s[3]), bin(b, KOP_SUB, o, s[2]), o);
        break;
    }
    case OP_ROPE: { // pair ii of each head turns by t * rope_freq[ii], scaled by rope_scale (kernels.inc's rope)
        int64_t T = n->shape.dims[1], W = last_dim(&n->shape), D = W / n->heads, h2 = D / 2;
        int j = bin(b, KOP_REM, col, ci(b, D)), first, ii, pcol;
        if (n->rope_interleaved) { // pairs (2ii, 2ii + 1)
            first = cmp(b, KOP_EQ, bin(b, KOP_REM, j, ci(b, 2)), ci(b, 0));
            ii = bin(b, KOP_DIV, j, ci(b, 2));
            pcol = sel(b, first, bin(b, KOP_ADD, col, ci(b, 1)), bin(b, KOP_SUB, col, ci(b, 1)));
        } else { // pairs (ii, ii + D/2)
            first = cmp(b, KOP_LT, j, ci(b, h2));
            ii = sel(b, first, j, bin(b, KOP_SUB, j, ci(b, h2)));
            pcol = sel(b, first, bin(b, KOP_ADD, col, ci(b, h2)), bin(b, KOP_SUB, col, ci(b, h2)));
        }
        int t = f64(b, bin(b, KOP_REM, b->row, ci(b, T)));
        int ang = bin(b, KOP_MUL, bin(b, KOP_MUL, cst(b, KT_F64, n->inverse ? -1 : 1), t), rope_freq_of(b, n, ii, D));
        int scale = cst(b, KT_F64, n->rope_scale);
        int c = bin(b, KOP_MUL, scale, un(b, KOP_COS, ang)), sn = bin(b, KOP_MUL, scale, un(b, KOP_SIN, ang));
        int xs = f64(b, val(b, n->in[0], col)), xp = f64(b, val(b, n->in[0], pcol));
        int xc = bin(b, KOP_MUL, xs, c), ps = bin(b, KOP_MUL, xp, sn);
        v = f32(b, sel(b, first, bin(b, KOP_SUB, xc, ps), bin(b, KOP_ADD, xc, ps)));
        break;
    }
    case OP_EMBED: {
        int64_t V = n->in[0]->shape.dims[0], C = last_dim(&n->shape);
        int idx = clampi(b, cvt(b, KT_I64, load_flat(b, n->in[1], b->row, 0, 0)), 0, V - 1);
        v = load_flat(b, n->in[0], bin(b, KOP_ADD, bin(b, KOP_MUL, idx, ci(b, C)), col), 0, 0);
        break;
    }
    case OP_SLICE:
        if (last_axis(n)) {
            v = val(b, n->in[0], bin(b, KOP_ADD, col, ci(b, n->offset)));
        } else {
            int64_t o, pd, in, wo, wd, wi;
            around_axis(&n->shape, n->axis, &o, &pd, &in);
            around_axis(&n->in[0]->shape, n->axis, &wo, &wd, &wi);
            int f = flat_index(b, last_dim(&n->shape), col);
            int src = bin(b, KOP_ADD, bin(b, KOP_MUL, bin(b, KOP_DIV, f, ci(b, pd * in)), ci(b, wd * in)),
                          bin(b, KOP_ADD, ci(b, n->offset * in), bin(b, KOP_REM, f, ci(b, pd * in))));
            v = load_flat(b, n->in[0], src, 0, 0);
        }
        break;
    case OP_PAD: {
        int64_t o, d, in, po, pd, pi;
        around_axis(&n->shape, n->axis, &o, &d, &in);
        around_axis(&n->in[0]->shape, n->axis, &po, &pd, &pi);
        int zero = cst(b, KT_F32, 0);
        if (last_axis(n)) {
            int inr = emit(b, KOP_SELECT, KT_BOOL, cmp(b, KOP_LE, ci(b, n->offset), col),
                           cmp(b, KOP_LT, col, ci(b, n->offset + pd)), cmp(b, KOP_EQ, ci(b, 0), ci(b, 1)), 0);
            int c2 = clampi(b, bin(b, KOP_SUB, col, ci(b, n->offset)), 0, pd - 1);
            v = sel(b, inr, val(b, n->in[0], c2), zero);
        } else {
            int f = flat_index(b, last_dim(&n->shape), col);
            int j = bin(b, KOP_REM, bin(b, KOP_DIV, f, ci(b, in)), ci(b, d));
            int inr = emit(b, KOP_SELECT, KT_BOOL, cmp(b, KOP_LE, ci(b, n->offset), j),
                           cmp(b, KOP_LT, j, ci(b, n->offset + pd)), cmp(b, KOP_EQ, ci(b, 0), ci(b, 1)), 0);
            int jj = clampi(b, bin(b, KOP_SUB, j, ci(b, n->offset)), 0, pd - 1);
            int src = bin(b, KOP_ADD, bin(b, KOP_MUL, bin(b, KOP_DIV, f, ci(b, d * in)), ci(b, pd * in)),
                          bin(b, KOP_ADD, bin(b, KOP_MUL, jj, ci(b, in)), bin(b, KOP_REM, f, ci(b, in))));
            v = sel(b, inr, load_flat(b, n->in[0], src, 0, 0), zero);
        }
        break;
    }
    case OP_CONCAT: {
        int64_t o, d, in, off = 0;
        around_axis(&n->shape, n->axis, &o, &d, &in);
        int f = last_axis(n) ? col : flat_index(b, last_dim(&n->shape), col);
        int j = last_axis(n) ? col : bin(b, KOP_REM, bin(b, KOP_DIV, f, ci(b, in)), ci(b, d));
        for (int k = 0; k < n->nin; k++) {
            int64_t kd = n->in[k]->shape.dims[n->axis];
            int jj = clampi(b, bin(b, KOP_SUB, j, ci(b, off)), 0, kd - 1);
            int x;
            Shape whole = n->shape; // operand k as the output holds it, broadcast along its size-1 axes
            whole.dims[n->axis] = kd;
            if (!shape_eq(&whole, &n->in[k]->shape)) {
                int fv = last_axis(n)
                             ? bin(b, KOP_ADD, bin(b, KOP_MUL, b->row, ci(b, kd)), jj)
                             : bin(b, KOP_ADD, bin(b, KOP_MUL, bin(b, KOP_DIV, f, ci(b, d * in)), ci(b, kd * in)),
                                   bin(b, KOP_ADD, bin(b, KOP_MUL, jj, ci(b, in)), bin(b, KOP_REM, f, ci(b, in))));
                int cv = bin(b, KOP_REM, fv, ci(b, last_dim(&whole)));
                x = load_flat(b, n->in[k], broadcast_index(b, &whole, &n->in[k]->shape, fv, cv), 0, 0);
            } else if (last_axis(n)) {
                x = val(b, n->in[k], jj);
            } else {
                int src = bin(b, KOP_ADD, bin(b, KOP_MUL, bin(b, KOP_DIV, f, ci(b, d * in)), ci(b, kd * in)),
                              bin(b, KOP_ADD, bin(b, KOP_MUL, jj, ci(b, in)), bin(b, KOP_REM, f, ci(b, in))));
                x = load_flat(b, n->in[k], src, 0, 0);
            }
            v = k == 0 ? x : sel(b, cmp(b, KOP_LE, ci(b, off), j), x, v);
            off += kd;
        }
        break;
    }
    case OP_TRANSPOSE: {
        int64_t R = n->shape.dims[n->shape.rank - 2], C = last_dim(&n->shape);
        int src = bin(b, KOP_ADD, bin(b, KOP_MUL, bin(b, KOP_DIV, b->row, ci(b, R)), ci(b, R * C)),
                      bin(b, KOP_ADD, bin(b, KOP_MUL, col, ci(b, R)), bin(b, KOP_REM, b->row, ci(b, R))));
        v = load_flat(b, n->in[0], src, 0, 0);
        break;
    }
    default: ffail(b->f, n, "no lowering for this op in an expression kernel"); break;
    }
    if (!b->f->failed && ty(b, v) == KT_F32 && rounds_bf16(b->f, n)) v = un(b, KOP_RBF16, v);
    b->memo = grow(b->f, b->memo, &b->capmemo, b->nmemo + 1, sizeof *b->memo);
    if (!b->f->failed) b->memo[b->nmemo++] = (Memo){i, col, b->loop, v};
    b->node = saved;
    return v;
}

// Whether group node i is read outside its kernel.
static int needs_store(const F *f, int i, int gi) {
    if (f->keep[i]) return 1;
    for (int c = 0; c < f->ncons[i]; c++)
        if (f->group[f->cons[i][c]] != gi) return 1;
    return 0;
}

// Emits the stores and accumulations of group node i in the current loop.
static void store_node(KB *b, int i) {
    F *f = b->f;
    const Node *n = node_at(f, i);
    b->node = i;
    int64_t rows, C;
    iter_space(n, &rows, &C);
    switch (n->op) {
    case OP_CROSS_ENTROPY: return; // accumulated at row level by prepare_stats
    case OP_SUM_TO: {
        int a = arg_of(b, i, 0, numel(n), store_type(f, n), KA_ACC64);
        note(b, a, 0, 0);
        int flat = flat_index(b, C, b->col);
        emit(b, KOP_ACC, KT_F64, a, broadcast_index(b, &n->in[0]->shape, &n->shape, flat, b->col),
             f64(b, val(b, n->in[0], b->col)), 0);
        return;
    }
    case OP_EMBED_BWD: {
        int64_t V = n->shape.dims[0];
        int a = arg_of(b, i, 0, numel(n), store_type(f, n), KA_ACC32); // f32: the storage rule keeps it so
        note(b, a, 0, 0);
        int idx = clampi(b, cvt(b, KT_I64, load_flat(b, n->in[1], b->row, 0, 0)), 0, V - 1);
        int dy = val(b, n->in[0], b->col);
        if (n->padding) // the padding row takes none (adds 0)
            dy = sel(b, cmp(b, KOP_EQ, idx, ci(b, n->padding - 1)), cst(b, KT_F32, 0), dy);
        emit(b, KOP_ACC, KT_F32, a, bin(b, KOP_ADD, bin(b, KOP_MUL, idx, ci(b, C)), b->col), dy, 0);
        return;
    }
    case OP_LAYERNORM_BWD:
    case OP_RMSNORM_BWD: {
        int64_t nx = shape_numel(&n->in[1]->shape);
        int *s = b->stat[i];
        int dy = f64(b, val(b, n->in[0], b->col));
        int xhat = bin(b, KOP_MUL, bin(b, KOP_SUB, f64(b, val(b, n->in[1], b->col)), s[0]), s[1]);
        int ag = arg_of(b, i, nx, C, store_type(f, n), KA_ACC64);
        note(b, ag, 0, 0);
        emit(b, KOP_ACC, KT_F64, ag, b->col, bin(b, KOP_MUL, dy, xhat), 0);
        if (n->op == OP_LAYERNORM_BWD) {
            int ab = arg_of(b, i, nx + C, C, store_type(f, n), KA_ACC64);
            note(b, ab, 0, 0);
            emit(b, KOP_ACC, KT_F64, ab, b->col, dy, 0);
        }
        if (needs_store(f, i, b->gi)) {
            int a = arg_of(b, i, 0, nx, store_type(f, n), KA_WRITE);
            note(b, a, 1, C);
            emit(b, KOP_STORE, KT_BOOL, a, flat_index(b, C, b->col), node_val(b, i, b->col), 0);
        }
        return;
    }
    default: {
        if (!needs_store(f, i, b->gi)) return;
        int a = arg_of(b, i, 0, numel(n), store_type(f, n), KA_WRITE);
        note(b, a, !b->axis_map, C);
        emit(b, KOP_STORE, KT_BOOL, a, flat_index(b, C, b->col), node_val(b, i, b->col), 0);
        return;
    }
    }
}

static int store_cols(const F *f, int i, int gi, int64_t *cols) {
    const Node *n = node_at(f, i);
    int64_t rows;
    iter_space(n, &rows, cols);
    if (n->op == OP_CROSS_ENTROPY) return 0;
    if (is_acc(n) || n->op == OP_LAYERNORM_BWD || n->op == OP_RMSNORM_BWD) return 1;
    return needs_store(f, i, gi);
}

// Copies the builder's arrays into the kernel, in the arena.
static void kb_finish(KB *b, KirKernel *k) {
    Arena *a = b->f->a;
    k->kind = KK_EXPR;
    k->rows = b->rows;
    k->nloops = b->nloops;
    k->nstmts = b->nst;
    k->nargs = b->nargs;
    k->cols = arena_alloc(a, ((size_t)b->nloops + 1) * sizeof *k->cols);
    k->stmts = arena_alloc(a, ((size_t)b->nst + 1) * sizeof *k->stmts);
    k->args = arena_alloc(a, ((size_t)b->nargs + 1) * sizeof *k->args);
    if (!k->cols || !k->stmts || !k->args) {
        ffail(b->f, NULL, "out of memory");
        return;
    }
    if (b->nloops) memcpy(k->cols, b->cols, (size_t)b->nloops * sizeof *k->cols);
    if (b->nst) memcpy(k->stmts, b->st, (size_t)b->nst * sizeof *k->stmts);
    for (int i = 0; i < b->nargs; i++) {
        k->args[i] = b->args[i];
        if (b->rl[i] && b->args[i].row_stride > 0) k->args[i].access |= KA_ROWLOCAL;
        else k->args[i].row_stride = 0;
    }
}

static void kb_free(KB *b) { free(b->st), free(b->args), free(b->rl), free(b->cols), free(b->memo); }

static void set_nodes(F *f, KirKernel *k, const int *nodes, int n) {
    k->nodes = arena_alloc(f->a, ((size_t)n + 1) * sizeof *k->nodes);
    if (!k->nodes) return ffail(f, NULL, "out of memory");
    memcpy(k->nodes, nodes, (size_t)n * sizeof *nodes);
    k->nnodes = n;
    k->first = n ? nodes[0] : -1;
    k->anchor = n ? nodes[n - 1] : -1;
}

static void lower_group(F *f, int gi, KirKernel *k, int (*stat)[4]) {
    const Group *g = &f->groups[gi];
    KB b = {.f = f, .gi = gi, .rows = g->rows, .stat = stat};
    const Node *first = node_at(f, g->nodes[0]);
    if (is_axis_softmax(first)) b.axis_map = first;
    b.row = emit(&b, KOP_ROW, KT_I64, 0, 0, 0, 0);
    for (int k2 = 0; k2 < g->n; k2++) prepare_stats(&b, g->nodes[k2]);
    // one loop per distinct width of what is stored or accumulated
    for (int k2 = 0; k2 < g->n && !f->failed; k2++) {
        int64_t cols;
        if (!store_cols(f, g->nodes[k2], gi, &cols)) continue;
        int seen = 0;
        for (int j = 0; j < k2; j++) {
            int64_t c2;
            seen |= store_cols(f, g->nodes[j], gi, &c2) && c2 == cols;
        }
        if (seen) continue;
        open_loop(&b, cols);
        for (int j = k2; j < g->n; j++) {
            int64_t c2;
            if (store_cols(f, g->nodes[j], gi, &c2) && c2 == cols) store_node(&b, g->nodes[j]);
        }
        close_loop(&b);
    }
    kb_finish(&b, k);
    kb_free(&b);
    set_nodes(f, k, g->nodes, g->n);
}

static KirArg node_arg(const F *f, const Node *o, int access) {
    return (KirArg){.node = f->root[o->id],
                    .dtype = (uint8_t)store_type(f, o),
                    .access = (uint8_t)access,
                    .offset = f->roff[o->id],
                    .numel = shape_numel(&o->shape),
                    .divisor = 1};
}

static void lower_gemm(F *f, const Node *n, KirKernel *k) {
    const Shape *sa = &n->in[0]->shape, *sb = &n->in[1]->shape, *sc = &n->shape;
    if (sc->rank < 2 || sa->rank < 2 || sb->rank < 2) return ffail(f, n, "matmul of rank below 2");
    KirGemm *g = &k->gemm;
    int ta = n->trans_a, tb = n->trans_b;
    int64_t M = sc->dims[sc->rank - 2], N = last_dim(sc), K = ta ? sa->dims[sa->rank - 2] : last_dim(sa);
    int64_t batch = shape_numel(sc) / (M * N);
    int shared_b = sb->rank == 2;
    if (shared_b && !ta) M *= batch, batch = 1;
    *g = (KirGemm){.ta = ta,
                   .tb = tb,
                   .M = M,
                   .N = N,
                   .K = K,
                   .batch = batch,
                   .lda = ta ? M : K,
                   .ldb = tb ? K : N,
                   .ldc = N,
                   .stride_a = M * K,
                   .stride_b = shared_b ? 0 : K * N,
                   .stride_c = M * N,
                   .epilogue = -1};
    k->kind = KK_GEMM;
    k->nargs = 3;
    k->args = arena_alloc(f->a, 3 * sizeof *k->args);
    if (!k->args) return ffail(f, n, "out of memory");
    k->args[0] = node_arg(f, n, KA_WRITE);
    k->args[1] = node_arg(f, n->in[0], KA_READ);
    k->args[2] = node_arg(f, n->in[1], KA_READ);
}

// tanh(x) of an f64 x as 1 - 2 / (1 + e^2x).
static int tanh64(KB *b, int x) {
    int one = cst(b, KT_F64, 1), two = cst(b, KT_F64, 2);
    return bin(b, KOP_SUB, one, bin(b, KOP_DIV, two, bin(b, KOP_ADD, one, un(b, KOP_EXP, bin(b, KOP_MUL, two, x)))));
}

// The cpu composite's helper: softmax of scaled, capped, masked scores in
// place (bwd 0; with softcap also the capping's derivative 1 - tanh^2 into
// the third [T, T] of scratch; then each row's lse into the T floats after),
// or dscores = p * (dp - sum(p * dp)) *
// derivative * scale into dp (bwd 1), over [T, T] scratch.
static void lower_attn_helper(F *f, const KirAttn *t, int bwd, int node, KirKernel *k) {
    KB b = {.f = f, .gi = -1, .rows = t->T};
    b.node = node;
    int64_t T = t->T;
    b.row = emit(&b, KOP_ROW, KT_I64, 0, 0, 0, 0);
    int s0 = arg_of(&b, -1, 0, T * T, KT_F32, bwd ? KA_READ : KA_READ | KA_WRITE);
    int s1 = bwd ? arg_of(&b, -1, T * T, T * T, KT_F32, KA_READ | KA_WRITE) : 0; // the second [T, T] of scratch
    int s2 = t->softcap > 0 ? arg_of(&b, -1, 2 * T * T, T * T, KT_F32, bwd ? KA_READ : KA_WRITE) : 0; // the third
    if (!bwd) {
        int mx = 0, sum = 0;
        for (int pass = 0; pass < 3; pass++) {
            open_loop(&b, T);
            int idx = bin(&b, KOP_ADD, bin(&b, KOP_MUL, b.row, ci(&b, T)), b.col);
            int x = bin(&b, KOP_MUL, f64(&b, emit(&b, KOP_LOAD, KT_F32, s0, idx, 0, 0)), cst(&b, KT_F64, t->scale)),
                c = 0;
            if (t->softcap > 0 && pass) { // pass 0 takes the maximum of the uncapped scores (below)
                c = tanh64(&b, bin(&b, KOP_DIV, x, cst(&b, KT_F64, t->softcap)));
                x = bin(&b, KOP_MUL, cst(&b, KT_F64, t->softcap), c);
            }
            // masked scores: -inf in the maximum, and a probability of exactly 0 (what exp(-inf)
            // gives) without an exp of -inf, which sends vector exp to its slow scalar path
            int keep[3] = {t->causal ? cmp(&b, KOP_LE, b.col, b.row) : 0,
                           t->window ? cmp(&b, KOP_LT, bin(&b, KOP_SUB, b.row, ci(&b, t->window)), b.col) : 0,
                           t->chunk ? cmp(&b, KOP_EQ, bin(&b, KOP_DIV, b.col, ci(&b, t->chunk)),
                                          bin(&b, KOP_DIV, b.row, ci(&b, t->chunk)))
                                    : 0};
            if (pass == 0) {
                for (int m = 0; m < 3; m++)
                    if (keep[m]) x = sel(&b, keep[m], x, cst(&b, KT_F64, -INFINITY));
                mx = emit(&b, KOP_RMAX, KT_F64, x, 0, 0, 0);
            }
            int e = 0;
            if (pass) {
                for (int m = 0; m < 3; m++)
                    if (keep[m]) x = sel(&b, keep[m], x, mx);
                e = un(&b, KOP_EXP, bin(&b, KOP_SUB, x, mx));
                for (int m = 0; m < 3; m++)
                    if (keep[m]) e = sel(&b, keep[m], e, cst(&b, KT_F64, 0));
            }
            if (pass == 1) sum = emit(&b, KOP_RSUM, KT_F64, e, 0, 0, 0);
            if (pass == 2) emit(&b, KOP_STORE, KT_BOOL, s0, idx, f32(&b, bin(&b, KOP_DIV, e, sum)), 0);
            if (pass == 2 && s2)
                emit(&b, KOP_STORE, KT_BOOL, s2, idx,
                     f32(&b, bin(&b, KOP_SUB, cst(&b, KT_F64, 1), bin(&b, KOP_MUL, c, c))), 0);
            close_loop(&b);
            // the capping is increasing, so the capped maximum is the maximum capped: one tanh a
            // row instead of one a score in a loop that stays scalar (LLVM vectorises no f64
            // maximum without no-NaN flags). It is only the shift that keeps exp in range.
            if (pass == 0 && t->softcap > 0)
                mx = bin(&b, KOP_MUL, cst(&b, KT_F64, t->softcap),
                         tanh64(&b, bin(&b, KOP_DIV, mx, cst(&b, KT_F64, t->softcap))));
        }
        // the row's lse, log sum exp(score), into the T floats after the scores' (and C's) scratch
        int s3 = arg_of(&b, -1, (s2 ? 3 : 2) * T * T, T, KT_F32, KA_WRITE);
        open_loop(&b, 1);
        emit(&b, KOP_STORE, KT_BOOL, s3, b.row, f32(&b, bin(&b, KOP_ADD, mx, un(&b, KOP_LOG, sum))), 0);
        close_loop(&b);
    } else {
        open_loop(&b, T);
        int idx = bin(&b, KOP_ADD, bin(&b, KOP_MUL, b.row, ci(&b, T)), b.col);
        int dot = emit(&b, KOP_RSUM, KT_F64,
                       bin(&b, KOP_MUL, f64(&b, emit(&b, KOP_LOAD, KT_F32, s0, idx, 0, 0)),
                           f64(&b, emit(&b, KOP_LOAD, KT_F32, s1, idx, 0, 0))),
                       0, 0, 0);
        close_loop(&b);
        open_loop(&b, T);
        idx = bin(&b, KOP_ADD, bin(&b, KOP_MUL, b.row, ci(&b, T)), b.col);
        int p = f64(&b, emit(&b, KOP_LOAD, KT_F32, s0, idx, 0, 0)),
            dp = f64(&b, emit(&b, KOP_LOAD, KT_F32, s1, idx, 0, 0));
        int g = bin(&b, KOP_MUL, bin(&b, KOP_MUL, p, bin(&b, KOP_SUB, dp, dot)), cst(&b, KT_F64, t->scale));
        if (s2) g = bin(&b, KOP_MUL, g, f64(&b, emit(&b, KOP_LOAD, KT_F32, s2, idx, 0, 0)));
        emit(&b, KOP_STORE, KT_BOOL, s1, idx, f32(&b, g), 0);
        close_loop(&b);
    }
    kb_finish(&b, k);
    kb_free(&b);
    k->anchor = k->first = -1;
}

static void lower_attn(F *f, const Node *n, KirKernel *k) {
    int bwd = n->op == OP_ATTENTION_BWD;
    const Shape *q = &n->in[bwd ? 1 : 0]->shape;
    if (q->rank != 3 || n->heads < 1 || n->kv_heads < 1) return ffail(f, n, "attention needs q [B, T, H*D]");
    KirAttn *t = &k->attn;
    *t = (KirAttn){.B = q->dims[0],
                   .T = q->dims[1],
                   .H = n->heads,
                   .KVH = n->kv_heads,
                   .D = q->dims[2] / n->heads,
                   .Dv = n->in[bwd ? 3 : 2]->shape.dims[2] / n->kv_heads,
                   .causal = n->causal,
                   .window = n->window,
                   .softcap = n->softcap,
                   .chunk = n->chunk,
                   .helper = {-1, -1}};
    t->scale = n->scale > 0 ? n->scale : 1.0 / sqrt((double)t->D);
    k->kind = bwd ? KK_ATTN_BWD : KK_ATTN;
    k->nargs = n->nin + 1;
    k->args = arena_alloc(f->a, (size_t)k->nargs * sizeof *k->args);
    if (!k->args) return ffail(f, n, "out of memory");
    k->args[0] = node_arg(f, n, KA_WRITE);
    for (int j = 0; j < n->nin; j++) k->args[j + 1] = node_arg(f, n->in[j], KA_READ);
    if (!bwd) k->args[4].access = KA_WRITE; // the forward writes its lse beside y
}

// A node kernel (KK_NODE: no expression form): its output, then its operands.
static void lower_node(F *f, const Node *n, KirKernel *k) {
    k->kind = KK_NODE;
    k->nargs = n->nin + 1;
    k->args = arena_alloc(f->a, (size_t)k->nargs * sizeof *k->args);
    if (!k->args) return ffail(f, n, "out of memory");
    k->args[0] = node_arg(f, n, KA_WRITE);
    for (int j = 0; j < n->nin; j++) {
        if (n->in[j]->op == OP_CONST) return ffail(f, n, "internal error: %s of a constant", op_name(n->op));
        k->args[j + 1] = node_arg(f, n->in[j], KA_READ);
    }
}

// ---------------------------------------------------------------- 3. epilogues

// Whether expression kernel e reads GEMM g's output only at the row it computes.
static int fits_epilogue(const KirKernel *g, const KirKernel *e) {
    const KirGemm *m = &g->gemm;
    if (m->batch != 1 || e->rows != m->M || m->ldc != m->N) return 0;
    int reads = 0;
    for (int i = 0; i < e->nargs; i++) {
        const KirArg *a = &e->args[i];
        if (a->node == g->args[0].node) {
            if (a->offset != 0 || !(a->access & KA_ROWLOCAL) || a->row_stride != m->N ||
                (a->access & ~(KA_READ | KA_ROWLOCAL)))
                return 0;
            reads = 1;
        }
        if ((a->access & ~(KA_READ | KA_ROWLOCAL)) && (a->node == g->args[1].node || a->node == g->args[2].node))
            return 0;
    }
    return reads;
}

static void pass_epilogues(F *f, KirSet *s) {
    for (int i = 0; i < s->n; i++) {
        KirKernel *g = &s->k[i];
        if (g->kind != KK_GEMM || !kir_is_launched(g)) continue;
        int j = i + 1;
        while (j < s->n && !kir_is_launched(&s->k[j])) j++;
        if (j >= s->n) break;
        KirKernel *e = &s->k[j];
        int same_side = run_segment(f->part, g->anchor) == run_segment(f->part, e->anchor);
        if (e->kind != KK_EXPR || !same_side || !fits_epilogue(g, e)) continue;
        g->gemm.epilogue = j;
        e->fused_into = i;
        g->anchor = e->anchor;
    }
}

// ---------------------------------------------------------------- the pass

static int fuse_part(const Part *part, DType compute, Arena *a, KirSet *out, char *err, size_t errcap) {
    F f = {.part = part, .compute = compute, .a = a, .n = part->nodes.n, .err = err, .errcap = errcap};
    *out = (KirSet){0};
    int(*stat)[4] = NULL;
    if (setup(&f) != 0) ffail(&f, NULL, "out of memory");
    if (!f.failed) pass_group(&f);
    // kernels in anchor order; attention kernels followed by their helpers
    int cap = 3 * f.n + 1;
    KirKernel *ks = arena_alloc(a, (size_t)cap * sizeof *ks);
    stat = calloc((size_t)f.n + 1, sizeof *stat);
    if (!ks || !stat) ffail(&f, NULL, "out of memory");
    int nk = 0;
    for (int i = 0; i < f.n && !f.failed; i++) {
        const Node *n = node_at(&f, i);
        int gi = f.group[i];
        if (node_class(n) == C_HEAVY) {
            if (n->op == OP_ATTENTION_LSE) { // computed by the attention kernel that reads it, the next node
                const Node *y = i + 1 < f.n ? node_at(&f, i + 1) : NULL;
                if (!y || y->op != OP_ATTENTION || y->in[3] != n)
                    ffail(&f, n, "internal error: not read by the attention node after it");
                continue;
            }
            KirKernel *k = &ks[nk++];
            *k = (KirKernel){.fused_into = -1};
            int both[2] = {i - 1, i}; // an attention: its lse, then itself
            set_nodes(&f, k, n->op == OP_ATTENTION ? both : &i, n->op == OP_ATTENTION ? 2 : 1);
            if (n->op == OP_MATMUL) {
                lower_gemm(&f, n, k);
                continue;
            }
            if (kir_is_plain_op(n->op)) {
                lower_node(&f, n, k);
                continue;
            }
            lower_attn(&f, n, k);
            int self = nk - 1;
            for (int h = 0; h < 2 && !f.failed; h++) {
                KirKernel *hk = &ks[nk];
                *hk = (KirKernel){.fused_into = self};
                lower_attn_helper(&f, &k->attn, h, i, hk);
                k->attn.helper[h] = nk++;
            }
        } else if (gi >= 0 && f.groups[gi].nodes[f.groups[gi].n - 1] == i) {
            KirKernel *k = &ks[nk++];
            *k = (KirKernel){.fused_into = -1};
            lower_group(&f, gi, k, stat);
        }
    }
    out->k = ks;
    out->n = nk;
    if (!f.failed) pass_epilogues(&f, out);
    for (int i = 0; i < nk && !f.failed; i++) {
        char why[256];
        if (kir_check(&ks[i], f.n, why, sizeof why) != 0)
            ffail(&f, ks[i].anchor >= 0 ? node_at(&f, ks[i].anchor) : NULL, "internal error: kernel %d: %s", i, why);
    }
    free(stat);
    teardown(&f);
    return f.failed ? -1 : 0;
}

static _Atomic long runs; // fuse's calls, for fuse_runs

long fuse_runs(void) { return runs; }

int fuse(const Graph *g, Arena *a, KirProgram *prog, char *err, size_t errcap) {
    runs++;
    *prog = (KirProgram){.nparts = graph_nparts(g)};
    for (int pk = 0; pk < prog->nparts; pk++)
        if (fuse_part(&g->parts[pk], g->train.compute, a, &prog->parts[pk], err, errcap) != 0) return -1;
    return 0;
}

void fuse_spans(const Part *part, const KirSet *s, int *kfirst, int *kanchor) {
    for (int i = 0; i < part->nodes.n; i++) kfirst[i] = kanchor[i] = i;
    for (int i = 0; i < s->n; i++) {
        const KirKernel *k = &s->k[i];
        if (!kir_is_launched(k) || k->anchor < 0) continue;
        int first = k->first;
        const KirKernel *e = k->kind == KK_GEMM && k->gemm.epilogue >= 0 ? &s->k[k->gemm.epilogue] : NULL;
        if (e && e->first < first) first = e->first;
        for (int n = first; n <= k->anchor && n < part->nodes.n; n++) {
            if (kfirst[n] > first) kfirst[n] = first;
            if (kanchor[n] < k->anchor) kanchor[n] = k->anchor;
        }
    }
}

// ---------------------------------------------------------------- reporting

static int counts_as_op(const Node *n) { // (an attention's lse is part of the attention)
    int c = node_class(n);
    return (c == C_FUSE || c == C_HEAVY) && n->op != OP_ATTENTION_LSE;
}

FuseCount fuse_count(const Part *part, const KirSet *set, int backward) {
    FuseCount c = {0};
    int from = backward ? part->nfwd : 0, to = backward ? part->nodes.n : part->nfwd;
    for (int i = from; i < to; i++) {
        const Node *n = part->nodes.items[i];
        if (!counts_as_op(n)) continue;
        c.ops++;
        c.gemm_ops += n->op == OP_MATMUL;
    }
    for (int i = 0; i < set->n; i++) {
        const KirKernel *k = &set->k[i];
        if (!kir_is_launched(k) || k->anchor < from || k->anchor >= to) continue;
        c.kernels++;
        c.gemm_kernels += k->kind == KK_GEMM;
        c.epilogues += k->kind == KK_GEMM && k->gemm.epilogue >= 0;
    }
    return c;
}

static void print_nodes(FILE *out, const Part *part, const KirKernel *k) {
    for (int i = 0; i < k->nnodes; i++) {
        const Node *n = part->nodes.items[k->nodes[i]];
        fprintf(out, " %%%d %s", n->id, op_name(n->op));
    }
}

void fuse_dump(FILE *out, const Graph *g, const KirProgram *prog, int verbose) {
    fprintf(out, "model %s kernels\n", g->model_name);
    for (int pk = 0; pk < prog->nparts; pk++) {
        const Part *part = &g->parts[pk];
        const KirSet *s = &prog->parts[pk];
        for (int bwd = 0; bwd < 2; bwd++) {
            fprintf(out, "%s %s:\n", part_name(pk), bwd ? "backward" : "forward");
            for (int i = 0; i < s->n; i++) {
                const KirKernel *k = &s->k[i];
                if (!kir_is_launched(k) || (k->anchor >= part->nfwd) != bwd) continue;
                fprintf(out, "  k%-3d %-13s", i, kir_kind_name(k->kind));
                print_nodes(out, part, k);
                if (k->kind == KK_GEMM && k->gemm.epilogue >= 0) {
                    fprintf(out, "  + epilogue k%d:", k->gemm.epilogue);
                    print_nodes(out, part, &s->k[k->gemm.epilogue]);
                }
                fputc('\n', out);
                if (verbose) {
                    kir_print_kernel(out, k, i);
                    if (k->kind == KK_GEMM && k->gemm.epilogue >= 0)
                        kir_print_kernel(out, &s->k[k->gemm.epilogue], k->gemm.epilogue);
                }
            }
            FuseCount c = fuse_count(part, s, bwd);
            fprintf(out,
                    "  count %s %s: ops %d gemm_ops %d non_gemm_ops %d kernels %d gemm_kernels %d "
                    "non_gemm_kernels %d epilogues %d\n",
                    part_name(pk), bwd ? "backward" : "forward", c.ops, c.gemm_ops, c.ops - c.gemm_ops, c.kernels,
                    c.gemm_kernels, c.kernels - c.gemm_kernels, c.epilogues);
        }
    }
}
