// backend.h: what a device must do to replay a plan: hold the arena, copy
// between host and arena, and run parts of the graph. A backend is a struct
// of function pointers; cpu (backend_cpu.c) is the first, cuda comes later.
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include "../common/plan.h"

typedef struct Backend Backend;
struct Backend {
    const char *name;
    void *ctx;
    // host -> arena [dst, dst + bytes)
    void (*copy_in)(Backend *be, int64_t dst, const void *host, int64_t bytes);
    // arena [src, src + bytes) added into host floats
    void (*copy_out_add)(Backend *be, float *host, int64_t src, int64_t bytes);
    // arena -> arena
    void (*copy)(Backend *be, int64_t dst, int64_t src, int64_t bytes);
    // runs nodes [from, to) of a part at their arena offsets
    void (*run)(Backend *be, PartKind part, int from, int to);
    float (*read_scalar)(Backend *be, int64_t src);
    void (*destroy)(Backend *be);
};

// The cpu backend: the arena is one host buffer, copies are memcpy, nodes run
// through the plain kernels. NULL with a message in err.
Backend *backend_cpu_create(const Plan *p, char *err, size_t errcap);

#endif
