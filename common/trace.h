// trace.h: the Chrome trace JSON (chrome://tracing, Perfetto) of a plan's
// train stream. mtc --trace writes the predicted timeline, mtrun --trace the
// measured one, on the same tracks (one per engine, tid engine + 1) and with
// the same names ("layer 3 forward"), so the two files lay side by side.
#ifndef MT_COMMON_TRACE_H
#define MT_COMMON_TRACE_H

#include <stdio.h>

#include "common/plan.h"

typedef struct Trace {
    FILE *f;
    char path[1024];
    int events; // written so far
} Trace;

// Creates path with the tracks named; 0, or -1 with a message in err.
int trace_open(Trace *t, const char *path, char *err, size_t errcap);

// What an instruction does, for the trace: "layer 3 forward", "AdamW layer 2".
void trace_label(const Plan *p, const Instr *in, char *buf, size_t cap);

// The clock --trace times with: CLOCK_MONOTONIC, in seconds.
double trace_clock_s(void);

// Whether in is an instruction of p's train stream: the only ones traced
// (the eval stream's validation passes are not).
int trace_in_train(const Plan *p, const Instr *in);

// One instruction of p's train stream on its engine's track, from start_s for
// dur_s seconds after the trace's time zero; others are skipped.
void trace_instr(Trace *t, const Plan *p, const Instr *in, double start_s, double dur_s);

// Ends the file; 0, or -1 (a write failed: the file is removed) with a
// message in err.
int trace_close(Trace *t, char *err, size_t errcap);

#endif
