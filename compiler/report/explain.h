// explain.h: `mtc --explain`: what each scheduling policy costs on the
// target, against the lower bound, so users explore before spending GPU
// hours; and `--trace`, the chosen plan's predicted timeline.
#ifndef MT_EXPLAIN_H
#define MT_EXPLAIN_H

#include <stdio.h>

#include "compiler/schedule/scaleout.h"
#include "compiler/schedule/schedule.h"

// One row per searched policy, against the bounds b (cost_bounds of the
// untiled graph); rows[chosen] is the plan mtc would write. With so (mtc
// --ranks N above 1), then the scale-out strategies side by side: one GPU
// alone, replicated, sharded and MegaTrain's way (compiler/schedule/scaleout.h), which
// the plan uses and why, and the fewest nodes a sharded run needs.
void explain_print(FILE *out, const Graph *g, const Target *t, const Bounds *b, const SchedResult *rows,
                   const char *const *names, int nrows, int chosen, const ScaleOut *so, int json);

// Writes the predicted timeline of a step as Chrome trace-event JSON (one
// track per engine: copy-in, compute, copy-out, host optimizer), which
// Perfetto and chrome://tracing open. Returns 0, or -1 with a message.
int explain_trace(const char *path, const Plan *p, const Target *t, char *err, size_t errcap);

#endif
