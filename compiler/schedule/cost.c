#include "compiler/schedule/cost.h"

#include "compiler/schedule/collective.h"

#include "common/attention.h"
#include "common/scan.h"
#include "compiler/fuse/fuse.h"
#include "common/scratch.h"
#include "common/storage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------- device time, from the fused kernels

// The device time of a part's kernels, by the node an INS_RUN runs them at
// (their anchor): heavy[i] the GEMMs and attention (a RUN_SKIP_HEAVY run
// skips them), of which attn[i] attention, light[i] the expression kernels
// and GEMM epilogues. attn_kinds: the ATTN_KIND_* bits of the attention
// kernels priced.
typedef struct CostKernels {
    double *heavy[PART_COUNT], *attn[PART_COUNT], *light[PART_COUNT]; // (nodes.n) each
    int attn_kinds;
} KernelTimes;

// Bytes argument a of a kernel moves through HBM: its
// elements at the storage rule's bytes (common/storage.h); an f64 scratch
// accumulator is written out once, an f32 one read and written.
static double arg_bytes(const KirArg *a) {
    double elem = a->dtype == KT_BF16 ? 2.0 : 4.0;
    return (double)a->numel * elem * (a->access & KA_ACC32 ? 2.0 : 1.0);
}

// The seconds an expression kernel's statements take on one cpu thread:
// each runs once a row, or once a column of its loop a row; arithmetic at
// vector_flops, exp, log, sqrt, sin, cos and pow at transcendental_s each;
// in a bf16 plan (bf16) those in double at transcendental_f64_s where the
// profile gives it: the cpu backend's JIT keeps libm's scalar double calls
// there (runtime/backend/jit.c), one a value, where f32 plans get glibc's vector
// maths (perf of a bf16 llama-tiny step: pow and sincos ~10% of it).
static double cpu_statements_time(const KirKernel *k, const Target *t, int bf16) {
    double arith = 0, transcendental = 0, scalar64 = 0;
    for (int i = 0; i < k->nstmts; i++) {
        const KirStmt *s = &k->stmts[i];
        double runs = (double)k->rows * (s->loop ? (double)k->cols[s->loop - 1] : 1.0);
        switch (s->op) {
        case KOP_CONST:
        case KOP_ROW:
        case KOP_COL:
        case KOP_LOAD:
        case KOP_STORE:
        case KOP_ACC: break; // bytes: by_bytes
        case KOP_EXP:
        case KOP_LOG:
        case KOP_SIN:
        case KOP_COS:
        case KOP_POW:
            if (bf16 && s->type == KT_F64 && t->transcendental_f64_s > 0) scalar64 += runs;
            else transcendental += runs;
            break;
        case KOP_SQRT: transcendental += runs; break;
        default: arith += runs;
        }
    }
    return arith / t->vector_flops + transcendental * t->transcendental_s + scalar64 * t->transcendental_f64_s;
}

// An expression kernel: its bytes at HBM bandwidth or its arithmetic,
// whichever is longer, plus a launch: a few operations an element at the
// vector rate, or on a cpu target its statements (cpu_statements_time).
// skip_node (a GEMM's output, still in cache for its epilogue) costs nothing.
static double expr_time(const KirKernel *k, const Target *t, int skip_node, int bf16) {
    double bytes = 0, elems = 0;
    for (int a = 0; a < k->nargs; a++) {
        if (k->args[a].node < 0 || k->args[a].node == skip_node) continue;
        bytes += arg_bytes(&k->args[a]);
        if ((double)k->args[a].numel > elems) elems = (double)k->args[a].numel;
    }
    double by_bytes = bytes / t->hbm_bandwidth, by_flops = elems * 8.0 / t->vector_flops;
    if (strcmp(t->arch, "cpu") == 0) by_flops = cpu_statements_time(k, t, bf16);
    return (by_bytes > by_flops ? by_bytes : by_flops) + (skip_node >= 0 ? 0 : t->kernel_launch_s);
}

// Which flash attention kernel runs attention kernel k on t: the cuda
// backend's tensor-core or fp32 template (compiler/emit/emit_cuda.c picks by
// attn_tc_ok), or, on a cpu target, the cpu backend's composite.
static int attn_kind(const KirKernel *k, const Target *t) {
    if (strcmp(t->arch, "cpu") == 0) return ATTN_KIND_CPU;
    return attn_tc_ok(k->args[0].dtype == KT_BF16, (int)k->attn.D, (int)k->attn.Dv) ? ATTN_KIND_TC : ATTN_KIND_FP32;
}

// On a cpu target, the FLOP/s of a GEMM whose BLAS calls each take macs
// multiply-adds: under MT_BLAS_THREADED_MACS the cpu backend runs them on one
// thread (runtime/backend/blas_core.c), at gemm_one_thread_flops where the profile
// gives it; else matrix, the rate of every thread.
static double cpu_gemm_rate(const Target *t, double macs, double matrix) {
    return macs < (double)MT_BLAS_THREADED_MACS && t->gemm_one_thread_flops > 0
               ? t->gemm_one_thread_flops * t->gemm_efficiency
               : matrix;
}

// On a cpu target, what a bf16 plan's GEMM, attention or node kernel spends
// converting: the cpu backend widens every bf16 input to f32 before the
// library or plain kernel runs and rounds a bf16 output back after
// (runtime/backend/jit.c's f32_operands and narrow_rows), each element at
// bf16_convert_s (mtrun --calibrate times those loops).
static double cpu_convert_time(const KirKernel *k, const Target *t) {
    double elems = 0;
    for (int a = 0; a < k->nargs; a++)
        if (k->args[a].dtype == KT_BF16) elems += (double)k->args[a].numel;
    return elems * t->bf16_convert_s;
}

// What a GEMM or attention kernel costs on a cpu target beyond its FLOPs at
// the matrix rate, as the cpu backend runs it (runtime/backend/jit.c): a host BLAS
// call (gemm_call_s) per batch entry, or per row block when an epilogue
// follows; f32 attention as a composite, per (batch, head) 2 sgemms and a
// generated softmax over T x T scores forward, 5 sgemms and two passes
// backward, every score computed, masked or not (the softmax helpers of set
// priced by their statements).
static double cpu_overhead(const KirSet *set, const KirKernel *k, const Target *t) {
    if (k->kind == KK_GEMM) {
        const KirGemm *g = &k->gemm;
        double calls = g->epilogue >= 0 ? (double)((g->M + kir_gemm_row_block(g->N) - 1) / kir_gemm_row_block(g->N))
                                        : (double)g->batch;
        return calls * t->gemm_call_s;
    }
    const KirAttn *a = &k->attn;
    double heads = (double)(a->B * a->H), bwd = k->kind == KK_ATTN ? 0.0 : 1.0, helpers = 0;
    for (int h = 0; h < 1 + (int)bwd; h++) // the backward recomputes the softmax, then its derivative
        if (a->helper[h] >= 0) helpers += t->kernel_launch_s + cpu_statements_time(&set->k[a->helper[h]], t, 0);
    return heads * ((2.0 + 3.0 * bwd) * t->gemm_call_s + helpers);
}

// The matrix work attention kernel k runs as the backend runs it, in head
// dimensions per (query, key) pair (each 2 FLOPs): on the GPU the flash
// kernels' (common/attention.h's attn_gpu_head_dims: the backward takes the
// forward's saved lse and y); the cpu backend's forward likewise, D + Dv,
// and its backward, which recomputes P whole (composite or plain kernel), S,
// dP, dS K, dS^T Q and P^T dY: 3 D + 2 Dv.
static double attn_head_dims(const KirKernel *k, const Target *t) {
    double D = (double)k->attn.D, Dv = (double)k->attn.Dv;
    if (k->kind == KK_ATTN_BWD && attn_kind(k, t) == ATTN_KIND_CPU) return 3 * D + 2 * Dv;
    return attn_gpu_head_dims(k->kind == KK_ATTN_BWD, D, Dv);
}

// A GEMM or attention kernel: its FLOPs at a rate, or its bytes at HBM
// bandwidth, whichever is longer, plus a launch. The rate: GEMMs at the
// matrix rate of the storage dtype times gemm_efficiency (on a cpu target,
// calls the backend runs on one thread at cpu_gemm_rate's); attention at
// matrix_flops_bf16 times the target's fraction for the kernel that runs it
// (attention_tc_fraction, attention_tc_wide_fraction for heads over 128,
// attention_tc_narrow_fraction for heads of 64 or less,
// attention_fp32_fraction). On a cpu target f32
// attention is priced as GEMMs over every (query, key) pair plus
// cpu_overhead, and bf16 attention, which the cpu backend runs as the plain
// kernel (double sums, one thread), its FLOPs at attention_plain_flops
// (vector_flops where a profile lacks it) and, forward and backward alike,
// libm's scalar double exp once a scored (query, key) pair at
// transcendental_f64_s: at llama-tiny's head size (16) a pair's exp is about
// a quarter of its time, at 64 a tenth, so one rate for both priced the
// small heads 1.3 times too fast (mtrun --calibrate measures the kernel at
// 64 and takes the exps out of the rate it writes).
// A bf16 kernel on a cpu target adds its conversions (cpu_convert_time).
// The rate follows the operands' storage (a GEMM's output may be f32 under bf16 ones).
static double heavy_time(const KirSet *set, const KirKernel *k, const Target *t) {
    int bf16 = k->args[1].dtype == KT_BF16, cpu = strcmp(t->arch, "cpu") == 0;
    double matrix = (bf16 ? t->matrix_flops_bf16 : t->matrix_flops_f32) * t->gemm_efficiency, flops, bytes = 0;
    double exps = 0; // the plain kernel's scalar double exps (cpu, bf16 attention)
    if (k->kind != KK_GEMM && attn_kind(k, t) != ATTN_KIND_CPU) {
        int wide = k->attn.D > 128 || k->attn.Dv > 128; // attention_tc.cuh's other tiles (MtAttnTcGeo)
        int narrow = k->attn.D <= 64 && k->attn.Dv <= 64;
        double tc = wide && t->attention_tc_wide_fraction > 0       ? t->attention_tc_wide_fraction
                    : narrow && t->attention_tc_narrow_fraction > 0 ? t->attention_tc_narrow_fraction
                                                                    : t->attention_tc_fraction;
        matrix = t->matrix_flops_bf16 * (attn_kind(k, t) == ATTN_KIND_TC ? tc : t->attention_fp32_fraction);
    }
    for (int a = 0; a < k->nargs; a++) bytes += arg_bytes(&k->args[a]);
    if (k->kind == KK_GEMM) {
        const KirGemm *g = &k->gemm;
        flops = 2.0 * (double)g->M * (double)g->N * (double)g->K * (double)g->batch;
        int64_t rows = g->epilogue >= 0 && kir_gemm_row_block(g->N) < g->M ? kir_gemm_row_block(g->N)
                                                                           : g->M; // a call's
        if (cpu) matrix = cpu_gemm_rate(t, (double)rows * (double)g->N * (double)g->K, matrix);
    } else {
        const KirAttn *a = &k->attn;
        double T = (double)a->T, W = (double)a->window, pairs = a->causal ? 0.5 * T * T : T * T; // (query, key) pairs
        if (a->window && a->window < a->T)
            pairs = T * W - 0.5 * W * (W - 1); // each query's last W keys, fewer at the start
        if (a->chunk && a->chunk < a->T) {     // the keys of each query's chunk: T / chunk whole chunks and the rest
            double c = (double)a->chunk, n = floor(T / c), r = T - n * c, in = n * c * c + r * r;
            pairs = fmin(pairs, a->causal ? 0.5 * in : in);
        }
        if (cpu && !bf16) pairs = T * T; // the composite scores every pair
        if (cpu && !bf16) matrix = cpu_gemm_rate(t, T * T * (double)(a->D > a->Dv ? a->D : a->Dv), matrix); // a head's
        if (cpu && bf16) matrix = t->attention_plain_flops > 0 ? t->attention_plain_flops : t->vector_flops;
        flops = 2.0 * (double)a->B * pairs * (double)a->H * attn_head_dims(k, t);
        if (cpu && bf16) exps = (double)a->B * (double)a->H * pairs;
    }
    double exp64 = t->transcendental_f64_s > 0 ? t->transcendental_f64_s : t->transcendental_s;
    double by_flops = flops / matrix + exps * exp64, by_bytes = bytes / t->hbm_bandwidth;
    double overhead = cpu && !(bf16 && k->kind != KK_GEMM) ? cpu_overhead(set, k, t) : 0.0;
    if (cpu) overhead += cpu_convert_time(k, t);
    return (by_flops > by_bytes ? by_flops : by_bytes) + overhead + t->kernel_launch_s;
}

// A recurrence (delta_rule, ssd; common/scan.h) as its kernels run it, step
// by step on the state S (Dk, Dv) of each batch row and head, at the vector
// rate: the forward 7 Dk Dv FLOPs a step (decay, S^T k, the update, S^T q),
// the backward 9 to recompute the states (the forward again, chunk by chunk
// from the kept chunk starts) and 16 for the gradients. On a cpu target the
// state (double) stays in a core's cache unless it exceeds 1 MiB (then 16 Dk
// Dv bytes a step); on a GPU compiler/emit/cuda/scan.cuh keeps it in device
// memory, read and written each step (fp32: 8 Dk Dv bytes a step forward,
// 12 under the delta rule; the backward 4 times that), priced at HBM rate,
// an upper bound where it stays in L2. The operands' bytes beside it. No
// chunked tensor-core form yet.
static double scan_time(const Node *n, const Target *t, double bytes) {
    ScanDims d;
    if (!scan_dims(n, &d)) return bytes / t->hbm_bandwidth;
    int bwd = n->op == OP_DELTA_RULE_BWD || n->op == OP_SSD_BWD, cpu = strcmp(t->arch, "cpu") == 0;
    double steps = (double)d.B * (double)d.T * (double)d.H, state = (double)d.Dk * (double)d.Dv;
    double flops = steps * state * (bwd ? 7 + 9 + 16 : 7), by_flops = flops / t->vector_flops;
    double state_bytes = cpu ? (state * 8 > 1 << 20 ? steps * state * 16 : 0)
                             : steps * state * (scan_is_delta(n->op) ? 12 : 8) * (bwd ? 4 : 1);
    double by_bytes = (bytes + state_bytes) / t->hbm_bandwidth;
    return by_flops > by_bytes ? by_flops : by_bytes;
}

// A node kernel (KK_NODE; generated on the cpu, compiler/emit/cuda/moe.cuh's on
// a GPU): moe and its backward as their
// GEMMs over the rows each expert runs (graph_routed_experts: the experts
// a row runs at most) only (forward 3 of 2 C F FLOPs a
// row and expert; the backward recomputes them and takes 6 more) at the
// matrix rate times moe_gemm_efficiency on a GPU (compiler/emit/cuda/moe.cuh's
// own tiled kernels, not cuBLAS; tests/gpu/gpu_check measures the figure,
// its moe_time line, and the profiles carry an estimate until a GPU run
// records it), times gemm_efficiency with a host BLAS
// call per expert and GEMM on a cpu target (library GEMMs there, and a
// bf16 plan's conversions, cpu_convert_time);
// the rest (top_k, the load-balancing loss, add_loss) by their bytes.
// *heavy: whether it counts with the GEMMs.
static double node_time(const Graph *g, const Node *n, const KirKernel *k, const Target *t, int *heavy) {
    int bf16 = k->args[0].dtype == KT_BF16, cpu = strcmp(t->arch, "cpu") == 0;
    double bytes = 0, convert = cpu ? cpu_convert_time(k, t) : 0.0;
    for (int a = 0; a < k->nargs; a++) bytes += arg_bytes(&k->args[a]);
    if ((n->op == OP_MOE || n->op == OP_MOE_BWD) && moe_fused(n) && k->nargs > 4 + (n->op == OP_MOE_BWD))
        bytes -= arg_bytes(&k->args[4 + (n->op == OP_MOE_BWD)]); // a fused gate_up, read once in both places
    if (scan_is_op(n->op)) {
        *heavy = 1;
        return scan_time(n, t, bytes) + convert + t->kernel_launch_s;
    }
    *heavy = n->op == OP_MOE || n->op == OP_MOE_BWD;
    if (!*heavy) return bytes / t->hbm_bandwidth + convert + t->kernel_launch_s;
    const Shape *x = &n->in[n->op == OP_MOE_BWD]->shape, *w = &n->in[n->op == OP_MOE_BWD ? 3 : 2]->shape;
    int64_t C = x->dims[x->rank - 1], rows = shape_numel(x) / C, E = w->dims[0], F = moe_expert_width(n);
    double passes = n->op == OP_MOE ? 3 : 9; // GEMMs of 2 rows C F each
    double flops = passes * 2.0 * (double)rows * (double)graph_routed_experts(g, n->in[n->op == OP_MOE_BWD ? 2 : 1]) *
                   (double)C * (double)F;
    double matrix = (bf16 ? t->matrix_flops_bf16 : t->matrix_flops_f32) *
                    (cpu ? t->gemm_efficiency : t->moe_gemm_efficiency);
    double by_flops = flops / matrix, by_bytes = bytes / t->hbm_bandwidth;
    double overhead = cpu ? (double)E * passes * t->gemm_call_s + convert : 0.0;
    return (by_flops > by_bytes ? by_flops : by_bytes) + overhead + t->kernel_launch_s;
}

// Launched kernel i of part pk's set s, priced: *heavy its GEMM, attention
// or MoE time (a RUN_SKIP_HEAVY run skips it), of which *attn attention's,
// and *light the rest (an expression kernel, a GEMM's epilogue).
static void kernel_price(const Graph *g, int pk, const KirSet *s, int i, const Target *t, double *heavy, double *attn,
                         double *light) {
    const KirKernel *k = &s->k[i];
    int bf16 = g->train.compute == DT_BF16;
    *heavy = *attn = *light = 0;
    if (k->kind == KK_EXPR) {
        *light = expr_time(k, t, -1, bf16);
        return;
    }
    if (k->kind == KK_NODE) {
        int is_heavy;
        double h = node_time(g, g->parts[pk].nodes.items[k->anchor], k, t, &is_heavy);
        *(is_heavy ? heavy : light) = h;
        return;
    }
    *heavy = heavy_time(s, k, t);
    if (k->kind != KK_GEMM) *attn = *heavy;
    // The epilogue: on a cpu target it runs on each row block of C
    // while it is in cache (runtime/backend/jit.c), no pass over C; the cuda
    // backend launches it after the GEMM, a kernel of its own that
    // reads C back from HBM (cuBLASLt's epilogues are not used).
    if (k->kind == KK_GEMM && k->gemm.epilogue >= 0)
        *light = expr_time(&s->k[k->gemm.epilogue], t, strcmp(t->arch, "cpu") == 0 ? k->args[0].node : -1, bf16);
}

double cost_kernel_s(const Graph *g, int part, const KirSet *s, int i, const Target *t) {
    double heavy, attn, light;
    if (!kir_is_launched(&s->k[i])) return 0;
    kernel_price(g, part, s, i, t, &heavy, &attn, &light);
    return heavy + light;
}

// Prices every launched kernel of the graph's fused program (Graph.kernels,
// as mtc -o writes it; -1 when the graph was not fused).
static int kernel_times(const Graph *g, const Target *t, KernelTimes *kt) {
    *kt = (KernelTimes){0};
    int rc = g->kernels ? 0 : -1;
    for (int pk = 0; pk < PART_COUNT && rc == 0; pk++) {
        int n = g->parts[pk].nodes.n;
        kt->heavy[pk] = calloc((size_t)n + 1, sizeof(double));
        kt->attn[pk] = calloc((size_t)n + 1, sizeof(double));
        kt->light[pk] = calloc((size_t)n + 1, sizeof(double));
        if (!kt->heavy[pk] || !kt->attn[pk] || !kt->light[pk]) rc = -1;
        const KirSet *s = &g->kernels->parts[pk];
        for (int i = 0; i < s->n && rc == 0; i++) {
            const KirKernel *k = &s->k[i];
            if (!kir_is_launched(k)) continue;
            double heavy, attn, light;
            kernel_price(g, pk, s, i, t, &heavy, &attn, &light);
            kt->heavy[pk][k->anchor] += heavy;
            kt->attn[pk][k->anchor] += attn;
            kt->light[pk][k->anchor] += light;
            if (k->kind != KK_GEMM && k->kind != KK_EXPR && k->kind != KK_NODE) kt->attn_kinds |= attn_kind(k, t);
        }
    }
    return rc;
}

static void kernel_times_free(KernelTimes *kt) {
    for (int pk = 0; pk < PART_COUNT; pk++) free(kt->heavy[pk]), free(kt->attn[pk]), free(kt->light[pk]);
}

static double run_time(const KernelTimes *kt, int part, int from, int to, int flags) {
    double s = 0;
    for (int i = from; i < to; i++) s += kt->light[part][i] + (flags & RUN_SKIP_HEAVY ? 0 : kt->heavy[part][i]);
    return s;
}
// Of that, the GEMMs' (what = 0) or attention's (what = 1).
static double run_heavy(const KernelTimes *kt, int part, int from, int to, int flags, int what) {
    double s = 0;
    for (int i = from; i < to && !(flags & RUN_SKIP_HEAVY); i++)
        s += what ? kt->attn[part][i] : kt->heavy[part][i] - kt->attn[part][i];
    return s;
}

// Elements of segment `layer` of the host store.
static double layer_elems(const Plan *p, int32_t layer) { return (double)plan_segment_len(p, layer); }

// Of them, those AdamW updates: the frozen parameters' left out (store_update skips them).
static double trained_elems(const Plan *p, int32_t layer) {
    const Graph *g = p->graph;
    double n = layer_elems(p, layer);
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        int in_seg = prm->in_block ? layer >= 0 && param_in_layer(g, prm, layer)
                                   : layer < 0 && plan_segment_of(p, p->param_offset[i]) == layer;
        if (prm->frozen && in_seg) n -= (double)storage_host_elems_of(shape_numel(&prm->shape));
    }
    return n;
}

// Host bytes a parameter's AdamW update moves: reads w, m, v, g (16), writes
// w, m, v and zeroes g (16), and writes the bf16 copy under bf16 (2), as
// runtime/store/store.c's store_update does; with bf16 gradients (grads_bf16, a
// layer's: common/storage.h, storage_grads_bf16) reads 2 of g and zeroes
// nothing, 28. They move at the profile's host_adamw_bandwidth, which
// counts the same bytes.
static double update_bytes(DType compute, int grads_bf16) {
    return grads_bf16 ? 28.0 : 32.0 + (compute == DT_BF16 ? 2.0 : 0.0);
}

// Whether plan p's store holds the layers' gradients as bf16 at placement
// pl (NULL: in RAM), as runtime/store/store.c decides it: not with them on the tier.
static int plan_grads_bf16(const Plan *p, const Placement *pl) {
    return storage_grads_bf16(p->graph, p->ranks, pl && pl->level >= PLACE_GRADS);
}

// Host bytes of a COPY_OUT's host part on a GPU, as the cuda backend's ring
// runs it (runtime/backend/backend_cuda.c): each gradient read from its pinned slot
// (2 bytes bf16, 4 fp32) and added into the store's fp32 accumulator (read
// and write it: 8), or, where the accumulator holds zeros, set (write it:
// 4; runtime/store/store.c, store_grads_out; bf16 only: an fp32 set is the copy
// itself, straight into the pinned store, runtime/replay.c). At the profile's
// host_grads_add_bandwidth, which counts the same bytes (mtrun --calibrate's
// grads+, 10 bytes a bf16 add).
static double grads_host_bytes(const Instr *in, int set) {
    double e = in->flags & XFER_BF16 ? 2.0 : 4.0;
    return (double)in->bytes / e * (e + (set ? 4.0 : 8.0));
}

// A segment instruction (COPY_IN, COPY_OUT, NORM, UPDATE) of a segment
// whose optimizer the plan places on the device (Plan.opt_device).
static int on_device(const Plan *p, const Instr *in) {
    int seg_op = in->kind == INS_COPY_IN || in->kind == INS_COPY_OUT || in->kind == INS_NORM || in->kind == INS_UPDATE;
    return seg_op && plan_opt_device(p, in->layer);
}

typedef struct OutDst {
    int64_t dst;
    int i;
} OutDst;
static int out_dst_cmp(const void *a, const void *b) {
    const OutDst *x = a, *y = b;
    return x->dst != y->dst ? (x->dst < y->dst ? -1 : 1) : x->i - y->i;
}

// The COPY_OUTs' times on a GPU: the ring overlaps each piece's copy with
// the host's add of the one before, so a COPY_OUT takes the longer of its
// link time and its host part. With one micro-batch a step, the first
// COPY_OUT of the stream into a parameter sets it, the others (tied
// weights' second) add; with more, every COPY_OUT is priced as an add (the
// first micro-batch's sets, cheaper, are not told apart: dur is one a
// stream). A layer's bf16 gradients (plan_grads_bf16) and an fp32 set have
// no host part: the copy lands in the store's pinned arrays. Returns the host bytes
// of the parts (for host memory's share).
static double grads_out_times(const Plan *p, const Target *t, const Placement *pl, double *dur) {
    if (strncmp(t->arch, "sm_", 3) != 0) return 0; // the cpu backend's add is its copy, priced as one
    int n = 0;
    for (int i = 0; i < p->ntrain; i++) n += p->train[i].kind == INS_COPY_OUT;
    OutDst *o = malloc((size_t)n * sizeof *o + 1);
    if (!o) return 0;
    n = 0;
    for (int i = 0; i < p->ntrain; i++)
        if (p->train[i].kind == INS_COPY_OUT) o[n++] = (OutDst){p->train[i].dst, i};
    qsort(o, (size_t)n, sizeof *o, out_dst_cmp);
    double host_bytes = 0;
    int grads_bf16 = plan_grads_bf16(p, pl);
    for (int k = 0; k < n; k++) {
        const Instr *in = &p->train[o[k].i];
        if ((grads_bf16 && in->dst >= p->host_global) || on_device(p, in)) continue;
        int set = p->graph->train.accumulate == 1 && (k == 0 || o[k - 1].dst != o[k].dst);
        if (set && !(in->flags & XFER_BF16)) continue; // an fp32 set is the copy itself, into the pinned store
        double b = grads_host_bytes(in, set), s = b / t->host_grads_add_bandwidth;
        if (s > dur[o[k].i]) dur[o[k].i] = s;
        host_bytes += b;
    }
    free(o);
    return host_bytes;
}

// The zero3-offload baseline (schedule.c names it in the plan's schedule,
// which the plan file carries): what DeepSpeed's code moves beyond mt's plan.
static int is_zero3(const Plan *p) { return p->schedule && strstr(p->schedule, "policy=zero3-offload") != NULL; }

// DeepSpeed ZeRO-3's host step, per parameter, in host memory bytes
// (stage3.py step): unscale_and_clip_grads multiplies the fp32 gradients in
// place (8), DeepSpeedCPUAdam reads w, g, m, v and writes w, m, v
// (csrc/adam/cpu_adam_impl.cpp Step_AVX: 28), and
// _reassign_or_swap_out_partitioned_parameters copies the fp32 master into
// the 16-bit partition (read 4, write 2 under bf16; 4 + 4 under f32). Its
// gradient norm is taken on the device (partition_grads), not here. At mt's
// AdamW rate (host_adamw_bandwidth): no published DeepSpeedCPUAdam
// throughput was established.
static double zero3_update_bytes(DType compute) { return 8.0 + 28.0 + (compute == DT_BF16 ? 6.0 : 8.0); }

// A layer gradient of `bytes` on the device (its storage dtype, elem bytes
// an element): what ZeRO-3 with offload_optimizer moves over the link for
// it, in link seconds. stage3.py partition_grads copies the reduced
// partition into the host's 16-bit grad_partitions_flat_buffer (out), back to
// the device ("ensure grad buffer is a CUDA buffer", in), then, at the
// accumulation boundary, the device's .float() of it into the fp32
// gradient of the offloaded optimizer (out at 4 bytes an element), all on
// one stream in turn.
static double zero3_grad_out_s(double bytes, double elem, const Target *t) {
    return bytes / t->d2h_bandwidth + bytes / t->h2d_bandwidth + bytes * 4.0 / elem / t->d2h_bandwidth;
}

const char *const PLACE_NAMES[PLACE_COUNT] = {"ram", "moments", "master", "grads", "weights"};

// The placement of a host store of global_elems + layers * layer_elems
// elements and an activation store of act bytes at `level`. Returns 0 when
// the level is not open to it (f32 streams the master from RAM; no tier;
// the bf16 copy with frozen parameters, whose only copy it is).
// layers_elems: every layer's segment together; layer_elems: the largest (a tier record).
// ranks: of the run (the layers' gradients are bf16 only with one: storage_grads_bf16).
// crossings: how many times a step the layers' weights, and the globals', cross the link (PLACE_WEIGHTS
// reads them from the tier each time).
static int place_at(const Graph *g, const PlaceBasis *b, int64_t act, const Target *t, int level, Placement *pl) {
    int bf16 = g->train.compute == DT_BF16, weights = level == PLACE_WEIGHTS;
    const double *crossings = b->crossings;
    int64_t layer_elems = b->layer_elems, wbytes = storage_weight_bytes(g->train.compute);
    double acc = (double)g->train.accumulate, per_global = (double)storage_host_bytes_per_param(g->train.compute);
    double per = per_global - (level < PLACE_GRADS && b->grads_bf16 ? 2.0 : 0.0); // a layer parameter's
    double layer_params = (double)b->layers_elems, globals = (double)b->global_elems;
    double total = globals * per_global + layer_params * per + (double)act;
    // frozen parameters: their storage dtype only, in RAM (common/storage.h), nothing on a tier; of the
    // elements given (a sharded rank's share), the frozen share of each (storage_frozen_saving's products)
    double all_global = (double)b->host_global, all_layers = (double)b->host_elems - all_global;
    double frozen_layers = all_layers > 0 ? (double)b->frozen[0] / all_layers : 0;
    if (all_global > 0) total -= (double)(b->frozen[1] * ((int64_t)per_global - wbytes)) * globals / all_global;
    if (all_layers > 0) total -= (double)(b->frozen[0] * ((int64_t)per - wbytes)) * layer_params / all_layers;
    layer_params *= 1.0 - frozen_layers;                       // what a tier could hold
    if ((level == PLACE_MASTER || weights) && !bf16) return 0; // f32 streams the master from RAM
    if (level > PLACE_RAM && t->tier_capacity <= 0) return 0;
    if (weights && b->frozen[0] + b->frozen[1] > 0) return 0;
    // bytes a layer parameter the tier holds, and reads and writes a step
    double held = level == PLACE_RAM ? 0
                                     : 8.0 + (bf16 && level >= PLACE_MASTER ? 4.0 : 0) +
                                           (level >= PLACE_GRADS ? 4.0 : 0) + (weights ? 2.0 : 0);
    double state = held - (level >= PLACE_GRADS ? 4.0 : 0) - (weights ? 2.0 : 0); // read and written by the update
    double grads = level >= PLACE_GRADS ? 4.0 * acc : 0; // accumulated on the tier each micro-batch
    *pl = (Placement){.level = (PlaceLevel)level, .ram_per_param = per - held, .tier_per_param = held};
    // the bf16 copy: written by each update, read at each crossing; the globals' too
    double weights_bytes = weights ? 2.0 * (layer_params + globals) : 0;
    pl->tier_bytes = (int64_t)(held * layer_params + (weights ? 2.0 * globals : 0));
    // three staging records (runtime/store/tier.h: reading i+1, updating i, writing i-1 back); the bf16 copy's
    // page cache, two layers (the one crossing and the next)
    double record = (held - (weights ? 2.0 : 0)) * (double)layer_elems * (1.0 - frozen_layers);
    pl->ram_bytes = (int64_t)(total - (double)pl->tier_bytes + 3.0 * record +
                              (weights ? 4.0 * (double)layer_elems : 0));
    pl->tier_read_bytes = (state + grads) * layer_params +
                          (weights ? 2.0 * (crossings[0] * layer_params + crossings[1] * globals) : 0);
    pl->tier_write_bytes = (state + grads) * layer_params + weights_bytes;
    if (level > PLACE_RAM)
        pl->tier_s = pl->tier_read_bytes / t->tier_read_bandwidth + pl->tier_write_bytes / t->tier_write_bandwidth;
    return 1;
}

// cost_place's rule: the first open level that fits (the last open one when none does).
static void place_store(const Graph *g, const PlaceBasis *b, int64_t act, const Target *t, Placement *pl) {
    for (int level = PLACE_RAM; level < PLACE_COUNT; level++)
        if (place_at(g, b, act, t, level, pl) && (double)pl->ram_bytes <= t->host_memory &&
            (level == PLACE_RAM || (double)pl->tier_bytes <= t->tier_capacity))
            return;
}

// A sharded plan's rank holds 1/ranks of every segment (dist_shard's chunks, at most ceil(len / ranks)).
static int64_t rank_share(const Plan *p, int64_t elems) {
    return p->sharded ? (elems + p->ranks - 1) / p->ranks : elems;
}

// What the placement counts of a segment of elems: a sharded plan's rank's share, or, for a plan priced
// as one rank of a sharded run (t->store_shards, compiler/schedule/scaleout.c), that run's rank's.
static int64_t placed_share(const Plan *p, const Target *t, int64_t elems) {
    int64_t n = !p->sharded && t->store_shards > 1 ? (int64_t)t->store_shards : 1;
    return (rank_share(p, elems) + n - 1) / n;
}

// How many times a step p's weights cross the link: [0] the layers', on average, [1] the globals' (a
// micro-batch's COPY_INs, accumulate times; 2 and 1 where the stream is not built yet).
static void weight_crossings(const Plan *p, double crossings[2]) {
    double in[2] = {0, 0}, acc = (double)p->graph->train.accumulate;
    double wbytes = (double)storage_weight_bytes(p->graph->train.compute);
    for (int i = 0; i < p->ntrain; i++)
        if (p->train[i].kind == INS_COPY_IN) in[p->train[i].layer < 0] += (double)p->train[i].bytes;
    double elems[2] = {(double)p->layer_base[p->graph->layers], (double)p->host_global};
    for (int k = 0; k < 2; k++)
        crossings[k] = p->ntrain == 0 ? (k ? 1.0 : 2.0) * acc : elems[k] > 0 ? in[k] * acc / (elems[k] * wbytes) : 0;
}

// The graph's sums place_at reads, for a store of those elements.
static void basis_of(const Graph *g, int ranks, int64_t global_elems, int64_t layers_elems, int64_t layer_elems,
                     PlaceBasis *b) {
    *b = (PlaceBasis){.global_elems = global_elems,
                      .layers_elems = layers_elems,
                      .layer_elems = layer_elems,
                      .grads_bf16 = storage_grads_bf16(g, ranks, 0),
                      .host_global = storage_host_global_elems(g),
                      .host_elems = storage_host_elems(g),
                      .frozen = {storage_frozen_elems(g, 0), storage_frozen_elems(g, 1)}};
}

void cost_place_basis(const Plan *p, const Target *t, PlaceBasis *b) {
    basis_of(p->graph, p->ranks, placed_share(p, t, p->host_global),
             placed_share(p, t, p->layer_base[p->graph->layers]), placed_share(p, t, p->host_layer), b);
    weight_crossings(p, b->crossings);
}

void cost_place_with(const Plan *p, const Target *t, const PlaceBasis *b, int64_t act, Placement *pl) {
    place_store(p->graph, b, act, t, pl);
}

void cost_place(const Plan *p, const Target *t, Placement *pl) {
    PlaceBasis b;
    cost_place_basis(p, t, &b);
    cost_place_with(p, t, &b, p->host_act_bytes, pl);
}

// The time of INS_UPDATE of layer (>= 0) beyond AdamW's own: its record's
// reads and writes on the tier, at the rates they run sequentially.
static double tier_update_s(const Plan *p, const Placement *pl) {
    return pl && pl->level > PLACE_RAM && p->graph->layers ? pl->tier_s / (double)p->graph->layers : 0;
}

// What train.c sums over the ranks after a step's micro-batches, before
// any update: a replicated plan's fp32 gradient accumulators, or a sharded
// plan's squared norms (a double a segment: its reduce-scatters summed the
// gradients). 0 for one process.
// (Left out where the ranks cannot reach each other on t: collective_seconds
// is infinite, and the scale-out comparison says why they do not fit.)
static double step_sums_s(const Plan *p, const Target *t) {
    if (p->ranks < 2) return 0;
    double s = p->sharded
                   ? collective_seconds(t, COLL_ALL_REDUCE, 8.0 * (double)(p->graph->layers + 2), p->ranks)
                   : collective_seconds(t, COLL_ALL_REDUCE, 4.0 * (double)storage_host_elems(p->graph), p->ranks);
    return isfinite(s) ? s : 0;
}

// Such an instruction's time, all at the device memory's rate: COPY_IN a
// copy from the device store into the arena (read and write), COPY_OUT its
// gradients read and added into the fp32 accumulators (read 4 and write 4
// an element), NORM the accumulators read, UPDATE AdamW's bytes (as the
// host's: w, m, v, g read, w, m, v and the copy written).
static double device_opt_time(const Plan *p, const Instr *in, const Target *t) {
    DType compute = p->graph->train.compute;
    double elems = (double)trained_elems(p, in->layer);
    switch ((InsKind)in->kind) {
    case INS_COPY_IN: return 2.0 * (double)in->bytes / t->hbm_bandwidth;
    case INS_COPY_OUT:
        return ((double)in->bytes + 8.0 * (double)in->bytes / (in->flags & XFER_BF16 ? 2 : 4)) / t->hbm_bandwidth;
    case INS_NORM: return 4.0 * (double)layer_elems(p, in->layer) / t->hbm_bandwidth;
    case INS_UPDATE: return elems * update_bytes(compute, 0) / t->hbm_bandwidth;
    default: return 0;
    }
}

// zero3: is_zero3(p), grads_bf16: plan_grads_bf16(p, pl), looked up once a plan.
static double instr_time(const Plan *p, const Instr *in, const Target *t, const KernelTimes *kt, const Placement *pl,
                         int zero3, int grads_bf16) {
    if (on_device(p, in)) return device_opt_time(p, in, t);
    switch ((InsKind)in->kind) {
    case INS_RUN: return run_time(kt, in->part, in->from, in->to, in->flags);
    case INS_COPY_IN:
    case INS_INPUT:
    case INS_LOAD: return (double)in->bytes / (in->flags & XFER_SHARD ? p->ranks : 1) / t->h2d_bandwidth;
    case INS_COPY_OUT: // a shard's: of the range, the rank's 1 / ranks on average
        if (zero3) return zero3_grad_out_s((double)in->bytes, in->flags & XFER_BF16 ? 2.0 : 4.0, t);
        return (double)in->bytes / (in->flags & XFER_SHARD ? p->ranks : 1) / t->d2h_bandwidth;
    case INS_SAVE:
    case INS_STAT: return (double)in->bytes / t->d2h_bandwidth;
    case INS_COPY: return 2.0 * (double)in->bytes / t->hbm_bandwidth;
    case INS_UPDATE: { // a layer's state streams from the tier while AdamW runs: the slower of the two
        DType compute = p->graph->train.compute;
        int layer_bf16 = in->layer >= 0 && grads_bf16;
        double adamw = (double)rank_share(p, (int64_t)trained_elems(p, in->layer)) *
                       (zero3 ? zero3_update_bytes(compute) : update_bytes(compute, layer_bf16)) /
                       t->host_adamw_bandwidth;
        double tier = in->layer >= 0 ? tier_update_s(p, pl) : 0;
        return adamw > tier ? adamw : tier;
    }
    case INS_NORM: // reads g: 4 bytes a parameter, 2 of a layer's bf16 gradients
        return (double)rank_share(p, (int64_t)layer_elems(p, in->layer)) * (in->layer >= 0 && grads_bf16 ? 2.0 : 4.0) /
               t->host_memory_bandwidth;
    case INS_ALLGATHER: return collective_seconds(t, COLL_ALL_GATHER, (double)in->bytes, p->ranks);
    case INS_REDUCE_SCATTER: return collective_seconds(t, COLL_REDUCE_SCATTER, (double)in->bytes, p->ranks);
    case INS_LOSS:
    case INS_FREE:
    case INS_RECORD:
    case INS_WAIT:
    case INS_COUNT: break;
    }
    return 0;
}

void cost_host_work(const Plan *p, const Target *t, const Placement *pl, double *update_s, double *optimizer_s,
                    double *updates) {
    *update_s = *optimizer_s = 0;
    int zero3 = is_zero3(p), grads_bf16 = plan_grads_bf16(p, pl);
    if (updates)
        for (int64_t l = 0; l < p->graph->layers + 2; l++) updates[l] = 0;
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        if ((in->kind != INS_UPDATE && in->kind != INS_NORM) || on_device(p, in)) continue; // (the host's only)
        double s = instr_time(p, in, t, NULL, pl, zero3, grads_bf16); // (the kernels' times price RUNs only)
        *optimizer_s += s;
        if (in->kind != INS_UPDATE) continue;
        *update_s += s;
        if (updates) updates[in->layer >= 0 ? in->layer : p->graph->layers + (in->layer == SEG_HEAD ? 0 : 1)] += s;
    }
}

int cost_instr_times(const Plan *p, const Target *t, double *dur) {
    CostKernels *k = cost_kernels(p->graph, t);
    Cost c;
    int rc = k ? cost_plan_with(p, t, k, &c, dur) : -1;
    cost_kernels_free(k);
    return rc;
}

enum { RES_DEVICE, RES_H2D, RES_D2H, RES_HOST, RES_NONE, RES_COUNT };

// A segment instruction placed on the device: its copies on no link, its
// norm and update on the device.
static int resource_of(const Plan *p, const Instr *in, const Target *t) {
    if (on_device(p, in)) return in->kind == INS_NORM || in->kind == INS_UPDATE ? RES_DEVICE : RES_NONE;
    switch ((InsKind)in->kind) {
    case INS_RUN:
    case INS_COPY: return RES_DEVICE;
    case INS_COPY_IN:
    case INS_INPUT:
    case INS_LOAD: return RES_H2D;
    case INS_COPY_OUT:
    case INS_SAVE:
    case INS_STAT: return t->link_duplex ? RES_D2H : RES_H2D;
    case INS_UPDATE:
    case INS_NORM: return RES_HOST;
    default: return RES_NONE;
    }
}

double cost_simulate(const Plan *p, const Instr *ins, int n, const Target *t, const double *dur, int host_work,
                     double *start, double *end) {
    double engine[ENG_COUNT] = {0}, busy[RES_COUNT] = {0}, last = 0;
    // A cpu target runs every engine on the one thread of the cpu backend:
    // one resource for all the work.
    int one_thread = strcmp(t->arch, "cpu") == 0;
    double *fired = calloc((size_t)p->nevents + 1, sizeof *fired);
    if (!fired) return 0;
    // The array order is a valid order of the engines' instructions (every
    // WAIT follows its RECORD), so one pass in it settles every start.
    for (int i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        double at = engine[in->engine];
        if (in->kind == INS_WAIT && fired[in->event] > at) at = fired[in->event];
        int r = one_thread && resource_of(p, in, t) != RES_NONE ? RES_DEVICE : resource_of(p, in, t);
        double d = (in->kind == INS_UPDATE || in->kind == INS_NORM) && !host_work ? 0 : dur[i];
        if (r != RES_NONE && d > 0 && busy[r] > at) at = busy[r];
        // both directions of a duplex link at once: each at duplex_efficiency of its rate
        int link = !one_thread && (r == RES_H2D || r == RES_D2H);
        if (link && t->link_duplex && busy[r == RES_H2D ? RES_D2H : RES_H2D] > at) d /= t->duplex_efficiency;
        double done = at + d;
        if (r != RES_NONE && d > 0) busy[r] = done;
        engine[in->engine] = done;
        if (in->kind == INS_RECORD) fired[in->event] = done;
        if (start) start[i] = at;
        if (end) end[i] = done;
        if (done > last) last = done;
    }
    free(fired);
    return last;
}

CostKernels *cost_kernels(const Graph *g, const Target *t) {
    KernelTimes *k = malloc(sizeof *k);
    if (k && kernel_times(g, t, k) != 0) {
        kernel_times_free(k);
        free(k);
        return NULL;
    }
    return k;
}

void cost_kernels_free(CostKernels *k) {
    if (k) kernel_times_free(k);
    free(k);
}

int cost_plan(const Plan *p, const Target *t, Cost *c) {
    CostKernels *k = cost_kernels(p->graph, t);
    int rc = k ? cost_plan_with(p, t, k, c, NULL) : -1;
    cost_kernels_free(k);
    return rc;
}

int cost_plan_with(const Plan *p, const Target *t, const CostKernels *k, Cost *c, double *times) {
    const Graph *g = p->graph;
    DType compute = g->train.compute;
    *c = (Cost){.device_peak_bytes = plan_device_bytes(p)};
    cost_place(p, t, &c->place);
    c->host_bytes = c->place.ram_bytes;
    double layer_in_bytes = 0, block_forward_s = 0;
    const KernelTimes kt = *k;
    double *dur = times ? times
                        : malloc(((size_t)p->ntrain + 1) * sizeof *dur); // (ntrain) each instruction's time, once
    int zero3 = is_zero3(p), grads_bf16 = plan_grads_bf16(p, &c->place);
    if (!dur) return -1;
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        double s = dur[i] = instr_time(p, in, t, &kt, &c->place, zero3, grads_bf16);
        if (on_device(p, in)) { // on the device: none of it on the link or the host
            if (in->kind == INS_NORM || in->kind == INS_UPDATE) c->device_optimizer_s += s;
            else c->device_copy_s += s;
            continue;
        }
        switch ((InsKind)in->kind) {
        case INS_RUN:
            c->compute_s += s;
            c->gemm_s += run_heavy(&kt, in->part, in->from, in->to, in->flags, 0);
            c->attention_s += run_heavy(&kt, in->part, in->from, in->to, in->flags, 1);
            if (part_is_block(in->part) && in->to <= g->parts[in->part].nfwd) // (no block RUN straddles nfwd)
                block_forward_s += s;
            break;
        case INS_COPY_IN:
        case INS_INPUT:
        case INS_LOAD:
            c->copy_in_bytes += in->flags & XFER_SHARD ? in->bytes / p->ranks : in->bytes; // (a shard: the rank's)
            c->copy_in_s += s;
            if (in->kind == INS_COPY_IN && in->layer >= 0) layer_in_bytes += (double)in->bytes;
            break;
        case INS_COPY_OUT:
        case INS_SAVE:
            c->copy_out_bytes += in->flags & XFER_SHARD ? in->bytes / p->ranks : in->bytes; // (a shard: the rank's)
            c->copy_out_s += s;
            if (in->kind == INS_COPY_OUT && zero3) { // the 16-bit copy back in and the fp32 copy out
                c->copy_in_bytes += in->bytes;
                c->copy_out_bytes += in->bytes * 4 / (in->flags & XFER_BF16 ? 2 : 4);
            }
            break;
        case INS_COPY: c->device_copy_s += s; break;
        case INS_UPDATE:
        case INS_NORM: c->optimizer_s += s; break;
        default: break;
        }
    }
    double grads_host = zero3 ? 0
                              : grads_out_times(p, t, &c->place, dur); // (zero3's are priced as DeepSpeed moves them)
    for (int i = 0; i < p->ntrain && grads_host > 0; i++)
        if (p->train[i].kind == INS_COPY_OUT) c->copy_out_s += dur[i] - (double)p->train[i].bytes / t->d2h_bandwidth;
    // Recompute: block forward work beyond one forward a layer.
    double kind_forward_s[MT_MAX_KINDS]; // one forward of a layer of each kind
    for (int kd = 0; kd < g->nkinds; kd++)
        kind_forward_s[kd] = run_time(&kt, kind_part(kd), 0, g->parts[kind_part(kd)].nfwd, 0);
    c->recompute_s = block_forward_s;
    for (int64_t l = 0; l < g->layers; l++) c->recompute_s -= kind_forward_s[g->layer_kind[l]];
    c->attention_kinds = kt.attn_kinds;
    if (c->recompute_s < 1e-12 * c->compute_s) c->recompute_s = 0;
    double wbytes = (double)storage_weight_bytes(compute);
    c->weight_crossings = p->layer_base[g->layers] ? layer_in_bytes / ((double)p->layer_base[g->layers] * wbytes) : 0;
    // A step: the first micro-batch does the host's work, the others only
    // wait for what they need of it (nothing: the updates are done).
    double first = cost_simulate(p, p->train, p->ntrain, t, dur, 1, NULL, NULL);
    double rest = g->train.accumulate > 1 ? cost_simulate(p, p->train, p->ntrain, t, dur, 0, NULL, NULL) : 0;
    if (!times) free(dur);
    // Host memory feeds the link and the optimizer alike: a micro-batch
    // takes at least all the bytes they move there at its bandwidth (the
    // optimizer's time is its bytes at that bandwidth).
    // The tier's transfers land in and leave from host memory too.
    c->grads_host_bytes = grads_host;
    double link_mem_s = ((double)(c->copy_in_bytes + c->copy_out_bytes) + grads_host +
                         (c->place.tier_read_bytes + c->place.tier_write_bytes) / (double)g->train.accumulate) /
                        t->host_memory_bandwidth;
    if (strcmp(t->arch, "cpu") != 0) {
        if (first < link_mem_s + c->optimizer_s) first = link_mem_s + c->optimizer_s;
        if (g->train.accumulate > 1 && rest < link_mem_s) rest = link_mem_s;
    }
    c->sums_s = step_sums_s(p, t);
    c->step_s = first + (double)(g->train.accumulate - 1) * rest + c->sums_s;
    return 0;
}

int cost_bounds(const Graph *g, const Target *t, int ranks, int sharded, Bounds *b) {
    KernelTimes kt;
    if (kernel_times(g, t, &kt) != 0) return -1;
    DType compute = g->train.compute;
    if (ranks < 2) ranks = 1, sharded = 0;
    // f: a rank's part of the host store: 1 / ranks sharded, else all of it; a
    // layer's gradients bf16 only in one process's store (ranks sum fp32 ones)
    int grads_bf16 = storage_grads_bf16(g, ranks, 0);
    double acc = (double)g->train.accumulate, f = sharded ? 1.0 / ranks : 1.0, all = (double)storage_host_elems(g),
           params = all * f, globals = (double)storage_host_global_elems(g) * f,
           wbytes = (double)storage_weight_bytes(compute);
    // AdamW's bytes, and the gradient norm's, which reads g (a layer's bf16 gradients: 2 bytes)
    // frozen parameters stream in, but have no gradient out and no update
    double frozen_g = (double)storage_frozen_elems(g, 1) * f, frozen_l = (double)storage_frozen_elems(g, 0) * f;
    double update_all = (globals - frozen_g) * update_bytes(compute, 0) +
                        (params - globals - frozen_l) * update_bytes(compute, grads_bf16);
    double norm_bytes = globals * 4.0 + (params - globals) * (grads_bf16 ? 2.0 : 4.0);
    double opt_bytes = update_all + norm_bytes;
    double norm_s = norm_bytes / t->host_memory_bandwidth;
    *b = (Bounds){0};
    // the ranks' collectives, on their one engine: every weight all-gathered and every gradient
    // reduce-scattered in fp32 once a step (sharded), or the fp32 gradients all-reduced (replicated)
    if (sharded)
        b->comm_s = collective_seconds(t, COLL_ALL_GATHER, all * wbytes, ranks) +
                    collective_seconds(t, COLL_REDUCE_SCATTER, all * 4.0, ranks);
    else b->comm_s = collective_seconds(t, COLL_ALL_REDUCE, all * 4.0, ranks);
    if (!isfinite(b->comm_s)) b->comm_s = 0;  // the ranks cannot reach each other on t (as step_sums_s)
    for (int pk = 0; pk < PART_COUNT; pk++) { // one forward and one backward of every part, every layer
        const Part *part = &g->parts[pk];
        // a block part: once for each layer of its kind
        double times = part_is_block(pk) ? (double)graph_kind_layers(g, part_kind(pk)) : 1.0;
        b->compute_s += run_time(&kt, pk, 0, part->nodes.n, 0) * times;
        b->backward_s += run_time(&kt, pk, part->nfwd, part->nodes.n, 0) * times;
    }
    kernel_times_free(&kt);
    b->compute_s *= acc;
    b->backward_s *= acc;
    b->in_s = params * wbytes / t->h2d_bandwidth;
    b->out_s = (params - frozen_g - frozen_l) * wbytes / t->d2h_bandwidth;
    b->update_s = update_all / t->host_adamw_bandwidth;
    b->host_s = b->update_s + norm_s;
    // every byte on the link is read from or written to host memory, which
    // the optimizer also reads and writes
    b->host_memory_s = ((2.0 * params - frozen_g - frozen_l) * wbytes + opt_bytes) / t->host_memory_bandwidth;
    // the NVMe tier: the least any plan puts there, with no activation store
    int64_t global_elems = 0, kind_elems[MT_MAX_KINDS] = {0}, layer_elems = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *pm = g->params.items[i];
        *(pm->in_block ? &kind_elems[pm->kind] : &global_elems) += storage_host_elems_of(shape_numel(&pm->shape));
    }
    for (int k = 0; k < g->nkinds; k++) layer_elems = kind_elems[k] > layer_elems ? kind_elems[k] : layer_elems;
    Placement pl; // (a sharded rank's: its 1 / ranks of each, as cost_place counts it)
    int64_t share = sharded ? ranks : 1;
    PlaceBasis basis;
    basis_of(g, ranks, (global_elems + share - 1) / share, (storage_host_elems(g) - global_elems + share - 1) / share,
             (layer_elems + share - 1) / share, &basis);
    basis.crossings[0] = basis.crossings[1] = 1; // the weights read from a tier once a step at least
    place_store(g, &basis, 0, t, &pl);
    b->tier_s = pl.tier_s;
    double link = t->link_duplex ? (b->in_s > b->out_s ? b->in_s : b->out_s) : b->in_s + b->out_s;
    double terms[] = {b->compute_s, link, b->host_s, b->host_memory_s, b->tier_s, b->comm_s};
    for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++)
        if (terms[i] > b->physical_s) b->physical_s = terms[i];
    // exact global-norm clipping: no weight of the next step goes in before
    // the last gradient of this one is out, so the link's two directions
    // cannot overlap across the step boundary; and no AdamW update starts
    // before the last gradient, while the next backward needs every updated
    // weight (through its forward), so the updates and a backward follow
    // each other in every step
    // (the updates stream the tier's state: each is at least its share of the tier's time)
    double update = b->update_s > b->tier_s ? b->update_s : b->tier_s;
    // the turn: the head's parameters' gradients (its backward writes them last) out, their
    // AdamW, and their weights in before the head's forward, the next step's first kernel
    const Part *head = &g->parts[PART_HEAD];
    for (int i = 0; i < head->grads.n; i++) {
        const Grad *gr = head->grads.items[i];
        if (gr->of->op == OP_PARAM && gr->grad)
            b->turn_s += (double)storage_bytes(compute, gr->grad) * f / t->d2h_bandwidth;
    }
    for (int i = 0; i < head->nodes.n; i++) {
        const Node *n = head->nodes.items[i];
        if (n->op != OP_PARAM) continue;
        double e = (double)storage_host_elems_of(shape_numel(&n->shape)) * f;
        b->turn_s += e * update_bytes(compute, 0) / t->host_adamw_bandwidth + e * wbytes / t->h2d_bandwidth;
    }
    double exact[] = {b->physical_s, b->in_s + b->out_s, update + b->backward_s, b->compute_s + b->turn_s};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (exact[i] > b->exact_s) b->exact_s = exact[i];
    return 0;
}
