#include "cost.h"

#include <stdlib.h>
#include <string.h>

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

static double run_time(const Part *part, int from, int to, int flags, const Target *t, DType compute) {
    double s = 0;
    for (int i = from; i < to; i++) {
        const Node *n = part->nodes.items[i];
        if ((flags & RUN_SKIP_HEAVY) && (n->op == OP_MATMUL || n->op == OP_ATTENTION)) continue;
        s += cost_node(n, t, compute);
    }
    return s;
}

// Floats of layer `layer`'s segment of the host store (-1: the globals).
static double layer_floats(const Plan *p, int32_t layer) {
    return (double)(layer < 0 ? p->host_global : p->host_layer);
}

double cost_instr(const Plan *p, const Instr *in, const Target *t) {
    switch ((InsKind)in->kind) {
    case INS_RUN:
        return run_time(&p->graph->parts[in->part], in->from, in->to, in->flags, t, p->graph->train.compute);
    case INS_COPY_IN:
    case INS_INPUT:
    case INS_LOAD: return (double)in->bytes / t->h2d_bandwidth;
    case INS_COPY_OUT:
    case INS_SAVE: return (double)in->bytes / t->d2h_bandwidth;
    case INS_COPY: return 2.0 * (double)in->bytes / t->hbm_bandwidth;
    case INS_UPDATE: return layer_floats(p, in->layer) * 32.0 / t->host_memory_bandwidth;
    case INS_NORM: return layer_floats(p, in->layer) * 4.0 / t->host_memory_bandwidth;
    case INS_LOSS:
    case INS_FREE:
    case INS_RECORD:
    case INS_WAIT:
    case INS_COUNT: break;
    }
    return 0;
}

enum { RES_DEVICE, RES_H2D, RES_D2H, RES_HOST, RES_NONE, RES_COUNT };

static int resource_of(const Instr *in, const Target *t) {
    switch ((InsKind)in->kind) {
    case INS_RUN:
    case INS_COPY: return RES_DEVICE;
    case INS_COPY_IN:
    case INS_INPUT:
    case INS_LOAD: return RES_H2D;
    case INS_COPY_OUT:
    case INS_SAVE: return t->link_duplex ? RES_D2H : RES_H2D;
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
        int r = one_thread && resource_of(in, t) != RES_NONE ? RES_DEVICE : resource_of(in, t);
        double d = (in->kind == INS_UPDATE || in->kind == INS_NORM) && !host_work ? 0
                   : dur                                                          ? dur[i]
                                                                                  : cost_instr(p, in, t);
        if (r != RES_NONE && d > 0 && busy[r] > at) at = busy[r];
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

void cost_plan(const Plan *p, const Target *t, Cost *c) {
    const Graph *g = p->graph;
    DType compute = g->train.compute;
    *c = (Cost){.device_peak_bytes = p->arena_bytes};
    int64_t params = p->host_global + g->layers * p->host_layer;
    c->host_bytes = params * 16 + p->host_act_bytes;
    const Part *block = &g->parts[PART_BLOCK];
    double layer_in_bytes = 0, block_forward_s = 0;
    double *dur = malloc(((size_t)p->ntrain + 1) * sizeof *dur); // (ntrain) each instruction's time, once
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        double s = cost_instr(p, in, t);
        if (dur) dur[i] = s;
        switch ((InsKind)in->kind) {
        case INS_RUN:
            c->compute_s += s;
            if (in->part == PART_BLOCK && in->to <= block->nfwd) block_forward_s += s; // (no block RUN straddles nfwd)
            break;
        case INS_COPY_IN:
        case INS_INPUT:
        case INS_LOAD:
            c->copy_in_bytes += in->bytes;
            c->copy_in_s += s;
            if (in->kind == INS_COPY_IN && in->layer >= 0) layer_in_bytes += (double)in->bytes;
            break;
        case INS_COPY_OUT:
        case INS_SAVE:
            c->copy_out_bytes += in->bytes;
            c->copy_out_s += s;
            break;
        case INS_COPY: c->device_copy_s += s; break;
        case INS_UPDATE:
        case INS_NORM: c->optimizer_s += s; break;
        default: break;
        }
    }
    // Recompute: block forward work beyond one forward a layer.
    c->recompute_s = block_forward_s - (double)g->layers * run_time(block, 0, block->nfwd, 0, t, compute);
    if (c->recompute_s < 1e-12 * c->compute_s) c->recompute_s = 0;
    c->weight_crossings = g->layers && p->host_layer ? layer_in_bytes / ((double)g->layers * (double)p->host_layer * 4.0) : 0;
    // A step: the first micro-batch does the host's work, the others only
    // wait for what they need of it (nothing: the updates are done).
    double first = cost_simulate(p, p->train, p->ntrain, t, dur, 1, NULL, NULL);
    double rest = g->train.accumulate > 1 ? cost_simulate(p, p->train, p->ntrain, t, dur, 0, NULL, NULL) : 0;
    free(dur);
    c->step_s = first + (double)(g->train.accumulate - 1) * rest;
    double acc = (double)g->train.accumulate;
    double useful = (c->compute_s - c->recompute_s) * acc, in_once = (double)params * 4.0 / t->h2d_bandwidth,
           out_once = (double)params * 4.0 / t->d2h_bandwidth, host = (double)params * 36.0 / t->host_memory_bandwidth;
    double lb = useful;
    if (in_once > lb) lb = in_once;
    if (out_once > lb) lb = out_once;
    if (host > lb) lb = host;
    c->lower_bound_s = lb;
}
