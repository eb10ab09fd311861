// placement.h: where each segment's optimizer lives (Plan.opt_device): the
// host store, as always, or the device, where the segment's fp32 master,
// Adam moments and gradient accumulators stay across steps and its norm and
// AdamW run at the device memory's rate. Decided after the search chose the
// plan's batch, remat, residency and tiling, in the device memory that plan
// leaves free.
#ifndef MT_PLACEMENT_H
#define MT_PLACEMENT_H

#include "compiler/schedule/schedule.h"

// Places best->plan's segments as req asks on t (nothing on a target that
// is not a GPU: the cpu backend has no device store) and costs it again
// into best->cost with the graph's kernels k: DEVOPT_AUTO places the
// globals and the most layers that fit and keeps the placement only when
// its predicted step is shorter; DEVOPT_ALL and DEVOPT_LAYERS that do not
// fit t's device memory leave best->fits 0 with why naming the bytes. The
// plan's schedule words gain "devopt=K/L" (K of its L layers and the
// globals) when anything is placed. Returns 0, or -1 out of memory.
int placement_choose(const Target *t, const DevOptRequest *req, const CostKernels *k, Arena *a, SchedResult *best,
                     char *err, size_t errcap);

// The layers a plan places (its globals with them whenever any is placed), or -1: none placed.
int64_t placement_layers(const Plan *p);

#endif
