// kir.c: names, checking, serialisation and printing of the kernel IR (kir.h).
//
// Byte format (kir_write), all little-endian: "MTKIR\0\0\0", u32 version;
// per part (head, block, tail): u32 kernel count; per kernel:
//   u8 kind, i32 anchor, i32 first, i32 fused_into,
//   u32 nnodes, nnodes x i32,
//   u32 nargs, per arg: i32 node, u8 dtype, u8 access, i64 offset, i64 numel,
//     i64 row_stride, f64 divisor,
//   i64 rows, u32 nloops, nloops x i64 cols,
//   u32 nstmts, per stmt: u8 op, u8 type, u16 loop, i32 a, b, c, node, f64 value,
//   gemm: i32 ta, tb, i64 M, N, K, batch, lda, ldb, ldc, stride_a, stride_b,
//     stride_c, i32 epilogue,
//   attn: i64 B, T, H, KVH, D, Dv, i32 causal, i64 window, f64 scale, softcap,
//     i32 helper[2], i64 chunk.
#include "common/kir.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { KIR_VERSION = 4, STMT_BYTES = 1 + 1 + 2 + 4 * 4 + 8, ARG_BYTES = 4 + 1 + 1 + 3 * 8 + 8 };
static const char KIR_MAGIC[8] = "MTKIR\0\0";

static const char *const OP_NAMES[] = {
    [KOP_CONST] = "const", [KOP_ROW] = "row",     [KOP_COL] = "col",   [KOP_LOAD] = "load",     [KOP_NEG] = "neg",
    [KOP_EXP] = "exp",     [KOP_LOG] = "log",     [KOP_SQRT] = "sqrt", [KOP_SIN] = "sin",       [KOP_COS] = "cos",
    [KOP_CVT] = "cvt",     [KOP_RBF16] = "rbf16", [KOP_ADD] = "add",   [KOP_SUB] = "sub",       [KOP_MUL] = "mul",
    [KOP_DIV] = "div",     [KOP_REM] = "rem",     [KOP_MIN] = "min",   [KOP_MAX] = "max",       [KOP_POW] = "pow",
    [KOP_LT] = "lt",       [KOP_LE] = "le",       [KOP_EQ] = "eq",     [KOP_SELECT] = "select", [KOP_RSUM] = "rsum",
    [KOP_RMAX] = "rmax",   [KOP_STORE] = "store", [KOP_ACC] = "acc",
};
_Static_assert(sizeof OP_NAMES / sizeof OP_NAMES[0] == KOP_COUNT, "OP_NAMES out of sync with KirOp");
static const char *const TYPE_NAMES[] = {"f32", "f64", "i32", "i64", "bool", "bf16"};
_Static_assert(sizeof TYPE_NAMES / sizeof TYPE_NAMES[0] == KT_COUNT, "TYPE_NAMES out of sync with KirType");
static const char *const KIND_NAMES[] = {"expr", "gemm", "attention", "attention_bwd", "node"};
_Static_assert(sizeof KIND_NAMES / sizeof KIND_NAMES[0] == KK_COUNT, "KIND_NAMES out of sync with KirKind");

const char *kir_op_name(KirOp op) { return (unsigned)op < KOP_COUNT ? OP_NAMES[op] : "?"; }
const char *kir_type_name(KirType t) { return (unsigned)t < KT_COUNT ? TYPE_NAMES[t] : "?"; }
const char *kir_kind_name(KirKind k) { return (unsigned)k < KK_COUNT ? KIND_NAMES[k] : "?"; }

int kir_is_launched(const KirKernel *k) { return k->anchor >= 0 && k->fused_into < 0; }
int kir_is_heavy(const KirKernel *k) { return k->kind == KK_GEMM || k->kind == KK_ATTN || k->kind == KK_ATTN_BWD; }
int kir_is_plain_op(OpKind op) {
    return (op >= OP_TOP_K && op <= OP_ADD_LOSS) || (op >= OP_CONV1D && op <= OP_SSD_BWD);
}

int64_t kir_acc64_offset(const KirKernel *k, int arg) {
    int64_t off = 0;
    for (int i = 0; i < arg && i < k->nargs; i++)
        if (k->args[i].access & KA_ACC64) off += k->args[i].numel;
    return off;
}

char *kir_symbol(char *buf, size_t cap, int part, int i) {
    snprintf(buf, cap, "mt_k%d_%d", part, i);
    return buf;
}

// ---------------------------------------------------------------- checking

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (err && cap) vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static int is_float(int t) { return t == KT_F32 || t == KT_F64; }
static int is_int(int t) { return t == KT_I32 || t == KT_I64; }
static int has_value(int op) { return op != KOP_STORE && op != KOP_ACC; }

// Whether `need` elements from `base` with `batch` strides of `stride` fit in numel.
static int fits(int64_t numel, int64_t batch, int64_t stride, int64_t extent) {
    if (batch < 1 || stride < 0 || extent < 0) return 0;
    if (stride && batch - 1 > (INT64_MAX / 2) / stride) return 0;
    return (batch - 1) * stride + extent <= numel;
}

// GEMM and attention arguments: all f32 or all bf16, but for argument
// f32_arg, which may be f32 under bf16 operands: a GEMM's output (a tiled
// gradient's part, common/storage.h), attention's lse.
static int same_float_storage(const KirKernel *k, int f32_arg) {
    for (int i = 0; i < k->nargs; i++) {
        int t = k->args[i].dtype, want = k->args[k->nargs > 1].dtype;
        if ((t != KT_F32 && t != KT_BF16) || k->args[i].node < 0) return 0;
        if (t != want && !(i == f32_arg && t == KT_F32)) return 0;
    }
    return 1;
}

static int check_gemm(const KirKernel *k, int nkernels, char *err, size_t cap) {
    const KirGemm *g = &k->gemm;
    const int64_t LIM = (int64_t)1 << 31;
    if (k->nargs != 3) return fail(err, cap, "gemm with %d arguments, not 3", k->nargs);
    if (g->M < 1 || g->N < 1 || g->K < 1 || g->M >= LIM || g->N >= LIM || g->K >= LIM || g->batch < 1 || g->ta < 0 ||
        g->ta > 1 || g->tb < 0 || g->tb > 1)
        return fail(err, cap, "gemm with bad sizes %lldx%lldx%lld batch %lld", (long long)g->M, (long long)g->N,
                    (long long)g->K, (long long)g->batch);
    int64_t ra = g->ta ? g->K : g->M, ca = g->ta ? g->M : g->K, rb = g->tb ? g->N : g->K, cb = g->tb ? g->K : g->N;
    if (g->lda < ca || g->ldb < cb || g->ldc < g->N || g->lda >= LIM || g->ldb >= LIM || g->ldc >= LIM)
        return fail(err, cap, "gemm with bad leading dimensions");
    if (!fits(k->args[0].numel, g->batch, g->stride_c, (g->M - 1) * g->ldc + g->N) ||
        !fits(k->args[1].numel, g->batch, g->stride_a, (ra - 1) * g->lda + ca) ||
        !fits(k->args[2].numel, g->batch, g->stride_b, (rb - 1) * g->ldb + cb))
        return fail(err, cap, "gemm reaches outside its arguments");
    if (g->epilogue < -1 || g->epilogue >= nkernels) return fail(err, cap, "gemm epilogue %d", g->epilogue);
    return same_float_storage(k, 0) ? 0 : fail(err, cap, "gemm arguments of different or non-float storage");
}

static int check_attn(const KirKernel *k, int nkernels, char *err, size_t cap) {
    const KirAttn *t = &k->attn;
    const int64_t LIM = (int64_t)1 << 24;
    int bwd = k->kind == KK_ATTN_BWD;
    int plain = bwd ? 7 : 5, sinks = k->nargs == plain + 1; // sinks [H]: the last argument when there are
    if (k->nargs != plain && !sinks) return fail(err, cap, "attention with %d arguments", k->nargs);
    if (t->B < 1 || t->T < 1 || t->H < 1 || t->KVH < 1 || t->D < 1 || t->B >= LIM || t->T >= LIM || t->H >= LIM ||
        t->D >= LIM || t->Dv < 1 || t->Dv >= LIM || t->H % t->KVH != 0 || t->causal < 0 || t->causal > 1 ||
        t->window < 0 || t->window >= LIM || (t->window && !t->causal) || t->chunk < 0 || t->chunk >= LIM ||
        (t->chunk && !t->causal) || !(t->scale > 0) || isinf(t->scale) || !(t->softcap >= 0) || isinf(t->softcap))
        return fail(err, cap, "attention with bad geometry");
    int64_t nq = t->B * t->T * t->H * t->D, nk = t->B * t->T * t->KVH * t->D;
    int64_t ny = t->B * t->T * t->H * t->Dv, nv = t->B * t->T * t->KVH * t->Dv; // y and dy, v
    const KirArg *a = k->args;
    int64_t nl = t->B * t->H * t->T; // lse
    int inside = bwd ? a[0].numel >= nq + nk + nv && a[1].numel >= ny && a[2].numel >= nq && a[3].numel >= nk &&
                           a[4].numel >= nv && a[5].numel >= ny && a[6].numel >= nl
                     : a[0].numel >= ny && a[1].numel >= nq && a[2].numel >= nk && a[3].numel >= nv && a[4].numel >= nl;
    if (!inside || (sinks && a[plain].numel < t->H))
        return fail(err, cap, "attention reaches outside its arguments");
    if (a[plain - 1].dtype != KT_F32) return fail(err, cap, "attention's lse not stored fp32");
    for (int i = 0; i < 2; i++)
        if (t->helper[i] < -1 || t->helper[i] >= nkernels) return fail(err, cap, "attention helper %d", t->helper[i]);
    if (!same_float_storage(k, plain - 1)) return fail(err, cap, "attention arguments of different or non-float storage");
    return 0;
}

static int check_stmt(const KirKernel *k, int i, char *err, size_t cap) {
    const KirStmt *s = &k->stmts[i];
    const KirStmt *S = k->stmts;
    int op = s->op, t = s->type;
#define BAD(...) fail(err, cap, __VA_ARGS__)
    if (op >= KOP_COUNT || t >= KT_COUNT || t == KT_BF16) return BAD("statement %d: bad op or type", i);
    if (s->loop > k->nloops) return BAD("statement %d: loop %d of %d", i, s->loop, k->nloops);
    int nops = 0;
    switch (op) {
    case KOP_CONST:
    case KOP_ROW:
    case KOP_COL: nops = 0; break;
    case KOP_LOAD: nops = 0; break;
    case KOP_NEG:
    case KOP_EXP:
    case KOP_LOG:
    case KOP_SQRT:
    case KOP_SIN:
    case KOP_COS:
    case KOP_CVT:
    case KOP_RBF16:
    case KOP_RSUM:
    case KOP_RMAX: nops = 1; break;
    case KOP_SELECT: nops = 3; break;
    case KOP_STORE:
    case KOP_ACC: nops = 0; break;
    default: nops = 2; break;
    }
    int32_t ops[3] = {s->a, s->b, s->c};
    // operands that are statements: LOAD's b; STORE/ACC's b and c
    int first = 0, last = nops;
    if (op == KOP_LOAD) first = 1, last = 2;
    if (op == KOP_STORE || op == KOP_ACC) first = 1, last = 3;
    for (int j = first; j < last; j++) {
        int32_t o = ops[j];
        if (o < 0 || o >= i)
            return BAD("statement %d (%s): operand %d is not an earlier statement", i, OP_NAMES[op], o);
        if (!has_value(S[o].op)) return BAD("statement %d: operand %d has no value", i, o);
        if (S[o].loop && S[o].loop != s->loop && S[o].op != KOP_RSUM && S[o].op != KOP_RMAX)
            return BAD("statement %d: uses element %d of another column loop", i, o);
        if (S[o].loop && S[o].loop == s->loop && (S[o].op == KOP_RSUM || S[o].op == KOP_RMAX))
            return BAD("statement %d: uses reduction %d inside its own loop", i, o);
    }
    int ta = nops > 0 || op == KOP_LOAD ? S[s->a < 0 || s->a >= i ? 0 : s->a].type : 0;
    int tb = S[s->b < 0 || s->b >= i ? 0 : s->b].type, tc = S[s->c < 0 || s->c >= i ? 0 : s->c].type;
    if (op == KOP_LOAD || op == KOP_STORE || op == KOP_ACC) {
        if (s->a < 0 || s->a >= k->nargs) return BAD("statement %d: argument %d of %d", i, s->a, k->nargs);
        const KirArg *g = &k->args[s->a];
        if (tb != KT_I64) return BAD("statement %d: index is not i64", i);
        if (op == KOP_LOAD && (!(g->access & KA_READ) || t != kir_value_type(g->dtype)))
            return BAD("statement %d: load of an argument not read as %s", i, TYPE_NAMES[t]);
        if (op == KOP_STORE && (!(g->access & KA_WRITE) || tc != kir_value_type(g->dtype)))
            return BAD("statement %d: store to an argument not written as %s", i, TYPE_NAMES[tc]);
        if (op == KOP_ACC && !((g->access & KA_ACC32 && tc == KT_F32) || (g->access & KA_ACC64 && tc == KT_F64)))
            return BAD("statement %d: acc into an argument not accumulated as %s", i, TYPE_NAMES[tc]);
        return 0;
    }
    switch (op) {
    case KOP_CONST: return t == KT_BOOL ? BAD("statement %d: bool constant", i) : 0;
    case KOP_ROW: return t != KT_I64 ? BAD("statement %d: row is i64", i) : 0;
    case KOP_COL: return t != KT_I64 || !s->loop ? BAD("statement %d: col is i64, in a column loop", i) : 0;
    case KOP_NEG: return t != ta || t == KT_BOOL ? BAD("statement %d: neg types", i) : 0;
    case KOP_EXP:
    case KOP_LOG:
    case KOP_SQRT:
    case KOP_SIN:
    case KOP_COS: return t != ta || !is_float(t) ? BAD("statement %d: %s of a non-float", i, OP_NAMES[op]) : 0;
    case KOP_CVT: return t == KT_BOOL || ta == KT_BOOL ? BAD("statement %d: cvt of bool", i) : 0;
    case KOP_RBF16: return t != KT_F32 || ta != KT_F32 ? BAD("statement %d: rbf16 of a non-f32", i) : 0;
    case KOP_RSUM:
    case KOP_RMAX:
        if (!s->loop || S[s->a].loop != s->loop) return BAD("statement %d: reduction outside its operand's loop", i);
        return t != ta || t == KT_BOOL ? BAD("statement %d: reduction types", i) : 0;
    case KOP_SELECT: return ta != KT_BOOL || tb != t || tc != t ? BAD("statement %d: select types", i) : 0;
    case KOP_LT:
    case KOP_LE:
    case KOP_EQ: return ta != tb || ta == KT_BOOL || t != KT_BOOL ? BAD("statement %d: compare types", i) : 0;
    case KOP_REM: return !is_int(t) || ta != t || tb != t ? BAD("statement %d: rem types", i) : 0;
    case KOP_POW: return !is_float(t) || ta != t || tb != t ? BAD("statement %d: pow types", i) : 0;
    default: return ta != t || tb != t || t == KT_BOOL ? BAD("statement %d: %s types", i, OP_NAMES[op]) : 0;
    }
#undef BAD
}

int kir_check(const KirKernel *k, int nnodes, char *err, size_t cap) {
    if (k->kind >= KK_COUNT) return fail(err, cap, "bad kernel kind %d", k->kind);
    if (k->anchor < -1 || k->anchor >= nnodes || k->first < -1 || k->first >= nnodes)
        return fail(err, cap, "anchor %d or first %d outside the part's %d nodes", k->anchor, k->first, nnodes);
    for (int i = 0; i < k->nnodes; i++)
        if (k->nodes[i] < 0 || k->nodes[i] >= nnodes) return fail(err, cap, "node %d of %d", k->nodes[i], nnodes);
    for (int i = 0; i < k->nargs; i++) {
        const KirArg *a = &k->args[i];
        if (a->node < -1 || a->node >= nnodes || (a->dtype != KT_F32 && a->dtype != KT_BF16 && a->dtype != KT_I32) ||
            (a->node < 0 && a->dtype != KT_F32) || a->offset < 0 || a->numel < 0 || a->numel > INT64_MAX / 16 ||
            a->offset > INT64_MAX / 16 || a->row_stride < 0 || (a->access & ~31) || !(a->divisor > 0) ||
            !isfinite(a->divisor))
            return fail(err, cap, "argument %d is malformed", i);
        if (((a->access & KA_ACC32) && a->dtype != KT_F32) || ((a->access & KA_ACC64) && a->dtype == KT_I32))
            return fail(err, cap, "argument %d accumulates into %s", i, TYPE_NAMES[a->dtype]);
    }
    if (k->kind == KK_GEMM) return check_gemm(k, INT32_MAX, err, cap);
    if (k->kind == KK_NODE) // the runtime matches the arguments to the node's operands (jit.c)
        return k->nargs >= 2 && k->nnodes == 1 && k->anchor == k->nodes[0] && k->args[0].node == k->anchor
                   ? 0
                   : fail(err, cap, "a node kernel is not one node's output and operands");
    if (k->kind != KK_EXPR) return check_attn(k, INT32_MAX, err, cap);
    if (k->rows < 1 || k->rows > INT64_MAX / 16 || k->nloops < 0)
        return fail(err, cap, "expression rows %lld", (long long)k->rows);
    for (int i = 0; i < k->nloops; i++)
        if (k->cols[i] < 1 || k->cols[i] > INT64_MAX / 16)
            return fail(err, cap, "loop %d has %lld columns", i + 1, (long long)k->cols[i]);
    int last_loop = 0, cur = 0;
    for (int i = 0; i < k->nstmts; i++) {
        int l = k->stmts[i].loop;
        if (l != cur && l != 0) {
            if (l <= last_loop) return fail(err, cap, "statement %d: column loop %d reopened", i, l);
            last_loop = l;
        }
        cur = l;
        if (check_stmt(k, i, err, cap) != 0) return -1;
    }
    return 0;
}

// Checks cross-kernel references of a set: epilogues and helpers are expression kernels.
static int check_set(const KirSet *s, char *err, size_t cap) {
    for (int i = 0; i < s->n; i++) {
        const KirKernel *k = &s->k[i];
        int refs[2] = {-1, -1};
        if (k->kind == KK_GEMM) refs[0] = k->gemm.epilogue;
        if (k->kind == KK_ATTN || k->kind == KK_ATTN_BWD) refs[0] = k->attn.helper[0], refs[1] = k->attn.helper[1];
        for (int j = 0; j < 2; j++) {
            if (refs[j] < -1 || refs[j] >= s->n)
                return fail(err, cap, "kernel %d refers to kernel %d of %d", i, refs[j], s->n);
            if (refs[j] >= 0 && (s->k[refs[j]].kind != KK_EXPR || s->k[refs[j]].fused_into != i))
                return fail(err, cap, "kernel %d refers to kernel %d, which is not its expression kernel", i, refs[j]);
        }
        if (k->fused_into < -1 || k->fused_into >= s->n || (k->fused_into >= 0 && k->kind != KK_EXPR))
            return fail(err, cap, "kernel %d is fused into %d", i, k->fused_into);
    }
    return 0;
}

// ---------------------------------------------------------------- writing

typedef struct Out {
    uint8_t *p;
    size_t len, cap;
    int oom;
} Out;

static void put(Out *o, const void *src, size_t n) {
    if (o->oom) return;
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->len + n) cap *= 2;
        uint8_t *p = realloc(o->p, cap);
        if (!p) {
            o->oom = 1;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->len, src, n);
    o->len += n;
}
static void put_le(Out *o, uint64_t v, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(o, b, (size_t)bytes);
}
static void put_f64(Out *o, double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    put_le(o, u, 8);
}
#define PUT8(o, v) put_le(o, (uint64_t)(uint8_t)(v), 1)
#define PUT16(o, v) put_le(o, (uint64_t)(uint16_t)(v), 2)
#define PUT32(o, v) put_le(o, (uint64_t)(uint32_t)(v), 4)
#define PUT64(o, v) put_le(o, (uint64_t)(v), 8)

static void write_kernel(Out *o, const KirKernel *k) {
    PUT8(o, k->kind);
    PUT32(o, k->anchor);
    PUT32(o, k->first);
    PUT32(o, k->fused_into);
    PUT32(o, k->nnodes);
    for (int i = 0; i < k->nnodes; i++) PUT32(o, k->nodes[i]);
    PUT32(o, k->nargs);
    for (int i = 0; i < k->nargs; i++) {
        const KirArg *a = &k->args[i];
        PUT32(o, a->node);
        PUT8(o, a->dtype);
        PUT8(o, a->access);
        PUT64(o, a->offset);
        PUT64(o, a->numel);
        PUT64(o, a->row_stride);
        put_f64(o, a->divisor);
    }
    PUT64(o, k->rows);
    PUT32(o, k->nloops);
    for (int i = 0; i < k->nloops; i++) PUT64(o, k->cols[i]);
    PUT32(o, k->nstmts);
    for (int i = 0; i < k->nstmts; i++) {
        const KirStmt *s = &k->stmts[i];
        PUT8(o, s->op);
        PUT8(o, s->type);
        PUT16(o, s->loop);
        PUT32(o, s->a);
        PUT32(o, s->b);
        PUT32(o, s->c);
        PUT32(o, s->node);
        put_f64(o, s->value);
    }
    const KirGemm *g = &k->gemm;
    PUT32(o, g->ta);
    PUT32(o, g->tb);
    int64_t gv[] = {g->M, g->N, g->K, g->batch, g->lda, g->ldb, g->ldc, g->stride_a, g->stride_b, g->stride_c};
    for (size_t i = 0; i < sizeof gv / sizeof gv[0]; i++) PUT64(o, gv[i]);
    PUT32(o, g->epilogue);
    const KirAttn *t = &k->attn;
    int64_t tv[] = {t->B, t->T, t->H, t->KVH, t->D, t->Dv};
    for (size_t i = 0; i < sizeof tv / sizeof tv[0]; i++) PUT64(o, tv[i]);
    PUT32(o, t->causal);
    PUT64(o, t->window);
    put_f64(o, t->scale);
    put_f64(o, t->softcap);
    PUT32(o, t->helper[0]);
    PUT32(o, t->helper[1]);
    PUT64(o, t->chunk);
}

int kir_write(const KirProgram *prog, uint8_t **out, size_t *len) {
    Out o = {0};
    put(&o, KIR_MAGIC, 8);
    PUT32(&o, KIR_VERSION);
    for (int p = 0; p < prog->nparts; p++) {
        PUT32(&o, prog->parts[p].n);
        for (int i = 0; i < prog->parts[p].n; i++) write_kernel(&o, &prog->parts[p].k[i]);
    }
    if (o.oom) {
        free(o.p);
        return -1;
    }
    *out = o.p;
    *len = o.len;
    return 0;
}

// ---------------------------------------------------------------- reading

typedef struct In {
    const uint8_t *p;
    size_t len, pos;
    int failed;
} In;

static uint64_t get_le(In *r, int bytes) {
    if (r->failed || r->len - r->pos < (size_t)bytes) {
        r->failed = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[r->pos + (size_t)i] << (8 * i);
    r->pos += (size_t)bytes;
    return v;
}
static int32_t get_i32(In *r) { return (int32_t)(uint32_t)get_le(r, 4); }
static int64_t get_i64(In *r) { return (int64_t)get_le(r, 8); }
static double get_f64(In *r) {
    uint64_t u = get_le(r, 8);
    double d;
    memcpy(&d, &u, 8);
    return d;
}
// A count of items of at least `min` bytes each that the bytes left can hold.
static int32_t get_count(In *r, size_t min) {
    int32_t n = get_i32(r);
    if (n < 0 || (size_t)n > (r->len - r->pos) / min) r->failed = 1;
    return r->failed ? 0 : n;
}

static int read_kernel(In *r, KirKernel *k, Arena *a) {
    k->kind = (uint8_t)get_le(r, 1);
    k->anchor = get_i32(r);
    k->first = get_i32(r);
    k->fused_into = get_i32(r);
    k->nnodes = get_count(r, 4);
    k->nodes = arena_alloc(a, ((size_t)k->nnodes + 1) * sizeof *k->nodes);
    if (!k->nodes) return -1;
    for (int i = 0; i < k->nnodes; i++) k->nodes[i] = get_i32(r);
    k->nargs = get_count(r, ARG_BYTES);
    k->args = arena_alloc(a, ((size_t)k->nargs + 1) * sizeof *k->args);
    if (!k->args) return -1;
    for (int i = 0; i < k->nargs; i++) {
        KirArg *g = &k->args[i];
        g->node = get_i32(r);
        g->dtype = (uint8_t)get_le(r, 1);
        g->access = (uint8_t)get_le(r, 1);
        g->offset = get_i64(r);
        g->numel = get_i64(r);
        g->row_stride = get_i64(r);
        g->divisor = get_f64(r);
    }
    k->rows = get_i64(r);
    k->nloops = get_count(r, 8);
    k->cols = arena_alloc(a, ((size_t)k->nloops + 1) * sizeof *k->cols);
    if (!k->cols) return -1;
    for (int i = 0; i < k->nloops; i++) k->cols[i] = get_i64(r);
    k->nstmts = get_count(r, STMT_BYTES);
    k->stmts = arena_alloc(a, ((size_t)k->nstmts + 1) * sizeof *k->stmts);
    if (!k->stmts) return -1;
    for (int i = 0; i < k->nstmts; i++) {
        KirStmt *s = &k->stmts[i];
        s->op = (uint8_t)get_le(r, 1);
        s->type = (uint8_t)get_le(r, 1);
        s->loop = (uint16_t)get_le(r, 2);
        s->a = get_i32(r);
        s->b = get_i32(r);
        s->c = get_i32(r);
        s->node = get_i32(r);
        s->value = get_f64(r);
    }
    KirGemm *g = &k->gemm;
    g->ta = get_i32(r);
    g->tb = get_i32(r);
    int64_t *gv[] = {&g->M,   &g->N,   &g->K,        &g->batch,    &g->lda,
                     &g->ldb, &g->ldc, &g->stride_a, &g->stride_b, &g->stride_c};
    for (size_t i = 0; i < sizeof gv / sizeof gv[0]; i++) *gv[i] = get_i64(r);
    g->epilogue = get_i32(r);
    KirAttn *t = &k->attn;
    int64_t *tv[] = {&t->B, &t->T, &t->H, &t->KVH, &t->D, &t->Dv};
    for (size_t i = 0; i < sizeof tv / sizeof tv[0]; i++) *tv[i] = get_i64(r);
    t->causal = get_i32(r);
    t->window = get_i64(r);
    t->scale = get_f64(r);
    t->softcap = get_f64(r);
    t->helper[0] = get_i32(r);
    t->helper[1] = get_i32(r);
    t->chunk = get_i64(r);
    return 0;
}

int kir_read(KirProgram *prog, const uint8_t *bytes, size_t len, int nparts, const int *nnodes, Arena *a, char *err,
             size_t cap) {
    *prog = (KirProgram){.nparts = nparts};
    In r = {.p = bytes, .len = len};
    if (len < 12 || memcmp(bytes, KIR_MAGIC, 8) != 0) return fail(err, cap, "kernel IR: bad magic");
    r.pos = 8;
    uint32_t version = (uint32_t)get_le(&r, 4);
    if (version != KIR_VERSION)
        return fail(err, cap, "kernel IR: version %u, this reader knows %d", version, KIR_VERSION);
    for (int p = 0; p < nparts; p++) {
        KirSet *s = &prog->parts[p];
        s->n = get_count(&r, 64);
        s->k = arena_alloc(a, ((size_t)s->n + 1) * sizeof *s->k);
        if (!s->k) return fail(err, cap, "kernel IR: out of memory");
        for (int i = 0; i < s->n; i++) {
            if (read_kernel(&r, &s->k[i], a) != 0) return fail(err, cap, "kernel IR: out of memory");
            if (r.failed) return fail(err, cap, "kernel IR: truncated in kernel %d of part %s", i, part_name(p));
            char why[256];
            if (kir_check(&s->k[i], nnodes[p], why, sizeof why) != 0)
                return fail(err, cap, "kernel IR: kernel %d of part %s: %s", i, part_name(p), why);
        }
        char why[256];
        if (check_set(s, why, sizeof why) != 0) return fail(err, cap, "kernel IR: part %s: %s", part_name(p), why);
    }
    if (r.failed || r.pos != len) return fail(err, cap, "kernel IR: %zu bytes left over or truncated", len - r.pos);
    return 0;
}

// ---------------------------------------------------------------- printing

void kir_print_kernel(FILE *out, const KirKernel *k, int index) {
    fprintf(out, "  kernel %d: %s rows=%lld", index, KIND_NAMES[k->kind < KK_COUNT ? k->kind : 0], (long long)k->rows);
    for (int i = 0; i < k->nloops; i++) fprintf(out, " loop%d=%lld", i + 1, (long long)k->cols[i]);
    fputc('\n', out);
    for (int i = 0; i < k->nargs; i++) {
        const KirArg *a = &k->args[i];
        fprintf(out, "    arg%d = %%%d+%lld %s[%lld]%s%s%s%s\n", i, a->node, (long long)a->offset,
                TYPE_NAMES[a->dtype % KT_COUNT], (long long)a->numel, a->access & KA_READ ? " read" : "",
                a->access & KA_WRITE ? " write" : "", a->access & (KA_ACC32 | KA_ACC64) ? " acc" : "",
                a->access & KA_ROWLOCAL ? " rowlocal" : "");
    }
    for (int i = 0; i < k->nstmts; i++) {
        const KirStmt *s = &k->stmts[i];
        fprintf(out, "    %*s$%d = %s %s", 2 * s->loop, "", i, TYPE_NAMES[s->type % KT_COUNT],
                OP_NAMES[s->op % KOP_COUNT]);
        switch (s->op) {
        case KOP_CONST: fprintf(out, " %.17g", s->value); break;
        case KOP_ROW:
        case KOP_COL: break;
        case KOP_LOAD: fprintf(out, " arg%d[$%d]", s->a, s->b); break;
        case KOP_STORE:
        case KOP_ACC: fprintf(out, " arg%d[$%d], $%d", s->a, s->b, s->c); break;
        case KOP_SELECT: fprintf(out, " $%d, $%d, $%d", s->a, s->b, s->c); break;
        case KOP_NEG:
        case KOP_EXP:
        case KOP_LOG:
        case KOP_SQRT:
        case KOP_SIN:
        case KOP_COS:
        case KOP_CVT:
        case KOP_RSUM:
        case KOP_RMAX: fprintf(out, " $%d", s->a); break;
        default: fprintf(out, " $%d, $%d", s->a, s->b); break;
        }
        fprintf(out, "  # %%%d\n", s->node);
    }
}
