// verify.h: the plan verifier. Before mtc writes a plan and after mtrun
// loads one, it checks each instruction stream following only stream order
// and events (vector clocks over the engines): every read of the arena, the
// host activation store, the host weights and the host gradients sees
// exactly the value it needs (the operand the graph says, of the right
// layer, not freed) written by an instruction that happens before it, and
// every write happens after the previous write and every read since. A plan
// that fails is a compiler bug, never something to run.
#ifndef MT_VERIFY_H
#define MT_VERIFY_H

#include <stddef.h>

#include "common/plan.h"

// Returns 0, or -1 with a message naming the instructions involved.
int plan_verify(const Plan *p, char *err, size_t errcap);

#endif
