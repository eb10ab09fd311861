// dist.c: the ranks of a data-parallel run through MPI (dist.h).
#include "runtime/dist/dist.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"

// Whether an MPI launcher started this process: Open MPI's mpirun, a PMIx
// server (srun --mpi=pmix, prterun) or a PMI one (srun --mpi=pmi2, MPICH).
static int launched_by_mpi(void) {
    static const char *const VARS[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        if (getenv(VARS[i]) && *getenv(VARS[i])) return 1;
    return 0;
}

int dist_open(Dist *d, int *argc, char ***argv, char *err, size_t errcap) {
    *d = (Dist){.rank = 0, .size = 1, .local = 1};
    if (!launched_by_mpi()) return 0;
    // serialized: a threaded replay calls the collectives from its comm engine's thread, while the main
    // thread waits for the engines (never two calls at once)
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        snprintf(err, errcap, "started by an MPI launcher, but MPI_Init failed");
        return -1;
    }
    d->mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    MPI_Comm node; // the ranks that share this machine's memory
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &d->local);
        MPI_Comm_rank(node, &d->local_rank);
        MPI_Comm_free(&node);
    }
    return 0;
}

// A crc32 of this mtrun's executable: two builds differ in it.
static uint32_t build_crc(void) {
    char *bytes;
    size_t len;
    if (io_read_file("/proc/self/exe", &bytes, &len) != 0) return 0;
    uint32_t c = io_crc32(0, bytes, len);
    free(bytes);
    return c;
}

// What each rank says about itself for the start-up check.
enum { ID_RANKS, ID_PLAN_CRC, ID_BUILD_CRC, ID_COUNT };

// The ranks whose field f differs from rank 0's, as "rank 2" or "ranks 1, 3"
// into out; returns the first of them, or -1 when none.
static int differing(char *out, size_t cap, const uint32_t *ids, int size, int f) { // ids: (size, ID_COUNT)
    int first = -1, n = 0;
    for (int r = 1; r < size; r++)
        if (ids[r * ID_COUNT + f] != ids[f]) n++, first = first < 0 ? r : first;
    int len = snprintf(out, cap, "%s", n > 1 ? "ranks " : "rank ");
    for (int r = 1, k = 0; r < size && len > 0 && (size_t)len < cap; r++)
        if (ids[r * ID_COUNT + f] != ids[f]) len += snprintf(out + len, cap - (size_t)len, "%s%d", k++ ? ", " : "", r);
    return first;
}

// The first line of `mine` that differs from `theirs` (lines of "name=value"),
// as "NAME=MINE where rank 0 has NAME=THEIRS" into out.
static void first_difference(char *out, size_t cap, const char *mine, const char *theirs) {
    while (*mine || *theirs) {
        size_t a = strcspn(mine, "\n"), b = strcspn(theirs, "\n");
        if (a != b || memcmp(mine, theirs, a) != 0) {
            snprintf(out, cap, "%.*s where rank 0 has %.*s", (int)a, mine, (int)b, theirs);
            return;
        }
        mine += a + (mine[a] == '\n'), theirs += b + (theirs[b] == '\n');
    }
    snprintf(out, cap, "(no line differs)");
}

// The ranks' options compared with rank 0's: 0, or -1 with a message
// naming the ranks that differ and the first difference of the first.
static int check_options(const Dist *d, const char *options, char *err, size_t errcap) {
    int len = (int)strlen(options) + 1, *lens = malloc((size_t)d->size * sizeof *lens), *at = NULL;
    char *all = NULL;
    int rc = -1;
    if (!lens) goto oom;
    MPI_Allgather(&len, 1, MPI_INT, lens, 1, MPI_INT, MPI_COMM_WORLD);
    at = malloc((size_t)d->size * sizeof *at);
    long total = 0;
    for (int r = 0; at && r < d->size; r++) at[r] = (int)total, total += lens[r];
    if (!at || total > INT_MAX || !(all = malloc((size_t)total))) goto oom;
    MPI_Allgatherv(options, len, MPI_CHAR, all, lens, at, MPI_CHAR, MPI_COMM_WORLD);
    char who[256] = "", what[512] = "";
    int n = 0, wlen = 0;
    for (int r = 1; r < d->size; r++) {
        if (lens[r] == lens[0] && memcmp(all + at[r], all, (size_t)lens[0]) == 0) continue;
        if (!n) first_difference(what, sizeof what, all + at[r], all);
        if (wlen >= 0 && (size_t)wlen < sizeof who)
            wlen += snprintf(who + wlen, sizeof who - (size_t)wlen, "%s%d", n ? ", " : "", r);
        n++;
    }
    if (n)
        snprintf(err, errcap,
                 "rank%s %s of %d %s started with other options than rank 0 (%s): every rank must train "
                 "alike",
                 n > 1 ? "s" : "", who, d->size, n > 1 ? "were" : "was", what);
    rc = n ? -1 : 0;
    free(lens), free(at), free(all);
    return rc;
oom:
    free(lens), free(at), free(all);
    snprintf(err, errcap, "out of memory comparing the ranks' options");
    return -1; // (the caller's dist_close aborts the job: the others may wait in the gather)
}

int dist_check_plan(const Dist *d, const Plan *p, const char *options, char *err, size_t errcap) {
    if (!d->mpi) {
        if (p->ranks == 1) return 0;
        snprintf(err, errcap,
                 "this plan is one rank of %d (mtc --ranks %d): start it with mpirun -np %d mtrun PLAN, "
                 "or make a plan for one process (without --ranks)",
                 p->ranks, p->ranks, p->ranks);
        return -1;
    }
    uint32_t mine[ID_COUNT] =
        {[ID_RANKS] = (uint32_t)p->ranks, [ID_PLAN_CRC] = p->plan_crc, [ID_BUILD_CRC] = build_crc()};
    uint32_t *ids = malloc((size_t)d->size * sizeof mine); // (size, ID_COUNT)
    if (!ids) {
        snprintf(err, errcap, "out of memory comparing the ranks");
        return -1; // (the caller's dist_close aborts the job: the others may wait in the gather)
    }
    MPI_Allgather(mine, ID_COUNT, MPI_UINT32_T, ids, ID_COUNT, MPI_UINT32_T, MPI_COMM_WORLD);
    char who[256];
    int r, rc = -1;
    if ((r = differing(who, sizeof who, ids, d->size, ID_BUILD_CRC)) >= 0)
        snprintf(err, errcap,
                 "%s of %d run%s another mtrun build than rank 0 (executable crc32 %08x on rank %d, %08x "
                 "on rank 0): every rank must run the same mtrun",
                 who, d->size, strchr(who, ',') ? "" : "s", ids[r * ID_COUNT + ID_BUILD_CRC], r, ids[ID_BUILD_CRC]);
    else if ((r = differing(who, sizeof who, ids, d->size, ID_PLAN_CRC)) >= 0)
        snprintf(err, errcap,
                 "%s of %d run%s another plan than rank 0 (plan crc32 %08x on rank %d, %08x on rank 0): "
                 "every rank must run the same plan",
                 who, d->size, strchr(who, ',') ? "" : "s", ids[r * ID_COUNT + ID_PLAN_CRC], r, ids[ID_PLAN_CRC]);
    else if ((int)ids[ID_RANKS] != d->size)
        snprintf(err, errcap,
                 "the plan was made for %u rank%s (mtc --ranks %u) but %d were started: start it with "
                 "mpirun -np %u, or make a plan with mtc --ranks %d",
                 ids[ID_RANKS], ids[ID_RANKS] == 1 ? "" : "s", ids[ID_RANKS], d->size, ids[ID_RANKS], d->size);
    else rc = 0;
    free(ids);
    return rc == 0 ? check_options(d, options, err, errcap) : rc;
}

void dist_sum_doubles(const Dist *d, double *x, int n) {
    if (d && d->mpi && d->size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

void dist_max_doubles(const Dist *d, double *x, int n) {
    if (d && d->mpi && d->size > 1) MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

char *dist_bcast_text(const Dist *d, const char *text, int *ok) {
    int many = d && d->mpi && d->size > 1, root = !many || d->rank == 0;
    long long len = root && text ? (long long)strlen(text) : -1;
    if (many) MPI_Bcast(&len, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    *ok = 1;
    if (len < 0) return NULL;
    char *out = malloc((size_t)len + 1);
    if (root && out) memcpy(out, text, (size_t)len + 1);
    if (many && out) MPI_Bcast(out, (int)len + 1, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (many && !out) MPI_Abort(MPI_COMM_WORLD, 1); // (the others wait in the broadcast)
    *ok = out != NULL;
    return out;
}

void dist_gather_i64(const Dist *d, const int64_t *mine, int n, int64_t *all) {
    if (d && d->mpi && d->size > 1) MPI_Allgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, MPI_COMM_WORLD);
    else memcpy(all, mine, (size_t)n * sizeof *mine);
}

int dist_gather_slices(const Dist *d, int64_t seg_off, int64_t seg_len, int64_t off, int64_t n, float *dst,
                       DistGetFn get, void *ctx, char *err, size_t errcap) {
    if (!d || !d->mpi || d->size == 1) return get(ctx, off, n, dst, err, errcap);
    int size = d->size, *counts = malloc((size_t)size * sizeof *counts),
        *displs = malloc((size_t)size * sizeof *displs);
    const int64_t piece = (int64_t)1 << 26;
    float *mine = malloc((size_t)(n < piece ? n : piece) * sizeof *mine + 1);
    int bad = !counts || !displs || !mine, any = 0;
    if (bad) snprintf(err, errcap, "out of memory gathering a tensor");
    for (int64_t at = off; at < off + n && !any; at += piece) {
        int64_t k = off + n - at < piece ? off + n - at : piece, a = at, b = at;
        for (int r = 0; !bad && r < size; r++) { // rank r's part of [at, at + k): its slice, clipped
            int64_t lo, hi;
            dist_shard(seg_len, r, size, &lo, &hi);
            int64_t x = seg_off + lo > at ? seg_off + lo : at, y = seg_off + hi < at + k ? seg_off + hi : at + k;
            counts[r] = y > x ? (int)(y - x) : 0, displs[r] = y > x ? (int)(x - at) : 0;
            if (r == d->rank) a = x, b = y;
        }
        if (!bad && b > a && get(ctx, a, b - a, mine, err, errcap) != 0) bad = 1;
        MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); // (before the gather: none waits alone)
        if (!any)
            MPI_Gatherv(mine, counts[d->rank], MPI_FLOAT, d->rank == 0 ? dst + (at - off) : NULL, counts, displs,
                        MPI_FLOAT, 0, MPI_COMM_WORLD);
    }
    if (any) { // which rank failed first, for the others' message
        int who = bad ? d->rank : size, first = size;
        MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!bad)
            snprintf(err, errcap, "rank %d of %d could not read its slice of a tensor (its message says why)", first,
                     size);
    }
    free(counts), free(displs), free(mine);
    return any ? -1 : 0;
}

char *dist_gather_lines(const Dist *d, const char *mine) {
    int size = d && d->mpi ? d->size : 1, len = (int)strlen(mine) + 1, *lens = calloc((size_t)size, sizeof *lens);
    int *at = calloc((size_t)size, sizeof *at);
    char *all = NULL, *out = NULL;
    if (lens && at) {
        if (size > 1) MPI_Allgather(&len, 1, MPI_INT, lens, 1, MPI_INT, MPI_COMM_WORLD);
        else lens[0] = len;
        long total = 0;
        for (int r = 0; r < size; r++) at[r] = (int)total, total += lens[r];
        if (total <= INT_MAX && (all = malloc((size_t)total)) && (out = malloc((size_t)total + (size_t)size * 24))) {
            if (size > 1) MPI_Allgatherv(mine, len, MPI_CHAR, all, lens, at, MPI_CHAR, MPI_COMM_WORLD);
            else memcpy(all, mine, (size_t)len);
            size_t k = 0;
            for (int r = 0; r < size; r++) k += (size_t)sprintf(out + k, "rank %d: %s\n", r, all + at[r]);
        }
    }
    free(lens), free(at), free(all);
    return out;
}

void dist_close(Dist *d, int status) {
    if (!d->mpi) return;
    if (status != 0) MPI_Abort(MPI_COMM_WORLD, status);
    MPI_Finalize();
    d->mpi = 0;
}
