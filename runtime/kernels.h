// kernels.h: the plain C kernel of every graph op, forward and backward.
// One source (kernels.inc) is compiled twice: for float, the runtime's
// reference, and for double, the finite-difference gradient checks. These
// loops are the oracle the generated kernels are compared with.
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include "../common/graph.h"

// Computes node n into out from its operands' buffers in[0 .. n->nin);
// a load-balancing loss or its backward also reads in[n->nin], the stream's
// LoadBalancePool (common/graph.h; NULL or unused unless pooled).
// f32 tensors are float (or double) arrays, i32 tensors int32_t arrays, in
// row-major order. Not for OP_INPUT, OP_PARAM, OP_VIEW, OP_RESHAPE: those
// are bound or aliased by the executor.
void kernel_run_f32(const Node *n, void *out, void *const *in);
void kernel_run_f64(const Node *n, void *out, void *const *in);

// Document boundaries in packed rows (data.h, X.docs), for the causal
// attention forward and backward: query t of row b sees no key before
// kernel_attention_segments[b * T + t] (its document's first position in
// the row), besides the window and causality. NULL (the default): rows are
// one stream. Set by the training loop around each micro-batch; read by
// these kernels, the executor and the cpu backend's JIT, which runs its
// attention through them while it is set (jit.c). Not thread-safe: one
// batch at a time.
extern const int32_t *kernel_attention_segments; // (B, T) or NULL

#endif
