// verify.c: the arena as a list of intervals, each labelled with the value
// it holds (a node of a part for a layer, a stretch of host weights, a
// model input) and the instruction that wrote it. Instructions are
// simulated in stream order; a read checks the labels under it.
#include "verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { V_NODE, V_WEIGHTS, V_INPUT } ValueKind;

// What a byte range holds. Ranges of one value are linear: `at` is the
// position of the range's first byte inside the value (bytes into the
// node's buffer, floats into the host store, bytes into the model input).
typedef struct Label {
    int kind;      // ValueKind
    int part, node; // V_NODE; V_INPUT: node is the input's index
    int64_t layer; // V_NODE: which layer's value (-1 outside the block)
    int64_t at;
    int writer;    // the instruction that wrote it
} Label;

typedef struct Span {
    int64_t lo, hi; // arena bytes [lo, hi)
    Label l;
} Span;

typedef struct Spans {
    Span *s; // sorted, disjoint
    int n, cap;
} Spans;

static int spans_reserve(Spans *a, int extra) {
    if (a->n + extra <= a->cap) return 0;
    int cap = a->cap ? a->cap * 2 : 256;
    while (cap < a->n + extra) cap *= 2;
    Span *s = realloc(a->s, (size_t)cap * sizeof *s);
    if (!s) return -1;
    a->s = s;
    a->cap = cap;
    return 0;
}

// Labels [lo, hi) with l (l.at for lo, advancing with the bytes; weights
// advance in floats), replacing what was there.
static int spans_write(Spans *a, int64_t lo, int64_t hi, Label l) {
    if (lo >= hi) return 0;
    if (spans_reserve(a, 3) != 0) return -1;
    int i = 0;
    while (i < a->n && a->s[i].hi <= lo) i++;
    // split a span that starts before lo
    if (i < a->n && a->s[i].lo < lo) {
        Span right = a->s[i];
        right.l.at += right.l.kind == V_WEIGHTS ? (lo - right.lo) / 4 : lo - right.lo;
        right.lo = lo;
        a->s[i].hi = lo;
        memmove(&a->s[i + 2], &a->s[i + 1], (size_t)(a->n - i - 1) * sizeof(Span));
        a->s[i + 1] = right;
        a->n++;
        i++;
    }
    // drop spans inside [lo, hi), trim one that ends after hi
    int j = i;
    while (j < a->n && a->s[j].hi <= hi) j++;
    if (j < a->n && a->s[j].lo < hi) {
        a->s[j].l.at += a->s[j].l.kind == V_WEIGHTS ? (hi - a->s[j].lo) / 4 : hi - a->s[j].lo;
        a->s[j].lo = hi;
    }
    memmove(&a->s[i + 1], &a->s[j], (size_t)(a->n - j) * sizeof(Span));
    a->n -= j - i - 1;
    a->s[i] = (Span){.lo = lo, .hi = hi, .l = l};
    return 0;
}

typedef struct V {
    const Plan *p;
    Spans arena;
    char *err;
    size_t errcap;
    const Instr *ins; // the stream being checked
    const char *stream;
} V;

static void describe_instr(const V *v, int i, char *buf, size_t cap) {
    if (i < 0) {
        snprintf(buf, cap, "nothing (never written)");
        return;
    }
    const Instr *in = &v->ins[i];
    static const char *const NAMES[] = {"copy_in", "copy_out", "copy", "input", "run", "loss"};
    if (in->kind == INS_RUN)
        snprintf(buf, cap, "instruction %d (run %s nodes %d..%d, layer %d)", i, part_name((PartKind)in->part), in->from,
                 in->to - 1, in->layer);
    else
        snprintf(buf, cap, "instruction %d (%s, layer %d)", i, in->kind < INS_COUNT ? NAMES[in->kind] : "?", in->layer);
}

static void describe_label(const V *v, const Label *l, char *buf, size_t cap) {
    if (l->kind < 0) {
        snprintf(buf, cap, "a value the graph cannot provide (no gradient reaches it)");
    } else if (l->kind == V_WEIGHTS) {
        const Plan *p = v->p;
        if (l->at < p->host_global)
            snprintf(buf, cap, "global weights from host float %lld", (long long)l->at);
        else
            snprintf(buf, cap, "layer %lld's weights from host float %lld",
                     (long long)((l->at - p->host_global) / (p->host_layer ? p->host_layer : 1)), (long long)l->at);
    } else if (l->kind == V_INPUT) {
        snprintf(buf, cap, "model input %d", l->node);
    } else {
        const Node *n = v->p->graph->parts[l->part].nodes.items[l->node];
        snprintf(buf, cap, "%s %%%d%s%s of layer %lld", part_name((PartKind)l->part), l->node, n->name ? " " : "",
                 n->name ? n->name : "", (long long)l->layer);
    }
}

// Checks that [lo, lo + bytes) holds `want` (from want.at on) throughout.
static int check_read(V *v, int reader, int64_t lo, int64_t bytes, Label want, const char *what) {
    int64_t pos = lo, hi = lo + bytes;
    for (int i = 0; i < v->arena.n && pos < hi; i++) {
        const Span *s = &v->arena.s[i];
        if (s->hi <= pos) continue;
        Label expect = want;
        expect.at += want.kind == V_WEIGHTS ? (pos - lo) / 4 : pos - lo;
        Label have = s->l;
        if (s->lo > pos) have = (Label){.kind = -1, .writer = -1};
        else have.at += have.kind == V_WEIGHTS ? (pos - s->lo) / 4 : pos - s->lo;
        int same = have.kind == expect.kind && have.at == expect.at &&
                   (expect.kind != V_NODE || (have.part == expect.part && have.node == expect.node &&
                                              have.layer == expect.layer)) &&
                   (expect.kind != V_INPUT || have.node == expect.node);
        if (!same) {
            char r[160], w[160], hl[160], el[160];
            describe_instr(v, reader, r, sizeof r);
            describe_instr(v, have.writer, w, sizeof w);
            describe_label(v, &expect, el, sizeof el);
            if (have.kind < 0) snprintf(hl, sizeof hl, "nothing");
            else describe_label(v, &have, hl, sizeof hl);
            snprintf(v->err, v->errcap,
                     "plan verifier: %s stream: %s reads %s (%s) at arena byte %lld, which holds %s written by %s",
                     v->stream, r, what, el, (long long)pos, hl, w);
            return -1;
        }
        pos = s->hi;
    }
    if (pos < hi) {
        char r[160], el[160];
        describe_instr(v, reader, r, sizeof r);
        describe_label(v, &want, el, sizeof el);
        snprintf(v->err, v->errcap, "plan verifier: %s stream: %s reads %s (%s) at arena byte %lld, which was never written",
                 v->stream, r, what, el, (long long)pos);
        return -1;
    }
    return 0;
}

// Where a node's data is: its base node (views and reshapes followed) and
// the byte offset into it.
static const Node *base_of(const Node *n, int64_t *off) {
    *off = 0;
    while (n->op == OP_VIEW || n->op == OP_RESHAPE) {
        if (n->op == OP_VIEW) *off += n->offset * 4;
        n = n->in[0];
    }
    return n;
}

static int64_t addr_of(const Plan *p, const Node *n) {
    int64_t off;
    const Node *b = base_of(n, &off);
    return p->node_offset[b->part][b->id] + off;
}

static const Node *output_of(const Plan *p, PartKind pk) { return p->graph->parts[pk].output; }

// The value an input node of part pk must hold when the part runs for layer.
static Label input_value(const Plan *p, const Node *n, int64_t layer) {
    const Graph *g = p->graph;
    int64_t off = 0;
    if (n->src_part == SRC_MODEL_INPUT) return (Label){.kind = V_INPUT, .node = n->src};
    if (n->src_part == SRC_GRAD_SEED) { // d loss / d output of this part
        PartKind part = n->part == PART_BLOCK && layer == g->layers - 1 ? PART_TAIL : PART_BLOCK;
        int64_t src_layer = part == PART_TAIL ? -1 : n->part == PART_BLOCK ? layer + 1 : 0;
        const Node *x = part_input_from(&g->parts[part], part == PART_TAIL ? PART_BLOCK : PART_HEAD);
        const Grad *gr = x ? part_grad_of(&g->parts[part], x) : NULL;
        if (!gr || !gr->grad) return (Label){.kind = -1}; // matches nothing: the read is refused
        const Node *b = base_of(gr->grad, &off);
        return (Label){.kind = V_NODE, .part = part, .node = b->id, .layer = src_layer, .at = off};
    }
    // a value of another part: the head's output or the previous layer's
    if (n->part == PART_BLOCK) {
        const Node *b = base_of(layer == 0 ? output_of(p, PART_HEAD) : output_of(p, PART_BLOCK), &off);
        return (Label){.kind = V_NODE, .part = layer == 0 ? PART_HEAD : PART_BLOCK, .node = b->id,
                       .layer = layer == 0 ? -1 : layer - 1, .at = off};
    }
    const Node *b = base_of(output_of(p, PART_BLOCK), &off); // the tail reads the last layer's output
    return (Label){.kind = V_NODE, .part = PART_BLOCK, .node = b->id, .layer = g->layers - 1, .at = off};
}

static int64_t store_float(const Plan *p, const Param *prm, int param, int64_t layer) {
    return (prm->in_block ? p->host_global + layer * p->host_layer : 0) + p->param_offset[param];
}

// The value node n (a base node) must hold when part runs for layer.
static Label value_of(const Plan *p, const Node *n, int64_t layer) {
    if (n->op == OP_PARAM) {
        const Param *prm = p->graph->params.items[n->param];
        return (Label){.kind = V_WEIGHTS, .at = store_float(p, prm, n->param, layer < 0 ? 0 : layer)};
    }
    if (n->op == OP_INPUT) return input_value(p, n, layer);
    return (Label){.kind = V_NODE, .part = n->part, .node = n->id, .layer = layer};
}

static int verify_run(V *v, int i, const Instr *in) {
    const Plan *p = v->p;
    const Part *part = &p->graph->parts[in->part];
    int64_t layer = in->part == PART_BLOCK ? in->layer : -1;
    for (int k = in->from; k < in->to; k++) {
        const Node *n = part->nodes.items[k];
        if (n->op == OP_VIEW || n->op == OP_RESHAPE || n->op == OP_INPUT || n->op == OP_PARAM) continue;
        for (int j = 0; j < n->nin; j++) { // every operand: the right value, of this layer
            int64_t off;
            const Node *b = base_of(n->in[j], &off);
            Label want = value_of(p, b, layer);
            want.at += want.kind == V_WEIGHTS ? off / 4 : off;
            char what[128];
            snprintf(what, sizeof what, "operand %d of %%%d %s, %s%s%s", j, n->id, op_name(n->op), op_name(b->op),
                     b->name ? " " : "", b->name ? b->name : "");
            if (check_read(v, i, addr_of(p, n->in[j]), shape_numel(&n->in[j]->shape) * 4, want, what) != 0) return -1;
        }
        int64_t at = p->node_offset[in->part][n->id];
        Label out = {.kind = V_NODE, .part = in->part, .node = n->id, .layer = layer, .writer = i};
        if (spans_write(&v->arena, at, at + shape_numel(&n->shape) * 4, out) != 0) return -2;
    }
    return 0;
}

// COPY_OUT must read the gradient of the parameter its host range names.
static int verify_copy_out(V *v, int i, const Instr *in) {
    const Plan *p = v->p;
    const Graph *g = p->graph;
    for (int pk = 0; pk < PART_COUNT; pk++) {
        const Part *part = &g->parts[pk];
        for (int k = 0; k < part->grads.n; k++) {
            const Grad *gr = part->grads.items[k];
            if (gr->of->op != OP_PARAM || !gr->grad) continue;
            const Param *prm = g->params.items[gr->of->param];
            if (prm->in_block != (in->layer >= 0) ||
                store_float(p, prm, gr->of->param, in->layer < 0 ? 0 : in->layer) != in->dst ||
                addr_of(p, gr->grad) != in->src)
                continue;
            int64_t off;
            const Node *b = base_of(gr->grad, &off);
            Label want = {.kind = V_NODE, .part = pk, .node = b->id, .layer = pk == PART_BLOCK ? in->layer : -1, .at = off};
            char what[96];
            snprintf(what, sizeof what, "the gradient of '%s'", prm->name);
            return check_read(v, i, in->src, in->bytes, want, what);
        }
    }
    char r[160];
    describe_instr(v, i, r, sizeof r);
    snprintf(v->err, v->errcap, "plan verifier: %s stream: %s copies out something that is no parameter's gradient",
             v->stream, r);
    return -1;
}

// Copies the labels of [src, src + bytes) to dst.
static int copy_labels(V *v, int i, const Instr *in) {
    Spans *a = &v->arena;
    int64_t lo = in->src, hi = in->src + in->bytes;
    Span *moved = malloc((size_t)(a->n + 1) * sizeof(Span));
    if (!moved) return -2;
    int n = 0;
    for (int k = 0; k < a->n; k++) {
        const Span *s = &a->s[k];
        if (s->hi <= lo || s->lo >= hi) continue;
        Span c = *s;
        if (c.lo < lo) {
            c.l.at += c.l.kind == V_WEIGHTS ? (lo - c.lo) / 4 : lo - c.lo;
            c.lo = lo;
        }
        if (c.hi > hi) c.hi = hi;
        c.lo += in->dst - in->src;
        c.hi += in->dst - in->src;
        moved[n++] = c;
    }
    // what was never written stays unwritten at the destination too
    int rc = spans_write(a, in->dst, in->dst + in->bytes, (Label){.kind = -1, .writer = i});
    for (int k = 0; rc == 0 && k < n; k++) rc = spans_write(a, moved[k].lo, moved[k].hi, moved[k].l);
    free(moved);
    (void)i;
    return rc == 0 ? 0 : -2;
}

static int verify_stream(V *v, const Instr *ins, int n, const char *name) {
    v->ins = ins;
    v->stream = name;
    v->arena.n = 0;
    const Plan *p = v->p;
    for (int i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        int rc = 0;
        switch ((InsKind)in->kind) {
        case INS_COPY_IN:
            rc = spans_write(&v->arena, in->dst, in->dst + in->bytes, (Label){.kind = V_WEIGHTS, .at = in->src, .writer = i});
            break;
        case INS_INPUT:
            rc = spans_write(&v->arena, in->dst, in->dst + in->bytes, (Label){.kind = V_INPUT, .node = in->input, .writer = i});
            break;
        case INS_COPY: rc = copy_labels(v, i, in); break;
        case INS_RUN: rc = verify_run(v, i, in); break;
        case INS_COPY_OUT: rc = verify_copy_out(v, i, in); break;
        case INS_LOSS: {
            int64_t off;
            const Node *b = base_of(output_of(p, PART_TAIL), &off);
            rc = check_read(v, i, in->src, 4, (Label){.kind = V_NODE, .part = PART_TAIL, .node = b->id, .layer = -1, .at = off},
                            "the loss");
            break;
        }
        case INS_COUNT: break;
        }
        if (rc == -2) {
            snprintf(v->err, v->errcap, "plan verifier: out of memory");
            return -1;
        }
        if (rc != 0) return -1;
    }
    return 0;
}

int plan_verify(const Plan *p, char *err, size_t errcap) {
    V v = {.p = p, .err = err, .errcap = errcap};
    int rc = verify_stream(&v, p->train, p->ntrain, "train");
    if (rc == 0) rc = verify_stream(&v, p->eval, p->neval, "eval");
    free(v.arena.s);
    return rc;
}
