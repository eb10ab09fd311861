// collective.c: a ring's time for each collective (collective.h).
//
// A minimal version of the cost model's function, so that sharded plans can
// be priced before the scale-out cost model (tree and ring, intra- and
// inter-node) lands: a ring of `ranks` moves (ranks - 1) / ranks of the
// buffer through each rank's link, in ranks - 1 steps of one latency each;
// an all-reduce is a reduce-scatter then an all-gather. The link is the
// GPUs' (gpu_link_bandwidth) where the profile gives one, else the host's
// memory (a cpu target's ranks share one machine's memory).
#include "collective.h"

double collective_seconds(const Target *t, int kind, double bytes, int ranks) {
    if (ranks < 2 || bytes <= 0) return 0;
    double link = t->gpu_link_bandwidth > 0 ? t->gpu_link_bandwidth : t->host_memory_bandwidth;
    double latency = t->gpu_link_bandwidth > 0 ? t->gpu_link_latency_s : 0;
    double one = (double)(ranks - 1) / ranks * bytes / link + (ranks - 1) * latency;
    return kind == COLLECTIVE_ALLREDUCE ? 2 * one : one;
}
