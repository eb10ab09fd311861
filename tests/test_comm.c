// test_comm: runtime/dist/comm.c's MPI implementation under mpirun -np N (and as
// one process without MPI, where every collective leaves the buffer as it
// is). all-reduce, all-gather and reduce-scatter, fp32 and bf16, in one
// piece and in pieces of 7 elements (MT_COMM_PIECE), on host buffers and
// through host copies (CommStaging, as the cuda backend without NCCL uses
// it: here a "device" buffer that only the staging calls may touch, which
// counts them). Values are small integers, so every sum is exact in both
// types and any order: each element is checked for equality. Exit 0, or 1
// naming the first wrong element.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "runtime/dist/comm.h"
#include "tests/check.h"

// One wrong element: the first 10 are named.
static void wrong_element(const char *what, int rank, int64_t i, double got, double want) {
    if (check_failures >= 10) check_failures++;
    else FAIL("rank %d: %s: element %lld is %g, not %g", rank, what, (long long)i, got, want);
}

typedef struct Fake { // the "device" the staging calls copy from and to
    int copies;
} Fake;
static int fake_to_host(void *ctx, void *host, const void *buf, size_t bytes, void *stream, char *err, size_t errcap) {
    (void)stream, (void)err, (void)errcap;
    ((Fake *)ctx)->copies++;
    memcpy(host, buf, bytes);
    return 0;
}
static int fake_to_buf(void *ctx, void *buf, const void *host, size_t bytes, void *stream, char *err, size_t errcap) {
    (void)stream, (void)err, (void)errcap;
    ((Fake *)ctx)->copies++;
    memcpy(buf, host, bytes);
    return 0;
}

static double get(const void *buf, CommDtype t, int64_t i) {
    return t == COMM_BF16 ? f32_from_bf16(((const uint16_t *)buf)[i]) : ((const float *)buf)[i];
}
static void set(void *buf, CommDtype t, int64_t i, double v) {
    if (t == COMM_BF16) ((uint16_t *)buf)[i] = bf16_from_f32((float)v);
    else ((float *)buf)[i] = (float)v;
}

// Rank r's value of element i of its input: small integers (exact in bf16: under 256).
static double value(int r, int64_t i) { return (double)((r + 1) * (i % 13) + r); }

static void check_all(Comm *c, const Dist *d, CommDtype t, const char *how) {
    int R = d->size, me = d->rank;
    int64_t chunk = 23, n = chunk * R; // an all-reduce of n; gathers and scatters of R chunks of 23
    void *buf = malloc((size_t)n * 4);
    char err[512] = "", what[128];
    const char *tn = t == COMM_BF16 ? "bf16" : "fp32";
    // all-reduce
    for (int64_t i = 0; i < n; i++) set(buf, t, i, value(me, i));
    if (comm_all_reduce(c, buf, n, t, NULL, err, sizeof err) != 0) FAIL("%s", err);
    snprintf(what, sizeof what, "all-reduce %s %s", tn, how);
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < R; r++) want += value(r, i);
        if (get(buf, t, i) != want) wrong_element(what, me, i, get(buf, t, i), want);
    }
    // all-gather: only this rank's chunk is set, the rest NaN
    for (int64_t i = 0; i < n; i++) set(buf, t, i, i / chunk == me ? value(me, i) : NAN);
    if (comm_all_gather(c, buf, chunk, t, NULL, err, sizeof err) != 0) FAIL("%s", err);
    snprintf(what, sizeof what, "all-gather %s %s", tn, how);
    for (int64_t i = 0; i < n; i++)
        if (get(buf, t, i) != value((int)(i / chunk), i))
            wrong_element(what, me, i, get(buf, t, i), value((int)(i / chunk), i));
    // reduce-scatter: this rank's chunk of the sum
    for (int64_t i = 0; i < n; i++) set(buf, t, i, value(me, i));
    if (comm_reduce_scatter(c, buf, chunk, t, NULL, err, sizeof err) != 0) FAIL("%s", err);
    snprintf(what, sizeof what, "reduce-scatter %s %s", tn, how);
    for (int64_t i = me * chunk; i < (me + 1) * chunk; i++) {
        double want = 0;
        for (int r = 0; r < R; r++) want += R > 1 ? value(r, i) : 0;
        if (R == 1) want = value(0, i);
        if (get(buf, t, i) != want) wrong_element(what, me, i, get(buf, t, i), want);
    }
    free(buf);
}

int main(int argc, char **argv) {
    Dist d;
    char err[512] = "";
    if (dist_open(&d, &argc, &argv, err, sizeof err) != 0) {
        fprintf(stderr, "test_comm: %s\n", err);
        return 1;
    }
    Comm host, staged;
    Fake fake = {0};
    CommStaging st = {fake_to_host, fake_to_buf, &fake};
    if (comm_open(&host, &d, 0, NULL, err, sizeof err) != 0 || comm_open(&staged, &d, 0, &st, err, sizeof err) != 0) {
        fprintf(stderr, "test_comm: %s\n", err);
        dist_close(&d, 1);
        return 1;
    }
    for (int piece = 0; piece < 2; piece++) {
        if (piece) setenv("MT_COMM_PIECE", "7", 1);
        for (int t = COMM_F32; t <= COMM_BF16; t++) {
            check_all(&host, &d, (CommDtype)t, piece ? "on the host, in pieces of 7" : "on the host");
            check_all(&staged, &d, (CommDtype)t, piece ? "through host copies, in pieces of 7" : "through host copies");
        }
    }
    int want_copies = d.size > 1 ? 2 * 3 * 2 * 2 : 0; // (to and back) x collectives x dtypes x piece sizes
    if (fake.copies != want_copies) { FAIL("rank %d: %d staging copies, not %d", d.rank, fake.copies, want_copies); }
    // one rank of NCCL from a build without it is refused, never silently MPI
    Comm nccl;
    int no_nccl = comm_open(&nccl, &d, 1, NULL, err, sizeof err);
    if (d.size > 1 && (no_nccl == 0 || !strstr(err, "NCCL asked for, but this build has none"))) {
        FAIL("rank %d: NCCL asked of the host build: '%s'", d.rank, err);
    }
    if (no_nccl == 0) comm_close(&nccl);
    char how[64], how_staged[64];
    if (d.rank == 0)
        printf("test_comm: %d rank%s, comm %s and %s: %s\n", d.size, d.size == 1 ? "" : "s",
               comm_describe(&host, how, sizeof how), comm_describe(&staged, how_staged, sizeof how_staged),
               check_failures ? "FAILED" : "ok");
    comm_close(&host);
    comm_close(&staged);
    double any = check_failures;
    dist_max_doubles(&d, &any, 1);
    dist_close(&d, 0);
    return any ? 1 : 0;
}
