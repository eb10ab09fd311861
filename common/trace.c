// trace.c: the Chrome trace JSON of trace.h.
#include "common/trace.h"

#include "common/json.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

// Tracks are engines, numbered from 1 (Engine + 1).
static const char *const TRACKS[ENG_COUNT] = {"compute", "copy-in (host to device)", "copy-out (device to host)",
                                              "host optimizer", "collectives (comm)"};

int trace_open(Trace *t, const char *path, char *err, size_t errcap) {
    *t = (Trace){0};
    snprintf(t->path, sizeof t->path, "%s", path);
    if (!(t->f = fopen(path, "w"))) {
        snprintf(err, errcap, "%s: cannot write the trace: %s", path, strerror(errno));
        return -1;
    }
    fprintf(t->f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (int k = 0; k < ENG_COUNT; k++)
        fprintf(t->f,
                "%s  {\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                k ? ",\n" : "", k + 1, TRACKS[k]);
    return 0;
}

double trace_clock_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int trace_in_train(const Plan *p, const Instr *in) { return in >= p->train && in < p->train + p->ntrain; }

void trace_label(const Plan *p, const Instr *in, char *buf, size_t cap) {
    const Part *part = &p->graph->parts[in->part >= 0 && in->part < PART_COUNT ? in->part : 0];
    const char *glob = in->layer == SEG_TAIL ? "tail" : "head"; // a global segment's name
    switch ((InsKind)in->kind) {
    case INS_RUN:
        if (part_is_block(in->part))
            snprintf(buf, cap, "layer %d %s", in->layer,
                     in->from > 0                 ? "backward"
                     : in->flags & RUN_SKIP_HEAVY ? "selective recompute"
                                                  : "forward");
        else
            snprintf(buf, cap, "%s %s", part_name((PartKind)in->part),
                     in->from == 0 && in->to == part->nodes.n ? "forward+backward"
                     : in->from == 0                          ? "forward"
                                                              : "backward");
        break;
    case INS_COPY_IN:
        if (in->layer < 0) snprintf(buf, cap, "%s globals in", glob);
        else snprintf(buf, cap, "layer %d weights in", in->layer);
        break;
    case INS_COPY_OUT:
        if (in->layer < 0) snprintf(buf, cap, "%s globals gradient out", glob);
        else snprintf(buf, cap, "layer %d gradient out", in->layer);
        break;
    case INS_COPY: snprintf(buf, cap, "device copy"); break;
    case INS_INPUT: snprintf(buf, cap, "batch input %d in", in->input); break;
    case INS_SAVE: snprintf(buf, cap, "activations out"); break;
    case INS_LOAD: snprintf(buf, cap, "activations in"); break;
    case INS_STAT: snprintf(buf, cap, "layer %d statistics out", in->layer); break;
    case INS_UPDATE:
        if (in->layer < 0) snprintf(buf, cap, "AdamW %s globals", glob);
        else snprintf(buf, cap, "AdamW layer %d", in->layer);
        break;
    case INS_NORM:
        if (in->layer < 0) snprintf(buf, cap, "gradient norm %s globals", glob);
        else snprintf(buf, cap, "gradient norm layer %d", in->layer);
        break;
    default: snprintf(buf, cap, "%d", in->kind); break;
    }
}

void trace_instr(Trace *t, const Plan *p, const Instr *in, double start_s, double dur_s) {
    if (!trace_in_train(p, in)) return;
    int index = (int)(in - p->train);
    char label[96];
    trace_label(p, in, label, sizeof label);
    int engine = in->engine >= 0 && in->engine < ENG_COUNT ? in->engine : ENG_COMPUTE;
    fprintf(t->f, ",\n  {\"ph\": \"X\", \"name\": ");
    json_str(t->f, label);
    fprintf(t->f, ", \"pid\": 1, \"tid\": %d, \"ts\": ", engine + 1);
    json_num(t->f, "%.6f", start_s * 1e6);
    fprintf(t->f, ", \"dur\": ");
    json_num(t->f, "%.6f", dur_s * 1e6);
    fprintf(t->f, ", \"args\": {\"bytes\": %lld, \"instruction\": %d", (long long)in->bytes, index);
    if (!isfinite(start_s) || !isfinite(dur_s)) // (JSON has no inf: null, and why)
        fprintf(t->f, ", \"why_null\": \"ts, dur: not finite: the cost model gives this instruction, or one before "
                      "it, no finite time on the target (ranks with no path between them)\"");
    fprintf(t->f, "}}");
    t->events++;
}

int trace_close(Trace *t, char *err, size_t errcap) {
    fprintf(t->f, "\n]}\n");
    int bad = ferror(t->f);
    if (fclose(t->f) != 0 || bad) {
        snprintf(err, errcap, "%s: cannot write the trace: %s", t->path, strerror(errno));
        remove(t->path);
        return -1;
    }
    return 0;
}
