#include "cost.h"

static double node_bytes(const Node *n) { return (double)shape_numel(&n->shape) * 4.0; }

double cost_node(const Node *n, const Target *t, DType compute) {
    if (n->op == OP_INPUT || n->op == OP_PARAM || n->op == OP_VIEW || n->op == OP_RESHAPE || n->op == OP_CONST)
        return 0;
    double matrix = (compute == DT_BF16 ? t->matrix_flops_bf16 : t->matrix_flops_f32) * t->gemm_efficiency;
    double flops = 0, bytes = node_bytes(n);
    for (int i = 0; i < n->nin; i++) bytes += node_bytes(n->in[i]);
    if (n->op == OP_MATMUL) {
        const Shape *a = &n->in[0]->shape;
        double k = (double)(n->trans_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1]);
        flops = 2.0 * (double)shape_numel(&n->shape) * k;
    } else if (n->op == OP_ATTENTION || n->op == OP_ATTENTION_BWD) {
        const Shape *q = &n->in[n->op == OP_ATTENTION ? 0 : 1]->shape;
        double B = (double)q->dims[0], T = (double)q->dims[1], W = (double)q->dims[2];
        flops = 4.0 * B * T * T * W * (n->causal ? 0.5 : 1.0) * (n->op == OP_ATTENTION ? 1.0 : 2.5);
    } else {
        flops = (double)shape_numel(&n->shape) * 8.0; // a few operations an element
    }
    double rate = n->op == OP_MATMUL || n->op == OP_ATTENTION || n->op == OP_ATTENTION_BWD ? matrix : t->vector_flops;
    double by_flops = flops / rate, by_bytes = bytes / t->hbm_bandwidth;
    return (by_flops > by_bytes ? by_flops : by_bytes) + t->kernel_launch_s;
}

static double run_time(const Part *part, int from, int to, const Target *t, DType compute) {
    double s = 0;
    for (int i = from; i < to; i++) s += cost_node(part->nodes.items[i], t, compute);
    return s;
}

double cost_instr(const Plan *p, const Instr *in, const Target *t) {
    switch ((InsKind)in->kind) {
    case INS_RUN: return run_time(&p->graph->parts[in->part], in->from, in->to, t, p->graph->train.compute);
    case INS_COPY_IN:
    case INS_INPUT: return (double)in->bytes / t->h2d_bandwidth;
    case INS_COPY_OUT: return (double)in->bytes / t->d2h_bandwidth;
    case INS_COPY: return 2.0 * (double)in->bytes / t->hbm_bandwidth;
    case INS_LOSS:
    case INS_COUNT: break;
    }
    return 0;
}

void cost_plan(const Plan *p, const Target *t, Cost *c) {
    const Graph *g = p->graph;
    DType compute = g->train.compute;
    *c = (Cost){.device_peak_bytes = p->arena_bytes};
    int64_t params = p->host_global + g->layers * p->host_layer;
    c->host_bytes = params * 16;
    int block_forwards = 0, layer0_copies = 0;
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        double s = cost_instr(p, in, t);
        switch ((InsKind)in->kind) {
        case INS_RUN:
            c->compute_s += s;
            if (in->part == PART_BLOCK && in->from == 0) block_forwards++;
            break;
        case INS_COPY_IN:
        case INS_INPUT:
            c->copy_in_bytes += in->bytes;
            c->copy_in_s += s;
            if (in->kind == INS_COPY_IN && in->layer == 0) layer0_copies++;
            break;
        case INS_COPY_OUT:
            c->copy_out_bytes += in->bytes;
            c->copy_out_s += s;
            break;
        case INS_COPY: c->device_copy_s += s; break;
        case INS_LOSS:
        case INS_COUNT: break;
        }
    }
    // Forward work beyond one pass per layer is recompute.
    const Part *block = &g->parts[PART_BLOCK];
    if (block_forwards > g->layers)
        c->recompute_s = (double)(block_forwards - g->layers) * run_time(block, 0, block->nfwd, t, compute);
    c->weight_crossings = layer0_copies;
    c->optimizer_s = (double)params * 32.0 / t->host_memory_bandwidth;
    // One stream, no overlap: every engine waits for the others.
    c->step_s = c->compute_s + c->copy_in_s + c->copy_out_s + c->device_copy_s + c->optimizer_s;
    double useful = c->compute_s - c->recompute_s, in_once = (double)params * 4.0 / t->h2d_bandwidth,
           out_once = (double)params * 4.0 / t->d2h_bandwidth;
    double lb = useful;
    if (in_once > lb) lb = in_once;
    if (out_once > lb) lb = out_once;
    if (c->optimizer_s > lb) lb = c->optimizer_s;
    c->lower_bound_s = lb;
}
