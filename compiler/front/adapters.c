// adapters.c: what mtc's --lora, --freeze and --train do to the layer graph
// after sema and before tiling and autodiff. LoRA (Hu et al. 2021, as peft
// writes it) adds to every use of a target weight W [out, in], x @ W^T, the
// low-rank term (alpha / r) (x A^T) B^T with A [r, in] and B [out, r], two
// new parameters of the same block (or the globals), and freezes the base;
// frozen parameters (Param.frozen) then take no gradient, no moments and no
// update (autodiff.c, the host store).
#include <fnmatch.h>
#include <math.h>
#include <string.h>

#include "compiler/front/passes.h"

// Whether parameter p's module (its checkpoint name less ".weight") is
// `target` or ends in "." target: peft's rule for target_modules.
static int lora_target_of(const Param *p, const char *target, size_t tlen) {
    size_t n = strlen(p->ckpt);
    if (n < 7 || strcmp(p->ckpt + n - 7, ".weight") != 0) return 0;
    n -= 7;
    return n >= tlen && !strncmp(p->ckpt + n - tlen, target, tlen) && (n == tlen || p->ckpt[n - tlen - 1] == '.');
}

// A new parameter beside base: its LoRA A (which 1) or B (2).
static int lora_param(Graph *g, int base, int which, const AdapterOptions *o, Arena *a) {
    const Param *b = g->params.items[base];
    Param *p = arena_alloc(a, sizeof *p);
    if (!p) return -1;
    *p = *b;
    size_t module = strlen(b->ckpt) - 7; // less ".weight"
    p->name = arena_printf(a, "%s.lora_%c", b->name, which == 1 ? 'A' : 'B');
    p->ckpt = arena_printf(a, "%.*s.lora_%c.weight", (int)module, b->ckpt, which == 1 ? 'A' : 'B');
    p->shape = (Shape){.rank = 2,
                       .dims = {which == 1 ? o->lora_rank : b->shape.dims[0],
                                which == 1 ? b->shape.dims[1] : o->lora_rank}};
    // peft's init: A kaiming-uniform with a = sqrt(5), which bounds it by 1/sqrt(in); B zeros
    p->init = which == 1 ? INIT_UNIFORM : INIT_ZEROS;
    p->init_std = which == 1 ? 1.0 / sqrt((double)b->shape.dims[1]) : 0;
    p->init_given = 1, p->frozen = 0, p->lora = which, p->lora_of = base;
    p->lora_scale = o->lora_alpha / (double)o->lora_rank;
    if (!p->name || !p->ckpt) return -1;
    return ptrvec_push(a, &g->params, p);
}

static Node *lora_matmul(Arena *a, Part *part, PartKind pk, Node *x, Node *w, int64_t cols) {
    Shape s = x->shape;
    s.dims[s.rank - 1] = cols;
    Node *in[2] = {x, w}, *n = graph_add_node(a, part, pk, OP_MATMUL, DT_F32, &s, x->loc, 2, in);
    if (n) n->trans_b = 1;
    return n;
}

// Appends after matmul m = x @ W^T of a LoRA target (params pa, pb: its A
// and B) m + scale * ((x @ A^T) @ B^T); returns that sum, or NULL (out of memory).
static Node *lora_rewrite(Graph *g, Part *part, PartKind pk, Node *m, int pa, int pb, Node **param_nodes, Arena *a) {
    const Param *A = g->params.items[pa];
    for (int k = 0; k < 2; k++) { // the part's A and B nodes, once a part
        int idx = k ? pb : pa;
        if (param_nodes[k]) continue;
        const Param *p = g->params.items[idx];
        if (!(param_nodes[k] = graph_add_node(a, part, pk, OP_PARAM, DT_F32, &p->shape, m->loc, 0, NULL))) return NULL;
        param_nodes[k]->param = idx, param_nodes[k]->name = p->name;
    }
    Node *xa = lora_matmul(a, part, pk, m->in[0], param_nodes[0], A->shape.dims[0]); // (..., r)
    Node *xab = xa ? lora_matmul(a, part, pk, xa, param_nodes[1], m->shape.dims[m->shape.rank - 1]) : NULL;
    Node *scale = graph_add_node(a, part, pk, OP_CONST, DT_F32, NULL, m->loc, 0, NULL);
    if (!xab || !scale) return NULL;
    scale->value = A->lora_scale;
    Node *in[2] = {xab, scale}, *scaled = graph_add_node(a, part, pk, OP_MUL, DT_F32, &m->shape, m->loc, 2, in);
    Node *sum_in[2] = {m, scaled};
    Node *sum = scaled ? graph_add_node(a, part, pk, OP_ADD, DT_F32, &m->shape, m->loc, 2, sum_in) : NULL;
    if (sum) sum->name = m->name, sum->annot = m->annot;
    return sum;
}

// Whether node n uses parameter `base` as LoRA can wrap it: x @ transpose(W).
static int lora_use_ok(const Node *n, int base) {
    return n->op == OP_MATMUL && !n->trans_a && n->trans_b && n->in[1]->op == OP_PARAM && n->in[1]->param == base &&
           n->in[0]->op != OP_PARAM;
}

// Rewrites every use of base in part pk (A and B at params pa, pb). Old
// nodes keep their ids until the part is renumbered at the end, so repl,
// indexed by them, maps each rewritten matmul to its sum; the other parts'
// inputs that named a node of this part follow it to its new id.
static int lora_part(Graph *g, int pk, int base, int pa, int pb, Arena *a, Diag *d) {
    Part *part = &g->parts[pk];
    PtrVec old = part->nodes;
    Node **repl = arena_alloc(a, (size_t)old.n * sizeof(Node *) + 1), *param_nodes[2] = {NULL, NULL};
    if (!repl) return -1;
    part->nodes = (PtrVec){0};
    for (int i = 0; i < old.n; i++) {
        Node *n = old.items[i];
        for (int j = 0; j < n->nin; j++) {
            if (n->in[j]->op == OP_PARAM && n->in[j]->param == base && !lora_use_ok(n, base)) {
                const Param *p = g->params.items[base];
                diag_error(d, n->loc,
                           "--lora: '%s' (\"%s\") is used here other than as x @ transpose(%s), a torch Linear's "
                           "[out, in] weight; LoRA wraps only that",
                           p->name, p->ckpt, p->name);
                return -1;
            }
            if (n->in[j]->part == (PartKind)pk && repl[n->in[j]->id]) n->in[j] = repl[n->in[j]->id];
        }
        if (ptrvec_push(a, &part->nodes, n) != 0) return -1;
        if (lora_use_ok(n, base) && !(repl[i] = lora_rewrite(g, part, pk, n, pa, pb, param_nodes, a))) return -1;
    }
    Node **final = arena_alloc(a, (size_t)old.n * sizeof(Node *) + 1); // old id -> the node that stands for it
    if (!final) return -1;
    for (int i = 0; i < old.n; i++) final[i] = repl[i] ? repl[i] : old.items[i];
    if (part->output && repl[part->output->id]) part->output = repl[part->output->id];
    for (int i = 0; i < part->nodes.n; i++) ((Node *)part->nodes.items[i])->id = i;
    for (int q = 0; q < graph_nparts(g); q++)
        for (int i = 0; q != pk && i < g->parts[q].nodes.n; i++) {
            Node *n = g->parts[q].nodes.items[i];
            if (n->op == OP_INPUT && n->src_part == pk) n->src = final[n->src]->id;
        }
    return 0;
}

// --lora: every weight whose module is one of the targets gets A and B;
// every parameter but the adapters is frozen.
static int lora_apply(Graph *g, const AdapterOptions *o, Arena *a, Diag *d) {
    int nparams = g->params.n, found = 0;
    for (const char *t = o->lora_targets; t && *t;) {
        size_t tlen = strcspn(t, ",");
        int hits = 0;
        for (int i = 0; i < nparams; i++) {
            Param *p = g->params.items[i];
            if (!lora_target_of(p, t, tlen) || p->lora) continue;
            if (p->shape.rank != 2) {
                diag_error(d, p->loc, "--lora: target '%.*s' names '%s', which is not a matrix", (int)tlen, t, p->name);
                return -1;
            }
            int pa = g->params.n, pb = pa + 1;
            if (lora_param(g, i, 1, o, a) != 0 || lora_param(g, i, 2, o, a) != 0) return -1;
            p->frozen = 1;
            for (int pk = 0; pk < graph_nparts(g); pk++)
                if (lora_part(g, pk, i, pa, pb, a, d) != 0) return -1;
            hits++;
        }
        if (!hits) {
            diag_error(d, (Loc){0, 0}, "--lora: target '%.*s' names no weight of %s (a module name, as q_proj)",
                       (int)tlen, t, g->model_name);
            return -1;
        }
        found += hits;
        t += tlen + (t[tlen] == ',');
    }
    for (int i = 0; i < g->params.n; i++) { // peft's rule: only the adapters train (--train may add others)
        Param *p = g->params.items[i];
        p->frozen = !p->lora || p->buffer;
    }
    return found ? 0 : -1;
}

// Whether pattern (fnmatch's) names parameter p: its DSL name, or its
// checkpoint name whole (a block's with its prefix, "{i}" as written there).
static int pattern_names(const char *pattern, const Param *p, Arena *a) {
    if (!fnmatch(pattern, p->name, 0) || !fnmatch(pattern, p->ckpt, 0)) return 1;
    const char *full = p->in_block ? arena_printf(a, "%s%s", p->prefix, p->ckpt) : p->ckpt;
    return full && !fnmatch(pattern, full, 0);
}

int adapters_apply(Graph *g, const AdapterOptions *o, Arena *a, Diag *d) {
    if (o->lora_rank && lora_apply(g, o, a, d) != 0) return -1;
    for (int k = 0; k < o->npatterns; k++) { // in command-line order: the last that names a parameter decides
        int hits = 0;
        for (int i = 0; i < g->params.n; i++) {
            Param *p = g->params.items[i];
            if (!pattern_names(o->patterns[k].pattern, p, a)) continue;
            p->frozen = !o->patterns[k].train || p->buffer;
            hits++;
        }
        if (!hits) {
            diag_error(d, (Loc){0, 0},
                       "--%s '%s' names no parameter of %s (a DSL name or a checkpoint name, as "
                       "'model.layers.{i}.mlp.*' or '*norm*')",
                       o->patterns[k].train ? "train" : "freeze", o->patterns[k].pattern, g->model_name);
            return -1;
        }
    }
    int trained = 0;
    for (int i = 0; i < g->params.n; i++) trained += !((const Param *)g->params.items[i])->frozen;
    if (!trained) {
        diag_error(d, (Loc){0, 0}, "every parameter of %s is frozen: there is nothing to train", g->model_name);
        return -1;
    }
    return 0;
}
