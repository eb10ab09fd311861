// test_verify: the plan verifier accepts the scheduler's plans and refuses
// mutated ones, each with a message naming the instructions involved.
//
// Accepted: every example's plan on several targets under every policy and
// remat mode the search offers, and fixed choices (slots, resident layers,
// checkpoints on host or device) of a 4-layer llama-tiny, which streams,
// recomputes, offloads and frees on the tiny targets. 405B plans must
// verify in well under a second.
//
// Refused (from a multi-engine plan that passes): a dropped event, a
// node's buffer moved onto a live one, a too-early weight copy (moved
// before the RUN still reading its slot, or its WAIT dropped), a read of a
// freed region, a COPY_IN before its layer's UPDATE (moved, or its WAIT
// dropped), a COPY_OUT after its NORM, two unordered adds into the same
// gradients, a WAIT before its RECORD, an event recorded twice or never, an
// engine out of range, a restored matmul output freed before the RUN that
// skips matmuls, a dropped SAVE.
//
// Sharded plans (2 and 4 ranks, every remat mode and baseline policy; f32:
// the bf16 ones pass mtc's and mtrun's verifier in dist_sharded_*_bf16) pass; refused: an all-gather dropped (a RUN
// reads the rank's shard as weights), the comm engine's WAIT for the shard's copy-in dropped, the copy-out's WAIT for
// the reduce-scatter dropped (a COPY_OUT reads gradients not yet summed), the compute engine's WAIT before reusing the
// gradient staging dropped, and a collective on another engine than the others.
//
// The optimizer's placement (Plan.opt_device): refused on a cpu target's plan, in a sharded plan and on a device
// 1 byte too small for it; passed where it fits.
//
// usage: test_verify EXAMPLES_DIR (the profiles are in EXAMPLES_DIR/../schedules)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/io.h"
#include "common/scratch.h"
#include "compiler/schedule/schedule.h"
#include "common/verify.h"
#include "compiler/compile.h"
#include "tests/check.h"

static int verified; // plans verified
static char examples[4096], schedules[4096];

// The graph of a model, with its layer count replaced when layers > 0.
static Graph *load_graph(const char *model, int layers, Arena *a) {
    char path[8192], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/%s.mt", examples, model);
    if (io_read_file(path, &text, &len) != 0) return NULL;
    char *L = layers > 0 ? strstr(text, "L = ") : NULL; // "L = 2  # layers" in the tiny examples
    if (L) L[4] = (char)('0' + layers);
    char *kept = arena_alloc(a, len + 1); // the graph's names point into the source
    if (!kept) return NULL;
    memcpy(kept, text, len + 1);
    free(text);
    Source *src = arena_alloc(a, sizeof *src);
    if (!src) return NULL;
    *src = (Source){.path = model, .text = kept, .len = len};
    Diag d = {.src = src, .sink = stderr};
    Model *m = dsl_parse(src, a, &d);
    return m ? compile_lower(m, NULL, 1, NULL, a, &d) : NULL; // (the one compile path's graph)
}

static int load_target(const char *name, Target *t) {
    char path[8192], err[1024];
    snprintf(path, sizeof path, "%s/%s.target", schedules, name);
    if (target_load(path, t, err, sizeof err) == 0) return 0;
    FAIL("%s", err);
    return -1;
}

// Verifies p, expecting it to pass; returns the CPU seconds it took.
static double expect_ok(const Plan *p, const char *what) {
    char err[2048];
    clock_t t0 = clock();
    int rc = plan_verify(p, err, sizeof err);
    double s = (double)(clock() - t0) / CLOCKS_PER_SEC;
    verified++;
    if (rc != 0) { FAIL("%s (%s): %s", what, p->schedule ? p->schedule : "?", err); }
    return s;
}

// ---------------------------------------------------------------- mutations

// A copy of p whose train stream and block offsets the test may change.
typedef struct Mut {
    Plan p;
    Instr *ins;     // (cap)
    int64_t *block; // the block's node offsets, every frame
} Mut;

static void mut_init(Mut *m, const Plan *p) {
    m->p = *p;
    m->ins = malloc((size_t)(p->ntrain + 8) * sizeof(Instr));
    memcpy(m->ins, p->train, (size_t)p->ntrain * sizeof(Instr));
    size_t nb = (size_t)p->graph->parts[PART_BLOCK].nodes.n * (size_t)(p->nframes > 1 ? p->nframes : 1);
    m->block = malloc(nb * sizeof(int64_t));
    memcpy(m->block, p->node_offset[PART_BLOCK], nb * sizeof(int64_t));
    m->p.train = m->ins;
    m->p.node_offset[PART_BLOCK] = m->block;
}

static void mut_free(Mut *m) {
    free(m->ins);
    free(m->block);
}

// The index of the nth (0-based) instruction of kind (engine, layer: -2 any).
static int find(const Plan *p, int kind, int engine, int layer, int nth) {
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        if (in->kind == kind && (engine == -2 || in->engine == engine) && (layer == -2 || in->layer == layer) &&
            nth-- == 0)
            return i;
    }
    return -1;
}

// The RUN of the block for layer whose nodes start at `from`, nth of them.
static int find_run(const Plan *p, int layer, int from, int nth) {
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        if (in->kind == INS_RUN && in->part == PART_BLOCK && in->layer == layer && in->from == from && nth-- == 0)
            return i;
    }
    return -1;
}

// The RECORD of event ev.
static int record_of(const Plan *p, int ev) {
    for (int i = 0; i < p->ntrain; i++)
        if (p->train[i].kind == INS_RECORD && p->train[i].event == ev) return i;
    return -1;
}

// The WAIT on `engine` nearest before instruction i whose event is recorded
// on `from` (-2: any engine).
static int wait_before(const Plan *p, int i, int engine, int from) {
    for (int k = i - 1; k >= 0; k--) {
        const Instr *in = &p->train[k];
        if (in->kind != INS_WAIT || in->engine != engine) continue;
        int r = record_of(p, in->event);
        if (r >= 0 && (from == -2 || p->train[r].engine == from)) return k;
    }
    return -1;
}

static void drop(Plan *p, int i) {
    memmove(&p->train[i], &p->train[i + 1], (size_t)(p->ntrain - i - 1) * sizeof(Instr));
    p->ntrain--;
}

static void insert(Plan *p, int at, Instr in) { // the array has room for 8 more
    memmove(&p->train[at + 1], &p->train[at], (size_t)(p->ntrain - at) * sizeof(Instr));
    p->train[at] = in;
    p->ntrain++;
}

// Moves instruction from to index to (before what was there).
static void move(Plan *p, int from, int to) {
    Instr saved = p->train[from];
    drop(p, from);
    insert(p, to > from ? to - 1 : to, saved);
}

// Every phrase (up to 3, NULL-terminated) must be in the message, and no
// "(null)" (a subject not named).
static void expect_refused(const Plan *p, const char *what, const char *const *phrases) {
    char err[2048] = "";
    if (plan_verify(p, err, sizeof err) == 0) {
        FAIL("%s was accepted", what);
        return;
    }
    if (strstr(err, "(null)")) { // a message raised before its subject was named
        FAIL("%s: the message names a null subject:\n  %s", what, err);
        return;
    }
    for (int k = 0; phrases[k]; k++)
        if (!strstr(err, phrases[k])) {
            FAIL("%s: the message lacks \"%s\":\n  %s", what, phrases[k], err);
            return;
        }
    printf("ok   %s: %s\n", what, err);
}

#define PHRASES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void not_applicable(const char *what) {
    FAIL("%s: the plan has no such instructions any more (adjust the test)", what);
}

// The first block node of the forward with op (its id), or -1.
static int first_op(const Part *block, OpKind op) {
    for (int i = 0; i < block->nfwd; i++)
        if (((const Node *)block->nodes.items[i])->op == op) return i;
    return -1;
}

// Mutations of p: llama-tiny with 4 layers, 2 slots, layer recompute,
// checkpoints on the device; layers 0 and 1 are recomputed in backward,
// layers 2 and 3 still intact in their frames.
static void mutations(const Plan *base) {
    const Part *block = &base->graph->parts[PART_BLOCK];
    for (int k = 0; k < 14; k++) {
        Mut m;
        mut_init(&m, base);
        Plan *p = &m.p;
        switch (k) {
        case 0: { // (1) the compute engine no longer waits for layer 0's weights before its recompute
            int run = find_run(p, 0, 0, 1), w = run >= 0 ? wait_before(p, run, ENG_COMPUTE, ENG_COPY_IN) : -1;
            if (w < 0) {
                not_applicable("a dropped event");
                break;
            }
            drop(p, w);
            expect_refused(p, "a dropped event (compute's WAIT for a weight copy)",
                           PHRASES("instruction", "copy_in on copy-in, layer 0", "no event orders"));
            break;
        }
        case 1: { // (2) the first matmul's output moved onto the norm it reads, which later matmuls read too
            int norm = first_op(block, OP_RMSNORM), mm = first_op(block, OP_MATMUL);
            if (norm < 0 || mm < 0) {
                not_applicable("an overlapping arena region");
                break;
            }
            m.block[mm] = m.block[norm] + 64;
            expect_refused(p, "an overlapping arena region", PHRASES("instruction", "holds block %", "run block"));
            break;
        }
        case 2: { // (3) layer 2's weights copied into frame 0 before layer 0's forward reads the slot
            int in2 = find(p, INS_COPY_IN, ENG_COPY_IN, 2, 0), run0 = find_run(p, 0, 0, 0);
            int w = in2 >= 0 ? wait_before(p, in2, ENG_COPY_IN, ENG_HOST) : -1; // for layer 2's update: comes along
            if (w < 0 || run0 < 0 || run0 > w) {
                not_applicable("a too-early weight overwrite");
                break;
            }
            move(p, w, run0);
            move(p, in2, run0 + 1);
            expect_refused(p, "a too-early weight overwrite (moved)",
                           PHRASES("layer 0's weights", "holds layer 2's weights", "copy_in on copy-in, layer 2"));
            break;
        }
        case 3: { // (3) the same, by dropping the copy-in engine's WAIT for layer 0's forward
            int in2 = find(p, INS_COPY_IN, ENG_COPY_IN, 2, 0),
                w = in2 >= 0 ? wait_before(p, in2, ENG_COPY_IN, ENG_COMPUTE) : -1;
            if (w < 0) {
                not_applicable("a too-early weight overwrite");
                break;
            }
            drop(p, w);
            expect_refused(p, "a too-early weight overwrite (its WAIT dropped)",
                           PHRASES("copy_in on copy-in, layer 2", "overwrites", "no event orders"));
            break;
        }
        case 4: { // (4) the first norm's output of layer 3 freed before its backward reads it
            int bwd = find_run(p, 3, block->nfwd, 0), norm = first_op(block, OP_RMSNORM);
            if (bwd < 0 || norm < 0) {
                not_applicable("a read of a freed region");
                break;
            }
            const Node *n = block->nodes.items[norm];
            int frame = p->train[bwd].frame;
            insert(p, bwd,
                   (Instr){.kind = INS_FREE,
                           .engine = ENG_COMPUTE,
                           .layer = -1,
                           .event = -1,
                           .dst = plan_offsets(p, PART_BLOCK, frame)[norm],
                           .bytes = shape_numel(&n->shape) * 4});
            expect_refused(p, "a read of a freed region",
                           PHRASES("freed by instruction", "free on compute", "run block"));
            break;
        }
        case 5: { // (5) layer 1's weights copied in before the host updates them
            int u = find(p, INS_UPDATE, -2, 1, 0), in1 = find(p, INS_COPY_IN, -2, 1, 0);
            if (u < 0 || in1 < 0) {
                not_applicable("a COPY_IN before its UPDATE");
                break;
            }
            move(p, u, in1 + 1);
            expect_refused(p, "a COPY_IN before its UPDATE (moved)",
                           PHRASES("copy_in on copy-in, layer 1", "before", "update on host, layer 1"));
            break;
        }
        case 6: { // (5) the same, by dropping the copy-in engine's WAIT for the update
            int in1 = find(p, INS_COPY_IN, -2, 1, 0), w = in1 >= 0 ? wait_before(p, in1, ENG_COPY_IN, ENG_HOST) : -1;
            if (w < 0) {
                not_applicable("a COPY_IN before its UPDATE");
                break;
            }
            drop(p, w);
            expect_refused(p, "a COPY_IN before its UPDATE (its WAIT dropped)",
                           PHRASES("copy_in on copy-in, layer 1", "update on host, layer 1", "no event orders"));
            break;
        }
        case 7: { // layer 3's norm before its gradients are out
            int nrm = find(p, INS_NORM, -2, 3, 0), out = find(p, INS_COPY_OUT, -2, 3, 0);
            if (nrm < 0 || out < 0) {
                not_applicable("a NORM before its COPY_OUTs");
                break;
            }
            move(p, nrm, out);
            expect_refused(p, "a NORM before its COPY_OUTs",
                           PHRASES("copy_out on copy-out, layer 3", "norm on host, layer 3"));
            break;
        }
        case 8: { // a second add into layer 3's gradients, on compute, unordered with the copy-out engine's
            int out = find(p, INS_COPY_OUT, -2, 3, 0);
            if (out < 0) {
                not_applicable("two unordered COPY_OUTs");
                break;
            }
            Instr dup = p->train[out];
            dup.engine = ENG_COMPUTE;
            insert(p, out + 1, dup);
            expect_refused(p, "two unordered COPY_OUTs into the same gradients",
                           PHRASES("host gradient elements", "no event orders the two writes", "copy_out on compute"));
            break;
        }
        case 9: { // a WAIT before its RECORD
            int w = find(p, INS_WAIT, ENG_COMPUTE, -2, 2), r = w >= 0 ? record_of(p, p->train[w].event) : -1;
            if (r < 0) {
                not_applicable("a WAIT before its RECORD");
                break;
            }
            move(p, r, w + 1);
            expect_refused(p, "a WAIT before its RECORD", PHRASES("instruction", "recorded later"));
            break;
        }
        case 10: { // an event recorded twice
            int r = find(p, INS_RECORD, -2, -2, 3);
            if (r < 0) {
                not_applicable("an event recorded twice");
                break;
            }
            insert(p, r + 1, p->train[r]);
            expect_refused(p, "an event recorded twice", PHRASES("instruction", "repeats"));
            break;
        }
        case 11: // an engine out of range
            p->train[p->ntrain / 2].engine = ENG_COUNT;
            expect_refused(p, "an engine out of range", PHRASES("instruction", "out of range"));
            break;
        case 12: { // a WAIT on an event no one records
            int w = find(p, INS_WAIT, -2, -2, 0);
            if (w < 0) {
                not_applicable("a WAIT for an event never recorded");
                break;
            }
            drop(p, record_of(p, p->train[w].event));
            expect_refused(p, "a WAIT for an event never recorded", PHRASES("instruction", "no instruction records"));
            break;
        }
        case 13: { // the kind table says layer 1 is a second block kind; its RUNs are still the first kind's block
            Graph g2 = *p->graph;
            uint8_t kinds[64] = {0};
            if (g2.layers < 2 || g2.layers > 64) {
                not_applicable("a RUN of another kind's block");
                break;
            }
            kinds[1] = 1, g2.nkinds = 2, g2.layer_kind = kinds;
            p->graph = &g2;
            p->host_kind[1] = p->host_kind[0]; // the same segments (layer_base)
            expect_refused(p, "a RUN of another kind's block",
                           PHRASES("layer 1", "of block kind 1, whose part is block1"));
            break;
        }
        }
        mut_free(&m);
    }
}

// Selective recomputation: a restored matmul output freed before the RUN
// that skips the matmuls reads it. Offload: a dropped SAVE leaves the
// LOAD nothing to bring back.
static void mutations_remat(const Plan *sel, const Plan *off) {
    const Part *block = &sel->graph->parts[PART_BLOCK];
    Mut m;
    mut_init(&m, sel);
    Plan *p = &m.p;
    int run = -1, mm = first_op(block, OP_MATMUL);
    for (int i = 0; i < p->ntrain && run < 0; i++)
        if (p->train[i].kind == INS_RUN && (p->train[i].flags & RUN_SKIP_HEAVY)) run = i;
    if (run < 0 || mm < 0) not_applicable("a freed restored matmul output");
    else {
        const Node *n = block->nodes.items[mm];
        insert(p, run,
               (Instr){.kind = INS_FREE,
                       .engine = ENG_COMPUTE,
                       .layer = -1,
                       .event = -1,
                       .dst = plan_offsets(p, PART_BLOCK, p->train[run].frame)[mm],
                       .bytes = shape_numel(&n->shape) * 4});
        expect_refused(p, "a freed restored matmul output", PHRASES("skipping matmuls", "the restored %", "freed by"));
    }
    mut_free(&m);
    mut_init(&m, off);
    p = &m.p;
    int save = find(p, INS_SAVE, -2, -2, 0);
    if (save < 0) not_applicable("a dropped SAVE");
    else {
        drop(p, save);
        expect_refused(p, "a dropped SAVE", PHRASES("instruction", "holds nothing", "load on"));
    }
    mut_free(&m);
}

// Mutations of a sharded plan (llama-tiny, 4 layers, 2 ranks, 2 slots,
// layer recompute).
static void mutations_sharded(const Plan *base) {
    for (int k = 0; k < 5; k++) {
        Mut m;
        mut_init(&m, base);
        Plan *p = &m.p;
        int at;
        switch (k) {
        case 0: // layer 1's all-gather gone: its RUN reads this rank's shard as the layer's weights
            if ((at = find(p, INS_ALLGATHER, -2, 1, 0)) < 0) {
                not_applicable("a dropped all-gather");
                break;
            }
            drop(p, at);
            expect_refused(p, "a dropped all-gather", PHRASES("run block", "shard of layer 1's weights, not gathered"));
            break;
        case 1: // the all-gather no longer waits for the shard's copy-in
            at = find(p, INS_ALLGATHER, -2, 1, 0);
            if (at < 0 || (at = wait_before(p, at, ENG_COMM, ENG_COPY_IN)) < 0) {
                not_applicable("the all-gather's WAIT");
                break;
            }
            drop(p, at);
            expect_refused(p, "an all-gather unordered after its copy-in",
                           PHRASES("allgather on comm", "copy_in of the shard"));
            break;
        case 2: // the COPY_OUTs no longer wait for the reduce-scatter
            at = find(p, INS_COPY_OUT, -2, 2, 0);
            if (at < 0 || (at = wait_before(p, at, ENG_COPY_OUT, ENG_COMM)) < 0) {
                not_applicable("the copy-out's WAIT");
                break;
            }
            drop(p, at);
            expect_refused(p, "a COPY_OUT unordered after the reduce-scatter",
                           PHRASES("copy_out of the shard", "reduce_scatter"));
            break;
        case 3: { // layer 2's gradients into the staging before layer 3's COPY_OUTs read it
            int copy = find(p, INS_REDUCE_SCATTER, -2, 2, 0);
            while (copy > 0 && p->train[copy].kind != INS_COPY) copy--;
            if (copy < 0 || (at = wait_before(p, copy, ENG_COMPUTE, ENG_COPY_OUT)) < 0) {
                not_applicable("the staging's WAIT");
                break;
            }
            drop(p, at);
            expect_refused(p, "the gradient staging overwritten before its COPY_OUTs",
                           PHRASES("copy on compute", "copy_out of the shard"));
            break;
        }
        case 4: // one collective on the compute engine: another order of collectives is possible
            if ((at = find(p, INS_REDUCE_SCATTER, -2, 0, 0)) < 0) {
                not_applicable("a reduce-scatter");
                break;
            }
            p->train[at].engine = ENG_COMPUTE;
            expect_refused(p, "a collective on another engine", PHRASES("one engine issues every collective"));
            break;
        }
        mut_free(&m);
    }
}

// The buffers' balance rules (Param.balance_mask): tests/models/moe-router-tiny
// (bias_update on its routing bias) passes; layer 1's report of the
// rule's mask dropped, or the rule pointed at another node, is refused.
static void balance_rules(const Target *tiny) {
    Arena a = {0};
    char err[1024];
    Graph *g = load_graph("../tests/models/moe-router-tiny", 0, &a);
    SchedChoice c = {.policy = POLICY_MT, .remat = REMAT_LAYER, .slots = 1};
    Plan *p = g ? schedule_build(g, tiny, &c, &a, err, sizeof err) : NULL;
    Param *prm = NULL;
    for (int i = 0; g && i < g->params.n; i++)
        if (((Param *)g->params.items[i])->balance_mask) prm = g->params.items[i];
    if (!CHECK(p && prm, "moe-router-tiny with a balance rule: %s", p ? "no rule in its graph" : err)) {
        arena_free(&a);
        return;
    }
    expect_ok(p, "moe-router-tiny with a balance rule");
    Mut m;
    mut_init(&m, p);
    int at = -1;
    for (int i = 0; i < m.p.ntrain; i++)
        if (m.p.train[i].kind == INS_STAT && m.p.train[i].from == prm->balance_mask->id && m.p.train[i].layer == 1)
            at = i;
    if (at < 0) not_applicable("the balance rule's INS_STAT of layer 1");
    else {
        drop(&m.p, at);
        expect_refused(&m.p, "a balance rule whose loads a layer does not report",
                       PHRASES("balance rule", "reports layer 1's loads 0 times"));
    }
    mut_free(&m);
    const Node *mask = prm->balance_mask;
    prm->balance_mask = mask->in[0]; // what the router chose by, not its mask
    expect_refused(p, "a balance rule on another node", PHRASES("balance rule", "reported top_k mask"));
    prm->balance_mask = mask;
    arena_free(&a);
}

// ---------------------------------------------------------------- plans that pass

// The optimizer's placement (Plan.opt_device): every segment on the device
// of base (a cpu target's plan) is refused; as if for a GPU (kernel scratch)
// it passes with room for it and is refused with 1 byte too little, naming
// the bytes; in a sharded plan it is refused.
static void placements(const Plan *base, const Plan *sharded) {
    uint8_t all[256];
    if (!CHECK(plan_segment_count(base) <= 256 && plan_segment_count(sharded) <= 256, "too many segments")) return;
    memset(all, 1, sizeof all);
    Mut m;
    mut_init(&m, base);
    m.p.opt_device = all;
    expect_refused(&m.p, "the optimizer on the device of a cpu target",
                   PHRASES("plan verifier: optimizer placement: ", "the tail's globals", "cpu target"));
    m.p.scratch_bytes = 256; // as a GPU target's plan
    m.p.device_limit = plan_device_bytes(&m.p);
    char err[2048] = "";
    CHECK(plan_verify(&m.p, err, sizeof err) == 0, "the optimizer on a device it fits: %s", err);
    if (!err[0])
        printf("ok   the optimizer on a device it fits (%lld bytes of it) passes\n",
               (long long)plan_opt_device_bytes(&m.p));
    m.p.device_limit--;
    expect_refused(&m.p, "the optimizer on a device 1 byte too small",
                   PHRASES("plan verifier: optimizer placement: ", "segments", "device memory"));
    mut_free(&m);
    mut_init(&m, sharded);
    m.p.opt_device = all;
    m.p.scratch_bytes = 256;
    m.p.device_limit = 0;
    expect_refused(&m.p, "the optimizer on the device in a sharded plan",
                   PHRASES("plan verifier: optimizer placement: ", "sharded plan", "slice"));
    mut_free(&m);
}

static const char *const POLICIES[] = {"mt", "sequential", "megatrain", "zero3-offload"};

// The search's plan for (policy, remat) on a target; even one that does not
// fit must be a correct plan.
static double check_search(Graph *g, const Target *t, Policy pol, Remat rm, const char *model, Arena *a) {
    SchedRequest req = {.policy = pol, .remat = rm, .slots = 0, .resident = -1};
    SchedResult r;
    char err[1024], what[256];
    snprintf(what, sizeof what, "%s on %s, policy %s, remat %s", model, t->name, POLICIES[pol], remat_name(rm));
    if (schedule_search(g, t, &req, a, &r, err, sizeof err) != 0) {
        FAIL("%s: %s", what, err);
        return 0;
    }
    if (!r.plan) {
        FAIL("%s: no plan at all", what);
        return 0;
    }
    return expect_ok(r.plan, what);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    snprintf(examples, sizeof examples, "%s", argv[1]);
    snprintf(schedules, sizeof schedules, "%s/../schedules", argv[1]);

    // fixed choices of a 4-layer llama-tiny on the 1-layer target
    Arena a = {0};
    Target tiny;
    Graph *g = load_graph("llama-tiny", 4, &a);
    if (!g || load_target("tiny-1layer", &tiny) != 0) {
        printf("FAIL: llama-tiny with 4 layers does not compile\n");
        return 1;
    }
    char err[1024], what[256];
    Plan *base = NULL, *sel = NULL, *off = NULL;
    for (int rm = REMAT_LAYER; rm <= REMAT_OFFLOAD; rm++)
        for (int slots = 1; slots <= 3; slots++)
            for (int resident = 0; resident <= 1; resident++)
                for (int host = 0; host <= 1; host++) {
                    SchedChoice c = {.policy = POLICY_MT,
                                     .remat = (Remat)rm,
                                     .slots = slots,
                                     .resident = resident,
                                     .ckpt_host = host || rm == REMAT_OFFLOAD};
                    Plan *p = schedule_build(g, &tiny, &c, &a, err, sizeof err);
                    snprintf(what, sizeof what,
                             "llama-tiny, 4 layers, remat %s, %d slots, %d resident, checkpoints on %s",
                             remat_name((Remat)rm), slots, resident, c.ckpt_host ? "host" : "device");
                    if (!p) {
                        FAIL("%s: %s", what, err);
                        continue;
                    }
                    expect_ok(p, what);
                    if (slots == 2 && resident == 0 && host == 0 && rm == REMAT_LAYER) base = p;
                    if (slots == 2 && resident == 0 && host == 0 && rm == REMAT_SELECTIVE) sel = p;
                    if (slots == 2 && resident == 0 && rm == REMAT_OFFLOAD) off = p;
                }
    // mixed plans: K of the leaving layers offloaded, the rest recomputed
    for (int rm = REMAT_LAYER; rm <= REMAT_SELECTIVE; rm++)
        for (int host = 0; host <= 1; host++)
            for (int64_t k = 1; k <= 3; k++) { // 4 layers, 1 slot, none resident: 3 leave the device
                SchedChoice c = {.policy = POLICY_MT,
                                 .remat = (Remat)rm,
                                 .slots = 1,
                                 .ckpt_host = host,
                                 .offloaded = k};
                Plan *p = schedule_build(g, &tiny, &c, &a, err, sizeof err);
                snprintf(what, sizeof what, "llama-tiny, 4 layers, remat %s with %lld offloaded, checkpoints on %s",
                         remat_name((Remat)rm), (long long)k, host ? "host" : "device");
                if (!p) {
                    FAIL("%s: %s", what, err);
                } else expect_ok(p, what);
            }
    // sharded: 2 and 4 ranks, each remat mode and baseline policy
    Plan *sharded = NULL;
    for (int ranks = 2; ranks <= 4; ranks += 2)
        for (int rm = REMAT_LAYER; rm <= REMAT_OFFLOAD; rm++)
            for (int pol = 0; pol < POLICY_COUNT; pol++) {
                if (pol != POLICY_MT && rm != REMAT_LAYER) continue;
                SchedChoice c = {.policy = (Policy)pol,
                                 .remat = (Remat)rm,
                                 .slots = pol == POLICY_SEQUENTIAL ? 1 : 2,
                                 .ckpt_host = rm == REMAT_OFFLOAD,
                                 .ranks = ranks,
                                 .sharded = 1};
                Plan *p = schedule_build(g, &tiny, &c, &a, err, sizeof err);
                snprintf(what, sizeof what, "llama-tiny, 4 layers, %d sharded ranks, policy %s, remat %s", ranks,
                         POLICIES[pol], remat_name((Remat)rm));
                if (!p || !p->sharded) {
                    FAIL("%s: %s", what, p ? "not sharded" : err);
                    continue;
                }
                expect_ok(p, what);
                if (ranks == 2 && rm == REMAT_LAYER && pol == POLICY_MT) sharded = p;
            }
    if (sharded && plan_verify(sharded, err, sizeof err) == 0) mutations_sharded(sharded);
    else { FAIL("no sharded mutations: the plan they start from is refused"); }
    if (base && plan_verify(base, err, sizeof err) == 0) mutations(base);
    if (base && sharded) placements(base, sharded);
    else { FAIL("no mutations: the plan they start from is refused"); }
    balance_rules(&tiny);
    if (sel && off && plan_verify(sel, err, sizeof err) == 0 && plan_verify(off, err, sizeof err) == 0)
        mutations_remat(sel, off);
    else { FAIL("no selective or offload mutations: the plans they start from are refused"); }
    arena_free(&a);

    // the search's plans: tiny examples everywhere, the large ones on the real targets
    static const char *const TINY[] = {"gpt2-tiny", "llama-tiny"}, *const LARGE[] = {"gpt2", "llama3-8b", "qwen2-7b",
                                                                                     "llama3-70b", "llama3-405b"};
    static const char *const TINY_T[] = {"tiny-1layer", "tiny-2layers", "h200", "rtx4090"},
                             *const LARGE_T[] = {"h200", "gh200", "rtx4090"};
    for (size_t i = 0; i < 2; i++)
        for (size_t j = 0; j < 4; j++) {
            Arena b = {0};
            Target t;
            Graph *tg = load_graph(TINY[i], 0, &b);
            if (!tg) {
                FAIL("%s does not compile", TINY[i]);
            } else if (load_target(TINY_T[j], &t) == 0) {
                for (int rm = REMAT_AUTO; rm < REMAT_COUNT; rm++)
                    check_search(tg, &t, POLICY_MT, (Remat)rm, TINY[i], &b);
                check_search(tg, &t, POLICY_SEQUENTIAL, REMAT_AUTO, TINY[i], &b);
                check_search(tg, &t, POLICY_MEGATRAIN, REMAT_AUTO, TINY[i], &b);
            }
            arena_free(&b);
        }
    double slowest = 0;
    for (size_t i = 0; i < 5; i++)
        for (size_t j = 0; j < 3; j++) {
            Arena b = {0};
            Target t;
            Graph *lg = load_graph(LARGE[i], 0, &b);
            if (!lg) {
                FAIL("%s does not compile", LARGE[i]);
            } else if (load_target(LARGE_T[j], &t) == 0) {
                for (int pol = 0; pol < POLICY_COUNT; pol++) {
                    double s = check_search(lg, &t, (Policy)pol, REMAT_AUTO, LARGE[i], &b);
                    if (s > slowest) slowest = s;
                    if (!strcmp(LARGE[i], "llama3-405b") && s > 1.0) {
                        FAIL("llama3-405b on %s (%s) took %.3f s to verify", t.name, POLICIES[pol], s);
                    }
                }
            }
            arena_free(&b);
        }
    printf("%d plans verified; the slowest large one took %.3f s of CPU\n", verified, slowest);
    printf("%s: %d failures\n", check_failures ? "FAIL" : "ok", check_failures);
    return check_summary("test_verify");
}
