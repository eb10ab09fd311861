// plan_read.c: reads the plan file that compiler/emit/plan_write.c writes (the
// byte layout of each section is listed there, field by field) and validates
// all of it before returning: the header, the section table, each section's
// crc32, then every field, every enum, every node id, every host and arena
// range and every instruction. It then rebuilds the Graph in the caller's
// arena with graph_add_node, as sema and autodiff build it, so that the
// runtime uses it exactly as mtc's in-memory graph.
//
// Reading is bounds-checked at every step: a Rd carries the section's bytes
// and the first error; a read past the end fails with "section X is
// truncated" and returns zeros, and every value is checked before it indexes
// or sizes anything.
#include "runtime/plan_read.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/io.h"
#include "common/scan.h"
#include "common/storage.h"

enum {
    SECTIONS = SEC_COUNT_PLUS_ONE - 1,
    HEADER_BYTES = 24, // magic, version, endian, count, crc
    ENTRY_BYTES = 24,  // id, crc, offset, size
    TABLE_END = HEADER_BYTES + SECTIONS * ENTRY_BYTES,
    // The fewest bytes an item of each list can take, to refuse counts the
    // section cannot hold before allocating for them.
    SHAPE_MIN = 4,
    LOC_BYTES = 8,
    STR_MIN = 4,
    INPUT_MIN = STR_MIN + 4 + SHAPE_MIN + LOC_BYTES,
    PARAM_MIN = 2 * STR_MIN + 4 + SHAPE_MIN + 4 + 8 + 4 + 4 + LOC_BYTES + 4 + 4 + 4 + 8,
    NODE_MIN = 4 + 4 + SHAPE_MIN + LOC_BYTES + STR_MIN + 4 + 4 + 3 * 4 + 8 + 4 + 8 + 6 * 4 + 2 * 8,
    GRAD_BYTES = 8,
    INSTR_BYTES = 10 * 4 + 3 * 8,
};
static const char MAGIC[8] = "MTPLAN\0";
static const uint32_t ABSENT = 0xFFFFFFFFu, OTHER_ENDIAN = 0x04030201u;
// Numbers of elements above this are refused, so that any element count
// times any element size (at most 8, the f64 executor's) fits in an int64.
static const int64_t MAX_NUMEL = INT64_MAX / 16;

static const char *const SECTION_NAMES[SECTIONS] = {"SOURCE", "CONFIG", "GRAPH", "HOST", "ARENA", "STREAMS", "KERNELS"};
static const char *const INS_NAMES[] = {"copy_in", "copy_out", "copy",      "input",         "run",  "loss",
                                        "save",    "load",     "free",      "record",        "wait", "norm",
                                        "update",  "stat",     "allgather", "reduce_scatter"};
_Static_assert(sizeof INS_NAMES / sizeof INS_NAMES[0] == INS_COUNT, "INS_NAMES out of sync with InsKind");

// How many operands each op takes; -1: at least one (concat).
static const signed char ARITY[] = {
    [OP_INPUT] = 0,
    [OP_PARAM] = 0,
    [OP_CONST] = 0,
    [OP_ADD] = 2,
    [OP_SUB] = 2,
    [OP_MUL] = 2,
    [OP_DIV] = 2,
    [OP_NEG] = 1,
    [OP_MATMUL] = 2,
    [OP_EMBED] = 2,
    [OP_ARANGE] = 0,
    [OP_LAYERNORM] = 3,
    [OP_RMSNORM] = 2,
    [OP_GELU] = 1,
    [OP_SILU] = 1,
    [OP_SWIGLU] = 2,
    [OP_ROPE] = 1,
    [OP_ATTENTION] = 4,
    [OP_SOFTMAX] = 1,
    [OP_CROSS_ENTROPY] = 2,
    [OP_RESHAPE] = 1,
    [OP_SLICE] = 1,
    [OP_CONCAT] = -1,
    [OP_TRANSPOSE] = 1,
    [OP_SUM_TO] = 1,
    [OP_EMBED_BWD] = 2,
    [OP_LAYERNORM_BWD] = 3,
    [OP_RMSNORM_BWD] = 3,
    [OP_GELU_BWD] = 2,
    [OP_SILU_BWD] = 2,
    [OP_SOFTMAX_BWD] = 2,
    [OP_CROSS_ENTROPY_BWD] = 3,
    [OP_ATTENTION_BWD] = 6,
    [OP_PAD] = 1,
    [OP_VIEW] = 1,
    [OP_TANH] = 1,
    [OP_SIGMOID] = 1,
    [OP_ERF] = 1,
    [OP_EXP] = 1,
    [OP_LOG] = 1,
    [OP_FLOOR] = 1,
    [OP_ABS] = 1,
    [OP_LT] = 2,
    [OP_LE] = 2,
    [OP_EQ] = 2,
    [OP_WHERE] = 3,
    [OP_TOP_K] = 1,
    [OP_MOE] = -1, // 5, 6 with a gate_up bias (moe_operands)
    [OP_MOE_BWD] = -1,
    [OP_LOAD_BALANCE] = 2,
    [OP_LOAD_BALANCE_BWD] = 3,
    [OP_ADD_LOSS] = 2,
    [OP_ATTENTION_LSE] = 2,
    [OP_CONV1D] = 2,
    [OP_CONV1D_BWD] = 3,
    [OP_DELTA_RULE] = 5,
    [OP_DELTA_RULE_BWD] = 6,
    [OP_SSD] = 5,
    [OP_SSD_BWD] = 6,
};
_Static_assert(sizeof ARITY / sizeof ARITY[0] == OP_COUNT, "ARITY out of sync with OpKind");

// A reader over one section's bytes, or over the whole file for the header.
typedef struct Rd {
    const unsigned char *p; // (len)
    size_t len, pos;
    const char *file;
    const char *sec; // the section's name, NULL for the header and table
    char *err;
    size_t errcap;
    int failed; // the first error is kept, later ones dropped
    Arena *a;
} Rd;

static void rd_fail(Rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rd_fail(Rd *r, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = 1;
    if (!r->err || !r->errcap) return;
    int n = r->sec ? snprintf(r->err, r->errcap, "%s: section %s: ", r->file, r->sec)
                   : snprintf(r->err, r->errcap, "%s: ", r->file);
    if (n < 0 || (size_t)n >= r->errcap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errcap - (size_t)n, fmt, ap);
    va_end(ap);
}

static void rd_truncated(Rd *r) {
    if (r->failed) return;
    r->failed = 1;
    if (r->err && r->errcap) snprintf(r->err, r->errcap, "%s: section %s is truncated", r->file, r->sec);
}

static void rd_oom(Rd *r) { rd_fail(r, "out of memory"); }

static uint32_t ld32(const unsigned char *d) {
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}
static uint64_t ld64(const unsigned char *d) { return (uint64_t)ld32(d) | (uint64_t)ld32(d + 4) << 32; }

// Whether n more bytes are there; on a failed reader, never.
static int need(Rd *r, size_t n) {
    if (r->failed) return 0;
    if (r->len - r->pos < n) {
        rd_truncated(r);
        return 0;
    }
    return 1;
}

static uint32_t get_u32(Rd *r) {
    if (!need(r, 4)) return 0;
    r->pos += 4;
    return ld32(r->p + r->pos - 4);
}
static int32_t get_i32(Rd *r) { return (int32_t)get_u32(r); }
static int64_t get_i64(Rd *r) {
    if (!need(r, 8)) return 0;
    r->pos += 8;
    return (int64_t)ld64(r->p + r->pos - 8);
}
static double get_f64(Rd *r) {
    uint64_t bits = (uint64_t)get_i64(r);
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

// A u32 count of items of at least min_bytes each, refused when the rest of
// the section cannot hold that many (so no count sizes a huge allocation).
static int get_count(Rd *r, size_t min_bytes, const char *what) {
    uint32_t n = get_u32(r);
    if (r->failed) return 0;
    if (n > INT32_MAX || (size_t)n > (r->len - r->pos) / min_bytes) {
        if ((size_t)n <= (r->len - r->pos) / min_bytes) rd_fail(r, "%u %s is more than can be", n, what);
        else rd_truncated(r);
        return 0;
    }
    return (int)n;
}

// A string copied into the arena, NUL-terminated, *len bytes before the NUL.
// Absent strings are refused unless optional (then *out is NULL). Names must
// hold no NUL byte; the source text may.
static int get_bytes(Rd *r, const char **out, size_t *len, int optional, int allow_nul, const char *what) {
    *out = NULL;
    if (len) *len = 0;
    uint32_t n = get_u32(r);
    if (r->failed) return -1;
    if (n == ABSENT) {
        if (optional) return 0;
        rd_fail(r, "%s is missing", what);
        return -1;
    }
    if (!need(r, n)) return -1;
    const char *s = (const char *)r->p + r->pos;
    if (!allow_nul && memchr(s, 0, n)) {
        rd_fail(r, "%s holds a NUL byte", what);
        return -1;
    }
    char *copy = arena_strndup(r->a, s, n);
    if (!copy) {
        rd_oom(r);
        return -1;
    }
    r->pos += n;
    *out = copy;
    if (len) *len = n;
    return 0;
}
static int get_str(Rd *r, const char **out, int optional, const char *what) {
    return get_bytes(r, out, NULL, optional, 0, what);
}

// A shape: rank 0..MT_MAX_RANK, every dim at least 1, the element count
// within MAX_NUMEL.
static int get_shape(Rd *r, Shape *s, const char *what) {
    *s = (Shape){0};
    uint32_t rank = get_u32(r);
    if (r->failed) return -1;
    if (rank > MT_MAX_RANK) {
        rd_fail(r, "%s: rank %u; at most %d", what, rank, MT_MAX_RANK);
        return -1;
    }
    s->rank = (int)rank;
    int64_t numel = 1;
    for (int i = 0; i < s->rank; i++) {
        s->dims[i] = get_i64(r);
        if (r->failed) return -1;
        if (s->dims[i] < 1) {
            rd_fail(r, "%s: dimension %d is %lld; dimensions are at least 1", what, i, (long long)s->dims[i]);
            return -1;
        }
        if (s->dims[i] > MAX_NUMEL / numel) {
            rd_fail(r, "%s: the element count overflows", what);
            return -1;
        }
        numel *= s->dims[i];
    }
    return 0;
}

static Loc get_loc(Rd *r, const char *what) {
    Loc l;
    l.line = get_i32(r);
    l.col = get_i32(r);
    if (!r->failed && (l.line < 0 || l.col < 0)) rd_fail(r, "%s: location %d:%d is negative", what, l.line, l.col);
    return l;
}

// Reads a u32 enum value below count; where names the item, field the value.
static int get_enum(Rd *r, uint32_t count, const char *where, const char *field) {
    uint32_t v = get_u32(r);
    if (!r->failed && v >= count) rd_fail(r, "%s: %s %u is out of range (0..%u)", where, field, v, count - 1);
    return (int)v;
}

// [off, off + bytes) inside [0, cap)
static int range_ok(int64_t off, int64_t bytes, int64_t cap) {
    return off >= 0 && bytes >= 0 && off <= cap && bytes <= cap - off;
}

// ---------------------------------------------------------------- SOURCE

static int read_source(Rd *r, Plan *p) {
    if (get_str(r, &p->source_path, 0, "the model path") != 0 ||
        get_bytes(r, &p->source, &p->source_len, 0, 1, "the model text") != 0)
        return -1;
    p->source_crc = get_u32(r);
    if (r->failed) return -1;
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t done = 0; done < p->source_len;) {
        size_t n = p->source_len - done > (1u << 30) ? (1u << 30) : p->source_len - done;
        crc = crc32(crc, (const Bytef *)p->source + done, (uInt)n);
        done += n;
    }
    if ((uint32_t)crc != p->source_crc) {
        rd_fail(r, "the model text does not match its crc32");
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- CONFIG

static void need_int(Rd *r, int64_t v, int64_t min, const char *what) {
    if (!r->failed && v < min) rd_fail(r, "%s is %lld; at least %lld", what, (long long)v, (long long)min);
}
// Refuses NaN and infinities too.
static void need_real(Rd *r, double v, double min, double below, const char *what) {
    if (!r->failed && !(v >= min && v < below)) rd_fail(r, "%s is %g; expected [%g, %g)", what, v, min, below);
}

static int read_config(Rd *r, TrainConfig *t) {
    t->batch = get_i64(r);
    t->seq = get_i64(r);
    t->steps = get_i64(r);
    t->accumulate = get_i64(r);
    t->warmup = get_i64(r);
    t->val_every = get_i64(r);
    t->seed = get_i64(r);
    t->lr = get_f64(r);
    t->beta1 = get_f64(r);
    t->beta2 = get_f64(r);
    t->weight_decay = get_f64(r);
    t->adam_eps = get_f64(r);
    t->min_lr_frac = get_f64(r);
    t->clip = get_f64(r);
    t->schedule = (LrSchedule)get_enum(r, SCHED_CONSTANT + 1, "train", "lr schedule");
    t->compute = (DType)get_enum(r, DT_COUNT, "train", "compute dtype");
    get_str(r, &t->data, 1, "the data path");
    need_int(r, t->batch, 1, "batch");
    need_int(r, t->seq, 1, "seq");
    need_int(r, t->steps, 0, "steps");
    need_int(r, t->accumulate, 1, "accumulate");
    need_int(r, t->warmup, 0, "warmup");
    need_int(r, t->val_every, 1, "val_every");
    need_int(r, t->seed, 0, "seed");
    need_real(r, t->lr, 0, INFINITY, "lr");
    need_real(r, t->beta1, 0, 1, "beta1");
    need_real(r, t->beta2, 0, 1, "beta2");
    need_real(r, t->weight_decay, 0, INFINITY, "weight_decay");
    need_real(r, t->adam_eps, 0, INFINITY, "adam eps");
    need_real(r, t->min_lr_frac, 0, INFINITY, "min_lr");
    need_real(r, t->clip, 0, INFINITY, "clip");
    return r->failed ? -1 : 0;
}

// ---------------------------------------------------------------- GRAPH

static int read_inputs(Rd *r, Graph *g) {
    int n = get_count(r, INPUT_MIN, "model inputs");
    for (int i = 0; i < n && !r->failed; i++) {
        ModelInput *mi = arena_alloc(r->a, sizeof *mi);
        if (!mi || ptrvec_push(r->a, &g->inputs, mi) != 0) {
            rd_oom(r);
            break;
        }
        char what[64];
        snprintf(what, sizeof what, "model input %d", i);
        get_str(r, &mi->name, 0, what);
        mi->dtype = (DType)get_enum(r, DT_COUNT, what, "dtype");
        get_shape(r, &mi->shape, what);
        mi->loc = get_loc(r, what);
    }
    return r->failed ? -1 : 0;
}

// balance: (the parameters) each one's balance rule's mask node, -1 for none (resolve_balance).
static int read_params(Rd *r, Graph *g, int32_t **balance) {
    int n = get_count(r, PARAM_MIN, "parameters");
    if (!r->failed && !(*balance = arena_alloc(r->a, (size_t)n * sizeof **balance + 1))) rd_oom(r);
    for (int i = 0; i < n && !r->failed; i++) {
        Param *pr = arena_alloc(r->a, sizeof *pr);
        if (!pr || ptrvec_push(r->a, &g->params, pr) != 0) {
            rd_oom(r);
            break;
        }
        char what[64];
        snprintf(what, sizeof what, "parameter %d", i);
        get_str(r, &pr->name, 0, what);
        get_str(r, &pr->ckpt, 0, what);
        pr->in_block = get_enum(r, 2, what, "in_block");
        get_str(r, &pr->prefix, 0, what);
        pr->kind = get_enum(r, (uint32_t)g->nkinds, what, "block kind");
        get_shape(r, &pr->shape, what);
        pr->init = (InitKind)get_enum(r, INIT_UNIFORM + 1, what, "init");
        pr->init_std = get_f64(r);
        pr->init_given = get_enum(r, 2, what, "init_given");
        pr->first_use = (PartKind)get_enum(r, (uint32_t)graph_nparts(g), what, "first use"); // every one is used
        pr->loc = get_loc(r, what);
        pr->frozen = get_enum(r, 2, what, "frozen");
        pr->lora = get_enum(r, 3, what, "lora");
        pr->lora_of = get_i32(r);
        pr->lora_scale = get_f64(r);
        (*balance)[i] = get_i32(r);
        pr->balance_rate = get_f64(r);
        if (r->failed) break;
        if (pr->lora && (pr->lora_of < 0 || pr->lora_of >= i || pr->frozen || pr->shape.rank != 2))
            rd_fail(r,
                    "parameter '%s': a LoRA adapter of parameter %d, which is not an earlier one, or frozen, or "
                    "not a matrix",
                    pr->name, pr->lora_of);
        else if (pr->lora && !(isfinite(pr->lora_scale) && pr->lora_scale > 0))
            rd_fail(r, "parameter '%s': LoRA scale %g is not a positive number", pr->name, pr->lora_scale);
        else if (pr->in_block && !strstr(pr->prefix, "{i}"))
            rd_fail(r, "parameter '%s': its checkpoint prefix \"%s\" has no {i}", pr->name, pr->prefix);
        else if (!pr->in_block && (pr->prefix[0] || pr->kind))
            rd_fail(r, "global parameter '%s' has a checkpoint prefix or a block kind", pr->name);
        else if (pr->shape.rank < 1)
            rd_fail(r, "parameter '%s' is a scalar; parameters have at least one dimension", pr->name);
        need_real(r, pr->init_std, 0, INFINITY, "a parameter's init std");
        need_real(r, pr->balance_rate, 0, INFINITY, "a balance rule's rate");
    }
    return r->failed ? -1 : 0;
}

// Points each parameter's balance rule at its mask node (balance: their ids,
// -1 for none), a node of its block kind's part (verify_plan checks the rest).
static int resolve_balance(Rd *r, Graph *g, const int32_t *balance) {
    for (int i = 0; i < g->params.n && !r->failed; i++) {
        Param *pr = g->params.items[i];
        const Part *part = pr->in_block ? &g->parts[kind_part(pr->kind)] : NULL;
        if (balance[i] == -1) continue;
        if (!part || balance[i] < 0 || balance[i] >= part->nfwd)
            rd_fail(r, "parameter '%s': its balance rule counts node %d, not a node of its block kind's forward",
                    pr->name, balance[i]);
        else pr->balance_mask = part->nodes.items[balance[i]];
    }
    return r->failed ? -1 : 0;
}

// The checks of one node that need only its own part and the graph's
// inputs and params (what other parts hold is checked after all are read).
// moe's operands (x, gates, w_gate, w_up, w_down) as its plain kernel reads
// them, each weight [E, out, in] or, where its moe_form bit is set, [E,
// in, out]; a fused gate_up [E, 2F, C] (or [E, C, 2F]) in both of w_gate's
// and w_up's places.
static int moe_shapes_ok(Node *const *in, int layout, int nin) {
    const Shape *x = &in[0]->shape, *g = &in[1]->shape;
    if (x->rank < 1 || g->rank != x->rank) return 0;
    for (int i = 0; i + 1 < x->rank; i++)
        if (x->dims[i] != g->dims[i]) return 0;
    int64_t C = x->dims[x->rank - 1], E = g->dims[g->rank - 1], F = -1;
    int fused = layout & (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED);
    if ((layout & (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED)) == (MOE_GATE_UP_HALVES | MOE_GATE_UP_INTERLEAVED) ||
        (fused && (in[2] != in[3] || (layout & 1) != (layout >> 1 & 1))))
        return 0;
    for (int j = 2; j >= 0; j--) { // [E, F, C], [E, F, C] (fused [E, 2F, C]), [E, C, F] as read [E, out, in]
        const Shape *w = &in[2 + j]->shape;
        int t = layout >> j & 1;
        int64_t out = w->dims[t ? 2 : 1], wide = w->dims[t ? 1 : 2], f = j < 2 ? out : wide;
        if (j < 2 && fused) f = out % 2 ? -1 : out / 2;
        if (w->rank != 3 || w->dims[0] != E || (j < 2 ? wide : out) != C || (F >= 0 && f != F)) return 0;
        F = f;
    }
    const Shape *b = nin > 5 ? &in[5]->shape : NULL; // the gate_up bias [E, 2F]
    return !b || (b->rank == 2 && b->dims[0] == E && b->dims[1] == 2 * F);
}

static int same_attention(const Node *a, const Node *b) {
    return a->heads == b->heads && a->kv_heads == b->kv_heads && a->causal == b->causal && a->window == b->window &&
           a->chunk == b->chunk && a->scale == b->scale && a->softcap == b->softcap;
}

// Whether attention node n (forward, lse or backward) and its softmax
// statistics are linked as sema and autodiff make them: lse, f32 [B, H, T]
// of q [B, T, H*D], the node just before the attention that reads it, of
// its q and k and options; the backward reads that attention and that lse;
// with sinks [H] all three read the same ones.
static int attention_linked(const Node *n) {
    int si = attention_sinks_operand(n);
    if (si >= 0 && !(n->in[si]->shape.rank == 1 && n->in[si]->shape.dims[0] == n->heads)) return 0;
    if (n->op == OP_ATTENTION_BWD) {
        const Node *y = n->in[4];
        return y->op == OP_ATTENTION && n->in[5] == y->in[3] && n->in[1] == y->in[0] && n->in[2] == y->in[1] &&
               n->in[3] == y->in[2] && n->nin == y->nin + 2 && (si < 0 || n->in[si] == y->in[4]) &&
               same_attention(n, y);
    }
    if (n->op == OP_ATTENTION) {
        const Node *l = n->in[3];
        return l->op == OP_ATTENTION_LSE && l->id == n->id - 1 && l->in[0] == n->in[0] && l->in[1] == n->in[1] &&
               l->nin == n->nin - 2 && (si < 0 || l->in[2] == n->in[4]) && same_attention(n, l);
    }
    const Shape *q = &n->in[0]->shape;
    return n->dtype == DT_F32 && q->rank == 3 && n->shape.rank == 3 && n->shape.dims[0] == q->dims[0] &&
           n->shape.dims[1] == n->heads && n->shape.dims[2] == q->dims[1];
}

// The fields of node n that only some ops use (wide, padding, moe_form, pooled,
// group_limit): 0 where each is 0 or the op's, else -1 with the reader failed.
static int check_node_fields(Rd *r, PartKind pk, const Node *n, const char *where) {
    if (n->wide != 0 && (n->wide != 1 || n->dtype != DT_F32 || n->op == OP_VIEW || n->op == OP_RESHAPE)) {
        rd_fail(r, "%s: wide %d (0, or 1 on an f32 node with a buffer of its own)", where, n->wide);
        return -1;
    }
    if (n->padding != 0 && ((n->op != OP_EMBED && n->op != OP_EMBED_BWD) || n->padding < 0 ||
                            n->padding > (n->op == OP_EMBED ? n->in[0]->shape.dims[0] : n->shape.dims[0]))) {
        rd_fail(r, "%s: padding row %lld (0, or 1 + a row of an embedding's table)", where, (long long)n->padding);
        return -1;
    }
    if (n->moe_form != 0 &&
        ((n->op != OP_MOE && n->op != OP_MOE_BWD) || (n->moe_form & ~(MOE_FORM_BITS | MOE_ACT_BITS)) ||
         moe_act(n) >= MOE_ACTS || (moe_act(n) != MOE_ACT_SILU && n->scale != 0))) {
        rd_fail(r,
                "%s: moe form %d (0, or on a moe bits of 127 and an activation 0 .. %d above them, "
                "alpha only with 0: silu)",
                where, n->moe_form, MOE_ACTS - 1);
        return -1;
    }
    if (n->pooled != 0 &&
        (n->pooled != 1 || (n->op != OP_LOAD_BALANCE && n->op != OP_LOAD_BALANCE_BWD) || !part_is_block(pk))) {
        rd_fail(r, "%s: pooled %d (0, or 1 on a block's load-balancing loss)", where, n->pooled);
        return -1;
    }
    if (n->group_limit != 0 && (n->group_limit != 1 || n->op != OP_TOP_K)) {
        rd_fail(r, "%s: group_limit %d (0, or 1 on a top_k)", where, n->group_limit);
        return -1;
    }
    return 0;
}

static void check_node(Rd *r, const Graph *g, PartKind pk, const Node *n) {
    char where[96];
    snprintf(where, sizeof where, "%s node %d (%s)", part_name(pk), n->id, op_name(n->op));
    int arity = ARITY[n->op];
    if ((n->op == OP_ATTENTION || n->op == OP_ATTENTION_LSE || n->op == OP_ATTENTION_BWD) && n->nin == arity + 1)
        arity++; // with sinks [H] (common/graph.h)
    if (arity >= 0 ? n->nin != arity : n->nin < 1) {
        rd_fail(r, "%s has %d operands; it takes %d", where, n->nin, arity >= 0 ? arity : 1);
        return;
    }
    if (check_node_fields(r, pk, n, where) != 0) return;
    switch (n->op) {
    case OP_PARAM: {
        if (n->param < 0 || n->param >= g->params.n) {
            rd_fail(r, "%s names parameter %d; there are %d", where, n->param, g->params.n);
            return;
        }
        const Param *pr = g->params.items[n->param];
        if (!shape_eq(&n->shape, &pr->shape) || n->dtype != DT_F32)
            rd_fail(r, "%s: its shape or dtype is not parameter '%s''s", where, pr->name);
        else if (pr->in_block && part_kind(pk) != pr->kind)
            rd_fail(r, "%s: block parameter '%s' of kind %d used outside its kind's block", where, pr->name, pr->kind);
        return;
    }
    case OP_INPUT:
        if (n->src_part < SRC_GRAD_SEED || n->src_part >= graph_nparts(g)) {
            rd_fail(r, "%s: source part %d is out of range (-2..%d)", where, n->src_part, graph_nparts(g) - 1);
        } else if (n->src_part == SRC_MODEL_INPUT) {
            if (n->src < 0 || n->src >= g->inputs.n) {
                rd_fail(r, "%s names model input %d; there are %d", where, n->src, g->inputs.n);
                return;
            }
            const ModelInput *mi = g->inputs.items[n->src];
            if (!shape_eq(&n->shape, &mi->shape) || n->dtype != mi->dtype)
                rd_fail(r, "%s: its shape or dtype is not model input '%s''s", where, mi->name);
        } else if (n->src_part == (int)pk) {
            rd_fail(r, "%s takes its value from its own part", where);
        }
        return;
    case OP_VIEW: {
        int64_t have = shape_numel(&n->in[0]->shape), want = shape_numel(&n->shape);
        if (n->offset < 0 || n->offset > have - want)
            rd_fail(r, "%s: elements [%lld, +%lld) lie outside its operand's %lld", where, (long long)n->offset,
                    (long long)want, (long long)have);
        return;
    }
    case OP_RESHAPE:
        if (shape_numel(&n->shape) != shape_numel(&n->in[0]->shape))
            rd_fail(r, "%s changes the number of elements", where);
        return;
    case OP_SLICE:
    case OP_PAD:
    case OP_CONCAT:
    case OP_SOFTMAX:
    case OP_SOFTMAX_BWD:
        if (n->axis < 0 || n->axis >= n->shape.rank)
            rd_fail(r, "%s: axis %d of a rank %d tensor", where, n->axis, n->shape.rank);
        return;
    case OP_ROPE:
    case OP_ATTENTION:
    case OP_ATTENTION_BWD:
    case OP_ATTENTION_LSE:
        if (n->op != OP_ROPE && !attention_linked(n))
            rd_fail(r,
                    "%s: not linked to its softmax statistics (an attention reads the attention_lse of its q and "
                    "k, the node before it, with the same options; its backward reads both)",
                    where);
        else if (n->heads < 1) rd_fail(r, "%s: %d heads", where, n->heads);
        else if (n->op != OP_ROPE && (n->kv_heads < 1 || n->heads % n->kv_heads != 0))
            rd_fail(r, "%s: %d heads do not group into %d kv heads", where, n->heads, n->kv_heads);
        else if (n->op != OP_ROPE && (n->window < 0 || n->chunk < 0 || !(n->scale >= 0) || !(n->softcap >= 0) ||
                                      isinf(n->scale) || isinf(n->softcap)))
            rd_fail(r, "%s: window %lld, chunk %lld, scale %g, softcap %g (each 0 or positive)", where,
                    (long long)n->window, (long long)n->chunk, n->scale, n->softcap);
        return;
    case OP_TOP_K:
        if (!shape_eq(&n->shape, &n->in[0]->shape) || n->shape.rank < 1 || n->top_k < 1 ||
            n->top_k > n->shape.dims[n->shape.rank - 1])
            rd_fail(r, "%s: top %d of %s", where, n->top_k, n->shape.rank ? "a row" : "a scalar");
        return;
    case OP_MOE:
    case OP_MOE_BWD: {
        Node *const *in = n->in + (n->op == OP_MOE_BWD);
        int64_t total = 0;
        if (n->nin != moe_operand_count(n)) {
            rd_fail(r, "%s has %d operands; its form takes %d", where, n->nin, moe_operand_count(n));
            return;
        }
        for (int j = 0; j + (n->op == OP_MOE_BWD) < n->nin; j++) total += moe_operand_floats(n, j);
        int same = n->op == OP_MOE ? shape_eq(&n->shape, &in[0]->shape)
                                   : shape_numel(&n->shape) == total && shape_eq(&n->in[0]->shape, &in[0]->shape);
        if (!same || !moe_shapes_ok(in, n->moe_form, n->nin - (n->op == OP_MOE_BWD)))
            rd_fail(r, "%s: operands of inconsistent shapes", where);
        else if (n->scale != 0 && !(n->scale > 0 && n->softcap > 0 && isfinite(n->scale) && isfinite(n->softcap)))
            rd_fail(r, "%s: clamped SwiGLU alpha %g, limit %g (alpha 0, or both positive and finite)", where, n->scale,
                    n->softcap);
        return;
    }
    case OP_LOAD_BALANCE:
    case OP_LOAD_BALANCE_BWD: {
        int bwd = n->op == OP_LOAD_BALANCE_BWD;
        const Shape *l = &n->in[bwd]->shape;
        if (l->rank < 1 || !shape_eq(l, &n->in[bwd + 1]->shape) ||
            (bwd ? !shape_eq(&n->shape, l) || n->in[0]->shape.rank : n->shape.rank != 0))
            rd_fail(r, "%s: operands of inconsistent shapes", where);
        return;
    }
    case OP_ADD_LOSS:
        if (!shape_eq(&n->shape, &n->in[0]->shape) || n->in[1]->shape.rank != 0)
            rd_fail(r, "%s: operands of inconsistent shapes", where);
        return;
    case OP_CONV1D:
    case OP_CONV1D_BWD: {
        ConvDims d;
        if (!conv_dims(n, &d)) rd_fail(r, "%s: operands of inconsistent shapes", where);
        return;
    }
    case OP_DELTA_RULE:
    case OP_DELTA_RULE_BWD:
    case OP_SSD:
    case OP_SSD_BWD: {
        ScanDims d;
        if (!scan_dims(n, &d)) rd_fail(r, "%s: operands of inconsistent shapes or heads", where);
        else if (!(n->scale > 0) || isinf(n->scale) || !(n->eps >= 0) || isinf(n->eps))
            rd_fail(r, "%s: scale %g (positive), eps %g (0 or positive)", where, n->scale, n->eps);
        return;
    }
    default: return;
    }
}

static Node *read_node(Rd *r, Graph *g, PartKind pk, Part *part) {
    int id = part->nodes.n;
    char what[64];
    snprintf(what, sizeof what, "%s node %d", part_name(pk), id);
    OpKind op = (OpKind)get_enum(r, OP_COUNT, what, "op");
    DType dt = (DType)get_enum(r, DT_COUNT, what, "dtype");
    Shape shape;
    get_shape(r, &shape, what);
    Loc loc = get_loc(r, what);
    const char *name;
    get_str(r, &name, 1, what);
    Annot annot = (Annot)get_enum(r, ANNOT_OFFLOAD + 1, what, "annotation");
    int nin = get_count(r, 4, "operands");
    if (r->failed) return NULL;
    Node **in = nin ? arena_alloc(r->a, (size_t)nin * sizeof *in) : NULL;
    if (nin && !in) {
        rd_oom(r);
        return NULL;
    }
    for (int j = 0; j < nin; j++) {
        uint32_t src = get_u32(r);
        if (r->failed) return NULL;
        if (src >= (uint32_t)id) {
            rd_fail(r, "%s (%s): operand %d is node %u, not an earlier node of its part", what, op_name(op), j, src);
            return NULL;
        }
        in[j] = part->nodes.items[src];
    }
    Node *n = graph_add_node(r->a, part, pk, op, dt, &shape, loc, nin, in);
    if (!n) {
        rd_oom(r);
        return NULL;
    }
    n->name = name;
    n->annot = annot;
    n->param = get_i32(r);
    n->src_part = get_i32(r);
    n->src = get_i32(r);
    n->value = get_f64(r);
    n->axis = get_i32(r);
    n->offset = get_i64(r);
    n->heads = get_i32(r);
    n->kv_heads = get_i32(r);
    n->causal = get_i32(r);
    n->trans_a = get_i32(r);
    n->trans_b = get_i32(r);
    n->inverse = get_i32(r);
    n->eps = get_f64(r);
    n->theta = get_f64(r);
    n->window = get_i64(r);
    n->scale = get_f64(r);
    n->softcap = get_f64(r);
    n->top_k = get_i32(r);
    n->rope_interleaved = get_i32(r);
    n->rope_scale = get_f64(r);
    int pairs = get_count(r, 8, "rope frequencies");
    if (r->failed) return NULL;
    if (pairs) {
        double *f = arena_alloc(r->a, (size_t)pairs * sizeof *f); // (D/2)
        if (!f) {
            rd_oom(r);
            return NULL;
        }
        for (int i = 0; i < pairs; i++) f[i] = get_f64(r);
        n->rope_freq = f;
    }
    if (get_str(r, &n->rope_rule, 1, "a rope's rule") != 0) return NULL;
    if (n->rope_rule && op != OP_ROPE) {
        rd_fail(r, "%s (%s): a rope rule on another op", what, op_name(op));
        return NULL;
    }
    n->wide = get_i32(r);
    n->padding = get_i64(r);
    n->pooled = get_i32(r);
    n->chunk = get_i64(r);
    n->group_limit = get_i32(r);
    n->moe_form = get_i32(r);
    if (r->failed) return NULL;
    if (op == OP_ROPE ? shape.rank != 3 || n->heads < 1 || shape.dims[2] % n->heads || (shape.dims[2] / n->heads) % 2 ||
                            pairs != shape.dims[2] / n->heads / 2
                      : pairs != 0) {
        rd_fail(r, "%s (%s): %d rope frequencies for its shape and %d heads", what, op_name(op), pairs, n->heads);
        return NULL;
    }
    for (int i = 0; i < pairs; i++)
        if (!isfinite(n->rope_freq[i]) || n->rope_freq[i] < 0) {
            rd_fail(r, "%s (%s): rope frequency %d is %g", what, op_name(op), i, n->rope_freq[i]);
            return NULL;
        }
    if (op == OP_ROPE && (!isfinite(n->rope_scale) || !(n->rope_scale > 0))) {
        rd_fail(r, "%s (%s): rope scale %g", what, op_name(op), n->rope_scale);
        return NULL;
    }
    check_node(r, g, pk, n);
    return r->failed ? NULL : n;
}

// A node id of part, in [lo, hi); -1 allowed when may_be_none.
static Node *get_node_ref(Rd *r, const Part *part, int lo, int hi, int may_be_none, PartKind pk, const char *what) {
    int32_t id = get_i32(r);
    if (r->failed) return NULL;
    if (id == -1 && may_be_none) return NULL;
    if (id < lo || id >= hi) {
        rd_fail(r, "%s part: %s is node %d; expected %s%d..%d", part_name(pk), what, id, may_be_none ? "-1 or " : "",
                lo, hi - 1);
        return NULL;
    }
    return part->nodes.items[id];
}

static int read_part(Rd *r, Graph *g, PartKind pk) {
    Part *part = &g->parts[pk];
    uint32_t kind = get_u32(r);
    if (!r->failed && kind != (uint32_t)pk) rd_fail(r, "part %u where the %s part belongs", kind, part_name(pk));
    int n = get_count(r, NODE_MIN, "nodes");
    for (int i = 0; i < n && !r->failed; i++) read_node(r, g, pk, part);
    if (r->failed) return -1;
    if (n == 0) {
        rd_fail(r, "the %s part has no nodes", part_name(pk));
        return -1;
    }
    int32_t output = get_i32(r);
    part->nfwd = get_i32(r);
    if (r->failed) return -1;
    if (part->nfwd < 1 || part->nfwd > n) {
        rd_fail(r, "%s part: nfwd %d; expected 1..%d", part_name(pk), part->nfwd, n);
        return -1;
    }
    if (output < 0 || output >= part->nfwd) {
        rd_fail(r, "%s part: the output is node %d, not a forward node (0..%d)", part_name(pk), output, part->nfwd - 1);
        return -1;
    }
    part->output = part->nodes.items[output];
    part->grad_seed = get_node_ref(r, part, part->nfwd, n, 0, pk, "the gradient seed");
    if (r->failed) return -1;
    const Node *seed = part->grad_seed;
    int scale = pk == PART_TAIL && seed->op == OP_INPUT && seed->src_part == SRC_MODEL_INPUT && seed->dtype == DT_F32 &&
                seed->shape.rank == 0; // the loss scale mtrun feeds
    if (!(seed->op == OP_CONST || scale || (seed->op == OP_INPUT && seed->src_part == SRC_GRAD_SEED))) {
        rd_fail(r, "%s part: the gradient seed, node %d, is a %s", part_name(pk), seed->id, op_name(seed->op));
        return -1;
    }
    int ngrads = get_count(r, GRAD_BYTES, "gradients");
    for (int i = 0; i < ngrads && !r->failed; i++) {
        Grad *gr = arena_alloc(r->a, sizeof *gr);
        if (!gr || ptrvec_push(r->a, &part->grads, gr) != 0) {
            rd_oom(r);
            break;
        }
        gr->of = get_node_ref(r, part, 0, part->nfwd, 0, pk, "what a gradient is of");
        gr->grad = get_node_ref(r, part, 0, n, 1, pk, "a gradient");
        if (r->failed) break;
        if (!(gr->of->op == OP_PARAM || (gr->of->op == OP_INPUT && gr->of->src_part >= 0)))
            rd_fail(r, "%s part: gradient %d is of node %d, a %s; gradients are of parameters and part inputs",
                    part_name(pk), i, gr->of->id, op_name(gr->of->op));
        else if (gr->grad && !shape_eq(&gr->grad->shape, &gr->of->shape))
            rd_fail(r, "%s part: gradient %d, node %d, is not the shape of node %d", part_name(pk), i, gr->grad->id,
                    gr->of->id);
    }
    return r->failed ? -1 : 0;
}

// The block kinds and each layer's, a byte a layer; every kind some layer's.
static int read_layer_kinds(Rd *r, Graph *g) {
    g->nkinds = get_enum(r, MT_MAX_KINDS + 1, "the graph", "block kind count");
    if (!r->failed && g->nkinds < 1) rd_fail(r, "0 block kinds; a model has at least one");
    if (!need(r, (size_t)g->layers)) return -1;
    if (!(g->layer_kind = arena_alloc(r->a, (size_t)g->layers))) {
        rd_oom(r);
        return -1;
    }
    memcpy(g->layer_kind, r->p + r->pos, (size_t)g->layers);
    r->pos += (size_t)g->layers;
    int used[MT_MAX_KINDS] = {0};
    for (int64_t l = 0; l < g->layers && !r->failed; l++) {
        if (g->layer_kind[l] >= g->nkinds)
            rd_fail(r, "layer %lld is of block kind %d; there are %d", (long long)l, g->layer_kind[l], g->nkinds);
        else used[g->layer_kind[l]] = 1;
    }
    for (int k = 0; k < g->nkinds && !r->failed; k++)
        if (!used[k]) rd_fail(r, "block kind %d is no layer's", k);
    return r->failed ? -1 : 0;
}

static int read_graph(Rd *r, Graph *g) {
    get_str(r, &g->model_name, 0, "the model name");
    get_str(r, &g->block_name, 0, "the block name");
    get_str(r, &g->block_prefix, 0, "the block prefix");
    g->layers = get_i64(r);
    if (r->failed) return -1;
    if (!strstr(g->block_prefix, "{i}")) {
        rd_fail(r, "the block prefix \"%s\" has no {i}", g->block_prefix);
        return -1;
    }
    if (g->layers < 1 || g->layers > INT32_MAX) {
        rd_fail(r, "%lld layers; expected 1..%d", (long long)g->layers, INT32_MAX);
        return -1;
    }
    int32_t *balance = NULL; // (params) each one's balance rule's mask node
    if (read_layer_kinds(r, g) != 0 || read_inputs(r, g) != 0 || read_params(r, g, &balance) != 0) return -1;
    for (int pk = 0; pk < graph_nparts(g); pk++)
        if (read_part(r, g, (PartKind)pk) != 0) return -1;
    if (resolve_balance(r, g, balance) != 0) return -1;
    // Values taken from other parts: the source node must exist there.
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        const Part *part = &g->parts[pk];
        for (int i = 0; i < part->nodes.n; i++) {
            const Node *n = part->nodes.items[i];
            if (n->op == OP_INPUT && n->src_part >= 0 && (n->src < 0 || n->src >= g->parts[n->src_part].nodes.n)) {
                rd_fail(r, "%s node %d (input) takes node %d of the %s part, which has %d", part_name((PartKind)pk), i,
                        n->src, part_name((PartKind)n->src_part), g->parts[n->src_part].nodes.n);
                return -1;
            }
        }
    }
    return 0;
}

// ---------------------------------------------------------------- HOST

// The optimizer's placement: a byte a segment, 0 (host) or 1 (device).
static int read_opt_device(Rd *r, Plan *p) {
    int n = get_count(r, 1, "optimizer placements");
    if (r->failed) return -1;
    if (n != plan_segment_count(p)) {
        rd_fail(r, "%d optimizer placements for %lld segments", n, (long long)plan_segment_count(p));
        return -1;
    }
    if (!(p->opt_device = arena_alloc(r->a, (size_t)n))) {
        rd_oom(r);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        p->opt_device[i] = r->p[r->pos + (size_t)i];
        if (p->opt_device[i] > 1) {
            rd_fail(r, "segment %lld's optimizer placement is %u; 0 (host) or 1 (device)", (long long)(i + SEG_FIRST),
                    p->opt_device[i]);
            return -1;
        }
    }
    r->pos += (size_t)n;
    return 0;
}

static int read_host(Rd *r, Plan *p) {
    const Graph *g = p->graph;
    p->host_global = get_i64(r);
    p->host_tail = get_i64(r);
    for (int k = 0; k < g->nkinds; k++) p->host_kind[k] = get_i64(r);
    int n = get_count(r, 8, "parameter offsets");
    if (r->failed) return -1;
    for (int k = 0; k < g->nkinds; k++)
        if (p->host_global < 0 || p->host_kind[k] < 0 || p->host_kind[k] > (MAX_NUMEL - p->host_global) / g->layers) {
            rd_fail(r, "a host store of %lld + %lld x %lld floats (block kind %d) is out of range",
                    (long long)p->host_global, (long long)g->layers, (long long)p->host_kind[k], k);
            return -1;
        }
    if (!(p->layer_base = arena_alloc(r->a, (size_t)(g->layers + 1) * sizeof(int64_t)))) {
        rd_oom(r);
        return -1;
    }
    plan_lay_out_layers(p);
    if (p->host_tail < 0 || p->host_tail > p->host_global) {
        rd_fail(r, "the tail's globals take %lld of the %lld global floats", (long long)p->host_tail,
                (long long)p->host_global);
        return -1;
    }
    if (n != g->params.n) {
        rd_fail(r, "%d parameter offsets for %d parameters", n, g->params.n);
        return -1;
    }
    p->param_offset = arena_alloc(r->a, ((size_t)n + 1) * sizeof(int64_t));
    if (!p->param_offset) {
        rd_oom(r);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        p->param_offset[i] = get_i64(r);
        if (r->failed) return -1;
        const Param *pr = g->params.items[i];
        int64_t seg = pr->in_block ? p->host_kind[pr->kind] : p->host_global;
        if (!range_ok(p->param_offset[i], shape_numel(&pr->shape), seg)) {
            rd_fail(r, "parameter '%s' at floats [%lld, +%lld) lies outside its %s segment of %lld floats", pr->name,
                    (long long)p->param_offset[i], (long long)shape_numel(&pr->shape),
                    pr->in_block ? "layer" : "global", (long long)seg);
            return -1;
        }
        int64_t first = p->param_offset[i], last = first + shape_numel(&pr->shape) - 1;
        if (!pr->in_block && shape_numel(&pr->shape) > 0 && plan_segment_of(p, first) != plan_segment_of(p, last)) {
            rd_fail(r, "global parameter '%s' at floats [%lld, %lld] lies across the head's and the tail's segments",
                    pr->name, (long long)first, (long long)last);
            return -1;
        }
    }
    p->host_act_bytes = get_i64(r);
    if (!r->failed && (p->host_act_bytes < 0 || p->host_act_bytes > MAX_NUMEL)) {
        rd_fail(r, "a host activation store of %lld bytes", (long long)p->host_act_bytes);
        return -1;
    }
    return read_opt_device(r, p);
}

// ---------------------------------------------------------------- ARENA

static int read_arena(Rd *r, Plan *p) {
    const Graph *g = p->graph;
    p->arena_bytes = get_i64(r);
    p->scratch_bytes = get_i64(r);
    p->device_limit = get_i64(r);
    p->nframes = get_i32(r);
    if (r->failed) return -1;
    if (p->arena_bytes < 0) rd_fail(r, "arena of %lld bytes", (long long)p->arena_bytes);
    else if (p->scratch_bytes < 0 || p->scratch_bytes > ((int64_t)1 << 50) || p->scratch_bytes % 256)
        rd_fail(r, "kernel scratch of %lld bytes (a multiple of 256 is recorded)", (long long)p->scratch_bytes);
    else if (p->device_limit < 0) rd_fail(r, "a device limit of %lld bytes", (long long)p->device_limit);
    else if (p->nframes < 1 || p->nframes > g->layers + 8)
        rd_fail(r, "%d block frames for %lld layers", p->nframes, (long long)g->layers);
    for (int pk = 0; pk < graph_nparts(g) && !r->failed; pk++) {
        const Part *part = &g->parts[pk];
        int n = get_count(r, 8, "node offsets");
        if (r->failed) return -1;
        int64_t want = (int64_t)part->nodes.n * (part_is_block(pk) ? p->nframes : 1);
        if (n != want) {
            rd_fail(r, "%d node offsets for the %d nodes of the %s part%s", n, part->nodes.n, part_name((PartKind)pk),
                    part_is_block(pk) ? " in each frame" : "");
            return -1;
        }
        p->node_offset[pk] = arena_alloc(r->a, ((size_t)n + 1) * sizeof(int64_t));
        if (!p->node_offset[pk]) {
            rd_oom(r);
            return -1;
        }
        for (int k = 0; k < n; k++) {
            int64_t off = p->node_offset[pk][k] = get_i64(r);
            if (r->failed) return -1;
            int i = k % part->nodes.n;
            const Node *nd = part->nodes.items[i];
            if (off == -1) {
                if (nd->op == OP_VIEW || nd->op == OP_RESHAPE) continue;
                rd_fail(r, "%s node %d (%s) has no buffer; only views and reshapes may share one",
                        part_name((PartKind)pk), i, op_name(nd->op));
                return -1;
            }
            if (!range_ok(off, storage_bytes(g->train.compute, nd), p->arena_bytes)) {
                rd_fail(r, "%s node %d (%s) at bytes [%lld, +%lld) lies outside the arena of %lld bytes",
                        part_name((PartKind)pk), i, op_name(nd->op), (long long)off,
                        (long long)storage_bytes(g->train.compute, nd), (long long)p->arena_bytes);
                return -1;
            }
            if (off % storage_elem_bytes(g->train.compute, nd) != 0) {
                rd_fail(r, "%s node %d (%s) at byte %lld is not aligned to its elements", part_name((PartKind)pk), i,
                        op_name(nd->op), (long long)off);
                return -1;
            }
        }
    }
    return r->failed ? -1 : 0;
}

// ---------------------------------------------------------------- STREAMS

static void check_instr(Rd *r, const Plan *p, const Instr *in, const char *stream, int i) {
    const Graph *g = p->graph;
    int64_t host = plan_host_elems(p), A = p->arena_bytes;
    char where[64];
    snprintf(where, sizeof where, "%s instruction %d (%s)", stream, i,
             in->kind >= 0 && in->kind < INS_COUNT ? INS_NAMES[in->kind] : "?");
    if (in->kind < 0 || in->kind >= INS_COUNT) {
        rd_fail(r, "%s instruction %d: kind %d is out of range (0..%d)", stream, i, in->kind, INS_COUNT - 1);
        return;
    }
    if (in->bytes < 0) {
        rd_fail(r, "%s: %lld bytes", where, (long long)in->bytes);
        return;
    }
    if (in->engine < 0 || in->engine >= ENG_COUNT) {
        rd_fail(r, "%s: engine %d is out of range (0..%d)", where, in->engine, ENG_COUNT - 1);
        return;
    }
    switch ((InsKind)in->kind) {
    case INS_RUN:
        if (in->part < 0 || in->part >= graph_nparts(g)) rd_fail(r, "%s: part %d is out of range", where, in->part);
        else if (in->frame < 0 || in->frame >= (part_is_block(in->part) ? p->nframes : 1))
            rd_fail(r, "%s: frame %d; the %s part has %d", where, in->frame, part_name((PartKind)in->part),
                    part_is_block(in->part) ? p->nframes : 1);
        else if (in->flags & ~RUN_SKIP_HEAVY) rd_fail(r, "%s: unknown flags 0x%x", where, (unsigned)in->flags);
        else if (in->from < 0 || in->from > in->to || in->to > g->parts[in->part].nodes.n)
            rd_fail(r, "%s: nodes [%d, %d) of the %s part, which has %d", where, in->from, in->to,
                    part_name((PartKind)in->part), g->parts[in->part].nodes.n);
        else if (in->layer < (part_is_block(in->part) ? 0 : -1) || in->layer >= g->layers)
            rd_fail(r, "%s: layer %d of %lld", where, in->layer, (long long)g->layers);
        else if (part_is_block(in->part) && in->part != block_part(g, in->layer))
            rd_fail(r, "%s: layer %d runs the %s part, not its kind's, %s", where, in->layer,
                    part_name((PartKind)in->part), part_name((PartKind)block_part(g, in->layer)));
        return;
    case INS_COPY_IN:
    case INS_COPY_OUT: {
        int64_t harena = in->kind == INS_COPY_IN ? in->dst : in->src,
                hhost = in->kind == INS_COPY_IN ? in->src : in->dst;
        int64_t elem = in->flags & XFER_BF16 ? 2 : 4;
        if (in->layer < SEG_FIRST || in->layer >= g->layers)
            rd_fail(r, "%s: segment %d of %lld layers and the head's (-1) and tail's (-2) globals", where, in->layer,
                    (long long)g->layers);
        else if (in->flags & ~(XFER_BF16 | XFER_SHARD))
            rd_fail(r, "%s: unknown flags 0x%x", where, (unsigned)in->flags);
        else if (!(in->flags & XFER_SHARD) != !p->sharded)
            rd_fail(r, "%s: %s in a %s plan", where, in->flags & XFER_SHARD ? "a shard's copy" : "a whole copy",
                    p->sharded ? "sharded" : "replicated");
        else if ((in->flags & XFER_BF16) && g->train.compute != DT_BF16)
            rd_fail(r, "%s: a bf16 transfer in a plan that computes in %s", where, dtype_name(g->train.compute));
        else if (in->kind == INS_COPY_IN && g->train.compute == DT_BF16 && !(in->flags & XFER_BF16))
            rd_fail(r, "%s: bf16 plans stream their weights as bf16", where);
        else if (in->bytes % elem != 0)
            rd_fail(r, "%s: %lld bytes is not whole %s elements", where, (long long)in->bytes,
                    elem == 2 ? "bf16" : "fp32");
        else if (!range_ok(hhost, in->bytes / elem, host))
            rd_fail(r, "%s: host elements [%lld, +%lld) lie outside the host store of %lld", where, (long long)hhost,
                    (long long)(in->bytes / elem), (long long)host);
        else if (!range_ok(harena, in->bytes, A))
            rd_fail(r, "%s: arena bytes [%lld, +%lld) lie outside the arena of %lld", where, (long long)harena,
                    (long long)in->bytes, (long long)A);
        return;
    }
    case INS_COPY: { // XFER_BF16: bf16 widened to fp32, bytes the fp32 ones
        int64_t from = in->flags & XFER_BF16 ? in->bytes / 2 : in->bytes;
        if (in->flags & ~XFER_BF16) rd_fail(r, "%s: unknown flags 0x%x", where, (unsigned)in->flags);
        else if ((in->flags & XFER_BF16) && (in->bytes % 4 != 0 || in->src % 2 != 0 || in->dst % 4 != 0))
            rd_fail(r, "%s: a widening copy of %lld bytes from %lld to %lld: not whole aligned elements", where,
                    (long long)in->bytes, (long long)in->src, (long long)in->dst);
        else if (!range_ok(in->src, from, A) || !range_ok(in->dst, in->bytes, A))
            rd_fail(r, "%s: %lld bytes from %lld to %lld leave the arena of %lld", where, (long long)in->bytes,
                    (long long)in->src, (long long)in->dst, (long long)A);
        else if (in->bytes > 0 && in->src < in->dst + in->bytes && in->dst < in->src + from)
            rd_fail(r, "%s: source [%lld, +%lld) and destination %lld overlap", where, (long long)in->src,
                    (long long)from, (long long)in->dst);
        return;
    }
    case INS_ALLGATHER:
    case INS_REDUCE_SCATTER: {
        int64_t at = in->kind == INS_ALLGATHER ? in->dst : in->src;
        int64_t elem = in->kind == INS_ALLGATHER ? storage_weight_bytes(g->train.compute) : 4;
        if (!p->sharded) rd_fail(r, "%s: a collective in a plan that is not sharded", where);
        else if (in->layer < SEG_FIRST || in->layer >= g->layers)
            rd_fail(r, "%s: segment %d of %lld layers and the head's (-1) and tail's (-2) globals", where, in->layer,
                    (long long)g->layers);
        else if (in->bytes != p->ranks * ((plan_segment_len(p, in->layer) + p->ranks - 1) / p->ranks) * elem)
            rd_fail(r, "%s: %lld bytes, not %d ranks' chunks of segment %d", where, (long long)in->bytes, p->ranks,
                    in->layer);
        else if (!range_ok(at, in->bytes, A) || at % elem != 0)
            rd_fail(r, "%s: arena bytes [%lld, +%lld) are not whole elements inside the arena of %lld", where,
                    (long long)at, (long long)in->bytes, (long long)A);
        return;
    }
    case INS_INPUT: {
        if (in->input < 0 || in->input >= g->inputs.n) {
            rd_fail(r, "%s: model input %d; there are %d", where, in->input, g->inputs.n);
            return;
        }
        const ModelInput *mi = g->inputs.items[in->input];
        int64_t have = shape_numel(&mi->shape) * dtype_bytes(mi->dtype);
        if (in->bytes > have || in->bytes % dtype_bytes(mi->dtype) != 0)
            rd_fail(r, "%s: %lld bytes of model input '%s', which has %lld", where, (long long)in->bytes, mi->name,
                    (long long)have);
        else if (!range_ok(in->dst, in->bytes, A))
            rd_fail(r, "%s: arena bytes [%lld, +%lld) lie outside the arena of %lld", where, (long long)in->dst,
                    (long long)in->bytes, (long long)A);
        return;
    }
    case INS_LOSS:
        if (!range_ok(in->src, 4, A))
            rd_fail(r, "%s: the loss at byte %lld lies outside the arena of %lld", where, (long long)in->src,
                    (long long)A);
        else if (in->src % 4 != 0)
            rd_fail(r, "%s: the loss at byte %lld is not aligned to a float", where, (long long)in->src);
        return;
    case INS_SAVE:
    case INS_LOAD: {
        int64_t harena = in->kind == INS_SAVE ? in->src : in->dst, hact = in->kind == INS_SAVE ? in->dst : in->src;
        if (!range_ok(hact, in->bytes, p->host_act_bytes))
            rd_fail(r, "%s: host activation bytes [%lld, +%lld) lie outside the store of %lld", where, (long long)hact,
                    (long long)in->bytes, (long long)p->host_act_bytes);
        else if (!range_ok(harena, in->bytes, A))
            rd_fail(r, "%s: arena bytes [%lld, +%lld) lie outside the arena of %lld", where, (long long)harena,
                    (long long)in->bytes, (long long)A);
        return;
    }
    case INS_FREE:
        if (!range_ok(in->dst, in->bytes, A) || in->dst % 4 != 0 || in->bytes % 4 != 0)
            rd_fail(r, "%s: arena bytes [%lld, +%lld) are not whole floats inside the arena of %lld", where,
                    (long long)in->dst, (long long)in->bytes, (long long)A);
        return;
    case INS_RECORD:
    case INS_WAIT:
        if (in->event < 0 || in->event >= p->nevents)
            rd_fail(r, "%s: event %d; the plan has %d", where, in->event, p->nevents);
        return;
    case INS_NORM:
    case INS_UPDATE:
        if (in->layer < SEG_FIRST || in->layer >= g->layers)
            rd_fail(r, "%s: segment %d of %lld layers and the head's (-1) and tail's (-2) globals", where, in->layer,
                    (long long)g->layers);
        return;
    case INS_STAT: {
        int64_t elem = in->flags & XFER_BF16 ? 2 : 4;
        if (in->layer < 0 || in->layer >= g->layers) {
            rd_fail(r, "%s: layer %d of %lld", where, in->layer, (long long)g->layers);
            return;
        }
        const Part *part = &g->parts[block_part(g, in->layer)];
        const Node *n = in->part == block_part(g, in->layer) && in->from >= 0 && in->from < part->nfwd
                            ? part->nodes.items[in->from]
                            : NULL;
        if (!n || p->node_offset[in->part] == NULL || plan_offsets(p, in->part, 0)[in->from] < 0)
            rd_fail(r, "%s: node %d of part %d is not a node with a buffer in layer %d's forward", where, in->from,
                    in->part, in->layer);
        else if (in->frame < 0 || in->frame >= p->nframes)
            rd_fail(r, "%s: frame %d; the block has %d", where, in->frame, p->nframes);
        else if (in->flags & ~XFER_BF16) rd_fail(r, "%s: unknown flags 0x%x", where, (unsigned)in->flags);
        else if ((in->flags & XFER_BF16) && g->train.compute != DT_BF16)
            rd_fail(r, "%s: a bf16 transfer in a plan that computes in %s", where, dtype_name(g->train.compute));
        else if (in->bytes != shape_numel(&n->shape) * elem)
            rd_fail(r, "%s: %lld bytes of a node of %lld elements", where, (long long)in->bytes,
                    (long long)shape_numel(&n->shape));
        else if (!range_ok(in->src, in->bytes, A) || in->src % elem != 0)
            rd_fail(r, "%s: arena bytes [%lld, +%lld) are not whole elements inside the arena of %lld", where,
                    (long long)in->src, (long long)in->bytes, (long long)A);
        else if (in->dst < 0 || in->dst > MAX_NUMEL || in->dst % elem != 0)
            rd_fail(r, "%s: statistics byte %lld", where, (long long)in->dst);
        return;
    }
    case INS_COUNT: return;
    }
}

static Instr *read_instrs(Rd *r, const Plan *p, int32_t *count, const char *stream) {
    int n = get_count(r, INSTR_BYTES, "instructions");
    if (r->failed) return NULL;
    Instr *ins = arena_alloc(r->a, ((size_t)n + 1) * sizeof *ins);
    if (!ins) {
        rd_oom(r);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        Instr *in = &ins[i];
        in->kind = get_i32(r);
        in->engine = get_i32(r);
        in->part = get_i32(r);
        in->layer = get_i32(r);
        in->input = get_i32(r);
        in->from = get_i32(r);
        in->to = get_i32(r);
        in->frame = get_i32(r);
        in->flags = get_i32(r);
        in->event = get_i32(r);
        in->src = get_i64(r);
        in->dst = get_i64(r);
        in->bytes = get_i64(r);
        if (r->failed) return NULL;
        check_instr(r, p, in, stream, i);
        if (r->failed) return NULL;
    }
    *count = n;
    return ins;
}

// ---------------------------------------------------------------- KERNELS

// A u64 length and that many bytes, left in place (the plan's bytes outlive it).
static int get_blob(Rd *r, const uint8_t **out, size_t *len, const char *what) {
    uint64_t n = (uint64_t)get_i64(r);
    *out = NULL;
    *len = 0;
    if (r->failed) return -1;
    if (n > r->len - r->pos) {
        rd_fail(r, "%s of %llu bytes runs past the section's end", what, (unsigned long long)n);
        return -1;
    }
    uint8_t *copy = arena_alloc(r->a, n ? (size_t)n : 1);
    if (!copy) {
        rd_oom(r);
        return -1;
    }
    memcpy(copy, r->p + r->pos, (size_t)n);
    r->pos += (size_t)n;
    *out = copy;
    *len = (size_t)n;
    return 0;
}

static int read_kernels(Rd *r, Plan *p) {
    const uint8_t *ptx;
    if (get_blob(r, &p->kernels_bytes, &p->kernels_len, "the kernel IR") != 0 ||
        get_blob(r, &p->bitcode, &p->bitcode_len, "the LLVM bitcode") != 0 ||
        get_str(r, &p->cuda_arch, 1, "the CUDA architecture") != 0 ||
        get_blob(r, &p->cubin, &p->cubin_len, "the CUDA cubin") != 0 || get_blob(r, &ptx, &p->ptx_len, "the PTX") != 0)
        return -1;
    p->ptx = (const char *)ptx;
    if ((!p->cuda_arch || !p->cuda_arch[0]) && (p->cubin_len || p->ptx_len)) { // "" names no architecture
        rd_fail(r, "CUDA code without an architecture");
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------- the file

typedef struct Entry {
    uint32_t crc;
    uint64_t off, size;
} Entry;

// The header and the section table; fills e[id - 1].
static int read_table(Rd *r, Entry e[SECTIONS]) {
    const unsigned char *d = r->p;
    size_t len = r->len;
    if (len == 0) {
        rd_fail(r, "empty file; not an mt plan");
        return -1;
    }
    if (memcmp(d, MAGIC, len < 8 ? len : 8) != 0) {
        rd_fail(r, "not an mt plan (bad magic)");
        return -1;
    }
    if (len < HEADER_BYTES) {
        rd_fail(r, "truncated: %zu bytes, shorter than the plan header (%d)", len, HEADER_BYTES);
        return -1;
    }
    uint32_t version = ld32(d + 8), endian = ld32(d + 12), count = ld32(d + 16);
    if (endian == OTHER_ENDIAN) {
        rd_fail(r, "written on a machine of the other byte order");
        return -1;
    }
    if (version != PLAN_VERSION) {
        rd_fail(r, "plan version %u, this mtrun reads version %d", version, PLAN_VERSION);
        return -1;
    }
    if (endian != PLAN_ENDIAN) {
        rd_fail(r, "bad endianness word 0x%08x", endian);
        return -1;
    }
    if ((uint32_t)crc32(crc32(0L, Z_NULL, 0), d, 20) != ld32(d + 20)) {
        rd_fail(r, "the plan header is corrupted (crc32 mismatch)");
        return -1;
    }
    if (count != SECTIONS) {
        rd_fail(r, "the section table lists %u sections; a version %d plan has %d", count, PLAN_VERSION, SECTIONS);
        return -1;
    }
    if (len < TABLE_END) {
        rd_fail(r, "truncated: %zu bytes, shorter than the header and section table (%d)", len, TABLE_END);
        return -1;
    }
    int seen[SECTIONS] = {0};
    for (int i = 0; i < SECTIONS; i++) {
        const unsigned char *t = d + HEADER_BYTES + (size_t)i * ENTRY_BYTES;
        uint32_t id = ld32(t);
        if (id < 1 || id > SECTIONS) {
            rd_fail(r, "section table entry %d has id %u; ids are 1..%d", i, id, SECTIONS);
            return -1;
        }
        const char *name = SECTION_NAMES[id - 1];
        if (seen[id - 1]++) {
            rd_fail(r, "section %s is listed twice in the section table", name);
            return -1;
        }
        Entry *en = &e[id - 1];
        en->crc = ld32(t + 4);
        en->off = ld64(t + 8);
        en->size = ld64(t + 16);
        if (en->off < TABLE_END) {
            rd_fail(r, "section %s starts at byte %llu, inside the header and section table", name,
                    (unsigned long long)en->off);
            return -1;
        }
        if (en->off > len || en->size > len - en->off) {
            rd_fail(r, "section %s is truncated (it takes bytes [%llu, +%llu), the file ends at byte %zu)", name,
                    (unsigned long long)en->off, (unsigned long long)en->size, len);
            return -1;
        }
    }
    // No two sections overlap: sort the ids by offset (seven of them).
    int order[SECTIONS];
    for (int i = 0; i < SECTIONS; i++) order[i] = i;
    for (int i = 1; i < SECTIONS; i++)
        for (int j = i; j > 0 && e[order[j]].off < e[order[j - 1]].off; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 1; i < SECTIONS; i++) {
        const Entry *a = &e[order[i - 1]], *b = &e[order[i]];
        if (a->off + a->size > b->off) {
            rd_fail(r, "sections %s and %s overlap", SECTION_NAMES[order[i - 1]], SECTION_NAMES[order[i]]);
            return -1;
        }
    }
    for (int s = 0; s < SECTIONS; s++) {
        uLong crc = crc32(0L, Z_NULL, 0);
        for (uint64_t done = 0; done < e[s].size;) {
            uint64_t n = e[s].size - done > (1u << 30) ? (1u << 30) : e[s].size - done;
            crc = crc32(crc, d + e[s].off + done, (uInt)n);
            done += n;
        }
        if ((uint32_t)crc != e[s].crc) {
            rd_fail(r, "section %s is corrupted (crc32 mismatch)", SECTION_NAMES[s]);
            return -1;
        }
    }
    return 0;
}

Plan *plan_parse(const void *data, size_t len, const char *name, Arena *a, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!name) name = "plan";
    Rd file = {.p = data, .len = len, .file = name, .err = err, .errcap = errcap, .a = a};
    if (!data && len) len = file.len = 0;
    Entry e[SECTIONS];
    if (read_table(&file, e) != 0) return NULL;

    Plan *p = arena_alloc(a, sizeof *p);
    Graph *g = arena_alloc(a, sizeof *g);
    if (!p || !g) {
        rd_oom(&file);
        return NULL;
    }
    p->graph = g;
    // In the order each section's checks need: GRAPH before what refers to
    // its nodes and params, STREAMS after HOST and ARENA, KERNELS last.
    static const int ORDER[SECTIONS] = {SEC_SOURCE, SEC_GRAPH,   SEC_CONFIG, SEC_HOST,
                                        SEC_ARENA,  SEC_STREAMS, SEC_KERNELS};
    uLong plan_crc = crc32(0L, Z_NULL, 0);
    for (int k = 0; k < SECTIONS; k++) {
        int id = ORDER[k];
        const Entry *en = &e[id - 1];
        Rd r = {.p = file.p + en->off,
                .len = (size_t)en->size,
                .file = name,
                .sec = SECTION_NAMES[id - 1],
                .err = err,
                .errcap = errcap,
                .a = a};
        int rc = 0;
        switch ((SectionId)id) {
        case SEC_SOURCE: rc = read_source(&r, p); break;
        case SEC_CONFIG: rc = read_config(&r, &g->train); break;
        case SEC_GRAPH: rc = read_graph(&r, g); break;
        case SEC_HOST: rc = read_host(&r, p); break;
        case SEC_ARENA: rc = read_arena(&r, p); break;
        case SEC_STREAMS:
            if (get_str(&r, &p->schedule, 0, "the schedule's name") != 0) break;
            p->ranks = get_i32(&r);
            if (!r.failed && p->ranks < 1) {
                rd_fail(&r, "%d ranks; at least 1", p->ranks);
                break;
            }
            p->sharded = get_i32(&r);
            if (!r.failed && (p->sharded < 0 || p->sharded > 1 || (p->sharded && p->ranks < 2))) {
                rd_fail(&r, "sharded is %d with %d ranks; 0, or 1 with at least 2 ranks", p->sharded, p->ranks);
                break;
            }
            p->nevents = get_i32(&r);
            if (!r.failed && (p->nevents < 0 || (size_t)p->nevents > r.len)) {
                rd_fail(&r, "%d events", p->nevents);
                break;
            }
            p->train = read_instrs(&r, p, &p->ntrain, "train");
            if (!r.failed) p->eval = read_instrs(&r, p, &p->neval, "eval");
            rc = r.failed ? -1 : 0;
            break;
        case SEC_KERNELS: rc = read_kernels(&r, p); break;
        case SEC_COUNT_PLUS_ONE: break;
        }
        if (rc != 0 || r.failed) {
            if (!r.failed) rd_fail(&r, "invalid");
            return NULL;
        }
        if (r.pos != r.len) {
            rd_fail(&r, "%zu unread byte%s after its last field", r.len - r.pos, r.len - r.pos == 1 ? "" : "s");
            return NULL;
        }
    }
    for (int s = 0; s < SECTIONS; s++) // in id order, as the writer
        for (uint64_t done = 0; done < e[s].size;) {
            uint64_t n = e[s].size - done > (1u << 30) ? (1u << 30) : e[s].size - done;
            plan_crc = crc32(plan_crc, file.p + e[s].off + done, (uInt)n);
            done += n;
        }
    p->plan_crc = (uint32_t)plan_crc;
    return p;
}

Plan *plan_read(const char *path, Arena *a, char *err, size_t errcap) {
    char *data;
    size_t len;
    int e = io_read_file(path, &data, &len);
    if (e != 0) {
        if (err && errcap) snprintf(err, errcap, "%s: cannot read the plan: %s", path, strerror(e));
        return NULL;
    }
    Plan *p = plan_parse(data, len, path, a, err, errcap);
    free(data);
    return p;
}
