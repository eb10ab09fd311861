// run_log.c: what a training run says: the banner, the progress line of a
// step and the line a step ends with, the metrics log (JSON lines: a config
// record, a record a step and a validation loss), and the summary at its end.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json.h"
#include "common/scratch.h"
#include "runtime/run.h"

// The parameters of the model: every tensor, block tensors once per layer.
static int64_t param_count(const Graph *g) {
    int64_t n = 0;
    for (int i = 0; i < g->params.n; i++) {
        const Param *pm = g->params.items[i];
        n += shape_numel(&pm->shape) * param_copies(g, pm);
    }
    return n;
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
    static const char *const FORMAT[] =
        {[DATA_TEXT] = "bytes", [DATA_LLMC] = "llm.c uint16 tokens", [DATA_LLMC3] = "llm.c Llama-3 uint32 tokens"};
    int n = snprintf(out, cap, "%s (%lld tokens, %s%s", d->path, (long long)d->ntokens, FORMAT[d->format], split);
    if (d->mask && n > 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, "; mask %s: %.1f%% of targets ignored", d->mask_path,
                      100.0 * (double)d->nmasked / (double)d->ntokens);
    if (d->doc_starts && n > 0 && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, "; %lld documents (%s): attention within each",
                      (long long)d->ndocuments, d->doc_starts_path);
    if (n > 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, ")");
}

// Where the weights come from: the resumed checkpoint, --init, or the
// seed's random init, said loudly (stdout and stderr) when the model was
// written from a checkpoint's config.json, whose weights --init would load.
static void banner_weights(const Run *r, int64_t from, uint64_t seed) {
    char source[4096];
    FILE *out = r->o->out;
    if (r->o->resume) {
        fprintf(out, "  init     the checkpoint in %s (step %lld)\n", r->o->resume, (long long)from);
        return;
    }
    if (r->o->init) {
        fprintf(out, "  init     %s\n", r->o->init);
        return;
    }
    fprintf(out, "  init     random weights (seed %llu): no --init\n", (unsigned long long)seed);
    model_source_folder(r->p, source, sizeof source);
    if (!source[0]) return;
    const char *warn = "WARNING: this run trains random weights, not a checkpoint's: the model file %s was written by "
                       "tools/hf_to_mt.py from %s, but no --init was given (--init %s starts from its weights)\n";
    fprintf(out, warn, r->p->source_path, source, source);
    fprintf(stderr, warn, r->p->source_path, source, source);
}

// A resumed run whose schedule is not the one its log's last config record
// ran (a checkpoint does not keep --lr, --warmup, --lr-schedule, --min-lr):
// a warning naming both. Nothing where the log is no file or holds no record.
static void warn_resumed_schedule(const Run *r, double base_lr) {
    struct stat st;
    const char *path = r->o->log_path;
    if (!r->o->resume || !path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
    FILE *f = fopen(path, "r");
    char *line = NULL, *last = NULL;
    size_t cap = 0;
    while (f && getline(&line, &cap, f) > 0)
        if (!strncmp(line, "{\"config\": ", 11)) free(last), last = strdup(line);
    free(line);
    if (f) fclose(f);
    const char *lr = last ? strstr(last, "\"lr\": ") : NULL, *warm = last ? strstr(last, "\"warmup\": ") : NULL;
    const char *sched = last ? strstr(last, "\"lr_schedule\": \"") : NULL,
               *min = last ? strstr(last, "\"min_lr\": ") : NULL;
    if (lr && warm && sched && min) {
        double was_lr = strtod(lr + 6, NULL), was_min = strtod(min + 10, NULL),
               now_min = base_lr * r->sched.min_lr_frac;
        long long was_warm = strtoll(warm + 10, NULL, 10);
        static const char *const NAME[] =
            {[SCHED_COSINE] = "cosine", [SCHED_LINEAR] = "linear", [SCHED_CONSTANT] = "constant"};
        const char *now_sched = NAME[r->sched.schedule];
        int same_sched = !strncmp(sched + 16, now_sched, strlen(now_sched)) && sched[16 + strlen(now_sched)] == '"';
        if (fabs(was_lr - base_lr) > 1e-6 * fabs(was_lr) || was_warm != r->sched.warmup || !same_sched ||
            fabs(was_min - now_min) > 1e-6 * fabs(was_min))
            fprintf(r->o->out,
                    "  WARNING: the run this resumes ran lr %.3g, warmup %lld, %.*s to %.3g (its log %s); this part "
                    "runs lr %.3g, warmup %lld, %s to %.3g: the checkpoint keeps none of them; give --lr, --warmup, "
                    "--lr-schedule and --min-lr as before\n",
                    was_lr, was_warm, (int)strcspn(sched + 16, "\""), sched + 16, was_min, path, base_lr,
                    (long long)r->sched.warmup, now_sched, now_min);
    }
    free(last);
}

// The learning-rate schedule: its warmup, its decay and what it decays to,
// and a warning where the warmup outlasts the run (the peak never reached).
static void banner_schedule(const Run *r, double base_lr) {
    static const char *const NAME[] =
        {[SCHED_COSINE] = "cosine", [SCHED_LINEAR] = "linear", [SCHED_CONSTANT] = "constant"};
    const TrainConfig *t = &r->sched;
    const TrainOptions *o = r->o;
    FILE *out = r->o->out;
    fprintf(out, "  lr       peak %.3g after %lld warmup steps, then %s", base_lr, (long long)t->warmup,
            NAME[t->schedule]);
    if (t->schedule != SCHED_CONSTANT)
        fprintf(out, " to %.3g at step %lld", base_lr * t->min_lr_frac, (long long)r->schedule_steps);
    int flags = (o->lr >= 0) + (o->warmup >= 0) + (o->lr_schedule >= 0) + (o->min_lr >= 0);
    fprintf(out, " (%s)\n",
            flags == 4 ? "the flags"
            : flags    ? "the flags over the model's train section"
                       : "the model's train section; --lr, --warmup, "
                         "--lr-schedule and --min-lr override it");
    warn_resumed_schedule(r, base_lr);
    if (t->warmup >= r->schedule_steps && t->warmup > 0)
        fprintf(out,
                "  WARNING: the warmup (%lld steps) outlasts the run's schedule (%lld steps): the lr never passes "
                "%.3g; --warmup N shortens it\n",
                (long long)t->warmup, (long long)r->schedule_steps,
                train_lr(t, base_lr, r->schedule_steps, r->schedule_steps));
}

// The steps and their tokens, the learning-rate schedule and the predicted step.
static void banner_steps(const Run *r, int64_t steps, int64_t from, double base_lr, uint64_t seed) {
    const TrainConfig *t = &r->p->graph->train;
    FILE *out = r->o->out;
    fprintf(out, "  steps    %lld to %lld of %lld tokens (batch %lld x seq %lld x accumulate %lld), lr %.3g, seed %llu",
            (long long)from + 1, (long long)steps, (long long)(t->batch * t->seq * t->accumulate * run_ranks(r)),
            (long long)t->batch * run_ranks(r), (long long)t->seq, (long long)t->accumulate, base_lr,
            (unsigned long long)seed);
    if (r->schedule_steps != steps) fprintf(out, ", lr schedule over %lld steps", (long long)r->schedule_steps);
    fprintf(out, "; %.3g epochs of the training split%s",
            (double)(steps - from) * (double)tokens_per_step(r) / (double)(r->data.ntrain ? r->data.ntrain : 1),
            r->o->epochs > 0 ? " (--epochs)" : "");
    fputc('\n', out);
    banner_schedule(r, base_lr);
    if (r->predicted_s > 0)
        fprintf(out, "  predicted step %.4g s on the plan's target%s\n", r->predicted_s,
                r->compare        ? ""
                : r->p->cuda_arch ? ", a GPU: not compared with this cpu backend's steps"
                                  : ", a cpu: not compared with this GPU's steps");
}

void log_banner(Run *r, const char *plan_path, int64_t steps, int64_t from, double base_lr, uint64_t seed) {
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
    fprintf(out, ", host store %.2f MB (%lld bytes allocated%s), %d optimizer threads\n",
            (double)ram_store_bytes(r) / 1e6, (long long)r->hs.bytes, r->hs.gb ? "; the layers' gradients bf16" : "",
            r->o->threads);
    if (r->hs.tier)
        fprintf(out,
                "  tier     %s: the layers' Adam moments%s%s, %.2f MB (scratch, removed at exit; not a "
                "checkpoint)\n",
                tier_path(r->hs.tier),
                r->hs.tier_master ? (r->hs.tier_grads ? ", fp32 master" : " and fp32 master") : "",
                r->hs.tier_grads ? " and gradients" : "", (double)tier_bytes(r->hs.tier) / 1e6);
    if (r->hs.tier_weights) // (weights_map: the file's name is removed once mapped)
        fprintf(out, "  tier     %.*s/mtrun.weights: the bf16 weights, %.2f MB, through the page cache\n",
                (int)(strrchr(tier_path(r->hs.tier), '/') - tier_path(r->hs.tier)), tier_path(r->hs.tier),
                (double)r->hs.mapped[4] / 1e6);
    if (plan_opt_device_bytes(p)) { // mtc --device-optimizer: which segments, and who holds them
        int64_t placed = 0;
        for (int64_t s = 0; s < g->layers; s++) placed += plan_opt_device(p, s);
        fprintf(out, "  optimizer %lld of %lld layers%s %s (%.2f MB; the same bits)\n", (long long)placed,
                (long long)g->layers,
                plan_opt_device(p, SEG_HEAD) || plan_opt_device(p, SEG_TAIL) ? " and the globals" : "",
                r->hs.dev ? "on the device: master, moments and AdamW there"
                          : "placed on the device by the plan, kept in the host store by this backend",
                (double)plan_opt_device_bytes(p) / 1e6);
    }
    describe_data(d, sizeof d, &r->data,
                  r->o->val_data  ? (r->o->shuffle ? "; windows shuffled every epoch" : "")
                  : r->o->shuffle ? "; the last 10% validates; windows shuffled every epoch"
                                  : "; the last 10% validates");
    fprintf(out, "  data     %s\n", d);
    if (r->o->val_data) {
        describe_data(d, sizeof d, &r->val_file, "");
        fprintf(out, "  val data %s\n", d);
    }
    banner_weights(r, from, seed);
    if (r->o->resume && from >= steps) // (check_steps_left: --export or --logits of the checkpoint)
        fprintf(out, "  steps    none: the checkpoint is at step %lld, this run ends at %lld\n", (long long)from,
                (long long)steps);
    else banner_steps(r, steps, from, base_lr, seed);
    if (run_ranks(r) > 1 && r->p->sharded)
        fprintf(out,
                "  ranks    %d (MPI), each with a 1/%d shard of the host store (%.3g GB) and %lld of every %lld "
                "rows; weights all-gathered and gradients reduce-scattered layer by layer (sharded); times are the "
                "slowest rank's\n",
                run_ranks(r), run_ranks(r), (double)ram_store_bytes(r) / 1e9, (long long)t->batch,
                (long long)t->batch * run_ranks(r));
    else if (run_ranks(r) > 1)
        fprintf(out,
                "  ranks    %d (MPI), each with the whole host store and %lld of every %lld rows; gradients "
                "summed over the ranks (replicated); times are the slowest rank's\n",
                run_ranks(r), (long long)t->batch, (long long)t->batch * run_ranks(r));
    if (r->o->sample_every || r->o->sample_prompt) { // their cost: a forward of the batch a new token
        int64_t n = r->prompt ? r->prompt_n : t->seq / 2 > 0 ? t->seq / 2 : 1;
        if (r->o->sample_every) fprintf(out, "  samples  every %lld steps and the last", (long long)r->o->sample_every);
        else fprintf(out, "  samples  at the end");
        fprintf(out,
                ": up to %lld new tokens, each a forward of the batch (what a validation batch costs): %lld "
                "batches a round, said when it starts, timed, after the step's checkpoint\n",
                (long long)(t->seq - n), (long long)(t->seq - n));
    }
    fprintf(out, "  log      %s", r->o->log_path ? r->o->log_path : "none");
    if (r->log && r->run_id > 1)
        fprintf(out, " (run %d of the log: appended after %s)", r->run_id,
                r->o->resume ? "the records it holds" : "the earlier runs' records, which stay");
    fputc('\n', out);
    if (r->save_dir)
        fprintf(out, "  saves    %s every %lld steps, the final step, and on SIGINT/SIGTERM; the newest %d kept%s%s\n",
                r->save_dir, (long long)r->o->save_every, r->o->keep,
                r->save_why[0]       ? ""
                : r->o->save_default ? " (beside the log; --no-save: none)"
                                     : "",
                run_ranks(r) > 1 ? "; sharded: each rank its shard, rank 0 the manifest" : "");
    else fprintf(out, "  saves    none: %s\n", r->no_save[0] ? r->no_save : "--no-save");
    if (r->save_dir && r->save_why[0]) fprintf(out, "           this run's own folder: %s\n", r->save_why);
    fflush(out);
}

int log_runs_before(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0; // (a pipe or a device is never read)
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int runs = 0;
    while (f && getline(&line, &cap, f) > 0)
        runs += !strncmp(line, "{\"config\": ", 11) && strstr(line, "\"from_step\": 0,") != NULL;
    free(line);
    if (f) fclose(f);
    return runs;
}

// The log's first record of a run (and of each resumed part of it): what it
// runs. 0, or -1 with a message (the log cannot be written).
int log_config(Run *r, const char *plan_path, int64_t steps, int64_t from, double base_lr, uint64_t seed, char *err,
               size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    FILE *f = r->log;
    if (!f) return 0;
    fprintf(f, "{\"config\": {\"run\": %d, \"model\": ", r->run_id);
    json_str(f, p->graph->model_name);
    fprintf(f, ", \"model_file\": ");
    json_str(f, p->source_path);
    fprintf(f, ", \"plan\": ");
    json_str(f, plan_path);
    fprintf(f, ", \"schedule\": ");
    json_str(f, p->schedule);
    fprintf(f,
            ", \"params\": %lld, \"layers\": %lld, \"batch\": %lld, \"seq\": %lld, \"accumulate\": %lld, "
            "\"ranks\": %d, \"tokens_per_step\": %lld, \"steps\": %lld, \"schedule_steps\": %lld, "
            "\"from_step\": %lld, \"lr\": %.9g, \"seed\": %llu, \"predicted_step_s\": ",
            (long long)param_count(p->graph), (long long)p->graph->layers, (long long)t->batch, (long long)t->seq,
            (long long)t->accumulate, run_ranks(r), (long long)(t->batch * t->seq * t->accumulate * run_ranks(r)),
            (long long)steps, (long long)r->schedule_steps, (long long)from, base_lr, (unsigned long long)seed);
    json_num(f, "%.6g", r->predicted_s); // (inf where mtc priced the plan so: null)
    static const char *const SCHED[] =
        {[SCHED_COSINE] = "cosine", [SCHED_LINEAR] = "linear", [SCHED_CONSTANT] = "constant"};
    fprintf(f, ", \"warmup\": %lld, \"lr_schedule\": \"%s\", \"min_lr\": %.9g, \"weight_decay\": %.9g, \"clip\": %.9g",
            (long long)r->sched.warmup, SCHED[r->sched.schedule], base_lr * r->sched.min_lr_frac, t->weight_decay,
            t->clip);
    fprintf(f, ", \"reference\": %s, \"arena_bytes\": %lld, \"scratch_bytes\": %lld, \"device\": ",
            r->o->reference ? "true" : "false", (long long)p->arena_bytes, (long long)p->scratch_bytes);
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

// Whether the metrics log took everything written to it so far (flushed):
// a full disk or an I/O error stops the run with a message, never a log
// silently lost. 0, or -1 with a message.
int log_flush(Run *r, char *err, size_t errcap) {
    if (!r->log) return 0;
    errno = 0;
    if (fflush(r->log) == 0 && !ferror(r->log)) return 0;
    snprintf(err, errcap, "%s: cannot write the metrics log: %s", r->o->log_path,
             errno ? strerror(errno) : "a write failed");
    return -1;
}

// Closes the metrics log; a failure of its last writes is the run's error.
// 0, or -1 with a message.
int log_close(Run *r, char *err, size_t errcap) {
    if (!r->log) return 0;
    int rc = log_flush(r, err, errcap);
    if (fclose(r->log) != 0 && rc == 0) {
        snprintf(err, errcap, "%s: cannot write the metrics log: %s", r->o->log_path, strerror(errno));
        rc = -1;
    }
    r->log = NULL;
    return rc;
}

// The step's reports in its log line, when the layers join losses:
// "ce_loss" (the cross-entropy; "loss" is it plus aux_loss, as
// transformers' loss), "aux_loss" (the mean over micro-batches of the
// losses add_loss joins, summed over layers) and, from a plan's forward,
// "expert_load" (per layer, the tokens each expert took in the step; [] for
// a layer without experts).
static void log_reports(const Run *r, double ce) {
    if (r->joins) {
        fputs(", \"ce_loss\": ", r->log);
        json_num(r->log, "%.9g", ce);
        fputs(", \"aux_loss\": ", r->log);
        json_num(r->log, "%.9g", r->aux);
    }
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

void log_progress_init(Run *r) {
    const char *every = getenv("MT_PROGRESS_S");
    r->note_every = every && *every ? atof(every) : 10;
    r->passes_per_step = count_passes(r->p, r->p->graph->train.accumulate);
    if (!r->o->reference) r->rp.on_run = note_progress, r->rp.on_run_ctx = r;
}

// The seconds left: the steps left at the mean time of the steps so far,
// and the rounds of samples left (--sample-every's, the last step's) at the
// last round's time, or before any at a forward of the batch a new token,
// about a third of a step.
static double eta_s(const Run *r, const StepDone *d) {
    int64_t every = r->o->sample_every, left = d->steps - d->step;
    double step_s = (d->elapsed - r->samples_s) / (double)(d->step - d->from);
    if (!every || !left) return step_s * (double)left;
    int64_t rounds = d->steps / every - d->step / every + (d->steps % every != 0); // (every Nth step and the last)
    const TrainConfig *t = &r->p->graph->train;
    int64_t n = r->prompt ? r->prompt_n : t->seq / 2 > 0 ? t->seq / 2 : 1;
    double round_s = r->sample_round_s > 0 ? r->sample_round_s : (double)(t->seq - n) * step_s / 3;
    return step_s * (double)left + round_s * (double)rounds;
}

int log_step(Run *r, const StepDone *d, char *err, size_t errcap) {
    double tokens = (double)tokens_per_step(r);
    if (r->log) { // the log first, flushed: a run killed after a printed step has logged it
        fprintf(r->log, "{\"step\": %lld, \"loss\": ", (long long)d->step);
        json_num(r->log, "%.9g", d->loss + r->aux);
        fprintf(r->log, ", \"lr\": %.6g, \"grad_norm\": ", d->lr);
        json_num(r->log, "%.6g", d->norm);
        fprintf(r->log, ", \"tokens_per_s\": ");
        json_num(r->log, "%.1f", tokens / d->dt); // (a step timed at 0 s: null)
        fprintf(r->log, ", \"ms\": %.3f, \"elapsed_s\": %.3f", d->dt * 1e3, d->elapsed);
        log_reports(r, d->loss);
        fputs("}\n", r->log);
        if (log_flush(r, err, errcap) != 0) return -1;
    }
    if (d->step % r->o->log_every && d->step != d->steps && d->step != d->from + 1) return 0; // (--log-every)
    char el[32], eta[32], vs[48] = "";
    human_time(el, sizeof el, d->elapsed);
    human_time(eta, sizeof eta, eta_s(r, d));
    if (r->predicted_s > 0 && r->compare) snprintf(vs, sizeof vs, " (%.3gx predicted)", d->dt / r->predicted_s);
    char aux[80] = ""; // loss is the objective: the cross-entropy and the joined losses, labelled
    if (r->joins) snprintf(aux, sizeof aux, " (ce %.6f + aux %.6f)", d->loss, r->aux);
    fprintf(r->o->out, "step %6lld/%lld  loss %.6f%s  lr %.3e  norm %.4f  %.0f tok/s  %.1f ms%s  elapsed %s  eta %s\n",
            (long long)d->step, (long long)d->steps, d->loss + r->aux, aux, d->lr, d->norm, tokens / d->dt, d->dt * 1e3,
            vs, el, eta);
    fflush(r->o->out);
    return 0;
}

int log_val_loss(Run *r, int64_t s, double val, char *err, size_t errcap) {
    if (r->log && isfinite(val)) {
        fprintf(r->log, "{\"step\": %lld, \"val_loss\": %.9g}\n", (long long)s, val);
        if (log_flush(r, err, errcap) != 0) return -1;
    }
    fprintf(r->o->out, "step %6lld  val_loss %.4f\n", (long long)s, val);
    fflush(r->o->out);
    return 0;
}

void log_summary(const Run *r, int stopped, int64_t from, int64_t s, int64_t saved, double last_val, double seconds) {
    const TrainOptions *o = r->o;
    char el[32], vl[48] = "no validation";
    human_time(el, sizeof el, seconds);
    if (isfinite(last_val)) snprintf(vl, sizeof vl, "final val_loss %.4f", last_val);
    if (s == from && o->resume) { // nothing trained: the checkpoint exported, or its logits written
        fprintf(o->out, "done: nothing trained; the checkpoint in %s (step %lld) as it was\n", o->resume, (long long)s);
        return;
    }
    fprintf(o->out, "%s: %lld steps (%lld to %lld), %.0f tokens in %s; %s; log %s; checkpoints %s%s\n",
            stopped ? "stopped by a signal" : "done", (long long)(s - from), (long long)from + 1, (long long)s,
            (double)tokens_per_step(r) * (double)(s - from), el, vl, o->log_path ? o->log_path : "none",
            r->save_dir && saved ? r->save_dir : "none",
            r->save_dir && saved ? ""
            : r->save_dir        ? " (no step done)"
            : r->no_save[0]      ? " (see the banner)"
                                 : " (--no-save)");
}
