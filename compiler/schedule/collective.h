// collective.h: what a collective of the ranks costs on a target profile:
// all-gather, reduce-scatter and all-reduce priced from the profile's links
// (common/target.h: NVLink between the GPUs of a node, the network adapters
// between nodes, host memory on a cpu target), as NCCL's ring and tree run
// them, hierarchically when the ranks span nodes. The scheduler prices the
// collective instructions of a plan with it (compiler/schedule/cost.c) and the
// scale-out comparison its strategies (compiler/schedule/scaleout.c).
#ifndef MT_COLLECTIVE_H
#define MT_COLLECTIVE_H

#include "common/target.h"

// `bytes` is the whole buffer every rank ends with: an all-gather's output
// (each rank contributes bytes / ranks), a reduce-scatter's input (each
// rank keeps bytes / ranks of the sum), an all-reduce's buffer.
typedef enum { COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_ALL_REDUCE, COLL_COUNT } CollectiveKind;
extern const char *const COLLECTIVE_NAMES[COLL_COUNT]; // "all-gather", "reduce-scatter", "all-reduce"

// Seconds one collective of `kind` over `bytes` takes among `ranks` ranks of
// t, laid out as mpirun fills nodes: min(ranks, gpus_per_node) GPUs a node
// (all of them one machine on a cpu target), as many nodes as that takes.
// 0 for one rank or no bytes. Within a node, a ring: each rank sends and
// receives (n-1)/n of the buffer at gpu_link_bandwidth, n-1 steps of
// gpu_link_latency_s; an all-reduce is a reduce-scatter and an all-gather,
// or a tree where that is faster (small buffers: 2 log2 n latencies).
// Across nodes, hierarchically: the ranks of a node split the buffer, each
// piece crosses the network on its own GPU's adapter (node_link_bandwidth)
// in a ring of the nodes, then the node's ring puts the pieces together.
// A cpu target's ranks are processes of one machine exchanging through its
// memory: every byte a rank receives is written and read there, all ranks'
// at host_memory_bandwidth together.
double collective_seconds(const Target *t, int kind, double bytes, int ranks);

// Bytes one rank sends over its links (NVLink or its network adapter) in
// that collective: what `--explain` counts as interconnect bytes.
double collective_rank_bytes(int kind, double bytes, int ranks);

#endif
