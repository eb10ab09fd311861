// fuzz_plan.c: libFuzzer target for the plan reader (runtime/plan_read.c).
// Any input must end in a validated Plan or in a message naming the file: no
// crash, leak, overflow or UB. Each input is tried two ways:
//
//  1. as a whole plan file, given to plan_parse as it is. Few of these get
//     past the header and the crc32 checks;
//  2. as a patch to a valid seed plan, after which every crc is recomputed,
//     so that the damage reaches the field-by-field validation:
//       byte 0      the section: (b & 0x7f) % 7 + 1; with the top bit set, the
//                   section is also cut short right after the patch
//       byte 1      which seed (modulo their number)
//       bytes 2..5  the patch's offset in the section (u32 LE, modulo its size)
//       bytes 6..   the patch, overwriting the section from there (clipped
//                   at its end)
//
// The seeds are plan files named, separated by ':', in MT_FUZZ_PLAN_SEED
// (tests/fuzz/run_fuzz_plan.sh writes them with test_plan); without it only
// the first way runs. An accepted plan is walked as the runtime would walk
// it: graph_dump touches every node, operand, param and input; every RUN's
// nodes are looked up in its frame's offsets (plan_offsets), and every
// kernel blob's bytes are read.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/io.h"
#include "runtime/plan_read.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { SECTIONS = SEC_COUNT_PLUS_ONE - 1, HEADER_BYTES = 24, ENTRY_BYTES = 24, MAX_SEEDS = 8 };

static struct {
    unsigned char *data; // (len)
    size_t len;
} seeds[MAX_SEEDS];
static int nseeds;
static FILE *devnull;

static uint32_t ld32(const unsigned char *d) {
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}
static uint64_t ld64(const unsigned char *d) { return (uint64_t)ld32(d) | (uint64_t)ld32(d + 4) << 32; }
static void st32(unsigned char *d, uint32_t v) {
    for (int i = 0; i < 4; i++) d[i] = (unsigned char)(v >> (8 * i));
}
static void st64(unsigned char *d, uint64_t v) {
    st32(d, (uint32_t)v);
    st32(d + 4, (uint32_t)(v >> 32));
}

// Recomputes each section's crc32 in the table and the header's crc32, as
// plan_write computes them. buf is a plan whose table is intact.
static void redo_crcs(unsigned char *buf) {
    for (int i = 0; i < SECTIONS; i++) {
        unsigned char *e = buf + HEADER_BYTES + i * ENTRY_BYTES;
        st32(e + 4, (uint32_t)crc32(0L, buf + ld64(e + 8), (uInt)ld64(e + 16)));
    }
    st32(buf + 20, (uint32_t)crc32(0L, buf, 20));
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    devnull = fopen("/dev/null", "w");
    const char *list = getenv("MT_FUZZ_PLAN_SEED");
    if (!list || !*list) return 0;
    char *copy = strdup(list), *save = NULL;
    for (char *path = strtok_r(copy, ":", &save); path && nseeds < MAX_SEEDS; path = strtok_r(NULL, ":", &save)) {
        char *d;
        size_t len;
        Arena a = {0};
        char err[512];
        // A seed must itself be a valid plan, or the patches test nothing.
        if (io_read_file(path, &d, &len) != 0 || !plan_parse(d, len, path, &a, err, sizeof err)) {
            fprintf(stderr, "fuzz_plan: seed %s is not a valid plan\n", path);
            abort();
        }
        arena_free(&a);
        seeds[nseeds].data = (unsigned char *)d;
        seeds[nseeds].len = len;
        nseeds++;
    }
    free(copy);
    return 0;
}

// Reads what the runtime would read of an accepted plan's streams and
// kernel blobs, so that an index the reader let through out of range shows.
static unsigned walk(const Plan *p) {
    unsigned sum = 0;
    const Instr *streams[2] = {p->train, p->eval};
    int32_t counts[2] = {p->ntrain, p->neval};
    for (int s = 0; s < 2; s++)
        for (int32_t i = 0; i < counts[s]; i++) {
            const Instr *in = &streams[s][i];
            sum += (unsigned)in->engine + (unsigned)in->event;
            if (in->kind != INS_RUN) continue;
            const int64_t *off = plan_offsets(p, in->part, in->frame);
            for (int k = in->from; k < in->to; k++) {
                const Node *n = p->graph->parts[in->part].nodes.items[k];
                sum += (unsigned)off[k] + (unsigned)n->op;
            }
        }
    const uint8_t *blobs[4] = {p->kernels_bytes, p->bitcode, p->cubin, (const uint8_t *)p->ptx};
    size_t lens[4] = {p->kernels_len, p->bitcode_len, p->cubin_len, p->ptx_len};
    for (int b = 0; b < 4; b++)
        for (size_t i = 0; i < lens[b]; i++) sum += blobs[b][i];
    if (p->cuda_arch) sum += (unsigned)strlen(p->cuda_arch);
    return sum;
}

static void parse(const unsigned char *data, size_t len) {
    Arena a = {0};
    char err[512] = "";
    Plan *p = plan_parse(data, len, "fuzz.plan", &a, err, sizeof err);
    // A refusal must say why, naming the file; an acceptance must not.
    if (!p && strncmp(err, "fuzz.plan: ", 11) != 0) __builtin_trap();
    if (p) {
        if (err[0]) __builtin_trap();
        if (devnull) {
            graph_dump(devnull, p->graph, "fuzz.mt");
            fprintf(devnull, "%u\n", walk(p));
        }
    }
    arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse(data, size);
    if (nseeds == 0 || size < 6) return 0;
    const unsigned char *seed = seeds[data[1] % nseeds].data;
    size_t len = seeds[data[1] % nseeds].len;
    unsigned char *buf = malloc(len);
    if (!buf) return 0;
    memcpy(buf, seed, len);
    int id = (data[0] & 0x7f) % SECTIONS + 1, cut = data[0] & 0x80;
    unsigned char *e = NULL;
    for (int i = 0; i < SECTIONS; i++)
        if (ld32(buf + HEADER_BYTES + i * ENTRY_BYTES) == (uint32_t)id) e = buf + HEADER_BYTES + i * ENTRY_BYTES;
    uint64_t off = ld64(e + 8), sec = ld64(e + 16);
    uint64_t at = sec ? ld32(data + 2) % sec : 0, n = size - 6 < sec - at ? size - 6 : sec - at;
    memcpy(buf + off + at, data + 6, n);
    if (cut) st64(e + 16, at + n);
    redo_crcs(buf);
    parse(buf, len);
    free(buf);
    return 0;
}
