#include "runtime/train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/io.h"
#include "common/scratch.h"
#include "common/storage.h"
#include "runtime/store/adamw.h"
#include "runtime/backend/backend.h"
#include "runtime/store/checkpoint.h"
#include "runtime/dist/comm.h"
#include "runtime/backend/kernels.h"
#include "runtime/data.h"
#include "runtime/replay.h"
#include "runtime/sample.h"
#include "runtime/model_io/weights.h"

double train_lr(const TrainConfig *t, double base, int64_t step, int64_t steps) {
    if (t->warmup > 0 && step <= t->warmup) return base * (double)step / (double)t->warmup;
    if (t->schedule == SCHED_CONSTANT) return base;
    double span = (double)(steps > t->warmup ? steps - t->warmup : 1);
    double progress = fmin(1.0, fmax(0.0, (double)(step - t->warmup) / span)), min = base * t->min_lr_frac;
    if (t->schedule == SCHED_LINEAR) return base - (base - min) * progress;
    return min + (base - min) * 0.5 * (1.0 + cos(M_PI * progress));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The vocabulary the data must fit: the rows of every embedding table the
// model inputs index, and the width of every loss's logits.
static int64_t model_vocab(const Graph *g) {
    int64_t v = INT64_MAX;
    for (int pk = 0; pk < PART_COUNT; pk++) {
        const Part *part = &g->parts[pk];
        for (int i = 0; i < part->nfwd; i++) {
            const Node *n = part->nodes.items[i];
            if (n->op == OP_EMBED && n->in[1]->op == OP_INPUT && n->in[1]->src_part == SRC_MODEL_INPUT)
                v = n->in[0]->shape.dims[0] < v ? n->in[0]->shape.dims[0] : v;
            if (n->op == OP_CROSS_ENTROPY) {
                const Shape *s = &n->in[0]->shape;
                v = s->dims[s->rank - 1] < v ? s->dims[s->rank - 1] : v;
            }
        }
    }
    return v;
}

// Checks that forward takes (tokens, targets), both i32[B, T], which is what
// mtrun feeds, besides the loss scale autodiff adds after them (graph.h).
static int check_inputs(const Graph *g, char *err, size_t errcap) {
    int scale = graph_loss_scale_input(g), ok = g->inputs.n == 2 + (scale >= 0) && (scale < 0 || scale == 2);
    for (int i = 0; ok && i < 2; i++) {
        const ModelInput *in = g->inputs.items[i];
        ok = in->dtype == DT_I32 && in->shape.rank == 2 && in->shape.dims[0] == g->train.batch &&
             in->shape.dims[1] == g->train.seq;
    }
    if (!ok) snprintf(err, errcap, "mtrun feeds forward(tokens: i32[B, T], targets: i32[B, T]); this model's forward takes other inputs");
    return ok ? 0 : -1;
}

typedef struct Run {
    const Plan *p;
    const TrainOptions *o;
    HostStore hs;
    Backend *be;
    Replay rp;        // the plan's streams on be
    char *act;        // (p->host_act_bytes) the host activation store
    unsigned char *stream_updates; // (hs.nseg) whether the train stream has an INS_UPDATE of that segment
    // What the plan's forward reports (INS_STAT), for the log: the losses add_loss joins and each MoE layer's
    // load per expert. reports: whether the train stream has any (not with --reference).
    char *stats;       // (the larger stream's replay_stats_bytes) where the replay reads them out
    int reports;
    int64_t *experts;  // (layers) each layer's experts (0: not a mixture of experts)
    int64_t max_e;     // the most of any layer
    double aux;        // the step's: the mean over micro-batches of the joined losses' sum (--reference too)
    int joins;         // the layers join losses (add_loss): the reported loss is the cross-entropy plus aux
    double *loads;     // (layers, max_e) the step's tokens each expert took (every micro-batch's, every rank's)
    double *sq_norms;  // (hs.nseg) a sharded plan's: the segments' squared gradient norms, summed over the ranks
    DataSet data;     // the training data (and its last 10% for validation, without --val-data)
    DataSet val_file; // --val-data, all of it validation; unused without
    const DataSet *val; // &data or &val_file
    int32_t *tokens, *targets; // (B, T) each
    int32_t *segs;             // (B, T) each position's document start in its row (kernels.h); all 0 without X.docs
    float loss_scale; // the tail's gradient seed, d objective / d loss (graph.h): 1, or with masked targets
                      // rows x micro-batches / the step's counted targets, the cross-entropy's weight alone
    FILE *log;
    double predicted_s; // the plan's predicted step time on its target (0: not given)
    int compare;        // whether this backend is that target's kind (GPU or cpu): steps are compared with it
    int64_t step;       // the step running, for the progress line
    double step_t0;     // when it started
    double last_note;   // when the progress line was last written
    // (step_t0 is 0 outside a step)
    double note_every;  // seconds between progress lines (10; MT_PROGRESS_S overrides, for tests)
    int64_t passes_done, passes_per_step; // layer passes done in this step, of the step's
    int32_t pass_layer; // the layer of the pass running (INT32_MIN before a micro-batch's first)
    int64_t schedule_steps; // the steps the learning-rate schedule spans: part of the run, kept in its checkpoints
    int64_t ckpt_schedule_steps; // the resumed checkpoint's (0: not recorded)
    const char *save_dir; // where checkpoints go: --save's, or the default beside the log; NULL: none
                          // (rank 0's, every rank's alike: each writes its shard there)
    char *save_dir_agreed; // the malloc'd copy of rank 0's that save_dir points to, with ranks
    Comm comm;            // the ranks' collectives of host buffers (MPI): the gradient accumulators' sum
    char no_save[600];    // why none, where the default would have saved (for the banner)
} Run;

// The store's first failure (the tier's: a short read or write) as the
// run's error. 0, or -1 with a message.
static int store_ok(const Run *r, char *err, size_t errcap) {
    const char *why = store_failed(&r->hs);
    if (why) snprintf(err, errcap, "%s; the run stops here, its checkpoints as they were", why);
    return why ? -1 : 0;
}

// One micro-batch through the plan (or the reference executor): its loss
// into *loss. `last`: the step's last micro-batch. 0, or -1 with a message.
static int micro_batch(Run *r, int backward, int last, float *loss, char *err, size_t errcap) {
    // each model input's host bytes (the loss scale's a float)
    const int32_t *inputs[3] = {r->tokens, r->targets, (const int32_t *)(const void *)&r->loss_scale};
    const int32_t *docs = r->data.docs || r->val->docs ? r->segs : NULL;
    if (r->o->reference) {
        double aux = 0; // the losses add_loss joins, as a plan's INS_STAT reports them
        *loss = reference_step(r->p, &r->hs, inputs, docs, backward, &aux);
        if (backward) r->aux += aux;
        return 0;
    }
    const Plan *p = r->p;
    r->rp.seg_start = docs;
    r->pass_layer = INT32_MIN; // a micro-batch's first run starts a layer pass
    int rc = backward ? replay(&r->rp, p->train, p->ntrain, inputs, last, loss, err, errcap)
                      : replay(&r->rp, p->eval, p->neval, inputs, last, loss, err, errcap);
    if (rc == 0 && backward && r->reports) replay_stats_add(p, p->train, p->ntrain, r->stats, r->max_e, &r->aux, r->loads);
    return rc != 0 ? rc : store_ok(r, err, errcap);
}

// Whether this process speaks for the run (rank 0, or the only one): the
// others' output goes to /dev/null and they write no --logits.
static int speaks(const Run *r) { return !r->o->dist || r->o->dist->rank == 0; }

// The ranks of the run: each micro-batch is one of `ranks` parts of a global one.
static int run_ranks(const Run *r) { return r->o->dist ? r->o->dist->size : 1; }

// Targets that count in a batch: those the mask did not replace by the
// ignore index.
static int64_t counted(const int32_t *targets, int64_t n) { // (n) targets
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += targets[i] != GRAPH_IGNORE_TARGET;
    return c;
}

// The validation loss into *val (NAN: no batches): the mean over every
// counted target of the batches used. The loss kernel divides by all rows
// of a batch; a batch's sum is that times rows. 0, or -1 with a message.
static int validate(Run *r, double *val, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    int64_t n = data_val_batches(r->val, t->batch, t->seq), rows = t->batch * t->seq, total = 0;
    if (n > r->o->val_batches) n = r->o->val_batches;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float loss;
        data_val_batch(r->val, i, t->batch, t->seq, r->tokens, r->targets, r->segs);
        total += counted(r->targets, rows);
        if (micro_batch(r, 0, 1, &loss, err, errcap) != 0) return -1;
        sum += loss;
    }
    double both[2] = {sum, (double)total}; // over the ranks' parts of each batch, n * ranks parts in all
    dist_sum_doubles(r->o->dist, both, 2);
    sum = both[0], total = (int64_t)both[1], n *= run_ranks(r);
    // as a plain mean of the batches' losses when every target counts, the same bits as before masks
    *val = !n ? NAN : total == n * rows ? sum / (double)n : total ? sum * (double)rows / (double)total : 0;
    return 0;
}

// The end of step t_step: the global gradient norm from the per-segment
// squared norms, summed in a fixed order (the globals, then layers 0 ..
// L-1) whoever computed them: the plan's INS_NORM during the last
// micro-batch, or this function for each segment nothing computed; then
// every segment's update made pending, with the clip and the scale `inv`
// that turns the accumulated gradients into the gradient of the step's
// loss (1/accumulation without a mask). Sets *norm to the norm before
// clipping.
static void step_end(Run *r, int64_t t_step, double lr, double inv, double *norm) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    double sq = 0;
    for (int64_t s = 0; s < r->hs.nseg; s++) {
        if (isnan(r->hs.seg[s].sq_norm)) store_norm(&r->hs, p, s + SEG_FIRST);
        sq += r->hs.seg[s].sq_norm;
    }
    *norm = sqrt(sq) * inv;
    double scale = inv;
    if (t->clip > 0 && *norm > t->clip) scale *= t->clip / *norm;
    AdamWStep s = {.lr = (float)lr, .beta1 = (float)t->beta1, .beta2 = (float)t->beta2, .eps = (float)t->adam_eps,
                   .weight_decay = (float)t->weight_decay, .t = t_step, .grad_scale = (float)scale};
    for (int64_t i = 0; i < r->hs.nseg; i++) r->hs.seg[i] = (StoreSegment){.sq_norm = NAN, .pending = 1, .step = s};
}

// One optimizer step over `accumulate` micro-batches: the mean loss into
// *loss, the global gradient norm before clipping into *norm. The update
// stays pending: the next step's train stream applies it layer by layer
// (INS_UPDATE) while its forward runs; the reference path applies it at
// once. 0, or -1 with a message.
//
// With a loss mask, the step's cross-entropy is the mean over all its
// counted targets, as one big batch: each micro-batch's loss kernel sums its
// counted rows / rows, so the step's loss is the sum over micro-batches
// times rows / (counted targets of the whole step). Its gradient gets that
// weight from the tail's seed (the loss scale, rows x micro-batches /
// counted, counted before the micro-batches run), and the losses add_loss
// joins (the MoE load-balancing loss) keep theirs: the mean over
// micro-batches, as without a mask (transformers' loss with labels -100).
// A plan whose seed is the constant 1 (an mtc before the loss scale) weighs
// the whole gradient by rows / counted instead.
static int step(Run *r, int64_t t_step, double lr, double *loss, double *norm, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    // Gradients start the step at zero: an update the train stream does not
    // apply (and zero the gradients of) is applied here, before the stream.
    for (int64_t s = 0; s < r->hs.nseg; s++) {
        if (r->hs.seg[s].pending && (r->o->reference || !r->stream_updates[s])) store_update(&r->hs, p, s + SEG_FIRST);
        r->hs.seg[s].sq_norm = NAN;
    }
    if (store_ok(r, err, errcap) != 0) return -1;
    double sum = 0;
    int64_t rows = t->batch * t->seq, total = 0, parts = t->accumulate * run_ranks(r); // micro-batches of every rank
    int fed = graph_loss_scale_input(p->graph) >= 0;
    r->aux = 0;
    for (int64_t i = 0; r->reports && i < p->graph->layers * r->max_e; i++) r->loads[i] = 0;
    r->loss_scale = 1;
    if (fed) { // the step's counted targets, every rank's, before its micro-batches run: the seed's weight
        int64_t at = data_position(&r->data);
        double counted_all = 0;
        for (int64_t k = 0; k < t->accumulate; k++) {
            data_next_train(&r->data, t->batch, t->seq, r->tokens, r->targets, NULL);
            counted_all += (double)counted(r->targets, rows);
        }
        if (data_seek(&r->data, at, err, errcap) != 0) return -1;
        dist_sum_doubles(r->o->dist, &counted_all, 1);
        if (counted_all != (double)(rows * parts))
            r->loss_scale = counted_all ? (float)((double)(rows * parts) / counted_all) : 0;
    }
    for (int64_t k = 0; k < t->accumulate; k++) {
        float l;
        data_next_train(&r->data, t->batch, t->seq, r->tokens, r->targets, r->segs);
        total += counted(r->targets, rows);
        if (micro_batch(r, 1, k == t->accumulate - 1, &l, err, errcap) != 0) return -1;
        sum += l;
    }
    if (run_ranks(r) > 1 && p->sharded) { // each rank's slices' part of every segment's norm, summed over the ranks
        for (int64_t s = 0; s < r->hs.nseg; s++) {
            if (isnan(r->hs.seg[s].sq_norm)) store_norm(&r->hs, p, s + SEG_FIRST); // (what no INS_NORM computed)
            r->sq_norms[s] = r->hs.seg[s].sq_norm;
        }
        dist_sum_doubles(r->o->dist, r->sq_norms, (int)r->hs.nseg);
        for (int64_t s = 0; s < r->hs.nseg; s++) r->hs.seg[s].sq_norm = r->sq_norms[s];
    }
    if (run_ranks(r) > 1) { // the gradients (replicated; sharded, the plan's reduce-scatters summed them), losses
                            // and counts summed over the ranks; the norms of the sums
        if (!p->sharded && comm_all_reduce(&r->comm, r->hs.g, r->hs.n, COMM_F32, NULL, err, errcap) != 0) return -1;
        for (int64_t s = 0; !p->sharded && s < r->hs.nseg; s++) r->hs.seg[s].sq_norm = NAN;
        double both[2] = {sum, (double)total};
        dist_sum_doubles(r->o->dist, both, 2);
        sum = both[0], total = (int64_t)both[1];
        if (r->joins) dist_sum_doubles(r->o->dist, &r->aux, 1);
        if (r->reports) dist_sum_doubles(r->o->dist, r->loads, (int)(p->graph->layers * r->max_e));
    }
    r->aux /= (double)parts;
    int all = total == rows * parts; // no target masked: the plain mean, bit for bit as before masks
    step_end(r, t_step, lr, all || fed ? 1.0 / (double)parts : total ? (double)rows / (double)total : 0, norm);
    if (r->o->reference) store_flush(&r->hs, p);
    if (store_ok(r, err, errcap) != 0) return -1;
    *loss = all ? sum / (double)parts : total ? sum * (double)rows / (double)total : 0;
    return 0;
}

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
static int64_t host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (f) fclose(f);
    return (int64_t)kb * 1024;
}

// What the plan puts on the NVMe tier (its schedule's words: tier=moments,
// master or grads; mtc --explain says why): NULL when nothing.
static const char *plan_tier(const Plan *p) {
    const char *at = p->schedule ? strstr(p->schedule, " tier=") : NULL;
    return at ? at + strlen(" tier=") : NULL;
}

// What the plan puts on the tier besides the Adam moments (STORE_TIER_*):
// tier=master the fp32 master (bf16 compute: with f32 it is what streams),
// tier=grads the gradients too (and the master under bf16, as mtc counts it).
static int plan_tier_holds(const Plan *p) {
    const char *want = plan_tier(p);
    int grads = want && !strncmp(want, "grads", 5), bf16 = p->graph->train.compute == DT_BF16;
    int master = want && (!strncmp(want, "master", 6) || (grads && bf16));
    return (master ? STORE_TIER_MASTER : 0) | (grads ? STORE_TIER_GRADS : 0);
}

// --export gathers the whole model in RAM: refused up front with the master on the tier.
static int check_tier(const Run *r, char *err, size_t errcap) {
    if (r->o->tier_dir && r->o->dist && r->o->dist->local > 1) { // (tier.c's file is DIR/mtrun.tier, one a directory)
        snprintf(err, errcap, "--tier-dir with %d ranks on this machine is not supported yet: each would need its own "
                 "tier file in %s; start one rank a machine, or plan without the tier", r->o->dist->local,
                 r->o->tier_dir);
        return -1;
    }
    if (r->o->tier_dir && r->o->export_path && (plan_tier_holds(r->p) & STORE_TIER_MASTER)) { // now, not after the training
        snprintf(err, errcap, "--export with the fp32 master on the NVMe tier (the plan's tier=%.*s) is not supported "
                 "yet: it would gather the whole model in RAM; save a checkpoint (--save) and export from it in a run "
                 "without the tier", (int)strcspn(plan_tier(r->p), " "), plan_tier(r->p));
        return -1;
    }
    return 0;
}

// The host store's bytes in RAM: all of it, less what the tier holds, plus
// the tier's staging (TIER_SLOTS records, each array padded to TIER_ALIGN).
// With the gradients on the tier, g's pages are held only while a layer's
// gradients are being accumulated: counted as one layer's.
static int64_t ram_store_bytes(const Run *r) {
    if (r->p->sharded) // this rank's slices
        return store_shard_elems(r->p, r->o->dist ? r->o->dist->rank : 0, r->p->ranks) *
               storage_host_bytes_per_param(r->p->graph->train.compute);
    if (!r->o->tier_dir) return store_bytes(r->p, 0);
    int holds = plan_tier_holds(r->p);
    int arrays = 2 + !!(holds & STORE_TIER_MASTER) + !!(holds & STORE_TIER_GRADS);
    int64_t record = arrays * ((r->p->host_layer * 4 + TIER_ALIGN - 1) / TIER_ALIGN * TIER_ALIGN);
    return store_bytes(r->p, holds) - store_tier_bytes(r->p, holds) + TIER_SLOTS * record +
           (holds & STORE_TIER_GRADS ? r->p->host_layer * 4 : 0);
}

// What a sharded plan's run cannot do, refused up front: every rank holds
// only its shard of the store, which these read whole or put on a tier.
static int check_sharded(const Run *r, char *err, size_t errcap) {
    const TrainOptions *o = r->o;
    if (!r->p->sharded) return 0;
    const char *what = o->reference ? "--reference (the host executor reads the whole store)"
                     : o->tier_dir ? "--tier-dir (the tier holds a whole store's layers; a shard already divides the "
                                     "store by the ranks)"
                                    : NULL;
    if (!what) return 0;
    snprintf(err, errcap, "%s with a sharded plan (mtc --shard on) is not supported yet: each rank holds only its "
             "shard of the host store; make a replicated plan (mtc --shard off) for it", what);
    return -1;
}

// Refuses a run whose host store and cpu arena will not fit, before any of
// it is allocated: in a data-parallel run, into this rank's share of the
// machine's memory (each rank on it holds its own store).
static int check_host_memory(Run *r, char *err, size_t errcap) {
    int64_t need = ram_store_bytes(r) + (r->o->reference ? 0 : r->p->arena_bytes + r->p->host_act_bytes);
    int64_t have = r->o->host_available > 0 ? r->o->host_available : host_available();
    int local = r->o->dist ? r->o->dist->local : 1;
    if (have > 0 && local > 1 && need > have / local) {
        snprintf(err, errcap, "each rank needs %lld bytes of host memory (%.1f GB: its %s of the host store%s) "
                 "and %d ranks share this machine's %lld bytes (%.1f GB) available, %lld (%.1f GB) each; start fewer "
                 "ranks on a machine", (long long)need, (double)need / 1e9, r->p->sharded ? "shard" : "own copy",
                 r->o->reference ? "" : ", its cpu arena and "
                 "host activation store", local, (long long)have, (double)have / 1e9, (long long)(have / local),
                 (double)(have / local) / 1e9);
        return -1;
    }
    if (have <= 0 || need <= have) return 0;
    snprintf(err, errcap, "the plan needs %lld bytes of host memory (%.1f GB: weights, %sAdam moments, gradients%s) "
             "but this machine has %lld bytes (%.1f GB) available%s", (long long)need, (double)need / 1e9,
             r->o->tier_dir ? "the globals' " : "", r->o->reference ? "" : ", the cpu arena and the host activation store",
             (long long)have, (double)have / 1e9,
             plan_tier(r->p) && !r->o->tier_dir ? "; the plan was made with the Adam moments on the NVMe tier: give "
                                                  "--tier-dir DIR" : "");
    return -1;
}

// Where checkpoints go, into r->save_dir. A new run must not prune or
// replace the checkpoints of another: --save into a directory that holds
// some is refused unless resuming from it; the default directory beside the
// log (o->save_default) then saves nothing, and r->no_save says why, as it
// does for a log that is not a file (/dev/null: nothing beside it). 0, or
// -1 with a message.
static int check_save_dir(Run *r, char *err, size_t errcap) {
    const TrainOptions *o = r->o;
    char path[4096], ignored[256];
    struct stat st;
    r->save_dir = o->save_dir;
    if (o->save_default && r->log && (fstat(fileno(r->log), &st) != 0 || !S_ISREG(st.st_mode))) {
        snprintf(r->no_save, sizeof r->no_save, "the log %s is not a file to save beside (--save DIR)", o->log_path);
        r->save_dir = NULL;
        return 0;
    }
    if (!o->save_dir || (o->resume && !strcmp(o->resume, o->save_dir))) return 0;
    if (ckpt_latest(o->save_dir, path, sizeof path, ignored, sizeof ignored) != 0) return 0; // none there
    if (o->save_default) {
        snprintf(r->no_save, sizeof r->no_save, "%s holds an earlier run's checkpoints (--resume %s continues it; "
                 "--save DIR saves this run elsewhere)", o->save_dir, o->save_dir);
        r->save_dir = NULL;
        return 0;
    }
    snprintf(err, errcap, "%s already holds checkpoints (%s); pass --resume %s to continue that run, or save into "
             "another directory", o->save_dir, path, o->save_dir);
    return -1;
}

static int open_run(Run *r, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    const char *data = r->o->data ? r->o->data : t->data;
    const Dist *dist = r->o->dist;
    if (check_inputs(p->graph, err, errcap) != 0) return -1;
    if (!data) {
        snprintf(err, errcap, "no training data: give --data FILE or data = \"FILE\" in the model's train section");
        return -1;
    }
    int64_t vocab = model_vocab(p->graph);
    if (data_open(&r->data, data, vocab, r->o->val_data ? 0 : 0.1, err, errcap) != 0) return -1;
    if (dist) r->data.rank = dist->rank, r->data.ranks = dist->size; // this rank's rows of every global batch
    if (data_check_batch(&r->data, t->batch, t->seq, err, errcap) != 0)
        return -1;
    r->val = &r->data;
    if (r->o->val_data) {
        if (data_open(&r->val_file, r->o->val_data, vocab, 1, err, errcap) != 0) return -1;
        if (dist) r->val_file.rank = dist->rank, r->val_file.ranks = dist->size;
        if (data_check_batch(&r->val_file, t->batch, t->seq, err, errcap) != 0)
            return -1;
        r->val = &r->val_file;
    }
    if (r->o->shuffle) data_shuffle(&r->data, (uint64_t)(r->o->seed >= 0 ? r->o->seed : t->seed));
    if (check_sharded(r, err, errcap) != 0 || check_tier(r, err, errcap) != 0 || check_host_memory(r, err, errcap) != 0)
        return -1;
    if (r->o->export_path && weights_export_check(r->o->export_path, p, err, errcap) != 0) return -1;
    if ((r->o->logits || r->o->sample_every) && r->o->tier_dir && (plan_tier_holds(p) & STORE_TIER_MASTER)) {
        snprintf(err, errcap, "--logits and --sample-every run the forward on the host from the fp32 master, which this "
                 "plan puts on the NVMe tier (tier=%.*s)", (int)strcspn(plan_tier(p), " "), plan_tier(p));
        return -1;
    }
    if ((r->o->logits || r->o->sample_every) && data_val_batches(r->val, t->batch, t->seq) <= 0) {
        snprintf(err, errcap, "--logits and --sample-every take the first validation batch (as the logits' batch, "
                 "as the prompt); %s has none of %lld x %lld tokens", r->val->path, (long long)t->batch, (long long)t->seq);
        return -1;
    }
    DataVocab v; // a vocabulary that decodes samples, found before any training
    if (r->o->sample_every && data_vocab_open(&v, r->val, model_vocab(p->graph), err, errcap) != 0) return -1;
    if (r->o->sample_every) data_vocab_close(&v);
    r->tokens = malloc((size_t)(t->batch * t->seq) * sizeof(int32_t));
    r->targets = malloc((size_t)(t->batch * t->seq) * sizeof(int32_t));
    r->segs = calloc((size_t)(t->batch * t->seq), sizeof(int32_t));
    r->loss_scale = 1;
    if (!r->tokens || !r->targets || !r->segs) {
        snprintf(err, errcap, "cannot allocate the batch (%lld tokens)", (long long)(t->batch * t->seq));
        return -1;
    }
    if (p->sharded ? store_alloc_shard(&r->hs, p, dist ? dist->rank : 0, r->o->threads, err, errcap) != 0
                   : store_alloc_tier(&r->hs, p, r->o->tier_dir, plan_tier_holds(p), r->o->threads, err, errcap) != 0)
        return -1;
    if (p->sharded && !(r->sq_norms = calloc((size_t)r->hs.nseg, sizeof *r->sq_norms))) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    r->hs.threads = r->o->threads;
    for (int k = 0; k < p->graph->nkinds; k++) {
        const Part *block = &p->graph->parts[kind_part(k)];
        for (int i = 0; i < block->nfwd; i++) r->joins |= ((const Node *)block->nodes.items[i])->op == OP_ADD_LOSS;
    }
    if (!r->o->reference) {
        ReplayOrder order;
        if (replay_order_parse(getenv("MT_REPLAY_ORDER"), &order, err, errcap) != 0) return -1;
        r->act = malloc(p->host_act_bytes ? (size_t)p->host_act_bytes : 1);
        r->stream_updates = calloc((size_t)r->hs.nseg, 1);
        int64_t stat_bytes = replay_stats_bytes(p->train, p->ntrain), eval_bytes = replay_stats_bytes(p->eval, p->neval);
        r->stats = malloc((size_t)(stat_bytes > eval_bytes ? stat_bytes : eval_bytes) + 1);
        r->experts = calloc((size_t)p->graph->layers + 1, sizeof *r->experts);
        r->reports = stat_bytes > 0;
        if (r->experts) replay_experts(p, p->train, p->ntrain, r->experts);
        for (int64_t l = 0; r->experts && l < p->graph->layers; l++)
            if (r->experts[l] > r->max_e) r->max_e = r->experts[l];
        r->loads = calloc((size_t)(p->graph->layers * r->max_e) + 1, sizeof *r->loads);
        if (!r->act || !r->stream_updates || !r->stats || !r->experts || !r->loads) {
            snprintf(err, errcap, "cannot allocate the host activation store (%lld bytes)", (long long)p->host_act_bytes);
            return -1;
        }
        backend_fill_nan(r->act, p->host_act_bytes); // a LOAD of what no SAVE wrote shows in the loss
        if (r->o->cuda_create) { // the host memory its streams copy from and to, pinned by the backend
            // (and the gradients that a COPY_OUT's copy lands in: a layer's bf16 ones, fp32 ones set where they
            // hold zeros; not a tier's, a mapping that holds only what is touched)
            HostRange pin[4] = {
                {r->hs.wb ? (void *)r->hs.wb : (void *)r->hs.w, r->hs.n * (r->hs.wb ? 2 : 4),
                 r->hs.wb ? "the bf16 weights" : "the weights"},
                {r->act, p->host_act_bytes, "the host activation store"},
                {r->hs.g, r->hs.tier_grads ? 0 : (r->hs.gb ? r->hs.gb_from : r->hs.n) * 4, "the fp32 gradients"},
                {r->hs.gb, (r->hs.n - r->hs.gb_from) * 2, "the layers' bf16 gradients"}};
            if (!(r->be = r->o->cuda_create(p, pin, r->hs.gb ? 4 : 3, r->o->trace, r->o->dist, err, errcap))) return -1;
            r->be->host_threads = r->o->threads; // the optimizer's: in the backward they add the gradients
            if (!getenv("MT_REPLAY_ORDER") || !*getenv("MT_REPLAY_ORDER")) order.kind = REPLAY_STREAMS;
        } else if (!(r->be = backend_cpu_create(p, err, errcap)) ||
                   (r->o->trace && backend_cpu_trace(r->be, r->o->trace, err, errcap) != 0)) {
            return -1;
        }
        if (p->sharded && (!r->be->collective || !r->be->copy_widen)) {
            snprintf(err, errcap, "the %s backend runs no collectives, which a sharded plan needs (mtc --shard on): "
                     "run it with --device cpu, or make a replicated plan (mtc --shard off)", r->be->name);
            return -1;
        }
        for (int i = 0; i < p->ntrain; i++)
            if (p->train[i].kind == INS_UPDATE && p->train[i].layer >= -1 && p->train[i].layer < p->graph->layers)
                r->stream_updates[plan_segment_index(p->train[i].layer)] = 1;
        r->rp = (Replay){.p = p, .be = r->be, .hs = &r->hs, .act = r->act, .stats = r->stats, .order = order, .rng = order.seed,
                          .hold_ins = r->o->test_hold_ins, .dist = dist};
        char why[512];
        if (!r->be->set_docs) snprintf(why, sizeof why, "the %s backend takes none", r->o->cuda_create ? "cuda" : "cpu");
        if ((r->data.docs || r->val->docs) && (!r->be->set_docs || r->be->set_docs(r->be, r->segs, why, sizeof why) != 0)) {
            snprintf(err, errcap, "%s: document starts (X.docs) keep attention within each document, but %s: run with "
                     "--device cpu, or move the .docs file away to attend across documents",
                     r->data.docs ? r->data.docs_path : r->val->docs_path, why);
            return -1;
        }
    }
    if (r->o->save_dir && !r->o->save_default && check_save_dir(r, err, errcap) != 0) return -1; // before the log
    // a resumed run continues its log; a new run starts one
    if (r->o->log_path && !(r->log = fopen(r->o->log_path, r->o->resume ? "a" : "w"))) {
        snprintf(err, errcap, "%s: cannot write the metrics log: %s", r->o->log_path, strerror(errno));
        return -1;
    }
    if (check_save_dir(r, err, errcap) != 0 || comm_open(&r->comm, r->o->dist, 0, NULL, err, errcap) != 0) return -1;
    if (run_ranks(r) == 1) return 0;
    int ok; // rank 0 decides where the run saves (its default is beside its log); every rank saves its shard there
    r->save_dir = r->save_dir_agreed = dist_bcast_text(r->o->dist, r->save_dir, &ok);
    if (!ok) snprintf(err, errcap, "out of memory");
    return ok ? 0 : -1;
}

// Whether the metrics log took everything written to it so far (flushed):
// a full disk or an I/O error stops the run with a message, never a log
// silently lost. 0, or -1 with a message.
static int log_flush(Run *r, char *err, size_t errcap) {
    if (!r->log) return 0;
    errno = 0;
    if (fflush(r->log) == 0 && !ferror(r->log)) return 0;
    snprintf(err, errcap, "%s: cannot write the metrics log: %s", r->o->log_path,
             errno ? strerror(errno) : "a write failed");
    return -1;
}

// Closes the metrics log; a failure of its last writes is the run's error.
// 0, or -1 with a message.
static int log_close(Run *r, char *err, size_t errcap) {
    if (!r->log) return 0;
    int rc = log_flush(r, err, errcap);
    if (fclose(r->log) != 0 && rc == 0) {
        snprintf(err, errcap, "%s: cannot write the metrics log: %s", r->o->log_path, strerror(errno));
        rc = -1;
    }
    r->log = NULL;
    return rc;
}

static void close_run(Run *r) {
    if (r->be) r->be->destroy(r->be);
    if (r->log) fclose(r->log);
    store_free(&r->hs);
    free(r->act);
    free(r->stream_updates);
    free(r->stats);
    free(r->experts);
    free(r->loads);
    free(r->sq_norms);
    data_close(&r->data);
    data_close(&r->val_file);
    free(r->tokens);
    free(r->targets);
    free(r->segs);
    free(r->save_dir_agreed);
    comm_close(&r->comm);
}

// The step's reports in its log line, when the layers join losses:
// "ce_loss" (the cross-entropy; "loss" is it plus aux_loss, as
// transformers' loss), "aux_loss" (the mean over micro-batches of the
// losses add_loss joins, summed over layers) and, from a plan's forward,
// "expert_load" (per layer, the tokens each expert took in the step; [] for
// a layer without experts).
static void log_reports(const Run *r, double ce) {
    if (r->joins) fprintf(r->log, ", \"ce_loss\": %.9g, \"aux_loss\": %.9g", ce, r->aux);
    if (!r->reports || !r->max_e) return;
    fputs(", \"expert_load\": [", r->log);
    for (int64_t l = 0; l < r->p->graph->layers; l++) {
        fputs(l ? ", [" : "[", r->log);
        for (int64_t e = 0; e < r->experts[l]; e++)
            fprintf(r->log, "%s%.0f", e ? ", " : "", r->loads[l * r->max_e + e]);
        fputs("]", r->log);
    }
    fputs("]", r->log);
}

// Validates (when there are validation batches to use) and logs the loss
// into *val (NAN when none); first applies every pending update. 0, or -1
// with a message.
static int log_val(Run *r, int64_t s, double *val, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    *val = NAN;
    if (r->o->val_batches <= 0 || data_val_batches(r->val, t->batch, t->seq) <= 0) return 0;
    store_flush(&r->hs, r->p);
    if (store_ok(r, err, errcap) != 0 || validate(r, val, err, errcap) != 0) return -1;
    if (r->log && isfinite(*val)) {
        fprintf(r->log, "{\"step\": %lld, \"val_loss\": %.9g}\n", (long long)s, *val);
        if (log_flush(r, err, errcap) != 0) return -1;
    }
    fprintf(r->o->out, "step %6lld  val_loss %.4f\n", (long long)s, *val);
    fflush(r->o->out);
    return 0;
}

// The model a checkpoint belongs to: its parameters' checkpoint names and
// shapes, the layers, and the host store's layout (which every plan of the
// model shares), not the schedule, batch or target.
static uint32_t model_crc(const Plan *p) {
    const Graph *g = p->graph;
    int64_t head[3] = {g->layers, p->host_global, p->host_layer};
    uint32_t c = io_crc32(0, head, sizeof head);
    for (int i = 0; i < g->params.n; i++) {
        const Param *pm = g->params.items[i];
        c = io_crc32(c, pm->ckpt, strlen(pm->ckpt) + 1);
        c = io_crc32(c, &pm->shape.rank, sizeof pm->shape.rank);
        c = io_crc32(c, pm->shape.dims, (size_t)pm->shape.rank * sizeof pm->shape.dims[0]);
        c = io_crc32(c, &p->param_offset[i], sizeof p->param_offset[i]);
    }
    return c;
}

// The parameters of the model: every tensor, block tensors once per layer.
static int64_t param_count(const Graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *pm = g->params.items[i];
        n += shape_numel(&pm->shape) * param_copies(g, pm);
    }
    return n;
}

// A checkpoint's arrays through the store, where some live in the tier.
static int store_ckpt_get(void *ctx, int array, int64_t off, int64_t n, float *dst, char *err, size_t errcap) {
    Run *r = ctx;
    return store_get(&r->hs, r->p, array, off, n, dst, err, errcap);
}
static int store_ckpt_put(void *ctx, int array, int64_t off, int64_t n, const float *src, char *err, size_t errcap) {
    Run *r = ctx;
    return store_put(&r->hs, r->p, array, off, n, src, err, errcap);
}

// The store's segments in store order (the head's globals, the tail's,
// then each layer's), as checkpoints shard them: malloc'd, *n of them.
static CkptSegment *checkpoint_segments(const Plan *p, int *n) {
    int64_t layers = p->graph->layers;
    CkptSegment *segs = malloc((size_t)(layers + 2) * sizeof *segs);
    for (int64_t k = 0; segs && k < layers + 2; k++) {
        int64_t seg = k == 0 ? SEG_HEAD : k == 1 ? SEG_TAIL : k - 2;
        segs[k] = (CkptSegment){plan_segment_base(p, seg), plan_segment_len(p, seg)};
    }
    *n = (int)(layers + 2);
    return segs;
}

// Continues from the newest checkpoint in o->resume: weights, both Adam
// moments, step and data position. A checkpoint belongs to the model, not
// the plan: another plan of the same model (batch, remat, target, tiling)
// resumes it, and what changed is said. Returns the last step done, or -1
// with a message.
static int64_t resume(Run *r, uint64_t seed, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    char path[4096];
    CkptMeta meta;
    // Whose checkpoint it is, first; then the arrays.
    if (ckpt_latest(r->o->resume, path, sizeof path, err, errcap) != 0 ||
        ckpt_load(path, &meta, -1, NULL, 0, NULL, NULL, err, errcap) != 0)
        return -1;
    if (meta.model_crc != model_crc(p) || meta.n != plan_host_elems(p)) {
        snprintf(err, errcap, "%s: this checkpoint belongs to model '%s' (parameters crc %08x, %lld floats); this plan's "
                 "model is '%s' (crc %08x, %lld floats): a checkpoint resumes only the model that wrote it%s", path,
                 meta.model, meta.model_crc, (long long)meta.n, p->graph->model_name, model_crc(p), (long long)plan_host_elems(p),
                 strcmp(meta.model, p->graph->model_name) ? ""
                 : ", laid out as it was (an edited model, or a store laid out by another version of mt: the mt that "
                   "wrote it can --export its weights, and --init starts from them)");
        return -1;
    }
    if (meta.seed != seed) {
        snprintf(err, errcap, "%s: written by a run with seed %llu, this run's is %llu", path,
                 (unsigned long long)meta.seed, (unsigned long long)seed);
        return -1;
    }
    CkptIO io = {store_ckpt_get, store_ckpt_put, r};
    int nsegs;
    CkptSegment *segs = checkpoint_segments(p, &nsegs);
    // every segment whole (a replicated store) or this rank's slice of each (a sharded one), from a file or
    // the shards of any number of ranks
    CkptRange *want = p->sharded && segs ? malloc((size_t)nsegs * sizeof *want) : NULL;
    for (int k = 0; want && k < nsegs; k++) dist_shard(segs[k].len, r->hs.rank, r->hs.ranks, &want[k].lo, &want[k].hi);
    int rc = segs && (want || !p->sharded) ? ckpt_load(path, &meta, plan_host_elems(p), segs, nsegs, want, &io, err, errcap) : -1;
    if (!segs || (p->sharded && !want)) snprintf(err, errcap, "out of memory");
    free(segs), free(want);
    if (rc != 0) return -1;
    if (data_seek(&r->data, meta.data_pos, err, errcap) != 0) {
        size_t n = strlen(err);
        snprintf(err + n, errcap - n, " (%s)", path);
        return -1;
    }
    r->ckpt_schedule_steps = meta.schedule_steps;
    fprintf(r->o->out, "resumed from %s at step %lld\n", path, (long long)meta.step);
    if (meta.plan_crc != p->plan_crc) { // the same model under another plan: say what changed
        fprintf(r->o->out, "  written by another plan of this model; weights, Adam moments, step and data position carry over:\n");
        if (meta.batch != t->batch || meta.seq != t->seq || meta.accumulate != t->accumulate)
            fprintf(r->o->out, "  batch %lld x seq %lld x accumulate %lld -> %lld x %lld x %lld\n", (long long)meta.batch,
                    (long long)meta.seq, (long long)meta.accumulate, (long long)t->batch, (long long)t->seq,
                    (long long)t->accumulate);
        if (strncmp(meta.schedule, p->schedule, CKPT_SCHEDULE_BYTES - 1))
            fprintf(r->o->out, "  schedule %s\n        -> %s\n", meta.schedule, p->schedule);
        if (meta.device_limit != p->device_limit)
            fprintf(r->o->out, "  device memory %.2f GB -> %.2f GB\n", (double)meta.device_limit / 1e9,
                    (double)p->device_limit / 1e9);
    }
    return meta.step;
}

// A save of several ranks: each writes its shard of every segment, and
// once all are on disk rank 0 commits the step with the manifest. A rank
// that fails (or is killed) leaves the previous manifest the newest. 0,
// or -1 with a message (on every rank: the failing rank's own, else which
// rank failed).
static int save_sharded(Run *r, const CkptMeta *meta, char *err, size_t errcap) {
    const Dist *d = r->o->dist;
    CkptIO io = {store_ckpt_get, store_ckpt_put, r};
    int nsegs;
    CkptSegment *segs = checkpoint_segments(r->p, &nsegs);
    int64_t mine[3] = {-1, 0, 0}, *all = malloc((size_t)d->size * sizeof mine), bytes = 0; // (size, 3): ok, bytes, crc
    uint32_t crc = 0;
    if (!segs || !all) snprintf(err, errcap, "out of memory");
    else if (ckpt_save_shard(r->save_dir, meta, segs, nsegs, d->rank, d->size, &io, &bytes, &crc, err, errcap) == 0)
        mine[0] = 0, mine[1] = bytes, mine[2] = crc;
    int64_t scratch[3];
    dist_gather_i64(d, mine, 3, all ? all : scratch); // (every rank joins; one out of memory then fails alone)
    int rc = all && mine[0] == 0 ? 0 : -1, failed = -1;
    for (int k = 0; all && k < d->size && failed < 0; k++)
        if (all[3 * k] != 0) failed = k;
    if (rc == 0 && failed >= 0) {
        snprintf(err, errcap, "rank %d of %d could not write its shard of step %lld (its message says why); step %lld "
                 "is not saved, the newest checkpoint in %s stays the one to resume", failed, d->size,
                 (long long)meta->step, (long long)meta->step, r->save_dir);
        rc = -1;
    }
    if (rc == 0 && d->rank == 0) {
        int64_t *b = malloc((size_t)d->size * sizeof *b);
        uint32_t *c = malloc((size_t)d->size * sizeof *c);
        for (int k = 0; b && c && k < d->size; k++) b[k] = all[3 * k + 1], c[k] = (uint32_t)all[3 * k + 2];
        if (!b || !c) rc = -1, snprintf(err, errcap, "out of memory");
        else rc = ckpt_commit_shards(r->save_dir, r->o->keep, meta, segs, nsegs, d->size, b, c, err, errcap);
        free(b), free(c);
    }
    free(segs), free(all);
    return rc;
}

static int save(Run *r, int64_t step, uint64_t seed, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    store_flush(&r->hs, p); // the checkpoint holds step `step`'s weights
    if (store_ok(r, err, errcap) != 0) return -1;
    CkptMeta meta = {.step = step, .data_pos = data_position(&r->data), .seed = seed, .plan_crc = p->plan_crc,
                     .model_crc = model_crc(p), .n = plan_host_elems(p), .batch = t->batch, .seq = t->seq,
                     .accumulate = t->accumulate, .device_limit = p->device_limit,
                     .schedule_steps = r->schedule_steps};
    snprintf(meta.model, sizeof meta.model, "%s", p->graph->model_name);
    snprintf(meta.schedule, sizeof meta.schedule, "%s", p->schedule);
    CkptIO io = {store_ckpt_get, store_ckpt_put, r};
    if (run_ranks(r) > 1 ? save_sharded(r, &meta, err, errcap) != 0
        : r->hs.tier     ? ckpt_save_io(r->save_dir, r->o->keep, &meta, &io, err, errcap) != 0
                         : ckpt_save(r->save_dir, r->o->keep, &meta, r->hs.w, r->hs.m, r->hs.v, err, errcap) != 0)
        return -1;
    fprintf(r->o->out, "step %6lld  saved a checkpoint in %s\n", (long long)step, r->save_dir);
    return 0;
}

// ---------------------------------------------------------------- watching a run

// SIGINT and SIGTERM: the first asks the loop to finish the step, save
// (with --save) and exit 0; a second ends the process at once (the signal's
// default action), leaving the checkpoints as they were (a save in progress
// is a .tmp no reader takes). stop_note says which, set before the handler
// is installed.
static volatile sig_atomic_t stop_signal;
static const char *stop_note;

static void on_stop_signal(int sig) {
    if (stop_signal) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    ssize_t ignored = write(2, stop_note, strlen(stop_note));
    (void)ignored;
}

// Whether to stop before the next step: a signal on any rank (each rank's
// signal arrives when it does; the ranks agree, so all stop after the same step).
static int agreed_stop(const Run *r) {
    double any = stop_signal;
    dist_max_doubles(r->o->dist, &any, 1);
    if (any && !stop_signal) stop_signal = (sig_atomic_t)any;
    return any != 0;
}

// "1h02m", "3m05s", "12.3s"
static void human_time(char *out, size_t cap, double s) {
    if (!(s >= 0) || s > 1e9) snprintf(out, cap, "?");
    else if (s < 60) snprintf(out, cap, "%.1fs", s);
    else if (s < 3600) snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

// A layer pass: the kernel runs of one layer (or of the head and tail,
// layer -1) one after another in the compute stream: a layer's forward, its
// recompute, its backward, once a micro-batch. *layer carries the layer of the
// pass running across calls; returns 1 when `in` starts a new pass.
static int starts_pass(int32_t *layer, const Instr *in) {
    if (in->kind != INS_RUN || in->layer == *layer) return 0;
    *layer = in->layer;
    return 1;
}

// The layer passes of a step: the train stream's, once a micro-batch.
static int64_t count_passes(const Plan *p, int accumulate) {
    int64_t n = 0;
    for (int a = 0; a < accumulate; a++) {
        int32_t layer = INT32_MIN; // (as micro_batch starts each)
        for (int i = 0; i < p->ntrain; i++) n += starts_pass(&layer, &p->train[i]);
    }
    return n;
}

// After each kernel run of a step: every 10 s, how many of the step's layer
// passes are done.
static void note_progress(void *ctx, const Instr *in) {
    Run *r = ctx;
    if (!r->step_t0) return; // validation, not a step
    r->passes_done += starts_pass(&r->pass_layer, in);
    double now = now_s();
    if (now - r->last_note < r->note_every) return;
    r->last_note = now;
    char el[32];
    human_time(el, sizeof el, now - r->step_t0);
    fprintf(r->o->out, "  step %lld: %lld of %lld layer passes (%.0f%%), %s in\n", (long long)r->step,
            (long long)r->passes_done, (long long)r->passes_per_step,
            100.0 * (double)r->passes_done / (double)(r->passes_per_step ? r->passes_per_step : 1), el);
    fflush(r->o->out);
}

// "PATH (N tokens, FORMAT[, mask M: K% of targets ignored])"
static void describe_data(char *out, size_t cap, const DataSet *d, const char *split) {
    static const char *const FORMAT[] = {[DATA_TEXT] = "bytes", [DATA_LLMC] = "llm.c uint16 tokens",
                                         [DATA_LLMC3] = "llm.c Llama-3 uint32 tokens"};
    int n = snprintf(out, cap, "%s (%lld tokens, %s%s", d->path, (long long)d->ntokens, FORMAT[d->format], split);
    if (d->mask && n > 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, "; mask %s: %.1f%% of targets ignored", d->mask_path,
                      100.0 * (double)d->nmasked / (double)d->ntokens);
    if (d->docs && n > 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, "; %lld documents (%s): attention within each", (long long)d->ndocs,
                      d->docs_path);
    if (n > 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, ")");
}

static void banner(Run *r, const char *plan_path, int64_t steps, int64_t from, double base_lr, uint64_t seed) {
    const Plan *p = r->p;
    const Graph *g = p->graph;
    const TrainConfig *t = &g->train;
    FILE *out = r->o->out;
    char d[1024];
    fprintf(out, "mtrun: model %s (%s), %lld parameters, %lld layers", g->model_name, p->source_path,
            (long long)param_count(g), (long long)g->layers);
    if (g->nkinds > 1) fprintf(out, " of %d kinds, each streamed by itself", g->nkinds);
    fputc('\n', out);
    fprintf(out, "  plan     %s: %s\n", plan_path, p->schedule);
    const char *dev = r->o->reference ? "none: the reference executor" : r->be ? r->be->name : "cpu";
    if (run_ranks(r) > 1) { // each rank's (its GPU: its local rank modulo the machine's), a collective
        char *all = dist_gather_lines(r->o->dist, dev);
        for (char *line = all, *end; line && *line; line = end + 1) {
            end = strchr(line, '\n');
            fprintf(out, "  %s %.*s\n", line == all ? "device  " : "        ", (int)(end - line), line);
        }
        free(all);
        fprintf(out, "           each rank: arena %.2f MB", (double)p->arena_bytes / 1e6);
    } else {
        fprintf(out, "  device   %s; arena %.2f MB", dev, (double)p->arena_bytes / 1e6);
    }
    if (p->scratch_bytes) // a GPU plan's: each kernel-running engine's beside the arena (common/scratch.h)
        fprintf(out, " + kernel scratch %d x %.2f MB", plan_scratch_engines(p), (double)p->scratch_bytes / 1e6);
    fprintf(out, ", host store %.2f MB (%lld bytes allocated%s), %d optimizer threads\n", (double)ram_store_bytes(r) / 1e6,
            (long long)r->hs.bytes, r->hs.gb ? "; the layers' gradients bf16" : "", r->o->threads);
    if (r->hs.tier)
        fprintf(out, "  tier     %s: the layers' Adam moments%s%s, %.2f MB (scratch, removed at exit; not a checkpoint)\n",
                tier_path(r->hs.tier), r->hs.tier_master ? (r->hs.tier_grads ? ", fp32 master" : " and fp32 master") : "",
                r->hs.tier_grads ? " and gradients" : "", (double)tier_bytes(r->hs.tier) / 1e6);
    describe_data(d, sizeof d, &r->data, r->o->val_data ? (r->o->shuffle ? "; windows shuffled every epoch" : "")
                                         : r->o->shuffle ? "; the last 10% validates; windows shuffled every epoch"
                                                         : "; the last 10% validates");
    fprintf(out, "  data     %s\n", d);
    if (r->o->val_data) {
        describe_data(d, sizeof d, &r->val_file, "");
        fprintf(out, "  val data %s\n", d);
    }
    if (r->o->init) fprintf(out, "  init     %s\n", r->o->init);
    fprintf(out, "  steps    %lld to %lld of %lld tokens (batch %lld x seq %lld x accumulate %lld), lr %.3g, seed %llu",
            (long long)from + 1, (long long)steps, (long long)(t->batch * t->seq * t->accumulate * run_ranks(r)),
            (long long)t->batch * run_ranks(r),
            (long long)t->seq, (long long)t->accumulate, base_lr, (unsigned long long)seed);
    if (r->schedule_steps != steps) fprintf(out, ", lr schedule over %lld steps", (long long)r->schedule_steps);
    fputc('\n', out);
    if (r->predicted_s > 0)
        fprintf(out, "  predicted step %.4g s on the plan's target%s\n", r->predicted_s,
                r->compare ? "" : r->p->cuda_arch ? ", a GPU: not compared with this cpu backend's steps"
                                                   : ", a cpu: not compared with this GPU's steps");
    if (run_ranks(r) > 1 && r->p->sharded)
        fprintf(out, "  ranks    %d (MPI), each with a 1/%d shard of the host store (%.3g GB) and %lld of every %lld rows; "
                "weights all-gathered and gradients reduce-scattered layer by layer (sharded); times are the slowest "
                "rank's\n", run_ranks(r), run_ranks(r), (double)ram_store_bytes(r) / 1e9, (long long)t->batch,
                (long long)t->batch * run_ranks(r));
    else if (run_ranks(r) > 1)
        fprintf(out, "  ranks    %d (MPI), each with the whole host store and %lld of every %lld rows; gradients summed "
                "over the ranks (replicated); times are the slowest rank's\n", run_ranks(r), (long long)t->batch,
                (long long)t->batch * run_ranks(r));
    fprintf(out, "  log      %s\n", r->o->log_path ? r->o->log_path : "none");
    if (r->save_dir)
        fprintf(out, "  saves    %s every %lld steps, the final step, and on SIGINT/SIGTERM; the newest %d kept%s%s\n",
                r->save_dir, (long long)r->o->save_every, r->o->keep,
                r->o->save_default ? " (beside the log; --no-save: none)" : "",
                run_ranks(r) > 1 ? "; sharded: each rank its shard, rank 0 the manifest" : "");
    else
        fprintf(out, "  saves    none: %s\n", r->no_save[0] ? r->no_save : "--no-save");
    fflush(out);
}

// A JSON string of s (quotes and backslashes escaped; control bytes as \u00XX).
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

// The log's first record of a run (and of each resumed part of it): what it
// runs. 0, or -1 with a message (the log cannot be written).
static int log_config(Run *r, const char *plan_path, int64_t steps, int64_t from, double base_lr, uint64_t seed,
                      char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    FILE *f = r->log;
    if (!f) return 0;
    fprintf(f, "{\"config\": {\"model\": ");
    json_str(f, p->graph->model_name);
    fprintf(f, ", \"model_file\": ");
    json_str(f, p->source_path);
    fprintf(f, ", \"plan\": ");
    json_str(f, plan_path);
    fprintf(f, ", \"schedule\": ");
    json_str(f, p->schedule);
    fprintf(f, ", \"params\": %lld, \"layers\": %lld, \"batch\": %lld, \"seq\": %lld, \"accumulate\": %lld, "
               "\"ranks\": %d, \"tokens_per_step\": %lld, \"steps\": %lld, \"schedule_steps\": %lld, \"from_step\": %lld, "
               "\"lr\": %.9g, \"seed\": %llu, "
               "\"predicted_step_s\": %.6g, \"reference\": %s, \"arena_bytes\": %lld, \"scratch_bytes\": %lld, \"device\": ",
            (long long)param_count(p->graph), (long long)p->graph->layers, (long long)t->batch, (long long)t->seq,
            (long long)t->accumulate, run_ranks(r), (long long)(t->batch * t->seq * t->accumulate * run_ranks(r)),
            (long long)steps, (long long)r->schedule_steps, (long long)from,
            base_lr, (unsigned long long)seed, r->predicted_s, r->o->reference ? "true" : "false",
            (long long)p->arena_bytes, (long long)p->scratch_bytes);
    json_str(f, r->o->reference ? "none" : r->be ? r->be->name : "cpu");
    fprintf(f, ", \"data\": ");
    json_str(f, r->data.path);
    fprintf(f, ", \"mask\": ");
    if (r->data.mask_path) json_str(f, r->data.mask_path);
    else fputs("null", f);
    fprintf(f, ", \"val_data\": ");
    if (r->o->val_data) json_str(f, r->o->val_data);
    else fputs("null", f);
    fprintf(f, ", \"init\": "); // the pretrained weights the run started from (null: the seed's)
    if (r->o->init) json_str(f, r->o->init);
    else fputs("null", f);
    fprintf(f, ", \"save\": ");
    if (r->save_dir) json_str(f, r->save_dir);
    else fputs("null", f);
    fprintf(f, "}}\n");
    return log_flush(r, err, errcap);
}

// The steps the learning-rate schedule spans, into r->schedule_steps: part
// of the run, as its checkpoints keep it. --schedule-steps, else on resume
// the checkpoint's (whatever --steps says: a resume with more steps keeps
// the schedule the run had, its end's lr past it, and says so), else
// --steps.
static void schedule_of_run(Run *r, int64_t steps, double base_lr, int64_t done) {
    const TrainConfig *t = &r->p->graph->train;
    int64_t ckpt = r->o->resume ? r->ckpt_schedule_steps : 0, given = r->o->schedule_steps;
    r->schedule_steps = given > 0 ? given : ckpt > 0 ? ckpt : steps;
    FILE *out = r->o->out;
    if (r->o->resume && !ckpt && given <= 0)
        fprintf(out, "  lr schedule: the checkpoint (version 2) does not record its run's; over this run's %lld steps\n",
                (long long)steps);
    else if (r->o->resume && given <= 0 && ckpt != steps)
        fprintf(out, "  lr schedule: over the checkpoint's run's %lld steps, kept%s (--schedule-steps %lld would span "
                "this run's)\n", (long long)ckpt, steps > ckpt ? ", its final lr past them" : "", (long long)steps);
    else if (r->o->resume && given > 0 && ckpt > 0 && given != ckpt)
        fprintf(out, "  lr schedule: over %lld steps (--schedule-steps), the checkpoint's run's was %lld: step %lld's lr "
                "%.4g, not %.4g\n", (long long)given, (long long)ckpt, (long long)done + 1,
                train_lr(t, base_lr, done + 1, given), train_lr(t, base_lr, done + 1, ckpt));
}

// --sample-every: continuations of the first half of the first validation
// row, decoded with the data's vocabulary (sample.h). 0, or -1 with a message.
static int print_samples(Run *r, int64_t s, uint64_t seed, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    DataVocab v;
    if (data_vocab_open(&v, r->val, model_vocab(r->p->graph), err, errcap) != 0) return -1;
    store_flush(&r->hs, r->p); // the weights of step s
    data_val_batch(r->val, 0, t->batch, t->seq, r->tokens, r->targets, r->segs);
    int rc = store_ok(r, err, errcap) != 0 ? -1
             : sample_print(r->o->out, r->p, &r->hs, r->o->reference ? NULL : &r->rp, &v, r->tokens,
                            t->seq / 2 > 0 ? t->seq / 2 : 1, seed, s, 2, 1.0, err, errcap);
    data_vocab_close(&v);
    return rc;
}

// Whether the run exports: rank 0's --export, which a sharded plan's ranks
// all take part in (the gather), so every rank learns it.
static int export_agreed(const Run *r) {
    double want = r->o->export_path != NULL;
    if (r->p->sharded) dist_max_doubles(r->o->dist, &want, 1);
    return want > 0;
}

// --export: a file, or a folder with the configs and the tokenizer that
// tools/prepare_data.py keeps beside the training tokens (X.tokenizer/, the
// ids from X.vocab.json). 0, or -1 with a message.
static int export_weights(Run *r, char *err, size_t errcap) {
    const TrainOptions *o = r->o;
    char *tokdir = data_sidecar(r->data.path, ".tokenizer"), why[256];
    DataVocab v = {0};
    HfTokens ids = {-1, -1, -1};
    if (r->data.format != DATA_TEXT && data_vocab_open(&v, &r->data, 0, why, sizeof why) == 0)
        ids = (HfTokens){v.bos, v.eos, v.pad};
    const char *poison = getenv("MT_TEST_EXPORT_POISON"); // a test hook: this rank's master outside its slices NaN,
    if (poison && *poison == '1' && run_ranks(r) > 1 && !r->p->sharded) // as a sharded store has not
        for (int64_t k = 0, n = 0, lo, hi; k < r->p->graph->layers + 2; k++) {
            int64_t seg = k == 0 ? SEG_HEAD : k == 1 ? SEG_TAIL : k - 2, at = store_segment(r->p, seg, &n);
            dist_shard(n, o->dist->rank, o->dist->size, &lo, &hi);
            backend_fill_nan(r->hs.w + at, lo * 4);
            backend_fill_nan(r->hs.w + at + hi, (n - hi) * 4);
        }
    int rc = weights_export(o->export_path, r->p, &r->hs, o->export_bf16, o->shard_bytes, tokdir, &ids, o->dist, err,
                            errcap);
    if (!rc)
        fprintf(o->out, "exported the weights to %s%s%s\n", o->export_path, tokdir ? ", with the tokenizer of " : "",
                tokdir ? tokdir : "");
    data_vocab_close(&v);
    free(tokdir);
    return rc;
}

int train_run(const Plan *p, const char *plan_path, const TrainOptions *o, char *err, size_t errcap) {
    Run r = {.p = p, .o = o};
    const TrainConfig *t = &p->graph->train;
    int rc = 1;
    struct sigaction stop = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART}, old_int, old_term;
    sigemptyset(&stop.sa_mask);
    stop_signal = 0;
    stop_note = "\nmtrun: finishing this step, then exiting (a second signal exits at once)\n"; // until open_run says
    sigaction(SIGINT, &stop, &old_int);
    sigaction(SIGTERM, &stop, &old_term);
    if (open_run(&r, err, errcap) != 0) goto done;
    stop_note = r.save_dir ? "\nmtrun: finishing this step, then saving and exiting (a second signal exits at once)\n"
                           : "\nmtrun: finishing this step, then exiting without a checkpoint: this run saves none, as "
                             "its banner says (a second signal exits at once)\n";
    int64_t steps = o->steps >= 0 ? o->steps : t->steps, val_every = o->val_every > 0 ? o->val_every : t->val_every;
    double base_lr = o->lr >= 0 ? o->lr : t->lr;
    uint64_t seed = (uint64_t)(o->seed >= 0 ? o->seed : t->seed);
    r.predicted_s = replay_predicted_step_s(p);
    // a GPU target's plan (CUDA code) is predicted for an asynchronous backend, a cpu target's for the cpu
    r.compare = !o->reference && r.be && (p->cuda_arch && p->cuda_arch[0]) == (r.be->record != NULL);
    r.passes_per_step = count_passes(p, t->accumulate);
    const char *every = getenv("MT_PROGRESS_S");
    r.note_every = every && *every ? atof(every) : 10;
    if (!o->reference) r.rp.on_run = note_progress, r.rp.on_run_ctx = &r;
    if (store_init(&r.hs, p, seed, err, errcap) != 0) goto done;
    if (o->init && weights_load(o->init, p, &r.hs, err, errcap) != 0) goto done;
    int64_t done_steps = o->resume ? resume(&r, seed, err, errcap) : 0;
    if (done_steps < 0) goto done;
    if (store_sync_copy(&r.hs, p, err, errcap) != 0) goto done; // the bf16 copy of what was initialised, loaded or resumed
    schedule_of_run(&r, steps, base_lr, done_steps);
    if (o->resume && done_steps >= steps) {
        snprintf(err, errcap, "nothing to do: the checkpoint in %s is at step %lld and this run ends at step %lld; "
                 "give --steps above %lld to train further", o->resume, (long long)done_steps, (long long)steps,
                 (long long)done_steps);
        goto done;
    }
    banner(&r, plan_path, steps, done_steps, base_lr, seed);
    if (log_config(&r, plan_path, steps, done_steps, base_lr, seed, err, errcap) != 0) goto done;
    double val = NAN, last_val = NAN;
    if (!o->resume && log_val(&r, 0, &last_val, err, errcap) != 0) goto done;
    double tokens_per_step = (double)(t->batch * t->seq * t->accumulate * run_ranks(&r)), t_run = now_s();
    int64_t s = done_steps, saved = done_steps;
    // Whether to stop: decided once before the steps and once after each, the
    // same on every rank, so a step that ends in a stop is the step saved.
    int stopping = agreed_stop(&r);
    while (s < steps && !stopping) {
        s++;
        double t0 = now_s(), lr = train_lr(t, base_lr, s, r.schedule_steps), norm, loss;
        r.step = s, r.step_t0 = r.last_note = t0, r.passes_done = 0;
        if (step(&r, s, lr, &loss, &norm, err, errcap) != 0) goto done;
        r.step_t0 = 0;
        double now = now_s(), dt = now - t0, elapsed = now - t_run;
        dist_max_doubles(o->dist, &dt, 1); // the slowest rank's
        if (!isfinite(loss) || !isfinite(norm)) { // (AdamW would spread a non-finite gradient into every weight)
            snprintf(err, errcap, "step %lld: the %s is %f; stopping", (long long)s,
                     isfinite(loss) ? "gradient norm" : "loss", isfinite(loss) ? norm : loss);
            goto done;
        }
        if (r.log) { // the log first, flushed: a run killed after a printed step has logged it
            fprintf(r.log, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.6g, \"tokens_per_s\": %.1f, "
                           "\"ms\": %.3f, \"elapsed_s\": %.3f", (long long)s, loss + r.aux, lr, norm,
                    tokens_per_step / dt, dt * 1e3, elapsed);
            log_reports(&r, loss);
            fputs("}\n", r.log);
            if (log_flush(&r, err, errcap) != 0) goto done;
        }
        char el[32], eta[32], vs[48] = "";
        human_time(el, sizeof el, elapsed);
        human_time(eta, sizeof eta, elapsed / (double)(s - done_steps) * (double)(steps - s));
        if (r.predicted_s > 0 && r.compare) snprintf(vs, sizeof vs, " (%.3gx predicted)", dt / r.predicted_s);
        char aux[80] = ""; // loss is the objective: the cross-entropy and the joined losses, labelled
        if (r.joins) snprintf(aux, sizeof aux, " (ce %.6f + aux %.6f)", loss, r.aux);
        fprintf(o->out, "step %6lld/%lld  loss %.6f%s  lr %.3e  norm %.4f  %.0f tok/s  %.1f ms%s  elapsed %s  eta %s\n",
                (long long)s, (long long)steps, loss + r.aux, aux, lr, norm, tokens_per_step / dt, dt * 1e3, vs, el, eta);
        fflush(o->out);
        if ((s % val_every == 0 || s == steps) && log_val(&r, s, &val, err, errcap) != 0) goto done;
        if (isfinite(val)) last_val = val;
        if (o->sample_every && (s % o->sample_every == 0 || s == steps) && (speaks(&r) || p->sharded)) {
            // (a sample that fails stops no run; a sharded plan's every rank runs its forwards, rank 0 prints)
            char why[512] = "";
            if (print_samples(&r, s, seed, why, sizeof why) != 0) fprintf(o->out, "sample %lld: skipped: %s\n", (long long)s, why);
            if (store_ok(&r, err, errcap) != 0) goto done;
        }
        stopping = agreed_stop(&r); // (on every rank: only rank 0 saves)
        if (r.save_dir && (s % o->save_every == 0 || s == steps || stopping)) {
            if (save(&r, s, seed, err, errcap) != 0) goto done;
            saved = s;
        }
    }
    store_flush(&r.hs, p); // the last step's update: training ends with it applied
    if (store_ok(&r, err, errcap) != 0) goto done;
    if (export_agreed(&r) && export_weights(&r, err, errcap) != 0) goto done;
    if (o->logits && (speaks(&r) || p->sharded)) { // the first validation batch's logits (rank 0's rows), for a
        // check against another implementation: rank 0 writes them; a sharded plan's every rank runs the forward
        data_val_batch(r.val, 0, t->batch, t->seq, r.tokens, r.targets, r.segs);
        if (sample_logits_npy(speaks(&r) ? o->logits : NULL, p, &r.hs, o->reference ? NULL : &r.rp, r.tokens, r.targets,
                              r.data.docs || r.val->docs ? r.segs : NULL, err, errcap) != 0)
            goto done;
    }
    if (log_close(&r, err, errcap) != 0) goto done;
    char el[32], vl[48] = "no validation";
    human_time(el, sizeof el, now_s() - t_run);
    if (isfinite(last_val)) snprintf(vl, sizeof vl, "final val_loss %.4f", last_val);
    fprintf(o->out, "%s: %lld steps (%lld to %lld), %.0f tokens in %s; %s; log %s; checkpoints %s%s\n",
            stop_signal ? "stopped by a signal" : "done", (long long)(s - done_steps), (long long)done_steps + 1,
            (long long)s, tokens_per_step * (double)(s - done_steps), el, vl, o->log_path ? o->log_path : "none",
            r.save_dir && saved ? r.save_dir : "none", r.save_dir && saved ? "" : r.save_dir ? " (no step done)"
                                                      : r.no_save[0] ? " (see the banner)" : " (--no-save)");
    rc = 0;
done:
    close_run(&r);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}
