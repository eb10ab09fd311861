// compile.h: mtc's one compile path. The model's source is parsed, lowered
// (sema, row tiling), differentiated, fused once (the program kept in
// Graph.kernels for every stage after it), scheduled for a target and, on
// request, emitted (CUDA C through NVRTC for a GPU target, LLVM bitcode, the
// plan file). mtc, bench/step_bench.c and the test programs that need the
// pipeline call it; what they ask is one CompileRequest.
#ifndef MT_COMPILE_H
#define MT_COMPILE_H

#include "common/diag.h"
#include "common/graph.h"
#include "common/target.h"
#include "compiler/front/passes.h"
#include "compiler/schedule/schedule.h"

// How far compile goes.
typedef enum {
    COMPILE_GRAPH, // the differentiated, fused graph at req->tile (auto: untiled); nothing scheduled, no target
                   // asked (mtc --summary, --json)
    COMPILE_TILED, // the graph tiled as req->tile says; auto: the tiling whose best plan is fastest (the target's
                   // kernels checked first: cuda_check)
    COMPILE_PLAN,  // that, and its best plan in Compiled.best (mtc -o, --batch auto or max)
} CompileStage;

// What the caller asks of one compile.
typedef struct CompileRequest {
    CompileStage stage;
    const Target *target; // the machine the plan is for (unused at COMPILE_GRAPH)
    SemaOptions sema;     // batch, sequence and compute dtype over the train section's (0 keeps it)
    int64_t tile;         // the sequence in this many row chunks (mtc --tile); 0: auto, the fastest that fits
    int batch_search;     // 0: the batch sema says; 1: the batch of most predicted tokens a second (--batch
                          // auto); 2: the largest whose plan fits (--batch max); either implies COMPILE_PLAN
    SchedRequest sched;   // policy, remat, picks, slots, resident, checkpoints, ranks and shard (-1: auto, chosen
                          // by the scale-out model before the search)
} CompileRequest;

// What one compile made, in the caller's arena.
typedef struct Compiled {
    const Model *model;
    Graph *g;         // lowered, differentiated and fused (Graph.kernels), tiled as chosen
    Graph *untiled;   // the untiled graph at g's batch when compile lowered it (g itself when untiled), else NULL
    SchedResult best; // COMPILE_PLAN: g's best plan; its plan NULL when none could be built (why says why)
    char why[1024];   // why there is no plan
    int64_t batch;    // g's batch (the one chosen under batch_search)
} Compiled;

// The model in src through the stages req asks, for req->target. Returns 0, or 1 after reporting (through d, or on
// stderr). With COMPILE_PLAN, a plan that does not fit (or none at all) is not an error here: out->best says so.
int compile(const Source *src, const CompileRequest *req, Arena *a, Diag *d, Compiled *out);

// A parsed model through the same stages (mtc --explore: one compile a
// batch and policy). Returns 0, or 1 after reporting.
int compile_model(const Model *m, const CompileRequest *req, Arena *a, Diag *d, Compiled *out);

// Graph of model m under opt with its rows in `tile` chunks (1: untiled),
// differentiated and fused once into Graph.kernels, prepared for the
// scheduler; with t, checked against the kernels t runs (cuda_check). NULL
// after reporting.
Graph *compile_lower(const Model *m, const SemaOptions *opt, int64_t tile, const Target *t, Arena *a, Diag *d);

// The profile a plan of req is searched on: for a sharded plan, one rank's
// share of its node's host memory and NVMe tier (scaleout_rank_profile: the
// ranks of a node share them), in *share; else t.
const Target *compile_plan_target(const Target *t, const SchedRequest *req, Target *share);

// The untiled graph of c (c->g itself when untiled; lowered once, at c's
// batch, when compile did not). NULL after reporting.
Graph *compile_untiled(Compiled *c, const SemaOptions *opt, Arena *a, Diag *d);

// Writes c's best plan to path: it must fit req->target (the refusal names it,
// the policy and the remat mode of req); for a GPU target (arch sm_XX)
// the kernels compiled by NVRTC, then the LLVM bitcode, the kernel IR and
// the source, verified (plan_verify) before a byte is written. Nothing is
// left at path on failure. Returns 0, or 1 (reported).
int compile_emit(Compiled *c, const CompileRequest *req, const Source *src, const char *path, Arena *a);

// The CUDA C of g's fused kernels for arch, as NVRTC compiles it into plans,
// written to cu_path (mtc --emit-cuda). Returns 0, or 1 (reported).
int compile_emit_cuda(const Graph *g, const char *arch, const char *model_path, const char *cu_path);

#endif
