#include "runtime/backend/exec.h"

#include <stdlib.h>
#include <time.h>

#include "runtime/backend/kernels.h"
#include "common/storage.h"

ExecProfile *exec_profile;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t exec_elem_size(const Node *n, Precision prec) {
    if (n->dtype == DT_I32) return 4;
    return prec == PREC_F64 ? 8 : 4;
}

static int is_alias(const Node *n) { return n->op == OP_VIEW || n->op == OP_RESHAPE; }
static int is_bound(const Node *n) { return n->op == OP_INPUT || n->op == OP_PARAM; }

// A view or reshape's buffer: its operand's, at the view's element offset.
static void *alias_of(const PartState *ps, const Node *n) {
    size_t off = n->op == OP_VIEW ? (size_t)n->offset * exec_elem_size(n, ps->prec) : 0;
    return ps->val[n->in[0]->id] ? (char *)ps->val[n->in[0]->id] + off : NULL;
}

int exec_init(PartState *ps, const Part *part, Precision prec) {
    *ps = (PartState){.part = part, .prec = prec};
    int n = part->nodes.n;
    ps->val = calloc((size_t)n + 1, sizeof(void *));
    if (!ps->val) return -1;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const Node *nd = part->nodes.items[i];
        if (!is_alias(nd) && !is_bound(nd))
            total += ((size_t)shape_numel(&nd->shape) * exec_elem_size(nd, prec) + 63) & ~(size_t)63;
    }
    ps->owned = aligned_alloc(64, total ? total : 64);
    if (!ps->owned) {
        free(ps->val);
        return -1;
    }
    char *p = ps->owned;
    for (int i = 0; i < n; i++) {
        const Node *nd = part->nodes.items[i];
        if (is_alias(nd) || is_bound(nd)) continue;
        ps->val[i] = p;
        p += ((size_t)shape_numel(&nd->shape) * exec_elem_size(nd, prec) + 63) & ~(size_t)63;
    }
    return 0;
}

int exec_init_at(PartState *ps, const Part *part, Precision prec, char *base, const int64_t *offsets) {
    *ps = (PartState){.part = part, .prec = prec};
    ps->val = calloc((size_t)part->nodes.n + 1, sizeof(void *));
    if (!ps->val) return -1;
    for (int i = 0; i < part->nodes.n; i++) { // operands come before their users
        const Node *n = part->nodes.items[i];
        ps->val[i] = is_alias(n) ? alias_of(ps, n) : base + offsets[i];
    }
    return 0;
}

int exec_is_heavy(const Node *n) { return op_is_heavy(n->op); }

void exec_run(PartState *ps, int from, int to) { exec_run_flags(ps, from, to, 0); }

void exec_run_flags(PartState *ps, int from, int to, int flags) {
    void *in[64];
    for (int i = from; i < to; i++) {
        const Node *n = ps->part->nodes.items[i];
        if (is_bound(n) || ((flags & EXEC_SKIP_HEAVY) && exec_is_heavy(n))) continue;
        if (is_alias(n)) {
            ps->val[i] = alias_of(ps, n);
            continue;
        }
        for (int j = 0; j < n->nin && j < 63; j++) in[j] = ps->val[n->in[j]->id];
        in[n->nin < 63 ? n->nin : 63] = &ps->pool; // what a load-balancing loss reads after its operands
        double t0 = exec_profile ? now_s() : 0;
        if (ps->prec == PREC_F64) kernel_run_doc_starts_f64(n, ps->val[i], in, ps->seg_start);
        else kernel_run_doc_starts_f32(n, ps->val[i], in, ps->seg_start);
        if (ps->prec == PREC_F32) { // stored as bf16: rounded where it ends (common/storage.h)
            float *v = ps->val[i];  // (numel)
            for (int64_t k = 0; k < storage_rounded_elems(ps->compute, n); k++) v[k] = bf16_round(v[k]);
        }
        if (exec_profile) {
            exec_profile->seconds[n->op] += now_s() - t0;
            exec_profile->calls[n->op]++;
        }
    }
}

void exec_free(PartState *ps) {
    free(ps->owned);
    free(ps->val);
    *ps = (PartState){0};
}
