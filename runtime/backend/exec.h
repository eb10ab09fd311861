// exec.h: runs the nodes of one part of the graph on the CPU, one plain
// kernel per node (kernels.h). The caller binds the part's inputs and
// parameters to buffers; every other node gets a buffer of its own, except
// views and reshapes, which alias their operand.
#ifndef MT_EXEC_H
#define MT_EXEC_H

#include "common/graph.h"

typedef enum { PREC_F32, PREC_F64 } Precision;

typedef struct PartState {
    const Part *part;
    Precision prec;
    DType compute; // DT_BF16: the storage rule's rounding (common/storage.h) after each node, in PREC_F32
    void **val;    // (nodes.n) the buffer of each node
    void *owned;   // the one allocation behind computed nodes' buffers
    // A pooled load-balancing loss's sums across the layers (common/graph.h):
    // the caller points sums at the stream's and sets layer before each run
    // of a block part; left empty, such a loss computes NaN.
    LoadBalancePool pool;
    const int32_t *seg_start; // (B, T) the batch's document starts for its attention (kernels.h), or NULL;
                              // exec_init and exec_init_at clear it
} PartState;

// Seconds and calls per op, summed while exec_profile points at one (the
// benchmarks set it; NULL, the default, costs nothing).
typedef struct ExecProfile {
    double seconds[OP_COUNT];
    int64_t calls[OP_COUNT];
} ExecProfile;
extern ExecProfile *exec_profile;

// Bytes of one element of node n under prec: i32 tensors are int32_t.
size_t exec_elem_size(const Node *n, Precision prec);

// Allocates buffers for every computed node. Returns 0, or -1 out of memory.
int exec_init(PartState *ps, const Part *part, Precision prec);
// Binds every node to base + offsets[i] (the arena plan, one block frame's
// offsets); computed nodes write there; views and reshapes point into their
// operand's buffer from the start, so any range of nodes can run first.
// Returns 0, or -1 out of memory.
int exec_init_at(PartState *ps, const Part *part, Precision prec, char *base, const int64_t *offsets);
// Runs nodes [from, to). INPUT and PARAM nodes in that range must be bound.
void exec_run(PartState *ps, int from, int to);

// exec_run_flags flags. EXEC_SKIP_HEAVY: matmul, attention and moe nodes are not
// run; their buffers already hold their values (selective recomputation
// restored them). Equal to the plan's RUN_SKIP_HEAVY.
enum { EXEC_SKIP_HEAVY = 1 };
// Whether EXEC_SKIP_HEAVY skips node n.
int exec_is_heavy(const Node *n);
// exec_run with flags EXEC_*.
void exec_run_flags(PartState *ps, int from, int to, int flags);
void exec_free(PartState *ps);

#endif
