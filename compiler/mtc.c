// mtc: the mt compiler driver. Reads a model, runs the stages in order and
// prints what was asked. Exit status: 0 success, 1 a user error in the
// model or its files, 2 a usage error.
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/graph.h"
#include "common/io.h"
#include "compiler/compile.h"
#include "compiler/fuse/fuse.h"
#include "compiler/report/explain.h"
#include "compiler/report/explore.h"
#include "compiler/report/summary.h"
#include "compiler/schedule/scaleout.h"
#include "compiler/schedule/schedule.h"

#ifndef MT_VERSION
#define MT_VERSION "0.0.0"
#endif

static const char USAGE[] =
    "usage: mtc MODEL.mt [options]\n"
    "\n"
    "Compiles a model description into a training plan for mtrun.\n"
    "\n"
    "options:\n"
    "  -o PLAN          write the training plan for mtrun\n"
    "  --target PROFILE target machine profile: a file, or NAME for schedules/NAME.target\n"
    "                   (default: h200)\n"
    "  --remat MODE     what streamed layers keep for the backward: none, layer, selective,\n"
    "                   offload, mixed (per layer: offload some, recompute the rest), or auto\n"
    "                   (default: the fastest that fits)\n"
    "  --offload-layers K  a mixed plan: K of the layers that leave the device offload everything,\n"
    "                   spread evenly; the rest recompute as --remat layer or selective says\n"
    "  --selective-layers S  a mixed plan: S of the layers that leave the device keep their input\n"
    "                   and matmul and attention outputs in host memory and recompute the rest;\n"
    "                   with --offload-layers, K + S layers are picked (default: both chosen\n"
    "                   by the search, exactly)\n"
    "  --policy NAME    mt (default), or a baseline: sequential (no overlap), megatrain\n"
    "                   (weights cross three times a step, optimizer after the backward),\n"
    "                   zero3-offload (DeepSpeed ZeRO-3 with CPU offload: weights fetched for the\n"
    "                   forward and again for the backward, optimizer after the backward)\n"
    "  --slots N        frames (weight slots) streamed layers rotate through, 1 to 3 (default: chosen)\n"
    "  --resident N     layers at the forward/backward turn kept on the device (default: the most that fit)\n"
    "  --checkpoints AT where streamed layers' checkpoints live: device or host (default: chosen)\n"
    "  --explain        every policy's predicted step time on the target against the lower bound\n"
    "  --trace FILE     the chosen plan's predicted timeline as Chrome trace-event JSON (only the\n"
    "                   file: the table is --explain's)\n"
    "  --explore        every schedule searched at batch 1, 2, 4, ... while one fits: each batch's\n"
    "                   Pareto frontier of tokens/s against device and host memory, and each\n"
    "                   policy's best tokens/s by batch\n"
    "  --plot FILE.svg  with --explore, draw both as an SVG picture\n"
    "  --batch N|auto|max  batch size (overrides the train section); auto: the most predicted\n"
    "                   tokens a second; max: the largest that fits (with --ranks and --shard auto, of\n"
    "                   sharded plans, the layout then chosen at that batch)\n"
    "  --tile N|auto    split the row-local end of the block and the tail into N chunks of the\n"
    "                   sequence (long sequences); auto (default): the fastest that fits\n"
    "  --seq N          sequence length (overrides the train section)\n"
    "  --ranks N        a plan for one rank of a data-parallel run of N processes (mpirun -np N mtrun\n"
    "                   PLAN): each trains on its own --batch rows of every global batch of N x batch\n"
    "                   rows, the gradients summed over the ranks (default 1: one process); with\n"
    "                   --explain, replicated, sharded and MegaTrain's way side by side for N ranks\n"
    "  --shard on|off|auto  with --ranks: on, each rank holds a 1/N shard of the host store (master,\n"
    "                   moments, gradients), the weights all-gathered and the gradients reduce-scattered\n"
    "                   layer by layer on the devices; off, every rank holds all of it (replicated);\n"
    "                   auto (default): the one the scale-out model predicts faster that fits (--explain\n"
    "                   says why)\n"
    "  --device-optimizer none|all|K|auto  where the fp32 master, Adam moments and AdamW of each\n"
    "                   layer live: none (default), the host store; all, the device, across steps (no\n"
    "                   weights in or gradients out over the link; the bits are the same); K, the\n"
    "                   globals and the first K layers; auto, the most that fit the device memory the\n"
    "                   plan leaves, when that predicts a shorter step (GPU targets; one process)\n"
    "  --dtype D        compute dtype, f32 or bf16 (overrides the train section's dtype)\n"
    "  --freeze PATTERN parameters whose DSL or checkpoint name matches PATTERN (a shell glob, as\n"
    "                   'model.layers.{i}.mlp.*') are frozen: no gradient, no optimizer state\n"
    "  --train PATTERN  those it matches are trained again; --freeze and --train apply in order\n"
    "  --lora rank=R,alpha=A,targets=M1,M2...  LoRA adapters on the weights of the modules named\n"
    "                   (as q_proj,v_proj): A [R, in] and B [out, R] trained, scaled by A/R, the\n"
    "                   base weights frozen (alpha default: R)\n"
    "  --summary        print parameter counts per part and the host memory needed\n"
    "  --json           print the summary (or --explain) as one JSON object\n"
    "  --dump-graph     print the layer graph, one node a line\n"
    "  --dump-kernels[=full]  print each part's fused kernels and their counts (full: their statements)\n"
    "  --emit-cuda FILE write the generated CUDA C of every kernel (for the target's sm_XX; sm_90\n"
    "                   for a cpu target), as NVRTC compiles it into plans for GPU targets\n"
    "  --help           print this help\n"
    "  --version        print the version\n"
    "\n"
    "With no output option mtc checks the model and prints nothing on success.\n"
    "exit status: 0 success, 1 error in the model or a file, 2 usage error\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "mtc: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'mtc --help'.\n");
    return 2;
}

static int parse_count(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > (1LL << 40)) return -1;
    *out = v;
    return 0;
}

// --explore: every plan searched at batch 1, 2, 4, ... while one fits, for
// mt's policy and each baseline; prints each batch's Pareto frontier and,
// with plot_path, draws it. Returns 0, or 1 (reported; nothing fits at
// batch 1 is an error, nothing printed or drawn).
static int explore(const Model *m, const CompileRequest *req, const Target *t, const char *plot_path, int json,
                   Arena *a, Diag *d) {
    Exploration x = {.target = t->name};
    int rc = 1;
    char why[256] = ""; // why mt's plan at batch 1 does not fit
    for (int64_t b = 1; b <= ((int64_t)1 << 20); b *= 2) {
        int mt_fits = 0;
        for (int pol = 0; pol < POLICY_COUNT; pol++) {
            CompileRequest q = *req;
            q.stage = COMPILE_PLAN, q.sema.batch = b;
            if (pol != POLICY_MT) q.sched = (SchedRequest){.policy = (Policy)pol, .remat = REMAT_AUTO, .resident = -1};
            q.sched.seen = explore_seen;
            q.sched.seen_ctx = &x;
            Compiled c;
            if (compile_model(m, &q, a, d, &c) != 0) goto done;
            if (!c.best.plan) {
                fprintf(stderr, "mtc: error: %s\n", c.why);
                goto done;
            }
            x.model = c.g->model_name;
            if (pol == POLICY_MT) mt_fits = c.best.fits;
            if (pol == POLICY_MT && b == 1 && !c.best.fits) snprintf(why, sizeof why, "%s", c.best.why);
        }
        if (!mt_fits) break;
    }
    if (x.failed) {
        fprintf(stderr, "mtc: error: out of memory exploring\n");
        goto done;
    }
    int fits = 0;
    for (int i = 0; i < x.n; i++) fits |= x.pts[i].fits;
    if (!fits) { // an empty frontier and an empty picture would say nothing
        fprintf(stderr,
                "mtc: error: %s does not fit %s at any batch: no schedule of any policy fits at batch 1 (%s); "
                "nothing to explore%s\n",
                x.model ? x.model : "the model", t->name, why[0] ? why : "no plan",
                plot_path ? ", no plot written" : "");
        goto done;
    }
    explore_print(stdout, &x, json);
    char err[1024];
    if (plot_path && explore_svg(plot_path, &x, err, sizeof err) != 0) {
        fprintf(stderr, "mtc: error: %s\n", err);
        goto done;
    }
    rc = 0;
done:
    explore_free(&x);
    return rc;
}

// --explain: every remat mode under the mt policy, then the baselines; the
// chosen row is the user's policy and remat. With ranks, the scale-out
// strategies first: under --shard auto the rows are of the layout they
// choose, as the plan written is. The bounds from untiled, g's untiled
// graph, for the rows' layout. Prints the table (print), writes the chosen
// plan's trace (trace_path), or both. Returns 0, or 1 (reported).
static int explain(Graph *g, Graph *untiled, const Target *t, const SchedRequest *req, int print, int ranks, int json,
                   const char *trace_path, Arena *a) {
    enum { ROWS = REMAT_COUNT - 1 + POLICY_COUNT - 1 };
    SchedResult rows[ROWS];
    const char *names[ROWS];
    char err[1024];
    int n = 0, chosen = -1;
    ScaleOut so;                // --ranks N: the strategies side by side
    SchedRequest layout = *req; // the rows': sharded or replicated, as the plan is
    Bounds one, bounds;
    if (ranks > 1) {
        if (cost_bounds(untiled, t, 1, 0, &one) != 0) goto oom;
        if (scaleout_compare(g, t, ranks, 1, &one, a, &so, err, sizeof err) != 0) goto fail;
        // (neither fits under auto: no plan; the rows replicated, as without the comparison)
        if (layout.shard >= 0 || so.chosen >= 0) {
            if (layout.shard < 0) layout.shard = so.chosen == SCALE_SHARDED || so.chosen == SCALE_SHARDED_TIER;
            int spills = !so.rows[SCALE_SHARDED].fits && so.rows[SCALE_SHARDED_TIER].fits;
            so.plan = layout.shard <= 0 ? SCALE_REPLICATED : spills ? SCALE_SHARDED_TIER : SCALE_SHARDED;
        }
    }
    req = &layout;
    Target share; // a sharded plan's rows: one rank's share of its node
    const Target *node = t;
    t = compile_plan_target(t, req, &share);
    if (cost_bounds(untiled, t, req->ranks, req->ranks > 1 && req->shard > 0, &bounds) != 0) goto oom;
    const Bounds *b = &bounds;
    for (int rm = REMAT_NONE; rm < REMAT_COUNT; rm++, n++) {
        names[n] = remat_name((Remat)rm);
        SchedRequest q = *req;
        q.policy = POLICY_MT;
        q.remat = (Remat)rm;
        if (rm == REMAT_NONE) q.resident = -1;
        int picks = req->offloaded || req->host_selective;
        if (rm != REMAT_MIXED) q.offloaded = q.host_selective = 0; // picks ask for the mixed row
        else if (picks && (req->remat == REMAT_LAYER || req->remat == REMAT_SELECTIVE)) q.remat = req->remat;
        if (schedule_search(g, t, &q, a, &rows[n], err, sizeof err) != 0) goto fail;
        if (req->policy == POLICY_MT && rows[n].fits &&
            (picks                      ? rm == REMAT_MIXED
             : req->remat == REMAT_AUTO ? chosen < 0 || rows[n].cost.step_s < rows[chosen].cost.step_s
                                        : rm == (int)req->remat))
            chosen = n;
    }
    for (int pol = POLICY_SEQUENTIAL; pol < POLICY_COUNT; pol++, n++) {
        names[n] = policy_name((Policy)pol);
        SchedRequest q = {.policy = (Policy)pol, .remat = REMAT_AUTO, .resident = -1}; // (one GPU on the node)
        if (schedule_search(g, node, &q, a, &rows[n], err, sizeof err) != 0) goto fail;
        if (pol == (int)req->policy && rows[n].fits) chosen = n;
    }
    if (print) explain_print(stdout, g, t, b, rows, names, n, chosen, ranks > 1 ? &so : NULL, json);
    if (ranks > 1 && req->shard < 0 && so.chosen < 0) { // --shard auto, and neither layout fits the ranks
        fprintf(stderr, "mtc: error: %d ranks of %s on %s: %s%s\n", ranks, g->model_name, t->name, so.why_chosen,
                trace_path ? "; no trace written" : "");
        return 1;
    }
    if (chosen < 0) { // the table says why each row does not fit; the error gives the first such row's reason
        // the row asked for, or the first
        int asked = req->offloaded || req->host_selective ? (int)REMAT_MIXED : (int)req->remat;
        int row = req->policy != POLICY_MT   ? (int)REMAT_COUNT - 1 + (int)req->policy - (int)POLICY_SEQUENTIAL
                  : asked == (int)REMAT_AUTO ? 0
                                             : asked - (int)REMAT_NONE;
        const SchedResult *first = &rows[row];
        fprintf(stderr, "mtc: error: no schedule of %s fits %s with --policy %s --remat %s (%s: %s)%s\n", g->model_name,
                t->name, policy_name(req->policy), remat_name(req->remat), names[first - rows], first->why,
                trace_path ? "; no trace written" : "");
        return 1;
    }
    if (trace_path && explain_trace(trace_path, rows[chosen].plan, t, err, sizeof err) != 0) goto fail;
    return 0;
oom:
    snprintf(err, sizeof err, "out of memory");
fail:
    fprintf(stderr, "mtc: error: %s\n", err);
    return 1;
}

enum {
    OPT_TARGET = 256,
    OPT_BATCH,
    OPT_SEQ,
    OPT_SUMMARY,
    OPT_JSON,
    OPT_DUMP,
    OPT_EXPLAIN,
    OPT_TRACE,
    OPT_HELP,
    OPT_VERSION,
    OPT_REMAT,
    OPT_POLICY,
    OPT_SLOTS,
    OPT_RESIDENT,
    OPT_CKPT,
    OPT_TILE,
    OPT_KERNELS,
    OPT_EMIT_CUDA,
    OPT_DTYPE,
    OPT_EXPLORE,
    OPT_PLOT,
    OPT_OFFLOAD_LAYERS,
    OPT_SELECTIVE_LAYERS,
    OPT_RANKS,
    OPT_SHARD,
    OPT_DEVICE_OPT,
    OPT_FREEZE,
    OPT_TRAIN,
    OPT_LORA
};

static const struct option LONG_OPTIONS[] = {
    {"target", required_argument, 0, OPT_TARGET},
    {"batch", required_argument, 0, OPT_BATCH},
    {"seq", required_argument, 0, OPT_SEQ},
    {"summary", no_argument, 0, OPT_SUMMARY},
    {"json", no_argument, 0, OPT_JSON},
    {"dump-graph", no_argument, 0, OPT_DUMP},
    {"explain", no_argument, 0, OPT_EXPLAIN},
    {"trace", required_argument, 0, OPT_TRACE},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {"remat", required_argument, 0, OPT_REMAT},
    {"policy", required_argument, 0, OPT_POLICY},
    {"slots", required_argument, 0, OPT_SLOTS},
    {"resident", required_argument, 0, OPT_RESIDENT},
    {"checkpoints", required_argument, 0, OPT_CKPT},
    {"tile", required_argument, 0, OPT_TILE},
    {"dump-kernels", optional_argument, 0, OPT_KERNELS},
    {"emit-cuda", required_argument, 0, OPT_EMIT_CUDA},
    {"dtype", required_argument, 0, OPT_DTYPE},
    {"explore", no_argument, 0, OPT_EXPLORE},
    {"plot", required_argument, 0, OPT_PLOT},
    {"offload-layers", required_argument, 0, OPT_OFFLOAD_LAYERS},
    {"selective-layers", required_argument, 0, OPT_SELECTIVE_LAYERS},
    {"ranks", required_argument, 0, OPT_RANKS},
    {"shard", required_argument, 0, OPT_SHARD},
    {"device-optimizer", required_argument, 0, OPT_DEVICE_OPT},
    {"freeze", required_argument, 0, OPT_FREEZE},
    {"train", required_argument, 0, OPT_TRAIN},
    {"lora", required_argument, 0, OPT_LORA},
    {0, 0, 0, 0},
};

// What the command line asks.
typedef struct Args {
    const char *path; // the model file
    const char *out_path, *target, *trace_path, *cuda_path, *plot_path;
    int want_summary, want_json, want_dump, want_explain, want_explore;
    int want_kernels;  // --dump-kernels: 1, =full: 2
    CompileRequest cr; // batch (--batch auto: batch_search 1, max: 2), seq, dtype, tile and the schedule's options
    int64_t ranks;
    int shard; // --shard: 1 on, 0 off, -1 auto (the scale-out model's choice)
} Args;

// parse_option's and parse_args's answer when mtc goes on; else theirs is
// the exit status.
enum { ARGS_OK = -1 };

// --lora rank=R,alpha=A,targets=M1,M2,...: the names after targets= run to
// the next key. ARGS_OK, or 2 (reported).
static int parse_lora(AdapterOptions *o, char *spec) {
    char *end, *targets = NULL;
    int last_targets = 0;
    o->lora_alpha = 0;
    for (char *tok = strtok(spec, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq && last_targets) { // one more target: join it back on
            tok[-1] = ',';
            continue;
        }
        last_targets = 0;
        if (eq && !strncmp(tok, "rank=", 5)) {
            long long r = strtoll(eq + 1, &end, 10);
            if (*end || end == eq + 1 || r < 1 || r > 65536)
                return usage_error("--lora rank= needs a whole number from 1 to 65536, got '%s'", eq + 1);
            o->lora_rank = r;
        } else if (eq && !strncmp(tok, "alpha=", 6)) {
            o->lora_alpha = strtod(eq + 1, &end);
            if (*end || end == eq + 1 || !(o->lora_alpha > 0 && o->lora_alpha < 1e9))
                return usage_error("--lora alpha= needs a positive number, got '%s'", eq + 1);
        } else if (eq && !strncmp(tok, "targets=", 8) && eq[1]) {
            targets = eq + 1, last_targets = 1;
        } else {
            return usage_error("--lora takes rank=R,alpha=A,targets=M1,M2,... (as rank=4,alpha=8,targets=q_proj,"
                               "v_proj); '%s' is none of them",
                               tok);
        }
    }
    if (!o->lora_rank || !targets) return usage_error("%s", "--lora needs rank=R and targets=M1,M2,...");
    if (o->lora_alpha == 0) o->lora_alpha = (double)o->lora_rank; // peft's default alpha is 8 with r 8
    o->lora_targets = targets;
    return ARGS_OK;
}

// --freeze and --train: one more pattern, in order. ARGS_OK, or 2.
static int add_pattern(AdapterOptions *o, const char *pattern, int train) {
    AdapterPattern *p = realloc((void *)o->patterns, (size_t)(o->npatterns + 1) * sizeof *p);
    if (!p) return usage_error("%s", "out of memory");
    p[o->npatterns++] = (AdapterPattern){.pattern = pattern, .train = train};
    o->patterns = p;
    return ARGS_OK;
}

// The value of option c (getopt_long's, in optarg) into *a: ARGS_OK, 2 for
// a usage error (reported), or 0 after --help or --version.
static int parse_option(Args *a, int c, char **argv) {
    int64_t count;
    switch (c) {
    case 'o': a->out_path = optarg; break;
    case OPT_TARGET: a->target = optarg; break;
    case OPT_BATCH:
        a->cr.batch_search = strcmp(optarg, "auto") == 0 ? 1 : strcmp(optarg, "max") == 0 ? 2 : 0;
        if (!a->cr.batch_search && parse_count(optarg, &a->cr.sema.batch))
            return usage_error("--batch needs a positive integer, 'auto' or 'max', got '%s'", optarg);
        break;
    case OPT_REMAT: {
        int k = REMAT_COUNT;
        while (--k >= 0 && strcmp(optarg, remat_name((Remat)k)) != 0) {}
        if (k < 0) return usage_error("--remat takes none, layer, selective, offload, mixed or auto, not '%s'", optarg);
        a->cr.sched.remat = (Remat)k;
        break;
    }
    case OPT_POLICY: {
        int k = POLICY_COUNT;
        while (--k >= 0 && strcmp(optarg, policy_name((Policy)k)) != 0) {}
        if (k < 0) return usage_error("--policy takes mt, sequential, megatrain or zero3-offload, not '%s'", optarg);
        a->cr.sched.policy = (Policy)k;
        break;
    }
    case OPT_OFFLOAD_LAYERS:
    case OPT_SELECTIVE_LAYERS: {
        int offload = c == OPT_OFFLOAD_LAYERS;
        int64_t *k = offload ? &a->cr.sched.offloaded : &a->cr.sched.host_selective;
        if (*k) return usage_error("%s: given twice", offload ? "--offload-layers" : "--selective-layers");
        if (parse_count(optarg, k))
            return usage_error(offload ? "--offload-layers needs a positive number of layers, got '%s'"
                                       : "--selective-layers needs a positive number of layers, got '%s'",
                               optarg);
        break;
    }
    case OPT_SLOTS:
        if (parse_count(optarg, &count) || count > 3) return usage_error("--slots takes 1, 2 or 3, not '%s'", optarg);
        a->cr.sched.slots = (int)count;
        break;
    case OPT_TILE:
        if (strcmp(optarg, "auto") == 0) a->cr.tile = 0;
        else if (parse_count(optarg, &a->cr.tile))
            return usage_error("--tile needs a positive integer or 'auto', got '%s'", optarg);
        break;
    case OPT_CKPT:
        if (strcmp(optarg, "device") && strcmp(optarg, "host"))
            return usage_error("--checkpoints takes device or host, not '%s'", optarg);
        a->cr.sched.ckpt = strcmp(optarg, "host") == 0 ? CKPT_HOST : CKPT_DEVICE;
        break;
    case OPT_RESIDENT:
        if (strcmp(optarg, "0") == 0) count = 0;
        else if (parse_count(optarg, &count)) return usage_error("--resident needs a whole number, got '%s'", optarg);
        a->cr.sched.resident = count;
        break;
    case OPT_RANKS:
        if (parse_count(optarg, &a->ranks) || a->ranks > INT32_MAX)
            return usage_error("--ranks needs a positive number of processes, got '%s'", optarg);
        a->cr.sched.ranks = (int)a->ranks;
        break;
    case OPT_SHARD:
        if (strcmp(optarg, "on") && strcmp(optarg, "off") && strcmp(optarg, "auto"))
            return usage_error("--shard takes on, off or auto, not '%s'", optarg);
        a->shard = !strcmp(optarg, "on") ? 1 : !strcmp(optarg, "off") ? 0 : -1;
        break;
    case OPT_DEVICE_OPT: {
        DevOptRequest *d = &a->cr.sched.device_opt;
        if (!strcmp(optarg, "none") || !strcmp(optarg, "all") || !strcmp(optarg, "auto"))
            d->mode = !strcmp(optarg, "none") ? DEVOPT_NONE : !strcmp(optarg, "all") ? DEVOPT_ALL : DEVOPT_AUTO;
        else if (!strcmp(optarg, "0")) d->mode = DEVOPT_LAYERS, d->layers = 0;
        else if (parse_count(optarg, &d->layers))
            return usage_error("--device-optimizer takes none, all, auto or a number of layers, not '%s'", optarg);
        else d->mode = DEVOPT_LAYERS;
        break;
    }
    case OPT_SEQ:
        if (parse_count(optarg, &a->cr.sema.seq))
            return usage_error("--seq needs a positive integer, got '%s'", optarg);
        break;
    case OPT_DTYPE:
        if (strcmp(optarg, "f32") && strcmp(optarg, "bf16"))
            return usage_error("--dtype takes f32 or bf16, not '%s'", optarg);
        a->cr.sema.compute = strcmp(optarg, "bf16") == 0 ? 2 : 1;
        break;
    case OPT_FREEZE: return add_pattern(&a->cr.sema.adapters, optarg, 0);
    case OPT_TRAIN: return add_pattern(&a->cr.sema.adapters, optarg, 1);
    case OPT_LORA:
        if (a->cr.sema.adapters.lora_rank) return usage_error("%s", "--lora: given twice");
        return parse_lora(&a->cr.sema.adapters, optarg);
    case OPT_SUMMARY: a->want_summary = 1; break;
    case OPT_JSON: a->want_json = 1; break;
    case OPT_DUMP: a->want_dump = 1; break;
    case OPT_KERNELS:
        if (optarg && strcmp(optarg, "full") != 0)
            return usage_error("--dump-kernels takes =full or nothing, not '%s'", optarg);
        a->want_kernels = optarg ? 2 : 1;
        break;
    case OPT_EMIT_CUDA: a->cuda_path = optarg; break;
    case OPT_EXPLAIN: a->want_explain = 1; break;
    case OPT_EXPLORE: a->want_explore = 1; break;
    case OPT_PLOT: a->plot_path = optarg; break;
    case OPT_TRACE: a->trace_path = optarg; break;
    case OPT_HELP: fputs(USAGE, stdout); return 0;
    case OPT_VERSION: printf("mtc %s\n", MT_VERSION); return 0;
    case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
    default: return usage_error("unknown option '%s'", argv[optind - 1]);
    }
    return ARGS_OK;
}

// The options that contradict each other; --shard into the request.
// ARGS_OK, or 2 (reported).
static int check_args(Args *a) {
    const SchedRequest *req = &a->cr.sched;
    if (a->plot_path && !a->want_explore)
        return usage_error("%s", "--plot draws what --explore finds; give --explore too");
    if (a->want_explore && (a->cr.batch_search || a->cr.sema.batch || a->out_path || a->want_explain || a->trace_path))
        return usage_error("%s", "--explore tries every batch itself and writes no plan; it takes no --batch, -o, "
                                 "--explain or --trace");
    if (a->shard == 1 && a->ranks < 2)
        return usage_error("%s", "--shard on shards the host store over the ranks: give --ranks 2 or more");
    a->cr.sched.shard = a->shard;
    if (req->device_opt.mode != DEVOPT_NONE && a->ranks > 1)
        return usage_error("%s", "--device-optimizer places one process's optimizer on its device; a rank's slice "
                                 "of a data-parallel run on its device is not built yet: leave it out with --ranks");
    int picks = req->offloaded || req->host_selective;
    int chooses = req->remat != REMAT_AUTO || req->slots || req->resident >= 0 || req->ckpt || picks;
    if (req->policy != POLICY_MT && chooses)
        return usage_error("%s", "--remat, --offload-layers, --selective-layers, --slots, --resident and --checkpoints "
                                 "choose among mt's schedules; the baseline policies fix their own");
    if (picks && req->remat != REMAT_AUTO && req->remat != REMAT_MIXED && req->remat != REMAT_LAYER &&
        req->remat != REMAT_SELECTIVE)
        return usage_error("--offload-layers and --selective-layers mix picked layers into remat layer or selective; "
                           "--remat %s has no mix",
                           remat_name(req->remat));
    return ARGS_OK;
}

// The command line into *a: ARGS_OK, or the exit status (reported).
static int parse_args(int argc, char **argv, Args *a) {
    *a = (Args){.target = "h200",
                .cr = {.sched = {.policy = POLICY_MT, .remat = REMAT_AUTO, .resident = -1}},
                .ranks = 1,
                .shard = -1};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:", LONG_OPTIONS, NULL)) != -1) {
        int rc = parse_option(a, c, argv);
        if (rc != ARGS_OK) return rc;
    }
    if (optind == argc) return usage_error("%s", "no model file given");
    if (argc - optind > 1) return usage_error("one model file at a time; '%s' is a second", argv[optind + 1]);
    a->path = argv[optind];
    return check_args(a);
}

// --dump-graph, --dump-kernels and --emit-cuda of graph g. Returns 0, or
// 1 (reported).
static int graph_outputs(const Args *a, const Graph *g, const Target *t) {
    int rc = 0;
    if (a->want_dump) graph_dump(stdout, g, a->path);
    if (a->want_kernels) fuse_dump(stdout, g, g->kernels, a->want_kernels == 2);
    const char *arch = strncmp(t->arch, "sm_", 3) == 0 ? t->arch : "sm_90";
    if (a->cuda_path && compile_emit_cuda(g, arch, a->path, a->cuda_path) != 0) rc = 1;
    return rc;
}

// What was asked of the compile c: the dumps, --explain or --trace, the
// summary, the plan. Returns the exit status (reported).
static int outputs(Args *a, Compiled *c, const Target *t, const Source *src, Arena *arena, Diag *diag) {
    Graph *g = c->g;
    int rc = graph_outputs(a, g, t);
    if (a->want_explain || a->trace_path) { // (--trace alone: the trace, nothing printed)
        Graph *untiled = compile_untiled(c, &a->cr.sema, arena, diag);
        rc = !untiled ? 1
                      : explain(g, untiled, t, &a->cr.sched, a->want_explain, (int)a->ranks,
                                a->want_json && a->want_explain, a->trace_path, arena);
    }
    if (!a->want_explain && a->want_json) {
        summary_print_json(stdout, g, (int)a->ranks, a->path, arena);
    } else if (!a->want_explain && a->want_summary) {
        summary_print(stdout, g, (int)a->ranks, a->path);
    }
    if (a->out_path && rc == 0) rc = compile_emit(c, &a->cr, src, a->out_path, arena);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "mtc: error: writing the output: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}

// How far the compile goes. --summary and --json alone ask nothing of a
// schedule: the differentiated graph answers them, so no search runs
// (tiling and the search change no parameter, and the host bytes follow
// from the graph and --ranks alone).
static CompileStage stage_of(const Args *a) {
    if (a->out_path || a->cr.batch_search) return COMPILE_PLAN;
    int scheduled = a->want_explain || a->trace_path || a->want_dump || a->want_kernels || a->cuda_path;
    return scheduled || !(a->want_summary || a->want_json) ? COMPILE_TILED : COMPILE_GRAPH;
}

// The model in src through the one compile path (compiler/compile.c), then
// what was asked; or --explore, a compile a batch and policy. Returns the
// exit status (reported).
static int run(Args *a, const Target *t, const Source *src) {
    Diag diag = {.src = src, .sink = stderr};
    Arena arena = {0};
    int rc = 1;
    a->cr.stage = stage_of(a);
    a->cr.target = t;
    if (a->want_explore) {
        Model *model = dsl_parse(src, &arena, &diag);
        if (model) rc = explore(model, &a->cr, t, a->plot_path, a->want_json, &arena, &diag);
    } else {
        Compiled c;
        if (compile(src, &a->cr, &arena, &diag, &c) == 0) rc = outputs(a, &c, t, src, &arena, &diag);
    }
    arena_free(&arena);
    return rc;
}

int main(int argc, char **argv) {
    Args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != ARGS_OK) return rc;
    Target tgt;
    char terr[1024];
    if (target_load(a.target, &tgt, terr, sizeof terr) != 0) {
        fprintf(stderr, "%s\n", terr);
        return 1;
    }
    char *text;
    size_t len;
    int err = io_read_file(a.path, &text, &len);
    if (err) {
        fprintf(stderr, "%s: error: cannot read the model: %s\n", a.path, strerror(err));
        return 1;
    }
    Source src = {.path = a.path, .text = text, .len = len};
    rc = run(&a, &tgt, &src);
    free(text);
    return rc;
}
