// kir_eval.c: the kernel IR interpreter of kir_eval.h.
#include "tests/kir_eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"

// One statement's value: floats of each width and integers (bools as 0/1).
typedef union Val {
    float f;
    double d;
    int64_t i;
} Val;

static Val eval_unary(const KirStmt *s, Val a, int ta) {
    Val r = {0};
    int t = s->type;
    switch (s->op) {
    case KOP_NEG:
        if (t == KT_F32) r.f = -a.f;
        else if (t == KT_F64) r.d = -a.d;
        else r.i = -a.i;
        break;
    case KOP_EXP:
        if (t == KT_F32) r.f = expf(a.f);
        else r.d = exp(a.d);
        break;
    case KOP_LOG:
        if (t == KT_F32) r.f = logf(a.f);
        else r.d = log(a.d);
        break;
    case KOP_SQRT:
        if (t == KT_F32) r.f = sqrtf(a.f);
        else r.d = sqrt(a.d);
        break;
    case KOP_SIN:
        if (t == KT_F32) r.f = sinf(a.f);
        else r.d = sin(a.d);
        break;
    case KOP_COS:
        if (t == KT_F32) r.f = cosf(a.f);
        else r.d = cos(a.d);
        break;
    case KOP_RBF16: r.f = bf16_round(a.f); break;
    default: { // CVT
        double x = ta == KT_F32 ? a.f : ta == KT_F64 ? a.d : (double)a.i;
        if (t == KT_F32) r.f = ta == KT_F64 ? (float)a.d : ta == KT_F32 ? a.f : (float)a.i;
        else if (t == KT_F64) r.d = x;
        else r.i = ta == KT_F32 || ta == KT_F64 ? (int64_t)x : a.i;
    }
    }
    return r;
}

static Val eval_binary(int op, int t, Val a, Val b) {
    Val r = {0};
    if (t == KT_F32) {
        float x = a.f, y = b.f;
        switch (op) {
        case KOP_ADD: r.f = x + y; break;
        case KOP_SUB: r.f = x - y; break;
        case KOP_MUL: r.f = x * y; break;
        case KOP_DIV: r.f = x / y; break;
        case KOP_MIN: r.f = x < y || x != x ? x : y; break;
        case KOP_MAX: r.f = x > y || x != x ? x : y; break;
        case KOP_POW: r.f = powf(x, y); break;
        }
    } else if (t == KT_F64) {
        double x = a.d, y = b.d;
        switch (op) {
        case KOP_ADD: r.d = x + y; break;
        case KOP_SUB: r.d = x - y; break;
        case KOP_MUL: r.d = x * y; break;
        case KOP_DIV: r.d = x / y; break;
        case KOP_MIN: r.d = x < y || x != x ? x : y; break;
        case KOP_MAX: r.d = x > y || x != x ? x : y; break;
        case KOP_POW: r.d = pow(x, y); break;
        }
    } else {
        int64_t x = a.i, y = b.i;
        switch (op) {
        case KOP_ADD: r.i = x + y; break;
        case KOP_SUB: r.i = x - y; break;
        case KOP_MUL: r.i = x * y; break;
        case KOP_DIV: r.i = x / y; break;
        case KOP_REM: r.i = x % y; break;
        case KOP_MIN: r.i = x < y ? x : y; break;
        case KOP_MAX: r.i = x > y ? x : y; break;
        }
        if (t == KT_I32) r.i = (int32_t)r.i;
    }
    return r;
}

static int compare(int t, int op, Val a, Val b) {
    double x = t == KT_F32 ? a.f : t == KT_F64 ? a.d : 0, y = t == KT_F32 ? b.f : t == KT_F64 ? b.d : 0;
    if (t != KT_F32 && t != KT_F64) return op == KOP_LT ? a.i < b.i : op == KOP_LE ? a.i <= b.i : a.i == b.i;
    return op == KOP_LT ? x < y : op == KOP_LE ? x <= y : x == y;
}

// The plain reference of an expression kernel: its statements, row by row,
// column by column, in order; after all rows, KA_ACC64 scratch / divisor.
void kir_eval(const KirKernel *k, HostArg *args) {
    Val *v = calloc((size_t)k->nstmts, sizeof *v);
    for (int64_t row = 0; row < k->rows; row++) {
        int i = 0;
        while (i < k->nstmts) {
            int l = k->stmts[i].loop, end = i;
            while (end < k->nstmts && k->stmts[end].loop == l) end++;
            int64_t ncol = l ? k->cols[l - 1] : 1;
            for (int j = i; j < end; j++) { // reductions start empty
                const KirStmt *s = &k->stmts[j];
                if (s->op == KOP_RSUM) v[j] = (Val){0};
                if (s->op == KOP_RMAX) {
                    if (s->type == KT_F32) v[j].f = -INFINITY;
                    else if (s->type == KT_F64) v[j].d = -INFINITY;
                    else v[j].i = INT64_MIN;
                }
            }
            for (int64_t col = 0; col < ncol; col++)
                for (int j = i; j < end; j++) {
                    const KirStmt *s = &k->stmts[j];
                    int t = s->type;
                    Val a = s->a >= 0 && s->a < j ? v[s->a] : (Val){0}, b = s->b >= 0 && s->b < j ? v[s->b] : (Val){0},
                        c = s->c >= 0 && s->c < j ? v[s->c] : (Val){0};
                    switch (s->op) {
                    case KOP_CONST:
                        if (t == KT_F32) v[j].f = (float)s->value;
                        else if (t == KT_F64) v[j].d = s->value;
                        else v[j].i = (int64_t)s->value;
                        break;
                    case KOP_ROW: v[j].i = row; break;
                    case KOP_COL: v[j].i = col; break;
                    case KOP_LOAD:
                        if (t == KT_F32) v[j].f = args[s->a].f[b.i];
                        else v[j].i = args[s->a].i[b.i];
                        break;
                    case KOP_NEG:
                    case KOP_EXP:
                    case KOP_LOG:
                    case KOP_SQRT:
                    case KOP_SIN:
                    case KOP_COS:
                    case KOP_CVT:
                    case KOP_RBF16: v[j] = eval_unary(s, a, k->stmts[s->a].type); break;
                    case KOP_LT:
                    case KOP_LE:
                    case KOP_EQ: v[j].i = compare(k->stmts[s->a].type, s->op, a, b); break;
                    case KOP_SELECT: v[j] = a.i ? b : c; break;
                    case KOP_RSUM: v[j] = eval_binary(KOP_ADD, t, v[j], a); break;
                    case KOP_RMAX: v[j] = eval_binary(KOP_MAX, t, v[j], a); break;
                    case KOP_STORE: // a bf16 argument stores the value rounded, as the generated code does
                        if (k->stmts[s->c].type == KT_F32)
                            args[s->a].f[b.i] = k->args[s->a].dtype == KT_BF16 ? bf16_round(c.f) : c.f;
                        else args[s->a].i[b.i] = (int32_t)c.i;
                        break;
                    case KOP_ACC:
                        if (k->args[s->a].access & KA_ACC64) args[s->a].acc[b.i] += c.d;
                        else if (k->args[s->a].dtype == KT_BF16)
                            args[s->a].f[b.i] = bf16_round(args[s->a].f[b.i] + c.f);
                        else args[s->a].f[b.i] += c.f;
                        break;
                    default: v[j] = eval_binary(s->op, t, a, b);
                    }
                }
            i = end;
        }
    }
    for (int i = 0; i < k->nargs; i++)
        if (k->args[i].access & KA_ACC64)
            for (int64_t j = 0; j < k->args[i].numel; j++) {
                float f = (float)(args[i].acc[j] / k->args[i].divisor);
                args[i].f[j] = k->args[i].dtype == KT_BF16 ? bf16_round(f) : f;
            }
    free(v);
}

void kir_fill_args(const KirKernel *k, HostArg *h, float (*rand)(void)) {
    for (int i = 0; i < k->nargs; i++) {
        const KirArg *a = &k->args[i];
        size_t n = (size_t)a->numel;
        h[i].f = a->dtype != KT_I32 ? calloc(n + 1, 4) : NULL; // f32, or bf16 values held as f32
        h[i].i = a->dtype == KT_I32 ? calloc(n + 1, 4) : NULL;
        h[i].acc = a->access & KA_ACC64 ? calloc(n + 1, 8) : NULL;
        if (a->access & KA_READ)
            for (size_t j = 0; j < n; j++) {
                if (h[i].f) h[i].f[j] = a->dtype == KT_BF16 ? bf16_round(rand()) : rand();
                else h[i].i[j] = rand() > 0;
            }
    }
}

void kir_free_args(const KirKernel *k, HostArg *h) {
    for (int i = 0; i < k->nargs; i++) free(h[i].f), free(h[i].i), free(h[i].acc);
}

size_t kir_arg_bytes(const KirArg *a) {
    return (size_t)a->numel * (a->access & KA_ACC64 ? 8 : a->dtype == KT_BF16 ? 2 : 4);
}

size_t kir_arg_out_bytes(const KirArg *a) { return (size_t)a->numel * (a->dtype == KT_BF16 ? 2 : 4); }

void kir_arg_pack(const KirArg *a, const HostArg *h, void *dst) {
    size_t n = (size_t)a->numel;
    if (a->access & KA_ACC64) memset(dst, 0, 8 * n);
    else if (a->dtype == KT_I32) memcpy(dst, h->i, 4 * n);
    else if (a->dtype == KT_F32) memcpy(dst, h->f, 4 * n);
    else
        for (size_t j = 0; j < n; j++) ((uint16_t *)dst)[j] = bf16_from_f32(h->f[j]);
}

double kir_arg_error(const KirArg *a, const void *got, const HostArg *want) {
    size_t n = (size_t)a->numel;
    if (a->dtype == KT_I32) return memcmp(got, want->i, 4 * n) ? INFINITY : 0;
    // An f32 accumulation (scatter-add, column sums) runs in whatever order the device's atomics
    // take: its error scales with the sum's terms, not with a sum that cancels. Its floor is
    // the largest value it holds (normwise), where others' is 1e-2.
    double floor = 1e-2, m = 0;
    for (size_t j = 0; (a->access & KA_ACC32) && j < n; j++) floor = fmax(floor, fabs(want->f[j]));
    for (size_t j = 0; j < n; j++) {
        float g = a->dtype == KT_BF16 ? f32_from_bf16(((const uint16_t *)got)[j]) : ((const float *)got)[j];
        double d = fabs((double)g - want->f[j]) / fmax(fabs((double)want->f[j]), floor);
        if (!(d <= m) && m == m) m = d; // NaN sticks
    }
    return m;
}

double kir_arg_tolerance(const KirArg *a) { return a->dtype == KT_BF16 ? 1e-2 : 1e-4; }

// The number after `key` at p, when at least cap, rewritten as `to` in place
// (padded with spaces); 1 when rewritten.
static int cap_number(char *p, const char *key, long long cap, long long to) {
    char *num = p + strlen(key), *end;
    long long v = strtoll(num, &end, 10);
    if (end == num || v < cap) return 0;
    int w = snprintf(num, (size_t)(end - num) + 1, "%lld", to);
    memset(num + w, ' ', (size_t)(end - num - w));
    return 1;
}

int kir_cap_vocab(char *text, long long cap) {
    int capped = 0;
    for (char *p = text; cap > 0 && (p = strstr(p, "V = ")); p++) {
        if (p != text && p[-1] != ' ' && p[-1] != '\n') continue;
        capped = cap_number(p, "V = ", cap + 1, cap);
        break;
    }
    for (char *p = text; capped && (p = strstr(p, "padding_idx = ")); p++) // a row of the capped table
        cap_number(p, "padding_idx = ", cap, cap - 1);
    return capped;
}
