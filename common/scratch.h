// scratch.h: the device scratch a plan's kernels need beside the arena, the
// one definition mtc's scheduler (compiler/schedule/schedule.c: fits, every device
// figure, the plan's scratch_bytes) and the cuda backend
// (runtime/backend/backend_cuda.c: what it allocates and checks) both use.
//
// Each engine that runs kernels (a RUN instruction's engine, and always the
// compute engine) gets one scratch region of the plan's scratch_bytes, the
// most any one kernel of the plan needs:
//   expression kernels   f64 accumulators of their KA_ACC64 arguments
//                        (8 x kir_acc64_offset(k, nargs))
//   attention backward   the flash templates' lse and delta
//                        (attn_workspace_bytes(B, T, H), common/attention.h)
//   moe, moe_bwd         a chunk of rows' routed slots (moe_scratch_bytes of
//                        moe_chunk_rows: compiler/emit/cuda/moe.cuh, at most about
//                        MOE_CHUNK_BYTES whatever the batch)
//   load_balance_bwd     E doubles
//   GEMMs                cuBLASLt's workspace (gemm_workspace_bytes): every
//                        cublasLtMatmul gets the engine's region, and each
//                        GEMM's algorithm is picked once, at load, for it
// rounded up to 256 bytes, at least 256. The cpu backend keeps its scratch in
// host memory: plans for a cpu target record none.
#ifndef MT_SCRATCH_H
#define MT_SCRATCH_H

#include <stdint.h>

#include "common/graph.h"
#include "common/kir.h"
#include "common/plan.h"

// A moe node's geometry: rows of x [rows, C], E experts of width F, K selected a row.
typedef struct MoeDims {
    long long rows;
    int C, E, F, K;
    int bf16;           // x and the experts' weights stored in bf16 (the pipelined path's scratch when C, F allow it)
    float alpha, limit; // the clamped SwiGLU (the node's scale, softcap); alpha 0: SwiGLU
    int form;           // the node's moe_form (common/graph.h): how its weights are stored, where the gates apply
} MoeDims;

// Whether a node runs compiler/emit/cuda/moe.cuh's pipelined tensor-core path:
// bf16 operands, C and F multiples of 8 (its 16-byte cp.async loads), each
// weight its own [E, out, in] (the path's loads read a weight's rows) and
// the gates on the experts' outputs, SwiGLU (moe_form 0: no act = gelu, gelu_tanh).
static inline int moe_pipelined(MoeDims d) { return d.bf16 && d.C % 8 == 0 && d.F % 8 == 0 && !d.form; }

// At most this much scratch for a node's chunk (bytes); fewer rows a chunk when more would be needed.
#define MOE_CHUNK_BYTES (1LL << 30)

// The scratch of a chunk of nr rows, bytes: floats [S, F + C] (forward) or
// [S, 2 F + C] (backward), S = nr K routed slots, the pipelined path's
// backward bf16 [S, 3 F + C] more, then the route's ints [3 E + 2 + 2 S]
// (compiler/emit/cuda/moe.cuh).
static inline long long moe_floats(MoeDims d, int bwd, long long nr) {
    long long per_slot = (bwd ? 2LL : 1LL) * d.F + d.C + (bwd && moe_pipelined(d) ? (3LL * d.F + d.C) / 2 : 0);
    return (nr * d.K * per_slot + 63) / 64 * 64;
}
static inline long long moe_scratch_bytes(MoeDims d, int bwd, long long nr) {
    return 4 * moe_floats(d, bwd, nr) + 4 * (3LL * d.E + 2 + 2 * nr * d.K);
}

// The rows a chunk holds: all of them when their scratch fits `budget`, else as many as fit (at least one).
static inline long long moe_chunk_rows(MoeDims d, int bwd, long long budget) {
    long long per_row = moe_scratch_bytes(d, bwd, 1) - moe_scratch_bytes(d, bwd, 0) + 4, n = budget / per_row;
    return n >= d.rows ? d.rows : n < 1 ? 1 : n;
}

// Moe or moe_bwd node n's geometry in graph g; K the most experts a row
// runs, from the router that limits its gates wherever it is in the graph
// (graph_routed_experts, which compiler/schedule/cost.c prices by), else
// all E. A row
// with more gates != 0 than K gets NaN outputs (compiler/emit/cuda/moe.cuh).
MoeDims moe_node_dims(const Graph *g, const Node *n);

// cuBLASLt's workspace for a GEMM, the most its algorithm may use: NVIDIA's
// recommendation for Hopper, 32 MiB (cuBLAS library guide,
// cublasSetWorkspace; 4 MiB before Hopper), or, for a GEMM whose output in
// fp32 is smaller, that much (room for a split-K's fp32 partial output),
// at least 256 bytes, so that a small model's plan does not grow by 32 MiB.
// Whether small GEMMs would pick faster algorithms with more is not measured.
#define GEMM_WORKSPACE_BYTES (32LL << 20)
static inline int64_t gemm_workspace_bytes(const KirGemm *g) {
    int64_t out = 4 * g->M * g->N * (g->batch > 1 ? g->batch : 1);
    return out > GEMM_WORKSPACE_BYTES ? GEMM_WORKSPACE_BYTES : out < 256 ? 256 : out;
}

// The device scratch bytes kernel k of part `part` needs (0: none).
int64_t kernel_scratch_bytes(const KirKernel *k, const Graph *g, int part);

// The scratch of each kernel-running engine for program prog of graph g:
// the most any kernel needs, rounded up to 256, at least 256.
int64_t program_scratch_bytes(const KirProgram *prog, const Graph *g);

// The engines of plan p that get a scratch region: those its RUN
// instructions are on, and the compute engine always.
int plan_scratch_engines(const Plan *p);

// A GPU plan's (scratch_bytes > 0) device copy of a micro-batch's document
// starts (B, T) int32s, which every attention kernel takes (seg_start;
// data.h, X.docs), rounded up to 256; 0 for a cpu target, whose backend
// reads them in host memory.
int64_t plan_doc_starts_bytes(const Plan *p);

// The device store of the segments whose optimizer the plan places on the
// device (Plan.opt_device), after everything else of plan_device_bytes: for
// each placed segment in segment order (SEG_TAIL, SEG_HEAD, layer 0, ...),
// of its n elements (plan_segment_len), five arrays each rounded up to 256
// bytes: w, m, v, g (n) fp32 (the master, the moments, the gradient
// accumulators), then with bf16 compute wb (n) bf16, the copy that streams.
// plan_opt_device_bytes: all of it (0: nothing placed); plan_opt_device_at:
// segment seg's region, in bytes from the device store's start (-1: on the
// host); plan_opt_device_array: array k's (0 w, 1 m, 2 v, 3 g, 4 wb) bytes
// from the start of a segment of n elements' region.
int64_t plan_opt_device_bytes(const Plan *p);
int64_t plan_opt_device_at(const Plan *p, int64_t seg);
int64_t plan_opt_device_array(int64_t n, int array);
// The bytes of one segment of n elements on the device, compute dtype compute.
int64_t plan_opt_device_segment_bytes(int64_t n, DType compute);

// All the device memory plan p needs: its arena, rounded up to 256, then
// each kernel-running engine's p->scratch_bytes, then the document starts
// (plan_doc_starts_bytes), then the optimizer's device store
// (plan_opt_device_bytes). The cuda backend allocates exactly this, once; what
// NCCL takes for its own buffers it counts against the card at run time
// (runtime/backend/backend_cuda.c: it depends on NCCL's version, topology and
// environment, which the plan cannot know).
int64_t plan_device_bytes(const Plan *p);

#endif
