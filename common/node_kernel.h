// node_kernel.h: what the cpu backend (runtime/backend/jit.c) hands the node
// kernels the LLVM emitter writes (compiler/emit/emit_llvm_node.c): the GEMM they
// call and the size of their workspace.
#ifndef MT_NODE_KERNEL_H
#define MT_NODE_KERNEL_H

#include <stdint.h>

#include "common/graph.h"

// The generated node kernels (KK_NODE: the mixture-of-experts ops,
// add_loss; compiler/emit/emit_llvm_node.c) have the expression kernels' ABI
// (compiler/emit/emit_llvm.h), void mt_k<p>_<i>(void **args, int64_t r0,
// int64_t r1, double *scratch), with args[0] the node's output, args[1 ..] its
// operands, all f32 (the JIT widens bf16 ones), args[nargs] a NodeSgemm,
// the library GEMM the JIT's GEMM kernels call, args[nargs + 1] the
// stream's LoadBalancePool (common/graph.h; a pooled load-balancing loss's
// sums across the layers, its layer set per run); scratch points at
// node_kernel_work_bytes(node) bytes of workspace; rows r0, r1 unused.
//
// C (M, N) = op(A) op(B) + beta C, row-major, op transposing when ta or tb.
typedef void NodeSgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                       int64_t ldb, float beta, float *C, int64_t ldc);

// The workspace of node kernel n, bytes: moe the gathered rows' indices
// (i64 [rows]) and x, h1, h3, a, o (floats [rows, 2 C + 3 F]), moe_bwd also
// their gradients (as many floats again); load_balance and its backward
// f, P (f64 [2 E]) and the softmax (floats [rows, E]).
static inline int64_t node_kernel_work_bytes(const Node *n) {
    int bwd = n->op == OP_MOE_BWD || n->op == OP_LOAD_BALANCE_BWD;
    const Shape *x = n->nin > bwd ? &n->in[bwd]->shape : &n->shape;
    int64_t last = x->dims[x->rank - 1], rows = shape_numel(x) / last;
    if (n->op == OP_MOE || n->op == OP_MOE_BWD) {
        int64_t F = moe_expert_width(n);
        return 8 * rows + 4 * rows * (2 * last + 3 * F) * (bwd ? 2 : 1);
    }
    if (n->op == OP_LOAD_BALANCE || n->op == OP_LOAD_BALANCE_BWD) return 16 * last + 4 * rows * last;
    return 0;
}

#endif
