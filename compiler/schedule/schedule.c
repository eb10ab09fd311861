// schedule.c: the ahead-of-time scheduler, as numbered passes.
//
//   1. host store layout: globals, then one contiguous segment per layer
//   2. buffer layout of each part: liveness intervals over the part's node
//      order, packed greedily (largest first) into the fewest bytes; the
//      block's layout is one "frame", instantiated once per weight slot
//   3. device arena: globals, frames (weight slot + buffers), the head and
//      the tail in one region (their values never live at once),
//      gradient carries, checkpoints and kept activations, a sharded plan's
//      gradient staging; on a GPU the
//      fused kernels' scratch beside it (common/scratch.h), counted in the
//      device memory every fit and figure uses (plan_device_bytes)
//   4. the training stream: the previous step's host updates overlapped
//      with this step's forward (each layer updated just before its weights
//      go in), the forward with checkpoints or offloads, the tail, the
//      backward with recompute where chosen, gradients out and their norms
//   5. the evaluation stream: forward and loss only
//   6. the search: for each remat mode, slot count and checkpoint place, the
//      most resident layers that fit, costed by the engine simulation of
//      cost.c; the fastest plan that fits wins
//
// Frames. A block frame is a weight slot plus a buffer for every node of
// the block, laid out by pass 2. Streamed layers rotate through `slots`
// frames (layer l in frame l % slots), so the next layer's weights copy in
// while this one computes; the last `resident` layers each own a frame and
// keep it from their forward to their backward: their weights cross the
// link once and nothing of theirs is recomputed. The last `slots` streamed
// layers are still intact in their frames when the backward reaches them,
// so they too skip the weight copy and the recompute.
//
// Sharded plans (SchedChoice.sharded, mtc --shard on). Each rank holds its
// shard of every segment (dist_shard); a segment's weights go in as the
// rank's slice (COPY_IN XFER_SHARD) and an INS_ALLGATHER on the comm engine,
// which the copy-in engine waits for, so everything that waits for a copy-in
// finds the segment whole; weight slots and the globals' region have room
// for ranks whole chunks (shard_span). A part's gradients of a segment are
// copied, widened to fp32, into the gradient staging at the end of the arena
// (its host layout, the longest segment's shard_span in fp32, one for all:
// the next segment's copies wait for the last one's COPY_OUTs), reduce-
// scattered on the comm engine, and this rank's slice of each copied out
// (COPY_OUT XFER_SHARD), as the replicated plan copies them out. Nothing else
// changes: the same frames, events and host instructions.
#include "compiler/schedule/schedule.h"

#include "compiler/fuse/fuse.h"
#include "common/scratch.h"
#include "common/storage.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ARENA_ALIGN = 256, MAX_SLOTS = 3 };
// The megatrain baseline checkpoints every MEGATRAIN_BLOCK-th layer's input.
enum { MEGATRAIN_BLOCK = 4 };

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
// Bytes of a node's buffer, by the storage rule (common/storage.h).
static int64_t node_bytes(DType compute, const Node *n) { return storage_bytes(compute, n); }
static int is_alias(const Node *n) { return n->op == OP_VIEW || n->op == OP_RESHAPE; }
static int is_heavy(const Node *n) { return op_is_heavy(n->op); }

static const Node *base_of(const Node *n) {
    while (is_alias(n)) n = n->in[0];
    return n;
}

const char *remat_name(Remat r) {
    static const char *const N[] = {"auto", "none", "layer", "selective", "offload", "mixed"};
    return r >= 0 && r < REMAT_COUNT ? N[r] : "?";
}
const char *policy_name(Policy p) {
    static const char *const N[] = {"mt", "sequential", "megatrain", "zero3-offload"};
    return p >= 0 && p < POLICY_COUNT ? N[p] : "?";
}

// ---------------------------------------------------------------- pass 2

// What the block's backward needs of its forward, per node (base buffers):
// saved[i] is set when a backward node reads forward node i; kept[i] when
// selective recomputation restores it rather than recomputing it (a matmul
// or attention output that a recomputed or backward node reads).
typedef struct BlockNeeds {
    unsigned char *saved, *kept; // (nodes.n)
    int64_t saved_bytes, kept_bytes;
} BlockNeeds;

static int block_needs(const Part *part, DType compute, Arena *a, BlockNeeds *bn) {
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
static int tiled_order(const Part *part, int *ranges) {
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

// The timelines a part's buffers are laid out for (Part.layout_rel): the
// whole part in order (the head, an untiled block, the tail in its own
// order), the block with selective recomputation's kept outputs alive from
// the start, or the block tiled: its forward alone, then its chunk-by-chunk
// order (the tail, when tiled, always runs so).
typedef enum { LAYOUT_PLAIN, LAYOUT_KEPT, LAYOUT_TILED } Layout;

// The fused kernels' spans and every layout of every part, once per graph.
// Call before any arena_mark whose release could take them.
static int prepare_parts(Graph *g, Arena *a) {
    const Part *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL]; // (every block kind is tiled alike)
    if (block->layout_rel[LAYOUT_PLAIN]) return 0;
    int chunks = block->nchunks > tail->nchunks ? block->nchunks : tail->nchunks;
    int *ranges = arena_alloc(a, (size_t)(4 * chunks + 8) * 2 * sizeof(int));
    if (!ranges) return -1;
    if (!g->kernel_scratch) { // the fused kernels' device scratch, as mtc -o writes them (mtc.c)
        Arena ka = {0};
        KirProgram prog;
        char err[256];
        int rc = fuse(g, &ka, &prog, err, sizeof err);
        if (rc == 0) g->kernel_scratch = program_scratch_bytes(&prog, g);
        arena_free(&ka);
        if (rc != 0) return -1;
    }
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        Part *part = &g->parts[pk];
        int *first = arena_alloc(a, (size_t)(part->nodes.n + 1) * sizeof(int)),
            *anchor = arena_alloc(a, (size_t)(part->nodes.n + 1) * sizeof(int));
        if (!first || !anchor || fuse_spans(part, first, anchor) != 0) return -1;
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
            part->layout_bytes[v] = layout_part(part, g->train.compute, v == LAYOUT_KEPT ? need.kept : NULL, ranges, nr, rel);
            if (part->layout_bytes[v] < 0) return -1;
            part->layout_rel[v] = rel;
        }
    }
    return 0;
}

// ---------------------------------------------------------------- builder

typedef struct Builder {
    Arena *a;
    Plan *p;
    const SchedChoice *c;
    const BlockNeeds *need; // (nkinds) what each block kind's backward needs of its forward
    PtrVec ins; // of Instr*
    int serial; // every instruction on the compute engine; no events
    int tiled;  // the block's backward recomputes and differentiates chunk by chunk (tile.c)
    int over_frames; // the head's and the tail's shared buffers lie over the frames' (nothing in a frame outlives its layer)
    int failed;
    // arena regions (pass 3)
    int64_t globals, slot0, frame0, head0, tail0, carry0, ckpt0, keep0;
    int64_t block0; // megatrain: the inputs of one block of MEGATRAIN_BLOCK layers, recomputed ([K, x_bytes])
    int64_t layer_bytes, frame_bytes, x_bytes, carry_bytes, keep_bytes;
    int64_t streamed;        // layers 0 .. streamed-1 rotate through the slots
    int64_t leaving;         // layers 0 .. leaving-1 leave the device between their forward and backward
    unsigned char *pick;     // (leaving) each leaving layer's PICK_* (pick_modes)
    int64_t *act_at;         // (leaving + 1) its place in the host activation store; [leaving] the store's size
    int64_t *rank;           // (leaving + 1) the recomputed layers before it (device checkpoint and keep places)
    int nframes;
    // (nframes) per frame: the last compute and copy-out events touching it (-1: none)
    int *frame_cmp, *frame_out;
    int *ranges; // (2 * (2 * chunks + 4)) a tiled part's run order, tiled_order()
    int64_t stat_bytes; // the stream's host statistics buffer so far (INS_STAT's dst)
    // Sharded: where the gradients of one segment gather in fp32, in its host layout, to be reduce-scattered
    // (shard_span of the longest segment), and the event that frees it again (its COPY_OUTs done; -1: free)
    int64_t gslot;
    int ev_gslot;
} Builder;

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
    int32_t (*rec)[ENG_COUNT] = arena_alloc(b->a, (size_t)(b->p->nevents + 1) * sizeof *rec); // (nevents) clocks
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

// Layer l's block part, and what its backward needs of its forward.
static const Part *block_of(const Graph *g, int64_t l) { return &g->parts[block_part(g, l)]; }
static const BlockNeeds *need_of(const Builder *b, int64_t l) { return &b->need[b->p->graph->layer_kind[l]]; }

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

// The elements a segment of len takes where its collectives run: ranks
// chunks of ceil(len / ranks) (dist_shard's) in a sharded plan, else len.
static int64_t shard_span(const Plan *p, int64_t len) {
    return p->sharded ? p->ranks * ((len + p->ranks - 1) / p->ranks) : len;
}

// Where global segment seg (SEG_HEAD or SEG_TAIL) lies in the arena: the
// globals' region holds them as the host store does, the head's then the
// tail's; sharded, each with room for its all-gather (shard_span).
static int64_t globals_addr(const Builder *b, int64_t seg) {
    const Plan *p = b->p;
    int64_t wbytes = storage_weight_bytes(p->graph->train.compute);
    if (!p->sharded || seg == SEG_HEAD) return b->globals + plan_segment_base(p, seg) * wbytes;
    return b->globals + align_up(shard_span(p, plan_segment_len(p, SEG_HEAD)) * wbytes, ARENA_ALIGN);
}

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

static int frame_of(const Builder *b, int64_t l) {
    return l < b->streamed ? (int)(l % b->c->slots) : (b->streamed > 0 ? b->c->slots : 0) + (int)(l - b->streamed);
}
static int is_resident(const Builder *b, int64_t l) { return l >= b->streamed; }
// A streamed layer that no later layer displaces from its frame before the
// backward reaches it (never under the baselines, which re-copy every layer).
static int is_intact(const Builder *b, int64_t l) {
    return !is_resident(b, l) && l + b->c->slots >= b->streamed && b->c->policy == POLICY_MT && !b->tiled;
}
static int64_t slot_addr(const Builder *b, int f) { return b->slot0 + f * b->layer_bytes; }
static int64_t frame_addr(const Builder *b, int f) { return b->frame0 + f * b->frame_bytes; }

// Per-layer modes (SchedChoice): of the `leaving` layers n, P = offloaded
// + host_selective are picked, spread evenly: layer l is picked when
// floor((l + 1) P / n) passes floor(l P / n); the j-th pick offloads when
// floor((j + 1) K / P) passes floor(j K / P), K = offloaded, and keeps
// selectively on the host otherwise. Remat offload offloads them all.
enum { PICK_NONE, PICK_OFFLOAD, PICK_HOST_SELECTIVE };

// The picks of n leaving layers with k offloaded and s selective on the
// host into pick (n), as above; without a division (the mixed search fills
// one for each of its pairs): rl = l P mod n and rj = j K mod P step on.
static void fill_picks(uint8_t *pick, int64_t n, int64_t k, int64_t s) {
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
        saved += b->pick[l] == PICK_OFFLOAD           ? need_of(b, l)->saved_bytes
                 : b->pick[l] == PICK_HOST_SELECTIVE ? x + need_of(b, l)->kept_bytes
                 : c->ckpt_host                      ? x
                                                     : 0;
    }
    b->act_at[n] = saved, b->rank[n] = recomputed;
    return 0;
}
static int is_picked(const Builder *b, int64_t l) { return l < b->leaving && b->pick[l] != PICK_NONE; }
static Remat remat_of(const Builder *b, int64_t l) {
    return !is_picked(b, l) ? b->c->remat : b->pick[l] == PICK_HOST_SELECTIVE ? REMAT_SELECTIVE : REMAT_OFFLOAD;
}
// Whether leaving layer l keeps what its backward needs in host memory.
static int to_host(const Builder *b, int64_t l) { return b->c->ckpt_host || is_picked(b, l); }
// Whether layer l's kept matmul and attention outputs wait in host memory
// (else in the device keep area).
static int keeps_on_host(const Builder *b, int64_t l) { return is_picked(b, l) && b->pick[l] == PICK_HOST_SELECTIVE; }
// The host activation store: leaving layers in order, an offloading one
// taking everything its backward reads, a selective one on the host its
// checkpoint and kept outputs, a recomputed one its checkpoint (checkpoints
// on the host) or nothing. l <= leaving.
static int64_t act_addr(const Builder *b, int64_t l) {
    int64_t ckpt = b->c->ckpt_host ? align_up(b->x_bytes, ARENA_ALIGN) : 0;
    if (b->c->policy == POLICY_MEGATRAIN) return (l + MEGATRAIN_BLOCK - 1) / MEGATRAIN_BLOCK * ckpt;
    return b->act_at[l];
}
// The device checkpoint and keep areas hold the recomputed leaving layers' in order. l <= leaving.
static int64_t recompute_rank(const Builder *b, int64_t l) {
    if (b->c->policy == POLICY_MEGATRAIN) return l / MEGATRAIN_BLOCK;
    return b->rank[l];
}
// Whether leaving layer l's forward leaves a checkpoint (megatrain: one a block).
static int checkpoints(const Builder *b, int64_t l) {
    return b->c->policy != POLICY_MEGATRAIN || l % MEGATRAIN_BLOCK == 0;
}

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
    if (b->tiled && !is_resident(b, l)) { // recompute and backward, chunk by chunk
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

// Pass 3: the arena. Returns 0, or -1 with a message.
static int lay_out_arena(Builder *b, const Target *t, char *err, size_t errcap) {
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
    if (pick_modes(b) != 0) return snprintf(err, errcap, "out of memory while scheduling"), -1;
    p->host_act_bytes = act_addr(b, b->leaving);

    // pass 2's layouts (prepare_parts): the blocks' for this choice's timeline; a frame holds any kind's
    const int64_t *rel[PART_COUNT];
    int64_t bytes[PART_COUNT];
    b->frame_bytes = 0;
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        Layout v = !part_is_block(pk) ? LAYOUT_PLAIN : b->tiled ? LAYOUT_TILED
                   : c->remat == REMAT_SELECTIVE || c->host_selective ? LAYOUT_KEPT : LAYOUT_PLAIN;
        rel[pk] = g->parts[pk].layout_rel[v], bytes[pk] = g->parts[pk].layout_bytes[v];
        if (!rel[pk]) return snprintf(err, errcap, "internal error: the part's layouts were not prepared"), -1;
        if (part_is_block(pk) && align_up(bytes[pk], ARENA_ALIGN) > b->frame_bytes)
            b->frame_bytes = align_up(bytes[pk], ARENA_ALIGN);
    }

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
    p->arena_bytes = top;
    // each engine that runs kernels gets their scratch beside the arena on a GPU (the cpu's is host memory)
    p->scratch_bytes = strncmp(t->arch, "sm_", 3) == 0 ? g->kernel_scratch : 0;
    p->device_limit = (int64_t)t->device_memory;

    // Every node's offset: parameters in their weights, the rest at its
    // part's base plus its place in the layout; the block once per frame.
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        const Part *part = &g->parts[pk];
        int frames = part_is_block(pk) ? b->nframes : 1;
        int64_t *off = p->node_offset[pk] = arena_alloc(b->a, (size_t)(part->nodes.n * frames + 1) * sizeof(int64_t));
        if (!off) return snprintf(err, errcap, "out of memory while scheduling"), -1;
        int64_t base = pk == PART_HEAD ? b->head0 : b->tail0;
        for (int f = 0; f < frames; f++)
            for (int i = 0; i < part->nodes.n; i++) {
                const Node *n = part->nodes.items[i];
                int64_t *o = &off[(int64_t)f * part->nodes.n + i];
                if (is_alias(n)) *o = -1;
                else if (n->op == OP_PARAM) {
                    const Param *prm = g->params.items[n->param];
                    int64_t seg = plan_segment_of(p, p->param_offset[n->param]); // (a global's)
                    *o = prm->in_block ? slot_addr(b, f) + p->param_offset[n->param] * wbytes
                                       : globals_addr(b, seg) + (p->param_offset[n->param] - plan_segment_base(p, seg)) * wbytes;
                } else
                    *o = (part_is_block(pk) ? frame_addr(b, f) : base) + rel[pk][i];
            }
    }
    return 0;
}

// Passes 1, 3, 4 and 5 for one choice; with layout_only, passes 1 and 3
// (enough for the arena's size).
static Plan *build(Graph *g, const Target *t, const SchedChoice *c, int layout_only, Arena *a, char *err,
                   size_t errcap) {
    Plan *p = arena_alloc(a, sizeof *p);
    if (!p) goto oom;
    *p = (Plan){.graph = g, .ranks = c->ranks > 1 ? c->ranks : 1, .sharded = c->ranks > 1 && c->sharded};
    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];
    const Node *tail_x = part_input_from(tail, block_part(g, g->layers - 1));
    const Grad *d_tail_x = tail_x ? part_grad_of(tail, tail_x) : NULL;
    int depends = d_tail_x && d_tail_x->grad;
    for (int k = 0; k < g->nkinds; k++) { // every kind's output depends on its input
        const Part *kb = &g->parts[kind_part(k)];
        const Node *x = part_input_from(kb, PART_HEAD);
        const Grad *d_x = x ? part_grad_of(kb, x) : NULL;
        depends &= d_x && d_x->grad;
    }
    if (!depends) {
        snprintf(err, errcap, "the loss does not depend on the block's input; nothing to stream");
        return NULL;
    }
    if (c->slots < 1 || c->slots > MAX_SLOTS || c->resident < 0 || c->resident > g->layers) {
        snprintf(err, errcap, "internal error: schedule choice with %d slots and %lld resident layers", c->slots,
                 (long long)c->resident);
        return NULL;
    }

    // 1. Host store layout: the globals the head reads, those only the
    //    tail reads, then one segment per layer, each parameter aligned to
    //    STORE_ALIGN_ELEMS inside its segment.
    p->param_offset = arena_alloc(a, (size_t)(g->params.n + 1) * sizeof(int64_t));
    unsigned char *head_reads = arena_alloc(a, (size_t)g->params.n + 1); // (params) whether the head reads it
    if (!p->param_offset || !head_reads) goto oom;
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
    if (!(p->layer_base = arena_alloc(a, (size_t)(g->layers + 1) * sizeof(int64_t)))) goto oom;
    plan_lay_out_layers(p);

    BlockNeeds need[MT_MAX_KINDS];
    for (int k = 0; k < g->nkinds; k++)
        if (block_needs(&g->parts[kind_part(k)], g->train.compute, a, &need[k]) != 0) goto oom;
    Builder b = {.a = a, .p = p, .c = c, .need = need, .serial = c->policy == POLICY_SEQUENTIAL, .ev_gslot = -1,
                 .tiled = block->nchunks && c->remat == REMAT_LAYER && c->policy == POLICY_MT};
    int chunks = block->nchunks > tail->nchunks ? block->nchunks : tail->nchunks;
    b.ranges = arena_alloc(a, (size_t)(4 * chunks + 8) * 2 * sizeof(int));
    if (!b.ranges) goto oom;
    if (lay_out_arena(&b, t, err, errcap) != 0) return NULL;
    int64_t picks = c->offloaded + c->host_selective;
    if (picks && (c->offloaded < 0 || c->host_selective < 0 || picks > b.leaving || b.tiled || c->policy != POLICY_MT ||
                  (c->remat != REMAT_LAYER && c->remat != REMAT_SELECTIVE))) {
        snprintf(err, errcap, "%lld picked layers asked (%lld offloaded, %lld selective on the host), but %s; a mixed "
                 "plan recomputes (layer or selective) the layers it does not pick, untiled, and picks at most the %lld "
                 "that leave the device", (long long)picks, (long long)c->offloaded, (long long)c->host_selective,
                 b.tiled ? "the block is tiled" : c->policy != POLICY_MT ? "the policy is a baseline"
                 : c->remat != REMAT_LAYER && c->remat != REMAT_SELECTIVE ? "the remat mode is not layer or selective"
                 : c->offloaded < 0 || c->host_selective < 0 ? "a count is negative"
                 : "too few layers leave the device", (long long)b.leaving);
        return NULL;
    }
    if (layout_only) return p;
    b.frame_cmp = arena_alloc(a, (size_t)b.nframes * sizeof(int));
    b.frame_out = arena_alloc(a, (size_t)b.nframes * sizeof(int));
    if (!b.frame_cmp || !b.frame_out) goto oom;

    // 4. The training stream. The host updates the head's globals, the
    //    layers in forward order and the tail's globals, each segment's
    //    weights going in right after; the baselines finish every update
    //    before any copy.
    int64_t L = g->layers;
    int *ev_update = arena_alloc(a, (size_t)(L + 2) * sizeof(int)); // (L + 2) [0] head, [1 + l] layer l, [1 + L] tail
    if (!ev_update) goto oom;
    global_op(&b, INS_UPDATE, SEG_HEAD);
    ev_update[0] = record(&b, ENG_HOST);
    for (int64_t l = 0; l < L; l++) {
        host_op(&b, INS_UPDATE, l);
        ev_update[l + 1] = record(&b, ENG_HOST);
    }
    global_op(&b, INS_UPDATE, SEG_TAIL);
    ev_update[L + 1] = record(&b, ENG_HOST);
    if (c->policy == POLICY_MEGATRAIN || c->policy == POLICY_ZERO3) // the optimizer after the backward, not overlapped
        for (int64_t l = 0; l <= L; l++) ev_update[l] = ev_update[L + 1];
    for (int f = 0; f < b.nframes; f++) b.frame_cmp[f] = b.frame_out[f] = -1;
    forward(&b, ev_update, 1);
    if (tail->nchunks) { // forward and backward chunk by chunk
        int nr = tiled_order(tail, b.ranges);
        for (int r = 0; r < nr; r++) run(&b, PART_TAIL, b.ranges[2 * r], b.ranges[2 * r + 1], -1, 0, 0);
    } else {
        run(&b, PART_TAIL, 0, tail->nodes.n, -1, 0, 0);
    }
    emit(&b, INS_LOSS, ENG_COMPUTE)->src = addr(p, tail->output, 0);
    copy(&b, addr(p, d_tail_x->grad, 0), b.carry0, b.x_bytes);
    int ev_tail = record(&b, ENG_COMPUTE);
    wait_for(&b, ENG_COPY_OUT, ev_tail);
    grads_out(&b, PART_TAIL, -1, 0);
    int ev_tail_out = record(&b, ENG_COPY_OUT); // the tail's gradients are out: its buffers are free
    if (p->host_tail) wait_for(&b, ENG_HOST, ev_tail_out);
    global_op(&b, INS_NORM, SEG_TAIL); // the tail's own globals have all their gradients
    if (c->policy == POLICY_ZERO3) wait_for(&b, ENG_COMPUTE, ev_tail_out); // (as backward_layer says)
    for (int f = 0; b.over_frames && f < b.nframes; f++) // they were the frames': their next users wait for it
        b.frame_cmp[f] = ev_tail, b.frame_out[f] = ev_tail_out;
    if (c->policy == POLICY_MEGATRAIN) // block by block from the top
        for (int64_t s = (L - 1) / MEGATRAIN_BLOCK * MEGATRAIN_BLOCK; s >= 0; s -= MEGATRAIN_BLOCK)
            backward_block_megatrain(&b, s, s + MEGATRAIN_BLOCK < L ? s + MEGATRAIN_BLOCK : L);
    else
        for (int64_t l = L - 1; l >= 0; l--) backward_layer(&b, l);
    // The head's buffers are the tail's (tiled: the frames' too): the tokens
    // again, once nothing reads them any more, and the head's forward again
    // (what it kept is gone), then its backward.
    for (int f = 0; b.over_frames && f < b.nframes; f++) wait_for(&b, ENG_COMPUTE, b.frame_out[f]);
    wait_for(&b, ENG_COMPUTE, ev_tail_out);
    int ev_done = record(&b, ENG_COMPUTE);
    for (int f = 0; b.over_frames && f < b.nframes; f++) wait_for(&b, ENG_COPY_IN, b.frame_out[f]);
    wait_for(&b, ENG_COPY_IN, ev_tail_out);
    wait_for(&b, ENG_COPY_IN, ev_done);
    feed_inputs(&b, PART_HEAD);
    wait_for(&b, ENG_COMPUTE, record(&b, ENG_COPY_IN));
    copy(&b, b.carry0, addr(p, head->grad_seed, 0), b.x_bytes);
    run(&b, PART_HEAD, 0, head->nodes.n, -1, 0, 0);
    wait_for(&b, ENG_COPY_OUT, record(&b, ENG_COMPUTE));
    grads_out(&b, PART_HEAD, -1, 0);
    wait_for(&b, ENG_HOST, record(&b, ENG_COPY_OUT));
    global_op(&b, INS_NORM, SEG_HEAD);
    p->train = finish(&b, &p->ntrain);
    b.stat_bytes = 0;

    // 5. The evaluation stream: forward and loss only.
    for (int f = 0; f < b.nframes; f++) b.frame_cmp[f] = b.frame_out[f] = -1;
    forward(&b, NULL, 0);
    run(&b, PART_TAIL, 0, tail->nfwd, -1, 0, 0);
    emit(&b, INS_LOSS, ENG_COMPUTE)->src = addr(p, tail->output, 0);
    p->eval = finish(&b, &p->neval);
    if (b.failed) goto oom;

    char name[256], mix[96] = "";
    int at = 0;
    if (c->offloaded) at = snprintf(mix, sizeof mix, " offloaded=%lld/%lld", (long long)c->offloaded, (long long)b.leaving);
    if (c->host_selective)
        snprintf(mix + at, sizeof mix - (size_t)at, " selective-offloaded=%lld/%lld", (long long)c->host_selective,
                 (long long)b.leaving);
    char shard[48] = ""; // a sharded plan says over how many ranks
    if (p->sharded) snprintf(shard, sizeof shard, " sharded=%d", p->ranks);
    snprintf(name, sizeof name, "policy=%s remat=%s%s slots=%d resident=%lld checkpoints=%s tile=%d%s",
             policy_name(c->policy), remat_name(c->remat), mix, c->slots, (long long)c->resident,
             c->ckpt_host ? "host" : "device", chunks ? chunks : 1, shard);
    p->schedule = arena_strndup(a, name, strlen(name));
    if (!p->schedule) goto oom;
    return p;
oom:
    snprintf(err, errcap, "out of memory while scheduling");
    return NULL;
}

Plan *schedule_build(Graph *g, const Target *t, const SchedChoice *c, Arena *a, char *err, size_t errcap) {
    if (prepare_parts(g, a) != 0) return snprintf(err, errcap, "out of memory while scheduling"), NULL;
    return build(g, t, c, 0, a, err, errcap);
}

// ---------------------------------------------------------------- pass 6

static int fits_target(const Plan *p, const Cost *c, const Target *t, char *why, size_t cap) {
    why[0] = 0;
    if ((double)c->host_bytes > t->host_memory)
        snprintf(why, cap, "needs %.4g GB of host memory%s, %s has %.4g GB", (double)c->host_bytes / 1e9,
                 c->place.level > PLACE_RAM ? " with the most it can put on the NVMe tier" : "", t->name,
                 t->host_memory / 1e9);
    else if ((double)c->place.tier_bytes > t->tier_capacity && c->place.level > PLACE_RAM)
        snprintf(why, cap, "needs %.4g GB of NVMe tier, %s has %.4g GB", (double)c->place.tier_bytes / 1e9, t->name,
                 t->tier_capacity / 1e9);
    else if ((double)c->device_peak_bytes > t->device_memory && p->scratch_bytes > 0)
        snprintf(why, cap, "needs %.4g GB of device memory (%.4g GB of it the kernels' scratch), %s has %.4g GB",
                 (double)c->device_peak_bytes / 1e9, (double)(c->device_peak_bytes - p->arena_bytes) / 1e9, t->name,
                 t->device_memory / 1e9);
    else if ((double)c->device_peak_bytes > t->device_memory)
        snprintf(why, cap, "needs %.4g GB of device memory, %s has %.4g GB", (double)c->device_peak_bytes / 1e9,
                 t->name, t->device_memory / 1e9);
    return why[0] == 0;
}

// Whether a block tensor carries annotation `want` (0: any).
static int has_annotation(const Graph *g, Annot want) {
    for (int k = 0; k < g->nkinds; k++) {
        const Part *block = &g->parts[kind_part(k)];
        for (int i = 0; i < block->nfwd; i++) {
            const Node *n = block->nodes.items[i];
            if (n->annot && (!want || n->annot == want)) return 1;
        }
    }
    return 0;
}

// annotations_allow for block part pk (one kind's).
static int kind_annotations_allow(Graph *g, PartKind pk, const SchedChoice *c, Arena *a, char *why, size_t cap) {
    const Part *block = &g->parts[pk];
    BlockNeeds need;
    if (block_needs(block, g->train.compute, a, &need) != 0) return snprintf(why, cap, "out of memory"), 0;
    for (int i = 0; i < block->nfwd; i++) {
        const Node *n = block->nodes.items[i], *b = base_of(n);
        if (!n->annot || b->part != pk || b->id >= block->nfwd || !need.saved[b->id]) continue;
        int kept = need.kept[b->id], all_resident = c->remat == REMAT_NONE || c->resident == g->layers, ok = 0;
        // a layer leaves the device: none resident, and more streamed than the backward finds intact
        int leaves = !c->resident && (c->slots < g->layers || (block->nchunks && c->remat == REMAT_LAYER));
        switch (n->annot) { // (a mixed plan treats the layers it offloads and the rest differently: neither holds)
        case ANNOT_KEEP: ok = !c->offloaded && (all_resident || (c->remat == REMAT_SELECTIVE && kept)); break;
        case ANNOT_RECOMPUTE:
            ok = !c->offloaded && leaves && (c->remat == REMAT_LAYER || (c->remat == REMAT_SELECTIVE && !kept));
            break;
        case ANNOT_OFFLOAD: ok = leaves && c->remat == REMAT_OFFLOAD; break;
        case ANNOT_NONE: ok = 1; break;
        }
        if (!ok) {
            snprintf(why, cap, "remat %s%s, %d slots, %lld resident layers does not %s '%s' (line %d), as its annotation "
                     "says", remat_name(c->remat), c->offloaded ? " mixed with offload" : "", c->slots,
                     (long long)c->resident, annot_name(n->annot),
                     n->name ? n->name : "?", n->loc.line);
            return 0;
        }
    }
    return 1;
}

// Whether choice c does with every annotated block tensor that the backward
// reads what its annotation says (dsl/README.md, Annotations): keep it on
// the device in every layer (remat none, every layer resident, or selective
// for a matmul or attention output it restores); recompute it (layer, or
// selective for the rest) or offload it to host memory (offload), with no
// layer resident, so that every streamed layer but the last `slots` at the
// turn, which the backward finds intact, drops it. The baselines model other
// systems and take no annotations. 0 with the first contradiction in why.
static int annotations_allow(Graph *g, const SchedChoice *c, Arena *a, char *why, size_t cap) {
    if (c->policy != POLICY_MT || !has_annotation(g, ANNOT_NONE)) return 1;
    for (int k = 0; k < g->nkinds; k++)
        if (!kind_annotations_allow(g, (PartKind)kind_part(k), c, a, why, cap)) return 0;
    return 1;
}

double schedule_overshoot(const Cost *c, const Target *t) {
    double dev = (double)c->device_peak_bytes / t->device_memory, host = (double)c->host_bytes / t->host_memory;
    return dev > host ? dev : host;
}

// One search: what it is asked and what it has found.
typedef struct Search {
    Graph *g;
    const Target *t;
    const SchedRequest *req;
    Arena *a;
    const CostKernels *kernels; // the graph's kernels priced on t, once
    SchedResult *best;
    char *err;
    size_t errcap;
} Search;

// What one built choice costs.
typedef struct Tried {
    Cost cost;
    int fits;
    int64_t host_act_bytes; // its host activation store
} Tried;

// Builds and costs one choice, shows it to req->seen and keeps it in *best
// when it beats it. With out, says what it costs.
static int try_choice_out(Search *x, const SchedChoice *c, Tried *out) {
    Graph *g = x->g;
    const Target *t = x->t;
    const SchedRequest *req = x->req;
    Arena *a = x->a;
    SchedResult r = {.choice = *c}, *best = x->best;
    ArenaMark mark = arena_mark(a); // a plan that loses gives its memory back
    r.plan = schedule_build(g, t, c, a, x->err, x->errcap);
    if (!r.plan) return -1;
    if (cost_plan_with(r.plan, t, x->kernels, &r.cost, NULL) != 0)
        return snprintf(x->err, x->errcap, "out of memory while costing a plan"), -1;
    r.fits = fits_target(r.plan, &r.cost, t, r.why, sizeof r.why);
    if (r.fits) r.fits = annotations_allow(g, c, a, r.why, sizeof r.why);
    if (out) *out = (Tried){.cost = r.cost, .fits = r.fits, .host_act_bytes = r.plan->host_act_bytes};
    if (req->seen) req->seen(req->seen_ctx, g, &r);
    int better;
    if (!best->plan) better = 1;
    else if (r.fits != best->fits) better = r.fits;
    else if (r.fits) better = r.cost.step_s < best->cost.step_s;
    else better = schedule_overshoot(&r.cost, t) < schedule_overshoot(&best->cost, t);
    if (better) *best = r;
    else arena_release(a, mark);
    return 0;
}

static int try_choice(Search *x, const SchedChoice *c) { return try_choice_out(x, c, NULL); }

// ---------------------------------------------------------------- mixed plans

// A plan's busy times: each a sum over its instructions, so a linear
// function of its picks (each picked layer trades its recompute for its
// copies, the same for every layer of a kind of pick).
typedef struct Busy {
    double device;     // RUNs and arena copies
    double in, out;    // the link, each direction
    double link_bytes; // what crosses the link, which host memory carries too
    double device_bytes; // device memory (not a time, but linear in the picks too)
} Busy;

static Busy busy_of(const Cost *c) {
    return (Busy){.device = c->compute_s + c->device_copy_s, .in = c->copy_in_s, .out = c->copy_out_s,
                  .link_bytes = (double)(c->copy_in_bytes + c->copy_out_bytes), .device_bytes = (double)c->device_peak_bytes};
}

// The host's side of a plan: its placement and work, which follow from its
// host activation store alone (cost_place_act, cost_host_work).
typedef struct HostSide {
    Placement place;
    double update_s, optimizer_s;
    const double *updates; // (layers + 2) each layer's updates, the head's globals', the tail's
} HostSide;

// The work follows from the placement's level: priced once a level, in
// work[level] (update_s < 0: not yet; updates in arena a). updates NULL: out of memory.
static HostSide host_side(const Plan *p, const Target *t, int64_t act, HostSide work[PLACE_COUNT], Arena *a) {
    HostSide h;
    cost_place_act(p, t, act, &h.place);
    HostSide *w = &work[h.place.level];
    if (w->update_s < 0) {
        double *updates = arena_alloc(a, (size_t)(p->graph->layers + 2) * sizeof *updates); // (layers + 2)
        cost_host_work(p, t, &h.place, &w->update_s, &w->optimizer_s, updates);
        w->updates = updates;
    }
    h.update_s = w->update_s, h.optimizer_s = w->optimizer_s, h.updates = w->updates;
    return h;
}

// The least step a plan with busy times u and host side h can take on t,
// whatever the engines' overlap: cost_plan_with's step is never below it.
// Each micro-batch takes at least its busiest resource (on a cpu target,
// everything: one thread), host memory carrying the link's and the tier's
// bytes; the first also the host's work, and first_min.
static double floor_step(const Busy *u, const HostSide *h, const Target *t, int64_t accumulate, double first_min) {
    double first, rest;
    if (strcmp(t->arch, "cpu") == 0) {
        rest = u->device + u->in + u->out;
        first = rest + h->optimizer_s;
    } else {
        double link = t->link_duplex ? fmax(u->in, u->out) : u->in + u->out;
        double tier = (h->place.tier_read_bytes + h->place.tier_write_bytes) / (double)accumulate;
        double mem = (u->link_bytes + tier) / t->host_memory_bandwidth;
        rest = fmax(u->device, fmax(link, mem));
        first = fmax(rest, mem + h->optimizer_s);
    }
    return fmax(first, first_min) + (double)(accumulate - 1) * rest;
}

// A step as chains of waits between the engines, each layer's part in it
// by its pick: a floor of the simulation that sees what the engines'
// busy times do not, the layers' copies and compute waiting for each
// other through the frames.
//
// Forward: the host updates the head's globals, then layer after layer
// (nothing makes it wait), each update priced at the plan's placement (a
// store that spills onto the NVMe tier updates at the tier's rate). Layer
// l's weights go in once its update is done, the previous layer's weights
// are in, and the layer `slots` before it (its frame's last user) has
// computed; it computes once they are in, the
// layer before it has computed, and that frame's last saves are out; its
// own saves follow its compute, one after another. The tail's forward waits
// for the last layer's, and for the tail's globals, which go in after every
// update.
//
// Backward (leaving layers, from the top): layer l's copies (weights, what
// it loads) go in once the layer before it on the copy-in engine is in and
// the layer `slots` above it is done; it computes once they are in and the
// layer above is done.
typedef struct LayerTimes {
    double in, compute, save;    // forward: weights in, its compute, its saves
    double back_in, back_compute; // backward: its copies in, its compute (recompute included)
} LayerTimes;

typedef struct Chains {
    double head;               // the head's copies in and forward
    double tail_in;            // the tail's copies in (weights and inputs)
    double pre;                // the compute engine from the tail's forward to the first leaving layer's backward
    double post;               // and after the last one's (the head's backward), then the copy-out engine's
                               // and the host's (its gradients out, their norm)
    LayerTimes *unpicked;      // (L) every layer with no picks
    const uint8_t *kind;       // (L) each layer's block kind (Graph.layer_kind)
    LayerTimes *picked;        // (nkinds * 3) a leaving layer's by its kind and PICK_* (PICK_NONE unused)
} Chains;

// From plan p (dur: its instructions' times): each layer's times, by the
// layer each instruction serves (the last COPY_IN or block RUN naming one;
// the tail's RUN and the head's backward RUN end them), into lt (L), and
// the rest into *ch; the updates are the placement's (HostSide.updates).
static void split_layers(const Plan *p, const double *dur, int64_t leaving, Chains *ch, LayerTimes *lt) {
    int64_t L = p->graph->layers, cur = -1; // -1: the head, L: the tail on, before the leaving layers' backward
    int back = 0, post = 0;
    for (int64_t l = 0; l < L; l++) lt[l] = (LayerTimes){0};
    *ch = (Chains){.unpicked = ch->unpicked, .kind = ch->kind, .picked = ch->picked};
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        double d = dur[i];
        if (in->kind == INS_UPDATE) continue;
        if (in->kind == INS_RUN && in->part == PART_TAIL && !back) back = 1, cur = L;
        else if (in->kind == INS_RUN && in->part == PART_HEAD && back) post = 1;
        else if ((in->kind == INS_COPY_IN && in->layer == SEG_TAIL) || (!back && in->kind == INS_INPUT && cur >= 0))
            cur = L; // the tail's globals and inputs
        else if ((in->kind == INS_COPY_IN || (in->kind == INS_RUN && part_is_block(in->part))) && in->layer >= 0)
            cur = in->layer;
        int compute = in->engine == ENG_COMPUTE && (in->kind == INS_RUN || in->kind == INS_COPY),
            copy_in = in->engine == ENG_COPY_IN && (in->kind == INS_COPY_IN || in->kind == INS_LOAD || in->kind == INS_INPUT),
            save = in->engine == ENG_COPY_OUT && in->kind == INS_SAVE;
        if (post) ch->post += compute || in->engine == ENG_COPY_OUT || in->kind == INS_NORM ? d : 0;
        else if (!back && cur < 0) ch->head += compute || copy_in ? d : 0;
        else if (!back && cur == L) ch->tail_in += copy_in ? d : 0;
        else if (!back) lt[cur].in += copy_in ? d : 0, lt[cur].compute += compute ? d : 0, lt[cur].save += save ? d : 0;
        else if (cur >= leaving) ch->pre += compute ? d : 0;
        else lt[cur].back_in += copy_in ? d : 0, lt[cur].back_compute += compute ? d : 0;
    }
}

// The least step of a plan of n leaving layers picked as pick (n) says,
// updating as updates (L + 2) says: the end of the backward of the chains
// above. E, F: (L + slots + 1) scratch.
static double chain_floor(const Chains *ch, const double *updates, int64_t L, int64_t streamed, int64_t n,
                          const uint8_t *pick, int slots, double *E, double *F) {
    double upd = updates[L], in_done = 0, saved = 0, *S = E; // S: saves done, by layer (E is free until the backward)
    double prev = upd + ch->head;                                 // the head's forward done
    for (int64_t l = 0; l < L; l++) {
        int p = l < n ? pick[l] : PICK_NONE;
        const LayerTimes *t = p == PICK_NONE ? &ch->unpicked[l] : &ch->picked[ch->kind[l] * 3 + p];
        int reuse = l >= slots && l < streamed; // its frame was layer l - slots'
        upd += updates[l];
        in_done = fmax(fmax(in_done, upd), reuse ? F[l - slots] : 0) + t->in;
        F[l] = fmax(fmax(prev, in_done), reuse ? S[l - slots] : 0) + t->compute;
        saved = t->save > 0 ? fmax(saved, F[l]) + t->save : saved;
        S[l] = t->save > 0 ? saved : 0; // (a frame whose last user saved nothing waits for no save)
        prev = F[l];
    }
    double tail_in = fmax(in_done, upd + updates[L + 1]) + ch->tail_in, tail = fmax(prev, tail_in);
    in_done = tail_in;
    for (int64_t x = n + 1; x <= n + slots; x++) E[x] = tail;
    E[n] = tail + ch->pre;
    for (int64_t l = n - 1; l >= 0; l--) {
        const LayerTimes *t = pick[l] == PICK_NONE ? &ch->unpicked[l] : &ch->picked[ch->kind[l] * 3 + pick[l]];
        in_done = fmax(in_done, E[l + slots]) + t->back_in;
        E[l] = fmax(E[l + 1], in_done) + t->back_compute;
    }
    return E[0] + ch->post;
}

// The mixed plans of choice c (layer or selective, its slots, checkpoint
// place and resident layers): every pair (K offloaded, S selective on the
// host) of picks among the n layers that leave the device, K + S from 1 to
// n (all n offloaded is remat offload's plan), or the pair req asks for.
//
// An exact search, by branch and bound. Probe plans (no picks; for each
// block kind, its last leaving layer picked of each kind of pick) give
// every pair's floor before any is built: its engines' busy times, the
// unpicked plan's plus what each pick adds; its host side, from its host
// activation store; and the chains of waits through the frames. A pair that cannot fit host or device
// memory is never built; the others are built and simulated in order of
// their floors until no pair left could beat the fastest fitting plan found
// by more than SEARCH_GAP (its floor is at least that plan's step / (1 +
// SEARCH_GAP)). The result is within SEARCH_GAP of the fastest of every
// pair, as building them all finds it (MT_SEARCH_EVERY=1 does, and checks
// every floor and every skip against the plan it built). Without the gap,
// a flat optimum builds nearly every pair: mistral-large-2's 7,000 of
// them for --explain, their floors within 0.13% of the best step.
#define SEARCH_GAP 1e-3

typedef struct Pair {
    int64_t k, s;
    double floor;
    int cannot_fit; // skipped unless MT_SEARCH_EVERY
} Pair;

static int by_floor(const void *pa, const void *pb) {
    const Pair *a = pa, *b = pb;
    if (a->floor != b->floor) return a->floor < b->floor ? -1 : 1;
    return a->k != b->k ? (a->k < b->k ? -1 : 1) : (a->s > b->s) - (a->s < b->s);
}

static int try_mixed(Search *x, SchedChoice c) {
    const SchedRequest *req = x->req;
    const Target *t = x->t;
    int64_t n = x->g->layers - c.resident - c.slots, accumulate = x->g->train.accumulate;
    if (req->offloaded || req->host_selective) { // asked for: where that many leave the device
        c.offloaded = req->offloaded, c.host_selective = req->host_selective;
        return c.offloaded + c.host_selective > n ? 0 : try_choice(x, &c);
    }
    if (n < 1) return 0;
    // The probes, in an arena of their own (the search's keeps the plans it offers): no picks, then for
    // each block kind its last leaving layer offloaded, and it selective on the host. A picked layer
    // changes what the plan costs by what its kind and pick make it cost, wherever it lies.
    Graph *g = x->g;
    int64_t L = g->layers, nk = g->nkinds;
    Arena own = {0};
    Chains ch = {.kind = g->layer_kind}, one = ch;
    Busy u0 = {0}, *du = arena_alloc(&own, (size_t)(nk * 3) * sizeof *du);            // (nkinds * 3) by kind and pick
    int64_t *dact = arena_alloc(&own, (size_t)(nk * 3) * sizeof *dact), act0 = 0;      // (nkinds * 3) the same
    int64_t *last = arena_alloc(&own, (size_t)nk * sizeof *last);                       // (nkinds) -1: none leaves
    ch.picked = arena_alloc(&own, (size_t)(nk * 3) * sizeof *ch.picked);                // (nkinds * 3)
    ch.unpicked = arena_alloc(&own, (size_t)(L + 1) * sizeof *ch.unpicked);             // (L)
    one.unpicked = arena_alloc(&own, (size_t)(L + 1) * sizeof *one.unpicked);           // (L) scratch
    uint8_t *picks = arena_alloc(&own, (size_t)n + 1);                                   // (n) a pair's picks
    double *E = malloc((size_t)(L + c.slots + 2) * 2 * sizeof *E), *F = E ? E + L + c.slots + 2 : NULL; // (L + slots + 1)
    Pair *pairs = malloc((size_t)(n + 2) * (size_t)(n + 2) * sizeof *pairs); // ((n + 1)(n + 2) / 2)
    Plan *p0 = NULL;
    int rc = E && pairs && du && dact && last && ch.picked && ch.unpicked && one.unpicked && picks ? 0 : -1, oom = rc;
    for (int64_t k = 0; rc == 0 && k < nk; k++) last[k] = -1;
    for (int64_t l = 0; rc == 0 && l < n; l++) last[g->layer_kind[l]] = l;
    for (int64_t i = 0; rc == 0 && i < 1 + 2 * nk; i++) { // no picks; then kind (i - 1) / 2, pick 1 + (i - 1) % 2
        int64_t kind = (i - 1) / 2, pick = 1 + (i - 1) % 2;
        if (i > 0 && last[kind] < 0) continue;
        SchedChoice one_pick = c;
        one_pick.offloaded = i > 0 && pick == PICK_OFFLOAD, one_pick.host_selective = i > 0 && pick == PICK_HOST_SELECTIVE;
        one_pick.probe_layer = i > 0 ? last[kind] + 1 : 0;
        Plan *p = schedule_build(g, t, &one_pick, &own, x->err, x->errcap);
        if (!p) {
            free(E), free(pairs), arena_free(&own);
            return -1;
        }
        Cost pc;
        double *dur = arena_alloc(&own, ((size_t)p->ntrain + 1) * sizeof *dur); // (ntrain)
        if (!dur || cost_plan_with(p, t, x->kernels, &pc, dur) != 0) {
            rc = oom = -1;
            break;
        }
        if (i == 0) {
            p0 = p, u0 = busy_of(&pc), act0 = p->host_act_bytes;
            split_layers(p, dur, n, &ch, ch.unpicked);
            continue;
        }
        Busy b = busy_of(&pc);
        const double *bi = (const double *)&b, *b0 = (const double *)&u0;
        double *d = (double *)&du[kind * 3 + pick];
        for (size_t j = 0; j < sizeof b / sizeof(double); j++) d[j] = bi[j] - b0[j];
        dact[kind * 3 + pick] = p->host_act_bytes - act0;
        split_layers(p, dur, n, &one, one.unpicked);
        ch.picked[kind * 3 + pick] = one.unpicked[last[kind]];
    }
    for (int pick = PICK_OFFLOAD; rc == 0 && pick <= PICK_HOST_SELECTIVE; pick++) { // the pairs (1, 0) and (0, 1)
        SchedChoice one_pick = c;
        one_pick.offloaded = pick == PICK_OFFLOAD, one_pick.host_selective = pick == PICK_HOST_SELECTIVE;
        if (n > 1 || pick == PICK_HOST_SELECTIVE) rc = try_choice(x, &one_pick); // all n offloaded is remat offload's
    }
    int every = getenv("MT_SEARCH_EVERY") && strcmp(getenv("MT_SEARCH_EVERY"), "1") == 0;
    HostSide work[PLACE_COUNT];
    for (int i = 0; i < PLACE_COUNT; i++) work[i].update_s = -1;
    size_t np = 0;
    for (int64_t k = 0; rc == 0 && k <= n; k++)
        for (int64_t s = 0; k + s <= n; s++) {
            if (k + s <= 1 || (k == n && s == 0)) continue; // the unmixed plan, the probes; remat offload's
            Busy b = u0;
            int64_t act = act0;
            fill_picks(picks, n, k, s);
            for (int64_t l = 0; l < n; l++) { // each pick adds what its kind and pick add
                if (picks[l] == PICK_NONE) continue;
                const double *d = (const double *)&du[g->layer_kind[l] * 3 + picks[l]];
                double *bj = (double *)&b;
                for (size_t j = 0; j < sizeof b / sizeof(double); j++) bj[j] += d[j];
                act += dact[g->layer_kind[l] * 3 + picks[l]];
            }
            HostSide h = host_side(p0, t, act, work, &own);
            if (!h.updates) {
                rc = oom = -1;
                break;
            }
            // what cannot fit host or device memory (a megabyte's slack for the arena's alignment) is not built
            int cannot_fit = (double)h.place.ram_bytes > t->host_memory ||
                             (h.place.level > PLACE_RAM && (double)h.place.tier_bytes > t->tier_capacity) ||
                             b.device_bytes > t->device_memory + 1e6;
            if (cannot_fit && !every) continue;
            // the first micro-batch's chains (on one thread, a cpu's, the busy times say it all)
            double chain = strcmp(t->arch, "cpu") != 0 ? chain_floor(&ch, h.updates, L, L - c.resident, n, picks, c.slots, E, F) : 0;
            double floor = floor_step(&b, &h, t, accumulate, chain);
            pairs[np++] = (Pair){.k = k, .s = s, .floor = floor * (1 - 1e-9), .cannot_fit = cannot_fit};
        }
    if (oom) snprintf(x->err, x->errcap, "out of memory while scheduling");
    if (np) qsort(pairs, np, sizeof *pairs, by_floor);
    for (size_t i = 0; i < np && rc == 0; i++) {
        const SchedResult *best = x->best;
        double beat = best->plan && best->fits ? best->cost.step_s : INFINITY;
        if (req->beat_s > 0 && req->beat_s < beat) beat = req->beat_s;
        if (!every && pairs[i].floor * (1 + SEARCH_GAP) >= beat) break;
        c.offloaded = pairs[i].k, c.host_selective = pairs[i].s;
        Tried tr;
        rc = try_choice_out(x, &c, &tr);
        if (rc == 0 && every && (tr.cost.step_s < pairs[i].floor || (tr.fits && pairs[i].cannot_fit))) {
            snprintf(x->err, x->errcap, "internal error: the mixed search's %s of %lld offloaded and %lld selective on "
                     "the host is wrong (floor %.9g s, step %.9g s; store %lld bytes)",
                     tr.cost.step_s < pairs[i].floor ? "floor" : "skip", (long long)pairs[i].k, (long long)pairs[i].s,
                     pairs[i].floor, tr.cost.step_s, (long long)tr.host_act_bytes);
            rc = -1;
        }
    }
    free(E);
    free(pairs);
    arena_free(&own);
    return rc;
}

// The most resident layers (0 .. L) whose arena fits: the arena grows by a
// frame per resident layer, so two plans give the line.
static int64_t most_resident(Graph *g, const Target *t, SchedChoice c, Arena *a, char *err, size_t errcap) {
    c.resident = 0;
    ArenaMark mark = arena_mark(a); // the layouts are measured, not kept
    Plan *p0 = build(g, t, &c, 1, a, err, errcap);
    if (!p0) return -1;
    int64_t lo = 0, hi = g->layers; // lo fits
    if ((double)plan_device_bytes(p0) > t->device_memory) hi = 0;
    arena_release(a, mark);
    while (lo < hi) {
        c.resident = (lo + hi + 1) / 2;
        Plan *p = build(g, t, &c, 1, a, err, errcap);
        if (!p) return -1;
        if ((double)plan_device_bytes(p) <= t->device_memory) lo = c.resident;
        else hi = c.resident - 1;
        arena_release(a, mark);
    }
    return lo;
}

static int search(Search *x);

int schedule_search(Graph *g, const Target *t, const SchedRequest *req, Arena *a, SchedResult *best, char *err,
                    size_t errcap) {
    *best = (SchedResult){0};
    if (prepare_parts(g, a) != 0) return snprintf(err, errcap, "out of memory while scheduling"), -1;
    CostKernels *kernels = cost_kernels(g, t);
    if (!kernels) return snprintf(err, errcap, "out of memory while costing the kernels"), -1;
    Search x = {.g = g, .t = t, .req = req, .a = a, .kernels = kernels, .best = best, .err = err, .errcap = errcap};
    int rc = search(&x);
    cost_kernels_free(kernels);
    return rc;
}

static int search(Search *x) {
    Graph *g = x->g;
    const Target *t = x->t;
    const SchedRequest *req = x->req;
    Arena *a = x->a;
    SchedResult *best = x->best;
    char *err = x->err;
    size_t errcap = x->errcap;
    int64_t L = g->layers;
    if (req->resident > L) {
        snprintf(err, errcap, "%lld resident layers asked; the model has %lld", (long long)req->resident, (long long)L);
        return -1;
    }
    if (req->policy != POLICY_MT) { // the baselines: fixed shapes
        // megatrain prefetches into two slots. ZeRO-3 too: once its trace is recorded, each
        // submodule's pre-forward hook queues up to stage3_prefetch_bucket_size (5e7) more elements
        // on a side stream, up to stage3_max_live_parameters (1e9) live, and the host waits for
        // that stream before the submodule runs (partitioned_param_coordinator.py fetch_sub_module,
        // partition_parameters.py NoGatherHandle): the next layer's weights cross while this one
        // computes, as in two slots
        SchedChoice c = {.policy = req->policy, .remat = REMAT_LAYER,
                         .slots = req->policy == POLICY_SEQUENTIAL ? 1 : 2, .ranks = req->ranks, .sharded = req->shard > 0};
        for (int host = 0; host < 2; host++) {
            c.ckpt_host = host;
            if (try_choice(x, &c) != 0) return -1;
        }
        return 0;
    }
    int tiled = g->parts[PART_BLOCK].nchunks > 0;
    int asked = req->offloaded || req->host_selective; // a mixed plan of these picks
    if (asked && req->remat != REMAT_AUTO && req->remat != REMAT_MIXED && req->remat != REMAT_LAYER &&
        req->remat != REMAT_SELECTIVE) {
        snprintf(err, errcap, "picked layers mix into remat layer or selective, not %s", remat_name(req->remat));
        return -1;
    }
    for (int rm = REMAT_NONE; rm < REMAT_COUNT; rm++) {
        if (req->remat != REMAT_AUTO && rm != (int)req->remat) continue;
        if (asked && rm != REMAT_MIXED && !((int)req->remat == rm && (rm == REMAT_LAYER || rm == REMAT_SELECTIVE)))
            continue; // a mixed plan was asked for
        if (rm == REMAT_MIXED || asked) { // per layer: offload some, keep some selectively on the host, recompute the rest
            for (int base = REMAT_LAYER; base <= REMAT_SELECTIVE; base++)
                for (int host = 0; host < 2; host++)
                    for (int slots = 1; slots <= MAX_SLOTS; slots++) {
                        // two or three slots unless asked: the next layer's weights cross while this one
                        // computes; a third lets a layer's saves finish while the next two compute
                        if (!req->slots && slots < 2) continue;
                        if ((req->remat == REMAT_LAYER || req->remat == REMAT_SELECTIVE) && base != (int)req->remat)
                            continue;
                        if (tiled && base == REMAT_LAYER) continue; // a tiled backward recomputes every layer
                        if (req->slots && slots != req->slots) continue;
                        if (req->ckpt && host != (req->ckpt == CKPT_HOST)) continue;
                        SchedChoice c = {.policy = POLICY_MT, .remat = (Remat)base, .slots = slots, .ckpt_host = host,
                                         .ranks = req->ranks, .sharded = req->shard > 0};
                        c.resident = req->resident >= 0 ? req->resident : most_resident(g, t, c, a, err, errcap);
                        if (c.resident < 0 || try_mixed(x, c) != 0) return -1;
                    }
            continue;
        }

        if (rm == REMAT_NONE) { // every layer resident
            if (req->resident >= 0 && req->resident != L && req->remat == REMAT_NONE) {
                snprintf(err, errcap, "--remat none keeps every layer resident; --resident %lld contradicts it",
                         (long long)req->resident);
                return -1;
            }
            SchedChoice c = {.policy = POLICY_MT, .remat = REMAT_NONE, .slots = 1, .resident = L, .ranks = req->ranks,
                             .sharded = req->shard > 0};
            if (try_choice(x, &c) != 0) return -1;
            continue;
        }
        for (int host = 0; host < 2; host++)
            for (int slots = 1; slots <= MAX_SLOTS; slots++) {
                if (rm == REMAT_OFFLOAD && !host) continue; // offload means host memory
                if (req->slots && slots != req->slots) continue;
                if (req->ckpt && host != (req->ckpt == CKPT_HOST)) continue;
                SchedChoice c = {.policy = POLICY_MT, .remat = (Remat)rm, .slots = slots, .ckpt_host = host,
                                 .ranks = req->ranks, .sharded = req->shard > 0};
                // recomputed chunk by chunk: nothing resident
                // (and none under a recompute or offload annotation: resident layers keep everything)
                int chunked = tiled && rm == REMAT_LAYER,
                    dropped = has_annotation(g, ANNOT_RECOMPUTE) || has_annotation(g, ANNOT_OFFLOAD);
                c.resident = req->resident >= 0 ? req->resident
                             : chunked || dropped ? 0
                                                  : most_resident(g, t, c, a, err, errcap);
                if (c.resident < 0) return -1;
                if (try_choice(x, &c) != 0) return -1;
            }
    }
    if (req->remat == REMAT_MIXED && !asked && !best->plan) { // too few layers to mix: the plain plan, refused
        SchedChoice c = {.policy = POLICY_MT, .remat = REMAT_LAYER, .slots = 1, .ranks = req->ranks,
                         .sharded = req->shard > 0};
        if (try_choice(x, &c) != 0) return -1;
        best->fits = 0;
        snprintf(best->why, sizeof best->why, "no mix: a mixed plan needs at least 2 layers leaving the device, and "
                 "%lld layers stream through at least 1 slot", (long long)L);
    }
    if (asked && !best->plan) {
        snprintf(err, errcap, "%lld picked layers asked (%lld offloaded, %lld selective on the host), but no plan of the "
                 "request has that many layers leaving the device (%lld layers, less the resident ones and the slots "
                 "the backward finds intact)", (long long)(req->offloaded + req->host_selective),
                 (long long)req->offloaded, (long long)req->host_selective, (long long)L);
        return -1;
    }
    return 0;
}
