#include "compiler/schedule/collective.h"

#include <math.h>
#include <string.h>

const char *const COLLECTIVE_NAMES[COLL_COUNT] = {"all-gather", "reduce-scatter", "all-reduce"};

// A ring all-gather or reduce-scatter of a buffer of `bytes` among n ranks
// joined by links of bandwidth bw and latency lat: n - 1 steps, each moving
// bytes / n on every link at once.
static double ring_s(double bytes, double n, double bw, double lat) {
    return n > 1 ? (n - 1) / n * bytes / bw + (n - 1) * lat : 0;
}

// All-gather or reduce-scatter (the same traffic, mirrored) of `bytes`
// among g ranks a node on n nodes: across the nodes first (each of the
// node's g adapters carries 1/g of the buffer), then within the node.
static double gather_s(const Target *t, double bytes, double g, double n, int cpu) {
    double intra_bw = cpu ? t->host_memory_bandwidth / (2.0 * g) : t->gpu_link_bandwidth;
    double intra_lat = cpu ? 0 : t->gpu_link_latency_s;
    return ring_s(bytes / g, n, t->node_link_bandwidth, t->node_link_latency_s) + ring_s(bytes, g, intra_bw, intra_lat);
}

double collective_seconds(const Target *t, int kind, double bytes, int ranks) {
    if (ranks <= 1 || !(bytes > 0)) return 0;
    int cpu = strcmp(t->arch, "cpu") == 0;
    double per_node = cpu ? ranks : fmin((double)ranks, t->gpus_per_node > 0 ? t->gpus_per_node : 1);
    double nodes = ceil((double)ranks / per_node);
    if (per_node > 1 && !cpu && !(t->gpu_link_bandwidth > 0)) return INFINITY; // no path between the GPUs
    if (nodes > 1 && !(t->node_link_bandwidth > 0)) return INFINITY;
    double one = gather_s(t, bytes, per_node, nodes, cpu);
    if (kind != COLL_ALL_REDUCE) return one;
    // an all-reduce: reduce-scatter then all-gather, or a tree (a pipelined reduce up and broadcast down:
    // the buffer twice over the slowest link, 2 log2 of the ranks' latencies), the faster
    double lat = nodes > 1 ? t->node_link_latency_s : cpu ? 0 : t->gpu_link_latency_s;
    double bw = nodes > 1 ? t->node_link_bandwidth
                : cpu     ? t->host_memory_bandwidth / (2.0 * per_node)
                          : t->gpu_link_bandwidth;
    double tree = 2.0 * bytes / bw + 2.0 * ceil(log2((double)ranks)) * lat;
    return fmin(2.0 * one, tree);
}

double collective_rank_bytes(int kind, double bytes, int ranks) {
    if (ranks <= 1) return 0;
    double share = (double)(ranks - 1) / (double)ranks * bytes;
    return kind == COLL_ALL_REDUCE ? 2.0 * share : share;
}
