// jit.h: the cpu backend's kernels. Reads the plan's kernel IR and LLVM
// bitcode (common/kir.h, compiler/emit/emit_llvm.c), compiles the bitcode for
// the host CPU and its features with ORC LLJIT at load (O3: the loop
// vectoriser), and runs a part's kernels for an INS_RUN: expression kernels
// through the JIT, GEMMs through cblas (OpenBLAS), attention as a composite
// of per-(batch, head) GEMMs and generated softmax kernels, node kernels
// (KK_NODE, mixture of experts) through the JIT too, their GEMMs through the
// same cblas call (compiler/emit/emit_llvm_node.c; kernels.h's are their reference).
#ifndef MT_JIT_H
#define MT_JIT_H

#include <stddef.h>
#include <stdint.h>

#include "common/kir.h"

typedef struct Jit Jit;

// Seconds spent in library GEMMs (attention's included) and in generated
// kernels, summed while jit_profile points at one (bench/step_bench.c sets
// it; NULL, the default, costs nothing). With kernel_s_of[part] given, also
// each launched kernel's whole time (operands widened and rounded,
// epilogue, attention's helpers included) at its index in the part's set.
typedef struct JitProfile {
    double gemm_s, kernel_s, attn_s; // attn_s: whole attention kernels, their GEMMs included
    int64_t gemm_calls, kernel_calls;
    double *kernel_s_of[PART_COUNT]; // (prog.parts[p].n) each, optional
} JitProfile;
extern JitProfile *jit_profile;

// Validates the kernel IR against the graph (every argument inside its
// node's buffer) and JIT-compiles the bitcode. NULL with a message in err.
Jit *jit_create(const Graph *g, const uint8_t *kir, size_t kir_len, const uint8_t *bitcode, size_t bitcode_len,
                char *err, size_t errcap);

// Runs the kernels of part whose anchor lies in [from, to), in order, with
// node i's buffer at base + offsets[i]. flags: RUN_SKIP_HEAVY skips GEMMs
// and attention (their outputs are kept) but still runs GEMM epilogues.
void jit_run(Jit *j, int part, int from, int to, int flags, char *base, const int64_t *offsets);

// The document starts (B, T) of the batch the next runs see (kernels.h:
// seg_start), or NULL: rows are one stream. Attention with documents runs
// the plain kernel, which masks them.
void jit_set_doc_starts(Jit *j, const int32_t *seg_start);

// What a bf16 plan's GEMM, attention and node kernels do around their f32
// work (mtrun --calibrate times them): dst (n) = the floats bf16 src (n)
// holds; dst (n) = src (n) rounded to bf16.
void jit_widen(float *dst, const uint16_t *src, int64_t n);
void jit_narrow(uint16_t *dst, const float *src, int64_t n);

// Runs kernel `index` of part by itself (tests).
void jit_run_kernel(Jit *j, int part, int index, int flags, char *base, const int64_t *offsets);

// The stream's sums of a pooled load-balancing loss (common/graph.h), which
// its node kernels read and write: the caller keeps it and sets its layer
// before each run of a block part.
void jit_set_pool(Jit *j, const LoadBalancePool *pool);

// The kernels read from the plan.
const KirProgram *jit_program(const Jit *j);

void jit_destroy(Jit *j);

#endif
