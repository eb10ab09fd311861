// store.h: the host store, the authoritative copy of every parameter and
// optimizer state. Floats, laid out as the plan's HOST section says: the
// global segment, then one contiguous segment per layer.
#ifndef MT_STORE_H
#define MT_STORE_H

#include <stdint.h>

#include "../common/plan.h"

typedef struct HostStore {
    int64_t n;   // floats in each array: host_global + layers * host_layer
    float *w;    // (n) fp32 master weights; with f32 compute, also what streams to the device
    float *m;    // (n) Adam first moments
    float *v;    // (n) Adam second moments
    float *g;    // (n) gradient accumulators
} HostStore;

// Bytes the store needs for a plan (what --summary calls host memory, plus
// alignment padding).
int64_t store_bytes(const Plan *p);
// Allocates and zeroes the arrays. Returns 0, or -1 out of memory.
int store_alloc(HostStore *s, const Plan *p);
void store_free(HostStore *s);

// The first float of parameter `param` of layer `layer` (ignored for globals).
int64_t store_offset(const Plan *p, int param, int64_t layer);

// Initialises the master weights from seed as each parameter's init says.
// Each element's value depends only on (seed, parameter, layer, index), not
// on the order of initialisation or the layout.
void store_init(HostStore *s, const Plan *p, uint64_t seed);

#endif
