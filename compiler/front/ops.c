// ops.c: the shape and dtype rule of every primitive op of the language,
// applied while lowering a call to graph nodes. dsl/README.md lists the same
// rules for users; keep the two in step.
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "compiler/front/sema.h"

#include "common/rope.h"

typedef struct OpSpec {
    const char *name;
    int op;                 // an OpKind, or one of the families below
    int min_args, max_args; // positional arguments; max -1: any number
    const char *kwargs;     // allowed keyword arguments, space-separated
    const char *usage;
    OpKind kind;       // the graph op it makes; for a family, what this member computes (tanh: OP_TANH)
    int first_literal; // 1 + the first positional argument the rule reads as written (a constant, a list):
                       // sema.c lowers those before it (Args.val); 0: every one
} OpSpec;

// Ops lowered by one rule for a family of graph ops (OpSpec.kind).
enum { OP_MATHS = OP_COUNT, OP_COMPARE, OP_COMPARE_SWAPPED, OP_NOT_EQUAL, OP_SOFTPLUS, OP_FULL };

static const OpSpec OP_SPECS[] = {
    {"matmul", OP_MATMUL, 2, 2, "", "matmul(a, b)", OP_MATMUL, 0},
    {"embed", OP_EMBED, 2, 2, "padding_idx", "embed(table, indices, padding_idx=N)", OP_EMBED, 0},
    {"arange", OP_ARANGE, 1, 1, "dtype", "arange(n, dtype=i32|f32)", OP_ARANGE, 1},
    {"layernorm", OP_LAYERNORM, 3, 3, "eps", "layernorm(x, weight, bias, eps=1e-5)", OP_LAYERNORM, 0},
    {"rmsnorm", OP_RMSNORM, 2, 2, "eps", "rmsnorm(x, weight, eps=1e-5)", OP_RMSNORM, 0},
    {"gelu", OP_GELU, 1, 1, "approximate", "gelu(x, approximate=tanh|none)", OP_GELU, 0},
    {"silu", OP_SILU, 1, 1, "", "silu(x)", OP_SILU, 0},
    {"swiglu", OP_SWIGLU, 2, 2, "", "swiglu(gate, up)", OP_SWIGLU, 0},
    {"rope", OP_ROPE, 1, 1,
     "heads theta scaling factor low_freq_factor high_freq_factor original_max_position_embeddings "
     "max_position_embeddings beta_fast beta_slow mscale mscale_all_dim attention_factor truncate short_factor "
     "long_factor interleaved",
     "rope(x, heads=H, theta=10000, scaling=none|linear|llama3|yarn|longrope, <the rule's fields>, interleaved=false)",
     OP_ROPE, 0},
    {"attention", OP_ATTENTION, 3, 4, "heads kv_heads causal window chunk scale softcap",
     "attention(q, k, v, [sinks], heads=H, kv_heads=H, causal=true, window=N, chunk=N, scale=x, softcap=x)",
     OP_ATTENTION, 0},
    {"softmax", OP_SOFTMAX, 1, 1, "axis", "softmax(x, axis=-1)", OP_SOFTMAX, 0},
    {"cross_entropy", OP_CROSS_ENTROPY, 2, 2, "", "cross_entropy(logits, targets)", OP_CROSS_ENTROPY, 0},
    {"reshape", OP_RESHAPE, 2, 2, "", "reshape(x, [d0, d1, ...])", OP_RESHAPE, 2},
    {"split", OP_SLICE, 2, 2, "axis", "split(x, n or [sizes], axis=-1)", OP_SLICE, 2},
    {"concat", OP_CONCAT, 2, -1, "axis", "concat(a, b, ..., axis=-1)", OP_CONCAT, 0},
    {"transpose", OP_TRANSPOSE, 1, 1, "", "transpose(x)", OP_TRANSPOSE, 0},
    {"sum", OP_SUM_TO, 1, 1, "axis", "sum(x, axis=-1)", OP_SUM_TO, 0},
    {"full", OP_FULL, 2, 2, "", "full([d0, d1, ...], value)", OP_ARANGE, 1},
    {"tanh", OP_MATHS, 1, 1, "", "tanh(x)", OP_TANH, 0},
    {"sigmoid", OP_MATHS, 1, 1, "", "sigmoid(x)", OP_SIGMOID, 0},
    {"erf", OP_MATHS, 1, 1, "", "erf(x)", OP_ERF, 0},
    {"exp", OP_MATHS, 1, 1, "", "exp(x)", OP_EXP, 0},
    {"log", OP_MATHS, 1, 1, "", "log(x)", OP_LOG, 0},
    {"abs", OP_MATHS, 1, 1, "", "abs(x)", OP_ABS, 0},
    {"floor", OP_MATHS, 1, 1, "", "floor(x)", OP_FLOOR, 0},
    {"lt", OP_COMPARE, 2, 2, "", "lt(a, b)", OP_LT, 0},
    {"le", OP_COMPARE, 2, 2, "", "le(a, b)", OP_LE, 0},
    {"gt", OP_COMPARE_SWAPPED, 2, 2, "", "gt(a, b)", OP_LT, 0},
    {"ge", OP_COMPARE_SWAPPED, 2, 2, "", "ge(a, b)", OP_LE, 0},
    {"eq", OP_COMPARE, 2, 2, "", "eq(a, b)", OP_EQ, 0},
    {"ne", OP_NOT_EQUAL, 2, 2, "", "ne(a, b)", OP_EQ, 0},
    {"where", OP_WHERE, 3, 3, "", "where(cond, a, b)", OP_WHERE, 0},
    {"router", OP_TOP_K, 1, 1, "top_k scores softmax normalize scale bias bias_update groups top_groups",
     "router(logits, top_k=K, scores=softmax|sigmoid, softmax=before|after, normalize=false, scale=1, bias=b, "
     "bias_update=gamma, "
     "groups=1, top_groups=groups)",
     OP_TOP_K, 0},
    {"moe", OP_MOE, 4, 5, "gate_up gates_on act alpha limit gate_bias up_bias gate_up_bias down_bias",
     "moe(x, gates, w_gate, w_up, w_down, gates_on=output|input, act=silu|gelu|gelu_tanh, alpha=A, limit=L, "
     "gate_bias=b, up_bias=b, "
     "down_bias=b), or moe(x, gates, w_gate_up, w_down, gate_up=halves|interleaved, gate_up_bias=b, ...)",
     OP_MOE, 0},
    {"load_balancing_loss", OP_LOAD_BALANCE, 1, 1, "top_k pooled", "load_balancing_loss(logits, top_k=K, pooled=false)",
     OP_LOAD_BALANCE, 0},
    {"add_loss", OP_ADD_LOSS, 2, 2, "", "add_loss(x, loss)", OP_ADD_LOSS, 0},
    {"softplus", OP_SOFTPLUS, 1, 1, "", "softplus(x)", OP_LOG, 0},
    {"conv1d", OP_CONV1D, 2, 2, "", "conv1d(x, w)", OP_CONV1D, 0},
    {"gated_delta_rule", OP_DELTA_RULE, 5, 5, "heads kv_heads scale eps",
     "gated_delta_rule(q, k, v, g, beta, heads=H, kv_heads=H, scale=x, eps=1e-6)", OP_DELTA_RULE, 0},
    {"ssd", OP_SSD, 5, 5, "heads groups", "ssd(x, dt, A, B, C, heads=H, groups=G)", OP_SSD, 0},
};
enum { N_OP_SPECS = sizeof OP_SPECS / sizeof OP_SPECS[0] };

static void unknown_op(Sema *S, const Expr *call);

int ops_collect(Sema *S, const Expr *call, Args *a) {
    const OpSpec *spec = NULL;
    for (int i = 0; i < N_OP_SPECS; i++)
        if (!strcmp(OP_SPECS[i].name, call->str)) spec = &OP_SPECS[i];
    if (!spec) {
        unknown_op(S, call);
        return -1;
    }
    *a = (Args){.call = call, .spec = spec, .fold = spec->op == OP_MATMUL || spec->op == OP_MOE};
    for (int i = 0; i < call->items.n; i++) {
        const Expr *e = call->items.items[i];
        if (e->kind == EXPR_KWARG) {
            if (!word_in_list(spec->kwargs, e->str)) {
                if (spec->kwargs[0])
                    diag_error(S->d, e->loc, "unknown argument '%s' to %s; expected %s", e->str, spec->name,
                               spec->kwargs);
                else
                    diag_error(S->d, e->loc, "unknown argument '%s' to %s, which takes none by name", e->str,
                               spec->name);
                return -1;
            }
            for (int j = 0; j < i; j++) {
                const Expr *f = call->items.items[j];
                if (f->kind == EXPR_KWARG && !strcmp(f->str, e->str)) {
                    diag_error(S->d, e->loc, "argument '%s' given twice", e->str);
                    return -1;
                }
            }
        } else if (a->npos == (int)(sizeof a->pos / sizeof a->pos[0])) {
            diag_error(S->d, e->loc, "too many arguments");
            return -1;
        } else {
            a->pos[a->npos++] = e;
        }
    }
    if (a->npos < spec->min_args || (spec->max_args >= 0 && a->npos > spec->max_args)) {
        const char *n = spec->max_args < 0 ? "at least " : "";
        diag_error(S->d, call->loc, "wrong number of arguments: %s takes %s%d, got %d; usage: %s", spec->name, n,
                   spec->min_args, a->npos, spec->usage);
        return -1;
    }
    a->nvals = spec->first_literal ? spec->first_literal - 1 : a->npos;
    return 0;
}

// Positional argument i as a tensor (sema.c lowered it).
static int arg_tensor(Sema *S, const Args *a, int i, Node **out) {
    if (a->val[i].is_num) {
        diag_error(S->d, a->pos[i]->loc, "expected a tensor, got the constant %g", a->val[i].num.f);
        return -1;
    }
    *out = a->val[i].node;
    return 0;
}

static int kw_int(Sema *S, const Args *a, const char *name, int64_t dflt, int required, int64_t *out) {
    const Expr *e = find_kwarg(a->call, name);
    if (!e) {
        if (required) {
            diag_error(S->d, a->call->loc, "%s needs %s=N; usage: %s", a->spec->name, name, a->spec->usage);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    Num n;
    if (eval_num(S, e, &n) != 0) return -1;
    if (!n.is_int || n.i > (1 << 30) || n.i < -(1 << 30)) {
        diag_error(S->d, e->loc, "%s must be an integer of modest size", name);
        return -1;
    }
    *out = n.i;
    return 0;
}

static int kw_float(Sema *S, const Args *a, const char *name, double dflt, double *out) {
    const Expr *e = find_kwarg(a->call, name);
    *out = dflt;
    if (!e) return 0;
    Num n;
    if (eval_num(S, e, &n) != 0) return -1;
    if (n.f <= 0) {
        diag_error(S->d, e->loc, "%s must be positive, got %g", name, n.f);
        return -1;
    }
    *out = n.f;
    return 0;
}

static int kw_bool(Sema *S, const Args *a, const char *name, int dflt, int *out) {
    const Expr *e = find_kwarg(a->call, name);
    *out = dflt;
    if (!e) return 0;
    if (e->kind != EXPR_BOOL) {
        diag_error(S->d, e->loc, "%s must be true or false", name);
        return -1;
    }
    *out = (int)e->ival;
    return 0;
}

// Resolves a possibly negative axis against a rank.
static int axis_of(Sema *S, const Args *a, int rank, int *out) {
    int64_t ax;
    if (kw_int(S, a, "axis", -1, 0, &ax) != 0) return -1;
    if (ax < -rank || ax >= rank) {
        diag_error(S->d, a->call->loc, "axis %lld is out of range for a tensor of rank %d", (long long)ax, rank);
        return -1;
    }
    *out = (int)(ax < 0 ? ax + rank : ax);
    return 0;
}

static int need_f32(Sema *S, const Expr *e, const Node *n, const char *op) {
    if (n->dtype == DT_F32) return 0;
    diag_error(S->d, e->loc, "%s needs an f32 tensor; this one is %s", op, dtype_name(n->dtype));
    return -1;
}

static int need_rank(Sema *S, const Expr *e, const Node *n, int min, int max, const char *op) {
    if (n->shape.rank >= min && (max < 0 || n->shape.rank <= max)) return 0;
    char s[160];
    if (min == max)
        diag_error(S->d, e->loc, "%s needs a tensor of rank %d; got %s", op, min, shape_str(&n->shape, s, sizeof s));
    else
        diag_error(S->d, e->loc, "%s needs a tensor of rank %d or more; got %s", op, min,
                   shape_str(&n->shape, s, sizeof s));
    return -1;
}

// Reports a mismatch between two shapes, naming both.
static int mismatch(Sema *S, Loc loc, const char *what, const Shape *a, const Shape *b) {
    char s1[160], s2[160];
    diag_error(S->d, loc, "shape mismatch in %s: %s and %s", what, shape_str(a, s1, sizeof s1),
               shape_str(b, s2, sizeof s2));
    return -1;
}

static int64_t last_dim(const Node *n) { return n->shape.dims[n->shape.rank - 1]; }

// A rank-1 weight of the width of x's last axis: norm gains and biases.
static int need_vector(Sema *S, const Expr *e, const Node *w, const Node *x, const char *op) {
    if (w->shape.rank == 1 && w->shape.dims[0] == last_dim(x)) return need_f32(S, e, w, op);
    Shape want = {.rank = 1, .dims = {last_dim(x)}};
    return mismatch(S, e->loc, op, &want, &w->shape);
}

// ---------------------------------------------------------------- per op

Node *lower_matmul(Sema *S, Loc loc, Node *a_node, int ta, Node *b_node, int tb, const Expr *ea, const Expr *eb) {
    Node *in[2] = {a_node, b_node};
    if (need_f32(S, ea, in[0], "matmul") || need_f32(S, eb, in[1], "matmul")) return NULL;
    if (need_rank(S, ea, in[0], 2, -1, "matmul") || need_rank(S, eb, in[1], 2, -1, "matmul")) return NULL;
    Shape a = in[0]->shape, b = in[1]->shape;
    if (ta) {
        int64_t t = a.dims[a.rank - 1];
        a.dims[a.rank - 1] = a.dims[a.rank - 2];
        a.dims[a.rank - 2] = t;
    }
    if (tb) {
        int64_t t = b.dims[b.rank - 1];
        b.dims[b.rank - 1] = b.dims[b.rank - 2];
        b.dims[b.rank - 2] = t;
    }
    char s1[160], s2[160];
    int64_t k_a = a.dims[a.rank - 1], k_b = b.dims[b.rank - 2];
    if (k_a != k_b) {
        diag_error(S->d, loc, "shape mismatch in matmul: %s @ %s; inner dimensions %lld and %lld differ",
                   shape_str(&a, s1, sizeof s1), shape_str(&b, s2, sizeof s2), (long long)k_a, (long long)k_b);
        return NULL;
    }
    if (b.rank > 2) { // batched: leading dims must agree exactly
        int same = a.rank == b.rank;
        for (int i = 0; same && i < a.rank - 2; i++) same = a.dims[i] == b.dims[i];
        if (!same) {
            diag_error(S->d, loc, "shape mismatch in batched matmul: %s @ %s; leading dimensions must agree",
                       shape_str(&a, s1, sizeof s1), shape_str(&b, s2, sizeof s2));
            return NULL;
        }
    }
    Shape out = a;
    out.dims[out.rank - 1] = b.dims[b.rank - 1];
    Node *n = new_node(S, OP_MATMUL, DT_F32, &out, loc, 2, in);
    if (n) {
        n->trans_a = ta;
        n->trans_b = tb;
    }
    return n;
}

// Numpy broadcasting of two shapes, aligned at their last axes.
static int broadcast(const Shape *a, const Shape *b, Shape *out) {
    out->rank = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < out->rank; i++) {
        int ia = a->rank - out->rank + i, ib = b->rank - out->rank + i;
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1) return -1;
        out->dims[i] = da == 1 ? db : da;
    }
    return 0;
}

int lower_binary(Sema *S, const Expr *e, Val a, Val b, Val *out) {
    if (e->op == '%') {
        diag_error(S->d, e->loc, "'%%' is for config integers, not tensors");
        return -1;
    }
    Node *in[2] = {a.node, b.node};
    const Expr *ex[2] = {e->lhs, e->rhs};
    for (int i = 0; i < 2; i++) {
        if (!in[i]) in[i] = const_node(S, (i ? b : a).num.f, ex[i]->loc);
        if (!in[i]) return -1;
        char opname[8];
        snprintf(opname, sizeof opname, "'%c'", e->op);
        if (need_f32(S, ex[i], in[i], opname) != 0) return -1;
    }
    Shape s;
    if (broadcast(&in[0]->shape, &in[1]->shape, &s) != 0) {
        char what[32];
        snprintf(what, sizeof what, "'%c' (they do not broadcast)", e->op);
        return mismatch(S, e->loc, what, &in[0]->shape, &in[1]->shape);
    }
    OpKind op = e->op == '+' ? OP_ADD : e->op == '-' ? OP_SUB : e->op == '*' ? OP_MUL : OP_DIV;
    out->node = new_node(S, op, DT_F32, &s, e->loc, 2, in);
    return out->node ? 0 : -1;
}

static Node *lower_embed(Sema *S, const Args *a) {
    Node *in[2];
    if (arg_tensor(S, a, 0, &in[0]) != 0 || arg_tensor(S, a, 1, &in[1]) != 0) return NULL;
    if (need_rank(S, a->pos[0], in[0], 2, 2, "embed's table") || need_f32(S, a->pos[0], in[0], "embed's table"))
        return NULL;
    if (in[1]->dtype != DT_I32) {
        diag_error(S->d, a->pos[1]->loc, "embed's indices must be i32, got %s", dtype_name(in[1]->dtype));
        return NULL;
    }
    if (in[1]->shape.rank >= MT_MAX_RANK) {
        diag_error(S->d, a->pos[1]->loc, "embed's indices have too many dimensions");
        return NULL;
    }
    if (in[1]->op == OP_ARANGE && in[1]->shape.dims[0] > in[0]->shape.dims[0]) {
        diag_error(S->d, a->pos[1]->loc, "positions 0..%lld index past the %lld rows of the table",
                   (long long)in[1]->shape.dims[0] - 1, (long long)in[0]->shape.dims[0]);
        return NULL;
    }
    int64_t pad = -1; // the row that takes no gradient (Hugging Face's padding_idx)
    const Expr *pe = find_kwarg(a->call, "padding_idx");
    if (kw_int(S, a, "padding_idx", -1, 0, &pad) != 0) return NULL;
    if (pe && (pad < 0 || pad >= in[0]->shape.dims[0])) {
        diag_error(S->d, pe->loc, "padding_idx %lld is not a row of the %lld-row table", (long long)pad,
                   (long long)in[0]->shape.dims[0]);
        return NULL;
    }
    Shape out = in[1]->shape;
    out.dims[out.rank++] = in[0]->shape.dims[1];
    Node *n = new_node(S, OP_EMBED, DT_F32, &out, a->call->loc, 2, in);
    if (n) n->padding = pad + 1;
    return n;
}

static Node *lower_arange(Sema *S, const Args *a) {
    Num n;
    if (eval_num(S, a->pos[0], &n) != 0) return NULL;
    if (!n.is_int || n.i < 1) {
        diag_error(S->d, a->pos[0]->loc, "arange needs a positive integer, got %g", n.f);
        return NULL;
    }
    const Expr *e = find_kwarg(a->call, "dtype"); // f32: positions as numbers (exact to 2^24)
    const char *w = e && e->kind == EXPR_NAME ? e->str : "i32";
    if (strcmp(w, "i32") && strcmp(w, "f32")) {
        diag_error(S->d, e->loc, "arange's dtype is i32 or f32");
        return NULL;
    }
    Shape s = {.rank = 1, .dims = {n.i}};
    Node *r = new_node(S, OP_ARANGE, strcmp(w, "f32") ? DT_I32 : DT_F32, &s, a->call->loc, 0, NULL);
    if (r && r->dtype == DT_F32) r->wide = 1; // kept exact under bf16
    return r;
}

// Marks a parameter used as a norm gain to start at one, unless the source
// says otherwise.
static void gain_init(Sema *S, const Node *w) {
    if (w->op != OP_PARAM) return;
    Param *p = S->g->params.items[w->param];
    if (!p->init_given) p->init = INIT_ONES;
}

static Node *lower_norm(Sema *S, const Args *a, OpKind op) {
    Node *in[3];
    int n = op == OP_LAYERNORM ? 3 : 2;
    for (int i = 0; i < n; i++)
        if (arg_tensor(S, a, i, &in[i]) != 0) return NULL;
    if (need_f32(S, a->pos[0], in[0], a->spec->name) || need_rank(S, a->pos[0], in[0], 1, -1, a->spec->name))
        return NULL;
    for (int i = 1; i < n; i++)
        if (need_vector(S, a->pos[i], in[i], in[0], a->spec->name) != 0) return NULL;
    gain_init(S, in[1]);
    double eps;
    if (kw_float(S, a, "eps", 1e-5, &eps) != 0) return NULL;
    Node *out = new_node(S, op, DT_F32, &in[0]->shape, a->call->loc, n, in);
    if (out) out->eps = eps;
    return out;
}

static Node *lower_unary(Sema *S, const Args *a, OpKind op) {
    Node *x;
    if (arg_tensor(S, a, 0, &x) != 0 || need_f32(S, a->pos[0], x, a->spec->name)) return NULL;
    return new_node(S, op, DT_F32, &x->shape, a->call->loc, 1, &x);
}

// gelu(x, approximate = tanh) is GPT-2's tanh form, one op; approximate =
// none is the exact x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), written with
// erf, which the fusion makes one kernel again.
static Node *lower_gelu(Sema *S, const Args *a) {
    const Expr *e = find_kwarg(a->call, "approximate");
    int exact = 0;
    if (e) {
        const char *w = e->kind == EXPR_NAME || e->kind == EXPR_STRING ? e->str : "";
        exact = !strcmp(w, "none");
        if (!exact && strcmp(w, "tanh")) {
            diag_error(S->d, e->loc, "approximate must be tanh or none");
            return NULL;
        }
    }
    Node *x;
    if (arg_tensor(S, a, 0, &x) != 0 || need_f32(S, a->pos[0], x, "gelu")) return NULL;
    if (!exact) return new_node(S, OP_GELU, DT_F32, &x->shape, a->call->loc, 1, &x);
    const Shape *s = &x->shape;
    Loc loc = a->call->loc;
    Node *in[2] = {x, const_node(S, 0.7071067811865476, loc)};
    if (!in[1]) return NULL;
    Node *u = new_node(S, OP_MUL, DT_F32, s, loc, 2, in);
    Node *erf = u ? new_node(S, OP_ERF, DT_F32, s, loc, 1, &u) : NULL;
    in[0] = const_node(S, 1, loc), in[1] = erf;
    Node *phi2 = in[0] && erf ? new_node(S, OP_ADD, DT_F32, s, loc, 2, in) : NULL; // 2 Phi(x)
    in[0] = x, in[1] = phi2;
    Node *xphi2 = phi2 ? new_node(S, OP_MUL, DT_F32, s, loc, 2, in) : NULL;
    in[0] = const_node(S, 0.5, loc), in[1] = xphi2;
    return in[0] && xphi2 ? new_node(S, OP_MUL, DT_F32, s, loc, 2, in) : NULL;
}

// Operand i of the comparisons and where: a tensor, or a number, which
// becomes a broadcast constant.
static int arg_operand(Sema *S, const Args *a, int i, const char *op, Node **out) {
    const Val *v = &a->val[i];
    *out = v->is_num ? const_node(S, v->num.f, a->pos[i]->loc) : v->node;
    if (!*out) return -1;
    return need_f32(S, a->pos[i], *out, op);
}

// The comparisons and where: n operands broadcast together, numpy's way.
// gt and ge are lt and le with the operands swapped; ne is 1 - eq.
static Node *lower_elementwise(Sema *S, const Args *a, OpKind op, int n) {
    const char *name = a->spec->name;
    Node *in[3];
    int tensors = 0;
    for (int i = 0; i < n; i++) {
        if (arg_operand(S, a, i, name, &in[i]) != 0) return NULL;
        tensors += in[i]->op != OP_CONST;
    }
    if (!tensors) {
        diag_error(S->d, a->call->loc, "%s needs at least one tensor operand", name);
        return NULL;
    }
    if (a->spec->op == OP_COMPARE_SWAPPED) {
        Node *t = in[0];
        in[0] = in[1];
        in[1] = t;
    }
    Shape s = in[0]->shape;
    for (int i = 1; i < n; i++) {
        Shape t;
        if (broadcast(&s, &in[i]->shape, &t) != 0) {
            char what[64];
            snprintf(what, sizeof what, "%s (they do not broadcast)", name);
            return (void)mismatch(S, a->call->loc, what, &s, &in[i]->shape), NULL;
        }
        s = t;
    }
    Node *r = new_node(S, op, DT_F32, &s, a->call->loc, n, in);
    if (!r || a->spec->op != OP_NOT_EQUAL) return r;
    Node *sub[2] = {const_node(S, 1, a->call->loc), r};
    return sub[0] ? new_node(S, OP_SUB, DT_F32, &s, a->call->loc, 2, sub) : NULL;
}

static Node *lower_swiglu(Sema *S, const Args *a) {
    Node *in[2];
    if (arg_tensor(S, a, 0, &in[0]) != 0 || arg_tensor(S, a, 1, &in[1]) != 0) return NULL;
    if (need_f32(S, a->pos[0], in[0], "swiglu") || need_f32(S, a->pos[1], in[1], "swiglu")) return NULL;
    if (!shape_eq(&in[0]->shape, &in[1]->shape))
        return (void)mismatch(S, a->call->loc, "swiglu", &in[0]->shape, &in[1]->shape), NULL;
    return new_node(S, OP_SWIGLU, DT_F32, &in[0]->shape, a->call->loc, 2, in);
}

// Checks that a [B, T, heads*D] tensor splits into heads of width D.
static int head_width(Sema *S, const Expr *e, const Node *x, int64_t heads, int64_t *d) {
    if (heads < 1 || last_dim(x) % heads != 0) {
        diag_error(S->d, e->loc, "width %lld does not split into %lld heads", (long long)last_dim(x), (long long)heads);
        return -1;
    }
    *d = last_dim(x) / heads;
    return 0;
}

// The config fields of each rope scaling rule (transformers' names); any
// other field given to rope is an error.
static const char *const ROPE_FIELDS[ROPE_KINDS] = {
    [ROPE_DEFAULT] = "",
    [ROPE_LINEAR] = "factor",
    [ROPE_LLAMA3] = "factor low_freq_factor high_freq_factor original_max_position_embeddings",
    [ROPE_YARN] = "factor original_max_position_embeddings max_position_embeddings beta_fast beta_slow mscale "
                  "mscale_all_dim attention_factor truncate",
    [ROPE_LONGROPE] = "factor original_max_position_embeddings max_position_embeddings attention_factor short_factor "
                      "long_factor",
};

// A list of positive numbers (longrope's factors), in the arena.
static int kw_number_list(Sema *S, const Expr *e, const char *name, double **out, int64_t *n) {
    if (e->kind != EXPR_LIST || e->items.n == 0) {
        diag_error(S->d, e->loc, "%s must be a list of numbers, [f0, f1, ...]", name);
        return -1;
    }
    *n = e->items.n;
    *out = arena_alloc(S->a, (size_t)*n * sizeof **out);
    if (!*out) return diag_error(S->d, e->loc, "out of memory"), -1;
    for (int i = 0; i < e->items.n; i++) {
        Num v;
        if (eval_num(S, e->items.items[i], &v) != 0) return -1;
        (*out)[i] = v.f;
    }
    return 0;
}

// A rule's fields: a number each, or the longrope factor list in use (the
// long one when the sequence T passes original_max_position_embeddings, as
// transformers picks for positions past it).
static int rope_rule_fields(Sema *S, const Args *a, int64_t pairs, RopeRule *r, char **words) {
    static const struct {
        const char *name;
        size_t at;
    } NUMS[] = {
        {"factor", offsetof(RopeRule, factor)},
        {"low_freq_factor", offsetof(RopeRule, low_freq_factor)},
        {"high_freq_factor", offsetof(RopeRule, high_freq_factor)},
        {"original_max_position_embeddings", offsetof(RopeRule, original_max)},
        {"max_position_embeddings", offsetof(RopeRule, max_positions)},
        {"beta_fast", offsetof(RopeRule, beta_fast)},
        {"beta_slow", offsetof(RopeRule, beta_slow)},
        {"mscale", offsetof(RopeRule, mscale)},
        {"mscale_all_dim", offsetof(RopeRule, mscale_all_dim)},
        {"attention_factor", offsetof(RopeRule, attention_factor)},
    };
    *words = arena_strdup(S->a, rope_kind_name(r->kind));
    for (size_t i = 0; i < sizeof NUMS / sizeof NUMS[0]; i++) {
        double *f = (double *)((char *)r + NUMS[i].at);
        if (kw_float(S, a, NUMS[i].name, 0, f) != 0) return -1;
        if (*f != 0) *words = arena_printf(S->a, "%s %s=%.17g", *words, NUMS[i].name, *f);
    }
    r->truncate = 1;
    if (kw_bool(S, a, "truncate", 1, &r->truncate) != 0) return -1;
    if (!r->truncate) *words = arena_printf(S->a, "%s truncate=false", *words);
    const Expr *sf = find_kwarg(a->call, "short_factor"), *lf = find_kwarg(a->call, "long_factor");
    if (r->kind == ROPE_LONGROPE) {
        if (!sf || !lf || !(r->original_max > 0)) {
            diag_error(S->d, a->call->loc,
                       "longrope scaling needs short_factor=[...], long_factor=[...] and "
                       "original_max_position_embeddings=N");
            return -1;
        }
        int use_long = (double)S->T > r->original_max;
        double *f[2];
        int64_t n[2];
        const Expr *list[2] = {sf, lf};
        for (int k = 0; k < 2; k++) {
            const char *name = k ? "long_factor" : "short_factor";
            if (kw_number_list(S, list[k], name, &f[k], &n[k]) != 0) return -1;
            if (n[k] != pairs) {
                diag_error(S->d, list[k]->loc, "%s has %lld factors; the rotated heads, %lld wide, have %lld pairs",
                           name, (long long)n[k], (long long)(2 * pairs), (long long)pairs);
                return -1;
            }
        }
        r->factors = f[use_long], r->nfactors = pairs;
        for (int k = 0; k < 2 && *words; k++) { // both lists, as rope_parameters holds them (--export)
            *words = arena_printf(S->a, "%s %s=[", *words, k ? "long_factor" : "short_factor");
            for (int64_t i = 0; i < pairs && *words; i++)
                *words = arena_printf(S->a, "%s%s%.17g", *words, i ? "," : "", f[k][i]);
            if (*words) *words = arena_printf(S->a, "%s]", *words);
        }
    }
    return *words ? 0 : -1;
}

static Node *lower_rope(Sema *S, const Args *a) {
    Node *x;
    int64_t heads, d;
    double theta;
    int interleaved;
    if (arg_tensor(S, a, 0, &x) != 0 || need_f32(S, a->pos[0], x, "rope") || need_rank(S, a->pos[0], x, 3, 3, "rope"))
        return NULL;
    if (kw_int(S, a, "heads", 0, 1, &heads) != 0 || kw_float(S, a, "theta", 10000.0, &theta) != 0 ||
        kw_bool(S, a, "interleaved", 0, &interleaved) != 0)
        return NULL;
    if (head_width(S, a->pos[0], x, heads, &d) != 0) return NULL;
    if (d % 2) {
        diag_error(S->d, a->pos[0]->loc, "rope needs an even head width, got %lld", (long long)d);
        return NULL;
    }
    RopeRule r = {.kind = ROPE_DEFAULT, .theta = theta};
    const Expr *e = find_kwarg(a->call, "scaling");
    if (e) {
        const char *w = e->kind == EXPR_NAME || e->kind == EXPR_STRING ? e->str : "";
        r.kind = ROPE_KINDS;
        for (int k = 0; k < ROPE_KINDS; k++)
            if (!strcmp(w, k == ROPE_DEFAULT ? "none" : rope_kind_name((RopeKind)k))) r.kind = (RopeKind)k;
        if (r.kind == ROPE_KINDS) {
            diag_error(S->d, e->loc, "scaling must be none, linear, llama3, yarn or longrope");
            return NULL;
        }
    }
    for (int i = 0; i < a->call->items.n; i++) {
        const Expr *k = a->call->items.items[i];
        if (k->kind == EXPR_KWARG && !word_in_list("heads theta scaling interleaved", k->str) &&
            !word_in_list(ROPE_FIELDS[r.kind], k->str)) {
            diag_error(S->d, k->loc, "%s is not a field of rope scaling %s%s%s", k->str,
                       r.kind == ROPE_DEFAULT ? "none" : rope_kind_name(r.kind),
                       ROPE_FIELDS[r.kind][0] ? ", which takes " : "", ROPE_FIELDS[r.kind]);
            return NULL;
        }
    }
    char *words = NULL;
    if (r.kind != ROPE_DEFAULT && rope_rule_fields(S, a, d / 2, &r, &words) != 0) return NULL;
    double *freq = arena_alloc(S->a, (size_t)(d / 2) * sizeof *freq); // (D/2)
    if (!freq) return NULL;
    double scale;
    const char *bad = rope_frequencies(&r, d, freq, &scale);
    if (bad) {
        diag_error(S->d, a->call->loc, "%s", bad);
        return NULL;
    }
    Node *n = new_node(S, OP_ROPE, DT_F32, &x->shape, a->call->loc, 1, &x);
    if (n) {
        n->heads = (int)heads;
        n->theta = theta;
        n->rope_freq = freq;
        n->rope_scale = scale;
        n->rope_interleaved = interleaved;
        n->rope_rule = words;
    }
    return n;
}

static Node *lower_attention(Sema *S, const Args *a) {
    Node *in[3];
    for (int i = 0; i < 3; i++)
        if (arg_tensor(S, a, i, &in[i]) != 0 || need_f32(S, a->pos[i], in[i], "attention") ||
            need_rank(S, a->pos[i], in[i], 3, 3, "attention"))
            return NULL;
    int64_t heads, kv_heads, d, dk;
    int causal;
    double scale, softcap;
    if (kw_int(S, a, "heads", 0, 1, &heads) != 0 || kw_int(S, a, "kv_heads", heads, 0, &kv_heads) != 0 ||
        kw_bool(S, a, "causal", 1, &causal) != 0 || kw_float(S, a, "scale", 0, &scale) != 0 ||
        kw_float(S, a, "softcap", 0, &softcap) != 0)
        return NULL;
    int64_t window, chunk; // chunk: Llama 4's chunked attention, a query sees the keys of its chunk
    const Expr *we = find_kwarg(a->call, "window"), *ce = find_kwarg(a->call, "chunk");
    if (kw_int(S, a, "window", 0, 0, &window) != 0 || kw_int(S, a, "chunk", 0, 0, &chunk) != 0) return NULL;
    if ((we && window < 1) || (ce && chunk < 1)) {
        diag_error(S->d, we && window < 1 ? we->loc : ce->loc, "%s must be a positive number of positions, got %lld",
                   we && window < 1 ? "window" : "chunk", (long long)(we && window < 1 ? window : chunk));
        return NULL;
    }
    if ((we || ce) && !causal) {
        diag_error(S->d, we ? we->loc : ce->loc, "a %s is causal; drop causal = false",
                   we ? "sliding window" : "chunked attention");
        return NULL;
    }
    Node *sinks = NULL; // [heads]: gpt-oss's sink logits
    Shape sinks_shape = {1, {heads}};
    if (a->npos == 4 && (arg_tensor(S, a, 3, &sinks) != 0 || need_f32(S, a->pos[3], sinks, "attention"))) return NULL;
    if (sinks && !shape_eq(&sinks->shape, &sinks_shape))
        return (void)mismatch(S, a->pos[3]->loc, "attention's sinks (one a head)", &sinks_shape, &sinks->shape), NULL;
    if (sinks && softcap > 0) {
        diag_error(S->d, a->pos[3]->loc, "attention sinks with softcap are not supported; drop one");
        return NULL;
    }
    if (kv_heads < 1 || heads % kv_heads != 0) {
        diag_error(S->d, a->call->loc, "heads=%lld is not a multiple of kv_heads=%lld", (long long)heads,
                   (long long)kv_heads);
        return NULL;
    }
    int64_t dv;
    if (head_width(S, a->pos[0], in[0], heads, &d) != 0 || head_width(S, a->pos[1], in[1], kv_heads, &dk) != 0 ||
        head_width(S, a->pos[2], in[2], kv_heads, &dv) != 0)
        return NULL;
    if (d != dk) {
        diag_error(S->d, a->pos[1]->loc, "key heads are %lld wide but query heads %lld", (long long)dk, (long long)d);
        return NULL;
    }
    for (int i = 0; i < 2; i++) { // a rope that rotated heads of another width than these
        const Node *r = in[i];
        int64_t h = i ? kv_heads : heads;
        if (r->op == OP_ROPE && r->heads != h) {
            diag_error(S->d, r->loc,
                       "rope splits %s into %d heads of %lld, but the attention it feeds (line %d) "
                       "reads %lld heads of %lld; write heads = %lld",
                       i ? "the keys" : "the queries", r->heads, (long long)(last_dim(r) / r->heads), a->call->loc.line,
                       (long long)h, (long long)d, (long long)h);
            return NULL;
        }
    }
    for (int i = 1; i < 3; i++) {
        const Shape *q = &in[0]->shape, *k = &in[i]->shape;
        if (k->dims[0] != q->dims[0] || k->dims[1] != q->dims[1])
            return (void)mismatch(S, a->pos[i]->loc, i == 1 ? "attention (q and k)" : "attention (q and v)", q, k),
                   NULL;
    }
    Shape y = in[0]->shape; // heads as wide as v's (DeepSeek's latent attention: q and k 192, v 128)
    y.dims[2] = heads * dv;
    // the softmax statistics first (f32 [B, H, T]), which the attention's kernel writes beside y
    Shape ls = {.rank = 3, .dims = {in[0]->shape.dims[0], heads, in[0]->shape.dims[1]}};
    // with sinks (gpt-oss's learned logit a head) both take them as a last operand: the kernel's running softmax
    // starts from the sink, so y and the lse include it
    Node *lse = new_node(S, OP_ATTENTION_LSE, DT_F32, &ls, a->call->loc, sinks ? 3 : 2, (Node *[]){in[0], in[1], sinks});
    Node *in5[5] = {in[0], in[1], in[2], lse, sinks};
    Node *n = lse ? new_node(S, OP_ATTENTION, DT_F32, &y, a->call->loc, sinks ? 5 : 4, in5) : NULL;
    for (int i = 0; i < 2 && n; i++) {
        Node *m = i ? n : lse;
        m->heads = (int)heads, m->kv_heads = (int)kv_heads, m->causal = causal;
        m->window = window, m->chunk = chunk, m->scale = scale, m->softcap = softcap;
    }
    return n;
}

static Node *lower_softmax(Sema *S, const Args *a) {
    Node *x;
    int axis;
    if (arg_tensor(S, a, 0, &x) != 0 || need_f32(S, a->pos[0], x, "softmax") ||
        need_rank(S, a->pos[0], x, 1, -1, "softmax") || axis_of(S, a, x->shape.rank, &axis) != 0)
        return NULL;
    Node *n = new_node(S, OP_SOFTMAX, DT_F32, &x->shape, a->call->loc, 1, &x);
    if (n) n->axis = axis;
    return n;
}

static Node *lower_cross_entropy(Sema *S, const Args *a) {
    Node *in[2];
    if (arg_tensor(S, a, 0, &in[0]) != 0 || arg_tensor(S, a, 1, &in[1]) != 0) return NULL;
    if (need_f32(S, a->pos[0], in[0], "cross_entropy's logits") ||
        need_rank(S, a->pos[0], in[0], 2, -1, "cross_entropy"))
        return NULL;
    if (in[1]->dtype != DT_I32) {
        diag_error(S->d, a->pos[1]->loc, "cross_entropy's targets must be i32, got %s", dtype_name(in[1]->dtype));
        return NULL;
    }
    Shape want = in[0]->shape;
    want.rank--;
    if (!shape_eq(&want, &in[1]->shape))
        return (void)mismatch(S, a->pos[1]->loc,
                              "cross_entropy (targets must be the logits' shape without the vocabulary axis)", &want,
                              &in[1]->shape),
               NULL;
    Shape scalar = {0};
    return new_node(S, OP_CROSS_ENTROPY, DT_F32, &scalar, a->call->loc, 2, in);
}

static Node *lower_reshape(Sema *S, const Args *a) {
    Node *x;
    if (arg_tensor(S, a, 0, &x) != 0) return NULL;
    const Expr *l = a->pos[1];
    if (l->kind != EXPR_LIST || l->items.n == 0 || l->items.n > MT_MAX_RANK) {
        diag_error(S->d, l->loc, "reshape's shape must be a list of 1 to %d dimensions, as [B, T, C]", MT_MAX_RANK);
        return NULL;
    }
    Shape s = {.rank = l->items.n};
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < s.rank; i++) {
        const Expr *d = l->items.items[i];
        Num n;
        if (eval_num(S, d, &n) != 0) return NULL;
        if (n.is_int && n.i == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (!n.is_int || n.i < 1 || __builtin_mul_overflow(known, n.i, &known)) {
            diag_error(S->d, d->loc, "a dimension must be a positive integer (or one -1 to infer it)");
            return NULL;
        }
        s.dims[i] = n.i;
    }
    int64_t numel = shape_numel(&x->shape);
    if (infer >= 0 && numel % known == 0) s.dims[infer] = numel / known;
    if (shape_numel(&s) != numel || (infer >= 0 && numel % known)) {
        char s1[160], s2[160];
        diag_error(S->d, l->loc, "reshape cannot turn %s (%lld elements) into %s", shape_str(&x->shape, s1, sizeof s1),
                   (long long)numel, shape_str(&s, s2, sizeof s2));
        return NULL;
    }
    return new_node(S, OP_RESHAPE, x->dtype, &s, a->call->loc, 1, &x);
}

static int lower_split(Sema *S, const Args *a, Val *outs, int nouts) {
    Node *x;
    int axis;
    if (arg_tensor(S, a, 0, &x) != 0 || need_rank(S, a->pos[0], x, 1, -1, "split") ||
        axis_of(S, a, x->shape.rank, &axis) != 0)
        return -1;
    const Expr *how = a->pos[1];
    int64_t sizes[16], dim = x->shape.dims[axis], total = 0;
    int n;
    if (how->kind == EXPR_LIST) {
        n = how->items.n;
        if (n < 1 || n > 16) {
            diag_error(S->d, how->loc, "split makes 1 to 16 parts, not %d", n);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            Num v;
            if (eval_num(S, how->items.items[i], &v) != 0) return -1;
            if (!v.is_int || v.i < 1 || v.i > dim) {
                diag_error(S->d, ((Expr *)how->items.items[i])->loc,
                           "a part size must be a positive integer up to %lld", (long long)dim);
                return -1;
            }
            sizes[i] = v.i;
            total += v.i;
        }
    } else {
        Num v;
        if (eval_num(S, how, &v) != 0) return -1;
        if (!v.is_int || v.i < 1 || v.i > 16) {
            diag_error(S->d, how->loc, "split makes 1 to 16 parts; got %g", v.f);
            return -1;
        }
        n = (int)v.i;
        if (dim % n) {
            diag_error(S->d, how->loc, "axis of size %lld does not split into %d equal parts", (long long)dim, n);
            return -1;
        }
        for (int i = 0; i < n; i++) sizes[i] = dim / n;
        total = dim;
    }
    if (total != dim) {
        diag_error(S->d, how->loc, "the parts add up to %lld but the axis has %lld", (long long)total, (long long)dim);
        return -1;
    }
    if (n != nouts) {
        if (nouts == 1)
            diag_error(S->d, a->call->loc, "split makes %d values; assign them to %d names, as a, b = split(...)", n,
                       n);
        else diag_error(S->d, a->call->loc, "split makes %d values but %d names are assigned", n, nouts);
        return -1;
    }
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        Shape s = x->shape;
        s.dims[axis] = sizes[i];
        Node *part = new_node(S, OP_SLICE, x->dtype, &s, a->call->loc, 1, &x);
        if (!part) return -1;
        part->axis = axis;
        part->offset = offset;
        offset += sizes[i];
        outs[i] = (Val){.node = part};
    }
    return 0;
}

// A rope's output reshaped to [..., heads, width] and joined along the last
// axis is read as heads of that width (DeepSeek's shared rope key: [B, T, 1,
// DR], rotated as one head of DR). A rope that rotated heads of another width
// (heads = H on that shared key) is an error naming the heads it needs.
static int check_roped_heads(Sema *S, const Args *a, Node **in, int axis) {
    for (int i = 0; i < a->npos; i++) {
        const Node *r = in[i];
        if (r->shape.rank < 4 || axis != r->shape.rank - 1) continue;
        while (r->op == OP_RESHAPE) r = r->in[0];
        int64_t w = last_dim(in[i]);
        if (r->op != OP_ROPE || last_dim(r) / r->heads == w) continue;
        diag_error(S->d, r->loc,
                   "rope splits its input into %d heads of %lld, but concat (line %d) joins it as heads of %lld; "
                   "write heads = %lld",
                   r->heads, (long long)(last_dim(r) / r->heads), a->call->loc.line, (long long)w,
                   (long long)(last_dim(r) / w));
        return -1;
    }
    return 0;
}

static Node *lower_concat(Sema *S, const Args *a) {
    Node *in[16] = {0};
    int axis = 0;
    for (int i = 0; i < a->npos; i++)
        if (arg_tensor(S, a, i, &in[i]) != 0 || need_f32(S, a->pos[i], in[i], "concat")) return NULL;
    if (axis_of(S, a, in[0]->shape.rank, &axis) != 0 || check_roped_heads(S, a, in, axis) != 0) return NULL;
    // the other axes: equal, or 1 in some operands, which broadcast to the others' size
    Shape s = in[0]->shape;
    for (int i = 1; i < a->npos; i++) {
        const Shape *t = &in[i]->shape;
        int ok = t->rank == s.rank;
        for (int d = 0; ok && d < s.rank; d++) {
            if (d == axis || t->dims[d] == s.dims[d] || t->dims[d] == 1) continue;
            if (s.dims[d] == 1) s.dims[d] = t->dims[d];
            else ok = 0;
        }
        if (!ok) return (void)mismatch(S, a->pos[i]->loc, "concat", &in[0]->shape, t), NULL;
    }
    s.dims[axis] = 0;
    for (int i = 0; i < a->npos; i++) s.dims[axis] += in[i]->shape.dims[axis];
    Node *n = new_node(S, OP_CONCAT, DT_F32, &s, a->call->loc, a->npos, in);
    if (n) n->axis = axis;
    return n;
}

// x summed over one axis, which stays as 1 (torch's keepdim = True): the
// reduction autodiff's broadcasts use (OP_SUM_TO), fp64 sums rounded once.
static Node *lower_sum(Sema *S, const Args *a) {
    Node *x;
    int axis;
    if (arg_tensor(S, a, 0, &x) != 0 || need_f32(S, a->pos[0], x, "sum") || need_rank(S, a->pos[0], x, 1, -1, "sum") ||
        axis_of(S, a, x->shape.rank, &axis) != 0)
        return NULL;
    Shape s = x->shape;
    s.dims[axis] = 1;
    return new_node(S, OP_SUM_TO, DT_F32, &s, a->call->loc, 1, &x);
}

// A tensor of shape s all v, written so that the fused kernels compute it
// where they read it, from no memory: arange(n, f32) * 0 + v, reshaped.
static Node *full_node(Sema *S, const Shape *s, double v, Loc loc) {
    Shape flat = {1, {shape_numel(s)}};
    Node *r = new_node(S, OP_ARANGE, DT_F32, &flat, loc, 0, NULL), *zero = const_node(S, 0, loc);
    Node *z = r && zero ? new_node(S, OP_MUL, DT_F32, &flat, loc, 2, (Node *[]){r, zero}) : NULL;
    Node *c = const_node(S, v, loc), *f = z && c ? new_node(S, OP_ADD, DT_F32, &flat, loc, 2, (Node *[]){z, c}) : NULL;
    return f && s->rank > 1 ? new_node(S, OP_RESHAPE, DT_F32, s, loc, 1, &f) : f;
}

// full([dims], v): full_node's tensor.
static Node *lower_full(Sema *S, const Args *a) {
    const Expr *l = a->pos[0];
    if (l->kind != EXPR_LIST || l->items.n == 0 || l->items.n > MT_MAX_RANK) {
        diag_error(S->d, l->loc, "full's shape must be a list of 1 to %d dimensions, as [C]", MT_MAX_RANK);
        return NULL;
    }
    Shape s = {.rank = l->items.n};
    int64_t n = 1;
    for (int i = 0; i < s.rank; i++) {
        Num d;
        if (eval_num(S, l->items.items[i], &d) != 0) return NULL;
        if (!d.is_int || d.i < 1 || __builtin_mul_overflow(n, d.i, &n)) {
            diag_error(S->d, ((const Expr *)l->items.items[i])->loc, "a dimension must be a positive integer");
            return NULL;
        }
        s.dims[i] = d.i;
    }
    Num v;
    if (eval_num(S, a->pos[1], &v) != 0) return NULL;
    return full_node(S, &s, v.f, a->call->loc);
}

static Node *lower_transpose(Sema *S, const Args *a) {
    Node *x;
    if (arg_tensor(S, a, 0, &x) != 0 || need_rank(S, a->pos[0], x, 2, -1, "transpose")) return NULL;
    Shape s = x->shape;
    int64_t t = s.dims[s.rank - 1];
    s.dims[s.rank - 1] = s.dims[s.rank - 2];
    s.dims[s.rank - 2] = t;
    return new_node(S, OP_TRANSPOSE, x->dtype, &s, a->call->loc, 1, &x);
}

// ---------------------------------------------------------------- mixture of experts

// The 1.0 / 0.0 mask of each row's top k along the last axis of x.
static Node *top_k_node(Sema *S, Node *x, int64_t k, Loc loc) {
    Node *m = x ? new_node(S, OP_TOP_K, DT_F32, &x->shape, loc, 1, &x) : NULL;
    if (m) m->top_k = (int)k;
    return m;
}

// The logits (the first argument) and top_k, read from the call and checked
// against the experts (the last axis); 0, or -1 with a located error.
static int top_k_args(Sema *S, const Args *a, Node **logits, int64_t *k) {
    if (arg_tensor(S, a, 0, logits) != 0 || need_f32(S, a->pos[0], *logits, a->spec->name) ||
        need_rank(S, a->pos[0], *logits, 1, -1, a->spec->name) || kw_int(S, a, "top_k", 0, 1, k) != 0)
        return -1;
    int64_t experts = last_dim(*logits);
    if (*k >= 1 && *k <= experts) return 0;
    diag_error(S->d, find_kwarg(a->call, "top_k")->loc,
               "top_k must be between 1 and the %lld experts (the last axis of the logits), got %lld",
               (long long)experts, (long long)*k);
    return -1;
}

// top_k(logits): the mask of each row's top_k experts.
static Node *top_k_mask(Sema *S, const Args *a, Node **logits) {
    int64_t k;
    return top_k_args(S, a, logits, &k) == 0 ? top_k_node(S, *logits, k, a->call->loc) : NULL;
}

static Node *softmax_last(Sema *S, Node *x, Loc loc) {
    Node *n = new_node(S, OP_SOFTMAX, DT_F32, &x->shape, loc, 1, &x);
    if (n) n->axis = x->shape.rank - 1;
    return n;
}

static Node *binary_node(Sema *S, OpKind op, Node *a, Node *b, Loc loc) {
    return a && b ? new_node(S, op, DT_F32, &a->shape, loc, 2, (Node *[]){a, b}) : NULL;
}

// Group-limited selection (DeepSeek-V3's n_group, topk_group): choice[..., E]
// viewed as G groups of E / G, each group ranked by the sum of its top 2
// choices; the experts outside the top_groups best groups are excluded
// (-1e30, as DeepSeek's own Gate; transformers fills 0, the same while the
// choices are positive). choice[..., E] -> [..., E].
static Node *limit_groups(Sema *S, Node *choice, int64_t groups, int64_t top_groups, Loc loc) {
    Shape grouped = choice->shape, sums, ranked;
    int r = grouped.rank;
    int64_t E = grouped.dims[r - 1];
    grouped.rank = r + 1, grouped.dims[r - 1] = groups, grouped.dims[r] = E / groups; // [..., G, E / G]
    Node *g = new_node(S, OP_RESHAPE, DT_F32, &grouped, loc, 1, &choice);
    Node *top2 = g ? top_k_node(S, g, 2, loc) : NULL;                 // [..., G, E / G]
    Node *best2 = top2 ? binary_node(S, OP_MUL, g, top2, loc) : NULL; // [..., G, E / G]
    sums = grouped, sums.dims[r] = 1;
    Node *score = best2 ? new_node(S, OP_SUM_TO, DT_F32, &sums, loc, 1, &best2) : NULL; // [..., G, 1]
    if (score) score->axis = r;
    ranked = choice->shape, ranked.dims[r - 1] = groups;
    Node *flat = score ? new_node(S, OP_RESHAPE, DT_F32, &ranked, loc, 1, &score) : NULL; // [..., G]
    Node *kept = flat ? top_k_node(S, flat, top_groups, loc) : NULL;                      // [..., G]
    if (kept) top2->group_limit = kept->group_limit = 1; // neither is the router's choice of experts
    Node *keep = kept ? new_node(S, OP_RESHAPE, DT_F32, &sums, loc, 1, &kept) : NULL; // [..., G, 1]
    Node *in[3] = {keep, g, const_node(S, -1e30, loc)};
    Node *limited = keep && in[2] ? new_node(S, OP_WHERE, DT_F32, &grouped, loc, 3, in) : NULL; // [..., G, E / G]
    return limited ? new_node(S, OP_RESHAPE, DT_F32, &choice->shape, loc, 1, &limited) : NULL;
}

// What the router chooses by, [..., E]: the scores plus the selection bias
// (bias = b, [E]: DeepSeek-V3's e_score_correction_bias, for choosing
// only), within the group limit (groups, top_groups). Without either, the
// logits themselves when the scores are a softmax (the same order).
static Node *router_choice(Sema *S, const Args *a, Node *logits, Node *scores, Node **bias) {
    const Expr *be = find_kwarg(a->call, "bias");
    int64_t E = last_dim(logits), groups, top_groups;
    if (kw_int(S, a, "groups", 1, 0, &groups) != 0 || kw_int(S, a, "top_groups", groups, 0, &top_groups) != 0)
        return NULL;
    if (groups < 1 || E % groups || (groups > 1 && E / groups < 2) || top_groups < 1 || top_groups > groups) {
        diag_error(S->d, a->call->loc,
                   "groups must divide the %lld experts into groups of 2 or more, and 1 <= top_groups <= groups; got "
                   "groups %lld, top_groups %lld",
                   (long long)E, (long long)groups, (long long)top_groups);
        return NULL;
    }
    Node *choice = be || groups > 1 ? scores : logits;
    if (be) {
        Val b;
        if (lower_expr(S, be, &b) != 0) return NULL;
        if (b.is_num || b.node->dtype != DT_F32 || b.node->shape.rank != 1 || b.node->shape.dims[0] != E) {
            diag_error(S->d, be->loc, "router's bias must be an f32 tensor [%lld], one value an expert", (long long)E);
            return NULL;
        }
        choice = binary_node(S, OP_ADD, scores, b.node, a->call->loc);
        *bias = b.node;
    }
    return choice && groups > 1 ? limit_groups(S, choice, groups, top_groups, a->call->loc) : choice;
}

// bias_update = gamma: the balance rule of the router's bias (Param.balance_mask,
// DeepSeek-V3's auxiliary-loss-free update), its loads counted by the
// router's mask. bias: the bias node (NULL: none). 0, or -1 with an error.
static int router_balance(Sema *S, const Args *a, Node *bias, const Node *mask) {
    const Expr *e = find_kwarg(a->call, "bias_update");
    Num rate;
    if (!e) return 0;
    if (eval_num(S, e, &rate) != 0) return -1;
    Param *prm = bias && bias->op == OP_PARAM ? S->g->params.items[bias->param] : NULL;
    const char *why = !bias                                ? "it needs the router's bias = b, the buffer it moves"
                      : !(rate.f >= 0 && isfinite(rate.f)) ? "gamma, the bias update speed, is a number >= 0 "
                                                             "(DeepSeek-V3: 0.001)"
                      : !prm              ? "bias = must name a buffer (param b \"...\" [E] buffer), not an expression"
                      : !prm->buffer      ? "the bias is a trained parameter: declare it a buffer (param b \"...\" [E] "
                                            "buffer), which only this rule moves"
                      : !prm->in_block    ? "the bias is a global buffer, and the rule moves each layer's own by that "
                                            "layer's loads: declare the buffer and its router in a block"
                      : prm->balance_mask ? "the bias already moves by another router's loads: give each router "
                                            "its own buffer"
                                          : NULL;
    if (why) {
        diag_error(S->d, e->loc, "bias_update = %g: %s", rate.f, why);
        return -1;
    }
    prm->balance_mask = mask, prm->balance_rate = rate.f;
    return 0;
}

// The gates: softmax before the selection, the selected probabilities as
// they are (Qwen-MoE, DeepSeek-MoE); softmax after it, over the selected
// logits only (Mixtral). Before with normalize renormalises the selected
// probabilities to sum 1, which is softmax after: lowered as that. Sigmoid
// scores (DeepSeek-V3, GLM-4.5): the selected ones, with normalize each over
// their sum (+ 1e-20, as transformers). scale multiplies the gates
// (routed_scaling_factor).
static Node *lower_router(Sema *S, const Args *a) {
    Node *logits;
    int64_t k;
    if (top_k_args(S, a, &logits, &k) != 0) return NULL;
    const Expr *e = find_kwarg(a->call, "softmax"), *se = find_kwarg(a->call, "scores");
    const char *sw = !se ? "softmax" : se->kind == EXPR_NAME || se->kind == EXPR_STRING ? se->str : "";
    int after = 0, normalize, sigmoid = !strcmp(sw, "sigmoid");
    double scale;
    if (!sigmoid && strcmp(sw, "softmax")) {
        diag_error(S->d, se->loc, "scores must be softmax or sigmoid");
        return NULL;
    }
    if (e && sigmoid) {
        diag_error(S->d, e->loc, "softmax = before|after is for softmax scores; sigmoid scores take normalize");
        return NULL;
    }
    if (e) {
        const char *w = e->kind == EXPR_NAME || e->kind == EXPR_STRING ? e->str : "";
        after = !strcmp(w, "after");
        if (!after && strcmp(w, "before")) {
            diag_error(S->d, e->loc, "softmax must be before or after (the top-k selection)");
            return NULL;
        }
    }
    if (kw_bool(S, a, "normalize", 0, &normalize) != 0 || kw_float(S, a, "scale", 1, &scale) != 0) return NULL;
    Loc loc = a->call->loc;
    const Shape *s = &logits->shape;
    int plain = !find_kwarg(a->call, "bias") && !find_kwarg(a->call, "groups"); // choosing by the logits will do
    int probs = !sigmoid && ((!after && !normalize) || !plain); // the gates or the choice need the softmax
    Node *scores = sigmoid ? new_node(S, OP_SIGMOID, DT_F32, s, loc, 1, &logits)
                   : probs ? softmax_last(S, logits, loc)
                           : logits; // [..., E]
    Node *bias = NULL, *choice = scores ? router_choice(S, a, logits, scores, &bias) : NULL;
    Node *mask = choice ? top_k_node(S, choice, k, loc) : NULL, *gates = NULL; // [..., E]
    if (!mask || router_balance(S, a, bias, mask) != 0) return NULL;
    if (sigmoid || (!after && !normalize)) {
        gates = binary_node(S, OP_MUL, scores, mask, loc);
        if (sigmoid && normalize && gates) {
            Shape rs = *s;
            rs.dims[rs.rank - 1] = 1;
            Node *sum = new_node(S, OP_SUM_TO, DT_F32, &rs, loc, 1, &gates); // [..., 1]
            if (sum) sum->axis = rs.rank - 1;
            Node *norm = sum ? new_node(S, OP_ADD, DT_F32, &rs, loc, 2, (Node *[]){sum, const_node(S, 1e-20, loc)})
                             : NULL;
            gates = norm ? binary_node(S, OP_DIV, gates, norm, loc) : NULL;
        }
    } else {
        Node *in[3] = {mask, logits, const_node(S, -1e30, loc)}; // exp of it is 0 in f32 and f64
        Node *masked = in[2] ? new_node(S, OP_WHERE, DT_F32, s, loc, 3, in) : NULL;
        gates = masked ? softmax_last(S, masked, loc) : NULL;
    }
    return gates && scale != 1 ? binary_node(S, OP_MUL, gates, const_node(S, scale, loc), loc) : gates;
}

// moe reads each expert weight as stored, [E, out, in] or, written
// transpose(w), [E, in, out] (Node.moe_form). Square ones (F = C; a
// fused gate_up's 2F = C) fit either, so the layout is read from what shows
// it: a piece of a weight split along its last axis is [E, in, out] and
// needs transpose, along axis 1 [E, out, in]; else the call's non-square
// expert weights, else its others, which one checkpoint stores the same way
// (most of them). A square weight read the other way is an error naming the fix.
static int check_square_expert_layouts(Sema *S, const Args *a, Node *const *w, const int *t, int nw) {
    static const char *sep[3] = {"w_gate", "w_up", "w_down"}, *fused[2] = {"w_gate_up", "w_down"};
    const char *const *what = nw == 3 ? sep : fused;
    int split[3], ref = -1, wide = 0, wide_t = 0, transposed = 0, square = 0;
    for (int i = 0; i < nw; i++) {
        int sq = w[i]->shape.dims[1] == w[i]->shape.dims[2];
        square += sq, wide += !sq, wide_t += !sq && t[i], transposed += t[i];
        split[i] = i < nw - 1 && w[i]->op == OP_SLICE && w[i]->shape.rank == 3 && w[i]->axis >= 1 ? w[i]->axis == 2
                                                                                                  : -1;
        if (split[i] >= 0 && ref < 0) ref = split[i];
    }
    if (!square) return 0; // the shapes say it
    if (ref < 0) ref = wide ? 2 * wide_t > wide : 2 * transposed > nw;
    for (int i = 0; i < nw; i++) {
        int want = split[i] >= 0 ? split[i] : ref;
        if (w[i]->shape.dims[1] != w[i]->shape.dims[2] || want == t[i]) continue;
        const char *why = split[i] >= 0 ? (want ? "a piece of a weight split along its last axis, [E, in, out] as a "
                                                  "fused gate_up_proj stores it"
                                                : "a piece of a weight split along axis 1, [E, out, in]")
                                        : (want ? "stored as the call's other expert weights, [E, in, out]"
                                                : "stored as the call's other expert weights, [E, out, in]");
        const char *name = w[i]->op == OP_PARAM ? ((const Param *)S->g->params.items[w[i]->param])->name : what[i];
        diag_error(S->d, a->pos[2 + i]->loc,
                   "moe's %s is square, so it fits stored or transposed; moe reads [E, out, in] and this one is %s: "
                   "write %s%s%s",
                   what[i], why, want ? "transpose(" : "", name, want ? ")" : ", without transpose");
        return -1;
    }
    return 0;
}

// moe's gates_on = output | input: *bit MOE_GATES_ON_INPUT for input (Llama
// 4: expert e runs on gate_e x, its output not gated), else 0.
static int moe_gates_on(Sema *S, const Args *a, int *bit) {
    const Expr *e = find_kwarg(a->call, "gates_on");
    const char *w = !e ? "output" : e->kind == EXPR_NAME || e->kind == EXPR_STRING ? e->str : "?";
    *bit = !strcmp(w, "input") ? MOE_GATES_ON_INPUT : 0;
    if (*bit || !strcmp(w, "output")) return 0;
    diag_error(S->d, e->loc,
               "moe's gates_on must be output (gate times the expert's output: Mixtral) or input "
               "(the expert runs on gate times x: Llama 4)");
    return -1;
}

// moe's gate_up = halves | interleaved: *fused the layout bit (0 without
// it: separate w_gate and w_up), checked against the positional count.
static int moe_gate_up_form(Sema *S, const Args *a, int *fused) {
    const Expr *e = find_kwarg(a->call, "gate_up");
    const char *w = !e ? "" : e->kind == EXPR_NAME || e->kind == EXPR_STRING ? e->str : "?";
    *fused = !strcmp(w, "halves") ? MOE_GATE_UP_HALVES : !strcmp(w, "interleaved") ? MOE_GATE_UP_INTERLEAVED : 0;
    if (e && !*fused) {
        diag_error(S->d, e->loc,
                   "moe's gate_up must be halves (the gate, then the up: Llama 4) or interleaved "
                   "(the gate at even places, the up at odd: gpt-oss)");
        return -1;
    }
    if (a->npos == (*fused ? 4 : 5)) return 0;
    diag_error(S->d, a->call->loc,
               *fused ? "moe with gate_up = %s takes 4 positional arguments (x, gates, w_gate_up, w_down), got %d"
                      : "moe takes 5 positional arguments (x, gates, w_gate, w_up, w_down), or 4 with a fused "
                        "w_gate_up and gate_up = halves|interleaved%s; got %d",
               *fused ? w : "", a->npos);
    return -1;
}

// moe's operands (x, gates, then the weights as stored) into in[5] (a fused
// gate_up in both w_gate's and w_up's places), *layout their
// Node.moe_form: transpose(w) of a weight is read in place, [E, in, out].
static int moe_operands(Sema *S, const Args *a, int fused, Node **in, int *layout) {
    int t[5] = {0};
    for (int i = 0; i < a->npos; i++) {
        if (arg_tensor(S, a, i, &in[i]) != 0 || need_f32(S, a->pos[i], in[i], "moe")) return -1;
        t[i] = a->trans[i];
        if (t[i] && (i < 2 || in[i]->shape.rank != 3)) { // transposed as written: not a weight's layout
            Shape s = in[i]->shape;
            int64_t d = s.dims[s.rank - 1];
            s.dims[s.rank - 1] = s.dims[s.rank - 2], s.dims[s.rank - 2] = d;
            if (!(in[i] = new_node(S, OP_TRANSPOSE, DT_F32, &s, a->pos[i]->loc, 1, &in[i]))) return -1;
            t[i] = 0;
        }
    }
    if (fused) in[4] = in[3], t[4] = t[3], in[3] = in[2], t[3] = t[2];
    *layout = t[2] | t[3] << 1 | t[4] << 2 | fused;
    return 0;
}

// Weight node w as moe reads it, [E, out, in]: its shape, swapped when stored [E, in, out] (t).
static Shape read_as(const Node *w, int t) {
    Shape s = w->shape;
    if (t && s.rank == 3) s.dims[1] = w->shape.dims[2], s.dims[2] = w->shape.dims[1];
    return s;
}

// moe's weights against x [.., C] and gates [.., E]: F from w_down, and
// each as read [E, F, C] (a fused gate_up [E, 2F, C]), [E, C, F]; 0 or -1
// with a located error.
static int moe_weight_shapes(Sema *S, const Args *a, Node *const *in, int layout, int64_t *F) {
    int64_t E = last_dim(in[1]), C = last_dim(in[0]);
    Shape down = read_as(in[4], layout >> 2 & 1);
    *F = down.rank == 3 ? down.dims[2] : 0;
    int fused = layout & (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED);
    const Shape want[3] = {{3, {E, fused ? 2 * *F : *F, C}}, {3, {E, *F, C}}, {3, {E, C, *F}}};
    const char *what[3] = {fused ? "moe's w_gate_up" : "moe's w_gate", "moe's w_up", "moe's w_down"};
    for (int i = 0; i < 3; i++) {
        if (i == 1 && fused) continue;
        Shape got = read_as(in[2 + i], layout >> i & 1), other = read_as(in[2 + i], !(layout >> i & 1));
        int at = fused && i == 2 ? 3 : 2 + i;
        if (*F && !shape_eq(&want[i], &got) && shape_eq(&want[i], &other)) { // stored the other way: transpose
            char s1[160];
            const Node *w = in[2 + i];
            const char *name = w->op == OP_PARAM ? ((const Param *)S->g->params.items[w->param])->name : "it";
            int t = layout >> i & 1;
            diag_error(S->d, a->pos[at]->loc, "%s is read [E, out, in], %s; this one is %s: write %s%s%s", what[i],
                       shape_str(&want[i], s1, sizeof s1), t ? "passed transposed" : "stored [E, in, out]",
                       t ? "" : "transpose(", name, t ? " without transpose" : ")");
            return -1;
        }
        if (!shape_eq(&want[i], &got) || !*F) return mismatch(S, a->pos[at]->loc, what[i], &want[i], &got);
    }
    return 0;
}

// moe's act = silu | gelu | gelu_tanh (common/graph.h's MoeAct, the DSL's
// silu, gelu(approximate = none), gelu(approximate = tanh)) as *bits of
// Node.moe_form, and alpha = A, limit = L (gpt-oss's clamped SwiGLU, both
// or neither, silu's only): *alpha 0 without them.
static int moe_activation(Sema *S, const Args *a, double *alpha, double *limit, int *bits) {
    static const char *const names[MOE_ACTS] = {"silu", "gelu", "gelu_tanh"};
    const Expr *e = find_kwarg(a->call, "act");
    const char *w = !e ? "silu" : e->kind == EXPR_NAME || e->kind == EXPR_STRING ? e->str : "?";
    int act = 0;
    while (act < MOE_ACTS && strcmp(w, names[act])) act++;
    if (act == MOE_ACTS) {
        diag_error(S->d, e->loc,
                   "moe's act must be silu (SwiGLU), gelu (GeGLU with gelu(g, approximate = none), erf's) or "
                   "gelu_tanh (gelu(g, approximate = tanh)); got '%s'",
                   w);
        return -1;
    }
    *bits = act << MOE_ACT_SHIFT;
    if (kw_float(S, a, "alpha", 0, alpha) != 0 || kw_float(S, a, "limit", 0, limit) != 0) return -1;
    if ((*alpha > 0 || *limit > 0) && act != MOE_ACT_SILU) {
        diag_error(S->d, e->loc,
                   "moe's alpha and limit (gpt-oss's clamped SwiGLU) take act = silu, not %s: drop them or act", w);
        return -1;
    }
    if ((*alpha > 0) == (*limit > 0)) return 0;
    diag_error(S->d, a->call->loc,
               "moe's clamped SwiGLU needs both alpha and limit (gpt-oss's swiglu_alpha, "
               "swiglu_limit); usage: %s",
               a->spec->usage);
    return -1;
}

// moe's option gate_bias, up_bias (which = 0, 1: [E, F]) or down_bias (2:
// [E, C]) as *out, NULL where not given.
static int moe_bias(Sema *S, const Args *a, int which, int64_t E, int64_t width, Node **out) {
    static const char *names[3] = {"gate_bias", "up_bias", "down_bias"},
                      *what[3] = {"moe's gate_bias", "moe's up_bias", "moe's down_bias"};
    const Expr *be = find_kwarg(a->call, names[which]);
    *out = NULL;
    if (!be) return 0;
    Val b;
    if (lower_expr(S, be, &b) != 0) return -1;
    Shape want = {2, {E, width}};
    if (b.is_num || b.node->dtype != DT_F32 || !shape_eq(&want, &b.node->shape))
        return b.is_num ? (diag_error(S->d, be->loc, "moe's %s must be an f32 tensor [%lld, %lld]", names[which],
                                      (long long)E, (long long)width),
                           -1)
                        : mismatch(S, be->loc, what[which], &want, &b.node->shape);
    *out = b.node;
    return 0;
}

// moe's gate and up biases as its sixth operand [E, 2F] in the columns of
// its GEMMs' output (common/graph.h's moe_gate_col, moe_up_col): gate_up_bias
// as given (a fused weight's own order, or the gate's then the up's), or
// gate_bias and up_bias [E, F] side by side (0 for one not given; not for
// interleaved weights). *out NULL when none is given.
static int moe_gate_up_bias(Sema *S, const Args *a, int layout, int64_t E, int64_t F, Node **b, Node **out) {
    const Expr *fused = find_kwarg(a->call, "gate_up_bias");
    *out = NULL;
    if (fused && (b[0] || b[1])) {
        diag_error(S->d, fused->loc, "moe takes gate_up_bias or gate_bias and up_bias, not both");
        return -1;
    }
    if (fused) {
        Val v;
        if (lower_expr(S, fused, &v) != 0) return -1;
        Shape want = {2, {E, 2 * F}};
        if (v.is_num || v.node->dtype != DT_F32 || !shape_eq(&want, &v.node->shape))
            return v.is_num ? (diag_error(S->d, fused->loc, "moe's gate_up_bias must be an f32 tensor [%lld, %lld]",
                                          (long long)E, (long long)(2 * F)),
                               -1)
                            : mismatch(S, fused->loc, "moe's gate_up_bias", &want, &v.node->shape);
        *out = v.node;
        return 0;
    }
    if (!b[0] && !b[1]) return 0;
    if (layout & MOE_GATE_UP_INTERLEAVED) {
        diag_error(S->d, a->call->loc,
                   "moe's interleaved gate_up takes its biases as gate_up_bias = b [%lld, %lld], "
                   "interleaved as the weight",
                   (long long)E, (long long)(2 * F));
        return -1;
    }
    Shape half = {2, {E, F}}, both = {2, {E, 2 * F}};
    Node *p[2];
    for (int i = 0; i < 2; i++) p[i] = b[i] ? b[i] : full_node(S, &half, 0, a->call->loc);
    *out = p[0] && p[1] ? new_node(S, OP_CONCAT, DT_F32, &both, a->call->loc, 2, p) : NULL;
    if (*out) (*out)->axis = 1;
    return *out ? 0 : -1;
}

// x[..., C], gates[..., E], w_gate[E, F, C], w_up[E, F, C], w_down[E, C, F]
// (each, written transpose(w), read in place from w [E, in, out]), or
// w_gate_up [E, 2F, C] with gate_up = halves|interleaved in w_gate's and
// w_up's places; options: the activation (act), the clamped SwiGLU (alpha, limit), expert biases
// (gate_bias, up_bias, down_bias).
static Node *lower_moe(Sema *S, const Args *a) {
    double alpha, limit;
    Node *in[6];
    int fused, layout;
    Loc loc = a->call->loc;
    int64_t F;
    int on_input, act;
    if (moe_gate_up_form(S, a, &fused) != 0 || moe_operands(S, a, fused, in, &layout) != 0 ||
        moe_gates_on(S, a, &on_input) != 0)
        return NULL;
    Node *x = in[0], *gates = in[1];
    if (need_rank(S, a->pos[0], x, 1, -1, "moe")) return NULL;
    Shape rows = x->shape; // gates: x's rows, a column an expert
    rows.dims[rows.rank - 1] = last_dim(gates);
    if (!shape_eq(&rows, &gates->shape))
        return (void)mismatch(S, a->pos[1]->loc, "moe's gates", &rows, &gates->shape), NULL;
    int64_t E = last_dim(gates), C = last_dim(x);
    Node *w[3] = {in[2], fused ? in[4] : in[3], in[4]};
    int t[3] = {layout & 1, fused ? layout >> 2 & 1 : layout >> 1 & 1, layout >> 2 & 1};
    if (moe_weight_shapes(S, a, in, layout, &F) != 0 || check_square_expert_layouts(S, a, w, t, fused ? 2 : 3) != 0 ||
        moe_activation(S, a, &alpha, &limit, &act) != 0)
        return NULL;
    Node *b[3] = {0}, *bias; // gate_bias [E, F], up_bias [E, F], down_bias [E, C], or NULL; bias [E, 2F]
    for (int i = 0; i < 3; i++)
        if (moe_bias(S, a, i, E, i < 2 ? F : C, &b[i]) != 0) return NULL;
    if (b[2] && on_input) {
        diag_error(S->d, a->call->loc,
                   "moe's down_bias is added gated (gates @ down_bias): with gates_on = input "
                   "the experts' outputs are not; drop one of them");
        return NULL;
    }
    if (moe_gate_up_bias(S, a, layout, E, F, b, &bias) != 0) return NULL;
    in[5] = bias;
    Node *y = new_node(S, OP_MOE, DT_F32, &x->shape, loc, bias ? 6 : 5, in);
    if (y) y->scale = alpha, y->softcap = limit, y->moe_form = layout | on_input | act | (bias ? MOE_GATE_UP_BIAS : 0);
    Node *bd = b[2] ? lower_matmul(S, a->call->loc, gates, 0, b[2], 0, a->pos[1], find_kwarg(a->call, "down_bias"))
                    : NULL;
    return y && bd ? binary_node(S, OP_ADD, y, bd, a->call->loc) : b[2] ? NULL : y;
}

// pooled: f and P over every layer's rows of the micro-batch (transformers'
// Mixtral and Qwen-MoE), which the runtime keeps across the layers
// (LoadBalancePool): one such loss a block, the same experts in every block.
static Node *lower_load_balance(Sema *S, const Args *a) {
    Node *logits, *mask = top_k_mask(S, a, &logits);
    int pooled;
    if (!mask || kw_bool(S, a, "pooled", 0, &pooled) != 0) return NULL;
    const Expr *kw = find_kwarg(a->call, "pooled");
    if (pooled && !S->in_block) {
        diag_error(S->d, kw->loc, "a pooled load_balancing_loss pools the layers' rows: it belongs in a block");
        return NULL;
    }
    for (int pk = 0; pooled && pk < PART_COUNT; pk++)
        for (int i = 0; i < S->g->parts[pk].nodes.n; i++) {
            const Node *o = S->g->parts[pk].nodes.items[i];
            if (o->op != OP_LOAD_BALANCE || !o->pooled) continue;
            if (pk == (int)S->part) {
                diag_error(S->d, kw->loc,
                           "a second pooled load_balancing_loss in this block (the first at line %d); "
                           "a block has at most one",
                           o->loc.line);
                return NULL;
            }
            if (last_dim(o->in[0]) != last_dim(logits)) {
                diag_error(S->d, kw->loc,
                           "this pooled load_balancing_loss has %lld experts, the one at line %d %lld; "
                           "pooled losses pool one set of experts",
                           (long long)last_dim(logits), o->loc.line, (long long)last_dim(o->in[0]));
                return NULL;
            }
        }
    Node *in[2] = {logits, mask};
    Node *n = new_node(S, OP_LOAD_BALANCE, DT_F32, NULL, a->call->loc, 2, in);
    if (n) n->pooled = pooled;
    return n;
}

static Node *lower_add_loss(Sema *S, const Args *a) {
    Node *in[2];
    if (arg_tensor(S, a, 0, &in[0]) != 0 || need_f32(S, a->pos[0], in[0], "add_loss") ||
        arg_tensor(S, a, 1, &in[1]) != 0 || need_f32(S, a->pos[1], in[1], "add_loss"))
        return NULL;
    if (in[1]->shape.rank != 0) {
        char s1[160];
        diag_error(S->d, a->pos[1]->loc, "add_loss needs a scalar loss, f32[]; got %s",
                   shape_str(&in[1]->shape, s1, sizeof s1));
        return NULL;
    }
    return new_node(S, OP_ADD_LOSS, DT_F32, &in[0]->shape, a->call->loc, 2, in);
}

// softplus(x) = log(1 + exp(x)), x itself above 20 (PyTorch's threshold),
// written with where, exp and log, which fuse into one kernel; the branch
// not taken sees 0, so that neither its value nor its gradient overflows.
static Node *lower_softplus(Sema *S, const Args *a) {
    Node *x;
    if (arg_tensor(S, a, 0, &x) != 0 || need_f32(S, a->pos[0], x, "softplus")) return NULL;
    const Shape *s = &x->shape;
    Loc loc = a->call->loc;
    Node *in[3] = {const_node(S, 20, loc), x};
    Node *above = in[0] ? new_node(S, OP_LT, DT_F32, s, loc, 2, in) : NULL;
    in[0] = above, in[1] = const_node(S, 0, loc), in[2] = x;
    Node *below = above && in[1] ? new_node(S, OP_WHERE, DT_F32, s, loc, 3, in) : NULL;
    Node *e = below ? new_node(S, OP_EXP, DT_F32, s, loc, 1, &below) : NULL;
    in[0] = const_node(S, 1, loc), in[1] = e;
    Node *one_e = e && in[0] ? new_node(S, OP_ADD, DT_F32, s, loc, 2, in) : NULL;
    Node *l = one_e ? new_node(S, OP_LOG, DT_F32, s, loc, 1, &one_e) : NULL;
    in[0] = above, in[1] = x, in[2] = l;
    return l ? new_node(S, OP_WHERE, DT_F32, s, loc, 3, in) : NULL;
}

// conv1d(x[B, T, C], w[C, K] or w[C, 1, K]): the causal depthwise
// convolution (common/scan.h); w's rank-3 form is the checkpoint's
// nn.Conv1d(groups = C) weight, reshaped.
static Node *lower_conv1d(Sema *S, const Args *a) {
    Node *in[2];
    for (int i = 0; i < 2; i++)
        if (arg_tensor(S, a, i, &in[i]) != 0 || need_f32(S, a->pos[i], in[i], "conv1d")) return NULL;
    if (need_rank(S, a->pos[0], in[0], 3, 3, "conv1d")) return NULL;
    const Shape *w = &in[1]->shape;
    int64_t C = last_dim(in[0]), K = w->dims[w->rank - 1];
    Shape want = {.rank = 2, .dims = {C, K}};
    if (!(w->rank == 2 && w->dims[0] == C) && !(w->rank == 3 && w->dims[0] == C && w->dims[1] == 1)) {
        diag_error(S->d, a->pos[1]->loc, "conv1d's weight must be [C, K] or [C, 1, K] with C = %lld, x's channels",
                   (long long)C);
        return NULL;
    }
    if (w->rank == 3 && !(in[1] = new_node(S, OP_RESHAPE, DT_F32, &want, a->call->loc, 1, &in[1]))) return NULL;
    return new_node(S, OP_CONV1D, DT_F32, &in[0]->shape, a->call->loc, 2, in);
}

// The scan's operands as common/scan.h reads them, or an error naming the
// first that does not fit.
static Node *scan_node(Sema *S, const Args *a, OpKind op, Node **in, const int *pos, int64_t heads, int64_t kv_heads) {
    static const char *const what[2][5] = {{"q", "k", "v", "g", "beta"}, {"C", "B", "x", "dt", "dt"}};
    const char *name = a->spec->name;
    if (kv_heads < 1 || heads % kv_heads != 0) {
        diag_error(S->d, a->call->loc, "heads=%lld is not a multiple of %s=%lld", (long long)heads,
                   op == OP_SSD ? "groups" : "kv_heads", (long long)kv_heads);
        return NULL;
    }
    int64_t dk, dv;
    if (head_width(S, a->pos[pos[0]], in[0], kv_heads, &dk) || head_width(S, a->pos[pos[2]], in[2], heads, &dv))
        return NULL;
    const Shape *q = &in[0]->shape;
    for (int i = 1; i < 5; i++) {
        Shape want = {.rank = 3, .dims = {q->dims[0], q->dims[1], i == 1 ? q->dims[2] : i == 2 ? heads * dv : heads}};
        if (!shape_eq(&want, &in[i]->shape)) {
            char w[64];
            snprintf(w, sizeof w, "%s's %s", name, what[op == OP_SSD][i]);
            return (void)mismatch(S, a->pos[pos[i]]->loc, w, &want, &in[i]->shape), NULL;
        }
    }
    Node *n = new_node(S, op, DT_F32, &in[2]->shape, a->call->loc, 5, in);
    if (n) n->heads = (int)heads, n->kv_heads = (int)kv_heads;
    return n;
}

// gated_delta_rule(q[B, T, Hk*Dk], k[B, T, Hk*Dk], v[B, T, H*Dv], g[B, T, H], beta[B, T, H]).
static Node *lower_delta_rule(Sema *S, const Args *a) {
    Node *in[5];
    for (int i = 0; i < 5; i++)
        if (arg_tensor(S, a, i, &in[i]) != 0 || need_f32(S, a->pos[i], in[i], "gated_delta_rule") ||
            need_rank(S, a->pos[i], in[i], 3, 3, "gated_delta_rule"))
            return NULL;
    int64_t heads, kv_heads;
    double scale, eps;
    if (kw_int(S, a, "heads", 0, 1, &heads) != 0 || kw_int(S, a, "kv_heads", heads, 0, &kv_heads) != 0 ||
        kw_float(S, a, "scale", 0, &scale) != 0 || kw_float(S, a, "eps", 1e-6, &eps) != 0)
        return NULL;
    static const int pos[5] = {0, 1, 2, 3, 4};
    Node *n = scan_node(S, a, OP_DELTA_RULE, in, pos, heads, kv_heads);
    if (n) n->eps = eps, n->scale = scale > 0 ? scale : 1 / sqrt((double)(last_dim(in[0]) / kv_heads));
    return n;
}

// ssd(x[B, T, H*P], dt[B, T, H], A[H], B[B, T, G*N], C[B, T, G*N]): the
// recurrence of common/scan.h with q = C, k = B, v = x, g = A dt, beta = dt.
static Node *lower_ssd(Sema *S, const Args *a) {
    Node *arg[5];
    for (int i = 0; i < 5; i++)
        if (arg_tensor(S, a, i, &arg[i]) != 0 || need_f32(S, a->pos[i], arg[i], "ssd")) return NULL;
    int64_t heads, groups;
    if (kw_int(S, a, "heads", 0, 1, &heads) != 0 || kw_int(S, a, "groups", 1, 0, &groups) != 0) return NULL;
    Shape want_a = {.rank = 1, .dims = {heads}};
    if (!shape_eq(&want_a, &arg[2]->shape))
        return (void)mismatch(S, a->pos[2]->loc, "ssd's A", &want_a, &arg[2]->shape), NULL;
    if (need_rank(S, a->pos[1], arg[1], 3, 3, "ssd")) return NULL;
    if (last_dim(arg[1]) != heads) {
        Shape want = arg[1]->shape;
        want.dims[2] = heads;
        return (void)mismatch(S, a->pos[1]->loc, "ssd's dt", &want, &arg[1]->shape), NULL;
    }
    Node *mul[2] = {arg[1], arg[2]};
    Node *g = new_node(S, OP_MUL, DT_F32, &arg[1]->shape, a->call->loc, 2, mul);
    Node *in[5] = {arg[4], arg[3], arg[0], g, arg[1]};
    static const int pos[5] = {4, 3, 0, 1, 1};
    Node *n = g ? scan_node(S, a, OP_SSD, in, pos, heads, groups) : NULL;
    if (n) n->scale = 1, n->eps = 0;
    return n;
}

static void unknown_op(Sema *S, const Expr *call) {
    char list[512];
    size_t n = 0;
    for (int i = 0; i < N_OP_SPECS && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", OP_SPECS[i].name);
    diag_error(S->d, call->loc, "unknown op '%s'; expected one of: %s", call->str, list);
}

int ops_lower(Sema *S, const Args *args, Val *outs, int nouts) {
    const Args a = *args;
    const OpSpec *spec = a.spec;
    const Expr *call = a.call;
    if (spec->op == OP_SLICE) return lower_split(S, &a, outs, nouts);
    if (nouts != 1) {
        diag_error(S->d, call->loc, "%s makes 1 value but %d names are assigned", spec->name, nouts);
        return -1;
    }
    Node *n = NULL;
    switch (spec->op) {
    case OP_MATMUL:
        n = lower_matmul(S, call->loc, a.val[0].node, a.trans[0], a.val[1].node, a.trans[1], a.pos[0], a.pos[1]);
        break;
    case OP_EMBED: n = lower_embed(S, &a); break;
    case OP_ARANGE: n = lower_arange(S, &a); break;
    case OP_LAYERNORM:
    case OP_RMSNORM: n = lower_norm(S, &a, spec->op); break;
    case OP_GELU: n = lower_gelu(S, &a); break;
    case OP_SILU: n = lower_unary(S, &a, OP_SILU); break;
    case OP_MATHS: n = lower_unary(S, &a, spec->kind); break;
    case OP_COMPARE:
    case OP_COMPARE_SWAPPED:
    case OP_NOT_EQUAL: n = lower_elementwise(S, &a, spec->kind, 2); break;
    case OP_WHERE: n = lower_elementwise(S, &a, OP_WHERE, 3); break;
    case OP_SWIGLU: n = lower_swiglu(S, &a); break;
    case OP_ROPE: n = lower_rope(S, &a); break;
    case OP_ATTENTION: n = lower_attention(S, &a); break;
    case OP_SOFTMAX: n = lower_softmax(S, &a); break;
    case OP_CROSS_ENTROPY: n = lower_cross_entropy(S, &a); break;
    case OP_RESHAPE: n = lower_reshape(S, &a); break;
    case OP_CONCAT: n = lower_concat(S, &a); break;
    case OP_TRANSPOSE: n = lower_transpose(S, &a); break;
    case OP_SUM_TO: n = lower_sum(S, &a); break;
    case OP_FULL: n = lower_full(S, &a); break;
    case OP_TOP_K: n = lower_router(S, &a); break;
    case OP_MOE: n = lower_moe(S, &a); break;
    case OP_LOAD_BALANCE: n = lower_load_balance(S, &a); break;
    case OP_ADD_LOSS: n = lower_add_loss(S, &a); break;
    case OP_SOFTPLUS: n = lower_softplus(S, &a); break;
    case OP_CONV1D: n = lower_conv1d(S, &a); break;
    case OP_DELTA_RULE: n = lower_delta_rule(S, &a); break;
    case OP_SSD: n = lower_ssd(S, &a); break;
    default: break;
    }
    outs[0] = (Val){.node = n};
    return n ? 0 : -1;
}
