// ref_forward: the forward pass of a model in the reference executor
// (runtime/backend/exec.c, double precision), from weights in a safetensors file and
// the model's integer inputs in a raw file, with no plan: for models mtc
// cannot plan yet (mixture of experts) checked against an independent numpy
// forward (tests/check_moe.py). Head, then the block once per layer (each
// layer's weights by checkpoint name), then the tail.
//
// usage: ref_forward MODEL.mt WEIGHTS.safetensors INPUTS.i32 [--batch N --seq N] [--logits FILE]
//   INPUTS.i32: forward's arguments in order, each its elements as
//   little-endian int32 (tokens then targets for a language model).
// Prints "loss L" (the tail's output) and "aux A" (the sum over layers of
// every loss add_loss joins to the objective); exit 1 on any error.
// --logits FILE writes the loss's first operand (the logits, when the tail
// ends in cross_entropy) as little-endian f64, row-major (tests/check_hf.py
// compares them with transformers').
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/io.h"
#include "compiler/front/passes.h"
#include "runtime/backend/blas_core.h"
#include "runtime/backend/exec.h"
#include "runtime/model_io/safetensors.h"

typedef struct Run {
    const Graph *g;
    StSet st;
    int32_t *inputs; // (sum of the model inputs' elements) forward's arguments, one after another
    PartState ps[PART_COUNT];
    Arena a; // the parameters' bound buffers
} Run;

static int fail(const char *what) {
    fprintf(stderr, "ref_forward: %s\n", what);
    return 1;
}

// Binds param node n (a Param of g) for layer `layer` in double.
static int bind_param(Run *r, PartState *ps, const Node *n, int64_t layer) {
    const Param *p = r->g->params.items[n->param];
    Shape es = param_element_shape(p);
    int64_t each = shape_numel(&es);
    double *buf = arena_alloc(&r->a, (size_t)shape_numel(&p->shape) * sizeof(double)); // (p's shape)
    float *f = malloc((size_t)each * sizeof(float));                                   // (one element's)
    if (!buf || !f) return free(f), fail("out of memory");
    for (int64_t e = 0; e < param_elements(p); e++) {
        const char *name = param_ckpt_name(&r->a, p, layer, e);
        const StTensor *t = name ? st_find(&r->st, name) : NULL;
        if (!t || st_numel(t) != each) {
            fprintf(stderr, "ref_forward: no tensor \"%s\" of %lld elements\n", name ? name : "?", (long long)each);
            return free(f), 1;
        }
        st_to_f32(t, f);
        for (int64_t k = 0; k < each; k++) buf[e * each + k] = f[k];
    }
    free(f);
    ps->val[n->id] = buf;
    return 0;
}

// Binds part pk's params for `layer` and its inputs: model inputs, the
// head's values, and for the block's input from the head `carried` (the
// previous layer's output, or the head's on layer 0).
static int bind_part(Run *r, PartKind pk, int64_t layer, void *carried) {
    PartState *ps = &r->ps[pk];
    const Part *part = ps->part;
    for (int i = 0; i < part->nfwd; i++) {
        const Node *n = part->nodes.items[i];
        if (n->op == OP_PARAM && bind_param(r, ps, n, layer) != 0) return 1;
        if (n->op != OP_INPUT) continue;
        if (n->src_part == SRC_MODEL_INPUT) {
            int64_t off = 0;
            for (int k = 0; k < n->src; k++) off += shape_numel(&((ModelInput *)r->g->inputs.items[k])->shape);
            ps->val[i] = r->inputs + off;
        } else if (n->src_part == PART_HEAD) {
            int head_out = r->g->parts[PART_HEAD].output->id;
            ps->val[i] = part_is_block(pk) && n->src == head_out ? carried : r->ps[PART_HEAD].val[n->src];
        } else if (part_is_block(n->src_part)) {
            ps->val[i] = carried;
        } else {
            return fail("a part input from nowhere");
        }
    }
    return 0;
}

// The sum of the losses add_loss joins in part pk's last run.
static double joined_losses(const PartState *ps) {
    double sum = 0;
    for (int i = 0; i < ps->part->nfwd; i++) {
        const Node *n = ps->part->nodes.items[i];
        if (n->op == OP_ADD_LOSS) sum += ((const double *)ps->val[n->in[1]->id])[0];
    }
    return sum;
}

int main(int argc, char **argv) {
    mt_blas_core_pick(); // OpenBLAS's kernels for this CPU, as mtrun picks them
    SemaOptions opt = {0};
    const char *logits_path = NULL;
    int bad = argc < 4;
    for (int i = 4; i < argc && !bad; i += 2) {
        if (i + 1 >= argc) bad = 1;
        else if (!strcmp(argv[i], "--batch")) opt.batch = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) opt.seq = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--logits")) logits_path = argv[i + 1];
        else bad = 1;
    }
    if (bad)
        return fail("usage: ref_forward MODEL.mt WEIGHTS.safetensors INPUTS.i32 [--batch N --seq N] [--logits FILE]");
    char *text, *raw, err[1024];
    size_t len, rawlen;
    if (io_read_file(argv[1], &text, &len) != 0 || io_read_file(argv[3], &raw, &rawlen) != 0)
        return fail("cannot read the model or the inputs");
    Source src = {.path = argv[1], .text = text, .len = len};
    Diag diag = {.src = &src, .sink = stderr};
    Arena arena = {0};
    Model *m = dsl_parse(&src, &arena, &diag);
    Graph *g = m ? sema_lower(m, &opt, &arena, &diag) : NULL;
    if (!g || autodiff(g, &arena, &diag) != 0) return 1; // autodiff sets nfwd
    Run r = {.g = g, .inputs = (int32_t *)raw};
    int64_t want = 0; // forward's arguments (not the loss scale a backward reads)
    int nargs = g->inputs.n - (graph_loss_scale_input(g) >= 0);
    for (int k = 0; k < nargs; k++) want += shape_numel(&((ModelInput *)g->inputs.items[k])->shape);
    if ((int64_t)rawlen != want * 4) {
        fprintf(stderr, "ref_forward: %s holds %zu bytes; the model's inputs are %lld int32\n", argv[3], rawlen,
                (long long)want);
        return 1;
    }
    if (st_open(&r.st, argv[2], err, sizeof err) != 0) return fail(err);
    for (int pk = 0; pk < graph_nparts(g); pk++)
        if (exec_init(&r.ps[pk], &g->parts[pk], PREC_F64) != 0) return fail("out of memory");
    if (bind_part(&r, PART_HEAD, 0, NULL) != 0) return 1;
    exec_run(&r.ps[PART_HEAD], 0, g->parts[PART_HEAD].nfwd);
    size_t bytes = (size_t)shape_numel(&g->parts[PART_BLOCK].output->shape) * sizeof(double); // every kind's
    double *carried = malloc(bytes), aux = 0; // (the block output's shape)
    int64_t pooled_layers, pooled_rows, E = graph_pooled_experts(g, &pooled_layers, &pooled_rows);
    double *sums = calloc((size_t)(g->layers * 2 * E) + 1, sizeof(double)); // (layers, 2 E) a pooled loss's
    if (!carried || !sums) return fail("out of memory");
    memcpy(carried, r.ps[PART_HEAD].val[g->parts[PART_HEAD].output->id], bytes);
    for (int64_t l = 0; l < g->layers; l++) {
        int pk = block_part(g, l); // its kind's block
        const Part *block = &g->parts[pk];
        if (bind_part(&r, (PartKind)pk, l, carried) != 0) return 1;
        r.ps[pk].pool = (LoadBalancePool){sums, l, g->layers, (double)(pooled_layers * pooled_rows)};
        exec_run(&r.ps[pk], 0, block->nfwd);
        aux += joined_losses(&r.ps[pk]);
        memcpy(carried, r.ps[pk].val[block->output->id], bytes);
    }
    if (bind_part(&r, PART_TAIL, 0, carried) != 0) return 1;
    exec_run(&r.ps[PART_TAIL], 0, g->parts[PART_TAIL].nfwd);
    aux += joined_losses(&r.ps[PART_HEAD]) + joined_losses(&r.ps[PART_TAIL]);
    printf("loss %.17g\naux %.17g\n", ((double *)r.ps[PART_TAIL].val[g->parts[PART_TAIL].output->id])[0], aux);
    if (logits_path) {
        const Node *loss = g->parts[PART_TAIL].output, *lg = loss->nin ? loss->in[0] : NULL;
        FILE *f = lg && loss->op == OP_CROSS_ENTROPY ? fopen(logits_path, "wb") : NULL;
        size_t n = lg ? (size_t)shape_numel(&lg->shape) : 0; // (the logits' shape)
        if (!f || fwrite(r.ps[PART_TAIL].val[lg->id], sizeof(double), n, f) != n || fclose(f) != 0)
            return fail("cannot write the logits (does the tail end in cross_entropy?)");
    }
    for (int pk = 0; pk < graph_nparts(g); pk++) exec_free(&r.ps[pk]);
    free(carried);
    free(sums);
    st_close(&r.st);
    arena_free(&r.a);
    arena_free(&arena);
    free(text);
    free(raw);
    return 0;
}
