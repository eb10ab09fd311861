// schedule.c: the ahead-of-time scheduler, as numbered passes. build()
// runs passes 1, 3, 4 and 5 for one choice, in order.
//
//   1. host store layout: globals, then one contiguous segment per layer
//      (layout.c, lay_out_host_store)
//   2. buffer layout of each part: liveness intervals over the part's node
//      order, packed greedily (largest first) into the fewest bytes; the
//      block's layout is one "frame", instantiated once per weight slot
//      (layout.c, prepare_parts, once per graph)
//   3. device arena: globals, frames (weight slot + buffers), the head and
//      the tail in one region (their values never live at once),
//      gradient carries, checkpoints and kept activations, a sharded plan's
//      gradient staging; on a GPU the
//      fused kernels' scratch beside it (common/scratch.h), counted in the
//      device memory every fit and figure uses (plan_device_bytes)
//      (layout.c, lay_out_arena)
//   4. the training stream: the previous step's host updates overlapped
//      with this step's forward (each layer updated just before its weights
//      go in), the forward with checkpoints or offloads, the tail, the
//      backward with recompute where chosen, gradients out and their norms
//      (stream.c, emit_train_stream)
//   5. the evaluation stream: forward and loss only (stream.c,
//      emit_eval_stream)
//   6. the search: for each remat mode, slot count and checkpoint place, the
//      most resident layers that fit, costed by the engine simulation of
//      cost.c; the fastest plan that fits wins (search.c, schedule_search)
//
// What the passes share is in schedule_internal.h.
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
#include "compiler/schedule/schedule_internal.h"

#include <stdio.h>
#include <string.h>

const char *remat_name(Remat r) {
    static const char *const N[] = {"auto", "none", "layer", "selective", "offload", "mixed"};
    return r >= 0 && r < REMAT_COUNT ? N[r] : "?";
}
const char *policy_name(Policy p) {
    static const char *const N[] = {"mt", "sequential", "megatrain", "zero3-offload"};
    return p >= 0 && p < POLICY_COUNT ? N[p] : "?";
}

// Whether choice c can be built for g: the loss depends on every block
// kind's input, and the slots and resident layers are in range. 0, or -1
// with a message.
static int check_choice(const Graph *g, const SchedChoice *c, char *err, size_t errcap) {
    const Part *tail = &g->parts[PART_TAIL];
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
        return -1;
    }
    if (c->slots < 1 || c->slots > MAX_SLOTS || c->resident < 0 || c->resident > g->layers) {
        snprintf(err, errcap, "internal error: schedule choice with %d slots and %lld resident layers", c->slots,
                 (long long)c->resident);
        return -1;
    }
    return 0;
}

// The picks of a mixed plan (SchedChoice.offloaded, .host_selective) as
// laid out in b: at most the layers that leave the device, of a plan that
// recomputes the others untiled. 0, or -1 with a message.
static int check_picks(const Builder *b, char *err, size_t errcap) {
    const SchedChoice *c = b->c;
    int64_t picks = c->offloaded + c->host_selective;
    if (picks && (c->offloaded < 0 || c->host_selective < 0 || picks > b->leaving || b->tiled ||
                  c->policy != POLICY_MT || (c->remat != REMAT_LAYER && c->remat != REMAT_SELECTIVE))) {
        snprintf(err, errcap,
                 "%lld picked layers asked (%lld offloaded, %lld selective on the host), but %s; a "
                 "mixed plan recomputes (layer or selective) the layers it does not pick, untiled, and picks at most "
                 "the %lld that leave the device",
                 (long long)picks, (long long)c->offloaded, (long long)c->host_selective,
                 b->tiled                                                 ? "the block is tiled"
                 : c->policy != POLICY_MT                                 ? "the policy is a baseline"
                 : c->remat != REMAT_LAYER && c->remat != REMAT_SELECTIVE ? "the remat mode is not layer or selective"
                 : c->offloaded < 0 || c->host_selective < 0              ? "a count is negative"
                                                                          : "too few layers leave the device",
                 (long long)b->leaving);
        return -1;
    }
    return 0;
}

// The plan's name (Plan.schedule): its policy, remat, picks, slots,
// resident layers, checkpoint place, tiles and ranks. -1 out of memory.
static int name_plan(const Builder *b, Arena *a) {
    Plan *p = b->p;
    const SchedChoice *c = b->c;
    const Part *block = &p->graph->parts[PART_BLOCK], *tail = &p->graph->parts[PART_TAIL];
    int chunks = block->nchunks > tail->nchunks ? block->nchunks : tail->nchunks;
    char name[256], mix[96] = "";
    int at = 0;
    if (c->offloaded)
        at = snprintf(mix, sizeof mix, " offloaded=%lld/%lld", (long long)c->offloaded, (long long)b->leaving);
    if (c->host_selective)
        snprintf(mix + at, sizeof mix - (size_t)at, " selective-offloaded=%lld/%lld", (long long)c->host_selective,
                 (long long)b->leaving);
    char shard[48] = ""; // a sharded plan says over how many ranks
    if (p->sharded) snprintf(shard, sizeof shard, " sharded=%d", p->ranks);
    snprintf(name, sizeof name, "policy=%s remat=%s%s slots=%d resident=%lld checkpoints=%s tile=%d%s",
             policy_name(c->policy), remat_name(c->remat), mix, c->slots, (long long)c->resident,
             c->ckpt_host ? "host" : "device", chunks ? chunks : 1, shard);
    p->schedule = arena_strndup(a, name, strlen(name));
    return p->schedule ? 0 : -1;
}

// A new plan of g for choice c. NULL out of memory.
static Plan *new_plan(Graph *g, const SchedChoice *c, Arena *a) {
    Plan *p = arena_alloc(a, sizeof *p);
    if (p) *p = (Plan){.graph = g, .ranks = c->ranks > 1 ? c->ranks : 1, .sharded = c->ranks > 1 && c->sharded};
    return p;
}

// The builder that carries plan p of choice c through passes 3 to 5 into
// *b, the blocks' needs into need (nkinds). -1 out of memory.
static int begin(Builder *b, Plan *p, const SchedChoice *c, BlockNeeds *need, Arena *a) {
    const Graph *g = p->graph;
    const Part *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];
    for (int k = 0; k < g->nkinds; k++)
        if (block_needs(&g->parts[kind_part(k)], g->train.compute, a, &need[k]) != 0) return -1;
    *b = (Builder){.a = a,
                   .p = p,
                   .c = c,
                   .need = need,
                   .serial = c->policy == POLICY_SEQUENTIAL,
                   .ev_gslot = -1,
                   .tiled = block->nchunks && c->remat == REMAT_LAYER && c->policy == POLICY_MT};
    int chunks = block->nchunks > tail->nchunks ? block->nchunks : tail->nchunks;
    b->ranges = arena_alloc(a, (size_t)(4 * chunks + 8) * 2 * sizeof(int));
    return b->ranges ? 0 : -1;
}

// How far build() goes: passes 1 and 3 (enough for the arena's size), then
// 4 (enough for the cost), then 5.
enum { UP_TO_LAYOUT = 3, UP_TO_TRAIN = 4, UP_TO_EVAL = 5 };

// The passes for one choice, in order, up to pass `last`.
static Plan *build(Graph *g, const Target *t, const SchedChoice *c, int last, Arena *a, char *err, size_t errcap) {
    BlockNeeds need[MT_MAX_KINDS];
    Builder b;
    if (check_choice(g, c, err, errcap) != 0) return NULL;
    Plan *p = new_plan(g, c, a);
    if (!p || lay_out_host_store(p, a) != 0) goto oom; // 1
    if (begin(&b, p, c, need, a) != 0) goto oom;
    if (lay_out_arena(&b, t, err, errcap) != 0) return NULL; // 3
    if (check_picks(&b, err, errcap) != 0) return NULL;
    if (last == UP_TO_LAYOUT) return p;
    b.frame_cmp = arena_alloc(a, (size_t)b.nframes * sizeof(int));
    b.frame_out = arena_alloc(a, (size_t)b.nframes * sizeof(int));
    if (!b.frame_cmp || !b.frame_out) goto oom;
    emit_train_stream(&b);                        // 4
    if (last == UP_TO_EVAL) emit_eval_stream(&b); // 5
    if (b.failed || name_plan(&b, a) != 0) goto oom;
    return p;
oom:
    snprintf(err, errcap, "out of memory while scheduling");
    return NULL;
}

int schedule_prepare(Graph *g, Arena *a, char *err, size_t errcap) {
    if (!g->kernels) return snprintf(err, errcap, "internal error: a graph scheduled before it was fused"), -1;
    if (prepare_parts(g, a) != 0) return snprintf(err, errcap, "out of memory while scheduling"), -1;
    return 0;
}

Plan *schedule_build(Graph *g, const Target *t, const SchedChoice *c, Arena *a, char *err, size_t errcap) {
    if (schedule_prepare(g, a, err, errcap) != 0) return NULL;
    return build(g, t, c, UP_TO_EVAL, a, err, errcap);
}

Plan *schedule_build_train(Graph *g, const Target *t, const SchedChoice *c, Arena *a, char *err, size_t errcap) {
    return build(g, t, c, UP_TO_TRAIN, a, err, errcap);
}

Plan *schedule_lay_out(Graph *g, const Target *t, const SchedChoice *c, Arena *a, char *err, size_t errcap) {
    return build(g, t, c, UP_TO_LAYOUT, a, err, errcap);
}
