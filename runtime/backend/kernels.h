// kernels.h: the plain C kernel of every graph op, forward and backward.
// One source (kernels.inc) is compiled twice: for float, the runtime's
// reference, and for double, the finite-difference gradient checks. These
// loops are the oracle the generated kernels are compared with.
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include "common/graph.h"

// Computes node n into out from its operands' buffers in[0 .. n->nin);
// a load-balancing loss or its backward also reads in[n->nin], the stream's
// LoadBalancePool (common/graph.h; NULL or unused unless pooled).
// f32 tensors are float (or double) arrays, i32 tensors int32_t arrays, in
// row-major order. Not for OP_INPUT, OP_PARAM, OP_VIEW, OP_RESHAPE: those
// are bound or aliased by the executor.
void kernel_run_f32(const Node *n, void *out, void *const *in);
void kernel_run_f64(const Node *n, void *out, void *const *in);

// Document boundaries in packed rows (data.h, X.docs), the attention
// forward's and backward's argument seg_start (B, T): for query position t
// of row b, the position of the first token of its document; key j is
// visible to query t only when j >= seg_start[b * T + t], besides the window
// and causality. NULL: rows are one stream. The cuda kernels take the same
// argument (compiler/emit/cuda/attention.cuh). kernel_run_f32 (f64) is
// kernel_run_doc_starts_f32 (f64) with NULL; conv1d and the recurrences
// (common/scan.h) read it too (their state restarts at a document's start);
// other ops ignore it.
void kernel_run_doc_starts_f32(const Node *n, void *out, void *const *in, const int32_t *seg_start);
void kernel_run_doc_starts_f64(const Node *n, void *out, void *const *in, const int32_t *seg_start);

// An attention node's output y and its softmax statistics lse (the
// OP_ATTENTION_LSE it reads, f32 [B, H, T]) in one pass, from in = the
// attention node's operands q, k, v, (lse, unread), [sinks]: what one
// attention kernel computes. kernel_run_* computes each node alone.
void kernel_attention_doc_starts_f32(const Node *n, void *y, void *lse, void *const *in, const int32_t *seg_start);
void kernel_attention_doc_starts_f64(const Node *n, void *y, void *lse, void *const *in, const int32_t *seg_start);

#endif
