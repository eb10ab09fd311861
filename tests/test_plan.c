// test_plan: the plan file format. For each model given: parse, sema and
// autodiff it, schedule it (schedule_first) and also lay it out by hand (a
// small layout and streams of this test's own, with every instruction kind),
// write each plan, read it back and compare every field (graph, attributes,
// params, grads, layout, instructions, source, crc) and the graph dumps.
// Then damage the written bytes every way a file gets damaged (truncation,
// flipped bytes in each section, a section cut short with its crc redone,
// a wrong version, the other byte order, bad magic, an empty file, a missing
// file, fields out of range with every crc redone) and check each is refused
// with a message that names the section or the fault. Last, a write that
// fails must leave no file behind.
//
// usage: test_plan WORK_DIR MODEL.mt...   (TEST_PLAN_VERBOSE=1 prints every refusal)
// Leaves WORK_DIR/<model>.plan (the scheduled plan of each model), which
// tests/fuzz/run_fuzz_plan.sh uses as the fuzzer's seeds.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../common/io.h"
#include "../common/plan.h"
#include "../compiler/plan_write.h"
#include "../compiler/schedule.h"
#include "../runtime/plan_read.h"

enum { SECTIONS = SEC_COUNT_PLUS_ONE - 1, HEADER_BYTES = 24, ENTRY_BYTES = 24 };
static const char *const SECTION_NAMES[SECTIONS] = {"SOURCE", "CONFIG", "GRAPH", "HOST", "ARENA", "STREAMS", "KERNELS"};

static int failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

// ---------------------------------------------------------------- building plans

// The test's own layout: parameters packed in their segments, a weight slot
// at the arena's start, then one buffer a node; a few instructions of each
// kind, all in range.
static Plan *hand_plan(Graph *g, Arena *a) {
    Plan *p = arena_alloc(a, sizeof *p);
    p->graph = g;
    p->param_offset = arena_alloc(a, ((size_t)g->params.n + 1) * sizeof(int64_t));
    for (int i = 0; i < g->params.n; i++) {
        const Param *pr = g->params.items[i];
        int64_t *seg = pr->in_block ? &p->host_layer : &p->host_global;
        p->param_offset[i] = *seg;
        *seg += shape_numel(&pr->shape);
    }
    int64_t slot = (p->host_global > p->host_layer ? p->host_global : p->host_layer) * 4, top = slot;
    for (int pk = 0; pk < PART_COUNT; pk++) {
        const Part *part = &g->parts[pk];
        p->node_offset[pk] = arena_alloc(a, ((size_t)part->nodes.n + 1) * sizeof(int64_t));
        for (int i = 0; i < part->nodes.n; i++) {
            const Node *n = part->nodes.items[i];
            if (n->op == OP_VIEW || n->op == OP_RESHAPE) {
                p->node_offset[pk][i] = -1;
            } else {
                p->node_offset[pk][i] = top;
                top += shape_numel(&n->shape) * 4;
            }
        }
    }
    p->arena_bytes = top + 8; // a little spare at the end
    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];
    Instr *t = arena_alloc(a, 16 * sizeof *t);
    int n = 0;
    t[n++] = (Instr){.kind = INS_COPY_IN, .layer = -1, .src = 0, .dst = 0, .bytes = p->host_global * 4};
    t[n++] = (Instr){.kind = INS_INPUT, .layer = -1, .input = 0, .dst = slot,
                     .bytes = shape_numel(&((ModelInput *)g->inputs.items[0])->shape) * 4};
    t[n++] = (Instr){.kind = INS_RUN, .part = PART_HEAD, .layer = -1, .from = 0, .to = head->nfwd};
    t[n++] = (Instr){.kind = INS_COPY_IN, .layer = (int32_t)g->layers - 1,
                     .src = p->host_global + (g->layers - 1) * p->host_layer, .dst = 0, .bytes = p->host_layer * 4};
    t[n++] = (Instr){.kind = INS_COPY, .layer = -1, .src = slot, .dst = 0, .bytes = slot < top - slot ? slot : top - slot};
    t[n++] = (Instr){.kind = INS_RUN, .part = PART_BLOCK, .layer = 0, .from = 0, .to = block->nodes.n};
    t[n++] = (Instr){.kind = INS_RUN, .part = PART_BLOCK, .layer = (int32_t)g->layers - 1, .from = 2, .to = 2};
    t[n++] = (Instr){.kind = INS_RUN, .part = PART_TAIL, .layer = -1, .from = 0, .to = tail->nodes.n};
    t[n++] = (Instr){.kind = INS_LOSS, .layer = -1, .src = p->node_offset[PART_TAIL][tail->output->id]};
    t[n++] = (Instr){.kind = INS_COPY_OUT, .layer = 0, .src = 0, .dst = p->host_global, .bytes = p->host_layer * 4};
    t[n++] = (Instr){.kind = INS_COPY_OUT, .layer = -1, .src = 4, .dst = 1, .bytes = 4};
    p->train = t;
    p->ntrain = n;
    p->eval = t + 1; // a different, shorter stream
    p->neval = 2;
    return p;
}

// Parses, lowers, differentiates and schedules the model at path (or lays
// it out by hand). The source lives in text, which the caller frees.
static Plan *build(const char *path, Arena *a, int by_hand, char **text) {
    size_t len;
    if (io_read_file(path, text, &len) != 0) {
        printf("FAIL %s: cannot read\n", path);
        return NULL;
    }
    Source src = {.path = path, .text = *text, .len = len};
    Diag diag = {.src = &src, .sink = stdout};
    Model *m = dsl_parse(&src, a, &diag);
    Graph *g = m ? sema_lower(m, NULL, a, &diag) : NULL;
    if (!g || autodiff(g, a, &diag) != 0) {
        printf("FAIL %s: the front end refused it\n", path);
        return NULL;
    }
    char err[512];
    Plan *p = by_hand ? hand_plan(g, a) : schedule_first(g, a, err, sizeof err);
    if (!p) {
        printf("FAIL %s: schedule_first: %s\n", path, err);
        return NULL;
    }
    p->source_path = path;
    p->source = *text;
    p->source_len = len;
    return p;
}

// ---------------------------------------------------------------- comparing

static int str_eq(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }
static int f64_eq(double a, double b) { return !memcmp(&a, &b, sizeof a); }
static int loc_eq(Loc a, Loc b) { return a.line == b.line && a.col == b.col; }
static int id_of(const Node *n) { return n ? n->id : -1; }

#define SAME(what, cond) CHECK(cond, "%s: %s differs after the round trip", ctx, what)

static void compare_node(const char *ctx, const Node *x, const Node *y) {
    SAME("op", x->op == y->op);
    SAME("id", x->id == y->id);
    SAME("part", x->part == y->part);
    SAME("dtype", x->dtype == y->dtype);
    SAME("shape", shape_eq(&x->shape, &y->shape));
    SAME("loc", loc_eq(x->loc, y->loc));
    SAME("name", str_eq(x->name, y->name));
    SAME("annot", x->annot == y->annot);
    SAME("nin", x->nin == y->nin);
    for (int j = 0; j < x->nin && j < y->nin; j++) {
        SAME("an operand", x->in[j]->id == y->in[j]->id && y->in[j]->part == y->part);
    }
    SAME("param", x->param == y->param);
    SAME("src_part", x->src_part == y->src_part);
    SAME("src", x->src == y->src);
    SAME("value", f64_eq(x->value, y->value));
    SAME("axis", x->axis == y->axis);
    SAME("offset", x->offset == y->offset);
    SAME("heads", x->heads == y->heads);
    SAME("kv_heads", x->kv_heads == y->kv_heads);
    SAME("causal", x->causal == y->causal);
    SAME("trans_a", x->trans_a == y->trans_a);
    SAME("trans_b", x->trans_b == y->trans_b);
    SAME("inverse", x->inverse == y->inverse);
    SAME("eps", f64_eq(x->eps, y->eps));
    SAME("theta", f64_eq(x->theta, y->theta));
}

static void compare_graph(const char *ctx, const Graph *x, const Graph *y) {
    SAME("model name", str_eq(x->model_name, y->model_name));
    SAME("block name", str_eq(x->block_name, y->block_name));
    SAME("block prefix", str_eq(x->block_prefix, y->block_prefix));
    SAME("layers", x->layers == y->layers);
    const TrainConfig *a = &x->train, *b = &y->train;
    SAME("batch", a->batch == b->batch);
    SAME("seq", a->seq == b->seq);
    SAME("steps", a->steps == b->steps);
    SAME("accumulate", a->accumulate == b->accumulate);
    SAME("warmup", a->warmup == b->warmup);
    SAME("val_every", a->val_every == b->val_every);
    SAME("seed", a->seed == b->seed);
    SAME("lr", f64_eq(a->lr, b->lr));
    SAME("beta1", f64_eq(a->beta1, b->beta1));
    SAME("beta2", f64_eq(a->beta2, b->beta2));
    SAME("weight_decay", f64_eq(a->weight_decay, b->weight_decay));
    SAME("adam_eps", f64_eq(a->adam_eps, b->adam_eps));
    SAME("min_lr_frac", f64_eq(a->min_lr_frac, b->min_lr_frac));
    SAME("clip", f64_eq(a->clip, b->clip));
    SAME("schedule", a->schedule == b->schedule);
    SAME("compute", a->compute == b->compute);
    SAME("data", str_eq(a->data, b->data));
    SAME("input count", x->inputs.n == y->inputs.n);
    for (int i = 0; i < x->inputs.n && i < y->inputs.n; i++) {
        const ModelInput *p = x->inputs.items[i], *q = y->inputs.items[i];
        SAME("an input", str_eq(p->name, q->name) && p->dtype == q->dtype && shape_eq(&p->shape, &q->shape) &&
                             loc_eq(p->loc, q->loc));
    }
    SAME("param count", x->params.n == y->params.n);
    for (int i = 0; i < x->params.n && i < y->params.n; i++) {
        const Param *p = x->params.items[i], *q = y->params.items[i];
        SAME("a param", str_eq(p->name, q->name) && str_eq(p->ckpt, q->ckpt) && p->in_block == q->in_block &&
                            shape_eq(&p->shape, &q->shape) && p->init == q->init && f64_eq(p->init_std, q->init_std) &&
                            p->init_given == q->init_given && p->first_use == q->first_use && loc_eq(p->loc, q->loc));
    }
    for (int pk = 0; pk < PART_COUNT; pk++) {
        const Part *p = &x->parts[pk], *q = &y->parts[pk];
        char c[640];
        snprintf(c, sizeof c, "%.600s, %s part", ctx, part_name((PartKind)pk));
        CHECK(p->nodes.n == q->nodes.n, "%s: %d nodes, read back %d", c, p->nodes.n, q->nodes.n);
        for (int i = 0; i < p->nodes.n && i < q->nodes.n; i++) {
            char cn[700];
            snprintf(cn, sizeof cn, "%s node %d", c, i);
            compare_node(cn, p->nodes.items[i], q->nodes.items[i]);
        }
        CHECK(id_of(p->output) == id_of(q->output), "%s: output differs", c);
        CHECK(p->nfwd == q->nfwd, "%s: nfwd differs", c);
        CHECK(id_of(p->grad_seed) == id_of(q->grad_seed), "%s: grad_seed differs", c);
        CHECK(p->grads.n == q->grads.n, "%s: grad count differs", c);
        for (int i = 0; i < p->grads.n && i < q->grads.n; i++) {
            const Grad *gp = p->grads.items[i], *gq = q->grads.items[i];
            CHECK(id_of(gp->of) == id_of(gq->of) && id_of(gp->grad) == id_of(gq->grad), "%s: grad %d differs", c, i);
        }
    }
}

static void compare_instrs(const char *ctx, const Instr *x, int nx, const Instr *y, int ny) {
    SAME("instruction count", nx == ny);
    for (int i = 0; i < nx && i < ny; i++)
        CHECK(x[i].kind == y[i].kind && x[i].part == y[i].part && x[i].layer == y[i].layer &&
                  x[i].input == y[i].input && x[i].from == y[i].from && x[i].to == y[i].to && x[i].src == y[i].src &&
                  x[i].dst == y[i].dst && x[i].bytes == y[i].bytes,
              "%s: instruction %d differs after the round trip", ctx, i);
}

static char *dump(const Graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    graph_dump(f, g, "m.mt");
    fclose(f);
    return buf;
}

static void compare_plans(const char *ctx, const Plan *x, const Plan *y) {
    SAME("source path", str_eq(x->source_path, y->source_path));
    SAME("source", x->source_len == y->source_len && !memcmp(x->source, y->source, x->source_len));
    SAME("source crc", x->source_crc == y->source_crc);
    compare_graph(ctx, x->graph, y->graph);
    SAME("host_global", x->host_global == y->host_global);
    SAME("host_layer", x->host_layer == y->host_layer);
    for (int i = 0; i < x->graph->params.n && i < y->graph->params.n; i++)
        SAME("a param offset", x->param_offset[i] == y->param_offset[i]);
    SAME("arena_bytes", x->arena_bytes == y->arena_bytes);
    for (int pk = 0; pk < PART_COUNT; pk++)
        for (int i = 0; i < x->graph->parts[pk].nodes.n && i < y->graph->parts[pk].nodes.n; i++)
            SAME("a node offset", x->node_offset[pk][i] == y->node_offset[pk][i]);
    compare_instrs(ctx, x->train, x->ntrain, y->train, y->ntrain);
    compare_instrs(ctx, x->eval, x->neval, y->eval, y->neval);
    SAME("plan crc", x->plan_crc == y->plan_crc);
    char *dx = dump(x->graph), *dy = dump(y->graph);
    SAME("graph dump", dx && dy && !strcmp(dx, dy));
    free(dx);
    free(dy);
}

// ---------------------------------------------------------------- damaging files

static uint32_t ld32(const unsigned char *d) {
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}
static void st32(unsigned char *d, uint32_t v) {
    for (int i = 0; i < 4; i++) d[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t ld64(const unsigned char *d) { return (uint64_t)ld32(d) | (uint64_t)ld32(d + 4) << 32; }
static void st64(unsigned char *d, uint64_t v) {
    st32(d, (uint32_t)v);
    st32(d + 4, (uint32_t)(v >> 32));
}

// The table entry of section id.
static unsigned char *entry_of(unsigned char *buf, int id) {
    for (int i = 0; i < SECTIONS; i++)
        if (ld32(buf + HEADER_BYTES + i * ENTRY_BYTES) == (uint32_t)id) return buf + HEADER_BYTES + i * ENTRY_BYTES;
    return NULL;
}

// Recomputes every section's crc and the header's, as a writer would.
static void redo_crcs(unsigned char *buf) {
    for (int i = 0; i < SECTIONS; i++) {
        unsigned char *e = buf + HEADER_BYTES + i * ENTRY_BYTES;
        st32(e + 4, (uint32_t)crc32(0L, buf + ld64(e + 8), (uInt)ld64(e + 16)));
    }
    st32(buf + 20, (uint32_t)crc32(0L, buf, 20));
}

// Parses the bytes and expects a refusal whose message contains want.
static void expect_refused(const char *ctx, const unsigned char *buf, size_t len, const char *want) {
    Arena a = {0};
    char err[512] = "";
    Plan *p = plan_parse(buf, len, "p.plan", &a, err, sizeof err);
    if (getenv("TEST_PLAN_VERBOSE")) printf("  %s: %s\n", ctx, err);
    CHECK(!p, "%s: accepted", ctx);
    CHECK(p || strstr(err, want), "%s: the message \"%s\" does not contain \"%s\"", ctx, err, want);
    CHECK(p || !strncmp(err, "p.plan: ", 8), "%s: the message \"%s\" does not start with the file's name", ctx, err);
    arena_free(&a);
}

static void damage_bytes(const char *model, const unsigned char *orig, size_t len) {
    unsigned char *buf = malloc(len);
    char ctx[700];
    // Cut short anywhere: in the magic, the header, the table, each section.
    size_t cuts[] = {3, 8, 20, 23, 24, 100, HEADER_BYTES + SECTIONS * ENTRY_BYTES - 1, len / 3, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        snprintf(ctx, sizeof ctx, "%s cut to %zu bytes", model, cuts[i]);
        expect_refused(ctx, orig, cuts[i], "truncated");
    }
    snprintf(ctx, sizeof ctx, "%s: empty", model);
    expect_refused(ctx, orig, 0, "empty file");
    for (int id = 1; id <= SECTIONS; id++) {
        char want[128];
        // A flipped byte in the middle of the section.
        memcpy(buf, orig, len);
        const unsigned char *e = entry_of(buf, id);
        uint64_t off = ld64(e + 8), size = ld64(e + 16);
        buf[off + size / 2] ^= 0x40;
        snprintf(ctx, sizeof ctx, "%s: a flipped byte in %s", model, SECTION_NAMES[id - 1]);
        snprintf(want, sizeof want, "section %s is corrupted (crc32 mismatch)", SECTION_NAMES[id - 1]);
        expect_refused(ctx, buf, len, want);
        // The section one byte short, its crc redone: the parser runs out.
        memcpy(buf, orig, len);
        st64(entry_of(buf, id) + 16, size - 1);
        redo_crcs(buf);
        snprintf(ctx, sizeof ctx, "%s: %s one byte short", model, SECTION_NAMES[id - 1]);
        snprintf(want, sizeof want, "section %s is truncated", SECTION_NAMES[id - 1]);
        expect_refused(ctx, buf, len, want);
        // ... and one byte long: a byte nobody reads.
        if (id == SEC_KERNELS) { // the last section: grow it into a byte past the end
            unsigned char *big = malloc(len + 1);
            memcpy(big, orig, len);
            big[len] = 0;
            st64(entry_of(big, id) + 16, size + 1);
            redo_crcs(big);
            snprintf(ctx, sizeof ctx, "%s: %s one byte long", model, SECTION_NAMES[id - 1]);
            snprintf(want, sizeof want, "section %s: 1 unread byte after its last field", SECTION_NAMES[id - 1]);
            expect_refused(ctx, big, len + 1, want);
            free(big);
        }
    }
    // Two sections overlapping.
    memcpy(buf, orig, len);
    st64(entry_of(buf, SEC_CONFIG) + 8, ld64(entry_of(buf, SEC_SOURCE) + 8));
    redo_crcs(buf);
    expect_refused("overlapping sections", buf, len, "overlap");
    // A section listed twice.
    memcpy(buf, orig, len);
    st32(entry_of(buf, SEC_HOST), SEC_ARENA);
    redo_crcs(buf);
    expect_refused("a section listed twice", buf, len, "section ARENA is listed twice");
    // Header faults.
    memcpy(buf, orig, len);
    st32(buf + 8, 2);
    redo_crcs(buf);
    expect_refused("version 2", buf, len, "p.plan: plan version 2, this mtrun reads version 1");
    memcpy(buf, orig, len);
    st32(buf + 12, 0x04030201u);
    redo_crcs(buf);
    expect_refused("the other byte order", buf, len, "written on a machine of the other byte order");
    memcpy(buf, orig, len);
    buf[1] = 'X';
    expect_refused("bad magic", buf, len, "bad magic");
    memcpy(buf, orig, len);
    st32(buf + 16, 8);
    expect_refused("a damaged header", buf, len, "header is corrupted (crc32 mismatch)");
    // A kernel list that is not what the streams run.
    memcpy(buf, orig, len);
    const unsigned char *e = entry_of(buf, SEC_KERNELS);
    buf[ld64(e + 8) + 8] ^= 0x20; // the first name's first letter (after the count and its length)
    redo_crcs(buf);
    expect_refused("a wrong kernel", buf, len, "section KERNELS");
    // The model text against its own crc.
    memcpy(buf, orig, len);
    e = entry_of(buf, SEC_SOURCE);
    uint32_t plen = ld32(buf + ld64(e + 8));
    buf[ld64(e + 8) + 4 + plen + 4 + 10] ^= 0x01; // a byte of the text
    redo_crcs(buf);
    expect_refused("a changed model text", buf, len, "section SOURCE: the model text does not match its crc32");
    // Still intact after all that.
    Arena a = {0};
    char err[512];
    CHECK(plan_parse(orig, len, "p.plan", &a, err, sizeof err) != NULL, "%s: the undamaged plan: %s", model, err);
    arena_free(&a);
    free(buf);
}

// Writes p with one field broken (by break_it, undone by the caller) and
// expects the reader to refuse it naming want.
static void expect_written_refused(const char *ctx, Plan *p, const char *path, const char *want) {
    char err[512];
    if (plan_write(p, path, err, sizeof err) != 0) {
        CHECK(0, "%s: plan_write: %s", ctx, err);
        return;
    }
    Arena a = {0};
    Plan *q = plan_read(path, &a, err, sizeof err);
    if (getenv("TEST_PLAN_VERBOSE")) printf("  %s: %s\n", ctx, err);
    CHECK(!q, "%s: accepted", ctx);
    CHECK(q || strstr(err, want), "%s: the message \"%s\" does not contain \"%s\"", ctx, err, want);
    arena_free(&a);
}

static Node *node_at(Plan *p, PartKind pk, int i) { return p->graph->parts[pk].nodes.items[i]; }

static int first_op(Plan *p, PartKind pk, OpKind op) {
    for (int i = 0; i < p->graph->parts[pk].nodes.n; i++)
        if (node_at(p, pk, i)->op == op) return i;
    return -1;
}

// The bytes plan_write writes for p (malloc'd), or NULL.
static unsigned char *written(Plan *p, const char *path, size_t *len) {
    char err[512], *data = NULL;
    *len = 0;
    if (plan_write(p, path, err, sizeof err) != 0 || io_read_file(path, &data, len) != 0) {
        CHECK(0, "writing %s: %s", path, err);
        return NULL;
    }
    return (unsigned char *)data;
}

// The first byte after the section table where a and b differ (same
// lengths), or 0.
static size_t differ_at(const unsigned char *a, size_t alen, const unsigned char *b, size_t blen) {
    size_t at = HEADER_BYTES + SECTIONS * ENTRY_BYTES;
    if (!a || !b || alen != blen) return 0;
    while (at < alen && a[at] == b[at]) at++;
    CHECK(at < alen, "the two plans are the same");
    return at < alen ? at : 0;
}

// Fields out of range, each in a plan whose crcs are all right.
static void damage_fields(Plan *p, const char *path) {
    Graph *g = p->graph;
    size_t alen, blen;
    {
        int64_t saved = g->train.batch;
        g->train.batch = 0;
        expect_written_refused("batch 0", p, path, "section CONFIG: batch is 0");
        g->train.batch = saved;
    }
    {
        int k = 2, nb = g->parts[PART_BLOCK].nodes.n; // a block node with an operand, and nodes after it
        while (k + 2 < nb && node_at(p, PART_BLOCK, k)->nin == 0) k++;
        Node *n = node_at(p, PART_BLOCK, k), *saved = n->nin ? n->in[0] : NULL;
        CHECK(n->nin > 0, "no block node to break");
        if (n->nin > 0) {
            char err[512] = "", want[128];
            n->in[0] = node_at(p, PART_BLOCK, k + 2);
            snprintf(want, sizeof want, "internal error: operand 0 of block node %d is not an earlier node", k);
            CHECK(plan_write(p, path, err, sizeof err) == -1 && strstr(err, want), "writing a forward reference: \"%s\"",
                  err);
            // The writer will not write one, so patch it in: the operand's
            // bytes are where writing operand 0 and then 1 differs.
            n->in[0] = node_at(p, PART_BLOCK, 0);
            unsigned char *a = written(p, path, &alen);
            n->in[0] = node_at(p, PART_BLOCK, 1);
            unsigned char *b = written(p, path, &blen);
            n->in[0] = saved;
            size_t at = differ_at(a, alen, b, blen);
            if (at) {
                st32(a + at, (uint32_t)k + 2);
                redo_crcs(a);
                snprintf(want, sizeof want, "section GRAPH: block node %d (%s): operand 0 is node %d, not an earlier node",
                         k, op_name(n->op), k + 2);
                expect_refused("a forward reference", a, alen, want);
            }
            free(a);
            free(b);
        }
    }
    {
        Node *n = node_at(p, PART_TAIL, 3);
        OpKind saved = n->op;
        n->op = OP_ADD;
        unsigned char *a = written(p, path, &alen);
        n->op = OP_SUB;
        unsigned char *b = written(p, path, &blen);
        n->op = saved;
        size_t at = differ_at(a, alen, b, blen);
        if (at) {
            st32(a + at, 200);
            redo_crcs(a);
            expect_refused("an op out of range", a, alen, "section GRAPH: tail node 3: op 200 is out of range (0..34)");
        }
        free(a);
        free(b);
    }
    {
        Node *n = node_at(p, PART_TAIL, 1);
        DType saved = n->dtype;
        n->dtype = DT_COUNT;
        expect_written_refused("a dtype out of range", p, path, "section GRAPH: tail node 1: dtype 3 is out of range (0..2)");
        n->dtype = saved;
    }
    {
        Node *n = node_at(p, PART_HEAD, 0);
        Shape saved = n->shape;
        n->shape.rank = MT_MAX_RANK + 1;
        expect_written_refused("rank 9", p, path, "section GRAPH: head node 0: rank 9");
        n->shape = saved;
        n->shape.dims[0] = 0;
        expect_written_refused("a zero dimension", p, path, "dimensions are at least 1");
        n->shape = saved;
        n->shape.dims[0] = INT64_MAX / 2;
        expect_written_refused("an overflowing shape", p, path, "overflows");
        n->shape = saved;
    }
    int inp = first_op(p, PART_TAIL, OP_INPUT);
    if (inp >= 0) {
        Node *n = node_at(p, PART_TAIL, inp);
        int saved_part = n->src_part, saved_src = n->src;
        n->src_part = 3;
        expect_written_refused("src_part 3", p, path, "section GRAPH: tail node");
        n->src_part = PART_BLOCK;
        n->src = 100000;
        expect_written_refused("src 100000", p, path, "takes node 100000 of the block part");
        n->src_part = saved_part;
        n->src = saved_src;
    }
    int prm = first_op(p, PART_BLOCK, OP_PARAM);
    if (prm >= 0) {
        Node *n = node_at(p, PART_BLOCK, prm);
        int saved = n->param;
        n->param = g->params.n;
        expect_written_refused("param index out of range", p, path, "section GRAPH: block node");
        n->param = saved;
    }
    {
        Part *part = &g->parts[PART_BLOCK];
        int saved = part->nfwd;
        part->nfwd = part->nodes.n + 1;
        expect_written_refused("nfwd > n", p, path, "section GRAPH: block part: nfwd");
        part->nfwd = saved;
        Node *seed = part->grad_seed;
        part->grad_seed = NULL;
        expect_written_refused("no grad seed", p, path, "the gradient seed is node -1");
        part->grad_seed = seed;
        Grad *gr = part->grads.items[0];
        Node *of = gr->of;
        gr->of = part->nodes.items[part->nodes.n - 1];
        expect_written_refused("a grad of a backward node", p, path, "what a gradient is of");
        gr->of = of;
    }
    {
        int64_t saved = p->param_offset[0];
        p->param_offset[0] = p->host_global;
        expect_written_refused("a param outside the host store", p, path, "section HOST: parameter");
        p->param_offset[0] = saved;
    }
    {
        int i = 0; // the first node with a buffer of its own
        while (node_at(p, PART_TAIL, i)->op == OP_VIEW || node_at(p, PART_TAIL, i)->op == OP_RESHAPE) i++;
        int64_t saved = p->node_offset[PART_TAIL][i];
        p->node_offset[PART_TAIL][i] = p->arena_bytes;
        expect_written_refused("a node outside the arena", p, path, "section ARENA: tail node");
        p->node_offset[PART_TAIL][i] = -1;
        expect_written_refused("a computed node with no buffer", p, path, "has no buffer");
        p->node_offset[PART_TAIL][i] = saved;
    }
    for (int k = 0; k < INS_COUNT; k++) { // break the first instruction of each kind
        Instr *in = NULL;
        for (int i = 0; i < p->ntrain && !in; i++)
            if (p->train[i].kind == k) in = &p->train[i];
        if (!in) {
            CHECK(0, "the plan has no instruction of kind %d to break", k);
            continue;
        }
        Instr saved = *in;
        switch ((InsKind)k) {
        case INS_COPY_IN: in->src = p->host_global + g->layers * p->host_layer; in->bytes = 4; break;
        case INS_COPY_OUT: in->dst = -1; break;
        case INS_COPY: in->dst = p->arena_bytes - in->bytes + 1; break;
        case INS_INPUT: in->input = g->inputs.n; break;
        case INS_RUN: in->layer = (int32_t)g->layers; break;
        case INS_LOSS: in->src = p->arena_bytes - 2; break;
        case INS_COUNT: break;
        }
        char ctx[64];
        snprintf(ctx, sizeof ctx, "a bad instruction of kind %d", k);
        expect_written_refused(ctx, p, path, "section STREAMS: train instruction");
        *in = saved;
    }
    for (int i = 0; i < p->ntrain; i++) { // nodes the graph does not have: the writer refuses
        if (p->train[i].kind != INS_RUN) continue;
        Instr saved = p->train[i];
        p->train[i].to = g->parts[saved.part].nodes.n + 1;
        char err[512] = "";
        CHECK(plan_write(p, path, err, sizeof err) == -1 && strstr(err, "internal error: a RUN instruction"),
              "writing a RUN past its part's nodes: \"%s\"", err);
        p->train[i] = saved;
        break;
    }
    {
        Instr saved = p->train[0];
        p->train[0].kind = INS_COUNT;
        expect_written_refused("an instruction kind out of range", p, path, "section STREAMS: train instruction 0: kind 6");
        p->train[0] = saved;
    }
    char err[512];
    CHECK(plan_write(p, path, err, sizeof err) == 0, "rewriting the repaired plan: %s", err);
    Arena a = {0};
    CHECK(plan_read(path, &a, err, sizeof err) != NULL, "the repaired plan: %s", err);
    arena_free(&a);
}

// ---------------------------------------------------------------- main

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void round_trip(const char *model, const char *work, int by_hand) {
    int failures_before = failures;
    Arena a = {0};
    char *text = NULL;
    Plan *p = build(model, &a, by_hand, &text);
    if (!p) {
        failures++;
        arena_free(&a);
        free(text);
        return;
    }
    const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
    char path[4096], ctx[512], err[512];
    snprintf(path, sizeof path, "%s/%.*s%s.plan", work, (int)strcspn(base, "."), base, by_hand ? "-by-hand" : "");
    snprintf(ctx, sizeof ctx, "%s (%s)", model, by_hand ? "laid out by hand" : "schedule_first");
    p->plan_crc = 0;
    if (plan_write(p, path, err, sizeof err) != 0) {
        CHECK(0, "%s: plan_write: %s", ctx, err);
    } else {
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        CHECK(!exists(tmp), "%s: %s left behind", ctx, tmp);
        Arena b = {0};
        Plan *q = plan_read(path, &b, err, sizeof err);
        CHECK(q, "%s: plan_read: %s", ctx, err);
        CHECK(p->plan_crc != 0, "%s: plan_write did not set plan_crc", ctx);
        if (q) compare_plans(ctx, p, q);
        // Written again from what was read: the same bytes.
        char path2[4200];
        snprintf(path2, sizeof path2, "%s.again", path);
        char *d1 = NULL, *d2 = NULL;
        size_t l1 = 0, l2 = 0;
        if (q && plan_write(q, path2, err, sizeof err) == 0 && io_read_file(path, &d1, &l1) == 0 &&
            io_read_file(path2, &d2, &l2) == 0)
            CHECK(l1 == l2 && !memcmp(d1, d2, l1), "%s: writing the plan read back gives other bytes", ctx);
        else if (q)
            CHECK(0, "%s: rewriting the plan read back failed: %s", ctx, err);
        unlink(path2);
        arena_free(&b);
        if (d1) {
            damage_bytes(ctx, (unsigned char *)d1, l1);
            // The damage picks nodes by index: a model of a useful size.
            const Graph *g = p->graph;
            if (by_hand && g->parts[PART_BLOCK].nodes.n > 7 && g->parts[PART_TAIL].nodes.n > 3 && g->params.n > 0 &&
                g->parts[PART_BLOCK].grads.n > 0) {
                char path3[4200];
                snprintf(path3, sizeof path3, "%s.broken", path);
                damage_fields(p, path3);
                unlink(path3);
            }
        }
        free(d1);
        free(d2);
        if (by_hand) unlink(path);
        printf("%s %s: %s\n", failures > failures_before ? "FAIL" : "ok  ", ctx, path);
    }
    arena_free(&a);
    free(text);
}

static void failed_writes(const char *model, const char *work) {
    int failures_before = failures;
    Arena a = {0};
    char *text = NULL;
    Plan *p = build(model, &a, 1, &text);
    if (!p) {
        failures++;
        free(text);
        arena_free(&a);
        return;
    }
    char path[4096], tmp[4200], err[512] = "";
    // Into a folder that does not exist: -1, a message, nothing created.
    snprintf(path, sizeof path, "%s/no-such-dir/p.plan", work);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(plan_write(p, path, err, sizeof err) == -1, "writing into a missing folder succeeded");
    CHECK(strstr(err, path) && strstr(err, "No such file or directory"), "writing into a missing folder: \"%s\"", err);
    CHECK(!exists(path) && !exists(tmp), "writing into a missing folder left a file");
    // Over a folder: the rename fails; the folder stays, no temporary file.
    snprintf(path, sizeof path, "%s/a-folder.plan", work);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    mkdir(path, 0755);
    err[0] = 0;
    CHECK(plan_write(p, path, err, sizeof err) == -1, "writing over a folder succeeded");
    CHECK(strstr(err, "cannot write the plan"), "writing over a folder: \"%s\"", err);
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode) && !exists(tmp), "writing over a folder left a file");
    rmdir(path);
    // A missing plan file.
    snprintf(path, sizeof path, "%s/no-such.plan", work);
    Arena b = {0};
    CHECK(!plan_read(path, &b, err, sizeof err) && strstr(err, "cannot read the plan: No such file or directory") &&
              strstr(err, path),
          "reading a missing file: \"%s\"", err);
    // An empty plan file.
    snprintf(path, sizeof path, "%s/empty.plan", work);
    FILE *f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK(!plan_read(path, &b, err, sizeof err) && strstr(err, "empty file"), "reading an empty file: \"%s\"", err);
    unlink(path);
    arena_free(&b);
    arena_free(&a);
    free(text);
    printf("%s failed writes and reads\n", failures > failures_before ? "FAIL" : "ok  ");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_plan WORK_DIR MODEL.mt...\n");
        return 2;
    }
    const char *work = argv[1];
    if (mkdir(work, 0755) != 0 && errno != EEXIST) {
        printf("FAIL cannot create %s: %s\n", work, strerror(errno));
        return 1;
    }
    for (int i = 2; i < argc; i++) {
        round_trip(argv[i], work, 0);
        round_trip(argv[i], work, 1);
    }
    failed_writes(argv[2], work);
    if (failures) printf("FAIL test_plan: %d checks failed\n", failures);
    return failures ? 1 : 0;
}
