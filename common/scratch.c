// scratch.c: the device scratch of a plan's kernels (scratch.h).
#include "common/scratch.h"
#include "common/storage.h"

#include "common/attention.h"
#include "common/scan.h"

static int64_t round_256(int64_t v) { return (v + 255) & ~(int64_t)255; }

MoeDims moe_node_dims(const Graph *g, const Node *n) {
    int bwd = n->op == OP_MOE_BWD;
    const Shape *x = &n->in[bwd ? 1 : 0]->shape, *w = &n->in[bwd ? 3 : 2]->shape; // x [rows.., C], w_gate [E, F, C]
    MoeDims d = {0};
    d.C = (int)x->dims[x->rank - 1];
    d.rows = shape_numel(x) / d.C;
    d.E = (int)w->dims[0], d.F = (int)moe_expert_width(n), d.form = n->moe_form;
    d.K = (int)graph_routed_experts(g, n->in[bwd ? 2 : 1]);
    d.alpha = (float)n->scale, d.limit = (float)n->softcap;
    DType t = g->train.compute;
    d.bf16 = storage_dtype(t, n->in[bwd ? 1 : 0]) == DT_BF16 && storage_dtype(t, n->in[bwd ? 3 : 2]) == DT_BF16;
    return d;
}

int64_t kernel_scratch_bytes(const KirKernel *k, const Graph *g, int part) {
    if (k->kind == KK_EXPR) return 8 * kir_acc64_offset(k, k->nargs);
    if (k->kind == KK_GEMM) return gemm_workspace_bytes(&k->gemm);
    if (k->kind == KK_ATTN_BWD) return (int64_t)attn_workspace_bytes(k->attn.B, k->attn.T, k->attn.H);
    if (k->kind != KK_NODE) return 0;
    const Node *n = g->parts[part].nodes.items[k->anchor];
    if (n->op == OP_MOE || n->op == OP_MOE_BWD) {
        MoeDims m = moe_node_dims(g, n);
        int bwd = n->op == OP_MOE_BWD;
        return moe_scratch_bytes(m, bwd, moe_chunk_rows(m, bwd, MOE_CHUNK_BYTES));
    }
    if (scan_is_op(n->op)) return scan_scratch_bytes(n);
    if (n->op == OP_LOAD_BALANCE_BWD) { // E doubles: its logits' last axis
        const Shape *l = &n->in[1]->shape;
        return 8 * l->dims[l->rank - 1];
    }
    return 0;
}

int64_t program_scratch_bytes(const KirProgram *prog, const Graph *g) {
    int64_t need = 256;
    for (int p = 0; p < PART_COUNT; p++)
        for (int i = 0; i < prog->parts[p].n; i++) {
            int64_t b = kernel_scratch_bytes(&prog->parts[p].k[i], g, p);
            if (b > need) need = b;
        }
    return round_256(need);
}

int plan_scratch_engines(const Plan *p) {
    int runs[ENG_COUNT] = {0}, n = 0;
    runs[ENG_COMPUTE] = 1; // operations outside a stream run there
    for (int i = 0; i < p->ntrain + p->neval; i++) {
        const Instr *in = i < p->ntrain ? &p->train[i] : &p->eval[i - p->ntrain];
        if (in->kind == INS_RUN && in->engine >= 0 && in->engine < ENG_COUNT) runs[in->engine] = 1;
    }
    for (int e = 0; e < ENG_COUNT; e++) n += runs[e];
    return n;
}

int64_t plan_doc_starts_bytes(const Plan *p) {
    return p->scratch_bytes ? round_256(p->graph->train.batch * p->graph->train.seq * 4) : 0;
}

int64_t plan_opt_device_array(int64_t n, int array) { return (int64_t)array * round_256(4 * n); }

int64_t plan_opt_device_segment_bytes(int64_t n, DType compute) {
    return 4 * round_256(4 * n) + (compute == DT_BF16 ? round_256(2 * n) : 0);
}

int64_t plan_opt_device_at(const Plan *p, int64_t seg) {
    if (!plan_opt_device(p, seg)) return -1;
    int64_t at = 0;
    for (int64_t s = SEG_FIRST; s < seg; s++)
        if (plan_opt_device(p, s)) at += plan_opt_device_segment_bytes(plan_segment_len(p, s), p->graph->train.compute);
    return at;
}

int64_t plan_opt_device_bytes(const Plan *p) {
    int64_t bytes = 0;
    for (int64_t s = SEG_FIRST; p->opt_device && s < p->graph->layers; s++)
        if (plan_opt_device(p, s))
            bytes += plan_opt_device_segment_bytes(plan_segment_len(p, s), p->graph->train.compute);
    return bytes;
}

int64_t plan_device_bytes(const Plan *p) {
    return round_256(p->arena_bytes) + (int64_t)plan_scratch_engines(p) * p->scratch_bytes + plan_doc_starts_bytes(p) +
           plan_opt_device_bytes(p);
}
