// step_bench: one training step of a model on the cpu backend, next to
// OpenBLAS's sgemm rate measured in the same run. GPT-2 small at batch 4,
// sequence 64, fp32 by default (--dtype bf16: the bf16 plan):
//
//     build/bench/step_bench [MODEL.mt] [--batch N] [--seq N] [--steps N] [--dtype f32|bf16] [--target PROFILE]
//
// With --target (a profile from `mtrun --calibrate --out FILE`, measured on
// this machine), the plan is made for that profile and the bench also
// prints mtc's predicted step time for it against the measured one: the
// median step, as mtrun --calibrate takes its rates' medians, so that on a
// machine others share both stand for a typical share of it.
//
// Prints ms/step and achieved GFLOP/s, counting the GEMM FLOPs of forward
// and backward once (the recomputed forward is not counted: it is overhead),
// the share of the step spent outside GEMMs, and the rate of one sgemm of
// the model's MLP shape, with the ratio of the two rates. The step runs the
// plan's fused kernels through the JIT. Stepped in turn with it, so that a
// noisy machine slows all alike: the f32 plan on a second backend running
// the plain reference kernels, and the plan of the other compute dtype
// (bf16 for an f32 step, f32 for a bf16 one) through the JIT; the ratios of
// the step times are printed (STEP_BENCH_REFERENCE=1: the reference alone).
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/io.h"
#include "compiler/emit/emit_llvm.h"
#include "compiler/fuse/fuse.h"
#include "common/graph.h"
#include "compiler/schedule/schedule.h"
#include "runtime/store/adamw.h"
#include "runtime/backend/blas_core.h"
#include "runtime/backend/exec.h"
#include "runtime/backend/jit.h"
#include "runtime/replay.h"
#include "compiler/compile.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// 2 M N K over the matmuls of a part's nodes [from, to).
static double gemm_flops(const Part *part, int from, int to) {
    double f = 0;
    for (int i = from; i < to; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op != OP_MATMUL) continue;
        const Shape *a = &n->in[0]->shape;
        double k = (double)(n->trans_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1]);
        f += 2.0 * (double)shape_numel(&n->shape) * k;
    }
    return f;
}

// The best of several runs of C[M, N] = A[M, K] @ B[K, N], in GFLOP/s.
static double sgemm_rate(int M, int N, int K) {
    float *A = calloc((size_t)M * K, 4), *B = calloc((size_t)K * N, 4), *C = calloc((size_t)M * N, 4);
    double best = 0;
    for (int r = 0; r < 7; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        double rate = 2.0 * M * N * K / (now_s() - t0) / 1e9;
        best = rate > best ? rate : best;
    }
    free(A);
    free(B);
    free(C);
    return best;
}

enum { STEP_MAX = 1000 }; // timed steps at most

// One plan on its own backend and host store, stepped by the bench.
typedef struct Contestant {
    const char *what;
    Graph *g;
    Plan *p;
    Backend *be;
    HostStore hs;
    char *act; // (p->host_act_bytes) the host activation store
    uint8_t *kir, *bc;
    KirProgram kp; // the fused kernels (unless plain)
    double
        *kernel_s[PART_COUNT]; // (steps, kp.parts[p].n) each kernel's seconds in each timed step (STEP_BENCH_KERNELS)
    double best, best_fb, best_outside;
    double step_s[STEP_MAX]; // each timed step's seconds
    int nsteps;
} Contestant;

// The graph at compute dtype `compute` (1 f32, 2 bf16), scheduled for tgt,
// with its fused kernels (unless plain) on a cpu backend. 0, or -1 reported.
static int contestant_make(Contestant *c, const char *what, const Model *m, SemaOptions opt, int compute, int plain,
                           const Target *tgt, const SchedRequest *req, Arena *a, Diag *d) {
    char err[512] = "out of memory";
    opt.compute = compute;
    *c = (Contestant){.what = what, .best = 1e30, .best_fb = 1e30};
    CompileRequest cr = {.stage = COMPILE_PLAN, .target = tgt, .sema = opt, .tile = 1, .sched = *req};
    Compiled comp; // (the one compile path: fused once, Graph.kernels)
    if (compile_model(m, &cr, a, d, &comp) != 0 || !comp.best.plan) {
        fprintf(stderr, "step_bench: %s: cannot compile the model: %s\n", what, comp.g ? comp.why : "(reported)");
        return -1;
    }
    c->g = comp.g, c->p = comp.best.plan;
    KirProgram *kp = &c->kp;
    size_t kir_len = 0, bc_len = 0;
    if (!plain) { // the fused kernels and their bitcode, as mtc -o puts them in the plan
        *kp = *c->g->kernels;
        if (kir_write(kp, &c->kir, &kir_len) != 0 || emit_llvm(kp, c->g, &c->bc, &bc_len, err, sizeof err) != 0) {
            fprintf(stderr, "step_bench: %s: %s\n", what, err);
            return -1;
        }
        c->p->kernels_bytes = c->kir, c->p->kernels_len = kir_len, c->p->bitcode = c->bc, c->p->bitcode_len = bc_len;
    }
    if (!(c->be = backend_cpu_create(c->p, err, sizeof err)) || store_alloc(&c->hs, c->p) != 0) {
        fprintf(stderr, "step_bench: %s: %s\n", what, c->be ? "out of memory" : err);
        return -1;
    }
    c->p->kernels_len = kir_len; // (plan and backend are the contestant's own)
    store_init(&c->hs, c->p, 1, NULL, 0);
    store_sync_copy(&c->hs, c->p, NULL, 0);
    c->act = malloc(c->p->host_act_bytes ? (size_t)c->p->host_act_bytes : 1);
    return c->act ? 0 : -1;
}

static void contestant_free(Contestant *c) {
    if (c->be) c->be->destroy(c->be);
    if (c->hs.w) store_free(&c->hs);
    free(c->kir);
    free(c->bc);
    free(c->act);
    for (int p = 0; p < PART_COUNT; p++) free(c->kernel_s[p]);
}

// One training step of c: the replay, then AdamW over every parameter
// (writing the bf16 copy when there is one). Keeps its best times.
static int contestant_step(Contestant *c, const int32_t *const *inputs, int k, int print_ops) {
    static ExecProfile prof;
    static JitProfile jprof;
    char err[512];
    AdamWStep s =
        {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 1, .t = k + 1};
    prof = (ExecProfile){0};
    jprof = (JitProfile){0};
    for (int p = 0; p < PART_COUNT && k > 0 && c->kernel_s[p]; p++) // (step 0 warms up)
        jprof.kernel_s_of[p] = c->kernel_s[p] + (size_t)(k - 1) * (size_t)c->kp.parts[p].n;
    exec_profile = &prof;
    jit_profile = &jprof;
    double t0 = now_s();
    // the fp32 gradients the store holds: all of them, or the globals' beside
    // the layers' bf16 ones (gb, which each COPY_OUT sets whole: not zeroed)
    int64_t nf = c->hs.gb ? c->hs.gb_from : c->hs.n;
    memset(c->hs.g, 0, (size_t)nf * 4);
    float loss;
    Replay rp = {.p = c->p, .be = c->be, .hs = &c->hs, .act = c->act};
    if (replay(&rp, c->p->train, c->p->ntrain, inputs, 1, &loss, err, sizeof err) != 0) {
        fprintf(stderr, "step_bench: %s: %s\n", c->what, err);
        return -1;
    }
    double t1 = now_s();
    adamw_update(c->hs.w, c->hs.m, c->hs.v, c->hs.g, c->hs.wb, nf, &s, 1, 2);
    if (c->hs.gb) // as store_update: the layers' updates read their bf16 gradients
        adamw_update_bf16_grads(c->hs.w + nf, c->hs.m + nf, c->hs.v + nf, c->hs.gb, c->hs.wb ? c->hs.wb + nf : NULL,
                                c->hs.n - nf, &s, 1, 2);
    double dt = now_s() - t0;
    exec_profile = NULL;
    jit_profile = NULL;
    double gemm = c->kir ? jprof.gemm_s : prof.seconds[OP_MATMUL]; // (attention's per-head sgemms count as GEMMs)
    if (print_ops) {
        printf("  %s: jit: %lld GEMM calls %.1f ms, %lld generated kernel calls %.1f ms, attention %.1f ms\n", c->what,
               (long long)jprof.gemm_calls, jprof.gemm_s * 1e3, (long long)jprof.kernel_calls, jprof.kernel_s * 1e3,
               jprof.attn_s * 1e3);
        for (int o = 0; o < OP_COUNT; o++)
            if (prof.calls[o])
                printf("  %-18s %7lld calls %8.1f ms\n", op_name((OpKind)o), (long long)prof.calls[o],
                       prof.seconds[o] * 1e3);
    }
    if (k > 0 && c->nsteps < STEP_MAX) c->step_s[c->nsteps++] = dt;
    if (k > 0 && dt < c->best) c->best = dt, c->best_outside = (dt - gemm) / dt;
    if (k > 0 && t1 - t0 < c->best_fb) c->best_fb = t1 - t0;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median of c's timed steps.
static double median_step(const Contestant *c) {
    double s[STEP_MAX];
    memcpy(s, c->step_s, (size_t)c->nsteps * sizeof s[0]);
    qsort(s, (size_t)c->nsteps, sizeof s[0], cmp_double);
    return c->nsteps % 2 ? s[c->nsteps / 2] : 0.5 * (s[c->nsteps / 2 - 1] + s[c->nsteps / 2]);
}

// STEP_BENCH_KERNELS=1 with --target: each launched kernel's measured
// milliseconds a step (the median of the timed steps; every run of it in the
// step, recompute included) against cost_kernel_s's price times its runs a
// step, by part; then each kind of kernel's sums.
static void print_kernels(const Contestant *c, const Target *t, int steps) {
    double kind_m[KK_COUNT] = {0}, kind_p[KK_COUNT] = {0};
    printf("kernels of the %s step: measured against predicted, ms a step (runs a step)\n", c->what);
    for (int p = 0; p < graph_nparts(c->g); p++) {
        const KirSet *s = &c->kp.parts[p];
        for (int i = 0; i < s->n; i++) {
            const KirKernel *k = &s->k[i];
            if (!kir_is_launched(k)) continue;
            int runs = 0; // the train stream's RUNs over this kernel's anchor
            for (int r = 0; r < c->p->ntrain; r++) {
                const Instr *in = &c->p->train[r];
                if (in->kind == INS_RUN && in->part == p && k->anchor >= in->from && k->anchor < in->to &&
                    !((in->flags & RUN_SKIP_HEAVY) && kir_is_heavy(k)))
                    runs++;
            }
            double v[STEP_MAX];
            for (int st = 0; st < steps; st++) v[st] = c->kernel_s[p][(size_t)st * (size_t)s->n + (size_t)i];
            qsort(v, (size_t)steps, sizeof v[0], cmp_double);
            double m = steps % 2 ? v[steps / 2] : 0.5 * (v[steps / 2 - 1] + v[steps / 2]),
                   pr = runs * cost_kernel_s(c->g, p, s, i, t);
            const Node *n = c->g->parts[p].nodes.items[k->anchor];
            printf("  %-6s %3d %-9s %-18s %2d  %8.3f %8.3f  %5.2f\n", part_name(p), i, kir_kind_name((KirKind)k->kind),
                   op_name(n->op), runs, m * 1e3, pr * 1e3, pr > 0 ? m / pr : 0);
            kind_m[k->kind] += m, kind_p[k->kind] += pr;
        }
    }
    for (int kd = 0; kd < KK_COUNT; kd++)
        if (kind_m[kd] > 0 || kind_p[kd] > 0)
            printf("  all %-9s %8.3f ms measured %8.3f predicted  %5.2f\n", kir_kind_name((KirKind)kd),
                   kind_m[kd] * 1e3, kind_p[kd] * 1e3, kind_p[kd] > 0 ? kind_m[kd] / kind_p[kd] : 0);
}

int main(int argc, char **argv) {
    mt_blas_core_pick(); // OpenBLAS's kernels for this CPU, as mtrun picks them
    const char *path = "examples/gpt2.mt";
    SemaOptions opt = {.batch = 4, .seq = 64};
    int steps = 5, compute = 1; // f32
    const char *target = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) opt.batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) opt.seq = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) target = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) compute = strcmp(argv[++i], "bf16") == 0 ? 2 : 1;
        else path = argv[i];
    }
    if (steps < 1 || steps > STEP_MAX) steps = steps < 1 ? 1 : STEP_MAX;
    char *text, err[512];
    size_t len;
    if (io_read_file(path, &text, &len) != 0) {
        fprintf(stderr, "step_bench: cannot read %s\n", path);
        return 1;
    }
    Source src = {.path = path, .text = text, .len = len};
    Diag d = {.src = &src, .sink = stderr};
    Arena a = {0};
    Model *m = dsl_parse(&src, &a, &d);
    Target tgt;
    if (!m || target_load(target ? target : "h200", &tgt, err, sizeof err) != 0) {
        fprintf(stderr, "step_bench: %s\n", m ? err : "cannot parse the model");
        return 1;
    }
    SchedRequest req = {.policy = target ? POLICY_MT : POLICY_SEQUENTIAL, .resident = -1};
    // [0] the step measured; [1] the other dtype; [2] the f32 plan on the plain reference kernels
    enum { MAIN, OTHER, PLAIN, NC };
    Contestant cs[NC] = {0};
    int n = 0, plain_only = getenv("STEP_BENCH_REFERENCE") != NULL;
    if (contestant_make(&cs[n++], compute == 2 ? "bf16" : "f32", m, opt, compute, plain_only && compute == 1, &tgt,
                        &req, &a, &d) != 0)
        return 1;
    if (!plain_only &&
        (contestant_make(&cs[n++], compute == 2 ? "f32" : "bf16", m, opt, 3 - compute, 0, &tgt, &req, &a, &d) != 0 ||
         contestant_make(&cs[n++], "f32, plain kernels", m, opt, 1, 1, &tgt, &req, &a, &d) != 0))
        return 1;
    Graph *g = cs[MAIN].g;
    int64_t BT = g->train.batch * g->train.seq;
    int32_t *tokens = malloc((size_t)BT * 4), *targets = malloc((size_t)BT * 4);
    for (int64_t i = 0; i < BT; i++) tokens[i] = targets[i] = (int32_t)(i * 7919 % 256);
    static const float one = 1; // the loss scale (graph.h): every target counts
    const int32_t *inputs[3] = {tokens, targets, (const int32_t *)(const void *)&one};

    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];
    double flops = gemm_flops(head, 0, head->nodes.n) + gemm_flops(tail, 0, tail->nodes.n) +
                   (double)g->layers * gemm_flops(block, 0, block->nodes.n);
    for (int p = 0; p < PART_COUNT && getenv("STEP_BENCH_KERNELS") && cs[MAIN].kir; p++)
        if (!(cs[MAIN].kernel_s[p] = calloc((size_t)steps * (size_t)cs[MAIN].kp.parts[p].n + 1, sizeof(double))))
            return 1;
    for (int k = 0; k <= steps; k++) // step 0 warms up; the contestants in turn
        for (int c = 0; c < n; c++)
            if (contestant_step(&cs[c], inputs, k, getenv("STEP_BENCH_OPS") && k == steps) != 0) return 1;
    const Contestant *c0 = &cs[MAIN];
    int64_t C = g->parts[PART_BLOCK].output->shape.dims[2];
    double sgemm = sgemm_rate((int)BT, (int)(4 * C), (int)C), achieved = flops / c0->best / 1e9;
    printf("%s (%s) batch %lld seq %lld: %.1f ms/step (forward+backward %.1f ms, optimizer %.1f ms), %.1f GFLOP/s "
           "(%.2f GFLOP a step)\n",
           g->model_name, c0->what, (long long)g->train.batch, (long long)g->train.seq, c0->best * 1e3,
           c0->best_fb * 1e3, (c0->best - c0->best_fb) * 1e3, achieved, flops / 1e9);
    printf("time outside GEMMs: %.0f%% of the step (optimizer and copies included; %s)\n", 100 * c0->best_outside,
           c0->kir ? "generated kernels through the JIT" : "the reference kernels, STEP_BENCH_REFERENCE");
    printf("sgemm %dx%dx%d: %.1f GFLOP/s   step/sgemm ratio %.2f\n", (int)BT, (int)(4 * C), (int)C, sgemm,
           achieved / sgemm);
    if (n > OTHER)
        printf("%s plan through the JIT, stepped in turn in the same run: %.1f ms/step; bf16/f32 step time %.2f\n",
               cs[OTHER].what, cs[OTHER].best * 1e3,
               compute == 2 ? c0->best / cs[OTHER].best : cs[OTHER].best / c0->best);
    if (n > PLAIN)
        printf("f32 plan on the plain reference kernels, stepped in turn: %.1f ms/step; generated/reference time "
               "(f32) %.2f\n",
               cs[PLAIN].best * 1e3, cs[compute == 2 ? OTHER : MAIN].best / cs[PLAIN].best);
    if (target && getenv("STEP_BENCH_KERNELS") && c0->kir) print_kernels(c0, &tgt, steps);
    if (target) {
        Cost c;
        if (cost_plan(c0->p, &tgt, &c) != 0) return 1;
        double median = median_step(c0);
        printf("predicted for %s (%s): %.1f ms/step; measured %.1f ms (the median of %d steps; best %.1f); "
               "measured/predicted %.2f\n",
               tgt.name, c0->p->schedule, c.step_s * 1e3, median * 1e3, c0->nsteps, c0->best * 1e3, median / c.step_s);
    }
    for (int c = 0; c < n; c++) contestant_free(&cs[c]);
    arena_free(&a);
    free(text);
    free(tokens);
    free(targets);
    return 0;
}
