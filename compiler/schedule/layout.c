// layout.c: the scheduler's passes 1 to 3 (schedule.c lists them): the host
// store layout, the buffer layout of each part, and one choice's device
// arena with every node's offset in it.
#include "compiler/schedule/schedule_internal.h"

#include "compiler/fuse/fuse.h"
#include "common/scratch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- pass 1

// The host store: the globals the head reads, those only the tail reads,
// then one segment per layer, each parameter aligned to STORE_ALIGN_ELEMS
// inside its segment. -1 out of memory.
int lay_out_host_store(Plan *p, Arena *a) {
    const Graph *g = p->graph;
    const Part *head = &g->parts[PART_HEAD];
    p->param_offset = arena_alloc(a, (size_t)(g->params.n + 1) * sizeof(int64_t));
    unsigned char *head_reads = arena_alloc(a, (size_t)g->params.n + 1); // (params) whether the head reads it
    if (!p->param_offset || !head_reads) return -1;
    memset(head_reads, 0, (size_t)g->params.n + 1);
    for (int i = 0; i < head->nodes.n; i++) {
        const Node *n = head->nodes.items[i];
        if (n->op == OP_PARAM) head_reads[n->param] = 1;
    }
    for (int pass = 0; pass < 3; pass++) // the head's globals, the tail's, the layer's
        for (int i = 0; i < g->params.n; i++) {
            const Param *prm = g->params.items[i];
            if (pass != (prm->in_block ? 2 : !head_reads[i])) continue;
            int64_t *seg = prm->in_block ? &p->host_kind[prm->kind] : &p->host_global;
            p->param_offset[i] = *seg;
            *seg += storage_host_elems_of(shape_numel(&prm->shape));
            if (pass == 1) p->host_tail += storage_host_elems_of(shape_numel(&prm->shape));
        }
    if (!(p->layer_base = arena_alloc(a, (size_t)(g->layers + 1) * sizeof(int64_t)))) return -1;
    plan_lay_out_layers(p);
    return 0;
}

// ---------------------------------------------------------------- pass 2

// What part's backward needs of its forward (BlockNeeds) into bn.
int block_needs(const Part *part, DType compute, Arena *a, BlockNeeds *bn) {
    int n = part->nodes.n;
    *bn = (BlockNeeds){.saved = arena_alloc(a, (size_t)n + 1), .kept = arena_alloc(a, (size_t)n + 1)};
    if (!bn->saved || !bn->kept) return -1;
    memset(bn->saved, 0, (size_t)n + 1);
    memset(bn->kept, 0, (size_t)n + 1);
    for (int i = 0; i < n; i++) {
        const Node *nd = part->nodes.items[i];
        if (is_alias(nd)) continue;
        for (int j = 0; j < nd->nin; j++) {
            const Node *b = base_of(nd->in[j]);
            if (b->op == OP_PARAM || b->id >= part->nfwd) continue;
            if (i >= part->nfwd) bn->saved[b->id] = 1;
            if (is_heavy(b) && (i >= part->nfwd || !is_heavy(nd))) bn->kept[b->id] = 1;
        }
    }
    for (int i = 0; i < n; i++) {
        const Node *nd = part->nodes.items[i];
        if (bn->saved[i]) bn->saved_bytes += align_up(node_bytes(compute, nd), ARENA_ALIGN);
        if (bn->kept[i]) bn->kept_bytes += align_up(node_bytes(compute, nd), ARENA_ALIGN);
    }
    return 0;
}

// A stretch of the timeline (ticks, one per node run) during which a
// node's buffer holds a value someone still reads. A node run several
// times (a recomputed forward) has several.
typedef struct Interval {
    int node;
    int start, end; // ticks, inclusive
    int next;       // the node's next interval, or -1
} Interval;

typedef struct Slot {
    int node;
    int lo, hi; // the first and last tick of any of the node's intervals
    int64_t bytes, off;
} Slot;

static int by_size(const void *a, const void *b) {
    const Slot *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->node - y->node;
}

// Whether any interval of node a meets any of node b.
static int meet(const Interval *iv, const int *first, int a, int b) {
    for (int i = first[a]; i >= 0; i = iv[i].next)
        for (int j = first[b]; j >= 0; j = iv[j].next)
            if (iv[i].start <= iv[j].end && iv[j].start <= iv[i].end) return 1;
    return 0;
}

// Lays out a part's buffers for a timeline: the node ranges
// ranges[2k] .. ranges[2k+1] run one after another (a node may run in
// several). rel[i] is node i's byte offset from the part's base (-1 for
// views, reshapes and parameters); returns the bytes needed, or -1 out of
// memory. A value lives from the run that writes it to the last run that
// reads it before it is written again, stretched where instructions outside
// the runs touch it: inputs are written before the part runs and may be
// saved after it, so they live throughout; the output lives to the end of
// the range that makes it (it is copied after), the tail's to the end (the
// loss is read after); gradients live to the end (copied after the
// backward); kept nodes (selective recomputation saves them after the
// forward and restores them before the recompute) live from the start to at
// least the forward's end; what a block's forward reports (plan_report_marks)
// lives to the end of the forward's range (it is read after the run).
static int64_t layout_part(const Part *part, DType compute, const unsigned char *kept, const int *ranges, int nranges,
                           int64_t *rel) {
    int n = part->nodes.n, ticks = 0;
    for (int r = 0; r < nranges; r++) ticks += ranges[2 * r + 1] - ranges[2 * r];
    Interval *iv = calloc((size_t)(ticks + n) + 1, sizeof *iv);
    int *first = malloc(((size_t)n + 1) * sizeof *first), *cur = malloc(((size_t)n + 1) * sizeof *cur);
    Slot *slot = calloc((size_t)n + 1, sizeof *slot);
    Slot **placed = calloc((size_t)n + 1, sizeof *placed);
    unsigned char *reported = calloc((size_t)n + 1, 1); // (n) what the forward reports: read after its run
    // A fused kernel (fuse.c) runs at its anchor, reading every argument
    // then, and may write its results from its first node on: node i is
    // written from kstart[i] and reads its operands at kend[i].
    const int *kstart = part->span_first, *kend = part->span_anchor;
    int64_t total = -1;
    if (!iv || !first || !cur || !slot || !placed || !reported || !kstart || !kend) goto done;
    if (part_is_block(part->output->part)) plan_report_marks(part, reported);
    int niv = 0, t = 0, out = base_of(part->output)->id;
    for (int i = 0; i < n; i++) first[i] = cur[i] = -1;
    for (int i = 0; i < n; i++) // inputs: throughout
        if (((const Node *)part->nodes.items[i])->op == OP_INPUT) {
            iv[niv] = (Interval){.node = i, .start = 0, .end = ticks, .next = -1};
            first[i] = cur[i] = niv++;
        }
    for (int r = 0; r < nranges; r++) {
        int from = ranges[2 * r], to = ranges[2 * r + 1], base = t - from, range_end = base + to - 1;
        for (int i = from; i < to; i++, t++) {
            const Node *nd = part->nodes.items[i];
            if (is_alias(nd) || nd->op == OP_PARAM || nd->op == OP_INPUT) continue;
            int until = base + (kend[i] < to ? kend[i] : to - 1); // when node i's kernel reads
            for (int j = 0; j < nd->nin; j++) {
                const Node *b = base_of(nd->in[j]);
                if (cur[b->id] >= 0 && iv[cur[b->id]].end < until) iv[cur[b->id]].end = until;
            }
            int since = base + (kstart[i] > from ? kstart[i] : from);
            iv[niv] = (Interval){.node = i, .start = since < t ? since : t, .end = t, .next = first[i]};
            if (kept && kept[i]) { // restored before the recompute, saved after the forward
                iv[niv].start = 0;
                if (iv[niv].end < part->nfwd - 1) iv[niv].end = part->nfwd - 1;
            }
            if (i == out) iv[niv].end = part->output->shape.rank == 0 ? ticks : range_end;
            int fwd_end = base + (to < part->nfwd ? to : part->nfwd) - 1; // the end of this range's forward
            if (reported[i] && iv[niv].end < fwd_end) iv[niv].end = fwd_end;
            first[i] = cur[i] = niv++;
        }
    }
    for (int g = 0; g < part->grads.n; g++) { // copied out after the backward
        const Grad *gr = part->grads.items[g];
        if (!gr->grad) continue;
        int b = base_of(gr->grad)->id;
        if (cur[b] >= 0) iv[cur[b]].end = ticks;
    }
    if (part->output->shape.rank == 0) // the loss, read after the runs
        for (int k = first[out]; k >= 0; k = iv[k].next) iv[k].end = ticks;

    // Largest first, each at the lowest offset clear of every placed buffer
    // whose value lives at the same time (placed kept sorted by offset).
    int m = 0;
    for (int i = 0; i < n; i++) {
        const Node *nd = part->nodes.items[i];
        rel[i] = -1;
        if (is_alias(nd) || nd->op == OP_PARAM || first[i] < 0) continue;
        slot[m] = (Slot){.node = i, .lo = ticks, .hi = 0, .bytes = align_up(node_bytes(compute, nd), ARENA_ALIGN)};
        for (int k = first[i]; k >= 0; k = iv[k].next) {
            if (iv[k].start < slot[m].lo) slot[m].lo = iv[k].start;
            if (iv[k].end > slot[m].hi) slot[m].hi = iv[k].end;
        }
        m++;
    }
    qsort(slot, (size_t)m, sizeof *slot, by_size);
    total = 0;
    int np = 0;
    for (int k = 0; k < m; k++) {
        Slot *v = &slot[k];
        int64_t off = 0;
        for (int q = 0; q < np; q++) {
            const Slot *u = placed[q];
            if (u->off + u->bytes <= off || u->hi < v->lo || v->hi < u->lo || !meet(iv, first, u->node, v->node))
                continue;
            if (u->off >= off + v->bytes) break;
            off = u->off + u->bytes;
        }
        v->off = off;
        int at = np; // keep placed sorted by offset
        while (at > 0 && placed[at - 1]->off > off) at--;
        memmove(&placed[at + 1], &placed[at], (size_t)(np - at) * sizeof *placed);
        placed[at] = v;
        np++;
        if (off + v->bytes > total) total = off + v->bytes;
        rel[v->node] = off;
    }
done:
    free(iv);
    free(first);
    free(cur);
    free(slot);
    free(placed);
    free(reported);
    return total;
}

static int push_range(int *ranges, int n, int from, int to) {
    ranges[2 * n] = from;
    ranges[2 * n + 1] = to;
    return n + 1;
}

// The order a tiled part runs in when its backward runs (the block's
// recompute-and-backward, the tail's forward-and-backward): what comes
// before the chunks; the gradient into the chunks; then chunk by chunk, last
// first, its forward and at once its backward, so that one chunk's values
// live at a time; the tail then joins the chunks' losses; last the backward
// of what came before the chunks. Fills ranges (pairs) and returns how many.
int tiled_order(const Part *part, int *ranges) {
    int K = part->nchunks, n = 0;
    const int *f = part->chunk_fwd, *b = part->chunk_bwd;
    n = push_range(ranges, n, 0, f[0]);
    n = push_range(ranges, n, part->nfwd, b[2 * (K - 1)]);
    for (int c = K - 1; c >= 0; c--) {
        n = push_range(ranges, n, f[2 * c], f[2 * c + 1]);
        n = push_range(ranges, n, b[2 * c], b[2 * c + 1]);
    }
    if (part->output->shape.rank == 0) n = push_range(ranges, n, f[2 * K - 1], part->nfwd); // the loss
    return push_range(ranges, n, b[1], part->nodes.n);
}

// The fused kernels' spans and every layout of every part, once per graph.
// Call before any arena_mark whose release could take them.
int prepare_parts(Graph *g, Arena *a) {
    const Part *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL]; // (every block kind is tiled alike)
    if (block->layout_rel[LAYOUT_PLAIN]) return 0;
    int chunks = block->nchunks > tail->nchunks ? block->nchunks : tail->nchunks;
    int *ranges = arena_alloc(a, (size_t)(4 * chunks + 8) * 2 * sizeof(int));
    if (!ranges) return -1;
    if (!g->kernels) return -1; // (the compile path fuses every graph it schedules: compiler/compile.c)
    if (!g->kernel_scratch) g->kernel_scratch = program_scratch_bytes(g->kernels, g); // as mtc -o writes them
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        Part *part = &g->parts[pk];
        int *first = arena_alloc(a, (size_t)(part->nodes.n + 1) * sizeof(int)),
            *anchor = arena_alloc(a, (size_t)(part->nodes.n + 1) * sizeof(int));
        if (!first || !anchor) return -1;
        fuse_spans(part, &g->kernels->parts[pk], first, anchor);
        part->span_first = first, part->span_anchor = anchor;
        BlockNeeds need = {0};
        if (part_is_block(pk) && block_needs(part, g->train.compute, a, &need) != 0) return -1;
        for (int v = LAYOUT_PLAIN; v <= LAYOUT_TILED; v++) {
            if (v != LAYOUT_PLAIN && (!part_is_block(pk) || (v == LAYOUT_TILED && !part->nchunks))) continue;
            int nr = 1;
            ranges[0] = 0;
            ranges[1] = part->nodes.n;
            if (v == LAYOUT_TILED || (pk == PART_TAIL && part->nchunks)) {
                ranges[1] = part->nfwd;
                nr += tiled_order(part, ranges + 2);
            }
            int64_t *rel = arena_alloc(a, (size_t)(part->nodes.n + 1) * sizeof(int64_t));
            if (!rel) return -1;
            const unsigned char *kept = v == LAYOUT_KEPT ? need.kept : NULL;
            part->layout_bytes[v] = layout_part(part, g->train.compute, kept, ranges, nr, rel);
            if (part->layout_bytes[v] < 0) return -1;
            part->layout_rel[v] = rel;
        }
    }
    return 0;
}

// ---------------------------------------------------------------- pass 3

// The picks, as PICK_* says (schedule_internal.h), without a division (the
// mixed search fills one for each of its pairs): rl = l P mod n and
// rj = j K mod P step on.
void fill_picks(uint8_t *pick, int64_t n, int64_t k, int64_t s) {
    int64_t picks = k + s, rl = 0, rj = 0;
    for (int64_t l = 0; l < n; l++) {
        rl += picks; // (P <= n: floor((l + 1) P / n) passes floor(l P / n) by at most 1)
        if (rl < n) {
            pick[l] = PICK_NONE;
            continue;
        }
        rl -= n;
        rj += k;
        pick[l] = rj >= picks ? PICK_OFFLOAD : PICK_HOST_SELECTIVE;
        if (rj >= picks) rj -= picks;
    }
}

// Fills b->pick, b->act_at and b->rank for the leaving layers. -1 out of memory.
static int pick_modes(Builder *b) {
    const SchedChoice *c = b->c;
    int64_t n = b->leaving, recomputed = 0, saved = 0, x = align_up(b->x_bytes, ARENA_ALIGN);
    b->pick = arena_alloc(b->a, (size_t)(n + 1));
    b->act_at = arena_alloc(b->a, (size_t)(n + 1) * sizeof(int64_t));
    b->rank = arena_alloc(b->a, (size_t)(n + 1) * sizeof(int64_t));
    if (!b->pick || !b->act_at || !b->rank) return -1;
    if (c->probe_layer > 0) { // the probe's one pick
        memset(b->pick, PICK_NONE, (size_t)n);
        b->pick[c->probe_layer - 1] = c->offloaded ? PICK_OFFLOAD : PICK_HOST_SELECTIVE;
    } else if (c->remat == REMAT_OFFLOAD) fill_picks(b->pick, n, n, 0); // every layer offloads
    else fill_picks(b->pick, n, c->offloaded, c->host_selective);
    for (int64_t l = 0; l < n; l++) {
        b->rank[l] = recomputed;
        recomputed += b->pick[l] == PICK_NONE;
        b->act_at[l] = saved;
        saved += b->pick[l] == PICK_OFFLOAD          ? need_of(b, l)->saved_bytes
                 : b->pick[l] == PICK_HOST_SELECTIVE ? x + need_of(b, l)->kept_bytes
                 : c->ckpt_host                      ? x
                                                     : 0;
    }
    b->act_at[n] = saved, b->rank[n] = recomputed;
    return 0;
}

// The sizes the arena's regions are made of, and which layers leave the
// device and how (pick_modes). -1 out of memory.
static int size_regions(Builder *b) {
    Plan *p = b->p;
    const Graph *g = p->graph;
    const SchedChoice *c = b->c;
    const Part *block = &g->parts[PART_BLOCK];
    const Node *x = part_input_from(block, PART_HEAD);
    b->streamed = g->layers - c->resident;
    b->nframes = (b->streamed > 0 ? c->slots : 0) + (int)c->resident;
    if (b->nframes < 1) b->nframes = 1;
    p->nframes = b->nframes;
    DType compute = g->train.compute;
    int64_t wbytes = storage_weight_bytes(compute);
    b->layer_bytes = align_up(shard_span(p, p->host_layer) * wbytes, ARENA_ALIGN); // (sharded: room to all-gather)
    b->x_bytes = node_bytes(compute, x);
    b->carry_bytes = align_up(b->x_bytes, ARENA_ALIGN);
    b->keep_bytes = 0; // a keep place holds any kind's kept outputs
    for (int k = 0; k < g->nkinds; k++)
        if (b->need[k].kept_bytes > b->keep_bytes) b->keep_bytes = b->need[k].kept_bytes;
    b->leaving = 0; // the streamed layers the backward will not find intact: a prefix
    while (b->leaving < b->streamed && !is_intact(b, b->leaving)) b->leaving++;
    if (pick_modes(b) != 0) return -1;
    p->host_act_bytes = act_addr(b, b->leaving);
    return 0;
}

// The layouts of pass 2 (prepare_parts) this choice's timeline takes, into
// rel and bytes (PART_COUNT); a frame holds any block kind's. -1 when they
// were not prepared.
static int choose_layouts(Builder *b, const int64_t **rel, int64_t *bytes) {
    const Graph *g = b->p->graph;
    const SchedChoice *c = b->c;
    b->frame_bytes = 0;
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        Layout v = !part_is_block(pk)                                 ? LAYOUT_PLAIN
                   : b->tiled                                         ? LAYOUT_TILED
                   : c->remat == REMAT_SELECTIVE || c->host_selective ? LAYOUT_KEPT
                                                                      : LAYOUT_PLAIN;
        rel[pk] = g->parts[pk].layout_rel[v], bytes[pk] = g->parts[pk].layout_bytes[v];
        if (!rel[pk]) return -1;
        if (part_is_block(pk) && align_up(bytes[pk], ARENA_ALIGN) > b->frame_bytes)
            b->frame_bytes = align_up(bytes[pk], ARENA_ALIGN);
    }
    return 0;
}

// The regions one after another from 0: the globals, the weight slots,
// the frames, the head's and the tail's buffers, the carry, the device
// checkpoints, megatrain's block inputs, the kept outputs and (sharded) the
// gradient staging. bytes (PART_COUNT): each part's layout. Returns the
// arena's size.
static int64_t place_regions(Builder *b, const int64_t *bytes) {
    const Plan *p = b->p;
    const SchedChoice *c = b->c;
    int64_t wbytes = storage_weight_bytes(p->graph->train.compute);
    int64_t top = 0;
    b->globals = top;
    top = p->sharded ? globals_addr(b, SEG_TAIL) + shard_span(p, p->host_tail) * wbytes : top + p->host_global * wbytes;
    top = align_up(top, ARENA_ALIGN);
    b->slot0 = top;
    top += b->nframes * b->layer_bytes;
    b->frame0 = top;
    top += b->nframes * b->frame_bytes;
    // The head's and the tail's buffers share one region: the tail runs after
    // the head's forward, and the head's backward reruns its forward after
    // the tail is done. Tiled, the region is the frames' (no resident or
    // intact layer: nothing in a frame outlives its layer).
    b->over_frames = b->tiled;
    int64_t most = bytes[PART_HEAD] > bytes[PART_TAIL] ? bytes[PART_HEAD] : bytes[PART_TAIL];
    b->head0 = b->tail0 = b->over_frames ? b->frame0 : top;
    if (b->head0 + most > top) top = b->head0 + most;
    top = align_up(top, ARENA_ALIGN);
    b->carry0 = top;
    top += b->carry_bytes;
    b->ckpt0 = top;
    // device checkpoints and kept outputs: a place for each streamed layer that does not offload
    // (recompute_rank; megatrain: one a block of MEGATRAIN_BLOCK layers)
    int64_t recomputed = b->streamed - b->leaving + recompute_rank(b, b->leaving);
    if (c->policy == POLICY_MEGATRAIN) recomputed = (b->streamed + MEGATRAIN_BLOCK - 1) / MEGATRAIN_BLOCK;
    if (!c->ckpt_host && (c->remat == REMAT_LAYER || c->remat == REMAT_SELECTIVE)) top += recomputed * b->x_bytes;
    top = align_up(top, ARENA_ALIGN);
    b->block0 = top;
    if (c->policy == POLICY_MEGATRAIN) top = align_up(top + MEGATRAIN_BLOCK * b->x_bytes, ARENA_ALIGN);
    b->keep0 = top;
    if (c->remat == REMAT_SELECTIVE) top += recomputed * b->keep_bytes;
    b->gslot = align_up(top, ARENA_ALIGN); // sharded: the longest segment's gradients in fp32, for its reduce-scatter
    if (p->sharded) {
        top = b->gslot;
        int64_t longest = p->host_layer;
        for (int64_t seg = SEG_FIRST; seg < 0; seg++)
            if (plan_segment_len(p, seg) > longest) longest = plan_segment_len(p, seg);
        top += align_up(shard_span(p, longest) * 4, ARENA_ALIGN);
    }
    return top;
}

// Every node's offset: parameters in their weights, the rest at its
// part's base plus its place in the layout (rel, PART_COUNT); the block
// once per frame. -1 out of memory.
static int place_nodes(Builder *b, const int64_t **rel) {
    Plan *p = b->p;
    const Graph *g = p->graph;
    int64_t wbytes = storage_weight_bytes(g->train.compute);
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        const Part *part = &g->parts[pk];
        int frames = part_is_block(pk) ? b->nframes : 1;
        int64_t *off = p->node_offset[pk] = arena_alloc(b->a, (size_t)(part->nodes.n * frames + 1) * sizeof(int64_t));
        if (!off) return -1;
        int64_t base = pk == PART_HEAD ? b->head0 : b->tail0;
        for (int f = 0; f < frames; f++)
            for (int i = 0; i < part->nodes.n; i++) {
                const Node *n = part->nodes.items[i];
                int64_t *o = &off[(int64_t)f * part->nodes.n + i];
                if (is_alias(n)) *o = -1;
                else if (n->op == OP_PARAM) {
                    const Param *prm = g->params.items[n->param];
                    int64_t at = p->param_offset[n->param], seg = plan_segment_of(p, at); // (a global's)
                    *o = prm->in_block ? slot_addr(b, f) + at * wbytes
                                       : globals_addr(b, seg) + (at - plan_segment_base(p, seg)) * wbytes;
                } else *o = (part_is_block(pk) ? frame_addr(b, f) : base) + rel[pk][i];
            }
    }
    return 0;
}

// Pass 3: the arena. Returns 0, or -1 with a message.
int lay_out_arena(Builder *b, const Target *t, char *err, size_t errcap) {
    Plan *p = b->p;
    const int64_t *rel[PART_COUNT];
    int64_t bytes[PART_COUNT];
    if (size_regions(b) != 0) return snprintf(err, errcap, "out of memory while scheduling"), -1;
    if (choose_layouts(b, rel, bytes) != 0)
        return snprintf(err, errcap, "internal error: the part's layouts were not prepared"), -1;
    p->arena_bytes = place_regions(b, bytes);
    // each engine that runs kernels gets their scratch beside the arena on a GPU (the cpu's is host memory)
    p->scratch_bytes = strncmp(t->arch, "sm_", 3) == 0 ? p->graph->kernel_scratch : 0;
    p->device_limit = (int64_t)t->device_memory;
    if (place_nodes(b, rel) != 0) return snprintf(err, errcap, "out of memory while scheduling"), -1;
    return 0;
}
