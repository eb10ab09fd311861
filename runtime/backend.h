// backend.h: what a device must do to replay a plan: hold the arena, copy
// between host and arena, poison dead regions, and run parts of the graph.
// A backend is a struct of function pointers; cpu (backend_cpu.c) is the
// first, cuda comes later. Engines and events are the replay's business
// (replay.c): the cpu backend is called on one thread, in an order that
// honours the plan's events and nothing else.
#ifndef MT_BACKEND_H
#define MT_BACKEND_H

#include "../common/plan.h"

typedef struct Backend Backend;
struct Backend {
    const char *name;
    void *ctx;
    // host -> arena [dst, dst + bytes)
    void (*copy_in)(Backend *be, int64_t dst, const void *host, int64_t bytes);
    // arena [src, src + bytes), fp32 or (bf16 set) bf16, added into host floats
    void (*copy_out_add)(Backend *be, float *host, int64_t src, int64_t bytes, int bf16);
    // arena [src, src + bytes) -> host bytes (the host activation store)
    void (*copy_out)(Backend *be, void *host, int64_t src, int64_t bytes);
    // arena -> arena
    void (*copy)(Backend *be, int64_t dst, int64_t src, int64_t bytes);
    // arena [dst, dst + bytes) holds nothing from now on (cpu: quiet NaNs)
    void (*poison)(Backend *be, int64_t dst, int64_t bytes);
    // runs nodes [from, to) of a part at block frame `frame`'s arena offsets
    // (plan_offsets); flags RUN_* (RUN_SKIP_HEAVY: matmul and attention
    // nodes are not run, their buffers already hold their values)
    void (*run)(Backend *be, PartKind part, int from, int to, int frame, int flags);
    float (*read_scalar)(Backend *be, int64_t src);
    void (*destroy)(Backend *be);
};

// The cpu backend: the arena is one host buffer of exactly p->arena_bytes,
// refused when that exceeds the target's device memory p->device_limit;
// copies are memcpy, nodes run through the plain kernels. Every arena byte
// starts as a quiet NaN. NULL with a message in err.
Backend *backend_cpu_create(const Plan *p, char *err, size_t errcap);

// Fills bytes at dst with the bytes of quiet-NaN floats (0x7fc00000), as
// if dst were 4-byte aligned. Shared by the arena and the host activation
// store.
void backend_fill_nan(void *dst, int64_t bytes);

#endif
