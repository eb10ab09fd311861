// fuse.h: the fusion pass. Groups each part's nodes into kernels of the
// kernel IR (kir.h): GEMMs stay library calls, attention stays one kernel,
// and chains of elementwise ops and row reductions become one expression
// kernel each; an expression kernel that only needs the rows a GEMM has just
// written runs as that GEMM's epilogue, row block by row block.
//
// Rules: a node is internal to a kernel (never written to memory) only when
// every consumer is in the same kernel and nothing outside the part reads it
// (the part's output, gradients); forward nodes (ids < nfwd) never share a
// kernel with backward ones; views and reshapes are free aliases; a kernel
// runs when an INS_RUN covers its anchor (its last node), and reads and
// writes its arguments while it runs, so its operands must stay live from
// its `first` node to its anchor.
#ifndef MT_FUSE_H
#define MT_FUSE_H

#include <stdio.h>

#include "common/graph.h"
#include "common/kir.h"

// Builds the kernels of every part into prog, allocated in a. Returns 0, or
// -1 with a message naming the node it could not lower in err. One compile
// fuses each graph it lowers once (compiler/compile.c keeps the program in
// Graph.kernels for the stages after it); fuse_runs counts the calls in this
// process, for the test that checks it (tests/test_compile.c).
int fuse(const Graph *g, Arena *a, KirProgram *prog, char *err, size_t errcap);
long fuse_runs(void);

// Node lifetimes for an arena layout, as the fused kernels need them: a
// kernel reads its arguments and writes its results while it runs, which is
// at its anchor, and its results may be written from its first node on.
// Node i is computed by a kernel that runs at node kanchor[i] (reading its
// operands there) and may write from node kfirst[i] on; nodes no kernel
// computes get i, i. s: the part's kernels, as fuse made them (the spans do
// not depend on the storage dtype).
void fuse_spans(const Part *part, const KirSet *s, int *kfirst, int *kanchor);

// What --dump-kernels counts, per part and direction (0 forward, 1 backward).
// An op is a node that computes: not an input, parameter, view, reshape,
// constant or arange. GEMM ops are matmuls; attention counts as a non-GEMM
// op. A non-GEMM kernel is a launched expression or attention kernel; an
// expression kernel run as a GEMM's epilogue is part of that GEMM kernel.
typedef struct FuseCount {
    int ops, gemm_ops, kernels, gemm_kernels, epilogues;
} FuseCount;
FuseCount fuse_count(const Part *part, const KirSet *set, int backward);

// Prints each part's kernels, forward and backward separately, what each
// fused, and a count line per part and direction (mtc --dump-kernels);
// verbose adds every kernel's statements.
void fuse_dump(FILE *out, const Graph *g, const KirProgram *prog, int verbose);

#endif
