// replay.h: executes an instruction stream of a plan on a backend, and its
// plain counterpart, the reference step that runs the whole graph unstreamed.
#ifndef MT_REPLAY_H
#define MT_REPLAY_H

#include "backend.h"
#include "store.h"

// Replays ins[0, n) with the micro-batch's model inputs (inputs[i] is model
// input i, e.g. tokens then targets). Gradients are added into hs->g.
// Returns the micro-batch's loss.
float replay(Backend *be, const Instr *ins, int n, HostStore *hs, const int32_t *const *inputs);

// The oracle: head, every layer and tail run directly on the host store with
// every activation kept, no arena, no recompute; with backward, gradients
// are added into hs->g. Returns the loss, or NAN when out of memory.
float reference_step(const Plan *p, HostStore *hs, const int32_t *const *inputs, int backward);

#endif
