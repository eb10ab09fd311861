// explore.h: `mtc --explore [--plot FILE.svg]`: every schedule the search
// builds and costs for a model at several batch sizes, reduced to what a
// user chooses between: predicted tokens a second against device memory and
// host memory. explain.c shows one batch's best plan per policy; this shows
// the trade-offs across all of them.
#ifndef MT_EXPLORE_H
#define MT_EXPLORE_H

#include <stdio.h>

#include "compiler/schedule/schedule.h"

// One costed plan.
typedef struct ExplorePoint {
    int64_t batch;
    Policy policy;
    int fits;
    double tokens_per_s; // 0 when it does not fit
    double device_bytes, host_bytes;
    char schedule[256]; // Plan.schedule, in words (the plan itself is gone)
} ExplorePoint;

typedef struct Exploration {
    const char *model, *target;
    int64_t seq;
    ExplorePoint *pts; // (n) in the order they were costed
    int n, cap;
    int failed; // out of memory: points were lost
} Exploration;

// A SchedRequest.seen hook: adds r (costed on g) to the Exploration at ctx.
void explore_seen(void *ctx, const Graph *g, const SchedResult *r);

// Whether point i is on its batch's Pareto frontier: it fits, and no other
// fitting plan of the batch has at least its tokens a second with no more
// device and host memory, better in one of the three.
int explore_on_frontier(const Exploration *x, int i);

// Prints each batch's frontier (fastest first), and per policy its best
// tokens a second at each batch; with json one object.
void explore_print(FILE *out, const Exploration *x, int json);

// Writes the picture as plain SVG: the searched plans' tokens a second
// against device memory (each batch's frontier joined), and each policy's
// best tokens a second against the batch. Returns 0, or -1 with a message.
int explore_svg(const char *path, const Exploration *x, char *err, size_t errcap);

void explore_free(Exploration *x);

#endif
