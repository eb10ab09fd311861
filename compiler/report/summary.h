// summary.h: `mtc --summary` and `--json`: parameter counts per part, per
// block and in total, every parameter under its checkpoint name, and the host
// memory the model needs.
#ifndef MT_SUMMARY_H
#define MT_SUMMARY_H

#include <stdio.h>

#include "common/graph.h"

typedef struct Summary {
    int64_t head, tail, per_layer, blocks, total;              // parameter counts; per_layer: the largest block kind's
    int64_t per_kind[MT_MAX_KINDS], kind_layers[MT_MAX_KINDS]; // each block kind's parameters a layer, and layers
    int64_t tied;                                              // elements of global params used by head and tail both
    int64_t buffers;         // elements of the buffers (Param.buffer), every layer's, counted apart from the parameters
    int grads_bf16;          // the layers' gradients bf16 in the host store (common/storage.h, storage_grads_bf16)
    int64_t bytes_per_param; // host bytes a layer parameter
    int64_t global_bytes_per_param; // a global one (fp32 gradients always)
    int64_t host_bytes;
} Summary;

// ranks: of the data-parallel run the plan is for (mtc --ranks; 1: one process).
void summary_compute(const Graph *g, int ranks, Summary *s);
void summary_print(FILE *out, const Graph *g, int ranks, const char *path);
// Writes one JSON object; a is scratch space for checkpoint names.
void summary_print_json(FILE *out, const Graph *g, int ranks, const char *path, Arena *a);

#endif
