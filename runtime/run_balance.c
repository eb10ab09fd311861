// run_balance.c: the buffers' balance rules (Param.balance_mask,
// DeepSeek-V3's auxiliary-loss-free bias update). Each micro-batch's
// reports (INS_STAT of the rule's router mask) add to the step's loads; at
// the step's end the loads are summed over the ranks and each element's
// sign(mean load - load) is handed to the host store, which moves the
// buffer by rate x sign with the segment's pending update (store_update),
// after AdamW, on every rank alike (each its own slice of a sharded store).
#include <stdlib.h>
#include <string.h>

#include "runtime/run.h"

// The segment of layer l's copy of parameter prm is on the device: the rule,
// a host write, would be lost there.
static int on_device_with_rule(const Run *r, const Param *prm) {
    for (int64_t l = 0; l < r->p->graph->layers; l++)
        if (param_in_layer(r->p->graph, prm, l) && plan_opt_device(r->p, l)) return 1;
    return 0;
}

// Why the run cannot apply parameter prm's rule, or NULL.
static const char *refused(const Run *r, const Param *prm) {
    if (on_device_with_rule(r, prm))
        return "the plan places its layers' optimizer on the device (mtc --device-optimizer), where the rule's host "
               "update would be lost: compile the plan with --device-optimizer none";
    return NULL;
}

int balance_open(Run *r, char *err, size_t errcap) {
    const Graph *g = r->p->graph;
    for (int i = 0; i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        if (!prm->balance_mask) continue;
        const char *why = refused(r, prm);
        if (why) {
            snprintf(err, errcap, "the balance rule of buffer '%s' (bias_update = %g): %s", prm->name,
                     prm->balance_rate, why);
            return -1;
        }
        if (!r->balance_loads && !(r->balance_loads = calloc((size_t)g->params.n, sizeof *r->balance_loads)))
            return snprintf(err, errcap, "out of memory"), -1;
        if (!r->balance_signs && !(r->balance_signs = calloc((size_t)g->params.n, sizeof *r->balance_signs)))
            return snprintf(err, errcap, "out of memory"), -1;
        size_t n = (size_t)(g->layers * shape_numel(&prm->shape)); // (layers, E)
        r->balance_loads[i] = calloc(n, sizeof(double));
        r->balance_signs[i] = calloc(n, 1);
        if (!r->balance_loads[i] || !r->balance_signs[i]) return snprintf(err, errcap, "out of memory"), -1;
    }
    r->hs.balance = r->balance_signs;
    return 0;
}

void balance_free(Run *r) {
    for (int i = 0; r->balance_loads && i < r->p->graph->params.n; i++) {
        free(r->balance_loads[i]);
        free(r->balance_signs[i]);
    }
    free(r->balance_loads);
    free(r->balance_signs);
    r->hs.balance = NULL;
}

void balance_count(Run *r) {
    const Plan *p = r->p;
    for (int i = 0; r->balance_loads && i < p->graph->params.n; i++) {
        const Param *prm = p->graph->params.items[i];
        if (!prm->balance_mask) continue;
        int64_t E = shape_numel(&prm->shape), rows = shape_numel(&prm->balance_mask->shape) / E;
        for (int k = 0; k < p->ntrain; k++) {
            const Instr *in = &p->train[k];
            if (in->kind != INS_STAT || in->part != kind_part(prm->kind) || in->from != prm->balance_mask->id) continue;
            double *loads = r->balance_loads[i] + in->layer * E; // (E) this layer's
            for (int64_t row = 0; row < rows; row++)             // (rows, E): 1 where the row chose the expert
                for (int64_t e = 0; e < E; e++) loads[e] += replay_stat_at(in, r->stats, row * E + e) != 0;
        }
    }
}

void balance_step_end(Run *r) {
    const Graph *g = r->p->graph;
    for (int i = 0; r->balance_loads && i < g->params.n; i++) {
        const Param *prm = g->params.items[i];
        if (!prm->balance_mask) continue;
        int64_t E = shape_numel(&prm->shape);
        dist_sum_doubles(r->o->dist, r->balance_loads[i], (int)(g->layers * E)); // every rank's micro-batches
        for (int64_t l = 0; l < g->layers; l++) {
            double *loads = r->balance_loads[i] + l * E, mean = 0; // (E) the layer's, then zeroed for the next step
            int8_t *sign = r->balance_signs[i] + l * E;
            for (int64_t e = 0; e < E; e++) mean += loads[e];
            mean /= (double)E;
            for (int64_t e = 0; e < E; e++) sign[e] = (int8_t)((mean > loads[e]) - (mean < loads[e]));
            memset(loads, 0, (size_t)E * sizeof *loads);
        }
    }
}
