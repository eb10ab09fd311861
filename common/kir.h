// kir.h: the kernel IR. The fusion pass (fuse.c) turns each part of the
// graph into an ordered list of kernels; the LLVM emitter (emit_llvm.c) and
// the CUDA emitter (emit_cuda.c) generate code from the same list, and the
// plan stores it (kir_write / kir_read) so that the runtime knows what each
// kernel reads and writes.
//
// Kinds of kernel:
//   KK_EXPR   a fused expression kernel: a loop over `rows`; in each row,
//             row-level statements and column loops (loop k runs
//             cols[k-1] columns) of SSA statements. Per-row reductions
//             (KOP_RSUM, KOP_RMAX) give a row-level value once their loop
//             is done; stores write one element; KOP_ACC adds into an
//             output that the caller zeroes first (column sums, scatter-add,
//             the mean loss).
//   KK_GEMM   a library call: C = op(A) @ op(B), row-major, `batch` times;
//             optionally followed, row block by row block, by an epilogue
//             expression kernel that reads C only at the rows it computes
//             (`epilogue`, -1: none; batch is then 1 and the epilogue has
//             M rows). The pair runs at the epilogue's anchor. On a GPU an
//             epilogue that no cuBLASLt epilogue expresses is a second launch.
//             A selective-recompute run (RUN_SKIP_HEAVY) skips the GEMM but
//             still runs its epilogue over all rows.
//   KK_ATTN, KK_ATTN_BWD
//             attention forward (of two graph nodes: the OP_ATTENTION_LSE and
//             the OP_ATTENTION that reads it) / backward: causal or not,
//             grouped-query. On the GPU a flash template; on the cpu a
//             composite of library GEMMs per (batch, head) and the helper
//             expression kernels `helper[]` (softmax, softmax backward) over
//             T x T scratch.
//   KK_NODE   one graph node of an op with no expression form (mixture of
//             experts: top_k, moe and its backward, the load-balancing loss,
//             add_loss), its code written per op from the node's sizes: on
//             the cpu the LLVM functions of compiler/emit/emit_llvm_node.c (the
//             plain kernels' loops, moe's expert GEMMs through the JIT's
//             library GEMM), on the GPU the kernels of compiler/emit/cuda/moe.cuh;
//             runtime/backend/kernels.inc's plain kernels are their reference.
//             Arguments: the node's output, then its operands in order, whole
//             (a bf16 one widened to f32 around the call on the cpu).
//
// Arguments are graph nodes of the kernel's part, resolved to addresses at
// call time (the same kernel runs for every layer, at different arena
// offsets): base of node `node` plus `offset` elements. Scratch arguments
// (node -1) are the runtime's, for helper kernels only.
//
// Every value has a type. Statement operands are indices of earlier
// statements of the same kernel. KOP_LOAD/KOP_STORE/KOP_ACC index their
// argument in elements with an i64 statement; the index must lie in
// [0, arg.numel) (the emitters may assume it; kir_read cannot prove it, and
// the cpu JIT clamps nothing, so fuse.c builds only in-range indices).
#ifndef MT_KIR_H
#define MT_KIR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/arena.h"
#include "common/graph.h"

// Value types of statements; KT_BF16 is a storage type only (of arguments,
// by the storage rule of common/storage.h): a load of a bf16 argument gives
// its exact f32 value, a store of an f32 value into one rounds to nearest even.
typedef enum { KT_F32, KT_F64, KT_I32, KT_I64, KT_BOOL, KT_BF16, KT_COUNT } KirType;

typedef enum {
    // leaves
    KOP_CONST, // value, of the statement's type
    KOP_ROW,   // i64: the row being computed
    KOP_COL,   // i64: the column of the enclosing column loop
    KOP_LOAD,  // arg[a] at element index b (i64); type f32 or i32, the argument's value type (kir_value_type)
    // unary, operand a, same type unless said
    KOP_NEG,
    KOP_EXP,   // floats
    KOP_LOG,   // floats
    KOP_SQRT,  // floats
    KOP_SIN,   // floats
    KOP_COS,   // floats
    KOP_CVT,   // a converted to this statement's type (floats round to nearest, ints to floats exactly)
    KOP_RBF16, // f32: a rounded to the nearest bf16 value, to nearest even (the storage rule's rounding)
    // binary, operands a and b of one type, result that type unless said
    KOP_ADD,
    KOP_SUB,
    KOP_MUL,
    KOP_DIV, // ints: truncating, b > 0 always
    KOP_REM, // ints only, b > 0 always
    KOP_MIN,
    KOP_MAX,
    KOP_POW,    // floats
    KOP_LT,     // -> bool
    KOP_LE,     // -> bool
    KOP_EQ,     // -> bool
    KOP_SELECT, // a (bool) ? b : c
    // reductions: a is an element value of the same column loop; the
    // statement is the row's total, usable only after its loop
    KOP_RSUM,
    KOP_RMAX,
    // effects; no value
    KOP_STORE, // arg[a][b] = c
    KOP_ACC,   // arg[a][b] += c, where arg.acc says how
    KOP_COUNT
} KirOp;

typedef enum { KK_EXPR, KK_GEMM, KK_ATTN, KK_ATTN_BWD, KK_NODE, KK_COUNT } KirKind;

typedef enum {
    KA_READ = 1,      // loaded
    KA_WRITE = 2,     // stored
    KA_ACC32 = 4,     // accumulated in place in f32; the caller zeroes it before the kernel
    KA_ACC64 = 8,     // accumulated in an f64 scratch the caller zeroes; at the end the
                      // caller writes arg[i] = (float)(scratch[i] / divisor)
    KA_ROWLOCAL = 16, // every access of row r lies in [r * row_stride, (r + 1) * row_stride):
                      // the kernel may run in row blocks right after what writes it
} KirAccess;

typedef struct KirArg {
    int32_t node;       // graph node of the kernel's part; -1: runtime scratch (helpers only)
    uint8_t dtype;      // KT_F32, KT_BF16 or KT_I32: how the node's buffer stores it
    uint8_t access;     // KirAccess bits
    int64_t offset;     // elements from the node's buffer start (a view into a packed buffer)
    int64_t numel;      // elements addressable from there
    int64_t row_stride; // KA_ROWLOCAL: elements per row
    double divisor;     // KA_ACC64
} KirArg;

typedef struct KirStmt {
    uint8_t op;      // KirOp
    uint8_t type;    // KirType of the value (KT_BOOL for effects, ignored)
    uint16_t loop;   // 0: row level; k >= 1: inside column loop k
    int32_t a, b, c; // operand statements; for LOAD, STORE, ACC `a` is an argument index
    int32_t node;    // the graph node this lowers, for messages
    double value;    // KOP_CONST
} KirStmt;

typedef struct KirGemm {
    int32_t ta, tb; // transposes of A and B
    int64_t M, N, K, batch;
    int64_t lda, ldb, ldc;                // leading dimensions, row-major
    int64_t stride_a, stride_b, stride_c; // elements between batches (stride_b 0: one B for all)
    int32_t epilogue;                     // index of an expression kernel in the set, run on each row block; -1: none
} KirGemm;

// Rows of C the cpu backend computes per BLAS call when a GEMM has an
// epilogue (which then runs on those rows while they are in cache): about
// 1 MB of f32 C, at least 256 rows. The cost model counts the calls alike.
static inline int64_t kir_gemm_row_block(int64_t N) {
    int64_t block = ((int64_t)1 << 18) / N;
    return block < 256 ? 256 : block;
}

// The cpu backend's BLAS calls of fewer multiply-adds than this run on one
// OpenBLAS thread, the others on all of them (runtime/backend/blas_core.c, which
// says why); the cost model prices the one-thread calls at the profile's
// gemm_one_thread_flops.
#define MT_BLAS_THREADED_MACS (1ll << 25)

typedef struct KirAttn {
    int64_t B, T, H, KVH, D; // q [B, T, H*D], k [B, T, KVH*D], v [B, T, KVH*Dv], y [B, T, H*Dv]
    int64_t Dv;              // the value heads' width (DeepSeek's latent attention: 128 under q/k's 192)
    int32_t causal;
    int64_t window;    // query t sees keys t - window < j <= t; 0: every key to t (causal) or all
    double scale;      // scores q.k * scale (the graph's default, 1/sqrt(D), resolved)
    double softcap;    // scores then softcap * tanh(score / softcap); 0: not capped
    int32_t helper[2]; // cpu composite: expression kernels of T rows over scratch: [0] the
                       // softmax of scaled, capped, masked scores in place (arg 0: S, T x T;
                       // with softcap, arg 1: the capping's derivative C, offset 2*T*T;
                       // last arg: each row's lse, T floats after S, or after C);
                       // [1] dS = P * (dP - rowsum(P * dP)) * C * scale into dP (arg 0: P,
                       // arg 1: dP, offset T*T in a [2 or 3, T, T] scratch; with softcap
                       // arg 2: C); -1: none
    int64_t chunk;     // query t sees only keys j of its chunk, j / chunk == t / chunk; 0: no chunks
} KirAttn;

typedef struct KirKernel {
    uint8_t kind;       // KirKind
    int32_t anchor;     // last graph node it computes: an INS_RUN over [from, to) runs it
                        // when from <= anchor < to; -1 for helpers and epilogues
    int32_t first;      // first graph node it computes (its operands are live from here on)
    int32_t fused_into; // KK_EXPR: the GEMM or attention kernel that runs it, or -1
    int32_t *nodes;     // (nnodes) graph nodes it computes, for --dump-kernels and tests
    int32_t nnodes;
    KirArg *args; // (nargs) GEMM: C, A, B; ATTN: y, q, k, v, lse (written: f32 [B, H, T]);
                  // ATTN_BWD: packed dq|dk|dv, dy, q, k, v, y, lse
    int32_t nargs;
    // KK_EXPR
    int64_t rows;
    int64_t *cols; // (nloops) columns of loop k+1
    int32_t nloops;
    KirStmt *stmts; // (nstmts)
    int32_t nstmts;
    KirGemm gemm;
    KirAttn attn;
} KirKernel;

// An expression kernel compiled for the cpu (compiler/emit/emit_llvm.c emits it,
// runtime/backend/jit.c calls it): rows [r0, r1), args[j] argument j's first
// element, KA_ACC64 accumulators in scratch at kir_acc64_offset.
typedef void (*KirFn)(void **args, int64_t r0, int64_t r1, double *scratch);

// The kernels of one part, in the order they run.
typedef struct KirSet {
    KirKernel *k; // (n)
    int32_t n;
} KirSet;

// Every part's kernels: what the plan's KERNELS section carries.
typedef struct KirProgram {
    KirSet parts[PART_COUNT]; // [0, nparts): the graph's parts (graph_nparts); the rest empty
    int32_t nparts;
} KirProgram;

const char *kir_op_name(KirOp op);
const char *kir_type_name(KirType t);
const char *kir_kind_name(KirKind k);

// The type a load of an argument of storage type t gives (bf16 widens to f32).
static inline int kir_value_type(int t) { return t == KT_BF16 ? KT_F32 : t; }
// The argument type of a buffer the storage rule (common/storage.h) stores as t.
static inline int kir_storage_type(DType t) { return t == DT_I32 ? KT_I32 : t == DT_BF16 ? KT_BF16 : KT_F32; }

// Whether kernel k is one an INS_RUN launches by itself (not a helper or an epilogue).
int kir_is_launched(const KirKernel *k);
// GEMM and attention kernels: those a selective-recompute run skips (their outputs are kept).
int kir_is_heavy(const KirKernel *k);
// Whether op is one of the node kernels' (KK_NODE), which have no expression form.
int kir_is_plain_op(OpKind op);

// Doubles of f64 scratch before argument `arg`'s accumulator (KA_ACC64
// arguments in order); with arg = nargs, the scratch the kernel needs.
int64_t kir_acc64_offset(const KirKernel *k, int arg);

// The symbol of kernel i of part pk in generated code: "mt_k<part>_<i>" into buf.
char *kir_symbol(char *buf, size_t cap, int part, int i);

// Checks one kernel: operand order, types, loops, argument indices, loop
// structure. Returns 0, or -1 with a message naming the statement in err.
int kir_check(const KirKernel *k, int nparts_nodes, char *err, size_t errcap);

// Serialises prog into bytes malloc'd into *out (little-endian, versioned).
// Returns 0, or -1 when out of memory.
int kir_write(const KirProgram *prog, uint8_t **out, size_t *len);
// Reads what kir_write wrote for a graph of nparts parts, validating every
// field (a plan file is untrusted): counts against the bytes left, enums,
// operand order and types, node ids against nnodes[part]. Allocates in a.
// Returns 0, or -1 with err.
int kir_read(KirProgram *prog, const uint8_t *bytes, size_t len, int nparts, const int *nnodes, Arena *a, char *err,
             size_t errcap);

// Prints a kernel's statements, one a line (mtc --dump-kernels -v).
void kir_print_kernel(FILE *out, const KirKernel *k, int index);

#endif
