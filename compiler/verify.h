// verify.h: the plan verifier. Before mtc writes a plan and after mtrun
// loads one, it follows the instruction streams in order and checks that
// every read of the arena sees exactly the value it needs: the operand the
// graph says, of the right layer, written by the instruction that should
// have written it and not overwritten since. A plan that fails is a
// compiler bug, never something to run.
#ifndef MT_VERIFY_H
#define MT_VERIFY_H

#include <stddef.h>

#include "../common/plan.h"

// Returns 0, or -1 with a message naming the instructions involved.
int plan_verify(const Plan *p, char *err, size_t errcap);

#endif
