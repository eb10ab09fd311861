// plan.h: the contract between mtc and mtrun. mtc builds a Plan in memory
// (compiler/schedule/schedule.c) and writes it (compiler/emit/plan_write.c); mtrun reads and
// validates it (runtime/plan_read.c) and replays its instruction streams.
//
// File format, version 20, all integers little-endian:
//
//   header   "MTPLAN\0\0" (8 bytes), u32 version (PLAN_VERSION), u32 endian = 0x01020304,
//            u32 section count, u32 header crc32 (of the bytes before it)
//   table    per section: u32 id, u32 crc32 of its bytes, u64 offset, u64 size
//   sections SOURCE, CONFIG, GRAPH, HOST, ARENA, STREAMS, KERNELS (ids 1..7),
//            each present once, in any order, inside the file, not overlapping
//
// crc32 is zlib's. Strings are u32 length + bytes (no NUL). What each
// section holds is written out in plan_write.c, field by field; plan_read.c
// reads the same fields and validates every one before use.
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/graph.h"

enum { PLAN_VERSION = 20, PLAN_ENDIAN = 0x01020304 };

typedef enum {
    SEC_SOURCE = 1, // model path, source text, its crc32
    SEC_CONFIG,     // the TrainConfig
    SEC_GRAPH,      // model name, block, the layers' kinds, inputs, params, the parts with their backward
    SEC_HOST,       // host store layout, the host activation store
    SEC_ARENA,      // device arena size, kernel scratch, its limit, every node's offset (block nodes once per frame)
    SEC_STREAMS,    // the schedule's name and the instruction streams
    SEC_KERNELS,    // the fused kernels (kernel IR), LLVM bitcode, CUDA cubin and PTX
    SEC_COUNT_PLUS_ONE
} SectionId;

// The engines a plan's instructions are queued on. Each runs its own
// instructions in stream order; engines order against each other only
// through events (INS_RECORD, INS_WAIT). Any kind may sit on any engine (the
// sequential policy puts everything on ENG_COMPUTE); the cost model charges
// an instruction by its kind. ENG_COMM runs the collectives of a sharded
// plan (a communication stream on a GPU), and nothing else runs them: one
// engine issues them in stream order, so every rank of a run, all replaying
// one plan (dist_check_plan compares their crcs), issues the same
// collectives in the same order.
typedef enum { ENG_COMPUTE, ENG_COPY_IN, ENG_COPY_OUT, ENG_HOST, ENG_COMM, ENG_COUNT } Engine;

typedef enum {
    INS_COPY_IN,  // layer `layer`'s weights as they stream, from element src of the host store: the fp32
                  // master, or its bf16 copy with XFER_BF16 -> arena [dst, dst + bytes)
    INS_COPY_OUT, // arena [src, src + bytes), fp32 or with XFER_BF16 bf16 -> added into the host's fp32
                  // gradient accumulators from element dst
    INS_COPY,     // arena [src, ...) -> arena [dst, ...), bytes
    INS_INPUT,    // model input `input` (the batch's tokens or targets, or the loss scale) -> arena [dst, dst + bytes)
    INS_RUN,      // run nodes [from, to) of part `part` in block frame `frame` for layer `layer`; flags RUN_*
    INS_LOSS,     // the loss scalar at arena src is the micro-batch's loss
    INS_SAVE,     // arena [src, src + bytes) -> host activation store bytes [dst, dst + bytes)
    INS_LOAD,     // host activation store bytes [src, src + bytes) -> arena [dst, dst + bytes)
    INS_FREE,     // arena [dst, dst + bytes) holds nothing from here on (the cpu backend fills it with NaN)
    INS_RECORD,   // event `event` fires once everything before it on this engine is done
    INS_WAIT,     // nothing after it on this engine starts before event `event` fired
    INS_NORM,     // host: the squared norm of segment `layer`'s gradients, on a step's last micro-batch
    INS_UPDATE,   // host: the pending AdamW update of segment `layer`'s weights; zeroes its gradients
    INS_STAT,     // what layer `layer`'s forward reports (plan_reports): node `from` of part `part` in frame
                  // `frame`, at arena [src, src + bytes), bf16 with XFER_BF16 -> the stream's host statistics
                  // buffer bytes [dst, dst + bytes): the loss add_loss joins, or top_k's mask (the load per expert)
    // The collectives of a sharded plan (Plan.sharded), on ENG_COMM, over the plan's ranks. Segment `layer`
    // of len elements is cut into ranks chunks of chunk = ceil(len / ranks) (dist_shard, runtime/dist/dist.h),
    // rank r's at element r x chunk of the region; the region is ranks x chunk elements, what lies past len
    // is padding nobody reads. Both are in place, as NCCL's in-place collectives are.
    INS_ALLGATHER,      // arena [dst, dst + bytes), segment `layer`'s weights (bytes = ranks x chunk x the weight
                        // bytes): every rank's chunk, which its COPY_IN XFER_SHARD put at its place, to every rank
    INS_REDUCE_SCATTER, // arena [src, src + bytes), fp32 (bytes = ranks x chunk x 4), segment `layer`'s gradients
                        // in its host layout: each rank's chunk of the sum over the ranks lands at its own place
                        // (the other chunks are left undefined)
    INS_COUNT
} InsKind;

// Instruction flags. INS_RUN: RUN_SKIP_HEAVY, skip matmul, attention and moe
// nodes, whose outputs the schedule restored (selective recomputation).
// INS_COPY_IN, INS_COPY_OUT, INS_STAT: XFER_BF16, the device side holds
// bf16 (the storage rule, common/storage.h, says which). INS_COPY:
// XFER_BF16, the source holds bf16, widened into fp32 at dst (bytes: dst's,
// the fp32 bytes). INS_COPY_IN, INS_COPY_OUT: XFER_SHARD, of the elements the
// instruction names only those in this rank's shard of segment `layer`
// (dist_shard) move: COPY_IN's src is the segment's first element and puts
// the rank's slice [lo, hi) at dst + lo elements; COPY_OUT adds the elements
// of [dst, dst + bytes / element) that lie in the slice.
enum { RUN_SKIP_HEAVY = 1, XFER_BF16 = 2, XFER_SHARD = 4 };

typedef struct Instr {
    int32_t kind;   // InsKind
    int32_t engine; // Engine
    int32_t part;   // INS_RUN, INS_STAT
    int32_t layer; // INS_RUN, INS_STAT; INS_COPY_IN, INS_COPY_OUT, INS_NORM, INS_UPDATE: the host store segment (below)
    int32_t input; // INS_INPUT
    int32_t from, to; // INS_RUN; INS_STAT: from is the node
    int32_t frame;    // INS_RUN of the block, INS_STAT: which frame's offsets (0 for the head and tail)
    int32_t flags;    // INS_RUN: RUN_SKIP_HEAVY; INS_COPY_IN, INS_COPY_OUT, INS_STAT: XFER_BF16
    int32_t event;    // INS_RECORD, INS_WAIT: 0 .. nevents-1, each recorded once per stream
    int64_t src, dst, bytes;
} Instr;

typedef struct Plan {
    // SOURCE
    const char *source_path;
    const char *source; // (source_len) the model text
    size_t source_len;
    uint32_t source_crc;
    // CONFIG and GRAPH (the graph holds the TrainConfig)
    Graph *graph;
    // HOST: every array of the host store (master, moments, accumulators,
    // the bf16 copy) has the same layout in elements: the global
    // parameters, then one segment a layer, each contiguous so that a layer
    // is one copy. The globals are two segments: first those the head reads
    // (SEG_HEAD), then those only the tail reads (SEG_TAIL: an untied LM
    // head, the final norm), which the host can update while the layers run.
    // A layer's segment is its block kind's size, host_kind[kind].
    int64_t host_global;             // elements of the global parameters
    int64_t host_tail;               // of them, the last host_tail elements: the tail's own segment
    int64_t host_kind[MT_MAX_KINDS]; // (graph->nkinds) elements in a layer segment of each kind
    int64_t host_layer;              // the largest kind's: a device weight slot, an NVMe tier record
    int64_t *layer_base;             // (layers + 1) layer l's segment starts at host_global + layer_base[l];
                                     // layer_base[layers]: all layers' elements (plan_lay_out_layers)
    int64_t *param_offset;           // (graph->params.n) elements from the start of its segment
    int64_t host_act_bytes;          // the host activation store: offloaded checkpoints and activations
    // Where each segment's optimizer lives (plan_opt_device): (plan_segment_count), by plan_segment_index;
    // NULL in a plan being built: every one on the host. 0: the host store, as always. 1: the device (a
    // cuda target): the segment's fp32 master, Adam moments, gradient accumulators and the copy that
    // streams live in device memory beside the arena, authoritative across steps; its COPY_IN reads that
    // copy and its COPY_OUT adds into those accumulators device to device (no link), and its INS_NORM and
    // INS_UPDATE run on the device, the host engine waiting for them. The streams are the same
    // instructions either way, so placement never changes the bits (docs/plan.md, "Optimizer placement").
    uint8_t *opt_device;
    // ARENA
    int64_t arena_bytes;
    int64_t scratch_bytes; // device scratch of each engine that runs kernels, beside the arena (common/scratch.h:
                           // plan_device_bytes is all the device memory); 0 for a cpu target
    int64_t device_limit;  // bytes of device memory of the target the plan was made for
    int32_t nframes;       // block frames: each a full set of block node offsets
    // Byte offsets, -1 for views and reshapes. Head and tail: (nodes.n).
    // Block: (nframes, nodes.n), frame-major; plan_offsets() picks a frame.
    int64_t *node_offset[PART_COUNT];
    // STREAMS
    const char *schedule; // what the scheduler chose, in words ("remat=layer slots=2 resident=3 ...")
    int32_t ranks;        // the processes of a data-parallel run (mtc --ranks), each running this plan on its
                          // own part of every batch; 1: one process. 0 in a plan being built is written as 1
    int32_t sharded;      // 1: each rank owns a 1/ranks shard of every segment of the host store (dist_shard):
                          // weights go in by COPY_IN XFER_SHARD and INS_ALLGATHER, gradients out by
                          // INS_REDUCE_SCATTER and COPY_OUT XFER_SHARD; 0: replicated, every rank holds it all
    int32_t nevents;      // events of each stream are numbered 0 .. nevents-1
    Instr *train;         // (ntrain) one micro-batch: the pending update, forward, loss, backward, gradients out
    int32_t ntrain;
    Instr *eval; // (neval) forward and loss only, for validation
    int32_t neval;
    // KERNELS (empty when absent)
    const uint8_t *kernels_bytes; // (kernels_len) the kernel IR of every part (common/kir.h)
    size_t kernels_len;
    const uint8_t *bitcode; // (bitcode_len) LLVM bitcode of the cpu kernels
    size_t bitcode_len;
    const char *cuda_arch; // "sm_90", or NULL: no CUDA code
    const uint8_t *cubin;  // (cubin_len)
    size_t cubin_len;
    const char *ptx; // (ptx_len)
    size_t ptx_len;
    // set by the writer and the reader: crc32 over all sections, naming this plan
    uint32_t plan_crc;
} Plan;

// Host store segments, as Instr.layer names them: the head's globals, the
// tail's own globals, then layers 0 .. layers-1. Either global segment may
// be empty; a plan moves, updates and norms only those that are not.
enum { SEG_TAIL = -2, SEG_HEAD = -1, SEG_FIRST = SEG_TAIL };
static inline int64_t plan_segment_base(const Plan *p, int64_t seg) {
    return seg == SEG_HEAD ? 0 : seg == SEG_TAIL ? p->host_global - p->host_tail : p->host_global + p->layer_base[seg];
}
static inline int64_t plan_segment_len(const Plan *p, int64_t seg) {
    return seg == SEG_HEAD   ? p->host_global - p->host_tail
           : seg == SEG_TAIL ? p->host_tail
                             : p->host_kind[p->graph->layer_kind[seg]];
}
// Parameter `param`'s first element in the host store: its offset in its
// segment, layer `layer`'s for a block parameter (ignored for a global).
static inline int64_t plan_param_elem(const Plan *p, int param, int64_t layer) {
    const Param *prm = p->graph->params.items[param];
    return (prm->in_block ? plan_segment_base(p, layer) : 0) + p->param_offset[param];
}
// Whether segment seg's optimizer lives on the device (Plan.opt_device).
static inline int plan_opt_device(const Plan *p, int64_t seg) {
    return p->opt_device && p->opt_device[seg - SEG_FIRST];
}
// Elements in the whole store: the globals and every layer's segment.
static inline int64_t plan_host_elems(const Plan *p) { return p->host_global + p->layer_base[p->graph->layers]; }
// The segment element f (below plan_host_elems) of the store lies in.
static inline int64_t plan_segment_of(const Plan *p, int64_t f) {
    if (f < p->host_global) return f < p->host_global - p->host_tail ? SEG_HEAD : SEG_TAIL;
    if (p->layer_base[p->graph->layers] == 0) return SEG_HEAD;
    int64_t lo = 0, hi = p->graph->layers - 1; // the last layer whose segment starts at or before f
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (p->host_global + p->layer_base[mid] <= f) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
// Lays out the layer segments from host_kind and the layers' kinds: fills
// layer_base (allocated, layers + 1) and host_layer.
static inline void plan_lay_out_layers(Plan *p) {
    const Graph *g = p->graph;
    p->host_layer = 0;
    for (int k = 0; k < g->nkinds; k++)
        if (p->host_kind[k] > p->host_layer) p->host_layer = p->host_kind[k];
    p->layer_base[0] = 0;
    for (int64_t l = 0; l < g->layers; l++) p->layer_base[l + 1] = p->layer_base[l] + p->host_kind[g->layer_kind[l]];
}
// How many segments there are, and segment seg's index among them (0 .. count-1).
static inline int64_t plan_segment_count(const Plan *p) { return p->graph->layers - SEG_FIRST; }
static inline int64_t plan_segment_index(int64_t seg) { return seg - SEG_FIRST; }

// The nodes of a part's forward that the run reports (INS_STAT): the mask
// of each top_k that routes (read by a node other than the load-balancing
// loss, whose own top_k of the same logits would count every token twice):
// its column sums are the load per expert; and every loss add_loss joins
// (the auxiliary loss). Sets marks[i] (part->nodes.n) to 1 for each, 0
// elsewhere. The schedule keeps them to the end of a block's forward run and
// reads them after it; mtrun logs them.
static inline void plan_report_marks(const Part *part, unsigned char *marks) {
    for (int i = 0; i < part->nodes.n; i++) marks[i] = 0;
    for (int i = 0; i < part->nfwd; i++) {
        const Node *n = part->nodes.items[i];
        for (int j = 0; j < n->nin; j++) {
            const Node *m = n->op == OP_ADD_LOSS && j == 1 ? n->in[1] : n->op != OP_LOAD_BALANCE ? n->in[j] : NULL;
            while (m && (m->op == OP_VIEW || m->op == OP_RESHAPE)) m = m->in[0];
            if (m && m->part == n->part && (m->op == OP_TOP_K || (n->op == OP_ADD_LOSS && j == 1))) marks[m->id] = 1;
        }
    }
}

// The node offsets a RUN of part pk in frame `frame` uses.
static inline const int64_t *plan_offsets(const Plan *p, int pk, int frame) {
    return p->node_offset[pk] + (part_is_block(pk) ? (int64_t)frame * p->graph->parts[pk].nodes.n : 0);
}

#endif
