// comm.c: the collectives of comm.h, by NCCL (built with MT_HAVE_NCCL: the
// cuda backend's) or by MPI on host memory (the cpu backend's, and the cuda
// backend's through host copies where it has no NCCL, as on the emulation).
#include "runtime/dist/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/storage.h"

#ifdef MT_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

static int ranks(const Comm *c) { return c->dist && c->dist->mpi ? c->dist->size : 1; }
static size_t elem_bytes(CommDtype t) { return t == COMM_BF16 ? 2 : 4; }

int64_t comm_piece_elems(void) {
    const char *s = getenv("MT_COMM_PIECE");
    int64_t n = s && *s ? strtoll(s, NULL, 10) : 0;
    return n > 0 ? n : (int64_t)1 << 28; // (an int count, and a bf16 piece's bytes, fit)
}

// ---------------------------------------------------------------- MPI

// bf16 sums for MPI, which has no bf16: widened, added in fp32, rounded to nearest even.
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = bf16_from_f32(f32_from_bf16(a[i]) + f32_from_bf16(b[i]));
}

static MPI_Datatype mpi_type(CommDtype t) { return t == COMM_BF16 ? MPI_UINT16_T : MPI_FLOAT; }

static MPI_Op mpi_sum(CommDtype t) {
    static MPI_Op bf16_op = MPI_OP_NULL;
    if (t != COMM_BF16) return MPI_SUM;
    if (bf16_op == MPI_OP_NULL) MPI_Op_create(bf16_sum, 1, &bf16_op); // (freed by MPI_Finalize)
    return bf16_op;
}

static int mpi_fail(int rc, const char *what, char *err, size_t errcap) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, s, &len);
    snprintf(err, errcap, "comm: %s failed: %s", what, s);
    return -1;
}

enum { OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER };

static const char *op_call(int op) {
    return op == OP_ALL_REDUCE ? "MPI_Allreduce" : op == OP_ALL_GATHER ? "MPI_Allgather" : "MPI_Reduce_scatter_block";
}

// An all-gather or reduce-scatter of the contiguous blocks of k elements
// at h (ranks of them), in place: rank r's block at r x k.
static int mpi_blocks(const Comm *c, int op, unsigned char *h, int64_t k, CommDtype t) {
    size_t es = elem_bytes(t);
    int rank = c->dist->rank;
    if (op == OP_ALL_GATHER)
        return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, (int)k, mpi_type(t), MPI_COMM_WORLD);
    int rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, h, (int)k, mpi_type(t), mpi_sum(t), MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && rank)
        memcpy(h + (size_t)rank * (size_t)k * es, h, (size_t)k * es); // (its sum lands first)
    return rc;
}

// One collective on host memory h (count elements for an all-reduce, else
// ranks x chunk), in pieces of comm_piece_elems() elements a rank; pieces
// of the chunks gathered into `tmp` (ranks x piece) to go as blocks.
static int mpi_host(const Comm *c, int op, unsigned char *h, int64_t n, CommDtype t, char *err, size_t errcap) {
    int64_t piece = comm_piece_elems();
    size_t es = elem_bytes(t);
    int size = ranks(c), rc = MPI_SUCCESS;
    if (op != OP_ALL_REDUCE && n <= piece) rc = mpi_blocks(c, op, h, n, t);
    else if (op != OP_ALL_REDUCE) {
        unsigned char *tmp = malloc((size_t)size * (size_t)piece * es); // (ranks, piece)
        if (!tmp) {
            snprintf(err, errcap, "comm: out of memory for %lld bytes of pieces",
                     (long long)(size * piece * (int64_t)es));
            return -1;
        }
        for (int64_t at = 0; at < n && rc == MPI_SUCCESS; at += piece) {
            int64_t k = n - at < piece ? n - at : piece;
            for (int r = 0; r < size; r++)
                memcpy(tmp + (size_t)(r * k) * es, h + (size_t)(r * n + at) * es, (size_t)k * es);
            rc = mpi_blocks(c, op, tmp, k, t);
            for (int r = 0; r < size && rc == MPI_SUCCESS; r++)
                if (op == OP_ALL_GATHER || r == c->dist->rank)
                    memcpy(h + (size_t)(r * n + at) * es, tmp + (size_t)(r * k) * es, (size_t)k * es);
        }
        free(tmp);
    } else
        for (int64_t at = 0; at < n && rc == MPI_SUCCESS; at += piece) {
            int64_t k = n - at < piece ? n - at : piece;
            rc = MPI_Allreduce(MPI_IN_PLACE, h + (size_t)at * es, (int)k, mpi_type(t), mpi_sum(t), MPI_COMM_WORLD);
        }
    return rc == MPI_SUCCESS ? 0 : mpi_fail(rc, op_call(op), err, errcap);
}

// The MPI implementation: straight on host buffers, else through the staging copy.
static int mpi_collective(Comm *c, int op, void *buf, int64_t n, CommDtype t, void *stream, char *err, size_t errcap) {
    int64_t total = op == OP_ALL_REDUCE ? n : n * ranks(c); // elements in buf
    size_t bytes = (size_t)total * elem_bytes(t);
    if (!c->staging.to_host) return mpi_host(c, op, buf, n, t, err, errcap);
    if (bytes > c->host_bytes) {
        unsigned char *h = realloc(c->host, bytes);
        if (!h) {
            snprintf(err, errcap, "comm: out of memory for a host copy of %zu bytes", bytes);
            return -1;
        }
        c->host = h, c->host_bytes = bytes;
    }
    if (c->staging.to_host(c->staging.ctx, c->host, buf, bytes, stream, err, errcap) != 0 ||
        mpi_host(c, op, c->host, n, t, err, errcap) != 0)
        return -1;
    return c->staging.to_buf(c->staging.ctx, buf, c->host, bytes, stream, err, errcap);
}

// ---------------------------------------------------------------- NCCL

#ifdef MT_HAVE_NCCL
static int nccl_ok(ncclResult_t r, const char *what, char *err, size_t errcap) {
    if (r == ncclSuccess) return 1;
    snprintf(err, errcap, "comm: %s failed: %s", what, ncclGetErrorString(r));
    return 0;
}

static int nccl_open(Comm *c, char *err, size_t errcap) {
    ncclUniqueId id;
    if (c->dist->rank == 0 && !nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId", err, errcap))
        memset(&id, 0, sizeof id); // (the others wait in the broadcast: the caller's error ends the job)
    int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Bcast of NCCL's unique id", err, errcap);
    ncclComm_t comm;
    if (!nccl_ok(ncclCommInitRank(&comm, c->dist->size, id, c->dist->rank), "ncclCommInitRank", err, errcap)) return -1;
    c->nccl_comm = comm;
    return 0;
}

static int nccl_collective(Comm *c, int op, void *buf, int64_t n, CommDtype t, void *stream, char *err, size_t errcap) {
    ncclDataType_t type = t == COMM_BF16 ? ncclBfloat16 : ncclFloat32;
    ncclComm_t comm = c->nccl_comm;
    char *mine = (char *)buf + (size_t)c->dist->rank * (size_t)n * elem_bytes(t);
    cudaStream_t s = stream;
    if (op == OP_ALL_REDUCE)
        return nccl_ok(ncclAllReduce(buf, buf, (size_t)n, type, ncclSum, comm, s), "ncclAllReduce", err, errcap) - 1;
    if (op == OP_ALL_GATHER)
        return nccl_ok(ncclAllGather(mine, buf, (size_t)n, type, comm, s), "ncclAllGather", err, errcap) - 1;
    return nccl_ok(ncclReduceScatter(buf, mine, (size_t)n, type, ncclSum, comm, s), "ncclReduceScatter", err, errcap) -
           1;
}
#endif

// ---------------------------------------------------------------- the interface

int comm_open(Comm *c, const Dist *d, int nccl, const CommStaging *staging, char *err, size_t errcap) {
    *c = (Comm){.dist = d};
    if (staging) c->staging = *staging;
    if (ranks(c) == 1 || !nccl) return 0;
#ifdef MT_HAVE_NCCL
    c->nccl = 1;
    return nccl_open(c, err, errcap);
#else
    snprintf(err, errcap, "comm: NCCL asked for, but this build has none (CMake found no nccl.h and libnccl)");
    return -1;
#endif
}

void comm_close(Comm *c) {
#ifdef MT_HAVE_NCCL
    if (c->nccl_comm) ncclCommDestroy(c->nccl_comm);
#endif
    free(c->host);
    *c = (Comm){0};
}

const char *comm_describe(const Comm *c, char *out, size_t cap) {
    if (ranks(c) == 1) snprintf(out, cap, "none (one rank)");
    else if (c->nccl) {
#ifdef MT_HAVE_NCCL
        int v = 0;
        ncclGetVersion(&v);
        snprintf(out, cap, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
#endif
    } else snprintf(out, cap, "MPI%s", c->staging.to_host ? " through host copies" : "");
    return out;
}

// MT_TEST_COMM_FAIL=K (a test hook, tests/check_dist.py kill): the K-th
// collective of several ranks this process calls fails, as a failed MPI or
// NCCL call would, without calling MPI. (Collectives are called one at a
// time: MPI_THREAD_SERIALIZED.)
static int test_failure(char *err, size_t errcap) {
    static long long calls;
    const char *k = getenv("MT_TEST_COMM_FAIL");
    if (!k || !*k || ++calls != strtoll(k, NULL, 10)) return 0;
    snprintf(err, errcap, "comm: collective %lld failed (MT_TEST_COMM_FAIL, a test hook)", calls);
    return -1;
}

static int collective(Comm *c, int op, void *buf, int64_t n, CommDtype t, void *stream, char *err, size_t errcap) {
    if (ranks(c) == 1 || n == 0) return 0;
    if (n < 0) {
        snprintf(err, errcap, "comm: internal error: %lld elements", (long long)n);
        return -1;
    }
    if (test_failure(err, errcap) != 0) return -1;
#ifdef MT_HAVE_NCCL
    if (c->nccl) return nccl_collective(c, op, buf, n, t, stream, err, errcap);
#endif
    return mpi_collective(c, op, buf, n, t, stream, err, errcap);
}

int comm_all_reduce(Comm *c, void *buf, int64_t count, CommDtype t, void *stream, char *err, size_t errcap) {
    return collective(c, OP_ALL_REDUCE, buf, count, t, stream, err, errcap);
}
int comm_all_gather(Comm *c, void *buf, int64_t chunk, CommDtype t, void *stream, char *err, size_t errcap) {
    return collective(c, OP_ALL_GATHER, buf, chunk, t, stream, err, errcap);
}
int comm_reduce_scatter(Comm *c, void *buf, int64_t chunk, CommDtype t, void *stream, char *err, size_t errcap) {
    return collective(c, OP_REDUCE_SCATTER, buf, chunk, t, stream, err, errcap);
}

int comm_plan_collective(Comm *c, const Plan *p, const Instr *in, char *arena, void *stream, char *err, size_t errcap) {
    int gather = in->kind == INS_ALLGATHER;
    int64_t elem = gather ? storage_weight_bytes(p->graph->train.compute) : 4, n = in->bytes / elem / ranks(c);
    if ((in->kind != INS_ALLGATHER && in->kind != INS_REDUCE_SCATTER) || n * elem * ranks(c) != in->bytes) {
        snprintf(err, errcap, "comm: internal error: instruction kind %d of %lld bytes is no collective of %d ranks",
                 in->kind, (long long)in->bytes, ranks(c));
        return -1;
    }
    CommDtype t = elem == 2 ? COMM_BF16 : COMM_F32;
    return gather ? comm_all_gather(c, arena + in->dst, n, t, stream, err, errcap)
                  : comm_reduce_scatter(c, arena + in->src, n, t, stream, err, errcap);
}
