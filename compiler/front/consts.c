// consts.c: what sema.c (expressions, sections, statements) and ops.c (the
// op rules) both stand on, below both and calling neither: the lookups in
// sema's tables (config constants, parameters, locals, blocks), the
// compile-time number arithmetic, the functions of constants and the
// evaluator of constant expressions (eval_num), the call syntax helpers
// (find_kwarg, word_in_list) and node construction (new_node, const_node).
// sema.c lowers an op call's arguments and calls ops.c's rule with them;
// ops.c calls nothing above consts.c.
#include <math.h>
#include <string.h>

#include "compiler/front/sema.h"

// ---------------------------------------------------------------- names

// The last entry of the name: a derived block kind's overrides, pushed while
// it is lowered, shadow the config section's constant.
ConfigEntry *find_config(Sema *S, const char *name) {
    for (int i = S->config.n - 1; i >= 0; i--) {
        ConfigEntry *c = S->config.items[i];
        if (!strcmp(c->name, name)) return c;
    }
    return NULL;
}

// Inside a block, block parameters are those of the kind being lowered.
int find_param(Sema *S, const char *name, int in_block) {
    for (int i = 0; i < S->g->params.n; i++) {
        Param *p = S->g->params.items[i];
        if (in_block && S->in_block && p->kind != S->kind) continue;
        if (p->in_block == in_block && !strcmp(p->name, name)) return i;
    }
    return -1;
}

Local *find_local(Sema *S, const char *name) {
    for (int i = 0; i < S->locals.n; i++) {
        Local *l = S->locals.items[i];
        if (!strcmp(l->name, name)) return l;
    }
    return NULL;
}

// The first block declared as `name`, or NULL.
const BlockDecl *find_block(Sema *S, const char *name) {
    for (int i = 0; i < S->m->blocks.n; i++) {
        const BlockDecl *b = S->m->blocks.items[i];
        if (!strcmp(b->name, name)) return b;
    }
    return NULL;
}

int is_bt(const char *name) { return !strcmp(name, "B") || !strcmp(name, "T"); }

// ---------------------------------------------------------------- constants

static int int_op_overflows(int op, int64_t a, int64_t b, int64_t *r) {
    switch (op) {
    case '+': return __builtin_add_overflow(a, b, r);
    case '-': return __builtin_sub_overflow(a, b, r);
    case '*': return __builtin_mul_overflow(a, b, r);
    default: return 0;
    }
}

int num_binary(Sema *S, int op, Loc loc, Num a, Num b, Num *out) {
    if (op == '@') {
        diag_error(S->d, loc, "'@' multiplies tensors; both sides here are constants");
        return -1;
    }
    if ((op == '/' || op == '%') && (b.is_int ? b.i == 0 : b.f == 0.0)) {
        diag_error(S->d, loc, "division by zero");
        return -1;
    }
    if (a.is_int && b.is_int) {
        int64_t r = 0;
        if (op == '/' || op == '%') {
            if (a.i == INT64_MIN && b.i == -1) {
                diag_error(S->d, loc, "integer overflow");
                return -1;
            }
            if (op == '/' && a.i % b.i != 0) {
                diag_error(S->d, loc,
                           "%lld / %lld is not a whole number; integer division must be exact "
                           "(write %lld.0 / %lld for a fraction)",
                           (long long)a.i, (long long)b.i, (long long)a.i, (long long)b.i);
                return -1;
            }
            r = op == '/' ? a.i / b.i : a.i % b.i;
        } else if (int_op_overflows(op, a.i, b.i, &r)) {
            diag_error(S->d, loc, "integer overflow in %lld %c %lld", (long long)a.i, op, (long long)b.i);
            return -1;
        }
        *out = (Num){.is_int = 1, .i = r, .f = (double)r};
        return 0;
    }
    if (op == '%') {
        diag_error(S->d, loc, "'%%' needs two integers");
        return -1;
    }
    double r = op == '+' ? a.f + b.f : op == '-' ? a.f - b.f : op == '*' ? a.f * b.f : a.f / b.f;
    if (!isfinite(r)) {
        diag_error(S->d, loc, "the result is not a finite number");
        return -1;
    }
    *out = (Num){.is_int = 0, .f = r};
    return 0;
}

// A name used where a constant is needed but which names something else.
static void not_a_constant(Sema *S, const Expr *e) {
    if (!S->in_block && find_param(S, e->str, 1) >= 0)
        diag_error(S->d, e->loc, "'%s' is a parameter of block '%s'; only the block can use it", e->str, S->block_name);
    else if (find_param(S, e->str, 0) >= 0 || find_param(S, e->str, 1) >= 0 || find_local(S, e->str))
        diag_error(S->d, e->loc, "'%s' is a tensor; expected a constant number", e->str);
    else if (is_bt(e->str))
        diag_error(S->d, e->loc, "'%s' (the %s) cannot be used in %s", e->str,
                   e->str[0] == 'B' ? "batch size" : "sequence length", S->bt_unavailable_in);
    else diag_error(S->d, e->loc, "undefined name '%s'", e->str);
}

// The functions of constants, in the config and wherever a constant is
// expected: sqrt ln log exp pow min max floor ceil abs.
static const char CONST_FUNCTIONS[] = "sqrt ln log exp pow min max floor ceil abs";

int is_const_function(const char *name) { return word_in_list(CONST_FUNCTIONS, name); }

// Whether e is a constant expression (literals, config constants, B and T
// where bound, and operators and constant functions of them), without
// reporting anything.
int is_const_expr(Sema *S, const Expr *e) {
    switch (e->kind) {
    case EXPR_INT:
    case EXPR_FLOAT: return 1;
    case EXPR_NAME: return find_config(S, e->str) || (S->have_bt && is_bt(e->str));
    case EXPR_NEG: return is_const_expr(S, e->lhs);
    case EXPR_BINARY: return is_const_expr(S, e->lhs) && is_const_expr(S, e->rhs);
    case EXPR_CALL:
        if (!is_const_function(e->str) || e->items.n == 0) return 0;
        for (int i = 0; i < e->items.n; i++)
            if (!is_const_expr(S, e->items.items[i])) return 0;
        return 1;
    default: return 0;
    }
}

static int num_finite(Sema *S, const Expr *e, double r, Num *out) {
    if (!isfinite(r)) {
        diag_error(S->d, e->loc, "%s(...) is not a finite number here", e->str);
        return -1;
    }
    *out = (Num){.f = r};
    return 0;
}

// A number that is a whole number, as an integer (floor, ceil).
static int num_whole(Sema *S, const Expr *e, double r, Num *out) {
    if (!(r >= -9.2e18 && r <= 9.2e18)) {
        diag_error(S->d, e->loc, "%s(...) = %g does not fit an integer", e->str, r);
        return -1;
    }
    *out = (Num){.is_int = 1, .i = (int64_t)r, .f = r};
    return 0;
}

// A call of a constant function.
static int eval_call(Sema *S, const Expr *e, Num *out) {
    const char *f = e->str;
    if (!is_const_function(f)) {
        diag_error(S->d, e->loc, "'%s(...)' is not a constant; expected a number (the functions of constants are %s)",
                   f, "sqrt, ln, log, exp, pow, min, max, floor, ceil and abs");
        return -1;
    }
    int two = !strcmp(f, "pow"), many = !strcmp(f, "min") || !strcmp(f, "max");
    int n = e->items.n;
    if (two ? n != 2 : many ? n < 2 : n != 1) {
        diag_error(S->d, e->loc, "%s takes %s; got %d", f,
                   two    ? "two arguments, pow(x, y)"
                   : many ? "two or more numbers"
                          : "one number",
                   n);
        return -1;
    }
    Num x[2];
    for (int i = 0; i < n; i++) {
        const Expr *a = e->items.items[i];
        if (a->kind == EXPR_KWARG) {
            diag_error(S->d, a->loc, "%s takes positional arguments only", f);
            return -1;
        }
        Num v;
        if (eval_num(S, a, &v) != 0) return -1;
        if (i < 2) x[i] = v;
        if (many && i > 0) { // min, max: integers stay integers
            int lt = x[0].is_int && v.is_int ? v.i < x[0].i : v.f < x[0].f;
            int gt = x[0].is_int && v.is_int ? v.i > x[0].i : v.f > x[0].f;
            int all_int = x[0].is_int && v.is_int;
            if ((f[1] == 'i' && lt) || (f[1] == 'a' && gt)) x[0] = v;
            if (!all_int) x[0] = (Num){.f = x[0].f};
        }
    }
    if (many) {
        *out = x[0];
        return 0;
    }
    double v = x[0].f;
    if (!strcmp(f, "sqrt") || !strcmp(f, "ln") || !strcmp(f, "log")) {
        if (f[0] == 's' ? v < 0 : v <= 0) {
            diag_error(S->d, e->loc, "%s of %s (%g)", f,
                       f[0] == 's' ? "a negative number" : "a number that is not positive", v);
            return -1;
        }
        return num_finite(S, e, f[0] == 's' ? sqrt(v) : log(v), out);
    }
    if (!strcmp(f, "exp")) return num_finite(S, e, exp(v), out);
    if (!strcmp(f, "floor")) return x[0].is_int ? (*out = x[0], 0) : num_whole(S, e, floor(v), out);
    if (!strcmp(f, "ceil")) return x[0].is_int ? (*out = x[0], 0) : num_whole(S, e, ceil(v), out);
    if (!strcmp(f, "abs")) {
        if (!x[0].is_int) return num_finite(S, e, fabs(v), out);
        if (x[0].i == INT64_MIN) {
            diag_error(S->d, e->loc, "integer overflow");
            return -1;
        }
        *out = (Num){.is_int = 1, .i = x[0].i < 0 ? -x[0].i : x[0].i, .f = fabs(v)};
        return 0;
    }
    // pow: two integers with a non-negative exponent give an exact integer
    if (x[0].is_int && x[1].is_int && x[1].i >= 0) {
        Num r = {.is_int = 1, .i = 1, .f = 1};
        if (x[0].i == 0 || x[0].i == 1 || x[0].i == -1) // no overflow, however large the exponent
            r.i = x[1].i == 0 ? 1 : x[0].i == -1 && x[1].i % 2 == 0 ? 1 : x[0].i;
        else
            for (int64_t k = 0; k < x[1].i; k++)
                if (int_op_overflows('*', r.i, x[0].i, &r.i)) {
                    diag_error(S->d, e->loc,
                               "pow(%lld, %lld) overflows a 64-bit integer (pow(%lld.0, %lld) is a number)",
                               (long long)x[0].i, (long long)x[1].i, (long long)x[0].i, (long long)x[1].i);
                    return -1;
                }
        *out = (Num){.is_int = 1, .i = r.i, .f = (double)r.i};
        return 0;
    }
    return num_finite(S, e, pow(x[0].f, x[1].f), out);
}

int eval_num(Sema *S, const Expr *e, Num *out) {
    switch (e->kind) {
    case EXPR_INT: *out = (Num){.is_int = 1, .i = e->ival, .f = (double)e->ival}; return 0;
    case EXPR_FLOAT: *out = (Num){.f = e->fval}; return 0;
    case EXPR_NAME: {
        ConfigEntry *c = find_config(S, e->str);
        if (c) {
            *out = c->v;
            return 0;
        }
        if (S->have_bt && is_bt(e->str)) {
            int64_t v = e->str[0] == 'B' ? S->B : S->T;
            *out = (Num){.is_int = 1, .i = v, .f = (double)v};
            return 0;
        }
        not_a_constant(S, e);
        return -1;
    }
    case EXPR_NEG: {
        if (eval_num(S, e->lhs, out) != 0) return -1;
        if (out->is_int && out->i == INT64_MIN) {
            diag_error(S->d, e->loc, "integer overflow");
            return -1;
        }
        out->i = -out->i;
        out->f = -out->f;
        return 0;
    }
    case EXPR_BINARY: {
        Num a, b;
        if (eval_num(S, e->lhs, &a) != 0 || eval_num(S, e->rhs, &b) != 0) return -1;
        return num_binary(S, e->op, e->loc, a, b, out);
    }
    case EXPR_CALL: return eval_call(S, e, out);
    default: diag_error(S->d, e->loc, "expected a number"); return -1;
    }
}

// ---------------------------------------------------------------- calls

const Expr *find_kwarg(const Expr *call, const char *name) {
    for (int i = 0; i < call->items.n; i++) {
        const Expr *a = call->items.items[i];
        if (a->kind == EXPR_KWARG && !strcmp(a->str, name)) return a->lhs;
    }
    return NULL;
}

int word_in_list(const char *list, const char *w) {
    size_t n = strlen(w);
    for (const char *p = strstr(list, w); p; p = strstr(p + 1, w))
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

// ---------------------------------------------------------------- nodes

Node *new_node(Sema *S, OpKind op, DType dt, const Shape *shape, Loc loc, int nin, Node **in) {
    return graph_add_node(S->a, &S->g->parts[S->part], S->part, op, dt, shape, loc, nin, in);
}

Node *const_node(Sema *S, double v, Loc loc) {
    Node *n = new_node(S, OP_CONST, DT_F32, NULL, loc, 0, NULL);
    if (n) n->value = v;
    return n;
}
