// emit_cuda.c: kernel IR -> CUDA C (see emit_cuda.h for the launch ABI).
//
// An expression kernel is a loop over rows; how threads share it depends on
// its column loops:
//   no column loops     one thread per row (elementwise kernels)
//   columns <= 512      one warp per row, 4 rows per 128-thread block,
//                       reductions by warp shuffles
//   wider               one block per row (256 to 1024 threads), reductions
//                       by warp shuffles then shared memory
// Column loops stride by the group's size, so consecutive threads touch
// consecutive columns (coalesced). A loop whose loads and stores are all
// contiguous in the column (index = 4-aligned row part + col) or the same for
// every column, with a column count divisible by 4, runs four columns per
// thread with float4 (or 4 x bf16) loads and stores; any other loop is scalar.
// Unless CudaOptions.exact_f64, the IR's f64 values (the cpu reference's
// double accumulators) are computed in fp32 on the GPU. A load that a later
// column loop repeats (same read-only argument, same index expression, same
// loop shape) is kept in registers from the first loop, when each thread
// holds at most 8 columns' worth: one pass over memory for norms and softmax.
// Every statement becomes one `const` line of C, named v<statement>
// (v<statement>_<u> for column u of four), so that NVRTC's line numbers map
// back to statements and through them to graph nodes.
#include "compiler/emit/emit_cuda.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/attention.h"
#include "common/scan.h"
#include "compiler/emit/cuda/sources.h"

// ---------------------------------------------------------------- output with a per-line origin

typedef struct Emitter {
    CudaSource *s;
    size_t cap;
    int ocap, scap;
    const char *cur; // origin of the lines being written
    int oom;
} Emitter;

static void em(Emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void em(Emitter *e, const char *fmt, ...) {
    if (e->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    CudaSource *s = e->s;
    if (n < 0) {
        e->oom = 1;
        return;
    }
    if (s->len + (size_t)n + 1 > e->cap) {
        size_t cap = e->cap ? e->cap : 1 << 16;
        while (cap < s->len + (size_t)n + 1) cap *= 2;
        char *p = realloc(s->text, cap);
        if (!p) {
            e->oom = 1;
            return;
        }
        s->text = p, e->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(s->text + s->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    for (int i = 0; i < n; i++) {
        if (s->text[s->len + (size_t)i] != '\n') continue;
        if (s->nlines == e->ocap) {
            int cap = e->ocap ? 2 * e->ocap : 4096;
            const char **o = realloc(s->origin, (size_t)cap * sizeof *o);
            if (!o) {
                e->oom = 1;
                return;
            }
            s->origin = o, e->ocap = cap;
        }
        s->origin[s->nlines++] = e->cur;
    }
    s->len += (size_t)n;
}

// Text copied whole (the embedded .cuh files), lines without an origin.
static void em_text(Emitter *e, const char *text) {
    e->cur = NULL;
    em(e, "%s\n", text);
}

// A string that lives as long as the source (origins point into it).
static const char *keep(Emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *keep(Emitter *e, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    CudaSource *s = e->s;
    if (s->nstrings == e->scap) {
        int cap = e->scap ? 2 * e->scap : 256;
        char **p = realloc(s->strings, (size_t)cap * sizeof *p);
        if (!p) {
            e->oom = 1;
            return NULL;
        }
        s->strings = p, e->scap = cap;
    }
    char *d = strdup(buf);
    if (!d) e->oom = 1;
    else s->strings[s->nstrings++] = d;
    return d;
}

// ---------------------------------------------------------------- names and literals

const char *cuda_epilogue_name(CudaEpilogue ep) {
    static const char *const NAMES[] = {"none", "CUBLASLT_EPILOGUE_BIAS", "CUBLASLT_EPILOGUE_GELU_BIAS"};
    _Static_assert(sizeof NAMES / sizeof NAMES[0] == CUDA_EPI_COUNT, "epilogue names out of sync");
    return (unsigned)ep < CUDA_EPI_COUNT ? NAMES[ep] : "?";
}

int cuda_arg_bf16(const KirArg *a) { return a->dtype == KT_BF16 && !(a->access & KA_ACC64); }

static const char *ctype(int t) {
    switch (t) {
    case KT_F32: return "float";
    case KT_F64: return "double";
    case KT_I32: return "int";
    case KT_I64: return "long long";
    default: return "bool";
    }
}

// The C++ literal of a constant of type t, exact.
static char *literal(char *buf, size_t cap, int t, double v) {
    if (t == KT_I32) snprintf(buf, cap, "%d", (int)v);
    else if (t == KT_I64) snprintf(buf, cap, "%lldLL", (long long)v);
    else if (t == KT_F32) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        snprintf(buf, cap, "%.9g", (double)f);
        if (!isfinite(f) || strtof(buf, NULL) != f) snprintf(buf, cap, "__int_as_float(0x%08x)", u);
        else if (!strpbrk(buf, ".e")) snprintf(buf + strlen(buf), cap - strlen(buf), ".0f");
        else snprintf(buf + strlen(buf), cap - strlen(buf), "f");
    } else {
        uint64_t u;
        memcpy(&u, &v, 8);
        snprintf(buf, cap, "%.17g", v);
        if (!isfinite(v) || strtod(buf, NULL) != v)
            snprintf(buf, cap, "__longlong_as_double(0x%016llxLL)", (unsigned long long)u);
        else if (!strpbrk(buf, ".e")) snprintf(buf + strlen(buf), cap - strlen(buf), ".0");
    }
    return buf;
}

// ---------------------------------------------------------------- analysis

// For each integer statement: how it depends on the column (colc: 0 not at
// all, 1 exactly +col, 2 otherwise) and the residue mod 4 of the rest (m4,
// -1 unknown). An index with colc 1 and m4 0 into an argument whose offset is
// a multiple of 4 reads four aligned consecutive elements from column 4c.
typedef struct Aff {
    signed char colc, m4;
} Aff;

static void analyse(const KirKernel *k, Aff *af) {
    for (int i = 0; i < k->nstmts; i++) {
        const KirStmt *s = &k->stmts[i];
        Aff r = {2, -1}, a = {0, -1}, b = {0, -1};
        int ops = s->op != KOP_CONST && s->op != KOP_ROW && s->op != KOP_COL && s->op != KOP_LOAD &&
                  s->op != KOP_STORE && s->op != KOP_ACC;
        if (ops && s->a >= 0 && s->a < i) a = af[s->a];
        if (ops && s->op != KOP_RSUM && s->op != KOP_RMAX && s->b >= 0 && s->b < i) b = af[s->b];
        switch (s->op) {
        case KOP_CONST:
            r.colc = 0;
            r.m4 = (s->type == KT_I32 || s->type == KT_I64) ? (signed char)((((long long)s->value % 4) + 4) % 4) : -1;
            break;
        case KOP_ROW: r.colc = 0; break;
        case KOP_COL: r.colc = 1, r.m4 = 0; break;
        case KOP_LOAD: r.colc = af[s->b].colc == 0 ? 0 : 2; break;
        case KOP_RSUM:
        case KOP_RMAX: r.colc = 0; break;
        case KOP_CVT:
            if ((s->type == KT_I32 || s->type == KT_I64) &&
                (k->stmts[s->a].type == KT_I32 || k->stmts[s->a].type == KT_I64))
                r = a;
            else r.colc = a.colc == 0 ? 0 : 2;
            break;
        case KOP_ADD:
        case KOP_SUB: {
            int c = s->op == KOP_ADD ? a.colc + b.colc : a.colc - b.colc;
            r.colc = a.colc < 2 && b.colc < 2 && (c == 0 || c == 1) ? (signed char)c : 2;
            if (a.m4 >= 0 && b.m4 >= 0) r.m4 = (signed char)(((s->op == KOP_ADD ? a.m4 + b.m4 : a.m4 - b.m4) + 8) % 4);
            break;
        }
        case KOP_MUL:
            r.colc = a.colc == 0 && b.colc == 0 ? 0 : 2;
            if (a.m4 == 0 || b.m4 == 0) r.m4 = 0;
            else if (a.m4 > 0 && b.m4 > 0) r.m4 = (signed char)(a.m4 * b.m4 % 4);
            break;
        default: {
            int dep = 0;
            if (s->op != KOP_STORE && s->op != KOP_ACC) {
                if (s->a >= 0 && s->a < i) dep |= af[s->a].colc;
                if (s->b >= 0 && s->b < i) dep |= af[s->b].colc;
                if (s->op == KOP_SELECT && s->c >= 0 && s->c < i) dep |= af[s->c].colc;
            }
            r.colc = dep ? 2 : 0;
        }
        }
        if (s->loop == 0) r.colc = 0;
        af[i] = r;
    }
}

// Whether access statement s reads or writes four aligned consecutive elements.
static int contiguous(const KirKernel *k, const Aff *af, const KirStmt *s) {
    return af[s->b].colc == 1 && af[s->b].m4 == 0 && k->args[s->a].offset % 4 == 0;
}

// Whether column loop l (1-based) can run four columns per thread.
static int loop_vectorises(const KirKernel *k, const Aff *af, int l) {
    if (k->cols[l - 1] % 4 != 0) return 0;
    for (int i = 0; i < k->nstmts; i++) {
        const KirStmt *s = &k->stmts[i];
        if (s->loop != l) continue;
        if (s->op == KOP_LOAD && af[s->b].colc != 0 && !contiguous(k, af, s)) return 0;
        if (s->op == KOP_STORE && !contiguous(k, af, s)) return 0;
    }
    return 1;
}

// ---------------------------------------------------------------- expression kernels

// Which values are used: live[4 * i + u] for statement i, column u (u = 0
// at row level and in scalar loops). Effects are the roots; an operand of a
// live statement is live for the same column, a row-level or reduction
// operand for u = 0, and a vector load's or store's index only for u = 0.
// Nothing unused is emitted: NVRTC would warn, and a warning fails the build.
static void liveness(const KirKernel *k, const Aff *af, const int *vec, const int *cache_of, unsigned char *live) {
    for (int i = k->nstmts - 1; i >= 0; i--) {
        const KirStmt *s = &k->stmts[i];
        int w = s->loop && vec[s->loop] ? 4 : 1, effect = s->op == KOP_STORE || s->op == KOP_ACC;
        int red = s->op == KOP_RSUM || s->op == KOP_RMAX;
        for (int u = 0; u < w; u++) {
            if (effect) live[4 * i + u] = 1;
            if (red && live[4 * i]) live[4 * i + u] = 1; // the total needs every column's term
            if (!live[4 * i + u]) continue;
            int ops[3] = {-1, -1, -1};
            switch (s->op) {
            case KOP_CONST:
            case KOP_ROW:
            case KOP_COL: break;
            case KOP_LOAD:
                if (cache_of[i] >= 0) live[4 * cache_of[i] + u] = 1; // read from the first loop's registers
                else ops[1] = s->b;
                break;
            case KOP_STORE:
            case KOP_ACC: ops[1] = s->b, ops[2] = s->c; break;
            case KOP_SELECT: ops[0] = s->a, ops[1] = s->b, ops[2] = s->c; break;
            case KOP_NEG:
            case KOP_EXP:
            case KOP_LOG:
            case KOP_SQRT:
            case KOP_SIN:
            case KOP_COS:
            case KOP_CVT:
            case KOP_RBF16:
            case KOP_RSUM:
            case KOP_RMAX: ops[0] = s->a; break;
            default: ops[0] = s->a, ops[1] = s->b;
            }
            int vec_access = w == 4 && (s->op == KOP_LOAD || s->op == KOP_STORE) && contiguous(k, af, s);
            for (int j = 0; j < 3; j++) {
                int o = ops[j];
                if (o < 0 || o >= i) continue;
                const KirStmt *so = &k->stmts[o];
                int scalar = so->loop == 0 || so->op == KOP_RSUM || so->op == KOP_RMAX || (vec_access && j == 1);
                live[4 * o + (scalar ? 0 : u)] = 1;
            }
        }
    }
}

typedef struct Ctx {
    Emitter e;
    const CudaOptions *opt;
    const Graph *g;
    int inject_count; // expression kernels emitted so far, for the test hook
} Ctx;

// The type a statement computes in on the GPU: f64 becomes f32 unless exact.
static int eff(const Ctx *c, int t) { return t == KT_F64 && !c->opt->exact_f64 ? KT_F32 : t; }

// Whether statements i and j compute the same value for the same row and
// column: the same statement, or the same op on the same operands (constants
// by value, columns of loops the caller has checked have the same shape,
// loads of the same argument at the same index).
static int same_expr(const KirKernel *k, int i, int j, int depth) {
    if (i == j) return 1;
    if (i < 0 || j < 0 || depth > 48) return 0;
    const KirStmt *a = &k->stmts[i], *b = &k->stmts[j];
    if (a->op != b->op || a->type != b->type) return 0;
    switch (a->op) {
    case KOP_CONST: return a->value == b->value;
    case KOP_ROW:
    case KOP_COL: return 1;
    case KOP_LOAD: return a->a == b->a && same_expr(k, a->b, b->b, depth + 1);
    case KOP_RSUM:
    case KOP_RMAX:
    case KOP_STORE:
    case KOP_ACC: return 0;
    case KOP_NEG:
    case KOP_EXP:
    case KOP_LOG:
    case KOP_SQRT:
    case KOP_SIN:
    case KOP_COS:
    case KOP_CVT:
    case KOP_RBF16: return same_expr(k, a->a, b->a, depth + 1);
    case KOP_SELECT:
        return same_expr(k, a->a, b->a, depth + 1) && same_expr(k, a->b, b->b, depth + 1) &&
               same_expr(k, a->c, b->c, depth + 1);
    default: return same_expr(k, a->a, b->a, depth + 1) && same_expr(k, a->b, b->b, depth + 1);
    }
}

// The name of statement o's value as used by a statement of loop `loop`, column u.
static char *val(char *buf, size_t cap, const KirKernel *k, int o, int u) {
    const KirStmt *s = &k->stmts[o];
    if (s->loop == 0 || s->op == KOP_RSUM || s->op == KOP_RMAX) snprintf(buf, cap, "v%d", o);
    else snprintf(buf, cap, "v%d_%d", o, u);
    return buf;
}

static const char *node_origin(Ctx *c, const char *sym, int part, int node) {
    const Part *p = &c->g->parts[part];
    if (node < 0 || node >= p->nodes.n) return keep(&c->e, "kernel %s", sym);
    const Node *n = p->nodes.items[node];
    return keep(&c->e, "kernel %s: op %s (node %d of the %s) at %s:%d:%d", sym, op_name(n->op), node, part_name(part),
                c->opt->model_path ? c->opt->model_path : "<model>", n->loc.line, n->loc.col);
}

static const char *math_fn(int op, int t) {
    static const char *const F[][2] = {{"expf", "exp"}, {"logf", "log"}, {"sqrtf", "sqrt"},
                                       {"sinf", "sin"}, {"cosf", "cos"}, {"powf", "pow"}};
    int i = op == KOP_EXP ? 0 : op == KOP_LOG ? 1 : op == KOP_SQRT ? 2 : op == KOP_SIN ? 3 : op == KOP_COS ? 4 : 5;
    return F[i][t == KT_F64];
}

// One statement, for column u (u = 0 at row level). Vector loads and stores
// are written once, at u = 0, by the caller.
static void emit_stmt(Ctx *c, const KirKernel *k, int i, int u, int vec, int group) {
    Emitter *e = &c->e;
    const KirStmt *s = &k->stmts[i];
    char a[48], b[48], cc[48], name[48], lit[64];
    const int et = eff(c, s->type);
    const char *T = ctype(et);
    if (s->op != KOP_CONST && s->op != KOP_ROW && s->op != KOP_COL && s->op != KOP_LOAD) {
        if (s->op == KOP_STORE || s->op == KOP_ACC) val(b, sizeof b, k, s->b, u), val(cc, sizeof cc, k, s->c, u);
        else {
            val(a, sizeof a, k, s->a, u);
            if (s->op != KOP_RSUM && s->op != KOP_RMAX && s->b >= 0) val(b, sizeof b, k, s->b, u);
            if (s->op == KOP_SELECT) val(cc, sizeof cc, k, s->c, u);
        }
    }
    if (s->op == KOP_LOAD) val(b, sizeof b, k, s->b, u);
    val(name, sizeof name, k, i, u);
    const char *ind = s->loop ? "            " : "        ";
    const char *guard = s->loop == 0 && group > 1 ? "if (tid == 0) " : "";
    switch (s->op) {
    case KOP_CONST: em(e, "%sconst %s %s = %s;\n", ind, T, name, literal(lit, sizeof lit, et, s->value)); break;
    case KOP_ROW: em(e, "%sconst long long %s = row;\n", ind, name); break;
    case KOP_COL:
        if (vec) em(e, "%sconst long long %s = mt_c * 4 + %d;\n", ind, name, u);
        else em(e, "%sconst long long %s = mt_c;\n", ind, name);
        break;
    case KOP_LOAD: em(e, "%sconst %s %s = mt_ld(a%d + %s);\n", ind, T, name, s->a, b); break;
    case KOP_NEG: em(e, "%sconst %s %s = -%s;\n", ind, T, name, a); break;
    case KOP_EXP:
    case KOP_LOG:
    case KOP_SQRT:
    case KOP_SIN:
    case KOP_COS: em(e, "%sconst %s %s = %s(%s);\n", ind, T, name, math_fn(s->op, et), a); break;
    case KOP_POW: em(e, "%sconst %s %s = %s(%s, %s);\n", ind, T, name, math_fn(s->op, et), a, b); break;
    case KOP_CVT: em(e, "%sconst %s %s = (%s)%s;\n", ind, T, name, T, a); break;
    case KOP_RBF16: em(e, "%sconst %s %s = mt_bf16_to_f32(mt_f32_to_bf16(%s));\n", ind, T, name, a); break;
    case KOP_ADD: em(e, "%sconst %s %s = %s + %s;\n", ind, T, name, a, b); break;
    case KOP_SUB: em(e, "%sconst %s %s = %s - %s;\n", ind, T, name, a, b); break;
    case KOP_MUL: em(e, "%sconst %s %s = %s * %s;\n", ind, T, name, a, b); break;
    case KOP_DIV: em(e, "%sconst %s %s = %s / %s;\n", ind, T, name, a, b); break;
    case KOP_REM: em(e, "%sconst %s %s = %s %% %s;\n", ind, T, name, a, b); break;
    case KOP_MIN: em(e, "%sconst %s %s = mt_min(%s, %s);\n", ind, T, name, a, b); break;
    case KOP_MAX: em(e, "%sconst %s %s = mt_max(%s, %s);\n", ind, T, name, a, b); break;
    case KOP_LT: em(e, "%sconst bool %s = %s < %s;\n", ind, name, a, b); break;
    case KOP_LE: em(e, "%sconst bool %s = %s <= %s;\n", ind, name, a, b); break;
    case KOP_EQ: em(e, "%sconst bool %s = %s == %s;\n", ind, name, a, b); break;
    case KOP_SELECT: em(e, "%sconst %s %s = %s ? %s : %s;\n", ind, T, name, a, b, cc); break;
    case KOP_RSUM: em(e, "%sv%d += %s;\n", ind, i, a); break;
    case KOP_RMAX: em(e, "%sv%d = mt_max(v%d, %s);\n", ind, i, i, a); break;
    case KOP_STORE: em(e, "%s%smt_st(a%d + %s, %s);\n", ind, guard, s->a, b, cc); break;
    case KOP_ACC:
        em(e, "%s%satomicAdd(a%d + %s, (%s)%s);\n", ind, guard, s->a, b,
           k->args[s->a].access & KA_ACC64 ? "double" : "float", cc);
        break;
    }
}

// What the sections of an expression kernel share: its launch shape and
// what the analyses found of its statements and column loops.
typedef struct Expr {
    const KirKernel *k;
    int part;
    char sym[32];
    const char *origin;    // the kernel's own lines' origin
    int block, group, rpb; // threads, threads per row, rows per block
    int has_red;           // a row reduction (RSUM, RMAX)
    int nacc64;            // arguments accumulated in double, divided out by SYMBOL_finish
    Aff *af;               // (nstmts) each statement's form in the column (analyse)
    int *vec;              // (nloops + 1) whether loop l runs four columns a thread
    unsigned char *live;   // (nstmts * 4) whether statement i's column u is used (liveness)
    int *nu;               // (nloops + 1) loop l's iterations a thread, unrolled; 0: not unrolled
    int *cache_of;         // (nstmts) the earlier load whose registers a load reads; -1: none
    unsigned char *rowdep; // (nstmts) whether the statement's value depends on the row
    unsigned char *colacc; // (nstmts) whether an ACC adds into column accumulators
} Expr;

static void expr_free(Expr *x) {
    free(x->af);
    free(x->vec);
    free(x->live);
    free(x->nu);
    free(x->cache_of);
    free(x->rowdep);
    free(x->colacc);
}

// x's arrays, zeroed (cache_of is filled by expr_analyse). -1 out of memory.
static int expr_alloc(Expr *x) {
    const KirKernel *k = x->k;
    x->af = calloc((size_t)k->nstmts + 1, sizeof *x->af);
    x->vec = calloc((size_t)k->nloops + 1, sizeof *x->vec);
    x->live = calloc((size_t)k->nstmts * 4 + 4, 1);
    x->nu = calloc((size_t)k->nloops + 1, sizeof *x->nu);
    x->cache_of = malloc(((size_t)k->nstmts + 1) * sizeof *x->cache_of);
    x->rowdep = calloc((size_t)k->nstmts + 1, 1);
    x->colacc = calloc((size_t)k->nstmts + 1, 1);
    return x->af && x->vec && x->live && x->nu && x->cache_of && x->rowdep && x->colacc ? 0 : -1;
}

// The launch shape, by the widest column loop: threads, threads per row and
// rows per block; the grid covers the rows (up to 2^20 blocks, rows beyond
// stride through it).
static void expr_geometry(Expr *x, CudaKernelInfo *info) {
    const KirKernel *k = x->k;
    int64_t maxcols = 0;
    for (int l = 0; l < k->nloops; l++) maxcols = k->cols[l] > maxcols ? k->cols[l] : maxcols;
    if (k->nloops == 0) x->block = 256, x->group = 1, x->rpb = 256;
    else if (maxcols <= 512) x->block = 128, x->group = 32, x->rpb = 4;
    else {
        x->block = maxcols <= 4096 ? 256 : maxcols <= 16384 ? 512 : 1024;
        x->group = x->block, x->rpb = 1;
    }
    int64_t grid = (k->rows + x->rpb - 1) / x->rpb;
    if (grid > 1 << 20) grid = 1 << 20; // rows beyond stride through the grid
    info->grid = (int)grid, info->block = x->block, info->smem = 0;
}

// Which loops vectorise, which loops unroll, which loads read an earlier
// loop's registers, and which values are used.
static void expr_analyse(Expr *x, CudaKernelInfo *info) {
    const KirKernel *k = x->k;
    analyse(k, x->af);
    for (int l = 1; l <= k->nloops; l++) x->vec[l] = loop_vectorises(k, x->af, l), info->vectorised |= x->vec[l];
    for (int i = 0; i < k->nstmts; i++) x->has_red |= k->stmts[i].op == KOP_RSUM || k->stmts[i].op == KOP_RMAX;
    // loops each thread runs at most 8 times are unrolled (counted), and may
    // keep loads in registers for later loops of the same shape
    enum { MAX_CACHED = 8 };
    for (int l = 1; l <= k->nloops; l++) {
        int64_t n = x->vec[l] ? k->cols[l - 1] / 4 : k->cols[l - 1], it = (n + x->group - 1) / x->group;
        x->nu[l] = x->group > 1 && it <= MAX_CACHED ? (int)it : 0;
    }
    const int *nu = x->nu, *vec = x->vec;
    for (int j = 0; j < k->nstmts; j++) {
        const KirStmt *s = &k->stmts[j];
        x->cache_of[j] = -1;
        if (s->op != KOP_LOAD || !s->loop || !nu[s->loop] || (k->args[s->a].access & (KA_WRITE | KA_ACC32 | KA_ACC64)))
            continue;
        for (int i = 0; i < j && x->cache_of[j] < 0; i++) {
            const KirStmt *p = &k->stmts[i];
            if (p->op == KOP_LOAD && p->loop && p->loop < s->loop && nu[p->loop] == nu[s->loop] &&
                vec[p->loop] == vec[s->loop] && k->cols[p->loop - 1] == k->cols[s->loop - 1] && p->a == s->a &&
                p->type == s->type && same_expr(k, p->b, s->b, 0))
                x->cache_of[j] = x->cache_of[i] >= 0 ? x->cache_of[i] : i;
        }
    }
    liveness(k, x->af, vec, x->cache_of, x->live);
}

// Column accumulators: an ACC in an unrolled loop whose index depends on
// the column only (bias and norm-weight gradients: sums over rows) adds
// into registers across the rows a thread visits, and into memory once
// after its last row; the grid shrinks so that each group visits several
// rows. Anything else accumulates atomically where it happens. Then the
// finishing kernel's grid, over the largest double accumulator.
static void expr_accumulators(Expr *x, CudaKernelInfo *info) {
    const KirKernel *k = x->k;
    unsigned char *rowdep = x->rowdep, *colacc = x->colacc;
    int ncolacc = 0;
    for (int i = 0; i < k->nstmts; i++) {
        const KirStmt *s = &k->stmts[i];
        switch (s->op) {
        case KOP_CONST:
        case KOP_COL: break;
        case KOP_ROW:
        case KOP_LOAD:
        case KOP_RSUM:
        case KOP_RMAX: rowdep[i] = 1; break;
        case KOP_STORE:
        case KOP_ACC:
            colacc[i] = s->op == KOP_ACC && s->loop && x->nu[s->loop] && !rowdep[s->b];
            ncolacc += colacc[i];
            break;
        default:
            rowdep[i] = (s->a >= 0 && s->a < i && rowdep[s->a]) || (s->b >= 0 && s->b < i && rowdep[s->b]) ||
                        (s->op == KOP_SELECT && s->c >= 0 && s->c < i && rowdep[s->c]);
        }
    }
    enum { COLACC_GRID = 264 }; // two blocks per SM of the largest target (132 SMs)
    if (ncolacc && info->grid > COLACC_GRID) info->grid = COLACC_GRID;
    int64_t finish_n = 0;
    for (int i = 0; i < k->nargs; i++)
        if (k->args[i].access & KA_ACC64)
            x->nacc64++, finish_n = k->args[i].numel > finish_n ? k->args[i].numel : finish_n;
    info->finish_grid = x->nacc64 ? (int)((finish_n + 255) / 256 < 65536 ? (finish_n + 255) / 256 : 65536) : 0;
}

// The kernel's comment, launch constant and signature, its column
// accumulators, and the head of the row loop.
static void emit_expr_head(Ctx *c, const Expr *x, const CudaKernelInfo *info) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    const char *sym = x->sym;
    int block = x->block, group = x->group;
    e->cur = x->origin;
    em(e, "\n// %s: %d ops, %lld rows", sym, k->nnodes, (long long)k->rows);
    for (int l = 0; l < k->nloops; l++)
        em(e, "%s%lld%s", l ? ", " : " x [", (long long)k->cols[l], x->vec[l + 1] ? "/4" : "");
    em(e, "%s; %s\n", k->nloops ? "]" : "",
       group == 1    ? "a thread per row"
       : group == 32 ? "a warp per row"
                     : "a block per row");
    em(e, "extern \"C\" __constant__ int %s_launch[4] = {%d, %d, 0, %d};\n", sym, info->grid, block, info->finish_grid);
    em(e, "extern \"C\" __global__ void __launch_bounds__(%d) %s(", block, sym);
    for (int i = 0; i < k->nargs; i++) {
        const KirArg *a = &k->args[i];
        const char *st = a->access & KA_ACC64 ? "double"
                         : a->dtype == KT_I32 ? "int"
                         : cuda_arg_bf16(a)   ? "bf16"
                                              : "float";
        em(e, "%s%s%s *a%d", i ? ", " : "", (a->access & ~KA_ROWLOCAL) == KA_READ ? "const " : "", st, i);
    }
    em(e, ") {\n");
    if (group > 32 && x->has_red) em(e, "    __shared__ double mt_red[32];\n");
    for (int i = 0; i < k->nstmts; i++)
        if (x->colacc[i]) { // sums and where they go (-1: nowhere yet)
            int w = x->vec[k->stmts[i].loop] ? 4 : 1, n = x->nu[k->stmts[i].loop] * w;
            int dbl = (k->args[k->stmts[i].a].access & KA_ACC64) && c->opt->exact_f64; // a few rows: fp32 is enough
            em(e, "    %s v%d_acc[%d] = {};\n    long long v%d_at[%d];\n", dbl ? "double" : "float", i, n, i, n);
            em(e, "    for (int q = 0; q < %d; q++) v%d_at[q] = -1;\n", n, i);
        }
    if (group == 1)
        em(e,
           "    for (long long row = (long long)blockIdx.x * %d + threadIdx.x; row < %lldLL; "
           "row += (long long)gridDim.x * %d) {\n",
           block, (long long)k->rows, block);
    else {
        em(e, "    const int tid = threadIdx.x %% %d;\n", group);
        em(e,
           "    for (long long row = (long long)blockIdx.x * %d + threadIdx.x / %d; row < %lldLL; "
           "row += (long long)gridDim.x * %d) {\n",
           x->rpb, group, (long long)k->rows, x->rpb);
    }
}

// Closes column loop l, then reduces its live totals over the group.
static void close_column_loop(Ctx *c, const Expr *x, int l, int *prev_node) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    e->cur = x->origin;
    em(e, "        }\n");
    for (int j = 0; j < k->nstmts; j++) {
        const KirStmt *s = &k->stmts[j];
        if (s->loop != l || (s->op != KOP_RSUM && s->op != KOP_RMAX) || !x->live[4 * j]) continue;
        const char *fn = s->op == KOP_RSUM ? "sum" : "max";
        e->cur = node_origin(c, x->sym, x->part, s->node), *prev_node = -2;
        if (x->group == 32) em(e, "        v%d = mt_warp_%s(v%d);\n", j, fn, j);
        else em(e, "        v%d = mt_block_%s(v%d, (%s *)mt_red);\n", j, fn, j, ctype(eff(c, s->type)));
    }
}

// The identity of a running maximum of type et.
static const char *max_identity(int et) {
    return et == KT_F32   ? "__int_as_float(0xff800000)"
           : et == KT_F64 ? "-__longlong_as_double(0x7ff0000000000000LL)"
           : et == KT_I32 ? "(int)0x80000000"
                          : "(long long)0x8000000000000000ULL";
}

// Opens column loop l, whose statements start at i: its totals first,
// registers for the loads later loops reuse, then the loop's head.
static void open_column_loop(Ctx *c, const Expr *x, int l, int i) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    const unsigned char *live = x->live;
    e->cur = x->origin;
    for (int j = i; j < k->nstmts && k->stmts[j].loop == l; j++) {
        const KirStmt *s = &k->stmts[j];
        if (!live[4 * j]) continue;
        const int et = eff(c, s->type);
        if (s->op == KOP_RSUM) em(e, "        %s v%d = 0;\n", ctype(et), j);
        if (s->op == KOP_RMAX) em(e, "        %s v%d = %s;\n", ctype(et), j, max_identity(et));
    }
    int64_t n = x->vec[l] ? k->cols[l - 1] / 4 : k->cols[l - 1];
    int w = x->vec[l] ? 4 : 1, group = x->group;
    for (int j = i; j < k->nstmts && k->stmts[j].loop == l; j++) { // registers for later loops
        int used = 0;
        for (int q = j + 1; q < k->nstmts; q++)
            used |= x->cache_of[q] == j && (live[4 * q] | live[4 * q + 1] | live[4 * q + 2] | live[4 * q + 3]);
        if (used) em(e, "        %s v%d_r[%d][%d];\n", ctype(k->stmts[j].type), j, x->nu[l], w);
    }
    if (x->nu[l]) {
        em(e, "#pragma unroll\n        for (int mt_it = 0; mt_it < %d; mt_it++) {\n", x->nu[l]);
        em(e, "            const long long mt_c = tid + (long long)mt_it * %d;\n", group);
        em(e, "            if (mt_c >= %lldLL) break;\n", (long long)n);
    } else if (group == 1) em(e, "        for (long long mt_c = 0; mt_c < %lldLL; mt_c++) {\n", (long long)n);
    else em(e, "        for (long long mt_c = tid; mt_c < %lldLL; mt_c += %d) {\n", (long long)n, group);
}

// A vector load or store of statement i: four columns at once.
static void emit_vector_access(Ctx *c, const Expr *x, int i) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    const KirStmt *s = &k->stmts[i];
    const unsigned char *live = x->live;
    char idx[48], v4[4][48];
    val(idx, sizeof idx, k, s->b, 0);
    if (s->op == KOP_LOAD) {
        static const char XYZW[] = "xyzw";
        if (live[4 * i] | live[4 * i + 1] | live[4 * i + 2] | live[4 * i + 3])
            em(e, "            const auto v%d_q = mt_ld4(a%d + %s);\n", i, s->a, idx);
        for (int u = 0; u < 4; u++)
            if (live[4 * i + u]) em(e, "            const %s v%d_%d = v%d_q.%c;\n", ctype(s->type), i, u, i, XYZW[u]);
    } else {
        for (int u = 0; u < 4; u++) val(v4[u], sizeof v4[u], k, s->c, u);
        em(e, "            mt_st4(a%d + %s, mt_pack4(%s, %s, %s, %s));\n", s->a, idx, v4[0], v4[1], v4[2], v4[3]);
    }
}

// Statement i of column loop l (0: row level), w columns at once: into
// column accumulators, from an earlier loop's registers, as a vector
// access, or one line a live column; then into registers for later loops.
static void emit_expr_stmt(Ctx *c, const Expr *x, int i, int l) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    const KirStmt *s = &k->stmts[i];
    const unsigned char *live = x->live;
    int w = l && x->vec[l] ? 4 : 1;
    if (x->colacc[i]) {
        const char *at = (k->args[s->a].access & KA_ACC64) && c->opt->exact_f64 ? "double" : "float";
        for (int u = 0; u < w; u++) {
            char ix[48], vv[48];
            val(ix, sizeof ix, k, s->b, u), val(vv, sizeof vv, k, s->c, u);
            em(e, "            v%d_acc[mt_it * %d + %d] += (%s)%s;\n            v%d_at[mt_it * %d + %d] = %s;\n", i, w,
               u, at, vv, i, w, u, ix);
        }
    } else if (x->cache_of[i] >= 0) { // a load an earlier loop already made
        for (int u = 0; u < w; u++)
            if (live[4 * i + u])
                em(e, "            const %s v%d_%d = v%d_r[mt_it][%d];\n", ctype(s->type), i, u, x->cache_of[i], u);
    } else if (w == 4 && (s->op == KOP_LOAD || s->op == KOP_STORE) && contiguous(k, x->af, s)) {
        emit_vector_access(c, x, i);
    } else {
        for (int u = 0; u < w; u++)
            if (live[4 * i + u]) emit_stmt(c, k, i, u, w == 4, x->group);
    }
    int provides = 0;
    for (int q = i + 1; q < k->nstmts; q++) provides |= x->cache_of[q] == i;
    if (provides && x->cache_of[i] < 0)
        for (int u = 0; u < w; u++)
            if (live[4 * i + u]) em(e, "            v%d_r[mt_it][%d] = v%d_%d;\n", i, u, i, u);
}

// The statements, column loop by column loop; the test hook's error or
// warning after the first statement of the kernel it names.
static void emit_expr_body(Ctx *c, const Expr *x) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    c->inject_count++;
    int cur = 0, injected = 0, prev_node = -2;
    for (int i = 0; i <= k->nstmts; i++) {
        int l = i < k->nstmts ? k->stmts[i].loop : 0;
        if (l != cur && cur != 0) close_column_loop(c, x, cur, &prev_node);
        if (i == k->nstmts) break;
        if (l != cur && l != 0) open_column_loop(c, x, l, i);
        cur = l;
        const KirStmt *s = &k->stmts[i];
        if (s->node != prev_node) e->cur = node_origin(c, x->sym, x->part, s->node), prev_node = s->node;
        emit_expr_stmt(c, x, i, l);
        if (!injected && (c->opt->inject_error == c->inject_count || c->opt->inject_warning == c->inject_count)) {
            injected = 1;
            if (c->opt->inject_error == c->inject_count) em(e, "        mt_no_such_function(%d);\n", i);
            else em(e, "        int mt_unused_%d;\n", i);
        }
    }
}

// The row loop's end, the column accumulators into memory, the kernel's end.
static void emit_expr_tail(Ctx *c, const Expr *x) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    e->cur = x->origin;
    em(e, "    }\n");
    for (int i = 0; i < k->nstmts; i++)
        if (x->colacc[i]) {
            const KirStmt *s = &k->stmts[i];
            int n = x->nu[s->loop] * (x->vec[s->loop] ? 4 : 1);
            e->cur = node_origin(c, x->sym, x->part, s->node);
            em(e,
               "    for (int q = 0; q < %d; q++)\n"
               "        if (v%d_at[q] >= 0) atomicAdd(a%d + v%d_at[q], (%s)v%d_acc[q]);\n",
               n, i, s->a, i, k->args[s->a].access & KA_ACC64 ? "double" : "float", i);
        }
    e->cur = x->origin;
    em(e, "}\n");
}

// SYMBOL_finish, for the arguments accumulated in double: dst = scratch / divisor.
static void emit_expr_finish(Ctx *c, const Expr *x) {
    Emitter *e = &c->e;
    const KirKernel *k = x->k;
    em(e, "extern \"C\" __global__ void __launch_bounds__(256) %s_finish(", x->sym);
    int j = 0;
    for (int i = 0; i < k->nargs; i++)
        if (k->args[i].access & KA_ACC64) {
            const char *dst = k->args[i].dtype == KT_BF16 ? "bf16" : "float";
            em(e, "%s%s *d%d, const double *s%d", j++ ? ", " : "", dst, i, i);
        }
    em(e, ") {\n    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n");
    for (int i = 0; i < k->nargs; i++)
        if (k->args[i].access & KA_ACC64) {
            char lit[64];
            em(e,
               "    for (long long j = i; j < %lldLL; j += (long long)gridDim.x * blockDim.x) "
               "mt_st(d%d + j, (float)(s%d[j] / %s));\n",
               (long long)k->args[i].numel, i, i, literal(lit, sizeof lit, KT_F64, k->args[i].divisor));
        }
    em(e, "}\n");
}

// Expression kernel ki of part `part`, and its launch into info.
static void emit_expr(Ctx *c, const KirSet *set, int part, int ki, CudaKernelInfo *info) {
    Expr x = {.k = &set->k[ki], .part = part};
    kir_symbol(x.sym, sizeof x.sym, part, ki);
    snprintf(info->symbol, sizeof info->symbol, "%s", x.sym);
    x.origin = keep(&c->e, "kernel %s", x.sym);
    expr_geometry(&x, info);
    if (expr_alloc(&x) != 0) {
        c->e.oom = 1;
        expr_free(&x);
        return;
    }
    expr_analyse(&x, info);
    expr_accumulators(&x, info);
    emit_expr_head(c, &x, info);
    emit_expr_body(c, &x);
    emit_expr_tail(c, &x);
    if (x.nacc64) emit_expr_finish(c, &x);
    expr_free(&x);
}

// ---------------------------------------------------------------- GEMM epilogues

// The cuBLASLt epilogue that would compute GEMM g's epilogue expression
// kernel, advisory (the runtime decides): out[r, c] = C[r, c] + bias[c] is
// CUBLASLT_EPILOGUE_BIAS when the kernel is one column loop over the GEMM's
// N columns with two loads, one from C and one from an N-element vector,
// one f32 add and one store, and nothing else but index arithmetic.
static CudaEpilogue gemm_epilogue(const KirSet *set, const KirKernel *g) {
    if (g->gemm.epilogue < 0 || g->gemm.batch != 1 || g->nargs < 1) return CUDA_EPI_NONE;
    const KirKernel *k = &set->k[g->gemm.epilogue];
    if (k->kind != KK_EXPR || k->nloops != 1 || k->cols[0] != g->gemm.N) return CUDA_EPI_NONE;
    int from_c = 0, from_bias = 0, adds = 0, stores = 0, other = 0;
    for (int i = 0; i < k->nstmts; i++) {
        const KirStmt *s = &k->stmts[i];
        switch (s->op) {
        case KOP_LOAD:
            if (k->args[s->a].node == g->args[0].node) from_c++;
            else if (k->args[s->a].numel == g->gemm.N) from_bias++;
            else other++;
            break;
        case KOP_ADD: adds += s->type == KT_F32; break;
        case KOP_STORE: stores++; break;
        case KOP_ROW:
        case KOP_COL:
        case KOP_CONST:
        case KOP_CVT: break;
        case KOP_MUL: other += s->type == KT_F32; break;
        default: other++;
        }
    }
    return from_c == 1 && from_bias == 1 && adds == 1 && stores == 1 && !other ? CUDA_EPI_BIAS : CUDA_EPI_NONE;
}

// ---------------------------------------------------------------- the translation unit

// Shared memory per block, bytes, that a kernel may opt into on arch.
static size_t arch_smem_limit(const char *arch) {
    int sm = atoi(arch + 3);
    if (sm == 80 || sm == 87) return 163 * 1024;
    if (sm >= 90 && sm < 100) return 227 * 1024;
    if (sm >= 100 && sm < 120) return 227 * 1024;
    return 99 * 1024; // sm_86, sm_89, sm_120
}

void cuda_source_free(CudaSource *s) {
    free(s->text);
    free(s->origin);
    free(s->info);
    for (int i = 0; i < s->nstrings; i++) free(s->strings[i]);
    free(s->strings);
    memset(s, 0, sizeof *s);
}

// An attention kernel's variant: which template, head size, mask and options.
typedef struct AttnVariant {
    int tc, D, Dv, causal;
    long long window, chunk;
    double scale, softcap;
} AttnVariant;

static AttnVariant attn_variant(const KirKernel *k, int bf16) {
    AttnVariant v = {attn_tc_ok(bf16, (int)k->attn.D, (int)k->attn.Dv),
                     (int)k->attn.D,
                     (int)k->attn.Dv,
                     k->attn.causal,
                     (long long)k->attn.window,
                     (long long)k->attn.chunk,
                     k->attn.scale,
                     k->attn.softcap};
    return v;
}
static int attn_variant_eq(const AttnVariant *a, const AttnVariant *b) {
    return a->tc == b->tc && a->D == b->D && a->Dv == b->Dv && a->causal == b->causal && a->window == b->window &&
           a->chunk == b->chunk && (float)a->scale == (float)b->scale && (float)a->softcap == (float)b->softcap;
}

// Whether the plan stores bf16 (the storage rule marks every float tensor alike).
static int program_bf16(const KirProgram *prog) {
    int bf16 = 0;
    for (int p = 0; p < PART_COUNT; p++)
        for (int i = 0; i < prog->parts[p].n; i++)
            for (int j = 0; j < prog->parts[p].k[i].nargs; j++) bf16 |= prog->parts[p].k[i].args[j].dtype == KT_BF16;
    return bf16;
}

// The attention instantiations a program needs.
enum { MAX_ATTN = 32 };
typedef struct AttnSet {
    AttnVariant inst[MAX_ATTN]; // (n) each variant used, once
    int n, ntc;                 // variants, of them on tensor cores
} AttnSet;

// The node kernel k of part p is anchored at (its first when none): where its errors point.
static const Node *anchor_node(const Graph *g, int p, const KirKernel *k) {
    return g->parts[p].nodes.items[k->anchor >= 0 ? k->anchor : 0];
}

// Attention kernel k (anchored in part p) into s: tensor cores where
// attn_tc_ok (bf16, head sizes 64, 128, 192 or 256), else the fp32
// template, the fallback. 0, or -1 with a message (what no CUDA kernel of
// mt's runs).
static int add_attention(AttnSet *s, const KirKernel *k, int p, const Graph *g, const CudaOptions *opt, int bf16,
                         char *err, size_t errcap) {
    const char *model = opt->model_path ? opt->model_path : "<model>";
    AttnVariant v = attn_variant(k, bf16);
    if (k->attn.Dv != k->attn.D && !v.tc) { // the fp32 template takes one head width
        snprintf(err, errcap,
                 "%s:%d:%d: error: attention with query and key heads %lld wide but value heads %lld has a CUDA "
                 "kernel only on tensor cores (bf16 storage, head sizes 64, 128, 192 or 256); a cpu target "
                 "runs it (--target local, tiny-1layer)",
                 model, anchor_node(g, p, k)->loc.line, anchor_node(g, p, k)->loc.col, (long long)k->attn.D,
                 (long long)k->attn.Dv);
        return -1;
    }
    for (int j = 0; j < s->n; j++)
        if (attn_variant_eq(&s->inst[j], &v)) return 0;
    if (s->n == MAX_ATTN) {
        snprintf(err, errcap, "more than %d attention variants in one plan", MAX_ATTN);
        return -1;
    }
    size_t need = v.tc ? attn_tc_smem_max(v.D, v.Dv) : attn_smem_max(v.D);
    if (v.D > 256 || need > arch_smem_limit(opt->arch)) {
        snprintf(err, errcap,
                 "%s:%d:%d: error: attention with head size %d needs %zu bytes of shared memory; %s allows %zu "
                 "(and the template stops at 256)",
                 model, anchor_node(g, p, k)->loc.line, anchor_node(g, p, k)->loc.col, v.D, need, opt->arch,
                 arch_smem_limit(opt->arch));
        return -1;
    }
    s->inst[s->n++] = v, s->ntc += v.tc;
    return 0;
}

// The head of the source: what it is, the embedded .cuh files it needs.
static void emit_prelude(Emitter *e, const Graph *g, const KirProgram *prog, const CudaOptions *opt, int bf16,
                         const AttnSet *s) {
    e->cur = NULL;
    em(e, "// generated by mtc for %s (%s storage); kernel IR -> CUDA C, see compiler/emit/emit_cuda.c\n", opt->arch,
       bf16 ? "bf16" : "f32");
    em_text(e, mt_cuda_prelude);
    if (s->n || opt->with_reference) em_text(e, mt_cuda_attention);
    if (s->ntc) em_text(e, mt_cuda_mma), em_text(e, mt_cuda_attention_tc);
    if (opt->with_reference) em_text(e, mt_cuda_attention_ref);
    int nodes = 0; // mixture of experts: the KK_NODE kernels of compiler/emit/cuda/moe.cuh
    for (int p = 0; p < PART_COUNT; p++)
        for (int i = 0; i < prog->parts[p].n; i++) nodes += prog->parts[p].k[i].kind == KK_NODE;
    if (nodes && !s->ntc) em_text(e, mt_cuda_mma); // moe.cuh's tensor-core tiles
    if (nodes) em_text(e, mt_cuda_moe);
    int scans = 0; // conv1d and the recurrences: compiler/emit/cuda/scan.cuh
    for (int p = 0; p < PART_COUNT; p++)
        for (int i = 0; i < prog->parts[p].n; i++) {
            const KirKernel *k = &prog->parts[p].k[i];
            const Node *n = k->kind == KK_NODE ? g->parts[p].nodes.items[k->anchor] : NULL;
            scans += n && (n->op == OP_CONV1D || n->op == OP_CONV1D_BWD || scan_is_op(n->op));
        }
    if (scans) em_text(e, mt_cuda_scan);
}

// One instantiation of the attention templates for each variant in s.
static void emit_attention_instances(Emitter *e, int bf16, const AttnSet *s) {
    for (int j = 0; j < s->n; j++) {
        const AttnVariant *v = &s->inst[j];
        char name[64], sc[64], cap[64];
        attn_variant_name_chunk(name, sizeof name, bf16, v->D, v->Dv, v->causal, v->window, v->chunk, v->scale,
                                v->softcap);
        int plain = !v->window && !v->chunk && v->softcap <= 0 && attn_default_scale(v->D, v->scale) && v->Dv == v->D;
        if (plain && v->tc) em(e, "MT_ATTN_TC_INSTANTIATE(%d, %s, %s)\n", v->D, v->causal ? "true" : "false", name);
        else if (plain)
            em(e, "MT_ATTN_INSTANTIATE(%s, %d, %s, %s)\n", bf16 ? "bf16" : "float", v->D, v->causal ? "true" : "false",
               name);
        else {
            if (attn_default_scale(v->D, v->scale)) snprintf(sc, sizeof sc, "1.0f / sqrtf((float)%d)", v->D);
            else literal(sc, sizeof sc, KT_F32, v->scale);
            literal(cap, sizeof cap, KT_F32, v->softcap);
            if (v->tc)
                em(e, "MT_ATTN_TC_INSTANTIATE_CHUNK(%d, %d, %s, %s, %s, %lld, %lld, %s)\n", v->D, v->Dv,
                   v->causal ? "true" : "false", sc, cap, v->window, v->chunk, name);
            else
                em(e, "MT_ATTN_INSTANTIATE_CHUNK(%s, %d, %s, %s, %s, %lld, %lld, %s)\n", bf16 ? "bf16" : "float", v->D,
                   v->causal ? "true" : "false", sc, cap, v->window, v->chunk, name);
        }
    }
}

// GEMM i of part p, cuBLASLt's: a comment for the reader of --emit-cuda.
static void emit_gemm_comment(Emitter *e, const KirSet *set, int p, int i, CudaKernelInfo *info) {
    const KirKernel *k = &set->k[i];
    info->epilogue = gemm_epilogue(set, k);
    const KirGemm *gm = &k->gemm;
    e->cur = NULL;
    em(e, "\n// mt_k%d_%d: cuBLASLt GEMM %lldx%lldx%lld%s%s batch %lld", p, i, (long long)gm->M, (long long)gm->N,
       (long long)gm->K, gm->ta ? " A^T" : "", gm->tb ? " B^T" : "", (long long)gm->batch);
    if (gm->epilogue >= 0)
        em(e, "; then mt_k%d_%d%s%s", p, gm->epilogue, info->epilogue ? ", or instead " : "",
           info->epilogue ? cuda_epilogue_name(info->epilogue) : "");
    em(e, "\n");
}

// Node kernel i of part p, compiler/emit/cuda/moe.cuh's: a comment for the reader.
static void emit_node_comment(Emitter *e, const Graph *g, const KirKernel *k, int p, int i) {
    const Node *n = g->parts[p].nodes.items[k->anchor];
    e->cur = NULL;
    if (n->op == OP_MOE || n->op == OP_MOE_BWD)
        em(e, "\n// mt_k%d_%d: %s by the grouped mt_moe_* kernels (runtime/backend/moe_launch.h)\n", p, i,
           op_name(n->op));
    else
        em(e, "\n// mt_k%d_%d: %s by mt_node_%s (compiler/emit/cuda/%s.cuh)\n", p, i, op_name(n->op), op_name(n->op),
           n->op >= OP_CONV1D && n->op <= OP_SSD_BWD ? "scan" : "moe");
}

// Attention kernel i of part p: its instantiation's symbol into info, and a comment.
static void emit_attention_comment(Emitter *e, const KirKernel *k, int p, int i, int bf16, CudaKernelInfo *info) {
    AttnVariant v = attn_variant(k, bf16);
    attn_variant_name_chunk(info->symbol, sizeof info->symbol, bf16, v.D, v.Dv, v.causal, v.window, v.chunk, v.scale,
                            v.softcap);
    info->attn_tc = v.tc;
    e->cur = NULL;
    em(e, "\n// mt_k%d_%d: attention %s B %lld T %lld H %lld KVH %lld: mt_attn_%s%s_%s\n", p, i,
       k->kind == KK_ATTN ? "forward" : "backward", (long long)k->attn.B, (long long)k->attn.T, (long long)k->attn.H,
       (long long)k->attn.KVH, v.tc ? "tc_" : "", k->kind == KK_ATTN ? "fwd" : "bwd_{dq,dkdv}", info->symbol);
}

// Every kernel of every part, each with its entry in out->info.
static void emit_kernels(Ctx *c, const KirProgram *prog, int bf16, CudaSource *out) {
    for (int p = 0; p < PART_COUNT; p++) {
        const KirSet *set = &prog->parts[p];
        for (int i = 0; i < set->n; i++) {
            const KirKernel *k = &set->k[i];
            CudaKernelInfo *info = &out->info[out->ninfo];
            info->part = p, info->index = i, info->kind = k->kind;
            if (k->kind == KK_EXPR) {
                int owner = k->fused_into;
                if (owner >= 0 && owner < set->n && set->k[owner].kind != KK_GEMM) continue; // cpu attention helpers
                emit_expr(c, set, p, i, info);
                out->nexpr++;
            } else if (k->kind == KK_GEMM) {
                emit_gemm_comment(&c->e, set, p, i, info);
            } else if (k->kind == KK_NODE) {
                emit_node_comment(&c->e, c->g, k, p, i);
            } else {
                emit_attention_comment(&c->e, k, p, i, bf16, info);
            }
            out->ninfo++;
        }
    }
}

// The attention variants of prog into s. 0, or -1 with a message (add_attention).
static int attention_set(const KirProgram *prog, const Graph *g, const CudaOptions *opt, AttnSet *s, char *err,
                         size_t errcap) {
    int bf16 = program_bf16(prog);
    for (int p = 0; p < PART_COUNT; p++)
        for (int i = 0; i < prog->parts[p].n; i++) {
            const KirKernel *k = &prog->parts[p].k[i];
            if ((k->kind == KK_ATTN || k->kind == KK_ATTN_BWD) &&
                add_attention(s, k, p, g, opt, bf16, err, errcap) != 0)
                return -1;
        }
    return 0;
}

int cuda_check(const KirProgram *prog, const Graph *g, const CudaOptions *opt, char *err, size_t errcap) {
    AttnSet attn = {.n = 0};
    return attention_set(prog, g, opt, &attn, err, errcap);
}

int cuda_emit(const KirProgram *prog, const Graph *g, const CudaOptions *opt, CudaSource *out, char *err,
              size_t errcap) {
    memset(out, 0, sizeof *out);
    Ctx c = {.e = {.s = out}, .opt = opt, .g = g};
    int total = 0;
    for (int p = 0; p < PART_COUNT; p++) total += prog->parts[p].n;
    out->info = calloc((size_t)total + 1, sizeof *out->info);
    if (!out->info) goto oom;
    int bf16 = program_bf16(prog);
    AttnSet attn = {.n = 0};
    if (attention_set(prog, g, opt, &attn, err, errcap) != 0) {
        cuda_source_free(out);
        return -1;
    }
    emit_prelude(&c.e, c.g, prog, opt, bf16, &attn);
    emit_attention_instances(&c.e, bf16, &attn);
    out->nattn = attn.n;
    emit_kernels(&c, prog, bf16, out);
    if (c.e.oom) goto oom;
    return 0;
oom:
    snprintf(err, errcap, "out of memory generating CUDA C");
    cuda_source_free(out);
    return -1;
}

int cuda_build(const KirProgram *prog, const Graph *g, const CudaOptions *opt, CudaBinary *out, CudaSource *src,
               char *err, size_t errcap) {
    memset(out, 0, sizeof *out);
    if (src) memset(src, 0, sizeof *src);
    if (!nvrtc_arch_ok(opt->arch)) {
        snprintf(err, errcap, "unknown CUDA architecture '%s'; expected sm_80, sm_89, sm_90 or a newer sm_XX",
                 opt->arch);
        return -1;
    }
    CudaSource s;
    if (cuda_emit(prog, g, opt, &s, err, errcap) != 0) return -1;
    int rc = nvrtc_compile(s.text, "mt.cu", opt->arch, s.origin, s.nlines, out, err, errcap);
    if (src) *src = s;
    else cuda_source_free(&s);
    return rc;
}
