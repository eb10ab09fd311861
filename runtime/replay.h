// replay.h: executes an instruction stream of a plan on a backend, and its
// plain counterpart, the reference step that runs the whole graph unstreamed.
//
// A stream's instructions are queued on engines (compute, copy-in,
// copy-out, host); each engine runs its own in stream order, and engines
// order against each other only through events: INS_RECORD fires its event
// once everything before it on its engine is done, INS_WAIT holds its
// engine until the event fired. The replay runs on one thread and
// repeatedly executes the next instruction of some engine that is not held
// by a WAIT; which one is chosen adversarially (ReplayOrder), so that an
// event the plan lacks shows as a wrong loss rather than passing by luck.
// Or it runs each engine on a thread of its own, as a GPU runs its streams,
// with random pauses (REPLAY_THREADS).
#ifndef MT_REPLAY_H
#define MT_REPLAY_H

#include "runtime/backend/backend.h"
#include "runtime/dist/dist.h"
#include "runtime/store/store.h"

// Which runnable engine goes next.
//   eager:  copy-in, copy-out, host, then compute: copies and the optimizer
//           run as far ahead of compute as the events let them (the default)
//   lazy:   compute, host, copy-out, then copy-in: copies as late as they may
//   random: a seeded random choice among the runnable engines each time
//   threads: one thread per engine, truly concurrent, a seeded random pause
//           before each instruction (up to 0, 40 or 400 us, drawn per engine,
//           so that some engines run ahead of others); a deadlock (every
//           engine with work left held by a WAIT whose event has not fired)
//           is reported at once, a hang once no engine has started or
//           finished an instruction for Replay.hang_s (default
//           REPLAY_STALL_S) while one waits; both name the waiting
//           instructions. A WAIT may last as long as the work it waits for.
//   streams: one thread per engine, no pauses: an asynchronous backend's
//           default (each thread queues its engine's work on a CUDA stream)
typedef enum { REPLAY_EAGER, REPLAY_LAZY, REPLAY_RANDOM, REPLAY_THREADS, REPLAY_STREAMS } ReplayOrderKind;
typedef struct ReplayOrder {
    ReplayOrderKind kind;
    uint64_t seed; // REPLAY_RANDOM, REPLAY_THREADS
} ReplayOrder;

// Parses "eager", "lazy", "random:SEED" or "threads:SEED" (the
// MT_REPLAY_ORDER environment variable; NULL or "" is eager). Returns 0, or -1 with a message in err.
int replay_order_parse(const char *s, ReplayOrder *o, char *err, size_t errcap);

typedef struct Replay {
    const Plan *p;
    Backend *be;
    HostStore *hs;    // weights stream in from it, gradients add into it, NORM and UPDATE act on it
    const Dist *dist; // the ranks a sharded plan's collectives run over (NULL: one process)
    char *act;        // (p->host_act_bytes) the host activation store of INS_SAVE and INS_LOAD
    ReplayOrder order;
    uint64_t rng; // the random order's state, carried from stream to stream
    int hang_s;   // threads, streams: seconds without any engine's progress while one waits before it is
                  // a hang (0: REPLAY_STALL_S or 10 predicted steps, the larger); a deadlock is reported
                  // at once whatever it is
    // Called after each INS_RUN (NULL: not called), so a long step can show
    // how far it is; it must not touch the arena or the store.
    void (*on_run)(void *ctx, const Instr *in);
    void *on_run_ctx;
    char *stats;         // (replay_stats_bytes of the stream) what its INS_STATs read out: each layer's reports
    const int *recorder; // (nevents) during replay(): the engine that records each event
    // A test hook (mtrun's MT_TEST_DROP_WAIT): 1 + the index of the train
    // stream instruction whose issue the threaded replays hold 50 ms, so that
    // a consumer that lost its WAIT on it runs first; 0: none.
    int hold_ins;
    int hold_ms; // how long (0: 50 ms); tests hold an engine longer than a step's WAITs ever were
    // The micro-batch's document starts (B, T) (kernels.h: seg_start; data.h,
    // X.docs) that the next replay() hands its backend (set_doc_starts), or NULL:
    // rows are one stream. Data like the inputs; the caller keeps it valid
    // through the replay.
    const int32_t *seg_start;
    int failed;         // during replay(): an instruction failed (a collective), failure says how; nothing after it
    char failure[1024]; // is issued
} Replay;

// The threaded replays' hang limit: 10 minutes without any engine starting
// or finishing an instruction. On a GPU a WAIT lasts as long as the work it
// waits for (llama3-70b at batch 16 predicts a 35.8 s WAIT on the host
// engine, and an engine's thread blocks inside an instruction while its
// device works), so the limit is on progress, not on a WAIT's length;
// real deadlocks do not need it (they are found at once).
// The limit is the larger of that and 10 times the plan's predicted step.
enum { REPLAY_STALL_S = 600 };

// The predicted step time the plan carries in its schedule's words (0: none).
double replay_predicted_step_s(const Plan *p);

// Replays ins[0, n) (p->train or p->eval) with the micro-batch's model
// inputs (inputs[i] is model input i's host bytes: tokens, targets, then the
// loss scale, a float, graph.h); `last`:
// this is the step's last micro-batch, the only one whose INS_NORM
// instructions compute. Sets *loss to the micro-batch's loss. Returns 0, or
// -1 with a message in err: a deadlock (every engine with instructions left
// waits on an event that no runnable instruction can record), naming each
// waiting instruction and its event, an instruction no engine can run, or a
// failed collective (Replay.failed: the instructions after it were not issued).
int replay(Replay *r, const Instr *ins, int n, const int32_t *const *inputs, int last, float *loss, char *err,
           size_t errcap);

// Bytes of the host statistics buffer that stream ins[0, n) writes (INS_STAT).
int64_t replay_stats_bytes(const Instr *ins, int n);

// The experts of each layer whose forward reports a top_k (plan_report_marks)
// into experts[l] (layers; 0: none) from stream ins[0, n); returns how many
// layers have some.
int64_t replay_experts(const Plan *p, const Instr *ins, int n, int64_t *experts);

// Element k of the value INS_STAT `in` read out into statistics buffer stats (bf16 with XFER_BF16).
double replay_stat_at(const Instr *in, const char *stats, int64_t k);

// What stream ins[0, n) reported in its statistics buffer `stats`, added up:
// every loss add_loss joined into *aux, and for layer l the tokens each
// expert e took (top_k's mask summed over rows) into loads[l * max_e + e],
// max_e the most experts of a layer.
void replay_stats_add(const Plan *p, const Instr *ins, int n, const char *stats, int64_t max_e, double *aux,
                      double *loads);

// Engine names for messages: "compute", "copy-in", "copy-out", "host".
const char *replay_engine_name(int engine);

// The oracle: head, every layer and tail run directly on the host store with
// every activation kept, no arena, no recompute; seg_start (B, T) the
// batch's document starts (kernels.h), or NULL; with backward, gradients
// are added into hs->g. Returns the loss, or NAN when out of memory; adds
// the losses add_loss joins in the layers into *aux (NULL: not wanted), and
// each balance rule's loads (Param.balance_mask's column sums) into
// balance_loads[param] (layers, E) (NULL: not wanted; runtime/run_balance.c's).
float reference_step(const Plan *p, HostStore *hs, const int32_t *const *inputs, const int32_t *seg_start, int backward,
                     double *aux, double *const *balance_loads);
// reference_step that also writes the logits the loss reads into logits
// (B, T, V; NULL: not wanted), for --logits and --sample-every. NAN also
// when the tail's losses do not read logits of the whole batch (a model
// whose loss is not one cross_entropy over [B, T, V], or tiled along T).
float reference_run(const Plan *p, HostStore *hs, const int32_t *const *inputs, const int32_t *seg_start, int backward,
                    float *logits);

#endif
