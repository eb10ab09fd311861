// cost.h: the cost model of the scheduler: the predicted time of a plan's
// training stream on a target machine, by simulating its engines, and the
// lower bound of a step that no schedule can beat.
#ifndef MT_COST_H
#define MT_COST_H

#include "common/kir.h"
#include "common/plan.h"
#include "common/target.h"

// The flash attention kernels a plan runs (Cost.attention_kinds, bits).
enum { ATTN_KIND_TC = 1, ATTN_KIND_FP32 = 2, ATTN_KIND_CPU = 4 };

// Where the host store's per-layer state lives: all in RAM, or, when RAM is
// short and the target has an NVMe tier, some of it there (mtrun --tier-dir):
// the Adam moments first, then the fp32 master (under bf16 compute only: an
// f32 plan streams the master itself from RAM), then the gradient
// accumulators, then (bf16 compute, no frozen parameters) the bf16 copy
// that streams, the globals' too, read from the tier each time it crosses
// the link. Until that last level the globals stay in RAM.
typedef enum { PLACE_RAM, PLACE_MOMENTS, PLACE_MASTER, PLACE_GRADS, PLACE_WEIGHTS, PLACE_COUNT } PlaceLevel;
extern const char *const PLACE_NAMES[PLACE_COUNT]; // "ram", "moments", "master", "grads", "weights"

typedef struct Placement {
    PlaceLevel level;
    double ram_per_param, tier_per_param; // host store bytes a layer parameter in RAM and on the tier
    int64_t ram_bytes;  // host RAM: the store less what the tier holds, the activation store, the tier's staging
    int64_t tier_bytes; // the tier file
    double tier_read_bytes, tier_write_bytes; // a step's
    double tier_s; // a step's tier time: its reads then its writes, sequential, at the target's rates
} Placement;

// The placement of p's host store on t: the first level whose RAM fits
// t->host_memory and whose tier fits t->tier_capacity (the last level when
// none fits; PLACE_RAM when everything fits in RAM or t has no tier).
void cost_place(const Plan *p, const Target *t, Placement *pl);

typedef struct Cost {
    double compute_s;             // device time of every RUN, recompute included
    double gemm_s, attention_s;   // of that, the GEMMs' and the attention kernels'
    int attention_kinds;          // ATTN_KIND_* bits: which attention kernels run (tensor-core, the fp32
                                  // fallback, the cpu backend's), each priced at its own rate
    double recompute_s;           // of that, forward work done a second time
    double copy_in_s, copy_out_s; // host link time, each direction
    int64_t copy_in_bytes, copy_out_bytes;
    double grads_host_bytes;   // host memory the gradients' adds into the store read and write beyond the copies
    double sums_s;             // with ranks, what train.c sums over them after the micro-batches (in step_s)
    double device_copy_s;      // arena-to-arena copies, and the copies of segments whose optimizer is on the device
                               // (Plan.opt_device) between its device store and the arena
    double device_optimizer_s; // the norms and AdamW of those segments, on the device at its memory rate
    double optimizer_s; // the host's work: AdamW (32 bytes a parameter, 34 under bf16) and the gradient norms (4)
    double step_s;      // predicted step: the simulated engines, `accumulate` micro-batches, each at
                        // least the host memory time of its link bytes and optimizer (they share it),
                        // then, with ranks, what train.c sums over them (the replicated gradients or
                        // the sharded norms, all-reduced)
    int64_t device_peak_bytes; // the arena and the kernels' scratch (plan_device_bytes, common/scratch.h)
    int64_t host_bytes;        // host RAM: the host store (less what the tier holds) and the host activation store
    Placement place;           // the host store across RAM and the NVMe tier
    double weight_crossings;   // how many times a layer's weights cross the link in a step, on average
} Cost;

// Predicts an optimizer step of p's training stream on t: device work from
// the kernels fusion makes of the graph (compiler/fuse/fuse.c), GEMMs by FLOPs
// at the storage dtype's matrix rate, attention by FLOPs at the rate of the
// kernel that runs it (tensor-core or fp32: the target's
// attention_*_fraction of matrix_flops_bf16), every other kernel
// by the bytes it moves at the storage rule's sizes (an epilogue's read of
// its GEMM's output costs nothing); copies by the link, the optimizer by
// host bandwidth. Returns 0, or -1 out of memory.
int cost_plan(const Plan *p, const Target *t, Cost *c);

// The kernels' times of a graph on a target (fusion, then each kernel
// priced): what cost_plan computes first, the same for every plan of the
// graph, so a search prices them once. NULL out of memory.
typedef struct CostKernels CostKernels;
CostKernels *cost_kernels(const Graph *g, const Target *t);
void cost_kernels_free(CostKernels *k);
// cost_plan with the kernels' times of p's graph on t; with times (ntrain),
// also each instruction's time on its resource (as cost_instr_times).
int cost_plan_with(const Plan *p, const Target *t, const CostKernels *k, Cost *c, double *times);

// The seconds launched kernel i of part's fused set s (compiler/fuse/fuse.c) of
// graph g takes on t, as cost_plan prices it (its epilogue included); 0 for
// a kernel not launched (a helper, an epilogue). bench/step_bench.c sets it
// beside each kernel's measured time.
double cost_kernel_s(const Graph *g, int part, const KirSet *s, int i, const Target *t);

// What no schedule of a model on a target can beat, whatever it chooses
// (remat, slots, residency, tiling): two bounds of a step, from the untiled
// graph.
typedef struct Bounds {
    double compute_s;     // one forward and one backward of every part, no recompute, `accumulate` times,
                          // priced from the fused kernels as cost_plan prices them
    double in_s, out_s;   // every weight in once, every gradient out once, at the bytes they stream as
    double host_s;        // the optimizer: AdamW and the gradient norm over every parameter
    double host_memory_s; // host memory feeds both the link and the optimizer: their bytes together
    double tier_s;        // the NVMe tier's reads and writes, for the least any plan puts there (0: none)
    double comm_s;        // the ranks' collectives (collective_seconds), on their one engine: sharded, every
                          // weight all-gathered and every gradient reduce-scattered in fp32; replicated, the
                          // fp32 gradients all-reduced; once a step (0: one process)
    double physical_s;    // the max of the above (the link's two directions added when it is not duplex)
    double update_s;      // of host_s, AdamW alone (the norm of each gradient can run as it arrives)
    double backward_s;    // of compute_s, the backward alone
    double turn_s;        // the head's weights' gradients out, AdamW and weights in again (below)
    double exact_s;       // and exact global-norm clipping: no update before the step's last gradient,
                          // no backward of the next step before its forward has every updated weight,
                          // so at least in + out (the link cannot overlap the last gradient out with
                          // the first weight in), at least update (or the tier, which the updates
                          // stream) + backward, and at least compute + turn: the head's backward
                          // makes the step's last gradients and its forward needs the next step's
                          // first weights, so between the two the device waits for those gradients
                          // out, their update and those weights in
} Bounds;

// What cost_place reads of a plan besides its activation store: the host
// store's elements (a rank's share), the graph's sums over its parameters
// and how many times a step the weights cross the link (a pass over the
// plan's stream), counted once by cost_place_basis.
typedef struct PlaceBasis {
    int64_t global_elems, layers_elems, layer_elems; // the store's: the globals', every layer's, the largest layer's
    double crossings[2]; // a step's crossings of the link: [0] the layers' weights, on average, [1] the globals'
    int grads_bf16;      // storage_grads_bf16 off the tier
    int64_t host_global; // storage_host_global_elems, of the whole graph
    int64_t host_elems;  // storage_host_elems, of the whole graph
    int64_t frozen[2];   // storage_frozen_elems: [0] the layers', [1] the globals'
} PlaceBasis;
void cost_place_basis(const Plan *p, const Target *t, PlaceBasis *b);

// cost_place were p's host activation store act bytes, from its basis b:
// what a plan of the same stream with another mix of picks gets.
void cost_place_with(const Plan *p, const Target *t, const PlaceBasis *b, int64_t act, Placement *pl);

// The host's work of p's step under placement pl, as cost_plan_with prices
// it: the updates (AdamW, and the tier's reads and writes) and, with the
// gradient norms, all of it (Cost.optimizer_s). With updates (layers + 2),
// also each layer's updates, then the head's globals', then the tail's.
void cost_host_work(const Plan *p, const Target *t, const Placement *pl, double *update_s, double *optimizer_s,
                    double *updates);

// The bounds of graph g (untiled, as sema and autodiff made it) on t, for
// one rank of `ranks` (0 or 1: one process), sharded or replicated: a
// sharded rank's link, host work, host memory and tier are its 1 / ranks of
// the store's. Returns 0, or -1 out of memory.
int cost_bounds(const Graph *g, const Target *t, int ranks, int sharded, Bounds *b);

// Each instruction of p's training stream's time on its resource into dur
// (ntrain), as cost_plan prices it. Returns 0, or -1 out of memory.
int cost_instr_times(const Plan *p, const Target *t, double *dur);

// Simulates the engines over ins[0, n): each runs its instructions in order,
// an instruction starting when its engine is free, its WAITs' events have
// fired and the resource it needs (the device, the host link in its
// direction or both when the link is not duplex, the host's memory) is
// free. A copy that starts while the other direction of a duplex link is
// busy runs at duplex_efficiency of its rate. On a cpu target (arch cpu) one
// thread does all the work, so every instruction waits for every other.
// dur[i] is instruction i's time
// (cost_instr_times). Host instructions cost nothing unless host_work.
// Writes each instruction's start and end (seconds) when start/end are not
// NULL. Returns the time the last engine finishes.
double cost_simulate(const Plan *p, const Instr *ins, int n, const Target *t, const double *dur, int host_work,
                     double *start, double *end);

#endif
