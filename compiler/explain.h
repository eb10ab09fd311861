// explain.h: `mtc --explain`: what each scheduling policy would cost on the
// target, against the lower bound, so users explore before spending GPU
// hours. Today there is one policy, the first schedule ("sequential").
#ifndef MT_EXPLAIN_H
#define MT_EXPLAIN_H

#include <stdio.h>

#include "cost.h"

void explain_print(FILE *out, const Plan *p, const Target *t, int json);

#endif
