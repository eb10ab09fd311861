// run.h: the state of one training run (train_run's), shared by the files
// that make it up: train.c (the loop), run_checks.c (what the plan, data,
// flags and checkpoints must satisfy), run_log.c (the banner, the progress
// line and the metrics log) and run_checkpoint.c (saves and resumes).
// Private to those files.
#ifndef MT_RUN_H
#define MT_RUN_H

#include <stdio.h>
#include <time.h>

#include "runtime/backend/backend.h"
#include "runtime/data.h"
#include "runtime/dist/comm.h"
#include "runtime/replay.h"
#include "runtime/store/checkpoint.h"
#include "runtime/store/store.h"
#include "runtime/train.h"

// One training run: its plan and options, its store, backend and replay,
// its data and batch, and what the loop, the log and the saves keep of it.
typedef struct Run {
    const Plan *p;
    const TrainOptions *o;
    HostStore hs;
    Backend *be;
    Replay rp;                     // the plan's streams on be
    char *act;                     // (p->host_act_bytes) the host activation store
    unsigned char *stream_updates; // (hs.nseg) whether the train stream has an INS_UPDATE of that segment
    // What the plan's forward reports (INS_STAT), for the log: the losses add_loss joins and each MoE layer's
    // load per expert. reports: whether the train stream has any (not with --reference).
    char *stats; // (the larger stream's replay_stats_bytes) where the replay reads them out
    int reports;
    int64_t *experts;   // (layers) each layer's experts (0: not a mixture of experts)
    int64_t max_e;      // the most of any layer
    double aux;         // the step's: the mean over micro-batches of the joined losses' sum (--reference too)
    int joins;          // the layers join losses (add_loss): the reported loss is the cross-entropy plus aux
    double *loads;      // (layers, max_e) the step's tokens each expert took (every micro-batch's, every rank's)
    double *sq_norms;   // (hs.nseg) a sharded plan's: the segments' squared gradient norms, summed over the ranks
    DataSet data;       // the training data (and its last 10% for validation, without --val-data)
    DataSet val_file;   // --val-data, all of it validation; unused without
    const DataSet *val; // &data or &val_file
    int32_t *tokens, *targets; // (B, T) each
    int32_t *segs;             // (B, T) each position's document start in its row (kernels.h); all 0 without X.docs
    float loss_scale;          // the tail's gradient seed, d objective / d loss (graph.h): 1, or with masked targets
                               // rows x micro-batches / the step's counted targets, the cross-entropy's weight alone
    int32_t *prompt;           // (prompt_n) --sample-prompt's token ids; NULL: half the first validation row
    int64_t prompt_n;
    double samples_s;      // the seconds the run's rounds of samples took so far (the ETA prices the rounds left)
    double sample_round_s; // the last round's; 0: none yet
    FILE *log;
    int run_id;         // this run's number in its metrics log: 1 + the runs before it there (a resume continues one)
    double predicted_s; // the plan's predicted step time on its target (0: not given)
    int compare;        // whether this backend is that target's kind (GPU or cpu): steps are compared with it
    int64_t step;       // the step running, for the progress line
    double step_t0;     // when it started
    double last_note;   // when the progress line was last written
    // (step_t0 is 0 outside a step)
    double note_every;                    // seconds between progress lines (10; MT_PROGRESS_S overrides, for tests)
    int64_t passes_done, passes_per_step; // layer passes done in this step, of the step's
    int32_t pass_layer;                   // the layer of the pass running (INT32_MIN before a micro-batch's first)
    TrainConfig sched;                    // the plan's train section with --warmup, --lr-schedule and --min-lr over it:
                                          // the learning-rate schedule train_lr follows
    int64_t schedule_steps;      // the steps the learning-rate schedule spans: part of the run, kept in its checkpoints
    int64_t ckpt_schedule_steps; // the resumed checkpoint's (0: not recorded)
    const char *save_dir;        // where checkpoints go: --save's, or the default beside the log; NULL: none
                                 // (rank 0's, every rank's alike: each writes its shard there)
    char *save_dir_agreed;       // the malloc'd copy of rank 0's that save_dir points to, with ranks
    Comm comm;                   // the ranks' collectives of host buffers (MPI): the gradient accumulators' sum
    char no_save[600];           // why none, where the default would have saved (for the banner)
    char save_own[4200];         // a new run's own folder beside the log, where the default holds another run's
    char save_why[600];          // why save_dir is save_own (for the banner)

    // The buffers' balance rules (run_balance.c), by parameter: NULL where it has none (both NULL: no rules).
    double **balance_loads; // (params) (layers, E) the step's tokens that chose each expert, as the rule's mask
    int8_t **balance_signs; // (params) (layers, E) sign(mean load - load) of the step that ended (HostStore.balance)
} Run;

// The monotonic clock, in seconds.
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The store's first failure (the tier's: a short read or write) as the
// run's error. 0, or -1 with a message.
static inline int store_ok(const Run *r, char *err, size_t errcap) {
    const char *why = store_failed(&r->hs);
    if (why) snprintf(err, errcap, "%s; the run stops here, its checkpoints as they were", why);
    return why ? -1 : 0;
}

// Whether this process speaks for the run (rank 0, or the only one): the
// others' output goes to /dev/null and they write no --logits.
static inline int speaks(const Run *r) { return !r->o->dist || r->o->dist->rank == 0; }

// The ranks of the run: each micro-batch is one of `ranks` parts of a global one.
static inline int run_ranks(const Run *r) { return r->o->dist ? r->o->dist->size : 1; }

// The tokens of a step: every micro-batch of every rank.
static inline int64_t tokens_per_step(const Run *r) {
    const TrainConfig *t = &r->p->graph->train;
    return t->batch * t->seq * t->accumulate * run_ranks(r);
}

// ---------------------------------------------------------------- run_checks.c

// The vocabulary the data must fit: the rows of every embedding table the
// model inputs index, and the width of every loss's logits.
int64_t model_vocab(const Graph *g);

// What the plan puts on the NVMe tier besides the Adam moments (STORE_TIER_*).
int plan_tier_holds(const Plan *p);

// The host store's bytes in RAM, the tier's staging counted.
int64_t ram_store_bytes(const Run *r);

// Checks that forward takes (tokens, targets), both i32[B, T]. 0, or -1 with a message.
int check_inputs(const Graph *g, char *err, size_t errcap);

// Checks that a data file read as bytes is meant as bytes: JSON (lines),
// or any text for a model whose vocabulary is not bytes (over 256), is
// refused with the command that makes token files of it. 0, or -1 with a message.
int check_text_data(const DataSet *d, int64_t vocab, char *err, size_t errcap);

// --sample-prompt's token ids (decimal, separated by white space or
// commas) into r->prompt: each below the model's vocabulary, fewer than
// the plan's sequence (the rest is the continuation). 0, or -1 with a message.
int read_sample_prompt(Run *r, char *err, size_t errcap);

// The folder tools/hf_to_mt.py wrote the plan's model from (the first line
// of the model file, where it is still there), into out; "" when none.
void model_source_folder(const Plan *p, char *out, size_t cap);

// Checks that --init is not a checkpoint (a file, or a folder of them),
// which --resume reads. 0, or -1 with a message naming what to run.
int check_init(const Run *r, char *err, size_t errcap);

// Checks the flags together, with the data open and before any of the store
// is allocated: sharding, the tier, the host memory, --export, --logits and
// --sample-every. 0, or -1 with a message.
int check_flags(const Run *r, char *err, size_t errcap);

// Checks that the backend runs what the plan needs (a sharded plan's collectives). 0, or -1 with a message.
int check_backend(const Run *r, char *err, size_t errcap);

// Where checkpoints go, into r->save_dir (r->no_save says why none). 0, or -1 with a message.
int check_save_dir(Run *r, char *err, size_t errcap);

// Checks that the checkpoint at path (its meta) is this model's, written with
// this seed. 0, or -1 with a message.
int check_checkpoint(const Run *r, const char *path, const CkptMeta *meta, uint64_t seed, char *err, size_t errcap);

// Checks that a resumed run has steps left: `done` of `steps`, or, with
// none left, --export or --logits to write (said). 0, or -1 with a message.
int check_steps_left(const Run *r, int64_t done, int64_t steps, char *err, size_t errcap);

// ---------------------------------------------------------------- run_balance.c

// The balance rules' buffers (none: nothing), the store pointed at the
// signs; refuses a rule the run cannot apply (a layer's optimizer on the
// device). 0, or -1 with a message.
int balance_open(Run *r, char *err, size_t errcap);
void balance_free(Run *r);
// Adds a train micro-batch's loads (its INS_STAT reports in r->stats) to the
// step's (with --reference, reference_step adds them).
void balance_count(Run *r);
// The step's loads summed over the ranks, into the signs the store applies
// with the pending updates (store_update); the loads zeroed for the next step.
void balance_step_end(Run *r);

// ---------------------------------------------------------------- run_log.c

// One step done, as its log record and its line report it.
typedef struct StepDone {
    int64_t step, steps, from; // the step, the run's last and the step the run started after
    double loss;               // the cross-entropy (r->aux holds the joined losses)
    double lr, norm;           // the step's learning rate and gradient norm before clipping
    double dt, elapsed;        // the step's seconds (the slowest rank's), the run's so far
} StepDone;

// The progress line within a step (every 10 s, MT_PROGRESS_S), hooked on the replay.
void log_progress_init(Run *r);

// The banner: the model, plan, device, store, data, steps, log and saves.
void log_banner(Run *r, const char *plan_path, int64_t steps, int64_t from, double base_lr, uint64_t seed);

// The runs a metrics log at path already holds: its config records that
// start a run (from step 0). 0 where there is no such regular file.
int log_runs_before(const char *path);

// The log's first record of a run (and of each resumed part of it). 0, or -1 with a message.
int log_config(Run *r, const char *plan_path, int64_t steps, int64_t from, double base_lr, uint64_t seed, char *err,
               size_t errcap);

// A step's log record (flushed first) and its line. 0, or -1 with a message.
int log_step(Run *r, const StepDone *d, char *err, size_t errcap);

// The validation loss of step s: its log record and its line. 0, or -1 with a message.
int log_val_loss(Run *r, int64_t s, double val, char *err, size_t errcap);

// The line a run ends with: steps from+1 .. s in `seconds`, the last saved at `saved`.
void log_summary(const Run *r, int stopped, int64_t from, int64_t s, int64_t saved, double last_val, double seconds);

// Flushes the metrics log; a failed write is the run's error. 0, or -1 with a message.
int log_flush(Run *r, char *err, size_t errcap);

// Closes the metrics log. 0, or -1 with a message.
int log_close(Run *r, char *err, size_t errcap);

// ---------------------------------------------------------------- run_checkpoint.c

// The model a checkpoint belongs to, as a crc.
uint32_t model_crc(const Plan *p);

// Continues from the newest checkpoint in o->resume. The last step done, or -1 with a message.
int64_t run_resume(Run *r, uint64_t seed, char *err, size_t errcap);

// Saves step `step` into r->save_dir. 0, or -1 with a message.
int run_save(Run *r, int64_t step, uint64_t seed, char *err, size_t errcap);

#endif
