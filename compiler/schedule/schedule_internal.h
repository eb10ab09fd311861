// schedule_internal.h: what the scheduler's passes share (schedule.c's head
// comment lists them): the block's needs, the part layouts, the Builder
// that carries one choice's plan from pass 1 to pass 5, and the questions
// the passes ask of it. schedule.h is the scheduler's public entry.
#ifndef MT_SCHEDULE_INTERNAL_H
#define MT_SCHEDULE_INTERNAL_H

#include "compiler/schedule/schedule.h"
#include "common/storage.h"

enum { ARENA_ALIGN = 256, MAX_SLOTS = 3 };
// The megatrain baseline checkpoints every MEGATRAIN_BLOCK-th layer's input.
enum { MEGATRAIN_BLOCK = 4 };

static inline int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
// Bytes of a node's buffer, by the storage rule (common/storage.h).
static inline int64_t node_bytes(DType compute, const Node *n) { return storage_bytes(compute, n); }
static inline int is_alias(const Node *n) { return n->op == OP_VIEW || n->op == OP_RESHAPE; }
static inline int is_heavy(const Node *n) { return op_is_heavy(n->op); }

static inline const Node *base_of(const Node *n) {
    while (is_alias(n)) n = n->in[0];
    return n;
}

// What the block's backward needs of its forward, per node (base buffers):
// saved[i] is set when a backward node reads forward node i; kept[i] when
// selective recomputation restores it rather than recomputing it (a matmul
// or attention output that a recomputed or backward node reads).
typedef struct BlockNeeds {
    unsigned char *saved, *kept; // (nodes.n)
    int64_t saved_bytes, kept_bytes;
} BlockNeeds;

// Fills bn in arena a. -1 out of memory. (layout.c)
int block_needs(const Part *part, DType compute, Arena *a, BlockNeeds *bn);

// The timelines a part's buffers are laid out for (Part.layout_rel): the
// whole part in order (the head, an untiled block, the tail in its own
// order), the block with selective recomputation's kept outputs alive from
// the start, or the block tiled: its forward alone, then its chunk-by-chunk
// order (the tail, when tiled, always runs so).
typedef enum { LAYOUT_PLAIN, LAYOUT_KEPT, LAYOUT_TILED } Layout;

// The fused kernels' spans and every layout of every part, once per graph.
// Call before any arena_mark whose release could take them. (layout.c, pass 2)
int prepare_parts(Graph *g, Arena *a);

// The order a tiled part runs in when its backward runs; fills ranges
// (pairs) and returns how many. (layout.c)
int tiled_order(const Part *part, int *ranges);

// Per-layer modes (SchedChoice): of the `leaving` layers n, P = offloaded
// + host_selective are picked, spread evenly: layer l is picked when
// floor((l + 1) P / n) passes floor(l P / n); the j-th pick offloads when
// floor((j + 1) K / P) passes floor(j K / P), K = offloaded, and keeps
// selectively on the host otherwise. Remat offload offloads them all.
enum { PICK_NONE, PICK_OFFLOAD, PICK_HOST_SELECTIVE };

// The picks of n leaving layers with k offloaded and s selective on the
// host into pick (n), as above. (layout.c)
void fill_picks(uint8_t *pick, int64_t n, int64_t k, int64_t s);

// One choice's plan as the passes build it.
typedef struct Builder {
    Arena *a;
    Plan *p;
    const SchedChoice *c;
    const BlockNeeds *need; // (nkinds) what each block kind's backward needs of its forward
    PtrVec ins;             // of Instr*
    int serial;             // every instruction on the compute engine; no events
    int tiled;              // the block's backward recomputes and differentiates chunk by chunk (tile.c)
    int over_frames;        // the head's and the tail's shared buffers lie over the frames'
                            // (nothing in a frame outlives its layer)
    int failed;
    // arena regions (pass 3)
    int64_t globals, slot0, frame0, head0, tail0, carry0, ckpt0, keep0;
    int64_t block0; // megatrain: the inputs of one block of MEGATRAIN_BLOCK layers, recomputed ([K, x_bytes])
    int64_t layer_bytes, frame_bytes, x_bytes, carry_bytes, keep_bytes;
    int64_t streamed;    // layers 0 .. streamed-1 rotate through the slots
    int64_t leaving;     // layers 0 .. leaving-1 leave the device between their forward and backward
    unsigned char *pick; // (leaving) each leaving layer's PICK_* (pick_modes)
    int64_t *act_at;     // (leaving + 1) its place in the host activation store; [leaving] the store's size
    int64_t *rank;       // (leaving + 1) the recomputed layers before it (device checkpoint and keep places)
    int nframes;
    // (nframes) per frame: the last compute and copy-out events touching it (-1: none)
    int *frame_cmp, *frame_out;
    int *ranges;        // (2 * (2 * chunks + 4)) a tiled part's run order, tiled_order()
    int64_t stat_bytes; // the stream's host statistics buffer so far (INS_STAT's dst)
    // Sharded: where the gradients of one segment gather in fp32, in its host layout, to be reduce-scattered
    // (shard_span of the longest segment), and the event that frees it again (its COPY_OUTs done; -1: free)
    int64_t gslot;
    int ev_gslot;
} Builder;

// Pass 1: the host store layout of p's graph. -1 out of memory. (layout.c)
int lay_out_host_store(Plan *p, Arena *a);
// Pass 3: the arena, the leaving layers' picks and every node's offset.
// Returns 0, or -1 with a message. (layout.c)
int lay_out_arena(Builder *b, const Target *t, char *err, size_t errcap);
// Passes 4 and 5: the training stream into p->train, the evaluation stream
// into p->eval; b->failed when out of memory. (stream.c)
void emit_train_stream(Builder *b);
void emit_eval_stream(Builder *b);
// Passes 1, 3 and 4 for one choice, enough for its cost: what the search
// builds of every choice it prices (the evaluation stream, pass 5, only
// for the plan it returns). Call prepare_parts first. NULL with a message
// in err. (schedule.c)
Plan *schedule_build_train(Graph *g, const Target *t, const SchedChoice *c, Arena *a, char *err, size_t errcap);
// Passes 1 and 3 for one choice, enough for the arena's size (schedule.c).
// NULL with a message in err.
Plan *schedule_lay_out(Graph *g, const Target *t, const SchedChoice *c, Arena *a, char *err, size_t errcap);

// ---------------------------------------------------------------- the builder's questions

static inline const Part *block_of(const Graph *g, int64_t l) { return &g->parts[block_part(g, l)]; }
static inline const BlockNeeds *need_of(const Builder *b, int64_t l) { return &b->need[b->p->graph->layer_kind[l]]; }

// The elements a segment of len takes where its collectives run: ranks
// chunks of ceil(len / ranks) (dist_shard's) in a sharded plan, else len.
static inline int64_t shard_span(const Plan *p, int64_t len) {
    return p->sharded ? p->ranks * ((len + p->ranks - 1) / p->ranks) : len;
}

// Where global segment seg (SEG_HEAD or SEG_TAIL) lies in the arena: the
// globals' region holds them as the host store does, the head's then the
// tail's; sharded, each with room for its all-gather (shard_span).
static inline int64_t globals_addr(const Builder *b, int64_t seg) {
    const Plan *p = b->p;
    int64_t wbytes = storage_weight_bytes(p->graph->train.compute);
    if (!p->sharded || seg == SEG_HEAD) return b->globals + plan_segment_base(p, seg) * wbytes;
    return b->globals + align_up(shard_span(p, plan_segment_len(p, SEG_HEAD)) * wbytes, ARENA_ALIGN);
}

static inline int frame_of(const Builder *b, int64_t l) {
    return l < b->streamed ? (int)(l % b->c->slots) : (b->streamed > 0 ? b->c->slots : 0) + (int)(l - b->streamed);
}
static inline int is_resident(const Builder *b, int64_t l) { return l >= b->streamed; }
// A streamed layer that no later layer displaces from its frame before the
// backward reaches it (never under the baselines, which re-copy every layer).
static inline int is_intact(const Builder *b, int64_t l) {
    return !is_resident(b, l) && l + b->c->slots >= b->streamed && b->c->policy == POLICY_MT && !b->tiled;
}
static inline int64_t slot_addr(const Builder *b, int f) { return b->slot0 + f * b->layer_bytes; }
static inline int64_t frame_addr(const Builder *b, int f) { return b->frame0 + f * b->frame_bytes; }
static inline int is_picked(const Builder *b, int64_t l) { return l < b->leaving && b->pick[l] != PICK_NONE; }
static inline Remat remat_of(const Builder *b, int64_t l) {
    return !is_picked(b, l) ? b->c->remat : b->pick[l] == PICK_HOST_SELECTIVE ? REMAT_SELECTIVE : REMAT_OFFLOAD;
}
// Whether leaving layer l keeps what its backward needs in host memory.
static inline int to_host(const Builder *b, int64_t l) { return b->c->ckpt_host || is_picked(b, l); }
// Whether layer l's kept matmul and attention outputs wait in host memory
// (else in the device keep area).
static inline int keeps_on_host(const Builder *b, int64_t l) {
    return is_picked(b, l) && b->pick[l] == PICK_HOST_SELECTIVE;
}
// The host activation store: leaving layers in order, an offloading one
// taking everything its backward reads, a selective one on the host its
// checkpoint and kept outputs, a recomputed one its checkpoint (checkpoints
// on the host) or nothing. l <= leaving.
static inline int64_t act_addr(const Builder *b, int64_t l) {
    int64_t ckpt = b->c->ckpt_host ? align_up(b->x_bytes, ARENA_ALIGN) : 0;
    if (b->c->policy == POLICY_MEGATRAIN) return (l + MEGATRAIN_BLOCK - 1) / MEGATRAIN_BLOCK * ckpt;
    return b->act_at[l];
}
// The device checkpoint and keep areas hold the recomputed leaving layers' in order. l <= leaving.
static inline int64_t recompute_rank(const Builder *b, int64_t l) {
    if (b->c->policy == POLICY_MEGATRAIN) return l / MEGATRAIN_BLOCK;
    return b->rank[l];
}
// Whether leaving layer l's forward leaves a checkpoint (megatrain: one a block).
static inline int checkpoints(const Builder *b, int64_t l) {
    return b->c->policy != POLICY_MEGATRAIN || l % MEGATRAIN_BLOCK == 0;
}

#endif
