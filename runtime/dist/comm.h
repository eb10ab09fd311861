// comm.h: the collectives of a data-parallel run (dist.h) over one
// backend's buffers: all-reduce, all-gather and reduce-scatter, in place,
// of fp32 or bf16 elements, ordered on a stream. Two implementations behind
// the same calls:
//   - NCCL (comm.c built with MT_HAVE_NCCL, inside the cuda backend): the
//     buffers are device memory, the collectives queued on the caller's
//     CUDA stream (the backend's communication stream); the communicator
//     made from NCCL's unique id, which rank 0 broadcasts with MPI;
//   - MPI on host memory: the cpu backend's buffers as they are, or device
//     buffers through a host copy (CommStaging: the cuda backend on the CPU
//     emulation, or built without NCCL), the stream then synchronised.
// Every rank calls the same collectives in the same order. With one rank
// (no MPI) every call leaves the buffer as it is.
//
// The layouts are NCCL's in-place ones, so that a sharded segment's slices
// (dist_shard) sit where the collective reads and writes them: a buffer of
// ranks x chunk elements holds rank r's chunk at r x chunk.
#ifndef MT_COMM_H
#define MT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/dist/dist.h"

typedef enum { COMM_F32, COMM_BF16 } CommDtype;

// How the MPI implementation reaches buffers that are not host memory: a
// synchronous copy of `bytes` to the host or back, after what is queued on
// `stream` (NULL staging: the buffers are host memory). 0, or -1 with a
// message.
typedef struct CommStaging {
    int (*to_host)(void *ctx, void *host, const void *buf, size_t bytes, void *stream, char *err, size_t errcap);
    int (*to_buf)(void *ctx, void *buf, const void *host, size_t bytes, void *stream, char *err, size_t errcap);
    void *ctx;
} CommStaging;

typedef struct Comm {
    const Dist *dist;    // the ranks (NULL or one rank: every collective a no-op)
    int nccl;            // the NCCL implementation (else MPI)
    void *nccl_comm;     // ncclComm_t
    CommStaging staging; // the MPI implementation's way to the buffers (to_host NULL: host memory)
    unsigned char *host; // (host_bytes) the staging copy
    size_t host_bytes;
} Comm;

// Opens the collectives of d's ranks (every rank calls it at the same
// point). nccl: the NCCL implementation, on the CUDA device current on the
// calling thread (refused when comm.c was built without NCCL); else MPI,
// through `staging` when the buffers are not host memory (NULL: they are).
// 0, or -1 with a message.
int comm_open(Comm *c, const Dist *d, int nccl, const CommStaging *staging, char *err, size_t errcap);
void comm_close(Comm *c);
// What comm_open made, for banners: "NCCL 2.21.5", "MPI", "MPI through host copies", "none (one rank)".
const char *comm_describe(const Comm *c, char *out, size_t cap);

// buf (count elements) summed over the ranks, every rank getting the sum.
int comm_all_reduce(Comm *c, void *buf, int64_t count, CommDtype t, void *stream, char *err, size_t errcap);
// buf (ranks x chunk): rank r's chunk (at r x chunk, on rank r) copied into every rank's buffer.
int comm_all_gather(Comm *c, void *buf, int64_t chunk, CommDtype t, void *stream, char *err, size_t errcap);
// buf (ranks x chunk) summed over the ranks; rank r keeps chunk r of the sum (at r x chunk), the rest of its
// buffer unspecified afterwards.
int comm_reduce_scatter(Comm *c, void *buf, int64_t chunk, CommDtype t, void *stream, char *err, size_t errcap);

// A sharded plan's collective instruction `in` (INS_ALLGATHER of a
// segment's weights, in the plan's weight storage, bf16 or fp32;
// INS_REDUCE_SCATTER of its fp32 gradients: common/plan.h), in place on
// the arena that starts at `arena` (host or device memory, as c's
// implementation reaches it), on `stream`: the one implementation of both
// backends' `collective` hook (runtime/backend/backend.h). 0, or -1 with a message.
int comm_plan_collective(Comm *c, const Plan *p, const Instr *in, char *arena, void *stream, char *err, size_t errcap);

// Elements of one MPI call (MT_COMM_PIECE overrides, for tests): larger
// collectives go in pieces of at most this many elements a rank.
int64_t comm_piece_elems(void);

#endif
