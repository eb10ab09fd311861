// test_kir: the kernel IR's byte format (common/kir.c). For each model:
// fuse, kir_write, then
//   - kir_read gives back a program that writes the same bytes;
//   - every truncation is refused with a message;
//   - random byte mutations are read without a fault (the tests build this
//     under AddressSanitizer), and anything accepted passes kir_check;
//   - reading with fewer graph nodes than the kernels name is refused.
// Exit status 0 only when all hold.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "common/graph.h"
#include "compiler/compile.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static int check_model(const char *path) {
    char *text;
    size_t len;
    if (io_read_file(path, &text, &len) != 0) {
        fprintf(stderr, "%s: cannot read\n", path);
        return 1;
    }
    Source src = {.path = path, .text = text, .len = len};
    Diag diag = {.src = &src, .sink = stderr};
    Arena a = {0};
    Model *m = dsl_parse(&src, &a, &diag);
    Graph *g = m ? compile_lower(m, NULL, 1, NULL, &a, &diag) : NULL; // (the one compile path: fused once)
    char err[512];
    uint8_t *bytes = NULL, *again = NULL;
    size_t n = 0, n2 = 0;
    int failed = 0, nnodes[PART_COUNT], accepted = 0;
    if (!g || kir_write(g->kernels, &bytes, &n) != 0) {
        fprintf(stderr, "%s: cannot fuse\n", path);
        return 1;
    }
    for (int p = 0; p < PART_COUNT; p++) nnodes[p] = g->parts[p].nodes.n;
    KirProgram back;
    Arena ra = {0};
    if (kir_read(&back, bytes, n, graph_nparts(g), nnodes, &ra, err, sizeof err) != 0 ||
        kir_write(&back, &again, &n2) != 0 || n2 != n || memcmp(again, bytes, n) != 0) {
        printf("FAIL %s: the bytes do not read back to themselves: %s\n", path, err);
        failed++;
    }
    free(again);
    arena_free(&ra);
    for (size_t cut = 0; cut < n; cut += 1 + cut / 64) { // truncations
        uint8_t *t = malloc(cut + 1);
        memcpy(t, bytes, cut);
        err[0] = 0;
        if (kir_read(&back, t, cut, graph_nparts(g), nnodes, &ra, err, sizeof err) == 0 || !err[0]) {
            printf("FAIL %s: %zu of %zu bytes accepted or refused silently\n", path, cut, n);
            failed++;
        }
        arena_free(&ra);
        free(t);
    }
    uint8_t *mut = malloc(n);
    for (int trial = 0; trial < 3000; trial++) { // mutations: a fault is the failure
        memcpy(mut, bytes, n);
        int flips = 1 + (int)(next_u32() % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = next_u32() % n;
            mut[at] = (uint8_t)(next_u32() % 3 == 0 ? 0xFF : mut[at] ^ (1u << (next_u32() % 8)));
        }
        if (kir_read(&back, mut, n, graph_nparts(g), nnodes, &ra, err, sizeof err) == 0) {
            accepted++;
            for (int p = 0; p < PART_COUNT; p++)
                for (int i = 0; i < back.parts[p].n; i++)
                    if (kir_check(&back.parts[p].k[i], nnodes[p], err, sizeof err) != 0) {
                        printf("FAIL %s: a mutation was accepted that does not check: %s\n", path, err);
                        failed++;
                    }
        }
        arena_free(&ra);
    }
    free(mut);
    int fewer[PART_COUNT] = {nnodes[0], nnodes[1] / 2, nnodes[2]};
    if (kir_read(&back, bytes, n, graph_nparts(g), fewer, &ra, err, sizeof err) == 0) {
        printf("FAIL %s: kernels naming nodes the graph lacks were accepted\n", path);
        failed++;
    }
    arena_free(&ra);
    printf("%s %s: %zu bytes, read back, truncations refused, 3000 mutations read (%d accepted and checked)\n",
           failed ? "FAIL" : "ok  ", path, n, accepted);
    free(bytes);
    arena_free(&a);
    free(text);
    return failed;
}

int main(int argc, char **argv) {
    int failed = 0;
    for (int i = 1; i < argc; i++) failed += check_model(argv[i]);
    return failed || argc < 2;
}
