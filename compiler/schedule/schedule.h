// schedule.h: the ahead-of-time scheduler. Turns the differentiated layer
// graph and a target profile into a Plan: the host store layout, the device
// arena (every buffer at a fixed offset) and the instruction streams of the
// four engines (copy-in, compute, copy-out, host optimizer) joined by events.
#ifndef MT_SCHEDULE_H
#define MT_SCHEDULE_H

#include "common/plan.h"
#include "compiler/schedule/cost.h"
#include "common/target.h"

// What a streamed layer keeps for its backward.
typedef enum {
    REMAT_AUTO,      // the fastest of the others that fits
    REMAT_NONE,      // every layer keeps everything on the device (every layer resident)
    REMAT_LAYER,     // only the layer's input (a checkpoint); the forward is recomputed
    REMAT_SELECTIVE, // the checkpoint and the matmul and attention outputs; the rest is recomputed
    REMAT_OFFLOAD,   // everything the backward reads goes to host memory and back; nothing recomputed
    REMAT_MIXED,     // per layer: some streamed layers offload, the rest recompute (layer or selective)
    REMAT_COUNT
} Remat;

// How the engines are used.
typedef enum {
    POLICY_MT,         // overlap everything the dependencies allow (the default)
    POLICY_SEQUENTIAL, // one engine: no overlap at all (the first schedule, a baseline)
    POLICY_MEGATRAIN,  // a baseline after the MegaTrain paper's code: weights cross three times
                       // a step (forward, recompute, backward), the optimizer runs after backward
    POLICY_ZERO3,      // a baseline after DeepSpeed ZeRO-3 with CPU offload on one GPU: each layer's
                       // weights prefetched (two slots) for its forward and once more for the
                       // recompute of its checkpointed forward and its backward, a checkpoint per
                       // layer, the backward waiting for each layer's gradients out (priced in
                       // cost.c as DeepSpeed moves them), the CPU optimizer after the backward with
                       // nothing overlapping it (schedules/README.md, "The baselines")
    POLICY_COUNT
} Policy;

const char *remat_name(Remat r);
const char *policy_name(Policy p);

typedef struct SchedChoice {
    Policy policy;
    Remat remat; // never REMAT_AUTO or REMAT_MIXED here: a mixed plan is layer or selective with picks
    // Per-layer modes (layout.c, pick_modes): of the n streamed layers that leave the device,
    // offloaded + host_selective are picked, spread evenly; of the picks, `offloaded` (spread
    // evenly among them) offload everything their backward reads, the others keep their input and
    // their matmul and attention outputs in host memory and recompute the rest (selective on the
    // host); the layers not picked recompute as remat says. Both 0 with a single mode.
    int64_t offloaded;
    int64_t host_selective;
    int64_t probe_layer; // > 0: the mixed search's probe: leaving layer probe_layer - 1 alone is picked, the
                         // kind of pick offloaded (1) or host_selective (1) says
    int slots;           // frames the streamed layers rotate through (weight slot + buffers): 1 to 3
    int64_t resident;    // layers at the forward/backward turn that keep weights and activations
    int ckpt_host;       // streamed layers' checkpoints (or offloaded activations) live in host memory
    int ranks;           // the plan is one rank of a data-parallel run of this many (0 or 1: one process)
    int sharded;         // with ranks > 1: each rank owns a shard of the host store (Plan.sharded), else replicated
} SchedChoice;

// What the scheduler keeps of a graph for all its searches (the fused
// kernels' spans, every part's layouts), made once, in a: call it before any
// search whose arena marks could take them (compiler/compile.c does, after
// it fuses g into Graph.kernels, which the scheduler needs). Returns 0, or
// -1 with a message in err.
int schedule_prepare(Graph *g, Arena *a, char *err, size_t errcap);

// Builds the plan for one choice (device_limit set from t). Returns NULL
// with a message in err.
Plan *schedule_build(Graph *g, const Target *t, const SchedChoice *c, Arena *a, char *err, size_t errcap);

// One searched configuration and what it costs.
typedef struct SchedResult {
    SchedChoice choice;
    Plan *plan; // NULL when nothing of this kind fits
    Cost cost;
    int fits;
    char why[256]; // when it does not fit
} SchedResult;

enum { CKPT_DEVICE = 1, CKPT_HOST = 2 };

// mtc --device-optimizer: where the optimizer of each segment lives (compiler/schedule/placement.h).
typedef enum {
    DEVOPT_NONE,   // every segment on the host (the default)
    DEVOPT_ALL,    // the globals and every layer on the device
    DEVOPT_LAYERS, // the globals and the first `layers` layers (the globals first: the head's update opens a step)
    DEVOPT_AUTO,   // as DEVOPT_LAYERS with the count of the fastest predicted step that fits the device
} DevOptMode;

typedef struct DevOptRequest {
    DevOptMode mode;
    int64_t layers; // DEVOPT_LAYERS
} DevOptRequest;

// What the user asked of the search; the rest it chooses.
typedef struct SchedRequest {
    Policy policy;
    Remat remat; // REMAT_AUTO: any; REMAT_MIXED: layer or selective with some layers picked
    // A mixed plan of exactly these picks (remat mixed, layer or selective), when either is > 0;
    // both 0: the search chooses (SchedChoice's fields)
    int64_t offloaded, host_selective;
    int slots;        // 0: any
    int64_t resident; // -1: the most that fit
    int ckpt;         // 0: either; CKPT_DEVICE or CKPT_HOST: where the checkpoints must live
    int ranks;        // mtc --ranks: every plan is one rank of this many (0 or 1: one process)
    int shard;        // with ranks > 1, 1: sharded plans (mtc --shard on); 0: replicated; -1: auto, which mtc
                      // resolves (scaleout_choose) before the search, else replicated
    // When > 0, plans whose step is not below it are of no use to the caller: the search may leave
    // out any it can tell will not beat it (mtc's --tile auto, once a tiling's best plan fits).
    double beat_s;
    // When set, called with every plan the search builds and costs (mtc --explore).
    // The plan is the search's until the call returns: what the callback keeps, it copies.
    void (*seen)(void *ctx, const Graph *g, const SchedResult *r);
    void *seen_ctx;
    DevOptRequest device_opt; // where the chosen plan's optimizer lives (placement_choose, after the search)
} SchedRequest;

// How far a plan's memory is from fitting t: the larger of its device and
// host memory over what t has (at most 1 when both fit).
double schedule_overshoot(const Cost *c, const Target *t);

// The fastest plan of the request that fits the target's device and host
// memory. When none fits, r->fits is 0,
// r->why says what the nearest one (schedule_overshoot) needs, and r->plan is that
// plan. Returns 0, or -1 with a message in err (out of memory, a graph the
// scheduler cannot stream).
int schedule_search(Graph *g, const Target *t, const SchedRequest *req, Arena *a, SchedResult *r, char *err,
                    size_t errcap);

#endif
