// test_replay: the multi-engine replay and the cpu backend.
//
// - INS_FREE and the backend's poison fill exactly their bytes with quiet
//   NaNs; the arena starts as NaN.
// - A plan whose arena exceeds its target's device memory is refused with a
//   message naming both byte counts.
// - With an update pending from a previous step, one micro-batch of the
//   plan under every replay order gives the loss and the gradients of the
//   reference (flush, then the unstreamed step).
// - The replay is adversarial: a dropped RECORD is a deadlock reported with
//   the instruction and the event under every order; each dropped WAIT is
//   run under every order, and the one that holds compute until the first
//   layer's weights arrive must show as a wrong loss or wrong gradients
//   (or wrong squared norms from the stream's INS_NORM).
// - One thread per engine (test_threads): the same, concurrently, with
//   random pauses; a dropped RECORD is a deadlock reported at once.
// - --held (test_held): an engine held 31 s inside an instruction that
//   another engine waits for (longer than the old 30 s hang limit) finishes
//   with the reference's outcome; held 3 s under a 1 s limit, it is
//   reported as a hang, naming the held engine.
//
// usage: test_replay MTC WORKDIR [--held] MODEL.mt [MTC FLAGS...]  (from the project root)
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "runtime/backend/blas_core.h"
#include "runtime/plan_read.h"
#include "runtime/replay.h"
#include "tests/check.h"

static int is_qnan(const void *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return u == 0x7fc00000u;
}

// What one micro-batch gives: its loss and each segment's squared gradient norm.
typedef struct Outcome {
    int rc;
    float loss;
    double *sq;      // (nseg)
    double *by_norm; // (nseg) what the stream's INS_NORM computed; NAN: none ran
    char err[2048];
} Outcome;

enum { ORDERS = 4 };
static const char *const ORDER_NAMES[ORDERS] = {"eager", "lazy", "random:1", "random:2"};

static void batch(const Plan *p, int32_t *tokens, int32_t *targets, int which) {
    int64_t n = p->graph->train.batch * p->graph->train.seq;
    for (int64_t i = 0; i < n; i++) {
        tokens[i] = (int32_t)((i * 7919 + which * 104729) % 251);
        targets[i] = (int32_t)((i * 31 + 7 + which) % 251);
    }
}

// A state with an update pending: the reference's step on batch 0, its
// norms, every segment pending.
static void pending_state(const Plan *p, HostStore *hs, const int32_t *const *inputs) {
    store_init(hs, p, 7, NULL, 0);
    memset(hs->m, 0, (size_t)hs->n * sizeof(float));
    memset(hs->v, 0, (size_t)hs->n * sizeof(float));
    memset(hs->g, 0, (size_t)hs->n * sizeof(float));
    reference_step(p, hs, inputs, NULL, 1, NULL, NULL);
    AdamWStep s =
        {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .t = 1, .grad_scale = 1};
    for (int64_t i = 0; i < hs->nseg; i++) hs->seg[i] = (StoreSegment){.sq_norm = NAN, .pending = 1, .step = s};
}

static void outcome_norms(const Plan *p, HostStore *hs, Outcome *o) {
    for (int64_t s = 0; s < hs->nseg; s++) {
        store_norm(hs, p, s + SEG_FIRST);
        o->sq[s] = hs->seg[s].sq_norm;
    }
}

// The expected outcome: the pending update applied, then the reference on batch 1.
static void expected(const Plan *p, HostStore *hs, const int32_t *const *in0, const int32_t *const *in1, Outcome *o) {
    pending_state(p, hs, in0);
    store_flush(hs, p);
    o->loss = reference_step(p, hs, in1, NULL, 1, NULL, NULL);
    o->rc = 0;
    outcome_norms(p, hs, o);
}

static void replayed(const Plan *p, Backend *be, HostStore *hs, char *act, const Instr *ins, int n, int order,
                     const int32_t *const *in0, const int32_t *const *in1, Outcome *o) {
    pending_state(p, hs, in0);
    Replay r = {.p = p, .be = be, .hs = hs, .act = act};
    replay_order_parse(ORDER_NAMES[order], &r.order, o->err, sizeof o->err);
    r.rng = r.order.seed;
    backend_fill_nan(act, p->host_act_bytes);
    be->poison(be, NULL, 0, p->arena_bytes); // nothing left from the last run can stand in for a missing copy
    o->rc = replay(&r, ins, n, in1, 1, &o->loss, o->err, sizeof o->err);
    for (int64_t s = 0; s < hs->nseg; s++) o->by_norm[s] = hs->seg[s].sq_norm;
    store_flush(hs, p); // whatever the stream left pending (nothing, when it updates every layer)
    outcome_norms(p, hs, o);
}

// replayed() on one thread per engine with the given seed, a WAIT held 2 s a hang.
static void threaded(const Plan *p, Backend *be, HostStore *hs, char *act, const Instr *ins, int n, uint64_t seed,
                     const int32_t *const *in0, const int32_t *const *in1, Outcome *o) {
    pending_state(p, hs, in0);
    Replay r = {.p = p, .be = be, .hs = hs, .act = act, .order = {REPLAY_THREADS, seed}, .rng = seed, .hang_s = 2};
    backend_fill_nan(act, p->host_act_bytes);
    be->poison(be, NULL, 0, p->arena_bytes);
    o->rc = replay(&r, ins, n, in1, 1, &o->loss, o->err, sizeof o->err);
    for (int64_t s = 0; s < hs->nseg; s++) o->by_norm[s] = hs->seg[s].sq_norm;
    store_flush(hs, p);
    outcome_norms(p, hs, o);
}

static int same(const Outcome *a, const Outcome *b, int64_t nseg) {
    if (a->rc || b->rc || !(fabsf(a->loss - b->loss) <= 1e-5f * fabsf(b->loss))) return 0;
    for (int64_t s = 0; s < nseg; s++)
        if (!(fabs(a->sq[s] - b->sq[s]) <= 1e-4 * b->sq[s] + 1e-30) ||
            (!isnan(a->by_norm[s]) && !(fabs(a->by_norm[s] - b->sq[s]) <= 1e-4 * b->sq[s] + 1e-30)))
            return 0;
    return 1;
}

// What every replay test starts from: the cpu backend, a store, the host
// activations, two batches and the reference's outcome of a micro-batch on
// them with an update pending (want); got for the replays to fill.
typedef struct Fixture {
    Backend *be;
    HostStore hs;
    char *act;                      // (host_act_bytes + 1)
    int32_t *tok;                   // (4, B*T): tokens and targets of batch 0, then of batch 1
    const int32_t *in0[3], *in1[3]; // batch 0's and batch 1's tokens, targets and loss scale (1)
    Outcome want, got;
} Fixture;

// 0, or -1 after reporting a failure.
static int fixture_open(Fixture *f, const Plan *p) {
    char err[1024];
    memset(f, 0, sizeof *f);
    f->be = backend_cpu_create(p, err, sizeof err);
    f->act = malloc(p->host_act_bytes + 1);
    int64_t BT = p->graph->train.batch * p->graph->train.seq;
    f->tok = malloc((size_t)BT * 16);
    if (!f->be || !f->act || !f->tok || store_alloc(&f->hs, p) != 0) {
        FAIL("setup: %s", f->be ? "out of memory" : err);
        return -1;
    }
    batch(p, f->tok, f->tok + BT, 0);
    batch(p, f->tok + 2 * BT, f->tok + 3 * BT, 1);
    static const float one = 1;
    f->in0[0] = f->tok, f->in0[1] = f->tok + BT, f->in1[0] = f->tok + 2 * BT, f->in1[1] = f->tok + 3 * BT;
    f->in0[2] = f->in1[2] = (const int32_t *)(const void *)&one;
    f->want.sq = calloc((size_t)f->hs.nseg, sizeof(double));
    f->got.sq = calloc((size_t)f->hs.nseg, sizeof(double));
    f->got.by_norm = calloc((size_t)f->hs.nseg, sizeof(double));
    expected(p, &f->hs, f->in0, f->in1, &f->want);
    return 0;
}

static void fixture_close(Fixture *f) {
    free(f->want.sq);
    free(f->got.sq);
    free(f->got.by_norm);
    free(f->tok);
    free(f->act);
    store_free(&f->hs);
    f->be->destroy(f->be);
}

static void test_poison(const Plan *p) {
    char err[1024];
    Backend *be = backend_cpu_create(p, err, sizeof err);
    CHECK(be, "backend: %s", err);
    if (!be) return;
    float ones[16], got[16];
    for (int i = 0; i < 16; i++) ones[i] = 1.0f;
    CHECK(is_qnan(&(float){be->read_scalar(be, NULL, 0)}), "the arena does not start as NaN");
    be->copy_in(be, NULL, 256, ones, sizeof ones);
    Instr free_ins = {.kind = INS_FREE, .engine = ENG_COMPUTE, .dst = 256 + 16, .bytes = 32};
    HostStore hs;
    store_alloc(&hs, p);
    Replay r = {.p = p, .be = be, .hs = &hs};
    float loss;
    CHECK(replay(&r, &free_ins, 1, NULL, 1, &loss, err, sizeof err) == 0, "a lone FREE: %s", err);
    be->copy_out(be, NULL, got, 256, sizeof got);
    int ok = 1;
    for (int i = 0; i < 16; i++) ok &= (i >= 4 && i < 12) ? is_qnan(&got[i]) : got[i] == 1.0f;
    CHECK(ok, "FREE of floats 4..11 of 16: not exactly those quiet NaNs");
    unsigned char bytes[16];
    memset(bytes, 0xAB, sizeof bytes);
    backend_fill_nan(bytes + 1, 7);
    static const unsigned char want[16] = {0xAB, 0x00, 0x00, 0xc0, 0x7f, 0x00, 0x00, 0xc0,
                                           0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB};
    CHECK(!memcmp(bytes, want, sizeof want), "backend_fill_nan of 7 bytes at an odd address");
    store_free(&hs);
    be->destroy(be);
    if (!check_failures) printf("ok   FREE poisons exactly its region with quiet NaNs; the arena starts as NaN\n");
}

static void test_limit(const Plan *p) {
    Plan q = *p;
    char err[1024] = "", a[32], l[32];
    q.device_limit = p->arena_bytes - 1;
    Backend *be = backend_cpu_create(&q, err, sizeof err);
    snprintf(a, sizeof a, "%lld", (long long)q.arena_bytes);
    snprintf(l, sizeof l, "%lld", (long long)q.device_limit);
    CHECK(!be && strstr(err, a) && strstr(err, l), "an arena 1 byte over the device limit: %s", be ? "accepted" : err);
    if (be) be->destroy(be);
    else printf("ok   refused: %s\n", err);
}

static void drop(const Plan *p, int k, Instr *out) {
    memcpy(out, p->train, (size_t)k * sizeof(Instr));
    memcpy(out + k, p->train + k + 1, (size_t)(p->ntrain - k - 1) * sizeof(Instr));
}

static void test_orders(const Plan *p) {
    Fixture f;
    if (fixture_open(&f, p) != 0) return;

    // the plan as written, under every order
    for (int o = 0; o < ORDERS; o++) {
        replayed(p, f.be, &f.hs, f.act, p->train, p->ntrain, o, f.in0, f.in1, &f.got);
        CHECK(same(&f.got, &f.want, f.hs.nseg), "the plan under %s: loss %g (%s), reference %g", ORDER_NAMES[o],
              f.got.loss, f.got.rc ? f.got.err : "ran", f.want.loss);
    }
    printf("ok   with an update pending, the plan's micro-batch equals the reference under every order (loss %.6f)\n",
           f.want.loss);

    Instr *mut = malloc((size_t)p->ntrain * sizeof(Instr));
    // a RECORD some WAIT needs, dropped: a deadlock under every order
    int rec = -1;
    for (int i = 0; i < p->ntrain && rec < 0; i++)
        for (int j = 0; j < p->ntrain && rec < 0 && p->train[i].kind == INS_RECORD; j++)
            if (p->train[j].kind == INS_WAIT && p->train[j].event == p->train[i].event) rec = i;
    if (rec >= 0) {
        drop(p, rec, mut);
        for (int o = 0; o < ORDERS; o++) {
            replayed(p, f.be, &f.hs, f.act, mut, p->ntrain - 1, o, f.in0, f.in1, &f.got);
            CHECK(f.got.rc != 0 && strstr(f.got.err, "deadlock") && strstr(f.got.err, "instruction") &&
                      strstr(f.got.err, "event"),
                  "dropped RECORD %d under %s: %s", rec, ORDER_NAMES[o], f.got.rc ? f.got.err : "no deadlock reported");
        }
        printf("ok   a dropped RECORD deadlocks under every order: %s\n", f.got.err);
    } else {
        printf("note: this plan has no events (one engine)\n");
    }

    // every WAIT dropped in turn; the one holding compute for the first
    // block weights must be caught
    int waits = 0, caught = 0, key = -1;
    for (int i = 0; i < p->ntrain && key < 0; i++) {
        if (p->train[i].kind != INS_COPY_IN || p->train[i].layer != 0 || p->train[i].engine == ENG_COMPUTE) continue;
        for (int j = i + 1; j < p->ntrain && key < 0; j++) // its engine's next RECORD, and compute's WAIT for it
            if (p->train[j].kind == INS_RECORD && p->train[j].engine == p->train[i].engine)
                for (int k = 0; k < p->ntrain && key < 0; k++)
                    if (p->train[k].kind == INS_WAIT && p->train[k].event == p->train[j].event &&
                        p->train[k].engine == ENG_COMPUTE)
                        key = k;
    }
    for (int k = 0; k < p->ntrain; k++) {
        if (p->train[k].kind != INS_WAIT) continue;
        drop(p, k, mut);
        int hit = 0;
        const char *how = "";
        for (int o = 0; o < ORDERS && !hit; o++) {
            replayed(p, f.be, &f.hs, f.act, mut, p->ntrain - 1, o, f.in0, f.in1, &f.got);
            hit = !same(&f.got, &f.want, f.hs.nseg);
            how = ORDER_NAMES[o];
        }
        waits++;
        caught += hit;
        if (hit)
            printf("     dropped WAIT %d (%s, event %d): caught under %s (%s)\n", k,
                   replay_engine_name(p->train[k].engine), p->train[k].event, how,
                   f.got.rc ? f.got.err
                   : isfinite(f.got.loss) && fabsf(f.got.loss - f.want.loss) <= 1e-5f * f.want.loss
                       ? "wrong gradients or norms"
                       : "wrong loss");
        else
            printf("     dropped WAIT %d (%s, event %d): not observable in one micro-batch\n", k,
                   replay_engine_name(p->train[k].engine), p->train[k].event);
        if (k == key) CHECK(hit, "dropping WAIT %d (compute waits for layer 0's weights) went unnoticed", k);
    }
    if (waits) {
        CHECK(key >= 0, "no compute WAIT for layer 0's weight copy found");
        printf("ok   %d of %d dropped WAITs change the loss or the gradients under some order\n", caught, waits);
    }
    free(mut);
    fixture_close(&f);
}

// One thread per engine (MT_REPLAY_ORDER=threads:SEED), as a GPU runs its
// streams: the plan as written equals the reference under three seeds; a
// dropped RECORD is reported as a hang; and dropping WAITs one at a time,
// each under up to six seeds, at least 10 of them (or all, in a plan with
// fewer) show as a wrong loss, wrong gradients or a hang.
static void test_threads(const Plan *p) {
    Fixture f;
    if (fixture_open(&f, p) != 0) return;
    Instr *mut = malloc((size_t)p->ntrain * sizeof(Instr));
    for (uint64_t seed = 1; seed <= 3; seed++) {
        threaded(p, f.be, &f.hs, f.act, p->train, p->ntrain, seed, f.in0, f.in1, &f.got);
        CHECK(same(&f.got, &f.want, f.hs.nseg), "the plan on threads (seed %llu): loss %g (%s), reference %g",
              (unsigned long long)seed, f.got.loss, f.got.rc ? f.got.err : "ran", f.want.loss);
    }
    printf("ok   one thread per engine, three seeds: the reference's loss and gradients\n");
    int rec = -1, waits = 0, caught = 0;
    for (int i = 0; i < p->ntrain && rec < 0; i++)
        for (int j = 0; j < p->ntrain && rec < 0 && p->train[i].kind == INS_RECORD; j++)
            if (p->train[j].kind == INS_WAIT && p->train[j].event == p->train[i].event) rec = i;
    if (rec >= 0) {
        drop(p, rec, mut);
        threaded(p, f.be, &f.hs, f.act, mut, p->ntrain - 1, 1, f.in0, f.in1, &f.got);
        CHECK(f.got.rc != 0 && strstr(f.got.err, "instruction") && strstr(f.got.err, "event"),
              "dropped RECORD %d on threads: %s", rec, f.got.rc ? f.got.err : "no hang reported");
        if (f.got.rc) printf("ok   a dropped RECORD is reported as a hang: %.160s...\n", f.got.err);
    }
    for (int k = 0; k < p->ntrain; k++) {
        if (p->train[k].kind != INS_WAIT) continue;
        drop(p, k, mut);
        int hit = 0;
        for (uint64_t seed = 1; seed <= 6 && !hit; seed++) {
            threaded(p, f.be, &f.hs, f.act, mut, p->ntrain - 1, seed, f.in0, f.in1, &f.got);
            hit = !same(&f.got, &f.want, f.hs.nseg);
        }
        waits++;
        caught += hit;
    }
    int need = waits < 10 ? waits : 10;
    CHECK(caught >= need, "on threads only %d of %d dropped WAITs were caught (need %d)", caught, waits, need);
    printf("%s   on threads, %d of %d dropped WAITs change the loss, the gradients or hang\n",
           caught >= need ? "ok" : "FAIL", caught, waits);
    free(mut);
    fixture_close(&f);
}

// The index of layer 0's first weight copy on an engine other than
// compute whose RECORD a compute WAIT waits for; -1 when none.
static int awaited_copy(const Plan *p) {
    for (int i = 0; i < p->ntrain; i++) {
        if (p->train[i].kind != INS_COPY_IN || p->train[i].layer != 0 || p->train[i].engine == ENG_COMPUTE) continue;
        for (int j = i + 1; j < p->ntrain; j++)
            if (p->train[j].kind == INS_RECORD && p->train[j].engine == p->train[i].engine)
                for (int k = 0; k < p->ntrain; k++)
                    if (p->train[k].kind == INS_WAIT && p->train[k].event == p->train[j].event &&
                        p->train[k].engine == ENG_COMPUTE)
                        return i;
    }
    return -1;
}

// A held engine: compute waits on the copy that is held hold_ms inside its
// instruction, under the given hang limit (0: the default, REPLAY_STALL_S).
static void held(const Plan *p, Backend *be, HostStore *hs, char *act, int hold, int hold_ms, int hang_s,
                 const int32_t *const *in0, const int32_t *const *in1, Outcome *o) {
    pending_state(p, hs, in0);
    Replay r = {.p = p,
                .be = be,
                .hs = hs,
                .act = act,
                .order = {REPLAY_STREAMS, 1},
                .rng = 1,
                .hang_s = hang_s,
                .hold_ins = hold + 1,
                .hold_ms = hold_ms};
    backend_fill_nan(act, p->host_act_bytes);
    be->poison(be, NULL, 0, p->arena_bytes);
    o->rc = replay(&r, p->train, p->ntrain, in1, 1, &o->loss, o->err, sizeof o->err);
    for (int64_t s = 0; s < hs->nseg; s++) o->by_norm[s] = hs->seg[s].sq_norm;
    store_flush(hs, p);
    outcome_norms(p, hs, o);
}

static void test_held(const Plan *p) {
    Fixture f;
    int hold = awaited_copy(p);
    if (hold < 0) {
        FAIL("setup: no copy that compute waits for");
        return;
    }
    if (fixture_open(&f, p) != 0) return;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    held(p, f.be, &f.hs, f.act, hold, 31000, 0, f.in0, f.in1, &f.got);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(same(&f.got, &f.want, f.hs.nseg) && s >= 31.0, "instruction %d held 31 s: %s after %.1f s", hold,
          f.got.rc ? f.got.err : "a wrong outcome", s);
    if (!f.got.rc)
        printf("ok   instruction %d (%s) held %.1f s, compute waiting on it: the reference's outcome\n", hold,
               replay_engine_name(p->train[hold].engine), s);
    held(p, f.be, &f.hs, f.act, hold, 3000, 1, f.in0, f.in1, &f.got);
    char in_held[64];
    snprintf(in_held, sizeof in_held, "%s in instruction %d;", replay_engine_name(p->train[hold].engine), hold);
    CHECK(f.got.rc != 0 && strstr(f.got.err, "hang") && strstr(f.got.err, in_held), "held 3 s under a 1 s limit: %s",
          f.got.rc ? f.got.err : "no hang reported");
    if (f.got.rc) printf("ok   held 3 s under a 1 s limit: %.200s\n", f.got.err);
    fixture_close(&f);
}

int main(int argc, char **argv) {
    mt_blas_core_pick(); // OpenBLAS's kernels for this CPU, as mtrun picks them
    if (argc < 4) {
        fprintf(stderr, "usage: test_replay MTC WORKDIR [--held] MODEL.mt [MTC FLAGS...]\n");
        return 2;
    }
    char cmd[8192], path[4096], err[1024];
    int held_only = !strcmp(argv[3], "--held");
    if (held_only && argc < 5) return 2;
    if (held_only) argv[3] = argv[2], argv[2] = argv[1], argv[1] = argv[0], argv++, argc--; // drop --held
    mkdir(argv[2], 0755);
    snprintf(path, sizeof path, "%s/plan.bin", argv[2]);
    int n = snprintf(cmd, sizeof cmd, "'%s' '%s' -o '%s'", argv[1], argv[3], path);
    for (int i = 4; i < argc; i++) n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", argv[i]);
    if (system(cmd) != 0) {
        printf("FAIL: %s\n", cmd);
        return 1;
    }
    Arena a = {0};
    Plan *p = plan_read(path, &a, err, sizeof err);
    if (!p) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    printf("plan: %s: %s, %d train instructions, %d events\n", cmd, p->schedule ? p->schedule : "", p->ntrain,
           p->nevents);
    if (held_only) {
        test_held(p);
    } else {
        test_poison(p);
        test_limit(p);
        test_orders(p);
        if (p->nevents) test_threads(p);
    }
    arena_free(&a);
    return check_summary("test_replay");
}
