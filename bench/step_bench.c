// step_bench: one training step of a model on the cpu backend, next to
// OpenBLAS's sgemm rate measured in the same run. GPT-2 small at batch 4,
// sequence 64, fp32 by default:
//
//     build/bench/step_bench [MODEL.mt] [--batch N] [--seq N] [--steps N] [--target PROFILE]
//
// With --target (a profile from `mtrun --calibrate --out FILE`, measured on
// this machine), the plan is made for that profile and the bench also
// prints mtc's predicted step time for it against the measured one.
//
// Prints ms/step and achieved GFLOP/s, counting the GEMM FLOPs of forward
// and backward once (the recomputed forward is not counted: it is overhead),
// the share of the step spent outside GEMMs, and the rate of one sgemm of
// the model's MLP shape, with the ratio of the two rates. The step runs the
// plan's fused kernels through the JIT; a second backend running the plain
// reference kernels is stepped in turn, and the ratio of the two step times
// printed (STEP_BENCH_REFERENCE=1: the reference alone).
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/io.h"
#include "../compiler/emit_llvm.h"
#include "../compiler/fuse.h"
#include "../compiler/graph.h"
#include "../compiler/schedule.h"
#include "../runtime/adamw.h"
#include "../runtime/exec.h"
#include "../runtime/jit.h"
#include "../runtime/replay.h"

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

int main(int argc, char **argv) {
    const char *path = "examples/gpt2.mt";
    SemaOptions opt = {.batch = 4, .seq = 64};
    int steps = 5;
    const char *target = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) opt.batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) opt.seq = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--target") && i + 1 < argc) target = argv[++i];
        else path = argv[i];
    }
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
    Graph *g = m ? sema_lower(m, &opt, &a, &d) : NULL;
    Target tgt;
    SchedRequest req = {.policy = target ? POLICY_MT : POLICY_SEQUENTIAL, .resident = -1};
    SchedResult r = {0};
    Plan *p = g && autodiff(g, &a, &d) == 0 && target_load(target ? target : "h200", &tgt, err, sizeof err) == 0 &&
                      schedule_search(g, &tgt, &req, &a, &r, err, sizeof err) == 0 ? r.plan : NULL;
    // the fused kernels and their bitcode, as mtc -o puts them in the plan: the backend JIT-compiles them
    KirProgram kp;
    uint8_t *kir = NULL, *bc = NULL;
    size_t kir_len = 0, bc_len = 0;
    if (p && !getenv("STEP_BENCH_REFERENCE")) {
        if (fuse(g, &a, &kp, err, sizeof err) != 0 || kir_write(&kp, &kir, &kir_len) != 0 ||
            emit_llvm(&kp, g, &bc, &bc_len, err, sizeof err) != 0) {
            fprintf(stderr, "step_bench: %s\n", err);
            return 1;
        }
        p->kernels_bytes = kir, p->kernels_len = kir_len, p->bitcode = bc, p->bitcode_len = bc_len;
    }
    HostStore hs;
    Backend *be = p ? backend_cpu_create(p, err, sizeof err) : NULL;
    if (!be || store_alloc(&hs, p) != 0) {
        fprintf(stderr, "step_bench: %s\n", p ? err : "cannot compile the model");
        return 1;
    }
    store_init(&hs, p, 1);
    // the plain kernels on a second backend, stepped in turn with the first, so
    // that a noisy machine slows both alike
    Backend *ref_be = NULL;
    if (kir) {
        p->kernels_len = 0;
        ref_be = backend_cpu_create(p, err, sizeof err);
        p->kernels_len = kir_len;
        if (!ref_be) {
            fprintf(stderr, "step_bench: %s\n", err);
            return 1;
        }
    }
    int64_t BT = g->train.batch * g->train.seq;
    int32_t *tokens = malloc((size_t)BT * 4), *targets = malloc((size_t)BT * 4);
    for (int64_t i = 0; i < BT; i++) tokens[i] = targets[i] = (int32_t)(i * 7919 % 256);
    const int32_t *inputs[2] = {tokens, targets};
    char *act = malloc(p->host_act_bytes ? (size_t)p->host_act_bytes : 1); // (host_act_bytes) the host activation store

    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];
    double flops = gemm_flops(head, 0, head->nodes.n) + gemm_flops(tail, 0, tail->nodes.n) +
                   (double)g->layers * gemm_flops(block, 0, block->nodes.n);
    AdamWStep s = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 1};
    double best = 1e30, best_fb = 1e30, best_outside = 0, best_ref = 1e30;
    ExecProfile prof;
    JitProfile jprof;
    exec_profile = &prof;
    jit_profile = &jprof;
    for (int k = 0; k <= steps; k++) { // step 0 warms up
        prof = (ExecProfile){0};
        jprof = (JitProfile){0};
        double t0 = now_s();
        memset(hs.g, 0, (size_t)hs.n * 4);
        float loss;
        Replay rp = {.p = p, .be = be, .hs = &hs, .act = act};
        if (replay(&rp, p->train, p->ntrain, inputs, 1, &loss, err, sizeof err) != 0) {
            fprintf(stderr, "step_bench: %s\n", err);
            return 1;
        }
        double t1 = now_s();
        s.t = k + 1;
        adamw_update(hs.w, hs.m, hs.v, hs.g, NULL, hs.n, &s, 1, 2);
        double dt = now_s() - t0;
        double gemm = kir ? jprof.gemm_s : prof.seconds[OP_MATMUL];
        if (getenv("STEP_BENCH_OPS") && k == steps)
            printf("  jit: %lld GEMM calls %.1f ms, %lld generated kernel calls %.1f ms, attention %.1f ms\n",
                   (long long)jprof.gemm_calls, jprof.gemm_s * 1e3, (long long)jprof.kernel_calls, jprof.kernel_s * 1e3,
                   jprof.attn_s * 1e3);
        if (getenv("STEP_BENCH_OPS") && k == steps)
            for (int o = 0; o < OP_COUNT; o++)
                if (prof.calls[o]) printf("  %-18s %7lld calls %8.1f ms\n", op_name((OpKind)o), (long long)prof.calls[o], prof.seconds[o] * 1e3);
        if (k > 0 && dt < best) {
            best = dt;
            best_outside = (dt - gemm) / dt;
        }
        if (k > 0 && t1 - t0 < best_fb) best_fb = t1 - t0;
        if (ref_be) {
            double r0 = now_s();
            memset(hs.g, 0, (size_t)hs.n * 4);
            Replay rr = {.p = p, .be = ref_be, .hs = &hs, .act = act};
            if (replay(&rr, p->train, p->ntrain, inputs, 1, &loss, err, sizeof err) != 0) {
                fprintf(stderr, "step_bench: %s\n", err);
                return 1;
            }
            adamw_update(hs.w, hs.m, hs.v, hs.g, NULL, hs.n, &s, 1, 2);
            if (k > 0 && now_s() - r0 < best_ref) best_ref = now_s() - r0;
        }
    }
    int64_t C = g->parts[PART_BLOCK].output->shape.dims[2];
    double sgemm = sgemm_rate((int)BT, (int)(4 * C), (int)C), achieved = flops / best / 1e9;
    printf("%s batch %lld seq %lld: %.1f ms/step (forward+backward %.1f ms, optimizer %.1f ms), %.1f GFLOP/s "
           "(%.2f GFLOP a step)\n", g->model_name, (long long)g->train.batch, (long long)g->train.seq, best * 1e3,
           best_fb * 1e3, (best - best_fb) * 1e3, achieved, flops / 1e9);
    printf("time outside GEMMs: %.0f%% of the step (optimizer and copies included; %s)\n", 100 * best_outside,
           kir ? "generated kernels through the JIT" : "the reference kernels, STEP_BENCH_REFERENCE");
    printf("sgemm %dx%dx%d: %.1f GFLOP/s   step/sgemm ratio %.2f\n", (int)BT, (int)(4 * C), (int)C, sgemm,
           achieved / sgemm);
    if (ref_be)
        printf("plain reference kernels, stepped in turn in the same run: %.1f ms/step; generated/reference time %.2f\n",
               best_ref * 1e3, best / best_ref);
    if (target) {
        Cost c;
        cost_plan(p, &tgt, &c);
        printf("predicted for %s (%s): %.1f ms/step; measured %.1f ms; measured/predicted %.2f\n", tgt.name,
               p->schedule, c.step_s * 1e3, best * 1e3, best / c.step_s);
    }
    be->destroy(be);
    if (ref_be) ref_be->destroy(ref_be);
    free(kir);
    free(bc);
    free(act);
    store_free(&hs);
    arena_free(&a);
    free(text);
    free(tokens);
    free(targets);
    return 0;
}
