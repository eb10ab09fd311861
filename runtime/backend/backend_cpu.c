#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "runtime/store/adamw.h"
#include "runtime/backend/backend.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/dist.h"
#include "common/bf16.h"
#include "common/trace.h"
#include "runtime/backend/exec.h"
#include "runtime/backend/jit.h"

_Static_assert((int)EXEC_SKIP_HEAVY == (int)RUN_SKIP_HEAVY, "exec and plan skip flags agree");

typedef struct Cpu {
    char *arena; // (arena_bytes)
    int64_t arena_bytes;
    PartState head, tail; // their nodes at their offsets
    PartState *frames;    // (nkinds, nframes) each block kind's nodes at each frame's offsets
    int32_t nframes, nkinds;
    const Plan *plan;
    Jit *jit;                 // the plan's kernels; NULL: a plan without them runs the plain kernels
    LoadBalancePool pool;     // a pooled load-balancing loss's sums across the layers (sums NULL: none)
    Trace trace;              // --trace (tracing: trace.f set), every instruction as the replay timed it
    double epoch;             // the trace's time zero (CLOCK_MONOTONIC seconds)
    pthread_mutex_t trace_mu; // engines on threads (MT_REPLAY_ORDER=threads:SEED) trace at once
    const int32_t *seg_start; // (B, T) the micro-batch's document starts (set_doc_starts), or NULL
    Comm comm;                // a sharded plan's collectives: MPI on the arena (opened at the first)
} Cpu;

_Static_assert(sizeof(wchar_t) == 4, "wmemset fills 4-byte words");

void backend_fill_nan(void *dst, int64_t bytes) {
    const uint32_t qnan = 0x7fc00000; // a float's bits, in the host's byte order
    unsigned char pat[4], *d = dst;
    memcpy(pat, &qnan, 4);
    if (((uintptr_t)dst & 3) == 0) { // whole words by glibc's vector stores (1.4 to 1.8 times the doubling's rate
        wchar_t w;                   // past the cache), then the tail bytes
        memcpy(&w, &qnan, 4);
        wmemset((wchar_t *)dst, w, (size_t)(bytes / 4));
        for (int64_t i = bytes / 4 * 4; i < bytes; i++) d[i] = pat[i & 3];
        return;
    }
    for (int64_t i = 0; i < bytes && i < 4; i++) d[i] = pat[i & 3];
    // doubling: each memcpy copies what is already a whole number of patterns
    for (int64_t done = bytes < 4 ? bytes : 4; done < bytes; done *= 2)
        memcpy(d + done, d, (size_t)(done < bytes - done ? done : bytes - done));
}

static void cpu_copy_in(Backend *be, const Instr *in, int64_t dst, const void *host, int64_t bytes) {
    (void)in;
    memcpy(((Cpu *)be->ctx)->arena + dst, host, (size_t)bytes);
}

static void cpu_copy_out_add(Backend *be, const Instr *in, float *host, int64_t src, int64_t bytes, int flags) {
    (void)in; // one thread does every engine's work (the cost model's cpu)
    grads_accumulate_ref(host, ((Cpu *)be->ctx)->arena + src, bytes / (flags & GRADS_BF16 ? 2 : 4), flags);
}

static void cpu_copy_out(Backend *be, const Instr *in, void *host, int64_t src, int64_t bytes) {
    (void)in;
    memcpy(host, ((Cpu *)be->ctx)->arena + src, (size_t)bytes);
}

static void cpu_copy(Backend *be, const Instr *in, int64_t dst, int64_t src, int64_t bytes) {
    (void)in;
    Cpu *c = be->ctx;
    memmove(c->arena + dst, c->arena + src, (size_t)bytes);
}

static void cpu_copy_widen(Backend *be, const Instr *in, int64_t dst, int64_t src, int64_t bytes) {
    (void)in;
    Cpu *c = be->ctx;
    for (int64_t i = 0; i < bytes / 4; i++) {
        uint16_t h;
        memcpy(&h, c->arena + src + 2 * i, 2);
        float f = f32_from_bf16(h);
        memcpy(c->arena + dst + 4 * i, &f, 4);
    }
}

// The collectives with MPI, in place on the arena (comm.c).
static int cpu_collective(Backend *be, const Instr *in, const Dist *d, char *err, size_t errcap) {
    Cpu *c = be->ctx;
    if (!c->comm.dist && comm_open(&c->comm, d, 0, NULL, err, errcap) != 0) return -1;
    return comm_plan_collective(&c->comm, c->plan, in, c->arena, NULL, err, errcap);
}

static void cpu_poison(Backend *be, const Instr *in, int64_t dst, int64_t bytes) {
    (void)in;
    backend_fill_nan(((Cpu *)be->ctx)->arena + dst, bytes);
}

// The one place nodes execute: the kernel-fusion work swaps this body.
static void cpu_run(Backend *be, const Instr *in, PartKind part, int from, int to, int frame, int flags) {
    Cpu *c = be->ctx;
    c->pool.layer = part_is_block(part) ? in->layer : 0;
    if (c->jit) { // generated kernels and library GEMMs
        jit_run(c->jit, part, from, to, flags, c->arena, plan_offsets(c->plan, part, part_is_block(part) ? frame : 0));
        return;
    }
    PartState *ps = part_is_block(part) ? &c->frames[part_kind(part) * c->nframes + frame]
                    : part == PART_HEAD ? &c->head
                                        : &c->tail;
    ps->pool = c->pool;
    ps->seg_start = c->seg_start;
    exec_run_flags(ps, from, to, flags);
}

static int cpu_set_doc_starts(Backend *be, const int32_t *seg_start, char *err, size_t errcap) {
    (void)err, (void)errcap;
    Cpu *c = be->ctx;
    c->seg_start = seg_start;
    if (c->jit) jit_set_doc_starts(c->jit, seg_start);
    return 0;
}

static float cpu_read_scalar(Backend *be, const Instr *in, int64_t src) {
    (void)in;
    float v;
    memcpy(&v, ((Cpu *)be->ctx)->arena + src, 4);
    return v;
}

static void cpu_destroy(Backend *be) {
    Cpu *c = be->ctx;
    exec_free(&c->head);
    exec_free(&c->tail);
    jit_destroy(c->jit);
    comm_close(&c->comm);
    for (int f = 0; c->frames && f < c->nkinds * c->nframes; f++) exec_free(&c->frames[f]);
    if (c->trace.f) {
        char err[1200];
        if (trace_close(&c->trace, err, sizeof err) != 0) fprintf(stderr, "mtrun: %s\n", err);
        pthread_mutex_destroy(&c->trace_mu);
    }
    free(c->frames);
    free(c->arena);
    free(c->pool.sums);
    free(c);
    free(be);
}

static void cpu_trace_host(Backend *be, const Instr *in, double t0, double t1) {
    Cpu *c = be->ctx;
    pthread_mutex_lock(&c->trace_mu);
    trace_instr(&c->trace, c->plan, in, t0 - c->epoch, t1 - t0);
    pthread_mutex_unlock(&c->trace_mu);
}

int backend_cpu_trace(Backend *be, const char *path, char *err, size_t errcap) {
    Cpu *c = be->ctx;
    if (trace_open(&c->trace, path, err, errcap) != 0) return -1;
    c->epoch = trace_clock_s();
    pthread_mutex_init(&c->trace_mu, NULL);
    be->trace_host = cpu_trace_host;
    return 0;
}

Backend *backend_cpu_create(const Plan *p, char *err, size_t errcap) {
    if (p->device_limit > 0 && p->arena_bytes > p->device_limit) {
        snprintf(err, errcap,
                 "the plan's device arena is %lld bytes (%.1f MB) but its target has %lld bytes (%.1f MB) "
                 "of device memory; recompile it for this target",
                 (long long)p->arena_bytes, (double)p->arena_bytes / 1e6, (long long)p->device_limit,
                 (double)p->device_limit / 1e6);
        return NULL;
    }
    if (p->graph->train.compute == DT_BF16 && !p->kernels_len) {
        snprintf(err, errcap,
                 "this bf16 plan carries no kernels; the cpu backend runs bf16 only through the plan's own "
                 "kernels (recompile it with mtc)");
        return NULL;
    }
    if (p->nframes < 1) {
        snprintf(err, errcap, "the plan has %d block frames; a block needs at least one", p->nframes);
        return NULL;
    }
    Backend *be = calloc(1, sizeof *be);
    Cpu *c = calloc(1, sizeof *c);
    void *arena = NULL;
    // exactly the arena: a read or write past it is a fault under a sanitizer, not a quiet pass
    if (be && c && posix_memalign(&arena, 64, p->arena_bytes ? (size_t)p->arena_bytes : 1) != 0) arena = NULL;
    if (c) c->frames = calloc((size_t)p->graph->nkinds * (size_t)p->nframes, sizeof(PartState));
    if (!be || !c || !arena || !c->frames) {
        snprintf(err, errcap, "cannot allocate the %lld-byte cpu arena", (long long)p->arena_bytes);
        free(arena);
        if (c) free(c->frames);
        free(c);
        free(be);
        return NULL;
    }
    c->arena = arena;
    c->arena_bytes = p->arena_bytes;
    c->nframes = p->nframes;
    c->nkinds = p->graph->nkinds;
    c->plan = p;
    backend_fill_nan(c->arena, p->arena_bytes); // nothing written yet: a read of it shows in the loss
    *be = (Backend){.name = "cpu backend",
                    .ctx = c,
                    .copy_in = cpu_copy_in,
                    .copy_out_add = cpu_copy_out_add,
                    .copy_out = cpu_copy_out,
                    .copy = cpu_copy,
                    .copy_widen = cpu_copy_widen,
                    .collective = cpu_collective,
                    .poison = cpu_poison,
                    .run = cpu_run,
                    .set_doc_starts = cpu_set_doc_starts,
                    .read_scalar = cpu_read_scalar,
                    .destroy = cpu_destroy};
    const Graph *g = p->graph;
    int ok = exec_init_at(&c->head, &g->parts[PART_HEAD], PREC_F32, c->arena, plan_offsets(p, PART_HEAD, 0)) == 0 &&
             exec_init_at(&c->tail, &g->parts[PART_TAIL], PREC_F32, c->arena, plan_offsets(p, PART_TAIL, 0)) == 0;
    for (int f = 0; ok && f < g->nkinds * p->nframes; f++) {
        int pk = kind_part(f / p->nframes);
        ok = exec_init_at(&c->frames[f], &g->parts[pk], PREC_F32, c->arena, plan_offsets(p, pk, f % p->nframes)) == 0;
    }
    int64_t pooled_layers, pooled_rows, E = graph_pooled_experts(g, &pooled_layers, &pooled_rows);
    c->pool = (LoadBalancePool){.layers = g->layers, .rows = (double)(pooled_layers * pooled_rows)};
    if (ok && E && !(c->pool.sums = calloc((size_t)(g->layers * 2 * E), sizeof(double)))) ok = 0;
    if (!ok) {
        snprintf(err, errcap, "out of memory");
        cpu_destroy(be);
        return NULL;
    }
    if (p->kernels_len &&
        !(c->jit = jit_create(g, p->kernels_bytes, p->kernels_len, p->bitcode, p->bitcode_len, err, errcap))) {
        cpu_destroy(be);
        return NULL;
    }
    if (c->jit) jit_set_pool(c->jit, &c->pool);
    return be;
}
