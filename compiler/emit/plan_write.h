// plan_write.h: the last stage of mtc: serialises a Plan to the file format
// of common/plan.h.
#ifndef MT_PLAN_WRITE_H
#define MT_PLAN_WRITE_H

#include <stddef.h>

#include "common/plan.h"

// Writes p to path atomically (a temporary file, fsync, rename) and sets
// p->plan_crc. Returns 0, or -1 with a message in err and no file at path.
int plan_write(Plan *p, const char *path, char *err, size_t errcap);

#endif
