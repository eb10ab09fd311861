// plan_read.h: reads a plan file (common/plan.h) back into a Plan whose Graph
// the runtime uses exactly as mtc's in-memory graph. Every field is
// validated before the Plan is returned; no input, however damaged, makes
// these functions crash.
#ifndef MT_PLAN_READ_H
#define MT_PLAN_READ_H

#include <stddef.h>

#include "common/arena.h"
#include "common/plan.h"

// Reads and validates the plan at path. Everything returned lives in a.
// Returns NULL with a message naming the file (and the section, where the
// fault lies in one) in err; a may then hold partial allocations, freed
// with it.
Plan *plan_read(const char *path, Arena *a, char *err, size_t errcap);

// The same for the len bytes at data; name stands for the file in messages.
Plan *plan_parse(const void *data, size_t len, const char *name, Arena *a, char *err, size_t errcap);

#endif
