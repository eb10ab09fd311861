#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adamw.h"
#include "backend.h"
#include "checkpoint.h"
#include "data.h"
#include "replay.h"
#include "weights.h"

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
// mtrun feeds.
static int check_inputs(const Graph *g, char *err, size_t errcap) {
    int ok = g->inputs.n == 2;
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
    DataSet data;
    int32_t *tokens, *targets; // (B, T) each
    FILE *log;
} Run;

// One micro-batch through the plan (or the reference executor): its loss
// into *loss. `last`: the step's last micro-batch. 0, or -1 with a message.
static int micro_batch(Run *r, int backward, int last, float *loss, char *err, size_t errcap) {
    const int32_t *inputs[2] = {r->tokens, r->targets};
    if (r->o->reference) {
        *loss = reference_step(r->p, &r->hs, inputs, backward);
        return 0;
    }
    const Plan *p = r->p;
    return backward ? replay(&r->rp, p->train, p->ntrain, inputs, last, loss, err, errcap)
                    : replay(&r->rp, p->eval, p->neval, inputs, last, loss, err, errcap);
}

// The mean validation loss into *val (NAN: no batches). 0, or -1 with a message.
static int validate(Run *r, double *val, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    int64_t n = data_val_batches(&r->data, t->batch, t->seq);
    if (n > r->o->val_batches) n = r->o->val_batches;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float loss;
        data_val_batch(&r->data, i, t->batch, t->seq, r->tokens, r->targets);
        if (micro_batch(r, 0, 1, &loss, err, errcap) != 0) return -1;
        sum += loss;
    }
    *val = n ? sum / (double)n : NAN;
    return 0;
}

// The end of step t_step: the global gradient norm from the per-segment
// squared norms, summed in a fixed order (the globals, then layers 0 ..
// L-1) whoever computed them: the plan's INS_NORM during the last
// micro-batch, or this function for each segment nothing computed; then
// every segment's update made pending, with the clip and 1/accumulation
// scale. Sets *norm to the norm before clipping.
static void step_end(Run *r, int64_t t_step, double lr, double *norm) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    double sq = 0;
    for (int64_t s = 0; s < r->hs.nseg; s++) {
        if (isnan(r->hs.seg[s].sq_norm)) store_norm(&r->hs, p, s - 1);
        sq += r->hs.seg[s].sq_norm;
    }
    double inv = 1.0 / (double)t->accumulate;
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
static int step(Run *r, int64_t t_step, double lr, double *loss, double *norm, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    // Gradients start the step at zero: an update the train stream does not
    // apply (and zero the gradients of) is applied here, before the stream.
    for (int64_t s = 0; s < r->hs.nseg; s++) {
        if (r->hs.seg[s].pending && (r->o->reference || !r->stream_updates[s])) store_update(&r->hs, p, s - 1);
        r->hs.seg[s].sq_norm = NAN;
    }
    double sum = 0;
    for (int64_t k = 0; k < t->accumulate; k++) {
        float l;
        data_next_train(&r->data, t->batch, t->seq, r->tokens, r->targets);
        if (micro_batch(r, 1, k == t->accumulate - 1, &l, err, errcap) != 0) return -1;
        sum += l;
    }
    step_end(r, t_step, lr, norm);
    if (r->o->reference) store_flush(&r->hs, p);
    *loss = sum / (double)t->accumulate;
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

// Refuses a run whose host store and cpu arena will not fit, before any of
// it is allocated.
static int check_host_memory(Run *r, char *err, size_t errcap) {
    int64_t need = store_bytes(r->p) + (r->o->reference ? 0 : r->p->arena_bytes + r->p->host_act_bytes);
    int64_t have = r->o->host_available > 0 ? r->o->host_available : host_available();
    if (have <= 0 || need <= have) return 0;
    snprintf(err, errcap, "the plan needs %lld bytes of host memory (%.1f GiB: weights, Adam moments, gradients%s) "
             "but this machine has %lld bytes (%.1f GiB) available", (long long)need, (double)need / (1 << 30),
             r->o->reference ? "" : ", the cpu arena and the host activation store", (long long)have, (double)have / (1 << 30));
    return -1;
}

// A new run must not prune or replace the checkpoints of another: --save
// into a directory that holds some is refused unless resuming from it.
static int check_save_dir(const TrainOptions *o, char *err, size_t errcap) {
    char path[4096], ignored[256];
    if (!o->save_dir || (o->resume && !strcmp(o->resume, o->save_dir))) return 0;
    if (ckpt_latest(o->save_dir, path, sizeof path, ignored, sizeof ignored) != 0) return 0; // none there
    snprintf(err, errcap, "%s already holds checkpoints (%s); pass --resume %s to continue that run, or save into "
             "another directory", o->save_dir, path, o->save_dir);
    return -1;
}

static int open_run(Run *r, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    const char *data = r->o->data ? r->o->data : t->data;
    if (check_inputs(p->graph, err, errcap) != 0) return -1;
    if (!data) {
        snprintf(err, errcap, "no training data: give --data FILE or data = \"FILE\" in the model's train section");
        return -1;
    }
    if (data_open(&r->data, data, model_vocab(p->graph), 0.1, err, errcap) != 0 ||
        data_check_batch(&r->data, t->batch, t->seq, err, errcap) != 0)
        return -1;
    if (check_host_memory(r, err, errcap) != 0) return -1;
    r->tokens = malloc((size_t)(t->batch * t->seq) * sizeof(int32_t));
    r->targets = malloc((size_t)(t->batch * t->seq) * sizeof(int32_t));
    if (!r->tokens || !r->targets || store_alloc(&r->hs, p) != 0) {
        snprintf(err, errcap, "cannot allocate the host store (%lld bytes)", (long long)store_bytes(p));
        return -1;
    }
    r->hs.threads = r->o->threads;
    if (!r->o->reference) {
        ReplayOrder order;
        if (replay_order_parse(getenv("MT_REPLAY_ORDER"), &order, err, errcap) != 0) return -1;
        if (!(r->be = backend_cpu_create(p, err, errcap))) return -1;
        r->act = malloc(p->host_act_bytes ? (size_t)p->host_act_bytes : 1);
        r->stream_updates = calloc((size_t)r->hs.nseg, 1);
        if (!r->act || !r->stream_updates) {
            snprintf(err, errcap, "cannot allocate the host activation store (%lld bytes)", (long long)p->host_act_bytes);
            return -1;
        }
        backend_fill_nan(r->act, p->host_act_bytes); // a LOAD of what no SAVE wrote shows in the loss
        for (int i = 0; i < p->ntrain; i++)
            if (p->train[i].kind == INS_UPDATE && p->train[i].layer >= -1 && p->train[i].layer < p->graph->layers)
                r->stream_updates[p->train[i].layer + 1] = 1;
        r->rp = (Replay){.p = p, .be = r->be, .hs = &r->hs, .act = r->act, .order = order, .rng = order.seed};
    }
    if (check_save_dir(r->o, err, errcap) != 0) return -1;
    // a resumed run continues its log; a new run starts one
    if (r->o->log_path && !(r->log = fopen(r->o->log_path, r->o->resume ? "a" : "w"))) {
        snprintf(err, errcap, "%s: cannot write the metrics log: %s", r->o->log_path, strerror(errno));
        return -1;
    }
    return 0;
}

static void close_run(Run *r) {
    if (r->be) r->be->destroy(r->be);
    if (r->log) fclose(r->log);
    store_free(&r->hs);
    free(r->act);
    free(r->stream_updates);
    data_close(&r->data);
    free(r->tokens);
    free(r->targets);
}

// Validates (when there are validation batches to use) and logs the loss;
// first applies every pending update. 0, or -1 with a message.
static int log_val(Run *r, int64_t s, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    if (r->o->val_batches <= 0 || data_val_batches(&r->data, t->batch, t->seq) <= 0) return 0;
    double val;
    store_flush(&r->hs, r->p);
    if (validate(r, &val, err, errcap) != 0) return -1;
    fprintf(r->o->out, "step %6lld  val_loss %.4f\n", (long long)s, val);
    if (r->log && isfinite(val)) fprintf(r->log, "{\"step\": %lld, \"val_loss\": %.6f}\n", (long long)s, val);
    return 0;
}

// Continues from the newest checkpoint in o->resume: weights, moments, step
// and data position. Returns the last step done, or -1 with a message.
static int64_t resume(Run *r, uint64_t seed, char *err, size_t errcap) {
    char path[4096];
    CkptMeta meta;
    // Whose checkpoint it is, first; then the arrays.
    if (ckpt_latest(r->o->resume, path, sizeof path, err, errcap) != 0 ||
        ckpt_read(path, &meta, -1, NULL, NULL, NULL, err, errcap) != 0)
        return -1;
    if (meta.plan_crc != r->p->plan_crc || meta.source_crc != r->p->source_crc) {
        snprintf(err, errcap, "%s: this checkpoint belongs to another %s (plan crc %08x, this plan %08x); resume it with "
                 "the plan that wrote it", path, meta.source_crc != r->p->source_crc ? "model" : "plan",
                 meta.plan_crc, r->p->plan_crc);
        return -1;
    }
    if (meta.seed != seed) {
        snprintf(err, errcap, "%s: written by a run with seed %llu, this run's is %llu", path,
                 (unsigned long long)meta.seed, (unsigned long long)seed);
        return -1;
    }
    if (ckpt_read(path, &meta, r->hs.n, r->hs.w, r->hs.m, r->hs.v, err, errcap) != 0) return -1;
    r->data.train_pos = meta.data_pos;
    fprintf(r->o->out, "resumed from %s at step %lld\n", path, (long long)meta.step);
    return meta.step;
}

static int save(Run *r, int64_t step, uint64_t seed, char *err, size_t errcap) {
    store_flush(&r->hs, r->p); // the checkpoint holds step `step`'s weights
    CkptMeta meta = {.step = step, .data_pos = r->data.train_pos, .seed = seed, .plan_crc = r->p->plan_crc,
                     .source_crc = r->p->source_crc, .n = r->hs.n};
    return ckpt_save(r->o->save_dir, r->o->keep, &meta, r->hs.w, r->hs.m, r->hs.v, err, errcap);
}

int train_run(const Plan *p, const TrainOptions *o, char *err, size_t errcap) {
    Run r = {.p = p, .o = o};
    const TrainConfig *t = &p->graph->train;
    int rc = 1;
    if (open_run(&r, err, errcap) != 0) goto done;
    int64_t steps = o->steps >= 0 ? o->steps : t->steps, val_every = o->val_every > 0 ? o->val_every : t->val_every;
    double base_lr = o->lr >= 0 ? o->lr : t->lr;
    uint64_t seed = (uint64_t)(o->seed >= 0 ? o->seed : t->seed);
    store_init(&r.hs, p, seed);
    if (o->init && weights_load(o->init, p, &r.hs, err, errcap) != 0) goto done;
    int64_t done_steps = o->resume ? resume(&r, seed, err, errcap) : 0;
    if (done_steps < 0) goto done;
    store_sync_copy(&r.hs); // the bf16 copy of what was initialised, loaded or resumed
    if (!o->resume && log_val(&r, 0, err, errcap) != 0) goto done;
    double tokens_per_step = (double)(t->batch * t->seq * t->accumulate);
    for (int64_t s = done_steps + 1; s <= steps; s++) {
        double t0 = now_s(), lr = train_lr(t, base_lr, s, steps), norm, loss;
        if (step(&r, s, lr, &loss, &norm, err, errcap) != 0) goto done;
        double dt = now_s() - t0;
        if (!isfinite(loss)) {
            snprintf(err, errcap, "step %lld: the loss is %f; stopping", (long long)s, loss);
            goto done;
        }
        fprintf(o->out, "step %6lld/%lld  loss %.6f  lr %.3e  norm %.4f  %.0f tok/s  %.1f ms\n", (long long)s,
                (long long)steps, loss, lr, norm, tokens_per_step / dt, dt * 1e3);
        if (r.log)
            fprintf(r.log, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.6g, \"tokens_per_s\": %.1f, "
                           "\"ms\": %.3f}\n", (long long)s, loss, lr, norm, tokens_per_step / dt, dt * 1e3);
        if ((s % val_every == 0 || s == steps) && log_val(&r, s, err, errcap) != 0) goto done;
        if (o->save_dir && o->save_every > 0 && s % o->save_every == 0 && save(&r, s, seed, err, errcap) != 0) goto done;
        fflush(o->out);
    }
    store_flush(&r.hs, p); // the last step's update: training ends with it applied
    if (o->export_path &&
        weights_export(o->export_path, p, &r.hs, o->export_bf16, o->shard_bytes, err, errcap) != 0)
        goto done;
    rc = 0;
done:
    close_run(&r);
    return rc;
}
