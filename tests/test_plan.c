// test_plan: the plan file format, version 19 (PLAN_VERSION). For each model given: parse,
// sema and autodiff it, then build its plans four ways: the scheduler's plan
// for h200 (schedule_search: policy mt, remat auto, the most resident
// layers, a block frame each), two streaming plans on the 1 MiB tiny-1layer
// profile at batch 1 (remat offload with one slot and no resident layer, so
// that SAVE/LOAD, FREE and the host optimizer appear; remat selective, so
// that the recompute skips heavy nodes: RUN_SKIP_HEAVY), and a plan laid out
// by hand (a small layout and streams of this test's
// own, with every instruction kind on all four engines, events, two block
// frames, RUN flags, a host activation store and every KERNELS blob
// non-empty). Each plan is written, read back and compared field by field
// (graph, attributes, params, grads, host layout, every frame's node
// offsets, device limit, schedule name, events, every instruction field,
// kernel blobs, source, crc) and by graph dump, and written again from what
// was read: the same bytes. Then damage the written bytes every way a file
// gets damaged (truncation, flipped bytes in each section, a section cut
// short with its crc redone, another version, the other byte order, bad
// magic, an empty file, a missing file, a kernel blob running past its
// section) and fields out of range with every crc redone (among them an
// engine out of range, an event past nevents, a frame past nframes, unknown
// RUN flags, a SAVE/LOAD outside the host activation store, a FREE of part
// of a float, no block frames, CUDA code without an architecture) and check
// each is refused with a message that names the section and the fault.
// Last, a write that fails must leave no file behind.
//
// usage: test_plan WORK_DIR MODEL.mt...   (TEST_PLAN_VERBOSE=1 prints every refusal)
// Run from the source tree (target profiles are read from schedules/).
// Leaves WORK_DIR/<model>.plan, <model>-offload.plan, <model>-selective.plan
// and <model>-by-hand.plan, which tests/fuzz/run_fuzz_plan.sh uses as the
// fuzzer's seeds.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/io.h"
#include "common/plan.h"
#include "compiler/emit/plan_write.h"
#include "compiler/schedule/schedule.h"
#include "runtime/plan_read.h"
#include "compiler/compile.h"
#include "tests/check.h"

enum { SECTIONS = SEC_COUNT_PLUS_ONE - 1, HEADER_BYTES = 24, ENTRY_BYTES = 24 };
static const char *const SECTION_NAMES[SECTIONS] = {"SOURCE", "CONFIG", "GRAPH", "HOST", "ARENA", "STREAMS", "KERNELS"};

// ---------------------------------------------------------------- building plans

// The test's own layout: parameters packed in their segments, a weight slot
// at the arena's start, then one buffer a node (the block's nodes once per
// frame, two frames); every instruction kind, on all four engines, joined
// by events; a host activation store; every KERNELS blob non-empty. All in
// range, though not a plan that would train.
enum { HAND_FRAMES = 2, HAND_EVENTS = 3, HAND_ACT_BYTES = 1024, HAND_SAVE_BYTES = 256 };
static const uint8_t HAND_KIR[] = "KIR\x01 the kernel IR, as bytes nobody checks here\x00\xff";
static const uint8_t HAND_BITCODE[] = "BC\xc0\xde\x35\x14\x00\x00 bitcode";
static const uint8_t HAND_CUBIN[] = "\x7f"
                                    "ELF\x02\x01\x01 a cubin";
static const char HAND_PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n";

static Plan *hand_plan(Graph *g, Arena *a) {
    Plan *p = arena_alloc(a, sizeof *p);
    p->graph = g;
    p->param_offset = arena_alloc(a, ((size_t)g->params.n + 1) * sizeof(int64_t));
    for (int i = 0; i < g->params.n; i++) {
        const Param *pr = g->params.items[i];
        int64_t *seg = pr->in_block ? &p->host_kind[pr->kind] : &p->host_global;
        p->param_offset[i] = *seg;
        *seg += shape_numel(&pr->shape);
    }
    p->layer_base = arena_alloc(a, (size_t)(g->layers + 1) * sizeof(int64_t));
    plan_lay_out_layers(p);
    p->host_act_bytes = HAND_ACT_BYTES;
    p->opt_device = arena_alloc(a, (size_t)plan_segment_count(p)); // the head's globals and layer 0 on the device
    for (int64_t s = SEG_FIRST; s < g->layers; s++) p->opt_device[plan_segment_index(s)] = s == SEG_HEAD || s == 0;
    p->nframes = HAND_FRAMES;
    int64_t slot = (p->host_global > p->host_layer ? p->host_global : p->host_layer) * 4, top = slot;
    for (int pk = 0; pk < graph_nparts(g); pk++) {
        const Part *part = &g->parts[pk];
        int frames = part_is_block(pk) ? p->nframes : 1;
        p->node_offset[pk] = arena_alloc(a, ((size_t)part->nodes.n * (size_t)frames + 1) * sizeof(int64_t));
        for (int f = 0; f < frames; f++)
            for (int i = 0; i < part->nodes.n; i++) {
                const Node *n = part->nodes.items[i];
                int64_t *off = &p->node_offset[pk][(size_t)f * (size_t)part->nodes.n + (size_t)i];
                if (n->op == OP_VIEW || n->op == OP_RESHAPE) {
                    *off = -1;
                } else {
                    *off = top;
                    top += shape_numel(&n->shape) * 4;
                }
            }
    }
    p->arena_bytes = top + 8;      // a little spare at the end
    p->scratch_bytes = 4096 + 256; // written and read back as is
    p->device_limit = 2 * p->arena_bytes + 12345;
    p->schedule = "by hand: every kind, four engines, two frames";
    p->nevents = HAND_EVENTS;
    const Part *head = &g->parts[PART_HEAD], *block = &g->parts[PART_BLOCK], *tail = &g->parts[PART_TAIL];
    Instr *t = arena_alloc(a, 32 * sizeof *t);
    int n = 0;
    int32_t last = (int32_t)g->layers - 1;
    t[n++] = (Instr){.kind = INS_COPY_IN,
                     .engine = ENG_COPY_IN,
                     .layer = -1,
                     .src = 0,
                     .dst = 0,
                     .bytes = p->host_global * 4};
    t[n++] = (Instr){.kind = INS_RECORD, .engine = ENG_COPY_IN, .layer = -1, .event = 0};
    t[n++] = (Instr){.kind = INS_WAIT, .engine = ENG_COMPUTE, .layer = -1, .event = 0};
    t[n++] = (Instr){.kind = INS_INPUT,
                     .layer = -1,
                     .input = 0,
                     .dst = slot,
                     .bytes = shape_numel(&((ModelInput *)g->inputs.items[0])->shape) * 4};
    t[n++] = (Instr){.kind = INS_RUN, .part = PART_HEAD, .layer = -1, .from = 0, .to = head->nfwd};
    t[n++] = (Instr){.kind = INS_COPY_IN,
                     .engine = ENG_COPY_IN,
                     .layer = last,
                     .src = plan_segment_base(p, last),
                     .dst = 0,
                     .bytes = plan_segment_len(p, last) * 4};
    t[n++] =
        (Instr){.kind = INS_COPY, .layer = -1, .src = slot, .dst = 0, .bytes = slot < top - slot ? slot : top - slot};
    t[n++] = (Instr){.kind = INS_RUN, .part = PART_BLOCK, .layer = 0, .from = 0, .to = block->nodes.n};
    int reported = 0; // the block's first node with a buffer of its own, as if its forward reported it
    while (p->node_offset[PART_BLOCK][reported] < 0) reported++;
    t[n++] = (Instr){.kind = INS_STAT,
                     .part = PART_BLOCK,
                     .layer = 0,
                     .from = reported,
                     .src = p->node_offset[PART_BLOCK][reported],
                     .bytes = shape_numel(&((const Node *)block->nodes.items[reported])->shape) * 4};
    t[n++] = (Instr){.kind = INS_SAVE,
                     .engine = ENG_COPY_OUT,
                     .layer = -1,
                     .src = slot,
                     .dst = HAND_SAVE_BYTES,
                     .bytes = HAND_SAVE_BYTES};
    t[n++] = (Instr){.kind = INS_RUN,
                     .part = block_part(g, last),
                     .layer = last,
                     .from = 2,
                     .to = 2,
                     .frame = 1,
                     .flags = RUN_SKIP_HEAVY};
    t[n++] = (Instr){.kind = INS_LOAD,
                     .engine = ENG_COPY_IN,
                     .layer = -1,
                     .src = 2 * HAND_SAVE_BYTES,
                     .dst = slot + 4,
                     .bytes = HAND_ACT_BYTES - 2 * HAND_SAVE_BYTES};
    t[n++] = (Instr){.kind = INS_RUN, .part = PART_TAIL, .layer = -1, .from = 0, .to = tail->nodes.n};
    t[n++] = (Instr){.kind = INS_LOSS, .layer = -1, .src = p->node_offset[PART_TAIL][tail->output->id]};
    t[n++] = (Instr){.kind = INS_FREE, .layer = -1, .dst = slot, .bytes = HAND_SAVE_BYTES};
    t[n++] = (Instr){.kind = INS_RECORD, .layer = -1, .event = 1};
    t[n++] = (Instr){.kind = INS_WAIT, .engine = ENG_COPY_OUT, .layer = -1, .event = 1};
    t[n++] = (Instr){.kind = INS_COPY_OUT,
                     .engine = ENG_COPY_OUT,
                     .layer = 0,
                     .src = 0,
                     .dst = p->host_global,
                     .bytes = plan_segment_len(p, 0) * 4};
    t[n++] = (Instr){.kind = INS_COPY_OUT, .engine = ENG_COPY_OUT, .layer = -1, .src = 4, .dst = 1, .bytes = 4};
    t[n++] = (Instr){.kind = INS_RECORD, .engine = ENG_COPY_OUT, .layer = -1, .event = HAND_EVENTS - 1};
    t[n++] = (Instr){.kind = INS_WAIT, .engine = ENG_HOST, .layer = -1, .event = HAND_EVENTS - 1};
    t[n++] = (Instr){.kind = INS_NORM, .engine = ENG_HOST, .layer = -1};
    t[n++] = (Instr){.kind = INS_NORM, .engine = ENG_HOST, .layer = last};
    t[n++] = (Instr){.kind = INS_UPDATE, .engine = ENG_HOST, .layer = last};
    t[n++] = (Instr){.kind = INS_UPDATE, .engine = ENG_HOST, .layer = -1};
    p->train = t;
    p->ntrain = n;
    p->neval = 3; // a different, shorter stream: wait, input, run the head
    p->eval = arena_alloc(a, (size_t)p->neval * sizeof *p->eval);
    memcpy(p->eval, t + 2, (size_t)p->neval * sizeof *p->eval);
    p->kernels_bytes = HAND_KIR;
    p->kernels_len = sizeof HAND_KIR - 1;
    p->bitcode = HAND_BITCODE;
    p->bitcode_len = sizeof HAND_BITCODE - 1;
    p->cuda_arch = "sm_90";
    p->cubin = HAND_CUBIN;
    p->cubin_len = sizeof HAND_CUBIN - 1;
    p->ptx = HAND_PTX;
    p->ptx_len = sizeof HAND_PTX - 1;
    return p;
}

// The ways test_plan builds a plan of each model.
typedef struct Variant {
    const char *suffix; // of the plan file's name
    const char *what;   // in messages
    const char *target; // NULL: laid out by hand
    int64_t batch;      // 0: the model's
    SchedRequest req;
    int adapters; // 1: LoRA rank 2 on q_proj and v_proj where the model has them, else what "*n*.weight" names frozen
} Variant;

static const Variant VARIANTS[] = {
    {"",
     "schedule_search on h200, mt, remat auto",
     "h200",
     0,
     {.policy = POLICY_MT, .remat = REMAT_AUTO, .slots = 0, .resident = -1},
     0},
    {"-offload",
     "schedule_search on tiny-1layer at batch 1, mt, remat offload, 1 slot, 0 resident",
     "tiny-1layer",
     1,
     {.policy = POLICY_MT, .remat = REMAT_OFFLOAD, .slots = 1, .resident = 0},
     0},
    {"-selective",
     "schedule_search on tiny-1layer at batch 1, mt, remat selective, 1 slot, 0 resident",
     "tiny-1layer",
     1,
     {.policy = POLICY_MT, .remat = REMAT_SELECTIVE, .slots = 1, .resident = 0},
     0},
    {"-sharded",
     "schedule_search on tiny-1layer at batch 1, mt, remat layer, 2 slots, one rank of 2, sharded",
     "tiny-1layer",
     1,
     {.policy = POLICY_MT, .remat = REMAT_LAYER, .slots = 2, .resident = 0, .ranks = 2, .shard = 1},
     0},
    {"-adapters",
     "schedule_search on tiny-1layer at batch 1, mt, remat layer, with LoRA or frozen weights",
     "tiny-1layer",
     1,
     {.policy = POLICY_MT, .remat = REMAT_LAYER, .slots = 1, .resident = 0},
     1},
    {"-by-hand", "laid out by hand", NULL, 0, {.policy = POLICY_MT}, 0},
};
enum { NVARIANTS = sizeof VARIANTS / sizeof VARIANTS[0] };

// Parses, lowers, differentiates and schedules the model at path (or lays
// it out by hand). The source lives in text, which the caller frees.
static Plan *build(const char *path, Arena *a, const Variant *v, char **text) {
    size_t len;
    if (io_read_file(path, text, &len) != 0) {
        printf("FAIL %s: cannot read\n", path);
        return NULL;
    }
    Source src = {.path = path, .text = *text, .len = len};
    Diag diag = {.src = &src, .sink = stdout};
    SemaOptions opt = {.batch = v->batch};
    Model *m = dsl_parse(&src, a, &diag);
    static const AdapterPattern norms = {"*n*.weight", 0}; // the norms, and more
    AdapterOptions lora = {.lora_rank = 2, .lora_alpha = 4, .lora_targets = "q_proj,v_proj"};
    AdapterOptions frozen = {.patterns = &norms, .npatterns = 1};
    if (v->adapters) opt.adapters = strstr(*text, "q_proj") ? lora : frozen;
    Graph *g = m ? compile_lower(m, &opt, 1, NULL, a, &diag) : NULL; // (the one compile path's graph)
    if (!g) {
        printf("FAIL %s: the front end refused it\n", path);
        return NULL;
    }
    char err[1024];
    Plan *p = NULL;
    if (!v->target) {
        p = hand_plan(g, a);
    } else {
        Target t;
        SchedResult r;
        if (target_load(v->target, &t, err, sizeof err) != 0) {
            printf("FAIL %s: %s\n", path, err);
            return NULL;
        }
        if (schedule_search(g, &t, &v->req, a, &r, err, sizeof err) != 0) {
            printf("FAIL %s: %s: %s\n", path, v->what, err);
            return NULL;
        }
        if (!r.plan) {
            printf("FAIL %s: %s: no plan\n", path, v->what);
            return NULL;
        }
        if (getenv("TEST_PLAN_VERBOSE"))
            printf("  %s: %s: %s%s%s\n", path, v->what, r.plan->schedule ? r.plan->schedule : "?",
                   r.fits ? "" : "; does not fit: ", r.fits ? "" : r.why);
        p = r.plan;
    }
    p->source_path = path;
    p->source = *text;
    p->source_len = len;
    return p;
}

// What a plan holds: how many instructions of each kind, on each engine,
// RUNs skipping the heavy nodes, RUNs of the block in a frame above 0.
typedef struct Census {
    int kind[INS_COUNT], engine[ENG_COUNT], skip_heavy, later_frame;
} Census;

static void census(Census *c, const Plan *p) {
    const Instr *streams[2] = {p->train, p->eval};
    int counts[2] = {p->ntrain, p->neval};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < counts[s]; i++) {
            const Instr *in = &streams[s][i];
            if (in->kind >= 0 && in->kind < INS_COUNT) c->kind[in->kind]++;
            if (in->engine >= 0 && in->engine < ENG_COUNT) c->engine[in->engine]++;
            if (in->kind == INS_RUN && (in->flags & RUN_SKIP_HEAVY)) c->skip_heavy++;
            if (in->kind == INS_RUN && part_is_block(in->part) && in->frame > 0) c->later_frame++;
        }
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
    SAME("rope_interleaved", x->rope_interleaved == y->rope_interleaved);
    SAME("rope_rule",
         (!x->rope_rule && !y->rope_rule) || (x->rope_rule && y->rope_rule && !strcmp(x->rope_rule, y->rope_rule)));
    SAME("rope_scale", f64_eq(x->rope_scale, y->rope_scale));
    int64_t pairs = rope_pairs(x); // rope_freq's (D/2)
    for (int64_t i = 0; i < pairs; i++) SAME("rope_freq", f64_eq(x->rope_freq[i], y->rope_freq[i]));
    SAME("wide", x->wide == y->wide);
    SAME("padding", x->padding == y->padding);
    SAME("pooled", x->pooled == y->pooled);
    SAME("group_limit", x->group_limit == y->group_limit);
}

static void compare_graph(const char *ctx, const Graph *x, const Graph *y) {
    SAME("model name", str_eq(x->model_name, y->model_name));
    SAME("block name", str_eq(x->block_name, y->block_name));
    SAME("block prefix", str_eq(x->block_prefix, y->block_prefix));
    SAME("layers", x->layers == y->layers);
    SAME("block kinds", x->nkinds == y->nkinds && !memcmp(x->layer_kind, y->layer_kind, (size_t)x->layers));
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
                            p->init_given == q->init_given && p->first_use == q->first_use && loc_eq(p->loc, q->loc) &&
                            p->kind == q->kind && (!p->in_block || str_eq(p->prefix, q->prefix)) &&
                            p->frozen == q->frozen && p->lora == q->lora && (!p->lora || p->lora_of == q->lora_of) &&
                            f64_eq(p->lora_scale, q->lora_scale));
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
        CHECK(x[i].kind == y[i].kind && x[i].engine == y[i].engine && x[i].part == y[i].part &&
                  x[i].layer == y[i].layer && x[i].input == y[i].input && x[i].from == y[i].from &&
                  x[i].to == y[i].to && x[i].frame == y[i].frame && x[i].flags == y[i].flags &&
                  x[i].event == y[i].event && x[i].src == y[i].src && x[i].dst == y[i].dst && x[i].bytes == y[i].bytes,
              "%s: instruction %d differs after the round trip", ctx, i);
}

static int blob_eq(const void *x, size_t nx, const void *y, size_t ny) {
    return nx == ny && (nx == 0 || (x && y && !memcmp(x, y, nx)));
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
    SAME("host_layer", x->host_layer == y->host_layer && !memcmp(x->host_kind, y->host_kind, sizeof x->host_kind));
    SAME("layer_base", !memcmp(x->layer_base, y->layer_base, (size_t)(x->graph->layers + 1) * sizeof(int64_t)));
    for (int i = 0; i < x->graph->params.n && i < y->graph->params.n; i++)
        SAME("a param offset", x->param_offset[i] == y->param_offset[i]);
    SAME("host_act_bytes", x->host_act_bytes == y->host_act_bytes);
    for (int64_t s = SEG_FIRST; s < x->graph->layers && x->graph->layers == y->graph->layers; s++)
        SAME("an optimizer placement", plan_opt_device(x, s) == plan_opt_device(y, s));
    SAME("arena_bytes", x->arena_bytes == y->arena_bytes);
    SAME("scratch_bytes", x->scratch_bytes == y->scratch_bytes);
    SAME("device_limit", x->device_limit == y->device_limit);
    SAME("nframes", x->nframes == y->nframes);
    for (int pk = 0; pk < PART_COUNT; pk++) {
        int frames = pk == PART_BLOCK ? (x->nframes < y->nframes ? x->nframes : y->nframes) : 1;
        for (int f = 0; f < frames; f++) {
            const int64_t *ox = plan_offsets(x, pk, f), *oy = plan_offsets(y, pk, f);
            for (int i = 0; i < x->graph->parts[pk].nodes.n && i < y->graph->parts[pk].nodes.n; i++)
                CHECK(ox[i] == oy[i], "%s: the offset of %s node %d in frame %d differs after the round trip", ctx,
                      part_name((PartKind)pk), i, f);
        }
    }
    SAME("schedule", str_eq(x->schedule ? x->schedule : "", y->schedule));
    SAME("nevents", x->nevents == y->nevents);
    SAME("ranks", (x->ranks ? x->ranks : 1) == (y->ranks ? y->ranks : 1)); // 0 in a plan built is written as 1
    compare_instrs(ctx, x->train, x->ntrain, y->train, y->ntrain);
    compare_instrs(ctx, x->eval, x->neval, y->eval, y->neval);
    SAME("kernel IR", blob_eq(x->kernels_bytes, x->kernels_len, y->kernels_bytes, y->kernels_len));
    SAME("bitcode", blob_eq(x->bitcode, x->bitcode_len, y->bitcode, y->bitcode_len));
    SAME("cuda arch", str_eq(x->cuda_arch, y->cuda_arch));
    SAME("cubin", blob_eq(x->cubin, x->cubin_len, y->cubin, y->cubin_len));
    SAME("ptx", blob_eq(x->ptx, x->ptx_len, y->ptx, y->ptx_len));
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

// Where the length of each KERNELS blob lies in the section (its start is
// offset 0): the kernel IR, the bitcode, the cubin, the PTX; and the CUDA
// architecture string's length.
typedef struct KernelsAt {
    uint64_t kir, bitcode, arch, cubin, ptx;
} KernelsAt;

static KernelsAt kernels_at(const Plan *p) {
    KernelsAt k;
    k.kir = 0;
    k.bitcode = k.kir + 8 + p->kernels_len;
    k.arch = k.bitcode + 8 + p->bitcode_len;
    k.cubin = k.arch + 4 + (p->cuda_arch ? strlen(p->cuda_arch) : 0);
    k.ptx = k.cubin + 8 + p->cubin_len;
    return k;
}

// The blob lengths of the plan p was written as, patched one at a time to
// run past the section's end (by one byte, and by nearly 2^64), every crc
// redone.
static void damage_blobs(const char *model, const Plan *p, const unsigned char *orig, size_t len) {
    unsigned char *buf = malloc(len);
    KernelsAt k = kernels_at(p);
    const struct {
        uint64_t at;
        const char *name;
    } blobs[] = {{k.kir, "the kernel IR"},
                 {k.bitcode, "the LLVM bitcode"},
                 {k.cubin, "the CUDA cubin"},
                 {k.ptx, "the PTX"}};
    for (size_t i = 0; i < sizeof blobs / sizeof blobs[0]; i++)
        for (int huge = 0; huge <= 1; huge++) {
            memcpy(buf, orig, len);
            const unsigned char *e = entry_of(buf, SEC_KERNELS);
            uint64_t off = ld64(e + 8), size = ld64(e + 16);
            uint64_t past = huge ? UINT64_MAX - 7 : size - blobs[i].at - 8 + 1; // one byte more than is left
            CHECK(blobs[i].at + 8 <= size, "%s: KERNELS is shorter than its blobs", model);
            if (blobs[i].at + 8 > size) break;
            st64(buf + off + blobs[i].at, past);
            redo_crcs(buf);
            char ctx[800], want[200];
            snprintf(ctx, sizeof ctx, "%s: %s's length %s the section", model, blobs[i].name,
                     huge ? "far past" : "1 past");
            snprintf(want, sizeof want, "section KERNELS: %s of %llu bytes runs past the section's end", blobs[i].name,
                     (unsigned long long)past);
            expect_refused(ctx, buf, len, want);
        }
    free(buf);
}

static void damage_bytes(const char *model, const Plan *p, const unsigned char *orig, size_t len) {
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
        if (id == SEC_KERNELS && p->ptx_len) // the last field is the PTX's bytes, one of them now missing
            snprintf(want, sizeof want, "section KERNELS: the PTX of %zu bytes runs past the section's end",
                     p->ptx_len);
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
    // Header faults: every version this mtrun does not read, with what each
    // lacked, and the next one.
    static const uint32_t refused[] = {
        3,
        6,
        7,  // before the ARENA section recorded the kernels' scratch
        8,  // before the graph recorded each layer's block kind
        9,  // before each kind had its own block part (one period of the order, sublayers)
        10, // before the ranks (mtc --ranks), rope's frequencies, INS_STAT, wide and padding nodes and the
            // kernel IR's value-head width
        11,
        12, // never released (the branches that became 13)
        13, // before pooled load-balancing losses and the sharded store (INS_ALLGATHER, ...)
        14, // before attention's saved softmax statistics (OP_ATTENTION_LSE)
        15, // before frozen parameters and LoRA adapters (Param.frozen, lora, lora_of, lora_scale)
        16, // before the optimizer's placement (Plan.opt_device)
        17, // before attention's chunk (Node.chunk, KirAttn.chunk)
        18, // before attention's sinks as an operand of its kernels (an fp32 pass over y and lse), the
            // buffers' balance rules (Param.balance_mask, balance_rate), routers' group limits
            // (Node.group_limit) and moe's weights in their stored layouts (Node.moe_form)
        20, 21, // never released (the branches that became 19)
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        char version[32], message[96];
        snprintf(version, sizeof version, "version %u", refused[k]);
        snprintf(message, sizeof message, "p.plan: plan version %u, this mtrun reads version 19", refused[k]);
        memcpy(buf, orig, len);
        st32(buf + 8, refused[k]);
        redo_crcs(buf);
        expect_refused(version, buf, len, message);
    }
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
    // A kernel blob's length past the section's end.
    damage_blobs(model, p, orig, len);
    // The model text against its own crc.
    memcpy(buf, orig, len);
    const unsigned char *e = entry_of(buf, SEC_SOURCE);
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
        FAIL("%s: plan_write: %s", ctx, err);
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
        FAIL("writing %s: %s", path, err);
        return NULL;
    }
    return (unsigned char *)data;
}

// The first byte after the section table where a and b differ, in the
// bytes both have (one more block kind makes a longer plan), or 0 after a
// failed check: a plan missing, or none of those bytes differing (equal,
// empty or truncated plans) leave nothing to patch.
static size_t differ_at(const char *what, const unsigned char *a, size_t alen, const unsigned char *b, size_t blen) {
    size_t at = HEADER_BYTES + SECTIONS * ENTRY_BYTES, len = alen < blen ? alen : blen;
    if (!CHECK(a && b, "%s: a plan to compare was not written", what)) return 0;
    while (at < len && a[at] == b[at]) at++;
    return CHECK(at < len, "%s: the two plans do not differ after the section table", what) ? at : 0;
}

// The first train instruction of kind (and of part, where part >= 0), or -1.
static int find_ins(const Plan *p, int kind, int part) {
    for (int i = 0; i < p->ntrain; i++)
        if (p->train[i].kind == kind && (part < 0 || p->train[i].part == part)) return i;
    return -1;
}

// Writes p and expects the reader to refuse instruction i of stream,
// naming the section, the stream, the instruction and its kind, and fault.
static void expect_ins_refused(const char *ctx, Plan *p, const char *path, const char *stream, int i,
                               const char *fault) {
    const Instr *in = &(strcmp(stream, "train") ? p->eval : p->train)[i];
    static const char *const names[] = {"copy_in", "copy_out", "copy",      "input",         "run",  "loss",
                                        "save",    "load",     "free",      "record",        "wait", "norm",
                                        "update",  "stat",     "allgather", "reduce_scatter"};
    _Static_assert(sizeof names / sizeof names[0] == INS_COUNT, "names out of sync with InsKind");
    char want[200];
    snprintf(want, sizeof want, "section STREAMS: %s instruction %d (%s): ", stream, i,
             in->kind >= 0 && in->kind < INS_COUNT ? names[in->kind] : "?");
    char err[512];
    if (plan_write(p, path, err, sizeof err) != 0) {
        FAIL("%s: plan_write: %s", ctx, err);
        return;
    }
    Arena a = {0};
    Plan *q = plan_read(path, &a, err, sizeof err);
    if (getenv("TEST_PLAN_VERBOSE")) printf("  %s: %s\n", ctx, err);
    CHECK(!q, "%s: accepted", ctx);
    CHECK(q || (strstr(err, want) && strstr(strstr(err, want), fault)),
          "%s: the message \"%s\" does not contain \"%s\" and then \"%s\"", ctx, err, want, fault);
    arena_free(&a);
}

// Writes p and expects the reader to accept it.
static void expect_written_accepted(const char *ctx, Plan *p, const char *path) {
    char err[512];
    if (plan_write(p, path, err, sizeof err) != 0) {
        FAIL("%s: plan_write: %s", ctx, err);
        return;
    }
    Arena a = {0};
    CHECK(plan_read(path, &a, err, sizeof err) != NULL, "%s: refused: %s", ctx, err);
    arena_free(&a);
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
    for (int k = 0; k < g->parts[PART_BLOCK].nodes.n; k++) { // a moe's clamped SwiGLU with no limit
        Node *n = node_at(p, PART_BLOCK, k);
        if (n->op != OP_MOE) continue;
        n->scale = 1.702;
        expect_written_refused("a moe's alpha without a limit", p, path, "clamped SwiGLU alpha 1.702, limit 0");
        n->scale = 0;
        break;
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
            CHECK(plan_write(p, path, err, sizeof err) == -1 && strstr(err, want),
                  "writing a forward reference: \"%s\"", err);
            // The writer will not write one, so patch it in: the operand's
            // bytes are where writing operand 0 and then 1 differs.
            n->in[0] = node_at(p, PART_BLOCK, 0);
            unsigned char *a = written(p, path, &alen);
            n->in[0] = node_at(p, PART_BLOCK, 1);
            unsigned char *b = written(p, path, &blen);
            n->in[0] = saved;
            size_t at = differ_at("a forward reference", a, alen, b, blen);
            if (at) {
                st32(a + at, (uint32_t)k + 2);
                redo_crcs(a);
                snprintf(want, sizeof want,
                         "section GRAPH: block node %d (%s): operand 0 is node %d, not an earlier node", k,
                         op_name(n->op), k + 2);
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
        size_t at = differ_at("an op out of range", a, alen, b, blen);
        if (at) {
            st32(a + at, 200);
            redo_crcs(a);
            char want[96];
            snprintf(want, sizeof want, "section GRAPH: tail node 3: op 200 is out of range (0..%d)", OP_COUNT - 1);
            expect_refused("an op out of range", a, alen, want);
        }
        free(a);
        free(b);
    }
    { // the order of block kinds (format 10): each block param's kind and prefix
        char want[160];
        int k = 0;
        while (k < g->params.n && !((Param *)g->params.items[k])->in_block) k++;
        Param *pr = g->params.items[k];
        int kind = pr->kind;
        pr->kind = g->nkinds;
        snprintf(want, sizeof want, "section GRAPH: parameter %d: block kind %d is out of range (0..%d)", k, g->nkinds,
                 g->nkinds - 1);
        expect_written_refused("a block kind out of range", p, path, want);
        pr->kind = kind;
        const char *prefix = pr->prefix;
        pr->prefix = "h.";
        snprintf(want, sizeof want, "section GRAPH: parameter '%s': its checkpoint prefix \"h.\" has no {i}", pr->name);
        expect_written_refused("a prefix without {i}", p, path, want);
        pr->prefix = prefix;
        // a LoRA adapter (format 16) names an earlier parameter, is trained, is a matrix, and scales by a positive
        // number
        pr->lora = 1, pr->lora_of = k, pr->lora_scale = 2;
        snprintf(want, sizeof want, "parameter '%s': a LoRA adapter of parameter %d, which is not an earlier one",
                 pr->name, k);
        expect_written_refused("a LoRA adapter of itself", p, path, want);
        pr->lora_of = 0, pr->lora_scale = -1;
        snprintf(want, sizeof want, "parameter '%s': LoRA scale -1 is not a positive number", pr->name);
        if (k > 0 && pr->shape.rank == 2) expect_written_refused("a LoRA scale below 0", p, path, want);
        pr->lora = 0, pr->lora_of = 0, pr->lora_scale = 0;
    }
    { // the layers' block kinds (format 9): each below nkinds, every kind some layer's; each kind's segment size
        char want[160];
        int64_t saved = p->host_kind[0];
        p->host_kind[0] = -1;
        expect_written_refused("a negative layer segment", p, path, "x -1 floats (block kind 0) is out of range");
        p->host_kind[0] = saved;
        int nkinds = g->nkinds, last_kind = g->layer_kind[g->layers - 1];
        g->layer_kind[g->layers - 1] = (uint8_t)nkinds;
        snprintf(want, sizeof want, "section GRAPH: layer %lld is of block kind %d; there are %d",
                 (long long)g->layers - 1, nkinds, nkinds);
        expect_written_refused("a layer of a kind past nkinds", p, path, want);
        g->layer_kind[g->layers - 1] = (uint8_t)last_kind;
        g->nkinds = MT_MAX_KINDS + 1;
        char err[512] = "";
        CHECK(plan_write(p, path, err, sizeof err) == -1 && strstr(err, "internal error: 9 block kinds"),
              "writing too many block kinds: \"%s\"", err);
        g->nkinds = nkinds; // the writer will not write it: patch it in where nkinds and nkinds + 1 differ
        unsigned char *one = written(p, path, &alen);
        g->nkinds = nkinds + 1;
        unsigned char *two = written(p, path, &blen);
        g->nkinds = nkinds;
        size_t at = differ_at("too many block kinds", one, alen, two, blen);
        if (at) {
            st32(one + at, MT_MAX_KINDS + 1);
            redo_crcs(one);
            snprintf(want, sizeof want, "block kind count %d is out of range (0..%d)", MT_MAX_KINDS + 1, MT_MAX_KINDS);
            expect_refused("too many block kinds", one, alen, want);
            st32(one + at, 0);
            redo_crcs(one);
            expect_refused("no block kinds", one, alen, "section GRAPH: 0 block kinds");
        }
        free(one);
        free(two);
    }
    {
        Node *n = node_at(p, PART_TAIL, 1);
        DType saved = n->dtype;
        n->dtype = DT_COUNT;
        expect_written_refused("a dtype out of range", p, path,
                               "section GRAPH: tail node 1: dtype 3 is out of range (0..2)");
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
        n->src_part = graph_nparts(g);
        expect_written_refused("src_part past the parts", p, path, "section GRAPH: tail node");
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
    int prm1 = g->nkinds > 1 ? first_op(p, PART_KIND1, OP_PARAM) : -1;
    if (prm1 >= 0) { // a kind-1 block node reading kind 0's copy of its parameter (the same name and shape)
        Node *n = node_at(p, PART_KIND1, prm1);
        const Param *own = g->params.items[n->param];
        int saved = n->param, other = -1;
        for (int i = 0; i < g->params.n && other < 0; i++) {
            const Param *q = g->params.items[i];
            if (q->in_block && q->kind == 0 && !strcmp(q->name, own->name)) other = i;
        }
        CHECK(other >= 0, "kind 0 has no parameter '%s' to swap in", own->name);
        if (other >= 0) {
            n->param = other;
            char want[160];
            snprintf(want, sizeof want, "block parameter '%s' of kind 0 used outside its kind's block", own->name);
            expect_written_refused("another kind's parameter", p, path, want);
            n->param = saved;
        }
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
    if (p->opt_device) {
        uint8_t saved = p->opt_device[plan_segment_index(SEG_TAIL)];
        p->opt_device[plan_segment_index(SEG_TAIL)] = 2;
        expect_written_refused("an optimizer placement of 2", p, path,
                               "section HOST: segment -2's optimizer placement is 2; 0 (host) or 1 (device)");
        p->opt_device[plan_segment_index(SEG_TAIL)] = saved;
    }
    {
        int i = 0; // the first node with a buffer of its own
        while (node_at(p, PART_TAIL, i)->op == OP_VIEW || node_at(p, PART_TAIL, i)->op == OP_RESHAPE) i++;
        int64_t saved = p->node_offset[PART_TAIL][i];
        p->node_offset[PART_TAIL][i] = p->arena_bytes;
        expect_written_refused("a node outside the arena", p, path, "section ARENA: tail node");
        int64_t scratch = p->scratch_bytes;
        p->scratch_bytes = -256;
        expect_written_refused("negative kernel scratch", p, path, "section ARENA: kernel scratch of -256 bytes");
        p->scratch_bytes = 4100;
        expect_written_refused("kernel scratch not a multiple of 256", p, path,
                               "section ARENA: kernel scratch of 4100 bytes");
        p->scratch_bytes = scratch;
        p->node_offset[PART_TAIL][i] = -1;
        expect_written_refused("a computed node with no buffer", p, path, "has no buffer");
        p->node_offset[PART_TAIL][i] = saved;
    }
    for (int k = 0; k < INS_COUNT; k++) { // break the first instruction of each kind
        int at = find_ins(p, k, -1);
        if (at < 0 && !p->sharded && (k == INS_ALLGATHER || k == INS_REDUCE_SCATTER)) continue; // a sharded plan's
        if (at < 0) {
            FAIL("the plan has no instruction of kind %d to break", k);
            continue;
        }
        Instr *in = &p->train[at], saved = *in;
        const char *fault = "";
        switch ((InsKind)k) {
        case INS_COPY_IN:
            in->src = plan_host_elems(p);
            in->bytes = 4;
            fault = "lie outside the host store of";
            break;
        case INS_COPY_OUT:
            in->dst = -1;
            fault = "host elements [-1, ";
            break;
        case INS_COPY:
            in->dst = p->arena_bytes - in->bytes + 1;
            fault = "leave the arena of";
            break;
        case INS_INPUT:
            in->input = g->inputs.n;
            fault = "model input";
            break;
        case INS_RUN:
            in->layer = (int32_t)g->layers;
            fault = "layer";
            break;
        case INS_LOSS:
            in->src = p->arena_bytes - 2;
            fault = "lies outside the arena";
            break;
        case INS_SAVE:
            in->dst = p->host_act_bytes - in->bytes + 1;
            fault = "host activation bytes";
            break;
        case INS_LOAD:
            in->src = p->host_act_bytes;
            fault = "host activation bytes";
            break;
        case INS_FREE:
            in->bytes = 6;
            fault = "are not whole floats";
            break;
        case INS_RECORD:
            in->event = p->nevents;
            fault = "event";
            break;
        case INS_WAIT:
            in->event = -1;
            fault = "event -1";
            break;
        case INS_NORM:
            in->layer = (int32_t)g->layers;
            fault = "layer";
            break;
        case INS_UPDATE:
            in->layer = -3;
            fault = "segment -3";
            break;
        case INS_STAT:
            in->bytes += 4;
            fault = "bytes of a node of";
            break;
        case INS_ALLGATHER:
            in->bytes += 2;
            fault = "ranks' chunks of segment";
            break;
        case INS_REDUCE_SCATTER:
            in->layer = (int32_t)g->layers;
            fault = "segment";
            break;
        case INS_COUNT: break;
        }
        char ctx[64];
        snprintf(ctx, sizeof ctx, "a bad instruction of kind %d", k);
        expect_ins_refused(ctx, p, path, "train", at, fault);
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
        char want[128];
        p->train[0].kind = INS_COUNT;
        snprintf(want, sizeof want, "section STREAMS: train instruction 0: kind %d is out of range (0..%d)", INS_COUNT,
                 INS_COUNT - 1);
        expect_written_refused("an instruction kind out of range", p, path, want);
        p->train[0].kind = -1;
        snprintf(want, sizeof want, "section STREAMS: train instruction 0: kind -1 is out of range (0..%d)",
                 INS_COUNT - 1);
        expect_written_refused("a negative instruction kind", p, path, want);
        p->train[0] = saved;
    }
    // Engines: every instruction's, either stream.
    {
        char fault[64];
        Instr saved = p->train[0];
        p->train[0].engine = ENG_COUNT;
        snprintf(fault, sizeof fault, "engine %d is out of range (0..%d)", ENG_COUNT, ENG_COUNT - 1);
        expect_ins_refused("an engine out of range", p, path, "train", 0, fault);
        p->train[0] = saved;
        int last = p->ntrain - 1;
        saved = p->train[last];
        p->train[last].engine = -1;
        expect_ins_refused("a negative engine", p, path, "train", last, "engine -1 is out of range");
        p->train[last] = saved;
        saved = p->eval[0];
        p->eval[0].engine = ENG_COUNT + 100;
        snprintf(fault, sizeof fault, "engine %d is out of range", ENG_COUNT + 100);
        expect_ins_refused("an eval engine out of range", p, path, "eval", 0, fault);
        p->eval[0] = saved;
    }
    // Events: 0 .. nevents-1 on RECORD and WAIT; nevents itself.
    {
        char fault[64];
        int r = find_ins(p, INS_RECORD, -1), w = find_ins(p, INS_WAIT, -1);
        if (r >= 0 && w >= 0) {
            Instr saved = p->train[r];
            p->train[r].event = p->nevents;
            snprintf(fault, sizeof fault, "event %d; the plan has %d", p->nevents, p->nevents);
            expect_ins_refused("a RECORD of an event past nevents", p, path, "train", r, fault);
            p->train[r] = saved;
            saved = p->train[w];
            p->train[w].event = INT32_MAX;
            snprintf(fault, sizeof fault, "event %d; the plan has %d", INT32_MAX, p->nevents);
            expect_ins_refused("a WAIT for an event past nevents", p, path, "train", w, fault);
            p->train[w] = saved;
            int32_t nev = p->nevents;
            p->nevents = p->train[r].event; // the RECORD's event is now one too many
            snprintf(fault, sizeof fault, "event %d; the plan has %d", p->train[r].event, p->nevents);
            expect_ins_refused("nevents below an event recorded", p, path, "train", r, fault);
            p->nevents = -1;
            expect_written_refused("nevents -1", p, path, "section STREAMS: -1 events");
            p->nevents = nev;
            p->ranks = -1;
            expect_written_refused("ranks -1", p, path, "section STREAMS: -1 ranks; at least 1");
            p->ranks = 0;
        } else {
            FAIL("the plan has no RECORD or WAIT to break");
        }
    }
    // Frames and flags of RUN.
    {
        char fault[96];
        int bf = -1; // a block RUN in a frame above 0
        for (int i = 0; i < p->ntrain && bf < 0; i++)
            if (p->train[i].kind == INS_RUN && part_is_block(p->train[i].part) && p->train[i].frame > 0) bf = i;
        int hr = find_ins(p, INS_RUN, PART_HEAD);
        CHECK(bf >= 0 && hr >= 0, "the plan has no block RUN in a later frame, or no head RUN");
        if (bf >= 0 && hr >= 0) {
            Instr saved = p->train[bf];
            p->train[bf].frame = p->nframes;
            const char *pn = part_name((PartKind)saved.part);
            snprintf(fault, sizeof fault, "frame %d; the %s part has %d", p->nframes, pn, p->nframes);
            expect_ins_refused("a frame past nframes", p, path, "train", bf, fault);
            p->train[bf].frame = -1;
            snprintf(fault, sizeof fault, "frame -1; the %s part has %d", pn, p->nframes);
            expect_ins_refused("a negative frame", p, path, "train", bf, fault);
            p->train[bf] = saved;
            saved = p->train[hr];
            p->train[hr].frame = 1;
            expect_ins_refused("a head RUN in frame 1", p, path, "train", hr, "frame 1; the head part has 1");
            p->train[hr].flags = 2;
            p->train[hr].frame = 0;
            expect_ins_refused("unknown RUN flags", p, path, "train", hr, "unknown flags 0x2");
            p->train[hr].flags = RUN_SKIP_HEAVY | 0x40000000;
            expect_ins_refused("RUN_SKIP_HEAVY and an unknown flag", p, path, "train", hr, "unknown flags 0x40000001");
            p->train[hr].flags = -1;
            expect_ins_refused("every flag", p, path, "train", hr, "unknown flags 0xffffffff");
            p->train[hr] = saved;
        }
    }
    // SAVE and LOAD against the host activation store and the arena.
    {
        int sv = find_ins(p, INS_SAVE, -1), ld = find_ins(p, INS_LOAD, -1);
        CHECK(sv >= 0 && ld >= 0, "the plan has no SAVE or LOAD");
        if (sv >= 0 && ld >= 0) {
            Instr saved = p->train[sv];
            p->train[sv].dst = -4;
            expect_ins_refused("a SAVE before the store", p, path, "train", sv, "host activation bytes [-4, ");
            p->train[sv].dst = INT64_MAX - 8;
            expect_ins_refused("a SAVE far past the store", p, path, "train", sv, "lie outside the store of");
            p->train[sv].dst = 0;
            p->train[sv].bytes = p->host_act_bytes + 4;
            expect_ins_refused("a SAVE larger than the store", p, path, "train", sv, "lie outside the store of");
            p->train[sv] = saved;
            p->train[sv].src = p->arena_bytes - p->train[sv].bytes + 4;
            expect_ins_refused("a SAVE from past the arena", p, path, "train", sv, "lie outside the arena of");
            p->train[sv] = saved;
            saved = p->train[ld];
            p->train[ld].src = p->host_act_bytes - p->train[ld].bytes + 1;
            expect_ins_refused("a LOAD past the store", p, path, "train", ld, "lie outside the store of");
            p->train[ld].src = saved.src;
            p->train[ld].dst = p->arena_bytes;
            expect_ins_refused("a LOAD into past the arena", p, path, "train", ld, "lie outside the arena of");
            p->train[ld] = saved;
            int64_t act = p->host_act_bytes;
            p->host_act_bytes = saved.src + saved.bytes - 1; // the LOAD's last byte no longer in the store
            expect_ins_refused("a store one byte short of a LOAD", p, path, "train", ld, "lie outside the store of");
            p->host_act_bytes = 0;
            expect_ins_refused("SAVE with no store", p, path, "train", sv, "lie outside the store of 0");
            p->host_act_bytes = -1;
            expect_written_refused("a negative store", p, path, "section HOST: a host activation store of -1 bytes");
            p->host_act_bytes = act;
        }
    }
    // FREE of whole floats inside the arena only.
    {
        int fr = find_ins(p, INS_FREE, -1);
        CHECK(fr >= 0, "the plan has no FREE");
        if (fr >= 0) {
            Instr saved = p->train[fr];
            p->train[fr].bytes = saved.bytes + 2;
            expect_ins_refused("a FREE of half a float", p, path, "train", fr, "are not whole floats");
            p->train[fr].bytes = saved.bytes;
            p->train[fr].dst = saved.dst + 1;
            expect_ins_refused("a FREE off float alignment", p, path, "train", fr, "are not whole floats");
            p->train[fr].dst = p->arena_bytes;
            expect_ins_refused("a FREE past the arena", p, path, "train", fr, "are not whole floats inside the arena");
            p->train[fr].dst = -4;
            expect_ins_refused("a FREE before the arena", p, path, "train", fr,
                               "are not whole floats inside the arena");
            p->train[fr] = saved;
        }
    }
    // ARENA: the frames and the device limit.
    {
        int32_t nf = p->nframes;
        char want[128];
        p->nframes = 0;
        snprintf(want, sizeof want, "section ARENA: 0 block frames for %lld layers", (long long)g->layers);
        expect_written_refused("no block frames", p, path, want);
        p->nframes = -1;
        snprintf(want, sizeof want, "section ARENA: -1 block frames for %lld layers", (long long)g->layers);
        expect_written_refused("-1 block frames", p, path, want);
        p->nframes = nf;
        int64_t lim = p->device_limit;
        p->device_limit = -1;
        expect_written_refused("a negative device limit", p, path, "section ARENA: a device limit of -1 bytes");
        p->device_limit = lim;
    }
    // KERNELS: CUDA code must say which architecture it is for.
    {
        const char *arch = p->cuda_arch;
        size_t cubin = p->cubin_len, ptx = p->ptx_len;
        p->cuda_arch = NULL;
        expect_written_refused("a cubin and PTX without an architecture", p, path,
                               "section KERNELS: CUDA code without an architecture");
        p->ptx_len = 0;
        expect_written_refused("a cubin without an architecture", p, path,
                               "section KERNELS: CUDA code without an architecture");
        p->ptx_len = ptx;
        p->cubin_len = 0;
        expect_written_refused("PTX without an architecture", p, path,
                               "section KERNELS: CUDA code without an architecture");
        p->cuda_arch = "";
        expect_written_refused("PTX with an empty architecture", p, path,
                               "section KERNELS: CUDA code without an architecture");
        // No CUDA code: an architecture or none, both fine.
        p->ptx_len = 0;
        expect_written_accepted("an architecture and no CUDA code", p, path);
        p->cuda_arch = NULL;
        expect_written_accepted("no architecture and no CUDA code", p, path);
        p->cuda_arch = arch;
        p->cubin_len = cubin;
        p->ptx_len = ptx;
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

// Builds, writes, reads back, compares and damages one plan of model;
// adds what it holds to c.
static void round_trip(const char *model, const char *work, const Variant *v, Census *c) {
    int failures_before = check_failures, by_hand = !v->target;
    Arena a = {0};
    char *text = NULL;
    Plan *p = build(model, &a, v, &text);
    if (!p) {
        check_failures++;
        arena_free(&a);
        free(text);
        return;
    }
    const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
    char path[4096], ctx[512], err[512];
    snprintf(path, sizeof path, "%s/%.*s%s.plan", work, (int)strcspn(base, "."), base, v->suffix);
    snprintf(ctx, sizeof ctx, "%s (%s)", model, v->what);
    census(c, p);
    CHECK(p->nframes >= 1, "%s: %d frames", ctx, p->nframes);
    p->plan_crc = 0;
    if (plan_write(p, path, err, sizeof err) != 0) {
        FAIL("%s: plan_write: %s", ctx, err);
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
        else if (q) FAIL("%s: rewriting the plan read back failed: %s", ctx, err);
        unlink(path2);
        arena_free(&b);
        if (d1) {
            damage_bytes(ctx, p, (unsigned char *)d1, l1);
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
        printf("%s %s: %s\n", check_failures > failures_before ? "FAIL" : "ok  ", ctx, path);
    }
    arena_free(&a);
    free(text);
}

static void failed_writes(const char *model, const char *work) {
    int failures_before = check_failures;
    Arena a = {0};
    char *text = NULL;
    Plan *p = build(model, &a, &VARIANTS[NVARIANTS - 1], &text);
    if (!p) {
        check_failures++;
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
    printf("%s failed writes and reads\n", check_failures > failures_before ? "FAIL" : "ok  ");
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
        Census c[NVARIANTS];
        memset(c, 0, sizeof c);
        for (int k = 0; k < NVARIANTS; k++) round_trip(argv[i], work, &VARIANTS[k], &c[k]);
        // What the format's new fields are there for must appear in the
        // plans tested: the scheduler's plans use every engine and events;
        // the h200 plan keeps its layers resident, a frame each; streaming on
        // the tiny profile offloads (SAVE/LOAD), frees and, selective, skips
        // heavy nodes; by hand, everything.
        // (the collectives and their engine: only the sharded plan's)
        const Census *h200 = &c[0], *off = &c[1], *sel = &c[2], *shard = &c[3], *hand = &c[NVARIANTS - 1];
        for (int e = 0; e < ENG_COUNT; e++)
            CHECK(e == ENG_COMM ? shard->engine[e] > 0 && !h200->engine[e] && !off->engine[e] && !hand->engine[e]
                                : h200->engine[e] > 0 && off->engine[e] > 0 && hand->engine[e] > 0,
                  "%s: engine %d unused in a scheduled or the hand-laid plan (comm: used outside the sharded plan)",
                  argv[i], e);
        for (int k = 0; k < INS_COUNT; k++)
            CHECK(k == INS_ALLGATHER || k == INS_REDUCE_SCATTER ? shard->kind[k] > 0 && !hand->kind[k]
                                                                : hand->kind[k] > 0,
                  "%s: the %s plan has no instruction of kind %d", argv[i],
                  k == INS_ALLGATHER || k == INS_REDUCE_SCATTER ? "sharded" : "hand-laid", k);
        CHECK(hand->skip_heavy > 0 && hand->later_frame > 0, "%s: the hand-laid plan has no RUN flags or frame 1",
              argv[i]);
        static const int STREAMED[] = {INS_SAVE, INS_LOAD, INS_FREE, INS_RECORD, INS_WAIT, INS_NORM, INS_UPDATE};
        for (size_t k = 0; k < sizeof STREAMED / sizeof STREAMED[0]; k++)
            CHECK(off->kind[STREAMED[k]] > 0, "%s: the offload plan has no instruction of kind %d", argv[i],
                  STREAMED[k]);
        CHECK(h200->kind[INS_RECORD] > 0 && h200->kind[INS_WAIT] > 0, "%s: the h200 plan has no events", argv[i]);
        CHECK(sel->skip_heavy > 0, "%s: the selective plan has no RUN_SKIP_HEAVY", argv[i]);
        CHECK(h200->later_frame > 0, "%s: the h200 plan (resident layers, a frame each) uses frame 0 only", argv[i]);
    }
    failed_writes(argv[2], work);
    return check_summary("test_plan");
}
