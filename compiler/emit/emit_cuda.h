// emit_cuda.h: the kernel IR (kir.h) to CUDA C, one translation unit per
// plan, compiled inside mtc by NVRTC (nvrtc.h).
//
// What the translation unit holds, in order: the prelude (compiler/emit/cuda/
// prelude.cuh), the flash attention templates (attention.cuh; with
// tensor-core variants also mma.cuh and attention_tc.cuh) and one
// instantiation per (template, head size, mask, options) the plan uses, then
// one `extern "C" __global__` function per expression kernel.
//
// Launch ABI of expression kernel i of part p (symbol kir_symbol(p, i),
// "mt_k1_3"):
//   parameters: one pointer per KirArg, in order, already at the node's
//     buffer plus the argument's offset; `const` when only read. Storage:
//     the argument's storage type in the kernel IR (the storage rule of
//     common/storage.h): int for KT_I32, bf16 for KT_BF16 (cuda_arg_bf16),
//     float for KT_F32. A KA_ACC64 argument's pointer is its double scratch
//     (zeroed by the caller); after the kernel the caller launches
//     SYMBOL_finish(float or bf16 *dst0, const double *scratch0, ...), one
//     pair per KA_ACC64 argument in order, which writes dst = scratch /
//     divisor (rounded to bf16 for a bf16 argument).
//     KA_ACC32 arguments are zeroed by the caller and accumulated atomically.
//   geometry: `extern "C" __constant__ int SYMBOL_launch[4]` = {grid,
//     block, dynamic shared bytes, finish grid (0: no finish kernel)},
//     readable with cuModuleGetGlobal; cuda_emit also returns it.
//   alignment: every node buffer starts 16-byte aligned (the plan's arena
//     offsets are multiples of 256); the emitter vectorises (float4, or 4
//     bf16) only accesses it can prove aligned from that.
// GEMMs emit nothing (cuBLASLt runs them; see CudaKernelInfo.epilogue);
// attention kernels use a flash template's entry points named by
// attn_variant_name_dv (common/attention.h): the tensor-core one
// (attention_tc.cuh) where attn_tc_ok (bf16 storage, head sizes 64, 128,
// 192 or 256, value heads of their own width among them), else the fp32 one
// (attention.cuh), the fallback (value heads as wide as the keys only);
// their ABI is written there. Window, scale and softcap are baked into the instantiation.
#ifndef MT_EMIT_CUDA_H
#define MT_EMIT_CUDA_H

#include <stddef.h>

#include "common/graph.h"
#include "common/kir.h"
#include "compiler/emit/nvrtc.h"

typedef struct CudaOptions {
    const char *arch;       // "sm_90"
    const char *model_path; // for messages: "examples/gpt2.mt"
    int with_reference;     // also the plain attention reference kernels (tests/gpu)
    int exact_f64;          // 1: keep the kernel IR's f64 arithmetic in double; 0 (plans): fp32
                            // arithmetic throughout, f64 scratch of KA_ACC64 arguments excepted
    // Test hook: 1-based index, in emission order, of the expression kernel
    // whose first statement is followed by a line that does not compile
    // (inject_warning: by an unused variable, which NVRTC only warns about).
    int inject_error, inject_warning;
} CudaOptions;

// cuBLASLt epilogue that would replace a GEMM's epilogue expression kernel.
typedef enum { CUDA_EPI_NONE, CUDA_EPI_BIAS, CUDA_EPI_GELU_BIAS, CUDA_EPI_COUNT } CudaEpilogue;
const char *cuda_epilogue_name(CudaEpilogue e); // "CUBLASLT_EPILOGUE_BIAS"

// What the runtime needs to launch each kernel of the set.
typedef struct CudaKernelInfo {
    int part, index;       // kernel `index` of part `part`
    int kind;              // KirKind
    char symbol[64];       // expression kernels: kir_symbol; attention: the entry's NAME suffix
                           // (attn_variant_name: "bf16_d128_causal_w4096"); GEMM: ""
    int attn_tc;           // attention: 1 runs attention_tc.cuh's mt_attn_tc_{fwd,bwd_dq,bwd_dkdv}_NAME
                           // (geometry ATTN_TC_*, attn_tc_smem_*), 0 attention.cuh's mt_attn_*_NAME
    int grid, block, smem; // expression kernels
    int finish_grid;       // 0: no SYMBOL_finish
    int vectorised;        // column loops that read and write four elements at a time
    CudaEpilogue epilogue; // GEMM: the cuBLASLt epilogue that covers its expression kernel, if any
} CudaKernelInfo;

typedef struct CudaSource {
    char *text; // (len) NUL-terminated, malloc'd
    size_t len;
    const char **origin; // (nlines) per line, NULL or "kernel mt_k1_3: op rmsnorm at m.mt:4:9", malloc'd
    int nlines;
    CudaKernelInfo *info; // (ninfo) one per emitted or recorded kernel, malloc'd
    int ninfo;
    int nexpr, nattn; // expression kernels emitted, attention instantiations
    char **strings;   // (nstrings) what origin points into, malloc'd
    int nstrings;
} CudaSource;

// Whether the kernel sees argument a as bf16: a KT_BF16 argument, except a
// KA_ACC64 accumulator, whose pointer is its f64 scratch.
int cuda_arg_bf16(const KirArg *a);

// Whether opt->arch runs every kernel of prog: mt has a CUDA attention
// kernel for each head size it uses (the fp32 template takes one head width,
// the tensor-core one bf16 heads of 64, 128, 192 or 256) within the arch's
// shared memory. What cuda_emit refuses, without generating anything: 0, or
// -1 with a located message in err. The compile path (compiler/compile.c)
// asks it before it schedules for a GPU target, so that --explain, --explore
// and -o refuse such a model alike.
int cuda_check(const KirProgram *prog, const Graph *g, const CudaOptions *opt, char *err, size_t errcap);

// Emits every kernel of prog into one translation unit. g names the ops for
// the origin of each line. Returns 0, or -1 with a message in err (a head
// size whose attention kernels do not fit the arch's shared memory, out of
// memory). Free with cuda_source_free.
int cuda_emit(const KirProgram *prog, const Graph *g, const CudaOptions *opt, CudaSource *out, char *err,
              size_t errcap);
void cuda_source_free(CudaSource *s);

// cuda_emit, then nvrtc_compile for opt->arch: the plan's cubin and PTX.
// src may be NULL; otherwise it receives the source (free it). Returns 0,
// or -1 with every NVRTC diagnostic, its generated line and its op, in err.
int cuda_build(const KirProgram *prog, const Graph *g, const CudaOptions *opt, CudaBinary *out, CudaSource *src,
               char *err, size_t errcap);

#endif
