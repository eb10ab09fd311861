// sema.c: config and train evaluation, parameters, and the lowering of
// block and forward statements to the layer graph. The shape and dtype
// rules of the ops live in ops.c; the lookups, the constant evaluator and
// the call helpers both use live below them in consts.c.
#include <math.h>
#include <string.h>

#include "compiler/front/sema.h"

// ---------------------------------------------------------------- names

// Reports `name` if it is already taken by a config constant, a parameter or
// the block; `what` says what the new definition is.
static int check_fresh(Sema *S, const char *name, Loc loc, const char *what) {
    ConfigEntry *c;
    int p;
    if (is_bt(name)) {
        diag_error(S->d, loc, "'%s' is the %s, set by the train section or --%s; a %s needs another name", name,
                   name[0] == 'B' ? "batch size" : "sequence length", name[0] == 'B' ? "batch" : "seq", what);
    } else if ((c = find_config(S, name))) {
        diag_error(S->d, loc, "duplicate name '%s': already a config constant (line %d)", name, c->loc.line);
    } else if ((p = find_param(S, name, 0)) >= 0 || (S->in_block && (p = find_param(S, name, 1)) >= 0)) {
        Param *pp = S->g->params.items[p];
        diag_error(S->d, loc, "duplicate name '%s': already a parameter (line %d)", name, pp->loc.line);
    } else if (S->block_name && !strcmp(S->block_name, name)) {
        diag_error(S->d, loc, "duplicate name '%s': already the block (line %d)", name, S->block_loc.line);
    } else {
        return 0;
    }
    return -1;
}

static int eval_int(Sema *S, const Expr *e, int64_t min, const char *what, int64_t *out) {
    Num n;
    if (eval_num(S, e, &n) != 0) return -1;
    if (!n.is_int) {
        diag_error(S->d, e->loc, "%s must be an integer, got %g", what, n.f);
        return -1;
    }
    if (n.i < min) {
        diag_error(S->d, e->loc, "%s must be at least %lld, got %lld", what, (long long)min, (long long)n.i);
        return -1;
    }
    *out = n.i;
    return 0;
}

// Evaluates a type's dims into shape; dims must be positive integers.
static int eval_shape(Sema *S, const TypeExpr *t, Shape *shape) {
    if (t->dims.n > MT_MAX_RANK) {
        diag_error(S->d, t->loc, "a tensor has at most %d dimensions, this one %d", MT_MAX_RANK, t->dims.n);
        return -1;
    }
    shape->rank = t->dims.n;
    int64_t numel = 1;
    for (int i = 0; i < t->dims.n; i++) {
        if (eval_int(S, t->dims.items[i], 1, "a dimension", &shape->dims[i]) != 0) return -1;
        if (__builtin_mul_overflow(numel, shape->dims[i], &numel) || numel > ((int64_t)1 << 48)) {
            diag_error(S->d, ((Expr *)t->dims.items[i])->loc, "tensor too large: more than 2^48 elements");
            return -1;
        }
    }
    return 0;
}

// ---------------------------------------------------------------- sections

static int lower_config(Sema *S) {
    for (int s = 0; s < S->m->configs.n; s++) {
        Section *sec = S->m->configs.items[s];
        for (int i = 0; i < sec->bindings.n; i++) {
            Binding *b = sec->bindings.items[i];
            if (check_fresh(S, b->name, b->loc, "config constant") != 0) return -1;
            ConfigEntry *c = arena_alloc(S->a, sizeof *c);
            if (!c || eval_num(S, b->value, &c->v) != 0) return -1;
            c->name = b->name;
            c->loc = b->loc;
            if (ptrvec_push(S->a, &S->config, c) != 0) return -1;
        }
    }
    return 0;
}

// Checks that call has only keyword arguments, each one of `allowed`
// (space-separated), none twice.
static int check_kwargs_only(Sema *S, const Expr *call, const char *allowed) {
    for (int i = 0; i < call->items.n; i++) {
        const Expr *a = call->items.items[i];
        if (a->kind != EXPR_KWARG) {
            diag_error(S->d, a->loc, "%s takes keyword arguments only (%s)", call->str, allowed);
            return -1;
        }
        if (!word_in_list(allowed, a->str)) {
            diag_error(S->d, a->loc, "unknown argument '%s' to %s; expected %s", a->str, call->str, allowed);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(((Expr *)call->items.items[j])->str, a->str)) {
                diag_error(S->d, a->loc, "argument '%s' given twice", a->str);
                return -1;
            }
    }
    return 0;
}

static int eval_float_kw(Sema *S, const Expr *call, const char *name, double min, double *out) {
    const Expr *e = find_kwarg(call, name);
    if (!e) return 0;
    Num n;
    if (eval_num(S, e, &n) != 0) return -1;
    if (n.f < min) {
        diag_error(S->d, e->loc, "%s must be at least %g, got %g", name, min, n.f);
        return -1;
    }
    *out = n.f;
    return 0;
}

static int lower_optimizer(Sema *S, const Expr *e, TrainConfig *t) {
    if (e->kind != EXPR_CALL || strcmp(e->str, "adamw")) {
        diag_error(S->d, e->loc,
                   "unknown optimizer; expected adamw(lr=..., betas=(b1, b2), weight_decay=..., eps=...)");
        return -1;
    }
    if (check_kwargs_only(S, e, "lr betas weight_decay eps") != 0) return -1;
    if (eval_float_kw(S, e, "lr", 0, &t->lr) != 0 || eval_float_kw(S, e, "weight_decay", 0, &t->weight_decay) != 0 ||
        eval_float_kw(S, e, "eps", 0, &t->adam_eps) != 0)
        return -1;
    const Expr *betas = find_kwarg(e, "betas");
    if (betas) {
        if (betas->kind != EXPR_TUPLE || betas->items.n != 2) {
            diag_error(S->d, betas->loc, "betas must be a pair, as betas=(0.9, 0.95)");
            return -1;
        }
        Num b1, b2;
        if (eval_num(S, betas->items.items[0], &b1) != 0 || eval_num(S, betas->items.items[1], &b2) != 0) return -1;
        if (b1.f < 0 || b1.f >= 1 || b2.f < 0 || b2.f >= 1) {
            diag_error(S->d, betas->loc, "betas must lie in [0, 1), got (%g, %g)", b1.f, b2.f);
            return -1;
        }
        t->beta1 = b1.f;
        t->beta2 = b2.f;
    }
    return 0;
}

static int lower_schedule(Sema *S, const Expr *e, TrainConfig *t) {
    const char *name = e->kind == EXPR_CALL || e->kind == EXPR_NAME ? e->str : "";
    if (!strcmp(name, "cosine")) t->schedule = SCHED_COSINE;
    else if (!strcmp(name, "linear")) t->schedule = SCHED_LINEAR;
    else if (!strcmp(name, "constant")) t->schedule = SCHED_CONSTANT;
    else {
        diag_error(S->d, e->loc,
                   "unknown lr schedule; expected cosine(warmup=N, min_lr=F), linear(...) or constant(warmup=N)");
        return -1;
    }
    if (e->kind != EXPR_CALL) return 0;
    if (check_kwargs_only(S, e, "warmup min_lr") != 0) return -1;
    const Expr *w = find_kwarg(e, "warmup");
    if (w && eval_int(S, w, 0, "warmup", &t->warmup) != 0) return -1;
    return eval_float_kw(S, e, "min_lr", 0, &t->min_lr_frac);
}

static int lower_train(Sema *S) {
    TrainConfig *t = &S->g->train;
    *t = (TrainConfig){.steps = 1000,
                       .accumulate = 1,
                       .val_every = 100,
                       .seed = 1337,
                       .lr = 3e-4,
                       .beta1 = 0.9,
                       .beta2 = 0.95,
                       .weight_decay = 0.1,
                       .adam_eps = 1e-8,
                       .min_lr_frac = 0.1,
                       .clip = 1.0,
                       .schedule = SCHED_COSINE,
                       .compute = DT_F32};
    static const char *const KEYS = "batch seq steps accumulate val_every seed optimizer schedule clip data dtype";
    PtrVec seen = {0};
    for (int s = 0; s < S->m->trains.n; s++) {
        Section *sec = S->m->trains.items[s];
        for (int i = 0; i < sec->bindings.n; i++) {
            Binding *b = sec->bindings.items[i];
            const Expr *v = b->value;
            for (int j = 0; j < seen.n; j++)
                if (!strcmp(((Binding *)seen.items[j])->name, b->name)) {
                    diag_error(S->d, b->loc, "duplicate train setting '%s' (line %d)", b->name,
                               ((Binding *)seen.items[j])->loc.line);
                    return -1;
                }
            if (ptrvec_push(S->a, &seen, b) != 0) return -1;
            const char *k = b->name;
            int rc;
            if (!strcmp(k, "batch")) rc = eval_int(S, v, 1, "batch", &t->batch);
            else if (!strcmp(k, "seq")) rc = eval_int(S, v, 1, "seq", &t->seq);
            else if (!strcmp(k, "steps")) rc = eval_int(S, v, 0, "steps", &t->steps);
            else if (!strcmp(k, "accumulate")) rc = eval_int(S, v, 1, "accumulate", &t->accumulate);
            else if (!strcmp(k, "val_every")) rc = eval_int(S, v, 1, "val_every", &t->val_every);
            else if (!strcmp(k, "seed")) rc = eval_int(S, v, 0, "seed", &t->seed);
            else if (!strcmp(k, "optimizer")) rc = lower_optimizer(S, v, t);
            else if (!strcmp(k, "schedule")) rc = lower_schedule(S, v, t);
            else if (!strcmp(k, "clip")) {
                Num n;
                rc = eval_num(S, v, &n);
                if (rc == 0 && n.f < 0) {
                    diag_error(S->d, v->loc, "clip must be 0 (off) or positive, got %g", n.f);
                    rc = -1;
                }
                t->clip = n.f;
            } else if (!strcmp(k, "data")) {
                rc = v->kind == EXPR_STRING ? 0 : -1;
                if (rc) diag_error(S->d, v->loc, "data must be a file name in quotes");
                t->data = v->str;
            } else if (!strcmp(k, "dtype")) {
                const char *n = v->kind == EXPR_NAME ? v->str : "";
                t->compute = !strcmp(n, "bf16") ? DT_BF16 : DT_F32;
                rc = !strcmp(n, "bf16") || !strcmp(n, "f32") ? 0 : -1;
                if (rc) diag_error(S->d, v->loc, "unknown compute dtype; expected f32 or bf16");
            } else {
                diag_error(S->d, b->loc, "unknown train setting '%s'; expected one of: %s", k, KEYS);
                rc = -1;
            }
            if (rc != 0) return -1;
        }
    }
    return 0;
}

// Binds B and T from the flags or the train section.
static int bind_batch_seq(Sema *S, const SemaOptions *opt) {
    TrainConfig *t = &S->g->train;
    if (opt && opt->batch) t->batch = opt->batch;
    if (opt && opt->seq) t->seq = opt->seq;
    if (opt && opt->compute) t->compute = opt->compute == 2 ? DT_BF16 : DT_F32;
    if (!t->batch || !t->seq) {
        diag_error(S->d, S->m->loc, "the %s is not set; add '%s = N' to the train section or pass --%s N",
                   t->batch ? "sequence length" : "batch size", t->batch ? "seq" : "batch", t->batch ? "seq" : "batch");
        return -1;
    }
    S->have_bt = 1;
    S->B = t->batch;
    S->T = t->seq;
    return 0;
}

// ---------------------------------------------------------------- parameters

static int lower_init(Sema *S, const Expr *e, Param *p) {
    const char *name = e->kind == EXPR_CALL || e->kind == EXPR_NAME ? e->str : "";
    p->init_given = 1;
    if (!strcmp(name, "zeros") && e->kind == EXPR_NAME) {
        p->init = INIT_ZEROS;
        return 0;
    }
    if (!strcmp(name, "ones") && e->kind == EXPR_NAME) {
        p->init = INIT_ONES;
        return 0;
    }
    if (!strcmp(name, "normal") && e->kind == EXPR_CALL) {
        if (check_kwargs_only(S, e, "std") != 0) return -1;
        p->init = INIT_NORMAL;
        p->init_std = 0.02;
        return eval_float_kw(S, e, "std", 0, &p->init_std);
    }
    diag_error(S->d, e->loc, "unknown init; expected zeros, ones or normal(std=F)");
    return -1;
}

// `param name[count] "....{e}..." [dims]`: shape becomes [count, dims...];
// the checkpoint name must hold {e}, element e's index, once.
static int lower_param_array(Sema *S, const ParamDecl *pd, Shape *shape) {
    int64_t count;
    if (eval_int(S, pd->count, 1, "a parameter array's length", &count) != 0) return -1;
    const char *mark = strstr(pd->ckpt, "{e}");
    if (!mark || strstr(mark + 1, "{e}")) {
        diag_error(S->d, pd->ckpt_loc,
                   "the checkpoint name of parameter array '%s' must contain {e}, the element index, once, as "
                   "\"experts.{e}.w\"",
                   pd->name);
        return -1;
    }
    if (shape->rank == MT_MAX_RANK) {
        diag_error(S->d, pd->type.loc, "a tensor has at most %d dimensions, this array's elements %d", MT_MAX_RANK,
                   shape->rank);
        return -1;
    }
    memmove(shape->dims + 1, shape->dims, (size_t)shape->rank * sizeof shape->dims[0]);
    shape->dims[0] = count;
    shape->rank++;
    return 0;
}

static int lower_param(Sema *S, const ParamDecl *pd, int in_block) {
    if (check_fresh(S, pd->name, pd->loc, "parameter") != 0) return -1;
    for (int i = 0; i < S->g->params.n; i++) {
        Param *q = S->g->params.items[i];
        if (q->in_block == in_block && q->kind == (in_block ? S->kind : 0) && !strcmp(q->ckpt, pd->ckpt)) {
            diag_error(S->d, pd->ckpt_loc, "duplicate checkpoint name \"%s\" (parameter '%s', line %d)", pd->ckpt,
                       q->name, q->loc.line);
            return -1;
        }
    }
    if (!pd->count && strstr(pd->ckpt, "{e}")) {
        diag_error(S->d, pd->ckpt_loc, "{e} names an element of a parameter array; declare '%s' as one, as %s[E]",
                   pd->name, pd->name);
        return -1;
    }
    if (pd->type.dtype && strcmp(pd->type.dtype, "f32")) {
        diag_error(S->d, pd->type.dtype_loc, "parameters are f32 master weights; '%s' is not allowed here",
                   pd->type.dtype);
        return -1;
    }
    Param *p = arena_alloc(S->a, sizeof *p);
    if (!p) return -1;
    *p = (Param){.name = pd->name,
                 .ckpt = pd->ckpt,
                 .in_block = in_block,
                 .loc = pd->loc,
                 .prefix = in_block ? S->kind_prefix : NULL,
                 .kind = in_block ? S->kind : 0,
                 .first_use = PART_COUNT,
                 .init = INIT_NORMAL,
                 .init_std = 0.02,
                 .frozen = pd->frozen != 0,
                 .buffer = pd->frozen == 2};
    S->have_bt = 0; // parameter shapes are the model's, whatever the batch
    S->bt_unavailable_in = "a parameter's shape";
    int rc = eval_shape(S, &pd->type, &p->shape);
    if (rc == 0 && pd->count) rc = lower_param_array(S, pd, &p->shape);
    S->have_bt = 1;
    if (rc != 0) return -1;
    if (p->shape.rank == 0) {
        diag_error(S->d, pd->type.loc, "a parameter needs at least one dimension");
        return -1;
    }
    if (p->shape.rank == 1 || p->buffer) p->init = INIT_ZEROS; // biases, buffers; norm gains become ones where used
    if (pd->init && lower_init(S, pd->init, p) != 0) return -1;
    return ptrvec_push(S->a, &S->g->params, p);
}

// ---------------------------------------------------------------- nodes

// Brings a node of another part (or a model input, part -1) into the
// current part as an OP_INPUT, once per part.
static Node *import_node(Sema *S, Node *src) {
    if ((int)src->part == (int)S->part) return src;
    Part *part = &S->g->parts[S->part];
    for (int i = 0; i < part->nodes.n; i++) {
        Node *n = part->nodes.items[i];
        if (n->op == OP_INPUT && n->src_part == (int)src->part && n->src == src->id) return n;
    }
    Node *n = new_node(S, OP_INPUT, src->dtype, &src->shape, src->loc, 0, NULL);
    if (!n) return NULL;
    n->src_part = (int)src->part;
    n->src = src->id;
    n->name = src->name;
    return n;
}

static Node *param_node(Sema *S, int idx, Loc loc) {
    Part *part = &S->g->parts[S->part];
    for (int i = 0; i < part->nodes.n; i++) {
        Node *n = part->nodes.items[i];
        if (n->op == OP_PARAM && n->param == idx) return n;
    }
    Param *p = S->g->params.items[idx];
    if (p->first_use == PART_COUNT) p->first_use = S->part;
    Node *n = new_node(S, OP_PARAM, DT_F32, &p->shape, loc, 0, NULL);
    if (!n) return NULL;
    n->param = idx;
    n->name = p->name;
    return n;
}

static int bind_local(Sema *S, const char *name, Loc loc, Node *node) {
    Local *l = find_local(S, name);
    if (!l) {
        if (check_fresh(S, name, loc, "tensor") != 0) return -1;
        if (!(l = arena_alloc(S->a, sizeof *l)) || ptrvec_push(S->a, &S->locals, l) != 0) return -1;
        l->name = name;
        l->loc = loc;
    }
    l->node = node;
    return 0;
}

// ---------------------------------------------------------------- expressions

// An operand of matmul: if e is transpose(x), lowers x and sets *trans;
// otherwise lowers e.
static int lower_matmul_operand(Sema *S, const Expr *e, Node **out, int *trans) {
    *trans = 0;
    if (e->kind == EXPR_CALL && !strcmp(e->str, "transpose") && e->items.n == 1 &&
        ((Expr *)e->items.items[0])->kind != EXPR_KWARG) {
        Node *inner;
        if (lower_tensor(S, e->items.items[0], &inner) != 0) return -1;
        if (inner->shape.rank >= 2) {
            *trans = 1;
            *out = inner;
            return 0;
        }
    }
    return lower_tensor(S, e, out);
}

// A call of an op into nouts values: its arguments lowered here, in order
// (matmul's operands folding transpose), then the op's rule (ops.c).
static int lower_op_call(Sema *S, const Expr *call, Val *outs, int nouts) {
    Args a;
    if (ops_collect(S, call, &a) != 0) return -1;
    for (int i = 0; i < a.nvals; i++) {
        int rc = a.fold ? lower_matmul_operand(S, a.pos[i], &a.val[i].node, &a.trans[i])
                        : lower_expr(S, a.pos[i], &a.val[i]);
        if (rc != 0) return -1;
    }
    return ops_lower(S, &a, outs, nouts);
}

int lower_expr(Sema *S, const Expr *e, Val *out) {
    *out = (Val){0};
    switch (e->kind) {
    case EXPR_INT:
    case EXPR_FLOAT: out->is_num = 1; return eval_num(S, e, &out->num);
    case EXPR_NAME: {
        Local *l = find_local(S, e->str);
        int p;
        if (l) {
            out->node = import_node(S, l->node);
        } else if ((p = find_param(S, e->str, S->in_block)) >= 0) {
            out->node = param_node(S, p, e->loc);
        } else if (S->in_block && find_param(S, e->str, 0) >= 0) {
            diag_error(S->d, e->loc,
                       "'%s' is a global parameter; a block may use only its own parameters and its input", e->str);
            return -1;
        } else if (S->block_name && !strcmp(e->str, S->block_name)) {
            diag_error(S->d, e->loc, "'%s' is the block; call it as %s(x)", e->str, e->str);
            return -1;
        } else {
            out->is_num = 1;
            return eval_num(S, e, &out->num);
        }
        return out->node ? 0 : -1;
    }
    case EXPR_NEG: {
        Val v;
        if (lower_expr(S, e->lhs, &v) != 0) return -1;
        if (v.is_num) {
            out->is_num = 1;
            return eval_num(S, e, &out->num);
        }
        if (v.node->dtype != DT_F32) {
            diag_error(S->d, e->loc, "negation needs an f32 tensor, got %s", dtype_name(v.node->dtype));
            return -1;
        }
        out->node = new_node(S, OP_NEG, DT_F32, &v.node->shape, e->loc, 1, &v.node);
        return out->node ? 0 : -1;
    }
    case EXPR_BINARY: {
        if (e->op == '@') { // transpose(w) folds into the GEMM's flags
            Node *a, *b;
            int ta, tb;
            if (lower_matmul_operand(S, e->lhs, &a, &ta) != 0 || lower_matmul_operand(S, e->rhs, &b, &tb) != 0)
                return -1;
            out->node = lower_matmul(S, e->loc, a, ta, b, tb, e->lhs, e->rhs);
            return out->node ? 0 : -1;
        }
        Val a, b;
        if (lower_expr(S, e->lhs, &a) != 0 || lower_expr(S, e->rhs, &b) != 0) return -1;
        if (a.is_num && b.is_num) {
            out->is_num = 1;
            return num_binary(S, e->op, e->loc, a.num, b.num, &out->num);
        }
        return lower_binary(S, e, a, b, out);
    }
    case EXPR_CALL:
        if (S->block_name && !strcmp(e->str, S->block_name)) return lower_block_call(S, e, out);
        if (S->m->orders.n && find_block(S, e->str)) {
            diag_error(S->d, e->loc, "'%s' is a block kind of the order '%s'; forward calls the order, as x = %s(x)",
                       e->str, S->block_name, S->block_name);
            return -1;
        }
        // a function of constants: sqrt, ln, min, ... always; exp, log, abs and floor, also ops, of constants
        if (is_const_function(e->str) && (!word_in_list("exp log abs floor", e->str) || is_const_expr(S, e))) {
            out->is_num = 1;
            return eval_num(S, e, &out->num);
        }
        return lower_op_call(S, e, out, 1);
    case EXPR_STRING: diag_error(S->d, e->loc, "a string is not a value here; expected a tensor expression"); return -1;
    case EXPR_BOOL: diag_error(S->d, e->loc, "a boolean is not a value here; expected a tensor expression"); return -1;
    case EXPR_TUPLE: diag_error(S->d, e->loc, "a tuple is not a value here; expected a tensor expression"); return -1;
    case EXPR_LIST: diag_error(S->d, e->loc, "a list is not a value here; expected a tensor expression"); return -1;
    case EXPR_KWARG: break;
    }
    diag_error(S->d, e->loc, "expected a tensor expression");
    return -1;
}

int lower_tensor(Sema *S, const Expr *e, Node **out) {
    Val v;
    if (lower_expr(S, e, &v) != 0) return -1;
    if (v.is_num) {
        diag_error(S->d, e->loc, "expected a tensor, got the constant %g", v.num.f);
        return -1;
    }
    *out = v.node;
    return 0;
}

// ---------------------------------------------------------------- block and forward

int lower_block_call(Sema *S, const Expr *call, Val *out) {
    const char *name = S->block_name;
    if (S->in_block) {
        diag_error(S->d, call->loc, "block '%s' cannot call itself", name);
        return -1;
    }
    if (call->items.n != 1 || ((Expr *)call->items.items[0])->kind == EXPR_KWARG) {
        diag_error(S->d, call->loc, "block '%s' takes 1 argument, its input; got %d", name, call->items.n);
        return -1;
    }
    Node *x;
    if (lower_tensor(S, call->items.items[0], &x) != 0) return -1;
    if (S->block_called) { // checked after the argument, which may call it too
        diag_error(S->d, call->loc, "block '%s' is called twice; forward streams it once, all %lld layers in one call",
                   name, (long long)S->g->layers);
        return -1;
    }
    if (!shape_eq(&x->shape, &S->block_input->shape) || x->dtype != DT_F32) {
        char s1[160], s2[160];
        diag_error(S->d, call->loc, "shape mismatch: block '%s' takes f32%s, got %s%s", name,
                   shape_str(&S->block_input->shape, s1, sizeof s1), dtype_name(x->dtype),
                   shape_str(&x->shape, s2, sizeof s2));
        return -1;
    }
    S->g->parts[PART_HEAD].output = x;
    for (int k = 0; k < S->g->nkinds; k++) // every kind's input: layer 0's is the head's output
        part_input_from(&S->g->parts[kind_part(k)], PART_HEAD)->src = x->id;
    S->block_called = 1;
    S->part = PART_TAIL;
    out->node = import_node(S, S->g->parts[block_part(S->g, S->g->layers - 1)].output); // the last layer's
    return out->node ? 0 : -1;
}

static int lower_assign(Sema *S, const Stmt *st) {
    int n = st->names.n;
    Val vals[16];
    if (n > (int)(sizeof vals / sizeof vals[0])) {
        diag_error(S->d, st->loc, "at most %d names can be assigned at once", (int)(sizeof vals / sizeof vals[0]));
        return -1;
    }
    const Expr *v = st->value;
    int rc;
    if (n > 1 && !(v->kind == EXPR_CALL && !strcmp(v->str, "split"))) {
        diag_error(S->d, st->loc, "%d names are assigned but only split(...) makes several values", n);
        return -1;
    }
    rc = n > 1 ? lower_op_call(S, v, vals, n) : lower_expr(S, v, &vals[0]);
    if (rc != 0) return -1;
    if (st->annot && !S->in_block) {
        diag_error(S->d, st->loc, "'%s' applies to block tensors only", annot_name(st->annot));
        return -1;
    }
    for (int i = 0; i < n; i++) {
        Expr *name = st->names.items[i];
        if (vals[i].is_num) {
            diag_error(S->d, v->loc, "'%s' would be a constant; define constants in the config section", name->str);
            return -1;
        }
        Node *node = vals[i].node;
        if (st->annot) {
            if (node->op == OP_INPUT || node->op == OP_PARAM || node->op == OP_CONST || !part_is_block(node->part)) {
                diag_error(S->d, st->loc, "'%s' applies to tensors the block computes; '%s' is not one",
                           annot_name(st->annot), name->str);
                return -1;
            }
            node->annot = st->annot;
        }
        if (!node->name && node->op != OP_INPUT && node->op != OP_PARAM) node->name = name->str;
        if (bind_local(S, name->str, name->loc, node) != 0) return -1;
    }
    return 0;
}

// Lowers statements up to and including the final `return`; returns the
// node returned.
static Node *lower_stmts(Sema *S, const PtrVec *stmts, Loc end, const char *where) {
    for (int i = 0; i < stmts->n; i++) {
        const Stmt *st = stmts->items[i];
        if (st->kind == STMT_ASSIGN) {
            if (lower_assign(S, st) != 0) return NULL;
            continue;
        }
        if (i != stmts->n - 1) {
            diag_error(S->d, ((Stmt *)stmts->items[i + 1])->loc, "statement after return in %s", where);
            return NULL;
        }
        Node *r;
        return lower_tensor(S, st->value, &r) == 0 ? r : NULL;
    }
    diag_error(S->d, end, "%s must end with 'return'", where);
    return NULL;
}

// A derived kind's body, its base's (`block d = base with W = 128`), with
// its overrides pushed on the config constants (lower_kind pops them): each
// names a config constant and is a constant expression, read before any
// is rebound. NULL after an error.
static const BlockDecl *derived_body(Sema *S, const BlockDecl *d) {
    const BlockDecl *b = find_block(S, d->base);
    if (!b || b->base) {
        diag_error(S->d, d->base_loc,
                   b ? "'%s' is itself derived; derive from the block with the body ('%s')"
                     : "'%s' is not a declared block; a kind derives from one",
                   d->base, b ? b->base : "");
        return NULL;
    }
    int n = d->overrides.n;
    ConfigEntry *e = arena_alloc(S->a, (size_t)n * sizeof *e); // (n) the rebound constants
    if (!e) return NULL;
    for (int i = 0; i < n; i++) {
        const Binding *o = d->overrides.items[i];
        if (!find_config(S, o->name)) {
            diag_error(S->d, o->loc, "'%s' is not a config constant; `with` rebinds config constants", o->name);
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(e[j].name, o->name)) {
                diag_error(S->d, o->loc, "'%s' is rebound twice", o->name);
                return NULL;
            }
        e[i] = (ConfigEntry){.name = o->name, .loc = o->loc};
        if (eval_num(S, o->value, &e[i].v) != 0) return NULL;
    }
    for (int i = 0; i < n; i++)
        if (ptrvec_push(S->a, &S->config, &e[i]) != 0) return NULL;
    return b;
}

// Lowers block kind `decl` (its body, or a derived kind's base's), kind
// `kind` of the graph, into its own block part, whose input (made here)
// takes the model's block shape.
static int lower_kind(Sema *S, const BlockDecl *decl, int kind) {
    int nconfig = S->config.n;
    const BlockDecl *b = decl->base ? derived_body(S, decl) : decl;
    if (!b) return -1;
    const char *mark = strstr(b->prefix, "{i}");
    if (!mark || strstr(mark + 1, "{i}")) {
        diag_error(S->d, b->prefix_loc,
                   "the block's checkpoint prefix must contain {i}, the layer index, once, as \"h.{i}.\"");
        return -1;
    }
    S->in_block = 1;
    S->part = (PartKind)kind_part(kind);
    S->kind = kind;
    S->g->kind_name[kind] = decl->name;
    S->kind_prefix = b->prefix;
    for (int i = 0; i < b->params.n; i++)
        if (lower_param(S, b->params.items[i], 1) != 0) return -1;
    Shape in_shape;
    if (b->input.type.dtype && strcmp(b->input.type.dtype, "f32")) {
        diag_error(S->d, b->input.type.dtype_loc, "a block's input is an f32 tensor, not %s", b->input.type.dtype);
        return -1;
    }
    if (eval_shape(S, &b->input.type, &in_shape) != 0) return -1;
    if (b->output) {
        Shape out_shape;
        if (b->output->dtype && strcmp(b->output->dtype, "f32")) {
            diag_error(S->d, b->output->dtype_loc, "a block returns an f32 tensor, not %s", b->output->dtype);
            return -1;
        }
        if (eval_shape(S, b->output, &out_shape) != 0) return -1;
        if (!shape_eq(&in_shape, &out_shape)) {
            char s1[160], s2[160];
            diag_error(S->d, b->output->loc, "a block must return its input's shape %s; declared %s",
                       shape_str(&in_shape, s1, sizeof s1), shape_str(&out_shape, s2, sizeof s2));
            return -1;
        }
    }
    if (S->block_input && !shape_eq(&S->block_input->shape, &in_shape)) {
        char s1[160], s2[160];
        diag_error(S->d, b->input.loc,
                   "block '%s' takes %s, but the first kind of the order takes %s; every kind "
                   "takes and returns the model's block shape",
                   decl->name, shape_str(&in_shape, s1, sizeof s1), shape_str(&S->block_input->shape, s2, sizeof s2));
        return -1;
    }
    Node *x = new_node(S, OP_INPUT, DT_F32, &in_shape, b->input.loc, 0, NULL);
    if (!x) return -1;
    x->src_part = PART_HEAD; // the head's output for layer 0, the layer before's for the others
    x->name = b->input.name;
    if (!S->block_input) S->block_input = x;
    if (bind_local(S, b->input.name, b->input.loc, x) != 0) return -1;
    const char *where = arena_printf(S->a, "block '%s'", decl->name);
    Node *ret = lower_stmts(S, &b->stmts, b->loc, where);
    if (!ret) return -1;
    if (!shape_eq(&ret->shape, &in_shape)) {
        const Stmt *last = b->stmts.items[b->stmts.n - 1];
        char s1[160], s2[160];
        diag_error(S->d, last->value->loc,
                   "block '%s' returns %s but its input is %s; a block must return its input's shape", decl->name,
                   shape_str(&ret->shape, s1, sizeof s1), shape_str(&in_shape, s2, sizeof s2));
        return -1;
    }
    if (ret->op == OP_INPUT) { // keep the output a node of this part
        Node *zero = const_node(S, 0.0, ret->loc);
        Node *in[2] = {ret, zero};
        if (!zero || !(ret = new_node(S, OP_ADD, DT_F32, &in_shape, ret->loc, 2, in))) return -1;
    }
    S->g->parts[S->part].output = ret;
    S->in_block = 0;
    S->locals = (PtrVec){0};
    S->config.n = nconfig;
    return 0;
}

// An order term's layers: [a, b, ...] (n entries) or [a, b, ...] * N, or
// terms joined with +; *n their count (at most limit), the names written to
// names when it is not NULL.
static int order_layers(Sema *S, const OrderDecl *o, const Expr *e, int64_t limit, int64_t *n, const Expr **names) {
    if (e->kind == EXPR_BINARY && e->op == '+') {
        int64_t a, b;
        if (order_layers(S, o, e->lhs, limit, &a, names) != 0 ||
            order_layers(S, o, e->rhs, limit - a, &b, names ? names + a : NULL) != 0)
            return -1;
        *n = a + b;
        return 0;
    }
    int64_t repeat = 1;
    const Expr *list = e;
    if (e->kind == EXPR_BINARY && e->op == '*') {
        if (eval_int(S, e->rhs, 1, "the order's repeat count", &repeat) != 0) return -1;
        list = e->lhs;
    }
    if (list->kind != EXPR_LIST || list->items.n == 0) {
        diag_error(S->d, list->loc,
                   "the order of layers '%s' is a list of block kinds, as [local, global] * (L / 2), "
                   "or lists joined with +, as [dense] + [moe] * (L - 1)",
                   o->name);
        return -1;
    }
    int nlist = list->items.n;
    if (repeat > limit / nlist) {
        diag_error(S->d, e->loc, "the order of layers '%s' makes more than %lld layers", o->name, (long long)INT32_MAX);
        return -1;
    }
    *n = nlist * repeat;
    for (int64_t i = 0; names && i < *n; i++) names[i] = list->items.items[i % nlist];
    return 0;
}

// order: "block" IDENT "[" expr "]" "=" terms joined with +, each
// "[" IDENT ("," IDENT)* "]" ("*" expr)?
// The layers follow the order; each kind, numbered as it first appears in
// it, is lowered once into its own block part.
static int lower_order(Sema *S) {
    const OrderDecl *o = S->m->orders.items[0];
    Graph *g = S->g;
    if (S->m->orders.n > 1) {
        const OrderDecl *o2 = S->m->orders.items[1];
        diag_error(S->d, o2->loc, "a second order of layers '%s'; a model has one (line %d)", o2->name, o->loc.line);
        return -1;
    }
    if (check_fresh(S, o->name, o->loc, "block order") != 0) return -1;
    int64_t count, nlist;
    if (eval_int(S, o->count, 1, "the layer count", &count) != 0) return -1;
    if (order_layers(S, o, o->order, INT32_MAX, &nlist, NULL) != 0) return -1;
    if (nlist != count) {
        diag_error(S->d, o->order->loc,
                   "the order makes %lld layers, but '%s[...]' declares %lld; they must be the same", (long long)nlist,
                   o->name, (long long)count);
        return -1;
    }
    const Expr **names = arena_alloc(S->a, (size_t)count * sizeof *names); // (count) each layer's kind, by name
    if (!names || order_layers(S, o, o->order, count, &nlist, names) != 0) return -1;
    const BlockDecl **kinds = arena_alloc(S->a, (size_t)nlist * sizeof *kinds);
    if (!kinds) return -1;
    for (int64_t i = 0; i < nlist; i++) {
        const Expr *e = names[i];
        if (e->kind != EXPR_NAME) {
            diag_error(S->d, e->loc, "the order of layers '%s' lists block kinds by name", o->name);
            return -1;
        }
        if (!(kinds[i] = find_block(S, e->str))) {
            diag_error(S->d, e->loc, "the order of layers '%s' names '%s', which is not a declared block", o->name,
                       e->str);
            return -1;
        }
    }
    for (int i = 0; i < S->m->blocks.n; i++) {
        const BlockDecl *b = S->m->blocks.items[i], *first = find_block(S, b->name);
        if (first != b) {
            diag_error(S->d, b->loc, "duplicate block '%s' (line %d)", b->name, first->loc.line);
            return -1;
        }
        int used = 0; // in the order, or the base of a kind in it
        for (int64_t j = 0; j < nlist; j++)
            used |= kinds[j] == b || (kinds[j]->base && !strcmp(kinds[j]->base, b->name));
        if (!used) {
            diag_error(S->d, b->loc, "block '%s' is declared but the order of layers '%s' never uses it", b->name,
                       o->name);
            return -1;
        }
        if (b->repeat) {
            diag_error(S->d, b->repeat->loc,
                       "block '%s' is a kind in the order '%s', which sets the layer count; "
                       "declare it without one, as block %s \"%s\" (...)",
                       b->name, o->name, b->name, b->prefix);
            return -1;
        }
        if (check_fresh(S, b->name, b->loc, "block") != 0) return -1;
    }
    const BlockDecl *kind_decl[MT_MAX_KINDS];
    int *list_kind = arena_alloc(S->a, (size_t)nlist * sizeof(int)); // (nlist) the kind of each layer
    if (!list_kind) return -1;
    g->nkinds = 0;
    for (int64_t i = 0; i < nlist; i++) {
        int k = 0;
        while (k < g->nkinds && kind_decl[k] != kinds[i]) k++;
        if (k == g->nkinds) {
            if (k == MT_MAX_KINDS) {
                diag_error(S->d, names[i]->loc,
                           "the order of layers '%s' has more than %d "
                           "block kinds",
                           o->name, MT_MAX_KINDS);
                return -1;
            }
            kind_decl[g->nkinds++] = kinds[i];
        }
        list_kind[i] = k;
    }
    g->block_name = o->name;
    g->block_prefix = kinds[0]->prefix;
    g->layers = count;
    if (!(g->layer_kind = arena_alloc(S->a, (size_t)count))) return -1;
    for (int64_t l = 0; l < count; l++) g->layer_kind[l] = (uint8_t)list_kind[l];
    S->block_name = o->name;
    S->block_loc = o->loc;
    for (int k = 0; k < g->nkinds; k++)
        if (lower_kind(S, kind_decl[k], k) != 0) return -1;
    return 0;
}

// The block part: one block, or an order of block kinds.
static int lower_block(Sema *S) {
    if (S->m->blocks.n == 0) {
        diag_error(S->d, S->m->loc, "model '%s' has no block; a model needs one, the streamed layer", S->m->name);
        return -1;
    }
    if (S->m->orders.n > 0) return lower_order(S);
    const BlockDecl *b = S->m->blocks.items[0];
    if (S->m->blocks.n > 1) {
        const BlockDecl *b2 = S->m->blocks.items[1];
        diag_error(S->d, b2->loc,
                   "a second block '%s'; several block kinds need the order of the layers, as "
                   "block layers[L] = [%s, %s] * (L / 2)",
                   b2->name, b->name, b2->name);
        return -1;
    }
    if (!b->repeat) {
        diag_error(S->d, b->loc, "block '%s' has no layer count; write it as block %s[L] \"%s\" (...)", b->name,
                   b->name, b->prefix);
        return -1;
    }
    Graph *g = S->g;
    if (check_fresh(S, b->name, b->loc, "block") != 0) return -1;
    S->block_name = b->name;
    S->block_loc = b->loc;
    g->block_name = b->name;
    g->block_prefix = b->prefix;
    if (eval_int(S, b->repeat, 1, "the layer count", &g->layers) != 0) return -1;
    g->nkinds = 1;
    if (!(g->layer_kind = arena_alloc(S->a, (size_t)g->layers))) return -1; // zeroed: every layer kind 0
    return lower_kind(S, b, 0);
}

static int lower_forward(Sema *S) {
    if (S->m->forwards.n != 1) {
        if (S->m->forwards.n == 0) diag_error(S->d, S->m->loc, "model '%s' has no forward(...) section", S->m->name);
        else
            diag_error(S->d, ((ForwardDecl *)S->m->forwards.items[1])->loc,
                       "a second forward section; a model has one");
        return -1;
    }
    const ForwardDecl *f = S->m->forwards.items[0];
    Graph *g = S->g;
    S->model_inputs = arena_alloc(S->a, (size_t)(f->inputs.n + 1) * sizeof(Node));
    if (!S->model_inputs) return -1;
    for (int i = 0; i < f->inputs.n; i++) {
        const ArgDecl *ad = f->inputs.items[i];
        ModelInput *mi = arena_alloc(S->a, sizeof *mi);
        if (!mi) return -1;
        mi->name = ad->name;
        mi->loc = ad->loc;
        const char *dt = ad->type.dtype ? ad->type.dtype : "f32";
        if (!strcmp(dt, "i32")) mi->dtype = DT_I32;
        else if (!strcmp(dt, "f32")) mi->dtype = DT_F32;
        else {
            diag_error(S->d, ad->type.dtype_loc, "unknown dtype '%s'; expected i32 or f32", dt);
            return -1;
        }
        if (eval_shape(S, &ad->type, &mi->shape) != 0 || ptrvec_push(S->a, &g->inputs, mi) != 0) return -1;
        Node *stand_in = &S->model_inputs[i];
        *stand_in = (Node){.op = OP_INPUT,
                           .id = i,
                           .part = (PartKind)-1,
                           .dtype = mi->dtype,
                           .shape = mi->shape,
                           .loc = ad->loc,
                           .name = ad->name,
                           .src_part = -1,
                           .src = i};
        if (find_local(S, ad->name)) {
            diag_error(S->d, ad->loc, "duplicate name '%s': already an input", ad->name);
            return -1;
        }
        if (bind_local(S, ad->name, ad->loc, stand_in) != 0) return -1;
    }
    S->part = PART_HEAD;
    Node *loss = lower_stmts(S, &f->stmts, f->loc, "forward");
    if (!loss) return -1;
    if (!S->block_called) {
        diag_error(S->d, f->loc, "forward never calls block '%s'; call it once, as x = %s(x)", S->block_name,
                   S->block_name);
        return -1;
    }
    if (loss->shape.rank != 0 || loss->dtype != DT_F32) {
        const Stmt *last = f->stmts.items[f->stmts.n - 1];
        char s[160];
        diag_error(S->d, last->value->loc, "the loss must be an f32 scalar; forward returns %s%s",
                   dtype_name(loss->dtype), shape_str(&loss->shape, s, sizeof s));
        return -1;
    }
    g->parts[PART_TAIL].output = loss;
    return 0;
}

static int check_params_used(Sema *S) {
    for (int i = 0; i < S->g->params.n; i++) {
        Param *p = S->g->params.items[i];
        if (p->first_use == PART_COUNT) {
            diag_error(S->d, p->loc, "parameter '%s' is declared but never used", p->name);
            return -1;
        }
    }
    return 0;
}

// A square weight multiplies either way round, so x @ w and x @ transpose(w)
// both check. The model's other weights say which layout its checkpoint
// stores: torch's Linear [out, in] multiplies transposed, GPT-2's Conv1D
// [in, out] as stored. A square weight multiplied the other way from every
// non-square one (tables that embed looks up aside: a tied head multiplies
// its table transposed whatever the layout) is an error.
static int check_square_layouts(Sema *S) {
    Graph *g = S->g;
    unsigned char *use = arena_alloc(S->a, (size_t)g->params.n + 1); // (params) 1 as stored, 2 transposed, 4 a table
    if (!use) return -1;
    memset(use, 0, (size_t)g->params.n + 1);
    for (int pk = 0; pk < graph_nparts(g); pk++)
        for (int i = 0; i < g->parts[pk].nodes.n; i++) {
            const Node *n = g->parts[pk].nodes.items[i];
            if (n->op == OP_EMBED && n->in[0]->op == OP_PARAM) use[n->in[0]->param] |= 4;
            if (n->op == OP_MATMUL && !n->trans_a && n->in[1]->op == OP_PARAM && n->in[1]->shape.rank == 2)
                use[n->in[1]->param] |= n->trans_b ? 2 : 1;
        }
    int ways = 0; // how the non-square weights multiply
    for (int i = 0; i < g->params.n; i++) {
        const Shape *sh = &((Param *)g->params.items[i])->shape;
        if (!(use[i] & 4) && sh->rank == 2 && sh->dims[0] != sh->dims[1]) ways |= use[i] & 3;
    }
    if (ways != 1 && ways != 2) return 0;
    for (int pk = 0; pk < graph_nparts(g); pk++)
        for (int i = 0; i < g->parts[pk].nodes.n; i++) {
            const Node *n = g->parts[pk].nodes.items[i];
            if (n->op != OP_MATMUL || n->trans_a || n->in[1]->op != OP_PARAM || n->in[1]->shape.rank != 2) continue;
            const Param *p = g->params.items[n->in[1]->param];
            if (p->shape.dims[0] != p->shape.dims[1] || use[n->in[1]->param] != (ways ^ 3)) continue;
            if (ways == 2)
                diag_error(S->d, n->loc,
                           "'%s' is square, so @ %s and @ transpose(%s) both fit; every other weight "
                           "of this model multiplies transposed (torch Linear's [out, in] layout): write @ "
                           "transpose(%s)",
                           p->name, p->name, p->name, p->name);
            else
                diag_error(S->d, n->loc,
                           "'%s' is square, so @ %s and @ transpose(%s) both fit; every other weight "
                           "of this model multiplies as stored ([in, out], as GPT-2's Conv1D): write @ %s",
                           p->name, p->name, p->name, p->name);
            return -1;
        }
    return 0;
}

// Refuses a moe whose gates no router limits (graph_gates_routed): every
// row would run every expert, at E / top_k times the work, and nothing in
// the model says so. router(logits, top_k = E) says it.
static int check_routed_moe(Sema *S) {
    for (int k = 0; k < S->g->nkinds; k++) {
        const Part *block = &S->g->parts[kind_part(k)];
        for (int i = 0; i < block->nodes.n; i++) {
            const Node *n = block->nodes.items[i];
            if (n->op != OP_MOE) continue;
            int64_t E = n->in[1]->shape.dims[n->in[1]->shape.rank - 1];
            if (E > 1 && !graph_gates_routed(S->g, n->in[1])) {
                diag_error(S->d, n->loc,
                           "no router limits moe's gates: every row would run all %lld experts; gate it with "
                           "router(logits, top_k = K, ...) (or a product, quotient or where with its gates), or write "
                           "router(logits, top_k = %lld, ...) to run every expert on every row",
                           (long long)E, (long long)E);
                return -1;
            }
        }
    }
    return 0;
}

Graph *sema_lower(const Model *m, const SemaOptions *opt, Arena *a, Diag *d) {
    int errors_before = d->nerrors;
    Sema S = {.a = a, .d = d, .m = m, .bt_unavailable_in = "the config or train sections"};
    S.g = arena_alloc(a, sizeof(Graph));
    if (!S.g) goto oom;
    S.g->model_name = m->name;
    // Config first (it may not use B or T), then the train section (which
    // may use the config), then everything shaped by B and T.
    if (lower_config(&S) != 0 || lower_train(&S) != 0 || bind_batch_seq(&S, opt) != 0) goto fail;
    for (int i = 0; i < m->params.n; i++)
        if (lower_param(&S, m->params.items[i], 0) != 0) goto fail;
    if (lower_block(&S) != 0 || lower_forward(&S) != 0 || check_params_used(&S) != 0 || check_square_layouts(&S) != 0 ||
        check_routed_moe(&S) != 0)
        goto fail;
    d->lowered++;
    return S.g;
oom:
fail:
    if (d->nerrors == errors_before) diag_error(d, (Loc){0, 0}, "out of memory");
    return NULL;
}
