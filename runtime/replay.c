#include "replay.h"

#include <math.h>
#include <stdlib.h>

#include "exec.h"

float replay(Backend *be, const Instr *ins, int n, HostStore *hs, const int32_t *const *inputs) {
    float loss = NAN;
    for (int i = 0; i < n; i++) {
        const Instr *in = &ins[i];
        switch ((InsKind)in->kind) {
        case INS_COPY_IN: be->copy_in(be, in->dst, hs->w + in->src, in->bytes); break;
        case INS_COPY_OUT: be->copy_out_add(be, hs->g + in->dst, in->src, in->bytes); break;
        case INS_COPY: be->copy(be, in->dst, in->src, in->bytes); break;
        case INS_INPUT: be->copy_in(be, in->dst, inputs[in->input], in->bytes); break;
        case INS_RUN: be->run(be, (PartKind)in->part, in->from, in->to); break;
        case INS_LOSS: loss = be->read_scalar(be, in->src); break;
        case INS_COUNT: break;
        }
    }
    return loss;
}

// Points a part's parameter nodes at layer `layer`'s weights in the store,
// and its model inputs at the batch.
static void bind_params_inputs(PartState *ps, const Plan *p, HostStore *hs, int64_t layer,
                               const int32_t *const *inputs) {
    const Part *part = ps->part;
    for (int i = 0; i < part->nfwd; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op == OP_PARAM) ps->val[i] = hs->w + store_offset(p, n->param, layer);
        if (n->op == OP_INPUT && n->src_part == SRC_MODEL_INPUT) ps->val[i] = (void *)inputs[n->src];
    }
}

static void grads_add(const PartState *ps, const Plan *p, HostStore *hs, int64_t layer) {
    for (int i = 0; i < ps->part->grads.n; i++) {
        const Grad *g = ps->part->grads.items[i];
        if (g->of->op != OP_PARAM || !g->grad) continue;
        float *dst = hs->g + store_offset(p, g->of->param, layer);
        const float *src = ps->val[g->grad->id];
        for (int64_t k = 0; k < shape_numel(&g->of->shape); k++) dst[k] += src[k];
    }
}

static void *grad_buffer(const PartState *ps, const Node *of) {
    const Grad *g = part_grad_of(ps->part, of);
    return g && g->grad ? ps->val[g->grad->id] : NULL;
}

float reference_step(const Plan *p, HostStore *hs, const int32_t *const *inputs, int backward) {
    const Graph *g = p->graph;
    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];
    int64_t L = g->layers;
    PartState hs_head = {0}, hs_tail = {0}, *layers = calloc((size_t)L, sizeof(PartState));
    int ok = layers && exec_init(&hs_head, head, PREC_F32) == 0 && exec_init(&hs_tail, tail, PREC_F32) == 0;
    for (int64_t l = 0; ok && l < L; l++) ok = exec_init(&layers[l], block, PREC_F32) == 0;
    float loss = NAN;
    if (ok) {
        const Node *x = part_input_from(block, PART_HEAD), *tx = part_input_from(tail, PART_BLOCK);
        bind_params_inputs(&hs_head, p, hs, 0, inputs);
        exec_run(&hs_head, 0, head->nfwd);
        for (int64_t l = 0; l < L; l++) {
            bind_params_inputs(&layers[l], p, hs, l, inputs);
            layers[l].val[x->id] = l == 0 ? hs_head.val[head->output->id] : layers[l - 1].val[block->output->id];
            exec_run(&layers[l], 0, block->nfwd);
        }
        bind_params_inputs(&hs_tail, p, hs, 0, inputs);
        hs_tail.val[tx->id] = layers[L - 1].val[block->output->id];
        exec_run(&hs_tail, 0, backward ? tail->nodes.n : tail->nfwd);
        loss = *(float *)hs_tail.val[tail->output->id];
        if (backward) {
            grads_add(&hs_tail, p, hs, 0);
            void *seed = grad_buffer(&hs_tail, tx);
            for (int64_t l = L - 1; l >= 0; l--) {
                layers[l].val[block->grad_seed->id] = seed;
                exec_run(&layers[l], block->nfwd, block->nodes.n);
                grads_add(&layers[l], p, hs, l);
                seed = grad_buffer(&layers[l], x);
            }
            hs_head.val[head->grad_seed->id] = seed;
            exec_run(&hs_head, head->nfwd, head->nodes.n);
            grads_add(&hs_head, p, hs, 0);
        }
    }
    for (int64_t l = 0; layers && l < L; l++) exec_free(&layers[l]);
    free(layers);
    exec_free(&hs_head);
    exec_free(&hs_tail);
    return loss;
}
