// emit_llvm.h: the kernel IR (kir.h) to LLVM IR through the LLVM C API,
// stored in the plan as bitcode; the cpu backend JIT-compiles it for the
// host at load (runtime/backend/jit.c).
//
// Each expression kernel i of part p becomes one function with a fixed C ABI:
//
//   void mt_k<p>_<i>(void **args, int64_t r0, int64_t r1, double *scratch);
//
// args[j] is argument j's first element (its node's buffer plus its
// offset); the function computes rows [r0, r1); KA_ACC64 accumulators add
// into scratch at kir_acc64_offset. The caller zeroes accumulators before
// the first row block and, for KA_ACC64, writes the scratch out after the
// last (jit.c). The module is target-independent; the JIT sets the host's
// triple, CPU and features and runs the O3 pipeline, whose loop vectoriser
// vectorises the column loops.
#ifndef MT_EMIT_LLVM_H
#define MT_EMIT_LLVM_H

#include <stddef.h>
#include <stdint.h>

#include "common/kir.h"

// Node kernels (KK_NODE: the mixture-of-experts ops, add_loss) have the
// same ABI, with the arguments common/node_kernel.h describes
// (emit_llvm_node.c).

// Emits every expression and node kernel of prog, verifies the module and writes it
// as bitcode into *out (malloc'd, *len bytes). Returns 0, or -1 with a
// message naming the kernel and the graph op it came from in err.
int emit_llvm(const KirProgram *prog, const Graph *g, uint8_t **out, size_t *len, char *err, size_t errcap);

#endif
