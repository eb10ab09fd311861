// schedule.h: turns the differentiated layer graph into a Plan: the host
// store layout, the device arena and the instruction streams.
#ifndef MT_SCHEDULE_H
#define MT_SCHEDULE_H

#include "../common/plan.h"

// The first schedule: one stream, no overlap. Per micro-batch: the global
// weights in once; the head; each layer's weights copied into one slot, its
// input saved as a checkpoint, its forward; the tail, forward and backward;
// then each layer again in reverse, recomputing its forward from the
// checkpoint before its backward, its weight gradients copied out into the
// host accumulators; last the head's backward. Every node gets its own arena
// buffer. Returns NULL with a message in err.
Plan *schedule_first(Graph *g, Arena *a, char *err, size_t errcap);

#endif
