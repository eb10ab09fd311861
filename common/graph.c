// graph.c: names, shape helpers and the text dump of the layer graph.
#include "common/graph.h"

#include <stdlib.h>
#include <string.h>

static const char *const OP_NAMES[] = {
    "input",
    "param",
    "const",
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "matmul",
    "embed",
    "arange",
    "layernorm",
    "rmsnorm",
    "gelu",
    "silu",
    "swiglu",
    "rope",
    "attention",
    "softmax",
    "cross_entropy",
    "reshape",
    "slice",
    "concat",
    "transpose",
    "sum_to",
    "embed_bwd",
    "layernorm_bwd",
    "rmsnorm_bwd",
    "gelu_bwd",
    "silu_bwd",
    "softmax_bwd",
    "cross_entropy_bwd",
    "attention_bwd",
    "pad",
    "view",
    "tanh",
    "sigmoid",
    "erf",
    "exp",
    "log",
    "abs",
    "lt",
    "le",
    "eq",
    "where",
    "top_k",
    "moe",
    "moe_bwd",
    "load_balance",
    "load_balance_bwd",
    "add_loss",
    "attention_lse",
    "conv1d",
    "conv1d_bwd",
    "delta_rule",
    "delta_rule_bwd",
    "ssd",
    "ssd_bwd",
    "floor",
};
_Static_assert(sizeof OP_NAMES / sizeof OP_NAMES[0] == OP_COUNT, "OP_NAMES out of sync with OpKind");

static const char *const DTYPE_NAMES[] = {"f32", "i32", "bf16"};
_Static_assert(sizeof DTYPE_NAMES / sizeof DTYPE_NAMES[0] == DT_COUNT, "DTYPE_NAMES out of sync");

static const char *const PART_NAMES[] = {"head",   "block",  "tail",   "block1", "block2",
                                         "block3", "block4", "block5", "block6", "block7"};
_Static_assert(sizeof PART_NAMES / sizeof PART_NAMES[0] == PART_COUNT, "PART_NAMES out of sync");

const char *annot_name(Annot a) {
    static const char *names[] = {"", "keep", "recompute", "offload"};
    _Static_assert(sizeof names / sizeof names[0] == ANNOT_OFFLOAD + 1, "annot_name");
    return names[a];
}

const char *op_name(OpKind op) { return OP_NAMES[op]; }
const char *dtype_name(DType t) { return DTYPE_NAMES[t]; }
const char *part_name(PartKind p) { return PART_NAMES[p]; }

Node *graph_add_node(Arena *a, Part *part, PartKind pk, OpKind op, DType dt, const Shape *shape, Loc loc, int nin,
                     Node **in) {
    Node *n = arena_alloc(a, sizeof *n);
    if (!n) return NULL;
    *n = (Node){.op = op,
                .id = part->nodes.n,
                .part = pk,
                .dtype = dt,
                .loc = loc,
                .nin = nin,
                .src_part = SRC_MODEL_INPUT,
                .param = -1,
                .rope_scale = 1};
    if (shape) n->shape = *shape;
    if (nin) {
        n->in = arena_alloc(a, (size_t)nin * sizeof(Node *));
        if (!n->in) return NULL;
        memcpy(n->in, in, (size_t)nin * sizeof(Node *));
    }
    if (ptrvec_push(a, &part->nodes, n) != 0) return NULL;
    return n;
}

Node *part_input_from(const Part *part, int from) {
    int n = part->nfwd ? part->nfwd : part->nodes.n;
    for (int i = 0; i < n; i++) {
        Node *nd = part->nodes.items[i];
        if (nd->op == OP_INPUT && nd->src_part == from) return nd;
    }
    return NULL;
}

int graph_loss_scale_input(const Graph *g) {
    const Node *seed = g->parts[PART_TAIL].grad_seed;
    return seed && seed->op == OP_INPUT && seed->src_part == SRC_MODEL_INPUT ? seed->src : -1;
}

const Grad *part_grad_of(const Part *part, const Node *of) {
    for (int i = 0; i < part->grads.n; i++) {
        const Grad *g = part->grads.items[i];
        if (g->of == of) return g;
    }
    return NULL;
}

int64_t shape_numel(const Shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= s->dims[i];
    return n;
}

char *shape_str(const Shape *s, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < s->rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

int shape_eq(const Shape *a, const Shape *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

int64_t param_elements(const Param *p) { return strstr(p->ckpt, "{e}") ? p->shape.dims[0] : 1; }

Shape param_element_shape(const Param *p) {
    Shape s = p->shape;
    if (!strstr(p->ckpt, "{e}")) return s;
    s.rank--;
    for (int i = 0; i < s.rank; i++) s.dims[i] = s.dims[i + 1];
    return s;
}

int op_is_heavy(OpKind op) {
    return op == OP_MATMUL || op == OP_ATTENTION || op == OP_ATTENTION_LSE || op == OP_MOE || op == OP_DELTA_RULE ||
           op == OP_SSD;
}

// ---------------------------------------------------------------- MoE routing, from the data flow

// What graph_routed_experts walks: the graph, and per part a bound a node
// (-1: not yet, -2: being computed).
typedef struct Routing {
    const Graph *g;
    int64_t *bound[PART_COUNT]; // (nodes.n) each
} Routing;

static int64_t last_dim(const Node *n) { return n->shape.rank ? n->shape.dims[n->shape.rank - 1] : 1; }

static int64_t routed_bound(Routing *r, const Node *n);

// Of operands in[from ..] of n that span n's last axis, the least bound
// (a product is 0 where any factor is); E + 1 (no router) when none does.
static int64_t least_bound(Routing *r, const Node *n, int from, int to, int64_t E) {
    int64_t b = E + 1;
    for (int j = from; j < to && j < n->nin; j++)
        if (last_dim(n->in[j]) == E && n->in[j]->shape.rank == n->shape.rank) {
            int64_t bj = routed_bound(r, n->in[j]);
            if (bj < b) b = bj;
        }
    return b;
}

// Whether n is the scalar constant 0.
static int is_zero(const Node *n) { return n->op == OP_CONST && n->value == 0; }

// Whether n is a scalar constant a softmax turns into 0 beside any finite
// f32 logit of a row: -1e30 or less (router's own mask, ops.c).
static int is_masked_logit(const Node *n) { return n->op == OP_CONST && n->value <= -1e30; }

// The most entries of one row of n (along its last axis, E wide) that can
// be nonzero, by what made n: a top_k mask its top_k; a product (or a
// quotient's dividend, a where whose other branch is 0, a comparison
// x > 0 or x < 0) no more than its sparsest factor spanning the row; a sum no more than its terms together;
// a softmax of logits masked to -inf (where(mask, logits, -1e30)) the
// mask's; a value from another part its source's; anything else E + 1
// (no router limits it: every entry may be nonzero, and nothing said so).
static int64_t routed_rule(Routing *r, const Node *n, int64_t E) {
    switch (n->op) {
    case OP_TOP_K: return n->top_k < E ? n->top_k : E;
    case OP_MUL: return least_bound(r, n, 0, 2, E);
    case OP_DIV: return least_bound(r, n, 0, 1, E);
    case OP_NEG:
    case OP_RESHAPE: return last_dim(n->in[0]) == E ? routed_bound(r, n->in[0]) : E + 1;
    case OP_ADD:
    case OP_SUB: {
        if (last_dim(n->in[0]) != E || last_dim(n->in[1]) != E) return E + 1;
        int64_t a = routed_bound(r, n->in[0]), b = n->in[1] != n->in[0] ? routed_bound(r, n->in[1]) : 0;
        return a > E || b > E ? E + 1 : a + b < E ? a + b : E; // (x + x: x's entries)
    }
    case OP_LT: // 0 < b (gt(b, 0)) or a < 0: 1 only where b, or a, is not 0
        return is_zero(n->in[0]) ? least_bound(r, n, 1, 2, E) : is_zero(n->in[1]) ? least_bound(r, n, 0, 1, E) : E + 1;
    case OP_WHERE: // cond ? a : 0
        return is_zero(n->in[2]) ? least_bound(r, n, 0, 2, E) : E + 1;
    case OP_SOFTMAX: { // along the last axis, of where(top_k mask, logits, -inf): a row's K ones keep K logits
        const Node *x = n->in[0], *mask = x->op == OP_WHERE ? x->in[0] : NULL;
        while (mask && (mask->op == OP_RESHAPE || mask->op == OP_VIEW)) mask = mask->in[0];
        int routed = n->axis == n->shape.rank - 1 && mask && mask->op == OP_TOP_K && last_dim(mask) == E &&
                     x->in[0]->shape.rank == n->shape.rank && is_masked_logit(x->in[2]);
        return !routed ? E + 1 : mask->top_k < E ? mask->top_k : E;
    }
    case OP_INPUT: {
        const Node *src = n->src_part >= 0 && n->src_part < PART_COUNT && n->src >= 0 &&
                                  n->src < r->g->parts[n->src_part].nodes.n
                              ? r->g->parts[n->src_part].nodes.items[n->src]
                              : NULL;
        return src && last_dim(src) == E ? routed_bound(r, src) : E + 1;
    }
    default: return E + 1;
    }
}

static int64_t routed_bound(Routing *r, const Node *n) {
    int64_t E = last_dim(n), *memo = n->part >= 0 && n->part < PART_COUNT ? r->bound[n->part] : NULL;
    if (!memo || n->id < 0 || n->id >= r->g->parts[n->part].nodes.n || r->g->parts[n->part].nodes.items[n->id] != n)
        return E + 1;
    if (memo[n->id] == -2) return E + 1; // (a cycle: no graph has one)
    if (memo[n->id] >= 0) return memo[n->id];
    memo[n->id] = -2;
    return memo[n->id] = routed_rule(r, n, E);
}

// The bound of gates' rows: at most E where a router limits them, E + 1 where none does.
static int64_t gates_bound(const Graph *g, const Node *gates) {
    Routing r = {.g = g};
    int64_t E = last_dim(gates), ok = 1;
    for (int p = 0; p < PART_COUNT && ok; p++) {
        int n = g->parts[p].nodes.n;
        r.bound[p] = malloc(((size_t)n + 1) * sizeof(int64_t));
        ok = r.bound[p] != NULL;
        for (int i = 0; ok && i < n; i++) r.bound[p][i] = -1;
    }
    int64_t k = ok ? routed_bound(&r, gates) : E + 1;
    for (int p = 0; p < PART_COUNT; p++) free(r.bound[p]);
    return k;
}

int64_t graph_routed_experts(const Graph *g, const Node *gates) {
    int64_t k = gates_bound(g, gates), E = last_dim(gates);
    return k < E ? k : E;
}

int graph_gates_routed(const Graph *g, const Node *gates) { return gates_bound(g, gates) <= last_dim(gates); }

int64_t graph_pooled_experts(const Graph *g, int64_t *layers, int64_t *rows) {
    int64_t E = 0, per_kind[MT_MAX_KINDS] = {0};
    *layers = *rows = 0;
    for (int k = 0; k < g->nkinds; k++) {
        const Part *part = &g->parts[kind_part(k)];
        for (int i = 0; i < part->nfwd; i++) {
            const Node *n = part->nodes.items[i];
            if (n->op != OP_LOAD_BALANCE || !n->pooled) continue;
            const Shape *s = &n->in[0]->shape;
            E = s->dims[s->rank - 1], *rows = shape_numel(s) / E, per_kind[k]++;
        }
    }
    for (int64_t l = 0; E && l < g->layers; l++) *layers += per_kind[g->layer_kind[l]];
    return E;
}

int64_t param_copies(const Graph *g, const Param *p) {
    if (!p->in_block) return 1;
    int64_t n = 0;
    for (int64_t l = 0; l < g->layers; l++) n += param_in_layer(g, p, l);
    return n;
}

char *param_ckpt_name(Arena *a, const Param *p, int64_t layer, int64_t element) {
    const char *ckpt = p->ckpt, *e = strstr(ckpt, "{e}");
    if (e) ckpt = arena_printf(a, "%.*s%lld%s", (int)(e - ckpt), ckpt, (long long)element, e + 3);
    if (!ckpt || !p->in_block) return ckpt ? arena_strdup(a, ckpt) : NULL;
    const char *prefix = p->prefix, *mark = strstr(prefix, "{i}");
    return arena_printf(a, "%.*s%lld%s%s", (int)(mark - prefix), prefix, (long long)layer, mark + 3, ckpt);
}

// Writes the attributes an op uses, e.g. " heads=12 causal=1".
static void dump_attrs(FILE *out, const Graph *g, const Node *n) {
    switch (n->op) {
    case OP_INPUT:
        if (n->src_part == SRC_GRAD_SEED) fprintf(out, " grad_seed");
        else if (n->src_part == SRC_MODEL_INPUT) fprintf(out, " %s", ((ModelInput *)g->inputs.items[n->src])->name);
        else fprintf(out, " %s.%%%d", part_name((PartKind)n->src_part), n->src);
        break;
    case OP_PARAM: fprintf(out, " %s", ((Param *)g->params.items[n->param])->name); break;
    case OP_CONST: fprintf(out, " %g", n->value); break;
    case OP_MATMUL:
        if (n->trans_a) fprintf(out, " trans_a");
        if (n->trans_b) fprintf(out, " trans_b");
        break;
    case OP_LAYERNORM:
    case OP_RMSNORM:
    case OP_LAYERNORM_BWD:
    case OP_RMSNORM_BWD: fprintf(out, " eps=%g", n->eps); break;
    case OP_ROPE:
        fprintf(out, " heads=%d theta=%g", n->heads, n->theta);
        if (n->rope_rule) fprintf(out, " %s", n->rope_rule);
        if (n->rope_scale != 1) fprintf(out, " cos_sin_scale=%.9g", n->rope_scale);
        fprintf(out, "%s%s", n->rope_interleaved ? " interleaved" : "", n->inverse ? " inverse" : "");
        break;
    case OP_ATTENTION:
    case OP_ATTENTION_LSE:
        fprintf(out, " heads=%d kv_heads=%d causal=%d window=%lld scale=%g softcap=%g", n->heads, n->kv_heads,
                n->causal, (long long)n->window, n->scale, n->softcap);
        if (n->chunk) fprintf(out, " chunk=%lld", (long long)n->chunk);
        break;
    case OP_SOFTMAX:
    case OP_CONCAT: fprintf(out, " axis=%d", n->axis); break;
    case OP_SLICE:
    case OP_PAD: fprintf(out, " axis=%d offset=%lld", n->axis, (long long)n->offset); break;
    case OP_VIEW: fprintf(out, " offset=%lld", (long long)n->offset); break;
    case OP_SOFTMAX_BWD: fprintf(out, " axis=%d", n->axis); break;
    case OP_TOP_K: fprintf(out, " top_k=%d%s", n->top_k, n->group_limit ? " group_limit" : ""); break;
    case OP_MOE:
    case OP_MOE_BWD: // the clamped SwiGLU's (common/graph.h)
        if (n->scale > 0) fprintf(out, " alpha=%g limit=%g", n->scale, n->softcap);
        if (moe_act(n) != MOE_ACT_SILU) fprintf(out, " act=%s", moe_act(n) == MOE_ACT_GELU ? "gelu" : "gelu_tanh");
        if (n->moe_form & MOE_GATES_ON_INPUT) fprintf(out, " gates_on=input");
        if (moe_fused(n)) fprintf(out, " gate_up=%s", n->moe_form & MOE_GATE_UP_HALVES ? "halves" : "interleaved");
        for (int j = moe_fused(n) ? 1 : 0; j < 3; j++) // the weights stored [E, in, out]
            if (n->moe_form >> j & 1)
                fprintf(out, " %s=[E,in,out]", j == 2 ? "w_down" : moe_fused(n) ? "w_gate_up" : j ? "w_up" : "w_gate");
        break;
    case OP_LOAD_BALANCE:
    case OP_LOAD_BALANCE_BWD:
        if (n->pooled) fprintf(out, " pooled");
        break;
    case OP_EMBED:
    case OP_EMBED_BWD:
        if (n->padding) fprintf(out, " padding_idx=%lld", (long long)n->padding - 1);
        break;
    case OP_ATTENTION_BWD:
        fprintf(out, " heads=%d kv_heads=%d causal=%d window=%lld scale=%g softcap=%g", n->heads, n->kv_heads,
                n->causal, (long long)n->window, n->scale, n->softcap);
        if (n->chunk) fprintf(out, " chunk=%lld", (long long)n->chunk);
        break;
    case OP_DELTA_RULE:
    case OP_DELTA_RULE_BWD:
        fprintf(out, " heads=%d kv_heads=%d scale=%g eps=%g", n->heads, n->kv_heads, n->scale, n->eps);
        break;
    case OP_SSD:
    case OP_SSD_BWD: fprintf(out, " heads=%d groups=%d", n->heads, n->kv_heads); break;
    default: break;
    }
}

void graph_dump(FILE *out, const Graph *g, const char *path) {
    fprintf(out, "model %s\n", g->model_name);
    for (int p = 0; p < graph_nparts(g); p++) {
        const Part *part = &g->parts[p];
        if (part_is_block(p) && g->nkinds > 1) // a kind of an order of block kinds
            fprintf(out, "block %s kind %d, %lld of %lld layers:\n", g->block_name, part_kind(p),
                    (long long)graph_kind_layers(g, part_kind(p)), (long long)g->layers);
        else if (p == PART_BLOCK)
            fprintf(out, "block %s x%lld \"%s\":\n", g->block_name, (long long)g->layers, g->block_prefix);
        else fprintf(out, "%s:\n", part_name((PartKind)p));
        for (int i = 0; i < part->nodes.n; i++) {
            const Node *n = part->nodes.items[i];
            char shape[160];
            if (i == part->nfwd && i > 0) fprintf(out, "  backward:\n");
            fprintf(out, "  %%%d = %s", n->id, op_name(n->op));
            for (int j = 0; j < n->nin; j++) fprintf(out, "%s%%%d", j ? ", " : " ", n->in[j]->id);
            dump_attrs(out, g, n);
            fprintf(out, " : %s%s", dtype_name(n->dtype), shape_str(&n->shape, shape, sizeof shape));
            if (n->name) fprintf(out, "  # %s", n->name);
            if (n->annot) fprintf(out, " [%s]", annot_name(n->annot));
            fprintf(out, "  (%s:%d:%d)\n", path, n->loc.line, n->loc.col);
        }
        fprintf(out, "  output %%%d\n", part->output ? part->output->id : -1);
        for (int i = 0; i < part->grads.n; i++) {
            const Grad *gr = part->grads.items[i];
            fprintf(out, "  grad of %%%d (%s) = ", gr->of->id, gr->of->name ? gr->of->name : "");
            if (gr->grad) fprintf(out, "%%%d\n", gr->grad->id);
            else fprintf(out, "zero\n");
        }
    }
}
