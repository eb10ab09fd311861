#include "runtime/replay.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/store/adamw.h"
#include "runtime/backend/exec.h"
#include "common/trace.h"
#include "common/bf16.h"

static const char *const ENGINE_NAMES[ENG_COUNT] = {"compute", "copy-in", "copy-out", "host", "comm"};

const char *replay_engine_name(int engine) {
    return engine >= 0 && engine < ENG_COUNT ? ENGINE_NAMES[engine] : "no engine";
}

int replay_order_parse(const char *s, ReplayOrder *o, char *err, size_t errcap) {
    char *end;
    *o = (ReplayOrder){REPLAY_EAGER, 0};
    if (!s || !*s || !strcmp(s, "eager")) return 0;
    if (!strcmp(s, "lazy")) {
        o->kind = REPLAY_LAZY;
        return 0;
    }
    for (int k = 0; k < 2; k++) { // random:SEED, threads:SEED
        const char *name = k ? "threads:" : "random:";
        size_t len = strlen(name);
        if (strncmp(s, name, len) != 0 || s[len] < '0' || s[len] > '9') continue;
        errno = 0;
        unsigned long long seed = strtoull(s + len, &end, 10);
        if (!errno && !*end) {
            *o = (ReplayOrder){k ? REPLAY_THREADS : REPLAY_RANDOM, seed};
            return 0;
        }
    }
    snprintf(err, errcap, "MT_REPLAY_ORDER is eager, lazy, random:SEED or threads:SEED (an integer), not '%s'", s);
    return -1;
}

// splitmix64, for the random order
static uint64_t next_random(uint64_t *state) {
    uint64_t x = (*state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Engines in the order each fixed order tries them.
static const int EAGER[ENG_COUNT] = {ENG_COPY_IN, ENG_COMM, ENG_COPY_OUT, ENG_HOST, ENG_COMPUTE};
static const int LAZY[ENG_COUNT] = {ENG_COMPUTE, ENG_HOST, ENG_COPY_OUT, ENG_COMM, ENG_COPY_IN};

// A sharded plan's COPY_IN XFER_SHARD: this rank's slice of the segment's
// weights to its place in the segment's arena region; COPY_OUT XFER_SHARD:
// of the parameter's summed gradients, the elements in this rank's slice.
static void copy_shard(Replay *r, const Instr *in) {
    Backend *be = r->be;
    HostStore *hs = r->hs;
    int64_t lo, hi, at = store_slice(hs, r->p, in->layer, &lo, &hi), elem = in->flags & XFER_BF16 ? 2 : 4;
    if (in->kind == INS_COPY_IN) { // src: the segment's first element
        const void *host = in->flags & XFER_BF16 ? (const void *)(hs->wb + at) : hs->w + at;
        if (hi > lo) be->copy_in(be, in, in->dst + (lo - in->src) * elem, host, (hi - lo) * elem);
        return;
    }
    int64_t a = in->dst > lo ? in->dst : lo, b = in->dst + in->bytes / elem < hi ? in->dst + in->bytes / elem : hi;
    if (b > a)
        be->copy_out_add(be, in, hs->g + at + (a - lo), in->src + (a - in->dst) * elem, (b - a) * elem,
                         in->flags & XFER_BF16 ? GRADS_BF16 : 0);
}

// The stream's first failure (a collective's): kept once, and from then on
// the replay issues nothing (execute), so that this rank joins no later
// collective the others would pair with the wrong one; replay() returns it.
static void replay_fail(Replay *r, const Instr *in, const char *why) {
    int none = 0;
    if (__atomic_compare_exchange_n(&r->failed, &none, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        snprintf(r->failure, sizeof r->failure, "the %s of segment %d on the %s engine: %s",
                 in->kind == INS_ALLGATHER ? "all-gather" : "reduce-scatter", in->layer, replay_engine_name(in->engine),
                 why);
}

static void run_instr(Replay *r, const Instr *in, const int32_t *const *inputs, int last, float *loss) {
    Backend *be = r->be;
    HostStore *hs = r->hs;
    switch ((InsKind)in->kind) {
    case INS_COPY_IN: // the weights as they stream: the fp32 master, or its bf16 copy
        if (store_on_device(hs, r->p, in->layer)) be->opt_copy_in(be, in); // from the device store
        else if (in->flags & XFER_SHARD) copy_shard(r, in);
        else
            be->copy_in(be, in, in->dst, in->flags & XFER_BF16 ? (const void *)(hs->wb + in->src) : hs->w + in->src,
                        in->bytes);
        break;
    case INS_COPY_OUT: // set where the range holds zeros, else added (store_grads_out); a sharded rank's slice
        if (store_on_device(hs, r->p, in->layer)) // into the device store's fp32 accumulators
            be->opt_copy_out(be, in, store_grads_bf16_at(hs, in->dst) ? 1 : store_grads_out(hs, r->p, in));
        else if (in->flags & XFER_SHARD) copy_shard(r, in);
        else if (store_grads_bf16_at(hs, in->dst)) // a layer's bf16 gradients, set once a step: a plain copy
            be->copy_out(be, in, store_grads_bf16_at(hs, in->dst), in->src, in->bytes);
        else if (!store_grads_out(hs, r->p, in))
            be->copy_out_add(be, in, hs->g + in->dst, in->src, in->bytes, in->flags & XFER_BF16 ? GRADS_BF16 : 0);
        else if (in->flags & XFER_BF16) // into zeros: bf16 widened; fp32 a plain copy (no pass on the host)
            be->copy_out_add(be, in, hs->g + in->dst, in->src, in->bytes, GRADS_BF16 | GRADS_SET);
        else be->copy_out(be, in, hs->g + in->dst, in->src, in->bytes);
        break;
    case INS_COPY:
        if (in->flags & XFER_BF16) be->copy_widen(be, in, in->dst, in->src, in->bytes);
        else be->copy(be, in, in->dst, in->src, in->bytes);
        break;
    case INS_ALLGATHER:
    case INS_REDUCE_SCATTER: {
        char why[sizeof r->failure / 2]; // (with replay_fail's words, within failure)
        if (be->collective(be, in, r->dist, why, sizeof why) != 0) replay_fail(r, in, why);
        break;
    }
    case INS_INPUT: be->copy_in(be, in, in->dst, inputs[in->input], in->bytes); break;
    case INS_RUN:
        be->run(be, in, (PartKind)in->part, in->from, in->to, in->frame, in->flags);
        if (r->on_run) r->on_run(r->on_run_ctx, in);
        break;
    case INS_LOSS:
        if (be->read_scalar_async) be->read_scalar_async(be, in, in->src, loss); // set by finish
        else *loss = be->read_scalar(be, in, in->src);
        break;
    case INS_STAT: be->copy_out(be, in, r->stats + in->dst, in->src, in->bytes); break;
    case INS_SAVE: be->copy_out(be, in, r->act + in->dst, in->src, in->bytes); break;
    case INS_LOAD: be->copy_in(be, in, in->dst, r->act + in->src, in->bytes); break;
    case INS_FREE: be->poison(be, in, in->dst, in->bytes); break;
    case INS_NORM:
    case INS_UPDATE:
        if (in->kind == INS_UPDATE) store_update(hs, r->p, in->layer);
        else if (last) store_norm(hs, r->p, in->layer);
        break;
    case INS_RECORD: // the loop fires the event; an asynchronous backend records it on the engine
        if (be->record) be->record(be, in);
        break;
    case INS_WAIT: // the loop holds the engine until the RECORD ran; an asynchronous backend then waits on the device
        if (be->wait) be->wait(be, in, r->recorder[in->event]);
        break;
    case INS_COUNT: break;
    }
}

// One instruction, timed for --trace where the backend asks (backend.h):
// all of a synchronous backend's, the host engine's work of an asynchronous
// one; never the events themselves.
static void execute(Replay *r, const Instr *in, const int32_t *const *inputs, int last, float *loss) {
    Backend *be = r->be;
    int timed = be->trace_host && in->kind != INS_RECORD && in->kind != INS_WAIT &&
                (!be->record || in->kind == INS_NORM || in->kind == INS_UPDATE);
    if (__atomic_load_n(&r->failed, __ATOMIC_ACQUIRE)) return; // (replay_fail)
    double t0 = timed ? trace_clock_s() : 0;
    run_instr(r, in, inputs, last, loss);
    if (timed) be->trace_host(be, in, t0, trace_clock_s());
}

// Says why every engine with instructions left is held (stalled_s 0: a
// deadlock), or (stalled_s > 0) that none made progress for that long, and
// where each engine with instructions left is.
static void deadlock(const Instr *ins, int n, const int *queue, const int *start, const int *pc, const char *stream,
                     double stalled_s, char *err, size_t errcap) {
    size_t used = stalled_s > 0 ? (size_t)snprintf(err, errcap,
                                                   "hang in the %s stream: no engine started or finished "
                                                   "an instruction for %.0f s:",
                                                   stream, stalled_s)
                                : (size_t)snprintf(err, errcap,
                                                   "deadlock in the %s stream: every engine with "
                                                   "instructions left waits:",
                                                   stream);
    for (int e = 0; e < ENG_COUNT && used < errcap; e++) {
        if (pc[e] == start[e + 1]) continue;
        int i = queue[pc[e]], ev = ins[i].event, rec = -1;
        if (ins[i].kind != INS_WAIT) {
            used += (size_t)snprintf(err + used, errcap - used, " %s in instruction %d;", ENGINE_NAMES[e], i);
            continue;
        }
        for (int k = 0; k < n && rec < 0; k++)
            if (ins[k].kind == INS_RECORD && ins[k].event == ev) rec = k;
        if (rec < 0)
            used += (size_t)snprintf(err + used, errcap - used,
                                     " %s at instruction %d (WAIT event %d, which no "
                                     "instruction records);",
                                     ENGINE_NAMES[e], i, ev);
        else
            used += (size_t)snprintf(err + used, errcap - used,
                                     " %s at instruction %d (WAIT event %d, recorded by "
                                     "instruction %d on %s, not yet reached);",
                                     ENGINE_NAMES[e], i, ev, rec, replay_engine_name(ins[rec].engine));
    }
}

// ---------------------------------------------------------------- one thread per engine

// The threaded replay's shared state: every engine's queue, the events, and
// the first failure, under one lock.
typedef struct Engines {
    Replay *r;
    const Instr *ins;
    int n;
    const int32_t *const *inputs;
    int last;
    float *loss;
    const char *stream;
    const int *queue, *start; // engine e runs ins[queue[start[e] .. start[e + 1])], in order
    int *pc;                  // (ENG_COUNT) each engine's next position in queue
    char *fired;              // (nevents)
    int waiting[ENG_COUNT];   // the engine is held by a WAIT whose event has not fired
    double progress_at;       // CLOCK_MONOTONIC seconds: the last time an engine started or finished an instruction
    double stall_s;           // no progress for this long while an engine waits: a hang
    pthread_mutex_t mu;
    pthread_cond_t cv; // (CLOCK_MONOTONIC) broadcast on every RECORD and failure
    int failed;        // a deadlock or a hang: every engine stops
    char *err;
    size_t errcap;
} Engines;

typedef struct EngineThread {
    Engines *e;
    int engine;
    uint64_t rng;     // its random pauses
    int max_pause_us; // 0, 40 or 400, drawn per engine: some run ahead of others
} EngineThread;

enum { HOLD_MS = 50 };

double replay_predicted_step_s(const Plan *p) {
    const char *at = p->schedule ? strstr(p->schedule, "predicted_step_s=") : NULL;
    return at ? strtod(at + strlen("predicted_step_s="), NULL) : 0;
}

// The hang limit: hang_s, or the larger of REPLAY_STALL_S and 10 predicted steps.
// A prediction of inf (a sharded plan for a target with no link between
// its GPUs prices its collectives so) is no prediction: REPLAY_STALL_S; a
// deadline of inf would make the waits' timespec garbage, and they spin.
static double stall_limit_s(const Replay *r) {
    double ten = 10 * replay_predicted_step_s(r->p);
    return r->hang_s > 0 ? r->hang_s : isfinite(ten) && ten > REPLAY_STALL_S ? ten : REPLAY_STALL_S;
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Whether the replay is deadlocked (under E->mu): every engine with
// instructions left is held by a WAIT whose event has not fired, so no
// engine is running anything that could fire one.
static int all_held(const Engines *E) {
    int left = 0;
    for (int e = 0; e < ENG_COUNT; e++) {
        if (E->pc[e] == E->start[e + 1]) continue;
        const Instr *in = &E->ins[E->queue[E->pc[e]]];
        if (!E->waiting[e] || in->kind != INS_WAIT || E->fired[in->event]) return 0;
        left++;
    }
    return left > 0;
}

// Stops every engine with the deadlock message (under E->mu); stalled: it
// was no engine's progress for stall_s, not every engine held.
static void engines_fail(Engines *E, int stalled) {
    E->failed = 1;
    deadlock(E->ins, E->n, E->queue, E->start, E->pc, E->stream, stalled ? E->stall_s : 0, E->err, E->errcap);
    pthread_cond_broadcast(&E->cv);
}

// Progress (under E->mu): an engine started or finished an instruction.
static void engines_progress(Engines *E) { E->progress_at = monotonic_s(); }

static void *engine_main(void *arg) {
    EngineThread *t = arg;
    Engines *E = t->e;
    int e = t->engine;
    for (int k = E->start[e]; k < E->start[e + 1]; k++) {
        const Instr *in = &E->ins[E->queue[k]];
        pthread_mutex_lock(&E->mu);
        E->pc[e] = k;
        engines_progress(E);
        if (in->kind == INS_WAIT && !E->fired[in->event] && !E->failed) {
            E->waiting[e] = 1;
            if (all_held(E)) engines_fail(E, 0); // nothing runs that could fire any of them: at once
            while (!E->fired[in->event] && !E->failed) {
                double deadline = E->progress_at + E->stall_s;
                if (monotonic_s() >= deadline) { // engines may still run, but none has moved for stall_s
                    engines_fail(E, 1);
                    break;
                }
                struct timespec until = {(time_t)deadline, (long)((deadline - (double)(time_t)deadline) * 1e9)};
                pthread_cond_timedwait(&E->cv, &E->mu, &until);
            }
            E->waiting[e] = 0;
        }
        int stop = E->failed;
        pthread_mutex_unlock(&E->mu);
        if (stop) break;
        if (in->kind == INS_WAIT) {
            execute(E->r, in, E->inputs, E->last, E->loss);
            continue;
        }
        if (E->r->hold_ins && E->ins == E->r->p->train && E->queue[k] == E->r->hold_ins - 1) {
            long ms = E->r->hold_ms > 0 ? E->r->hold_ms : HOLD_MS;
            nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000L}, NULL);
        }
        // a random pause before each instruction, so that an event the plan
        // lacks shows as a wrong value rather than passing by luck
        if (t->max_pause_us) {
            struct timespec pause = {0, (long)(next_random(&t->rng) % (uint64_t)t->max_pause_us) * 1000};
            nanosleep(&pause, NULL);
        }
        execute(E->r, in, E->inputs, E->last, E->loss);
        pthread_mutex_lock(&E->mu);
        engines_progress(E); // (a waiter whose deadline passes finds it moved on, and waits again)
        if (in->kind == INS_RECORD) {
            E->fired[in->event] = 1; // everything before it on this engine has run
            pthread_cond_broadcast(&E->cv);
        }
        pthread_mutex_unlock(&E->mu);
    }
    pthread_mutex_lock(&E->mu);
    E->pc[e] = E->start[e + 1];
    if (!E->failed && all_held(E)) engines_fail(E, 0); // the others wait for what this engine never recorded
    pthread_mutex_unlock(&E->mu);
    return NULL;
}

// Replays with one thread per engine: real concurrency, events as condition
// variables, random pauses. A deadlock is reported at once, the moment
// every engine with instructions left is held by a WAIT whose event has not
// fired; a hang (an instruction that never returns, a device that never
// finishes) once no engine has started or finished an instruction for
// stall_limit_s while one waits. Both name every
// waiting instruction. The cpu backend's operations touch only what their
// instruction names, so engines that the plan orders correctly never race.
static int replay_threads(Replay *r, const Instr *ins, int n, const int32_t *const *inputs, int last, float *loss,
                          const int *queue, const int *start, char *fired, const char *stream, char *err,
                          size_t errcap) {
    int pc[ENG_COUNT];
    for (int e = 0; e < ENG_COUNT; e++) pc[e] = start[e];
    Engines E = {.r = r,
                 .ins = ins,
                 .n = n,
                 .inputs = inputs,
                 .last = last,
                 .loss = loss,
                 .stream = stream,
                 .queue = queue,
                 .start = start,
                 .pc = pc,
                 .fired = fired,
                 .err = err,
                 .errcap = errcap,
                 .progress_at = monotonic_s(),
                 .stall_s = stall_limit_s(r)};
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&E.mu, NULL);
    pthread_cond_init(&E.cv, &ca);
    pthread_condattr_destroy(&ca);
    EngineThread t[ENG_COUNT];
    pthread_t tid[ENG_COUNT];
    int started[ENG_COUNT] = {0};
    for (int e = 0; e < ENG_COUNT; e++) {
        static const int PAUSES[3] = {0, 40, 400};
        t[e] = (EngineThread){.e = &E, .engine = e, .rng = r->rng + 0x9E3779B97F4A7C15ull * (uint64_t)(e + 1)};
        t[e].max_pause_us = r->order.kind == REPLAY_STREAMS ? 0 : PAUSES[next_random(&t[e].rng) % 3];
        started[e] = pthread_create(&tid[e], NULL, engine_main, &t[e]) == 0;
        if (!started[e]) engine_main(&t[e]); // (no thread to be had: run it here, in turn)
    }
    for (int e = 0; e < ENG_COUNT; e++)
        if (started[e]) pthread_join(tid[e], NULL);
    next_random(&r->rng); // the next stream pauses differently
    pthread_cond_destroy(&E.cv);
    pthread_mutex_destroy(&E.mu);
    return E.failed ? -1 : 0;
}

int replay(Replay *r, const Instr *ins, int n, const int32_t *const *inputs, int last, float *loss, char *err,
           size_t errcap) {
    const Plan *p = r->p;
    const char *stream = ins == p->train ? "train" : ins == p->eval ? "eval" : "given";
    int *queue = malloc(((size_t)n + 1) * sizeof(int)); // (n) instruction indices, grouped by engine in stream order
    char *fired = calloc((size_t)p->nevents + 1, 1);    // (nevents)
    int *recorder = malloc(((size_t)p->nevents + 1) * sizeof(int)); // (nevents) the engine recording each event
    int start[ENG_COUNT + 1] = {0}, pc[ENG_COUNT], rc = -1;
    *loss = NAN;
    r->failed = 0;
    if (!queue || !fired || !recorder) {
        snprintf(err, errcap, "out of memory replaying the %s stream", stream);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        if (in->engine < 0 || in->engine >= ENG_COUNT ||
            ((in->kind == INS_RECORD || in->kind == INS_WAIT) && (in->event < 0 || in->event >= p->nevents))) {
            snprintf(err, errcap, "%s stream instruction %d: engine %d, event %d: no such engine or event", stream, i,
                     in->engine, in->event);
            goto done;
        }
        start[in->engine + 1]++;
        if (in->kind == INS_RECORD) recorder[in->event] = in->engine;
    }
    for (int e = 0; e < ENG_COUNT; e++) start[e + 1] += start[e];
    for (int e = 0; e < ENG_COUNT; e++) pc[e] = start[e];
    for (int i = 0; i < n; i++) queue[pc[ins[i].engine]++] = i;
    for (int e = 0; e < ENG_COUNT; e++) pc[e] = start[e];
    r->recorder = recorder;
    if (r->be->set_doc_starts && r->be->set_doc_starts(r->be, r->seg_start, err, errcap) != 0) goto done;
    if (!r->be->set_doc_starts && r->seg_start) {
        snprintf(err, errcap, "the %s has no attention with document starts (X.docs)", r->be->name);
        goto done;
    }
    if (r->order.kind == REPLAY_THREADS || r->order.kind == REPLAY_STREAMS) {
        rc = replay_threads(r, ins, n, inputs, last, loss, queue, start, fired, stream, err, errcap);
        goto done;
    }

    for (int left = n; left > 0; left--) {
        // the engines that can run their next instruction now
        int ready[ENG_COUNT], nready = 0;
        for (int k = 0; k < ENG_COUNT; k++) {
            int e = r->order.kind == REPLAY_LAZY ? LAZY[k] : EAGER[k];
            if (pc[e] == start[e + 1]) continue;
            const Instr *in = &ins[queue[pc[e]]];
            if (in->kind != INS_WAIT || fired[in->event]) ready[nready++] = e;
        }
        if (nready == 0) {
            deadlock(ins, n, queue, start, pc, stream, 0, err, errcap);
            goto done;
        }
        int e = r->order.kind == REPLAY_RANDOM ? ready[next_random(&r->rng) % (uint64_t)nready] : ready[0];
        const Instr *in = &ins[queue[pc[e]++]];
        execute(r, in, inputs, last, loss);
        if (in->kind == INS_RECORD) fired[in->event] = 1; // everything before it on its engine has run
    }
    rc = 0;
done:
    if (rc == 0 && r->failed) rc = -1, snprintf(err, errcap, "%s", r->failure);
    // an asynchronous backend: every engine drained, and its first failure
    if (r->be->finish && r->be->finish(r->be, rc ? NULL : err, rc ? 0 : errcap) != 0) rc = -1;
    r->recorder = NULL;
    free(recorder);
    free(queue);
    free(fired);
    return rc;
}

int64_t replay_stats_bytes(const Instr *ins, int n) {
    int64_t bytes = 0;
    for (int i = 0; i < n; i++)
        if (ins[i].kind == INS_STAT && ins[i].dst + ins[i].bytes > bytes) bytes = ins[i].dst + ins[i].bytes;
    return bytes;
}

int64_t replay_experts(const Plan *p, const Instr *ins, int n, int64_t *experts) {
    int64_t layers = 0;
    for (int64_t l = 0; l < p->graph->layers; l++) experts[l] = 0;
    for (int i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        if (in->kind != INS_STAT) continue;
        const Node *nd = p->graph->parts[in->part].nodes.items[in->from];
        if (nd->op != OP_TOP_K) continue;
        layers += experts[in->layer] == 0;
        experts[in->layer] = nd->shape.dims[nd->shape.rank - 1];
    }
    return layers;
}

double replay_stat_at(const Instr *in, const char *stats, int64_t k) {
    if (in->flags & XFER_BF16) {
        uint16_t v;
        memcpy(&v, stats + in->dst + 2 * k, 2);
        return f32_from_bf16(v);
    }
    float v;
    memcpy(&v, stats + in->dst + 4 * k, 4);
    return v;
}

void replay_stats_add(const Plan *p, const Instr *ins, int n, const char *stats, int64_t max_e, double *aux,
                      double *loads) {
    for (int i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        if (in->kind != INS_STAT) continue;
        const Node *nd = p->graph->parts[in->part].nodes.items[in->from];
        if (nd->op != OP_TOP_K) { // a loss add_loss joins
            if (nd->shape.rank == 0) *aux += replay_stat_at(in, stats, 0);
            continue;
        }
        int64_t E = nd->shape.dims[nd->shape.rank - 1], rows = shape_numel(&nd->shape) / E;
        for (int64_t r = 0; r < rows; r++) // (rows, E) 1 where the row took the expert, 0 elsewhere
            for (int64_t e = 0; e < E; e++) loads[in->layer * max_e + e] += replay_stat_at(in, stats, r * E + e) != 0;
    }
}

// Points a part's parameter nodes at layer `layer`'s weights as they stream
// (w: the master, or its bf16 copy widened), and its model inputs at the batch
// (the tail's gradient seed, the loss scale, among them).
static void bind_params_inputs(PartState *ps, const Plan *p, float *w, int64_t layer, const int32_t *const *inputs) {
    const Part *part = ps->part;
    ps->compute = p->graph->train.compute;
    for (int i = 0; i < part->nodes.n; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op == OP_PARAM && i < part->nfwd) ps->val[i] = w + plan_param_elem(p, n->param, layer);
        if (n->op == OP_INPUT && n->src_part == SRC_MODEL_INPUT) ps->val[i] = (void *)inputs[n->src];
    }
}

static void grads_add(const PartState *ps, const Plan *p, HostStore *hs, int64_t layer) {
    for (int i = 0; i < ps->part->grads.n; i++) {
        const Grad *g = ps->part->grads.items[i];
        if (g->of->op != OP_PARAM || !g->grad) continue;
        int64_t at = plan_param_elem(p, g->of->param, layer), n = shape_numel(&g->of->shape);
        uint16_t *gb = store_grads_bf16_at(hs, at);
        const float *v = ps->val[g->grad->id]; // (n) rounded to bf16 where the storage rule stores it so
        if (gb)                                // a layer's bf16 gradient, set once a step (HostStore.gb): exact
            for (int64_t k = 0; k < n; k++) gb[k] = bf16_from_f32(v[k]);
        else grads_accumulate_ref(hs->g + at, v, n, 0);
    }
}

static void *grad_buffer(const PartState *ps, const Node *of) {
    const Grad *g = part_grad_of(ps->part, of);
    return g && g->grad ? ps->val[g->grad->id] : NULL;
}

// The logits the tail's losses read, into out (B, T, V): each
// cross_entropy's first operand, placed at the rows its targets are (all of
// them, or under row tiling the slice of T its targets' OP_SLICE takes).
static int tail_logits(const PartState *tail, const Graph *g, float *out) {
    const Part *part = tail->part;
    int64_t B = g->train.batch, T = g->train.seq, found = 0;
    for (int i = 0; i < part->nfwd; i++) {
        const Node *n = part->nodes.items[i], *tg = n->op == OP_CROSS_ENTROPY ? n->in[1] : NULL;
        if (!tg) continue;
        int64_t t0 = tg->op == OP_SLICE && tg->axis == 1 ? tg->offset : 0;
        const Shape *s = &n->in[0]->shape; // (B, Tc, V)
        if (s->rank != 3 || s->dims[0] != B || t0 + s->dims[1] > T || (tg->op != OP_SLICE && s->dims[1] != T))
            return -1;
        int64_t Tc = s->dims[1], V = s->dims[2];
        const float *src = tail->val[n->in[0]->id];
        for (int64_t b = 0; b < B; b++)
            memcpy(out + (b * T + t0) * V, src + b * Tc * V, (size_t)(Tc * V) * sizeof(float));
        found += Tc;
    }
    return found == T ? 0 : -1;
}

static float reference_pass(const Plan *p, HostStore *hs, const int32_t *const *inputs, const int32_t *seg_start,
                            int backward, float *logits, double *aux, double *const *balance_loads);

float reference_step(const Plan *p, HostStore *hs, const int32_t *const *inputs, const int32_t *seg_start, int backward,
                     double *aux, double *const *balance_loads) {
    return reference_pass(p, hs, inputs, seg_start, backward, NULL, aux, balance_loads);
}

float reference_run(const Plan *p, HostStore *hs, const int32_t *const *inputs, const int32_t *seg_start, int backward,
                    float *logits) {
    return reference_pass(p, hs, inputs, seg_start, backward, logits, NULL, NULL);
}

// Adds layer l's loads, as the masks of the balance rules of its kind hold
// them after its forward (ps), to loads[param] (layers, E).
static void reference_balance_loads(const Plan *p, const PartState *ps, int64_t l, double *const *loads) {
    const Graph *g = p->graph;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        if (!prm->balance_mask || !param_in_layer(g, prm, l)) continue;
        const float *mask = ps->val[prm->balance_mask->id]; // (rows, E): 1 where the row chose the expert
        int64_t E = shape_numel(&prm->shape), rows = shape_numel(&prm->balance_mask->shape) / E;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t e = 0; e < E; e++) loads[i][l * E + e] += mask[r * E + e] != 0;
    }
}

static float reference_pass(const Plan *p, HostStore *hs, const int32_t *const *inputs, const int32_t *seg_start,
                            int backward, float *logits, double *aux, double *const *balance_loads) {
    const Graph *g = p->graph;
    const Part *head = &g->parts[PART_HEAD], *tail = &g->parts[PART_TAIL];
    int64_t L = g->layers;
    PartState hs_head = {0}, hs_tail = {0}, *layers = calloc((size_t)L, sizeof(PartState));
    // (hs->n) the weights the device would see: the master, or under bf16 its copy widened
    float *w = hs->wb ? malloc((size_t)hs->n * sizeof(float) + 1) : hs->w;
    for (int64_t i = 0; hs->wb && w && i < hs->n; i++) w[i] = f32_from_bf16(hs->wb[i]);
    int ok = w && layers && exec_init(&hs_head, head, PREC_F32) == 0 && exec_init(&hs_tail, tail, PREC_F32) == 0;
    for (int64_t l = 0; ok && l < L; l++) ok = exec_init(&layers[l], &g->parts[block_part(g, l)], PREC_F32) == 0;
    int64_t pooled_layers, pooled_rows, E = graph_pooled_experts(g, &pooled_layers, &pooled_rows);
    double *sums = E ? calloc((size_t)(L * 2 * E), sizeof(double)) : NULL; // (L, 2 E) a pooled loss's
    if (E && !sums) ok = 0;
    for (int64_t l = 0; ok && l < L; l++)
        layers[l].pool = (LoadBalancePool){sums, l, L, (double)(pooled_layers * pooled_rows)};
    float loss = NAN;
    if (ok) {
        // layer l runs its kind's block part; the tail takes the last layer's output
        const Node *tx = part_input_from(tail, block_part(g, L - 1));
        bind_params_inputs(&hs_head, p, w, 0, inputs);
        hs_head.seg_start = hs_tail.seg_start = seg_start;
        for (int64_t l = 0; l < L; l++) layers[l].seg_start = seg_start;
        exec_run(&hs_head, 0, head->nfwd);
        for (int64_t l = 0; l < L; l++) {
            const Part *block = layers[l].part;
            bind_params_inputs(&layers[l], p, w, l, inputs);
            layers[l].val[part_input_from(block, PART_HEAD)->id] =
                l == 0 ? hs_head.val[head->output->id] : layers[l - 1].val[layers[l - 1].part->output->id];
            exec_run(&layers[l], 0, block->nfwd);
            if (balance_loads && backward) reference_balance_loads(p, &layers[l], l, balance_loads);
            for (int i = 0; aux && i < block->nfwd; i++) { // the losses add_loss joins, as INS_STAT reports them
                const Node *n = block->nodes.items[i];
                if (n->op == OP_ADD_LOSS) *aux += *(const float *)layers[l].val[n->in[1]->id];
            }
        }
        bind_params_inputs(&hs_tail, p, w, 0, inputs);
        hs_tail.val[tx->id] = layers[L - 1].val[layers[L - 1].part->output->id];
        exec_run(&hs_tail, 0, backward ? tail->nodes.n : tail->nfwd);
        loss = *(float *)hs_tail.val[tail->output->id];
        if (logits && tail_logits(&hs_tail, g, logits) != 0) loss = NAN;
        if (backward) {
            grads_add(&hs_tail, p, hs, 0);
            void *seed = grad_buffer(&hs_tail, tx);
            for (int64_t l = L - 1; l >= 0; l--) {
                const Part *block = layers[l].part;
                layers[l].val[block->grad_seed->id] = seed;
                exec_run(&layers[l], block->nfwd, block->nodes.n);
                grads_add(&layers[l], p, hs, l);
                seed = grad_buffer(&layers[l], part_input_from(block, PART_HEAD));
            }
            hs_head.val[head->grad_seed->id] = seed;
            exec_run(&hs_head, head->nfwd, head->nodes.n);
            grads_add(&hs_head, p, hs, 0);
        }
    }
    for (int64_t l = 0; layers && l < L; l++) exec_free(&layers[l]);
    free(layers);
    free(sums);
    if (w != hs->w) free(w);
    exec_free(&hs_head);
    exec_free(&hs_tail);
    return loss;
}
