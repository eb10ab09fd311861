// passes.h: mtc's passes that make and transform the layer graph
// (common/graph.h): sema lowers the DSL's AST to it (sema.c, ops.c), row
// tiling rewrites it for long sequences (tile.c), autodiff appends the
// backward (autodiff.c).
#ifndef MT_PASSES_H
#define MT_PASSES_H

#include "common/graph.h"
#include "dsl/ast.h"

// Rewrites the row-local end of the block and the tail into `chunks` copies
// over T/chunks positions each, before autodiff (tile.c). chunks <= 1: no
// change. Returns 0, or -1 after reporting.
int tile_rows(Graph *g, int64_t chunks, Arena *a, Diag *d);

// Appends the backward of every part by per-op rules (autodiff.c).
// Returns 0, or -1 after reporting what it cannot differentiate.
int autodiff(Graph *g, Arena *a, Diag *d);

typedef struct SemaOptions {
    int64_t batch, seq; // overrides of the train section; 0 keeps it
    int compute;        // override of its dtype: 1 f32, 2 bf16; 0 keeps it
} SemaOptions;

// Checks the model and lowers it to the layer graph. Returns NULL after
// reporting at least one error through d.
Graph *sema_lower(const Model *m, const SemaOptions *opt, Arena *a, Diag *d);

#endif
