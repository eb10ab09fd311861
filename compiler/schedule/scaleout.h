// scaleout.h: what a data-parallel run of N ranks of one plan each predicts,
// three ways (docs/scaleout.md), from the one-GPU cost model
// (compiler/schedule/cost.c) and the collectives' prices (compiler/schedule/collective.h):
//   replicated: every rank holds the whole host store, streams every layer
//     over its own host link, all-reduces the gradients on the devices and
//     runs AdamW over the whole model (as DDP);
//   sharded: rank r holds 1/N of every segment's master, moments and
//     gradient accumulator, copies in its slice and all-gathers the layer on
//     the devices, reduce-scatters the gradients and copies out its slice,
//     AdamW on its slice: link bytes, host memory and host optimizer work / N;
//   sharded+tier: sharded, each rank keeping on its node's NVMe tier what of
//     its slice its share of the node's host memory cannot hold (the Adam
//     moments, then the master, then the gradients, as one GPU places its
//     store), at its share of the node's tier capacity and bandwidth;
//   megatrain: MegaTrain's multi-GPU code: spawned workers on one host, each
//     GPU running the single-GPU megatrain schedule over its own link from
//     one shared store, the gradients summed into the shared accumulators on
//     the host, then one optimizer over the whole model.
// The ranks of a node share its host memory bandwidth and cores (the host_*
// figures of a profile are a node's): every host-side byte of all of them
// counts against host_memory_bandwidth together, and a rank's optimizer runs
// at its share of host_adamw_bandwidth.
#ifndef MT_SCALEOUT_H
#define MT_SCALEOUT_H

#include <stddef.h>

#include "compiler/schedule/schedule.h"

typedef enum { SCALE_REPLICATED, SCALE_SHARDED, SCALE_SHARDED_TIER, SCALE_MEGATRAIN, SCALE_COUNT } ScaleStrategy;
extern const char *const SCALE_NAMES[SCALE_COUNT]; // "replicated", "sharded", "sharded+tier", "megatrain"

// One strategy at N ranks: one rank's plan and step, and what the run does.
typedef struct ScaleRow {
    int ranks;                  // the ranks it runs (megatrain: one node's at most)
    int fits;                   // device, the rank's share of host memory, the profile's nodes
    char why[480];              // when it does not fit, or where the strategy has no way to run
    int priced;                 // a plan was found and priced (even when it does not fit)
    char schedule[256];         // the rank's plan's schedule words
    double step_s;              // one optimizer step of the whole run (every rank's step)
    double tokens_per_s;        // of all ranks
    double model_flops_per_gpu; // 6 x parameters x a rank's tokens a step / step_s
    double link_bytes;          // a rank's host link bytes a step (both directions)
    double interconnect_bytes;  // a rank's bytes sent over NVLink and the network a step
    double collective_s;        // a rank's collectives' time a step (on the copy engines, overlapping compute)
    double host_bytes;          // host RAM of one rank (megatrain: its share of the one shared store)
    double tier_bytes;          // a rank's bytes on the NVMe tier (sharded+tier; 0: none)
    double tier_s;              // a rank's tier reads and writes a step, at its share of the node's tier
    int tier_level;             // what of the store the tier holds (PlaceLevel; PLACE_RAM: nothing)
    double node_host_bytes;     // host RAM of one node's ranks together
    double host_memory_s;       // a step's host-side bytes of a node's ranks at host_memory_bandwidth
    double optimizer_s;         // a rank's host optimizer a step at its share of the node's host
    double bound_s;             // what no schedule of the strategy beats (scaleout_compare with bounds; 0 without)
} ScaleRow;

typedef struct ScaleOut {
    int ranks, per_node, nodes; // ranks a node (min(ranks, gpus_per_node); all on a cpu target), nodes used
    ScaleRow one;               // one rank alone on the target (one GPU with a node's host to itself)
    ScaleRow rows[SCALE_COUNT];
    int chosen; // SCALE_SHARDED or SCALE_REPLICATED, the faster that fits (-1: neither)
    int plan;   // the layout of the plan explained: `chosen` (scaleout_compare's), or what
                // mtc --shard on|off gives
    char why_chosen[560];
    int nodes_needed;                         // the fewest nodes on which a sharded run fits (0: none of the profile's)
    int ranks_needed;                         // that many nodes' GPUs
    int tier_nodes_needed, tier_ranks_needed; // the same for sharded+tier (0: none, or no tier)
    ScaleRow needed, tier_needed;             // the sharded and sharded+tier rows at those nodes
    double store_bytes;                       // the whole host store (master, moments, accumulators, bf16 copy)
} ScaleOut;

// Predicts every strategy for `ranks` ranks of graph g (its batch one
// rank's) on t; each strategy's rank plan is the fastest, priced that way, of
// every plan the scheduler's search builds for each of mt's remat modes
// (megatrain: its own schedule) on the rank's share of the node's memory. nodes_needed is
// searched only when want_nodes. With b (cost_bounds of g's untiled graph),
// each row's bound_s: the one-GPU bounds as the strategy changes them (a
// sharded rank's link 1/N of the weights plus their all-gather and the
// gradients' reduce-scatter, a replicated rank's gradients all-reduced, the
// optimizer and host memory at the rank's share of the node). Returns 0, or
// -1 with a message in err.
int scaleout_compare(Graph *g, const Target *t, int ranks, int want_nodes, const Bounds *b, Arena *a, ScaleOut *out,
                     char *err, size_t errcap);

// The plans these price are the one-GPU plans schedule_search builds (no
// collective instructions): each strategy's slices and collectives are put
// into their prices here. Both run searches of their own (a few seconds for
// a 70B model): call them before schedule_search, never from inside it.
//
// What the scheduler's `--shard auto` uses: SCALE_SHARDED or
// SCALE_REPLICATED, whichever fits and predicts the shorter step (sharded
// when both fit within 0.1%; sharded+tier, when only it fits, is
// SCALE_SHARDED: its plan is sharded); why (cut to whycap) says so in
// words. -1 with the message in why on error, or when no layout fits the
// ranks ("neither fits: ...", what --explain --ranks says), so that -o
// refuses such a plan as --explain does.
int scaleout_choose(Graph *g, const Target *t, int ranks, Arena *a, char *why, size_t whycap);

// The profile one rank of `ranks` searches its sharded plan on: its share of
// a node's host memory, NVMe tier capacity and tier bandwidths (the ranks of
// a node share them: min(ranks, gpus_per_node) of them; all on a cpu target).
Target scaleout_rank_profile(const Target *t, int ranks);

#endif
