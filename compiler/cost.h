// cost.h: the cost model of the scheduler: the predicted time of a plan's
// training stream on a target machine, and the lower bound of a step that
// no schedule can beat.
#ifndef MT_COST_H
#define MT_COST_H

#include "../common/plan.h"
#include "target.h"

typedef struct Cost {
    double compute_s;        // device time of every RUN, recompute included
    double recompute_s;      // of that, forward work done a second time
    double copy_in_s, copy_out_s; // host link time, each direction
    int64_t copy_in_bytes, copy_out_bytes;
    double device_copy_s;    // arena-to-arena copies
    double optimizer_s;      // the host AdamW step: 28 bytes a parameter, plus the norm's 4
    double step_s;           // predicted step: the engines' times as the plan orders them
    double lower_bound_s;    // max(compute without recompute, weights in once, gradients out once, optimizer)
    int64_t device_peak_bytes; // the arena
    int64_t host_bytes;      // the host store
    int weight_crossings;    // times each layer's weights cross the link in a step
} Cost;

// Predicts a micro-batch step of p's training stream on t. The first
// schedule has one stream and no overlap, so its step is the sum of its
// instructions' times plus the optimizer.
void cost_plan(const Plan *p, const Target *t, Cost *c);

// The predicted time of one instruction on its engine.
double cost_instr(const Plan *p, const Instr *in, const Target *t);

// The device time of one node: GEMMs and attention by FLOPs at the matrix
// rate times gemm_efficiency, everything else by the bytes it reads and
// writes at HBM bandwidth, whichever is longer, plus a kernel launch.
double cost_node(const Node *n, const Target *t, DType compute);

#endif
