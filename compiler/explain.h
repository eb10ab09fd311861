// explain.h: `mtc --explain`: what each scheduling policy would cost on the
// target, against the lower bound, so users explore before spending GPU
// hours. Today there is one policy, the first schedule ("sequential").
#ifndef MT_EXPLAIN_H
#define MT_EXPLAIN_H

#include <stdio.h>

#include "cost.h"

void explain_print(FILE *out, const Plan *p, const Target *t, int json);

// Writes the predicted timeline of a step as Chrome trace-event JSON (one
// track per engine: copy-in, compute, copy-out, host optimizer), which
// Perfetto and chrome://tracing open. Returns 0, or -1 with a message.
int explain_trace(const char *path, const Plan *p, const Target *t, char *err, size_t errcap);

#endif
