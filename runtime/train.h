// train.h: the training loop of mtrun: data, micro-batches through the plan
// (or the reference executor), global-norm clipping, the AdamW step on the
// host, validation, the progress line and the metrics log. train.c holds
// the loop, run_checks.c the checks before it, run_log.c what it says and
// run_checkpoint.c its saves; run.h their shared state.
#ifndef MT_TRAIN_H
#define MT_TRAIN_H

#include <stdio.h>

#include "runtime/backend/backend.h"
#include "runtime/dist/dist.h"

#include "common/plan.h"

typedef struct TrainOptions {
    int64_t steps;           // < 0: the plan's train section
    int64_t schedule_steps;  // the steps the learning-rate schedule spans; < 0: steps, or on resume the checkpoint's
    const char *data;        // NULL: the plan's
    const char *val_data;    // a separate validation file; NULL: the last 10% of data
    double lr;               // < 0: the plan's
    int64_t warmup;          // warmup steps of the lr schedule; < 0: the plan's
    double epochs;           // > 0: the steps that pass over the training split this many times (not with steps)
    int64_t log_every;       // print a step's line every N steps (and the first and last); the log gets every step
    int lr_schedule;         // an LrSchedule; < 0: the plan's
    double min_lr;           // the lr the schedule decays to; < 0: the plan's (its min_lr fraction of the peak)
    int64_t seed;            // < 0: the plan's
    int64_t val_every;       // < 0: the plan's
    int64_t val_batches;     // batches averaged for a validation loss
    int threads;             // for the optimizer
    int reference;           // run the unstreamed reference executor instead of the plan
    const char *log_path;    // metrics, JSON lines; NULL: none
    FILE *out;               // the progress lines
    const char *init;        // pretrained weights to start from (safetensors or llm.c); NULL: the seed's
    const char *export_path; // safetensors to write the weights to at the end; NULL: none
    int export_bf16;
    int export_merged;    // --merge: a LoRA plan's adapters merged into the export (weights_export_merged)
    int64_t shard_bytes;  // export shards above this size
    const char *save_dir; // checkpoints every save_every steps, the newest `keep` kept; NULL: none
    int save_default;     // save_dir is the default beside the log, not --save's: where it holds another run's
                          // checkpoints, or the log is no file, this run saves none and says why
    int64_t save_every;
    int keep;
    const char *resume;              // a checkpoint directory to continue from
    const char *tier_dir;            // the NVMe tier: every layer's Adam moments in DIR/mtrun.tier; NULL: all in RAM
    int64_t host_available;          // bytes of host memory the run may use; 0: what the machine reports
    BackendCudaCreateFn cuda_create; // the cuda backend (device.c); NULL: the cpu backend
    const char *trace;               // the cuda backend's measured timeline, Chrome trace JSON; NULL: none
    const Dist *dist;     // the ranks of a data-parallel run (dist.h): each trains on its part of every batch, the
                          // gradients summed over them; NULL: one process
    const char *logits;   // PREFIX: the first validation batch and its logits at the end, PREFIX.{tokens,logits}.npy
    int logits_full_rows; // --logits attends over each whole row, not within its documents (X.docs)
    int shuffle;          // the training windows in a seeded random order every epoch (data_shuffle), from seed
    int64_t sample_every; // print continuations of a fixed prompt every N steps (runtime/sample.h); 0: never
    const char *sample_prompt; // a file of token ids, the samples' prompt (else half the first validation row); with
                               // it, samples at the end of the run too (its only step with nothing to train)
    int test_hold_ins;         // a test hook (mtrun's MT_TEST_DROP_WAIT): 1 + the train stream instruction whose
                               // issue each threaded replay holds (Replay.hold_ins); 0: none
} TrainOptions;

// Trains, printing a banner, a line a step and a summary to o->out; the
// metrics log gets a config record, then a record a step, flushed each.
// SIGINT or SIGTERM ends the run after the step in progress, saved when
// --save is given (a second signal ends it at once). plan_path names the
// plan in messages. Returns 0, or 1 with a message in err (bad data, out of
// memory, a resume with nothing left to do).
int train_run(const Plan *p, const char *plan_path, const TrainOptions *o, char *err, size_t errcap);

// The learning rate of step (1-based) of a run of `steps`: linear warmup,
// then the schedule's decay over the remaining steps.
double train_lr(const TrainConfig *t, double base, int64_t step, int64_t steps);

#endif
