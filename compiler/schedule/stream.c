// stream.c: the scheduler's passes 4 and 5 (schedule.c lists them): one
// choice's training stream and evaluation stream, instruction by
// instruction on the four engines, joined by events.
#include "compiler/schedule/schedule_internal.h"

#include <string.h>

// ---------------------------------------------------------------- instructions

static Instr *emit(Builder *b, InsKind kind, Engine e) {
    Instr *in = arena_alloc(b->a, sizeof *in);
    if (!in || ptrvec_push(b->a, &b->ins, in) != 0) {
        b->failed = 1;
        static Instr sink;
        return &sink;
    }
    *in = (Instr){.kind = kind, .engine = b->serial ? ENG_COMPUTE : e, .layer = -1, .event = -1};
    return in;
}

static int record(Builder *b, Engine e) {
    if (b->serial) return -1;
    Instr *in = emit(b, INS_RECORD, e);
    in->event = b->p->nevents++;
    return in->event;
}

static void wait_for(Builder *b, Engine e, int ev) {
    if (ev < 0 || b->serial) return;
    emit(b, INS_WAIT, e)->event = ev;
}

// Keeps the WAITs that order something: a WAIT whose event was recorded at
// a point its engine already follows (through its own order and the WAITs
// it kept) goes. Vector clocks, in array order, as the verifier computes
// them; what happens before what is unchanged. Returns the new count.
static int32_t drop_redundant_waits(Builder *b, Instr *ins, int32_t n) {
    int32_t(*rec)[ENG_COUNT] = arena_alloc(b->a, (size_t)(b->p->nevents + 1) * sizeof *rec); // (nevents) clocks
    int32_t cur[ENG_COUNT][ENG_COUNT] = {{0}}; // each engine's clock after its last instruction
    if (!rec) return b->failed = 1, n;
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        int32_t *c = cur[in->engine];
        if (in->kind == INS_WAIT) {
            const int32_t *r = rec[in->event]; // recorded earlier in the array: the builder waits for nothing later
            int follows = 1;
            for (int e = 0; e < ENG_COUNT; e++) follows &= c[e] >= r[e];
            if (follows) continue;
            for (int e = 0; e < ENG_COUNT; e++) c[e] = c[e] > r[e] ? c[e] : r[e];
        }
        c[in->engine]++;
        if (in->kind == INS_RECORD) memcpy(rec[in->event], c, sizeof rec[0]);
        ins[kept++] = *in;
    }
    return kept;
}

static Instr *finish(Builder *b, int32_t *n) {
    Instr *out = arena_alloc(b->a, (size_t)(b->ins.n + 1) * sizeof(Instr));
    if (!out) b->failed = 1;
    for (int i = 0; out && i < b->ins.n; i++) out[i] = *(Instr *)b->ins.items[i];
    *n = out ? drop_redundant_waits(b, out, b->ins.n) : b->ins.n;
    b->ins = (PtrVec){0};
    return out;
}

// The arena address of a node's data in a frame, following views.
static int64_t addr(const Plan *p, const Node *n, int frame) {
    int64_t off = 0, elem = storage_elem_bytes(p->graph->train.compute, n);
    while (is_alias(n)) {
        if (n->op == OP_VIEW) off += n->offset * elem;
        n = n->in[0];
    }
    return plan_offsets(p, n->part, part_is_block(n->part) ? frame : 0)[n->id] + off;
}

static void copy(Builder *b, int64_t src, int64_t dst, int64_t bytes) {
    Instr *in = emit(b, INS_COPY, ENG_COMPUTE);
    in->src = src;
    in->dst = dst;
    in->bytes = bytes;
}

static void run(Builder *b, PartKind part, int from, int to, int64_t layer, int frame, int flags) {
    Instr *in = emit(b, INS_RUN, ENG_COMPUTE);
    in->part = part;
    in->from = from;
    in->to = to;
    in->layer = (int32_t)layer;
    in->frame = frame;
    in->flags = flags;
}

// What layer l's forward, just run in frame f, reports (plan_report_marks):
// each value read out on the compute engine, before anything after the run
// can overwrite it, into the stream's host statistics buffer.
static void report_stats(Builder *b, int64_t l, int f) {
    const Part *block = &b->p->graph->parts[block_part(b->p->graph, l)];
    unsigned char *marks = arena_alloc(b->a, (size_t)block->nodes.n + 1); // (nodes.n)
    if (!marks) {
        b->failed = 1;
        return;
    }
    plan_report_marks(block, marks);
    DType compute = b->p->graph->train.compute;
    for (int i = 0; i < block->nfwd; i++) {
        if (!marks[i]) continue;
        const Node *n = block->nodes.items[i];
        Instr *in = emit(b, INS_STAT, ENG_COMPUTE);
        in->part = n->part;
        in->from = n->id;
        in->layer = (int32_t)l;
        in->frame = f;
        in->src = addr(b->p, n, f);
        in->bytes = node_bytes(compute, n);
        in->flags = storage_elem_bytes(compute, n) == 2 ? XFER_BF16 : 0;
        in->dst = b->stat_bytes;
        b->stat_bytes += in->bytes;
    }
}

static void host_op(Builder *b, InsKind kind, int64_t layer) { emit(b, kind, ENG_HOST)->layer = (int32_t)layer; }

// Segment seg's weights (a layer's, or SEG_HEAD's or SEG_TAIL's) -> arena
// dst; nothing for an empty global segment. Sharded: this rank's shard,
// then the all-gather of every rank's on the comm engine, which the copy-in
// engine waits for, so that whatever waits for the copy-in finds the
// segment whole.
static void copy_in_weights(Builder *b, int64_t seg, int64_t dst) {
    const Plan *p = b->p;
    DType compute = p->graph->train.compute;
    int64_t wbytes = storage_weight_bytes(compute);
    if (seg < 0 && plan_segment_len(p, seg) == 0) return;
    Instr *in = emit(b, INS_COPY_IN, ENG_COPY_IN);
    in->layer = (int32_t)seg;
    in->src = plan_segment_base(p, seg);
    in->dst = dst;
    in->bytes = plan_segment_len(p, seg) * wbytes;
    in->flags = (compute == DT_BF16 ? XFER_BF16 : 0) | (p->sharded ? XFER_SHARD : 0);
    if (!p->sharded) return;
    wait_for(b, ENG_COMM, record(b, ENG_COPY_IN));
    Instr *g = emit(b, INS_ALLGATHER, ENG_COMM);
    g->layer = (int32_t)seg;
    g->dst = dst;
    g->bytes = shard_span(p, plan_segment_len(p, seg)) * wbytes;
    wait_for(b, ENG_COPY_IN, record(b, ENG_COMM));
}

// A host optimizer instruction of a global segment, unless it is empty.
static void global_op(Builder *b, InsKind kind, int64_t seg) {
    if (plan_segment_len(b->p, seg) > 0) host_op(b, kind, seg);
}

static void save(Builder *b, int64_t src, int64_t host, int64_t bytes) {
    Instr *in = emit(b, INS_SAVE, ENG_COPY_OUT);
    in->src = src;
    in->dst = host;
    in->bytes = bytes;
}

static void load(Builder *b, int64_t host, int64_t dst, int64_t bytes) {
    Instr *in = emit(b, INS_LOAD, ENG_COPY_IN);
    in->src = host;
    in->dst = dst;
    in->bytes = bytes;
}

static void free_region(Builder *b, Engine e, int64_t dst, int64_t bytes) {
    Instr *in = emit(b, INS_FREE, e);
    in->dst = dst;
    in->bytes = bytes;
}

// The model inputs a part reads (tokens, targets; the tail's loss scale, its
// gradient seed) go straight to its nodes.
static void feed_inputs(Builder *b, PartKind pk) {
    const Part *part = &b->p->graph->parts[pk];
    for (int i = 0; i < part->nodes.n; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op != OP_INPUT || n->src_part != SRC_MODEL_INPUT) continue;
        Instr *in = emit(b, INS_INPUT, ENG_COPY_IN);
        in->input = n->src;
        in->dst = addr(b->p, n, 0);
        in->bytes = node_bytes(b->p->graph->train.compute, n);
    }
}

// The host segment of a part's parameter: layer `layer`'s for a block's,
// the head's or the tail's globals'.
static int64_t segment_of_param(const Plan *p, PartKind pk, int param, int64_t layer) {
    return part_is_block(pk) ? layer : plan_segment_of(p, plan_param_elem(p, param, 0));
}

// Sharded grads_out: per segment the part has gradients of, each gradient
// (widened to fp32 where it is bf16) to its place in the gradient staging
// in the segment's host layout, once the staging's last COPY_OUTs are done;
// the reduce-scatter of the segment on the comm engine; then this rank's
// slice of each gradient out (COPY_OUT XFER_SHARD).
static void grads_out_sharded(Builder *b, PartKind pk, int64_t layer, int frame) {
    const Plan *p = b->p;
    const Part *part = &p->graph->parts[pk];
    DType compute = p->graph->train.compute;
    int block = part_is_block(pk);
    for (int64_t seg = block ? layer : SEG_TAIL; seg <= (block ? layer : SEG_HEAD); seg++) {
        int staged = 0;
        for (int i = 0; i < part->grads.n; i++) { // into the staging
            const Grad *g = part->grads.items[i];
            if (g->of->op != OP_PARAM || !g->grad || segment_of_param(p, pk, g->of->param, layer) != seg) continue;
            if (!staged++) wait_for(b, ENG_COMPUTE, b->ev_gslot);
            Instr *c = emit(b, INS_COPY, ENG_COMPUTE);
            c->src = addr(p, g->grad, frame);
            c->dst = b->gslot + (plan_param_elem(p, g->of->param, layer) - plan_segment_base(p, seg)) * 4;
            c->bytes = shape_numel(&g->of->shape) * 4;
            c->flags = storage_dtype(compute, g->grad) == DT_BF16 ? XFER_BF16 : 0;
        }
        if (!staged) continue;
        wait_for(b, ENG_COMM, record(b, ENG_COMPUTE));
        Instr *rs = emit(b, INS_REDUCE_SCATTER, ENG_COMM);
        rs->layer = (int32_t)seg;
        rs->src = b->gslot;
        rs->bytes = shard_span(p, plan_segment_len(p, seg)) * 4;
        wait_for(b, ENG_COPY_OUT, record(b, ENG_COMM));
        for (int i = 0; i < part->grads.n; i++) { // this rank's slice of each out
            const Grad *g = part->grads.items[i];
            if (g->of->op != OP_PARAM || !g->grad || segment_of_param(p, pk, g->of->param, layer) != seg) continue;
            Instr *in = emit(b, INS_COPY_OUT, ENG_COPY_OUT);
            in->layer = (int32_t)seg;
            in->dst = plan_param_elem(p, g->of->param, layer);
            in->src = b->gslot + (in->dst - plan_segment_base(p, seg)) * 4;
            in->bytes = shape_numel(&g->of->shape) * 4;
            in->flags = XFER_SHARD;
        }
        b->ev_gslot = record(b, ENG_COPY_OUT);
    }
}

// Adds a part's parameter gradients into the host accumulators: a block's
// into layer `layer`'s segment, the head's and the tail's into their
// globals' segments.
static void grads_out(Builder *b, PartKind pk, int64_t layer, int frame) {
    const Plan *p = b->p;
    const Part *part = &p->graph->parts[pk];
    if (p->sharded) {
        grads_out_sharded(b, pk, layer, frame);
        return;
    }
    for (int i = 0; i < part->grads.n; i++) {
        const Grad *g = part->grads.items[i];
        if (g->of->op != OP_PARAM || !g->grad) continue;
        Instr *in = emit(b, INS_COPY_OUT, ENG_COPY_OUT);
        in->dst = plan_param_elem(p, g->of->param, layer);
        in->layer = (int32_t)(part_is_block(pk) ? layer : plan_segment_of(p, in->dst));
        in->src = addr(p, g->grad, frame);
        DType compute = p->graph->train.compute;
        in->bytes = node_bytes(compute, g->grad);
        in->flags = storage_dtype(compute, g->grad) == DT_BF16 ? XFER_BF16 : 0;
    }
}

// ---------------------------------------------------------------- frames, forward, backward

// Before a frame takes a new layer: whatever the copy-out engine still
// reads of the old one is done, then its buffers are poisoned, on engine e.
static void claim_frame(Builder *b, int f, Engine e) {
    if (e != ENG_COMPUTE) wait_for(b, e, b->frame_cmp[f]);
    wait_for(b, e, b->frame_out[f]);
    free_region(b, e, frame_addr(b, f), b->frame_bytes);
}

// A layer's nodes that `which` marks (BlockNeeds.saved or .kept) go, one
// after another from byte `at` on, to the host activation store (host) or
// the device's keep area after the forward (restore 0), and come back before
// the backward or its recompute (restore 1). Selective recomputation keeps
// the matmul and attention outputs on the device; offload moves everything
// the backward reads to the host, at the layer's place; a picked layer of a
// mixed selective plan its kept outputs, after its checkpoint.
static void marked_copies(Builder *b, int64_t l, int f, int restore, const unsigned char *which, int host, int64_t at) {
    const Part *block = block_of(b->p->graph, l);
    for (int i = 0; i < block->nodes.n; i++)
        if (which[i]) {
            const Node *n = block->nodes.items[i];
            int64_t nb = node_bytes(b->p->graph->train.compute, n), node = addr(b->p, n, f);
            if (!host) copy(b, restore ? at : node, restore ? node : at, nb);
            else if (restore) load(b, at, node, nb);
            else save(b, node, at, nb);
            at += align_up(nb, ARENA_ALIGN);
        }
}
static void keep_copies(Builder *b, int64_t l, int f, int restore) {
    marked_copies(b, l, f, restore, need_of(b, l)->kept, 0, b->keep0 + recompute_rank(b, l) * b->keep_bytes);
}
static void offload_copies(Builder *b, int64_t l, int f, int restore) {
    marked_copies(b, l, f, restore, need_of(b, l)->saved, 1, act_addr(b, l));
}
static void keep_saves(Builder *b, int64_t l, int f, int restore) {
    marked_copies(b, l, f, restore, need_of(b, l)->kept, 1, act_addr(b, l) + align_up(b->x_bytes, ARENA_ALIGN));
}

// The forward of the head and every layer. Layer l's input comes from the
// previous layer's output, staged in the carry buffer; streamed layers that the backward will not find
// intact leave a checkpoint (layer, selective), kept matmul and attention
// outputs (selective) or everything the backward reads (offload).
// `ev_update[1 + l]` (or -1) is the host update layer l's weights wait
// for; [0] the head's globals', [1 + layers] the tail's.
static void forward(Builder *b, const int *ev_update, int train) {
    const Plan *p = b->p;
    const Graph *g = p->graph;
    const Part *head = &g->parts[PART_HEAD];
    wait_for(b, ENG_COPY_IN, ev_update ? ev_update[0] : -1);
    copy_in_weights(b, SEG_HEAD, globals_addr(b, SEG_HEAD));
    feed_inputs(b, PART_HEAD);
    wait_for(b, ENG_COMPUTE, record(b, ENG_COPY_IN));
    run(b, PART_HEAD, 0, head->nfwd, -1, 0, 0);
    // the head's buffers are the tail's (and, tiled, the first frame's): its output waits in the carry
    copy(b, addr(p, head->output, 0), b->carry0, b->x_bytes);
    int64_t prev = b->carry0;
    for (int64_t l = 0; l < g->layers; l++) {
        int f = frame_of(b, l);
        const Part *block = block_of(g, l);
        const Node *x = part_input_from(block, PART_HEAD);
        // weights in, once the host updated them and the frame's last user is done
        wait_for(b, ENG_COPY_IN, ev_update ? ev_update[l + 1] : -1);
        wait_for(b, ENG_COPY_IN, b->frame_cmp[f]);
        copy_in_weights(b, l, slot_addr(b, f));
        int ev_w = record(b, ENG_COPY_IN);
        claim_frame(b, f, ENG_COMPUTE);
        wait_for(b, ENG_COMPUTE, ev_w);
        int64_t xa = addr(p, x, f);
        copy(b, prev, xa, b->x_bytes);
        int leave = train && l < b->leaving, host = to_host(b, l);
        Remat rm = remat_of(b, l);
        if (leave && !host && (rm == REMAT_LAYER || rm == REMAT_SELECTIVE) && checkpoints(b, l))
            copy(b, xa, b->ckpt0 + recompute_rank(b, l) * b->x_bytes, b->x_bytes);
        run(b, block_part(g, l), 0, block->nfwd, l, f, 0);
        report_stats(b, l, f);
        if (leave && rm == REMAT_SELECTIVE && !keeps_on_host(b, l)) keep_copies(b, l, f, 0);
        copy(b, addr(p, block->output, f), b->carry0, b->x_bytes); // the frame may be the next layer's
        b->frame_cmp[f] = record(b, ENG_COMPUTE);
        if (leave && host && checkpoints(b, l)) {
            wait_for(b, ENG_COPY_OUT, b->frame_cmp[f]);
            if (rm == REMAT_OFFLOAD) offload_copies(b, l, f, 0);
            else save(b, xa, act_addr(b, l), b->x_bytes);
            if (keeps_on_host(b, l)) keep_saves(b, l, f, 0);
            b->frame_out[f] = record(b, ENG_COPY_OUT);
        }
        prev = b->carry0;
    }
    // the tail's own globals, updated last, go in behind the last layer's weights
    wait_for(b, ENG_COPY_IN, ev_update ? ev_update[g->layers + 1] : -1);
    copy_in_weights(b, SEG_TAIL, globals_addr(b, SEG_TAIL));
    // the tail's buffers are the head's (tiled: the frames' too, once nothing reads them any more);
    // its inputs go in once the head is done with them
    for (int f = 0; b->over_frames && f < b->nframes; f++) wait_for(b, ENG_COMPUTE, b->frame_out[f]);
    copy(b, prev, addr(p, part_input_from(&g->parts[PART_TAIL], block_part(g, g->layers - 1)), 0), b->x_bytes);
    wait_for(b, ENG_COPY_IN, record(b, ENG_COMPUTE));
    feed_inputs(b, PART_TAIL);
    wait_for(b, ENG_COMPUTE, record(b, ENG_COPY_IN));
}

// After layer l's backward in frame f: the gradient to the layer below
// (carry), the weight gradients to the host and their norm.
static void after_backward(Builder *b, int64_t l, int f) {
    const Part *block = block_of(b->p->graph, l);
    const Grad *d_x = part_grad_of(block, part_input_from(block, PART_HEAD));
    copy(b, addr(b->p, d_x->grad, f), b->carry0, b->x_bytes);
    b->frame_cmp[f] = record(b, ENG_COMPUTE);
    wait_for(b, ENG_COPY_OUT, b->frame_cmp[f]);
    grads_out(b, block_part(b->p->graph, l), l, f);
    b->frame_out[f] = record(b, ENG_COPY_OUT);
    wait_for(b, ENG_HOST, b->frame_out[f]);
    host_op(b, INS_NORM, l);
}

// The backward of layer l: weights and saved values back where needed,
// recompute where chosen, the gradient from the layer above in, the
// backward, the gradient to the layer below out, weight gradients to the
// host and their norm.
static void backward_layer(Builder *b, int64_t l) {
    const Plan *p = b->p;
    const Part *block = block_of(p->graph, l);
    PartKind pk = (PartKind)block_part(p->graph, l);
    const Node *x = part_input_from(block, PART_HEAD);
    Remat rm = remat_of(b, l);
    int f = frame_of(b, l);
    if (l < b->leaving) {
        wait_for(b, ENG_COPY_IN, b->frame_cmp[f]);
        copy_in_weights(b, l, slot_addr(b, f));
        int loads = to_host(b, l);
        if (loads) {
            claim_frame(b, f, ENG_COPY_IN);
            if (rm == REMAT_OFFLOAD) offload_copies(b, l, f, 1);
            else load(b, act_addr(b, l), addr(p, x, f), b->x_bytes);
            if (keeps_on_host(b, l)) keep_saves(b, l, f, 1);
        }
        int ev_w = record(b, ENG_COPY_IN);
        if (!loads) claim_frame(b, f, ENG_COMPUTE);
        wait_for(b, ENG_COMPUTE, ev_w);
        if (!loads) copy(b, b->ckpt0 + recompute_rank(b, l) * b->x_bytes, addr(p, x, f), b->x_bytes);
        if (rm == REMAT_SELECTIVE && !keeps_on_host(b, l)) keep_copies(b, l, f, 1);
        if (rm != REMAT_OFFLOAD && !b->tiled)
            run(b, pk, 0, block->nfwd, l, f, rm == REMAT_SELECTIVE ? RUN_SKIP_HEAVY : 0);
        // zero3-offload fetches once for the recompute and the backward: the recompute's fetch
        // stays live for the backward that follows it (stage3_max_reuse_distance, 1e9 elements
        // by default, spans a layer: partitioned_param_coordinator.py __params_to_release)
    }
    copy(b, b->carry0, addr(p, block->grad_seed, f), b->x_bytes); // the gradient from the layer above
    if (b->tiled && !is_resident(b, l)) {                         // recompute and backward, chunk by chunk
        int *ranges = b->ranges, nr = tiled_order(block, ranges);
        for (int r = 0; r < nr; r++) run(b, pk, ranges[2 * r], ranges[2 * r + 1], l, f, 0);
    } else {
        run(b, pk, block->nfwd, block->nodes.n, l, f, 0);
    }
    after_backward(b, l, f);
    // ZeRO-3 with offload_optimizer copies each gradient bucket to the host's fp32 buffer with a
    // blocking copy_ from the backward's hook (stage3.py partition_grads), so no further backward
    // is launched until it lands: the next layer's backward waits for this layer's gradients out
    if (b->c->policy == POLICY_ZERO3) wait_for(b, ENG_COMPUTE, b->frame_out[f]);
}

// Weights of layer l into frame f once the frame's last users are done;
// compute waits for them. Returns f.
static int weights_into_frame(Builder *b, int64_t l, int f) {
    wait_for(b, ENG_COPY_IN, b->frame_cmp[f]);
    copy_in_weights(b, l, slot_addr(b, f));
    int ev_w = record(b, ENG_COPY_IN);
    claim_frame(b, f, ENG_COMPUTE);
    wait_for(b, ENG_COMPUTE, ev_w);
    return f;
}

// The megatrain baseline's backward of layers [s, e), after MegaTrain's
// public code: the block's forward recomputed without autograd from its
// checkpoint, each layer's weights crossing again, its input kept
// (block0); then layer by layer from the top, the weights crossing a third
// time, prefetched: layer l takes the frame after its own, so the block's
// top layer goes in while the recompute's last layer still runs; then the
// forward again with autograd and the backward. Three forwards and three
// weight crossings a layer.
static void backward_block_megatrain(Builder *b, int64_t s, int64_t e) {
    const Plan *p = b->p;
    const Graph *g = p->graph;
    int64_t in0 = b->block0;
    if (b->c->ckpt_host) { // the checkpoint back from host memory, once it is saved and compute is done with the
                           // last block's inputs
        wait_for(b, ENG_COPY_IN, record(b, ENG_COPY_OUT));
        wait_for(b, ENG_COPY_IN, record(b, ENG_COMPUTE));
        load(b, act_addr(b, s), in0, b->x_bytes);
        wait_for(b, ENG_COMPUTE, record(b, ENG_COPY_IN));
    } else {
        copy(b, b->ckpt0 + recompute_rank(b, s) * b->x_bytes, in0, b->x_bytes);
    }
    for (int64_t l = s; l < e; l++) { // the block recompute, without autograd
        int f = weights_into_frame(b, l, frame_of(b, l));
        const Part *block = block_of(g, l);
        copy(b, in0 + (l - s) * b->x_bytes, addr(p, part_input_from(block, PART_HEAD), f), b->x_bytes);
        run(b, block_part(g, l), 0, block->nfwd, l, f, 0);
        if (l + 1 < e) copy(b, addr(p, block->output, f), in0 + (l + 1 - s) * b->x_bytes, b->x_bytes);
        b->frame_cmp[f] = record(b, ENG_COMPUTE);
    }
    for (int64_t l = e - 1; l >= s; l--) { // the forward with autograd and the backward
        int f = weights_into_frame(b, l, (frame_of(b, l) + 1) % b->nframes);
        const Part *block = block_of(g, l);
        copy(b, in0 + (l - s) * b->x_bytes, addr(p, part_input_from(block, PART_HEAD), f), b->x_bytes);
        run(b, block_part(g, l), 0, block->nfwd, l, f, 0);
        copy(b, b->carry0, addr(p, block->grad_seed, f), b->x_bytes); // the gradient from the layer above
        run(b, block_part(g, l), block->nfwd, block->nodes.n, l, f, 0);
        after_backward(b, l, f);
    }
}

// ---------------------------------------------------------------- pass 4

// The host updates the head's globals, the layers in forward order and the
// tail's globals, each segment's weights going in right after; the
// baselines finish every update before any copy. ev_update (L + 2): the
// event each update records, as forward() takes them.
static void host_updates(Builder *b, int *ev_update) {
    int64_t L = b->p->graph->layers;
    global_op(b, INS_UPDATE, SEG_HEAD);
    ev_update[0] = record(b, ENG_HOST);
    for (int64_t l = 0; l < L; l++) {
        host_op(b, INS_UPDATE, l);
        ev_update[l + 1] = record(b, ENG_HOST);
    }
    global_op(b, INS_UPDATE, SEG_TAIL);
    ev_update[L + 1] = record(b, ENG_HOST);
    Policy policy = b->c->policy;
    if (policy == POLICY_MEGATRAIN || policy == POLICY_ZERO3) // the optimizer after the backward, not overlapped
        for (int64_t l = 0; l <= L; l++) ev_update[l] = ev_update[L + 1];
}

// No frame has a last user yet.
static void reset_frames(Builder *b) {
    for (int f = 0; f < b->nframes; f++) b->frame_cmp[f] = b->frame_out[f] = -1;
}

// After the forward: the tail's forward and backward (chunk by chunk when
// tiled), the loss, the gradient into the carry, the tail's gradients out
// and the norm of its own globals. Returns the event of its gradients out:
// the tail's buffers are free.
static int tail_step(Builder *b) {
    Plan *p = b->p;
    const Graph *g = p->graph;
    const Part *tail = &g->parts[PART_TAIL];
    const Grad *d_tail_x = part_grad_of(tail, part_input_from(tail, block_part(g, g->layers - 1)));
    if (tail->nchunks) { // forward and backward chunk by chunk
        int nr = tiled_order(tail, b->ranges);
        for (int r = 0; r < nr; r++) run(b, PART_TAIL, b->ranges[2 * r], b->ranges[2 * r + 1], -1, 0, 0);
    } else {
        run(b, PART_TAIL, 0, tail->nodes.n, -1, 0, 0);
    }
    emit(b, INS_LOSS, ENG_COMPUTE)->src = addr(p, tail->output, 0);
    copy(b, addr(p, d_tail_x->grad, 0), b->carry0, b->x_bytes);
    int ev_tail = record(b, ENG_COMPUTE);
    wait_for(b, ENG_COPY_OUT, ev_tail);
    grads_out(b, PART_TAIL, -1, 0);
    int ev_tail_out = record(b, ENG_COPY_OUT); // the tail's gradients are out: its buffers are free
    if (p->host_tail) wait_for(b, ENG_HOST, ev_tail_out);
    global_op(b, INS_NORM, SEG_TAIL); // the tail's own globals have all their gradients
    if (b->c->policy == POLICY_ZERO3) wait_for(b, ENG_COMPUTE, ev_tail_out); // (as backward_layer says)
    for (int f = 0; b->over_frames && f < b->nframes; f++) // they were the frames': their next users wait for it
        b->frame_cmp[f] = ev_tail, b->frame_out[f] = ev_tail_out;
    return ev_tail_out;
}

// Every layer's backward from the top (megatrain: block by block).
static void backward_layers(Builder *b) {
    int64_t L = b->p->graph->layers;
    if (b->c->policy == POLICY_MEGATRAIN)
        for (int64_t s = (L - 1) / MEGATRAIN_BLOCK * MEGATRAIN_BLOCK; s >= 0; s -= MEGATRAIN_BLOCK)
            backward_block_megatrain(b, s, s + MEGATRAIN_BLOCK < L ? s + MEGATRAIN_BLOCK : L);
    else
        for (int64_t l = L - 1; l >= 0; l--) backward_layer(b, l);
}

// The head's buffers are the tail's (tiled: the frames' too): the tokens
// again, once nothing reads them any more, and the head's forward again
// (what it kept is gone), then its backward, its gradients out and the norm
// of its globals.
static void head_backward(Builder *b, int ev_tail_out) {
    const Plan *p = b->p;
    const Part *head = &p->graph->parts[PART_HEAD];
    for (int f = 0; b->over_frames && f < b->nframes; f++) wait_for(b, ENG_COMPUTE, b->frame_out[f]);
    wait_for(b, ENG_COMPUTE, ev_tail_out);
    int ev_done = record(b, ENG_COMPUTE);
    for (int f = 0; b->over_frames && f < b->nframes; f++) wait_for(b, ENG_COPY_IN, b->frame_out[f]);
    wait_for(b, ENG_COPY_IN, ev_tail_out);
    wait_for(b, ENG_COPY_IN, ev_done);
    feed_inputs(b, PART_HEAD);
    wait_for(b, ENG_COMPUTE, record(b, ENG_COPY_IN));
    copy(b, b->carry0, addr(p, head->grad_seed, 0), b->x_bytes);
    run(b, PART_HEAD, 0, head->nodes.n, -1, 0, 0);
    wait_for(b, ENG_COPY_OUT, record(b, ENG_COMPUTE));
    grads_out(b, PART_HEAD, -1, 0);
    wait_for(b, ENG_HOST, record(b, ENG_COPY_OUT));
    global_op(b, INS_NORM, SEG_HEAD);
}

// Pass 4: the training stream, into p->train.
void emit_train_stream(Builder *b) {
    int64_t L = b->p->graph->layers;
    // (L + 2) [0] the head's globals, [1 + l] layer l, [1 + L] the tail's globals
    int *ev_update = arena_alloc(b->a, (size_t)(L + 2) * sizeof(int));
    if (!ev_update) {
        b->failed = 1;
        return;
    }
    host_updates(b, ev_update);
    reset_frames(b);
    forward(b, ev_update, 1);
    int ev_tail_out = tail_step(b);
    backward_layers(b);
    head_backward(b, ev_tail_out);
    b->p->train = finish(b, &b->p->ntrain);
    b->stat_bytes = 0;
}

// ---------------------------------------------------------------- pass 5

// Pass 5: the evaluation stream, forward and loss only, into p->eval.
void emit_eval_stream(Builder *b) {
    const Part *tail = &b->p->graph->parts[PART_TAIL];
    reset_frames(b);
    forward(b, NULL, 0);
    run(b, PART_TAIL, 0, tail->nfwd, -1, 0, 0);
    emit(b, INS_LOSS, ENG_COMPUTE)->src = addr(b->p, tail->output, 0);
    b->p->eval = finish(b, &b->p->neval);
}
