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

// What --freeze, --train and --lora ask (adapters.c).
typedef struct AdapterPattern {
    const char *pattern; // fnmatch's, on a parameter's DSL or checkpoint name
    int train;           // 1: --train (trained), 0: --freeze
} AdapterPattern;
typedef struct AdapterOptions {
    const AdapterPattern *patterns; // (npatterns) in command-line order
    int npatterns;
    int64_t lora_rank;        // 0: no LoRA
    double lora_alpha;        // the adapters' scale is lora_alpha / lora_rank
    const char *lora_targets; // module names, comma-separated (q_proj,v_proj)
} AdapterOptions;

typedef struct SemaOptions {
    int64_t batch, seq;      // overrides of the train section; 0 keeps it
    int compute;             // override of its dtype: 1 f32, 2 bf16; 0 keeps it
    AdapterOptions adapters; // applied after sema (adapters_apply)
} SemaOptions;

// Adds the LoRA adapters, freezing their base weights, then applies the
// patterns in order. After sema, before tile_rows and autodiff. Returns 0,
// or -1 after reporting (a target or pattern that names nothing, a target
// used other than as x @ transpose(W), nothing left to train).
int adapters_apply(Graph *g, const AdapterOptions *o, Arena *a, Diag *d);

// Checks the model and lowers it to the layer graph. Returns NULL after
// reporting at least one error through d.
Graph *sema_lower(const Model *m, const SemaOptions *opt, Arena *a, Diag *d);

#endif
