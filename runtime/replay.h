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

#include "backend.h"
#include "store.h"

// Which runnable engine goes next.
//   eager:  copy-in, copy-out, host, then compute: copies and the optimizer
//           run as far ahead of compute as the events let them (the default)
//   lazy:   compute, host, copy-out, then copy-in: copies as late as they may
//   random: a seeded random choice among the runnable engines each time
//   threads: one thread per engine, truly concurrent, a seeded random pause
//           before each instruction (up to 0, 40 or 400 us, drawn per engine,
//           so that some engines run ahead of others); a WAIT held 30 s is
//           reported as a hang, naming the waiting instructions
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
    HostStore *hs;      // weights stream in from it, gradients add into it, NORM and UPDATE act on it
    char *act;          // (p->host_act_bytes) the host activation store of INS_SAVE and INS_LOAD
    ReplayOrder order;
    uint64_t rng;       // the random order's state, carried from stream to stream
    int hang_s;         // REPLAY_THREADS: seconds a WAIT may hold before it is a hang (0: 30)
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
} Replay;

// Replays ins[0, n) (p->train or p->eval) with the micro-batch's model
// inputs (inputs[i] is model input i, e.g. tokens then targets); `last`:
// this is the step's last micro-batch, the only one whose INS_NORM
// instructions compute. Sets *loss to the micro-batch's loss. Returns 0, or
// -1 with a message in err: a deadlock (every engine with instructions left
// waits on an event that no runnable instruction can record), naming each
// waiting instruction and its event, or an instruction no engine can run.
int replay(Replay *r, const Instr *ins, int n, const int32_t *const *inputs, int last, float *loss, char *err,
           size_t errcap);

// Bytes of the host statistics buffer that stream ins[0, n) writes (INS_STAT).
int64_t replay_stats_bytes(const Instr *ins, int n);

// The experts of each layer whose forward reports a top_k (plan_report_marks)
// into experts[l] (layers; 0: none) from stream ins[0, n); returns how many
// layers have some.
int64_t replay_experts(const Plan *p, const Instr *ins, int n, int64_t *experts);

// What stream ins[0, n) reported in its statistics buffer `stats`, added up:
// every loss add_loss joined into *aux, and for layer l the tokens each
// expert e took (top_k's mask summed over rows) into loads[l * max_e + e],
// max_e the most experts of a layer.
void replay_stats_add(const Plan *p, const Instr *ins, int n, const char *stats, int64_t max_e, double *aux,
                      double *loads);

// Engine names for messages: "compute", "copy-in", "copy-out", "host".
const char *replay_engine_name(int engine);

// The oracle: head, every layer and tail run directly on the host store with
// every activation kept, no arena, no recompute; with backward, gradients
// are added into hs->g. Returns the loss, or NAN when out of memory.
float reference_step(const Plan *p, HostStore *hs, const int32_t *const *inputs, int backward);

#endif
