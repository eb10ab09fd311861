// verify.c: the plan verifier, two passes over each stream.
//
//   1. Order. Every instruction gets a vector clock over the engines: its
//      position in its engine's order, joined at a WAIT with the clock of
//      the event's RECORD. Instruction a happens before b when b's clock
//      has reached a's position on a's engine. Every WAIT must come after
//      its event's one RECORD in the array, so the array order is a valid
//      interleaving of the engines and the simulation below may follow it;
//      the plan may rely on nothing but the clocks.
//   2. Values. The arena, the host activation store and the host gradients
//      are lists of intervals, each labelled with the value it holds (a
//      node of a part for a layer, a stretch of host weights, a model
//      input, freed bytes), the instruction that wrote it, and the last
//      instruction of each engine that read it since. Instructions are
//      simulated in array order: a read checks the labels under it and
//      that their writer happens before it; a write checks that it happens
//      after the previous write and after every read since. The host
//      weights and gradients of a layer follow the optimizer's order:
//      UPDATE, then the COPY_INs of its new weights and the COPY_OUTs of
//      this micro-batch's gradients, then NORM.
//   A sharded plan's collectives are checked as readers and writers too:
//   COPY_IN XFER_SHARD leaves the rank's shard of a segment's weights
//   (V_SHARD), which no RUN accepts as weights until INS_ALLGATHER turned it
//   into the segment's weights; a widening COPY (XFER_BF16) moves labels
//   marked wide, INS_REDUCE_SCATTER marks what it sums as summed, and a
//   COPY_OUT XFER_SHARD must read the summed gradient of the parameter it
//   names. One engine issues every collective of a stream (ENG_COMM; the
//   sequential policy's one engine), in stream order, so every rank issues
//   the same ones in the same order.
#include "common/verify.h"

#include "common/scratch.h"
#include "common/storage.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const INS_NAMES[] = {"copy_in", "copy_out", "copy",      "input",         "run",  "loss",
                                        "save",    "load",     "free",      "record",        "wait", "norm",
                                        "update",  "stat",     "allgather", "reduce_scatter"};
_Static_assert(sizeof INS_NAMES / sizeof INS_NAMES[0] == INS_COUNT, "INS_NAMES out of sync with InsKind");
static const char *const ENG_NAMES[] = {"compute", "copy-in", "copy-out", "host", "comm"};
_Static_assert(sizeof ENG_NAMES / sizeof ENG_NAMES[0] == ENG_COUNT, "ENG_NAMES out of sync with Engine");

// V_SHARD: this rank's shard of a segment's weights, put in by COPY_IN
// XFER_SHARD, not yet gathered (`at` as V_WEIGHTS').
typedef enum { V_NONE = -1, V_NODE, V_WEIGHTS, V_INPUT, V_FREED, V_GRADS, V_SHARD } ValueKind;

// What a range holds. Ranges of one value are linear: `at` is the position
// of the range's first byte inside the value (bytes into the node's buffer,
// into the streaming copy of the host store, into the model input).
typedef struct Label {
    int kind;       // ValueKind
    int part, node; // V_NODE; V_INPUT: node is the input's index
    int64_t layer;  // V_NODE: which layer's value (-1 outside the block)
    int64_t at;
    int origin; // the instruction that made the value (RUN, COPY_IN, INPUT, FREE); copies keep it
    int wide;   // a bf16 value widened to fp32 by a COPY XFER_BF16: `at` counts its fp32 bytes (twice the bf16's)
    int summed; // summed over the ranks by an INS_REDUCE_SCATTER
} Label;

typedef struct Span {
    int64_t lo, hi; // [lo, hi): bytes (arena, activation store) or floats (gradients)
    Label l;
    int writer;            // the instruction that put it there, -1: there at the start
    int reader[ENG_COUNT]; // per engine, the last instruction that read it since, or -1
} Span;

typedef struct Spans {
    const char *name; // "arena bytes", ...
    Span *s;          // sorted, disjoint; gaps hold nothing
    int n, cap;
} Spans;

static Label label_at(Label l, int64_t bytes) {
    l.at += bytes;
    return l;
}

// Bytes of a weight element as it streams (the storage rule).
static int64_t weight_bytes(const Plan *p) { return storage_weight_bytes(p->graph->train.compute); }

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

// The index of the first span that ends after pos.
static int spans_find(const Spans *a, int64_t pos) {
    int lo = 0, hi = a->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (a->s[mid].hi <= pos) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Splits the span across pos, if one is; returns the index of the first
// span at or after pos. Needs room for one more span.
static int spans_cut(Spans *a, int64_t pos) {
    int i = spans_find(a, pos);
    if (i == a->n || a->s[i].lo >= pos) return i;
    memmove(&a->s[i + 1], &a->s[i], (size_t)(a->n - i) * sizeof(Span));
    a->n++;
    a->s[i].hi = pos;
    a->s[i + 1].lo = pos;
    a->s[i + 1].l = label_at(a->s[i].l, pos - a->s[i].lo);
    return i + 1;
}

// Cuts the spans at lo and hi: [*i, *j) are then the spans inside [lo, hi).
static int spans_range(Spans *a, int64_t lo, int64_t hi, int *i, int *j) {
    if (spans_reserve(a, 3) != 0) return -1;
    *i = spans_cut(a, lo);
    *j = lo < hi ? spans_cut(a, hi) : *i;
    return 0;
}

// Replaces whatever [lo, hi) held with one span.
static int spans_put(Spans *a, int64_t lo, int64_t hi, Label l, int writer) {
    if (lo >= hi) return 0;
    int i, j;
    if (spans_range(a, lo, hi, &i, &j) != 0) return -1;
    if (j == i) {
        memmove(&a->s[i + 1], &a->s[i], (size_t)(a->n - i) * sizeof(Span));
        a->n++;
    } else if (j > i + 1) {
        memmove(&a->s[i + 1], &a->s[j], (size_t)(a->n - j) * sizeof(Span));
        a->n -= j - i - 1;
    }
    a->s[i] = (Span){.lo = lo, .hi = hi, .l = l, .writer = writer, .reader = {-1, -1, -1, -1, -1}};
    return 0;
}

typedef struct V {
    const Plan *p;
    char *err;
    size_t errcap;
    const Instr *ins; // the stream being checked
    int n;
    const char *subject; // what is being checked, named in each message: "train stream", "optimizer placement"
    int32_t *clk;        // (n, ENG_COUNT) vector clocks
    int32_t *pos;        // (n) 1 + the instruction's place in its engine's order
    int *upd, *nrm; // (segments) the stream's UPDATE and NORM of each host store segment (plan_segment_index), or -1
    Spans arena, act, grads;
    Span *moved; // scratch for copies
    int moved_cap;
    int coll; // the stream's first collective (-1: none yet): every other one must be on its engine
} V;

static int fail(V *v, const char *fmt, ...) {
    int k = snprintf(v->err, v->errcap, "plan verifier: %s: ", v->subject);
    va_list ap;
    va_start(ap, fmt);
    if (k >= 0 && (size_t)k < v->errcap) vsnprintf(v->err + k, v->errcap - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static int oom(V *v) {
    snprintf(v->err, v->errcap, "plan verifier: out of memory");
    return -1;
}

// Whether instruction a happens before instruction b (-1: the stream's start).
static int before(const V *v, int a, int b) {
    return a < 0 || a == b || v->clk[(size_t)b * ENG_COUNT + v->ins[a].engine] >= v->pos[a];
}

static void describe_layer(char *buf, size_t cap, int64_t layer) {
    if (layer == SEG_HEAD) snprintf(buf, cap, "the head's globals");
    else if (layer == SEG_TAIL) snprintf(buf, cap, "the tail's globals");
    else if (layer < 0) snprintf(buf, cap, "the globals");
    else snprintf(buf, cap, "layer %lld", (long long)layer);
}

// "instruction 57 (copy_in on copy-in, layer 3)"; fields already checked.
static void describe_instr(const V *v, int i, char *buf, size_t cap) {
    if (i < 0) {
        snprintf(buf, cap, "nothing (never written)");
        return;
    }
    const Instr *in = &v->ins[i];
    const char *eng = ENG_NAMES[in->engine];
    char ly[32];
    describe_layer(ly, sizeof ly, in->layer);
    switch ((InsKind)in->kind) {
    case INS_RUN: {
        char fr[32] = "";
        if (part_is_block(in->part)) snprintf(fr, sizeof fr, " frame %d", in->frame);
        snprintf(buf, cap, "instruction %d (run %s nodes %d..%d%s%s on %s, %s)", i,
                 in->part >= 0 && in->part < PART_COUNT ? part_name((PartKind)in->part) : "?", in->from, in->to - 1, fr,
                 in->flags & RUN_SKIP_HEAVY ? " skipping matmuls and attention" : "", eng, ly);
        break;
    }
    case INS_RECORD:
    case INS_WAIT:
        snprintf(buf, cap, "instruction %d (%s event %d on %s)", i, INS_NAMES[in->kind], in->event, eng);
        break;
    case INS_COPY_IN:
    case INS_COPY_OUT:
    case INS_NORM:
    case INS_ALLGATHER:
    case INS_REDUCE_SCATTER:
    case INS_UPDATE:
        snprintf(buf, cap, "instruction %d (%s%s on %s, %s)", i, INS_NAMES[in->kind],
                 (in->kind == INS_COPY_IN || in->kind == INS_COPY_OUT) && (in->flags & XFER_SHARD) ? " of the shard"
                                                                                                   : "",
                 eng, ly);
        break;
    default: snprintf(buf, cap, "instruction %d (%s on %s)", i, INS_NAMES[in->kind], eng); break;
    }
}

static void describe_label(const V *v, const Label *l, char *buf, size_t cap) {
    const Plan *p = v->p;
    char o[160];
    switch ((ValueKind)l->kind) {
    case V_NONE: snprintf(buf, cap, "nothing"); break;
    default: snprintf(buf, cap, "a value the graph cannot provide (no gradient reaches it)"); break;
    case V_WEIGHTS: {
        char ly[32];
        int64_t elem = l->at / weight_bytes(p);
        describe_layer(ly, sizeof ly, plan_segment_of(p, elem));
        snprintf(buf, cap, "%s%s weights from host element %lld", ly, ly[0] == 'l' ? "'s" : "'", (long long)elem);
        break;
    }
    case V_SHARD: {
        char ly[32];
        describe_layer(ly, sizeof ly, plan_segment_of(p, l->at / weight_bytes(p)));
        snprintf(buf, cap, "this rank's shard of %s%s weights, not gathered", ly, ly[0] == 'l' ? "'s" : "'");
        break;
    }
    case V_INPUT: snprintf(buf, cap, "model input %d", l->node); break;
    case V_FREED:
        describe_instr(v, l->origin, o, sizeof o);
        snprintf(buf, cap, "bytes freed by %s", o);
        break;
    case V_GRADS: snprintf(buf, cap, "host gradients"); break;
    case V_NODE: {
        const Node *n = p->graph->parts[l->part].nodes.items[l->node];
        snprintf(buf, cap, "%s%s %%%d%s%s of layer %lld%s", l->wide ? "widened " : "", part_name((PartKind)l->part),
                 l->node, n->name ? " " : "", n->name ? n->name : "", (long long)l->layer,
                 l->summed ? ", summed over the ranks" : "");
        break;
    }
    }
}

static int same_value(const Label *have, const Label *want) {
    return have->kind == want->kind && have->at == want->at && have->wide == want->wide &&
           have->summed == want->summed &&
           (want->kind != V_NODE ||
            (have->part == want->part && have->node == want->node && have->layer == want->layer)) &&
           (want->kind != V_INPUT || have->node == want->node);
}

// Instruction r reads [lo, hi) of a. want: the value it must hold there
// (from want->at on), with `what` saying which operand; NULL for a copy,
// which takes whatever is there. Either way every value read must have
// been written before r, and r becomes a reader of it.
static int read_range(V *v, Spans *a, int r, int64_t lo, int64_t hi, const Label *want, const char *what) {
    int i, j;
    if (spans_range(a, lo, hi, &i, &j) != 0) return oom(v);
    char rs[200], ws[200], hl[200], el[200];
    int64_t pos = lo;
    for (int k = i; k <= j; k++) {
        int64_t next = k < j ? a->s[k].lo : hi;
        if (want && next > pos) { // a gap: nothing was ever written there
            describe_instr(v, r, rs, sizeof rs);
            Label e = label_at(*want, pos - lo);
            describe_label(v, &e, el, sizeof el);
            return fail(v, "%s reads %s (%s) at %s %lld, which was never written", rs, what, el, a->name,
                        (long long)pos);
        }
        if (k == j) break;
        Span *s = &a->s[k];
        if (want) {
            Label e = label_at(*want, s->lo - lo);
            if (!same_value(&s->l, &e)) {
                describe_instr(v, r, rs, sizeof rs);
                describe_instr(v, s->writer, ws, sizeof ws);
                describe_label(v, &e, el, sizeof el);
                describe_label(v, &s->l, hl, sizeof hl);
                if (s->l.kind == V_FREED)
                    return fail(v, "%s reads %s (%s) at %s %lld, which hold %s%s%s", rs, what, el, a->name,
                                (long long)s->lo, hl, s->writer == s->l.origin ? "" : ", copied there by ",
                                s->writer == s->l.origin ? "" : ws);
                return fail(v, "%s reads %s (%s) at %s %lld, which holds %s written by %s", rs, what, el, a->name,
                            (long long)s->lo, hl, ws);
            }
        }
        if (!want && s->l.kind == V_FREED) { // a copy of freed bytes: a value is missing
            describe_instr(v, r, rs, sizeof rs);
            describe_label(v, &s->l, hl, sizeof hl);
            describe_instr(v, s->writer, ws, sizeof ws);
            return fail(v, "%s copies %s [%lld, %lld), which hold %s%s%s", rs, a->name, (long long)s->lo,
                        (long long)s->hi, hl, s->writer == s->l.origin ? "" : ", copied there by ",
                        s->writer == s->l.origin ? "" : ws);
        }
        if ((want || s->l.kind != V_NONE) && !before(v, s->writer, r)) {
            describe_instr(v, r, rs, sizeof rs);
            describe_instr(v, s->writer, ws, sizeof ws);
            describe_label(v, &s->l, hl, sizeof hl);
            return fail(v,
                        "%s reads %s [%lld, %lld) holding %s, written by %s: no event orders the write before the read",
                        rs, a->name, (long long)s->lo, (long long)s->hi, hl, ws);
        }
        s->reader[v->ins[r].engine] = r;
        pos = s->hi;
    }
    return 0;
}

// Instruction w is about to write [lo, hi) of a: it must come after the
// previous write of every byte and after every read since.
static int check_write(V *v, Spans *a, int w, int64_t lo, int64_t hi) {
    int i, j;
    if (spans_range(a, lo, hi, &i, &j) != 0) return oom(v);
    char ws[200], os[200], hl[200];
    for (int k = i; k < j; k++) {
        const Span *s = &a->s[k];
        int other = -1;
        for (int e = 0; e < ENG_COUNT && other < 0; e++)
            if (s->reader[e] >= 0 && !before(v, s->reader[e], w)) other = s->reader[e];
        if (other < 0 && before(v, s->writer, w)) continue;
        describe_instr(v, w, ws, sizeof ws);
        describe_label(v, &s->l, hl, sizeof hl);
        if (other >= 0) {
            describe_instr(v, other, os, sizeof os);
            return fail(v,
                        "%s overwrites %s [%lld, %lld) holding %s, which %s reads: no event orders the read before the "
                        "overwrite",
                        ws, a->name, (long long)s->lo, (long long)s->hi, hl, os);
        }
        describe_instr(v, s->writer, os, sizeof os);
        return fail(v, "%s overwrites %s [%lld, %lld) holding %s, written by %s: no event orders the two writes", ws,
                    a->name, (long long)s->lo, (long long)s->hi, hl, os);
    }
    return 0;
}

static int write_range(V *v, Spans *a, int w, int64_t lo, int64_t hi, Label l) {
    if (check_write(v, a, w, lo, hi) != 0) return -1;
    return spans_put(a, lo, hi, l, w) == 0 ? 0 : oom(v);
}

// Instruction i copies [src, src + bytes) of `from` to dst of `to`: the
// labels travel, what was never written stays unwritten. With `widen`, the
// source is bf16 and lands as fp32: bytes are the source's, the labels
// stretch to twice their length, marked wide; with `sum`, in place, what is
// there becomes its sum over the ranks (INS_REDUCE_SCATTER).
static int move_range(V *v, int i, Spans *from, int64_t src, Spans *to, int64_t dst, int64_t bytes, int widen,
                      int sum) {
    if (read_range(v, from, i, src, src + bytes, NULL, "") != 0) return -1;
    int lo = spans_find(from, src), n = 0;
    for (int k = lo; k < from->n && from->s[k].lo < src + bytes; k++) n++;
    if (n > v->moved_cap) {
        Span *m = realloc(v->moved, (size_t)n * sizeof *m);
        if (!m) return oom(v);
        v->moved = m;
        v->moved_cap = n;
    }
    memcpy(v->moved, &from->s[lo], (size_t)n * sizeof(Span));
    int64_t scale = widen ? 2 : 1;
    if (check_write(v, to, i, dst, dst + scale * bytes) != 0) return -1;
    int rc = spans_put(to, dst, dst + scale * bytes, (Label){.kind = V_NONE, .origin = i}, i);
    for (int k = 0; rc == 0 && k < n; k++) {
        Label l = v->moved[k].l;
        if (widen && l.kind != V_NONE) l.at *= 2, l.wide = 1;
        if (sum && l.kind != V_NONE) l.summed = 1;
        rc = spans_put(to, (v->moved[k].lo - src) * scale + dst, (v->moved[k].hi - src) * scale + dst, l, i);
    }
    return rc == 0 ? 0 : oom(v);
}
static int copy_range(V *v, int i, Spans *from, int64_t src, Spans *to, int64_t dst, int64_t bytes) {
    return move_range(v, i, from, src, to, dst, bytes, 0, 0);
}

// ---------------------------------------------------------------- the graph's values

// Where a node's data is: its base node (views and reshapes followed) and
// the byte offset into it.
static const Node *base_of(const Plan *p, const Node *n, int64_t *off) {
    int64_t elem = storage_elem_bytes(p->graph->train.compute, n);
    *off = 0;
    while (n->op == OP_VIEW || n->op == OP_RESHAPE) {
        if (n->op == OP_VIEW) *off += n->offset * elem;
        n = n->in[0];
    }
    return n;
}

static int64_t addr_of(const Plan *p, const Node *n, int frame) {
    int64_t off;
    const Node *b = base_of(p, n, &off);
    return plan_offsets(p, b->part, frame)[b->id] + off;
}

static const Node *output_of(const Plan *p, PartKind pk) { return p->graph->parts[pk].output; }

// The value an input node of part pk must hold when the part runs for layer.
static Label input_value(const Plan *p, const Node *n, int64_t layer) {
    const Graph *g = p->graph;
    int64_t off = 0;
    if (n->src_part == SRC_MODEL_INPUT) return (Label){.kind = V_INPUT, .node = n->src};
    if (n->src_part == SRC_GRAD_SEED) { // d loss / d output of this part: the gradient of what reads it
        int block = part_is_block(n->part), last = block && layer == g->layers - 1;
        int part = block && !last ? block_part(g, layer + 1) : PART_TAIL;
        int64_t src_layer = part == PART_TAIL ? -1 : layer + 1;
        if (!block) part = block_part(g, 0), src_layer = 0; // the head's: the first layer's
        const Node *x = part_input_from(&g->parts[part], part == PART_TAIL ? block_part(g, g->layers - 1) : PART_HEAD);
        const Grad *gr = x ? part_grad_of(&g->parts[part], x) : NULL;
        if (!gr || !gr->grad) return (Label){.kind = V_NONE - 1}; // matches nothing: the read is refused
        const Node *b = base_of(p, gr->grad, &off);
        return (Label){.kind = V_NODE, .part = part, .node = b->id, .layer = src_layer, .at = off};
    }
    // a value of another part: the head's output or the previous layer's
    if (part_is_block(n->part)) {
        int part = layer == 0 ? PART_HEAD : block_part(g, layer - 1);
        const Node *b = base_of(p, output_of(p, part), &off);
        return (Label){.kind = V_NODE, .part = part, .node = b->id, .layer = layer == 0 ? -1 : layer - 1, .at = off};
    }
    int last = block_part(g, g->layers - 1);
    const Node *b = base_of(p, output_of(p, last), &off); // the tail reads the last layer's output
    return (Label){.kind = V_NODE, .part = last, .node = b->id, .layer = g->layers - 1, .at = off};
}

// The value node n (a base node) must hold when its part runs for layer.
static Label value_of(const Plan *p, const Node *n, int64_t layer) {
    if (n->op == OP_PARAM)
        return (Label){.kind = V_WEIGHTS, .at = plan_param_elem(p, n->param, layer < 0 ? 0 : layer) * weight_bytes(p)};
    if (n->op == OP_INPUT) return input_value(p, n, layer);
    return (Label){.kind = V_NODE, .part = n->part, .node = n->id, .layer = layer};
}

static int is_heavy(const Node *n) { return op_is_heavy(n->op); }

// A RUN reads every operand of its nodes (of its layer, at its frame's
// offsets) and writes each node; with RUN_SKIP_HEAVY the matmul and
// attention nodes are read instead: their values must already be there.
static int verify_run(V *v, int i, const Instr *in) {
    const Plan *p = v->p;
    const Part *part = &p->graph->parts[in->part];
    const int64_t *offs = plan_offsets(p, in->part, in->frame);
    int64_t layer = part_is_block(in->part) ? in->layer : -1;
    char what[160];
    for (int k = in->from; k < in->to; k++) {
        const Node *n = part->nodes.items[k];
        if (n->op == OP_VIEW || n->op == OP_RESHAPE || n->op == OP_INPUT || n->op == OP_PARAM) continue;
        Label out = {.kind = V_NODE, .part = in->part, .node = n->id, .layer = layer, .origin = i};
        int64_t at = offs[n->id], bytes = storage_bytes(p->graph->train.compute, n);
        if ((in->flags & RUN_SKIP_HEAVY) && is_heavy(n)) {
            snprintf(what, sizeof what, "the restored %%%d %s%s%s", n->id, op_name(n->op), n->name ? " " : "",
                     n->name ? n->name : "");
            if (read_range(v, &v->arena, i, at, at + bytes, &out, what) != 0) return -1;
            continue;
        }
        for (int j = 0; j < n->nin; j++) { // every operand: the right value, of this layer
            int64_t off;
            const Node *b = base_of(p, n->in[j], &off);
            Label want = label_at(value_of(p, b, layer), off);
            snprintf(what, sizeof what, "operand %d of %%%d %s, %s%s%s", j, n->id, op_name(n->op), op_name(b->op),
                     b->name ? " " : "", b->name ? b->name : "");
            int64_t lo = addr_of(p, n->in[j], in->frame);
            int64_t len = storage_bytes(p->graph->train.compute, n->in[j]);
            if (read_range(v, &v->arena, i, lo, lo + len, &want, what) != 0) return -1;
        }
        if (write_range(v, &v->arena, i, at, at + bytes, out) != 0) return -1;
    }
    return 0;
}

// Order of a layer's host weights and gradients: the COPY_INs of a layer
// the stream updates read the new weights; its COPY_OUTs add this
// micro-batch's gradients after the UPDATE zeroed the old ones and before
// the NORM reads them.
static int host_order(V *v, int i, int64_t layer) {
    const Instr *in = &v->ins[i];
    int u = v->upd[plan_segment_index(layer)], m = v->nrm[plan_segment_index(layer)];
    char rs[200], us[200], ly[32];
    describe_layer(ly, sizeof ly, layer);
    describe_instr(v, i, rs, sizeof rs);
    if (u > i) {
        describe_instr(v, u, us, sizeof us);
        if (in->kind == INS_COPY_IN) return fail(v, "%s reads %s's host weights before %s updates them", rs, ly, us);
        return fail(v, "%s adds %s's gradients before %s consumes and zeroes the previous ones", rs, ly, us);
    }
    if (u >= 0 && !before(v, u, i)) {
        describe_instr(v, u, us, sizeof us);
        return fail(v, "%s %s %s's host %s, which %s writes: no event orders the update before it", rs,
                    in->kind == INS_COPY_IN ? "reads" : "adds into", ly,
                    in->kind == INS_COPY_IN ? "weights" : "gradients", us);
    }
    if (in->kind == INS_COPY_OUT && m >= 0 && m < i) {
        describe_instr(v, m, us, sizeof us);
        return fail(v, "%s adds %s's gradients after %s has read them", rs, ly, us);
    }
    return 0;
}

// Whether the span of a at byte lo holds want.
static int holds(const Spans *a, int64_t lo, const Label *want) {
    for (int k = 0; k < a->n; k++)
        if (a->s[k].lo <= lo && lo < a->s[k].hi) return same_value(&a->s[k].l, want);
    return 0;
}

// COPY_OUT must read the gradient of the parameter its host range names,
// in some frame, and add it into that parameter's host gradients. A tied
// parameter has a gradient in two parts, which may lie at the same arena
// bytes (the head's and the tail's buffers share a region): the one whose
// value is there is the one copied (first pass); otherwise the first that
// matches is held to it (second pass, for the message).
static int verify_copy_out(V *v, int i, const Instr *in) {
    const Plan *p = v->p;
    const Graph *g = p->graph;
    int nframes = p->nframes > 1 ? p->nframes : 1;
    for (int pass = 0; pass < 2; pass++) {
        for (int pk = 0; pk < graph_nparts(g); pk++) {
            const Part *part = &g->parts[pk];
            if (part_is_block(pk) && in->layer >= 0 && pk != block_part(g, in->layer)) continue; // another kind's
            for (int k = 0; k < part->grads.n; k++) {
                const Grad *gr = part->grads.items[k];
                if (gr->of->op != OP_PARAM || !gr->grad) continue;
                const Param *prm = g->params.items[gr->of->param];
                // sharded: the gradient widened to fp32 where it is bf16, summed over the ranks, anywhere
                int shard = !!(in->flags & XFER_SHARD), bf16 = storage_dtype(g->train.compute, gr->grad) == DT_BF16;
                if (prm->in_block != (in->layer >= 0) ||
                    plan_param_elem(p, gr->of->param, in->layer < 0 ? 0 : in->layer) != in->dst ||
                    (shard ? shape_numel(&prm->shape) * 4 : storage_bytes(g->train.compute, gr->grad)) != in->bytes ||
                    (bf16 && !shard) != !!(in->flags & XFER_BF16))
                    continue;
                for (int f = 0; f < (part_is_block(pk) && !shard ? nframes : 1); f++) {
                    if (!shard && addr_of(p, gr->grad, f) != in->src) continue;
                    int64_t off;
                    const Node *b = base_of(p, gr->grad, &off);
                    Label want = {.kind = V_NODE,
                                  .part = pk,
                                  .node = b->id,
                                  .layer = part_is_block(pk) ? in->layer : -1,
                                  .at = off * (shard && bf16 ? 2 : 1),
                                  .wide = shard && bf16,
                                  .summed = shard};
                    if (pass == 0 && !holds(&v->arena, in->src, &want)) continue;
                    char what[96];
                    snprintf(what, sizeof what, "the gradient of '%s'", prm->name);
                    if (read_range(v, &v->arena, i, in->src, in->src + in->bytes, &want, what) != 0 ||
                        host_order(v, i, in->layer) != 0)
                        return -1;
                    // an add: after the previous add or the update's zeroing, and after any read since
                    return write_range(v, &v->grads, i, in->dst, in->dst + shape_numel(&prm->shape),
                                       (Label){.kind = V_GRADS});
                }
            }
        }
    }
    char r[200];
    describe_instr(v, i, r, sizeof r);
    return fail(v, "%s copies out arena [%lld, +%lld) to host float %lld, which is no parameter's gradient", r,
                (long long)in->src, (long long)in->bytes, (long long)in->dst);
}

// ---------------------------------------------------------------- pass 1: fields and order

static int range_ok(int64_t off, int64_t len, int64_t cap) {
    return off >= 0 && len >= 0 && off <= cap && len <= cap - off;
}

// The fields an instruction uses are in range (mtrun's reader checks them
// too; mtc's own plans are checked here).
static int check_fields(V *v, int i) {
    const Instr *in = &v->ins[i];
    const Plan *p = v->p;
    const Graph *g = p->graph;
    int64_t A = p->arena_bytes, H = plan_host_elems(p);
    if (in->kind < 0 || in->kind >= INS_COUNT) return fail(v, "instruction %d: kind %d is out of range", i, in->kind);
    if (in->engine < 0 || in->engine >= ENG_COUNT)
        return fail(v, "instruction %d (%s): engine %d is out of range (0..%d)", i, INS_NAMES[in->kind], in->engine,
                    ENG_COUNT - 1);
    char d[200];
    describe_instr(v, i, d, sizeof d);
    if (in->bytes < 0) return fail(v, "%s: %lld bytes", d, (long long)in->bytes);
    switch ((InsKind)in->kind) {
    case INS_RECORD:
    case INS_WAIT:
        if (in->event < 0 || in->event >= p->nevents)
            return fail(v, "%s: event %d is out of range (the plan has %d)", d, in->event, p->nevents);
        return 0;
    case INS_RUN: {
        if (in->part < 0 || in->part >= graph_nparts(g))
            return fail(v, "instruction %d: part %d is out of range", i, in->part);
        int nframes = part_is_block(in->part) && p->nframes > 1 ? p->nframes : 1;
        if (in->frame < 0 || in->frame >= nframes) return fail(v, "%s: the plan has %d frames", d, nframes);
        if (in->from < 0 || in->from > in->to || in->to > g->parts[in->part].nodes.n)
            return fail(v, "%s: the part has %d nodes", d, g->parts[in->part].nodes.n);
        if (part_is_block(in->part) && (in->layer < 0 || in->layer >= g->layers))
            return fail(v, "%s: the model has %lld layers", d, (long long)g->layers);
        if (part_is_block(in->part) && in->part != block_part(g, in->layer))
            return fail(v, "%s: layer %d is of block kind %d, whose part is %s", d, in->layer, g->layer_kind[in->layer],
                        part_name((PartKind)block_part(g, in->layer)));
        return 0;
    }
    case INS_COPY_IN:
    case INS_COPY_OUT: {
        int64_t arena = in->kind == INS_COPY_IN ? in->dst : in->src, host = in->kind == INS_COPY_IN ? in->src : in->dst;
        if (in->layer < SEG_FIRST || in->layer >= g->layers)
            return fail(v, "%s: the model has %lld layers", d, (long long)g->layers);
        int64_t elem = in->flags & XFER_BF16 ? 2 : 4;
        if (in->flags & ~(XFER_BF16 | XFER_SHARD)) return fail(v, "%s: unknown flags 0x%x", d, (unsigned)in->flags);
        if (!(in->flags & XFER_SHARD) != !p->sharded)
            return fail(v, "%s: %s in a %s plan", d, in->flags & XFER_SHARD ? "a shard's copy" : "a whole copy",
                        p->sharded ? "sharded" : "replicated");
        if (in->kind == INS_COPY_IN && (in->flags & XFER_SHARD) && in->src != plan_segment_base(p, in->layer))
            return fail(v, "%s: a shard's COPY_IN names its segment from its first element", d);
        if ((in->flags & XFER_BF16) && g->train.compute != DT_BF16)
            return fail(v, "%s: a bf16 transfer in a plan that computes in %s", d, dtype_name(g->train.compute));
        if (in->kind == INS_COPY_IN && elem != weight_bytes(p))
            return fail(v, "%s: weights stream as %s in this plan", d, dtype_name(g->train.compute));
        if (in->bytes % elem != 0 || !range_ok(host, in->bytes / elem, H) ||
            !range_ok(host - plan_segment_base(p, in->layer), in->bytes / elem, plan_segment_len(p, in->layer)))
            return fail(v, "%s: host elements [%lld, +%lld) are not inside that layer's segment", d, (long long)host,
                        (long long)(in->bytes / elem));
        if (!range_ok(arena, in->bytes, A)) return fail(v, "%s: arena bytes outside the arena", d);
        return 0;
    }
    case INS_COPY: {
        if (in->flags & ~XFER_BF16) return fail(v, "%s: unknown flags 0x%x", d, (unsigned)in->flags);
        int64_t src_bytes = in->flags & XFER_BF16 ? in->bytes / 2 : in->bytes; // widened: bytes are the fp32 ones
        if ((in->flags & XFER_BF16) && in->bytes % 4 != 0)
            return fail(v, "%s: %lld fp32 bytes", d, (long long)in->bytes);
        if (!range_ok(in->src, src_bytes, A) || !range_ok(in->dst, in->bytes, A))
            return fail(v, "%s: arena bytes outside the arena", d);
        if (in->bytes > 0 && in->src < in->dst + in->bytes && in->dst < in->src + src_bytes)
            return fail(v, "%s: source [%lld, +%lld) and destination %lld overlap", d, (long long)in->src,
                        (long long)src_bytes, (long long)in->dst);
        return 0;
    }
    case INS_ALLGATHER:
    case INS_REDUCE_SCATTER: {
        if (!p->sharded || p->ranks < 2) return fail(v, "%s: a collective in a plan that is not sharded over ranks", d);
        if (v->coll >= 0 && in->engine != v->ins[v->coll].engine) {
            char first[200];
            describe_instr(v, v->coll, first, sizeof first);
            return fail(v,
                        "%s: not on the engine of %s: one engine issues every collective, so that every rank "
                        "issues them in one order",
                        d, first);
        }
        if (v->coll < 0) v->coll = i;
        if (in->layer < SEG_FIRST || in->layer >= g->layers)
            return fail(v, "%s: the model has %lld layers", d, (long long)g->layers);
        int64_t len = plan_segment_len(p, in->layer), chunk = (len + p->ranks - 1) / p->ranks;
        int64_t elem = in->kind == INS_ALLGATHER ? weight_bytes(p) : 4,
                at = in->kind == INS_ALLGATHER ? in->dst : in->src;
        if (in->bytes != p->ranks * chunk * elem)
            return fail(v, "%s: %lld bytes, where %d ranks' chunks of the segment's %lld elements are %lld", d,
                        (long long)in->bytes, p->ranks, (long long)len, (long long)(p->ranks * chunk * elem));
        return range_ok(at, in->bytes, A) ? 0 : fail(v, "%s: arena bytes outside the arena", d);
    }
    case INS_INPUT:
        if (in->input < 0 || in->input >= g->inputs.n)
            return fail(v, "%s: model input %d is out of range", d, in->input);
        return range_ok(in->dst, in->bytes, A) ? 0 : fail(v, "%s: arena bytes outside the arena", d);
    case INS_LOSS: return range_ok(in->src, 4, A) ? 0 : fail(v, "%s: arena bytes outside the arena", d);
    case INS_SAVE:
    case INS_LOAD: {
        int64_t arena = in->kind == INS_SAVE ? in->src : in->dst, act = in->kind == INS_SAVE ? in->dst : in->src;
        if (!range_ok(arena, in->bytes, A)) return fail(v, "%s: arena bytes outside the arena", d);
        if (!range_ok(act, in->bytes, p->host_act_bytes))
            return fail(v, "%s: bytes [%lld, +%lld) outside the host activation store of %lld", d, (long long)act,
                        (long long)in->bytes, (long long)p->host_act_bytes);
        return 0;
    }
    case INS_FREE: return range_ok(in->dst, in->bytes, A) ? 0 : fail(v, "%s: arena bytes outside the arena", d);
    case INS_NORM:
    case INS_UPDATE:
        return in->layer >= SEG_FIRST && in->layer < g->layers
                   ? 0
                   : fail(v, "%s: the model has %lld layers", d, (long long)g->layers);
    case INS_STAT:
        if (in->layer < 0 || in->layer >= g->layers || in->part != block_part(g, in->layer) || in->from < 0 ||
            in->from >= g->parts[in->part].nfwd)
            return fail(v, "%s: node %d of part %d is not in layer %d's forward", d, in->from, in->part, in->layer);
        return range_ok(in->src, in->bytes, A) ? 0 : fail(v, "%s: arena bytes outside the arena", d);
    case INS_COUNT: break;
    }
    return 0;
}

// Pass 1: the fields, the vector clocks, and the host optimizer's
// instructions of each layer (at most one UPDATE and one NORM).
static int verify_order(V *v) {
    const Plan *p = v->p;
    int n = v->n, nev = p->nevents > 0 ? p->nevents : 0;
    int last[ENG_COUNT], count[ENG_COUNT] = {0};
    for (int e = 0; e < ENG_COUNT; e++) last[e] = -1;
    int *rec = malloc((size_t)(nev + 1) * sizeof *rec);
    if (!rec) return oom(v);
    for (int e = 0; e < nev; e++) rec[e] = -1;
    for (int64_t s = 0; s < plan_segment_count(p); s++) v->upd[s] = v->nrm[s] = -1;
    char a[200], b[200];
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) { // events recorded, and the host optimizer's instructions
        const Instr *in = &v->ins[i];
        if ((rc = check_fields(v, i)) != 0) break;
        int *slot = in->kind == INS_RECORD   ? &rec[in->event]
                    : in->kind == INS_UPDATE ? &v->upd[plan_segment_index(in->layer)]
                    : in->kind == INS_NORM   ? &v->nrm[plan_segment_index(in->layer)]
                                             : NULL;
        if (!slot) continue;
        if (*slot >= 0) {
            describe_instr(v, *slot, a, sizeof a);
            describe_instr(v, i, b, sizeof b);
            rc = fail(v, "%s repeats %s: once per stream", b, a);
        }
        *slot = i;
    }
    for (int i = 0; i < n && rc == 0; i++) { // the clocks, following the array
        const Instr *in = &v->ins[i];
        int32_t *c = &v->clk[(size_t)i * ENG_COUNT];
        int prev = last[in->engine];
        for (int e = 0; e < ENG_COUNT; e++) c[e] = prev >= 0 ? v->clk[(size_t)prev * ENG_COUNT + e] : 0;
        if (in->kind == INS_WAIT) {
            int r = rec[in->event];
            if (r < 0 || r > i) {
                describe_instr(v, i, b, sizeof b);
                if (r < 0) rc = fail(v, "%s waits for an event no instruction records", b);
                else {
                    describe_instr(v, r, a, sizeof a);
                    rc = fail(v,
                              "%s waits for an event recorded later, by %s: the array order must be one the engines "
                              "can run in",
                              b, a);
                }
                break;
            }
            for (int e = 0; e < ENG_COUNT; e++)
                if (v->clk[(size_t)r * ENG_COUNT + e] > c[e]) c[e] = v->clk[(size_t)r * ENG_COUNT + e];
        }
        v->pos[i] = c[in->engine] = ++count[in->engine];
        last[in->engine] = i;
    }
    free(rec);
    return rc;
}

// ---------------------------------------------------------------- pass 2: values

static int verify_stream(V *v, const Instr *ins, int n, const char *name) {
    const Plan *p = v->p;
    v->ins = ins;
    v->n = n;
    v->subject = name;
    v->arena.n = v->act.n = v->grads.n = 0;
    v->coll = -1;
    free(v->clk);
    free(v->pos);
    v->clk = malloc(((size_t)n + 1) * ENG_COUNT * sizeof *v->clk);
    v->pos = malloc(((size_t)n + 1) * sizeof *v->pos);
    if (!v->clk || !v->pos) return oom(v);
    if (verify_order(v) != 0) return -1;
    for (int i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        int rc = 0;
        switch ((InsKind)in->kind) {
        case INS_COPY_IN:
            rc = host_order(v, i, in->layer);
            if (rc == 0) // sharded: the rank's part of the segment, somewhere in it
                rc = write_range(v, &v->arena, i, in->dst, in->dst + in->bytes,
                                 (Label){.kind = in->flags & XFER_SHARD ? V_SHARD : V_WEIGHTS,
                                         .at = in->src * weight_bytes(p),
                                         .origin = i});
            break;
        case INS_ALLGATHER: { // every rank's shard of the segment in, the segment's weights out (padding after)
            int64_t seg = plan_segment_len(p, in->layer) * weight_bytes(p);
            Label want = {.kind = V_SHARD, .at = plan_segment_base(p, in->layer) * weight_bytes(p)};
            rc = read_range(v, &v->arena, i, in->dst, in->dst + seg, &want, "the shard to gather");
            if (rc == 0) rc = write_range(v, &v->arena, i, in->dst + seg, in->dst + in->bytes, (Label){.kind = V_NONE});
            if (rc == 0)
                rc = write_range(v, &v->arena, i, in->dst, in->dst + seg,
                                 (Label){.kind = V_WEIGHTS, .at = want.at, .origin = i});
            break;
        }
        case INS_REDUCE_SCATTER: rc = move_range(v, i, &v->arena, in->src, &v->arena, in->src, in->bytes, 0, 1); break;
        case INS_INPUT:
            rc = write_range(v, &v->arena, i, in->dst, in->dst + in->bytes,
                             (Label){.kind = V_INPUT, .node = in->input, .origin = i});
            break;
        case INS_FREE:
            rc = write_range(v, &v->arena, i, in->dst, in->dst + in->bytes, (Label){.kind = V_FREED, .origin = i});
            break;
        case INS_COPY:
            rc = move_range(v, i, &v->arena, in->src, &v->arena, in->dst,
                            in->flags & XFER_BF16 ? in->bytes / 2 : in->bytes, !!(in->flags & XFER_BF16), 0);
            break;
        case INS_SAVE: rc = copy_range(v, i, &v->arena, in->src, &v->act, in->dst, in->bytes); break;
        case INS_LOAD: rc = copy_range(v, i, &v->act, in->src, &v->arena, in->dst, in->bytes); break;
        case INS_RUN: rc = verify_run(v, i, in); break;
        case INS_COPY_OUT: rc = verify_copy_out(v, i, in); break;
        case INS_LOSS: {
            int64_t off;
            const Node *b = base_of(p, output_of(p, PART_TAIL), &off);
            Label want = {.kind = V_NODE, .part = PART_TAIL, .node = b->id, .layer = -1, .at = off};
            rc = read_range(v, &v->arena, i, in->src, in->src + 4, &want, "the loss");
            break;
        }
        case INS_STAT: { // what the layer's forward reports: the node's value, as its run left it
            Label want = {.kind = V_NODE, .part = in->part, .node = in->from, .layer = in->layer};
            rc = read_range(v, &v->arena, i, in->src, in->src + in->bytes, &want, "a reported value");
            break;
        }
        case INS_NORM:
        case INS_UPDATE: { // the layer's gradients: NORM reads them, UPDATE reads and zeroes them
            int64_t lo = plan_segment_base(p, in->layer), hi = lo + plan_segment_len(p, in->layer);
            rc = read_range(v, &v->grads, i, lo, hi, NULL, "");
            if (rc == 0 && in->kind == INS_UPDATE) rc = write_range(v, &v->grads, i, lo, hi, (Label){.kind = V_GRADS});
            break;
        }
        case INS_RECORD:
        case INS_WAIT:
        case INS_COUNT: break;
        }
        if (rc != 0) return -1;
    }
    return 0;
}

// The optimizer's placement (Plan.opt_device): a segment on the device needs
// a device (a target whose kernels have scratch: not a cpu one) and one
// process's whole segment (a sharded rank's slice on its device is not
// built), and the device store with everything else must fit the device.
static int verify_opt_device(V *v) {
    const Plan *p = v->p;
    int64_t placed = 0, first = 0;
    for (int64_t s = SEG_FIRST; s < p->graph->layers; s++)
        if (plan_opt_device(p, s) && !placed++) first = s;
    if (!placed) return 0;
    v->subject = "optimizer placement";
    char seg[48];
    describe_layer(seg, sizeof seg, first);
    if (!p->scratch_bytes)
        return fail(v, "the optimizer of %s is placed on the device of a cpu target (place it on the host)", seg);
    if (p->sharded)
        return fail(v,
                    "the optimizer of %s is placed on the device in a sharded plan (a rank's slice on its device "
                    "is not built: place it on the host)",
                    seg);
    if (p->device_limit > 0 && plan_device_bytes(p) > p->device_limit)
        return fail(v,
                    "the optimizer placed on the device (%lld segments, %lld bytes) and the rest need %lld bytes of "
                    "device memory; the target has %lld",
                    (long long)placed, (long long)plan_opt_device_bytes(p), (long long)plan_device_bytes(p),
                    (long long)p->device_limit);
    return 0;
}

// Each balance rule (Param.balance_mask): a frozen [E] buffer of a block
// kind whose router's top_k mask [..., E] in that kind's forward the train
// stream reports (INS_STAT) once for every layer of the kind, so that mtrun
// counts each layer's loads.
static int verify_balance(V *v) {
    const Plan *p = v->p;
    const Graph *g = p->graph;
    v->subject = "balance rule";
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        const Node *mask = prm->balance_mask;
        if (!mask) continue;
        int pk = kind_part(prm->kind);
        const Part *part = &g->parts[pk];
        int64_t E = prm->shape.dims[0];
        unsigned char *marks = malloc((size_t)part->nodes.n + 1);
        if (!marks) return oom(v);
        plan_report_marks(part, marks);
        int reported = marks[mask->id];
        free(marks);
        if (!prm->frozen || !prm->in_block || prm->shape.rank != 1 || mask->op != OP_TOP_K ||
            mask->shape.dims[mask->shape.rank - 1] != E || !reported)
            return fail(v,
                        "parameter '%s': its balance rule is not on a frozen [E] buffer of a block, or node %d of its "
                        "kind "
                        "is not a router's reported top_k mask [..., %lld]",
                        prm->name, mask->id, (long long)E);
        for (int64_t l = 0; l < g->layers; l++) {
            int stats = 0;
            for (int k = 0; param_in_layer(g, prm, l) && k < p->ntrain; k++) {
                const Instr *in = &p->train[k];
                stats += in->kind == INS_STAT && in->part == pk && in->from == mask->id && in->layer == l;
            }
            if (param_in_layer(g, prm, l) && stats != 1)
                return fail(v,
                            "parameter '%s': for its balance rule, the train stream reports layer %lld's loads %d "
                            "times",
                            prm->name, (long long)l, stats);
        }
    }
    return 0;
}

int plan_verify(const Plan *p, char *err, size_t errcap) {
    V v = {.p = p, .err = err, .errcap = errcap, .subject = "arena"};
    v.arena.name = "arena bytes";
    v.act.name = "host activation store bytes";
    v.grads.name = "host gradient elements";
    v.upd = malloc((size_t)plan_segment_count(p) * sizeof *v.upd);
    v.nrm = malloc((size_t)plan_segment_count(p) * sizeof *v.nrm);
    int rc = v.upd && v.nrm ? 0 : oom(&v);
    if (rc == 0 && p->scratch_bytes < 0) rc = fail(&v, "kernel scratch of %lld bytes", (long long)p->scratch_bytes);
    if (rc == 0) rc = verify_opt_device(&v);
    if (rc == 0) rc = verify_balance(&v);
    if (rc == 0) rc = verify_stream(&v, p->train, p->ntrain, "train stream");
    if (rc == 0) rc = verify_stream(&v, p->eval, p->neval, "eval stream");
    free(v.arena.s);
    free(v.act.s);
    free(v.grads.s);
    free(v.moved);
    free(v.clk);
    free(v.pos);
    free(v.upd);
    free(v.nrm);
    return rc;
}
