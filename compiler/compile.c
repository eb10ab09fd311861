// compile.c: mtc's one compile path (compile.h): parse, lower, differentiate,
// fuse once, schedule, emit. Passes, in order:
//   1. compile_lower: sema, row tiling, autodiff, fuse (Graph.kernels), the
//      scheduler's per-graph layouts, the target's kernels checked;
//   2. lower: the tiling (--tile auto: the fastest that fits) and, for a plan
//      of several ranks under --shard auto, the layout (scaleout_choose);
//   3. auto_batch: --batch auto or max, one lower per batch tried;
//   4. compile_emit: CUDA through NVRTC, LLVM bitcode, the plan file.
#include "compiler/compile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/verify.h"
#include "compiler/emit/emit_cuda.h"
#include "compiler/emit/emit_llvm.h"
#include "compiler/emit/plan_write.h"
#include "compiler/fuse/fuse.h"
#include "compiler/schedule/scaleout.h"

static int is_gpu(const Target *t) { return strncmp(t->arch, "sm_", 3) == 0; }

// A message of a stage after the front end: a located one (FILE:L:C: error:
// ...) as it is, as diag prints the front end's; else after "mtc: ".
static void report(const char *what, const char *err) {
    if (strstr(err, ": error: ")) fprintf(stderr, "%s\n", err);
    else fprintf(stderr, "mtc: %s%s\n", what, err);
}

// ---------------------------------------------------------------- 1. one graph

// Sema, adapters (--freeze, --train, --lora), row tiling and autodiff: the
// differentiated graph. NULL after reporting (through d).
static Graph *front_end(const Model *m, const SemaOptions *opt, int64_t tile, Arena *a, Diag *d) {
    Graph *g = sema_lower(m, opt, a, d);
    return g && (!opt || adapters_apply(g, &opt->adapters, a, d) == 0) && tile_rows(g, tile, a, d) == 0 &&
                   autodiff(g, a, d) == 0
               ? g
               : NULL;
}

const Target *compile_plan_target(const Target *t, const SchedRequest *req, Target *share) {
    if (req->ranks <= 1 || req->shard <= 0) return t;
    *share = scaleout_rank_profile(t, req->ranks);
    return share;
}

// Fuses g once into Graph.kernels and, with t, lays out its parts for the
// scheduler and checks that t runs its kernels (cuda_check). 0, or -1 with a
// message in err and its kind in *what ("internal error: " when fuse failed,
// a compiler bug).
static int fuse_once(Graph *g, const Target *t, Arena *a, const Diag *d, char *err, size_t errcap, const char **what) {
    *what = "error: ";
    KirProgram *kp = arena_alloc(a, sizeof *kp); // (the program lives as long as the graph)
    if (!kp) return snprintf(err, errcap, "out of memory"), -1;
    if (fuse(g, a, kp, err, errcap) != 0) return *what = "internal error: ", -1;
    g->kernels = kp;
    if (!t) return 0;
    if (schedule_prepare(g, a, err, errcap) != 0) return -1;
    CudaOptions o = {.arch = t->arch, .model_path = d && d->src ? d->src->path : NULL};
    return is_gpu(t) ? cuda_check(kp, g, &o, err, errcap) : 0;
}

Graph *compile_lower(const Model *m, const SemaOptions *opt, int64_t tile, const Target *t, Arena *a, Diag *d) {
    Graph *g = front_end(m, opt, tile, a, d);
    char err[1024];
    const char *what;
    if (g && fuse_once(g, t, a, d, err, sizeof err, &what) != 0) return report(what, err), NULL;
    return g;
}

// ---------------------------------------------------------------- 2. the tiling and the layout

// --shard auto for a plan of `ranks`: SCALE_SHARDED or SCALE_REPLICATED on
// the untiled graph (scaleout_choose), or -1 with why, in --explain
// --ranks's words, when neither fits the ranks (or on error).
static int choose_layout(Graph *untiled, const Target *t, int ranks, Arena *a, char *why, size_t whycap) {
    char said[768];
    int c = scaleout_choose(untiled, t, ranks, a, said, sizeof said);
    if (c < 0) snprintf(why, whycap, "%d ranks of %s on %s: %s", ranks, untiled->model_name, t->name, said);
    return c;
}

// The graph at opt's batch, tiled as req->tile says; with auto, the fastest
// of untiled and 2, 4, ... 64 chunks of at least 256 positions whose best
// plan fits (when none fits, the nearest to fitting). With r, *r is the best
// plan for the graph returned (r->plan NULL, and a message in err, when the
// scheduler cannot stream it); without r and with a fixed tiling nothing is
// scheduled. *untiled: the untiled graph when one was lowered. NULL after
// reporting.
static Graph *lower(const Model *m, const CompileRequest *req, const SemaOptions *opt, const Target *t, Arena *a,
                    Diag *d, SchedResult *r, Graph **untiled, char *err, size_t errcap) {
    SchedResult mine, *best = r ? r : &mine, next;
    int64_t tile = req->tile;
    Graph *g = compile_lower(m, opt, tile ? tile : 1, t, a, d);
    if (g && tile <= 1) *untiled = g;
    if (!g || (tile && !r)) return g;
    SchedRequest chosen = req->sched;
    if (chosen.shard < 0) { // --shard auto: replicated or sharded, whichever the scale-out model predicts faster
        chosen.shard = 0;   // (compiler/schedule/scaleout.c; one process: nothing to shard)
        // (only for a plan to write: --explain runs the comparison itself), on the untiled graph
        Graph *probe = chosen.ranks > 1 && r ? *untiled ? *untiled : compile_lower(m, opt, 1, t, a, d) : NULL;
        if (chosen.ranks > 1 && r && !probe) return NULL;
        if (probe) *untiled = probe;
        int c = probe ? choose_layout(probe, t, chosen.ranks, a, err, errcap) : SCALE_REPLICATED;
        if (c < 0) {
            best->plan = NULL;
            return g;
        }
        chosen.shard = c == SCALE_SHARDED;
    }
    Target share; // a sharded plan is searched on one rank's share of its node
    t = compile_plan_target(t, &chosen, &share);
    if (schedule_search(g, t, &chosen, a, best, err, errcap) != 0) {
        best->plan = NULL;
        return g;
    }
    Graph *pick = g;
    for (int64_t k = 2; !tile && k <= 64 && g->train.seq / k >= 256 && g->train.seq % k == 0; k *= 2) {
        Graph *tg = front_end(m, opt, k, a, d);
        if (!tg) return NULL;
        char ferr[1024];
        const char *what;
        // a tiling that cannot be fused or planned is left out, as one whose search fails (a fuse error is a
        // compiler bug, which mtc --tile K reports: olmo2-7b's tiles at bf16 hit one)
        if (fuse_once(tg, t, a, d, ferr, sizeof ferr, &what) != 0) break;
        SchedRequest q = chosen;
        if (best->fits) q.beat_s = best->cost.step_s * 0.999; // what a tiling must beat to win
        if (schedule_search(tg, t, &q, a, &next, err, errcap) != 0) break;
        // the fastest that fits; while none fits, the nearest (a refusal quotes what tiling needs)
        int wins = next.fits
                       ? !best->fits || next.cost.step_s < best->cost.step_s * 0.999
                       : !best->fits && next.plan &&
                             (!best->plan || schedule_overshoot(&next.cost, t) < schedule_overshoot(&best->cost, t));
        if (wins) {
            *best = next;
            pick = tg;
        }
    }
    return pick;
}

// ---------------------------------------------------------------- 3. the batch

// Predicted tokens a second of a graph's plan (0 when it does not fit).
static double tokens_per_s(const Graph *g, const SchedResult *r) {
    if (!r->plan || !r->fits || !(r->cost.step_s > 0)) return 0;
    return (double)(g->train.batch * g->train.seq * g->train.accumulate) / r->cost.step_s;
}

// One batch size tried by --batch auto or max.
typedef struct BatchTry {
    int64_t batch;
    Graph *g;
    SchedResult r;
} BatchTry;

// The batches --batch auto or max has tried, and what it needs to try more.
typedef struct BatchSearch {
    const Model *m;
    CompileRequest req; // its sched: the layout the batches are tried in
    const Target *t;
    Arena *a;
    Diag *d;
    Graph *untiled; // (of the last batch tried)
    BatchTry tried[80];
    int n;
} BatchSearch;

// Whether a beats b for --batch auto: more than 1% more tokens a second,
// or within 1% and less memory (device and host).
static int faster(const BatchTry *a, const BatchTry *b) {
    double ta = tokens_per_s(a->g, &a->r), tb = tokens_per_s(b->g, &b->r);
    if (ta > tb * 1.01 || tb > ta * 1.01) return ta > tb;
    return a->r.cost.device_peak_bytes + a->r.cost.host_bytes < b->r.cost.device_peak_bytes + b->r.cost.host_bytes;
}

// The graph at batch b and its best plan in *r. NULL after reporting
// (no plan at all is an error here).
static Graph *lower_at_batch(BatchSearch *s, int64_t b, SchedResult *r) {
    char err[1024];
    SemaOptions opt = s->req.sema;
    opt.batch = b;
    Graph *g = lower(s->m, &s->req, &opt, s->t, s->a, s->d, r, &s->untiled, err, sizeof err);
    if (g && !r->plan) {
        fprintf(stderr, "mtc: error: %s\n", err);
        return NULL;
    }
    return g;
}

// Batch b's best plan, scheduled once: its index in s->tried, or -1 when it
// cannot be compiled (reported) or the table is full.
static int try_batch(BatchSearch *s, int64_t b) {
    for (int k = 0; k < s->n; k++)
        if (s->tried[k].batch == b) return k;
    if (s->n == (int)(sizeof s->tried / sizeof s->tried[0])) return -1;
    BatchTry *bt = &s->tried[s->n];
    bt->batch = b;
    if (!(bt->g = lower_at_batch(s, b, &bt->r))) return -1;
    return s->n++;
}

// --batch auto (fastest): from the batch best, halfway to each tried
// neighbour while there is room, up to lo (the largest that fits). Returns
// the index of the fastest, or -1 (reported).
static int bisect_fastest(BatchSearch *s, int best, int64_t lo) {
    for (;;) {
        int64_t b = s->tried[best].batch, below = 0, above = lo + 1;
        for (int i = 0; i < s->n; i++) {
            if (s->tried[i].batch < b && s->tried[i].batch > below) below = s->tried[i].batch;
            if (s->tried[i].batch > b && s->tried[i].batch < above) above = s->tried[i].batch;
        }
        int64_t cand[2] = {below && b - below > 1 ? below + (b - below) / 2 : 0,
                           above <= lo && above - b > 1 ? b + (above - b) / 2 : 0};
        if (!cand[0] && !cand[1]) return best;
        int next = best;
        for (int c = 0; c < 2; c++) {
            int k = cand[c] ? try_batch(s, cand[c]) : best;
            if (k < 0) return -1;
            if (s->tried[k].r.fits && faster(&s->tried[k], &s->tried[next])) next = k;
        }
        best = next;
    }
}

// --batch max: the largest batch whose best plan fits, doubling from 1 and
// then bisecting. --batch auto: the batch with the most predicted tokens a
// second, among the powers of two up to that largest batch and the largest
// itself, then bisected toward the faster side of the best one until its
// tried neighbours are adjacent. Fills out (0), or returns 1 (reported).
//
// With --shard auto and ranks, the batches are tried sharded (the layout
// that needs the least host memory) and the layout is chosen once, at the
// chosen batch (scaleout_choose runs searches of its own).
static int auto_batch(const Model *m, const CompileRequest *req, const Target *t, Arena *a, Diag *d, Compiled *out) {
    BatchSearch s = {.m = m, .req = *req, .t = t, .a = a, .d = d};
    s.req.stage = COMPILE_PLAN;
    int choose_after = req->sched.shard < 0 && req->sched.ranks > 1;
    if (choose_after) s.req.sched.shard = 1;
    int64_t lo = 0, hi = 0; // lo fits (0: nothing yet), hi does not (0: unknown)
    for (int64_t b = 1; !hi; b *= 2) {
        int k = try_batch(&s, b);
        if (k < 0) return 1;
        if (!s.tried[k].r.fits && b == 1) {
            fprintf(stderr, "mtc: error: not even batch 1 fits %s: %s\n", t->name, s.tried[k].r.why);
            return 1;
        }
        if (s.tried[k].r.fits) lo = b;
        else hi = b;
        if (b >= ((int64_t)1 << 20)) hi = b * 2;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        int k = try_batch(&s, mid);
        if (k < 0) return 1;
        if (s.tried[k].r.fits) lo = mid;
        else hi = mid;
    }
    int best = try_batch(&s, lo);
    if (best >= 0 && req->batch_search == 1) {
        for (int i = 0; i < s.n; i++)
            if (s.tried[i].r.fits && faster(&s.tried[i], &s.tried[best])) best = i;
        best = bisect_fastest(&s, best, lo);
    }
    if (best < 0) return 1;
    out->batch = s.tried[best].batch;
    out->g = s.tried[best].g, out->best = s.tried[best].r;
    if (choose_after) { // sharded or replicated, at this batch
        s.req.sema.batch = out->batch;
        int tiled = out->g->parts[PART_BLOCK].nchunks || out->g->parts[PART_TAIL].nchunks;
        Graph *probe = tiled ? compile_lower(m, &s.req.sema, 1, t, a, d) : out->g;
        if (!probe) return 1;
        int c = choose_layout(probe, t, req->sched.ranks, a, out->why, sizeof out->why);
        if (c < 0) return fprintf(stderr, "mtc: error: %s\n", out->why), 1;
        if (c == SCALE_REPLICATED) {
            s.req.sched.shard = 0;
            if (!(out->g = lower_at_batch(&s, out->batch, &out->best))) return 1;
        }
    }
    out->untiled = out->g->parts[PART_BLOCK].nchunks || out->g->parts[PART_TAIL].nchunks ? NULL : out->g;
    return 0;
}

// ---------------------------------------------------------------- the stages in order

int compile_model(const Model *m, const CompileRequest *req, Arena *a, Diag *d, Compiled *out) {
    const Target *t = req->target;
    *out = (Compiled){.model = m};
    if (req->batch_search) return auto_batch(m, req, t, a, d, out);
    if (req->stage == COMPILE_GRAPH) {
        out->g = compile_lower(m, &req->sema, req->tile ? req->tile : 1, NULL, a, d);
        out->untiled = req->tile > 1 ? NULL : out->g;
    } else {
        SchedResult *want = req->stage == COMPILE_PLAN ? &out->best : NULL;
        out->g = lower(m, req, &req->sema, t, a, d, want, &out->untiled, out->why, sizeof out->why);
    }
    if (!out->g) return 1;
    out->batch = out->g->train.batch;
    return 0;
}

int compile(const Source *src, const CompileRequest *req, Arena *a, Diag *d, Compiled *out) {
    Model *m = dsl_parse(src, a, d);
    if (!m) return *out = (Compiled){0}, 1;
    return compile_model(m, req, a, d, out);
}

Graph *compile_untiled(Compiled *c, const SemaOptions *opt, Arena *a, Diag *d) {
    if (c->untiled) return c->untiled;
    if (!c->g->parts[PART_BLOCK].nchunks && !c->g->parts[PART_TAIL].nchunks) return c->untiled = c->g;
    SemaOptions o = *opt;
    o.batch = c->g->train.batch;
    return c->untiled = compile_lower(c->model, &o, 1, NULL, a, d);
}

// ---------------------------------------------------------------- 4. emit

// The train section's data path as the plan carries it: a relative path
// is taken against the model file's directory, made absolute so that mtrun
// finds it from anywhere. malloc'd; NULL when there is none or no memory.
static char *data_path(const char *data, const char *model_path) {
    if (!data) return NULL;
    if (data[0] == '/') return strdup(data);
    const char *slash = strrchr(model_path, '/');
    char *dir = slash ? strndup(model_path, (size_t)(slash - model_path + (slash == model_path))) : strdup(".");
    char *abs = dir ? realpath(dir, NULL) : NULL, *out = NULL;
    const char *base = abs ? abs : dir;
    if (base) {
        size_t n = strlen(base) + strlen(data) + 2;
        if ((out = malloc(n))) snprintf(out, n, "%s/%s", base, data);
    }
    free(abs);
    free(dir);
    return out;
}

// The schedule in words as the plan carries it: the scheduler's choice, the
// target's name, the predicted step time (mtrun's banner and its
// measured-against-predicted figure read them) and, when the host store
// needs the NVMe tier, what it puts there (tier=moments|master|grads; mtrun
// reads it). NULL: out of memory.
static const char *schedule_words(Arena *a, const char *chosen, const char *target, const Cost *c) {
    char words[512], tier[32] = "";
    if (c->place.level > PLACE_RAM) snprintf(tier, sizeof tier, " tier=%s", PLACE_NAMES[c->place.level]);
    int n = snprintf(words, sizeof words, "%s target=%s predicted_step_s=%.6g%s", chosen, target, c->step_s, tier);
    return arena_strndup(a, words, n < (int)sizeof words ? (size_t)n : sizeof words - 1);
}

// Verifies and writes the plan with its graph's fused kernels (Graph.kernels)
// and their LLVM bitcode, which the cpu backend JIT-compiles; nothing is
// left at path on failure. Returns 0, or -1 (reported).
static int write_plan(Plan *p, const Source *src, const char *path) {
    char err[1024];
    if (plan_verify(p, err, sizeof err) != 0) { // a compiler bug: never write such a plan
        fprintf(stderr, "mtc: internal error: %s\n", err);
        return -1;
    }
    const char *data_as_written = p->graph->train.data;
    char *data = data_path(data_as_written, src->path);
    if (data_as_written && !data) {
        fprintf(stderr, "mtc: error: out of memory\n");
        return -1;
    }
    p->graph->train.data = data;
    p->source_path = src->path;
    p->source = src->text;
    p->source_len = src->len;
    p->source_crc = (uint32_t)crc32(0L, (const Bytef *)src->text, (uInt)src->len);
    const KirProgram *kp = p->graph->kernels;
    uint8_t *kir = NULL, *bc = NULL;
    size_t kir_len = 0, bc_len = 0;
    int rc = -1;
    if (emit_llvm(kp, p->graph, &bc, &bc_len, err, sizeof err) != 0) {
        fprintf(stderr, "mtc: internal error: %s\n", err);
    } else if (kir_write(kp, &kir, &kir_len) != 0) {
        fprintf(stderr, "mtc: error: out of memory\n");
    } else {
        p->kernels_bytes = kir, p->kernels_len = kir_len, p->bitcode = bc, p->bitcode_len = bc_len;
        if ((rc = plan_write(p, path, err, sizeof err)) != 0) fprintf(stderr, "mtc: error: %s\n", err);
        p->kernels_bytes = p->bitcode = NULL, p->kernels_len = p->bitcode_len = 0;
    }
    free(kir);
    free(bc);
    p->graph->train.data = data_as_written;
    free(data);
    return rc;
}

// g's fused kernels for arch compiled by NVRTC into the plan p (cubin and
// PTX, copied into a). Returns 0, or 1 after reporting.
static int cuda_binary(const Graph *g, const char *arch, const char *model_path, Plan *p, Arena *a) {
    char err[8192];
    CudaOptions opt = {.arch = arch, .model_path = model_path};
    CudaBinary bin;
    if (cuda_build(g->kernels, g, &opt, &bin, NULL, err, sizeof err) != 0) return report("error: ", err), 1;
    uint8_t *cubin = arena_alloc(a, bin.cubin_len);
    char *ptx = arena_alloc(a, bin.ptx_len + 1);
    if (cubin && ptx) {
        memcpy(cubin, bin.cubin, bin.cubin_len);
        memcpy(ptx, bin.ptx, bin.ptx_len + 1);
        p->cuda_arch = arena_strdup(a, arch), p->cubin = cubin, p->cubin_len = bin.cubin_len;
        p->ptx = ptx, p->ptx_len = bin.ptx_len;
    }
    nvrtc_binary_free(&bin);
    if (cubin && ptx && p->cuda_arch) return 0;
    return report("error: ", "out of memory keeping the cubin"), 1;
}

int compile_emit_cuda(const Graph *g, const char *arch, const char *model_path, const char *cu_path) {
    char err[8192];
    CudaOptions opt = {.arch = arch, .model_path = model_path};
    CudaSource src;
    if (cuda_emit(g->kernels, g, &opt, &src, err, sizeof err) != 0) return report("error: ", err), 1;
    FILE *f = fopen(cu_path, "wb");
    int bad = !f || fwrite(src.text, 1, src.len, f) != src.len;
    if (f && fclose(f) != 0) bad = 1;
    cuda_source_free(&src);
    if (bad) {
        fprintf(stderr, "mtc: error: cannot write %s: %s\n", cu_path, strerror(errno));
        return 1;
    }
    return 0;
}

int compile_emit(Compiled *c, const CompileRequest *req, const Source *src, const char *path, Arena *a) {
    const Target *t = req->target;
    SchedResult *best = &c->best;
    if (!best->plan) {
        fprintf(stderr, "mtc: error: %s\n", c->why);
        return 1;
    }
    if (!best->fits) {
        fprintf(stderr, "mtc: error: %s does not fit %s with --policy %s --remat %s: %s\n", c->g->model_name, t->name,
                policy_name(req->sched.policy), remat_name(req->sched.remat), best->why);
        return 1;
    }
    if (is_gpu(t) && cuda_binary(best->plan->graph, t->arch, src->path, best->plan, a) != 0) return 1;
    if (!(best->plan->schedule = schedule_words(a, best->plan->schedule, t->name, &best->cost))) {
        fprintf(stderr, "mtc: error: out of memory\n");
        return 1;
    }
    best->plan->ranks = req->sched.ranks > 1 ? req->sched.ranks : 1;
    return write_plan(best->plan, src, path) != 0 ? 1 : 0;
}
