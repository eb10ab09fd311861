// test_collective.c: the collectives' prices (compiler/schedule/collective.c) against
// the ring arithmetic written out by hand from the shipped profiles' figures:
// one node of h200x8 (NVLink), 4 and 32 nodes of h200x8-su (InfiniBand then
// NVLink), a cpu target (host memory), and what costs nothing.
//
// Usage: test_collective PROJECT_ROOT. Prints each failure; returns 1 on any.
#include "compiler/schedule/collective.h"
#include "tests/check.h"

#include <math.h>
#include <stdio.h>
#include <unistd.h>

static void near(const char *what, double got, double want) {
    CHECK(fabs(got - want) <= 1e-9 * fabs(want), "%s: %.9g s, expected %.9g s", what, got, want);
}

static int load(const char *name, Target *t) {
    char err[1024];
    if (target_load(name, t, err, sizeof err) == 0) return 0;
    FAIL("%s", err);
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 2 || chdir(argv[1]) != 0) {
        fprintf(stderr, "usage: test_collective PROJECT_ROOT\n");
        return 2;
    }
    Target x8, su, cpu;
    if (load("h200x8", &x8) || load("h200x8-su", &su) || load("tiny-1layer", &cpu)) return 1;
    double B = 1.7e9; // a llama3-70b layer in bf16, about
    // one node, 8 GPUs: a ring of 7 steps at 360 GB/s, 5 us each
    double ring8 = 7.0 / 8.0 * B / 360e9 + 7 * 5e-6;
    near("all-gather, 8 GPUs of h200x8", collective_seconds(&x8, COLL_ALL_GATHER, B, 8), ring8);
    near("reduce-scatter, 8 GPUs of h200x8", collective_seconds(&x8, COLL_REDUCE_SCATTER, B, 8), ring8);
    near("all-reduce, 8 GPUs of h200x8 (ring)", collective_seconds(&x8, COLL_ALL_REDUCE, B, 8), 2 * ring8);
    // a small all-reduce takes the tree: 2 log2(8) latencies and the bytes twice
    near("all-reduce of 8 bytes, 8 GPUs (tree)", collective_seconds(&x8, COLL_ALL_REDUCE, 8, 8),
         2 * 8 / 360e9 + 6 * 5e-6);
    // fewer ranks than a node's GPUs: a ring of those
    near("all-gather, 2 GPUs", collective_seconds(&x8, COLL_ALL_GATHER, B, 2), 0.5 * B / 360e9 + 5e-6);
    // 32 ranks on 4 nodes: each GPU's adapter carries 1/8 of the buffer around a ring of 4 nodes at 45 GB/s,
    // then the node's ring of 8
    double hier = 3.0 / 4.0 * (B / 8) / 45e9 + 3 * 10e-6 + ring8;
    near("all-gather, 4 nodes of 8", collective_seconds(&su, COLL_ALL_GATHER, B, 32), hier);
    near("all-reduce, 4 nodes of 8", collective_seconds(&su, COLL_ALL_REDUCE, B, 32), 2 * hier);
    // 12 ranks: a node of 8 and one of 4, laid as 8 a node on 2 nodes
    near("all-gather, 12 ranks", collective_seconds(&su, COLL_ALL_GATHER, B, 12), 0.5 * (B / 8) / 45e9 + 10e-6 + ring8);
    // a cpu target: 4 processes of one machine; each receives 3/4 of the buffer, written and read in its memory
    near("all-gather, 4 cpu ranks", collective_seconds(&cpu, COLL_ALL_GATHER, 1e6, 4), 2.0 * 3 * 1e6 / 20e9);
    // nothing to do
    near("one rank", collective_seconds(&x8, COLL_ALL_REDUCE, B, 1) + 1, 1);
    near("no bytes", collective_seconds(&x8, COLL_ALL_GATHER, 0, 8) + 1, 1);
    // a node's GPUs with no link between them, or nodes without a network: no way to run it
    if (!isinf(collective_seconds(&x8, COLL_ALL_GATHER, B, 16))) {
        FAIL("16 ranks on h200x8 (one node, no network) priced as possible");
    }
    // a rank's bytes on its links
    near("all-gather bytes", collective_rank_bytes(COLL_ALL_GATHER, B, 8), 7.0 / 8.0 * B);
    near("all-reduce bytes", collective_rank_bytes(COLL_ALL_REDUCE, B, 8), 2 * 7.0 / 8.0 * B);
    if (check_failures) return check_summary("test_collective");
    printf("ok: collectives priced as the ring and tree arithmetic says\n");
    return 0;
}
