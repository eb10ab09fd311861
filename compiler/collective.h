// collective.h: what a collective of a data-parallel run costs on a target
// (the instructions INS_ALLGATHER and INS_REDUCE_SCATTER of a sharded plan,
// and the all-reduce of a replicated one), from the profile's links.
#ifndef MT_COLLECTIVE_H
#define MT_COLLECTIVE_H

#include "../common/target.h"

// The collectives a plan may ask of the ranks.
enum { COLLECTIVE_ALLGATHER, COLLECTIVE_REDUCE_SCATTER, COLLECTIVE_ALLREDUCE };

// Seconds one collective of `kind` over `bytes` (the whole buffer: ranks x
// chunk) takes among `ranks` ranks on target t; 0 for one rank.
double collective_seconds(const Target *t, int kind, double bytes, int ranks);

#endif
