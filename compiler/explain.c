#include "explain.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

// Whether the plan fits the target; if not, why, in reason.
static int fits(const Cost *c, const Target *t, char *reason, size_t cap) {
    reason[0] = 0;
    if ((double)c->device_peak_bytes > t->device_memory)
        snprintf(reason, cap, "needs %.3g GB of device memory, %s has %.3g GB", (double)c->device_peak_bytes / 1e9,
                 t->name, t->device_memory / 1e9);
    else if ((double)c->host_bytes > t->host_memory)
        snprintf(reason, cap, "needs %.3g GB of host memory, %s has %.3g GB", (double)c->host_bytes / 1e9, t->name,
                 t->host_memory / 1e9);
    return reason[0] == 0;
}

void explain_print(FILE *out, const Plan *p, const Target *t, int json) {
    const Graph *g = p->graph;
    Cost c;
    cost_plan(p, t, &c);
    char reason[256];
    int ok = fits(&c, t, reason, sizeof reason);
    int64_t link = c.copy_in_bytes + c.copy_out_bytes;
    if (json) {
        fprintf(out, "{\"target\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"policies\": [\n", t->name,
                (long long)g->train.batch, (long long)g->train.seq);
        fprintf(out, "  {\"name\": \"sequential\", \"predicted_step_s\": %.6g, \"lower_bound_s\": %.6g, "
                     "\"device_peak_bytes\": %lld, \"host_bytes\": %lld, \"link_bytes_per_step\": %lld, "
                     "\"weight_crossings\": %d, \"chosen\": %s, \"fits\": %s",
                c.step_s, c.lower_bound_s, (long long)c.device_peak_bytes, (long long)c.host_bytes, (long long)link,
                c.weight_crossings, ok ? "true" : "false", ok ? "true" : "false");
        if (!ok) fprintf(out, ", \"reason\": \"%s\"", reason);
        fprintf(out, "}\n]}\n");
        return;
    }
    fprintf(out, "model %s on %s: batch %lld, seq %lld, compute %s\n", g->model_name, t->name,
            (long long)g->train.batch, (long long)g->train.seq, dtype_name(g->train.compute));
    fprintf(out, "  %-12s %10s %10s %6s %12s %12s %12s %9s\n", "policy", "step s", "bound s", "ratio", "device GB",
            "host GB", "link GB/step", "crossings");
    fprintf(out, "  %-12s %10.4g %10.4g %6.2f %12.4g %12.4g %12.4g %9d\n", ok ? "sequential *" : "sequential",
            c.step_s, c.lower_bound_s, c.step_s / c.lower_bound_s, (double)c.device_peak_bytes / 1e9,
            (double)c.host_bytes / 1e9, (double)link / 1e9, c.weight_crossings);
    fprintf(out, "  step: compute %.4g s (recompute %.4g), copy in %.4g s, copy out %.4g s, device copies %.4g s, "
                 "optimizer %.4g s\n", c.compute_s, c.recompute_s, c.copy_in_s, c.copy_out_s, c.device_copy_s,
            c.optimizer_s);
    if (!ok) fprintf(out, "  does not fit: %s\n", reason);
    fprintf(out, "  (* chosen; the one policy so far: one stream, no overlap, every layer recomputed)\n");
}

enum { TRACK_COPY_IN = 1, TRACK_COMPUTE, TRACK_COPY_OUT, TRACK_HOST };

// What an instruction does, for the trace: "layer 3 forward".
static void instr_label(const Plan *p, const Instr *in, char *buf, size_t cap) {
    const Part *part = &p->graph->parts[in->part];
    switch ((InsKind)in->kind) {
    case INS_RUN:
        if (in->part == PART_BLOCK)
            snprintf(buf, cap, "layer %d %s", in->layer, in->from == 0 ? "forward" : "backward");
        else
            snprintf(buf, cap, "%s %s", part_name((PartKind)in->part),
                     in->from == 0 && in->to == part->nodes.n ? "forward+backward" : in->from == 0 ? "forward" : "backward");
        break;
    case INS_COPY_IN:
        if (in->layer < 0) snprintf(buf, cap, "global weights in");
        else snprintf(buf, cap, "layer %d weights in", in->layer);
        break;
    case INS_COPY_OUT:
        if (in->layer < 0) snprintf(buf, cap, "global gradient out");
        else snprintf(buf, cap, "layer %d gradient out", in->layer);
        break;
    case INS_COPY: snprintf(buf, cap, "device copy"); break;
    case INS_INPUT: snprintf(buf, cap, "batch input %d in", in->input); break;
    case INS_LOSS:
    case INS_COUNT: snprintf(buf, cap, "loss"); break;
    }
}

static int instr_track(const Instr *in) {
    switch ((InsKind)in->kind) {
    case INS_COPY_IN:
    case INS_INPUT: return TRACK_COPY_IN;
    case INS_COPY_OUT: return TRACK_COPY_OUT;
    default: return TRACK_COMPUTE;
    }
}

int explain_trace(const char *path, const Plan *p, const Target *t, char *err, size_t errcap) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errcap, "%s: cannot write the trace: %s", path, strerror(errno));
        return -1;
    }
    static const char *const TRACKS[] = {"", "copy-in (host to device)", "compute", "copy-out (device to host)",
                                         "host optimizer"};
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (int k = TRACK_COPY_IN; k <= TRACK_HOST; k++)
        fprintf(f, "  {\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}},\n",
                k, TRACKS[k]);
    // One stream, no overlap: each instruction starts when the one before ends.
    double now_us = 0;
    for (int i = 0; i < p->ntrain; i++) {
        const Instr *in = &p->train[i];
        if (in->kind == INS_LOSS) continue;
        double us = cost_instr(p, in, t) * 1e6;
        char label[96];
        instr_label(p, in, label, sizeof label);
        fprintf(f, "  {\"ph\": \"X\", \"name\": \"%s\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
                   "\"args\": {\"bytes\": %lld}},\n", label, instr_track(in), now_us, us, (long long)in->bytes);
        now_us += us;
    }
    Cost c;
    cost_plan(p, t, &c);
    fprintf(f, "  {\"ph\": \"X\", \"name\": \"AdamW\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}\n", TRACK_HOST,
            now_us, c.optimizer_s * 1e6);
    fprintf(f, "]}\n");
    if (fclose(f) != 0) {
        snprintf(err, errcap, "%s: cannot write the trace: %s", path, strerror(errno));
        remove(path);
        return -1;
    }
    return 0;
}
