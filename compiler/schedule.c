#include "schedule.h"

#include <stdio.h>
#include <string.h>

enum { ARENA_ALIGN = 256, HOST_ALIGN_FLOATS = 16 };

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
static int64_t node_bytes(const Node *n) { return shape_numel(&n->shape) * 4; }

// Builds instruction streams.
typedef struct Builder {
    Arena *a;
    Plan *p;
    PtrVec ins; // of Instr*
    int failed;
} Builder;

static Instr *emit(Builder *b, InsKind kind) {
    Instr *in = arena_alloc(b->a, sizeof *in);
    if (!in || ptrvec_push(b->a, &b->ins, in) != 0) {
        b->failed = 1;
        static Instr sink;
        return &sink;
    }
    *in = (Instr){.kind = kind, .layer = -1};
    return in;
}

static Instr *finish(Builder *b, int32_t *n) {
    Instr *out = arena_alloc(b->a, (size_t)(b->ins.n + 1) * sizeof(Instr));
    if (!out) b->failed = 1;
    for (int i = 0; out && i < b->ins.n; i++) out[i] = *(Instr *)b->ins.items[i];
    *n = b->ins.n;
    b->ins = (PtrVec){0};
    return out;
}

// The arena address of a node's data, following views and reshapes.
static int64_t addr(const Plan *p, const Node *n) {
    int64_t off = 0;
    while (n->op == OP_VIEW || n->op == OP_RESHAPE) {
        if (n->op == OP_VIEW) off += n->offset * 4;
        n = n->in[0];
    }
    return p->node_offset[n->part][n->id] + off;
}

static void copy(Builder *b, int64_t src, int64_t dst, int64_t bytes) {
    Instr *in = emit(b, INS_COPY);
    in->src = src;
    in->dst = dst;
    in->bytes = bytes;
}

static void run(Builder *b, PartKind part, int from, int to, int layer) {
    Instr *in = emit(b, INS_RUN);
    in->part = part;
    in->from = from;
    in->to = to;
    in->layer = layer;
}

static void copy_in_weights(Builder *b, int64_t layer, int64_t slot) {
    const Plan *p = b->p;
    Instr *in = emit(b, INS_COPY_IN);
    in->layer = (int32_t)layer;
    in->src = layer < 0 ? 0 : p->host_global + layer * p->host_layer;
    in->dst = slot;
    in->bytes = (layer < 0 ? p->host_global : p->host_layer) * 4;
}

// The model inputs a part reads (tokens, targets) go straight to its nodes.
static void feed_inputs(Builder *b, PartKind pk) {
    const Part *part = &b->p->graph->parts[pk];
    for (int i = 0; i < part->nfwd; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op != OP_INPUT || n->src_part != SRC_MODEL_INPUT) continue;
        Instr *in = emit(b, INS_INPUT);
        in->input = n->src;
        in->dst = addr(b->p, n);
        in->bytes = node_bytes(n);
    }
}

// Adds the part's parameter gradients into the host accumulators.
static void grads_out(Builder *b, PartKind pk, int64_t layer) {
    const Plan *p = b->p;
    const Part *part = &p->graph->parts[pk];
    for (int i = 0; i < part->grads.n; i++) {
        const Grad *g = part->grads.items[i];
        if (g->of->op != OP_PARAM || !g->grad) continue;
        Instr *in = emit(b, INS_COPY_OUT);
        in->layer = (int32_t)layer;
        in->src = addr(p, g->grad);
        in->dst = (layer < 0 ? 0 : p->host_global + layer * p->host_layer) + p->param_offset[g->of->param];
        in->bytes = node_bytes(g->of);
    }
}

// Forward through the head and every layer, keeping each layer's input in
// checkpoint l; the last checkpoint is the tail's input.
static void forward_layers(Builder *b, int64_t slot, int64_t ckpt, int64_t ckpt_bytes) {
    const Plan *p = b->p;
    const Graph *g = p->graph;
    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK];
    copy_in_weights(b, -1, 0); // the global weights sit at the arena's start
    feed_inputs(b, PART_HEAD);
    run(b, PART_HEAD, 0, head->nfwd, -1);
    copy(b, addr(p, head->output), ckpt, ckpt_bytes);
    const Node *x = part_input_from(block, PART_HEAD);
    for (int64_t l = 0; l < g->layers; l++) {
        copy_in_weights(b, l, slot);
        copy(b, ckpt + l * ckpt_bytes, addr(p, x), ckpt_bytes);
        run(b, PART_BLOCK, 0, block->nfwd, (int)l);
        copy(b, addr(p, block->output), ckpt + (l + 1) * ckpt_bytes, ckpt_bytes);
    }
    feed_inputs(b, PART_TAIL);
    copy(b, ckpt + g->layers * ckpt_bytes, addr(p, part_input_from(&g->parts[PART_TAIL], PART_BLOCK)), ckpt_bytes);
}

Plan *schedule_first(Graph *g, Arena *a, char *err, size_t errcap) {
    Plan *p = arena_alloc(a, sizeof *p);
    if (!p) goto oom;
    p->graph = g;
    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];

    // 1. Host store layout: globals, then one segment per layer, each
    //    parameter 64-byte aligned inside its segment.
    p->param_offset = arena_alloc(a, (size_t)(g->params.n + 1) * sizeof(int64_t));
    if (!p->param_offset) goto oom;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        int64_t *seg = prm->in_block ? &p->host_layer : &p->host_global;
        p->param_offset[i] = *seg;
        *seg = align_up(*seg + shape_numel(&prm->shape), HOST_ALIGN_FLOATS);
    }

    // 2. Device arena: the global weights, one layer's weight slot, the
    //    layer checkpoints, then a buffer for every node of every part;
    //    parameter nodes point into the weights they stand for.
    const int64_t globals = 0, slot = align_up(p->host_global * 4, ARENA_ALIGN);
    int64_t top = align_up(slot + p->host_layer * 4, ARENA_ALIGN);
    const Node *x = part_input_from(block, PART_HEAD);
    int64_t ckpt = top, ckpt_bytes = align_up(node_bytes(x), ARENA_ALIGN);
    top += (g->layers + 1) * ckpt_bytes;
    for (int pk = 0; pk < PART_COUNT; pk++) {
        const Part *part = &g->parts[pk];
        p->node_offset[pk] = arena_alloc(a, (size_t)(part->nodes.n + 1) * sizeof(int64_t));
        if (!p->node_offset[pk]) goto oom;
        for (int i = 0; i < part->nodes.n; i++) {
            const Node *n = part->nodes.items[i];
            int64_t *off = &p->node_offset[pk][i];
            if (n->op == OP_VIEW || n->op == OP_RESHAPE) {
                *off = -1;
            } else if (n->op == OP_PARAM) {
                const Param *prm = g->params.items[n->param];
                *off = (prm->in_block ? slot : globals) + p->param_offset[n->param] * 4;
            } else {
                *off = top;
                top = align_up(top + node_bytes(n), ARENA_ALIGN);
            }
        }
    }
    p->arena_bytes = top;

    const Node *tail_x = part_input_from(tail, PART_BLOCK);
    const Grad *d_tail_x = tail_x ? part_grad_of(tail, tail_x) : NULL, *d_x = part_grad_of(block, x);
    if (!d_tail_x || !d_tail_x->grad || !d_x || !d_x->grad) {
        snprintf(err, errcap, "the loss does not depend on the block's input; nothing to stream");
        return NULL;
    }

    // 3. The training stream: forward with checkpoints, the tail forward and
    //    backward, the layers' backward in reverse, recomputing each
    //    layer's forward first, and the head's backward.
    Builder b = {.a = a, .p = p};
    forward_layers(&b, slot, ckpt, ckpt_bytes);
    run(&b, PART_TAIL, 0, tail->nodes.n, -1);
    emit(&b, INS_LOSS)->src = addr(p, tail->output);
    grads_out(&b, PART_TAIL, -1);
    int64_t x_bytes = node_bytes(x);
    copy(&b, addr(p, d_tail_x->grad), addr(p, block->grad_seed), x_bytes);
    for (int64_t l = g->layers - 1; l >= 0; l--) {
        copy_in_weights(&b, l, slot);
        copy(&b, ckpt + l * ckpt_bytes, addr(p, x), x_bytes);
        run(&b, PART_BLOCK, 0, block->nfwd, (int)l);
        run(&b, PART_BLOCK, block->nfwd, block->nodes.n, (int)l);
        grads_out(&b, PART_BLOCK, l);
        copy(&b, addr(p, d_x->grad), addr(p, l > 0 ? block->grad_seed : head->grad_seed), x_bytes);
    }
    run(&b, PART_HEAD, head->nfwd, head->nodes.n, -1);
    grads_out(&b, PART_HEAD, -1);
    p->train = finish(&b, &p->ntrain);

    // 4. The evaluation stream: forward and loss only.
    forward_layers(&b, slot, ckpt, ckpt_bytes);
    run(&b, PART_TAIL, 0, tail->nfwd, -1);
    emit(&b, INS_LOSS)->src = addr(p, tail->output);
    p->eval = finish(&b, &p->neval);
    if (b.failed) goto oom;
    return p;
oom:
    snprintf(err, errcap, "out of memory while scheduling");
    return NULL;
}
