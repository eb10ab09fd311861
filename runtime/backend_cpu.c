#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "exec.h"

typedef struct Cpu {
    char *arena;               // (arena_bytes)
    PartState parts[PART_COUNT];
} Cpu;

static void cpu_copy_in(Backend *be, int64_t dst, const void *host, int64_t bytes) {
    memcpy(((Cpu *)be->ctx)->arena + dst, host, (size_t)bytes);
}

static void cpu_copy_out_add(Backend *be, float *host, int64_t src, int64_t bytes) {
    const float *a = (const float *)(((Cpu *)be->ctx)->arena + src);
    for (int64_t i = 0; i < bytes / 4; i++) host[i] += a[i];
}

static void cpu_copy(Backend *be, int64_t dst, int64_t src, int64_t bytes) {
    Cpu *c = be->ctx;
    memmove(c->arena + dst, c->arena + src, (size_t)bytes);
}

static void cpu_run(Backend *be, PartKind part, int from, int to) { exec_run(&((Cpu *)be->ctx)->parts[part], from, to); }

static float cpu_read_scalar(Backend *be, int64_t src) {
    float v;
    memcpy(&v, ((Cpu *)be->ctx)->arena + src, 4);
    return v;
}

static void cpu_destroy(Backend *be) {
    Cpu *c = be->ctx;
    for (int p = 0; p < PART_COUNT; p++) exec_free(&c->parts[p]);
    free(c->arena);
    free(c);
    free(be);
}

Backend *backend_cpu_create(const Plan *p, char *err, size_t errcap) {
    Backend *be = calloc(1, sizeof *be);
    Cpu *c = calloc(1, sizeof *c);
    size_t bytes = ((size_t)p->arena_bytes + 63) & ~(size_t)63;
    if (be && c) c->arena = aligned_alloc(64, bytes ? bytes : 64);
    if (!be || !c || !c->arena) {
        snprintf(err, errcap, "cannot allocate the %lld-byte cpu arena", (long long)p->arena_bytes);
        if (c) free(c->arena);
        free(c);
        free(be);
        return NULL;
    }
    memset(c->arena, 0, bytes);
    *be = (Backend){.name = "cpu", .ctx = c, .copy_in = cpu_copy_in, .copy_out_add = cpu_copy_out_add,
                    .copy = cpu_copy, .run = cpu_run, .read_scalar = cpu_read_scalar, .destroy = cpu_destroy};
    for (int pk = 0; pk < PART_COUNT; pk++)
        if (exec_init_at(&c->parts[pk], &p->graph->parts[pk], PREC_F32, c->arena, p->node_offset[pk]) != 0) {
            snprintf(err, errcap, "out of memory");
            cpu_destroy(be);
            return NULL;
        }
    return be;
}
