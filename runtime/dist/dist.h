// dist.h: the ranks of a data-parallel run. mtrun started by mpirun (or srun
// through MPI) is one rank of several, each running the same plan on its own
// part of every global batch (data.c) with the whole host store, the
// gradients summed over the ranks before the global norm and AdamW
// (replicated data parallelism), or with a sharded plan each holding its
// shard of the host store (store_alloc_shard), the weights all-gathered and
// the gradients reduce-scattered by the plan's collectives (INS_ALLGATHER,
// INS_REDUCE_SCATTER). Started any other way, mtrun is one process
// and never calls MPI: every function here is then a no-op.
#ifndef MT_DIST_H
#define MT_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "common/plan.h"

typedef struct Dist {
    int rank, size; // this process's rank and the ranks started (0 and 1 without MPI)
    int local;      // of them, the ranks on this machine, sharing its memory (1 without MPI)
    int local_rank; // this rank's index among those (0 without MPI): the GPU it picks (modulo the machine's)
    int mpi;        // whether MPI is initialised (started by an MPI launcher)
} Dist;

// Initialises MPI where an MPI launcher started this process (Open MPI's
// OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK or PMI's PMI_RANK in the
// environment), else fills in one process. 0, or -1 with a message.
int dist_open(Dist *d, int *argc, char ***argv, char *err, size_t errcap);

// Refuses, on every rank alike, a run whose ranks disagree: a plan made for
// another number of ranks than were started, ranks given different plans
// (by the plan's crc), different mtrun builds (a crc of the executable) or
// different training options (`options`: lines "name=value" that must be
// the same on every rank, such as steps=5), naming the ranks and what
// differs. Without MPI, refuses a plan made for more than one rank. 0, or
// -1 with the same message on every rank.
int dist_check_plan(const Dist *d, const Plan *p, const char *options, char *err, size_t errcap);

// Sums x over the ranks in place (every rank gets the same sum, in the same
// order of ranks); arrays of floats: comm_all_reduce (comm.h).
void dist_sum_doubles(const Dist *d, double *x, int n); // (n)
// The largest of each x over the ranks, in place.
void dist_max_doubles(const Dist *d, double *x, int n); // (n)

// Rank 0's text (NULL allowed) on every rank, malloc'd (a collective; a
// copy without MPI). *ok 0 when out of memory.
char *dist_bcast_text(const Dist *d, const char *text, int *ok);

// Every rank's n int64s `mine` into all (size, n) in rank order, on every rank.
void dist_gather_i64(const Dist *d, const int64_t *mine, int n, int64_t *all);

// Floats [off, off + n) of one segment of the store (at seg_off, seg_len
// floats: it holds them all) into dst on rank 0, each from the rank that
// owns it in a sharded store (dist_shard's slice of the segment), which
// reads it with get (store offsets; its slice only). A collective, in
// pieces; dst is written on rank 0 only (NULL elsewhere). Without MPI, get
// of the whole range. 0 on every rank, or -1 on every rank when one rank's
// get failed (its message on that rank, "rank R of N could not read its
// slice" on the others).
typedef int (*DistGetFn)(void *ctx, int64_t off, int64_t n, float *dst, char *err, size_t errcap);
int dist_gather_slices(const Dist *d, int64_t seg_off, int64_t seg_len, int64_t off, int64_t n, float *dst,
                       DistGetFn get, void *ctx, char *err, size_t errcap);

// Every rank's `mine` (a NUL-terminated line), as one malloc'd text of
// "rank R: LINE" lines in rank order, on every rank (a collective); without
// MPI "rank 0: LINE". NULL when out of memory.
char *dist_gather_lines(const Dist *d, const char *mine);

// The shard of a segment of `len` elements (the head's or tail's globals, or
// one layer's, as the plan's HOST section lays them out) that rank `rank` of
// `ranks` owns in a sharded run or writes in a sharded checkpoint: the
// rank-th of `ranks` chunks of ceil(len / ranks) elements, [*lo, *hi), the
// last ones short or empty. A collective over a segment moves ranks x chunk
// elements, the tail past len zero.
// (Inline: checkpoint.c, which links no MPI, shards by it too.)
static inline int64_t dist_shard(int64_t len, int rank, int ranks, int64_t *lo, int64_t *hi) { // returns the chunk
    int64_t chunk = ranks > 1 ? (len + ranks - 1) / ranks : len;
    int64_t a = (int64_t)rank * chunk;
    *lo = a < len ? a : len;
    *hi = a + chunk < len ? a + chunk : len;
    return chunk;
}

// Ends MPI: with status 0 once every rank is done (MPI_Finalize); otherwise
// the whole job at once (MPI_Abort), since the other ranks may be waiting in
// a collective this rank will never join.
void dist_close(Dist *d, int status);

#endif
