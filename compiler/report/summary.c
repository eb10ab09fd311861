#include "compiler/report/summary.h"

#include "common/json.h"
#include "common/storage.h"

#include <string.h>

static int used_in(const Graph *g, PartKind part, int param) {
    const PtrVec *nodes = &g->parts[part].nodes;
    for (int i = 0; i < nodes->n; i++) {
        const Node *n = nodes->items[i];
        if (n->op == OP_PARAM && n->param == param) return 1;
    }
    return 0;
}

void summary_compute(const Graph *g, int ranks, Summary *s) {
    *s = (Summary){0};
    int64_t *per_kind = s->per_kind;
    for (int i = 0; i < g->params.n; i++) {
        const Param *p = g->params.items[i];
        int64_t n = shape_numel(&p->shape);
        if (p->buffer) {
            s->buffers += n * param_copies(g, p);
            continue;
        }
        if (p->in_block) per_kind[p->kind] += n;
        else if (p->first_use == PART_HEAD) s->head += n;
        else s->tail += n;
        if (!p->in_block && p->first_use == PART_HEAD && used_in(g, PART_TAIL, i)) s->tied += n;
    }
    for (int k = 0; k < g->nkinds; k++)
        if (per_kind[k] > s->per_layer) s->per_layer = per_kind[k];
    for (int k = 0; k < g->nkinds; k++) {
        s->kind_layers[k] = graph_kind_layers(g, k);
        s->blocks += s->kind_layers[k] * per_kind[k];
    }
    s->total = s->head + s->blocks + s->tail;
    // the host store's bytes, as mtc's fit check and mtrun count them
    // (common/storage.h): each parameter aligned, at its bytes per parameter,
    // a layer's 2 less where the layers' gradients are bf16
    s->grads_bf16 = storage_grads_bf16(g, ranks, 0);
    s->global_bytes_per_param = storage_host_bytes_per_param(g->train.compute);
    s->bytes_per_param = s->global_bytes_per_param - (s->grads_bf16 ? 2 : 0);
    s->host_bytes = storage_host_bytes(g, s->grads_bf16);
}

// 1234567 -> "1,234,567"
static const char *grouped(int64_t v, char *buf) {
    char raw[32];
    int n = snprintf(raw, sizeof raw, "%lld", (long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0 && raw[i - 1] != '-') buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = 0;
    return buf;
}

// The buffers' elements, not parameters, and their checkpoint names
// ("{i}." the layer where in a block).
static void print_buffers(FILE *out, const Graph *g, int64_t elements) {
    char b1[40];
    fprintf(out, "  %-8s %20s  (not parameters:", "buffers", grouped(elements, b1));
    for (int i = 0, first = 1; i < g->params.n; i++) {
        const Param *p = g->params.items[i];
        if (!p->buffer) continue;
        fprintf(out, "%s %s%s", first ? "" : ",", p->in_block ? p->prefix : "", p->ckpt);
        first = 0;
    }
    fprintf(out, ")\n");
}

void summary_print(FILE *out, const Graph *g, int ranks, const char *path) {
    Summary s;
    summary_compute(g, ranks, &s);
    char b1[40], b2[40], b3[40];
    const TrainConfig *t = &g->train;
    fprintf(out, "model %s (%s): batch %lld, seq %lld, compute %s\n", g->model_name, path, (long long)t->batch,
            (long long)t->seq, dtype_name(t->compute));
    fprintf(out, "  %-8s %20s\n", "part", "parameters");
    fprintf(out, "  %-8s %20s\n", "head", grouped(s.head, b1));
    if (g->nkinds > 1) { // an order of block kinds: each layer streams by itself, its kind's size
        fprintf(out, "  %-8s %20s  = %lld layers of %d kinds, up to %s per layer (\"%s\"):\n", g->block_name,
                grouped(s.blocks, b1), (long long)g->layers, g->nkinds, grouped(s.per_layer, b2), g->block_prefix);
        for (int k = 0; k < g->nkinds; k++)
            fprintf(out, "  %-8s %20s  = %lld x %s per layer (%s)\n", "", grouped(s.kind_layers[k] * s.per_kind[k], b1),
                    (long long)s.kind_layers[k], grouped(s.per_kind[k], b2), g->kind_name[k] ? g->kind_name[k] : "?");
    } else
        fprintf(out, "  %-8s %20s  = %lld x %s per layer (\"%s\")\n", g->block_name, grouped(s.blocks, b1),
                (long long)g->layers, grouped(s.per_layer, b2), g->block_prefix);
    fprintf(out, "  %-8s %20s", "tail", grouped(s.tail, b1));
    if (s.tied) fprintf(out, "  (+ %s tied with the head, counted once)", grouped(s.tied, b3));
    fprintf(out, "\n  %-8s %20s\n", "total", grouped(s.total, b1));
    if (s.buffers) print_buffers(out, g, s.buffers);
    fprintf(out, "  host memory %s bytes (%.2f GB): %lld B/param = fp32 master 4 + Adam m, v 8 + %s%s%s\n",
            grouped(s.host_bytes, b1), (double)s.host_bytes / 1e9, (long long)s.bytes_per_param,
            s.grads_bf16 ? "bf16 grads 2" : "fp32 grads 4",
            t->compute == DT_BF16 ? " + bf16 copy 2" : " (the master streams as the f32 copy)",
            s.grads_bf16 ? " (one micro-batch a step: the layers' gradients land as bf16; the globals' stay fp32, 18 "
                           "B/param)"
                         : "");
    int64_t frozen = storage_frozen_elems(g, 0) + storage_frozen_elems(g, 1); // (aligned elements, as stored)
    if (frozen)
        fprintf(out, "  of them frozen (no gradient, moments or master): %s elements at %lld B/param, %.2f GB\n",
                grouped(frozen, b1), (long long)storage_weight_bytes(t->compute),
                (double)frozen * (double)storage_weight_bytes(t->compute) / 1e9);
}

// One tensor of p's: a buffer marked "buffer", and "bias_update" with its balance rule's rate.
static void json_param(FILE *out, const char *name, const Shape *shape, const Param *p, int *first) {
    fprintf(out, "%s\n    {\"name\": ", *first ? "" : ",");
    json_str(out, name);
    fprintf(out, ", \"shape\": [");
    for (int d = 0; d < shape->rank; d++) fprintf(out, "%s%lld", d ? ", " : "", (long long)shape->dims[d]);
    fprintf(out, "]%s", p->buffer ? ", \"buffer\": true" : "");
    if (p->balance_mask) fprintf(out, ", \"bias_update\": %.17g", p->balance_rate);
    fprintf(out, "}");
    *first = 0;
}

void summary_print_json(FILE *out, const Graph *g, int ranks, const char *path, Arena *a) {
    Summary s;
    summary_compute(g, ranks, &s);
    fprintf(out, "{\n  \"model\": ");
    json_str(out, g->model_name);
    fprintf(out, ",\n  \"file\": ");
    json_str(out, path);
    fprintf(out, ",\n  \"batch\": %lld,\n  \"seq\": %lld,\n  \"compute_dtype\": \"%s\",\n", (long long)g->train.batch,
            (long long)g->train.seq, dtype_name(g->train.compute));
    fprintf(out, "  \"params_total\": %lld,\n  \"params_head\": %lld,\n  \"params_tail\": %lld,\n", (long long)s.total,
            (long long)s.head, (long long)s.tail);
    fprintf(out, "  \"params_tied\": %lld,\n  \"buffers_total\": %lld,\n", (long long)s.tied, (long long)s.buffers);
    fprintf(out, "  \"blocks\": [{\"name\": ");
    json_str(out, g->block_name);
    fprintf(out, ", \"prefix\": ");
    json_str(out, g->block_prefix);
    fprintf(out, ", \"layers\": %lld, \"kinds\": %d, \"params_per_layer\": %lld, \"params\": %lld, \"by_kind\": [",
            (long long)g->layers, g->nkinds, (long long)s.per_layer, (long long)s.blocks);
    for (int k = 0; k < g->nkinds; k++) {
        fprintf(out, "%s{\"name\": ", k ? ", " : "");
        json_str(out, g->kind_name[k] ? g->kind_name[k] : "?");
        fprintf(out, ", \"layers\": %lld, \"params_per_layer\": %lld}", (long long)s.kind_layers[k],
                (long long)s.per_kind[k]);
    }
    fprintf(out, "]}],\n");
    fprintf(out,
            "  \"host_bytes_per_param\": %lld,\n  \"host_bytes_per_global_param\": %lld,\n  \"host_grads_bf16\": %s,\n"
            "  \"host_bytes\": %lld,\n",
            (long long)s.bytes_per_param, (long long)s.global_bytes_per_param, s.grads_bf16 ? "true" : "false",
            (long long)s.host_bytes);
    fprintf(out, "  \"host_frozen_elems\": %lld,\n",
            (long long)(storage_frozen_elems(g, 0) + storage_frozen_elems(g, 1)));
    // Checkpoint order: head globals, the layers, then tail-only globals.
    fprintf(out, "  \"params\": [");
    int first = 1;
    for (int pass = 0; pass < 3; pass++) {
        for (int64_t layer = 0; layer < (pass == 1 ? g->layers : 1); layer++) {
            for (int i = 0; i < g->params.n; i++) {
                const Param *p = g->params.items[i];
                int want = pass == 1 ? param_in_layer(g, p, layer)
                                     : !p->in_block && (p->first_use == PART_HEAD) == (pass == 0);
                if (!want) continue;
                Shape es = param_element_shape(p);
                for (int64_t e = 0; e < param_elements(p); e++) {
                    char *name = param_ckpt_name(a, p, layer, e);
                    json_param(out, name ? name : "?", &es, p, &first);
                }
            }
        }
    }
    fprintf(out, "\n  ]\n}\n");
}
