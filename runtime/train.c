// train.c: the training loop of mtrun: opening a run (its data, buffers,
// backend and log), the steps (micro-batches through the plan or the
// reference executor, global-norm clipping, the AdamW update), validation,
// samples, the stop on a signal and the export at the end. The checks made
// before training are in run_checks.c, what the run says in run_log.c, its
// checkpoints in run_checkpoint.c.
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/model_io/weights.h"
#include "runtime/run.h"
#include "runtime/sample.h"

double train_lr(const TrainConfig *t, double base, int64_t step, int64_t steps) {
    if (t->warmup > 0 && step <= t->warmup) return base * (double)step / (double)t->warmup;
    if (t->schedule == SCHED_CONSTANT) return base;
    double span = (double)(steps > t->warmup ? steps - t->warmup : 1);
    double progress = fmin(1.0, fmax(0.0, (double)(step - t->warmup) / span)), min = base * t->min_lr_frac;
    if (t->schedule == SCHED_LINEAR) return base - (base - min) * progress;
    return min + (base - min) * 0.5 * (1.0 + cos(M_PI * progress));
}

// One micro-batch through the plan (or the reference executor): its loss
// into *loss. `last`: the step's last micro-batch. 0, or -1 with a message.
static int micro_batch(Run *r, int backward, int last, float *loss, char *err, size_t errcap) {
    // each model input's host bytes (the loss scale's a float)
    const int32_t *inputs[3] = {r->tokens, r->targets, (const int32_t *)(const void *)&r->loss_scale};
    const int32_t *doc_starts = r->data.doc_starts || r->val->doc_starts ? r->segs : NULL;
    if (r->o->reference) {
        double aux = 0; // the losses add_loss joins, as a plan's INS_STAT reports them
        *loss = reference_step(r->p, &r->hs, inputs, doc_starts, backward, &aux, r->balance_loads);
        if (backward) r->aux += aux;
        return 0;
    }
    const Plan *p = r->p;
    r->rp.seg_start = doc_starts;
    r->pass_layer = INT32_MIN; // a micro-batch's first run starts a layer pass
    int rc = backward ? replay(&r->rp, p->train, p->ntrain, inputs, last, loss, err, errcap)
                      : replay(&r->rp, p->eval, p->neval, inputs, last, loss, err, errcap);
    if (rc == 0 && backward && r->reports) {
        replay_stats_add(p, p->train, p->ntrain, r->stats, r->max_e, &r->aux, r->loads);
        balance_count(r);
    }
    return rc != 0 ? rc : store_ok(r, err, errcap);
}

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
    AdamWStep s = {.lr = (float)lr,
                   .beta1 = (float)t->beta1,
                   .beta2 = (float)t->beta2,
                   .eps = (float)t->adam_eps,
                   .weight_decay = (float)t->weight_decay,
                   .t = t_step,
                   .grad_scale = (float)scale};
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
    // the balance rules' signs, applied with the updates step_end makes pending
    balance_step_end(r);
    int all = total == rows * parts; // no target masked: the plain mean, bit for bit as before masks
    step_end(r, t_step, lr, all || fed ? 1.0 / (double)parts : total ? (double)rows / (double)total : 0, norm);
    if (r->o->reference) store_flush(&r->hs, p);
    if (store_ok(r, err, errcap) != 0) return -1;
    *loss = all ? sum / (double)parts : total ? sum * (double)rows / (double)total : 0;
    return 0;
}

// The training data (and --val-data's): this rank's rows of every global
// batch, the windows shuffled with --shuffle. 0, or -1 with a message.
static int open_data(Run *r, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    const char *data = r->o->data ? r->o->data : t->data;
    const Dist *dist = r->o->dist;
    if (!data) {
        snprintf(err, errcap, "no training data: give --data FILE or data = \"FILE\" in the model's train section");
        return -1;
    }
    int64_t vocab = model_vocab(r->p->graph);
    if (data_open(&r->data, data, vocab, r->o->val_data ? 0 : 0.1, err, errcap) != 0) return -1;
    if (dist) r->data.rank = dist->rank, r->data.ranks = dist->size; // this rank's rows of every global batch
    if (data_check_batch(&r->data, t->batch, t->seq, err, errcap) != 0) return -1;
    r->val = &r->data;
    if (r->o->val_data) {
        if (data_open(&r->val_file, r->o->val_data, vocab, 1, err, errcap) != 0) return -1;
        if (dist) r->val_file.rank = dist->rank, r->val_file.ranks = dist->size;
        if (data_check_batch(&r->val_file, t->batch, t->seq, err, errcap) != 0) return -1;
        r->val = &r->val_file;
    }
    if (r->o->shuffle) data_shuffle(&r->data, (uint64_t)(r->o->seed >= 0 ? r->o->seed : t->seed));
    return 0;
}

// Whether the layers join losses (add_loss) to the cross-entropy.
static int joins_losses(const Graph *g) {
    int joins = 0;
    for (int k = 0; k < g->nkinds; k++) {
        const Part *block = &g->parts[kind_part(k)];
        for (int i = 0; i < block->nfwd; i++) joins |= ((const Node *)block->nodes.items[i])->op == OP_ADD_LOSS;
    }
    return joins;
}

// The batch and the host store: a sharded plan's shard of it, else all of
// it (with the tier's part in the tier's file). 0, or -1 with a message.
static int open_store(Run *r, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainConfig *t = &p->graph->train;
    const Dist *dist = r->o->dist;
    r->tokens = malloc((size_t)(t->batch * t->seq) * sizeof(int32_t));
    r->targets = malloc((size_t)(t->batch * t->seq) * sizeof(int32_t));
    r->segs = calloc((size_t)(t->batch * t->seq), sizeof(int32_t));
    r->loss_scale = 1;
    if (!r->tokens || !r->targets || !r->segs) {
        snprintf(err, errcap, "cannot allocate the batch (%lld tokens)", (long long)(t->batch * t->seq));
        return -1;
    }
    for (int64_t s = SEG_FIRST; r->o->tier_dir && s < p->graph->layers; s++)
        if (plan_opt_device(p, s)) {
            snprintf(err, errcap,
                     "the plan places the optimizer of some layers on the device (mtc --device-optimizer) and "
                     "--tier-dir puts the host store's layers on NVMe: the two together are not built; compile the "
                     "plan with --device-optimizer none to use the tier");
            return -1;
        }
    if (p->sharded ? store_alloc_shard(&r->hs, p, dist ? dist->rank : 0, r->o->tier_dir, plan_tier_holds(p),
                                       r->o->threads, err, errcap) != 0
                   : store_alloc_tier(&r->hs, p, r->o->tier_dir, plan_tier_holds(p), r->o->threads, err, errcap) != 0)
        return -1;
    if (p->sharded && !(r->sq_norms = calloc((size_t)r->hs.nseg, sizeof *r->sq_norms))) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    r->hs.threads = r->o->threads;
    r->joins = joins_losses(p->graph);
    return balance_open(r, err, errcap);
}

// The replay's host buffers: the host activation store, the segments the
// train stream updates, and the forward's reports (INS_STAT) with each
// layer's experts. 0, or -1 with a message.
static int open_replay_buffers(Run *r, char *err, size_t errcap) {
    const Plan *p = r->p;
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
    for (int i = 0; i < p->ntrain; i++)
        if (p->train[i].kind == INS_UPDATE && p->train[i].layer >= -1 && p->train[i].layer < p->graph->layers)
            r->stream_updates[plan_segment_index(p->train[i].layer)] = 1;
    return 0;
}

// Adds to pin the byte ranges of array `at` (elem bytes an element, its
// element 0 the store's index `from`) that gradients of store indices
// [from, to) land in: the runs that hold no frozen element, merged where
// they share a page (a page is pinned once). Returns the ranges in pin, or
// -1 out of memory.
static int pin_trained(const Run *r, HostRange *pin, int npin, char *at, int elem, int64_t from, int64_t to,
                       const char *what) {
    int64_t *runs = malloc((size_t)(2 * store_trained_runs(&r->hs, r->p, from, to, NULL) + 2) * sizeof *runs);
    if (!runs) return -1;
    int n = store_trained_runs(&r->hs, r->p, from, to, runs);
    const uintptr_t page = 4096;
    for (int k = 0; k < n; k++) {
        char *lo = at + (runs[2 * k] - from) * elem, *hi = at + (runs[2 * k + 1] - from) * elem;
        HostRange *last = npin > 0 ? &pin[npin - 1] : NULL;
        if (last && last->what == what &&
            ((uintptr_t)last->ptr + (uintptr_t)last->bytes - 1) / page >= (uintptr_t)lo / page)
            last->bytes = hi - (char *)last->ptr;
        else pin[npin++] = (HostRange){lo, hi - lo, what};
    }
    free(runs);
    return npin;
}

// The cuda backend, with the host memory its streams copy from and to
// pinned, and the order its streams replay in. 0, or -1 with a message.
static int open_cuda(Run *r, ReplayOrder *order, char *err, size_t errcap) {
    const Plan *p = r->p;
    const HostStore *hs = &r->hs;
    // (and the gradients that a COPY_OUT's copy lands in: a layer's bf16 ones, fp32 ones set where they
    // hold zeros; not a tier's, a mapping that holds only what is touched; not a frozen parameter's, which
    // never gets one: their pages stay unallocated)
    int64_t fp32_to = hs->tier_grads ? 0 : hs->gb ? hs->gb_from : hs->n;
    int most = 2 + store_trained_runs(hs, p, 0, fp32_to, NULL) +
               (hs->gb ? store_trained_runs(hs, p, hs->gb_from, hs->n, NULL) : 0);
    HostRange *pin = malloc((size_t)most * sizeof *pin);
    int npin = 0;
    if (pin) { // (not the bf16 weights on the tier: pinned, the page cache could not give them back)
        if (!hs->tier_weights)
            pin[npin++] = (HostRange){hs->wb ? (void *)hs->wb : (void *)hs->w, hs->n * (hs->wb ? 2 : 4),
                                      hs->wb ? "the bf16 weights" : "the weights"};
        pin[npin++] = (HostRange){r->act, p->host_act_bytes, "the host activation store"};
        npin = pin_trained(r, pin, npin, (char *)hs->g, 4, 0, fp32_to, "the fp32 gradients");
        if (npin >= 0 && hs->gb)
            npin = pin_trained(r, pin, npin, (char *)hs->gb, 2, hs->gb_from, hs->n, "the layers' bf16 gradients");
    }
    if (!pin || npin < 0) {
        free(pin);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    r->be = r->o->cuda_create(p, pin, npin, r->o->trace, r->o->dist, err, errcap);
    free(pin);
    if (!r->be) return -1;
    r->be->host_threads = r->o->threads; // the optimizer's: in the backward they add the gradients
    r->hs.dev = r->be->opt_store;        // the segments the plan places on the device are the backend's (NULL: none)
    if (!getenv("MT_REPLAY_ORDER") || !*getenv("MT_REPLAY_ORDER")) order->kind = REPLAY_STREAMS;
    return 0;
}

// Gives the backend the batch's document starts (X.docs), where the data
// has them. 0, or -1 with a message.
static int open_doc_starts(Run *r, char *err, size_t errcap) {
    char why[512];
    if (!r->be->set_doc_starts)
        snprintf(why, sizeof why, "the %s backend takes none", r->o->cuda_create ? "cuda" : "cpu");
    if ((r->data.doc_starts || r->val->doc_starts) &&
        (!r->be->set_doc_starts || r->be->set_doc_starts(r->be, r->segs, why, sizeof why) != 0)) {
        snprintf(err, errcap,
                 "%s: document starts (X.docs) keep attention within each document, but %s: run with "
                 "--device cpu, or move the .docs file away to attend across documents",
                 r->data.doc_starts ? r->data.doc_starts_path : r->val->doc_starts_path, why);
        return -1;
    }
    return 0;
}

// The plan's replay: its buffers, its backend (cuda, or the cpu one) and
// the order its streams run in (MT_REPLAY_ORDER). 0, or -1 with a message.
static int open_replay(Run *r, char *err, size_t errcap) {
    const Plan *p = r->p;
    ReplayOrder order;
    if (replay_order_parse(getenv("MT_REPLAY_ORDER"), &order, err, errcap) != 0) return -1;
    if (open_replay_buffers(r, err, errcap) != 0) return -1;
    if (r->o->cuda_create) {
        if (open_cuda(r, &order, err, errcap) != 0) return -1;
    } else if (!(r->be = backend_cpu_create(p, err, errcap)) ||
               (r->o->trace && backend_cpu_trace(r->be, r->o->trace, err, errcap) != 0)) {
        return -1;
    }
    if (check_backend(r, err, errcap) != 0) return -1;
    r->rp = (Replay){.p = p,
                     .be = r->be,
                     .hs = &r->hs,
                     .act = r->act,
                     .stats = r->stats,
                     .order = order,
                     .rng = order.seed,
                     .hold_ins = r->o->test_hold_ins,
                     .dist = r->o->dist};
    return open_doc_starts(r, err, errcap);
}

// The metrics log (a run appends to it: a resumed run continues its
// records, a new one starts its own, numbered),
// where checkpoints go and the ranks' collectives. 0, or -1 with a message.
static int open_log(Run *r, char *err, size_t errcap) {
    if (r->o->save_dir && !r->o->save_default && check_save_dir(r, err, errcap) != 0) return -1; // before the log
    r->run_id = log_runs_before(r->o->log_path) + !r->o->resume; // a resumed run continues its number
    if (r->run_id < 1) r->run_id = 1;
    if (r->o->log_path && !(r->log = fopen(r->o->log_path, "a"))) { // never truncated: another run's records stay
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

// Opens the run, checked before each part that needs it: the data, the
// host store, the replay on its backend (not with --reference) and the
// log. 0, or -1 with a message.
static int open_run(Run *r, char *err, size_t errcap) {
    if (check_inputs(r->p->graph, err, errcap) != 0 || open_data(r, err, errcap) != 0 ||
        check_flags(r, err, errcap) != 0 || (r->o->sample_prompt && read_sample_prompt(r, err, errcap) != 0) ||
        check_text_data(&r->data, model_vocab(r->p->graph), err, errcap) != 0 ||
        (r->o->val_data && check_text_data(&r->val_file, model_vocab(r->p->graph), err, errcap) != 0) ||
        open_store(r, err, errcap) != 0)
        return -1;
    if (!r->o->reference && open_replay(r, err, errcap) != 0) return -1;
    return open_log(r, err, errcap);
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
    balance_free(r);
    data_close(&r->data);
    data_close(&r->val_file);
    free(r->tokens);
    free(r->targets);
    free(r->segs);
    free(r->save_dir_agreed);
    free(r->prompt);
    comm_close(&r->comm);
}

// Validates (when there are validation batches to use) and logs the loss
// into *val (NAN when none); first applies every pending update. 0, or -1
// with a message.
static int validation(Run *r, int64_t s, double *val, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    *val = NAN;
    if (r->o->val_batches <= 0 || data_val_batches(r->val, t->batch, t->seq) <= 0) return 0;
    store_flush(&r->hs, r->p);
    if (store_ok(r, err, errcap) != 0 || validate(r, val, err, errcap) != 0) return -1;
    return log_val_loss(r, s, *val, err, errcap);
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

// The steps the learning-rate schedule spans, into r->schedule_steps: part
// of the run, as its checkpoints keep it. --schedule-steps, else on resume
// the checkpoint's (whatever --steps says: a resume with more steps keeps
// the schedule the run had, its end's lr past it, and says so), else
// --steps.
static void schedule_of_run(Run *r, int64_t steps, double base_lr, int64_t done) {
    const TrainConfig *t = &r->sched;
    int64_t ckpt = r->o->resume ? r->ckpt_schedule_steps : 0, given = r->o->schedule_steps;
    r->schedule_steps = given > 0 ? given : ckpt > 0 ? ckpt : steps;
    FILE *out = r->o->out;
    if (r->o->resume && !ckpt && given <= 0)
        fprintf(out,
                "  lr schedule: the checkpoint (version 2) does not record its run's; over this run's %lld "
                "steps\n",
                (long long)steps);
    else if (r->o->resume && given <= 0 && ckpt != steps)
        fprintf(out,
                "  lr schedule: over the checkpoint's run's %lld steps, kept%s (--schedule-steps %lld would span "
                "this run's)\n",
                (long long)ckpt, steps > ckpt ? ", its final lr past them" : "", (long long)steps);
    else if (r->o->resume && given > 0 && ckpt > 0 && given != ckpt)
        fprintf(out,
                "  lr schedule: over %lld steps (--schedule-steps), the checkpoint's run's was %lld: step %lld's "
                "lr %.4g, not %.4g\n",
                (long long)given, (long long)ckpt, (long long)done + 1, train_lr(t, base_lr, done + 1, given),
                train_lr(t, base_lr, done + 1, ckpt));
}

// --sample-every: continuations of the first half of the first validation
// row, decoded with the data's vocabulary (sample.h). 0, or -1 with a message.
static int print_samples(Run *r, int64_t s, uint64_t seed, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    DataVocab v;
    if (data_vocab_open(&v, r->val, model_vocab(r->p->graph), err, errcap) != 0) return -1;
    store_flush(&r->hs, r->p); // the weights of step s
    data_val_batch(r->val, 0, t->batch, t->seq, r->tokens, r->targets, r->segs);
    int64_t n = r->prompt ? r->prompt_n : t->seq / 2 > 0 ? t->seq / 2 : 1;
    if (r->prompt) memcpy(r->tokens, r->prompt, (size_t)n * sizeof *r->prompt);
    double t0 = now_s();
    fprintf(r->o->out,
            "sampling step %lld: a greedy and %d temperature-1 continuations of %s (%lld tokens), up to %lld "
            "tokens each, one forward of the batch a token...\n",
            (long long)s, t->batch > 2 ? 2 : (int)t->batch - 1,
            r->prompt ? r->o->sample_prompt : "the first validation row's first half", (long long)n,
            (long long)(t->seq - n));
    fflush(r->o->out);
    int rc = store_ok(r, err, errcap) != 0 ? -1
                                           : sample_print(r->o->out, r->p, &r->hs, r->o->reference ? NULL : &r->rp, &v,
                                                          r->tokens, n, seed, s, 2, 1.0, err, errcap);
    r->sample_round_s = now_s() - t0;
    r->samples_s += r->sample_round_s;
    if (rc == 0) fprintf(r->o->out, "sampling step %lld: done in %.1f s\n", (long long)s, r->sample_round_s);
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
    HfTokens ids = {-1, -1, -1, 0};
    if (r->data.format != DATA_TEXT && data_vocab_open(&v, &r->data, 0, why, sizeof why) == 0)
        ids = (HfTokens){v.bos, v.eos, v.pad, 0};
    const char *poison = getenv("MT_TEST_EXPORT_POISON"); // a test hook: this rank's master outside its slices NaN,
    if (poison && *poison == '1' && run_ranks(r) > 1 && !r->p->sharded) // as a sharded store has not
        for (int64_t k = 0, n = 0, lo, hi; k < r->p->graph->layers + 2; k++) {
            int64_t seg = k == 0 ? SEG_HEAD : k == 1 ? SEG_TAIL : k - 2, at = store_segment(r->p, seg, &n);
            dist_shard(n, o->dist->rank, o->dist->size, &lo, &hi);
            backend_fill_nan(r->hs.w + at, lo * 4);
            backend_fill_nan(r->hs.w + at + hi, (n - hi) * 4);
        }
    char source[4096] = ""; // the checkpoint the model came from: --init's folder (or a file's), else hf_to_mt.py's
    if (o->init) {
        struct stat st;
        snprintf(source, sizeof source, "%s", o->init);
        if (stat(o->init, &st) == 0 && !S_ISDIR(st.st_mode)) snprintf(source, sizeof source, "%s", dirname(source));
        ids.max_positions = hf_config_max_positions(source);
    }
    if (!ids.max_positions) model_source_folder(r->p, source, sizeof source);
    if (!ids.max_positions && source[0]) ids.max_positions = hf_config_max_positions(source);
    int rc = (o->export_merged ? weights_export_merged : weights_export)(o->export_path, r->p, &r->hs, o->export_bf16,
                                                                         o->shard_bytes, tokdir, &ids, o->dist, err,
                                                                         errcap);
    if (!rc && ids.max_positions > 0 && weights_export_is_folder(o->export_path))
        fprintf(o->out, "  max_position_embeddings %lld, as %s/config.json says (the training sequence is %lld)\n",
                (long long)ids.max_positions, source, (long long)r->p->graph->train.seq);
    if (!rc)
        fprintf(o->out, "exported the weights to %s%s%s\n", o->export_path, tokdir ? ", with the tokenizer of " : "",
                tokdir ? tokdir : "");
    data_vocab_close(&v);
    free(tokdir);
    return rc;
}

// What the loop runs (the flags over the plan's train section) and where it is.
typedef struct Loop {
    int64_t steps, val_every; // the run's last step; validation every val_every steps
    double base_lr;
    uint64_t seed;
    int64_t from;         // the step the run starts after (the resumed checkpoint's; 0)
    int64_t s, saved;     // the last step done, the last step saved
    double val, last_val; // the last validation loss (NAN: none), the last finite one
    double t_run;         // when the steps started
    int stopping;         // the ranks agreed to stop (a signal)
} Loop;

// The loop before its first step: the flags, else the plan's train section.
static Loop loop_of_run(const TrainOptions *o, const TrainConfig *t) {
    return (Loop){.steps = o->steps >= 0 ? o->steps : t->steps,
                  .val_every = o->val_every > 0 ? o->val_every : t->val_every,
                  .base_lr = o->lr >= 0 ? o->lr : t->lr,
                  .seed = (uint64_t)(o->seed >= 0 ? o->seed : t->seed),
                  .val = NAN,
                  .last_val = NAN};
}

// The learning-rate schedule: the plan's train section with --warmup,
// --lr-schedule and --min-lr (a rate, kept as the fraction of the peak
// base_lr that train_lr takes) over it.
static TrainConfig schedule_of_flags(const TrainOptions *o, const TrainConfig *t, double base_lr) {
    TrainConfig s = *t;
    if (o->warmup >= 0) s.warmup = o->warmup;
    if (o->lr_schedule >= 0) s.schedule = (LrSchedule)o->lr_schedule;
    if (o->min_lr >= 0) s.min_lr_frac = base_lr > 0 ? o->min_lr / base_lr : 0;
    return s;
}

// Installs the stop on SIGINT and SIGTERM, the handlers it replaces into old[2].
static void catch_stop_signals(struct sigaction old[2]) {
    struct sigaction stop = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&stop.sa_mask);
    stop_signal = 0;
    stop_note = "\nmtrun: finishing this step, then exiting (a second signal exits at once)\n"; // until open_run says
    sigaction(SIGINT, &stop, &old[0]);
    sigaction(SIGTERM, &stop, &old[1]);
}

// Up to the first step: the weights (the seed's, --init's or the resumed
// checkpoint's), the schedule, the banner, the log's config record and a
// new run's validation at step 0. 0, or -1 with a message.
static int start_run(Run *r, Loop *l, const char *plan_path, char *err, size_t errcap) {
    const Plan *p = r->p;
    const TrainOptions *o = r->o;
    r->predicted_s = replay_predicted_step_s(p);
    // a GPU target's plan (CUDA code) is predicted for an asynchronous backend, a cpu target's for the cpu
    r->compare = !o->reference && r->be && (p->cuda_arch && p->cuda_arch[0]) == (r->be->record != NULL);
    log_progress_init(r);
    if (store_init(&r->hs, p, l->seed, err, errcap) != 0) return -1;
    if (o->init && (check_init(r, err, errcap) != 0 || weights_load(o->init, p, &r->hs, err, errcap) != 0)) return -1;
    l->from = o->resume ? run_resume(r, l->seed, err, errcap) : 0;
    if (l->from < 0) return -1;
    if (o->resume && o->steps < 0 && o->epochs <= 0 && r->ckpt_schedule_steps > 0) { // to the end of its run
        l->steps = r->ckpt_schedule_steps;
        fprintf(o->out, "  to the end of the checkpoint's run, step %lld (--steps N sets another)\n",
                (long long)l->steps);
    }
    // the bf16 copy of what was initialised, loaded or resumed; the placed segments' state onto the device
    if (store_sync_copy(&r->hs, p, err, errcap) != 0 || store_device_push(&r->hs, p, err, errcap) != 0) return -1;
    if (check_steps_left(r, l->from, l->steps, err, errcap) != 0) return -1;
    if (l->from < l->steps) schedule_of_run(r, l->steps, l->base_lr, l->from);
    else r->schedule_steps = l->steps; // (nothing to train: --export or --logits of the checkpoint)
    log_banner(r, plan_path, l->steps, l->from, l->base_lr, l->seed);
    if (log_config(r, plan_path, l->steps, l->from, l->base_lr, l->seed, err, errcap) != 0) return -1;
    if (!o->resume && validation(r, 0, &l->last_val, err, errcap) != 0) return -1;
    l->s = l->saved = l->from;
    l->t_run = now_s();
    // Whether to stop: decided once before the steps and once after each, the
    // same on every rank, so a step that ends in a stop is the step saved.
    l->stopping = agreed_stop(r);
    return 0;
}

// Step l->s + 1, timed, its log record and line. 0, or -1 with a message
// (a non-finite loss or norm among them).
static int timed_step(Run *r, Loop *l, char *err, size_t errcap) {
    int64_t s = ++l->s;
    double t0 = now_s(), lr = train_lr(&r->sched, l->base_lr, s, r->schedule_steps), norm, loss;
    r->step = s, r->step_t0 = r->last_note = t0, r->passes_done = 0;
    if (step(r, s, lr, &loss, &norm, err, errcap) != 0) return -1;
    r->step_t0 = 0;
    double now = now_s(), dt = now - t0;
    dist_max_doubles(r->o->dist, &dt, 1);     // the slowest rank's
    if (!isfinite(loss) || !isfinite(norm)) { // (AdamW would spread a non-finite gradient into every weight)
        snprintf(err, errcap, "step %lld: the %s is %f; stopping", (long long)s,
                 isfinite(loss) ? "gradient norm" : "loss", isfinite(loss) ? norm : loss);
        return -1;
    }
    StepDone d = {.step = s,
                  .steps = l->steps,
                  .from = l->from,
                  .loss = loss,
                  .lr = lr,
                  .norm = norm,
                  .dt = dt,
                  .elapsed = now - l->t_run};
    return log_step(r, &d, err, errcap);
}

// Samples of step s where this rank takes part: a sample that fails stops
// no run (said); a sharded plan's every rank runs its forwards, rank 0
// prints. 0, or -1 with a message (the store failed).
static int run_samples(Run *r, int64_t s, uint64_t seed, char *err, size_t errcap) {
    if (!speaks(r) && !r->p->sharded) return 0;
    char why[512] = "";
    if (print_samples(r, s, seed, why, sizeof why) != 0)
        fprintf(r->o->out, "sample %lld: skipped: %s\n", (long long)s, why);
    return store_ok(r, err, errcap);
}

// After step l->s: validation, whether to stop, the save, then samples.
// 0, or -1 with a message.
static int after_step(Run *r, Loop *l, char *err, size_t errcap) {
    const TrainOptions *o = r->o;
    int64_t s = l->s;
    if ((s % l->val_every == 0 || s == l->steps) && validation(r, s, &l->val, err, errcap) != 0) return -1;
    if (isfinite(l->val)) l->last_val = l->val;
    l->stopping = agreed_stop(r); // (on every rank: only rank 0 saves)
    // the save before the samples: a kill while they run loses no checkpoint
    if (r->save_dir && (s % o->save_every == 0 || s == l->steps || l->stopping)) {
        if (run_save(r, s, l->seed, err, errcap) != 0) return -1;
        l->saved = s;
    }
    if (o->sample_every && (s % o->sample_every == 0 || s == l->steps) && !l->stopping)
        return run_samples(r, s, l->seed, err, errcap);
    return 0;
}

// --logits: the first validation batch's logits (rank 0's rows), for a
// check against another implementation: rank 0 writes them; a sharded
// plan's every rank runs the forward. 0, or -1 with a message.
static int write_logits(Run *r, char *err, size_t errcap) {
    const TrainConfig *t = &r->p->graph->train;
    data_val_batch(r->val, 0, t->batch, t->seq, r->tokens, r->targets, r->segs);
    int docs = r->data.doc_starts || r->val->doc_starts, full = docs && r->o->logits_full_rows;
    if (full) memset(r->segs, 0, (size_t)(t->batch * t->seq) * sizeof *r->segs); // one document a row
    int rc = sample_logits_npy(speaks(r) ? r->o->logits : NULL, r->p, &r->hs, r->o->reference ? NULL : &r->rp,
                               r->tokens, r->targets, docs ? r->segs : NULL, err, errcap);
    if (rc == 0 && speaks(r))
        fprintf(r->o->out, "logits: %s.logits.npy (B, T, V) of %s.tokens.npy: %s\n", r->o->logits, r->o->logits,
                !docs  ? "attention over each whole row (the data has no document starts)"
                : full ? "attention over each whole row (--logits-full-rows), as a plain forward of the row, not as "
                         "training attended"
                       : "attention within each document of a row (X.docs), as training attends; a plain forward of "
                         "the whole row differs past a row's first document (--logits-full-rows gives that)");
    return rc;
}

// After the steps: the last update applied, --export, --logits, the log
// closed and the summary. 0, or -1 with a message.
static int finish_run(Run *r, const Loop *l, char *err, size_t errcap) {
    store_flush(&r->hs, r->p); // the last step's update: training ends with it applied
    if (store_ok(r, err, errcap) != 0 || store_device_pull(&r->hs, r->p, err, errcap) != 0) return -1;
    if (export_agreed(r) && export_weights(r, err, errcap) != 0) return -1;
    if (r->o->logits && (speaks(r) || r->p->sharded) && write_logits(r, err, errcap) != 0) return -1;
    if (r->o->sample_prompt && (!r->o->sample_every || l->s == l->from) && run_samples(r, l->s, l->seed, err, errcap))
        return -1; // (--sample-every sampled the last step)
    if (log_close(r, err, errcap) != 0) return -1;
    log_summary(r, stop_signal != 0, l->from, l->s, l->saved, l->last_val, now_s() - l->t_run);
    return 0;
}

int train_run(const Plan *p, const char *plan_path, const TrainOptions *o, char *err, size_t errcap) {
    Run r = {.p = p, .o = o};
    Loop l = loop_of_run(o, &p->graph->train);
    r.sched = schedule_of_flags(o, &p->graph->train, l.base_lr);
    struct sigaction old[2];
    catch_stop_signals(old);
    int rc = open_run(&r, err, errcap);
    if (rc == 0 && o->epochs > 0) // the steps that pass over the training split o->epochs times
        l.steps = (int64_t)ceil(o->epochs * (double)r.data.ntrain / (double)tokens_per_step(&r));
    if (rc == 0 && r.save_dir)
        stop_note = "\nmtrun: finishing this step, then saving and exiting (a second signal exits at once)\n";
    else if (rc == 0)
        stop_note = "\nmtrun: finishing this step, then exiting without a checkpoint: this run saves none, as its "
                    "banner says (a second signal exits at once)\n";
    if (rc == 0) rc = start_run(&r, &l, plan_path, err, errcap);
    while (rc == 0 && l.s < l.steps && !l.stopping) {
        rc = timed_step(&r, &l, err, errcap);
        if (rc == 0) rc = after_step(&r, &l, err, errcap);
    }
    if (rc == 0) rc = finish_run(&r, &l, err, errcap);
    close_run(&r);
    sigaction(SIGINT, &old[0], NULL);
    sigaction(SIGTERM, &old[1], NULL);
    return rc == 0 ? 0 : 1;
}
