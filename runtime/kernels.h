// kernels.h: the plain C kernel of every graph op, forward and backward.
// One source (kernels.inc) is compiled twice: for float, the runtime's
// reference, and for double, the finite-difference gradient checks. These
// loops are the oracle the generated kernels are compared with.
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include "../common/graph.h"

// Computes node n into out from its operands' buffers in[0 .. n->nin).
// f32 tensors are float (or double) arrays, i32 tensors int32_t arrays, in
// row-major order. Not for OP_INPUT, OP_PARAM, OP_VIEW, OP_RESHAPE: those
// are bound or aliased by the executor.
void kernel_run_f32(const Node *n, void *out, void *const *in);
void kernel_run_f64(const Node *n, void *out, void *const *in);

#endif
